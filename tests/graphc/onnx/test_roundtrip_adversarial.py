"""Export and import under attack: hostile names and source lines, repeated / aliased /
input outputs, int and bool and 0-d outputs, float64 models ONNX Runtime cannot run,
functions whose trace refuses, bad CLI specs; models with shadowed names, cycles, nodes
out of order, huge attribute values, external-data initializers.  Each gives the right
answer or a clear error, never a crash."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import eager  # noqa: E402
import graphc  # noqa: E402
from graphc.onnx import OnnxImportError  # noqa: E402


def _ort(model, *arrays):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: a for i, a in zip(sess.get_inputs(), arrays)})


def _back(model, *arrays):
    """The imported model's outputs (eager), as a list of arrays."""
    r = graphc.import_onnx(model)(*arrays)
    return [np.asarray(v) for v in (r if isinstance(r, tuple) else (r,))]


# --- export ---------------------------------------------------------------------------


def test_an_input_returned_twice():
    x = eager.randn(3, 4)
    m = graphc.export_onnx(lambda x: (x, x), x)
    assert [o.name for o in m.graph.output] == ["output_0", "output_1"]
    for got in (_ort(m, x.numpy()), _back(m, x.numpy())):
        np.testing.assert_array_equal(got[0], x.numpy())
        np.testing.assert_array_equal(got[1], x.numpy())


def test_outputs_aliasing_each_other():
    x = eager.randn(3, 4, dtype=eager.float64)

    def f(x):
        y = x * 2
        return y, y.t(), y[0], y.view(12), y[:, 1:3]

    m = graphc.export_onnx(f, x)
    want = [v.numpy() for v in f(x)]
    for got in (_ort(m, x.numpy()), _back(m, x.numpy())):
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_array_equal(g, w)


def test_int_bool_and_0d_outputs():
    x = eager.randn(3, 4)

    def f(x):
        return x > 0, x.argmax(1), (x > 0).sum(), x.argmax(), (x > 0).any()

    m = graphc.export_onnx(f, x)
    want = [v.numpy() for v in f(x)]
    for got in (_ort(m, x.numpy()), _back(m, x.numpy())):
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)


def test_size_zero_inputs_round_trip():
    x = eager.randn(0, 3)
    f = lambda x: ((x > 0).long().sum(0), x.sum(1), x * 2)  # noqa: E731
    m = graphc.export_onnx(f, x)
    want = [v.numpy() for v in f(x)]
    for got in (_ort(m, x.numpy()), _back(m, x.numpy())):
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)


def test_names_colliding_with_output_names():
    x = eager.randn(3)
    m = graphc.export_onnx(lambda output, output_0: (output + 1, output_0 * 2), x, x)
    names = [i.name for i in m.graph.input] + [o.name for o in m.graph.output]
    assert len(set(names)) == len(names)
    got = _ort(m, x.numpy(), x.numpy())
    np.testing.assert_allclose(got[0], x.numpy() + 1)
    np.testing.assert_allclose(got[1], x.numpy() * 2)


def test_hostile_parameter_names_and_source_lines():
    ns = {"eager": eager}
    long = "a" * 5000
    src = f"def f({long}, y\u00e9):\n    return ({long} * y\u00e9 + 1).sum()  # \"'\\n\u2603\n"
    fname = "we\nird \"\u2603\" " + "x" * 3000 + ".py"
    exec(compile(src, fname, "exec"), ns)
    m = graphc.export_onnx(ns["f"], eager.randn(3), eager.randn(3))
    onnx.checker.check_model(m, full_check=True)
    names = [i.name for i in m.graph.input]
    assert len(set(names)) == 2 and all(n.isascii() for n in names)
    assert any("\u2603" in n.doc_string for n in m.graph.node)
    one = np.ones(3, np.float32)
    np.testing.assert_allclose(_ort(m, one, one)[0], 6.0)
    np.testing.assert_allclose(_back(m, one, one)[0], 6.0)
    np.testing.assert_allclose(graphc.compile(graphc.import_onnx(m))(one, one), 6.0)


def test_a_trace_that_refuses_is_a_clear_error():
    def f(x):
        if x.sum() > 0:
            return x
        return -x

    with pytest.raises(graphc.TracerBoolConversionError, match=r"depends on argument x"):
        graphc.export_onnx(f, eager.randn(3))
    with pytest.raises(graphc.ConcretizationTypeError, match=r"\.item\(\)"):
        graphc.export_onnx(lambda x: x * x.sum().item(), eager.randn(3))
    with pytest.raises(graphc.SignatureError, match="argument s has unsupported type str"):
        graphc.export_onnx(lambda x, s: x * len(s), eager.randn(3), "abc")


def test_float64_model_ort_cannot_run_names_the_node_and_line():
    x = eager.randn(3, dtype=eager.float64)
    m = graphc.export_onnx(lambda x: x.tan(), x)
    onnx.checker.check_model(m, full_check=True)  # valid ONNX
    with pytest.raises(Exception, match=r"NOT_IMPLEMENTED.*Tan.*v1_Tan_node"):
        _ort(m, x.numpy())
    node = next(n for n in m.graph.node if n.op_type == "Tan")
    assert "test_roundtrip_adversarial.py:" in node.doc_string
    np.testing.assert_allclose(_back(m, x.numpy())[0], np.tan(x.numpy()), rtol=1e-12)


def test_cli_bad_specs(tmp_path, capsys):
    from graphc.tools.cli import main

    p = tmp_path / "model.py"
    p.write_text("def predict(x, w):\n    return (x @ w).relu().sum(1)\n")
    out = str(tmp_path / "m.onnx")
    bad = [
        ("f32[2,,3],f32[3,4]", "empty dimension"),
        ("q32[2,3],f32[3,4]", "unknown dtype"),
        ("f32[-2,3],f32[3,4]", "expected DTYPE"),
        ("f32[2,3]", "does not take the 1 argument"),
        ("f32[99999999999,99999999],f32[3,4]", "too large"),
    ]
    for spec, msg in bad:
        assert main(["export", f"{p}:predict", "--args", spec, "-o", out]) == 2, spec
        assert msg in capsys.readouterr().err, spec
    assert main(["export", f"{p}:predict", "--args", "f32[2,3],f32[4,4]", "-o", out]) == 1
    assert "cannot be multiplied" in capsys.readouterr().err
    assert main(["export", f"{p}predict", "--args", "f32[2,3]", "-o", out]) == 2
    assert "expected FILE.py:FUNCTION" in capsys.readouterr().err


# --- import ---------------------------------------------------------------------------

V = lambda n, s=(3,): helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s))  # noqa: E731
X = np.array([1.0, -2.0, 3.0], np.float32)


def _m(nodes, ins, outs, inits=()):
    g = helper.make_graph(nodes, "g", ins, outs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


@pytest.mark.parametrize("check", [True, False])
def test_shadowed_names_are_refused(check):
    w = numpy_helper.from_array(np.full(3, 5, np.float32), "w")
    cases = [
        (_m([helper.make_node("Relu", ["x"], ["x"])], [V("x")], [V("x")]), "'x' is defined twice"),
        (_m([helper.make_node("Relu", ["x"], ["y"], name="a"),
             helper.make_node("Neg", ["x"], ["y"], name="b")], [V("x")], [V("y")]),
         "'y' is defined twice, by node 'a' and by node 'b'"),
        (_m([helper.make_node("Relu", ["x"], ["w"]), helper.make_node("Add", ["x", "w"], ["y"])],
            [V("x")], [V("y")], [w]), "'w' is defined twice, by a graph input or initializer"),
    ]
    for model, msg in cases:
        with pytest.raises(OnnxImportError, match=msg):
            graphc.import_onnx(model, check=check)


def test_an_initializer_that_is_also_an_input_is_its_default():
    w = numpy_helper.from_array(np.full(3, 5, np.float32), "w")
    m = _m([helper.make_node("Add", ["x", "w"], ["y"])], [V("x"), V("w")], [V("y")], [w])
    f = graphc.import_onnx(m)
    np.testing.assert_allclose(f(X), X + 5)
    np.testing.assert_allclose(_ort(m, X)[0], X + 5)


@pytest.mark.parametrize("check", [True, False])
def test_cycles_are_refused_naming_the_nodes(check):
    m = _m([helper.make_node("Relu", ["b"], ["a"], name="first"),
            helper.make_node("Neg", ["a"], ["b"], name="second")], [V("x")], [V("a")])
    with pytest.raises(OnnxImportError, match="cycle: nodes 'first', 'second'"):
        graphc.import_onnx(m, check=check)


def test_nodes_out_of_order_are_sorted_as_onnx_runtime_does():
    nodes = [helper.make_node("Mul", ["b", "a"], ["y"]), helper.make_node("Neg", ["a"], ["b"]),
             helper.make_node("Relu", ["x"], ["a"])]
    m = _m(nodes, [V("x")], [V("y")])
    before = m.SerializeToString()
    want = _ort(m, X)[0]
    f = graphc.import_onnx(m)
    np.testing.assert_allclose(f(X), want)
    np.testing.assert_allclose(graphc.compile(f)(X), want)
    assert m.SerializeToString() == before  # the caller's model is not reordered


@pytest.mark.parametrize("op,inits,attrs", [
    ("ConstantOfShape", {"s": np.array([10**6, 10**6], np.int64)}, {}),
    ("Pad", {"p": np.array([10**9, 10**9], np.int64)}, {}),
    ("Tile", {"r": np.array([10**10], np.int64)}, {}),
    ("Expand", {"r": np.array([10**9, 3], np.int64)}, {}),
    ("Range", {"a": np.array(0, np.int64), "b": np.array(10**12, np.int64),
               "c": np.array(1, np.int64)}, {}),
])
def test_huge_static_operands_are_refused(op, inits, attrs):
    ins = list(inits) if op in ("ConstantOfShape", "Range") else ["x"] + list(inits)
    node = helper.make_node(op, ins, ["y"], name="big", **attrs)
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT if op != "Range" else
                                        TensorProto.INT64, None)
    g = helper.make_graph([node], "g", [V("x")], [out],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    with pytest.raises(OnnxImportError, match="'big'.*more than the 67108864 a model may create"):
        graphc.import_onnx(m, check=False)(X)


def test_huge_kernel_and_axis_are_clear_errors():
    m = _m([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[10**9, 10**9], name="mp")],
           [V("x", (1, 1, 3, 3))], [V("y", (1, 1, 1, 1))])
    with pytest.raises(OnnxImportError, match="'mp'.*Output size is too small"):
        graphc.import_onnx(m, check=False)(np.ones((1, 1, 3, 3), np.float32))
    m = _m([helper.make_node("Split", ["x"], ["y", "z"], axis=10**9, name="sp")], [V("x")],
           [V("y", (1,)), V("z", (2,))])
    with pytest.raises(OnnxImportError, match="'sp'.*axis 1000000000 is out of range"):
        graphc.import_onnx(m, check=False)(X)


def test_hostile_value_and_node_names():
    weird = "y\n\"'\u2603" + "q" * 10000
    m = _m([helper.make_node("Relu", ["x y-\u00e9"], [weird], name="n" * 100000)],
           [V("x y-\u00e9")], [V(weird)])
    f = graphc.import_onnx(m)
    assert f.input_names == ["x y-\u00e9"] and f.output_names == [weird]
    np.testing.assert_allclose(f(X), np.maximum(X, 0))
    np.testing.assert_allclose(graphc.compile(f)(X), np.maximum(X, 0))


def test_external_data_initializers(tmp_path):
    w = numpy_helper.from_array(np.arange(3000, dtype=np.float32), "w")
    m = _m([helper.make_node("Add", ["x", "w"], ["y"])], [V("x", (3000,))], [V("y", (3000,))],
           [w])
    path = tmp_path / "m.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="w.bin", size_threshold=0)
    z = np.zeros(3000, np.float32)
    np.testing.assert_array_equal(graphc.import_onnx(path)(z), np.arange(3000))  # a path
    np.testing.assert_array_equal(graphc.import_onnx(onnx.load(str(path)))(z), np.arange(3000))
    unloaded = onnx.load(str(path), load_external_data=False)
    with pytest.raises(OnnxImportError, match="'w' keeps its data in the external file 'w.bin'"):
        graphc.import_onnx(unloaded)
    with pytest.raises(OnnxImportError, match="external file 'w.bin'"):
        graphc.import_onnx(path.read_bytes())
    (tmp_path / "w.bin").unlink()
    with pytest.raises(OnnxImportError, match="not a readable ONNX model"):
        graphc.import_onnx(path)
