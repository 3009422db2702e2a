"""The ONNX Runtime column of ``graphc.compare``: the same function run by ONNX
Runtime (CPU provider), timed per call and checked against the float64 eager run.

The column appears when the compared function came from ``graphc.import_onnx`` (its
model is run as is) or, when ``onnx`` and ``onnxruntime`` are installed, when
``graphc.export_onnx`` exists (it is looked up with ``getattr``, as it is written
separately) and exports the function.  Neither package is imported otherwise.
"""

from __future__ import annotations

import importlib
import importlib.util
import time
from typing import Callable, Optional

import numpy as np

COLUMN_NOTE = (
    "ONNX Runtime column: CPU execution provider, forward values only (no gradients), "
    "inputs fed as numpy arrays"
)


def _have_ort() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))


def _exporter() -> Optional[Callable]:
    """``graphc.export_onnx`` if another module provides it, else None."""
    try:
        mod = importlib.import_module("graphc.onnx")
    except ImportError:
        return None
    exp = getattr(mod, "export_onnx", None)
    if exp is None:
        try:
            exp = getattr(importlib.import_module("graphc.onnx.export"), "export_onnx", None)
        except ImportError:
            return None
    return exp if callable(exp) else None


def model_bytes(fn: Callable, example_args: tuple) -> tuple:
    """(serialized model or None, where it came from, why there is none or None)."""
    if getattr(fn, "graphc_onnx_import", False):
        return getattr(fn, "model").SerializeToString(), "the imported model", None
    if not _have_ort():
        return None, None, None
    exp = _exporter()
    if exp is None:
        return None, None, None
    try:
        m = exp(fn, *example_args)
    except Exception as exc:  # the exporter refuses: the column says why
        return None, "graphc.export_onnx", f"export failed: {type(exc).__name__}: {exc}"
    if isinstance(m, (bytes, bytearray)):
        return bytes(m), "graphc.export_onnx", None
    if hasattr(m, "SerializeToString"):
        return m.SerializeToString(), "graphc.export_onnx", None
    if isinstance(m, str) or hasattr(m, "__fspath__"):
        with open(m, "rb") as fh:
            return fh.read(), "graphc.export_onnx", None
    return None, "graphc.export_onnx", f"export returned a {type(m).__name__}, not a model"


def step_note(fn: Callable) -> Optional[str]:
    """Why a training step gets no ONNX Runtime column (None when there would be no
    column anyway: onnx/onnxruntime or the exporter missing, and not an imported model)."""
    if not getattr(fn, "graphc_onnx_import", False) and (not _have_ort() or _exporter() is None):
        return None
    return (
        "not run for a training step (compare compares .grad and in-place updates, which "
        "an ONNX model returns as extra outputs: run graphc.export_onnx's model with ONNX "
        "Runtime and feed the <name>_updated outputs back)"
    )


def onnxruntime_column(
    fn: Callable,
    arrays: list,
    ref_outputs: list,
    eager_outputs: list,
    measure: Callable,
    errors: Callable,
    tolerance: dict,
    example_args: Optional[tuple] = None,
) -> tuple:
    """(the column as a dict, or None; an error message, or None).

    ``arrays`` are the function's array inputs in order (its pytree arguments' leaves);
    ``example_args`` the arguments as the function takes them (pytrees), which the
    exporter traces (default: ``arrays``, one per argument); ``measure(call)`` times a
    call as the other columns are timed; ``errors(x, ref)`` gives (abs, rel) errors.
    An exported model's extra inputs (parameters kept as inputs, with their initializer
    as default) are not fed, and only its user outputs (``output``, ``output_k``; not
    ``<name>_updated`` / ``<name>_grad``) are compared."""
    ex = example_args if example_args is not None else tuple(a.copy() for a in arrays)
    data, source, why = model_bytes(fn, ex)
    if data is None:
        return None, why
    try:
        import onnxruntime as ort
    except ImportError as exc:
        return None, f"onnxruntime is not installed ({exc}): pip install .[onnx]"
    try:
        t0 = time.perf_counter()
        sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        if source == "graphc.export_onnx" and len(names) > len(arrays):
            names = names[: len(arrays)]  # the rest are parameters with initializers
        if len(names) != len(arrays):
            return None, (
                f"the model has {len(names)} inputs ({', '.join(names)}) but the function "
                f"received {len(arrays)} arrays"
            )
        feeds = {n: np.ascontiguousarray(a) for n, a in zip(names, arrays)}
        out_names = [o.name for o in sess.get_outputs()]
        if source == "graphc.export_onnx":  # user outputs, not the updated arguments
            every = [i.name for i in sess.get_inputs()]
            special = {f"{n}_updated" for n in every} | {f"{n}_grad" for n in every}
            out_names = [n for n in out_names if n not in special]
        outs = sess.run(out_names, feeds)
        first = time.perf_counter() - t0
        t, number, _ = measure(lambda: sess.run(out_names, feeds))
    except Exception as exc:  # ONNX Runtime refuses the model or the inputs
        hint = ""
        if "NOT_IMPLEMENTED" in str(exc) and any(a.dtype == np.float64 for a in arrays):
            hint = (
                " (ONNX Runtime's CPU provider has no float64 kernel for this operator; "
                "compare float32 inputs to get the column)"
            )
        return None, f"ONNX Runtime failed: {type(exc).__name__}: {exc}{hint}"
    rows = []
    all_ok = True
    for k, (o, r, e) in enumerate(zip(outs, ref_outputs, eager_outputs)):
        ab, rel = errors(o, r)
        ea, _ = errors(e, r)
        tol = tolerance.get(np.asarray(o).dtype.name, 1e-4)
        ok = bool(
            rel <= tol
            or ab <= 4 * ea + 1e-12
            or (np.asarray(e).dtype.kind != "f" and np.array_equal(o, e))
        )
        all_ok = all_ok and ok
        name = "output" if len(ref_outputs) == 1 else f"output[{k}]"
        rows.append({"name": name, "abs": ab, "rel": rel, "ok": ok})
    if len(outs) != len(ref_outputs):
        all_ok = False
    return {
        "source": source,
        "time_per_call_s": t,
        "first_call_s": first,
        "number": number,
        "agreement": rows,
        "all_agree": all_ok,
    }, None


__all__ = ["onnxruntime_column", "model_bytes", "step_note", "COLUMN_NOTE"]
