"""Reductions: how a loop kernel accumulates each reduce op (a :class:`Reduction` entry),
and the kernel of argmax/argmin."""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from ...errors import UnsupportedOpError
from ...ir import describe
from ..abi import I1, I64
from ..llvmir import const, reg_type
from ..strided import cstrides, numel
from .table import LOWERINGS, Reduction, kernel, register

# max(dim)'s values are max's, min(dim)'s min's (only their VJPs differ)
for _op, _red in (
    ("sum", Reduction("add")),
    ("mean", Reduction("add", mean=True)),
    ("max", Reduction("max")),
    ("max_dim", Reduction("max")),
    ("min", Reduction("min")),
    ("min_dim", Reduction("min")),
    ("all", Reduction("and")),
    ("any", Reduction("or")),
):
    register(_op, reduction=_red)


def reduction(op: str) -> Reduction:
    red = LOWERINGS[op].reduction
    assert red is not None, f"{op} is not a reduction"
    return red


def accumulator(op: str, dt: np.dtype):
    """(accumulator dtype, identity constant) of reduce op ``op`` over elements of ``dt``."""
    c = reduction(op).combine
    if c in ("and", "or"):
        return np.dtype(bool), ir.Constant(I1, 1 if c == "and" else 0)
    if c in ("add", "mul"):
        acc = np.dtype(np.float64) if dt.kind == "f" else np.dtype(np.int64)
        return acc, const(acc, 0 if c == "add" else 1)
    if dt.kind == "f":
        return dt, const(dt, float("-inf") if c == "max" else float("inf"))
    info = np.iinfo(dt) if dt.kind in "iu" else None
    if info is None:
        return dt, const(dt, 0 if c == "max" else 1)
    return dt, const(dt, info.min if c == "max" else info.max)


@kernel("argmax", kind="argreduce")
@kernel("argmin", kind="argreduce")
def argreduce_kernel(kb, n: int) -> None:
    plan, g, b = kb.plan, kb.g, kb.b
    d = g.nx.nodes[n]
    src = d["operands"][0]
    v = plan.views[src]
    sdt = np.dtype(g.nx.nodes[src]["dtype"])
    axis = d["attrs"]["axis"]
    shape = v.shape
    if not shape:
        kb.store(n, np.dtype(np.int64), ir.Constant(I64, 0), ir.Constant(I64, 0))
        return
    if not numel(d["shape"]):
        return  # an empty result: nothing to write
    if shape[axis] == 0:
        raise UnsupportedOpError(
            f"internal error: {describe(g, n)}: {d['op']} over a zero-size dim reached the backend"
        )
    outer_sizes = [s for i, s in enumerate(shape) if i != axis]
    outer_st = [st for i, st in enumerate(v.strides) if i != axis]
    ost = cstrides(tuple(outer_sizes))
    best = kb.alloca(reg_type(sdt), name="best")
    besti = kb.alloca(I64, name="best_i")
    is_max = d["op"] == "argmax"
    fl = sdt.kind == "f"

    def outer(idx):
        base = kb.offset(v.offset, outer_st, idx)
        b.store(kb.load(v.buf, sdt, base), best)
        b.store(ir.Constant(I64, 0), besti)

        def inner(kk):
            k = b.add(kk[0], ir.Constant(I64, 1))
            off = b.add(base, b.mul(k, ir.Constant(I64, v.strides[axis])))
            x = kb.load(v.buf, sdt, off)
            cur = b.load(best, typ=reg_type(sdt))
            if fl:
                better = b.fcmp_ordered(">", x, cur) if is_max else b.fcmp_ordered("<", x, cur)
                better = b.and_(b.or_(better, kb.isnan(x)), b.fcmp_ordered("ord", cur, cur))
            elif sdt.kind == "b":
                better = b.icmp_unsigned(">" if is_max else "<", x, cur)
            else:
                better = b.icmp_signed(">" if is_max else "<", x, cur)
            b.store(b.select(better, x, cur), best)
            b.store(b.select(better, k, b.load(besti, typ=I64)), besti)

        kb.loop([shape[axis] - 1], inner, name="k")
        kb.store(n, np.dtype(np.int64), kb.offset(0, ost, idx), b.load(besti, typ=I64))

    kb.loop(outer_sizes, outer, name="o")
