"""The lowering table: how each op of the registry becomes native code, one entry per op.

An op's record (``eager/ops/``) says what the op computes and which family it belongs
to; its entry here says how the backend computes it.  The family decides the shape of
the entry:

=============  ===============================================================================
family         entry
=============  ===============================================================================
elementwise    ``scalar(kb, e) -> ir.Value``: one output element from its operands' register
               values, inside whatever loop the scheduler fused the op into (:class:`Elem`)
reduce         a :class:`Reduction`: how a loop accumulates it (combine, identity, mean)
view           ``view(v, attrs) -> View | None``: the result's strides over its operand's
               buffer, no code (None: the operand must be copied first)
others         ``kernel(kb, n)``: a kernel of its own (matmul, argmax, gather, scatter, random)
=============  ===============================================================================

This module holds the table and its decorators; the entries are registered by the family
files of this package (``elementwise.py``, ``reduce.py``, ``views.py``, ``matmul.py``,
``indexing.py``, ``random.py``), which ``graphc.backend.lowering`` imports.
tests/graphc/backend/test_native.py checks every record has exactly the entry its family needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from eager.interop import OPS

from ...errors import UnsupportedOpError
from ..llvmir import reg_type


@dataclass(frozen=True)
class Reduction:
    """How a loop kernel accumulates a reduction: ``combine`` is ``add``, ``mul``, ``max``,
    ``min``, ``and`` or ``or``; ``mean`` divides by the count at the end (an empty mean is NaN)."""

    combine: str
    mean: bool = False


@dataclass(frozen=True)
class Lowering:
    """The native code of one op (see the module docstring for which field a family needs).

    ``kernel_kind`` names the kernel the scheduler makes for the op (ops sharing one kernel
    builder share it, e.g. argmax and argmin); ``view_if(node)`` says whether a node of an
    op that has both a view and a kernel entry (getitem) is a view."""

    op: str
    scalar: Optional[Callable[..., Any]] = None
    reduction: Optional[Reduction] = None
    view: Optional[Callable[..., Any]] = None
    view_if: Optional[Callable[[dict], bool]] = None
    kernel: Optional[Callable[..., Any]] = None
    kernel_kind: Optional[str] = None


LOWERINGS: dict[str, Lowering] = {}

# which entry each family needs
NEEDS = {"elementwise": "scalar", "reduce": "reduction", "view": "view"}


def register(op: str, **fields: Any) -> Lowering:
    """Register the lowering of ``op`` (a registry op): exactly once."""
    if op in LOWERINGS:
        raise ValueError(f"op {op!r} has two lowerings")
    if op not in OPS:
        raise ValueError(f"lowering of {op!r}, which no op record defines")
    if fields.get("kernel") is not None and fields.get("kernel_kind") is None:
        fields["kernel_kind"] = op
    low = Lowering(op, **fields)
    LOWERINGS[op] = low
    return low


def scalar(op: str) -> Callable:
    """Decorator: ``fn(kb, e)`` computes one element of the elementwise op ``op``."""

    def deco(fn: Callable) -> Callable:
        register(op, scalar=fn)
        return fn

    return deco


def kernel(op: str, kind: Optional[str] = None, **fields: Any) -> Callable:
    """Decorator: ``fn(kb, n)`` writes the kernel of node ``n`` of op ``op``."""

    def deco(fn: Callable) -> Callable:
        register(op, kernel=fn, kernel_kind=kind or op, **fields)
        return fn

    return deco


def get(op: str, where: str = "") -> Lowering:
    """The entry of ``op``; UnsupportedOpError naming ``where`` (the node) if there is none."""
    low = LOWERINGS.get(op)
    if low is None:
        raise UnsupportedOpError(f"{where or op}: op {op!r} has no native lowering")
    return low


def problems() -> list:
    """Every op record without the entry its family needs, every entry of an unknown op
    and every entry of the wrong shape; [] when the table is complete."""
    out = []
    for name, op in sorted(OPS.items()):
        low = LOWERINGS.get(name)
        if low is None:
            out.append(f"{name}: no lowering")
            continue
        need = NEEDS.get(op.family, "kernel")
        if getattr(low, need) is None:
            out.append(f"{name}: a {op.family} op needs a {need} lowering")
        if need == "kernel" and op.view and low.view is None:
            out.append(f"{name}: declared a view by its record but has no view lowering")
    for name in sorted(set(LOWERINGS) - set(OPS)):
        out.append(f"{name}: lowering of an op no record defines")
    return out


class Elem:
    """What a scalar lowering gets: node ``n`` of the graph, its op, attrs and output
    dtype, its operands' register values ``vals`` with their dtypes, and (computed on
    first use) the operands converted to the output dtype ``xs``, the LLVM type ``t`` of
    the output, whether it is a float (``fl``) and the value name to give the result."""

    __slots__ = ("kb", "n", "op", "attrs", "out", "vals", "in_dtypes", "name", "_xs")

    def __init__(self, kb: Any, n: int, d: dict, vals: list, in_dtypes: list) -> None:
        self.kb = kb
        self.n = n
        self.op = d["op"]
        self.attrs = d["attrs"]
        self.out = np.dtype(d["dtype"])
        self.vals = vals
        self.in_dtypes = in_dtypes
        self.name = f"n{n}"
        self._xs: Optional[list] = None

    @property
    def xs(self) -> list:
        if self._xs is None:
            self._xs = [self.kb.convert(v, s, self.out) for v, s in zip(self.vals, self.in_dtypes)]
        return self._xs

    @property
    def t(self):
        return reg_type(self.out)

    @property
    def fl(self) -> bool:
        return self.out.kind == "f"
