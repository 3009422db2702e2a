"""import_onnx reads ONNX Scan and Loop: the exporter's loops round trip (eagerly and
compiled, against ONNX Runtime), and hand-built Scan/Loop models (onnx.helper) give
ONNX Runtime's numbers or a clear refusal."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import eager  # noqa: E402
import graphc  # noqa: E402
from graphc.onnx.importer import OnnxImportError  # noqa: E402
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as h  # noqa: E402

F = TP.FLOAT


def _np(v):
    return v.detach().numpy() if hasattr(v, "detach") else np.asarray(v)


def _tuple(v):
    return v if isinstance(v, tuple) else (v,)


def _ort(model, arrays):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: a for i, a in zip(sess.get_inputs(), arrays)})


def _check_model(model, *arrays, rtol=1e-5, atol=1e-6):
    want = _ort(model, [a.copy() for a in arrays])
    f = graphc.import_onnx(model)
    got = _tuple(f(*[a.copy() for a in arrays]))
    comp = _tuple(graphc.compile(f)(*[a.copy() for a in arrays]))
    assert len(got) == len(comp) == len(want)
    for g, c, w in zip(got, comp, want):
        assert _np(g).shape == w.shape and _np(c).shape == w.shape
        np.testing.assert_allclose(_np(g), w, rtol=rtol, atol=atol)
        np.testing.assert_allclose(_np(c), w, rtol=rtol, atol=atol)
    return f


def _roundtrip(fn, *args, **kw):
    model = graphc.export_onnx(fn, *args)
    f = _check_model(model, *[a.numpy() for a in args], **kw)
    want = _tuple(fn(*args))
    for g, w in zip(_tuple(f(*[a.numpy() for a in args])), want):
        np.testing.assert_allclose(_np(g), _np(w), **{"rtol": 1e-5, "atol": 1e-6, **kw})
    return model


def _ops(model):
    return {n.op_type for n in model.graph.node}


# ---------------------------------------------------------------------------
# round trips of tests/graphc/onnx/test_export_loops.py's functions


@pytest.mark.parametrize("reverse", [False, True])
def test_roundtrip_scan_with_xs(reverse):
    def f(c0, xs, w):
        return graphc.scan(lambda c, x: ((c + x) @ w, c * x), c0, xs, reverse=reverse)

    # float32 matmuls in another order (ONNX Runtime): 1e-4 relative
    m = _roundtrip(f, eager.randn(3), eager.randn(5, 3), eager.randn(3, 3), rtol=1e-4, atol=1e-5)
    assert "Scan" in _ops(m)


def test_roundtrip_fori_loop():
    m = _roundtrip(lambda x: graphc.fori_loop(0, 4, lambda i, c: c * 0.5 + i, x), eager.randn(3, 2))
    assert "Loop" in _ops(m)


@pytest.mark.parametrize("reverse", [False, True])
def test_roundtrip_scan_without_xs(reverse):
    def f(x):
        return graphc.scan(lambda c, _: (c * 2.0, c.sum()), x, None, length=3, reverse=reverse)

    assert "Loop" in _ops(_roundtrip(f, eager.randn(2)))


def test_roundtrip_while_loop():
    f = lambda x, lim: graphc.while_loop(lambda c: c.sum() < lim, lambda c: c * 2.0 + 0.1, x)
    m = _roundtrip(f, eager.rand(3) + 0.1, eager.tensor(50.0))
    assert "Loop" in _ops(m)


def test_roundtrip_while_zero_trips():
    _roundtrip(
        lambda x: graphc.while_loop(lambda c: c.sum() < -1.0, lambda c: c * 2.0, x), eager.rand(3)
    )


def test_roundtrip_nested_loops():
    def f(x, xs):
        def outer(c, row):
            inner = graphc.fori_loop(0, 2, lambda i, d: d + row * i, c)
            return inner, inner.sum()

        return graphc.scan(outer, x, xs)

    _roundtrip(f, eager.randn(3), eager.randn(4, 3))


def test_roundtrip_grad_through_scan():
    def loss(w, xs):
        c, _ = graphc.scan(lambda c, x: ((c * x).tanh() + w, None), eager.zeros(3), xs)
        return c.sum()

    _roundtrip(graphc.grad(loss), eager.randn(3), eager.randn(4, 3))


def test_roundtrip_cumprod_float64():
    x = eager.randn(3, 4, dtype=eager.float64)
    assert "Scan" in _ops(_roundtrip(lambda x: eager.cumprod(x, 1), x))


def test_imported_scan_gradient_matches_finite_differences():
    model = graphc.export_onnx(
        lambda c0, xs: graphc.scan(lambda c, x: ((c * x).tanh() + c, c * c), c0, xs),
        eager.randn(3, dtype=eager.float64),
        eager.randn(4, 3, dtype=eager.float64),
    )
    f = graphc.import_onnx(model)

    def loss(c0, xs):
        c, ys = f(c0, xs)
        return c.sum() + ys.sum()

    c0 = np.random.RandomState(0).randn(3)
    xs = np.random.RandomState(1).randn(4, 3)
    g = graphc.grad(loss)(eager.tensor(c0), eager.tensor(xs))
    gc = graphc.compile(graphc.grad(loss))(eager.tensor(c0), eager.tensor(xs))
    eps, num = 1e-6, np.zeros(3)
    for i in range(3):
        d = np.zeros(3)
        d[i] = eps
        hi = float(_np(loss(eager.tensor(c0 + d), eager.tensor(xs))))
        lo = float(_np(loss(eager.tensor(c0 - d), eager.tensor(xs))))
        num[i] = (hi - lo) / (2 * eps)
    np.testing.assert_allclose(_np(g), num, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(_np(gc), num, rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------------------
# hand-built models


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = h.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    onnx.checker.check_model(m, full_check=True)
    return m


def _vi(name, shape, t=F):
    return h.make_tensor_value_info(name, t, shape)


def _scan_body_cumsum():
    # state s, slice x -> s + x * w (w read from the outer scope), y = s * x
    return h.make_graph(
        [
            h.make_node("Mul", ["x", "w"], ["xw"]),
            h.make_node("Add", ["s", "xw"], ["s2"]),
            h.make_node("Mul", ["s", "x"], ["y"]),
        ],
        "body",
        [_vi("s", [3]), _vi("x", [3])],
        [_vi("s2", [3]), _vi("y", [3])],
    )


@pytest.mark.parametrize(
    "in_dir,out_dir", [(0, 0), (1, 1), (1, 0), (0, 1)], ids=["fwd", "rev", "rev-in", "rev-out"]
)
def test_scan_directions_and_outer_scope(in_dir, out_dir):
    node = h.make_node(
        "Scan",
        ["s0", "xs"],
        ["sN", "ys"],
        body=_scan_body_cumsum(),
        num_scan_inputs=1,
        scan_input_directions=[in_dir],
        scan_output_directions=[out_dir],
    )
    m = _model(
        [node],
        [_vi("s0", [3]), _vi("xs", [5, 3]), _vi("w", [3])],
        [_vi("sN", [3]), _vi("ys", [5, 3])],
    )
    r = np.random.RandomState(0)
    _check_model(m, *(r.randn(*s).astype(np.float32) for s in [(3,), (5, 3), (3,)]))


def test_scan_axes():
    node = h.make_node(
        "Scan",
        ["s0", "xs"],
        ["sN", "ys"],
        body=_scan_body_cumsum(),
        num_scan_inputs=1,
        scan_input_axes=[1],
        scan_output_axes=[-1],
    )
    m = _model(
        [node],
        [_vi("s0", [3]), _vi("xs", [3, 4]), _vi("w", [3])],
        [_vi("sN", [3]), _vi("ys", [3, 4])],
    )
    r = np.random.RandomState(1)
    _check_model(m, *(r.randn(*s).astype(np.float32) for s in [(3,), (3, 4), (3,)]))


def test_scan_size_one_and_two_scan_inputs():
    body = h.make_graph(
        [h.make_node("Add", ["a", "b"], ["ab"]), h.make_node("Add", ["s", "ab"], ["s2"])],
        "body",
        [_vi("s", []), _vi("a", []), _vi("b", [])],
        [_vi("s2", [])],
    )
    node = h.make_node("Scan", ["s0", "xa", "xb"], ["sN"], body=body, num_scan_inputs=2)
    m = _model([node], [_vi("s0", []), _vi("xa", [1]), _vi("xb", [1])], [_vi("sN", [])])
    _check_model(
        m, np.array(1.5, np.float32), np.array([2.0], np.float32), np.array([3.0], np.float32)
    )


def _loop_body(cond_expr=None, scan_out=True):
    nodes = [
        h.make_node("Cast", ["i"], ["fi"], to=F),
        h.make_node("Mul", ["v", "k"], ["vk"]),  # k read from the outer scope
        h.make_node("Add", ["vk", "fi"], ["v2"]),
    ]
    outs = [_vi("c_out", [], TP.BOOL), _vi("v2", [2])]
    if cond_expr is None:
        nodes.append(h.make_node("Identity", ["c"], ["c_out"]))
    else:
        nodes += cond_expr
    if scan_out:
        nodes.append(h.make_node("ReduceSum", ["v2"], ["y"], keepdims=0))
        outs.append(_vi("y", []))
    return h.make_graph(
        nodes, "loop_body", [_vi("i", [], TP.INT64), _vi("c", [], TP.BOOL), _vi("v", [2])], outs
    )


def _const(name, value):
    return h.make_node(
        "Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(value), name)
    )


@pytest.mark.parametrize("trips", [0, 1, 5])
def test_loop_static_trip_count_with_scan_outputs(trips):
    nodes = [
        _const("M", np.array(trips, np.int64)),
        _const("T", np.array(True)),
        h.make_node("Loop", ["M", "T", "v0"], ["vN", "ys"], body=_loop_body()),
    ]
    m = _model(nodes, [_vi("v0", [2]), _vi("k", [])], [_vi("vN", [2]), _vi("ys", [None])])
    _check_model(m, np.array([0.5, -1.0], np.float32), np.array(0.9, np.float32))


def _stop_when_big():
    return [
        h.make_node("ReduceSum", ["v2"], ["sv"], keepdims=0),
        _const("lim", np.array(20.0, np.float32)),
        h.make_node("Less", ["sv", "lim"], ["c_out"]),
    ]


@pytest.mark.parametrize("with_m", [False, True])
def test_loop_computed_condition_is_a_while_loop(with_m):
    nodes = [_const("T", np.array(True))]
    if with_m:
        nodes.append(_const("M", np.array(3, np.int64)))
    nodes.append(
        h.make_node(
            "Loop",
            ["M" if with_m else "", "T", "v0"],
            ["vN"],
            body=_loop_body(_stop_when_big(), scan_out=False),
        )
    )
    m = _model(nodes, [_vi("v0", [2]), _vi("k", [])], [_vi("vN", [2])])
    _check_model(m, np.array([0.5, 1.0], np.float32), np.array(1.5, np.float32))


def test_loop_runtime_trip_count_without_scan_outputs():
    node = h.make_node("Loop", ["M", "", "v0"], ["vN"], body=_loop_body(scan_out=False))
    m = _model([node], [_vi("M", [], TP.INT64), _vi("v0", [2]), _vi("k", [])], [_vi("vN", [2])])
    for trips in (0, 4):
        _check_model(
            m,
            np.array(trips, np.int64),
            np.array([0.5, 1.0], np.float32),
            np.array(0.5, np.float32),
        )


def test_loop_computed_condition_with_scan_outputs_is_refused():
    nodes = [
        _const("T", np.array(True)),
        _const("M", np.array(3, np.int64)),
        h.make_node("Loop", ["M", "T", "v0"], ["vN", "ys"], body=_loop_body(_stop_when_big())),
    ]
    m = _model(nodes, [_vi("v0", [2]), _vi("k", [])], [_vi("vN", [2]), _vi("ys", [None])])
    f = graphc.import_onnx(m)
    with pytest.raises(OnnxImportError, match=r"Loop.*scan outputs.*condition is computed"):
        f(np.zeros(2, np.float32), np.array(1.0, np.float32))


def test_loop_without_trip_count_or_condition_is_refused():
    node = h.make_node("Loop", ["", "", "v0"], ["vN"], body=_loop_body(scan_out=False))
    m = _model([node], [_vi("v0", [2]), _vi("k", [])], [_vi("vN", [2])])
    with pytest.raises(OnnxImportError, match="never ends"):
        graphc.import_onnx(m)(np.zeros(2, np.float32), np.array(1.0, np.float32))


def test_unsupported_operator_inside_a_body_is_listed():
    body = h.make_graph(
        [h.make_node("Add", ["s", "x"], ["s2"]), h.make_node("Hardmax", ["s2"], ["y"])],
        "body",
        [_vi("s", [3]), _vi("x", [3])],
        [_vi("s2", [3]), _vi("y", [3])],
    )
    node = h.make_node("Scan", ["s0", "xs"], ["sN", "ys"], body=body, num_scan_inputs=1)
    m = _model([node], [_vi("s0", [3]), _vi("xs", [2, 3])], [_vi("sN", [3]), _vi("ys", [2, 3])])
    with pytest.raises(graphc.UnsupportedOpError, match="Hardmax"):
        graphc.import_onnx(m)


def test_scan_carry_changing_dtype_is_refused_when_compiled():
    body = h.make_graph(
        [h.make_node("Cast", ["s"], ["s2"], to=TP.DOUBLE), h.make_node("Identity", ["x"], ["y"])],
        "body",
        [_vi("s", [3]), _vi("x", [3])],
        [_vi("s2", [3], TP.DOUBLE), _vi("y", [3])],
    )
    node = h.make_node("Scan", ["s0", "xs"], ["sN", "ys"], body=body, num_scan_inputs=1)
    g = h.make_graph(
        [node],
        "g",
        [_vi("s0", [3]), _vi("xs", [2, 3])],
        [_vi("sN", [3], TP.DOUBLE), _vi("ys", [2, 3])],
    )
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    f = graphc.import_onnx(m, check=False)
    with pytest.raises(TypeError, match="carry"):
        graphc.compile(f)(np.zeros(3, np.float32), np.zeros((2, 3), np.float32))


def _passthrough_scan_model():
    # the body returns an outer value (w) and its own state input (s) as scan outputs
    body = h.make_graph(
        [
            h.make_node("Identity", ["w"], ["y"]),
            h.make_node("Mul", ["s", "x"], ["sx"]),
            h.make_node("Mul", ["sx", "w"], ["s2"]),
        ],
        "b",
        [_vi("s", [3]), _vi("x", [3])],
        [_vi("s2", [3]), _vi("y", [3]), _vi("s", [3])],
    )
    node = h.make_node("Scan", ["s0", "xs"], ["sN", "ys", "ss"], body=body, num_scan_inputs=1)
    w = onnx.numpy_helper.from_array(np.array([0.5, 2.0, -1.0], np.float32), "w")
    return _model(
        [node],
        [_vi("s0", [3]), _vi("xs", [4, 3])],
        [_vi("sN", [3]), _vi("ys", [4, 3]), _vi("ss", [4, 3])],
        inits=[w],
    )


@pytest.mark.parametrize("trainable", [False, True])
def test_scan_outputs_passing_values_through_noncontiguous(trainable):
    """Checked against onnx's reference evaluator: ONNX Runtime 1.32 returns zeros for a
    scan output that is the body's own state input."""
    from onnx.reference import ReferenceEvaluator

    m = _passthrough_scan_model()
    r = np.random.RandomState(0)
    s0 = r.randn(3).astype(np.float32)
    xs = r.randn(4, 6).astype(np.float32)[:, ::2]  # non-contiguous
    want = ReferenceEvaluator(m).run(None, {"s0": s0, "xs": np.ascontiguousarray(xs)})
    f = graphc.import_onnx(m, trainable=trainable)
    for got in (f(s0, xs), graphc.compile(f)(s0, xs)):
        for g, w in zip(got, want):
            np.testing.assert_allclose(_np(g), w, rtol=1e-5, atol=1e-6)


def test_trainable_parameter_read_inside_a_scan_body_gets_its_gradient():
    f = graphc.import_onnx(_passthrough_scan_model(), trainable=True)
    w = f.parameters["w"]
    r = np.random.RandomState(2)
    s0, xs = r.randn(3).astype(np.float32), r.randn(4, 3).astype(np.float32)

    def step(a, b):
        loss = f(a, b)[0].sum()
        loss.backward()
        return loss

    step(eager.from_numpy(s0), eager.from_numpy(xs))
    g_eager = w.grad.numpy().copy()
    w.grad = None
    graphc.compile(step)(eager.from_numpy(s0), eager.from_numpy(xs))
    np.testing.assert_allclose(w.grad.numpy(), g_eager, rtol=1e-5, atol=1e-6)
    w0, num = w.detach().numpy().astype(np.float64), np.zeros(3)
    s64, x64 = s0.astype(np.float64), xs.astype(np.float64)
    for i in range(3):  # the same recurrence in float64
        for sgn in (1, -1):
            ww = w0.copy()
            ww[i] += sgn * 1e-6
            s = s64
            for x in x64:
                s = s * x * ww
            num[i] += sgn * s.sum() / 2e-6
    np.testing.assert_allclose(g_eager, num, rtol=1e-3, atol=1e-4)


def test_grad_through_imported_static_loop_matches_finite_differences():
    m = graphc.export_onnx(
        lambda x: graphc.fori_loop(0, 3, lambda i, c: (c * 1.5 + i).sin(), x),
        eager.randn(4, dtype=eager.float64),
    )
    assert "Loop" in _ops(m)
    f = graphc.import_onnx(m)
    loss = lambda x: f(x).sum()
    x = np.random.RandomState(3).randn(4)
    g = graphc.grad(loss)(eager.tensor(x))
    gc = graphc.compile(graphc.grad(loss))(eager.tensor(x))
    num = np.zeros(4)
    for i in range(4):
        d = np.zeros(4)
        d[i] = 1e-6
        num[i] = (float(_np(loss(x + d))) - float(_np(loss(x - d)))) / 2e-6
    np.testing.assert_allclose(_np(g), num, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(_np(gc), num, rtol=1e-6, atol=1e-8)
