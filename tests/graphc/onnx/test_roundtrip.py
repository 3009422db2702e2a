"""import(export(f)) == f: a function exported with graphc.export_onnx and read back with
graphc.import_onnx computes the same numbers as ``f`` eagerly, under graphc.compile, and
as ONNX Runtime running the exported model.

Covered: every op sample of the registry (the export test's one-node models and
variants), the fuzzer's random programs, the seeds' MLP training step (updated
parameters as outputs), the classifier / CNN / attention models and their losses.  A
last test enumerates every ONNX operator type the exporter can emit and checks each is
importable or a documented gap (docs/onnx.md)."""
from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import eager  # noqa: E402
import graphc  # noqa: E402
from eager.interop import OPS  # noqa: E402
from graphc.onnx.importer import SUPPORTED_OPERATORS  # noqa: E402
from graphc.pytree import flatten  # noqa: E402

from .test_export_ops import _cases, _one_node_model, _refused  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]

# operator types the exporter can emit that import_onnx does not read back; each must be
# named in docs/onnx.md's "Round trip" gap list
IMPORT_GAPS: set = set()  # Scan and Loop are imported since the onnxloop branch


def _np(v):
    if isinstance(v, eager.Tensor):
        return v.detach().numpy()
    return np.asarray(v)


def _outs(r):
    return [_np(v) for v in (r if isinstance(r, (tuple, list)) else [r])]


def _ort(model, arrays):
    """ONNX Runtime's outputs, or None when its CPU provider lacks a kernel (float64)."""
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as e:
        if "NOT_IMPLEMENTED" in str(e):
            return None
        raise
    return sess.run(None, {i.name: a for i, a in zip(sess.get_inputs(), arrays)})


def _close(got, want, tol, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert got.dtype == want.dtype, (what, got.dtype, want.dtype)
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, equal_nan=True, err_msg=what, **tol)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def _tol(dtype):
    dt = np.dtype(dtype)
    if dt == np.float16:
        return dict(rtol=2e-3, atol=2e-3)
    return dict(rtol=2e-5, atol=2e-6) if dt == np.float32 else dict(rtol=1e-9, atol=1e-12)


def roundtrip(model, arrays, wants, tol=None, backend="interpreter", ort_check=True):
    """Import ``model`` and check it eagerly, compiled and (when ORT runs it) against
    ONNX Runtime, each against ``wants`` (a list of arrays)."""
    gaps = _model_operator_types(model) & IMPORT_GAPS
    if gaps:
        with pytest.raises(graphc.UnsupportedOpError, match="|".join(sorted(gaps))):
            graphc.import_onnx(model)
        pytest.skip(f"a documented import gap: {sorted(gaps)}")
    f = graphc.import_onnx(model)
    try:
        eager_out = _outs(f(*[a.copy() for a in arrays]))
    except graphc.onnx.OnnxImportError as e:  # eager's conv2d refuses 0 input channels
        assert "0 channels is not supported" in str(e), e
        pytest.skip(f"eager refuses (clear error): {e}")
    assert len(eager_out) == len(wants)
    comp = graphc.compile(f, backend=backend)
    try:
        comp_out = _outs(comp(*[a.copy() for a in arrays]))
    except graphc.UnsupportedOpError as e:  # docs/onnx.md: integer Div/Mod by a tensor input
        assert re.search(r"integer \w+ is compiled only for a constant divisor", str(e)), e
        comp_out = None
    ort_out = _ort(model, [a.copy() for a in arrays]) if ort_check else None
    for k, w in enumerate(wants):
        t = tol or _tol(np.asarray(w).dtype)
        _close(eager_out[k], w, t, f"output {k}: imported, eager")
        if comp_out is not None:
            _close(comp_out[k], w, t, f"output {k}: imported, graphc.compile ({backend})")
        if ort_out is not None:
            _close(ort_out[k], w, t, f"output {k}: ONNX Runtime")
    return f


# --- every op sample ------------------------------------------------------------------

_NATIVE_SEEN: set = set()


@pytest.mark.parametrize("op,arrays,attrs", list(_cases()))
def test_op_roundtrip(op, arrays, attrs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            want = np.asarray(OPS[op].forward(*arrays, **attrs))
        except Exception:
            pytest.skip("the forward refuses this variant")
    if _refused(op, attrs):
        pytest.skip("the exporter refuses this case (test_export_ops checks the message)")
    model = _one_node_model(op, arrays, attrs)
    # the native backend once per op (its first variant: 91 native compiles, not one per
    # op and dtype combination, 311), the interpreter for every variant.  Native code per
    # dtype is tests/parity/test_dtype_parity.py's (every op on bool/int32/int64 and mixed
    # pairs, opt levels 0-2) and tests/graphc/backend/test_native.py's (every float
    # sample); what the import adds (its graph compiles natively) is op-specific.
    backend = "interpreter"
    if op not in _NATIVE_SEEN:
        _NATIVE_SEEN.add(op)
        backend = "native"
    tol = dict(rtol=1e-7, atol=1e-10) if want.dtype == np.float64 else None
    with np.errstate(all="ignore"):
        # ONNX Runtime on this very model and arrays is test_export_ops.py's
        # test_op_export_matches_forward (same _cases, same _one_node_model, tighter
        # tolerances): here only the import side runs
        roundtrip(model, arrays, [want], tol=tol, backend=backend, ort_check=False)


# --- the fuzzer's programs ------------------------------------------------------------


# GRAPHC_FUZZ_N programs per feature set (default 20; the same seeds' export is also
# checked against ONNX Runtime by test_export_fuzz.py, 60 per feature set)
FUZZ_N = int(os.environ.get("GRAPHC_FUZZ_N", "20"))
FUZZ_START = int(os.environ.get("GRAPHC_FUZZ_START", "0"))


@pytest.mark.parametrize("seed", range(FUZZ_START, FUZZ_START + FUZZ_N))
@pytest.mark.parametrize("features", [frozenset(), frozenset({"inplace"})], ids=["plain", "inplace"])
def test_fuzz_program_roundtrip(seed, features):
    from tests.parity import fuzzgen

    prog = fuzzgen.generate(seed, features)
    fn = prog.fn()
    with np.errstate(all="ignore"):
        _, want = fuzzgen._run_eager(fn, prog.inputs)
        try:
            model = graphc.export_onnx(fn, *[eager.tensor(a.copy()) for a in prog.inputs])
        except graphc.UnsupportedOpError as e:
            pytest.skip(f"the exporter refuses: {e}")
        leaves = [fuzzgen._to_np(v) for v in flatten(want)[0] if isinstance(v, eager.Tensor)]
        arrays = [np.array(a, order="C") for a in prog.inputs][: len(model.graph.input)]
        if _model_operator_types(model) & IMPORT_GAPS:
            pytest.skip("a documented import gap")
        f = graphc.import_onnx(model)
        got = _outs(f(*[a.copy() for a in arrays]))
        comp = _outs(graphc.compile(f)(*[a.copy() for a in arrays]))
        ort_out = _ort(model, [a.copy() for a in arrays])
    assert len(got) >= len(leaves)
    for k, w in enumerate(leaves):
        fuzzgen._assert_close(got[k], w, f"output {k} (imported, eager)", prog)
        fuzzgen._assert_close(comp[k], w, f"output {k} (imported, compiled)", prog)
        if ort_out is not None:
            fuzzgen._assert_close(ort_out[k], w, f"output {k} (ONNX Runtime)", prog)


# --- the seeds' training step and the models ---------------------------------------------

F32 = dict(rtol=2e-4, atol=2e-5)


def test_seed_training_step_roundtrip():
    from graphc.tools.workloads import seed_functions

    step, _ = seed_functions()
    eager.manual_seed(0)
    x, y = eager.randn(16, 20), eager.randn(16, 4)
    w1 = eager.randn(20, 8, requires_grad=True)
    w2 = eager.randn(8, 4, requires_grad=True)
    model = graphc.export_onnx(step, x, y, w1, w2)
    names = [o.name for o in model.graph.output]
    arrays = [_np(t).copy() for t in (x, y, w1, w2)]
    loss = step(x, y, w1, w2)  # steps w1, w2 in place
    wants = {"output": _np(loss), "w1_updated": _np(w1), "w2_updated": _np(w2)}
    wants.update({f"{n}_grad": _np(t.grad) for n, t in (("w1", w1), ("w2", w2)) if t.grad is not None})
    f = roundtrip(model, arrays, [wants[n] for n in names], tol=F32, backend="native")
    assert f.output_names == names
    # the imported step carries its parameters from one call to the next as ORT's does
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    a, b = list(arrays), list(arrays)
    k1, k2 = names.index("w1_updated"), names.index("w2_updated")
    for _ in range(3):
        ra = sess.run(None, dict(zip(["x", "y", "w1", "w2"], a)))
        rb = _outs(f(*b))
        a[2], a[3] = ra[k1], ra[k2]
        b[2], b[3] = rb[k1], rb[k2]
    for u, v in zip(ra, rb):
        np.testing.assert_allclose(u, v, **F32)


def _model_cases():
    from graphc.tools import models

    M = models.build()
    eager.manual_seed(0)
    clf = M.Classifier()
    x = eager.randn(8, 64)
    lab = eager.randint(0, 10, (8,))
    cnn = M.LeNet()
    img = eager.randn(2, 1, 28, 28)
    att = M.AttentionBlock()
    tok = eager.randint(0, 128, (2, 64))
    return {
        "classifier": (clf, (x,)),
        "classifier_loss": (lambda x, lab: M.class_loss(clf, x, lab), (x, lab)),
        "classifier_grad": (
            graphc.grad(lambda x, lab: M.class_loss(clf, x, lab)),
            (x, lab),
        ),
        "cnn": (cnn, (img,)),
        "cnn_loss": (lambda x, lab: M.class_loss(cnn, x, lab), (img, lab[:2])),
        "attention": (att, (tok,)),
        "attention_loss": (lambda t, g: M.token_loss(att, t, g), (tok, tok)),
    }


@pytest.mark.parametrize("name", list(_model_cases()))
def test_models_roundtrip(name):
    fn, args = _model_cases()[name]
    model = graphc.export_onnx(fn, *args)
    if name.endswith("_grad"):
        want = fn(*args)
    else:
        with eager.no_grad():
            want = fn(*args)
    roundtrip(model, [_np(a).copy() for a in args], [_np(want)], tol=F32, backend="native")


def test_imported_export_trains_through_graphc_grad():
    """The imported model is ordinary eager code: graphc.grad of it equals graphc.grad of
    the original (float64, so the comparison is tight)."""

    def f(w, x):
        return ((x @ w).tanh() ** 2).sum()

    w = eager.randn(3, 2, dtype=eager.float64)
    x = eager.randn(4, 3, dtype=eager.float64)
    g = graphc.import_onnx(graphc.export_onnx(f, w, x))
    want = graphc.grad(f)(w, x)
    got = graphc.grad(g)(_np(w), _np(x))
    np.testing.assert_allclose(_np(got), _np(want), rtol=1e-12, atol=1e-14)
    got = graphc.compile(graphc.grad(g))(_np(w), _np(x))
    np.testing.assert_allclose(_np(got), _np(want), rtol=1e-12, atol=1e-14)


# --- what the exporter can emit must be importable, or a documented gap ---------------


def _emittable_operator_types() -> set:
    """Every ONNX operator type the exporter can write: the op records' string rules and
    every operator literal in eager/ops (the rules, the op records) and the exporter (an over-approximation: a string
    that names an ONNX operator counts)."""
    from onnx import defs

    found = {op.onnx for op in OPS.values() if isinstance(op.onnx, str)}
    files = sorted((ROOT / "eager" / "ops").glob("*.py")) + [ROOT / "graphc/onnx/export.py"]
    for path in files:
        text = path.read_text(encoding="utf-8")
        for lit in re.findall(r'"([A-Z][A-Za-z]+)"', text):
            if defs.has(lit):
                found.add(lit)
    return found


def _model_operator_types(model) -> set:
    seen, stack = set(), [model.graph]
    while stack:
        g = stack.pop()
        for n in g.node:
            seen.add(n.op_type)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    stack.append(a.g)
                stack.extend(a.graphs)
    return seen


def test_every_emittable_operator_is_importable_or_a_documented_gap():
    emitted = _emittable_operator_types()
    assert {"Gemm", "MatMul", "Conv", "MaxPool", "Scan", "Loop", "TopK"} <= emitted
    gaps = sorted(emitted - set(SUPPORTED_OPERATORS))
    assert set(gaps) == IMPORT_GAPS, f"the exporter emits {gaps}, which import_onnx lacks"
    doc = (ROOT / "docs" / "onnx.md").read_text(encoding="utf-8")
    section = doc.split("### Round trip", 1)[1].split("\n## ", 1)[0]
    for op in gaps:
        assert f"`{op}`" in section, f"{op} is not listed as a gap in docs/onnx.md"


def test_the_enumeration_covers_what_exports_really_contain():
    """Exports of every op sample only contain operator types the static enumeration
    found (so the enumeration is not missing a computed operator name)."""
    emitted = _emittable_operator_types()
    seen: set = set()
    for name in sorted(OPS):
        for arrays, attrs in OPS[name].samples()[:2]:
            try:
                m = _one_node_model(name, [np.asarray(a) for a in arrays], attrs)
            except graphc.UnsupportedOpError:
                continue
            seen |= _model_operator_types(m)
    assert seen - emitted == set()
    assert "Scan" in seen  # cumprod / linrec
