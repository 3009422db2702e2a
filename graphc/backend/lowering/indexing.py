"""Indexing: gathers (getitem with index tensors, and its gradient getitem_grad) and
scatters (setitem); a basic getitem is a view (graphc/backend/lowering/views.py)."""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from ...errors import UnsupportedOpError
from ...ir import describe
from ..abi import I32, I64, RC_INDEX
from ..llvmir import const
from ..strided import Gather, View, cstrides, index_view, numel
from .table import kernel

from .views import getitem_view


def _index_value(kb, iv: View, idt: np.dtype, idx_part, length: int):
    """Load an index, wrap negatives, and flag out-of-range (sets rc = 3)."""
    b = kb.b
    if iv is None:
        j = idx_part
    else:
        j = kb.convert(
            kb.load(iv.buf, idt, kb.offset(iv.offset, iv.strides, idx_part)),
            idt,
            np.dtype(np.int64),
        )
    j = b.select(b.icmp_signed("<", j, ir.Constant(I64, 0)), b.add(j, ir.Constant(I64, length)), j)
    bad = b.or_(
        b.icmp_signed("<", j, ir.Constant(I64, 0)), b.icmp_signed(">=", j, ir.Constant(I64, length))
    )
    b.store(b.select(bad, ir.Constant(I32, RC_INDEX), b.load(kb.rc, typ=I32)), kb.rc)
    return b.select(bad, ir.Constant(I64, 0), j)  # never address out of bounds


def _gather(kb, n: int, src: View, first_index_operand: int) -> Gather:
    d = kb.g.nx.nodes[n]
    tens = d["operands"][first_index_operand:]
    for t in tens:
        if np.dtype(kb.g.nx.nodes[t]["dtype"]).kind == "b":
            raise UnsupportedOpError(
                f"{describe(kb.g, n)}: boolean index tensors are not "
                "supported by the native backend here; use "
                "graphc.where(mask, value, x)"
            )
    return Gather(src, d["attrs"]["index"], [tuple(kb.g.nx.nodes[t]["shape"]) for t in tens]), tens


def _gather_loop(kb, n, src: View, first: int, fn) -> tuple:
    """Loop over the advanced-indexing result shape; fn(idx, source offset)."""
    gat, tens = _gather(kb, n, src, first)
    views = [
        (kb.plan.views[tens[k]], np.dtype(kb.g.nx.nodes[tens[k]]["dtype"]))
        if k is not None
        else (None, None)
        for _, k, _ in gat.adv
    ]
    nb = len(gat.bshape)
    st = gat.view.strides

    def body(idx):
        bidx = idx[gat.bpos : gat.bpos + nb]
        basic = idx[: gat.bpos] + idx[gat.bpos + nb :]
        off = kb.offset(gat.view.offset, [st[d] for d in gat.basic_dims], basic)
        for (dim, k, value), (iv, idt) in zip(gat.adv, views):
            length = gat.view.shape[dim]
            if iv is None:
                j = _index_value(kb, None, None, ir.Constant(I64, value), length)
            else:
                bst = iv.broadcast_to(gat.bshape)
                j = _index_value(kb, View(iv.buf, iv.offset, bst, gat.bshape), idt, bidx, length)
            off = kb.b.add(off, kb.b.mul(j, ir.Constant(I64, st[dim])))
        fn(idx, off)

    kb.loop(list(gat.out_shape), body)
    return gat


@kernel("getitem", view=getitem_view, view_if=lambda d: len(d["operands"]) == 1)
def getitem_kernel(kb, n: int) -> None:
    d = kb.g.nx.nodes[n]
    x = d["operands"][0]
    dt = np.dtype(d["dtype"])
    oc = cstrides(tuple(d["shape"]))
    xv = kb.plan.views[x]
    _gather_loop(
        kb,
        n,
        xv,
        1,
        lambda idx, off: kb.store(n, dt, kb.offset(0, oc, idx), kb.load(xv.buf, dt, off)),
    )


@kernel("getitem_grad")
def getitem_grad_kernel(kb, n: int) -> None:
    d = kb.g.nx.nodes[n]
    gsrc = d["operands"][0]
    dt = np.dtype(d["dtype"])
    shape = tuple(d["shape"])
    kb.loop([numel(shape)], lambda ix: kb.store(n, dt, ix[0], const(dt, 0)), name="z", unroll=False)
    gv = kb.plan.views[gsrc]
    gdt = np.dtype(kb.g.nx.nodes[gsrc]["dtype"])
    own = View(n, 0, cstrides(shape), shape)
    index = d["attrs"]["index"]
    if len(d["operands"]) == 1:
        bv = index_view(own, index)
        gst = gv.broadcast_to(bv.shape)
        kb.loop(
            list(bv.shape),
            lambda idx: kb.store(
                n,
                dt,
                kb.offset(bv.offset, bv.strides, idx),
                kb.convert(kb.load(gv.buf, gdt, kb.offset(gv.offset, gst, idx)), gdt, dt),
            ),
            unroll=False,
        )
        return
    b = kb.b

    def acc(idx, off):  # repeated indices accumulate, as numpy.add.at
        gst = gv.broadcast_to(tuple(d_ for d_ in gv.shape))
        v = kb.convert(kb.load(gv.buf, gdt, kb.offset(gv.offset, gst, idx)), gdt, dt)
        cur = kb.load(n, dt, off)
        kb.store(
            n,
            dt,
            off,
            b.fadd(cur, v)
            if dt.kind == "f"
            else b.or_(cur, v)
            if dt.kind == "b"
            else b.add(cur, v),
        )

    _gather_loop(kb, n, own, 1, acc)


@kernel("setitem")
def setitem_kernel(kb, n: int) -> None:
    d = kb.g.nx.nodes[n]
    x, v = d["operands"][:2]
    dt = np.dtype(d["dtype"])
    shape = tuple(d["shape"])
    xv, vv = kb.plan.views[x], kb.plan.views[v]
    vdt = np.dtype(kb.g.nx.nodes[v]["dtype"])
    oc = cstrides(shape)
    index = d["attrs"]["index"]
    tens = d["operands"][2:]
    if (
        len(tens) == 1
        and index == (("t", 0),)
        and np.dtype(kb.g.nx.nodes[tens[0]]["dtype"]).kind == "b"
        and tuple(kb.g.nx.nodes[tens[0]]["shape"]) == shape
        and numel(vv.shape) == 1
    ):
        mv = kb.plan.views[tens[0]]  # x[mask] = scalar: a select per element
        b = kb.b
        kb.loop(
            list(shape),
            lambda idx: kb.store(
                n,
                dt,
                kb.offset(0, oc, idx),
                b.select(
                    kb.load(mv.buf, np.dtype(bool), kb.offset(mv.offset, mv.strides, idx)),
                    kb.convert(kb.load(vv.buf, vdt, ir.Constant(I64, vv.offset)), vdt, dt),
                    kb.load(xv.buf, dt, kb.offset(xv.offset, xv.strides, idx)),
                ),
            ),
            name="m",
        )
        return
    kb.loop(
        list(shape),
        lambda idx: kb.store(
            n, dt, kb.offset(0, oc, idx), kb.load(xv.buf, dt, kb.offset(xv.offset, xv.strides, idx))
        ),
        name="cp",
        unroll=False,
    )
    own = View(n, 0, oc, shape)
    if not tens:
        bv = index_view(own, index)
        vst = vv.broadcast_to(bv.shape)
        kb.loop(
            list(bv.shape),
            lambda idx: kb.store(
                n,
                dt,
                kb.offset(bv.offset, bv.strides, idx),
                kb.convert(kb.load(vv.buf, vdt, kb.offset(vv.offset, vst, idx)), vdt, dt),
            ),
            unroll=False,
        )
        return
    gat, _ = _gather(kb, n, own, 2)
    vst = vv.broadcast_to(gat.out_shape)
    _gather_loop(
        kb,
        n,
        own,
        2,
        lambda idx, off: kb.store(
            n, dt, off, kb.convert(kb.load(vv.buf, vdt, kb.offset(vv.offset, vst, idx)), vdt, dt)
        ),
    )
