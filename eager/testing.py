"""``torch.testing``: ``assert_close`` (PyTorch's default tolerances per dtype,
messages in PyTorch's words)."""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

import eager

#: PyTorch's default (rtol, atol) by dtype; integers and bool compare exactly
_TOL = {"float16": (1e-3, 1e-5), "float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7)}


def _tols(dtypes, rtol, atol) -> tuple:
    if (rtol is None) != (atol is None):
        raise ValueError(
            f"Both 'rtol' and 'atol' must be either specified or omitted, but got "
            f"{'no rtol' if rtol is None else f'rtol={rtol}'} and "
            f"{'no atol' if atol is None else f'atol={atol}'}."
        )
    if rtol is not None:
        return float(rtol), float(atol)
    pairs = [_TOL.get(str(np.dtype(d)), (0.0, 0.0)) for d in dtypes]
    return max(p[0] for p in pairs), max(p[1] for p in pairs)


def _fail(msg: Optional[str], default: str) -> None:
    raise AssertionError(default if msg is None else msg)


def _close_tensors(a, e, rtol, atol, equal_nan, check_dtype, msg) -> None:
    if tuple(a.shape) != tuple(e.shape):
        _fail(
            msg,
            f"The values for attribute 'shape' do not match: {a.shape} != {e.shape}.",
        )
    if check_dtype and a.dtype != e.dtype:
        _fail(
            msg,
            "The values for attribute 'dtype' do not match: "
            f"torch.{str(a.dtype).split('.')[-1]} != torch.{str(e.dtype).split('.')[-1]}.",
        )
    x = a.detach().numpy()
    y = e.detach().numpy()
    rtol, atol = _tols([x.dtype, y.dtype], rtol, atol)
    common = np.result_type(x, y)
    if common.kind == "b":
        common = np.dtype(np.int64)
    x, y = x.astype(common), y.astype(common)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.isclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan)
    if ok.all():
        return
    wide = np.float64 if common.kind == "f" else np.int64
    diff = np.abs(x.astype(wide) - y.astype(wide))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = diff / np.abs(y.astype(np.float64))
    bad = int((~ok).sum())

    def worst(v):
        v = np.where(np.isnan(v), -np.inf, v).reshape(x.shape) if v.ndim else v
        i = np.unravel_index(int(np.argmax(v)), x.shape) if x.ndim else ()
        return v[i], tuple(int(k) for k in i)

    ad, ai = worst(diff)
    rd, ri = worst(rel)
    _fail(
        msg,
        "Tensor-likes are not close!\n\n"
        f"Mismatched elements: {bad} / {x.size} ({100.0 * bad / x.size:.1f}%)\n"
        f"Greatest absolute difference: {ad} at index {ai} (up to {atol} allowed)\n"
        f"Greatest relative difference: {rd} at index {ri} (up to {rtol} allowed)",
    )


def assert_close(
    actual: Any,
    expected: Any,
    *,
    allow_subclasses: bool = True,
    rtol: Optional[float] = None,
    atol: Optional[float] = None,
    equal_nan: bool = False,
    check_device: bool = True,
    check_dtype: bool = True,
    check_layout: bool = True,
    check_stride: bool = False,
    msg: Optional[str] = None,
) -> None:
    """Raise AssertionError unless ``actual`` and ``expected`` (tensors, numbers, or
    sequences/mappings of them) are close: ``|a - e| <= atol + rtol * |e|``."""
    kw: dict[str, Any] = dict(
        rtol=rtol, atol=atol, equal_nan=equal_nan, check_dtype=check_dtype, msg=msg
    )
    if isinstance(actual, eager.Tensor) and isinstance(expected, eager.Tensor):
        _close_tensors(actual, expected, rtol, atol, equal_nan, check_dtype, msg)
        return
    if isinstance(actual, (eager.Tensor, np.ndarray)) or isinstance(
        expected, (eager.Tensor, np.ndarray)
    ):
        if isinstance(actual, np.ndarray) and isinstance(expected, np.ndarray):
            _close_tensors(
                eager.as_tensor(actual),
                eager.as_tensor(expected),
                rtol,
                atol,
                equal_nan,
                check_dtype,
                msg,
            )
            return
        raise TypeError(
            f"No comparison pair was able to handle inputs of type {type(actual)} "
            f"and {type(expected)}."
        )
    if isinstance(actual, (bool, int, float)) and isinstance(expected, (bool, int, float)):
        if check_dtype and type(actual) is not type(expected):
            _fail(
                msg,
                f"The values for attribute 'dtype' do not match: "
                f"{type(actual).__name__} != {type(expected).__name__}.",
            )
        r, a = _tols([np.asarray(actual).dtype, np.asarray(expected).dtype], rtol, atol)
        if isinstance(actual, float) and math.isnan(actual) and equal_nan:
            if isinstance(expected, float) and math.isnan(expected):
                return
        if not abs(actual - expected) <= a + r * abs(expected):
            _fail(
                msg,
                f"Scalars are not close!\n\nExpected {expected} but got {actual}.\n"
                f"Absolute difference: {abs(actual - expected)} (up to {a} allowed)",
            )
        return
    if isinstance(actual, dict) and isinstance(expected, dict):
        if sorted(actual) != sorted(expected):
            _fail(
                msg,
                f"The keys of the mappings do not match: {sorted(actual)} != {sorted(expected)}",
            )
        for k in actual:
            assert_close(actual[k], expected[k], **kw)
        return
    if isinstance(actual, (list, tuple)) and isinstance(expected, (list, tuple)):
        if len(actual) != len(expected):
            _fail(
                msg,
                f"The length of the sequences mismatch: {len(actual)} != {len(expected)}",
            )
        for x, y in zip(actual, expected):
            assert_close(x, y, **kw)
        return
    raise TypeError(
        f"No comparison pair was able to handle inputs of type {type(actual)} and {type(expected)}."
    )
