"""Statistics in eager: softmax/log_softmax/logsumexp, var/std, norms, the numpy-style
aliases; special values, errors, gradients to second order; against real PyTorch."""

import warnings

import numpy as np
import pytest

import eager
from eager.autograd import gradcheck, gradgradcheck

INF = float("inf")
RNG = np.random.default_rng(11)


def _t(a, rg=True):
    return eager.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


# --- special values (no torch needed) ---------------------------------------------------

def test_logsumexp_infinities():
    x = eager.tensor([[-INF, -INF], [1.0, INF], [0.0, 1.0], [-INF, 2.0]])
    with np.errstate(all="ignore"):
        got = x.logsumexp(1).numpy()
    assert got[0] == -INF and got[1] == INF and got[3] == 2.0
    np.testing.assert_allclose(got[2], np.logaddexp(0.0, 1.0), rtol=1e-6)


def test_softmax_of_a_row_with_inf_is_nan_as_pytorch():
    x = eager.tensor([[1.0, INF], [-INF, -INF], [0.0, -INF]])
    with np.errstate(all="ignore"):
        s = x.softmax(1).numpy()
        ls = x.log_softmax(1).numpy()
    assert np.isnan(s[0]).all() and np.isnan(s[1]).all()
    np.testing.assert_array_equal(s[2], [1.0, 0.0])
    assert np.isnan(ls[0]).all() and np.isnan(ls[1]).all()
    assert ls[2][0] == 0.0 and ls[2][1] == -INF


def test_no_overflow_for_large_values():
    x = _t([[1000.0, 1001.0], [-1000.0, -1001.0]])
    np.testing.assert_allclose(x.logsumexp(1).detach().numpy(),
                               [1001 + np.log1p(np.exp(-1)), -1000 + np.log1p(np.exp(-1))])
    assert np.isfinite(x.softmax(1).detach().numpy()).all()
    assert np.isfinite(x.log_softmax(1).detach().numpy()).all()


def test_empty_and_0d():
    assert eager.zeros(0, 3).logsumexp(0).numpy().tolist() == [-INF] * 3
    assert tuple(eager.zeros(3, 0).softmax(1).shape) == (3, 0)
    assert eager.tensor(2.0).softmax(0).item() == 1.0
    assert eager.tensor(2.0).log_softmax(-1).item() == 0.0
    assert eager.tensor(2.0).logsumexp(0).item() == 2.0


def test_integer_inputs():
    assert eager.tensor([1, 2]).logsumexp(0).dtype == eager.float32
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        eager.tensor([1, 2]).softmax(0)
    with pytest.raises(RuntimeError, match="std and var only support floating point"):
        eager.tensor([1, 2]).var()
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor"):
        eager.tensor([1, 2]).norm()
    with pytest.raises(IndexError, match="out of range"):
        eager.ones(3, 2).softmax(2)


def test_var_degrees_of_freedom_warning_and_nan():
    with pytest.warns(UserWarning, match="degrees of freedom is <= 0"):
        assert np.isnan(eager.tensor([2.0]).var().item())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert eager.tensor([2.0]).var(correction=0).item() == 0.0


def test_aliases_axis_keepdims():
    x = eager.ones(2, 3)
    for name in ("sum", "mean", "amax", "amin", "var", "std"):
        assert tuple(getattr(x, name)(axis=1, keepdims=True).shape) == (2, 1), name
        assert tuple(getattr(eager, name)(x, axis=0).shape) == (3,), name


def test_module_functions_exist():
    x = _t(RNG.normal(size=(3, 4)))
    for name in ("softmax", "log_softmax", "logsumexp", "var", "std", "norm", "var_mean",
                 "std_mean", "count_nonzero"):
        assert callable(getattr(eager, name)), name
    assert eager.linalg.vector_norm(x).shape == ()
    assert eager.count_nonzero(eager.tensor([[0, 1], [2, 0]]), 0).tolist() == [1, 1]


# --- gradients to second order ----------------------------------------------------------------

CASES = [
    ("softmax", lambda x: x.softmax(1)),
    ("softmax0", lambda x: x.softmax(0)),
    ("log_softmax", lambda x: x.log_softmax(1)),
    ("logsumexp", lambda x: x.logsumexp(1)),
    ("logsumexp_all", lambda x: x.logsumexp((0, 1), keepdim=True)),
    ("var", lambda x: x.var(1)),
    ("var_c0", lambda x: x.var(0, correction=0, keepdim=True)),
    ("std", lambda x: x.std()),
    ("norm", lambda x: x.norm()),
    ("norm3", lambda x: x.norm(p=3, dim=1)),
    ("norm1", lambda x: x.norm(p=1, dim=0)),
    ("norm_inf", lambda x: x.norm(p=INF, dim=1)),
    ("vector_norm_half", lambda x: eager.linalg.vector_norm(x, 0.5, dim=1)),
]


@pytest.mark.parametrize("name, f", CASES, ids=[c[0] for c in CASES])
def test_gradcheck_and_gradgradcheck(name, f):
    x = _t(RNG.uniform(0.3, 2.0, size=(3, 4)) * RNG.choice([-1, 1], size=(3, 4)))
    assert gradcheck(f, (x,))
    if "inf" not in name:
        assert gradgradcheck(f, (x,))


# --- against real PyTorch ---------------------------------------------------------------------

torch_cases = [
    ("softmax", dict(dim=1)), ("softmax", dict(dim=-1)), ("log_softmax", dict(dim=0)),
    ("logsumexp", dict(dim=1)), ("logsumexp", dict(dim=(0, 2), keepdim=True)),
    ("var", {}), ("var", dict(dim=1)), ("var", dict(dim=(0, 2), keepdim=True)),
    ("var", dict(dim=1, unbiased=False)), ("var", dict(dim=1, correction=2)),
    ("std", {}), ("std", dict(dim=2, keepdim=True)), ("std", dict(dim=0, correction=0)),
    ("norm", {}), ("norm", dict(p=1)), ("norm", dict(p=3, dim=1)), ("norm", dict(p=INF)),
    ("norm", dict(p=-INF, dim=2)), ("norm", dict(p=0)), ("norm", dict(p="fro", dim=(0, 1))),
    ("norm", dict(p=2, dim=2, keepdim=True)), ("norm", dict(p=0.5)),
    ("var_mean", dict(dim=1)), ("std_mean", dict(dim=(0, 1), keepdim=True)),
    ("count_nonzero", dict(dim=1)), ("amax", dict(axis=1, keepdims=True)),
    ("sum", dict(axis=(0, 2), keepdims=True)), ("mean", dict(axis=1)),
]


@pytest.mark.parametrize("name, kw", torch_cases, ids=[f"{n}-{kw}" for n, kw in torch_cases])
def test_against_pytorch(name, kw):
    torch = pytest.importorskip("torch")
    a = RNG.normal(size=(2, 3, 4))
    a[0, 0, 0] = 0.0
    if name == "count_nonzero":
        a[1, 1] = 0.0
    xe, xt = _t(a), torch.tensor(a, requires_grad=True)
    oe, ot = getattr(eager, name)(xe, **kw), getattr(torch, name)(xt, **kw)
    oe = oe if isinstance(oe, tuple) else (oe,)
    ot = ot if isinstance(ot, tuple) else (ot,)
    for e, t in zip(oe, ot):
        np.testing.assert_allclose(e.detach().numpy(), t.detach().numpy(), rtol=1e-10, atol=1e-12)
        assert tuple(e.shape) == tuple(t.shape)
    if not ot[0].requires_grad:
        return
    gs = [RNG.normal(size=tuple(t.shape)) for t in ot]
    eager.autograd.backward([e for e in oe], [eager.tensor(g) for g in gs])
    torch.autograd.backward(list(ot), [torch.tensor(g) for g in gs])
    want = np.zeros_like(a) if xt.grad is None else xt.grad.numpy()  # p=0: None
    np.testing.assert_allclose(xe.grad.numpy(), want, rtol=1e-9, atol=1e-12)


def test_norm_gradient_at_zero_as_pytorch():
    torch = pytest.importorskip("torch")
    for a in ([0.0, 0.0, 3.0], [0.0, 0.0, 0.0]):
        for p in (0.5, 1, 2, 3, INF, -INF):
            xe, xt = _t(a), torch.tensor(a, requires_grad=True)
            eager.linalg.vector_norm(xe, p).backward()
            torch.linalg.vector_norm(xt, p).backward()
            np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), err_msg=f"{a} {p}")


def test_logsumexp_gradient_with_infinities_as_pytorch():
    torch = pytest.importorskip("torch")
    a = [[-INF, 0.0, 1.0], [2.0, -INF, -INF]]
    xe, xt = _t(a), torch.tensor(a, requires_grad=True)
    with np.errstate(all="ignore"):
        xe.logsumexp(1).sum().backward()
        xe2 = _t(a)
        xe2.softmax(1)[:, 0].sum().backward()
    xt.logsumexp(1).sum().backward()
    np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy())
    xt2 = torch.tensor(a, requires_grad=True)
    xt2.softmax(1)[:, 0].sum().backward()
    np.testing.assert_allclose(xe2.grad.numpy(), xt2.grad.numpy(), atol=1e-15)


def test_linalg_norm_and_errors():
    torch = pytest.importorskip("torch")
    a = RNG.normal(size=(3, 4))
    for kw in ({}, {"ord": "fro"}, {"ord": 3, "dim": 1}, {"dim": (0, 1)}):
        np.testing.assert_allclose(eager.linalg.norm(_t(a), **kw).detach().numpy(),
                                   torch.linalg.norm(torch.tensor(a), **kw).numpy())
    with pytest.raises(NotImplementedError, match="matrix norm"):
        eager.linalg.norm(_t(a), ord=2)
    with pytest.raises(NotImplementedError, match="nuc"):
        _t(a).norm(p="nuc")


# --- prod / cumsum / cumprod (primitives) ------------------------------------------------------

ZEROS = np.array([[1.5, -2.0, 0.0, 3.0, 0.5],      # one zero
                  [0.0, 2.0, 0.0, 1.0, -1.0],      # two zeros
                  [2.0, 3.0, -0.5, 1.25, 4.0],     # none
                  [0.0, 1.0, 2.0, 3.0, 4.0]])      # a leading zero

SCANS = [("prod", dict(dim=1)), ("prod", dict(dim=0, keepdim=True)), ("prod", {}),
         ("cumsum", dict(dim=1)), ("cumsum", dict(dim=0)), ("cumprod", dict(dim=1)),
         ("cumprod", dict(dim=0)), ("cumprod", dict(dim=-1))]


@pytest.mark.parametrize("name, kw", SCANS, ids=[f"{n}-{kw}" for n, kw in SCANS])
def test_scans_and_prod_against_pytorch_with_zeros(name, kw):
    torch = pytest.importorskip("torch")
    for a in (ZEROS, RNG.normal(size=(3, 4)), ZEROS[:, :0]):
        xe, xt = _t(a), torch.tensor(a, requires_grad=True)
        oe, ot = getattr(xe, name)(**kw), getattr(xt, name)(**kw)
        np.testing.assert_allclose(oe.detach().numpy(), ot.detach().numpy(), rtol=1e-13)
        g = RNG.normal(size=tuple(ot.shape))
        oe.backward(eager.tensor(g))
        ot.backward(torch.tensor(g))
        np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_scan_dtypes_and_names():
    torch = pytest.importorskip("torch")
    for name in ("cumsum", "cumprod", "prod"):
        for data in ([1, 2, 3], [True, False, True], [[1, 2], [3, 4]]):
            e, t = getattr(eager.tensor(data), name)(0), getattr(torch.tensor(data), name)(0)
            assert e.dtype.name == str(t.dtype).split(".")[1], (name, data)
            assert e.tolist() == t.tolist()
        e = getattr(eager.tensor([1.0, 2.0]), name)(0, dtype=eager.float64)
        assert e.dtype == eager.float64
    x = _t([1.0, 2.0])
    assert type(x.cumsum(0).grad_fn).__name__ == "CumsumBackward0"
    assert type(x.cumprod(0).grad_fn).__name__ == "CumprodBackward0"
    assert type(x.prod(0).grad_fn).__name__ == "ProdBackward1"
    assert type(x.prod().grad_fn).__name__ == "ProdBackward0"
    assert eager.tensor(3.0).cumsum(0).item() == 3.0
    assert tuple(eager.ones(2, 3).prod(axis=1, keepdims=True).shape) == (2, 1)
    with pytest.raises(IndexError, match="out of range"):
        eager.ones(2, 3).cumsum(2)


@pytest.mark.parametrize("f", [lambda x: x.prod(1), lambda x: x.prod(), lambda x: x.cumsum(0),
                               lambda x: x.cumprod(1)])
def test_scan_gradgradcheck(f):
    x = _t(RNG.uniform(0.5, 1.5, size=(3, 4)) * RNG.choice([-1, 1], size=(3, 4)))
    assert gradcheck(f, (x,))
    assert gradgradcheck(f, (x,))


def test_prod_and_cumprod_first_order_exact_with_zeros():
    x = _t(ZEROS)
    assert gradcheck(lambda x: x.prod(1), (x,))
    assert gradcheck(lambda x: x.cumprod(1), (x,))


# --- derivatives of every order with zeros (the VJPs divide by nothing) -------------------------

HIGHER = {
    "prod1": lambda x: x.prod(1),
    "prod0": lambda x: x.prod(0, keepdim=True),
    "prod_all": lambda x: x.prod(),
    "prod_3d": lambda x: x[:4].reshape(2, 2, 5)._op("prod", "ProdBackward1", axis=(0, 2),
                                                     keepdim=False),
    "cumprod1": lambda x: x.cumprod(1),
    "cumprod0": lambda x: x.cumprod(0),
    "cumprod_t": lambda x: x.t().cumprod(-1),
}
ZEROS4 = np.vstack([ZEROS, [[0.0, 0.0, 2.0, 0.0, 1.5]]])  # three zeros, a leading one


@pytest.mark.parametrize("name", sorted(HIGHER))
def test_prod_and_cumprod_second_order_exact_with_zeros(name):
    f = HIGHER[name]
    for a in (ZEROS4, ZEROS4[:, :1], ZEROS4[:1]):
        if name == "prod_3d" and a.shape != ZEROS4.shape:
            continue
        assert gradgradcheck(f, (_t(a),))


def _third(f, x, u, v, w):
    """w . d/dx (v . d/dx (u . df/dx)) by autograd with create_graph (f scalar)."""
    (g1,) = eager.autograd.grad(f(x), x, create_graph=True)
    (g2,) = eager.autograd.grad((g1 * u).sum(), x, create_graph=True)
    (g3,) = eager.autograd.grad((g2 * v).sum(), x)
    return float((g3 * w).sum())


def _second(f, a, u, v):
    x = _t(a)
    (g1,) = eager.autograd.grad(f(x), x, create_graph=True)
    (g2,) = eager.autograd.grad((g1 * u).sum(), x)
    return float((g2 * v).sum())


@pytest.mark.parametrize("name", sorted(HIGHER))
def test_prod_and_cumprod_third_order_vs_finite_differences(name):
    f0 = HIGHER[name]
    c = eager.tensor(RNG.normal(size=tuple(f0(_t(ZEROS4)).shape)))
    f = lambda x: (f0(x) * c).sum()  # noqa: E731
    u, v, w = (RNG.normal(size=ZEROS4.shape) for _ in range(3))
    got = _third(f, _t(ZEROS4), eager.tensor(u), eager.tensor(v), eager.tensor(w))
    h = 1e-5  # f is a polynomial: the central difference of its exact second order
    want = (_second(f, ZEROS4 + h * w, u, v) - _second(f, ZEROS4 - h * w, u, v)) / (2 * h)
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-8)


def test_third_order_where_three_zeros_meet():
    """The derivatives the old masked rules dropped, against their closed forms: along w at
    x = [0, 0, 0, 2], prod(x + t w) = t^3 w0 w1 w2 (2 + t w3), so d^3/dt^3 = 12 w0 w1 w2;
    for sum_k c_k cumprod(x + t w)_k it is 6 w0 w1 w2 (c2 + 2 c3)."""
    a = np.array([0.0, 0.0, 0.0, 2.0])
    w = RNG.normal(size=4)
    c = RNG.normal(size=4)
    wt, ct = eager.tensor(w), eager.tensor(c)
    got = _third(lambda x: x.prod(), _t(a), wt, wt, wt)
    np.testing.assert_allclose(got, 12 * w[0] * w[1] * w[2], rtol=1e-12)
    got = _third(lambda x: (x.cumprod(0) * ct).sum(), _t(a), wt, wt, wt)
    np.testing.assert_allclose(got, 6 * w[0] * w[1] * w[2] * (c[2] + 2 * c[3]), rtol=1e-12)


def test_linrec_is_internal_and_exact():
    from eager.surface import _dispatch

    a = RNG.normal(size=(2, 4))
    b = RNG.normal(size=(2, 4))
    s = _dispatch("linrec", "LinrecBackward0", [eager.tensor(a), eager.tensor(b)],
                  {"dim": 1, "reverse": False}).numpy()
    want = b.copy()
    for i in range(1, 4):
        want[:, i] = b[:, i] + a[:, i] * want[:, i - 1]
    np.testing.assert_array_equal(s, want)
    r = _dispatch("linrec", "LinrecBackward0", [eager.tensor(a), eager.tensor(b)],
                  {"dim": 1, "reverse": True}).numpy()
    want = b.copy()
    for i in range(2, -1, -1):
        want[:, i] = b[:, i] + a[:, i] * want[:, i + 1]
    np.testing.assert_array_equal(r, want)
    with pytest.raises(RuntimeError, match="same floating dtype"):
        _dispatch("linrec", "X", [eager.tensor(a), eager.tensor(b.astype(np.float32))],
                  {"dim": 1, "reverse": False})
    with pytest.raises(RuntimeError, match="same shape"):
        _dispatch("linrec", "X", [eager.tensor(a), eager.tensor(b[:1])],
                  {"dim": 1, "reverse": False})
