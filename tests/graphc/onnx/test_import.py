"""graphc.import_onnx against ONNX Runtime: per-operator models built with
onnx.helper, the committed PyTorch exports (mlp.onnx, cnn.onnx), shape subgraphs that
fold to constants, transforms of imported models, hostile models."""

from __future__ import annotations

import numpy as np
import pytest

import eager
import graphc

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from graphc.onnx import OnnxImportError, UnsupportedOnnxOperatorError, import_onnx  # noqa: E402

from .torch_models import DATA, EXAMPLE_SHAPES  # noqa: E402

RNG = np.random.default_rng(0)
NP2ONNX = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.bool_): TensorProto.BOOL,
}


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def f64(*shape):
    return RNG.standard_normal(shape)


def model(op, feeds, attrs=None, inits=None, opset=17, n_out=1, extra_nodes=(), out_dtype=None):
    """A one-node model: graph inputs ``feeds`` (name -> array), initializers ``inits``
    (name -> array, or None for an omitted optional input); inputs in that order."""
    inits = inits or {}
    names = list(feeds) + list(inits)
    node = helper.make_node(op, [n if (n in feeds or inits[n] is not None) else "" for n in names],
                            [f"y{i}" for i in range(n_out)], name=f"{op.lower()}_0",
                            **(attrs or {}))
    ins = [helper.make_tensor_value_info(n, NP2ONNX[a.dtype], a.shape) for n, a in feeds.items()]
    outs = [helper.make_tensor_value_info(f"y{i}", out_dtype or TensorProto.UNDEFINED, None)
            for i in range(n_out)]
    init = [numpy_helper.from_array(a, n) for n, a in inits.items() if a is not None]
    g = helper.make_graph(list(extra_nodes) + [node], "g", ins, outs, init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return _typed_outputs(m)


def _typed_outputs(m):
    """The model with its outputs' dtypes filled in by ONNX shape inference."""
    inferred = onnx.shape_inference.infer_shapes(m)
    for o, io in zip(m.graph.output, inferred.graph.output):
        o.type.CopyFrom(io.type)
    return m


def ort_run(m, feeds):
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def check(m, feeds, rtol=1e-5, atol=1e-6, compiled=True):
    """Eager and compiled calls of the imported model equal ONNX Runtime."""
    ref = ort_run(m, feeds)
    f = import_onnx(m)
    args = [feeds[n] for n in f.input_names]
    runs = {"eager": f(*[eager.from_numpy(a.copy()) for a in args])}
    if compiled:
        runs["compiled"] = graphc.compile(f)(*args)
    for how, out in runs.items():
        outs = out if isinstance(out, tuple) else (out,)
        assert len(outs) == len(ref)
        for o, r in zip(outs, ref):
            o = o.numpy() if hasattr(o, "numpy") else np.asarray(o)
            assert o.shape == r.shape, (how, o.shape, r.shape)
            assert o.dtype == r.dtype, (how, o.dtype, r.dtype)
            if r.dtype.kind in "fc":
                np.testing.assert_allclose(o, r, rtol=rtol, atol=atol, err_msg=how)
            else:
                np.testing.assert_array_equal(o, r, err_msg=how)
    return f


I64 = np.int64
CASES = [
    # elementwise with broadcasting, three dtypes
    ("Add", {"a": f32(2, 3), "b": f32(3)}, {}, {}),
    ("Sub", {"a": f64(2, 1, 3), "b": f64(4, 1)}, {}, {}),
    ("Mul", {"a": RNG.integers(-9, 9, (2, 3)), "b": RNG.integers(-9, 9, (1, 3))}, {}, {}),
    ("Div", {"a": f32(2, 3), "b": f32(2, 3) + 3}, {}, {}),
    ("Div", {"a": np.array([7, -7, 7, -7, 0])}, {}, {"b": np.array([2], I64)}),
    ("Div", {"a": np.array([[7, -7, 7, -7, 0]])}, {}, {"b": np.array([-2], I64)}),
    # graphc compiles integer remainders only by a constant divisor: an initializer
    ("Mod", {"a": np.array([7, -7, 7, -7, 0])}, {}, {"b": np.array([3], I64)}),
    ("Mod", {"a": np.array([7, -7, 7, -7, 0])}, {}, {"b": np.array(-3, I64)}),
    ("Mod", {"a": np.array([7, -7, 7, -7])}, {"fmod": 1}, {"b": np.array([3], I64)}),
    ("Mod", {"a": np.array([7, -7, 7, -7])}, {"fmod": 1}, {"b": np.array([-3], I64)}),
    ("Mod", {"a": f32(5) * 5, "b": np.full(5, 1.5, np.float32)}, {"fmod": 1}, {}),
    ("Pow", {"a": np.abs(f32(2, 3)) + 0.5, "b": f32(3)}, {}, {}),
    ("Neg", {"x": f64(3, 2)}, {}, {}),
    ("Abs", {"x": RNG.integers(-5, 5, (4,))}, {}, {}),
    ("Exp", {"x": f32(3, 2)}, {}, {}),
    ("Log", {"x": np.abs(f32(3, 2)) + 0.1}, {}, {}),
    ("Sqrt", {"x": np.abs(f64(3, 2))}, {}, {}),
    ("Tanh", {"x": f32(3, 2)}, {}, {}),
    ("Sigmoid", {"x": f64(3, 2)}, {}, {}),
    ("Relu", {"x": f32(0, 3)}, {}, {}),
    ("LeakyRelu", {"x": f32(3, 2)}, {"alpha": 0.2}, {}),
    ("Gelu", {"x": f32(3, 2)}, {}, {}, 20),
    ("Gelu", {"x": f32(3, 2)}, {"approximate": "tanh"}, {}, 20),
    ("Erf", {"x": f32(3, 2)}, {}, {}),
    ("Softmax", {"x": f32(2, 3, 4)}, {"axis": 1}, {}),
    ("Softmax", {"x": f32(2, 3, 4)}, {"axis": 1}, {}, 11),  # coerced to 2-D
    ("LogSoftmax", {"x": f64(2, 3)}, {}, {}),
    ("Gemm", {"a": f32(3, 4), "b": f32(5, 4)}, {"transB": 1, "alpha": 0.5, "beta": 2.0},
     {"c": f32(5)}),
    ("Gemm", {"a": f32(4, 3), "b": f32(4, 5)}, {"transA": 1}, {"c": f32(3, 1)}),
    ("Gemm", {"a": f64(3, 4), "b": f64(4, 2)}, {}, {"c": np.array(1.5)}),
    ("MatMul", {"a": f32(2, 3, 4), "b": f32(4, 5)}, {}, {}),
    ("MatMul", {"a": f64(4), "b": f64(3, 4, 2)}, {}, {}),
    ("MatMul", {"a": RNG.integers(-3, 3, (2, 3)), "b": RNG.integers(-3, 3, (3, 2))}, {}, {}),
    ("Conv", {"x": f32(1, 2, 6, 6)}, {"pads": [1, 0, 2, 1], "strides": [2, 1]},
     {"w": f32(4, 2, 3, 3), "b": f32(4)}),
    ("Conv", {"x": f32(2, 4, 5, 5)}, {"group": 2, "dilations": [2, 1], "pads": [1, 1, 1, 1]},
     {"w": f32(6, 2, 2, 3)}),
    ("Conv", {"x": f32(1, 2, 7, 7)}, {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
     {"w": f32(3, 2, 3, 3)}),
    ("Conv", {"x": f32(2, 3, 9)}, {"pads": [2, 1]}, {"w": f32(2, 3, 3), "b": f32(2)}),
    ("MaxPool", {"x": f32(1, 2, 7, 7)}, {"kernel_shape": [3, 3], "strides": [2, 2],
                                         "pads": [1, 1, 1, 1]}, {}),
    ("MaxPool", {"x": f32(1, 2, 7, 6)}, {"kernel_shape": [2, 2], "ceil_mode": 1,
                                         "strides": [2, 2]}, {}),
    ("MaxPool", {"x": f32(1, 1, 5, 5)}, {"kernel_shape": [2, 2], "pads": [0, 0, 1, 1]}, {}),
    ("AveragePool", {"x": f32(1, 2, 6, 6)}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, {}),
    ("AveragePool", {"x": f32(1, 2, 6, 6)}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                             "count_include_pad": 1, "strides": [2, 2]}, {}),
    ("GlobalAveragePool", {"x": f32(2, 3, 4, 5)}, {}, {}),
    ("GlobalMaxPool", {"x": f32(2, 3, 4)}, {}, {}),
    ("Flatten", {"x": f32(2, 3, 4)}, {"axis": 2}, {}),
    ("Flatten", {"x": f32(2, 3, 4)}, {"axis": 0}, {}),
    ("Reshape", {"x": f32(2, 3, 4)}, {}, {"s": np.array([0, -1, 2], I64)}),
    ("Reshape", {"x": f32(2, 3, 4)}, {}, {"s": np.array([24], I64)}),
    ("Transpose", {"x": f32(2, 3, 4)}, {"perm": [2, 0, 1]}, {}),
    ("Transpose", {"x": RNG.integers(0, 9, (2, 3))}, {}, {}),
    ("Concat", {"a": f32(2, 3), "b": f32(2, 1)}, {"axis": -1}, {}),
    ("Split", {"x": f32(5, 2)}, {"axis": 0}, {"s": np.array([2, 3], I64)}, 17, 2),
    ("Split", {"x": f32(2, 6)}, {"axis": 1}, {}, 17, 3),
    ("Slice", {"x": f32(5, 6)}, {}, {"st": np.array([1, -1], I64), "en": np.array([4, -7], I64),
                                     "ax": np.array([0, 1], I64), "sp": np.array([2, -2], I64)}),
    ("Slice", {"x": f32(5, 6)}, {}, {"st": np.array([2], I64), "en": np.array([100], I64),
                                     "ax": np.array([-1], I64)}),
    ("Slice", {"x": f32(5, 6)}, {}, {"st": np.array([3], I64), "en": np.array([3], I64)}),
    ("Gather", {"x": f32(5, 3)}, {"axis": 0}, {"i": np.array([[0, -1], [2, 2]], I64)}),
    ("Gather", {"x": f32(5, 3)}, {"axis": 1}, {"i": np.array(-2, I64)}),
    ("Gather", {"x": f32(5, 3), "i": np.array([4, 0, -5], I64)}, {"axis": 0}, {}),
    ("Squeeze", {"x": f32(1, 3, 1)}, {}, {"ax": np.array([-1], I64)}),
    ("Squeeze", {"x": f32(1, 3, 1)}, {}, {}),
    ("Squeeze", {"x": f32(1, 3, 1)}, {"axes": [0]}, {}, 11),
    ("Unsqueeze", {"x": f32(3, 2)}, {}, {"ax": np.array([0, -1], I64)}),
    ("Unsqueeze", {"x": f32(3)}, {"axes": [1]}, {}, 11),
    ("ReduceSum", {"x": f32(2, 3, 4)}, {"keepdims": 0}, {"ax": np.array([0, 2], I64)}),
    ("ReduceSum", {"x": RNG.integers(-5, 5, (2, 3))}, {}, {}),
    ("ReduceMean", {"x": f64(2, 3, 4)}, {}, {"ax": np.array([-1], I64)}, 18),
    ("ReduceMean", {"x": f32(2, 3, 4)}, {"axes": [1], "keepdims": 0}, {}, 13),
    ("ReduceMax", {"x": f32(2, 3, 4)}, {"keepdims": 0}, {"ax": np.array([1], I64)}, 18),
    ("ReduceMin", {"x": RNG.integers(-5, 5, (2, 3))}, {"axes": [0]}, {}, 13),
    ("Cast", {"x": f32(3, 4) * 4}, {"to": TensorProto.INT64}, {}),
    ("Cast", {"x": RNG.integers(-5, 5, (3,))}, {"to": TensorProto.FLOAT}, {}),
    ("Identity", {"x": f32(2)}, {}, {}),
    ("Where", {"c": RNG.random((2, 3)) > 0.5, "a": f32(2, 3), "b": f32(3)}, {}, {}),
    ("Equal", {"a": RNG.integers(0, 3, (4,)), "b": RNG.integers(0, 3, (4,))}, {}, {}),
    ("Less", {"a": f32(2, 3), "b": f32(3)}, {}, {}),
    ("Greater", {"a": f64(2, 3), "b": f64(2, 1)}, {}, {}),
    ("LayerNormalization", {"x": f32(2, 3, 4)}, {"axis": -1, "epsilon": 1e-3},
     {"s": f32(4), "b": f32(4)}),
    ("LayerNormalization", {"x": f32(2, 3, 4)}, {"axis": 1}, {"s": f32(3, 4)}),
    ("BatchNormalization", {"x": f32(2, 3, 4, 4)}, {"epsilon": 1e-3},
     {"s": f32(3), "b": f32(3), "m": f32(3), "v": np.abs(f32(3)) + 0.5}),
    ("Dropout", {"x": f32(3, 2)}, {}, {}),
    ("Expand", {"x": f32(3, 1)}, {}, {"s": np.array([2, 1, 4], I64)}),
    ("Clip", {"x": f32(3, 4)}, {}, {"lo": np.array(-0.5, np.float32),
                                     "hi": np.array(0.5, np.float32)}),
    ("Clip", {"x": f32(3, 4)}, {}, {"lo": None, "hi": np.array(0.1, np.float32)}),
    ("Einsum", {"a": f32(2, 3, 4), "b": f32(2, 4, 5)}, {"equation": "bij,bjk->bik"}, {}),
    ("Shape", {"x": f32(2, 3, 4)}, {"start": 1}, {}, 17),
    ("Tile", {"x": f32(2, 3)}, {}, {"r": np.array([2, 1], I64)}),
    ("Pad", {"x": f32(2, 3)}, {"mode": "constant"},
     {"p": np.array([0, 1, 1, 2], I64), "v": np.array(1.5, np.float32)}),
    ("Pad", {"x": f32(1, 2, 4)}, {"mode": "reflect"}, {"p": np.array([0, 0, 2, 0, 0, 1], I64)}),
    ("Sum", {"a": f32(2, 3), "b": f32(3), "c": f32(2, 1)}, {}, {}),
    ("Max", {"a": f32(2, 3), "b": f32(3)}, {}, {}),
    ("AveragePool", {"x": f32(1, 2, 7, 6)}, {"kernel_shape": [3, 2], "strides": [2, 2],
                                             "ceil_mode": 1}, {}),
    ("Conv", {"x": f32(1, 2, 6, 5)}, {"auto_pad": "SAME_LOWER", "strides": [2, 1]},
     {"w": f32(3, 2, 2, 2)}),
    ("Round", {"x": np.array([0.5, 1.5, 2.5, -0.5, -1.5, 0.49, 2.51], np.float32)}, {}, {}),
    ("Cast", {"x": np.array([-2.7, -0.5, 0.5, 2.7], np.float32)}, {"to": TensorProto.INT32},
     {}),
    ("Cast", {"x": np.array([-2.0, 0.0, 0.5], np.float64)}, {"to": TensorProto.BOOL}, {}),
    ("Clip", {"x": f32(3, 4)}, {"min": -0.2, "max": 0.3}, {}, 7),
    ("Clip", {"x": RNG.integers(-9, 9, (5,))}, {}, {"lo": np.array(-2, I64),
                                                     "hi": np.array(3, I64)}),
    ("Range", {}, {}, {"a": np.array(1.0, np.float32), "b": np.array(2.2, np.float32),
                       "c": np.array(0.25, np.float32)}),
    ("Range", {}, {}, {"a": np.array(5, I64), "b": np.array(-4, I64), "c": np.array(-3, I64)}),
    ("ConstantOfShape", {}, {"value": numpy_helper.from_array(np.array([7], I64))},
     {"s": np.array([2, 3], I64)}),
    ("Size", {"x": f32(2, 3)}, {}, {}),
    ("ArgMax", {"x": f32(3, 4)}, {"axis": 1, "keepdims": 0}, {}),
    ("ArgMin", {"x": f32(3, 4)}, {"axis": -2}, {}),
    ("Not", {"x": RNG.random(4) > 0.5}, {}, {}),
    ("And", {"a": RNG.random((2, 4)) > 0.5, "b": RNG.random(4) > 0.5}, {}, {}),
    ("Xor", {"a": RNG.random(4) > 0.5, "b": RNG.random(4) > 0.5}, {}, {}),
    ("Pow", {"a": RNG.integers(-3, 4, (5,)), "b": np.array([2, 3, 1, 0, 2])}, {}, {}),
    ("Pow", {"a": np.abs(f64(3)) + 0.1, "b": np.array(2.5)}, {}, {}),
    ("HardSigmoid", {"x": f32(3, 4) * 4}, {"alpha": 0.3}, {}),
    ("Elu", {"x": f32(3, 4)}, {"alpha": 0.7}, {}),
    ("PRelu", {"x": f32(2, 3, 2)}, {}, {"s": f32(3, 1)}),
    ("Softplus", {"x": f32(3, 4)}, {}, {}),
    ("Sign", {"x": np.array([-2.0, 0.0, 3.0], np.float32)}, {}, {}),
    ("ReduceProd", {"x": f32(2, 3, 4)}, {"axes": [0, 2], "keepdims": 0}, {}, 13),
    ("Gather", {"x": np.arange(12).reshape(3, 4)}, {"axis": 1},
     {"i": np.array([[3], [-4]], I64)}),
    ("Pad", {"x": f32(2, 3)}, {"mode": "edge"}, {"p": np.array([1, 0, 0, 2], I64)}),
    ("Pad", {"x": f32(3, 4)}, {"mode": "reflect"}, {"p": np.array([2, 1, 1, 3], I64)}),
    ("Pad", {"x": f32(3, 4)}, {"mode": "constant"}, {"p": np.array([-1, 1, 0, -2], I64)}),
    ("MatMul", {"a": f32(3), "b": f32(3)}, {}, {}),
]


def _id(c):
    return c[0]


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_operator_matches_onnxruntime(case):
    op, feeds, attrs, inits = case[:4]
    opset = case[4] if len(case) > 4 else 17
    n_out = case[5] if len(case) > 5 else 1
    feeds = {k: np.asarray(v) for k, v in feeds.items()}
    m = model(op, feeds, attrs, inits, opset=opset, n_out=n_out)
    check(m, feeds)


def test_every_case_operator_is_supported_and_listed():
    from graphc.onnx.importer import SUPPORTED_OPERATORS

    assert {c[0] for c in CASES} <= set(SUPPORTED_OPERATORS)


# ---------------------------------------------------------------------------
# shape subgraphs fold


def _shape_model():
    """y = Reshape(x, concat(shape(x)[0], -1)) then MatMul with w: batch stays dynamic."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(0, I64), "zero"),
        numpy_helper.from_array(np.array([0], I64), "ax0"),
        numpy_helper.from_array(np.array([-1], I64), "minus1"),
        numpy_helper.from_array(f32(12, 2), "w"),
    ]
    g = helper.make_graph(nodes, "shapes",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_shape_subgraph_folds_to_constants_for_every_batch():
    m = _shape_model()
    f = import_onnx(m)
    cf = graphc.compile(f)
    for n in (1, 3):
        x = f32(n, 3, 4)
        check(m, {"x": x})
        np.testing.assert_allclose(np.asarray(cf(x)), ort_run(m, {"x": x})[0], rtol=1e-5,
                                   atol=1e-6)
    with pytest.raises(OnnxImportError, match=r"cannot reshape \[0, 3, 4\] to \[0, -1\]"):
        f(f32(0, 3, 4))  # as ONNX Runtime: -1 beside a 0 dimension is ambiguous
    g = str(cf.graph(f32(2, 3, 4)))
    ops = [ln.split("=")[1].split("(")[0].split("<")[0].strip()
           for ln in g.splitlines() if ln.strip().startswith("%")]
    assert ops == ["reshape", "const", "matmul"], g  # the shape arithmetic folded away
    assert "shape=(2, 12)" in g


# ---------------------------------------------------------------------------
# the committed PyTorch exports


@pytest.mark.parametrize("name", ["mlp", "cnn"])
@pytest.mark.parametrize("batch", [1, 4])
def test_committed_torch_export_matches_onnxruntime(name, batch):
    path = DATA / f"{name}.onnx"
    assert path.stat().st_size < 100_000
    m = onnx.load(str(path))
    x = f32(batch, *EXAMPLE_SHAPES[name][1:])
    f = check(m, {"x": x}, rtol=1e-4, atol=1e-5)
    assert f.input_names == ["x"] and f.output_names == ["y"]
    assert "x: float32[batch" in f.__doc__
    assert import_onnx(str(path))(x).shape == (batch, 3 if name == "mlp" else 5)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_regenerated_torch_export_matches_torch_and_committed_file(name):
    torch = pytest.importorskip("torch")
    from .torch_models import build, export_bytes

    m, x = build(name)
    f = import_onnx(export_bytes(name))
    with torch.no_grad():
        want = m(x).numpy()
    got = np.asarray(graphc.compile(f)(x.numpy()))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    committed = import_onnx(DATA / f"{name}.onnx")
    np.testing.assert_allclose(committed(x.numpy()).numpy(), want, rtol=1e-4, atol=1e-5)


def test_torch_exported_attention_block_matches_torch_and_onnxruntime():
    torch = pytest.importorskip("torch")
    from .torch_models import attention_block, export_bytes

    m, x = attention_block()
    data = export_bytes("attention")
    ops = {n.op_type for n in onnx.load_from_string(data).graph.node}
    assert {"Shape", "Gather", "Reshape", "Softmax", "LayerNormalization"} <= ops
    f = check(onnx.load_from_string(data), {"x": x.numpy()}, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        want = m(x).numpy()
    np.testing.assert_allclose(np.asarray(graphc.compile(f)(x.numpy())), want, rtol=1e-4,
                               atol=1e-5)


def test_integer_shape_arithmetic_folds_under_compile():
    """Shape -> Gather -> Div (int, truncating) / Mod -> Concat -> Reshape: all static, also
    while graphc traces (no traced value may appear in a folded node).  8 columns:
    -trunc(8 / -3) + 8 mod 3 = 2 + 2 = 4 columns out (floor division would give 5 and
    fail)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["c"], axis=0),
        helper.make_node("Div", ["c", "minus3"], ["h"]),
        helper.make_node("Neg", ["h"], ["nh"]),
        helper.make_node("Mod", ["c", "three"], ["r"]),
        helper.make_node("Add", ["nh", "r"], ["cols"]),
        helper.make_node("Unsqueeze", ["cols", "ax0"], ["cols1"]),
        helper.make_node("Concat", ["minus1", "cols1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(v, I64), n) for n, v in
             (("one", 1), ("minus3", -3), ("three", 3), ("ax0", [0]), ("minus1", [-1]))]
    g = helper.make_graph(nodes, "intshape",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = _typed_outputs(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                                         ir_version=8))
    f = check(m, {"x": f32(2, 8)})
    assert f(f32(2, 8)).shape == (4, 4)


# ---------------------------------------------------------------------------
# transforms of imported models


def _mlp64():
    w1, b1, w2 = f64(3, 4), f64(4), f64(4, 1)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Tanh", ["hb"], ["a"]),
        helper.make_node("MatMul", ["a", "w2"], ["o"]),
        helper.make_node("ReduceSum", ["o"], ["y"], keepdims=0),
    ]
    inits = [numpy_helper.from_array(v, n) for n, v in (("w1", w1), ("b1", b1), ("w2", w2))]
    g = helper.make_graph(nodes, "mlp64",
                          [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [None, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _fd(fn, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (float(np.asarray(fn(xp))) - float(np.asarray(fn(xm)))) / (2 * eps)
    return g


def test_grad_of_imported_model_matches_finite_differences_and_composes():
    f = import_onnx(_mlp64())
    x = f64(5, 3)
    want = _fd(lambda v: f(v).numpy(), x)
    g = graphc.grad(f)
    np.testing.assert_allclose(np.asarray(g(x)), want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(np.asarray(graphc.compile(g)(x)), want, rtol=1e-6, atol=1e-8)
    v, g2 = graphc.compile(graphc.value_and_grad(f))(x)
    np.testing.assert_allclose(float(np.asarray(v)), float(f(x).numpy()), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(g2), want, rtol=1e-6, atol=1e-8)
    # eager autograd through the eager call
    xt = eager.from_numpy(x.copy()).requires_grad_(True)
    f(xt).backward()
    np.testing.assert_allclose(xt.grad.numpy(), want, rtol=1e-6, atol=1e-8)


def test_trainable_initializers_get_gradients_eagerly_and_compiled():
    f = import_onnx(_mlp64(), trainable=True)
    assert set(f.parameters) == {"w1", "b1", "w2"}
    assert all(p.requires_grad for p in f.parameters.values())
    x = f64(4, 3)
    f(x).backward()
    eager_g = {k: p.grad.numpy().copy() for k, p in f.parameters.items()}
    w1 = f.parameters["w1"]

    def loss_w1(w):
        old = w1.detach().numpy().copy()
        w1.data = eager.from_numpy(w)
        try:
            return f(x).detach().numpy()
        finally:
            w1.data = eager.from_numpy(old)

    np.testing.assert_allclose(eager_g["w1"], _fd(loss_w1, w1.detach().numpy().copy()),
                               rtol=1e-6, atol=1e-8)
    for p in f.parameters.values():
        p.grad = None
    cf = graphc.compile(f)  # the parameters become graph inputs; eager autograd runs through
    out = cf(x)
    assert out.requires_grad
    out.backward()
    assert "w1" in str(cf.graph(x)).split("{")[0]
    for k, p in f.parameters.items():
        np.testing.assert_allclose(p.grad.numpy(), eager_g[k], rtol=1e-10)


def test_integer_division_by_a_tensor_truncates_eagerly_and_compiled_refuses_clearly():
    a, b = np.array([7, -7, 7, -7, 0, 5]), np.array([2, 2, -2, -2, 3, -5])
    for op, attrs in (("Div", {}), ("Mod", {}), ("Mod", {"fmod": 1})):
        m = model(op, {"a": a, "b": b}, attrs)
        check(m, {"a": a, "b": b}, compiled=False)
        with pytest.raises(graphc.UnsupportedOpError, match="constant divisor"):
            graphc.compile(import_onnx(m))(a, b)


def test_multiple_outputs_return_a_tuple():
    a = f32(2, 3)
    m = model("Split", {"x": a}, {"axis": 1}, {"s": np.array([1, 2], I64)}, n_out=2)
    f = check(m, {"x": a})
    assert f.output_names == ["y0", "y1"]


def test_zero_d_and_noncontiguous_inputs():
    x = np.array(1.5, np.float32)
    check(model("Exp", {"x": x}), {"x": x})
    base = f32(4, 6)
    nc = base[:, ::2]
    assert not nc.flags.c_contiguous
    m = model("Tanh", {"x": np.ascontiguousarray(nc)})
    f = import_onnx(m)
    ref = ort_run(m, {"x": np.ascontiguousarray(nc)})[0]
    np.testing.assert_allclose(f(nc).numpy(), ref, rtol=1e-6)
    np.testing.assert_allclose(f(eager.from_numpy(base)[:, ::2]).numpy(), ref, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(graphc.compile(f)(nc)), ref, rtol=1e-6)


# ---------------------------------------------------------------------------
# hostile models and bad calls


def test_unsupported_operators_listed_in_one_error():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok"),
        helper.make_node("NonMaxSuppression", ["a"], ["b"], name="nms1"),
        helper.make_node("If", ["a"], ["c"], name="loop7"),
        helper.make_node("NonMaxSuppression", ["c"], ["y"], name="nms2"),
    ]
    g = helper.make_graph(nodes, "bad",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(UnsupportedOnnxOperatorError) as e:
        import_onnx(m, check=False)
    msg = str(e.value)
    assert "If, NonMaxSuppression" in msg and "nms1" in msg and "nms2" in msg
    assert "loop7" in msg and "Relu (node ok)" not in msg
    assert e.value.operators == [("NonMaxSuppression", "nms1"), ("If", "loop7"),
                                 ("NonMaxSuppression", "nms2")]
    assert isinstance(e.value, NotImplementedError)
    # a custom domain is unsupported too
    n = helper.make_node("Relu", ["x"], ["y"], name="r", domain="com.example")
    g = helper.make_graph([n], "dom", [helper.make_tensor_value_info("x", 1, [2])],
                          [helper.make_tensor_value_info("y", 1, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.example", 1)])
    with pytest.raises(UnsupportedOnnxOperatorError, match="com.example.Relu"):
        import_onnx(m, check=False)


def test_missing_initializer_is_named():
    m = model("MatMul", {"x": f32(2, 3)}, inits={"w": f32(3, 2)})
    del m.graph.initializer[:]
    with pytest.raises(OnnxImportError, match="the model is not valid ONNX"):
        import_onnx(m)
    with pytest.raises(OnnxImportError, match=r"reads 'w'.*missing initializer"):
        import_onnx(m, check=False)


def test_huge_declared_shapes_refused_without_allocating():
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 20, 1 << 20])
    m = model("Identity", {"x": f32(2)})
    m.graph.initializer.append(t)
    with pytest.raises(OnnxImportError, match="elements"):
        import_onnx(m, check=False)
    # an initializer whose data does not match its shape
    t = TensorProto(name="w2", data_type=TensorProto.FLOAT, dims=[3, 3], float_data=[1.0, 2.0])
    m = model("Identity", {"x": f32(2)})
    m.graph.initializer.append(t)
    with pytest.raises(OnnxImportError, match=r"w2"):
        import_onnx(m, check=False)
    # ConstantOfShape of a huge static shape
    m = model("ConstantOfShape", {}, inits={"s": np.array([1 << 20, 1 << 20], I64)})
    with pytest.raises(OnnxImportError, match="ConstantOfShape.*elements"):
        import_onnx(m)


def test_bad_shapes_and_dtypes_at_call_time():
    m = model("Relu", {"x": f32(2, 3)})
    f = import_onnx(m)
    with pytest.raises(OnnxImportError, match=r"input 'x' must have shape x: float32\[2, 3\]"):
        f(f32(3, 3))
    with pytest.raises(OnnxImportError, match="input 'x' must have dtype float32.*float64"):
        f(f64(2, 3))
    with pytest.raises(TypeError, match="takes 1 positional argument"):
        f()
    with pytest.raises(OnnxImportError, match="must have shape"):
        graphc.compile(f)(f32(2, 4))
    # a reshape that cannot work names the node
    m = model("Reshape", {"x": f32(2, 3)}, inits={"s": np.array([4, -1], I64)})
    with pytest.raises(OnnxImportError, match=r"'reshape_0' \(Reshape\): cannot reshape"):
        import_onnx(m, check=False)(f32(2, 3))


def test_huge_declared_input_shape_is_only_checked_against_the_call():
    m = model("Relu", {"x": f32(2)})
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1 << 40
    f = import_onnx(m, check=False)
    with pytest.raises(OnnxImportError, match=r"must have shape x: float32\[1099511627776\]"):
        f(f32(2))


def test_malformed_attribute_and_output_count_name_the_node():
    m = model("Transpose", {"x": f32(2, 3)}, {"perm": [0, 0]})
    with pytest.raises(OnnxImportError, match=r"'transpose_0' \(Transpose\): perm \[0, 0\]"):
        import_onnx(m, check=False)(f32(2, 3))
    m = model("Split", {"x": f32(2, 4)}, {"axis": 1}, {"s": np.array([1, 2], I64)}, n_out=2)
    with pytest.raises(OnnxImportError, match=r"'split_0' \(Split\): sizes \[1, 2\]"):
        import_onnx(m, check=False)(f32(2, 4))


def test_unsupported_dtype_opset_and_inputs():
    m = model("Relu", {"x": f32(2)})
    m.graph.input[0].type.tensor_type.elem_type = TensorProto.BFLOAT16
    with pytest.raises(OnnxImportError, match="BFLOAT16"):
        import_onnx(m, check=False)
    m = model("Relu", {"x": f32(2)}, opset=6)
    with pytest.raises(OnnxImportError, match="opset 6 is outside"):
        import_onnx(m, check=False)
    with pytest.raises(TypeError, match="import_onnx expects"):
        import_onnx(42)
    with pytest.raises(OnnxImportError, match="not a serialized ONNX model"):
        import_onnx(b"\xff\xfe garbage")


def test_dynamic_shape_operand_is_refused_with_the_node_named():
    x, s = f32(2, 3), np.array([3, 2], I64)
    m = model("Reshape", {"x": x, "s": s})
    with pytest.raises(OnnxImportError, match=r"reshape_0.*shape is computed from the inputs"):
        import_onnx(m)(x, s)


def test_without_onnx_the_error_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx now raises ImportError
    with pytest.raises(ImportError, match=r"pip install \.\[onnx\]"):
        import_onnx(b"")


def test_import_graphc_does_not_import_onnx():
    import subprocess
    import sys

    code = ("import sys, graphc; import graphc.onnx; "
            "assert 'onnx' not in sys.modules and 'onnxruntime' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
