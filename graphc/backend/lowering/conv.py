"""Lowering entries: convolution and pooling.

See table.py for the entry each family needs.

The convolutions (conv2d and its adjoints conv2d_input_grad / conv2d_weight_grad) run as
im2col into a scratch buffer plus one BLAS gemm per (batch item, group).  The schedule
has no scratch mechanism of its own, so each kernel call mallocs its scratch (its size is
known at compile time, checked against what an array can address) and frees it at the
end; when BLAS is missing, a dimension exceeds cblas's 32-bit ints, or malloc fails, the
kernel runs plain loops instead (same result up to summation order).  Operands are read
through their views, so any layout works; BLAS reads the weights and the output gradient
in place when their rows are contiguous (else they are copied to the scratch first).
Without padding the im2col/col2im loops index without bounds checks.  The max-pooling
kernels are plain loops that find each window's argmax with PyTorch's rule (first
maximum in row-major window order, the last NaN).

Big convolutions and poolings run on graphc's threads (:func:`parallel_ok`): conv2d,
its input gradient and the poolings by batch items (each thread share mallocs its own
scratch), an ungrouped weight gradient by its columns (input channel x kernel tap).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from eager.interop import MAX_BYTES

from .. import blas
from ..abi import GEMM_PARALLEL_MIN, I1, I32, I64, PTR
from ..llvmir import const, reg_type
from ..strided import cstrides, numel
from .table import kernel

_I32_MAX = int(np.iinfo(np.int32).max)
#: input elements a max pooling (or its gradient) needs before it is split across threads
#: by batch items (as backend/parallel_policy.py's loops: 2^16, see there)
PARALLEL_MIN = 1 << 16
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
        # no padding: every tap of every output position reads inside the input, so the
        # kernels index without bounds checks (their inner loops then vectorize)
        self.in_bounds = all(int(p) == 0 for p in self.padding)

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
        if self.in_bounds:
            ih = b.add(b.mul(i, _c(sh)), b.mul(a_, _c(dh)))
            iw = b.add(b.mul(j, _c(sw)), b.mul(b_, _c(dw)))
            return ir.Constant(I1, 1), ih, iw
        ih = b.add(b.sub(b.mul(i, _c(sh)), _c(self.padding[0])), b.mul(a_, _c(dh)))
        iw = b.add(b.sub(b.mul(j, _c(sw)), _c(self.padding[2])), b.mul(b_, _c(dw)))
        ok = b.and_(
            b.and_(b.icmp_signed(">=", ih, _c(0)), b.icmp_signed("<", ih, _c(self.H))),
            b.and_(b.icmp_signed(">=", iw, _c(0)), b.icmp_signed("<", iw, _c(self.W))),
        )
        return ok, b.select(ok, ih, _c(0)), b.select(ok, iw, _c(0))


def _zero_items(kb, n: int, dt: np.dtype, items: int, per: int, rng) -> None:
    """Zero items ``rng`` = (lo, hi) (all ``items`` when None) of ``per`` elements each."""
    kb.loop(
        [items, per],
        lambda ix: kb.store(n, dt, kb.offset(0, (per, 1), ix), const(dt, 0)),
        name="z",
        outer_range=rng,
    )


def _share(kb, size: int):
    """The (lo, hi) range of the outer dimension (of ``size``) this call runs: a thread's
    share in a parallel kernel (see :func:`parallel_ok`), else None (all of it)."""
    if kb.par is None:
        return None
    kb.outer_size = size
    return (kb.par[0], kb.par[1])


def _scratch_bytes(cv: _Conv, elems: int):
    nbytes = elems * cv.dt.itemsize
    return nbytes if 0 < nbytes <= MAX_BYTES else None


def _with_scratch(kb, n: int, cv: _Conv, elems: int, fast, slow) -> None:
    """Run ``fast(key)`` with a malloc'ed scratch of ``elems`` elements registered as buffer
    ``key``, or ``slow()`` when BLAS can't run it or the allocation fails.  A parallel
    kernel's thread shares each malloc their own."""
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


def _i32(kb, v) -> ir.Value:
    return ir.Constant(I32, int(v)) if isinstance(v, (int, np.integer)) else kb.b.trunc(v, I32)


def _gemm(kb, cv: _Conv, ta, tb, M, N, K, pa, lda, pb, ldb, beta, pc, ldc) -> None:
    """C = A @ B (+ C with ``beta`` 1), row-major; M, N, K ints or i64 values."""
    gemm = blas.declare_gemm(kb.module, cv.dt)
    ft = reg_type(cv.dt)
    c32 = lambda v: ir.Constant(I32, int(v))  # noqa: E731
    kb.b.call(
        gemm,
        [
            c32(blas.CBLAS_ROW_MAJOR),
            c32(ta),
            c32(tb),
            _i32(kb, M),
            _i32(kb, N),
            _i32(kb, K),
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


def _im2col(kb, cv: _Conv, key, nn, grp, rows=None) -> None:
    """scratch[(k - lo)*P + i*Wo + j] = x[nn, grp*Cg + c, ih, iw] (0 in padding) for the
    rows k = (c*kh + a)*kw + b in ``rows`` = (lo, hi) (default: all K rows)."""
    b, dt, xv = kb.b, cv.dt, cv.xv
    lo = _c(0) if rows is None else rows[0]
    khw = cv.kh * cv.kw

    def body(ix):
        k, i, j = ix
        c = b.udiv(k, _c(khw))
        a_ = b.urem(b.udiv(k, _c(cv.kw)), _c(cv.kh))
        b_ = b.urem(k, _c(cv.kw))
        ok, ih, iw = cv.in_pos(kb, i, a_, j, b_)
        ch = b.add(b.mul(grp, _c(cv.Cg)), c)
        v = kb.load(xv.buf, dt, kb.offset(xv.offset, xv.strides, [nn, ch, ih, iw]))
        dst = kb.offset(0, (cv.P, cv.Wo, 1), [b.sub(k, lo), i, j])
        kb.store(key, dt, dst, b.select(ok, v, const(dt, 0)))

    kb.loop([cv.K, cv.Ho, cv.Wo], body, name="col", outer_range=rows)


def _matrix_ld(v, row_dim: int, dims: tuple, rows: int, cols: int):
    """The leading dimension of a view (or of one item of it) as a row-major ``rows`` x
    ``cols`` matrix for BLAS: dimension ``row_dim`` of ``v`` the rows, ``dims`` its
    dimensions that make a row, which must be contiguous; None when they are not, or
    the rows overlap (then the caller copies it).  Size-1 dimensions' strides never
    matter."""
    sizes = [v.shape[d] for d in dims]
    want = cstrides(tuple(sizes))
    for d, size, st in zip(dims, sizes, want):
        if size != 1 and v.strides[d] != st:
            return None
    if rows <= 1:
        return max(cols, 1)
    ld = int(v.strides[row_dim])
    return ld if ld >= max(cols, 1) else None


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


def _weights(kb, cv: _Conv, key, base: int) -> tuple:
    """(pointer to group ``grp``'s weights as an Og x K matrix, its leading dimension):
    read in place when their rows are contiguous, else copied to the scratch at ``base``
    (this is called once per kernel call, before the loops)."""
    ld = _matrix_ld(cv.wv, 0, (1, 2, 3), cv.O, cv.K)
    b, wv = kb.b, cv.wv
    if ld is None:
        _copy_weights(kb, cv, key, base)

        def copied(grp):
            return _sp(kb, key, cv.dt, b.add(_c(base), b.mul(grp, _c(cv.Og * cv.K))))

        return copied, cv.K

    def direct(grp):
        return kb.ptr(wv.buf, cv.dt, b.add(_c(wv.offset), b.mul(grp, _c(cv.Og * ld))))

    return direct, ld


def _grad_rows(kb, cv: _Conv, key, base: int) -> tuple:
    """(function (nn, grp) -> pointer to g[nn, grp*Og:(grp+1)*Og] as an Og x P matrix,
    its leading dimension): read in place when its rows are contiguous, else copied to
    the scratch at ``base`` on each call."""
    gv = cv.gv
    ld = _matrix_ld(gv, 1, (2, 3), cv.O, cv.P)
    b = kb.b
    if ld is None:

        def copied(nn, grp):
            _copy_grad(kb, cv, key, base, nn, grp)
            return _sp(kb, key, cv.dt, base)

        return copied, cv.P

    def direct(nn, grp):
        off = b.add(_c(gv.offset), b.mul(nn, _c(gv.strides[0])))
        return kb.ptr(gv.buf, cv.dt, b.add(off, b.mul(grp, _c(cv.Og * ld))))

    return direct, ld


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


# --- which kernels run on several threads ------------------------------------------------

# the kernels that may be split across graphc's threads (backend/parallel_policy.py)
PARALLEL_KINDS = frozenset(
    {"conv2d", "conv2d_input_grad", "conv2d_weight_grad", "max_pool2d", "max_pool2d_grad"}
)


def parallel_ok(plan, n: int) -> bool:
    """Split node ``n``'s kernel across threads?  A convolution with at least
    ``GEMM_PARALLEL_MIN`` multiply-adds, shared out by batch items (conv2d and its input
    gradient: each item's product and its writes are its own) or, for the weight
    gradient of an ungrouped convolution, by columns (input channel x tap: each share
    im2cols its rows of every item and sums its own columns of dW over the batch, in
    batch order); a max pooling (or its gradient) of at least ``PARALLEL_MIN`` input
    elements, by batch items.  Each share's work depends only on the thread count, so
    the results are deterministic per thread count (the batch splits are bitwise the
    serial result)."""
    d = plan.g.nx.nodes[n]
    op = d["op"]
    shapes = [tuple(plan.g.nx.nodes[o]["shape"]) for o in d["operands"]]
    if op in ("max_pool2d", "max_pool2d_grad"):
        x = shapes[0]
        return len(x) == 4 and x[0] >= 2 and numel(x) >= PARALLEL_MIN
    if op not in ("conv2d", "conv2d_input_grad", "conv2d_weight_grad"):
        return False
    out = tuple(d["shape"])
    # (batch, output channels, weight shape, output positions)
    if op == "conv2d":
        n_, o_, wsh, p_ = shapes[0][0], shapes[1][0], shapes[1], numel(out[2:])
    elif op == "conv2d_input_grad":
        n_, o_, wsh, p_ = shapes[0][0], shapes[0][1], shapes[1], numel(shapes[0][2:])
    else:
        n_, o_, wsh, p_ = shapes[0][0], out[0], out, numel(shapes[1][2:])
        if int(d["attrs"]["groups"]) != 1:
            return False
    split = numel(wsh[1:]) if op == "conv2d_weight_grad" else n_
    return split >= 2 and n_ * o_ * numel(wsh[1:]) * p_ >= GEMM_PARALLEL_MIN


# --- conv2d -------------------------------------------------------------------------------


@kernel("conv2d")
def conv2d_kernel(kb, n: int) -> None:
    cv = _Conv(kb, n, "conv2d")
    rng = _share(kb, cv.N)
    if numel(cv.shape) == 0:
        return
    b, dt = kb.b, cv.dt
    KP = cv.K * cv.P

    def fast(key):
        wptr, ldw = _weights(kb, cv, key, KP)

        def per(ix):
            nn, grp = ix
            _im2col(kb, cv, key, nn, grp)
            out = b.add(b.mul(nn, _c(cv.O * cv.P)), b.mul(grp, _c(cv.Og * cv.P)))
            _gemm(
                kb,
                cv,
                blas.CBLAS_NO_TRANS,
                blas.CBLAS_NO_TRANS,
                cv.Og,
                cv.P,
                cv.K,
                wptr(grp),
                ldw,
                _sp(kb, key, dt, 0),
                cv.P,
                0.0,
                _sp(kb, n, dt, out),
                cv.P,
            )

        kb.loop([cv.N, cv.G], per, name="ng", outer_range=rng)

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

        kb.loop([cv.N, cv.O, cv.Ho, cv.Wo], outer, name="o", outer_range=rng)

    _with_scratch(kb, n, cv, KP + cv.O * cv.K, fast, slow)


# --- conv2d_input_grad: cols = W_g^T @ G_g, then col2im ---------------------------------


@kernel("conv2d_input_grad")
def conv2d_input_grad_kernel(kb, n: int) -> None:
    cv = _Conv(kb, n, "conv2d_input_grad")
    rng = _share(kb, cv.N)
    size = numel(cv.shape)
    if size == 0:
        return
    b, dt = kb.b, cv.dt
    _zero_items(kb, n, dt, cv.N, size // cv.N, rng)
    if cv.P == 0:
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
        wptr, ldw = _weights(kb, cv, key, KP)
        gptr, ldg = _grad_rows(kb, cv, key, KP + OK)

        def per(ix):
            nn, grp = ix
            _gemm(
                kb,
                cv,
                blas.CBLAS_TRANS,
                blas.CBLAS_NO_TRANS,
                cv.K,
                cv.P,
                cv.Og,
                wptr(grp),
                ldw,
                gptr(nn, grp),
                ldg,
                0.0,
                _sp(kb, key, dt, 0),
                cv.P,
            )
            col = cstrides((cv.Cg, cv.kh, cv.kw, cv.Ho, cv.Wo))
            col2im(nn, grp, lambda jx: kb.load(key, dt, kb.offset(0, col, jx)))

        kb.loop([cv.N, cv.G], per, name="ng", outer_range=rng)

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

        kb.loop([cv.N, cv.G], per, name="ng", outer_range=rng)

    _with_scratch(kb, n, cv, KP + OK + cv.Og * cv.P, fast, slow)


# --- conv2d_weight_grad: dW_g[:, cols] += G_g @ cols^T per batch item -------------------


@kernel("conv2d_weight_grad")
def conv2d_weight_grad_kernel(kb, n: int) -> None:
    cv = _Conv(kb, n, "conv2d_weight_grad")
    rng = _share(kb, cv.K)  # parallel only ungrouped: a share is columns [lo, hi) of dW
    size = numel(cv.shape)
    if size == 0:
        return
    b, dt = kb.b, cv.dt
    lo, hi = rng if rng is not None else (_c(0), _c(cv.K))

    def zero(ix):
        k, o = ix
        kb.store(n, dt, kb.offset(0, (cv.K, 1), [o, k]), const(dt, 0))

    kb.loop([cv.K, cv.O], zero, name="z", outer_range=rng)
    if cv.N == 0 or cv.P == 0:
        return
    KP = cv.K * cv.P

    def fast(key):
        gptr, ldg = _grad_rows(kb, cv, key, KP)

        def per(ix):
            nn, grp = ix
            _im2col(kb, cv, key, nn, grp, rows=(lo, hi))
            out = b.add(b.mul(grp, _c(cv.Og * cv.K)), lo)
            _gemm(
                kb,
                cv,
                blas.CBLAS_NO_TRANS,
                blas.CBLAS_TRANS,
                cv.Og,
                b.sub(hi, lo),
                cv.P,
                gptr(nn, grp),
                ldg,
                _sp(kb, key, dt, 0),
                cv.P,
                1.0,
                _sp(kb, n, dt, out),
                cv.K,
            )

        kb.loop([cv.N, cv.G], per, name="ng")

    def slow():
        acc = kb.alloca(reg_type(dt), name="acc")
        xv, gv = cv.xv, cv.gv
        khw = cv.kh * cv.kw

        def outer(ix):
            k, o = ix
            c = b.udiv(k, _c(khw))
            a_ = b.urem(b.udiv(k, _c(cv.kw)), _c(cv.kh))
            b_ = b.urem(k, _c(cv.kw))
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
            kb.store(n, dt, kb.offset(0, (cv.K, 1), [o, k]), b.load(acc, typ=reg_type(dt)))

        kb.loop([cv.K, cv.O], outer, name="w", outer_range=rng)

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
    rng = _share(kb, N)
    if value_only is not None and _unrolled_ok(H, W, Ho, Wo, geom, (ph, pw)):

        def unrolled(ix):  # every window in bounds: its kh*kw loads unrolled, in registers
            nn, c, i, j = ix
            m, _ = _window_max(kb, xv, dt, nn, c, i, j, geom)
            value_only(ix, m)

        kb.loop([N, C, Ho, Wo], unrolled, name="pool", vectorize=True, outer_range=rng)
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

    kb.loop([N, C, Ho, Wo], outer, name="pool", outer_range=rng)


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
    rng = _share(kb, N)
    if (
        _unrolled_ok(H, W, Ho, Wo, geom, (ph, pw))
        and sh > (kh - 1) * dh  # windows do not overlap: each input element gets the
        and sw > (kw - 1) * dw  # gradient of at most one window, so store, never add
    ):
        if not (dh == 1 and dw == 1 and sh == kh and sw == kw and Ho * sh == H and Wo * sw == W):
            # elements in no window (the windows do not tile)
            _zero_items(kb, n, dt, N, C * H * W, rng)
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

        kb.loop([N, C, Ho, Wo], window, name="pool", vectorize=True, outer_range=rng)
        return
    _zero_items(kb, n, dt, N, C * H * W, rng)

    def body(ix, ih, iw, v):
        g = kb.load(gv.buf, dt, kb.offset(gv.offset, gv.strides, ix))
        off = kb.offset(0, oc, [ix[0], ix[1], ih, iw])
        kb.store(n, dt, off, b.fadd(kb.load(n, dt, off), g))

    _pool_loop(kb, n, body)
