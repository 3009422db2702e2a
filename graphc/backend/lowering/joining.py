"""Lowering entries: joining and splitting (cat; stack, split, flip, roll... are composites
of views, copies and cat).

See table.py for the entry each family needs.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..abi import I64, PTR
from ..llvmir import mem_type
from ..strided import cstrides
from .table import kernel

# A cat of at most this many (non-skipped) operands is one copy loop nest per operand,
# with its sizes and strides as constants.  Above it, the operands of each dtype are
# copied by one loop over constant tables (per operand: its offset, its slice of the
# result, its size along the dim, its strides): LLVM's O3 pipeline is superlinear in a
# function's size, and 1,100 unrolled copy loops took ~40 s to optimize (docs/backend.md,
# "Compile time of the LLVM pipeline").  ``CAT_TABLE_MIN = None`` keeps the unrolled form
# for every cat (the code before, for measurements).
CAT_TABLE_MIN: int | None = 16


@kernel("cat")
def cat_kernel(kb, n: int) -> None:
    """Copy each operand (any strides) into its slice of the C-ordered result, converting
    it to the result's dtype.  A 0-d operand is one element; a skipped (0,) operand
    (PyTorch's legacy rule) has nothing to copy.  Many operands: :func:`_cat_by_table`."""
    d = kb.g.nx.nodes[n]
    dt = np.dtype(d["dtype"])
    shape = tuple(d["shape"])
    dim = d["attrs"]["dim"]
    oc = cstrides(shape)
    start = 0
    parts = []  # (operand view, its dtype, its shape (0-d: (1,)), its strides, result offset)
    for x in d["operands"]:
        xs = tuple(kb.g.nx.nodes[x]["shape"])
        if xs == (0,):  # eager.ops.joining.cat_skipped
            continue
        xv = kb.plan.views[x]
        xdt = np.dtype(kb.g.nx.nodes[x]["dtype"])
        eff = xs if xs else (1,)
        st = tuple(xv.strides) if xs else (0,)
        parts.append((xv, xdt, eff, st, start * oc[dim]))
        start += eff[dim]
    if CAT_TABLE_MIN is not None and len(parts) > CAT_TABLE_MIN:
        groups: dict = {}
        for p in parts:
            groups.setdefault(p[1], []).append(p)
        for g, (xdt, ps) in enumerate(sorted(groups.items(), key=lambda kv: kv[0].str)):
            _cat_by_table(kb, n, dt, shape, dim, oc, xdt, ps, f"cat_t{g}")
        return
    for k, (xv, xdt, eff, st, base) in enumerate(parts):

        def body(idx, xv=xv, xdt=xdt, st=st, base=base):
            v = kb.convert(kb.load(xv.buf, xdt, kb.offset(xv.offset, st, idx)), xdt, dt)
            kb.store(n, dt, kb.offset(base, oc, idx), v)

        kb.loop(list(eff), body, name=f"cat{k}", unroll=False)


def _cat_by_table(kb, n, dt, shape, dim, oc, xdt, parts, name: str) -> None:
    """Copy ``parts`` (all of dtype ``xdt``) into the result ``n`` by one runtime loop
    over the operands: their pointers go into a stack array, their offsets, result
    slices, sizes along ``dim`` and strides into a constant ``i64`` table of rows
    ``[offset, result offset, size along dim, stride 0 .. stride r-1]`` (a size or
    stride that every operand shares is a constant in the code instead).  The operand
    loop is marked not to be unrolled (its trip count and table are constants: fully
    unrolled, it would be the straight-line code this replaces)."""
    b = kb.b
    r = len(shape)
    width = 3 + r
    rows = []
    for xv, _, eff, st, base in parts:
        assert len(eff) == r == len(st), (eff, shape)
        rows.extend([xv.offset, base, eff[dim], *st])
    m = len(parts)
    table = kb.low._table(f"{kb.fn.name}_{name}", rows)
    arr = kb.alloca(ir.ArrayType(PTR, m), name=f"{name}_ptrs")
    for k, (xv, *_) in enumerate(parts):
        b.store(kb.ptrs[xv.buf], b.gep(arr, [ir.Constant(I64, 0), ir.Constant(I64, k)]))

    def at(row, j):
        p = b.gep(table, [ir.Constant(I64, 0), b.add(row, ir.Constant(I64, j))])
        return b.load(p, typ=I64)

    def col(row, j):
        """Column ``j`` of this operand's row: a constant when every operand has the same
        value there (the strides of same-layout operands: LLVM then vectorizes as in the
        unrolled form), else loaded from the table."""
        vals = set(rows[j::width])
        if len(vals) == 1:
            return ir.Constant(I64, vals.pop())
        return at(row, j)

    def operand(kv):
        k = kv[0]
        src = b.load(b.gep(arr, [ir.Constant(I64, 0), k]), typ=PTR)
        row = b.mul(k, ir.Constant(I64, width))
        off, base, size = at(row, 0), at(row, 1), col(row, 2)
        st = [col(row, 3 + j) for j in range(r)]
        sizes = [size if j == dim else ir.Constant(I64, s) for j, s in enumerate(shape)]

        def body(idx):
            so, do = off, base
            for j, i in enumerate(idx):
                so = b.add(so, b.mul(i, st[j], flags=["nsw"]), flags=["nsw"])
                if oc[j]:
                    do = b.add(do, b.mul(i, ir.Constant(I64, oc[j]), flags=["nsw"]))
            v = b.load(b.gep(src, [so], source_etype=mem_type(xdt)), typ=mem_type(xdt))
            if xdt.kind == "b":
                v = b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
            v = kb.convert(v, xdt, dt)
            kb.store(n, dt, do, v)

        _loops(kb, sizes, body, f"{name}_i")

    _loops(kb, [ir.Constant(I64, m)], operand, f"{name}_k")


def _loops(kb, sizes: list, body, name: str) -> None:
    """Nested counted loops over runtime ``sizes`` (i64 values), each marked
    ``llvm.loop.unroll.disable``; ``body(idx_values)`` emits the innermost body."""
    b = kb.b
    idx, exits = [], []
    for d, size in enumerate(sizes):
        slot = kb.alloca(I64, name=f"{name}{d}_slot")
        b.store(ir.Constant(I64, 0), slot)
        cond = kb.fn.append_basic_block(f"{name}{d}_cond")
        body_bb = kb.fn.append_basic_block(f"{name}{d}_body")
        done = kb.fn.append_basic_block(f"{name}{d}_done")
        b.branch(cond)
        b.position_at_end(cond)
        i = b.load(slot, typ=I64, name=f"{name}{d}")
        b.cbranch(b.icmp_signed("<", i, size), body_bb, done)
        b.position_at_end(body_bb)
        idx.append(i)
        exits.append((slot, cond, done, i))
    body(idx)
    for slot, cond, done, i in reversed(exits):
        b.store(b.add(i, ir.Constant(I64, 1), flags=["nsw", "nuw"]), slot)
        b.branch(cond).set_metadata("llvm.loop", kb.no_unroll_loop_id())
        b.position_at_end(done)
