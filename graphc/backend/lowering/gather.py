"""Lowering entries: gathering, scattering and sorting.

See table.py for the entry each family needs.

``gather``/``scatter``/``scatter_add`` read every index through its strides (any
layout), check it is in ``[0, size)`` and otherwise set the kernel's return code to
RC_INDEX (the caller raises IndexError) and use index 0 instead, so no load or store
ever leaves its buffer.  (The shape rule refuses a non-empty index into a size-0 dim,
where even index 0 would be outside.)  ``argsort`` is a heap sort of each row's indices
under a strict total order -- value (NaN the largest), then position -- so its result is
the unique stable order, exactly eager's numpy stable argsort.
"""

from __future__ import annotations

import itertools

import numpy as np
from llvmlite import ir

from ..abi import I32, I64, RC_INDEX
from ..strided import cstrides, numel
from .table import kernel

_I64 = np.dtype(np.int64)


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def _checked(kb, raw, idt: np.dtype, length: int):
    """An index loaded as ``idt``, as i64: out of ``[0, length)`` sets rc = RC_INDEX and
    gives 0 (never an address outside the buffer)."""
    b = kb.b
    j = kb.convert(raw, idt, _I64)
    bad = b.or_(b.icmp_signed("<", j, _c(0)), b.icmp_signed(">=", j, _c(length)))
    b.store(b.select(bad, ir.Constant(I32, RC_INDEX), b.load(kb.rc, typ=I32)), kb.rc)
    return b.select(bad, _c(0), j)


def _operand(kb, n: int, k: int):
    o = kb.g.nx.nodes[n]["operands"][k]
    v = kb.plan.views[o]
    return v, np.dtype(kb.g.nx.nodes[o]["dtype"])


def _pad(t: tuple, fill: int) -> tuple:
    """A 0-d shape/strides as one dim of size 1 (PyTorch treats a 0-d tensor as 1-d here)."""
    return tuple(t) if t else (fill,)


def _dim_offset(kb, base: int, strides: tuple, idx, dim: int, j):
    """``base + sum(idx_k * strides_k)`` with the index along ``dim`` replaced by ``j``."""
    b = kb.b
    off = kb.offset(base, [0 if k == dim else s for k, s in enumerate(strides)], idx)
    return b.add(off, b.mul(j, _c(strides[dim])))


@kernel("gather")
def gather_kernel(kb, n: int) -> None:
    d = kb.g.nx.nodes[n]
    dim = d["attrs"]["dim"]
    dt = np.dtype(d["dtype"])
    xv, _ = _operand(kb, n, 0)
    iv, idt = _operand(kb, n, 1)
    ishape = _pad(tuple(d["shape"]), 1)
    oc = cstrides(ishape)
    xst = _pad(xv.strides, 0)
    ist = _pad(iv.strides, 0)
    length = _pad(xv.shape, 1)[dim]

    def body(idx):
        j = _checked(kb, kb.load(iv.buf, idt, kb.offset(iv.offset, ist, idx)), idt, length)
        v = kb.load(xv.buf, dt, _dim_offset(kb, xv.offset, xst, idx, dim, j))
        kb.store(n, dt, kb.offset(0, oc, idx), v)

    kb.loop(list(ishape), body)


def _scatter_kernel(kb, n: int, add: bool) -> None:
    b = kb.b
    d = kb.g.nx.nodes[n]
    dim = d["attrs"]["dim"]
    dt = np.dtype(d["dtype"])
    xv, _ = _operand(kb, n, 0)
    iv, idt = _operand(kb, n, 1)
    sv, sdt = _operand(kb, n, 2)
    shape = _pad(tuple(d["shape"]), 1)
    oc = cstrides(shape)
    xst = _pad(xv.strides, 0)
    kb.loop(
        list(shape),
        lambda idx: kb.store(
            n, dt, kb.offset(0, oc, idx), kb.load(xv.buf, dt, kb.offset(xv.offset, xst, idx))
        ),
        name="cp",
    )
    ishape = _pad(iv.shape, 1)
    ist = _pad(iv.strides, 0)
    sst = _pad(sv.strides, 0)

    def body(idx):
        j = _checked(kb, kb.load(iv.buf, idt, kb.offset(iv.offset, ist, idx)), idt, shape[dim])
        off = _dim_offset(kb, 0, oc, idx, dim, j)
        v = kb.convert(kb.load(sv.buf, sdt, kb.offset(sv.offset, sst, idx)), sdt, dt)
        if add:  # in the index's C order, as numpy.add.at: the same rounding as eager
            cur = kb.load(n, dt, off)
            v = (
                b.fadd(cur, v)
                if dt.kind == "f"
                else b.or_(cur, v)
                if dt.kind == "b"
                else b.add(cur, v)
            )
        kb.store(n, dt, off, v)

    kb.loop(list(ishape), body, name="sc")


@kernel("scatter")
def scatter_kernel(kb, n: int) -> None:
    _scatter_kernel(kb, n, add=False)


@kernel("scatter_add")
def scatter_add_kernel(kb, n: int) -> None:
    _scatter_kernel(kb, n, add=True)


def _before(kb, sdt: np.dtype, descending: bool, va, vb, a, b_):
    """Whether element ``a`` (value ``va``) sorts before ``b_``: by value (NaN the largest),
    ties by position -- a strict total order, so any correct sort gives the stable order."""
    b = kb.b
    pos = b.icmp_signed("<", a, b_)
    if sdt.kind == "f":
        an, bn = kb.isnan(va), kb.isnan(vb)
        if descending:
            lt = b.and_(b.not_(bn), b.or_(an, b.fcmp_ordered(">", va, vb)))
        else:
            lt = b.and_(b.not_(an), b.or_(bn, b.fcmp_ordered("<", va, vb)))
        eq = b.or_(b.and_(an, bn), b.fcmp_ordered("==", va, vb))
    else:
        cmp = b.icmp_unsigned if sdt.kind == "b" else b.icmp_signed
        lt = cmp(">" if descending else "<", va, vb)
        eq = cmp("==", va, vb)
    return b.or_(lt, b.and_(eq, pos))


@kernel("argsort")
def argsort_kernel(kb, n: int) -> None:
    b = kb.b
    d = kb.g.nx.nodes[n]
    dim = d["attrs"]["dim"]
    desc = bool(d["attrs"]["descending"])
    xv, sdt = _operand(kb, n, 0)
    shape = xv.shape
    if not shape:
        kb.store(n, _I64, _c(0), _c(0))
        return
    if not numel(shape):
        return
    length = shape[dim]
    oc = cstrides(shape)
    outer_sizes = [s for k, s in enumerate(shape) if k != dim]
    outer_xst = [s for k, s in enumerate(xv.strides) if k != dim]
    outer_ost = [s for k, s in enumerate(oc) if k != dim]
    xsd, osd = xv.strides[dim], oc[dim]
    root_slot = kb.alloca(I64, name="root")
    names = itertools.count()  # block names, the same in every compilation

    def outer(idx):
        xbase = kb.offset(xv.offset, outer_xst, idx)
        obase = kb.offset(0, outer_ost, idx)

        def slot(k):
            return b.add(obase, b.mul(k, _c(osd)))

        def get(k):
            return kb.load(n, _I64, slot(k))

        def put(k, v):
            kb.store(n, _I64, slot(k), v)

        def before(p, q):
            vp = kb.load(xv.buf, sdt, b.add(xbase, b.mul(p, _c(xsd))))
            vq = kb.load(xv.buf, sdt, b.add(xbase, b.mul(q, _c(xsd))))
            return _before(kb, sdt, desc, vp, vq, p, q)

        def sift_down(root, end):
            """Restore the heap below ``root`` among the first ``end`` entries."""
            u = next(names)
            cond = kb.fn.append_basic_block(f"sift{u}_cond")
            body = kb.fn.append_basic_block(f"sift{u}_body")
            swap = kb.fn.append_basic_block(f"sift{u}_swap")
            done = kb.fn.append_basic_block(f"sift{u}_done")
            b.store(root, root_slot)
            b.branch(cond)
            b.position_at_end(cond)
            r = b.load(root_slot, typ=I64)
            child = b.add(b.mul(r, _c(2)), _c(1))
            b.cbranch(b.icmp_signed("<", child, end), body, done)
            b.position_at_end(body)
            c1 = b.add(child, _c(1))
            has2 = b.icmp_signed("<", c1, end)
            c1 = b.select(has2, c1, child)  # never read past the heap
            ac, ac1 = get(child), get(c1)
            pick = b.and_(has2, before(ac, ac1))
            ch = b.select(pick, c1, child)
            ach = b.select(pick, ac1, ac)
            ar = get(r)
            b.cbranch(before(ar, ach), swap, done)
            b.position_at_end(swap)
            put(r, ach)
            put(ch, ar)
            b.store(ch, root_slot)
            b.branch(cond)
            b.position_at_end(done)

        kb.loop([length], lambda k: put(k[0], k[0]), name="init")
        if length < 2:
            return
        half = length // 2
        kb.loop([half], lambda k: sift_down(b.sub(_c(half - 1), k[0]), _c(length)), name="heap")

        def extract(k):
            end = b.sub(_c(length - 1), k[0])
            top, last = get(_c(0)), get(end)
            put(_c(0), last)
            put(end, top)
            sift_down(_c(0), end)

        kb.loop([length - 1], extract, name="pop")

    kb.loop(outer_sizes, outer, name="o")
