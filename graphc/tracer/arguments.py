"""How the arguments of a traced call enter the trace and the cache key: readable
argument names, one LeafSpec per flattened leaf, and the key item of static values."""

from __future__ import annotations

import inspect
import re
import sys
from typing import Any, Callable

import numpy as np

from eager.interop import FROM_NP, Tensor, data_of, grad_of, requires_grad_of

from ..errors import SignatureError
from .tensor import Tracer

_SUPPORTED = set(FROM_NP)


def _masked_type(t: type) -> bool:
    """Is ``t`` numpy's masked array class (or a subclass)?  Looked up in ``sys.modules``:
    ``np.ma`` would import numpy.ma (~10 ms, half the backend's own imports) on a first
    compile, and without that import no masked array can exist."""
    ma = sys.modules.get("numpy.ma")
    return ma is not None and issubclass(t, ma.MaskedArray)


def _sanitize(path: str) -> str:
    s = re.sub(r"\W+", "_", path).strip("_")  # an identifier: `<lambda>`, `p['w 1']`
    s = re.sub(r"_+", "_", s)
    return s or "arg"


def arg_names(fn: Callable, n: int) -> list:
    from ..capture import _is_module

    if _is_module(fn):  # a compiled model: its forward's parameter names
        fn = fn.forward
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for i in range(n):
        if i < len(params) and params[i].kind in (
            params[i].POSITIONAL_ONLY,
            params[i].POSITIONAL_OR_KEYWORD,
        ):
            names.append(params[i].name)
        elif params and params[-1].kind == params[-1].VAR_POSITIONAL and i >= len(params) - 1:
            names.append(f"{params[-1].name}[{i - len(params) + 1}]")
        else:
            names.append(f"args[{i}]")
    return names


class LeafSpec:
    """How one flattened argument leaf enters the trace (and the cache key)."""

    __slots__ = ("kind", "shape", "dtype", "value", "requires_grad", "has_grad", "grad_node")

    def __init__(
        self, kind, shape=None, dtype=None, value=None, requires_grad=False, has_grad=False
    ):
        self.kind = kind  # "array" | "tensor" | "static"
        self.shape = shape
        self.dtype = dtype
        self.value = value
        self.requires_grad = requires_grad
        self.has_grad = has_grad  # a requires_grad tensor whose .grad is set
        self.grad_node = None  # graph input node holding that .grad


_NAN = float("nan")  # one NaN object: tuples compare it equal to itself (identity)


def static_key(v: Any) -> tuple:
    """(value, sign bit) of a static value in a cache key.  ``-0.0 == 0.0`` would reuse a
    trace with the wrong sign baked in (``x / -0.0`` is -inf), and a fresh NaN is unequal
    to every other, which would re-trace on every call."""
    if isinstance(v, (float, np.floating)):
        return (_NAN, False) if v != v else (v, bool(np.signbit(v)))
    return v, False


def classify_leaf(x: Any, path: str) -> tuple:
    """(cache-key item, LeafSpec) for one argument leaf; SignatureError for bad types.
    Types are the real ones (``type(x)``): an object faking ``__class__`` (a mock) is not
    an array, and an ndarray subclass is used as its base array (a masked array is refused)."""
    t = type(x)
    if issubclass(t, Tensor):
        arr, rg = data_of(x), requires_grad_of(x)
        d = arr.dtype
        if d not in _SUPPORTED:
            raise SignatureError(f"argument {path}: dtype {d} is not supported")
        hg = grad_of(x) is not None  # (a tensor without requires_grad may keep a .grad)
        return ("T", arr.shape, d, rg, hg), LeafSpec(
            "tensor", arr.shape, d, requires_grad=rg, has_grad=hg
        )
    if _masked_type(t):
        raise SignatureError(
            f"argument {path} is a masked array; masks are not supported: pass "
            "x.filled(value) or np.ma.getdata(x)"
        )
    if issubclass(t, np.ndarray) and t is not np.ndarray:
        return classify_leaf(np.asarray(x), path)  # the base array's real shape and dtype
    if t is np.ndarray:
        d = x.dtype
        if d not in _SUPPORTED:
            if d.kind in "fiub" and d.newbyteorder("=") in _SUPPORTED:
                d = d.newbyteorder("=")
            else:
                raise SignatureError(
                    f"argument {path}: numpy dtype {x.dtype} is not supported; use float32, "
                    "float64, int32, int64 or bool"
                )
        # the key keeps the byte order (the call converts '>f8' input); the graph is native
        return ("A", x.shape, x.dtype), LeafSpec("array", x.shape, d)
    if issubclass(t, np.generic):
        arr = np.asarray(x)
        return classify_leaf(arr, path)
    if issubclass(t, (bool, int, float)) or x is None:
        return ("S", type(x).__name__, *static_key(x)), LeafSpec("static", value=x)
    from ..capture import _is_module

    if _is_module(x):  # the self of a compiled method, or a model passed
        modes = tuple([m.training for m in x.modules()])  # in: by identity and modes;
        return ("Mod", id(x), t, modes), LeafSpec("static", value=x)  # params are lifted
    if isinstance(x, Tracer):
        raise SignatureError(
            f"argument {path}: a tracer of another trace was passed to a compiled "
            "function; call the uncompiled function inside traced code"
        )
    raise SignatureError(
        f"argument {path} has unsupported type {type(x).__name__}; compiled functions take numpy "
        "arrays, eager Tensors, Python scalars and nested tuples/lists/dicts of them. Pass "
        "anything else through static_argnums=(...)."
    )
