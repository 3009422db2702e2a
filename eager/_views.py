"""Views and in-place writes: the bookkeeping that keeps a view and its base consistent.

numpy reshape/transpose/basic indexing return views of the input's buffer.  As in
PyTorch, such a view shares its base's version counter (so an in-place write through
either invalidates tensors the graph saved), and an in-place op recorded on a view
gives its base a new history (CopySlices) instead of silently bypassing it.

A view remembers how it was made in ``_view`` = (base, op, attrs, extra operands,
creation kind).  :func:`inplace`, :func:`write`, :func:`setitem` and
:func:`fast_inplace` are ``Tensor``'s ``_inplace``, ``_write``, ``_setitem_impl`` and
``_fast_inplace`` (bound as methods in its class body).  This module sits below
eager/tensor.py (docs/eager-layers.md) and receives ``Tensor`` through :func:`bind`.
"""

from __future__ import annotations

import builtins
from typing import Optional

import numpy as np

import eager._dtype as D
from .autograd.function import OpNode, node_class
from .autograd.grad_mode import STATE as _STATE, no_grad as _no_grad
from .ops.movement import assigned_shape
from .ops.registry import OPS, Meta, ops_of
from .surface import TensorOps, decode_index, encode_index

# eager.tensor's Tensor class, handed down once through bind() (eager/factories.py's
# wiring block); read at the same cost as any global.
Tensor = None


def bind(tensor_class) -> None:
    """Receive eager.tensor.Tensor (called once, by the wiring block of eager.factories)."""
    global Tensor
    Tensor = tensor_class


LEAF_INPLACE = "a leaf Variable that requires grad is being used in an in-place operation."
# the ops whose numpy forward may return a view (declared by their records), and the ops
# whose result may share memory with an operand (the view and index families)
VIEW_OPS = frozenset(name for name, op in OPS.items() if op.view)
LINKS_VIEWS = ops_of("view", "index")
VIEW_OF_LEAF_INPLACE = (
    "a view of a leaf Variable that requires grad is being used in an in-place operation."
)
# How a view was made (``_view[4]``, PyTorch's CreationMeta): None for an ordinary view,
# NO_GRAD_VIEW when made with grad recording off, ("multi", i) for output i of unbind.
# An in-place op that must be recorded is refused on the last two, as in PyTorch.
NO_GRAD_VIEW = "no_grad"
NO_GRAD_VIEW_INPLACE = (
    "A view was created in no_grad mode and is being modified inplace with grad mode enabled. "
    "Given that this use case is ambiguous and error-prone, it is forbidden. You can clarify "
    "your code by moving both the view and the inplace either both inside the no_grad block "
    "(if you don't want the inplace to be tracked) or both outside (if you want the inplace "
    "to be tracked)."
)
MULTI_OUTPUT_VIEW_INPLACE = (
    "Output {} of UnbindBackward0 is a view and is being modified inplace. This view is the "
    "output of a function that returns multiple views. Such functions do not allow the output "
    "views to be modified inplace. You should replace the inplace operation by an out-of-place "
    "one."
)


def creation(base: Tensor):
    """The creation kind a view of ``base`` inherits (a view of an unbind output is one)."""
    view = getattr(base, "_view", None)
    return None if view is None else view[4]


def link_view(out: Tensor, operands: tuple, op: str, attrs: dict) -> None:
    """If ``out`` shares memory with its first operand, share its version counter too
    and, for a writable view, remember how it was made (``_view``)."""
    base = operands[0]
    dst = out._data
    owner = dst.base
    if owner is None or base.__class__ is not Tensor:
        return
    src = base._data
    # numpy points a view's .base at the array owning the memory: compare owners first,
    # and only ask numpy's (slower) overlap test when that is inconclusive
    if owner is not src and owner is not src.base and not np.may_share_memory(dst, src):
        return
    out._version = base._version
    if op in VIEW_OPS and dst.flags.writeable:
        out._view = (
            base,
            op,
            attrs,
            operands[1:],
            creation(base) if _STATE.enabled else NO_GRAD_VIEW,
        )


def check_view_of_leaf(t: Tensor) -> None:
    """Before a recorded in-place op on ``t``: refuse it if ``t`` is a view made without
    grad recording or by unbind, or a view whose root base is a leaf while the view or the
    leaf requires grad (PyTorch's check_inplace: ``leaf.reshape(...).requires_grad_()[1]``
    counts too).  Recording the write would otherwise give the leaf a history."""
    view = getattr(t, "_view", None)
    if view is None:
        return
    creation = view[4]
    if creation is NO_GRAD_VIEW:
        raise RuntimeError(NO_GRAD_VIEW_INPLACE)
    if creation is not None:
        raise RuntimeError(MULTI_OUTPUT_VIEW_INPLACE.format(creation[1]))
    rg = t._rg
    while view is not None:
        t = view[0]
        view = getattr(t, "_view", None)
    if t.grad_fn is None and (rg or t._rg):
        raise RuntimeError(VIEW_OF_LEAF_INPLACE)


def rebase_bases(t: Tensor) -> None:
    """After an in-place op on view ``t`` (buffer already written), re-record its bases."""
    view = getattr(t, "_view", None)
    while view is not None:
        base, op, attrs, extra = view[:4]
        if op == "getitem":
            snap = Tensor._make(base._data)
            snap._rg, snap.grad_fn, snap._output_nr = base._rg, base.grad_fn, base._output_nr
            new = snap._op("setitem", "CopySlices", t, *extra, index=attrs["index"])
        elif op == "reshape":
            new = t._op("reshape", "CopySlices", shape=base._data.shape)
        else:
            perm = attrs["perm"]
            inv = tuple(sorted(range(len(perm)), key=perm.__getitem__))
            new = t._op("transpose", "CopySlices", perm=inv)
        if new.grad_fn is not None:
            base.grad_fn = new.grad_fn
            base._output_nr = 0
            base._rg = True
        t = base
        view = getattr(t, "_view", None)


# --- in-place writes ------------------------------------------------------------------
def inplace(self, method: str, *args, gname: Optional[str] = None, **kwargs):
    """Run ``method`` out of place, then write the result into self's buffer.

    With grad recording on, self takes over the new node as its grad_fn (PyTorch's
    rebase); without it this is a plain numpy in-place write.
    """
    recording = _STATE.enabled and (
        self._rg or builtins.any(isinstance(a, Tensor) and a._rg for a in args)
    )
    if recording:
        check_view_of_leaf(self)
        if self.grad_fn is None and self._rg:
            raise RuntimeError(LEAF_INPLACE)
        snap = Tensor._make(self._data.copy())
        snap._rg, snap.grad_fn, snap._output_nr = self._rg, self.grad_fn, self._output_nr
        res = getattr(snap, method)(*args, **kwargs)
        self._write(res._data, method)
        if res.grad_fn is not None:
            node = res.grad_fn
            if gname is not None and isinstance(node, OpNode):
                node.__class__ = node_class(gname)
            self.grad_fn = node
            self._output_nr = res._output_nr
            self._rg = True
            rebase_bases(self)
    else:
        if self.grad_fn is None and self._rg and _STATE.enabled:
            raise RuntimeError(LEAF_INPLACE)
        with _no_grad():
            res = getattr(self, method)(*args, **kwargs)
        self._write(res._data, method)
    return self


def write(self, value: np.ndarray, op: str) -> None:
    """Write ``value`` into self's buffer (PyTorch's dtype rule) and bump its version."""
    dst = self._data
    if value.shape != dst.shape:
        raise RuntimeError(
            f"{op}_: output with shape {list(dst.shape)} doesn't match the "
            f"broadcast shape {list(value.shape)}"
        )
    if value.dtype != dst.dtype:
        D.check_inplace_result(value.dtype, dst.dtype)
    if not dst.flags.writeable:
        raise RuntimeError(
            f"{op}_: this tensor is a broadcast (expanded) view or read-only "
            "buffer and cannot be written in place; clone() it first"
        )
    np.copyto(dst, value, casting="unsafe")  # PyTorch's rule was checked above
    self._version[0] += 1


def setitem(self, key, value, gname: str):
    """``self[key] = value`` (and ``copy_``); recorded as a ``gname`` node when needed."""
    spec, arrays, _ = encode_index(key, self)
    if isinstance(value, Tensor):
        v = value
        if v._data.dtype != self._data.dtype:
            v = v.to(self.dtype)
    else:
        v = Tensor._make(np.asarray(value, dtype=self._data.dtype))
    recording = _STATE.enabled and (self._rg or v._rg)
    if not recording:
        if not self._data.flags.writeable:
            raise RuntimeError("cannot assign into a read-only (expanded) view; clone() it")
        try:
            self._data[decode_index(spec, [a._data for a in arrays])] = v._data
        except (ValueError, IndexError) as e:
            # PyTorch's types: IndexError for the index, RuntimeError for the value
            raise (IndexError if isinstance(e, IndexError) else RuntimeError)(
                f"index assignment: {e} (tensor shape {list(self.shape)}, value shape "
                f"{list(v.shape)})"
            ) from None
        self._version[0] += 1
        return self
    check_view_of_leaf(self)
    if self.grad_fn is None and self._rg:
        raise RuntimeError(LEAF_INPLACE)
    want = assigned_shape(
        v._data.shape,
        Meta(self._data.shape, self._data.dtype),
        tuple(Meta(a._data.shape, a._data.dtype) for a in arrays),
        spec,
    )
    if want != v._data.shape:
        v = v.reshape(want)  # leading size-1 dims dropped, as numpy does
    snap = Tensor._make(self._data)
    snap._rg, snap.grad_fn, snap._output_nr = self._rg, self.grad_fn, self._output_nr
    res = snap._op("setitem", gname, v, *arrays, index=spec)
    self._write(res._data, "setitem")
    self.grad_fn = res.grad_fn
    self._output_nr = 0
    self._rg = True
    rebase_bases(self)
    return self


def fast_inplace(self, ufunc, other):
    """numpy ``out=`` path for the common no-recording update ``w -= lr * g``."""
    if _STATE.enabled and (self._rg or (other.__class__ is Tensor and other._rg)):
        return None
    b = other._data if other.__class__ is Tensor else other
    if isinstance(b, (TensorOps,)) or not isinstance(
        b, (np.ndarray, builtins.int, builtins.float, np.number)
    ):
        return None
    dst = self._data
    try:
        # numpy refuses a cast outside its kind (UFuncTypeError, a TypeError); what numpy
        # accepts here PyTorch accepts too (int -> float, float64 -> float32...)
        ufunc(dst, b, out=dst, casting="same_kind")
    except (ValueError, TypeError, OverflowError):
        return None  # the general path applies PyTorch's rule or gives the precise error
    self._version[0] += 1
    return self
