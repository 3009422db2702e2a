"""Views: ops that only rearrange elements become new strides over their operand's buffer,
with no code (``view(v, attrs) -> View``, or None when the operand must be copied first)."""

from __future__ import annotations

from typing import Optional

from ..strided import View, cstrides, index_view
from .table import register


def _transpose(v: View, a: dict) -> View:
    perm = a["perm"]
    return View(v.buf, v.offset, tuple(v.strides[p] for p in perm), tuple(v.shape[p] for p in perm))


def _expand(v: View, a: dict) -> View:
    shape = tuple(a["shape"])
    return View(v.buf, v.offset, v.broadcast_to(shape), shape)


def _reshape(v: View, a: dict) -> Optional[View]:
    if not v.contiguous():
        return None  # a reshape of a non-contiguous view: copy first
    shape = tuple(a["shape"])
    return View(v.buf, v.offset, cstrides(shape), shape)


def getitem_view(v: View, a: dict) -> View:
    """A getitem with no index operands (basic indexing: ints, slices, None, ...)."""
    return index_view(v, a["index"])


register("transpose", view=_transpose)
register("expand", view=_expand)
register("reshape", view=_reshape)
