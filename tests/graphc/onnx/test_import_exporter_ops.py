"""The operators import_onnx gained so that it reads back what export_onnx writes, on
hand-built models with the attributes the exporter does not use (IsInf's detect flags,
CumSum's exclusive, TopK's largest=0, ConvTranspose's asymmetric pads and
output_padding, negative indices), against ONNX Runtime; and their refusals."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import graphc  # noqa: E402

T = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.int64: TensorProto.INT64,
     np.bool_: TensorProto.BOOL}


def _model(op, inputs, outputs, inits=(), opset=18, **attrs):
    """One node ``op`` over graph inputs ``inputs`` (name, array) and initializers."""
    ins = [helper.make_tensor_value_info(n, T[a.dtype.type], a.shape) for n, a in inputs]
    outs = [helper.make_tensor_value_info(n, t, None) for n, t in outputs]
    node = helper.make_node(op, [n for n, _ in inputs] + [n for n, _ in inits],
                            [n for n, _ in outputs], name=f"the_{op}", **attrs)
    g = helper.make_graph([node], op, ins, outs,
                          [numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)  # the outputs' shapes
    for o in m.graph.output:
        o.CopyFrom(next(v for v in inferred.graph.output if v.name == o.name))
    return m


def _both(model, *arrays, compile_=True):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {i.name: a for i, a in zip(sess.get_inputs(), arrays)})
    f = graphc.import_onnx(model)
    runs = [f(*arrays)]
    if compile_:
        runs.append(graphc.compile(f)(*arrays))
    for got in runs:
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want):
            g = np.asarray(g)
            assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, equal_nan=True)


X = np.array([[1.0, -np.inf, np.nan, np.inf], [0.5, 2.0, -3.0, 0.0]], np.float32)


@pytest.mark.parametrize("pos,neg", [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_isinf_flags(pos, neg):
    m = _model("IsInf", [("x", X)], [("y", TensorProto.BOOL)], detect_positive=pos,
               detect_negative=neg)
    _both(m, X)


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum(exclusive, reverse, axis):
    x = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    m = _model("CumSum", [("x", x)], [("y", TensorProto.FLOAT)],
               inits=[("axis", np.array(axis, np.int64))], exclusive=exclusive, reverse=reverse)
    _both(m, x)


@pytest.mark.parametrize("largest", [0, 1])
def test_topk_ties_in_index_order(largest):
    x = np.array([[3.0, 1.0, 3.0, 2.0, 1.0]], np.float32)
    m = _model("TopK", [("x", x)], [("v", TensorProto.FLOAT), ("i", TensorProto.INT64)],
               inits=[("k", np.array([3], np.int64))], largest=largest, axis=1)
    _both(m, x)


def test_gather_and_scatter_elements_negative_indices():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[-1, 0], [1, -4], [2, 3]], np.int64)
    m = _model("GatherElements", [("x", x), ("i", idx)], [("y", TensorProto.FLOAT)], axis=1)
    _both(m, x, idx, compile_=True)
    u = np.ones((3, 2), np.float32) * 7
    for red in ("none", "add"):
        m = _model("ScatterElements", [("x", x), ("i", idx), ("u", u)],
                   [("y", TensorProto.FLOAT)], axis=1, reduction=red)
        _both(m, x, idx, u)


def test_scatter_nd_rows():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    idx = np.array([[2], [-1]], np.int64)
    u = np.full((2, 3), 9.0, np.float32)
    for red in ("none", "add"):
        m = _model("ScatterND", [("x", x), ("i", idx), ("u", u)], [("y", TensorProto.FLOAT)],
                   reduction=red)
        _both(m, x, idx, u)


def test_refusals_name_the_node():
    x = np.zeros((4, 3), np.float32)
    m = _model("ScatterND", [("x", x), ("i", np.zeros((2, 2), np.int64)),
                             ("u", np.zeros(2, np.float32))], [("y", TensorProto.FLOAT)])
    with pytest.raises(graphc.onnx.OnnxImportError, match="'the_ScatterND'.*last dimension is 1"):
        graphc.import_onnx(m)(x, np.zeros((2, 2), np.int64), np.zeros(2, np.float32))
    m = _model("ScatterElements", [("x", x), ("i", np.zeros((1, 1), np.int64)),
                                   ("u", np.zeros((1, 1), np.float32))],
               [("y", TensorProto.FLOAT)], reduction="mul")
    with pytest.raises(graphc.onnx.OnnxImportError, match="'the_ScatterElements'.*'mul'"):
        graphc.import_onnx(m)(x, np.zeros((1, 1), np.int64), np.zeros((1, 1), np.float32))
    m = _model("GatherElements", [("x", x)], [("y", TensorProto.FLOAT)],
               inits=[("i", np.array([[5]], np.int64))])
    with pytest.raises(graphc.onnx.OnnxImportError, match="'the_GatherElements'.*out of range"):
        graphc.import_onnx(m)(x)


@pytest.mark.parametrize("pads,opad,stride,group", [
    ([0, 0, 0, 0], [0, 0], [1, 1], 1),
    ([1, 0, 0, 2], [0, 0], [2, 2], 1),
    ([1, 1, 1, 1], [1, 0], [2, 3], 2),
    ([0, 2, 1, 0], [1, 1], [2, 2], 1),
])
def test_conv_transpose(pads, opad, stride, group):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 5, 4)).astype(np.float32)
    w = rng.standard_normal((4, 6 // group, 3, 2)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    m = _model("ConvTranspose", [("x", x)], [("y", TensorProto.FLOAT)],
               inits=[("w", w), ("b", b)], pads=pads, output_padding=opad, strides=stride,
               group=group, kernel_shape=[3, 2])
    _both(m, x)


@pytest.mark.parametrize("pads,stride", [([0, 0, 0, 0], [2, 2]), ([1, 1, 1, 1], [1, 2])])
def test_maxpool_indices_whole_tensor(pads, stride):
    x = np.random.default_rng(1).standard_normal((2, 3, 6, 5)).astype(np.float32)
    m = _model("MaxPool", [("x", x)], [("y", TensorProto.FLOAT), ("i", TensorProto.INT64)],
               kernel_shape=[3, 3], pads=pads, strides=stride)
    _both(m, x)
    m = _model("MaxPool", [("x", x)], [("y", TensorProto.FLOAT), ("i", TensorProto.INT64)],
               kernel_shape=[3, 3], pads=[0, 1, 1, 0])
    with pytest.raises(graphc.onnx.OnnxImportError, match="Indices output.*symmetric pads"):
        graphc.import_onnx(m)(x)
