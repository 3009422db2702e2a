"""Random programs from the project's fuzzer (tests/parity/fuzzgen.py), exported with
graphc.export_onnx and run by ONNX Runtime (CPU): the same values as eager.  A program
the exporter refuses must name the op; the refusals are counted so they stay rare."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import eager  # noqa: E402
import graphc  # noqa: E402
from graphc.pytree import flatten  # noqa: E402
from tests.parity import fuzzgen  # noqa: E402

SEEDS = range(60)


def _ort_or_none(model, feeds):
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as e:  # ORT's CPU provider lacks a kernel (float64 Tan, Conv...):
        if "NOT_IMPLEMENTED" not in str(e):  # onnx's reference evaluator runs the model
            raise
        from onnx.reference import ReferenceEvaluator

        try:
            return ReferenceEvaluator(model).run(None, feeds), False
        except Exception:
            return None, False
    return sess.run(None, feeds), True


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("features", [frozenset(), frozenset({"inplace"})], ids=["plain", "inplace"])
def test_fuzz_program_matches_eager(seed, features):
    prog = fuzzgen.generate(seed, features)
    fn = prog.fn()
    with np.errstate(all="ignore"):
        _, want = fuzzgen._run_eager(fn, prog.inputs)
        try:
            model = graphc.export_onnx(fn, *[eager.tensor(a.copy()) for a in prog.inputs])
        except graphc.UnsupportedOpError as e:
            assert "cannot export op '" in str(e)
            pytest.skip(f"refused: {e}")
    onnx.checker.check_model(model, full_check=True)
    feeds = {i.name: a.copy() for i, a in zip(model.graph.input, prog.inputs)}
    got, by_ort = _ort_or_none(model, feeds)
    if got is None:
        pytest.skip("neither ONNX Runtime's CPU provider nor onnx.reference runs this model")
    leaves = [v for v in flatten(want)[0] if isinstance(v, eager.Tensor)]
    assert len(got) >= len(leaves)
    for k, (g, w) in enumerate(zip(got, leaves)):
        w = fuzzgen._to_np(w)
        if by_ort or w.dtype.kind != "f":
            fuzzgen._assert_close(g, w, f"output {k} (ONNX Runtime vs eager)", prog)
        else:  # the reference evaluator computes some functions (erf) in float32
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7, equal_nan=True)
