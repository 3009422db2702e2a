"""Matrix products shared out among graphc's threads, and loops run inside the shares.

One pool runs graphc's loops and its products: a product with at least
``abi.GEMM_PARALLEL_MIN`` multiply-adds is split by rows of the result (or by
columns when it has too few rows), each thread calling a single-threaded gemm on its
share; an elementwise loop over the product's rows that follows it (an SGD update,
a ReLU) runs inside each share (``parallel_policy.epilogues``).  Results must equal numpy's
product to float rounding for every thread count, layout and odd size.
"""
from __future__ import annotations

import numpy as np
import pytest

import graphc
from graphc.backend import blas, parallel_policy
from graphc.runtime import parallel

pytestmark = pytest.mark.skipif(not blas.available(), reason="OpenBLAS wheel not installed: "
                                "products run as plain loops, never shared out")


@pytest.fixture
def threads():
    before = parallel.get_num_threads()
    yield parallel.set_num_threads
    parallel.set_num_threads(before)


def _rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(dtype)


def _ref(a, b):
    return (a.astype(np.float64) @ b.astype(np.float64))


def _plan_of(cf, *args):
    entry = next(iter(cf._cache.values()))
    return entry.stages["_executable"].plan


CASES = [  # (description, a shape, b shape, how a and b are laid out)
    ("rows", (64, 1000), (1000, 100), "nn"),
    ("rows, odd sizes", (67, 999), (999, 101), "nn"),
    ("A transposed", (1000, 64), (1000, 100), "tn"),
    ("B transposed", (64, 1000), (100, 1000), "nt"),
    ("both transposed", (1000, 64), (100, 1000), "tt"),
    ("columns (few rows)", (3, 2000), (2000, 700), "nn"),
    ("columns, B transposed", (5, 1500), (600, 1500), "nt"),
]


@pytest.mark.parametrize("nt", [1, 2, 3])
@pytest.mark.parametrize("what,sa,sb,layout", CASES, ids=[c[0] for c in CASES])
def test_a_shared_product_equals_numpys(threads, nt, what, sa, sb, layout):
    threads(nt)
    a, b = _rand(*sa), _rand(*sb, seed=1)
    fa = (lambda a: a.T) if layout[0] == "t" else (lambda a: a)
    fb = (lambda b: b.T) if layout[1] == "t" else (lambda b: b)
    f = graphc.compile(lambda a, b: fa(a) @ fb(b))
    got = f(a, b)
    want = _ref(fa(a), fb(b))
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-3)
    plan = _plan_of(f)
    k = [kk for kk in plan.kernels if kk.kind == "matmul"][0]
    assert parallel_policy.parallel_ok(plan, k)
    assert parallel_policy.gemm_dims(plan, k.node).split == ("cols" if "columns" in what else "rows")


@pytest.mark.parametrize("nt", [1, 2])
def test_a_batched_shared_product_equals_numpys(threads, nt):
    threads(nt)
    a, b = _rand(3, 40, 300), _rand(300, 200, seed=2)
    got = graphc.compile(lambda a, b: a @ b)(a, b)
    np.testing.assert_allclose(got, _ref(a, b), rtol=2e-4, atol=2e-3)


def test_small_products_are_not_shared():
    a, b = _rand(8, 8), _rand(8, 8, seed=3)
    f = graphc.compile(lambda a, b: a @ b)
    f(a, b)
    plan = _plan_of(f)
    assert not any(parallel_policy.parallel_ok(plan, k) for k in plan.kernels)


@pytest.mark.parametrize("nt", [1, 2, 3])
def test_an_sgd_update_runs_inside_the_shares_and_is_written_in_place(threads, nt):
    threads(nt)
    x, g = _rand(64, 1000), _rand(64, 100, seed=4)
    w0 = _rand(1000, 100, seed=5)

    def step(w, x, g):
        w -= 0.01 * (x.T @ g)
        return w

    import eager
    f = graphc.compile(step)
    w = eager.tensor(w0.copy())
    f(w, eager.tensor(x), eager.tensor(g))
    want = w0.astype(np.float64) - 0.01 * _ref(x.T, g)
    np.testing.assert_allclose(w.numpy(), want, rtol=1e-5, atol=1e-4)
    plan = _plan_of(f)
    assert parallel_policy.epilogues(plan), plan.describe()


def test_a_loop_that_writes_what_the_product_reads_is_not_run_inside_it(threads):
    """w = w - (w @ m) rewritten over w: a share updating its rows of w would race with
    another share's product still reading all of w."""
    threads(2)
    w0, m = _rand(600, 600, seed=6), _rand(600, 600, seed=7) * 0.01
    import eager

    def f(w, m):
        w -= w @ m               # written straight into w's buffer (nothing returned)

    cf = graphc.compile(f)
    w = eager.tensor(w0.copy())
    cf(w, eager.tensor(m))
    np.testing.assert_allclose(w.numpy(), w0 - _ref(w0, m), rtol=1e-4, atol=1e-4)
    plan = _plan_of(cf)
    assert plan.inplace and not parallel_policy.epilogues(plan)


def test_a_relu_after_a_product_runs_inside_it(threads):
    threads(2)
    x, w = _rand(128, 512), _rand(512, 256, seed=8)
    f = graphc.compile(lambda x, w: (x @ w).clip(0))
    import eager
    got = f(eager.tensor(x), eager.tensor(w)).numpy()
    np.testing.assert_allclose(got, np.maximum(_ref(x, w), 0), rtol=2e-4, atol=2e-3)
    assert parallel_policy.epilogues(_plan_of(f))


def test_thread_counts_agree_to_rounding(threads):
    x, w = _rand(96, 800), _rand(800, 120, seed=9)
    outs = []
    for nt in (1, 2, 4):
        threads(nt)
        outs.append(graphc.compile(lambda x, w: (x @ w).tanh())(x, w))
    for o in outs[1:]:
        np.testing.assert_allclose(o, outs[0], rtol=1e-5, atol=1e-5)


def test_python_threads_sharing_a_compiled_product_get_right_results(threads):
    """Four Python threads call one compiled product with a fused epilogue at once: a
    call that finds the pool busy runs its shares itself."""
    import threading
    threads(2)
    a, b = _rand(64, 1000), _rand(1000, 100, seed=11)
    f = graphc.compile(lambda a, b: (a @ b).clip(0) * 2)
    want = np.maximum(_ref(a, b), 0) * 2
    bad = []

    def work():
        for _ in range(50):
            if not np.allclose(f(a, b), want, rtol=2e-4, atol=2e-3):
                bad.append(1)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad
