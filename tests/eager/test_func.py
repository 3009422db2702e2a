"""eager.func: grad, grad_and_value, vjp, jvp, jacrev, jacfwd, hessian, vmap and
functional_call -- values against finite differences (float64), composition, pytrees,
argnums, has_aux, 0-d and size-0 inputs, grad-mode behaviour, error messages; and a
differential run against torch.func when PyTorch is importable."""

from __future__ import annotations

import numpy as np
import pytest

import eager
import eager.nn as nn
from eager import func as F

D = eager.float64


def t(a):
    return eager.tensor(np.asarray(a, dtype=np.float64))


def rnd(*shape, seed=0):
    return t(np.random.default_rng(seed).standard_normal(shape))


def close(a, b, tol=1e-6):
    a = a.detach().numpy() if isinstance(a, eager.Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, eager.Tensor) else np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def fd_grad(f, x, eps=1e-6):
    """Central differences of a scalar eager function at numpy x."""
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[k] += eps
        xm[k] -= eps
        g[k] = (f(t(xp)).item() - f(t(xm)).item()) / (2 * eps)
    return g


def fd_jac(f, x, eps=1e-6):
    x = np.array(x, dtype=np.float64)
    y0 = f(t(x)).numpy()
    J = np.zeros(y0.shape + x.shape)
    for k in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[k] += eps
        xm[k] -= eps
        J[(...,) + k] = (f(t(xp)).numpy() - f(t(xm)).numpy()) / (2 * eps)
    return J


def f_scalar(x):
    return (x.sin() * x.exp()).sum() + (x**3).sum()


# --- grad ------------------------------------------------------------------------------------


def test_grad_matches_finite_differences():
    x = rnd(2, 3)
    close(F.grad(f_scalar)(x), fd_grad(f_scalar, x.numpy()))


def test_grad_argnums_and_pytrees():
    x, y = rnd(3, seed=1), rnd(3, seed=2)

    def f(a, b):
        return (a * b.sin()).sum()

    gx, gy = F.grad(f, argnums=(0, 1))(x, y)
    close(gx, y.sin())
    close(gy, x * y.cos())
    close(F.grad(f, argnums=-1)(x, y), x * y.cos())
    params = {"w": rnd(2, 3, seed=3), "b": [rnd(2, seed=4), rnd(2, seed=5)]}
    inp = rnd(3, seed=6)

    def g(p, v):
        return ((p["w"] @ v + p["b"][0]) * p["b"][1]).sum()

    gp = F.grad(g)(params, inp)
    assert set(gp) == {"w", "b"} and isinstance(gp["b"], list) and len(gp["b"]) == 2
    close(gp["b"][0], params["b"][1])
    close(gp["b"][1], params["w"] @ inp + params["b"][0])
    close(gp["w"], np.outer(params["b"][1].numpy(), inp.numpy()))


def test_grad_has_aux_and_grad_and_value():
    x = rnd(3, seed=7)
    g, aux = F.grad(lambda a: ((a**2).sum(), {"double": a * 2}), has_aux=True)(x)
    close(g, 2 * x)
    close(aux["double"], 2 * x)
    assert not aux["double"].requires_grad
    g, v = F.grad_and_value(f_scalar)(x)
    close(v, f_scalar(x))
    close(g, fd_grad(f_scalar, x.numpy()))
    g, (v, aux) = F.grad_and_value(lambda a: ((a**2).sum(), 7), has_aux=True)(x)
    assert aux == 7


def test_grad_0d_size0_and_unused():
    s = t(0.3)
    g = F.grad(lambda a: a.sin())(s)
    assert tuple(g.shape) == ()
    close(g, np.cos(0.3))
    e = eager.zeros(0, dtype=D)
    assert tuple(F.grad(lambda a: a.sum())(e).shape) == (0,)
    g = F.grad(lambda a, b: (b**2).sum())(rnd(2), rnd(2))
    close(g, np.zeros(2))
    assert not g.requires_grad


def test_grad_errors():
    x = rnd(3)
    with pytest.raises(RuntimeError, match="Expected f\\(\\*args\\) to return a scalar Tensor, got tensor with 1 dims"):
        F.grad(lambda a: a**2)(x)
    with pytest.raises(RuntimeError, match="Expected f\\(\\*args\\) to return a Tensor, got <class 'float'>"):
        F.grad(lambda a: 3.0)(x)
    with pytest.raises(RuntimeError, match="Got argnum=2, but only 1 positional inputs"):
        F.grad(f_scalar, argnums=2)(x)
    with pytest.raises(RuntimeError, match="argnums must be non-empty"):
        F.grad(f_scalar, argnums=())(x)
    with pytest.raises(RuntimeError, match="argnums must be int or Tuple"):
        F.grad(f_scalar, argnums=1.0)(x)
    with pytest.raises(RuntimeError, match="argnums elements must be unique"):
        F.grad(f_scalar, argnums=(0, 0))(x)
    with pytest.raises(RuntimeError, match="should be a tuple: \\(output, aux\\)"):
        F.grad(f_scalar, has_aux=True)(x)
    with pytest.raises(ValueError, match="Thing passed to transform API must be Tensor"):
        F.grad(f_scalar)(3.0)
    with pytest.raises(RuntimeError, match="only Tensors of floating point dtype"):
        F.grad(lambda a: a.sum())(eager.arange(3))


def test_grad_mode_and_no_leaks():
    x = rnd(3, seed=8).requires_grad_()
    w = rnd(3, seed=9).requires_grad_()
    g = F.grad(lambda a: (a**3 * w).sum())(x)
    assert g.requires_grad  # depends on x and w, which require grad outside
    (gg,) = eager.autograd.grad(g.sum(), x)
    close(gg, 6 * x * w)
    assert x.grad is None and w.grad is None
    with eager.no_grad():
        g = F.grad(lambda a: (a**3).sum())(x)
    assert not g.requires_grad
    close(g, 3 * x**2)
    # inputs that do not require grad: no history, unless a closed-over tensor does
    z = rnd(3, seed=10)
    assert not F.grad(lambda a: (a**3).sum())(z).requires_grad
    assert F.grad(lambda a: (a * w).sum())(z).requires_grad
    # a function that turns grad off inside: gradient zero, as PyTorch
    with eager.no_grad():
        pass


# --- composition ----------------------------------------------------------------------------


def test_grad_of_grad():
    s = t(0.8)
    close(F.grad(F.grad(lambda a: a**4))(s), 12 * 0.8**2)
    close(F.grad(F.grad(F.grad(lambda a: a.sin())))(s), -np.cos(0.8))
    x = rnd(3, seed=11)
    close(F.grad(lambda a: F.grad(f_scalar)(a).sum())(x), fd_grad(lambda a: F.grad(f_scalar)(a).sum(), x.numpy()))


def test_hessian_and_jac_compositions():
    x = rnd(3, seed=12)
    H = F.hessian(f_scalar)(x)
    ref = fd_jac(F.grad(f_scalar), x.numpy())
    close(H, ref, tol=1e-5)
    close(F.jacrev(F.jacrev(f_scalar))(x), ref, tol=1e-5)
    close(F.jacrev(F.jacfwd(f_scalar))(x), ref, tol=1e-5)
    close(F.jacfwd(F.jacfwd(f_scalar))(x), ref, tol=1e-5)
    close(F.jacfwd(F.grad(f_scalar))(x), ref, tol=1e-5)


def test_per_example_gradients():
    model = nn.Linear(3, 2).double()
    params = {k: v.detach() for k, v in model.named_parameters()}
    xs, ys = rnd(5, 3, seed=13), rnd(5, 2, seed=14)

    def loss(p, x, y):
        out = F.functional_call(model, p, (x.unsqueeze(0),))
        return ((out - y.unsqueeze(0)) ** 2).mean()

    per = F.vmap(F.grad(loss), in_dims=(None, 0, 0))(params, xs, ys)
    assert tuple(per["weight"].shape) == (5, 2, 3) and tuple(per["bias"].shape) == (5, 2)
    for i in range(5):
        m = nn.Linear(3, 2).double()
        with eager.no_grad():
            m.weight.copy_(model.weight)
            m.bias.copy_(model.bias)
        ((m(xs[i : i + 1]) - ys[i : i + 1]) ** 2).mean().backward()
        close(per["weight"][i], m.weight.grad, tol=1e-12)
        close(per["bias"][i], m.bias.grad, tol=1e-12)
    assert model.weight.grad is None


def test_grad_of_vmap_and_vmap_of_jacrev():
    x = rnd(4, 3, seed=15)
    g = F.grad(lambda a: F.vmap(lambda r: (r.sin() * r).sum())(a).sum())(x)
    close(g, x.sin() + x * x.cos())
    J = F.vmap(F.jacrev(lambda r: r.sin()))(x)
    assert tuple(J.shape) == (4, 3, 3)
    for i in range(4):
        close(J[i], np.diag(np.cos(x[i].numpy())))


# --- vjp, jvp --------------------------------------------------------------------------------


def test_vjp_and_jvp_values():
    x, y = rnd(3, seed=16), rnd(3, seed=17)

    def f(a, b):
        return {"p": a * b.exp(), "q": (a**2).sum()}

    out, vjp_fn = F.vjp(f, x, y)
    ct = {"p": rnd(3, seed=18), "q": t(0.5)}
    gx, gy = vjp_fn(ct)
    close(gx, ct["p"] * y.exp() + 2 * 0.5 * x)
    close(gy, ct["p"] * x * y.exp())
    gx2, _ = vjp_fn(ct)  # callable again
    close(gx2, gx)
    tx, ty = rnd(3, seed=19), rnd(3, seed=20)
    out, jv = F.jvp(f, (x, y), (tx, ty))
    close(jv["p"], tx * y.exp() + x * y.exp() * ty)
    close(jv["q"], (2 * x * tx).sum())
    out, jv, aux = F.jvp(lambda a: (a.sin(), a.cos()), (x,), (tx,), has_aux=True)
    close(jv, x.cos() * tx)
    close(aux, x.cos())
    out, fn, aux = F.vjp(lambda a: (a.sin(), 3), x, has_aux=True)
    assert aux == 3


def test_vjp_jvp_errors():
    x = rnd(3)
    _, fn = F.vjp(lambda a: a**2, x)
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        fn(eager.ones(2, dtype=D))
    with pytest.raises(RuntimeError, match="Expected pytree structure of cotangents"):
        fn((eager.ones(3, dtype=D),))
    with pytest.raises(RuntimeError, match="Expected primals to be a tuple"):
        F.jvp(lambda a: a, x, x)
    with pytest.raises(RuntimeError, match="Expected primals and tangents to have the same python structure"):
        F.jvp(lambda a: a, (x,), (x, x))
    with pytest.raises(RuntimeError, match="Trying to set a forward gradient that has a different size"):
        F.jvp(lambda a: a, (x,), (eager.ones(2, dtype=D),))
    with pytest.raises(RuntimeError, match="expected f\\(\\*primals\\) to return only tensors"):
        F.vjp(lambda a: 3.0, x)
    with pytest.raises(RuntimeError, match="expected f\\(\\*primals\\) to return only tensors"):
        F.jvp(lambda a: (a, 1), (x,), (x,))


# --- jacrev, jacfwd --------------------------------------------------------------------------


@pytest.mark.parametrize("jac", [F.jacrev, F.jacfwd], ids=["jacrev", "jacfwd"])
def test_jacobians(jac):
    x = rnd(2, 3, seed=21)

    def f(a):
        return (a.exp() @ a.t()).tanh()

    close(jac(f)(x), fd_jac(f, x.numpy()))
    y = rnd(3, seed=22)
    out = jac(lambda a, b: {"u": a * b, "v": (a * b).sum(1)}, argnums=(0, 1))(x, y)
    assert set(out) == {"u", "v"} and isinstance(out["u"], tuple)
    assert tuple(out["u"][0].shape) == (2, 3, 2, 3) and tuple(out["v"][1].shape) == (2, 3)
    close(out["v"][1], x)
    j = jac(lambda d: d["x"] * 2)({"x": rnd(2)})
    assert isinstance(j, dict) and tuple(j["x"].shape) == (2, 2)
    # 0-d and size-0
    assert tuple(jac(lambda a: a * 2)(t(1.0)).shape) == ()
    assert tuple(jac(lambda a: a * 2)(eager.zeros(0, dtype=D)).shape) == (0, 0)
    assert tuple(jac(lambda a: a.sum())(eager.zeros(0, dtype=D)).shape) == (0,)
    j, aux = jac(lambda a: (a.sin(), a.cos()), has_aux=True)(y)
    close(j, np.diag(np.cos(y.numpy())))
    close(aux, y.cos())


# --- vmap ------------------------------------------------------------------------------------


def test_vmap_dims():
    a, b = rnd(4, 3, seed=23), rnd(3, 4, seed=24)
    r = F.vmap(lambda u, v: u * v, in_dims=(0, 1))(a, b)
    close(r, a * b.t())
    r = F.vmap(lambda u, v: u * v, in_dims=(0, None))(a, b[:, 0])
    close(r, a * b[:, 0])
    r = F.vmap(lambda u: u.sum(), in_dims=-1)(b)
    close(r, b.sum(0))
    r = F.vmap(lambda u: u * 2, out_dims=1)(a)
    close(r, (a * 2).t())
    r = F.vmap(lambda u: u * 2, out_dims=-1)(a)
    close(r, (a * 2).t())
    r = F.vmap(lambda d: d["x"] + d["y"][0], in_dims=({"x": 1, "y": (0,)},))({"x": b, "y": (a,)})
    close(r, b.t() + a)
    r = F.vmap(lambda u: (u.sum(), u * 2), out_dims=(0, None))(eager.ones(3, 2, dtype=D))
    close(r[0], np.full(3, 2.0))
    close(r[1], np.full(2, 2.0))
    r = F.vmap(lambda u, k=None: u * k)(a, k=t(3.0))
    close(r, a * 3)
    r = F.vmap(F.vmap(lambda s: s * 2))(a)
    close(r, a * 2)
    r = F.vmap(lambda u: u * 2)(eager.zeros(0, 3, dtype=D))
    assert tuple(r.shape) == (0, 3)
    r = F.vmap(lambda u: u.sum(), out_dims=0)(eager.zeros(0, 3, dtype=D))
    assert tuple(r.shape) == (0,)


def test_vmap_errors():
    a = rnd(2, 3)
    with pytest.raises(ValueError, match="vmap: Expected all tensors to have the same size in the mapped dimension, got sizes \\[2, 3\\] for the mapped dimension"):
        F.vmap(lambda u, v: u + v)(a, rnd(3, 3))
    with pytest.raises(ValueError, match="Got in_dim=2 for some input, but that input is a Tensor of dimensionality 2"):
        F.vmap(lambda u: u, in_dims=2)(a)
    with pytest.raises(ValueError, match="in_dims is not compatible with the structure of `inputs`"):
        F.vmap(lambda u, v: u, in_dims=(0,))(a, a)
    with pytest.raises(ValueError, match="expected `in_dims` to be int or a \\(potentially nested\\) tuple"):
        F.vmap(lambda u: u, in_dims=[0])(a)
    with pytest.raises(ValueError, match="must only return Tensors, got type <class 'int'>"):
        F.vmap(lambda u: 3)(a)
    with pytest.raises(ValueError, match="can not return a BatchedTensor when out_dim is None"):
        F.vmap(lambda u: u, out_dims=None)(a)
    with pytest.raises(ValueError, match="We cannot vmap over non-Tensor arguments"):
        F.vmap(lambda u: u)(3.0)
    with pytest.raises(ValueError, match="Expected at least one Tensor to vmap over"):
        F.vmap(lambda u: u, in_dims=(None,))(a)
    with pytest.raises(ValueError, match="got no inputs"):
        F.vmap(lambda: 1)()
    with pytest.raises(RuntimeError, match="Only allowed values for randomness"):
        F.vmap(lambda u: u, randomness="x")
    with pytest.raises(ValueError, match="chunk_size should be None or greater than 0"):
        F.vmap(lambda u: u, chunk_size=0)
    with pytest.raises(ValueError, match="out_dims is not compatible with the structure of `outputs`"):
        F.vmap(lambda u: (u, u), out_dims=(0, 1, 2))(a)
    with pytest.raises(IndexError, match="Dimension out of range"):
        F.vmap(lambda u: u, out_dims=3)(a)


def test_vmap_randomness():
    a = eager.zeros(3, 2, dtype=D)
    eager.manual_seed(0)
    with pytest.raises(RuntimeError, match="called random operation while in randomness error mode"):
        F.vmap(lambda u: u + eager.randn(2, dtype=D))(a)
    eager.manual_seed(0)
    same = F.vmap(lambda u: u + eager.randn(2, dtype=D), randomness="same")(a)
    close(same[0], same[1])
    close(same[0], same[2])
    diff = F.vmap(lambda u: u + eager.randn(2, dtype=D), randomness="different")(a)
    assert not np.allclose(diff[0].numpy(), diff[1].numpy())


# --- functional_call ----------------------------------------------------------------------------


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(2, 2)
        self.l2 = nn.Linear(2, 2)
        self.l2.weight = self.l1.weight
        self.register_buffer("b", eager.zeros(2))

    def forward(self, x):
        return self.l2(self.l1(x)) + self.b


def test_functional_call_substitutes_and_restores():
    m = Tied().double()
    w0, b0 = m.l1.weight, m.b
    x = eager.ones(1, 2, dtype=D)
    W = eager.eye(2, dtype=D)
    z = eager.zeros(2, dtype=D)
    out = F.functional_call(m, {"l1.weight": W, "l1.bias": z, "l2.bias": z, "b": z + 1}, (x,))
    close(out, np.full((1, 2), 2.0))  # l2.weight follows l1.weight (tied)
    assert m.l1.weight is w0 and m.l2.weight is w0 and m.b is b0
    out = F.functional_call(m, {"l1.weight": W, "l1.bias": z, "l2.bias": z}, (x,), tie_weights=False)
    assert m.l2.weight is w0
    out = F.functional_call(m, ({"l1.weight": W}, {"l1.bias": z}), x)
    out2 = F.functional_call(m, {}, (), {"x": x})
    close(out2, m(x))
    with pytest.raises(ValueError, match="which are tied"):
        F.functional_call(m, {"l1.weight": W, "l2.weight": W * 2}, (x,))
    with pytest.raises(RuntimeError, match="Missing key\\(s\\): 'b', 'l1.bias', 'l2.bias'."):
        F.functional_call(m, {"l1.weight": W}, (x,), strict=True)
    with pytest.raises(RuntimeError, match="Unexpected key\\(s\\): 'zz'."):
        F.functional_call(
            m, {"l1.weight": W, "zz": W, "l1.bias": z, "l2.bias": z, "b": z}, (x,), strict=True
        )
    with pytest.raises(ValueError, match="appeared in multiple dictionaries"):
        F.functional_call(m, ({"l1.weight": W}, {"l1.weight": W}), (x,))
    with pytest.raises(ValueError, match="Expected parameter_and_buffer_dicts to be a dict"):
        F.functional_call(m, 3, x)


def test_functional_call_restores_on_exception():
    class Boom(nn.Linear):
        def forward(self, x):
            raise ValueError("boom")

    e = Boom(2, 2)
    w0 = e.weight
    with pytest.raises(ValueError, match="boom"):
        F.functional_call(e, {"weight": eager.eye(2), "extra": eager.ones(1)}, eager.ones(1, 2))
    assert e.weight is w0 and "extra" not in e.__dict__


# --- differential against torch.func ---------------------------------------------------------


def _cases(T, TF):
    """(name, thunk) pairs built with the module T (eager or torch) and its func TF."""
    rng = np.random.default_rng(0)

    def r(*s):
        return T.tensor(rng.standard_normal(s), dtype=T.float64)

    x, y, m = r(3), r(3), r(4, 3)
    wr = r(3).requires_grad_()
    s = T.tensor(0.4, dtype=T.float64)
    return [
        ("grad", lambda: TF.grad(lambda a: (a.sin() * a).sum())(x)),
        ("grad_argnums", lambda: TF.grad(lambda a, b: (a * b.exp()).sum(), argnums=(0, 1))(x, y)),
        ("grad_dict", lambda: TF.grad(lambda d: (d["a"] * d["b"]).sum())({"a": x, "b": y})),
        ("grad_aux", lambda: TF.grad(lambda a: ((a**2).sum(), (a * 3, [a.sum()])), has_aux=True)(x)),
        ("grad_grad", lambda: TF.grad(TF.grad(lambda a: a**4))(s)),
        ("grad_and_value", lambda: TF.grad_and_value(lambda a: (a**2).sum())(x)),
        ("grad_size0", lambda: TF.grad(lambda a: a.sum())(T.zeros(0, dtype=T.float64))),
        ("jacrev", lambda: TF.jacrev(lambda a: a.sin() * a.sum())(x)),
        ("jacfwd", lambda: TF.jacfwd(lambda a: a.sin() * a.sum())(x)),
        ("jacrev_tuple", lambda: TF.jacrev(lambda a, b: (a * b, a.sum()), argnums=(0, 1))(x, y)),
        ("jacfwd_tuple", lambda: TF.jacfwd(lambda a, b: (a * b, a.sum()), argnums=(0, 1))(x, y)),
        ("jacrev_dict", lambda: TF.jacrev(lambda d: {"u": d["x"] * 2, "v": d["x"].sum()})({"x": x})),
        ("jacrev_0d", lambda: TF.jacrev(lambda a: a * 2)(s)),
        ("jacrev_size0", lambda: TF.jacrev(lambda a: a * 2)(T.zeros(0, dtype=T.float64))),
        ("jacfwd_size0", lambda: TF.jacfwd(lambda a: a * 2)(T.zeros(0, dtype=T.float64))),
        ("hessian", lambda: TF.hessian(lambda a: (a**3 * a.sin()).sum())(x)),
        ("jacrev_jacfwd", lambda: TF.jacrev(TF.jacfwd(lambda a: (a**3).sum()))(x)),
        ("vjp", lambda: (lambda o: (o[0], o[1](T.ones(3, dtype=T.float64))))(TF.vjp(lambda a: a.exp(), x))),
        ("vjp_tree", lambda: (lambda o: o[1]({"p": x, "q": s}))(TF.vjp(lambda a, b: {"p": a * b, "q": (a * b).sum()}, x, y))),
        ("jvp", lambda: TF.jvp(lambda a, b: a * b.exp(), (x, y), (y, x))),
        ("jvp_aux", lambda: TF.jvp(lambda a: (a.sin(), a.cos()), (x,), (y,), has_aux=True)),
        ("vmap", lambda: TF.vmap(lambda a, b: (a * b).sum())(m, m)),
        ("vmap_dims", lambda: TF.vmap(lambda a, b: a * b, in_dims=(1, None), out_dims=1)(m, r(4))),
        ("vmap_neg", lambda: TF.vmap(lambda a: a.sum(), in_dims=-1)(m)),
        ("vmap_grad", lambda: TF.vmap(TF.grad(lambda a: (a.sin() * a).sum()))(m)),
        ("vmap_jacrev", lambda: TF.vmap(TF.jacrev(lambda a: a.exp()))(m)),
        ("vmap_size0", lambda: TF.vmap(lambda a: a * 2)(T.zeros(0, 3, dtype=T.float64))),
        ("vmap_nested", lambda: TF.vmap(lambda d: d["x"] + d["y"][0], in_dims=({"x": 1, "y": (0,)},))({"x": m.t(), "y": (m,)})),
        # history: kept when it depends on a tensor requiring grad outside, else dropped
        ("grad_rg", lambda: TF.grad(lambda a: (a**3).sum())(r(3).requires_grad_())),
        ("grad_rg_linear", lambda: TF.grad(lambda a: (a * 2).sum())(r(3).requires_grad_())),
        ("grad_closure", lambda: TF.grad(lambda a: (a * wr).sum())(x)),
        ("grad_aux_rg", lambda: TF.grad(lambda a: ((a * 2).sum(), a * 2), has_aux=True)(r(3).requires_grad_())),
        ("grad_no_grad", lambda: _nograd(T, lambda: TF.grad(lambda a: (a**3).sum())(r(3).requires_grad_()))),
        ("jacrev_rg", lambda: TF.jacrev(lambda a: a**2)(r(3).requires_grad_())),
        ("jvp_rg", lambda: TF.jvp(lambda a: a**2, (r(3).requires_grad_(),), (y,))),
        ("vmap_rg", lambda: TF.vmap(lambda a: a * 2)(r(3, 2).requires_grad_())),
        ("vjp_rg", lambda: (lambda o: (o[0], o[1](y)))(TF.vjp(lambda a: a**2, r(3).requires_grad_()))),
        # errors
        ("e_grad_nonscalar", lambda: TF.grad(lambda a: a**2)(x)),
        ("e_grad_nontensor", lambda: TF.grad(lambda a: 3.0)(x)),
        ("e_argnum", lambda: TF.grad(lambda a: a.sum(), argnums=2)(x)),
        ("e_argnum_dup", lambda: TF.grad(lambda a: a.sum(), argnums=(0, 0))(x)),
        ("e_argnum_empty", lambda: TF.grad(lambda a: a.sum(), argnums=())(x)),
        ("e_aux", lambda: TF.grad(lambda a: a.sum(), has_aux=True)(x)),
        ("e_nontensor_arg", lambda: TF.grad(lambda a: a.sum())(3.0)),
        ("e_jvp_primals", lambda: TF.jvp(lambda a: a, x, x)),
        ("e_jvp_shape", lambda: TF.jvp(lambda a: a, (x,), (r(2),))),
        ("e_vjp_nontensor", lambda: TF.vjp(lambda a: 3.0, x)),
        ("e_vjp_ct_shape", lambda: TF.vjp(lambda a: a, x)[1](r(2))),
        ("e_vmap_sizes", lambda: TF.vmap(lambda a, b: a + b)(r(2, 3), r(3, 3))),
        ("e_vmap_indim", lambda: TF.vmap(lambda a: a, in_dims=2)(r(2, 3))),
        ("e_vmap_nontensor_out", lambda: TF.vmap(lambda a: 3)(r(2, 3))),
        ("e_vmap_outnone", lambda: TF.vmap(lambda a: a, out_dims=None)(r(2, 3))),
        ("e_vmap_nontensor_in", lambda: TF.vmap(lambda a: a)(3.0)),
        ("e_vmap_all_none", lambda: TF.vmap(lambda a, b: a, in_dims=(None, None))(x, x)),
        ("e_vmap_random", lambda: TF.vmap(lambda a: a + T.randn(3, dtype=T.float64))(r(2, 3))),
        ("e_vmap_randomness", lambda: TF.vmap(lambda a: a, randomness="x")(r(2, 3))),
        ("e_vmap_chunk", lambda: TF.vmap(lambda a: a, chunk_size=0)(r(2, 3))),
        ("e_vmap_indims_type", lambda: TF.vmap(lambda a: a, in_dims=0.5)(r(2, 3))),
    ]


def _nograd(T, thunk):
    with T.no_grad():
        return thunk()


def _run(thunk):
    try:
        return thunk()
    except Exception as e:  # noqa: BLE001
        return e


def _compare(a, b, torch, path="out"):
    if isinstance(b, Exception):
        assert isinstance(a, Exception), f"{path}: PyTorch raised {b!r}, eager returned {a!r}"
        assert type(a).__name__ == type(b).__name__, (a, b)
        # messages: the same up to the library name and TreeSpec's layout
        sa = str(a).replace("eager", "torch")
        sb = str(b).replace("\n", "").replace("  ", " ")
        head = sb.split("TreeSpec")[0].split(" has structure")[0]
        assert sa.startswith(head) or head.startswith(sa[: len(head)]), (sa, sb)
        return
    assert not isinstance(a, Exception), f"{path}: eager raised {a!r}"
    if isinstance(b, torch.Tensor):
        assert isinstance(a, eager.Tensor), (path, type(a))
        assert tuple(a.shape) == tuple(b.shape), (path, a.shape, b.shape)
        assert a.requires_grad == b.requires_grad, path
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)
        return
    assert type(a) is type(b), (path, type(a), type(b))
    if isinstance(b, dict):
        assert list(a) == list(b), path
        for k in b:
            _compare(a[k], b[k], torch, f"{path}[{k!r}]")
    elif isinstance(b, (tuple, list)):
        assert len(a) == len(b), path
        for i, (u, v) in enumerate(zip(a, b)):
            _compare(u, v, torch, f"{path}[{i}]")
    else:
        assert a == b, path


NAMES = [c[0] for c in _cases(eager, F)]


@pytest.mark.parametrize("name", NAMES)
def test_differential_torch(name):
    torch = pytest.importorskip("torch")
    import torch.func as TF

    a = _run(dict(_cases(eager, F))[name])
    b = _run(dict(_cases(torch, TF))[name])
    _compare(a, b, torch)


def test_differential_torch_functional_call_per_example():
    torch = pytest.importorskip("torch")
    import torch.func as TF

    rng = np.random.default_rng(1)
    W, bias = rng.standard_normal((2, 3)), rng.standard_normal(2)
    xs, ys = rng.standard_normal((4, 3)), rng.standard_normal((4, 2))

    def per_example(T, nnm, TF):
        model = nnm.Linear(3, 2).double()
        p = {"weight": T.tensor(W, dtype=T.float64), "bias": T.tensor(bias, dtype=T.float64)}

        def loss(p, x, y):
            return ((TF.functional_call(model, p, (x.unsqueeze(0),)) - y) ** 2).sum()

        return TF.vmap(TF.grad(loss), in_dims=(None, 0, 0))(
            p, T.tensor(xs, dtype=T.float64), T.tensor(ys, dtype=T.float64)
        )

    _compare(per_example(eager, nn, F), per_example(torch, torch.nn, TF), torch)
