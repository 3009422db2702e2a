"""Structured loops (graphc.scan / fori_loop / while_loop): one node holding its body.

Every loop runs three ways that must agree: eagerly (a Python loop on eager tensors,
recording eager's tape), traced and interpreted (the IR's reference semantics), and
differentiated (reverse mode through scan is a reverse scan; checked against eager's
backward and finite differences, to second order)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import eager
import graphc
from graphc.errors import GraphcError, GraphFormatError, GraphVerificationError, TracerError
from graphc.passes import optimize

RNG = np.random.default_rng(0)


def _t(*arrays, rg=False):
    return [eager.tensor(a, requires_grad=rg) for a in arrays]


def rnn(h0, xs, W, U):
    def step(h, x):
        h = (x @ W + h @ U).tanh()
        return h, (h * h).sum()

    h, ys = graphc.scan(step, h0, xs)
    return h.sum() + (ys * ys).sum()


def _rnn_args(t=5):
    return (
        RNG.standard_normal((2, 4)),
        RNG.standard_normal((t, 2, 3)),
        RNG.standard_normal((3, 4)),
        RNG.standard_normal((4, 4)) * 0.5,
    )


def interp(fn, *args):
    """Trace and interpret: the IR's semantics of ``fn``."""
    out = graphc.interpret(graphc.trace(fn, *args), *args)
    return out[0] if len(out) == 1 else out


def eager_grads(fn, args, create_graph=False):
    ts = _t(*args, rg=True)
    out = fn(*ts)
    gs = eager.autograd.grad(out, ts, create_graph=create_graph, allow_unused=True)
    return out, ts, gs


# ---------------------------------------------------------------------------
# forward semantics


def test_scan_eager_and_traced_agree():
    args = _rnn_args()
    e = rnn(*_t(*args)).item()
    assert np.allclose(interp(rnn, *args), e, rtol=1e-12)


def _numpy_scan(f, init, xs, reverse=False):
    carry, ys = init, [None] * len(xs)
    for i in (reversed(range(len(xs))) if reverse else range(len(xs))):
        carry, ys[i] = f(carry, xs[i])
    return carry, np.stack(ys)


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_pytrees_reverse_and_several_ys(reverse):
    a = RNG.standard_normal((6, 3))
    b = RNG.standard_normal((6,))

    def body(c, x):
        s = c["s"] + x["a"] * x["b"]
        return {"s": s, "n": c["n"] + 1}, (s.sum(), s * 2)

    def f(s0, a, b):
        c, (y1, y2) = graphc.scan(body, {"s": s0, "n": 0}, {"a": a, "b": b}, reverse=reverse)
        return c["s"], c["n"], y1, y2

    s0 = np.zeros(3)
    got = interp(f, s0, a, b)
    want_e = f(*_t(s0, a, b))
    order = range(5, -1, -1) if reverse else range(6)
    s, y1, y2 = s0.copy(), np.zeros(6), np.zeros((6, 3))
    for i in order:
        s = s + a[i] * b[i]
        y1[i], y2[i] = s.sum(), s * 2
    for g_, e_, w in zip(got, want_e, [s, 6, y1, y2]):
        np.testing.assert_allclose(g_, w, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(e_.numpy() if hasattr(e_, "numpy") else e_), w)
    assert got[1].dtype == np.int64


def test_scan_length_zero_and_no_xs():
    def f(c):
        return graphc.scan(lambda c, _: (c * 2, c + 1), c, None, length=0)

    c0 = np.ones(3, np.float32)
    c, ys = interp(f, c0)
    np.testing.assert_array_equal(c, c0)
    assert ys.shape == (0, 3) and ys.dtype == np.float32
    ce, yse = f(eager.tensor(c0))
    np.testing.assert_array_equal(ce.numpy(), c0)
    assert tuple(yse.shape) == (0, 3)

    def g(c):
        return graphc.scan(lambda c, _: (c * 2, None), c, length=4)

    c, = interp(g, c0) if False else [interp(g, c0)[0]]
    np.testing.assert_array_equal(c, c0 * 16)


def test_scan_over_numpy_runs_eagerly():
    c, ys = graphc.scan(lambda c, x: (c + x, c), np.zeros(2), np.ones((3, 2)))
    np.testing.assert_array_equal(c, [3, 3])
    np.testing.assert_array_equal(ys, [[0, 0], [1, 1], [2, 2]])


def test_fori_loop_static_and_traced_bounds():
    xs = RNG.standard_normal((5, 3))

    def f(v, xs):
        return graphc.fori_loop(1, 4, lambda i, v: v * 2 + xs[i], v)

    v = RNG.standard_normal(3)
    want = v.copy()
    for i in range(1, 4):
        want = want * 2 + xs[i]
    np.testing.assert_allclose(interp(f, v, xs), want)
    np.testing.assert_allclose(f(*_t(v, xs)).numpy(), want)
    g = graphc.trace(f, v, xs)
    assert "scan(" in str(g) and "while(" not in str(g)

    def h(v, n):  # a traced upper bound: a while loop
        return graphc.fori_loop(0, n, lambda i, v: v + i, v)

    g = graphc.trace(h, v, np.asarray(3))
    assert "while(" in str(g)
    np.testing.assert_allclose(graphc.interpret(g, v, np.asarray(3))[0], v + 3)
    np.testing.assert_allclose(graphc.interpret(g, v, np.asarray(-2))[0], v)


def test_while_loop_data_dependent_trip_count():
    def f(x):
        return graphc.while_loop(lambda c: c[0].sum() < 100.0, lambda c: (c[0] * 2, c[1] + 1), (x, 0))

    x = np.array([1.0, 2.0])
    v, n = interp(f, x)
    ve, ne = f(eager.tensor(x))
    assert n == ne == 6 and np.allclose(v, ve.numpy())


# ---------------------------------------------------------------------------
# reverse mode


def test_grad_through_scan_matches_eager():
    args = _rnn_args()
    _, _, gs = eager_grads(rnn, args)
    vg = graphc.value_and_grad(rnn, argnums=(0, 1, 2, 3))
    out = interp(lambda *a: vg(*a), *args)
    for got, want in zip(out[1:], gs):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reverse", [False, True])
def test_grad_through_scan_finite_differences(reverse):
    W = RNG.standard_normal((3, 3)) * 0.4
    xs = RNG.standard_normal((4, 3))

    def f(W, xs, h0):
        def step(h, x):
            h = (h @ W + x).sin()
            return h, h[0]

        h, ys = graphc.scan(step, h0, xs, reverse=reverse)
        return (h * ys.sum()).sum()

    h0 = RNG.standard_normal(3)
    grads = interp(lambda *a: graphc.grad(f, argnums=(0, 1, 2))(*a), W, xs, h0)
    for k, a in enumerate((W, xs, h0)):
        num = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            ap, am = [x.copy() for x in (W, xs, h0)], [x.copy() for x in (W, xs, h0)]
            ap[k][idx] += 1e-6
            am[k][idx] -= 1e-6
            num[idx] = (interp(f, *ap) - interp(f, *am)) / 2e-6
        np.testing.assert_allclose(grads[k], num, rtol=1e-6, atol=1e-8)


def test_second_order_through_scan():
    W = RNG.standard_normal((3, 3)) * 0.4
    xs = RNG.standard_normal((4, 3))

    def f(W, xs):
        h, _ = graphc.scan(lambda h, x: ((h @ W + x).tanh(), None), eager.zeros(3, dtype=eager.float64), xs)
        return (h * h).sum()

    def gsum(W, xs):
        return graphc.grad(f)(W, xs).sum()

    got = interp(lambda W, xs: graphc.grad(gsum)(W, xs), W, xs)
    Wt, xt = _t(W, xs, rg=True)
    (gw,) = eager.autograd.grad(f(Wt, xt), [Wt], create_graph=True)
    (hw,) = eager.autograd.grad(gw.sum(), [Wt])
    np.testing.assert_allclose(got, hw.numpy(), rtol=1e-9, atol=1e-12)


def test_grad_through_fori_loop_and_int_carry():
    xs = RNG.standard_normal((6, 2))

    def f(v, xs):
        return graphc.fori_loop(0, 6, lambda i, v: (v * xs[i]).sin() + v, v).sum()

    v = RNG.standard_normal(2)
    _, _, (gv, gx) = eager_grads(f, (v, xs))
    got = interp(lambda *a: graphc.grad(f, argnums=(0, 1))(*a), v, xs)
    np.testing.assert_allclose(got[0], gv.numpy(), rtol=1e-10)
    np.testing.assert_allclose(got[1], gx.numpy(), rtol=1e-10)


def test_grad_through_while_loop_refuses():
    def f(x):
        return graphc.while_loop(lambda c: c.sum() < 10.0, lambda c: c * 2, x).sum()

    with pytest.raises(GraphcError, match="fori_loop with static"):
        graphc.trace(lambda x: graphc.grad(f)(x), np.ones(2))


def test_nested_scan_value_and_grad():
    xs = RNG.standard_normal((3, 4, 2))
    W = RNG.standard_normal((2, 2)) * 0.5

    def f(xs, W):
        def outer(c, row):
            def inner(d, x):
                return (d @ W + x).tanh(), None

            d, _ = graphc.scan(inner, c, row)
            return d, d.sum()

        c, ys = graphc.scan(outer, eager.zeros(2, dtype=eager.float64), xs)
        return c.sum() + ys.sum()

    g = graphc.trace(f, xs, W)
    assert str(g).count("scan(") == 2
    _, _, gs = eager_grads(f, (xs, W))
    got = interp(lambda *a: graphc.value_and_grad(f, argnums=(0, 1))(*a), xs, W)
    np.testing.assert_allclose(got[1], gs[0].numpy(), rtol=1e-10)
    np.testing.assert_allclose(got[2], gs[1].numpy(), rtol=1e-10)


def test_backward_inside_traced_function_through_scan():
    lin = eager.nn.Linear(3, 3).double()

    def step(xs):
        h, _ = graphc.scan(lambda h, x: (lin(h + x).tanh(), None), eager.zeros(3, dtype=eager.float64), xs)
        loss = h.sum()
        loss.backward()
        return loss

    xs = RNG.standard_normal((4, 3))
    g = graphc.trace(step, xs)  # the module's parameters are lifted and captured
    assert "scan(" in str(g)
    lin.zero_grad()
    want = step(eager.tensor(xs))
    want_g = lin.weight.grad.numpy().copy()
    res = graphc.interpret(g, *([xs] + [p.detach().numpy() for p in (lin.weight, lin.bias)]))
    assert np.allclose(res[0], want.item())
    assert any(np.allclose(r, want_g) for r in res[1:] if np.shape(r) == want_g.shape)


# ---------------------------------------------------------------------------
# errors


def test_carry_type_mismatch_names_the_leaf():
    def f(x):
        return graphc.scan(lambda c, _: ((c[0], c[1].double()), None), (x, x), length=2)

    with pytest.raises(TypeError, match=r"carry\[1\] as f64\[2\] but the carry input is f32\[2\]"):
        graphc.trace(f, np.ones(2, np.float32))


def test_carry_structure_mismatch():
    with pytest.raises(TypeError, match="same pytree structure"):
        graphc.trace(lambda x: graphc.scan(lambda c, _: ((c, c), None), x, length=2), np.ones(2))


def test_body_must_return_a_pair():
    with pytest.raises(TypeError, match="must return a pair"):
        graphc.trace(lambda x: graphc.scan(lambda c, _: c, x, length=2), np.ones(2))


def test_inconsistent_xs_lengths():
    with pytest.raises(ValueError, match="different leading axis sizes"):
        graphc.scan(lambda c, x: (c, None), 0.0, (np.ones(3), np.ones(4)))
    with pytest.raises(ValueError, match="give length"):
        graphc.scan(lambda c, x: (c, None), 0.0, None)


def test_cond_must_return_bool_scalar():
    with pytest.raises(TypeError, match="boolean scalar"):
        graphc.trace(lambda x: graphc.while_loop(lambda c: c.sum(), lambda c: c, x), np.ones(2))


def test_random_inside_body_refuses():
    with pytest.raises(TracerError, match="random draw"):
        graphc.trace(lambda x: graphc.scan(lambda c, _: (c + eager.randn(2), None), x, length=2), np.ones(2))


def test_mutating_captured_state_refuses():
    def f(w, x):
        def body(c, _):
            w.add_(1.0)
            return c + w, None

        return graphc.scan(body, x, length=3)[0]

    with pytest.raises(TracerError, match="cannot mutate captured state"):
        graphc.trace(f, np.ones(2), np.ones(2))


def test_leaking_a_body_tracer_refuses():
    leak = []

    def f(x):
        def body(c, _):
            leak.append(c)
            return c, None

        graphc.scan(body, x, length=2)
        return leak[0] * 2

    with pytest.raises(graphc.LeakedTracerError):
        graphc.trace(f, np.ones(2))


# ---------------------------------------------------------------------------
# the IR: printing, JSON, verification, passes


def test_text_dot_and_json_round_trip():
    args = _rnn_args()
    vg = graphc.value_and_grad(rnn, argnums=(2, 3))
    g = graphc.trace(lambda *a: vg(*a), *args)
    text = str(g)
    assert "    graph scan_step(" in text and "scan_step_vjp" in text
    assert "subgraph cluster_" in g.to_dot()
    g2 = graphc.Graph.from_json(g.to_json())
    assert str(g2) == text
    for a, b in zip(graphc.interpret(g, *args), graphc.interpret(g2, *args)):
        np.testing.assert_array_equal(a, b)


def test_json_rejects_a_bad_body():
    g = graphc.trace(lambda x: graphc.scan(lambda c, x: (c + x, None), x[0], x)[0], np.ones((3, 2)))
    doc = json.loads(g.to_json())
    scan = next(n for n in doc["nodes"] if n["op"] == "scan")
    body = scan["attrs"]["body"]["$graph"]
    body["nodes"][0]["dtype"] = "float32"  # the carry input's type no longer matches
    with pytest.raises(GraphFormatError):
        graphc.Graph.from_json(json.dumps(doc))
    scan["attrs"]["body"] = {"$graph": "nope"}
    with pytest.raises(GraphFormatError, match="must be an object"):
        graphc.Graph.from_json(json.dumps(doc))


def test_verifier_catches_a_carry_type_change():
    g = graphc.trace(lambda x: graphc.scan(lambda c, x: (c + x, None), x[0], x)[0], np.ones((3, 2)))
    scan = next(n for n in g.node_ids() if g[n]["op"] == "scan")
    body = g[scan]["attrs"]["body"]
    out = body.outputs[0]
    body.nx.nodes[out]["dtype"] = "float32"
    with pytest.raises(GraphVerificationError):
        g.verify()


def test_passes_hoist_invariants_and_drop_unread_results():
    def f(W, xs):
        def step(h, x):
            Wt = W.t() * 2.0  # loop-invariant
            h = (h @ Wt + x).tanh()
            return h, (h.sum(), h * 3)  # the second y is never read

        h, (s, _) = graphc.scan(step, xs[0], xs)
        return h.sum() + s.sum()

    W, xs = RNG.standard_normal((3, 3)), RNG.standard_normal((4, 3))
    g = graphc.trace(f, W, xs)
    o, _ = optimize(g, 2, verify_each=True)
    scan = next(n for n in o.node_ids() if o[n]["op"] == "scan")
    body = o[scan]["attrs"]["body"]
    assert "mul" not in body.op_counts() or body.op_counts().get("mul", 0) == 0
    assert len(body.outputs) == 2  # carry + the read y
    np.testing.assert_allclose(graphc.interpret(o, W, xs)[0], graphc.interpret(g, W, xs)[0])


def test_optimized_gradient_graph_matches():
    args = _rnn_args()
    vg = graphc.value_and_grad(rnn, argnums=(0, 1, 2, 3))
    g = graphc.trace(lambda *a: vg(*a), *args)
    for level in (1, 2, 3):
        o, _ = optimize(g, level, verify_each=True)
        for a, b in zip(graphc.interpret(g, *args), graphc.interpret(o, *args)):
            np.testing.assert_allclose(a, b, rtol=1e-12)


# ---------------------------------------------------------------------------
# compiled (native loops) == interpreted == eager


def _cases():
    W = RNG.standard_normal((3, 3)) * 0.4
    xs = RNG.standard_normal((4, 3))
    xs32 = xs.astype(np.float32)

    def second(W, xs):
        def f(W, xs):
            h, _ = graphc.scan(lambda h, x: ((h @ W + x).tanh(), None), xs[0] * 0, xs)
            return (h * h).sum()

        return graphc.grad(lambda W, xs: graphc.grad(f)(W, xs).sum())(W, xs)

    def pytree_rev(W, xs):
        def body(c, x):
            s = c["s"] @ W + x
            return {"s": s, "n": c["n"] + 1}, (s.sum(), s * 2)

        return graphc.scan(body, {"s": xs[0], "n": 0}, xs, reverse=True)

    def fori_traced(v, n):
        return graphc.fori_loop(0, n, lambda i, v: v * 1.5 + i, v)

    def while_(x):
        return graphc.while_loop(lambda c: c[0].sum() < 50.0, lambda c: (c[0] * 2, c[1] + 1), (x, 0))

    def empty(x):
        return graphc.scan(lambda c, x: (c + x, c * x), x[0], x[:0])

    def nested(xs, W):
        def outer(c, row):
            d, ys = graphc.scan(lambda d, x: ((d @ W + x).tanh(), d.sum()), c, row)
            return d, ys

        return graphc.value_and_grad(
            lambda xs, W: (graphc.scan(outer, xs[0, 0] * 0, xs)[1] ** 2).sum(), argnums=(0, 1)
        )(xs, W)

    def gather_in_body(xs, idx):
        return graphc.scan(lambda c, i: (c + xs[i], None), xs[0] * 0, idx)[0]

    vg = graphc.value_and_grad(rnn, argnums=(0, 1, 2, 3))
    return {
        "rnn value_and_grad": (lambda *a: vg(*a), _rnn_args()),
        "rnn float32": (lambda *a: vg(*a), tuple(a.astype(np.float32) for a in _rnn_args(7))),
        "second order": (second, (W, xs)),
        "pytree reverse": (pytree_rev, (W, xs32.astype(np.float64))),
        "fori traced bound": (fori_traced, (xs32[0], np.asarray(5))),
        "while": (while_, (np.array([1.0, 2.0]),)),
        "length 0": (empty, (xs,)),
        "nested value_and_grad": (nested, (RNG.standard_normal((3, 5, 2)), W[:2, :2])),
        "index in body": (gather_in_body, (xs, np.array([3, 0, 2, 2]))),
    }


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_equals_interpreted(name):
    fn, args = CASES[name]
    want = graphc.interpret(graphc.trace(fn, *args), *args)
    got = graphc.compile(fn)(*args)
    from graphc.pytree import flatten

    got_leaves, _ = flatten(got)
    assert len(got_leaves) == len(want)
    for g_, w in zip(got_leaves, want):
        g_ = np.asarray(g_)
        assert g_.shape == w.shape and g_.dtype == w.dtype
        tol = 1e-5 if w.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(g_, w, rtol=tol, atol=tol)


def test_compiled_index_error_in_body_raises():
    xs = RNG.standard_normal((4, 3))
    f = graphc.compile(lambda xs, idx: graphc.scan(lambda c, i: (c + xs[i], None), xs[0] * 0, idx)[0])
    with pytest.raises(IndexError):
        f(xs, np.array([0, 9]))


def test_compile_time_does_not_grow_with_the_trip_count():
    """Structural: the optimized graph is the same and the generated code about the same
    size for 10 and 1000 steps (the body is compiled once; only the kernels over the
    stacked arrays may choose other loop splits for their sizes)."""
    sizes = []
    for t in (10, 1000):
        args = _rnn_args(t)
        vg = graphc.compile(graphc.value_and_grad(rnn, argnums=(2, 3)))
        vg(*args)
        sizes.append((len(vg.graph(*args)), len(vg.llvm_ir(*args).splitlines())))
    assert sizes[0][0] == sizes[1][0]
    assert abs(sizes[0][1] - sizes[1][1]) <= 0.05 * sizes[0][1]


def test_compare_runs_eager_and_compiled_side_by_side():
    args = _rnn_args()
    rep = graphc.compare(rnn, *args)
    assert rep.all_agree and rep.compiled_error is None and rep.mode == "value and gradients"


# ---------------------------------------------------------------------------
# forward mode and Jacobians through loops (derived from the reverse loop)


def test_jvp_through_scan_matches_finite_differences():
    args = _rnn_args()
    tans = tuple(RNG.standard_normal(a.shape) for a in args)
    _, tan = graphc.jvp(rnn, args, tans)
    eps = 1e-6
    plus = interp(rnn, *[a + eps * t for a, t in zip(args, tans)])
    minus = interp(rnn, *[a - eps * t for a, t in zip(args, tans)])
    np.testing.assert_allclose(tan, (plus - minus) / (2 * eps), rtol=1e-6)


def test_hessian_through_scan_matches_eager():
    h0, xs, W, U = _rnn_args(3)
    H = graphc.hessian(lambda W: rnn(h0, xs, W, U))(W)
    He = eager.autograd.functional.hessian(
        lambda W: rnn(eager.tensor(h0), eager.tensor(xs), W, eager.tensor(U)), eager.tensor(W)
    )
    np.testing.assert_allclose(H, He.numpy(), rtol=1e-9, atol=1e-12)


def test_forward_mode_through_while_refuses():
    def f(x):
        return graphc.while_loop(lambda c: c.sum() < 10.0, lambda c: c * 2, x)

    with pytest.raises(GraphcError, match="while_loop"):
        graphc.jvp(f, (np.ones(2),), (np.ones(2),))


def test_vmap_of_scan_matches_a_loop_of_examples():
    W = RNG.standard_normal((3, 3)) * 0.5

    def f(h0, xs):
        def step(h, x):
            h = (h @ W + x).tanh()
            return h, (h.sum(), W.sum() * 2)  # a batched y and an unbatched one

        return graphc.scan(step, h0, xs)

    h0 = RNG.standard_normal((5, 3))
    xs = RNG.standard_normal((5, 4, 3))
    # the carry starts unbatched and becomes batched through the body
    got = graphc.vmap(f, in_axes=(None, 0))(h0[0], xs)
    for b in range(5):
        h, s, w = interp(f, h0[0], xs[b])
        np.testing.assert_allclose(got[0][b], h, rtol=1e-12)
        np.testing.assert_allclose(got[1][0][b], s, rtol=1e-12)
        np.testing.assert_allclose(got[1][1][b], w, rtol=1e-12)
    # per-example gradients through a scan
    pe = graphc.vmap(graphc.grad(lambda h0, xs: f(h0, xs)[0].sum()), in_axes=(0, 0))(h0, xs)
    for b in range(5):
        want = interp(lambda h, x: graphc.grad(lambda h0, xs: f(h0, xs)[0].sum())(h, x), h0[b], xs[b])
        np.testing.assert_allclose(pe[b], want, rtol=1e-10)


def test_vmap_of_while_is_refused_clearly():
    def f(x):
        return graphc.while_loop(lambda c: c.sum() < 10.0, lambda c: c * 2, x)

    with pytest.raises(NotImplementedError, match="while"):
        graphc.vmap(f)(np.ones((2, 3)))


def test_loops_in_a_plan_big_enough_for_part_functions():
    """An unrolled Python loop beside a scan: the plan has more kernels than one entry
    function runs (graphc.backend.parts), and the loop kernels run from part functions."""
    from graphc.backend import parts

    def f(h0, xs, W):
        h = h0
        for t in range(40):
            h = (h @ W + xs[t]).tanh()
        h2, ys = graphc.scan(lambda c, x: ((c @ W + x).sin(), c.sum()), h, xs)
        return (h2 * h2).sum() + ys.sum()

    a = (RNG.standard_normal((2, 3)), RNG.standard_normal((40, 2, 3)), RNG.standard_normal((3, 3)) * 0.5)
    vg = graphc.value_and_grad(f, argnums=(0, 1, 2))
    cf = graphc.compile(vg)
    out = cf(*a)
    assert cf.stats(*a)["kernels"] > parts.SPLIT_ABOVE
    want = graphc.interpret(graphc.trace(lambda *x: vg(*x), *a), *a)
    for got, w in zip([out[0]] + list(out[1]), want):
        np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-12)


def test_inplace_write_to_a_carry_or_x_slice_refuses():
    with pytest.raises(TracerError, match="carry or x slice"):
        graphc.trace(lambda x: graphc.scan(lambda c, x: (c.add_(x), None), x[0] * 1, x), np.ones((3, 2)))
    with pytest.raises(TracerError, match="carry or x slice"):
        graphc.trace(lambda x: graphc.scan(lambda c, x: (c + x.mul_(2), None), x[0] * 1, x), np.ones((3, 2)))
    # a clone is the body's own: fine, and equal to eager
    def f(x):
        return graphc.scan(lambda c, x: (c.clone().add_(x), None), x[0] * 1, x)[0]

    x = RNG.standard_normal((3, 2))
    np.testing.assert_allclose(graphc.compile(f)(x), f(eager.tensor(x)).numpy())


def test_backward_inside_a_body_refuses():
    lin = eager.nn.Linear(2, 2).double()

    def f(xs):
        def body(c, x):
            lin(x).sum().backward()
            return c, None

        return graphc.scan(body, xs[0], xs)[0]

    with pytest.raises(TracerError, match=r"backward\(\) inside the loop body"):
        graphc.trace(f, np.ones((3, 2)))


def test_eager_autograd_grad_inside_compiled_functions():
    """torch.autograd.grad inside a traced function (a gradient penalty), in a body too."""

    def penalty(w, x):
        y = (x @ w).tanh().sum()
        (g,) = eager.autograd.grad(y, [w], create_graph=True)
        return y + (g * g).sum()

    w, x = RNG.standard_normal((3, 2)), RNG.standard_normal((4, 3))
    want = penalty(eager.tensor(w, requires_grad=True), eager.tensor(x))
    got = graphc.compile(penalty)(eager.tensor(w, requires_grad=True), eager.tensor(x))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12)

    def in_body(w, xs):
        def body(c, x):
            (g,) = eager.autograd.grad((x @ w).sin().sum(), [w])
            return c + g.sum(), None

        return graphc.scan(body, (w * 0).sum(), xs)[0]

    xs = RNG.standard_normal((5, 4, 3))
    want = in_body(eager.tensor(w, requires_grad=True), eager.tensor(xs))
    got = graphc.compile(in_body)(eager.tensor(w, requires_grad=True), eager.tensor(xs))
    np.testing.assert_allclose(np.asarray(got.detach().numpy()), want.detach().numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError, match="does not require grad"):
        graphc.trace(lambda w: eager.autograd.grad((w * 2).sum(), [w]), w)
