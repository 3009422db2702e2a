"""Linear algebra compiled: addmm/baddbmm (one gemm whose C starts as the bias), bmm, mv,
dot, outer, einsum; compiled (native and interpreter) == eager, values and gradients
(first and second order), odd layouts, threads, and the plan (no copies of broadcast
batch operands)."""

import numpy as np
import pytest

import eager
import eager.nn.functional as F
import graphc


def _r(*shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _eager(fn, *arrays):
    return fn(*[eager.tensor(a.copy()) for a in arrays]).numpy()


def _check(fn, *arrays, rtol=1e-10, atol=1e-10):
    want = _eager(fn, *arrays)
    for backend in ("native", "interpreter"):
        got = graphc.compile(fn, backend=backend)(*arrays)
        assert got.shape == want.shape and got.dtype == want.dtype, backend
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=backend)


def _check_grads(fn, *arrays, rtol=1e-9, atol=1e-9):
    """graphc's value_and_grad and its grad of grad (a Hessian-vector product) == eager's."""
    argnums = tuple(range(len(arrays)))
    loss = lambda *xs: (fn(*xs) ** 2).sum()  # noqa: E731
    ts = [eager.tensor(a.copy(), requires_grad=True) for a in arrays]
    v = loss(*ts)
    grads = eager.autograd.grad(v, ts, create_graph=True)
    cv, cg = graphc.compile(graphc.value_and_grad(loss, argnums=argnums))(*arrays)
    np.testing.assert_allclose(cv, v.item(), rtol=rtol)
    for a, b in zip(cg, grads):
        np.testing.assert_allclose(a, b.detach().numpy(), rtol=rtol, atol=atol)
    # second order: d/dx0 of sum(grad wrt x0)
    s = sum(g.sum() for g in grads)
    hv = eager.autograd.grad(s, ts, allow_unused=True)
    gsum = lambda *xs: sum(g.sum() for g in graphc.grad(loss, argnums=argnums)(*xs))  # noqa: E731
    chv = graphc.grad(gsum, argnums=argnums)(*arrays)
    for a, b in zip(chv, hv):
        if b is not None:
            np.testing.assert_allclose(a, b.numpy(), rtol=1e-8, atol=1e-8)


# --- addmm / baddbmm ---------------------------------------------------------------------


ADDMM_CASES = [
    ((4,), (3, 5), (5, 4)),
    ((3, 4), (3, 5), (5, 4)),
    ((3, 1), (3, 5), (5, 4)),
    ((), (2, 3), (3, 2)),
    ((1, 4), (1, 1), (1, 4)),
    ((4,), (3, 0), (0, 4)),  # K == 0: plain loops, result = beta * input
    ((4,), (0, 5), (5, 4)),
]


@pytest.mark.parametrize("beta,alpha", [(1.0, 1.0), (0.5, 2.0), (0.0, 1.0), (-1.0, -0.5)])
@pytest.mark.parametrize("shapes", ADDMM_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_addmm_compiled_matches_eager(shapes, beta, alpha, dtype):
    arrays = [_r(*s, seed=k, dtype=dtype) for k, s in enumerate(shapes)]
    tol = 1e-5 if dtype == np.float32 else 1e-12
    _check(
        lambda i, a, b: eager.addmm(i, a, b, beta=beta, alpha=alpha), *arrays, rtol=tol, atol=tol
    )


def test_addmm_odd_layouts():
    i = _r(4, 3, seed=1).T  # transposed bias
    a = _r(5, 3, seed=2).T  # transposed mat1
    b = np.asfortranarray(_r(5, 4, seed=3))
    _check(lambda i, a, b: eager.addmm(i, a, b, beta=0.5, alpha=2.0), i, a, b)
    _check(lambda i, a, b: eager.addmm(i, a, b), _r(8, seed=4)[::-2], a, b[:, ::-1])


def test_addmm_beta0_ignores_nan_compiled():
    i = np.full(4, np.nan)
    a, b = _r(3, 5), _r(5, 4, seed=1)
    got = graphc.compile(lambda i, a, b: eager.addmm(i, a, b, beta=0))(i, a, b)
    np.testing.assert_allclose(got, a @ b, rtol=1e-12)


def test_addmm_int_loops():
    i, a, b = (
        np.arange(n, dtype=np.int64).reshape(s) for n, s in [(4, (4,)), (6, (2, 3)), (12, (3, 4))]
    )
    _check(lambda i, a, b: eager.addmm(i, a, b, beta=2, alpha=3), i, a, b)


@pytest.mark.parametrize("beta,alpha", [(1.0, 1.0), (0.5, 2.0), (0.0, 1.0)])
def test_addmm_grads(beta, alpha):
    _check_grads(
        lambda i, a, b: eager.addmm(i, a, b, beta=beta, alpha=alpha),
        _r(4),
        _r(3, 5, seed=1),
        _r(5, 4, seed=2),
    )


def test_linear_records_addmm_and_threads_share_it():
    """nn.Linear's 2-D forward is one addmm node; a product big enough to be shared by
    threads still gives eager's numbers (each thread fills its own rows of the bias)."""
    x, w, b = (
        _r(64, 300, dtype=np.float32),
        _r(100, 300, seed=1, dtype=np.float32),
        _r(100, seed=2, dtype=np.float32),
    )
    f = lambda x, w, b: F.linear(x, w, b).relu()  # noqa: E731
    cf = graphc.compile(f)
    assert "addmm(" in cf.ir(x, w, b)
    assert "matmul" in cf.plan(x, w, b)
    np.testing.assert_allclose(cf(x, w, b), _eager(f, x, w, b), rtol=1e-4, atol=1e-4)
    # columns shared (few rows)
    x2 = _r(4, 300, dtype=np.float32)
    w2 = _r(2000, 300, seed=1, dtype=np.float32)
    b2 = _r(2000, seed=2, dtype=np.float32)
    np.testing.assert_allclose(
        graphc.compile(f)(x2, w2, b2), _eager(f, x2, w2, b2), rtol=1e-4, atol=1e-4
    )


def test_linear_grads_compiled():
    _check_grads(
        lambda x, w, b: F.linear(x, w, b).tanh(), _r(5, 3), _r(4, 3, seed=1), _r(4, seed=2)
    )
    _check_grads(lambda x, w, b: F.linear(x, w, b), _r(2, 5, 3), _r(4, 3, seed=1), _r(4, seed=2))


BADDBMM_CASES = [
    ((2, 3, 4), (2, 3, 5), (2, 5, 4)),
    ((4,), (2, 3, 5), (2, 5, 4)),
    ((3, 1), (2, 3, 5), (2, 5, 4)),
    ((), (1, 2, 3), (1, 3, 2)),
    ((1,), (0, 3, 2), (0, 2, 4)),
    ((2, 3, 2), (2, 3, 0), (2, 0, 2)),
]


@pytest.mark.parametrize("beta,alpha", [(1.0, 1.0), (0.5, 2.0), (0.0, -1.0)])
@pytest.mark.parametrize("shapes", BADDBMM_CASES)
def test_baddbmm_compiled_matches_eager(shapes, beta, alpha):
    arrays = [_r(*s, seed=k) for k, s in enumerate(shapes)]
    _check(lambda i, a, b: eager.baddbmm(i, a, b, beta=beta, alpha=alpha), *arrays)


def test_baddbmm_grads_and_big():
    _check_grads(
        lambda i, a, b: eager.baddbmm(i, a, b, beta=0.5, alpha=2.0),
        _r(3, 1),
        _r(2, 3, 4, seed=1),
        _r(2, 4, 5, seed=2),
    )
    i, a, b = (
        _r(64, dtype=np.float32),
        _r(8, 64, 96, seed=1, dtype=np.float32),
        _r(8, 96, 64, seed=2, dtype=np.float32),
    )
    _check(lambda i, a, b: eager.baddbmm(i, a, b), i, a, b, rtol=1e-4, atol=1e-4)


# --- bmm / mv / dot / outer / matmul broadcasting -------------------------------------------


@pytest.mark.parametrize(
    "fn,shapes",
    [
        (eager.bmm, [(2, 3, 4), (2, 4, 5)]),
        (eager.bmm, [(1, 1, 4), (1, 4, 1)]),
        (eager.bmm, [(0, 3, 4), (0, 4, 5)]),
        (eager.mv, [(3, 4), (4,)]),
        (eager.mv, [(0, 4), (4,)]),
        (eager.dot, [(5,), (5,)]),
        (eager.dot, [(0,), (0,)]),
        (eager.vdot, [(5,), (5,)]),
        (eager.outer, [(3,), (4,)]),
        (eager.ger, [(3,), (0,)]),
        (eager.mm, [(3, 4), (4, 2)]),
        (eager.addmv, [(3,), (3, 4), (4,)]),
        (eager.addbmm, [(3, 5), (2, 3, 4), (2, 4, 5)]),
    ],
)
def test_products_compiled_match_eager_with_grads(fn, shapes):
    arrays = [_r(*s, seed=k) for k, s in enumerate(shapes)]
    _check(fn, *arrays)
    if all(arrays[0].shape):
        _check_grads(fn, *arrays)


@pytest.mark.parametrize(
    "sa,sb",
    [
        ((2, 1, 3, 4), (5, 4, 2)),
        ((4,), (5, 4, 2)),
        ((2, 3, 4), (4,)),
        ((3, 4), (2, 4, 5)),
        ((7, 1, 4), (1, 4, 3)),
    ],
)
def test_matmul_broadcast_batch_no_copy(sa, sb):
    a, b = _r(*sa), _r(*sb, seed=1)
    f = lambda a, b: a @ b  # noqa: E731
    _check(f, a, b)
    plan = graphc.compile(f).plan(a, b)
    assert plan.count("k") and "loop" not in plan, plan  # one gemm kernel, no copies


# --- einsum -------------------------------------------------------------------------------

EINSUM_CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("i,i->", [(3,), (3,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("i,i->i", [(3,), (3,)]),
    ("ij->ji", [(2, 3)]),
    ("ij->j", [(2, 3)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("bhqk,bhkd->bhqd", [(2, 3, 4, 6), (2, 3, 6, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("ij,ij->ij", [(2, 3), (1, 3)]),
    ("ij,jk->ik", [(0, 3), (3, 4)]),
]


@pytest.mark.parametrize("eq,shapes", EINSUM_CASES)
def test_einsum_compiled_matches_eager(eq, shapes):
    arrays = [_r(*s, seed=k) for k, s in enumerate(shapes)]
    f = lambda *xs: eager.einsum(eq, *xs)  # noqa: E731
    _check(f, *arrays)
    if all(all(s) for s in shapes):
        _check_grads(f, *arrays)


def test_einsum_contractions_are_gemms():
    q, k = _r(2, 3, 64, 16, dtype=np.float32), _r(2, 3, 64, 16, seed=1, dtype=np.float32)
    f = lambda q, k: eager.einsum("bhqd,bhkd->bhqk", q, k)  # noqa: E731
    ir = graphc.compile(f).ir(q, k)
    assert ir.count("matmul(") == 1, ir
    _check(f, q, k, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "sa,sb",
    [
        ((8, 64, 96), (96, 64)),  # batch folded into one gemm's rows
        ((2, 3, 4), (4,)),
        ((3, 1, 4), (4, 5)),
        ((64, 8, 64), (64, 64, 8)),  # many products: threads share the batch
        ((4, 16, 64, 64), (4, 1, 64, 64)),
        ((3, 5, 64, 64), (5, 64, 64)),
    ],
)
@pytest.mark.parametrize("layout", ["c", "t", "strided"])
def test_batched_products_fold_and_share(sa, sb, layout):
    a, b = _r(*sa, dtype=np.float32), _r(*sb, seed=1, dtype=np.float32)
    if layout == "t" and a.ndim >= 2:
        a = np.swapaxes(np.swapaxes(a, -1, -2).copy(), -1, -2)
    elif layout == "strided":
        a = np.repeat(a, 2, axis=-2)[..., ::2, :]
    f = lambda a, b: a @ b  # noqa: E731
    np.testing.assert_allclose(graphc.compile(f)(a, b), a @ b, rtol=1e-4, atol=1e-4)
    if a.ndim == 3 and b.ndim == 3 and a.shape[0] == b.shape[0]:
        i = _r(sb[-1], seed=2, dtype=np.float32)
        g = lambda i, a, b: eager.baddbmm(i, a, b, beta=0.5, alpha=2.0)  # noqa: E731
        np.testing.assert_allclose(
            graphc.compile(g)(i, a, b), 0.5 * i + 2 * (a @ b), rtol=1e-4, atol=1e-4
        )


def test_linear_3d_input_folds_into_one_gemm():
    x, w, b = (
        _r(4, 32, 64, dtype=np.float32),
        _r(48, 64, seed=1, dtype=np.float32),
        _r(48, seed=2, dtype=np.float32),
    )
    f = lambda x, w, b: F.linear(x, w, b)  # noqa: E731
    np.testing.assert_allclose(graphc.compile(f)(x, w, b), _eager(f, x, w, b), rtol=1e-4, atol=1e-4)
