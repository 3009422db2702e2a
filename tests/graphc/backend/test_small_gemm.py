"""Batched small products run in graphc's own register-blocked kernel
(graphc.backend.lowering.matmul._small_gemm), not a BLAS call per item.

Checked against float64 numpy and the interpreter over layouts (contiguous, transposed,
sliced, broadcast batch dims), odd sizes (M not a multiple of the row block, N not a
multiple of the column block, K = 1, size-1 dims, empty batches), f32/f64, one to three
threads; the bits are the same on every thread count, every call (across the tier
switch) and under the products' gradients.  Which products take the path is checked on
the schedule.
"""

from __future__ import annotations

import numpy as np
import pytest

import eager
import graphc
from graphc.backend.lowering import matmul as mm
from graphc.runtime import parallel

from .test_fusion_memory import plan_of


@pytest.fixture
def threads():
    before = parallel.get_num_threads()
    yield parallel.set_num_threads
    parallel.set_num_threads(before)


def _r(shape, dt, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dt)


def _small_kernels(cf, args) -> list:
    plan = plan_of(cf, *args)
    return [mm.gemm_dims(plan, k.node).small for k in plan.kernels if k.kind == "matmul"]


def _tol(dt, K):
    return (2e-6 if dt == np.float32 else 1e-14) * max(K, 1) ** 0.5 * 4


SHAPES = [
    # (A shape, B shape): W8's attention products, then odd ones
    ((8, 4, 64, 16), (8, 4, 16, 64)),
    ((8, 4, 64, 64), (8, 4, 64, 16)),
    ((8, 4, 16, 64), (8, 4, 64, 64)),
    ((5, 3, 7, 5), (5, 3, 5, 9)),
    ((4, 1, 1), (4, 1, 1)),
    ((6, 17, 3), (6, 3, 33)),
    ((4, 5, 1), (4, 1, 16)),
    ((7, 3, 40), (7, 40, 1)),
    ((2, 2, 9, 31), (2, 2, 31, 17)),
]


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("sa, sb", SHAPES)
def test_matches_numpy_and_is_the_same_on_every_thread_count(threads, dt, sa, sb):
    a, b = _r(sa, dt), _r(sb, dt, 1)
    want = a.astype(np.float64) @ b.astype(np.float64)
    args = (eager.tensor(a), eager.tensor(b))
    results = []
    for nt in (1, 2, 3):
        threads(nt)
        cf = graphc.compile(lambda x, y: x @ y)
        got = cf(*args).numpy()
        assert got.dtype == dt and got.shape == want.shape
        scale = max(float(np.max(np.abs(want))), 1.0)
        np.testing.assert_allclose(got, want, rtol=0, atol=_tol(dt, sa[-1]) * scale)
        lanes = 32 // np.dtype(dt).itemsize
        npad = -(-sb[-1] // (2 * lanes)) * 2 * lanes
        fits = sa[-1] * npad * np.dtype(dt).itemsize <= mm.SMALL_GEMM_MAX_PACK
        assert _small_kernels(cf, args) == [fits]  # (8, 4, 64, 64) f64: B too large
        results.append(got)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])  # the same bits on 1, 2, 3 threads


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_reduction_order_is_k_ascending_fma(dt):
    """Every element is fma(a[i,K-1], b[K-1,j], ... fma(a[i,0], b[0,j], 0)): checked
    against that recurrence evaluated in numpy on float64 with rounding to dt per step
    (an FMA rounds once: float64 products of float32 values are exact, so f32 results
    match bit for bit on FMA hosts; f64 within an ulp per step)."""
    a, b = _r((4, 6, 11), dt), _r((4, 11, 19), dt, 1)
    cf = graphc.compile(lambda x, y: x @ y)
    got = cf(eager.tensor(a), eager.tensor(b)).numpy()
    acc = np.zeros((4, 6, 19), dt)
    for k in range(11):
        acc = (a[:, :, k, None].astype(np.float64) * b[:, None, k, :] + acc).astype(dt)
    if dt == np.float32:
        np.testing.assert_array_equal(got, acc)
    else:
        np.testing.assert_allclose(got, acc, rtol=1e-15 * 11, atol=1e-15)


LAYOUTS = {
    "transposed A": (lambda x, y: x.transpose(-2, -1) @ y, (6, 3, 16, 64), (6, 3, 16, 24)),
    "transposed B": (lambda x, y: x @ y.transpose(-2, -1), (6, 3, 64, 16), (6, 3, 64, 16)),
    "both transposed": (
        lambda x, y: x.transpose(-2, -1) @ y.transpose(-2, -1),
        (5, 16, 9),
        (5, 13, 16),
    ),
    "sliced": (lambda x, y: x[:, ::2, 1:] @ y[:, :, ::3], (4, 14, 9), (4, 8, 30)),
    "broadcast batch": (lambda x, y: x @ y, (4, 1, 12, 8), (1, 3, 8, 20)),
    "batch dims swapped": (
        lambda x, y: x.transpose(0, 1) @ y,
        (3, 4, 10, 6),
        (4, 3, 6, 7),
    ),
}


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_non_contiguous_operands(threads, dt, name):
    fn, sa, sb = LAYOUTS[name]
    a, b = _r(sa, dt), _r(sb, dt, 1)
    want = fn(eager.tensor(a.astype(np.float64)), eager.tensor(b.astype(np.float64))).numpy()
    for nt in (1, 2):
        threads(nt)
        cf = graphc.compile(fn)
        args = (eager.tensor(a), eager.tensor(b))
        got = cf(*args).numpy()
        interp = graphc.compile(fn, backend="interpreter")(*args).numpy()
        scale = max(float(np.max(np.abs(want))), 1.0)
        np.testing.assert_allclose(got, want, rtol=0, atol=_tol(dt, 64) * scale)
        np.testing.assert_allclose(got, interp, rtol=0, atol=_tol(dt, 64) * scale)
        assert any(_small_kernels(cf, args)), "no product took the small-matrix kernel"


@pytest.mark.parametrize(
    "sa, sb, small",
    [
        ((0, 5, 7), (0, 7, 3), False),  # empty batch: nothing to run
        ((4, 0, 7), (4, 7, 3), True),  # empty C: the kernel returns before any code
        ((4, 5, 0), (4, 0, 3), False),  # K == 0: zeros by the plain loops
        ((3, 5, 7), (3, 7, 3), False),  # fewer than 4 items: BLAS
        ((4, 65, 64), (4, 64, 65), False),  # items beyond SMALL_GEMM_MAX_FMAS
        ((4, 2, 300), (4, 300, 64), False),  # packed B beyond SMALL_GEMM_MAX_PACK
        ((5, 8), (4, 8, 9), True),  # a 2-D operand broadcast over the batch
    ],
)
def test_which_products_take_the_path(sa, sb, small):
    a, b = _r(sa, np.float32), _r(sb, np.float32, 1)
    args = (eager.tensor(a), eager.tensor(b))
    cf = graphc.compile(lambda x, y: x @ y)
    got = cf(*args).numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)
    kinds = _small_kernels(cf, args)
    assert kinds == ([] if small is None else [small])


def test_not_for_integers_mixed_dtypes_or_addmm():
    a, b = np.arange(4 * 3 * 5).reshape(4, 3, 5), np.arange(4 * 5 * 2).reshape(4, 5, 2)
    cf = graphc.compile(lambda x, y: x @ y)
    args = (eager.tensor(a), eager.tensor(b))
    np.testing.assert_array_equal(cf(*args).numpy(), a @ b)
    assert _small_kernels(cf, args) == [False]
    x, y, c = _r((4, 3, 5), np.float32), _r((4, 5, 2), np.float32, 1), _r((4, 3, 2), np.float32)
    cf = graphc.compile(lambda c, x, y: eager.baddbmm(c, x, y, beta=0.5, alpha=2.0))
    args = (eager.tensor(c), eager.tensor(x), eager.tensor(y))
    np.testing.assert_allclose(cf(*args).numpy(), 0.5 * c + 2 * (x @ y), rtol=1e-5, atol=1e-6)
    assert _small_kernels(cf, args) == [False]


def test_switch_off_gives_the_blas_path_and_close_results(monkeypatch):
    a, b = _r((8, 4, 64, 16), np.float32), _r((8, 4, 16, 64), np.float32, 1)
    args = (eager.tensor(a), eager.tensor(b))
    on = graphc.compile(lambda x, y: x @ y)
    r_on = on(*args).numpy()
    monkeypatch.setattr(mm, "SMALL_GEMM", False)
    off = graphc.compile(lambda x, y: x @ y)
    r_off = off(*args).numpy()
    assert _small_kernels(off, args) == [False]
    np.testing.assert_allclose(r_on, r_off, rtol=0, atol=1e-5)


def test_same_bits_every_call_across_the_tier_switch():
    a, b = _r((8, 4, 64, 16), np.float32), _r((8, 4, 16, 64), np.float32, 1)
    cf = graphc.compile(lambda x, y: (x @ y).relu() @ b.swapaxes(-2, -1))
    args = (eager.tensor(a), eager.tensor(b))
    first = cf(*args).numpy()
    for _ in range(12):
        np.testing.assert_array_equal(cf(*args).numpy(), first)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_gradients_of_attention_products(threads, dt):
    """softmax(q k^T) v and its gradient (the products of W8's attention and their VJPs,
    transposed operands included) against the interpreter and float64 finite differences."""
    q, k, v = (_r((4, 2, 9, 5), dt, s) for s in range(3))

    def f(q, k, v):
        p = (q @ k.transpose(-2, -1)).softmax(-1)
        return ((p @ v) ** 2).sum()

    g = graphc.grad(f, argnums=(0, 1, 2))
    for nt in (1, 2):
        threads(nt)
        cg = graphc.compile(g)
        args = tuple(eager.tensor(t) for t in (q, k, v))
        got = [t.numpy() for t in cg(*args)]
        want = [t.numpy() for t in graphc.compile(g, backend="interpreter")(*args)]
        for x, y in zip(got, want):
            np.testing.assert_allclose(x, y, rtol=1e-4 if dt == np.float32 else 1e-11, atol=1e-5)
    if dt == np.float64:  # finite differences on a few entries of each argument
        base = [q, k, v]
        for i in range(3):
            for flat in (0, 17, base[i].size - 1):
                e = np.zeros(base[i].size)
                e[flat] = 1e-6
                up = [t.copy() for t in base]
                dn = [t.copy() for t in base]
                up[i] = up[i] + e.reshape(base[i].shape)
                dn[i] = dn[i] - e.reshape(base[i].shape)
                fd = (
                    f(*[eager.tensor(t) for t in up]).item()
                    - f(*[eager.tensor(t) for t in dn]).item()
                ) / 2e-6
                assert abs(got[i].reshape(-1)[flat] - fd) < 1e-6 * max(1.0, abs(fd))
