"""Lowering entries: convolution and pooling.

See table.py for the entry each family needs.

The convolutions (conv2d and its adjoints conv2d_input_grad / conv2d_weight_grad) run as
im2col into a scratch buffer plus one BLAS gemm per (batch item, group).  The schedule
has no scratch mechanism of its own, so each kernel call mallocs its scratch (its size is
known at compile time, checked against what an array can address) and frees it at the
end; when BLAS is missing, a dimension exceeds cblas's 32-bit ints, or malloc fails, the
kernel runs plain loops instead (same result up to summation order).  Operands are read
through their views, so any layout works.  The max-pooling kernels are plain loops that
find each window's argmax with PyTorch's rule (first maximum in row-major window order,
the last NaN).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from eager.interop import MAX_BYTES

from .. import blas
from ..abi import I1, I32, I64, PTR
from ..llvmir import const, reg_type
from ..strided import cstrides, numel
from .table import kernel

_I32_MAX = int(np.iinfo(np.int32).max)
# the kernels that may call BLAS's gemm (graphc.runtime.native registers its symbols)
CALLS_BLAS = frozenset({"conv2d", "conv2d_input_grad", "conv2d_weight_grad"})


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, int(v))


class _Conv:
    """The sizes of a convolution node and the views of its operands."""

    def __init__(self, kb, n: int, op: str) -> None:
        g = kb.g
        d = g.nx.nodes[n]
        a = d["attrs"]
        self.dt = np.dtype(d["dtype"])
        self.shape = tuple(d["shape"])
        o0, o1 = d["operands"]
        v0, v1 = kb.plan.views[o0], kb.plan.views[o1]
        self.stride, self.padding, self.dilation = a["stride"], a["padding"], a["dilation"]
        self.G = int(a["groups"])
        if op == "conv2d":  # (x, w) -> y
            self.xv, self.wv, self.gv = v0, v1, None
            self.N, self.C, self.H, self.W = v0.shape
            self.O, self.Cg, self.kh, self.kw = v1.shape
            self.Ho, self.Wo = self.shape[2:]
        elif op == "conv2d_input_grad":  # (g, w) -> x
            self.xv, self.wv, self.gv = None, v1, v0
            self.N, self.C, self.H, self.W = self.shape
            self.O, self.Cg, self.kh, self.kw = v1.shape
            self.Ho, self.Wo = v0.shape[2:]
        else:  # conv2d_weight_grad: (x, g) -> w
            self.xv, self.wv, self.gv = v0, None, v1
            self.N, self.C, self.H, self.W = v0.shape
            self.O, self.Cg, self.kh, self.kw = self.shape
            self.Ho, self.Wo = v1.shape[2:]
        self.Og = self.O // self.G
        self.K = self.Cg * self.kh * self.kw
        self.P = self.Ho * self.Wo

    def blas_ok(self) -> bool:
        return (
            blas.available()
            and max(self.Og, self.K, self.P, 1) <= _I32_MAX
            and self.dt in (np.dtype(np.float32), np.dtype(np.float64))
        )

    def in_pos(self, kb, i, a_, j, b_):
        """(ok, ih, iw): the input row/column read by output (i, j) at kernel tap (a_, b_),
        clamped to 0 where it falls in the padding (ok false)."""
        b = kb.b
        sh, sw = self.stride
        dh, dw = self.dilation
        ih = b.add(b.sub(b.mul(i, _c(sh)), _c(self.padding[0])), b.mul(a_, _c(dh)))
        iw = b.add(b.sub(b.mul(j, _c(sw)), _c(self.padding[2])), b.mul(b_, _c(dw)))
        ok = b.and_(
            b.and_(b.icmp_signed(">=", ih, _c(0)), b.icmp_signed("<", ih, _c(self.H))),
            b.and_(b.icmp_signed(">=", iw, _c(0)), b.icmp_signed("<", iw, _c(self.W))),
        )
        return ok, b.select(ok, ih, _c(0)), b.select(ok, iw, _c(0))


def _zero(kb, n: int, dt: np.dtype, size: int) -> None:
    kb.loop([size], lambda ix: kb.store(n, dt, ix[0], const(dt, 0)), name="z")


def _scratch_bytes(cv: _Conv, elems: int):
    nbytes = elems * cv.dt.itemsize
    return nbytes if 0 < nbytes <= MAX_BYTES else None


def _with_scratch(kb, n: int, cv: _Conv, elems: int, fast, slow) -> None:
    """Run ``fast(key)`` with a malloc'ed scratch of ``elems`` elements registered as buffer
    ``key``, or ``slow()`` when BLAS can't run it or the allocation fails."""
    nbytes = _scratch_bytes(cv, elems)
    if not cv.blas_ok() or nbytes is None:
        slow()
        return
    b = kb.b
    p = b.call(kb.low._get_malloc(), [_c(nbytes)], name=f"scratch_n{n}")
    key = ("scratch", n)
    kb.ptrs[key] = p
    with b.if_else(b.icmp_unsigned("==", p, ir.Constant(PTR, None))) as (failed, got):
        with failed:
            slow()
        with got:
            fast(key)
            b.call(kb.low._get_free(), [p])


def _gemm(kb, cv: _Conv, ta, tb, M, N, K, pa, lda, pb, ldb, beta, pc, ldc) -> None:
    gemm = blas.declare_gemm(kb.module, cv.dt)
    ft = reg_type(cv.dt)
    c32 = lambda v: ir.Constant(I32, int(v))  # noqa: E731
    kb.b.call(
        gemm,
        [
            c32(blas.CBLAS_ROW_MAJOR),
            c32(ta),
            c32(tb),
            c32(M),
            c32(N),
            c32(K),
            ir.Constant(ft, 1.0),
            pa,
            c32(max(lda, 1)),
            pb,
            c32(max(ldb, 1)),
            ir.Constant(ft, beta),
            pc,
            c32(max(ldc, 1)),
        ],
    )


def _im2col(kb, cv: _Conv, key, nn, grp) -> None:
    """scratch[((c*kh + a)*kw + b)*P + i*Wo + j] = x[nn, grp*Cg + c, ih, iw] (0 in padding)."""
    b, dt, xv = kb.b, cv.dt, cv.xv

    def body(ix):
        c, a_, b_, i, j = ix
        ok, ih, iw = cv.in_pos(kb, i, a_, j, b_)
        ch = b.add(b.mul(grp, _c(cv.Cg)), c)
        v = kb.load(xv.buf, dt, kb.offset(xv.offset, xv.strides, [nn, ch, ih, iw]))
        dst = kb.offset(0, (cv.kh * cv.kw * cv.P, cv.kw * cv.P, cv.P, cv.Wo, 1), ix)
        kb.store(key, dt, dst, b.select(ok, v, const(dt, 0)))

    kb.loop([cv.Cg, cv.kh, cv.kw, cv.Ho, cv.Wo], body, name="col")


def _copy_weights(kb, cv: _Conv, key, base: int) -> None:
    """scratch[base + o*K + (c*kh + a)*kw + b] = w[o, c, a, b] (the weights as O x K)."""
    wv = cv.wv
    kb.loop(
        [cv.O, cv.Cg, cv.kh, cv.kw],
        lambda ix: kb.store(
            key,
            cv.dt,
            kb.offset(base, cstrides(wv.shape), ix),
            kb.load(wv.buf, cv.dt, kb.offset(wv.offset, wv.strides, ix)),
        ),
        name="wcopy",
    )


def _copy_grad(kb, cv: _Conv, key, base: int, nn, grp) -> None:
    """scratch[base + o*P + i*Wo + j] = g[nn, grp*Og + o, i, j] (one group's gradient)."""
    b, gv = kb.b, cv.gv

    def body(ix):
        o, i, j = ix
        src = kb.offset(gv.offset, gv.strides, [nn, b.add(b.mul(grp, _c(cv.Og)), o), i, j])
        kb.store(key, cv.dt, kb.offset(base, (cv.P, cv.Wo, 1), ix), kb.load(gv.buf, cv.dt, src))

    kb.loop([cv.Og, cv.Ho, cv.Wo], body, name="gcopy")


def _sp(kb, key, dt, off):
    """Pointer to element ``off`` (an int or value) of buffer ``key``."""
    return kb.ptr(key, dt, off if isinstance(off, ir.Value) else _c(off))


# --- conv2d -------------------------------------------------------------------------------


@kernel("conv2d")
def conv2d_kernel(kb, n: int) -> None:
    cv = _Conv(kb, n, "conv2d")
    if numel(cv.shape) == 0:
        return
    b, dt = kb.b, cv.dt
    KP = cv.K * cv.P

    def fast(key):
        _copy_weights(kb, cv, key, KP)

        def per(ix):
            nn, grp = ix
            _im2col(kb, cv, key, nn, grp)
            wk = b.add(_c(KP), b.mul(grp, _c(cv.Og * cv.K)))
            out = b.add(b.mul(nn, _c(cv.O * cv.P)), b.mul(grp, _c(cv.Og * cv.P)))
            _gemm(
                kb,
                cv,
                blas.CBLAS_NO_TRANS,
                blas.CBLAS_NO_TRANS,
                cv.Og,
                cv.P,
                cv.K,
                _sp(kb, key, dt, wk),
                cv.K,
                _sp(kb, key, dt, 0),
                cv.P,
                0.0,
                _sp(kb, n, dt, out),
                cv.P,
            )

        kb.loop([cv.N, cv.G], per, name="ng")

    def slow():
        acc = kb.alloca(reg_type(dt), name="acc")
        oc = cstrides(cv.shape)
        xv, wv = cv.xv, cv.wv

        def outer(ix):
            nn, o, i, j = ix
            b.store(const(dt, 0), acc)
            grp = b.sdiv(o, _c(cv.Og))

            def inner(jx):
                c, a_, b_ = jx
                ok, ih, iw = cv.in_pos(kb, i, a_, j, b_)
                ch = b.add(b.mul(grp, _c(cv.Cg)), c)
                xval = kb.load(xv.buf, dt, kb.offset(xv.offset, xv.strides, [nn, ch, ih, iw]))
                xval = b.select(ok, xval, const(dt, 0))
                wval = kb.load(wv.buf, dt, kb.offset(wv.offset, wv.strides, [o, c, a_, b_]))
                b.store(b.fadd(b.load(acc, typ=reg_type(dt)), b.fmul(xval, wval)), acc)

            kb.loop([cv.Cg, cv.kh, cv.kw], inner, name="k")
            kb.store(n, dt, kb.offset(0, oc, ix), b.load(acc, typ=reg_type(dt)))

        kb.loop([cv.N, cv.O, cv.Ho, cv.Wo], outer, name="o")

    _with_scratch(kb, n, cv, KP + cv.O * cv.K, fast, slow)


# --- conv2d_input_grad: cols = W_g^T @ G_g, then col2im ---------------------------------


@kernel("conv2d_input_grad")
def conv2d_input_grad_kernel(kb, n: int) -> None:
    cv = _Conv(kb, n, "conv2d_input_grad")
    size = numel(cv.shape)
    if size == 0:
        return
    b, dt = kb.b, cv.dt
    _zero(kb, n, dt, size)
    if cv.N == 0 or cv.P == 0:
        return
    KP, OK = cv.K * cv.P, cv.O * cv.K
    oc = cstrides(cv.shape)

    def col2im(nn, grp, value):
        """out[nn, grp*Cg + c, ih, iw] += value(c, a, b, i, j) where (ih, iw) is inside."""

        def body(ix):
            c, a_, b_, i, j = ix
            ok, ih, iw = cv.in_pos(kb, i, a_, j, b_)
            with b.if_then(ok):
                ch = b.add(b.mul(grp, _c(cv.Cg)), c)
                off = kb.offset(0, oc, [nn, ch, ih, iw])
                kb.store(n, dt, off, b.fadd(kb.load(n, dt, off), value(ix)))

        kb.loop([cv.Cg, cv.kh, cv.kw, cv.Ho, cv.Wo], body, name="c2i")

    def fast(key):
        _copy_weights(kb, cv, key, KP)

        def per(ix):
            nn, grp = ix
            _copy_grad(kb, cv, key, KP + OK, nn, grp)
            wk = b.add(_c(KP), b.mul(grp, _c(cv.Og * cv.K)))
            _gemm(
                kb,
                cv,
                blas.CBLAS_TRANS,
                blas.CBLAS_NO_TRANS,
                cv.K,
                cv.P,
                cv.Og,
                _sp(kb, key, dt, wk),
                cv.K,
                _sp(kb, key, dt, KP + OK),
                cv.P,
                0.0,
                _sp(kb, key, dt, 0),
                cv.P,
            )
            col = cstrides((cv.Cg, cv.kh, cv.kw, cv.Ho, cv.Wo))
            col2im(nn, grp, lambda jx: kb.load(key, dt, kb.offset(0, col, jx)))

        kb.loop([cv.N, cv.G], per, name="ng")

    def slow():
        acc = kb.alloca(reg_type(dt), name="acc")
        gv, wv = cv.gv, cv.wv

        def per(ix):
            nn, grp = ix

            def value(jx):
                c, a_, b_, i, j = jx
                b.store(const(dt, 0), acc)

                def inner(ox):
                    o = b.add(b.mul(grp, _c(cv.Og)), ox[0])
                    gval = kb.load(gv.buf, dt, kb.offset(gv.offset, gv.strides, [nn, o, i, j]))
                    wval = kb.load(wv.buf, dt, kb.offset(wv.offset, wv.strides, [o, c, a_, b_]))
                    b.store(b.fadd(b.load(acc, typ=reg_type(dt)), b.fmul(gval, wval)), acc)

                kb.loop([cv.Og], inner, name="o")
                return b.load(acc, typ=reg_type(dt))

            col2im(nn, grp, value)

        kb.loop([cv.N, cv.G], per, name="ng")

    _with_scratch(kb, n, cv, KP + OK + cv.Og * cv.P, fast, slow)


# --- conv2d_weight_grad: dW_g += G_g @ cols^T per batch item ----------------------------


@kernel("conv2d_weight_grad")
def conv2d_weight_grad_kernel(kb, n: int) -> None:
    cv = _Conv(kb, n, "conv2d_weight_grad")
    size = numel(cv.shape)
    if size == 0:
        return
    b, dt = kb.b, cv.dt
    _zero(kb, n, dt, size)
    if cv.N == 0 or cv.P == 0:
        return
    KP = cv.K * cv.P

    def fast(key):
        def per(ix):
            nn, grp = ix
            _im2col(kb, cv, key, nn, grp)
            _copy_grad(kb, cv, key, KP, nn, grp)
            out = b.mul(grp, _c(cv.Og * cv.K))
            _gemm(
                kb,
                cv,
                blas.CBLAS_NO_TRANS,
                blas.CBLAS_TRANS,
                cv.Og,
                cv.K,
                cv.P,
                _sp(kb, key, dt, KP),
                cv.P,
                _sp(kb, key, dt, 0),
                cv.P,
                1.0,
                _sp(kb, n, dt, out),
                cv.K,
            )

        kb.loop([cv.N, cv.G], per, name="ng")

    def slow():
        acc = kb.alloca(reg_type(dt), name="acc")
        oc = cstrides(cv.shape)
        xv, gv = cv.xv, cv.gv

        def outer(ix):
            o, c, a_, b_ = ix
            b.store(const(dt, 0), acc)
            grp = b.sdiv(o, _c(cv.Og))
            ch = b.add(b.mul(grp, _c(cv.Cg)), c)

            def inner(jx):
                nn, i, j = jx
                ok, ih, iw = cv.in_pos(kb, i, a_, j, b_)
                xval = kb.load(xv.buf, dt, kb.offset(xv.offset, xv.strides, [nn, ch, ih, iw]))
                xval = b.select(ok, xval, const(dt, 0))
                gval = kb.load(gv.buf, dt, kb.offset(gv.offset, gv.strides, [nn, o, i, j]))
                b.store(b.fadd(b.load(acc, typ=reg_type(dt)), b.fmul(xval, gval)), acc)

            kb.loop([cv.N, cv.Ho, cv.Wo], inner, name="k")
            kb.store(n, dt, kb.offset(0, oc, ix), b.load(acc, typ=reg_type(dt)))

        kb.loop(list(cv.shape), outer, name="w")

    _with_scratch(kb, n, cv, KP + cv.Og * cv.P, fast, slow)


# --- max pooling -----------------------------------------------------------------------


def _pool_loop(kb, n: int, body, value_only=None) -> None:
    """For each output position (nn, c, i, j) of max pooling node ``n`` on operand 0, find
    PyTorch's argmax (ih, iw) and value; ``body(ix, ih, iw, value)`` uses them."""
    d = kb.g.nx.nodes[n]
    a = d["attrs"]
    x = d["operands"][0]
    xv = kb.plan.views[x]
    dt = np.dtype(kb.g.nx.nodes[x]["dtype"])
    N, C, H, W = xv.shape
    kh, kw = a["kernel_size"]
    sh, sw = a["stride"]
    ph, pw = a["padding"]
    dh, dw = a["dilation"]
    # the output space: max_pool2d_grad's is its gradient operand's, the others' their own
    pooled = kb.g.nx.nodes[d["operands"][1]] if d["op"] == "max_pool2d_grad" else d
    Ho, Wo = tuple(pooled["shape"])[2:]
    b = kb.b
    t = reg_type(dt)
    geom = (kh, kw, sh, sw, dh, dw)
    if value_only is not None and _unrolled_ok(H, W, Ho, Wo, geom, (ph, pw)):

        def unrolled(ix):  # every window in bounds: its kh*kw loads unrolled, in registers
            nn, c, i, j = ix
            m, _ = _window_max(kb, xv, dt, nn, c, i, j, geom)
            value_only(ix, m)

        kb.loop([N, C, Ho, Wo], unrolled, name="pool", vectorize=True)
        return
    best = kb.alloca(t, name="best")
    bh = kb.alloca(I64, name="best_h")
    bw = kb.alloca(I64, name="best_w")
    have = kb.alloca(I1, name="have")

    def outer(ix):
        nn, c, i, j = ix
        b.store(ir.Constant(I1, 0), have)
        b.store(const(dt, -np.inf), best)
        b.store(_c(0), bh)
        b.store(_c(0), bw)

        def inner(jx):
            a_, b_ = jx
            ih = b.add(b.sub(b.mul(i, _c(sh)), _c(ph)), b.mul(a_, _c(dh)))
            iw = b.add(b.sub(b.mul(j, _c(sw)), _c(pw)), b.mul(b_, _c(dw)))
            ok = b.and_(
                b.and_(b.icmp_signed(">=", ih, _c(0)), b.icmp_signed("<", ih, _c(H))),
                b.and_(b.icmp_signed(">=", iw, _c(0)), b.icmp_signed("<", iw, _c(W))),
            )
            sih, siw = b.select(ok, ih, _c(0)), b.select(ok, iw, _c(0))
            v = kb.load(xv.buf, dt, kb.offset(xv.offset, xv.strides, [nn, c, sih, siw]))
            cur = b.load(best, typ=t)
            better = b.or_(
                b.xor(b.load(have, typ=I1), ir.Constant(I1, 1)),
                b.or_(b.fcmp_ordered(">", v, cur), kb.isnan(v)),
            )
            upd = b.and_(ok, better)
            b.store(b.select(upd, v, cur), best)
            b.store(b.select(upd, sih, b.load(bh, typ=I64)), bh)
            b.store(b.select(upd, siw, b.load(bw, typ=I64)), bw)
            b.store(b.or_(b.load(have, typ=I1), ok), have)

        kb.loop([kh, kw], inner, name="win")
        body(ix, b.load(bh, typ=I64), b.load(bw, typ=I64), b.load(best, typ=t))

    kb.loop([N, C, Ho, Wo], outer, name="pool")


def _inside(size: int, out: int, k: int, s: int, p: int, d: int) -> bool:
    """No padding and every window of the ``out`` positions inside [0, size)."""
    return p == 0 and (out == 0 or (out - 1) * s + (k - 1) * d < size)


def _unrolled_ok(H: int, W: int, Ho: int, Wo: int, geom: tuple, pad: tuple) -> bool:
    """Every window in bounds (no padding, no ceil-mode window past the edge) and small
    enough to unroll: the pooling kernels then scan each window in registers."""
    kh, kw, sh, sw, dh, dw = geom
    return (
        _inside(H, Ho, kh, sh, pad[0], dh) and _inside(W, Wo, kw, sw, pad[1], dw) and kh * kw <= 16
    )


def _window_max(kb, xv, dt, nn, c, i, j, geom) -> tuple:
    """The maximum of an in-bounds window as PyTorch's max pooling takes it (row-major
    scan; a later element wins when greater or NaN), unrolled, and the window's
    [(ih, iw, value)] in scan order.

    Each step is two selects on one comparison each (``v > m``, then ``isnan(v)``), which
    x86 code does with max/blend instructions: a select on the compound condition (or an
    argmax carried along) becomes branches that mispredict on every other window of real
    data (measured 5-8x slower on W7's pooling)."""
    kh, kw, sh, sw, dh, dw = geom
    b = kb.b
    i0, j0 = b.mul(i, _c(sh)), b.mul(j, _c(sw))
    m = None
    elems = []
    for a_ in range(kh):
        ih = b.add(i0, _c(a_ * dh))
        for b_ in range(kw):
            iw = b.add(j0, _c(b_ * dw))
            v = kb.load(xv.buf, dt, kb.offset(xv.offset, xv.strides, [nn, c, ih, iw]))
            elems.append((ih, iw, v))
            if m is None:
                m = v
                continue
            m = b.select(b.fcmp_ordered(">", v, m), v, m)
            m = b.select(kb.isnan(v), v, m)
    return m, elems


def _window_hits(kb, m, elems) -> list:
    """For each window element, is it PyTorch's argmax?  The last NaN when the maximum
    ``m`` is NaN, else the first element equal to ``m`` (no later one is greater)."""
    b = kb.b
    t, f = ir.Constant(I1, 1), ir.Constant(I1, 0)
    first, taken = [], f
    for _, _, v in elems:
        eq = b.fcmp_ordered("==", v, m)
        first.append(b.and_(eq, b.xor(taken, t)))
        taken = b.or_(taken, eq)
    last, later = [None] * len(elems), f
    for k in reversed(range(len(elems))):
        nan = kb.isnan(elems[k][2])
        last[k] = b.and_(nan, b.xor(later, t))
        later = b.or_(later, nan)
    mnan = kb.isnan(m)
    return [b.select(mnan, la, fi) for fi, la in zip(first, last)]


@kernel("max_pool2d")
def max_pool2d_kernel(kb, n: int) -> None:
    d = kb.g.nx.nodes[n]
    dt = np.dtype(d["dtype"])
    oc = cstrides(tuple(d["shape"]))
    store = lambda ix, v: kb.store(n, dt, kb.offset(0, oc, ix), v)  # noqa: E731
    _pool_loop(kb, n, lambda ix, ih, iw, v: store(ix, v), value_only=store)


@kernel("max_pool2d_indices")
def max_pool2d_indices_kernel(kb, n: int) -> None:
    d = kb.g.nx.nodes[n]
    dt = np.dtype(d["dtype"])
    oc = cstrides(tuple(d["shape"]))
    W = kb.plan.views[d["operands"][0]].shape[3]
    b = kb.b
    _pool_loop(
        kb,
        n,
        lambda ix, ih, iw, v: kb.store(n, dt, kb.offset(0, oc, ix), b.add(b.mul(ih, _c(W)), iw)),
    )


@kernel("max_pool2d_select")
def max_pool2d_select_kernel(kb, n: int) -> None:
    d = kb.g.nx.nodes[n]
    dt = np.dtype(d["dtype"])
    oc = cstrides(tuple(d["shape"]))
    uv = kb.plan.views[d["operands"][1]]

    def body(ix, ih, iw, v):
        src = kb.offset(uv.offset, uv.strides, [ix[0], ix[1], ih, iw])
        kb.store(n, dt, kb.offset(0, oc, ix), kb.load(uv.buf, dt, src))

    _pool_loop(kb, n, body)


@kernel("max_pool2d_grad")
def max_pool2d_grad_kernel(kb, n: int) -> None:
    d = kb.g.nx.nodes[n]
    dt = np.dtype(d["dtype"])
    shape = tuple(d["shape"])
    oc = cstrides(shape)
    if numel(shape) == 0:
        return
    gv = kb.plan.views[d["operands"][1]]
    b = kb.b
    a = d["attrs"]
    xv = kb.plan.views[d["operands"][0]]
    N, C, H, W = xv.shape
    Ho, Wo = tuple(kb.g.nx.nodes[d["operands"][1]]["shape"])[2:]
    kh, kw = a["kernel_size"]
    sh, sw = a["stride"]
    (ph, pw), (dh, dw) = a["padding"], a["dilation"]
    geom = (kh, kw, sh, sw, dh, dw)
    if (
        _unrolled_ok(H, W, Ho, Wo, geom, (ph, pw))
        and sh > (kh - 1) * dh  # windows do not overlap: each input element gets the
        and sw > (kw - 1) * dw  # gradient of at most one window, so store, never add
    ):
        if not (dh == 1 and dw == 1 and sh == kh and sw == kw and Ho * sh == H and Wo * sw == W):
            _zero(kb, n, dt, numel(shape))  # elements in no window (the windows do not tile)
        it = ir.IntType(8 * dt.itemsize)

        def window(ix):
            nn, c, i, j = ix
            m, elems = _window_max(kb, xv, dt, nn, c, i, j, geom)
            g = kb.load(gv.buf, dt, kb.offset(gv.offset, gv.strides, ix))
            g = b.bitcast(b.fadd(const(dt, 0), g), it)  # 0 + g, as eager (-0.0 lands as 0)
            for (ih, iw, _), hit in zip(elems, _window_hits(kb, m, elems)):
                off = kb.offset(0, oc, [nn, c, ih, iw])
                # the gradient's bits masked: no float select, so no branch
                val = b.and_(g, b.sext(hit, it))
                b.store(val, b.gep(kb.ptrs[n], [off], source_etype=it))

        kb.loop([N, C, Ho, Wo], window, name="pool", vectorize=True)
        return
    _zero(kb, n, dt, numel(shape))

    def body(ix, ih, iw, v):
        g = kb.load(gv.buf, dt, kb.offset(gv.offset, gv.strides, ix))
        off = kb.offset(0, oc, [ix[0], ix[1], ih, iw])
        kb.store(n, dt, off, b.fadd(kb.load(n, dt, off), g))

    _pool_loop(kb, n, body)
