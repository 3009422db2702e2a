"""Linear algebra on eager: addmm/baddbmm (primitives), mm/bmm/mv/dot/vdot/outer/ger,
addmv/addbmm, tensordot and einsum (composites): values, PyTorch's errors, grad_fn names,
gradcheck and gradgradcheck; a differential test against PyTorch when it is importable."""

import numpy as np
import pytest

import eager
import eager.nn.functional as F
from eager.autograd import gradcheck, gradgradcheck


def _r(*shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _t(*shape, seed=0, rg=False, dtype=np.float64):
    return eager.tensor(_r(*shape, seed=seed, dtype=dtype), requires_grad=rg)


# --- addmm / baddbmm -----------------------------------------------------------------------


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2.0), (0, 1), (-1.5, 0.25)])
@pytest.mark.parametrize("ishape", [(4,), (3, 4), (3, 1), (), (1, 4)])
def test_addmm_values(beta, alpha, ishape):
    i, a, b = _r(*ishape, seed=1), _r(3, 5, seed=2), _r(5, 4, seed=3)
    got = eager.addmm(eager.tensor(i), eager.tensor(a), eager.tensor(b), beta=beta, alpha=alpha)
    want = alpha * (a @ b) + (beta * i if beta else 0)
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-12, atol=1e-12)
    assert got.shape == (3, 4) and got.dtype == eager.float64


def test_addmm_beta0_ignores_nan_input():
    i = eager.tensor([np.nan, np.inf, -np.inf, 1.0], dtype=eager.float64)
    a, b = _t(3, 5), _t(5, 4, seed=1)
    out = i.addmm(a, b, beta=0)
    assert np.isfinite(out.numpy()).all()
    np.testing.assert_allclose(out.numpy(), a.numpy() @ b.numpy())


def test_addmm_float32_stays_float32_and_int():
    out = _t(4, dtype=np.float32).addmm(_t(3, 5, dtype=np.float32), _t(5, 4, dtype=np.float32))
    assert out.dtype == eager.float32
    li = eager.ones(2, 2, dtype=eager.int64)
    out = eager.addmm(eager.ones(2, dtype=eager.int64), li, li, beta=2, alpha=3)
    assert out.dtype == eager.int64 and out.tolist() == [[8, 8], [8, 8]]


@pytest.mark.parametrize(
    "shapes,msg",
    [
        (((4,), (3,), (3, 4)), "mat1 must be a matrix, got 1-D tensor"),
        (((4,), (2, 3), (3,)), "mat2 must be a matrix, got 1-D tensor"),
        (((4,), (2, 3), (4, 4)), r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x4\)"),
        (
            ((3,), (2, 3), (3, 4)),
            r"The expanded size of the tensor \(4\) must match the existing "
            r"size \(3\) at non-singleton dimension 1.  Target sizes: \[2, 4\].  Tensor sizes: \[3\]",
        ),
        (((2, 3, 4), (2, 3), (3, 4)), "the number of sizes provided"),
    ],
)
def test_addmm_errors(shapes, msg):
    i, a, b = (eager.zeros(*s) for s in shapes)
    with pytest.raises(RuntimeError, match=msg):
        eager.addmm(i, a, b)


def test_addmm_dtype_errors():
    f, d = eager.zeros(2, 2), eager.zeros(2, 2, dtype=eager.float64)
    with pytest.raises(
        RuntimeError, match="self and mat2 must have the same dtype, but got Float and Double"
    ):
        eager.addmm(f, f, d)
    with pytest.raises(
        RuntimeError, match="mat1 and mat2 must have the same dtype, but got Double and Float"
    ):
        eager.addmm(f, d, f)
    # F.linear keeps eager's promotion for mixed dtypes (PyTorch refuses them)
    assert F.linear(d, f, f[0]).dtype == eager.float64
    with pytest.raises(
        RuntimeError, match="self and mat2 must have the same dtype, but got Double and Float"
    ):
        eager.addmm(d, f, f)
    b = eager.zeros(2, 2, dtype=eager.bool)
    with pytest.raises(NotImplementedError, match="not implemented for 'Bool'"):
        eager.addmm(b, b, b)
    with pytest.raises(TypeError, match="must be Tensor"):
        eager.addmm(f, [[1.0]], f)


def test_addmm_grad_fn_and_linear():
    x, w, b = _t(5, 3, rg=True), _t(4, 3, seed=1, rg=True), _t(4, seed=2, rg=True)
    assert eager.addmm(b, x, w.t()).grad_fn.name() == "AddmmBackward0"
    y = F.linear(x, w, b)
    assert y.grad_fn.name() == "AddmmBackward0"
    np.testing.assert_allclose(
        y.detach().numpy(),
        x.detach().numpy() @ w.detach().numpy().T + b.detach().numpy(),
        rtol=1e-12,
    )
    lin = eager.nn.Linear(3, 4).double()
    assert lin(x).grad_fn.name() == "AddmmBackward0"
    # no bias / not 2-D: matmul (+ add), as in PyTorch
    assert F.linear(x, w).grad_fn.name() == "MmBackward0"
    y3 = F.linear(_t(2, 5, 3, rg=True), w, b)
    assert y3.shape == (2, 5, 4) and y3.grad_fn.name() != "AddmmBackward0"


@pytest.mark.parametrize("beta,alpha", [(1.0, 1.0), (0.5, -2.0), (0.0, 1.5)])
def test_addmm_gradcheck_gradgradcheck(beta, alpha):
    i, a, b = _t(3, 1, rg=True), _t(3, 2, seed=1, rg=True), _t(2, 4, seed=2, rg=True)
    f = lambda i, a, b: eager.addmm(i, a, b, beta=beta, alpha=alpha)  # noqa: E731
    assert gradcheck(f, (i, a, b))
    assert gradgradcheck(f, (i, a, b))


@pytest.mark.parametrize("beta,alpha", [(1.0, 1.0), (0.5, -2.0), (0.0, 1.5)])
def test_baddbmm_gradcheck_gradgradcheck(beta, alpha):
    i, a, b = _t(3, 1, rg=True), _t(2, 3, 2, seed=1, rg=True), _t(2, 2, 4, seed=2, rg=True)
    f = lambda i, a, b: eager.baddbmm(i, a, b, beta=beta, alpha=alpha)  # noqa: E731
    assert f(i, a, b).grad_fn.name() == "BaddbmmBackward0"
    assert gradcheck(f, (i, a, b))
    assert gradgradcheck(f, (i, a, b))


def test_baddbmm_values_and_errors():
    i, a, b = _r(5, seed=1), _r(2, 3, 4, seed=2), _r(2, 4, 5, seed=3)
    got = eager.baddbmm(*map(eager.tensor, (i, a, b)), beta=0.5, alpha=2)
    np.testing.assert_allclose(got.detach().numpy(), 0.5 * i + 2 * (a @ b), rtol=1e-12)
    z = eager.zeros
    with pytest.raises(RuntimeError, match="batch1 must be a 3D tensor"):
        eager.baddbmm(z(5), z(3, 4), z(2, 4, 5))
    with pytest.raises(
        RuntimeError,
        match=r"Expected size for first two dimensions of batch2 "
        r"tensor to be: \[2, 4\] but got: \[2, 5\].",
    ):
        eager.baddbmm(z(5), z(2, 3, 4), z(2, 5, 5))
    with pytest.raises(RuntimeError, match="expected scalar type Float but found Double"):
        eager.baddbmm(z(5), z(2, 3, 4), z(2, 4, 5, dtype=eager.float64))
    with pytest.raises(RuntimeError, match=r"The expanded size of the tensor \(5\)"):
        eager.baddbmm(z(4), z(2, 3, 4), z(2, 4, 5))


# --- bmm, mv, dot, vdot, outer, ger, mm -------------------------------------------------


def test_products_values_and_grad_fns():
    a3, b3 = _t(2, 3, 4, rg=True), _t(2, 4, 5, seed=1, rg=True)
    y = eager.bmm(a3, b3)
    assert y.grad_fn.name() == "BmmBackward0"
    np.testing.assert_allclose(y.detach().numpy(), a3.detach().numpy() @ b3.detach().numpy())
    m, v = _t(2, 3, rg=True), _t(3, seed=2, rg=True)
    y = eager.mv(m, v)
    assert y.grad_fn.name() == "MvBackward0" and y.shape == (2,)
    y = eager.dot(v, v)
    assert y.grad_fn.name() == "DotBackward0" and y.shape == ()
    assert eager.vdot(v, v).grad_fn.name() == "VdotBackward0"
    y = eager.outer(v, _t(4, seed=3))
    assert y.grad_fn.name() == "MulBackward0" and y.shape == (3, 4)
    np.testing.assert_allclose(
        eager.ger(v, v).detach().numpy(), np.outer(v.detach().numpy(), v.detach().numpy())
    )
    assert m.mm(_t(3, 2)).grad_fn.name() == "MmBackward0"
    li = eager.ones(3, dtype=eager.int64)
    assert eager.dot(li, li).item() == 3


def test_products_errors():
    z = eager.zeros
    for fn, args, exc, msg in [
        (eager.bmm, (z(2, 3), z(3, 4)), RuntimeError, "batch1 must be a 3D tensor"),
        (eager.bmm, (z(2, 3, 4), z(3, 4)), RuntimeError, "batch2 must be a 3D tensor"),
        (
            eager.bmm,
            (z(2, 3, 4), z(3, 4, 5)),
            RuntimeError,
            r"Expected size for first two dimensions of batch2 tensor to be: \[2, 4\] but got: \[3, 4\].",
        ),
        (
            eager.bmm,
            (z(2, 3, 4), z(2, 4, 5, dtype=eager.float64)),
            RuntimeError,
            "expected scalar type Float but found Double",
        ),
        (
            eager.bmm,
            (z(2, 3, 4, dtype=eager.bool), z(2, 4, 5, dtype=eager.bool)),
            NotImplementedError,
            "\"bmm\" not implemented for 'Bool'",
        ),
        (
            eager.mv,
            (z(2, 3), z(4)),
            RuntimeError,
            r"size mismatch, got input \(2\), mat \(2x3\), vec \(4\)",
        ),
        (eager.mv, (z(3), z(3)), RuntimeError, "vector \\+ matrix @ vector expected, got 1, 1, 1"),
        (
            eager.dot,
            (z(2, 2), z(2, 2)),
            RuntimeError,
            "1D tensors expected, but got 2D and 2D tensors",
        ),
        (eager.dot, (z(()), z(3)), RuntimeError, "1D tensors expected, but got 0D and 1D tensors"),
        (
            eager.dot,
            (z(3), z(4)),
            RuntimeError,
            r"inconsistent tensor size, expected tensor \[3\] and src \[4\] to have the same number "
            r"of elements, but got 3 and 4 elements respectively",
        ),
        (
            eager.dot,
            (z(3), z(3, dtype=eager.float64)),
            RuntimeError,
            "dot : expected both vectors to have same dtype, but found Float and Double",
        ),
        (
            eager.outer,
            (z(2, 2), z(3)),
            RuntimeError,
            "outer: Expected 1-D argument self, but got 2-D",
        ),
        (
            eager.outer,
            (z(2), z(3, 1)),
            RuntimeError,
            "outer: Expected 1-D argument vec2, but got 2-D",
        ),
        (eager.mm, (z(3), z(3, 4)), RuntimeError, "self must be a matrix"),
        (eager.mm, (z(2, 3), z(3)), RuntimeError, "mat2 must be a matrix"),
        (
            eager.mm,
            (z(2, 3), z(4, 4)),
            RuntimeError,
            r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x4\)",
        ),
        (
            eager.mm,
            (z(2, 3), z(3, 4, dtype=eager.float64)),
            RuntimeError,
            "expected m1 and m2 to have the same dtype, but got: float != double",
        ),
    ]:
        with pytest.raises(exc, match=msg):
            fn(*args)


def test_outer_promotes():
    assert eager.outer(eager.zeros(2), eager.zeros(3, dtype=eager.float64)).dtype == eager.float64


def test_addmv_addbmm():
    i, m, v = _r(3, seed=1), _r(3, 4, seed=2), _r(4, seed=3)
    got = eager.addmv(*map(eager.tensor, (i, m, v)), beta=0.5, alpha=2)
    np.testing.assert_allclose(got.detach().numpy(), 0.5 * i + 2 * m @ v, rtol=1e-12)
    i, a, b = _r(3, 5, seed=1), _r(2, 3, 4, seed=2), _r(2, 4, 5, seed=3)
    got = eager.addbmm(*map(eager.tensor, (i, a, b)), beta=0.5, alpha=2)
    np.testing.assert_allclose(got.detach().numpy(), 0.5 * i + 2 * (a @ b).sum(0), rtol=1e-12)
    ti, ta, tb = (eager.tensor(x, requires_grad=True) for x in (i, a, b))
    assert gradcheck(lambda i, a, b: eager.addbmm(i, a, b, beta=0.5, alpha=2), (ti, ta, tb))
    with pytest.raises(RuntimeError, match="size mismatch"):
        eager.addmv(eager.zeros(2), eager.zeros(3, 4), eager.zeros(4))


def test_bmm_mv_dot_gradgradcheck():
    a3, b3 = _t(2, 3, 2, rg=True), _t(2, 2, 3, seed=1, rg=True)
    assert gradgradcheck(eager.bmm, (a3, b3))
    m, v = _t(2, 3, rg=True), _t(3, seed=2, rg=True)
    assert gradgradcheck(eager.mv, (m, v))
    assert gradgradcheck(eager.dot, (v, _t(3, seed=4, rg=True)))
    assert gradgradcheck(eager.outer, (v, _t(2, seed=4, rg=True)))


# --- einsum / tensordot -------------------------------------------------------------------

EINSUM_CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("i,i->", [(3,), (3,)]),
    ("i,i", [(3,), (3,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("i,i->i", [(3,), (3,)]),
    ("ij->ji", [(2, 3)]),
    ("ij->", [(2, 3)]),
    ("ij->j", [(2, 3)]),
    ("ij", [(2, 3)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("iij->ji", [(3, 3, 2)]),
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 2)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("bhqk,bhkd->bhqd", [(2, 3, 4, 6), (2, 3, 6, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ab,cd->", [(2, 3), (4, 5)]),
    ("ba,Ab->", [(3, 2), (2, 3)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("i...->...", [(3, 2, 4)]),
    ("ij,ij->ij", [(2, 3), (1, 3)]),
    ("...,...", [(2,), (2,)]),
    ("ij,jk->ik", [(0, 3), (3, 4)]),
    ("ij,jk->ik", [(2, 0), (0, 4)]),
    ("", [()]),
    ("->", [()]),
]


def _np_einsum(eq, arrays):
    # numpy's einsum does not broadcast size-1 labels; expand them first
    return (
        np.einsum(eq, *arrays)
        if "ij,ij" not in eq
        else np.einsum(eq, *np.broadcast_arrays(*arrays))
    )


@pytest.mark.parametrize("eq,shapes", EINSUM_CASES)
def test_einsum_values(eq, shapes):
    arrays = [_r(*s, seed=k) for k, s in enumerate(shapes)]
    got = eager.einsum(eq, *map(eager.tensor, arrays))
    want = _np_einsum(eq, arrays)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-12, atol=1e-12)
    got = eager.einsum(eq, [eager.tensor(a) for a in arrays])  # the list form
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("eq,shapes", [c for c in EINSUM_CASES if c[1] and all(c[1])][:12])
def test_einsum_gradcheck(eq, shapes):
    ts = [_t(*s, seed=k, rg=True) for k, s in enumerate(shapes)]
    assert gradcheck(lambda *xs: eager.einsum(eq, *xs), ts)


def test_einsum_gradgradcheck():
    ts = [_t(2, 3, seed=1, rg=True), _t(3, 2, seed=2, rg=True)]
    assert gradgradcheck(lambda a, b: eager.einsum("ij,jk->ik", a, b), ts)
    assert gradgradcheck(lambda a: eager.einsum("ii->i", a), [_t(3, 3, rg=True)])


def test_einsum_diagonal_ignores_off_diagonal_inf():
    x = eager.tensor([[1.0, np.inf], [np.nan, 2.0]])
    assert eager.einsum("ii->i", x).tolist() == [1.0, 2.0]


def test_einsum_int_and_dtype_errors():
    li = eager.ones(3, dtype=eager.int64)
    assert eager.einsum("i->", li).item() == 3
    with pytest.raises(RuntimeError, match="expected scalar type Float but found Double"):
        eager.einsum("i,i", eager.zeros(3), eager.zeros(3, dtype=eager.float64))


@pytest.mark.parametrize(
    "eq,shapes,exc,msg",
    [
        ("ij,jk->ik", [(2, 3)], RuntimeError, "fewer operands were provided than specified"),
        (
            "ij->ik",
            [(2, 3)],
            RuntimeError,
            "output subscript k does not appear in the equation for any input operand",
        ),
        ("ij,jk->ik", [(2, 3), (3, 4), (3, 4)], RuntimeError, "more operands were provided"),
        (
            "i1,jk->ik",
            [(2, 3), (3, 4)],
            RuntimeError,
            r"invalid subscript given at index 1 in the equation string, subscripts must be in \[a-zA-Z\]",
        ),
        (
            "ijk,jk->ik",
            [(2, 3), (3, 4)],
            RuntimeError,
            r"the number of subscripts in the equation \(3\) does not match the number of "
            r"dimensions \(2\) for operand 0 and no ellipsis was given",
        ),
        ("ij,jk->iik", [(2, 3), (3, 4)], RuntimeError, "output subscript i appears more than once"),
        (
            "ij,jk->i.k",
            [(2, 3), (3, 4)],
            RuntimeError,
            "found '.' for output that is not part of any ellipsis",
        ),
        (
            "..ij",
            [(2, 3)],
            RuntimeError,
            "found '.' for operand 0 that is not part of any ellipsis",
        ),
        (
            "ii->i",
            [(3, 4)],
            RuntimeError,
            "subscript i is repeated for operand 0 but the sizes don't match, 4 != 3",
        ),
        (
            "ij,jk->ik",
            [(2, 3), (4, 4)],
            RuntimeError,
            "subscript j has size 4 for operand 1 which does not broadcast with previously seen size 3",
        ),
        ("i,i", [(2,), (3,)], RuntimeError, "subscript i has size 3 for operand 1"),
    ],
)
def test_einsum_errors(eq, shapes, exc, msg):
    with pytest.raises(exc, match=msg):
        eager.einsum(eq, *[eager.zeros(*s) for s in shapes])


def test_einsum_argument_errors():
    with pytest.raises(ValueError, match="must specify the equation string"):
        eager.einsum("ij")
    with pytest.raises(TypeError, match="expected Tensor as element 1 in argument 1, but got int"):
        eager.einsum("ij,jk->ik", eager.zeros(2, 3), 3)


def test_tensordot():
    a, b = _r(2, 3, 4, seed=1), _r(3, 4, 5, seed=2)
    got = eager.tensordot(eager.tensor(a), eager.tensor(b), dims=2)
    np.testing.assert_allclose(got.detach().numpy(), np.tensordot(a, b, axes=2), rtol=1e-12)
    got = eager.tensordot(eager.tensor(a), eager.tensor(b), dims=([1, 2], [0, 1]))
    np.testing.assert_allclose(
        got.detach().numpy(), np.tensordot(a, b, axes=([1, 2], [0, 1])), rtol=1e-12
    )
    got = eager.tensordot(eager.tensor(a), eager.tensor(b), dims=0)
    np.testing.assert_allclose(got.detach().numpy(), np.tensordot(a, b, axes=0), rtol=1e-12)


# --- against PyTorch ------------------------------------------------------------------------


def _torch_or_skip():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("eq,shapes", EINSUM_CASES)
def test_einsum_matches_torch(eq, shapes):
    torch = _torch_or_skip()
    arrays = [_r(*s, seed=k) for k, s in enumerate(shapes)]
    want = torch.einsum(eq, *[torch.tensor(a, requires_grad=True) for a in arrays])
    ts = [eager.tensor(a, requires_grad=True) for a in arrays]
    got = eager.einsum(eq, *ts)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "eq,shapes",
    [
        ("ij,jk->ik", [(2, 3)]),
        ("ij->ik", [(2, 3)]),
        ("i1,jk->ik", [(2, 3), (3, 4)]),
        ("ij,jk->iik", [(2, 3), (3, 4)]),
        ("ii->i", [(3, 4)]),
        ("ij,jk->ik", [(2, 3), (4, 4)]),
        ("..ij", [(2, 3)]),
        ("ij,jk->i.k", [(2, 3), (3, 4)]),
        ("i,i", [(2,), (3,)]),
        ("ijk,jk->ik", [(2, 3), (3, 4)]),
    ],
)
def test_einsum_errors_match_torch(eq, shapes):
    torch = _torch_or_skip()
    with pytest.raises(RuntimeError) as want:
        torch.einsum(eq, *[torch.zeros(*s) for s in shapes])
    with pytest.raises(RuntimeError) as got:
        eager.einsum(eq, *[eager.zeros(*s) for s in shapes])
    assert str(got.value).split("\n")[0] == str(want.value).split("\n")[0]


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2.0), (0, 1)])
@pytest.mark.parametrize("ishape", [(4,), (3, 4), (3, 1), ()])
def test_addmm_matches_torch(beta, alpha, ishape):
    torch = _torch_or_skip()
    i, a, b = _r(*ishape, seed=1), _r(3, 5, seed=2), _r(5, 4, seed=3)
    if beta == 0 and i.ndim:
        i[...] = np.nan
    tt = [torch.tensor(x, requires_grad=True) for x in (i, a, b)]
    et = [eager.tensor(x, requires_grad=True) for x in (i, a, b)]
    want = torch.addmm(*tt, beta=beta, alpha=alpha)
    got = eager.addmm(*et, beta=beta, alpha=alpha)
    assert got.grad_fn.name() == want.grad_fn.name()
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12)
    g = _r(3, 4, seed=9)
    want.backward(torch.tensor(g))
    got.backward(eager.tensor(g))
    for e, t in zip(et, tt):
        np.testing.assert_allclose(e.grad.numpy(), t.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_linear_grad_fn_matches_torch():
    torch = _torch_or_skip()
    for xs, bias in [((5, 3), True), ((5, 3), False)]:
        want = torch.nn.functional.linear(
            torch.zeros(*xs, requires_grad=True),
            torch.zeros(4, 3),
            torch.zeros(4) if bias else None,
        )
        got = F.linear(
            eager.zeros(*xs, requires_grad=True),
            eager.zeros(4, 3),
            eager.zeros(4) if bias else None,
        )
        assert got.grad_fn.name() == want.grad_fn.name()
