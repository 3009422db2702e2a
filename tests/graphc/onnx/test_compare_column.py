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
