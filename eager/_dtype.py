"""dtypes: eager.float32 & co., and PyTorch's promotion rules on top of numpy.

numpy and PyTorch agree on float/float promotion (f32 + f64 -> f64) and, since
numpy 2 (NEP 50), on Python scalars being "weak" (f32 tensor * 2.0 stays f32).
They differ on int/float mixes (numpy: int64 + f32 -> f64, PyTorch -> f32) and on
Python floats meeting integer tensors (PyTorch gives the default float dtype).
Those two cases are handled here, once, for every op.
"""

from __future__ import annotations

import operator
import sys
from typing import Any

import numpy as np


_pyfloat = float
_pyint = int
_pybool = bool


class dtype:
    """A tensor element type; wraps a numpy dtype and prints as ``eager.<name>``."""

    __slots__ = ("name", "np", "is_floating_point", "itemsize", "is_signed")

    def __init__(self, name: str, np_type: type) -> None:
        self.name = name
        self.np = np.dtype(np_type)
        self.is_floating_point = self.np.kind == "f"
        self.is_signed = self.np.kind in "fi"
        self.itemsize = self.np.itemsize

    def __repr__(self) -> str:
        return f"eager.{self.name}"

    def __reduce__(self):
        return (_by_name, (self.name,))


float16 = half = dtype("float16", np.float16)
float32 = float = dtype("float32", np.float32)
float64 = double = dtype("float64", np.float64)
int8 = dtype("int8", np.int8)
uint8 = dtype("uint8", np.uint8)
int16 = short = dtype("int16", np.int16)
int32 = int = dtype("int32", np.int32)
int64 = long = dtype("int64", np.int64)
bool = dtype("bool", np.bool_)  # noqa: A001 - mirrors torch.bool

_ALL = (float16, float32, float64, int8, uint8, int16, int32, int64, bool)
FROM_NP: dict[np.dtype, dtype] = {d.np: d for d in _ALL}
_NAMES = {d.name: d for d in _ALL}
DEFAULT_FLOAT = np.dtype(np.float32)


def _by_name(name: str) -> dtype:
    return _NAMES[name]


def to_np(d) -> np.dtype:
    """Accept an eager dtype, a numpy dtype/type or a name; return a numpy dtype."""
    if isinstance(d, dtype):
        return d.np
    if d is _pyfloat:
        return DEFAULT_FLOAT
    if d is _pyint:
        return np.dtype(np.int64)
    if d is _pybool:
        return np.dtype(np.bool_)
    try:
        npd = np.dtype(d)
    except TypeError:
        raise TypeError(f"dtype must be an eager dtype such as eager.float32, got {d!r}") from None
    if not npd.isnative:  # e.g. zeros_like(a big-endian array): its native dtype
        npd = npd.newbyteorder("=")
    if npd not in FROM_NP:
        raise TypeError(
            f"dtype {npd} is not supported; use one of {', '.join(repr(x) for x in _ALL)}"
        )
    return npd


def from_np(npd: np.dtype) -> dtype:
    try:
        return FROM_NP[npd]
    except KeyError:
        raise TypeError(f"numpy dtype {npd} has no eager equivalent") from None


def promote(a: np.dtype, b: np.dtype) -> np.dtype:
    """PyTorch's promotion of two tensor dtypes (category first, then width)."""
    if a == b:
        return a
    ka, kb = a.kind, b.kind
    if ka == "f" and kb != "f":
        return a
    if kb == "f" and ka != "f":
        return b
    return np.promote_types(a, b)


def scalar_dtype(value, other: np.dtype) -> np.dtype:
    """dtype a Python scalar takes when it meets a tensor of dtype ``other`` (weak scalar)."""
    t = value.__class__
    if t is _pybool or t is np.bool_:
        return other
    if t is _pyint or isinstance(value, np.integer):
        return other if other.kind != "b" else np.dtype(np.int64)
    if t is _pyfloat or isinstance(value, np.floating):
        return other if other.kind == "f" else DEFAULT_FLOAT
    raise TypeError(f"unsupported scalar operand of type {t.__name__}: {value!r}")


# PyTorch's ScalarType names, which its error messages use ("result type Float ...")
_TORCH_NAMES = {
    "float16": "Half",
    "float32": "Float",
    "float64": "Double",
    "int8": "Char",
    "uint8": "Byte",
    "int16": "Short",
    "int32": "Int",
    "int64": "Long",
    "bool": "Bool",
}


def can_cast(src: np.dtype, dst: np.dtype) -> _pybool:
    """PyTorch's ``canCast``: may an op whose result type is ``src`` write into ``dst``?

    Categories are ordered bool < integer < float; writing into a lower category is
    refused (float -> int, float or int -> bool), any width within or into a higher
    category is allowed (float64 -> float32, int64 -> uint8, bool -> float).  numpy's
    ``same_kind`` differs: it refuses int16 -> uint8 and allows float -> bool."""
    if src.kind == "f":
        return dst.kind == "f"
    return dst.kind != "b" or src.kind == "b"


def check_inplace_result(result: np.dtype, dst: np.dtype) -> None:
    """Raise PyTorch's error when an in-place op (``x += y``, ``x.add_(y)``...) computes a
    result of dtype ``result`` that cannot be stored in ``x`` of dtype ``dst``.

    The result type is the op's out-of-place one (PyTorch promotion, Python scalars weak):
    ``int64_w -= 0.5 * g`` computes float32 and is refused rather than truncated.  Ops
    that are defined to convert (``copy_``, ``fill_``, ``x[i] = v``) do not call this."""
    if result != dst and not can_cast(result, dst):
        raise RuntimeError(
            f"result type {_TORCH_NAMES.get(result.name, result.name)} can't be "
            f"cast to the desired output type "
            f"{_TORCH_NAMES.get(dst.name, dst.name)}"
        )


def infer_np_dtype(data) -> np.dtype:
    """The dtype eager.tensor(data) picks, as PyTorch does: floats -> float32, ints -> int64."""
    if isinstance(data, np.ndarray):
        return data.dtype
    arr = np.asarray(data)
    if arr.dtype.kind == "f":
        return DEFAULT_FLOAT
    if arr.dtype.kind in "iu":
        return np.dtype(np.int64)
    if arr.dtype.kind == "b":
        return np.dtype(np.bool_)
    raise TypeError(f"cannot build a tensor from data of numpy dtype {arr.dtype}")


def infer_tensor_dtype(data) -> np.dtype:
    """The dtype ``eager.tensor(data)`` / ``eager.as_tensor(data)`` pick, as PyTorch's
    ``torch.tensor`` does: a numpy array or numpy scalar keeps its own dtype
    (``np.float64(1.5)`` -> float64, ``np.int32(3)`` -> int32), and a list or tuple holding
    numpy scalars or arrays (``[a0, a1]``) promotes the dtypes of its elements, where a
    Python float counts as the default float dtype, a Python int as int64 and a Python bool as bool
    (``[np.int32(1), 2]`` -> int64, ``[np.float32(1), 2.0]`` -> float32).  Data without numpy
    scalars, or a numpy dtype eager has no tensor type for, is inferred as
    :func:`infer_np_dtype` does."""
    if isinstance(data, np.generic):
        dt = np.dtype(data.dtype)
        return dt if dt in FROM_NP else infer_np_dtype(data)
    if not isinstance(data, (list, tuple)):
        return infer_np_dtype(data)
    leaves: list = []
    stack: list = [data]
    seen_np = False
    while stack:  # iterative walk of the nesting
        s = stack.pop()
        if isinstance(s, (list, tuple)):
            stack.extend(s)
        elif isinstance(s, (np.generic, np.ndarray)):  # arrays too: [a0, a1] (PyTorch)
            dt = np.dtype(s.dtype)
            if not dt.isnative:  # a row in the other byte order: its values, natively
                dt = dt.newbyteorder("=")
            if dt not in FROM_NP:
                return infer_np_dtype(data)
            seen_np = True
            leaves.append(dt)
        elif s.__class__ is _pybool:
            leaves.append(np.dtype(np.bool_))
        elif s.__class__ is _pyint:
            leaves.append(np.dtype(np.int64))
        elif s.__class__ is _pyfloat:
            leaves.append(DEFAULT_FLOAT)
        else:  # arrays, complex numbers, other objects: the general rule
            return infer_np_dtype(data)
    if not seen_np:
        return infer_np_dtype(data)
    out = leaves[0]
    for d in leaves[1:]:
        out = promote(out, d)
    return out


def check_no_np_bool(data, npd: np.dtype) -> None:
    """PyTorch's refusal to store a numpy bool scalar into an integer tensor from Python
    data: ``torch.tensor([np.bool_(True), 1])`` (inferred int64), ``tensor([np.bool_(True)],
    dtype=torch.int32)`` and ``tensor(np.bool_(True), dtype=torch.int64)`` raise TypeError
    "'numpy.bool' object cannot be interpreted as an integer" (it stores each element
    through ``__index__``, which numpy's bool lacks; a Python bool is an int).  Float, bool
    and complex tensors take it; numpy arrays of bools are not Python data (converted)."""
    if npd.kind not in "iu":
        return
    bad: Any = None
    if isinstance(data, np.bool_):
        bad = data
    elif isinstance(data, (list, tuple)):
        stack: list = [data]
        while stack and bad is None:  # iterative walk of the nesting
            s = stack.pop()
            if isinstance(s, (list, tuple)):
                stack.extend(s)
            elif isinstance(s, np.bool_):
                bad = s
    else:
        return
    if bad is not None:
        try:
            operator.index(bad)  # numpy's own wording: "'numpy.bool' object cannot be ..."
        except TypeError as e:
            raise TypeError(str(e)) from None


_C_INT_NAMES = {"int64": "int64_t", "int32": "int", "int16": "short", "int8": "int8_t",
                "uint8": "uint8_t"}  # fmt: skip


def checked_fill(value, npd: np.dtype) -> np.ndarray:
    """A Python number as a 0-d array of dtype ``npd``; for an integer dtype, PyTorch's
    RuntimeError when it does not fit (NaN, inf, out of range) instead of numpy's
    wrapped or INT_MIN value (an unsigned type takes negatives down to -2**(bits-1), which
    wrap, as PyTorch's)."""
    import builtins as B  # (this module's int/float/bool are dtypes)

    npd = np.dtype(npd)
    if (
        npd.kind in "iu"
        and isinstance(value, (B.int, B.float, np.integer, np.floating))
        and not (isinstance(value, (B.bool, np.bool_)))
    ):
        info = np.iinfo(npd)
        lo = info.min if npd.kind == "i" else -((info.max + 1) // 2)
        v = B.float(value) if isinstance(value, (B.float, np.floating)) else B.int(value)
        if v != v or v in (B.float("inf"), B.float("-inf")) or not lo <= B.int(v) <= info.max:
            name = _C_INT_NAMES.get(npd.name, npd.name)
            raise RuntimeError(f"value cannot be converted to type {name} without overflow")
        if npd.kind == "u" and B.int(v) < 0:
            return np.asarray(B.int(v) % (info.max + 1)).astype(npd)
    return np.asarray(value).astype(npd)


_FOREIGN_ORDER = ">" if sys.byteorder == "little" else "<"


def native_order(arr: np.ndarray) -> None:
    """PyTorch's refusal of an array whose bytes are not in the machine's order (eager's
    dtypes and kernels are the native ones: such an array would reach numpy code as a
    dtype eager does not know)."""
    if arr.dtype.byteorder == _FOREIGN_ORDER:
        raise ValueError(
            "given numpy array has byte order different from the native byte order. "
            "Conversion between byte orders is currently not supported. (Convert it "
            "first: arr.astype(arr.dtype.newbyteorder('=')))"
        )
