"""A batched product summed over its batch runs as one product (graphc.backend.schedule).

``sum_b A_b @ B_b`` -- the weight gradient of a linear layer applied to 3-D input --
is ``[A_0 .. A_b] @ [B_0; ..; B_b]``: one BLAS call with K' = b*K when each operand's
batch dims and K merge into one stride (``Schedule._summed_product``).  Checked here
against float64 numpy over layouts where it applies and where it must not (a sum over
only some batch dims, a broadcast operand, batch dims that do not merge, a product
read twice), f32/f64, odd and size-1 shapes, empty batches, one and two threads.
"""

from __future__ import annotations

import numpy as np
import pytest

import eager
import graphc
from graphc.backend.lowering.matmul import gemm_dims
from graphc.runtime import parallel

from .test_fusion_memory import plan_of


def _summed(plan) -> int:
    return len(plan.summed)


def _check(fn, args, want, dt):
    cf = graphc.compile(fn)
    got = cf(*[eager.tensor(a) for a in args])
    got = got.numpy() if hasattr(got, "numpy") else np.asarray(got)
    tol = 2e-5 if dt == np.float32 else 1e-12
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(scale, 1.0))
    assert got.shape == want.shape and got.dtype == dt
    return plan_of(cf, *[eager.tensor(a) for a in args])


def _r(shape, dt, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dt)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "b, t, i, o", [(8, 64, 256, 64), (3, 5, 7, 2), (1, 1, 1, 1), (2, 1, 3, 1), (5, 33, 1, 9)]
)
def test_weight_gradient_form_is_one_product(dt, threads, b, t, i, o):
    old = parallel.get_num_threads()
    parallel.set_num_threads(threads)
    try:
        x, g = _r((b, t, i), dt), _r((b, t, o), dt, 1)
        want = np.einsum("bki,bkj->ij", x.astype(np.float64), g.astype(np.float64))
        plan = _check(lambda x, g: (x.transpose(-2, -1) @ g).sum(0), (x, g), want.astype(dt), dt)
        assert _summed(plan) == 1 and [k.kind for k in plan.kernels] == ["matmul"]
        # keepdim, and the sum written as dim=(0,)
        plan = _check(
            lambda x, g: (x.transpose(-2, -1) @ g).sum((0,), keepdim=True),
            (x, g),
            want[None].astype(dt),
            dt,
        )
        assert _summed(plan) == 1
    finally:
        parallel.set_num_threads(old)


def test_bitwise_the_same_at_one_and_two_threads():
    x, g = _r((8, 64, 256), np.float32), _r((8, 64, 64), np.float32, 1)
    res = []
    old = parallel.get_num_threads()
    try:
        for n in (1, 2, 1, 2):
            parallel.set_num_threads(n)
            cf = graphc.compile(lambda x, g: (x.transpose(-2, -1) @ g).sum(0))
            res.append(cf(eager.tensor(x), eager.tensor(g)).numpy())
    finally:
        parallel.set_num_threads(old)
    np.testing.assert_array_equal(res[0], res[2])
    np.testing.assert_array_equal(res[1], res[3])


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_two_batch_dims(dt):
    a, c = _r((2, 3, 5, 4), dt), _r((2, 3, 5, 6), dt, 1)
    want = np.einsum("xyki,xykj->ij", a.astype(np.float64), c.astype(np.float64))
    plan = _check(lambda a, c: (a.transpose(-2, -1) @ c).sum((0, 1)), (a, c), want.astype(dt), dt)
    assert _summed(plan) == 1
    # a size-1 batch dim that is not summed, the others summed
    a1, c1 = _r((3, 1, 5, 4), dt), _r((3, 1, 5, 6), dt, 1)
    want = np.einsum("xyki,xykj->yij", a1.astype(np.float64), c1.astype(np.float64))
    plan = _check(lambda a, c: (a.transpose(-2, -1) @ c).sum(0), (a1, c1), want.astype(dt), dt)
    assert _summed(plan) == 1


def test_where_it_must_not_apply_the_result_is_still_right():
    dt = np.float64
    a, c = _r((2, 3, 4, 5), dt), _r((2, 3, 5, 6), dt, 1)
    a64, c64 = a, c
    # a sum over only one of two batch dims
    want = np.einsum("xyik,xykj->yij", a64, c64)
    plan = _check(lambda a, c: (a @ c).sum(0), (a, c), want, dt)
    assert _summed(plan) == 0
    # a sum over the rows too
    want = np.einsum("xyik,xykj->j", a64, c64)
    plan = _check(lambda a, c: (a @ c).sum((0, 1, 2)), (a, c), want, dt)
    assert _summed(plan) == 0
    # a broadcast operand (its batch is a stride of 0)
    w = _r((5, 6), dt, 2)
    want = np.einsum("xyik,kj->ij", a64, w)
    plan = _check(lambda a, w: (a @ w).sum((0, 1)), (a, w), want, dt)
    assert _summed(plan) == 0
    # A not transposed: its columns k and its batch do not merge into one stride
    want = np.einsum("xyik,xykj->ij", a64, c64)
    plan = _check(lambda a, c: (a @ c).sum((0, 1)), (a, c), want, dt)
    assert _summed(plan) == 0
    # batch dims that do not merge with K (A's batch permuted)
    x = _r((5, 3, 4), dt)
    g = _r((3, 5, 6), dt, 3)
    want = np.einsum("bik,bkj->ij", x.transpose(1, 2, 0), g)
    plan = _check(lambda x, g: (x.permute(1, 2, 0) @ g).sum(0), (x, g), want, dt)
    assert _summed(plan) == 0
    # the product read twice: it is kept
    x, g = _r((3, 4, 5), dt), _r((3, 4, 2), dt, 1)
    p = np.einsum("bki,bkj->bij", x, g)
    cf = graphc.compile(lambda x, g: (lambda p: (p.sum(0), p * 2.0))(x.transpose(-2, -1) @ g))
    s, q = cf(eager.tensor(x), eager.tensor(g))
    np.testing.assert_allclose(s.numpy(), p.sum(0), rtol=1e-12)
    np.testing.assert_allclose(q.numpy(), p * 2.0, rtol=1e-12)
    assert _summed(plan_of(cf, eager.tensor(x), eager.tensor(g))) == 0


def test_empty_batches_and_k_zero():
    dt = np.float64
    for shp_a, shp_b in [((0, 3, 4), (0, 3, 2)), ((2, 0, 4), (2, 0, 2)), ((2, 3, 0), (2, 3, 2))]:
        x, g = _r(shp_a, dt), _r(shp_b, dt, 1)
        want = np.einsum("bki,bkj->ij", x, g)
        _check(lambda x, g: (x.transpose(-2, -1) @ g).sum(0), (x, g), want, dt)


def test_integer_products_keep_their_loops():
    x = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    g = np.arange(12, dtype=np.int64).reshape(2, 3, 2)
    cf = graphc.compile(lambda x, g: (x.transpose(-2, -1) @ g).sum(0))
    got = cf(eager.tensor(x), eager.tensor(g)).numpy()
    np.testing.assert_array_equal(got, np.einsum("bki,bkj->ij", x, g))
    assert _summed(plan_of(cf, eager.tensor(x), eager.tensor(g))) == 0


def test_linear_layer_weight_gradient_matches_eager():
    rng = np.random.default_rng(5)
    w0 = eager.tensor(rng.standard_normal((5, 7)).astype(np.float32))
    b0 = eager.tensor(rng.standard_normal(5).astype(np.float32))
    x = eager.tensor(rng.standard_normal((4, 6, 7)).astype(np.float32))

    def loss(w, b, x):
        return (eager.nn.functional.linear(x, w, b) ** 2).sum()

    cf = graphc.compile(graphc.grad(loss, argnums=(0, 1)))
    gw, gb = cf(w0, b0, x)
    w = w0.clone().requires_grad_(True)
    b = b0.clone().requires_grad_(True)
    loss(w, b, x).backward()
    np.testing.assert_allclose(gw.numpy(), w.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gb.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-5)
    # one product for the weight gradient: either the batch-summed product, or (since
    # the matmul gradient flattens the batch into the rows) a plain 2-D one; never a
    # batched product plus a pass summing it
    plan = plan_of(cf, w0, b0, x)
    batched = [k for k in plan.kernels if k.kind == "matmul" and gemm_dims(plan, k.node).batch]
    assert _summed(plan) == 1 or not batched


def test_matches_pytorch_linear_backward():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    x = rng.standard_normal((8, 64, 256)).astype(np.float32)
    g = rng.standard_normal((8, 64, 64)).astype(np.float32)
    cf = graphc.compile(lambda x, g: (x.transpose(-2, -1) @ g).sum(0))
    got = cf(eager.tensor(x), eager.tensor(g)).numpy()
    want = (torch.from_numpy(x).transpose(-2, -1) @ torch.from_numpy(g)).sum(0).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
