"""Round 24b adversarial tests of the loops, random draws and max poolings split across
threads from 2^16 elements (backend/parallel_policy.py and lowering/conv.py's
``PARALLEL_MIN``, was 2^18) with the pool's workers spinning 500 us (runtime/pool.py).

Sizes just around 2^16 and between 2^16 and 2^18: compiled == eager (float64 tightly,
float32 to its rounding), the same bits call after call for a thread count, the same
bits on every thread count where the split is exact (elementwise loops, row reductions,
max pooling's batch split, random draws), gradients against finite differences, four
Python threads at once, a forked child, an idle pool, thread counts changed between
calls.  None of these found a bug: they are kept as regression tests."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import eager
import eager.nn.functional as F
import graphc
from graphc.backend import parallel_policy
from graphc.backend.lowering import conv
from graphc.runtime import parallel

M = parallel_policy.PARALLEL_MIN  # 2^16
SIZES = [M - 1, M, M + 1, M + 7, 3 * M + 5, 4 * M - 1]


@pytest.fixture
def threads():
    """set_num_threads for the test; restores graphc's thread count after."""
    before = parallel.get_num_threads()
    yield parallel.set_num_threads
    parallel.set_num_threads(before)


def _kernels(f, *args):
    plan = next(iter(f._cache.values())).stages["_executable"].plan
    return [(k.kind, parallel_policy.parallel_ok(plan, k)) for k in plan.kernels]


def test_the_thresholds_under_test():
    assert M == 1 << 16 and conv.PARALLEL_MIN == 1 << 16


def _run(f, args, n_threads, threads):
    threads(n_threads)
    a, b = f(*args), f(*args)
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    a = [np.asarray(v) for v in a]
    for p, q in zip(a, b):
        assert p.tobytes() == np.asarray(q).tobytes()  # the same bits run to run
    return a


LOOPS = {
    "elementwise": (lambda x: (x * 2.0 + 1.0).tanh() - x.exp() * 0.5, True),
    "sum": (lambda x: (x * x).sum(), False),
    "mean_sin": (lambda x: x.sin().mean(), False),
    "max_exp": (lambda x: x.exp().amax(), False),
    "two_outputs": (lambda x: ((x * 3.0).sum(), x.abs() + 1.0), False),
    "strided": (lambda x: (x[::2] * 3.0 + x[1::2]).sum(), False),
}


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_loops_around_the_new_threshold_match_eager(n, dtype, threads):
    x = np.random.default_rng(n).standard_normal(n).astype(dtype)
    if n % 2:
        x = x[:-1]  # "strided" needs an even length
    for name, (f, exact) in LOOPS.items():
        c = graphc.compile(f)
        ref = f(eager.tensor(x))
        ref = [r.numpy() for r in (ref if isinstance(ref, tuple) else (ref,))]
        outs = {t: _run(c, (x,), t, threads) for t in (1, 2, 3)}
        tol = dict(rtol=1e-12, atol=1e-12) if dtype == np.float64 else dict(rtol=3e-5, atol=3e-5)
        for t, got in outs.items():
            for g, r in zip(got, ref):
                np.testing.assert_allclose(g, r, **tol, err_msg=f"{name} {t} threads")
            if exact:
                assert all(g.tobytes() == h.tobytes() for g, h in zip(got, outs[1]))
    # a cheap loop is split from 2^16 elements on, not below (a costly one, as
    # "elementwise" with its tanh and exp, already from 2^20 / its cost: loop_work)
    c = graphc.compile(lambda x: x * 2.0 + 1.0)
    c(x)
    assert any(ok for kind, ok in _kernels(c)) == (x.size >= M)


@pytest.mark.parametrize("shape", [(257, 255), (512, 129), (3, 21846), (511, 513)])
def test_row_reductions_in_the_new_range_are_exact_on_any_thread_count(shape, threads):
    x = np.random.default_rng(7).standard_normal(shape)
    fs = [
        lambda x: x.exp().sum(1),
        lambda x: F.softmax(x, -1),
        lambda x: x.tanh().sum(1, keepdim=True) * x,
        lambda x: (x * 2).sum(0),
        lambda x: x.t().exp() * 2 + x.t(),
    ]
    for f in fs:
        c = graphc.compile(f)
        ref = f(eager.tensor(x)).numpy()
        outs = [_run(c, (x,), t, threads)[0] for t in (1, 2, 3)]
        np.testing.assert_allclose(outs[0], ref, rtol=1e-12, atol=1e-12)
        assert outs[1].tobytes() == outs[0].tobytes() == outs[2].tobytes()


def test_value_and_grad_in_the_new_range_against_finite_differences(threads):
    n = M + 3
    rng = np.random.default_rng(11)
    x = rng.standard_normal(n)

    def loss(w, b):
        return ((eager.tensor(x) * w + b).tanh() ** 2).sum() + (w * b).exp()

    vg = graphc.compile(graphc.value_and_grad(loss, argnums=(0, 1)))
    w, b = np.array(0.7), np.array(-0.3)
    res = {}
    for t in (1, 2):
        threads(t)
        v, (gw, gb) = vg(w, b)
        again = vg(w, b)
        assert float(again[0]) == float(v) and float(again[1][0]) == float(gw)
        res[t] = (float(v), float(gw), float(gb))
    h = 1e-6

    def val(w_, b_):
        t = np.tanh(x * w_ + b_)
        return (t * t).sum() + np.exp(w_ * b_)

    fd_w = (val(0.7 + h, -0.3) - val(0.7 - h, -0.3)) / (2 * h)
    fd_b = (val(0.7, -0.3 + h) - val(0.7, -0.3 - h)) / (2 * h)
    for t in (1, 2):
        np.testing.assert_allclose(res[t][0], val(0.7, -0.3), rtol=1e-12)
        np.testing.assert_allclose(res[t][1], fd_w, rtol=1e-6)
        np.testing.assert_allclose(res[t][2], fd_b, rtol=1e-6)
    np.testing.assert_allclose(res[2], res[1], rtol=1e-12)  # full sums: last bits may differ


POOLS = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=3, stride=2, dilation=2, ceil_mode=True),
    dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 1)),
]


def _special(shape, dtype, seed):
    x = np.round(np.random.default_rng(seed).standard_normal(shape) * 2) / 2  # ties
    flat = x.reshape(-1)
    flat[3::11] = -0.0
    flat[::89] = np.inf
    flat[5::83] = -np.inf
    flat[::97] = np.nan
    return x.astype(dtype)


# one item (never split), 2 * 181 * 181 just below 2^16, 2 * 181 * 182 just above, 3 items
@pytest.mark.parametrize(
    "shape", [(1, 4, 128, 128), (2, 1, 181, 181), (2, 1, 181, 182), (3, 3, 149, 147)]
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("layout", ["c", "transposed"])
def test_max_pool_at_the_threshold_is_the_serial_result_bitwise(shape, dtype, layout, threads):
    x = _special(shape, dtype, sum(shape))
    if layout == "transposed":  # a non-contiguous view of the same values
        x = np.swapaxes(np.ascontiguousarray(np.swapaxes(x, 2, 3)), 2, 3)
    for p in POOLS:
        f = graphc.compile(lambda t: F.max_pool2d(t, **p))
        g = graphc.compile(graphc.grad(lambda t: F.max_pool2d(t, **p).sum()))
        ref = F.max_pool2d(eager.tensor(x), **p).numpy()
        xe = eager.tensor(x, requires_grad=True)
        F.max_pool2d(xe, **p).sum().backward()
        for t in (1, 2, 3):
            y = _run(f, (x,), t, threads)[0]
            assert y.tobytes() == ref.tobytes(), (p, t)
            gx = _run(g, (x,), t, threads)[0]
            assert gx.tobytes() == xe.grad.numpy().tobytes(), (p, t)
        f(x)
        g(x)
        assert any(ok for _, ok in _kernels(f)) == (shape[0] >= 2 and x.size >= 1 << 16)
        assert any(ok for _, ok in _kernels(g)) == (shape[0] >= 2 and x.size >= 1 << 16)


RANDOM = {
    "randn": lambda x: x + eager.randn_like(x),
    "rand": lambda x: eager.rand_like(x) * x,
    "randint": lambda x: eager.randint(0, 10, x.shape).to(x.dtype),
    "bernoulli": lambda x: eager.bernoulli(eager.full_like(x, 0.3)),
    "normal_": lambda x: (x * 1).normal_(2.0, 3.0),
    "dropout": lambda x: F.dropout(x, 0.25),
}


@pytest.mark.parametrize("n", [M - 1, M, M + 1, M + 3, 4 * M - 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_random_draws_do_not_depend_on_the_thread_count(n, dtype, threads):
    x = np.ones(n, dtype)
    for name, mk in RANDOM.items():
        f = graphc.compile(mk)
        outs = []
        for t in (1, 2, 3):
            threads(t)
            eager.manual_seed(3)
            outs.append(np.asarray(f(x)))
        assert outs[0].tobytes() == outs[1].tobytes() == outs[2].tobytes(), name
        assert any(kind == "philox" and ok for kind, ok in _kernels(f)) == (n >= M), name


def test_dropout_gradient_is_its_mask_on_two_threads(threads):
    x = np.random.default_rng(0).standard_normal(M + 5)
    vg = graphc.compile(graphc.value_and_grad(lambda w: (F.dropout(w, 0.4) * w).sum()))
    res = []
    for t in (1, 2):
        threads(t)
        eager.manual_seed(5)
        v, g = vg(x)
        g = np.asarray(g)
        kept = g != 0
        np.testing.assert_allclose(g[kept], 2 * x[kept] / 0.6, rtol=1e-12)
        np.testing.assert_allclose(float(v), (x[kept] ** 2).sum() / 0.6, rtol=1e-11)
        res.append(g)
    assert res[0].tobytes() == res[1].tobytes()


def test_four_python_threads_share_split_loops_pools_and_draws(threads):
    import threading

    x = np.random.default_rng(2).standard_normal(M + 1)
    xp = _special((3, 3, 149, 147), np.float64, 1)
    ew = graphc.compile(lambda x: (x * 2.0 + 1.0).tanh())
    red = graphc.compile(lambda x: (x * x).sum())
    pool = graphc.compile(lambda t: F.max_pool2d(t, 3, 2, 1, ceil_mode=True))
    rnd = graphc.compile(lambda x: x + eager.randn_like(x))
    threads(2)
    ref = [ew(x), red(x), pool(xp)]
    errors = []
    start = threading.Barrier(4)

    def work(k):
        try:
            start.wait()
            for _ in range(15):
                got = [ew(x), red(x), pool(xp)]
                for g, r in zip(got, ref):
                    assert np.asarray(g).tobytes() == np.asarray(r).tobytes()
                d = np.asarray(rnd(x)) - x  # draws: finite, different per call
                assert np.isfinite(d).all() and 0.9 < d.std() < 1.1
        except BaseException as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]


def test_thread_counts_changed_between_calls(threads):
    x = np.random.default_rng(4).standard_normal(M + 7)
    xp = _special((2, 1, 181, 182), np.float32, 2)
    red = graphc.compile(lambda x: x.exp().sum())
    pool = graphc.compile(graphc.grad(lambda t: F.max_pool2d(t, 2).sum()))
    ref = {}
    for n in (1, 2, 3, 4):
        threads(n)
        ref[n] = (float(red(x)), np.asarray(pool(xp)).tobytes())
    for n in (4, 1, 3, 2, 2, 1, 4, 3, 1):
        threads(n)
        assert (float(red(x)), np.asarray(pool(xp)).tobytes()) == ref[n]
    assert len({r[1] for r in ref.values()}) == 1  # the pooling split is exact
    np.testing.assert_allclose([r[0] for r in ref.values()], ref[1][0], rtol=1e-12)


def test_idle_pool_after_threshold_sized_calls_does_not_burn_cpu(threads):
    import time

    x = np.random.default_rng(0).standard_normal(M)
    f = graphc.compile(lambda x: (x * 2.0 + 1.0).tanh().sum())
    threads(2)
    for _ in range(50):  # many short jobs: each leaves the workers spinning 500 us
        f(x)
    time.sleep(0.05)  # well beyond SPIN_NS
    c0, t0 = time.process_time(), time.perf_counter()
    time.sleep(0.3)
    busy = time.process_time() - c0
    assert busy < 0.1 * (time.perf_counter() - t0), busy


_CHILD = r"""
import multiprocessing as mp, warnings
import numpy as np
import eager, graphc
import eager.nn.functional as F
graphc.set_num_threads(2)
M = 1 << 16
x = np.random.default_rng(0).standard_normal(M + 1)
xp = np.random.default_rng(1).standard_normal((3, 3, 149, 147))
red = graphc.compile(lambda x: (x * 2.0 + 1.0).tanh().sum())
pool = graphc.compile(lambda t: F.max_pool2d(t, 3, 2, 1, ceil_mode=True))
rnd = graphc.compile(lambda x: x + eager.randn_like(x))
eager.manual_seed(9)
ref = (float(red(x)), pool(xp).tobytes(), rnd(x).tobytes())

def child(q):
    eager.manual_seed(9)
    first = (float(red(x)), pool(xp).tobytes(), rnd(x).tobytes())  # same seed, same draws
    again = all(float(red(x)) == ref[0] and pool(xp).tobytes() == ref[1] for _ in range(10))
    q.put(first == ref and again)

if __name__ == "__main__":
    print(eager.__file__)
    with warnings.catch_warnings():  # 3.12+: fork() in a multi-threaded process (meant)
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,))
        p.start()
        ok = q.get(timeout=60)
        p.join(60)
    assert ok and p.exitcode == 0, (ok, p.exitcode)
    print("done", flush=True)
"""


def test_forked_child_after_split_calls_computes_the_same(tmp_path):
    import os
    import subprocess

    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, GRAPHC_NUM_THREADS="2", PYTHONPATH=root)
    p = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().endswith("done") and p.stdout.startswith(root)


def test_inputs_in_the_other_byte_order_give_the_native_results(threads):
    """The split kernels read their operands in place: an array in the other byte order
    must reach them converted (the same bits as the native array), not reinterpreted."""
    rng = np.random.default_rng(8)
    x = _special((3, 3, 149, 147), np.float64, 8)
    a = rng.standard_normal((300, 400))
    other = ">" if sys.byteorder == "little" else "<"
    cases = [
        (lambda t: F.max_pool2d(t, 3, 2, 1, ceil_mode=True), x),
        (graphc.grad(lambda t: F.max_pool2d(t, 2).sum()), x.astype(np.float32)),
        (lambda t: (t * 2.0).exp().sum(), a),
        (lambda t: F.softmax(t, -1), a),
        (lambda t: t * 3 + 1, np.arange(M + 1)),
    ]
    threads(2)
    for f, arr in cases:
        c = graphc.compile(f)
        swapped = arr.astype(arr.dtype.newbyteorder(other))
        native = np.asarray(c(arr))
        got = np.asarray(c(swapped))
        assert got.dtype.isnative and got.tobytes() == native.tobytes()
