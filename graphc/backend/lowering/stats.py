"""Lowering entries: statistics beyond the basic reductions (prod, cumsum...).

See table.py for the entry each family needs.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..abi import I64
from ..llvmir import const, reg_type
from ..strided import cstrides, numel
from .table import Reduction, kernel, register

# prod accumulates like sum (f64 / i64 accumulator), combining by multiplication
register("prod", reduction=Reduction("mul"))


@kernel("cumsum", kind="scan")
@kernel("cumprod", kind="scan")
@kernel("linrec", kind="scan")
def scan_kernel(kb, n: int) -> None:
    """A running sum/product, or the linear recurrence s_k = b_k + a_k s_(k-1) (s_0 = b_0),
    along one axis of any strided inputs: an outer loop over the other dims, an inner
    sequential loop along the axis (from its end when ``reverse``), accumulating in the
    element type in numpy's order, so the result is numpy's bit for bit.  The output is the
    node's own contiguous buffer."""
    plan, g, b = kb.plan, kb.g, kb.b
    d = g.nx.nodes[n]
    v = plan.views[d["operands"][0]]
    is_rec = d["op"] == "linrec"
    vb = plan.views[d["operands"][1]] if is_rec else v
    dt = np.dtype(d["dtype"])
    shape = v.shape
    if not numel(shape):
        return  # an empty result: nothing to write
    zero = ir.Constant(I64, 0)
    if not shape:
        src = vb if is_rec else v  # a 0-d recurrence is its b
        kb.store(n, dt, zero, kb.load(src.buf, dt, ir.Constant(I64, src.offset)))
        return
    axis = d["attrs"]["dim"] % len(shape)
    reverse = bool(d["attrs"].get("reverse", False))
    is_sum = d["op"] == "cumsum"
    ost = cstrides(tuple(shape))
    outer_sizes = [s for i, s in enumerate(shape) if i != axis]
    in_outer = [st for i, st in enumerate(v.strides) if i != axis]
    b_outer = [st for i, st in enumerate(vb.strides) if i != axis]
    out_outer = [st for i, st in enumerate(ost) if i != axis]
    size = shape[axis]
    acc = kb.alloca(reg_type(dt), name="scan_acc")
    ident = (
        ir.Constant(reg_type(dt), 0 if is_sum else 1)
        if dt.kind == "b"
        else const(dt, 0 if is_sum else 1)
    )

    def combine(cur, x):
        if dt.kind == "b":  # numpy: a bool running sum is `or`, a product `and`
            return b.or_(cur, x) if is_sum else b.and_(cur, x)
        if dt.kind == "f":
            return b.fadd(cur, x) if is_sum else b.fmul(cur, x)
        return b.add(cur, x) if is_sum else b.mul(cur, x)

    def outer(idx):
        base_in = kb.offset(v.offset, in_outer, idx)
        base_b = kb.offset(vb.offset, b_outer, idx)
        base_out = kb.offset(0, out_outer, idx)
        b.store(ident, acc)

        def inner(kk):
            k = b.sub(ir.Constant(I64, size - 1), kk[0]) if reverse else kk[0]
            off = b.add(base_in, b.mul(k, ir.Constant(I64, v.strides[axis])))
            if is_rec:  # b + a * s_prev, and exactly b where the recurrence starts
                off_b = b.add(base_b, b.mul(k, ir.Constant(I64, vb.strides[axis])))
                xb = kb.load(vb.buf, dt, off_b)
                nxt = b.fadd(xb, b.fmul(kb.load(v.buf, dt, off), b.load(acc, typ=reg_type(dt))))
                first = b.icmp_signed("==", kk[0], zero)
                cur = b.select(first, xb, nxt)
            else:
                cur = combine(b.load(acc, typ=reg_type(dt)), kb.load(v.buf, dt, off))
            b.store(cur, acc)
            kb.store(n, dt, b.add(base_out, b.mul(k, ir.Constant(I64, ost[axis]))), cur)

        kb.loop([size], inner, name="k")

    kb.loop(outer_sizes, outer, name="o")
