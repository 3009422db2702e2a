"""Adversarial tests for the structured loops (scan / fori_loop / while_loop), vmap and
forward mode through them: compiled vs interpreted vs eager vs finite differences.

Every test here passes: each is a regression test (several for bugs these attacks found
and that were fixed: in-place writes to a carry or x slice, backward() inside a body and
numpy-scalar carries now refuse or match eager; eager.autograd.grad works on traced values)."""

from __future__ import annotations

import threading
from collections import namedtuple

import numpy as np
import pytest

import eager
import graphc
from graphc.errors import GraphcError
from graphc.pytree import flatten

RNG = np.random.default_rng(1234)


def _np(x):
    return np.asarray(x.detach().numpy() if hasattr(x, "detach") else x)


def _leaves(x):
    return [_np(a) for a in flatten(x)[0]]


def three_ways(f, *args, rtol=1e-10, atol=1e-12):
    """eager, interpreted and compiled results of ``f`` agree (values, shapes, dtypes)."""
    want = _leaves(f(*[eager.tensor(a) for a in args]))
    interp = [np.asarray(a) for a in graphc.interpret(graphc.trace(f, *args), *args)]
    comp = _leaves(graphc.compile(f)(*args))
    for got in (interp, comp):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, (g.dtype, g.shape, w.dtype, w.shape)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return want


def fd_grad(f, args, i, eps=1e-6):
    a = np.array(args[i], dtype=np.float64)
    g = np.zeros_like(a)
    for j in range(a.size):
        hi, lo = a.copy(), a.copy()
        hi.flat[j] += eps
        lo.flat[j] -= eps
        A, B = list(args), list(args)
        A[i], B[i] = hi, lo
        fa = float(_np(f(*[eager.tensor(x) for x in A])))
        fb = float(_np(f(*[eager.tensor(x) for x in B])))
        g.flat[j] = (fa - fb) / (2 * eps)
    return g


def grads_agree(f, args, argnums):
    """compiled grad == traced grad == eager backward == finite differences."""
    comp = graphc.compile(graphc.grad(f, argnums=argnums))(*args)
    traced = graphc.grad(f, argnums=argnums)(*args)
    ts = [eager.tensor(a, requires_grad=i in argnums) for i, a in enumerate(args)]
    f(*ts).backward()
    for k, i in enumerate(argnums):
        want = fd_grad(f, args, i)
        eg = ts[i].grad.numpy() if ts[i].grad is not None else np.zeros_like(want)
        for got in (comp[k], traced[k], eg):
            np.testing.assert_allclose(_np(got), want, rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------------
# carries of mixed dtypes


@pytest.mark.parametrize(
    "scalar, dtype",
    [
        (np.int64(0), np.int64),
        (np.float64(1.5), np.float64),
        (np.bool_(True), np.bool_),
        (np.int32(3), np.int32),
    ],
)
def test_numpy_scalar_carry_keeps_its_dtype(scalar, dtype):
    """Fixed here: np.int64(0) / np.bool_ / np.float64 as init became float32 (the default
    float dtype), silently turning an integer counter into a float carry."""

    def f(x):
        c, ys = graphc.scan(lambda c, xi: (c, xi.sum()), scalar, x)
        return c, ys

    c, _ = graphc.compile(f)(np.ones((3, 2)))
    assert np.asarray(c).dtype == np.dtype(dtype)
    assert np.asarray(c) == scalar


def test_mixed_dtype_carries_three_ways():
    xs = RNG.standard_normal((4, 3))

    def f(x, xs):
        def body(c, xi):
            n, flag, s32, s64 = c
            s64 = s64 + xi * x
            return (n + 1, flag | (xi.sum() > 0), s32 + xi.sum().to(eager.float32), s64), (n, flag)

        init = (
            eager.tensor(0),
            eager.tensor(False),
            eager.tensor(0.0, dtype=eager.float32),
            eager.zeros(3, dtype=eager.float64),
        )
        return graphc.scan(body, init, xs)

    three_ways(f, np.ones(3), xs, rtol=1e-6)


def test_int_counter_carry_gradient():
    xs = RNG.standard_normal((4, 3))

    def f(x, xs):
        def body(c, xi):
            n, s = c
            return (n + 1, s + xi * x * n.to(eager.float64)), None

        (_, s), _ = graphc.scan(body, (eager.tensor(0), eager.zeros(3, dtype=eager.float64)), xs)
        return s.sum()

    grads_agree(f, (np.ones(3) * 0.7, xs), (0, 1))


# ---------------------------------------------------------------------------
# carries passed through, swapped, constants and closures as results


def test_swapped_carries_gradient():
    def f(a, b, xs):
        (p, q), ys = graphc.scan(lambda c, x: ((c[1] * x, c[0]), c[0].sum()), (a, b), xs)
        return (p * q).sum() + (ys**2).sum()

    grads_agree(f, (np.ones(3) * 0.5, np.arange(3.0) + 1, RNG.standard_normal((5, 3))), (0, 1, 2))


@pytest.mark.parametrize("which", ["closure", "const_y", "passthrough"])
def test_closed_over_and_constant_results(which):
    def f(w, xs):
        if which == "closure":
            c, ys = graphc.scan(lambda c, x: (w, w * 2), w * 0, xs)
        elif which == "const_y":
            c, ys = graphc.scan(lambda c, x: (c + x, 3.0), w, xs)
        else:
            c, ys = graphc.scan(lambda c, x: (c, x * 2), w, xs)
        return (c * c).sum() + ys.sum()

    args = (np.ones(3) * 0.5, RNG.standard_normal((4, 3)))
    three_ways(f, *args)
    grads_agree(f, args, (0, 1) if which != "closure" else (0,))


# ---------------------------------------------------------------------------
# shapes: 0-d, size 0, length 0 and 1, reverse


def test_zero_d_carry_and_scalar_slices():
    def f(a, xs):
        c, ys = graphc.scan(lambda c, x: (c * x + 1.0, c), a, xs)
        return c + ys.sum()

    args = (np.array(0.3), RNG.standard_normal(5))
    three_ways(f, *args)
    grads_agree(f, args, (0, 1))


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shapes", [((0,), (4, 0)), ((3,), (0, 3)), ((3,), (1, 3))])
def test_size_zero_and_short_scans(reverse, shapes):
    def f(a, xs):
        c, ys = graphc.scan(lambda c, x: ((c * x).sin() + c, c * 2), a, xs, reverse=reverse)
        return c.sum() + (ys * ys).sum()

    args = (np.ones(shapes[0]) * 0.4, np.ones(shapes[1]) * 0.3)
    three_ways(f, *args)
    grads_agree(f, args, (0, 1))


def test_reverse_scan_gradient_with_position_weights():
    def f(a, xs):
        def body(c, x):
            c = (c * x).sin() + c
            return c, c * c

        c, ys = graphc.scan(body, a, xs, reverse=True)
        return c.sum() + (ys * np.arange(4.0)[:, None]).sum()

    grads_agree(f, (np.ones(3) * 0.5, RNG.standard_normal((4, 3))), (0, 1))


# ---------------------------------------------------------------------------
# pytrees


def test_pytree_ys_with_dicts_namedtuples_and_none():
    P = namedtuple("P", "a b")

    def f(a, xs):
        def body(c, x):
            return {"h": c["h"] * x, "k": c["k"]}, P(a=c["h"].sum(), b={"z": None, "w": x * 2})

        c, ys = graphc.scan(body, {"k": a + 1, "h": a}, xs)
        return c["h"], c["k"], ys.a, ys.b["w"], ys.b["z"]

    args = (np.ones(3), RNG.standard_normal((4, 3)))
    three_ways(f, *args)
    out = graphc.compile(f)(*args)
    assert out[4] is None

    def loss(a, xs):
        o = f(a, xs)
        return o[0].sum() + (o[2] * o[3].sum(1)).sum()

    grads_agree(loss, (np.ones(3) * 0.7, args[1]), (0, 1))


# ---------------------------------------------------------------------------
# nesting and higher order


def _nested3(w, xs):
    def l1(c1, x1):
        def l2(c2, x2):
            def l3(c3, x3):
                c3 = (c3 * w + x3).sin()
                return c3, c3.sum()

            c3, y3 = graphc.scan(l3, c2, x2)
            return c3 * 0.5 + c2, y3.sum()

        c2, y2 = graphc.scan(l2, c1, x1, reverse=True)
        return c2, y2.sum()

    c, y = graphc.scan(l1, w, xs)
    return c.sum() + y.sum()


def test_nested_three_deep_gradients():
    args = (RNG.standard_normal(2) * 0.5, RNG.standard_normal((2, 3, 2, 2)))
    three_ways(_nested3, *args)
    grads_agree(_nested3, args, (0, 1))


def test_hessian_and_jvp_of_nested_scans_match_finite_differences():
    w, xs = RNG.standard_normal(2) * 0.5, RNG.standard_normal((2, 2, 2, 2))
    gg = graphc.grad(_nested3)
    eps = 1e-5
    Hfd = np.stack(
        [
            (np.asarray(gg(w + eps * e, xs)) - np.asarray(gg(w - eps * e, xs))) / (2 * eps)
            for e in np.eye(2)
        ],
        1,
    )
    np.testing.assert_allclose(graphc.hessian(_nested3)(w, xs), Hfd, atol=1e-7)
    np.testing.assert_allclose(graphc.compile(graphc.hessian(_nested3))(w, xs), Hfd, atol=1e-7)
    t, tx = RNG.standard_normal(2), RNG.standard_normal(xs.shape)
    _, tan = graphc.jvp(_nested3, (w, xs), (t, tx))
    fd = (
        float(_np(_nested3(eager.tensor(w + eps * t), eager.tensor(xs + eps * tx))))
        - float(_np(_nested3(eager.tensor(w - eps * t), eager.tensor(xs - eps * tx))))
    ) / (2 * eps)
    np.testing.assert_allclose(tan, fd, rtol=1e-6)


def test_grad_of_grad_norm_through_nested_scans():
    def f(w, xs):
        return (graphc.grad(_nested3)(w, xs) ** 2).sum()

    w, xs = RNG.standard_normal(2) * 0.5, RNG.standard_normal((2, 2, 2, 2))
    want = fd_grad(
        lambda w, xs: (graphc.grad(_nested3)(np.asarray(_np(w)), np.asarray(_np(xs))) ** 2).sum(),
        (w, xs),
        0,
    )
    np.testing.assert_allclose(graphc.grad(f)(w, xs), want, rtol=1e-5)
    np.testing.assert_allclose(graphc.compile(graphc.grad(f))(w, xs), want, rtol=1e-5)


# ---------------------------------------------------------------------------
# fori_loop bounds, huge lengths


@pytest.mark.parametrize("lo, hi", [(5, 2), (-3, 2), (-5, -7), (0, 0)])
def test_fori_loop_odd_bounds(lo, hi):
    def f(a, lo_, hi_):
        return graphc.fori_loop(lo_, hi_, lambda i, v: v * 2 + i, a)

    want = np.ones(2)
    for i in range(lo, hi):
        want = want * 2 + i
    np.testing.assert_allclose(graphc.compile(lambda a: f(a, lo, hi))(np.ones(2)), want)
    np.testing.assert_allclose(graphc.compile(f)(np.ones(2), np.asarray(lo), np.asarray(hi)), want)
    grads_agree(lambda a: (f(a, lo, hi) ** 2).sum(), (np.ones(2),), (0,))


def test_huge_scan_length_is_a_clear_memory_error():
    f = graphc.compile(
        lambda a: graphc.scan(lambda c, x: (c + 1, c), a, None, length=10**12)[1].sum()
    )
    with pytest.raises(MemoryError, match="could not allocate"):
        f(np.ones(1000))


# ---------------------------------------------------------------------------
# non-contiguous xs and init


@pytest.mark.parametrize("make", ["T", "step", "negstep", "broadcast"])
def test_non_contiguous_xs(make):
    xs = {
        "T": RNG.standard_normal((3, 6)).T,
        "step": RNG.standard_normal((12, 3))[::3],
        "negstep": RNG.standard_normal((6, 5))[::-2, 1:4],
        "broadcast": np.broadcast_to(np.arange(3.0), (5, 3)),
    }[make]

    def f(xs, w):
        c, ys = graphc.scan(lambda c, x: ((c + x * w).tanh(), c * x), np.zeros(3), xs)
        return c.sum() + ys.sum()

    three_ways(f, xs, np.ones(3) * 0.3)
    grads_agree(f, (xs, np.ones(3) * 0.3), (1,) if make == "broadcast" else (0, 1))


def test_non_contiguous_init_and_transposed_carry():
    def f(h, xs):
        c, ys = graphc.scan(lambda c, x: ((c @ x).tanh(), c[:, 0]), h, xs)
        return c.sum() + ys.sum()

    args = (
        RNG.standard_normal((3, 2)).T,
        RNG.standard_normal((4, 3, 3))[:, ::-1, :].transpose(0, 2, 1),
    )
    three_ways(f, *args)
    grads_agree(f, args, (0, 1))


# ---------------------------------------------------------------------------
# in-place ops inside the body


def test_inplace_on_body_local_values():
    def f(a, xs):
        def body(c, x):
            t = c.clone()
            t.add_(x)
            t.mul_(0.5)
            buf = eager.zeros(2, 3, dtype=eager.float64)
            buf[0] = x
            buf[1, 1:] = t[:2] * 2
            return t + buf.sum(0), buf

        c, ys = graphc.scan(body, a, xs)
        return c.sum() + (ys**2).sum()

    args = (np.ones(3), RNG.standard_normal((4, 3)))
    three_ways(f, *args)
    grads_agree(f, args, (0, 1))


def _compiled_matches_eager_or_refuses(f, *args):
    want = _leaves(f(*[eager.tensor(np.array(a)) for a in args]))
    try:
        got = _leaves(graphc.compile(f)(*[np.array(a) for a in args]))
    except GraphcError:
        return  # refusing is fine
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w)


def test_inplace_write_to_carry_aliases_init():
    def f(a, xs):
        b = a * 1

        def body(c, x):
            c.add_(x)
            return c, c.sum()

        c, ys = graphc.scan(body, b, xs)
        return c, ys, b

    _compiled_matches_eager_or_refuses(f, np.ones(3) * 0.5, RNG.standard_normal((4, 3)))


def test_inplace_write_to_xs_slice():
    def f(a, xs):
        xs = xs * 1

        def body(c, x):
            x.mul_(2)
            return c + x, x.sum()

        c, ys = graphc.scan(body, a, xs)
        return c, ys, xs

    _compiled_matches_eager_or_refuses(f, np.ones(3) * 0.5, RNG.standard_normal((4, 3)))


def test_views_of_the_carry_in_results():
    def f(a, xs):
        def body(c, x):
            return (c * x).reshape(3, 2).t().reshape(2, 3), (
                c[:, ::2],
                c.unsqueeze(0).expand(2, 2, 3),
            )

        return graphc.scan(body, a, xs)

    three_ways(f, RNG.standard_normal((2, 3)), RNG.standard_normal((4, 2, 3)))


# ---------------------------------------------------------------------------
# modules, random, backward inside a body


def test_compiled_module_in_scan_called_with_numpy_then_backward():
    """Fixed here (graphc/autograd_bridge.py): a compiled function that reads parameters
    requiring grad, called with numpy arrays, crashed with AttributeError: 'numpy.ndarray'
    object has no attribute '_version' (numpy inputs were saved for backward as is)."""
    eager.manual_seed(0)
    lin, ln = eager.nn.Linear(3, 3), eager.nn.LayerNorm(3)

    def m(h, xs):
        c, ys = graphc.scan(lambda c, x: (ln(lin(x) + c).tanh(), c.sum()), h, xs)
        return c.sum() + ys.sum()

    h, xs = np.zeros((2, 3), np.float32), RNG.standard_normal((4, 2, 3)).astype(np.float32)
    out = graphc.compile(m)(h, xs)
    out.backward()
    g = lin.weight.grad.numpy().copy()
    lin.zero_grad()
    ln.zero_grad()
    want = m(eager.tensor(h), eager.tensor(xs))
    want.backward()
    np.testing.assert_allclose(out.item(), want.item(), rtol=1e-5)
    np.testing.assert_allclose(g, lin.weight.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_batchnorm_training_and_dropout_in_body_refuse():
    bn = eager.nn.BatchNorm1d(3)
    bn.train()
    dr = eager.nn.Dropout(0.5)
    h, xs = np.zeros((2, 3), np.float32), RNG.standard_normal((4, 2, 3)).astype(np.float32)
    with pytest.raises(GraphcError, match="mutate captured state"):
        graphc.compile(lambda h, xs: graphc.scan(lambda c, x: (bn(x + c), None), h, xs)[0])(h, xs)
    assert np.all(bn.running_mean.numpy() == 0)
    with pytest.raises(GraphcError, match="random draw"):
        graphc.compile(lambda h, xs: graphc.scan(lambda c, x: (dr(x + c), None), h, xs)[0])(h, xs)


def test_backward_inside_body_refuses_or_matches():
    xs = RNG.standard_normal((4, 3))

    def f(w, xs):
        def body(c, x):
            loss = (w * x).sin().sum()
            loss.backward()
            return c + loss, None

        return graphc.scan(body, w.sum() * 0, xs)[0]

    w = eager.tensor(np.ones(3) * 0.3, requires_grad=True)
    f(w, eager.tensor(xs))
    want = w.grad.numpy().copy()
    w2 = eager.tensor(np.ones(3) * 0.3, requires_grad=True)
    try:
        graphc.compile(f)(w2, eager.tensor(xs))
    except GraphcError:
        return
    assert w2.grad is not None
    np.testing.assert_allclose(w2.grad.numpy(), want)


def test_autograd_grad_inside_body_is_clear():
    def f(w, xs):
        def body(c, x):
            (g,) = eager.autograd.grad((w * x).sin().sum(), [w])
            return c + g, None

        return graphc.scan(body, w * 0, xs)[0]

    xs = RNG.standard_normal((4, 3))
    want = f(eager.tensor(np.ones(3) * 0.3, requires_grad=True), eager.tensor(xs))
    got = graphc.compile(f)(eager.tensor(np.ones(3) * 0.3, requires_grad=True), eager.tensor(xs))
    np.testing.assert_allclose(_np(got), _np(want), rtol=1e-12)


def test_autograd_grad_wrt_carry_inside_body():
    xs = RNG.standard_normal((4, 3))

    def f(w, xs):
        def body(c, x):
            (g,) = eager.autograd.grad((w * x * c).sin().sum(), [c])
            return c + g, None

        return graphc.scan(body, w * 1, xs)[0]

    want = f(eager.tensor(np.ones(3) * 0.3, requires_grad=True), eager.tensor(xs))
    try:
        got = graphc.compile(f)(
            eager.tensor(np.ones(3) * 0.3, requires_grad=True), eager.tensor(xs)
        )
    except GraphcError:
        return
    np.testing.assert_allclose(_np(got), _np(want))


# ---------------------------------------------------------------------------
# eager autograd through compiled scans, compare, JSON, caches, threads


def test_eager_double_backward_through_compiled_scan():
    W, xs, h0 = (
        RNG.standard_normal((3, 3)) * 0.5,
        RNG.standard_normal((4, 3)),
        RNG.standard_normal(3),
    )

    def f(h0, xs, W):
        h, ys = graphc.scan(lambda h, x: ((h @ W + x).tanh(), h.sum()), h0, xs)
        return (h * h).sum() + ys.sum()

    want = graphc.grad(f, argnums=(0, 1, 2))(h0, xs, W)
    ts = [eager.tensor(a, requires_grad=True) for a in (h0, xs, W)]
    g = eager.autograd.grad(graphc.compile(f)(*ts), ts, create_graph=True)
    for a, b in zip(g, want):
        np.testing.assert_allclose(_np(a), b, rtol=1e-10)
    (gg,) = eager.autograd.grad(g[2].sum(), ts[2])
    H = graphc.hessian(lambda W: f(h0, xs, W))(W)
    np.testing.assert_allclose(gg.numpy(), H.reshape(9, 9).sum(0).reshape(3, 3), atol=1e-12)


def test_json_round_trip_of_optimized_gradient_graph_with_hoisting():
    from graphc.passes import optimize

    def f(W, xs):
        def step(h, x):
            h = (h @ (W.t() * 2.0) + x).tanh()
            return h, (h.sum(), h * 3)

        h, (s, _) = graphc.scan(step, xs[0], xs)
        return h.sum() + s.sum()

    W, xs = RNG.standard_normal((3, 3)) * 0.4, RNG.standard_normal((4, 3))
    vg = graphc.value_and_grad(f, argnums=(0, 1))
    g = graphc.trace(lambda *a: vg(*a), W, xs)
    o, _ = optimize(g, 2, verify_each=True)
    o2 = graphc.Graph.from_json(o.to_json())
    assert str(o2) == str(o)
    o3, _ = optimize(o2, 2, verify_each=True)
    for a, b, c in zip(
        graphc.interpret(g, W, xs), graphc.interpret(o2, W, xs), graphc.interpret(o3, W, xs)
    ):
        np.testing.assert_allclose(b, a, rtol=1e-12)
        np.testing.assert_allclose(c, a, rtol=1e-12)
    assert graphc.compare(f, W, xs).all_agree


def test_disk_cache_distinguishes_bodies_of_identical_shapes(tmp_path):
    xs = np.ones((4, 3)) * 0.2
    res = []
    for k in (2.0, 0.5, 2.0):

        def f(h, xs, k=k):
            return graphc.scan(lambda c, x: ((c * k + x).sin(), c.sum()), h, xs)[0]

        f.__qualname__ = "same_name"
        got = graphc.compile(f, disk_cache=str(tmp_path))(np.ones(3) * 0.1, xs)
        want = graphc.interpret(graphc.trace(f, np.ones(3) * 0.1, xs), np.ones(3) * 0.1, xs)[0]
        np.testing.assert_allclose(got, want, rtol=1e-12)
        res.append(got)
    assert not np.allclose(res[0], res[1])


def test_threads_compiling_different_scans():
    xs = RNG.standard_normal((4, 3))

    def mk(k):
        return lambda h, xs: graphc.scan(lambda c, x: ((c * (k + 1) + x).sin(), c.sum() * k), h, xs)

    res: dict = {}

    def work(k):
        try:
            res[k] = graphc.compile(mk(k))(np.ones(3) * 0.1, xs)
        except Exception as e:  # pragma: no cover - reported below
            res[k] = e

    ths = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    for k in range(4):
        want = graphc.interpret(graphc.trace(mk(k), np.ones(3) * 0.1, xs), np.ones(3) * 0.1, xs)
        for a, b in zip(flatten(res[k])[0], want):
            np.testing.assert_allclose(a, b, rtol=1e-12)


# ---------------------------------------------------------------------------
# vmap of scans


@pytest.mark.parametrize(
    "in_axes",
    [
        (0, None, None),
        (None, 0, None),
        (None, None, 0),
        (0, 0, 0),
        (None, 1, None),
        (None, 2, None),
        (-1, None, 0),
    ],
)
def test_vmap_of_scan_in_axes(in_axes):
    B = 3
    W, h0, xs = (
        RNG.standard_normal((B, 3, 3)) * 0.5,
        RNG.standard_normal((B, 3)),
        RNG.standard_normal((B, 4, 3)),
    )

    def f(h0, xs, W):
        return graphc.scan(lambda h, x: ((h @ W + x).tanh(), (h * 2, x.sum())), h0, xs)

    full = {
        0: (h0, xs, W),
        1: (h0, xs.transpose(1, 0, 2), W),
        2: (h0, xs.transpose(1, 2, 0), W),
        -1: (h0.T.copy(), xs, W),
    }
    args = [full[ax][i] if ax is not None else full[0][i][0] for i, ax in enumerate(in_axes)]
    got = flatten(graphc.vmap(f, in_axes=in_axes)(*args))[0]
    for b in range(B):
        ab = [a if ax is None else np.take(a, b, axis=ax) for a, ax in zip(args, in_axes)]
        for g, w in zip(got, graphc.interpret(graphc.trace(f, *ab), *ab)):
            np.testing.assert_allclose(np.asarray(g)[b], w, rtol=1e-10)


def test_vmap_of_grad_through_scan_and_int_carries():
    B = 3
    h0, xs = RNG.standard_normal((B, 3)), RNG.standard_normal((B, 4, 3))

    def loss(h0, xs):
        def step(c, x):
            n, h = c
            h = (h * x).sin() + h * n.to(h.dtype)
            return (n + 1, h), h.sum()

        (n, h), ys = graphc.scan(step, (eager.tensor(0), h0), xs, reverse=True)
        return (h * h).sum() + ys.sum()

    got = graphc.vmap(graphc.grad(loss, argnums=(0, 1)))(h0, xs)
    for b in range(B):
        want = graphc.grad(loss, argnums=(0, 1))(h0[b], xs[b])
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g)[b], w, rtol=1e-10)


def test_while_cond_reads_a_captured_value():
    def f(x, lim):
        return graphc.while_loop(
            lambda c: c[0].sum() < lim,
            lambda c: (c[0] * 2 + lim * 0.1, c[1] + 1),
            (x, eager.tensor(0)),
        )

    three_ways(f, np.ones(2) * 0.3, np.array(5.0))
    three_ways(f, np.ones(2) * 30, np.array(5.0))
