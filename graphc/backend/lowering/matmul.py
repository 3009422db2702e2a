"""Matrix products: the shape of a product over the scheduled views (:class:`GemmDims`)
and its kernel -- a BLAS gemm per batch item (each thread of a shared product calls it on
its rows or columns), or plain loops where BLAS does not apply.

``addmm``/``baddbmm`` (``beta * input + alpha * (A @ B)``) run the same kernel: C is first
filled with ``beta * input`` (broadcast, any layout; each thread fills its own share), and
the gemm then adds ``alpha * A @ B`` to it (gemm's ``beta`` = 1), so the bias costs no
separate pass over the result.  A broadcast batch dimension is a stride of 0 in the
operand's view: no copy.

Batched small products (``matmul`` only: at least 4 batch items, each at most
``SMALL_GEMM_MAX_FMAS`` multiply-adds, the attention products of W8) run in
:func:`_small_gemm` instead of a BLAS call per item: OpenBLAS's per-call overhead was
most of a 64x64x16 item's time.  Each item packs B into a zero-padded row-major block
on the stack and computes C in register blocks of ``SMALL_ROWS`` rows by
``2 * lanes`` columns (vector FMAs, A's element broadcast).  Reduction order: every
element of C is ``fma(a[i, K-1], b[K-1, j], ... fma(a[i, 0], b[0, j], 0))``, k
ascending, one rounding per step, the same on every thread count (threads split the
batch items) and every call."""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from ...errors import UnsupportedOpError
from .. import blas
from ..abi import I32, I64
from ..llvmir import const, reg_type
from ..strided import View, as_matrix, blas_layout, cstrides, numel
from .table import kernel, register


class GemmDims:
    """How a matmul node runs: its operands as matrix views, batch and M, K, N; whether
    BLAS computes it, and how threads would share it (by rows or columns of C)."""

    __slots__ = ("va", "vb", "batch", "M", "K", "N", "blas", "small", "split", "split_size")

    def __init__(self, plan, n: int) -> None:
        g = plan.g
        summed = plan.summed.get(n)  # a sum over a product's batch: one product
        d = g.nx.nodes[n if summed is None else summed[0]]
        a_id, b_id = d["operands"][-2:]  # addmm/baddbmm: (input, mat1, mat2)
        dt = np.dtype(d["dtype"])
        adt, bdt = np.dtype(g.nx.nodes[a_id]["dtype"]), np.dtype(g.nx.nodes[b_id]["dtype"])
        if summed is not None:
            va, vb = summed[1], summed[2]
        else:
            va, vb = as_matrix(plan.views[a_id], 0), as_matrix(plan.views[b_id], 1)
        self.va, self.vb = va, vb
        self.M, self.K, self.N = va.shape[-2], va.shape[-1], vb.shape[-1]
        self.batch = tuple(np.broadcast_shapes(va.shape[:-2], vb.shape[:-2]))
        if self.batch and d["op"] == "matmul":
            self._fold_batch()
        self.blas = (
            self.K != 0
            and dt.kind == "f"
            and adt == dt
            and bdt == dt
            and blas.available()
            and _blas_fits(self.va, self.vb, self.M, self.N, self.K)
        )
        # threads share rows of C (each reads its rows of A and all of B, which BLAS packs
        # once per share), or columns when C has too few rows to go round: measured on a
        # 64x1000 @ 1000x100 product, rows took 65 us on two threads, columns 87 us
        self.split = "rows" if self.M >= min(self.N, 16) else "cols"
        self.split_size = self.M if self.split == "rows" else self.N
        nbatch = int(np.prod(self.batch, dtype=np.int64))
        self.small = summed is None and _small_fits(d, self, dt, adt, bdt)
        if nbatch >= 4:
            # many products: each thread runs whole gemms on its batch items (splitting
            # every small product's rows instead doubles the gemm calls per thread)
            self.split, self.split_size = "batch", nbatch

    def _fold_batch(self) -> None:
        """(..., M, K) @ (K, N) with B's batch broadcast and A's batch dims and rows one
        stride apart (``F.linear`` on 3-D input): one gemm of (prod(batch) * M) rows
        instead of a gemm per batch item (C is contiguous, so its rows follow too)."""
        batch, M, K = self.batch, self.M, self.K
        if any(s != 0 for s in self.vb.broadcast_to(batch + (K, self.N))[:-2]):
            return
        ast = self.va.broadcast_to(batch + (M, K))
        dims, strides = batch + (M,), ast[:-1]
        live = [(dd, st) for dd, st in zip(dims, strides) if dd != 1]
        if any(st == 0 for _, st in live):
            return
        for (_, s0), (d1, s1) in zip(live, live[1:]):
            if s0 != s1 * d1:
                return
        rows = int(np.prod(dims, dtype=np.int64))
        # the stride of a row: the innermost dimension of size > 1 (any when all are 1)
        row_stride = next((st for st, dd in zip(strides[::-1], dims[::-1]) if dd != 1), K)
        va = View(self.va.buf, self.va.offset, (row_stride, ast[-1]), (rows, K))
        vb = View(self.vb.buf, self.vb.offset, self.vb.strides[-2:], (K, self.N))
        if blas_layout(va) is None or blas_layout(vb) is None:
            return
        self.va, self.vb, self.batch, self.M = va, vb, (), rows


#: batched float products whose items are at most this many multiply-adds (and whose
#: packed B fits ``SMALL_GEMM_MAX_PACK`` bytes) run in :func:`_small_gemm`; False: BLAS
SMALL_GEMM = True
SMALL_GEMM_MAX_FMAS = 64 * 64 * 64
SMALL_GEMM_MAX_PACK = 16384
SMALL_ROWS = 4  # rows of C per register block (times 2 vectors of columns: 8 accumulators)


def _small_fits(d: dict, gd: GemmDims, dt: np.dtype, adt: np.dtype, bdt: np.dtype) -> bool:
    """Does the product run in :func:`_small_gemm`: a ``matmul`` of one float dtype with
    at least 4 batch items (threads share items), K > 0 and small items."""
    if not SMALL_GEMM or d["op"] != "matmul" or not gd.batch or dt.kind != "f":
        return False
    if adt != dt or bdt != dt or dt.itemsize not in (4, 8) or gd.K == 0:
        return False
    if int(np.prod(gd.batch, dtype=np.int64)) < 4:
        return False
    lanes = 32 // dt.itemsize
    npad = -(-gd.N // (2 * lanes)) * (2 * lanes)
    return (
        gd.M * gd.N * gd.K <= SMALL_GEMM_MAX_FMAS
        and gd.K * npad * dt.itemsize <= SMALL_GEMM_MAX_PACK
    )


def gemm_dims(plan, n: int) -> GemmDims:
    return GemmDims(plan, n)


def _blas_fits(va: View, vb: View, M: int, N: int, K: int) -> bool:
    """Do the dimensions and leading dimensions fit cblas's 32-bit ints?"""
    lays = [blas_layout(v) for v in (va, vb)]
    assert None not in lays, "the schedule copies operands BLAS cannot read"
    lds = [max(lay[1], 1) for lay in lays if lay is not None]
    return max([M, N, K] + lds) <= np.iinfo(np.int32).max


def _blas_operand(v: View) -> tuple:
    """(CBLAS transpose flag, leading dimension) for a matrix view the planner accepted."""
    layout = blas_layout(v)
    if layout is None:
        raise UnsupportedOpError(
            f"internal error: matrix view with strides {v.strides} reached BLAS"
        )
    trans, ld = layout
    return (blas.CBLAS_TRANS if trans else blas.CBLAS_NO_TRANS), max(ld, 1)


def _scale_attrs(d: dict) -> tuple:
    """(beta, alpha) of a product node: matmul is (0, 1), addmm/baddbmm carry theirs."""
    if d["op"] == "matmul":
        return 0.0, 1.0
    return float(d["attrs"]["beta"]), float(d["attrs"]["alpha"])


def _fill_bias(kb, n, dt, vin, cst, idx, rows_range, cols_range, M, N, beta) -> None:
    """C[idx][i, j] = beta * input[idx][i, j] (input broadcast) over a share of C."""
    b = kb.b
    ist = vin.strides

    def body_i(ii):
        def body_j(jj):
            full = list(idx) + [ii[0], jj[0]]
            v = kb.load(vin.buf, dt, kb.offset(vin.offset, ist, full))
            if beta != 1.0:
                c = const(dt, beta if dt.kind == "f" else int(beta))
                v = b.fmul(v, c) if dt.kind == "f" else b.mul(v, c)
            kb.store(n, dt, kb.offset(0, list(cst) + [max(N, 1), 1], full), v)

        kb.loop([N], body_j, name="bj", outer_range=cols_range)

    kb.loop([M], body_i, name="bi", outer_range=rows_range)


def _on_batch_item(b, batch: tuple, body):
    """A loop body over flat batch items: ``body`` gets the multi-index (one i64 per
    batch dim, row-major) of flat item ``ii[0]``."""
    inner = [int(np.prod(batch[d + 1 :], dtype=np.int64)) for d in range(len(batch))]

    def flat(ii):
        idx = []
        for d, size in enumerate(batch):
            q = b.udiv(ii[0], ir.Constant(I64, inner[d])) if inner[d] != 1 else ii[0]
            idx.append(b.urem(q, ir.Constant(I64, size)) if d else q)
        body(idx)

    return flat


@kernel("matmul")
def matmul_kernel(kb, n: int) -> None:
    plan, g, b = kb.plan, kb.g, kb.b
    # a sum over a product's batch (plan.summed) runs its product's kernel into the sum
    d = g.nx.nodes[plan.summed[n][0] if n in plan.summed else n]
    a_id, b_id = d["operands"][-2:]
    dt = np.dtype(d["dtype"])
    adt, bdt = np.dtype(g.nx.nodes[a_id]["dtype"]), np.dtype(g.nx.nodes[b_id]["dtype"])
    beta, alpha = _scale_attrs(d)
    gd = gemm_dims(plan, n)
    va, vb, batch, M, K, N = gd.va, gd.vb, gd.batch, gd.M, gd.K, gd.N
    ast = va.broadcast_to(batch + (M, K))[:-2] if batch else ()
    bst = vb.broadcast_to(batch + (K, N))[:-2] if batch else ()
    cst = cstrides(batch + (M, N))[:-2] if batch else ()
    vin = None
    if beta != 0.0:  # the added input, as a view broadcast over C (stride 0 where broadcast)
        v0 = plan.views[d["operands"][0]]
        vin = View(v0.buf, v0.offset, v0.broadcast_to(batch + (M, N)), batch + (M, N))
    if numel(batch + (M, N)) == 0:
        return
    if gd.small:
        _small_gemm(kb, n, gd, dt, ast, bst, cst)
        return
    if not gd.blas:
        # plain loops: integer/bool/mixed matmuls, K == 0, no BLAS library installed, or
        # a dimension beyond the 32-bit ints of the cblas interface
        _matmul_loops(kb, n, va, vb, batch, M, K, N, dt, adt, bdt, vin, beta, alpha)
        return
    gemm = blas.declare_gemm(kb.module, dt)
    ft = reg_type(dt)
    ta, lda = _blas_operand(va)
    tb, ldb = _blas_operand(vb)
    c32 = lambda v: ir.Constant(I32, v)  # noqa: E731
    i64 = lambda v: ir.Constant(I64, v)  # noqa: E731
    rows, cols = i64(M), i64(N)
    row_a, row_c = i64(0), i64(0)  # element offsets of the first row / column
    col_b, col_c = i64(0), i64(0)
    rows_range = cols_range = None  # a thread's share of C, for the bias fill
    if kb.par is not None:
        # a thread's share of the product: rows [lo, hi) of C (of op(A)), or columns
        # [lo, hi) of C (of op(B)); BLAS runs single-threaded inside each share
        lo, hi = kb.par[0], kb.par[1]
        kb.outer_size = gd.split_size
        if gd.split == "batch":
            pass  # the batch loop below runs items [lo, hi) of the flattened batch
        elif gd.split == "rows":
            rows = b.sub(hi, lo)
            row_a = b.mul(lo, i64(lda if ta == blas.CBLAS_NO_TRANS else 1))
            row_c = b.mul(lo, i64(max(N, 1)))
            rows_range = (lo, hi)
        else:
            cols = b.sub(hi, lo)
            col_b = b.mul(lo, i64(1 if tb == blas.CBLAS_NO_TRANS else ldb))
            col_c = lo
            cols_range = (lo, hi)

    def call(idx):
        if vin is not None:
            _fill_bias(kb, n, dt, vin, cst, idx, rows_range, cols_range, M, N, beta)
        oa = b.add(kb.offset(va.offset, ast, idx), row_a)
        ob = b.add(kb.offset(vb.offset, bst, idx), col_b)
        oc = b.add(b.add(kb.offset(0, cst, idx), row_c), col_c)
        pa = kb.ptr(va.buf, dt, oa)
        pb = kb.ptr(vb.buf, dt, ob)
        pc = kb.ptr(n, dt, oc)
        b.call(
            gemm,
            [
                c32(blas.CBLAS_ROW_MAJOR),
                c32(ta),
                c32(tb),
                b.trunc(rows, I32),
                b.trunc(cols, I32),
                c32(K),
                ir.Constant(ft, alpha),
                pa,
                c32(lda),
                pb,
                c32(ldb),
                ir.Constant(ft, 0.0 if vin is None else 1.0),
                pc,
                c32(max(N, 1)),
            ],
        )

    if batch and kb.par is not None and gd.split == "batch":
        kb.loop(
            [gd.split_size],
            _on_batch_item(b, batch, call),
            name="batch",
            outer_range=(kb.par[0], kb.par[1]),
        )
    elif batch:
        kb.loop(list(batch), call, name="batch")
    else:
        call([])


def _small_gemm(kb, n, gd: GemmDims, dt: np.dtype, ast, bst, cst) -> None:
    """C[b] = A[b] @ B[b] for every batch item b (the thread's share of the flattened
    batch): B[b] packed into a (K, npad) zero-padded stack block, then register blocks of
    ``SMALL_ROWS`` x ``2 * lanes`` elements of C accumulated over k ascending with vector
    FMAs (module docstring: reduction order), stored without the padding columns."""
    b = kb.b
    va, vb, batch, M, K, N = gd.va, gd.vb, gd.batch, gd.M, gd.K, gd.N
    ft = reg_type(dt)
    lanes = 32 // dt.itemsize
    width = 2 * lanes
    npad = -(-N // width) * width
    vt = ir.VectorType(ft, lanes)
    i64 = lambda v: ir.Constant(I64, v)  # noqa: E731
    with b.goto_entry_block():
        pack0 = b.alloca(ft, size=i64(K * npad), name="bpack")
        pack0.align = 32
    zero_v = ir.Constant(vt, [0.0] * lanes)
    rows = SMALL_ROWS
    acc = [[kb.alloca(vt, name=f"acc{r}_{c}") for c in range(2)] for r in range(rows)]
    a_rs, a_cs = va.strides[-2], va.strides[-1]
    b_rs, b_cs = vb.strides[-2], vb.strides[-1]
    undef_v = ir.Constant(vt, None)
    splat_mask = ir.Constant(ir.VectorType(I32, lanes), [0] * lanes)
    # fused on FMA hosts, like vecmath's fma (a non-FMA host runs mul + add)
    fname = f"llvm.fmuladd.v{lanes}f{dt.itemsize * 8}"
    fma = kb.module.globals.get(fname) or ir.Function(
        kb.module, ir.FunctionType(vt, [vt] * 3), fname
    )

    def packed(k, j):  # pointer to pack[k, j]
        return b.gep(pack0, [b.add(b.mul(k, i64(npad)), j)], source_etype=ft)

    def item(idx):
        oa = kb.offset(va.offset, ast, idx)
        ob = kb.offset(vb.offset, bst, idx)
        oc = kb.offset(0, cst, idx)

        def pack_row(kk):
            def pack_col(jj):
                v = kb.load(vb.buf, dt, b.add(ob, kb.offset(0, (b_rs, b_cs), [kk[0], jj[0]])))
                b.store(v, packed(kk[0], jj[0]))

            kb.loop([N], pack_col, name="pj")
            if npad != N:

                def pad_col(jj):
                    b.store(ir.Constant(ft, 0.0), packed(kk[0], b.add(jj[0], i64(N))))

                kb.loop([npad - N], pad_col, name="pz")

        kb.loop([K], pack_row, name="pk")

        def block(i0, nrows, jb):
            """C[i0:i0+nrows, jb*width : jb*width+width] (nrows <= rows)."""
            j0 = b.mul(jb, i64(width))
            for r in range(nrows):
                for c in range(2):
                    b.store(zero_v, acc[r][c])

            def kstep(kk):
                k = kk[0]
                bv = [
                    b.load(packed(k, b.add(j0, i64(c * lanes))), typ=vt, align=dt.itemsize)
                    for c in range(2)
                ]
                for r in range(nrows):
                    ia = b.add(i0, i64(r))
                    a = kb.load(va.buf, dt, b.add(oa, kb.offset(0, (a_rs, a_cs), [ia, k])))
                    av = b.shuffle_vector(
                        b.insert_element(undef_v, a, ir.Constant(I32, 0)), undef_v, splat_mask
                    )
                    for c in range(2):
                        cur = b.load(acc[r][c], typ=vt)
                        b.store(b.call(fma, [av, bv[c], cur]), acc[r][c])

            kb.loop([K], kstep, name="kk")
            for r in range(nrows):
                row = b.add(oc, b.mul(b.add(i0, i64(r)), i64(N)))
                for c in range(2):
                    v = b.load(acc[r][c], typ=vt)
                    col = b.add(j0, i64(c * lanes))
                    if npad == N:  # no padding columns: one vector store
                        b.store(v, kb.ptr(n, dt, b.add(row, col)), align=dt.itemsize)
                        continue
                    for lane in range(lanes):
                        _store_lane_if(
                            kb,
                            n,
                            dt,
                            row,
                            b.add(col, i64(lane)),
                            N,
                            b.extract_element(v, ir.Constant(I32, lane)),
                        )

        full = M // rows
        nblk = npad // width
        if full:
            kb.loop([full, nblk], lambda ij: block(b.mul(ij[0], i64(rows)), rows, ij[1]), name="rb")
        if M % rows:
            base = full * rows
            kb.loop(
                [M % rows, nblk], lambda ij: block(b.add(ij[0], i64(base)), 1, ij[1]), name="rr"
            )

    nbatch = int(np.prod(batch, dtype=np.int64))
    flat = _on_batch_item(b, batch, item)

    if kb.par is not None:
        assert gd.split == "batch", "a small batched product is shared by batch items"
        kb.outer_size = nbatch
        kb.loop([nbatch], flat, name="batch", outer_range=(kb.par[0], kb.par[1]))
    else:
        kb.loop([nbatch], flat, name="batch")


def _store_lane_if(kb, n, dt, row, col, N, v) -> None:
    """C[row + col] = v, skipped for the padding columns col >= N."""
    b = kb.b
    with b.if_then(b.icmp_unsigned("<", col, ir.Constant(I64, N))):
        kb.store(n, dt, b.add(row, col), v)


def _matmul_loops(kb, n, va, vb, batch, M, K, N, dt, adt, bdt, vin=None, beta=0.0, alpha=1.0):
    """Plain loops for integer/bool matmul and K == 0 (BLAS is float only); with ``vin``,
    the result is ``alpha * (A @ B) + beta * input`` (addmm, baddbmm)."""
    b = kb.b
    acc_t = dt
    slot = kb.alloca(reg_type(acc_t), name="dot")
    ast = va.broadcast_to(batch + (M, K))
    bst = vb.broadcast_to(batch + (K, N))
    cst = cstrides(batch + (M, N))
    nb = len(batch)

    def outer(idx):
        b.store(const(acc_t, 0), slot)

        def inner(kk):
            k = kk[0]
            ia = idx[:nb] + [idx[nb], k]
            ib = idx[:nb] + [k, idx[nb + 1]]
            x = kb.convert(kb.load(va.buf, adt, kb.offset(va.offset, ast, ia)), adt, acc_t)
            y = kb.convert(kb.load(vb.buf, bdt, kb.offset(vb.offset, bst, ib)), bdt, acc_t)
            cur = b.load(slot, typ=reg_type(acc_t))
            if acc_t.kind == "f":
                b.store(b.fadd(cur, b.fmul(x, y)), slot)
            elif acc_t.kind == "b":
                b.store(b.or_(cur, b.and_(x, y)), slot)
            else:
                b.store(b.add(cur, b.mul(x, y)), slot)

        kb.loop([K], inner, name="k")
        r = b.load(slot, typ=reg_type(acc_t))
        if alpha != 1.0 or vin is not None:
            fl = acc_t.kind == "f"
            mul = b.fmul if fl else b.mul
            if alpha == 0.0:  # the product is ignored (as BLAS and PyTorch): no NaN from it
                r = const(acc_t, 0)
            elif alpha != 1.0:
                r = mul(r, const(acc_t, alpha if fl else int(alpha)))
            if vin is not None:
                x = kb.load(vin.buf, dt, kb.offset(vin.offset, vin.strides, idx))
                if beta != 1.0:
                    x = mul(x, const(acc_t, beta if fl else int(beta)))
                r = b.fadd(x, r) if fl else b.add(x, r)
        kb.store(n, dt, kb.offset(0, cst, idx), r)

    kb.loop(list(batch) + [M, N], outer, name="mn")


for _op in ("addmm", "baddbmm"):  # beta * input + alpha * (A @ B): the same kernel
    register(_op, kernel=matmul_kernel, kernel_kind="matmul")
