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
def scan_kernel(kb, n: int) -> None:
    """A running sum/product along one axis of any strided input: an outer loop over the
    other dims, an inner sequential loop along the axis (from its end when ``reverse``),
    accumulating in the element type in numpy's order, so the result is numpy's bit for
    bit.  The output is the node's own contiguous buffer."""
    plan, g, b = kb.plan, kb.g, kb.b
    d = g.nx.nodes[n]
    v = plan.views[d["operands"][0]]
    dt = np.dtype(d["dtype"])
    shape = v.shape
    if not numel(shape):
        return  # an empty result: nothing to write
    zero = ir.Constant(I64, 0)
    if not shape:
        kb.store(n, dt, zero, kb.load(v.buf, dt, ir.Constant(I64, v.offset)))
        return
    axis = d["attrs"]["dim"] % len(shape)
    reverse = bool(d["attrs"].get("reverse", False))
    is_sum = d["op"] == "cumsum"
    ost = cstrides(tuple(shape))
    outer_sizes = [s for i, s in enumerate(shape) if i != axis]
    in_outer = [st for i, st in enumerate(v.strides) if i != axis]
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
        base_out = kb.offset(0, out_outer, idx)
        b.store(ident, acc)

        def inner(kk):
            k = b.sub(ir.Constant(I64, size - 1), kk[0]) if reverse else kk[0]
            off = b.add(base_in, b.mul(k, ir.Constant(I64, v.strides[axis])))
            cur = combine(b.load(acc, typ=reg_type(dt)), kb.load(v.buf, dt, off))
            b.store(cur, acc)
            kb.store(n, dt, b.add(base_out, b.mul(k, ir.Constant(I64, ost[axis]))), cur)

        kb.loop([size], inner, name="k")

    kb.loop(outer_sizes, outer, name="o")
