"""What the op surface does with operands, and the op functions outside the class.

eager.surface's ``TensorOps`` methods turn arguments into operands; this module holds
the steps they share with the module-level op functions:

* :func:`_dispatch`: hand an op to the operand class with the highest ``_priority``
  (a tracer beats a tensor) through its ``_apply``;
* :func:`_coerce_pair` & co.: PyTorch's dtype promotion for a binary op, numbers and
  arrays wrapped as operands, shape arguments checked;
* the op functions ``where``, ``maximum``, ``minimum``, ``matmul``, ``sum_to`` (used
  after every VJP rule) and ``getitem``;
* index encoding: :func:`encode_index` turns a Python index into a hashable spec plus
  index operands (graphc stores the spec as a node attr); :func:`decode_index` turns
  it back into a numpy key;
* ``Size``, the shape type.

eager.surface imports everything here (its methods use these names, and it re-exports
them).  This module sits below it and receives the ``TensorOps`` class and the
``tensor`` factory through :func:`bind` (docs/eager-layers.md).
"""

from __future__ import annotations

import builtins
import warnings
from typing import Any, Optional, Sequence

import numpy as np

import eager._dtype as D
from .ops.registry import norm_axes

_SCALARS = (builtins.int, builtins.float, builtins.bool, np.number, np.bool_)

# --- wiring: eager.surface's TensorOps (the layer above) and eager.factories' tensor -------
# handed down once through bind() by the wiring block of eager/factories.py.
TensorOps = None
_tensor = None


def bind(*, tensor_ops, tensor) -> None:
    """Receive eager.surface.TensorOps and eager.factories.tensor (called once, by the
    wiring block of eager.factories)."""
    global TensorOps, _tensor
    TensorOps, _tensor = tensor_ops, tensor


class Size(tuple):
    """``tensor.shape``/``tensor.size()``: a tuple that prints like PyTorch's."""

    def __repr__(self) -> str:
        return f"eager.Size({list(self)})"

    def numel(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n


# pickled (and shown by type()) as eager.Size, the public name, as torch.Size is torch's:
# a pickle must not depend on which private module defines the class
Size.__module__ = "eager"


# ---------------------------------------------------------------------------
# dispatch, coercion and the module-level op functions (also used by the VJP rules)


def _dispatch(op: str, gname: str, operands: tuple, attrs: dict):
    best = None
    for o in operands:
        if isinstance(o, TensorOps) and (best is None or o._priority > best._priority):
            best = o
    if best is None:
        raise TypeError(
            f"{op}: expected at least one tensor operand, got "
            f"{[type(o).__name__ for o in operands]}"
        )
    return best._apply(op, gname, operands, attrs)


BOOL_NEG = (
    "Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
    "to invert a mask, use the `~` or `logical_not()` operator instead."
)


def _check_bool_sub(a: Any, b: Any) -> None:
    """PyTorch refuses ``-`` with a bool operand (numpy's bool ``-`` is not a subtraction)."""
    na = isinstance(a, (builtins.bool, np.bool_)) or (
        isinstance(a, TensorOps) and a._npdtype.kind == "b"
    )
    nb = isinstance(b, (builtins.bool, np.bool_)) or (
        isinstance(b, TensorOps) and b._npdtype.kind == "b"
    )
    if na and nb:
        raise RuntimeError(
            "Subtraction, the `-` operator, with two bool tensors is not "
            "supported. Use the `^` or `logical_xor()` operator instead."
        )
    if na or nb:
        raise RuntimeError(
            "Subtraction, the `-` operator, with a bool tensor is not supported. "
            "If you are trying to invert a mask, use the `~` or `logical_not()` "
            "operator instead."
        )


def _coerce_pair(t: TensorOps, other: Any, op: str):
    """Return (t, other) as operands with PyTorch's dtype promotion applied."""
    if op == "sub":
        _check_bool_sub(t, other)
    if isinstance(other, TensorOps):
        da, db = t._npdtype, other._npdtype
        if da != db:
            target = D.promote(da, db)
            if da.kind != db.kind or da.kind != "f":
                if da != target:
                    t = t.to(target)
                if db != target:
                    other = other.to(target)
        return t, other
    if isinstance(other, _SCALARS):
        sd = D.scalar_dtype(other, t._npdtype)
        if sd != t._npdtype:
            # the scalar changes the category (int tensor + 2.5 -> float32, bool + 1 -> int64);
            # numpy would widen int64 with a float32 0-d operand to float64, so cast first
            t = t.to(sd)
        return t, np.asarray(other, dtype=sd)
    if isinstance(other, np.ndarray):
        return _coerce_pair(t, _const_like(t, other), op)
    if isinstance(other, (list, tuple)):
        return _coerce_pair(t, _const_like(t, np.asarray(other)), op)
    raise TypeError(
        f"{op}: unsupported operand type {type(other).__name__} "
        f"(expected a tensor or a Python number)"
    )


def _const_like(t: TensorOps, arr: np.ndarray):
    """Wrap a numpy array operand in the same world as tensor ``t``."""
    return t._wrap_const(arr)


def _as_operand(x: Any, like: Optional[TensorOps] = None, op: str = "op"):
    if isinstance(x, TensorOps):
        return x
    if like is not None and isinstance(x, _SCALARS):
        return np.asarray(x, dtype=D.scalar_dtype(x, like._npdtype))
    return _tensor(x)


def _axes(dim, ndim: int, op: str) -> tuple:
    return norm_axes(dim, ndim, op)


def _shape_arg(shape: tuple) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, Size)):
        shape = tuple(shape[0])
    out = []
    for s in shape:
        if isinstance(s, TensorOps):
            raise TypeError("shape entries must be Python ints, not tensors")
        try:
            out.append(builtins.int(s))
        except (TypeError, ValueError):
            raise TypeError(f"shape entries must be ints, got {s!r}") from None
    return tuple(out)


def _infer_shape(shape: tuple, numel: int, old: tuple) -> tuple:
    neg = [i for i, s in enumerate(shape) if s == -1]
    if len(neg) > 1:
        raise RuntimeError("only one dimension can be inferred")
    if any(s < -1 for s in shape):
        raise RuntimeError(f"invalid shape dimension in {list(shape)}")
    known = 1
    for s in shape:
        if s != -1:
            known *= s
    if neg:
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape = tuple(numel // known if s == -1 else s for s in shape)
    elif known != numel:
        raise RuntimeError(
            f"shape '{list(shape)}' is invalid for input of size {numel} (input shape {list(old)})"
        )
    return tuple(shape)


def where(condition, x, y):
    """Elementwise ``x if condition else y`` (both sides are evaluated)."""
    ref = next((o for o in (x, y, condition) if isinstance(o, TensorOps)), None)
    if ref is None:
        condition = _tensor(condition)
        ref = condition
    if not isinstance(condition, TensorOps):
        condition = ref._wrap_const(np.asarray(condition, dtype=bool))
    elif condition._npdtype.kind != "b":
        name = D._TORCH_NAMES.get(condition._npdtype.name, condition._npdtype.name)
        if condition._npdtype != np.uint8:
            raise RuntimeError(
                f"where expected condition to be a boolean tensor, but got a tensor with dtype "
                f"{name}"
            )
        warnings.warn(
            "where received a uint8 condition tensor. This behavior is deprecated and will be "
            "removed in a future version of PyTorch. Use a boolean condition instead.",
            UserWarning,
            stacklevel=2,
        )
        condition = condition.to(D.bool)
    like = x if isinstance(x, TensorOps) else y if isinstance(y, TensorOps) else None
    if like is None:
        x = np.asarray(x, dtype=D.infer_np_dtype(x))
        x = condition._wrap_const(x)
        like = x
    # a scalar side may also cast the tensor side (int64 tensor vs 2.5 -> float32)
    if not isinstance(x, TensorOps):
        y, x = _coerce_pair(like, x, "where")
    elif not isinstance(y, TensorOps):
        x, y = _coerce_pair(like, y, "where")
    if isinstance(x, TensorOps) and isinstance(y, TensorOps) and x._npdtype != y._npdtype:
        x, y = _coerce_pair(x, y, "where")
    return _dispatch("where", "WhereBackward0", (condition, x, y), {})


def _clamp_tensor(x, lo, hi):
    """``clamp`` with tensor bounds: the value is ``minimum(maximum(x, lo), hi)`` (NaN
    propagates), and the gradient goes where PyTorch's clamp_backward_min_max sends it:
    to x where lo <= x <= hi, to lo where x < lo < hi, to hi where x > hi or hi < lo;
    nowhere at a NaN or when x < lo == hi.  (maximum's rule would split ties and pass a
    NaN's gradient to both sides.)  The selects return the value they route."""
    v = x
    if lo is not None:
        v = maximum(v, lo)
    if hi is not None:
        v = minimum(v, hi)
    if v._npdtype.kind != "f":
        return v
    rest = v.detach()
    if hi is None:
        return where(x >= lo, x, where(x < lo, lo, rest))
    if lo is None:
        return where(x <= hi, x, where(x > hi, hi, rest))
    return where(
        (x >= lo) & (x <= hi),
        x,
        where((x < lo) & (hi > lo), lo, where((x > hi) | (hi < lo), hi, rest)),
    )


def maximum(a, b):
    a, b = _pair(a, b, "maximum")
    return _dispatch("maximum", "MaximumBackward0", (a, b), {})


def minimum(a, b):
    a, b = _pair(a, b, "minimum")
    return _dispatch("minimum", "MinimumBackward0", (a, b), {})


def _pair(a, b, op):
    if isinstance(a, TensorOps):
        return _coerce_pair(a, b, op)
    b2, a2 = _coerce_pair(b, a, op)
    return a2, b2


def matmul(a, b):
    if not isinstance(a, TensorOps):
        a = _as_operand(a)
    if not isinstance(b, TensorOps):
        b = _as_operand(b)
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(
            f"matmul: both arguments need at least 1 dimension, got shapes "
            f"{list(a.shape)} and {list(b.shape)}"
        )
    ka = a.shape[-1]
    kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if ka != kb:
        if a.ndim == 2 and b.ndim == 2:
            raise RuntimeError(
                f"mat1 and mat2 shapes cannot be multiplied "
                f"({a.shape[0]}x{a.shape[1]} and {b.shape[0]}x{b.shape[1]})"
            )
        raise RuntimeError(
            f"matmul: inner dimensions do not match: shapes {list(a.shape)} and {list(b.shape)}"
        )
    if a._npdtype != b._npdtype:
        a, b = _coerce_pair(a, b, "matmul")
    gname = {(2, 2): "MmBackward0", (1, 1): "DotBackward0", (2, 1): "MvBackward0"}.get(
        (a.ndim, b.ndim), "MatmulBackward0"
    )
    return _dispatch("matmul", gname, (a, b), {})


def sum_to(g, shape: tuple):
    """Sum a gradient in a broadcast shape back to ``shape`` (used after every VJP rule)."""
    gs = tuple(g.shape)
    shape = tuple(shape)
    if gs == shape:
        return g
    lead = len(gs) - len(shape)
    axes = tuple(range(lead)) + tuple(
        i + lead for i, d in enumerate(shape) if d == 1 and gs[i + lead] != 1
    )
    if axes:
        g = g._op("sum", "SumBackward1", axis=axes, keepdim=True)
    if tuple(g.shape) != shape:
        g = g._op("reshape", "ViewBackward0", shape=shape)
    return g


def getitem(x: TensorOps, key):
    """Indexing: static parts (ints, slices, None, Ellipsis) become attrs, tensors operands."""
    spec, arrays, kind = encode_index(key, x)
    gname = {"basic_int": "SelectBackward0", "basic": "SliceBackward0"}.get(kind, "IndexBackward0")
    return _dispatch("getitem", gname, (x,) + tuple(arrays), {"index": spec})


def encode_index(key, like) -> tuple:
    """Turn a Python index into (spec, index operands, kind).

    ``spec`` is a tuple of hashable items: ``("i", n)`` int, ``("s", start, stop,
    step)`` slice, ``("n",)`` None, ``("e",)`` Ellipsis, ``("t", k)`` the k-th
    index tensor operand.  It is what graphc stores as the node's attr.
    """
    if not isinstance(key, tuple):
        key = (key,)
    spec, arrays = [], []
    has_int = has_adv = False
    for k in key:
        if k is None:
            spec.append(("n",))
        elif k is Ellipsis:
            spec.append(("e",))
        elif isinstance(k, slice):
            for part in (k.start, k.stop, k.step):
                if isinstance(part, TensorOps):
                    raise TypeError("slice bounds must be Python ints, not tensors")
            if k.step is not None and k.step <= 0:
                raise ValueError("step must be greater than zero")
            spec.append(("s", _opt_int(k.start), _opt_int(k.stop), _opt_int(k.step)))
        elif isinstance(k, (builtins.bool, np.bool_)):
            arrays.append(like._wrap_const(np.asarray(k)))
            spec.append(("t", len(arrays) - 1))
            has_adv = True
        elif isinstance(k, (builtins.int, np.integer)):
            spec.append(("i", builtins.int(k)))
            has_int = True
        elif isinstance(k, TensorOps):
            if k._npdtype.kind not in "biu":
                raise IndexError("tensors used as indices must be long, int or bool tensors")
            arrays.append(k)
            spec.append(("t", len(arrays) - 1))
            has_adv = True
        elif isinstance(k, (list, np.ndarray, range)):
            arr = np.asarray(k)  # a range indexes like the list of its ints, as in PyTorch
            if arr.dtype.kind not in "biu":
                raise IndexError("index arrays must hold integers or booleans")
            arrays.append(like._wrap_const(arr))
            spec.append(("t", len(arrays) - 1))
            has_adv = True
        else:
            raise IndexError(
                f"unsupported index {k!r} of type {type(k).__name__}; use ints, "
                f"slices, None, ..., or integer/bool tensors"
            )
    kind = "advanced" if has_adv else ("basic_int" if has_int else "basic")
    return tuple(spec), arrays, kind


def _opt_int(v):
    if v is None:
        return None
    return builtins.int(v)


def decode_index(spec: tuple, arrays: Sequence) -> tuple:
    """Inverse of :func:`encode_index` over concrete arrays (numpy key)."""
    out = []
    for item in spec:
        tag = item[0]
        if tag == "i":
            out.append(item[1])
        elif tag == "s":
            out.append(slice(item[1], item[2], item[3]))
        elif tag == "n":
            out.append(None)
        elif tag == "e":
            out.append(Ellipsis)
        else:
            out.append(arrays[item[1]])
    return tuple(out)
