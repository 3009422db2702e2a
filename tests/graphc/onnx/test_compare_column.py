"""graphc.compare's third engine: the ONNX Runtime column."""

from __future__ import annotations

import numpy as np
import pytest

import graphc

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from .torch_models import DATA  # noqa: E402


def test_imported_model_gets_an_onnxruntime_column():
    f = graphc.import_onnx(DATA / "mlp.onnx")
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    r = graphc.compare(f, x, grads=False, budget=0.01, repeat=3)
    o = r.onnxruntime
    assert o["source"] == "the imported model" and o["all_agree"]
    assert o["time_per_call_s"] > 0 and o["first_call_s"] > 0
    assert [a["name"] for a in o["agreement"]] == ["output"]
    assert r.onnxruntime_error is None
    text = str(r)
    assert "ONNX Runtime (CPU provider" in text and "eager / ORT" in text
    back = graphc.ComparisonReport.from_json(r.to_json())
    assert back.onnxruntime["all_agree"] and "ONNX Runtime" in str(back)


def test_no_column_without_an_exporter(monkeypatch):
    import graphc.onnx as gonnx

    import graphc.onnx.export as gexport

    monkeypatch.delattr(gonnx, "export_onnx", raising=False)
    monkeypatch.delattr(gexport, "export_onnx", raising=False)
    r = graphc.compare(lambda x: (x * 2).sum(), np.ones(3, np.float32), budget=0.01, repeat=3)
    assert r.onnxruntime is None and r.onnxruntime_error is None
    assert "ONNX Runtime" not in str(r)


def test_exporter_is_used_when_present_and_its_failure_is_reported(monkeypatch):
    import graphc.onnx as gonnx
    from onnx import TensorProto, helper

    def fake_export(fn, *args):  # stands in for graphc.export_onnx: y = 2 * x
        n = helper.make_node("Add", ["x", "x"], ["y"])
        g = helper.make_graph([n], "twice", [helper.make_tensor_value_info("x", 1, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)

    monkeypatch.setattr(gonnx, "export_onnx", fake_export, raising=False)
    x = np.arange(3, dtype=np.float32)
    r = graphc.compare(lambda x: x * 2, x, grads=False, budget=0.01, repeat=3)
    assert r.onnxruntime["source"] == "graphc.export_onnx" and r.onnxruntime["all_agree"]
    r = graphc.compare(lambda x: x * 3, x, grads=False, budget=0.01, repeat=3)
    assert not r.onnxruntime["all_agree"] and "DIFFERS" in str(r)

    def broken(fn, *args):
        raise NotImplementedError("no export for op foo")

    monkeypatch.setattr(gonnx, "export_onnx", broken)
    r = graphc.compare(lambda x: x * 2, x, grads=False, budget=0.01, repeat=3)
    assert r.onnxruntime is None
    assert "NotImplementedError: no export for op foo" in r.onnxruntime_error
    assert "ONNX Runtime: not run" in str(r)


# --- the real exporter (graphc.export_onnx) behind the column -----------------------------


def _col(fn, *args, grads=False):
    r = graphc.compare(fn, *args, grads=grads, budget=0.01, repeat=3)
    return r, r.onnxruntime


def test_real_exporter_plain_and_several_outputs():
    import eager

    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    r, o = _col(lambda x: (x.sin(), eager.nn.functional.softmax(x, dim=-1)), x)
    assert o["source"] == "graphc.export_onnx" and o["all_agree"], r.onnxruntime_error
    assert [a["name"] for a in o["agreement"]] == ["output[0]", "output[1]"]
    text = str(r)
    assert "ONNX Runtime (CPU provider, model: graphc.export_onnx)" in text
    assert "ONNX Runtime agrees" in text
    r, o = _col(lambda x: (x.exp() * 2).sum(), x, grads=True)  # gradients: values only
    assert o["all_agree"] and len(o["agreement"]) == 1


def test_real_exporter_pytree_arguments_module_and_static_leaves():
    import eager

    x = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    p = {"w": np.ones((3, 2), np.float32), "b": np.arange(2, dtype=np.float32)}
    r, o = _col(lambda p, x: x @ p["w"] + p["b"], p, x)
    assert o is not None and o["all_agree"], r.onnxruntime_error
    eager.manual_seed(0)
    r, o = _col(eager.nn.Sequential(eager.nn.Linear(3, 5), eager.nn.LayerNorm(5)), x)
    assert o is not None and o["all_agree"], r.onnxruntime_error
    r, o = _col(lambda x, n: x * n, x, 3)
    assert o is not None and o["all_agree"], r.onnxruntime_error


def test_real_exporter_in_place_argument_compares_user_outputs_only():
    x = np.random.default_rng(2).standard_normal(5).astype(np.float32)
    count = np.zeros(5, np.int64)

    def f(x, count):  # the model's outputs: output, count_updated
        count.add_(1)
        return x * count

    r, o = _col(f, x, count)
    assert o is not None and o["all_agree"], r.onnxruntime_error
    assert [a["name"] for a in o["agreement"]] == ["output"]


def test_real_exporter_refusals_are_reported():
    import eager

    x = np.ones((2, 3), np.float32)
    r, o = _col(lambda x: x + eager.randn(2, 3), x)
    assert o is None and "export failed: UnsupportedOpError" in r.onnxruntime_error
    assert "philox" in r.onnxruntime_error and "ONNX Runtime: not run" in str(r)
    r, o = _col(lambda x: x.tan(), x.astype(np.float64))
    assert o is None and "no float64 kernel" in r.onnxruntime_error


def test_training_step_says_why_there_is_no_column():
    import eager
    from graphc.tools.workloads import seed_functions

    step, _ = seed_functions()
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(s).astype(np.float32) for s in [(8, 20), (8, 4), (20, 8), (8, 4)]]
    args = [eager.tensor(a, requires_grad=k >= 2) for k, a in enumerate(args)]
    r = graphc.compare(step, *args, grads=False, budget=0.01, repeat=3)
    assert r.onnxruntime is None and "training step" in r.onnxruntime_error
