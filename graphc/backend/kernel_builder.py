"""Writing one kernel: :class:`KernelBuilder` holds the LLVM builder of a kernel function
and the values every lowering uses (loops, element loads and stores, dtype conversion,
vector math), and writes the loop kernels -- fused elementwise stores and reductions over
one index space -- calling each op's entry of the lowering table (graphc.backend.lowering)
for its element or kernel."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Optional

import numpy as np
from llvmlite import ir

from ..errors import UnsupportedOpError
from ..ir import describe
from . import irtext, lowering
from .abi import I1, I8, I32, I64, RC_OK
from .llvmir import const, counted_loop, mem_type, no_unroll_loop_id, reg_type
from .lowering import Elem
from .lowering.reduce import accumulator, reduction
from .schedule import Kernel
from .strided import cstrides, numel


# Loop nests emitted with ``loop(..., unroll=False)`` (the loop kernels' elementwise ops and
# reductions, and the copies of indexing and concatenation) are marked
# ``llvm.loop.unroll.disable``.  The loop vectorizer still vectorizes and interleaves them;
# unrolling them again (vector body, remainder, small outer loops) doubled the optimized
# code of the W6-W8 models, and LLVM's optimize + codegen time with it, for no measurable
# speed.  Hand-written loop nests (conv, pooling, matmul fallbacks) keep LLVM's unroller:
# their small constant inner loops gain from it (docs/backend.md, "Compile time of the
# LLVM pipeline").  ``UNROLL_ALL = True`` lets LLVM unroll every loop again (the code
# before this change, for measurements).
UNROLL_ALL = False
# Float max/min rows of loop kernels are vectorized with llvm.maximum/minimum and checked
# for the results where that could differ from the exact step (KernelBuilder.
# _fast_extrema_kernel).  ``FAST_EXTREMA = False`` keeps the scalar exact step alone (the
# code before, for measurements).
FAST_EXTREMA = True


def _same_in_output_type(op: str, sdt: np.dtype, dt: np.dtype, acc_t: np.dtype) -> bool:
    """Does a partial reduction's step give the same bits computed in its output type?
    True for a sum of float32 into float32 accumulated in float64: the sum of two floats
    rounded once from float64 (53 >= 2 * 24 + 2 bits) is their correctly rounded float sum."""
    return (
        reduction(op).combine == "add"
        and sdt == dt
        and dt == np.dtype(np.float32)
        and acc_t == np.dtype(np.float64)
    )


class _Freeze(ir.instructions.Instruction):
    """LLVM's ``freeze`` (llvmlite has no builder method for it)."""

    def __init__(self, parent, val, name=""):
        super().__init__(parent, val.type, "freeze", [val], name=name)

    def descr(self, buf):
        (val,) = self.operands
        md = self._stringify_metadata(leading_comma=True)
        buf.append(f"freeze {val.type} {val.get_reference()}{md}\n")


def _freeze(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """``freeze v``: the same value, opaque to InstCombine's folds through ``v``'s select
    (which turn ``maximum(m, select(c, -inf, x))`` into a select of the reduction that the
    loop vectorizer does not recognize)."""
    instr = _Freeze(b.block, v)
    b._insert(instr)
    return instr


#: A context manager factory for the lock graphc's lazy imports hold, handed down by
#: graphc.runtime.native when it is imported (``graphc.runtime.imports.IMPORT_LOCK``,
#: which ``fork`` takes: a child never sees a half-done import).  A getter, not the lock,
#: because a forked child makes a new lock.
import_lock: Callable[[], ContextManager] = contextlib.nullcontext
_VECMATH: list = []


def vecmath_module() -> Any:
    """graphc.backend.vecmath, imported on first use under :data:`import_lock`: its
    constants are computed exactly at import (~3-4 ms), which a graph without
    transcendental math (a fresh process's first compile of an MLP step) never needs."""
    if not _VECMATH:
        with import_lock():
            from . import vecmath

        _VECMATH[:] = [vecmath]
    return _VECMATH[0]


class KernelBuilder:
    """Emits one kernel function: loop nests, loads/stores through views, scalar op code."""

    def __init__(self, low, fn: ir.Function, ptrs: dict) -> None:  # low: lower.Lowerer
        self.low = low
        self.plan = low.plan
        self.g = low.g
        self.fn = fn
        self.ptrs = ptrs
        self.entry = fn.append_basic_block("entry")
        self.b = ir.IRBuilder(self.entry)
        self.rc = self.b.alloca(I32, name="rc")
        self.b.store(ir.Constant(I32, RC_OK), self.rc)
        self.exit = fn.append_basic_block("exit")
        self.module = low.module
        self.par = None  # (start, end, partials) args of a parallel loop kernel
        self.outer_size = 0
        self.full: dict = {}  # {reduce node: reduces to one element} of the loop kernel
        self.in_place = False  # an output is written over an input (plan.alias_kernels)
        self.trig_flag = None  # i8 slot: a sin/cos argument beyond vecmath's accurate range
        self.trig_exact = False  # emit sin/cos that are exact for every argument
        self.extrema_fast = False  # row max/min by llvm.maximum/minimum (see loop_kernel)
        self.extrema_used: list = []  # the reductions that took that form

    def finish(self) -> None:
        self.b.branch(self.exit)
        self.b.position_at_end(self.exit)
        self.b.ret(self.b.load(self.rc, typ=I32))

    def comment_nodes(self, kern: Kernel) -> None:
        nodes = [n for n, _ in kern.stores] + list(kern.reduces)
        if kern.node is not None:
            nodes.append(kern.node)
        for n in nodes:
            irtext.comment(self.b, describe(self.g, n))

    # --- helpers ----------------------------------------------------------------
    def alloca(self, ty, name=""):
        with self.b.goto_entry_block():
            return self.b.alloca(ty, name=name)

    def no_unroll_loop_id(self) -> ir.values.MDValue:
        """The module's ``!llvm.loop`` node that tells LLVM's unroller to leave a loop alone
        (``llvm.loop.unroll.disable``); one node per module, so the latches of identical
        kernels print the same text (graphc.backend.dedup)."""
        return no_unroll_loop_id(self.module)

    def vectorize_loop_id(self) -> ir.values.MDValue:
        """The module's ``!llvm.loop`` node asking LLVM's loop vectorizer to vectorize a loop
        its cost model would leave scalar (``llvm.loop.vectorize.enable``): for loops whose
        scalar form has data-dependent float selects, which x86 code turns into branches."""
        md = getattr(self.module, "_graphc_vectorize", None)
        if md is None:
            on = self.module.add_metadata(
                [ir.MetaDataString(self.module, "llvm.loop.vectorize.enable"), ir.Constant(I1, 1)]
            )
            md = ir.values.MDValue(self.module, [], name=str(len(self.module.metadata)))
            md.operands = (md, on)
            self.module._graphc_vectorize = md
        return md

    def loop(
        self,
        sizes: list,
        body,
        name: str = "i",
        outer_range=None,
        unroll: bool = True,
        vectorize: bool = False,
    ) -> None:
        """Nested counted loops over ``sizes``; ``body(idx_values)`` emits the innermost body.
        ``outer_range`` = (start, end) values restrict the outermost loop (a thread's chunk).
        ``unroll=False`` marks every loop of the nest ``llvm.loop.unroll.disable`` (the loop
        vectorizer still vectorizes and interleaves it; docs/backend.md, "Compile time of
        the LLVM pipeline").  ``vectorize=True`` asks the vectorizer to vectorize the
        innermost loop (:meth:`vectorize_loop_id`)."""
        b = self.b
        idx = []
        exits = []
        for d, size in enumerate(sizes):
            slot = self.alloca(I64, name=f"{name}{d}_slot")
            lo, hi = ir.Constant(I64, 0), ir.Constant(I64, size)
            if d == 0 and outer_range is not None:
                lo, hi = outer_range
            b.store(lo, slot)
            cond = self.fn.append_basic_block(f"{name}{d}_cond")
            body_bb = self.fn.append_basic_block(f"{name}{d}_body")
            done = self.fn.append_basic_block(f"{name}{d}_done")
            b.branch(cond)
            b.position_at_end(cond)
            i = b.load(slot, typ=I64, name=f"{name}{d}")
            b.cbranch(b.icmp_signed("<", i, hi), body_bb, done)
            b.position_at_end(body_bb)
            idx.append(i)
            exits.append((slot, cond, done, i))
        body(idx)
        loop_id = None if unroll or UNROLL_ALL else self.no_unroll_loop_id()
        for k, (slot, cond, done, i) in enumerate(reversed(exits)):
            b.store(b.add(i, ir.Constant(I64, 1), flags=["nsw", "nuw"]), slot)
            latch = b.branch(cond)
            if k == 0 and vectorize:
                latch.set_metadata("llvm.loop", self.vectorize_loop_id())
            elif loop_id is not None:
                latch.set_metadata("llvm.loop", loop_id)
            b.position_at_end(done)

    def offset(self, base: int, strides, idx) -> ir.Value:
        b = self.b
        acc = ir.Constant(I64, base)
        for st, i in zip(strides, idx):
            if st == 0:
                continue
            term = i if st == 1 else b.mul(i, ir.Constant(I64, st), flags=["nsw"])
            acc = b.add(acc, term, flags=["nsw"])
        return acc

    def ptr(self, buf, dtype: np.dtype, off: ir.Value):
        return self.b.gep(self.ptrs[buf], [off], source_etype=mem_type(dtype))

    def load(self, buf, dtype: np.dtype, off: ir.Value, name: str = "") -> ir.Value:
        v = self.b.load(self.ptr(buf, dtype, off), typ=mem_type(dtype), name=name)
        if dtype.kind == "b":
            v = self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
        return v

    def store(self, buf, dtype: np.dtype, off: ir.Value, v: ir.Value) -> None:
        if dtype.kind == "b":
            v = self.b.zext(v, I8)
        self.b.store(v, self.ptr(buf, dtype, off))

    def convert(self, v: ir.Value, src: np.dtype, dst: np.dtype) -> ir.Value:
        b = self.b
        if src == dst:
            return v
        if dst.kind == "b":
            if src.kind == "f":
                return b.fcmp_unordered("!=", v, ir.Constant(reg_type(src), 0.0))
            return b.icmp_signed("!=", v, ir.Constant(reg_type(src), 0))
        dt = reg_type(dst)
        if src.kind == "b":
            return b.uitofp(v, dt) if dst.kind == "f" else b.zext(v, dt)
        if src.kind == "f" and dst.kind == "f":
            return b.fpext(v, dt) if dst.itemsize > src.itemsize else b.fptrunc(v, dt)
        if src.kind in "iu" and dst.kind == "f":
            return b.sitofp(v, dt)
        if src.kind == "f" and dst.kind in "iu":
            # eager's rule (numpy's on x86): NaN and values out of range give the integer
            # minimum; fptosi only ever sees values in range (else it is poison)
            lo = int(np.iinfo(dst).min)
            ft = reg_type(src)
            ok = b.and_(
                b.fcmp_ordered(">=", v, ir.Constant(ft, float(lo))),
                b.fcmp_ordered("<", v, ir.Constant(ft, -float(lo))),
            )
            safe = b.select(ok, v, ir.Constant(ft, 0.0))
            return b.select(ok, b.fptosi(safe, dt), ir.Constant(dt, lo))
        if dst.itemsize > src.itemsize:
            return b.sext(v, dt)
        return b.trunc(v, dt)

    # --- scalar op code ---------------------------------------------------------------
    def math(self, name: str, t: ir.Type, *args) -> ir.Value:
        return self.b.call(self.vecmath().get_function(self.module, name, t), list(args))

    @staticmethod
    def vecmath() -> Any:
        """The module graphc.backend.vecmath, imported at its first use (see
        :func:`vecmath_module`)."""
        return _VECMATH[0] if _VECMATH else vecmath_module()

    def isnan(self, v):
        return self.b.fcmp_unordered("uno", v, v)

    def emit_op(self, n: int, vals: list, in_dtypes: list) -> ir.Value:
        """The value of elementwise node ``n`` from its operands' register values: the
        op's scalar lowering (graphc.backend.lowering)."""
        self.low.current_node = n
        d = self.g.nx.nodes[n]
        low = lowering.get(d["op"], describe(self.g, n))
        if low.scalar is None:
            raise UnsupportedOpError(f"{describe(self.g, n)}: no scalar lowering for {d['op']}")
        return low.scalar(self, Elem(self, n, d, vals, in_dtypes))

    def icmp(self, op: str, x, y, name: str = ""):
        """Integer comparison: signed, except for bools (i1), where True is 1, not -1."""
        cmp = self.b.icmp_unsigned if x.type == I1 else self.b.icmp_signed
        return cmp(op, x, y, name=name)

    def clamp_to(self, x, beyond: str, bound, fl):
        """``bound`` where ``x`` is beyond it, else ``x`` -- also on a tie (relu(-0.0) is
        -0.0) and for NaN, as PyTorch's relu and clamp."""
        cmp = self.b.fcmp_ordered(beyond, x, bound) if fl else self.icmp(beyond, x, bound)
        return self.b.select(cmp, bound, x)

    def max_of(self, x, y, fl):
        b = self.b
        if fl:  # NaN in either operand propagates, as numpy.maximum
            return b.select(b.or_(b.fcmp_ordered(">", x, y), self.isnan(x)), x, y)
        return b.select(self.icmp(">", x, y), x, y)

    def min_of(self, x, y, fl):
        b = self.b
        if fl:
            return b.select(b.or_(b.fcmp_ordered("<", x, y), self.isnan(x)), x, y)
        return b.select(self.icmp("<", x, y), x, y)

    # --- values inside a loop over an index space ----------------------------------------
    # --- loop kernels: elementwise stores + reductions over one space ---------------------
    def loop_kernel(self, kern: Kernel) -> None:
        """The loop nest of ``kern``.  With sin/cos in it, the vectorized loop runs first
        and flags arguments beyond the vector code's accurate range; if one was, the whole
        kernel runs again with exact sin/cos (libm calls: scalar, but only then).  Running
        twice is safe: a kernel writes no buffer it reads -- except in place, where the
        exact version runs alone."""
        g = self.g
        trig = numel(kern.space) and any(
            g.nx.nodes[n]["op"] in ("sin", "cos")
            for n in self.plan.expr_nodes(self.plan.kernel_roots(kern))
        )
        if not trig:
            if FAST_EXTREMA and self.par is None and not self.in_place and numel(kern.space):
                self._fast_extrema_kernel(kern)
            else:
                self._loop_kernel(kern)
            return
        if self.in_place:
            self.trig_exact = True
            self._loop_kernel(kern)
            return
        b = self.b
        self.trig_flag = self.alloca(I8, name="trig_beyond")
        b.store(ir.Constant(I8, 0), self.trig_flag)
        self._loop_kernel(kern)
        flag, self.trig_flag = self.trig_flag, None
        again = self.fn.append_basic_block("exact_trig")
        done = self.fn.append_basic_block("trig_done")
        b.cbranch(b.icmp_unsigned("!=", b.load(flag, typ=I8), ir.Constant(I8, 0)), again, done)
        b.position_at_end(again)
        self.trig_exact = True
        self._loop_kernel(kern)
        self.trig_exact = False
        b.branch(done)
        b.position_at_end(done)

    def _fast_extrema_kernel(self, kern: Kernel) -> None:
        """The loop nest of ``kern`` with its float max/min rows reduced by
        ``llvm.maximum``/``llvm.minimum``, which LLVM vectorizes (the exact step, "a later
        element wins when greater or NaN", is a compare-and-select chain it keeps scalar).

        The two differ only where the result is a zero or NaN: ``maximum`` makes +0.0 win
        over -0.0 wherever they are, the exact step keeps the first zero met; of several
        NaNs the exact step keeps the last.  So after the loop every result is checked:
        if a max is +0.0 (a min -0.0) or any is NaN, the whole kernel runs again with the
        exact step (safe: a kernel writes no buffer it reads, and in-place kernels never
        get here).  A max that is -0.0 is exact either way (no +0.0 was in its row)."""
        b = self.b
        self.extrema_fast, self.extrema_used = True, []
        self._loop_kernel(kern)
        self.extrema_fast = False
        used, self.extrema_used = self.extrema_used, []
        if not used:
            return
        flag = self.alloca(I8, name="extrema_ambiguous")
        b.store(ir.Constant(I8, 0), flag)
        for r in used:
            d = self.g.nx.nodes[r]
            dt = np.dtype(d["dtype"])
            ity = ir.IntType(8 * dt.itemsize)
            zero_bits = 0 if reduction(d["op"]).combine == "max" else 1 << (8 * dt.itemsize - 1)

            def check(ix, r=r, dt=dt, ity=ity, zero_bits=zero_bits):
                v = self.load(r, dt, ix[0])
                bad = b.or_(
                    self.isnan(v),
                    b.icmp_unsigned("==", b.bitcast(v, ity), ir.Constant(ity, zero_bits)),
                )
                b.store(b.or_(b.load(flag, typ=I8), b.zext(bad, I8)), flag)

            self.loop([numel(d["shape"])], check, name=f"chk_n{r}_", unroll=False)
        again = self.fn.append_basic_block("exact_extrema")
        done = self.fn.append_basic_block("extrema_done")
        b.cbranch(b.icmp_unsigned("!=", b.load(flag, typ=I8), ir.Constant(I8, 0)), again, done)
        b.position_at_end(again)
        self._loop_kernel(kern)
        b.branch(done)
        b.position_at_end(done)

    def _loop_kernel(self, kern: Kernel) -> None:
        plan, g, b = self.plan, self.g, self.b
        space = kern.space
        if numel(space) == 0:
            self._empty_reductions(kern)
            return
        stores = {n for n, dest in kern.stores if dest == n}
        roots = plan.kernel_roots(kern)
        computed_roots = [
            r for r in roots if r in stores or (r not in plan.views and r not in plan.scalars)
        ]
        vecs, red_out, full = self._access_strides(kern, roots, computed_roots)
        sizes, merged = _merge_dims(space, vecs)

        def remap(st):
            return merged(st)

        # a parallel chunk owns rows [start, end) of the outer merged dim, and with them
        # rows [start * s0, end * s0) of every kept-dims reduction's output (s0: its
        # stride over that dim; parallel_policy.rows_parallel_ok keeps dim 0)
        rows = None
        if self.par is not None:
            rows = {}
            for r in kern.reduces:
                if not full[r]:
                    s0 = remap(red_out[r])[0]
                    if s0 == 0:
                        raise AssertionError(f"parallel row reduction %{r} reduces the outer dim")
                    rows[r] = tuple(b.mul(p, ir.Constant(I64, s0)) for p in self.par[:2])
        self.full = full
        accs = self._init_accumulators(kern, full, rows)

        def body(idx):
            memo: dict = {}
            # loads through merged views: build per-node access strides lazily
            self._compute_merged(computed_roots, idx, memo, remap, space)
            # every load of the iteration comes before its first store: an output written
            # over an input (plan.inplace) must not be read back by a reduction or another
            # store of the same iteration as if it were that input
            stored = []
            for n, dest in kern.stores:
                dt = np.dtype(g.nx.nodes[n]["dtype"])
                if dest == n and n in plan.copies:
                    src = plan.copies[n]
                    if src is None:
                        v = const(dt, plan.scalars[n].item())
                    else:
                        v = self.load(
                            src.buf,
                            dt,
                            self.offset(src.offset, remap(src.broadcast_to(space)), idx),
                            name=f"cp_n{n}",
                        )
                elif dest == n:
                    v = memo[n]
                else:
                    v = self._merged_leaf(n, idx, memo, remap, space)
                stored.append((dest, dt, v))
            reduced = [
                self._merged_leaf(g.nx.nodes[r]["operands"][0], idx, memo, remap, space)
                for r in kern.reduces
            ]
            for dest, dt, v in stored:
                if dest in plan.reuse:
                    # stored over the operand it selects from (``where(m, 0, g)`` over
                    # g): opaque, or LLVM makes it a store only where m holds, which x86
                    # vectorizes as vmaskmovps (microcoded on AMD: 3.4x slower loop)
                    v = _freeze(b, v)
                self.store(dest, dt, self.offset(0, remap(cstrides(space)), idx), v)
            for r, v in zip(kern.reduces, reduced):
                d = g.nx.nodes[r]
                src = d["operands"][0]
                sdt = np.dtype(g.nx.nodes[src]["dtype"])
                dt = np.dtype(d["dtype"])
                acc_t, _ = accumulator(d["op"], dt)
                v = self.convert(v, sdt, acc_t)
                if full[r]:
                    cur = b.load(accs[r], typ=reg_type(acc_t))
                    b.store(self._combine(d["op"], cur, v, acc_t), accs[r])
                else:
                    off = self.offset(0, remap(red_out[r]), idx)
                    if _same_in_output_type(d["op"], sdt, dt, acc_t):
                        # fptrunc(fpext(a) + fpext(b)) is a + b rounded once: add in the
                        # output's type, so LLVM sees a plain (reassociable) reduction over
                        # the row, keeps it in a register and vectorizes the loop (with its
                        # exp: a softmax row sum ran scalar through float64 round trips)
                        v = self.convert(v, acc_t, dt)
                        self.store(r, dt, off, self._combine(d["op"], self.load(r, dt, off), v, dt))
                        continue
                    cur = self.convert(self.load(r, dt, off), dt, acc_t)
                    fast = (
                        self.extrema_fast
                        and acc_t.kind == "f"
                        and acc_t == dt == sdt
                        and reduction(d["op"]).combine in ("max", "min")
                    )
                    if fast and r not in self.extrema_used:
                        self.extrema_used.append(r)
                    self.store(
                        r,
                        dt,
                        off,
                        self.convert(self._combine(d["op"], cur, v, acc_t, fast), acc_t, dt),
                    )

        if self.par is not None:
            self.outer_size = sizes[0]
            self.loop(sizes, body, outer_range=(self.par[0], self.par[1]), unroll=False)
            self._store_partials(kern, accs, full)
            self._scale_means(kern, rows)
            self.kern = kern
            return
        self.loop(sizes, body, unroll=False)
        self._reduction_epilogues(kern, accs, full)

    def _access_strides(self, kern: Kernel, roots: list, computed_roots: list) -> tuple:
        """The stride vectors of every access of the loop (to merge dims that are
        contiguous for all of them), and per reduction its output strides and whether
        it reduces to one element: (vectors, {node: strides}, {node: full})."""
        plan, g = self.plan, self.g
        space = kern.space
        vecs = []
        for n in plan.expr_nodes(computed_roots):
            for o in g.nx.nodes[n]["operands"]:
                if o in plan.views and o not in computed_roots:
                    vecs.append(plan.views[o].broadcast_to(space))
        for r in roots:
            if r not in computed_roots and r in plan.views:
                vecs.append(plan.views[r].broadcast_to(space))
        for n, dest in kern.stores:
            if dest == n and n in plan.copies and plan.copies[n] is not None:
                vecs.append(plan.copies[n].broadcast_to(space))
            elif dest != n and n in plan.views:
                vecs.append(plan.views[n].broadcast_to(space))
        vecs.append(cstrides(space))
        red_out = {}
        full = {}
        for r in kern.reduces:
            axes = g.nx.nodes[r]["attrs"]["axis"]
            keep = tuple(1 if i in axes else s for i, s in enumerate(space))
            # a size-1 dim that is kept indexes only 0: stride 0, so a reduction to one
            # element (a (N, 1) input summed over dim 0) is a full one, whatever its shape
            ost = tuple(0 if k == 1 else st for k, st in zip(keep, cstrides(keep)))
            red_out[r] = ost
            full[r] = all(s == 0 for s in ost)
            vecs.append(ost)
        return vecs, red_out, full

    def _init_accumulators(self, kern: Kernel, full: dict, rows: Optional[dict] = None) -> dict:
        """Before the loop: an accumulator slot per full reduction ({node: slot}), and
        the outputs of the other reductions filled with the identity (in a parallel
        chunk, only its ``rows[node]`` = (start, end) range of the output)."""
        g, b = self.g, self.b
        accs = {}
        for r in kern.reduces:
            d = g.nx.nodes[r]
            dt = np.dtype(d["dtype"])
            acc_t, ident = accumulator(d["op"], dt)
            if full[r]:
                slot = self.alloca(reg_type(acc_t), name=f"acc_n{r}")
                b.store(ident, slot)
                accs[r] = slot
            else:
                n_out = numel(d["shape"])
                self.loop(
                    [n_out],
                    lambda ix, r=r, dt=dt, ident=ident: self.store(
                        r,
                        dt,
                        ix[0],
                        self.convert(ident, accumulator(g.nx.nodes[r]["op"], dt)[0], dt),
                    ),
                    name=f"init_n{r}_",
                    outer_range=None if rows is None else rows[r],
                )
        return accs

    def _store_partials(self, kern: Kernel, accs: dict, full: dict) -> None:
        """After a parallel loop's chunk: its partial of every full reduction, into the
        thread's 8-byte slots that the entry folds (see _parallel_ok, combine_partials);
        a row reduction's chunk wrote its own rows of the output."""
        g, b = self.g, self.b
        for k, r in enumerate(kern.reduces):
            if not full[r]:
                continue
            d = g.nx.nodes[r]
            acc_t, _ = accumulator(d["op"], np.dtype(d["dtype"]))
            v = b.load(accs[r], typ=reg_type(acc_t))
            if acc_t.kind == "f":
                v = b.bitcast(v, I64)  # 8-byte slots (see _parallel_ok)
            b.store(v, b.gep(self.par[2], [ir.Constant(I64, k)], source_etype=I64))

    def _reduction_epilogues(self, kern: Kernel, accs: dict, full: dict) -> None:
        """After the loop: write full accumulators to their outputs, scale means."""
        g, b = self.g, self.b
        for r in kern.reduces:
            d = g.nx.nodes[r]
            dt = np.dtype(d["dtype"])
            acc_t, _ = accumulator(d["op"], dt)
            count = numel(g.nx.nodes[d["operands"][0]]["shape"]) // max(numel(d["shape"]), 1)
            if full[r]:
                v = b.load(accs[r], typ=reg_type(acc_t))
                if reduction(d["op"]).mean:
                    v = b.fmul(
                        v, ir.Constant(reg_type(acc_t), 1.0 / count if count else float("nan"))
                    )
                self.store(r, dt, ir.Constant(I64, 0), self.convert(v, acc_t, dt))
            elif reduction(d["op"]).mean:
                self._mean_scale_loop(r, dt, count)

    def _scale_means(self, kern: Kernel, rows: dict) -> None:
        """After a parallel chunk: divide its rows of each kept-dims mean by the count."""
        g = self.g
        for r in kern.reduces:
            d = g.nx.nodes[r]
            if r not in rows or not reduction(d["op"]).mean:
                continue
            dt = np.dtype(d["dtype"])
            count = numel(g.nx.nodes[d["operands"][0]]["shape"]) // max(numel(d["shape"]), 1)
            self._mean_scale_loop(r, dt, count, rows[r])

    def _mean_scale_loop(self, r: Any, dt: np.dtype, count: int, outer_range: Any = None) -> None:
        """A loop dividing a kept-dims mean's output ``r`` by ``count`` (NaN for 0), over
        all its elements or, in a parallel chunk, over ``outer_range`` of them."""
        b = self.b
        scale = ir.Constant(reg_type(dt), 1.0 / count if count else float("nan"))
        self.loop(
            [numel(self.g.nx.nodes[r]["shape"])],
            lambda ix: self.store(r, dt, ix[0], b.fmul(self.load(r, dt, ix[0]), scale)),
            name=f"mean_n{r}_",
            outer_range=outer_range,
        )

    def combine_partials(self, b, fn, partials, nt, nred: int, data, arena, i: int) -> None:
        """In the entry: fold per-thread partial reductions (thread order) into outputs
        (full reductions only: a row reduction's chunks wrote their rows themselves)."""
        g = self.g
        low = self.low
        for k, r in enumerate(self.kern.reduces):
            if not self.full.get(r, True):
                continue
            d = g.nx.nodes[r]
            dt = np.dtype(d["dtype"])
            acc_t, _ = accumulator(d["op"], dt)
            at = reg_type(acc_t)

            def load_part(t):
                p = b.gep(
                    partials,
                    [b.add(b.mul(t, ir.Constant(I64, nred)), ir.Constant(I64, k))],
                    source_etype=I64,
                )
                v = b.load(p, typ=I64)
                return b.bitcast(v, at) if acc_t.kind == "f" else v

            acc = b.alloca(at, name=f"comb_n{r}")
            b.store(load_part(ir.Constant(I64, 0)), acc)
            saved = self.b
            self.b = b  # _combine emits through self.b
            counted_loop(
                b,
                fn,
                ir.Constant(I64, 1),
                nt,
                lambda t: b.store(
                    self._combine(d["op"], b.load(acc, typ=at), load_part(t), acc_t), acc
                ),
                f"k{i}_comb{k}",
            )
            self.b = saved
            v = b.load(acc, typ=at)
            count = numel(g.nx.nodes[d["operands"][0]]["shape"])
            if reduction(d["op"]).mean:
                v = b.fmul(v, ir.Constant(at, 1.0 / count if count else float("nan")))
            saved = self.b
            self.b = b
            v = self.convert(v, acc_t, dt)
            self.b = saved
            base = low._base(b, r, data, arena)
            if dt.kind == "b":
                v = b.zext(v, I8)
            b.store(v, b.gep(base, [ir.Constant(I64, 0)], source_etype=mem_type(dt)))

    # merged-dimension variants of leaf loads (strides remapped onto the merged loop dims)
    def _merged_leaf(self, o, idx, memo, remap, space):
        if o in memo:
            return memo[o]
        plan = self.plan
        dt = np.dtype(self.g.nx.nodes[o]["dtype"])
        if o in plan.scalars:
            v = const(dt, plan.scalars[o].item())
        else:
            view = plan.views[o]
            v = self.load(
                view.buf,
                dt,
                self.offset(view.offset, remap(view.broadcast_to(space)), idx),
                name=f"ld_n{o}",
            )
        memo[o] = v
        return v

    def _compute_merged(self, roots, idx, memo, remap, space):
        plan = self.plan
        roots_set = set(roots)
        for n in plan.expr_nodes(roots):
            d = self.g.nx.nodes[n]
            vals, dts = [], []
            for o in d["operands"]:
                if o in memo:
                    vals.append(memo[o])
                else:
                    vals.append(self._merged_leaf(o, idx, memo, remap, space))
                dts.append(np.dtype(self.g.nx.nodes[o]["dtype"]))
            memo[n] = self.emit_op(n, vals, dts)
        return roots_set

    def _combine(self, op, cur, v, acc_t, fast: bool = False):
        b = self.b
        op = reduction(op).combine
        fl = acc_t.kind == "f"
        if fast:  # llvm.maximum/minimum: vectorizable, exact but for zeros and NaNs
            name = "llvm.maximum" if op == "max" else "llvm.minimum"
            ty = reg_type(acc_t)
            fn = self.module.declare_intrinsic(name, [ty], fnty=ir.FunctionType(ty, [ty, ty]))
            return b.call(fn, [cur, _freeze(b, v)])
        if op == "add":
            if fl:
                return b.fadd(cur, v, flags=("reassoc",))
            return b.add(cur, v)
        if op == "mul":
            if fl:
                return b.fmul(cur, v, flags=("reassoc",))
            return b.mul(cur, v)
        if op == "max":
            if fl:
                return b.select(b.or_(b.fcmp_ordered(">", v, cur), self.isnan(v)), v, cur)
            return b.select(self.icmp(">", v, cur), v, cur)
        if op == "min":
            if fl:
                return b.select(b.or_(b.fcmp_ordered("<", v, cur), self.isnan(v)), v, cur)
            return b.select(self.icmp("<", v, cur), v, cur)
        if op == "and":
            return b.and_(cur, v)
        if op == "or":
            return b.or_(cur, v)
        raise AssertionError(op)

    def _empty_reductions(self, kern: Kernel) -> None:
        """Reductions over an empty space: the identity (sum 0, mean nan, all True, any False);
        max and min have none, so only their empty results (over non-empty dims) get here
        (the shape rule refuses the others while tracing, with PyTorch's error)."""
        g = self.g
        for r in kern.reduces:
            d = g.nx.nodes[r]
            dt = np.dtype(d["dtype"])
            if not numel(d["shape"]):
                continue  # an empty result: nothing to write
            if reduction(d["op"]).combine in ("max", "min"):
                raise UnsupportedOpError(
                    f"internal error: {describe(g, r)}: {d['op']} over a "
                    "zero-size dim reached the backend"
                )
            acc_t, ident = accumulator(d["op"], dt)
            v = self.convert(ident, acc_t, dt)
            if reduction(d["op"]).mean:
                v = const(dt, float("nan"))
            self.loop(
                [numel(d["shape"])],
                lambda ix, r=r, dt=dt, v=v: self.store(r, dt, ix[0], v),
                name=f"empty_n{r}_",
            )


def _merge_dims(space: tuple, vecs: list):
    """Merge adjacent loop dims that are contiguous for every access; returns (sizes, remap)."""
    groups = [[i] for i in range(len(space))]
    k = len(groups) - 1
    while k > 0:
        if all(_contig(v, space, groups[k - 1][-1], groups[k]) for v in vecs):
            groups[k - 1] = groups[k - 1] + groups[k]
            groups.pop(k)
        k -= 1
    sizes = [_group_size(space, grp) for grp in groups]

    def remap(st: tuple) -> tuple:
        return tuple(st[grp[-1]] for grp in groups)

    return sizes, remap


def _group_size(space, grp) -> int:
    n = 1
    for i in grp:
        n *= space[i]
    return n


def _contig(v, space, a: int, grp: list) -> bool:
    """Is dim ``a`` followed by the (already merged) dims ``grp`` one linear run in ``v``?"""
    return v[a] == v[grp[-1]] * _group_size(space, grp) and all(
        v[grp[j]] == v[grp[j + 1]] * space[grp[j + 1]] for j in range(len(grp) - 1)
    )
