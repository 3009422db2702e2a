"""Softmax, LogSoftmax, LayerNormalization (and Gelu from opset 20) exported as single
ONNX operators when the optimized graph holds their exact primitive region, checked
against eager and ONNX Runtime; and the fallback to primitives (always correct) when a
region is not intact: an intermediate value used elsewhere or returned, other axes,
size-0 shapes, gradients, hand-built graphs that only look similar."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import eager  # noqa: E402
import eager.nn.functional as F  # noqa: E402
import graphc  # noqa: E402
from graphc.ir import Graph  # noqa: E402
from graphc.onnx.export import graph_to_model  # noqa: E402
from graphc.pytree import flatten  # noqa: E402

TOL = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}


def _ops(model):
    return [n.op_type for n in model.graph.node]


def _check(fn, *args, opset=None, expect=None, absent=(), tol=None):
    """Export ``fn``; the model's outputs under ORT equal ``fn``'s; ``expect`` operator
    types must appear, ``absent`` must not; returns the model."""
    model = graphc.export_onnx(fn, *args, opset=opset)
    onnx.checker.check_model(model, full_check=True)
    ops = _ops(model)
    for op in expect or ():
        assert op in ops, ops
    for op in absent:
        assert op not in ops, ops
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {i.name: a.detach().numpy() for i, a in zip(sess.get_inputs(), args)})
    want = [o.detach().numpy() for o in flatten(fn(*args))[0] if isinstance(o, eager.Tensor)]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, equal_nan=True, **(tol or TOL[w.dtype.type]))
    # and the round trip: the imported model computes the same
    back = graphc.import_onnx(model)(*[a.detach().numpy() for a in args])
    for g, w in zip(back if isinstance(back, tuple) else (back,), want):
        np.testing.assert_allclose(g.numpy(), w, equal_nan=True, **(tol or TOL[w.dtype.type]))
    return model


@pytest.mark.parametrize("dtype", [eager.float32, eager.float64])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_and_log_softmax(dtype, dim):
    x = eager.randn(3, 4, 5, dtype=dtype)
    m = _check(lambda x: F.softmax(x, dim=dim), x, expect=["Softmax"], absent=["Exp"])
    assert m.graph.node[0].attribute[0].i == dim % 3
    _check(lambda x: F.log_softmax(x, dim=dim), x, expect=["LogSoftmax"], absent=["Exp"])
    # both of the same input: graphc's passes share their max and x - max, so neither
    # region is intact and both export as primitives (correct, documented)
    _check(lambda x: x.softmax(dim) * 2 + x.log_softmax(dim), x)


def test_softmax_of_infinities_and_nan_matches():
    x = eager.tensor([[1.0, float("inf"), 2.0], [float("-inf")] * 3, [float("nan"), 0.0, 1.0],
                      [1e30, -1e30, 0.0]])
    _check(lambda x: F.softmax(x, dim=1), x, expect=["Softmax"])
    _check(lambda x: F.log_softmax(x, dim=1), x, expect=["LogSoftmax"])


@pytest.mark.parametrize("dtype", [eager.float32, eager.float64])
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
@pytest.mark.parametrize("normalized", [(5,), (4, 5)])
def test_layer_norm(dtype, affine, normalized):
    x = eager.randn(3, 4, 5, dtype=dtype)
    w = eager.randn(*normalized, dtype=dtype) if affine != "none" else None
    b = eager.randn(*normalized, dtype=dtype) if affine == "both" else None
    if dtype == eager.float64:  # ONNX's epsilon is a float32: 1e-3 in float64 is not one
        _check(lambda x: F.layer_norm(x, normalized, w, b, 1e-3), x,
               absent=["LayerNormalization"])
    eps = 2.0**-10  # exactly a float32
    m = _check(lambda x: F.layer_norm(x, normalized, w, b, eps), x,
               expect=["LayerNormalization"], absent=["Sqrt"])
    ln = next(n for n in m.graph.node if n.op_type == "LayerNormalization")
    attrs = {a.name: a for a in ln.attribute}
    assert attrs["axis"].i == 3 - len(normalized)
    assert attrs["epsilon"].f == eps
    assert len(ln.input) == (3 if affine == "both" else 2)


def test_layer_norm_module_and_attention_model():
    ln = eager.nn.LayerNorm(6)
    _check(ln, eager.randn(2, 6), expect=["LayerNormalization"])
    from graphc.tools import models

    M = models.build()
    eager.manual_seed(0)
    att = M.AttentionBlock()
    tok = eager.randint(0, 128, (2, 16))
    with eager.no_grad():
        _check(att, tok, expect=["Softmax"], tol=dict(rtol=2e-4, atol=2e-5))


def test_gelu_needs_opset_20():
    x = eager.randn(3, 4)
    _check(F.gelu, x, absent=["Gelu"])
    _check(F.gelu, x, opset=20, expect=["Gelu"], absent=["Erf"])
    _check(lambda x: F.gelu(x, approximate="tanh"), x, opset=20, absent=["Gelu"])


def test_single_operators_false_keeps_primitives():
    x = eager.randn(3, 4)
    m = graphc.export_onnx(lambda x: x.softmax(-1), x, single_operators=False)
    assert "Softmax" not in _ops(m) and "Exp" in _ops(m)


# --- the fallback: regions that are not intact export their primitives -----------------


def test_intermediate_returned_falls_back():
    def f(x):
        e = (x - x.amax(-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True), e

    _check(f, eager.randn(3, 4), absent=["Softmax"])


def test_intermediate_used_elsewhere_falls_back():
    def f(x):
        m = x.amax(-1, keepdim=True)
        e = (x - m).exp()
        return e / e.sum(-1, keepdim=True) + m

    _check(f, eager.randn(3, 4), absent=["Softmax"])


def test_mismatched_axes_fall_back():
    def f(x):  # max over one axis, sum over another: not a softmax
        e = (x - x.amax(0, keepdim=True)).exp()
        return e / e.sum(1, keepdim=True)

    _check(f, eager.randn(3, 4), absent=["Softmax"])


def test_hand_written_softmax_is_the_operator():
    def f(x):
        e = (x - x.amax(1, keepdim=True)).exp()
        return e / e.sum(1, keepdim=True)

    _check(f, eager.randn(3, 4, dtype=eager.float64), expect=["Softmax"])


def test_wrong_epsilon_position_or_constant_falls_back():
    def f(x):  # 1 / sqrt(var + eps) but the centred value is not x - mean(x)
        c = x - x.mean(-1, keepdim=True) * 0.5
        return c * (1.0 / ((c * c).mean(-1, keepdim=True) + 1e-5).sqrt())

    _check(f, eager.randn(3, 4), absent=["LayerNormalization"])

    def g(x):  # normalized over a leading axis: ONNX's axis means trailing axes
        c = x - x.mean(0, keepdim=True)
        return c * (1.0 / ((c * c).mean(0, keepdim=True) + 1e-5).sqrt())

    _check(g, eager.randn(3, 4), absent=["LayerNormalization"])


def test_size_zero_and_int_fall_back():
    _check(lambda x: x.softmax(-1), eager.randn(0, 4), absent=["Softmax"])
    _check(lambda x: F.layer_norm(x, (3,)), eager.randn(0, 3), absent=["LayerNormalization"])


@pytest.mark.parametrize("which", ["softmax", "log_softmax", "layer_norm"])
def test_gradients_are_correct(which):
    w = eager.randn(4, dtype=eager.float64)

    def loss(x):
        if which == "softmax":
            y = x.softmax(-1)
        elif which == "log_softmax":
            y = x.log_softmax(-1)
        else:
            y = F.layer_norm(x, (4,), w, None, 1e-5)
        return (y * y.flip(-1)).sum()

    x = eager.randn(3, 4, dtype=eager.float64)
    _check(graphc.value_and_grad(loss), x)
    _check(graphc.grad(loss), x)


def test_hand_built_graph_lookalike_falls_back():
    """max over one tensor, subtracted from another: structurally not a softmax."""
    g = Graph("lookalike")
    x = g.add_input("x", (2, 3), np.float32)
    z = g.add_input("z", (2, 3), np.float32)
    mx = g.add_node("max", [z], {"axis": (1,), "keepdim": True}, src="t:1")
    d = g.add_node("sub", [x, mx], {}, src="t:2")
    e = g.add_node("exp", [d], {}, src="t:3")
    s = g.add_node("sum", [e], {"axis": (1,), "keepdim": True}, src="t:4")
    y = g.add_node("div", [e, s], {}, src="t:5")
    g.outputs = [y]
    m = graph_to_model(g, input_names=["x", "z"], output_names=["y"])
    assert "Softmax" not in _ops(m)
    rng = np.random.default_rng(0)
    xv, zv = rng.standard_normal((2, 3), np.float32), rng.standard_normal((2, 3), np.float32)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {"x": xv, "z": zv})
    e_ = np.exp(xv - zv.max(1, keepdims=True))
    np.testing.assert_allclose(got, e_ / e_.sum(1, keepdims=True), rtol=1e-6)
    g.set_operands(mx, [x])  # now it is one: the same graph as a softmax
    m = graph_to_model(g, input_names=["x", "z"], output_names=["y"])
    assert "Softmax" in _ops(m)
