"""graphc's forward mode and Jacobians (graphc.forward): jvp, linearize, jacrev, jacfwd,
jacobian, hessian.

Forward mode is derived from the VJP rules (the double-VJP trick), so the checks are
independent routes to the same numbers:

* central finite differences (float64) of each op's *numpy forward* along the tangent,
  for every differentiable op over each of its samples, and of seeded random programs;
* the dot-product identity <w, J t> = <J^T w, t> against graphc's reverse mode;
* PyTorch's torch.func (jvp, jacrev, jacfwd, hessian) behind importorskip;
* each transform compiled vs traced inside graphc.compile, and composed with grad /
  vjp / itself; pytrees, argnums, has_aux, 0-d / size-0 / size-1 shapes, random
  functions, and the error messages.
"""
from __future__ import annotations

import numpy as np
import pytest

import eager
import graphc
from eager.ops import OPS
from eager.surface import _dispatch
from graphc import forward as F
from tests.graphc.test_autodiff import DIFF_OPS, PROGRAM_SEEDS, Program

EPS = 1e-6


def _rng(seed=0):
    return np.random.default_rng(seed)


def fd_jvp(f, xs, ts, eps=EPS):
    """Central difference of numpy ``f`` along the tangents (float64)."""
    hi = f(*[np.asarray(x + eps * t) for x, t in zip(xs, ts)])  # 0-d stays an array
    lo = f(*[np.asarray(x - eps * t) for x, t in zip(xs, ts)])
    return (np.asarray(hi, np.float64) - np.asarray(lo, np.float64)) / (2 * eps)


def close(a, b, rtol=1e-6, what=""):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    scale = max([1.0] + ([float(np.abs(b).max())] if b.size else []))
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale, err_msg=what)


# ---------------------------------------------------------------------------
# every differentiable op, every sample: traced jvp, run by the interpreter (no LLVM)


def _op_cases():
    return [
        pytest.param(n, k, id=f"{n}-{k}") for n in DIFF_OPS for k in range(len(OPS[n].samples()))
    ]


@pytest.mark.parametrize("name,k", _op_cases())
def test_op_jvp_equals_finite_differences_and_transposes_the_vjp(name, k):
    op = OPS[name]
    inputs, attrs = op.samples()[k]
    inputs = [np.asarray(a, np.float64) if np.asarray(a).dtype.kind == "f" else a for a in inputs]
    pos = [
        i
        for i, a in enumerate(inputs)
        if np.asarray(a).dtype.kind == "f" and i < len(op.vjp) and op.vjp[i] is not None
    ]
    rng = _rng(k)
    ts = [rng.standard_normal(np.shape(inputs[p])) for p in pos]
    out_ref = np.asarray(op.forward(*inputs, **attrs))
    w = rng.standard_normal(out_ref.shape)

    def call(fl):
        xs = list(inputs)
        for p, v in zip(pos, fl):
            xs[p] = v
        return xs

    def f(*fl):
        return _dispatch(name, "X", tuple(call(fl)), attrs)

    def both(xs, ts, w):
        y, ty = graphc.jvp(f, tuple(xs), tuple(ts))
        _, pull = graphc.vjp(f, *xs)
        return y, ty, pull(w)

    xs = [inputs[p] for p in pos]
    g = graphc.trace(both, xs, ts, w)
    res = graphc.interpret(g, *xs, *ts, w)
    y, ty, gs = res[0], res[1], res[2:]
    what = f"{name} sample {k}"
    close(y, out_ref, 1e-12, what)
    # a float32 result (cast) quantizes the function: difference over a wider step
    eps, rtol = (1e-2, 1e-3) if out_ref.dtype == np.float32 else (EPS, 1e-5)
    fd = fd_jvp(lambda *fl: op.forward(*call(fl), **attrs), xs, ts, eps)
    close(ty, fd, rtol, f"{what}: jvp vs finite differences")
    # <w, J t> == <J^T w, t>
    lhs = float((w * ty).sum())
    rhs = float(sum((gi * ti).sum() for gi, ti in zip(gs, ts)))
    tol = 1e-6 if out_ref.dtype == np.float32 else 1e-9
    assert abs(lhs - rhs) <= tol * max(1.0, abs(lhs)), (what, lhs, rhs)


@pytest.mark.parametrize("seed", PROGRAM_SEEDS[:12])
def test_random_program_jvp_and_jacfwd_equal_finite_differences(seed):
    prog = Program(seed, length=8 if seed % 3 else 14)
    xs = prog.inputs
    ts = [_rng(seed).standard_normal(np.shape(x)) for x in xs]
    g = graphc.trace(lambda xs, ts: graphc.jvp(prog.objective, tuple(xs), tuple(ts)), xs, ts)
    y, ty = graphc.interpret(g, *xs, *ts)
    close(y, prog.numeric(*xs), 1e-12, str(prog))
    close(ty, fd_jvp(prog.numeric, xs, ts), 1e-5, f"program {seed}:\n{prog}")
    # jacfwd (one jvp per input element) and jacrev agree: a scalar output's Jacobian is
    # its gradient
    nums = tuple(range(len(xs)))
    gj = graphc.trace(lambda *a: graphc.jacfwd(prog.objective, argnums=nums)(*a), *xs)
    gr = graphc.trace(lambda *a: graphc.grad(prog.objective, argnums=nums)(*a), *xs)
    for a, b in zip(graphc.interpret(gj, *xs), graphc.interpret(gr, *xs)):
        close(a, b, 1e-10, f"jacfwd vs grad, program {seed}")


# ---------------------------------------------------------------------------
# jvp: compiled, traced, structure


def mlp(params, x):
    h = (x @ params["w1"] + params["b1"]).tanh()
    return {"out": h @ params["w2"], "h": h}


def _mlp_args(dtype=np.float64):
    rng = _rng(1)
    p = {
        "w1": rng.standard_normal((3, 4)),
        "b1": rng.standard_normal(4),
        "w2": rng.standard_normal((4, 2)),
    }
    p = {k: v.astype(dtype) for k, v in p.items()}
    return p, rng.standard_normal((5, 3)).astype(dtype)


def np_mlp(p, x):
    h = np.tanh(x @ p["w1"] + p["b1"])
    return {"out": h @ p["w2"], "h": h}


def test_jvp_pytrees_against_finite_differences_compiled_and_traced():
    p, x = _mlp_args()
    rng = _rng(2)
    tp = {k: rng.standard_normal(v.shape) for k, v in p.items()}
    tx = rng.standard_normal(x.shape)
    y, ty = graphc.jvp(mlp, (p, x), (tp, tx))
    assert set(y) == {"out", "h"} and set(ty) == {"out", "h"}
    ref = np_mlp(p, x)
    for k in ("out", "h"):
        close(y[k], ref[k], 1e-12)
        fd = fd_jvp(
            lambda w1, b1, w2, x: np_mlp({"w1": w1, "b1": b1, "w2": w2}, x)[k],
            [p["w1"], p["b1"], p["w2"], x],
            [tp["w1"], tp["b1"], tp["w2"], tx],
        )
        close(ty[k], fd, 1e-6, k)

    @graphc.compile
    def inside(p, x, tp, tx):
        return graphc.jvp(mlp, (p, x), (tp, tx))

    y2, ty2 = inside(p, x, tp, tx)
    for k in ("out", "h"):
        close(y2[k], y[k], 1e-12)
        close(ty2[k], ty[k], 1e-12)


def test_jvp_list_primals_tensor_io_has_aux_and_cache():
    def f(a, b):
        return (a * b).sin(), {"n": 3, "c": a.cos()}

    a, b = eager.tensor([0.5, 1.5]), eager.tensor([2.0, -1.0])
    y, ty, aux = graphc.jvp(f, [a, b], [eager.ones(2), eager.zeros(2)], has_aux=True)
    assert isinstance(ty, eager.Tensor)
    assert aux["n"] == 3
    np.testing.assert_allclose(aux["c"].numpy(), np.cos(a.numpy()), rtol=1e-6)
    np.testing.assert_allclose(ty.numpy(), np.cos(a.numpy() * b.numpy()) * b.numpy(), rtol=1e-5)
    # one compile per (function, signature)
    for _ in range(3):
        graphc.jvp(f, (a, b), (a, b), has_aux=True)
    cf = F._JVP_CACHE[f][("jvp", True)]._graphc_compiled[0]
    assert cf.cache_info().traces == 1


def test_jvp_python_scalar_tangent_for_0d_primal_and_unused_output():
    def f(x, y):
        return x * 3.0, np.ones(2)

    y, ty = graphc.jvp(f, (np.array(2.0), np.array(1.0)), (1.0, np.array(0.5)))
    assert float(ty[0]) == 3.0
    np.testing.assert_array_equal(ty[1], np.zeros(2))


def test_jvp_zero_size_size_one_and_0d():
    def f(x):
        return (x.exp() * 2).sum(0)

    for shape in [(0, 3), (1, 1), (), (3, 0)]:
        x = _rng().standard_normal(shape)
        t = np.ones(shape)
        fn = (lambda x: x.exp() * 2) if shape == () else f
        npf = (lambda x: np.exp(x) * 2) if shape == () else (lambda x: (np.exp(x) * 2).sum(0))
        y, ty = graphc.jvp(fn, (x,), (t,))
        assert np.shape(ty) == np.shape(npf(x))
        close(ty, fd_jvp(npf, [x], [t]), 1e-6, str(shape))


def test_jvp_non_contiguous_inputs():
    x = _rng().standard_normal((4, 3)).T  # a transposed view
    t = _rng(1).standard_normal((4, 3))[::2].repeat(2, 0).T
    y, ty = graphc.jvp(lambda x: (x @ x.T).tanh(), (x,), (t,))
    close(ty, fd_jvp(lambda x: np.tanh(x @ x.T), [x], [t]), 1e-6)


def test_jvp_same_value_twice_and_dependent_primals_inside_a_trace():
    """Each primal is its own root: partials, not totals (also for grad)."""

    def f(a, b):
        return a * b * b

    @graphc.compile
    def g(x, t1, t2):
        _, same = graphc.jvp(f, (x, x), (t1, t2))
        _, dep = graphc.jvp(f, (x, 2 * x), (t1, t2))
        return same, dep, graphc.grad(lambda a, b: f(a, b).sum(), argnums=(0, 1))(x, 2 * x)

    x, t1, t2 = np.array([1.0, 2.0]), np.array([1.0, 0.0]), np.array([0.0, 1.0])
    same, dep, (ga, gb) = g(x, t1, t2)
    close(same, x * x * t1 + 2 * x * x * t2, 1e-12)
    b = 2 * x
    close(dep, b * b * t1 + 2 * x * b * t2, 1e-12)
    close(ga, b * b, 1e-12)
    close(gb, 2 * x * b, 1e-12)


# ---------------------------------------------------------------------------
# jvp errors


def f2(x, y):
    return x * y


def test_jvp_errors_name_the_argument():
    x = np.ones(3)
    with pytest.raises(TypeError, match="must be tuples or lists; found ndarray and ndarray"):
        graphc.jvp(f2, x, x)
    with pytest.raises(TypeError, match="same tree structure; 2 primal argument"):
        graphc.jvp(f2, (x, x), (x,))
    with pytest.raises(TypeError, match=r"argument 1 \(y\): the primal has structure"):
        graphc.jvp(f2, (x, {"a": x}), (x, [x]))
    with pytest.raises(ValueError, match=r"argument 1 \(y\): primal shape \[3\], tangent shape \[2\]"):
        graphc.jvp(f2, (x, x), (x, np.ones(2)))
    with pytest.raises(TypeError, match=r"dtypes differ for argument 0 \(x\): primal float64, tangent float32"):
        graphc.jvp(f2, (x, x), (x.astype(np.float32), x))
    with pytest.raises(TypeError, match=r"primal argument 1 \(y\) has dtype int64.*float0"):
        graphc.jvp(f2, (x, np.arange(3)), (x, np.arange(3)))
    with pytest.raises(TypeError, match=r"argument 0 \(x\) is a Python number"):
        graphc.jvp(lambda x: x * np.ones(2), (2.0,), (1.0,))
    with pytest.raises(TypeError, match=r"output\[1\] has dtype int64.*has_aux"):
        graphc.jvp(lambda x: (x, x.argmax()), (x,), (x,))
    with pytest.raises(TypeError, match="has_aux=True requires fn to return"):
        graphc.jvp(lambda x: x, (x,), (x,), has_aux=True)
    with pytest.raises(TypeError, match=r"output\['k'\] is str"):
        graphc.jvp(lambda x: {"k": "s", "v": x}, (x,), (x,))
    # the same errors inside a trace
    with pytest.raises(ValueError, match=r"argument 0 \(x\): primal shape \[3\], tangent shape \[1\]"):
        graphc.compile(lambda x: graphc.jvp(f2, (x, x), (x[:1], x)))(x)


def test_jvp_in_place_write_to_a_primal_is_refused_as_in_grad():
    def f(x):
        x.add_(1)
        return x

    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        graphc.jvp(f, (np.ones(2),), (np.ones(2),))


# ---------------------------------------------------------------------------
# linearize


def test_linearize_outside_and_inside_a_trace():
    f = lambda x, w: (x @ w).sin()  # noqa: E731
    rng = _rng(3)
    x, w = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    tx, tw = rng.standard_normal(x.shape), rng.standard_normal(w.shape)
    out, f_jvp = graphc.linearize(f, x, w)
    close(out, np.sin(x @ w), 1e-12)
    ref = fd_jvp(lambda x, w: np.sin(x @ w), [x, w], [tx, tw])
    close(f_jvp(tx, tw), ref, 1e-6)
    close(f_jvp(2 * tx, 2 * tw), 2 * ref, 1e-6)

    @graphc.compile
    def g(x, w, tx, tw):
        out, f_jvp = graphc.linearize(f, x, w)
        return out, f_jvp(tx, tw), f_jvp(tx, 0 * tw)

    o2, t1, t2 = g(x, w, tx, tw)
    close(t1, ref, 1e-6)
    close(t2, fd_jvp(lambda x: np.sin(x @ w), [x], [tx]), 1e-6)
    # has_aux, and the tangent checks
    out, f_jvp, aux = graphc.linearize(lambda x: (x.exp(), 7), x, has_aux=True)
    assert aux == 7
    close(f_jvp(tx), np.exp(x) * tx, 1e-12)
    with pytest.raises(ValueError, match="tangent shape"):
        f_jvp(tw)


def test_linearize_of_a_random_function_is_refused_outside_and_exact_inside():
    def f(x):
        return x * eager.rand(3, dtype=eager.float64)

    x = np.array([1.0, 2.0, 3.0])
    with pytest.raises(graphc.GraphcError, match="draws random numbers"):
        graphc.linearize(f, x)

    @graphc.compile
    def g(x, t):
        out, f_jvp = graphc.linearize(f, x)
        return out, f_jvp(t)

    out, tout = g(x, np.ones(3))
    close(tout, out / x, 1e-12)  # the same draw for the output and its tangent


# ---------------------------------------------------------------------------
# random functions: one trace, one draw; nothing silently mixes draws


def test_jvp_and_jacobians_of_a_random_function_use_one_draw_per_call():
    def f(x):
        return x * eager.rand(3, dtype=eager.float64)

    x = np.array([1.0, 2.0, 3.0])
    y, ty = graphc.jvp(f, (x,), (np.ones(3),))
    close(ty, y / x, 1e-12)
    y2, _ = graphc.jvp(f, (x,), (np.ones(3),))
    assert not np.allclose(y, y2)  # a fresh draw per call, as eager
    for jac in (graphc.jacrev(f), graphc.jacfwd(f), graphc.hessian(lambda x: f(x).sum())):
        J = jac(x)
        assert np.count_nonzero(J - np.diag(np.diag(J))) == 0
    # jacrev inside compile next to the forward: the same draw
    @graphc.compile
    def both(x):
        return f(x), graphc.jacrev(f)(x)

    y, J = both(x)
    # two calls of f in one trace are two draws (as eager): J is the Jacobian of the
    # second, not of y -- but each is exact for its own draw
    assert J.shape == (3, 3) and np.all(np.diag(J) >= 0) and np.all(np.diag(J) < 1)


# ---------------------------------------------------------------------------
# Jacobians: structure, argnums, has_aux, shapes


def test_jacobian_structure_is_jaxs():
    p, x = _mlp_args()
    J = graphc.jacrev(mlp)(p, x)
    Jf = graphc.jacfwd(mlp)(p, x)
    for JJ in (J, Jf):
        assert set(JJ) == {"out", "h"}
        for k, o in np_mlp(p, x).items():
            assert set(JJ[k]) == {"w1", "b1", "w2"}
            for name, v in p.items():
                assert JJ[k][name].shape == o.shape + v.shape
    for k in ("out", "h"):
        for name in p:
            close(J[k][name], Jf[k][name], 1e-10, f"{k}/{name}")
    # argnums tuple: each output leaf holds a tuple with one entry per argnum
    J2 = graphc.jacrev(mlp, argnums=(1, 0))(p, x)
    assert isinstance(J2["out"], tuple) and J2["out"][0].shape == (5, 2, 5, 3)
    close(J2["out"][1]["w2"], J["out"]["w2"], 1e-12)
    J3 = graphc.jacfwd(mlp, argnums=-1)(p, x)
    assert J3["h"].shape == (5, 4, 5, 3)
    close(J3["h"], J2["h"][0], 1e-10)
    assert graphc.jacobian(mlp, argnums=1)(p, x)["h"].shape == (5, 4, 5, 3)


def test_jacobians_against_finite_differences_with_has_aux():
    def f(x, y):
        z = (x * y).sin()
        return z, {"mean": z.mean()}

    x, y = _rng(4).standard_normal(3), _rng(5).standard_normal((2, 3))
    for jac in (graphc.jacrev, graphc.jacfwd):
        (jx, jy), aux = jac(f, argnums=(0, 1), has_aux=True)(x, y)
        close(aux["mean"], np.sin(x * y).mean(), 1e-12)
        assert jx.shape == (2, 3) + (3,) and jy.shape == (2, 3) + (2, 3)
        for k in range(x.size):
            e = np.zeros(3)
            e[k] = 1
            close(jx[..., k], fd_jvp(lambda x: np.sin(x * y), [x], [e]), 1e-6)
        e = np.zeros((2, 3))
        e[1, 2] = 1
        close(jy[..., 1, 2], fd_jvp(lambda y: np.sin(x * y), [y], [e]), 1e-6)


@pytest.mark.parametrize("kind", ["jacrev", "jacfwd", "hessian"])
@pytest.mark.parametrize("shape", [(), (1,), (0,), (2, 0), (1, 1)])
def test_jacobian_of_0d_size_0_and_size_1(kind, shape):
    f = lambda x: (x * x * x).sum() if kind == "hessian" else x * x * x  # noqa: E731
    x = np.full(shape, 0.5)
    J = getattr(graphc, kind)(f)(x)
    want = shape + shape if kind != "hessian" else shape + shape
    assert J.shape == want
    d = 6 * x if kind == "hessian" else 3 * x * x
    np.testing.assert_allclose(J.reshape(x.size, x.size), np.diag(d.reshape(-1)), rtol=1e-12)


def test_jacobian_dtypes_follow_jax():
    def f(x):
        return x.double().sin()

    x = np.ones(3, np.float32)
    assert graphc.jacrev(f)(x).dtype == np.float32  # the input's
    assert graphc.jacfwd(f)(x).dtype == np.float64  # the output's
    J = graphc.jacrev(lambda x: x.tanh())(x)
    assert J.dtype == np.float32
    np.testing.assert_allclose(np.diag(J), 1 - np.tanh(1.0) ** 2, rtol=1e-6)


def test_jacobian_errors():
    with pytest.raises(TypeError, match=r"argument 0 \(x\) has dtype int64"):
        graphc.jacfwd(lambda x: x * 2.0)(np.arange(3))
    with pytest.raises(TypeError, match=r"argument 0 \(x\) has dtype int64"):
        graphc.jacrev(lambda x: x * 2.0)(np.arange(3))
    with pytest.raises(TypeError, match="output has dtype int64"):
        graphc.jacrev(lambda x: x.argmax())(np.ones(3))
    with pytest.raises(ValueError, match="argnums 2 is out of range"):
        graphc.jacrev(lambda x, y: x, argnums=2)(np.ones(3), np.ones(3))
    with pytest.raises(TypeError, match="has_aux=True requires"):
        graphc.jacfwd(lambda x: x, has_aux=True)(np.ones(3))


def test_hessian_tuple_argnums_blocks():
    def f(x, y):
        return (x[:, None] * y).sin().sum() + (x**3).sum()

    x, y = _rng(6).standard_normal(2), _rng(7).standard_normal((2, 3))
    H = graphc.hessian(f, argnums=(0, 1))(x, y)
    assert H[0][0].shape == (2, 2) and H[0][1].shape == (2, 2, 3)
    assert H[1][0].shape == (2, 3, 2) and H[1][1].shape == (2, 3, 2, 3)
    close(H[0][1], np.moveaxis(H[1][0], -1, 0), 1e-10)  # symmetric
    # against finite differences of the gradient
    g = graphc.grad(f, argnums=(0, 1))
    for k in range(2):
        e = np.zeros(2)
        e[k] = 1
        gp, gm = g(x + EPS * e, y), g(x - EPS * e, y)
        close(H[0][0][:, k], (gp[0] - gm[0]) / (2 * EPS), 1e-5)
        close(H[1][0][..., k], (gp[1] - gm[1]) / (2 * EPS), 1e-5)


# ---------------------------------------------------------------------------
# composition


def sinexp(x):
    return (x.sin() * x.exp()).sum()


def np_hess_sinexp(x):
    return np.diag(2 * np.exp(x) * np.cos(x))


def test_compositions_agree():
    x, t = np.array([0.3, -0.7, 1.1]), np.array([1.0, -2.0, 0.5])
    H = np_hess_sinexp(x)
    close(graphc.hessian(sinexp)(x), H, 1e-12, "hessian")
    close(graphc.jvp(graphc.grad(sinexp), (x,), (t,))[1], H @ t, 1e-12, "jvp(grad)")
    close(graphc.grad(lambda x: graphc.jvp(sinexp, (x,), (t,))[1])(x), H @ t, 1e-12, "grad(jvp)")
    close(graphc.jacfwd(graphc.jacrev(sinexp))(x), H, 1e-12, "jacfwd(jacrev)")
    close(graphc.jacrev(graphc.jacfwd(sinexp))(x), H, 1e-12, "jacrev(jacfwd)")
    close(graphc.jacfwd(graphc.jacfwd(sinexp))(x), H, 1e-12, "jacfwd(jacfwd)")
    close(graphc.compile(graphc.hessian(sinexp))(x), H, 1e-12, "compile(hessian)")
    close(graphc.compile(lambda x: graphc.hessian(sinexp)(x))(x), H, 1e-12, "hessian in compile")
    J = graphc.compile(graphc.jacrev(lambda x: x.sin() * x.exp()))(x)
    close(J, np.diag(np.exp(x) * (np.sin(x) + np.cos(x))), 1e-12, "compile(jacrev)")
    # jvp of jvp: the second directional derivative t^T H t
    def d1(x):
        return graphc.jvp(sinexp, (x,), (t,))[1]

    close(graphc.jvp(d1, (x,), (t,))[1], t @ H @ t, 1e-12, "jvp(jvp)")
    # vjp of a jvp
    _, pull = graphc.vjp(d1, x)
    close(pull(np.array(1.0))[0], H @ t, 1e-12, "vjp(jvp)")
    # third order by mixing modes
    d3 = graphc.jacfwd(graphc.hessian(sinexp))(x)
    want = np.zeros((3, 3, 3))
    for i in range(3):
        want[i, i, i] = 2 * np.exp(x[i]) * (np.cos(x[i]) - np.sin(x[i]))
    close(d3, want, 1e-12, "jacfwd(hessian)")


def test_forward_is_computed_once_after_cse_and_dce():
    """jvp/jacrev/jacfwd/hessian trace the function once; CSE merges what the per-basis
    passes recompute and DCE removes the placeholder's pass."""
    x, w = _rng(8).standard_normal((3, 4)), _rng(9).standard_normal((4, 2))

    def f(x, w):
        return (x @ w).tanh()

    def count(fn, *args, op):
        text = graphc.compile(fn).ir(*args, stage="optimized")
        return text.count(f"= {op}(")

    assert count(f, x, w, op="tanh") == 1
    for fn, args in [
        (lambda x, w, tx, tw: graphc.jvp(f, (x, w), (tx, tw)), (x, w, x, w)),
        (graphc.jacrev(f, argnums=(0, 1)), (x, w)),
        (graphc.jacfwd(f, argnums=(0, 1)), (x, w)),
        (graphc.hessian(lambda x, w: f(x, w).sum()), (x, w)),
    ]:
        assert count(fn, *args, op="tanh") == 1
    # the jvp graph is a forward-mode pass: no placeholder (const zeros), two tangent
    # matmuls and the forward's one, nothing of the first reverse pass left
    text = graphc.compile(lambda x, w, tx, tw: graphc.jvp(f, (x, w), (tx, tw))).ir(
        x, w, x, w, stage="optimized"
    )
    assert text.count("= matmul(") == 3 and "transpose" not in text and "const" not in text, text


# ---------------------------------------------------------------------------
# PyTorch's torch.func


def test_against_torch_func():
    torch = pytest.importorskip("torch")
    from torch import func as tf

    def body(x, w):
        return ((x @ w).tanh() * x.sum(1, keepdim=True)).exp()

    def scalar(x, w):
        return body(x, w).sum().log()

    x, w = _rng(10).standard_normal((3, 4)), _rng(11).standard_normal((4, 2)) * 0.3
    tx, tw = _rng(12).standard_normal(x.shape), _rng(13).standard_normal(w.shape)
    T = torch.from_numpy
    _, ty = graphc.jvp(body, (x, w), (tx, tw))
    _, ty_t = tf.jvp(body, (T(x), T(w)), (T(tx), T(tw)))
    close(ty, ty_t.numpy(), 1e-10, "jvp")
    for ours, theirs in [(graphc.jacrev, tf.jacrev), (graphc.jacfwd, tf.jacfwd)]:
        a = ours(body, argnums=(0, 1))(x, w)
        b = theirs(body, argnums=(0, 1))(T(x), T(w))
        for u, v in zip(a, b):
            close(u, v.numpy(), 1e-10, ours.__name__)
    H = graphc.hessian(scalar, argnums=(0, 1))(x, w)
    Ht = tf.hessian(scalar, argnums=(0, 1))(T(x), T(w))
    for i in range(2):
        for j in range(2):
            close(H[i][j], Ht[i][j].numpy(), 1e-9, f"hessian[{i}][{j}]")


def test_jvp_edge_values_detach_repeated_and_constant_outputs():
    x, t = np.array([0.5, 1.5]), np.array([1.0, 2.0])
    # detach stops the tangent (JAX's stop_gradient)
    close(graphc.jvp(lambda y: y.detach() * y, (x,), (t,))[1], x * t, 1e-12)
    # the same output twice, the input itself, an output that does not depend on it
    ty = graphc.jvp(lambda y: (y, y, 2 * y, np.ones(2)), (x,), (t,))[1]
    for a, b in zip(ty, (t, t, 2 * t, np.zeros(2))):
        close(a, b, 1e-12)
    J = graphc.jacfwd(lambda y: (y.sum(), np.ones(2)))(x)
    close(J[0], np.ones(2), 1e-12)
    close(J[1], np.zeros((2, 2)), 1e-12)
    # a data-dependent choice: the tangent of the selected branch
    ty = graphc.jvp(lambda y: graphc.where(y > 1, y.exp(), y * y), (x,), (t,))[1]
    close(ty, [2 * 0.5 * 1.0, np.exp(1.5) * 2.0], 1e-12)


def test_grad_through_a_tangent_that_depends_on_the_primal():
    """d/dx sum(J(x) x) for y = x**3: J x = 3 x**3, so the gradient is 9 x**2."""
    x = np.array([0.5, 1.5, -2.0])
    g = graphc.grad(lambda x: graphc.jvp(lambda y: y**3, (x,), (x,))[1].sum())(x)
    close(g, 9 * x**2, 1e-12)
    H, aux = graphc.hessian(lambda y: ((y**3).sum(), y.sum()), has_aux=True)(x)
    close(H, np.diag(6 * x), 1e-12)
    close(aux, x.sum(), 1e-12)


def test_a_vjp_rule_that_cannot_be_transposed_is_refused_not_silently_zero(monkeypatch):
    """Forward mode differentiates the VJP rules w.r.t. their cotangent: a rule that
    detaches it, or is not linear in it, would give a wrong tangent; graphc refuses."""
    import dataclasses

    sin = OPS["sin"]
    x, t = np.array([0.3, 0.4]), np.ones(2)

    def traced_jvp():
        return graphc.trace(lambda x, t: graphc.jvp(lambda y: y.sin(), (x,), (t,)), x, t)

    monkeypatch.setitem(
        OPS, "sin", dataclasses.replace(sin, vjp=(lambda g, out, x: g.detach() * x.cos(),))
    )
    with pytest.raises(graphc.GraphcError, match="applies 'detach' to its cotangent"):
        traced_jvp()
    monkeypatch.setitem(
        OPS, "sin", dataclasses.replace(sin, vjp=(lambda g, out, x: g * g * x.cos(),))
    )
    with pytest.raises(graphc.GraphcError, match="not linear in its cotangent"):
        traced_jvp()
    monkeypatch.setitem(OPS, "sin", sin)
    y, ty = graphc.interpret(traced_jvp(), x, t)
    close(ty, np.cos(x), 1e-12)
