"""Eager's aliasing, followed symbolically: which traced values share a buffer.

Eager runs on numpy, so whether two tensors share memory is numpy's decision: basic
indexing, transpose and expand (read-only) always give views; reshape gives one when the
strides allow it, else a copy; every other op writes a fresh C-ordered buffer when its
operands are C-ordered.  The tracer makes the same decisions from the element layout it
follows for each value.  A value whose layout it cannot follow (an op on a transposed
operand) still computes correctly; only a reshape of it that is later written, or whose
base is, is refused, since view or copy would then change the result.

The functions here take tracers (graphc.tracer.tensor) without importing their class:
``_place`` is given the new result, whose class is the Tracer's.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

import eager
from eager.interop import GRAD_MODE as _GRAD
from eager.interop import OPS, decode_index, requires_grad_of, set_requires_grad_flag

from ..errors import TracerError
from ..layout import (
    c_layout,
    expand_layout,
    index_layout,
    makes_c_output,
    reshape_layout,
    transpose_layout,
)
from .source import user_src

# the ops the records declare as views, and detach (the op record copies, but eager's
# Tensor.detach() shares its tensor's memory)
_VIEW_OPS = frozenset(name for name, op in OPS.items() if op.view) | {"detach"}


class _Storage:
    """One eager buffer: how often it has been written (views re-derive their value from
    the owner when this moved on) and, once aliasing became undecidable, why writes are
    refused."""

    __slots__ = ("gen", "ambiguous")

    def __init__(self) -> None:
        self.gen = 0
        self.ambiguous: Optional[str] = None


def _place(out, op: str, operands: tuple, attrs: dict, src: str) -> None:
    """Give a new op result its buffer and layout: a view of ``operands[0]`` for the ops
    numpy makes views with, else a fresh buffer (C-ordered when numpy's would be)."""
    x = operands[0] if operands else None
    cls = out.__class__  # Tracer
    if op in _VIEW_OPS and x.__class__ is cls:
        lay = x._lay
        if op == "getitem":
            if any(item[0] == "t" for item in attrs["index"]):
                out._lay = c_layout(out._meta_shape) if _c_operands(operands, cls) else None
                return  # advanced indexing: numpy copies
            if lay is not None:
                lay = index_layout(x._meta_shape, lay, decode_index(attrs["index"], ()))
        elif op == "reshape":
            if lay is None:
                # view or copy depends on a layout not followed here: the result is fine to
                # read, but a write to either side afterwards could not be reproduced
                msg = (
                    "in-place write at {write} to a tensor that may share memory with the "
                    f"reshape at {src} of a value whose memory layout graphc does not follow "
                    "(the result of an op on a transposed or otherwise permuted tensor); "
                    "eager would write through it or not depending on that layout. Call "
                    ".clone() on the reshape's input or result before writing in place."
                )
                x._stor.ambiguous = out._stor.ambiguous = msg
                return
            lay = reshape_layout(x._meta_shape, lay, out._meta_shape)
            if lay is None:  # numpy copies: a fresh C-ordered buffer
                out._lay = c_layout(out._meta_shape)
                _note_layout_use(x, out)
                return
        elif op == "transpose":
            lay = None if lay is None else transpose_layout(lay, attrs["perm"])
        elif op == "expand":
            lay = None if lay is None else expand_layout(x._meta_shape, lay, out._meta_shape)
        out._lay = lay
        out._stor = x._stor
        out._gen = x._stor.gen
        # how the view was made: a view of an unbind output, or of a view made under
        # no_grad(), is one too (eager's _creation, PyTorch's propagated creation_meta)
        creation = "no_grad" if not _GRAD.enabled else (x._view[3] if x._view is not None else None)
        out._view = (x, op, attrs, creation, ())
        if op == "detach":
            set_requires_grad_flag(out, False)
        elif op == "reshape":
            _note_layout_use(x, out)
        return
    if OPS[op].family == "matmul" or _c_operands(operands, cls):  # products write C order
        out._lay = c_layout(out._meta_shape)


def _c_operands(operands: tuple, cls: type) -> bool:
    """Are all operands C-ordered (``cls``: the Tracer class)?"""
    for o in operands:
        if o.__class__ is cls:
            if not makes_c_output(o._meta_shape, o._lay):
                return False
        elif isinstance(o, np.ndarray) and not o.flags.c_contiguous:
            return False
    return True


def _note_layout_use(x, out) -> None:
    """A reshape decided view-or-copy from layouts that rest on the arguments being
    C-contiguous (an argument's own, or an op result's, which follows its operands'):
    remember it, to check every argument at the call when a write makes it matter."""
    x._ctx.layout_uses.append((None, x._stor, x._stor.gen, out._stor, out._stor.gen))


def _sync(t) -> None:
    """Re-derive a stale view from its nearest up-to-date base (iteratively)."""
    chain = []
    u = t
    while u._view is not None and u._gen != u._stor.gen:
        chain.append(u)
        u = u._view[0]
    ctx = t._ctx
    graph = ctx.graph
    gen = t._stor.gen
    for v in reversed(chain):
        parent, op, attrs, _, extra = v._view
        v._node = graph.add_node(
            op,
            (parent._node,) + extra,
            attrs,
            shape=v._meta_shape,
            dtype=v._meta_dtype,
            src=user_src(3),
            role=ctx.role,
            by=ctx.by,
        )
        v._gen = gen
        if requires_grad_of(parent) and op != "detach" and v._view[3] is None:
            set_requires_grad_flag(v, True)  # the base's new history reaches its views


def _unview(parent, op: str, attrs: dict, extra: tuple, value: int, src: str) -> int:
    """The node of ``parent``'s value after ``value`` was written into its view (``extra``:
    the index operands of a gather view)."""
    ctx = parent._ctx
    g = ctx.graph
    shape, dtype = parent._meta_shape, parent._meta_dtype
    if op == "getitem":
        return g.add_node(
            "setitem",
            (parent.node, value) + extra,
            {"index": attrs["index"]},
            shape=shape,
            dtype=dtype,
            src=src,
            role=ctx.role,
            by=ctx.by,
        )
    if op == "reshape":
        return g.add_node(
            "reshape",
            (value,),
            {"shape": shape},
            shape=shape,
            dtype=dtype,
            src=src,
            role=ctx.role,
            by=ctx.by,
        )
    if op == "transpose":
        perm = attrs["perm"]
        inv = tuple(sorted(range(len(perm)), key=perm.__getitem__))
        return g.add_node(
            "transpose",
            (value,),
            {"perm": inv},
            shape=shape,
            dtype=dtype,
            src=src,
            role=ctx.role,
            by=ctx.by,
        )
    return value  # detach: the same buffer, no history


def _check_view_write(t, recording: bool, src: str) -> None:
    """Eager's (PyTorch's) refusals for an in-place write through view ``t``."""
    from eager.interop import MULTI_OUTPUT_VIEW_INPLACE, NO_GRAD_VIEW_INPLACE, VIEW_OF_LEAF_INPLACE

    u = t
    while u._view is not None:
        parent, op, _, creation, _ = u._view
        if op == "expand":
            raise RuntimeError(
                "in-place op on a broadcast (expanded) view: eager cannot write "
                "it in place (several elements share one memory location); "
                f"clone() it first (traced at {src})"
            )
        if op == "detach" and (requires_grad_of(parent) or recording):
            raise TracerError(
                f"in-place write at {src} through .detach() of a tensor that requires grad: "
                "eager changes its data but not its gradient history, which a compiled graph "
                "cannot express. Update the tensor itself under eager.no_grad() instead."
            )
        u = parent
    creation = t._view[3]
    if not recording:
        if (
            creation == "no_grad"
            and requires_grad_of(u)
            and t._ctx.role == "forward"
            and eager.is_grad_enabled()
        ):
            # PyTorch refuses this; eager's no_grad views do not require grad, so eager
            # writes without recording and its gradient ignores the write, which a graph
            # cannot reproduce (it would drop the gradient through the whole view)
            raise RuntimeError(f"{NO_GRAD_VIEW_INPLACE} (traced at {src})")
        return
    if creation == "no_grad":
        raise RuntimeError(f"{NO_GRAD_VIEW_INPLACE} (traced at {src})")
    if creation is not None:
        raise RuntimeError(f"{MULTI_OUTPUT_VIEW_INPLACE.format(creation[1])} (traced at {src})")
    if u.is_leaf and (requires_grad_of(t) or requires_grad_of(u)):
        raise RuntimeError(f"{VIEW_OF_LEAF_INPLACE} (traced at {src})")
