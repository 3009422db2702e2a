"""Every op of the registry exported alone (a one-node graph per op sample) and run by
ONNX Runtime's CPU provider: the same numbers as the op's numpy forward, for the
samples' dtypes and float32/int64/bool/0-d variants; or a clear refusal naming the op.

The op record says how it exports (``OpDef.onnx``); a completeness test makes sure
every op has a rule or an explicit refusal reason.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import graphc  # noqa: E402
from eager.interop import OPS  # noqa: E402
from eager.ops.onnx_rules import NoOnnx  # noqa: E402
from graphc.ir import Graph  # noqa: E402
from graphc.onnx.export import graph_to_model  # noqa: E402

REFUSED = {n for n, op in OPS.items() if isinstance(op.onnx, NoOnnx)}

# ONNX Runtime's CPU provider has no kernel for these (op, dtype) pairs; the models are
# valid ONNX (onnx.checker passes) and are checked with onnx's reference evaluator
ORT_MISSING = {
    ("tan", "float64"), ("asin", "float64"), ("acos", "float64"), ("atan", "float64"),
    ("sinh", "float64"), ("cosh", "float64"), ("asinh", "float64"), ("acosh", "float64"),
    ("atanh", "float64"), ("erf", "float64"), ("atan2", "float64"),
    ("conv2d", "float64"), ("conv2d_input_grad", "float64"), ("conv2d_weight_grad", "float64"),
}


def test_every_op_has_an_export_rule_or_a_refusal():
    missing = [n for n, op in OPS.items() if op.onnx is None]
    assert not missing, f"ops with neither an ONNX rule nor a NoOnnx reason: {missing}"
    for n in REFUSED:
        assert len(OPS[n].onnx.reason) > 20, n


def _one_node_model(op: str, arrays: list, attrs: dict):
    g = Graph(op)
    ins = [g.add_input(f"x{k}", a.shape, a.dtype) for k, a in enumerate(arrays)]
    nid = g.add_node(op, ins, attrs, src=f"test_export_ops.py:{op}")
    g.outputs = [nid]
    return graph_to_model(g, input_names=[f"x{k}" for k in range(len(arrays))],
                          output_names=["out"], name=op)


def _run(model, arrays):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {f"x{k}": a for k, a in enumerate(arrays)})[0]


def _variants(op: str, arrays: list, attrs: dict):
    yield "sample", arrays, attrs
    if any(np.asarray(a).dtype == np.float64 for a in arrays):
        yield "float32", [a.astype(np.float32) if a.dtype == np.float64 else a for a in arrays], attrs
    if OPS[op].family == "elementwise" and op not in ("cast",):
        if all(a.dtype.kind == "f" for a in arrays):
            yield "int64", [np.asarray(np.round(a * 3)).astype(np.int64) for a in arrays], attrs
            yield "bool", [np.asarray(a > 0) for a in arrays], attrs
        if all(a.ndim >= 1 and a.size for a in arrays):
            yield "0-d", [np.array(a.reshape(-1)[0]) for a in arrays], attrs


def _cases():
    for name in sorted(OPS):
        if name in REFUSED:
            continue
        for k, (arrays, attrs) in enumerate(OPS[name].samples()):
            arrays = [np.asarray(a) for a in arrays]
            for tag, arrs, at in _variants(name, arrays, attrs):
                yield pytest.param(name, arrs, at, id=f"{name}-{k}-{tag}")


def _tol(dtype):
    return dict(rtol=2e-5, atol=2e-6) if np.dtype(dtype) == np.float32 else dict(rtol=1e-9, atol=1e-12)


def _refused(op: str, attrs: dict) -> bool:
    """Cases the exporter refuses on purpose (docs/onnx.md, limits)."""
    return op == "conv2d_weight_grad" and attrs["groups"] != 1


def _reference(model, arrays):
    """onnx's own reference evaluator, for what ONNX Runtime's CPU provider lacks."""
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, {f"x{k}": a for k, a in enumerate(arrays)})[0]


@pytest.mark.parametrize("op,arrays,attrs", list(_cases()))
def test_op_export_matches_forward(op, arrays, attrs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            want = np.asarray(OPS[op].forward(*arrays, **attrs))
        except Exception:
            pytest.skip("the forward refuses this variant (eager raises the same)")
    if _refused(op, attrs):
        with pytest.raises(graphc.UnsupportedOpError, match=rf"op '{op}' at test_export_ops"):
            _one_node_model(op, arrays, attrs)
        return
    model = _one_node_model(op, arrays, attrs)
    onnx.checker.check_model(model, full_check=True)
    if (op, want.dtype.name) in ORT_MISSING or any(
        (op, a.dtype.name) in ORT_MISSING for a in arrays
    ):
        try:
            got = _reference(model, arrays)
        except Exception as e:  # the reference evaluator's own gaps (grouped ConvTranspose)
            pytest.skip(f"no runtime for {op} in float64 here: ONNX Runtime lacks the kernel, "
                        f"onnx.reference fails ({type(e).__name__})")
        tol = dict(rtol=1e-6, atol=1e-7)  # the reference evaluates erf in float32
    else:
        got = _run(model, arrays)
        tol = _tol(want.dtype)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, equal_nan=True, **tol)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", sorted(REFUSED))
def test_refused_ops_name_the_op(op):
    arrays, attrs = OPS[op].samples()[0]
    with pytest.raises(graphc.UnsupportedOpError, match=rf"op '{op}'.*test_export_ops.py:{op}"):
        _one_node_model(op, [np.asarray(a) for a in arrays], attrs)
