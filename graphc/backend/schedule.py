"""Scheduling a graph for native code: views, fusion into loop kernels, memory plan.

Every value is either *buffer-backed* (an input, a constant array, a
materialized result, or a view -- offset and strides -- of one of those) or
*fused*: an elementwise value computed inside the loop of the kernel that
consumes it.  A loop kernel iterates over one index space and stores
elementwise results and/or accumulates reductions; kernels over the same space
that do not depend on each other are merged (multi-output fusion), so a
forward chain and its gradient reductions share one pass over memory.
Intermediate buffers live in one arena, reused by liveness.
"""

from __future__ import annotations

import bisect
import heapq
from typing import Optional

import numpy as np

from eager.interop import MAX_BYTES, check_size, ops_of

from ..errors import GraphcError, GraphVerificationError, TooBigError, UnsupportedOpError
from ..ir import Graph, describe, printable
from . import lowering
from .abi import PARALLEL_MIN
from .lowering.reduce import accumulator
from .strided import View, as_matrix, blas_layout, cstrides, numel

# the op classes the scheduler treats alike, from the op records' families
ELEMENTWISE = ops_of("elementwise")  # fused into loop kernels
REDUCE = ops_of("reduce")  # accumulated in loop kernels
ARGREDUCE = ops_of("argreduce")
VIEW_OPS = ops_of("view")  # strides only, no code
# the ops with a kernel of their own (and its kind), and the ops that are views when a
# condition on the node holds (a getitem without index operands), from the lowering table
MATMUL = ops_of("matmul")  # BLAS or loops, operands copied when BLAS can't read them
OWN_KERNEL = {
    op: low.kernel_kind
    for op, low in lowering.LOWERINGS.items()
    if low.kernel is not None and op not in MATMUL
}
_VIEW_IF = {op: low.view_if for op, low in lowering.LOWERINGS.items() if low.view_if}
# structured loops (docs: /work/notes/loops_spec.md): a node of its own kernel that runs its
# body graph's code (scheduled as a Schedule of its own) once per iteration
LOOP_OPS = ("scan", "while")
# their kernels' kinds ("scan" is the kind of cumsum/cumprod's kernels)
LOOP_KINDS = {"scan": "scan_loop", "while": "while_loop"}
NATIVE_DTYPES = frozenset({"float32", "float64", "int64", "int32", "bool"})
ALIGN = 64
#: Relative cost of computing an elementwise op once per element (others: 1), and the
#: cost from which a fused value read by several nodes is stored rather than recomputed
#: in each consumer (see ``Schedule._materialize_shared_costly``).
RECOMPUTE_COST = {
    **dict.fromkeys(
        "exp exp2 expm1 log log2 log10 log1p tanh sigmoid sin cos tan sinh cosh asinh acosh "
        "atanh".split(),
        10,
    ),
    **dict.fromkeys("erf pow atan atan2 asin acos".split(), 20),
}
RECOMPUTE_MAX = 10


class Kernel:
    """One unit of generated code, run in order by the entry point."""

    def __init__(self, kind: str, space: tuple = (), node: Optional[int] = None) -> None:
        self.kind = kind  # loop | matmul | argreduce | getitem | ... | scan_loop | while_loop
        self.space = tuple(space)
        self.node = node  # the node of a non-loop kernel
        self.stores: list = []  # [(node, dest buffer)] elementwise results stored over space
        self.reduces: list = []  # reduce nodes accumulated over space
        self.reads: set = set()  # buffers read
        self.writes: set = set()  # buffers written
        self.scratch: list = []  # [(key, nbytes)]: arena scratch of a scan/while kernel

    def __repr__(self) -> str:
        what = [f"store %{n}" for n, _ in self.stores] + [f"reduce %{n}" for n in self.reduces]
        if self.node is not None and not what:
            what = [f"%{self.node}"]
        if self.kind in LOOP_KINDS.values():
            outs = ", ".join(f"%{b}" for b in sorted(self.writes, key=repr))
            return f"<{self.kind}: %{self.node} -> {outs or 'nothing'}>"
        return f"<{self.kind} {list(self.space)}: {', '.join(what)}>"


class Schedule:
    """The complete schedule of a graph: kernels in order, views, buffers and arena offsets."""

    def __init__(
        self,
        g: Graph,
        fuse: bool = True,
        poison: bool = False,
        inplace: Optional[dict] = None,
        _nesting: int = 0,
        _remat: Optional[dict] = None,
        _order: Optional[list] = None,
    ) -> None:
        self.g = g
        # a node recomputed for late readers (a copy of a cheap elementwise node, see
        # _rematerialize) -> the node it recomputes
        self.remat: dict = dict(_remat or {})
        self.nesting = _nesting  # how many loops' bodies this graph is inside
        self.inplace_requested = dict(inplace or {})  # output index -> input index
        self.inplace: dict = {}  # the pairs found safe: output k written over input i
        self.alias_kernels: set = set()  # kernels whose buffer args may alias
        self.fuse = fuse
        self.poison = poison  # debugging: overwrite arena buffers after their last use
        self.poison_after: dict = {}  # kernel index -> arena buffers whose last use it is
        self.reuse: dict = {}  # arena buffer -> the operand whose slot it is written over
        self.intervals: list = []  # (first kernel, last kernel, buffer, nbytes, offset)
        self.kernel_of: dict = {}  # arena buffer -> the kernel writing it
        self.order = list(_order) if _order is not None else g.topo_order()
        self.pos = {n: i for i, n in enumerate(self.order)}
        self.views: dict = {}  # node -> View for buffer-backed nodes
        self.scalars: dict = {}  # node -> numpy 0-d const
        self.copies: dict = {}  # node -> View to copy from (materialized views)
        self.materialized: set = set()
        self.costly: set = set()  # materialized only to be computed once (see below)
        # sum node -> (its matmul, A as (M, b*K), B as (b*K, N)): a batched product summed
        # over its batch, run as one product (see _summed_product)
        self.summed: dict = {}
        self.out_buffer: dict = {}  # node -> output index it is computed into
        self.kernels: list = []
        self.buffers: dict = {}  # buffer id -> (kind, index/offset, nbytes, dtype)
        self.arena_bytes = 0
        self.loops: dict = {}  # scan/while node -> LoopPlan (its graphs' own schedules)
        self._order_deps: list = []  # _memory_order's kernel dependencies, for _sunk
        if _remat is None:  # a rematerialized plan's graph has the same types
            self._check_dtypes()
        self._classify()
        self._choose_fusion()
        self._build_kernels()
        self._plan_memory()
        self._store_masks_early()
        self._check_bounds()
        self._choose_inplace()
        if _remat is None and fuse and _nesting == 0:
            self._rematerialize()

    # --- helpers ---------------------------------------------------------------
    def nd(self, n: int) -> dict:
        return self.g.nx.nodes[n]

    def shape(self, n: int) -> tuple:
        return tuple(self.nd(n)["shape"])

    def dtype(self, n: int) -> np.dtype:
        return np.dtype(self.nd(n)["dtype"])

    def _check_dtypes(self) -> None:
        """Native dtypes only, and sizes numpy can address: every element offset, byte
        count and loop bound of the generated code then fits in an i64."""
        for n in self.order:
            d = self.nd(n)
            if d["dtype"] not in NATIVE_DTYPES:
                raise UnsupportedOpError(
                    f"{describe(self.g, n)}: dtype {d['dtype']} is not supported by the native "
                    "backend (float32, float64, int64, int32, bool); use backend='interpreter'"
                )
            if numel(d["shape"]) * np.dtype(d["dtype"]).itemsize > MAX_BYTES:  # named lazily
                check_size(d["shape"], d["dtype"], describe(self.g, n), error=TooBigError)

    def _own(self, n: int) -> View:
        shp = self.shape(n)
        return View(n, 0, cstrides(shp), shp)

    def _materialize(self, n: int) -> None:
        """Give a fused value its own contiguous buffer (buffer-backed values stay as they are)."""
        if n in self.views or n in self.scalars:
            return
        self.materialized.add(n)
        self.views[n] = self._own(n)

    def _force_copy(self, n: int) -> None:
        """A contiguous copy of a view or scalar constant, written by a copy kernel."""
        if n in self.views and self.views[n].buf == n:
            return
        if n not in self.views and n not in self.scalars:
            self._materialize(n)
            return
        self.copies[n] = self.views.get(n)
        self.materialized.add(n)
        self.views[n] = self._own(n)

    def _buffer_view(self, n: int) -> View:
        if n in self.scalars:
            self._force_copy(n)
        elif n not in self.views:
            self._materialize(n)
        return self.views[n]

    # --- phase 1: which values are views, which must be materialized ---------------
    def _classify(self) -> None:
        for n in self.order:
            d = self.nd(n)
            op = d["op"]
            a = d["attrs"]
            if op == "input":
                self.views[n] = View(
                    ("in", self.g.inputs.index(n)), 0, cstrides(d["shape"]), d["shape"]
                )
            elif op == "const":
                v = a["value"]
                if v.ndim == 0:
                    self.scalars[n] = v
                else:
                    self.views[n] = View(("const", n), 0, cstrides(v.shape), v.shape)
            elif op in ("reshape", "expand") and d["operands"][0] in self.scalars:
                self.scalars[n] = self.scalars[d["operands"][0]]  # still one value
            elif op in VIEW_OPS or (op in _VIEW_IF and _VIEW_IF[op](d)):
                src = d["operands"][0]
                v = self._buffer_view(src)
                nv = self._apply_view(op, v, a, n)
                if nv is None:  # reshape of a non-contiguous view: copy first
                    self._force_copy(src)
                    nv = self._apply_view(op, self.views[src], a, n)
                self.views[n] = nv
            elif op in ELEMENTWISE:
                pass
            elif op in LOOP_OPS:
                self._classify_loop(n)
            elif op == "loop_out":
                if len(d["operands"]) != 1 or d["operands"][0] not in self.loops:
                    raise GraphVerificationError(
                        f"{describe(self.g, n)}: loop_out reads the token of a scan or while"
                    )
                first = self.loops[d["operands"][0]].outs[a["index"]]
                if first == n:
                    self._materialize(n)
                else:  # a second loop_out of the same result: the first one's buffer
                    self.views[n] = View(first, 0, cstrides(d["shape"]), d["shape"])
            elif op in REDUCE:
                if n in self.summed:
                    self._materialize(n)  # its product's kernel writes it
                    continue
                if not self.fuse:
                    self._buffer_view(d["operands"][0])
                self._materialize(n)
            elif op == "matmul" and self._summed_product(n):
                pass  # computed by its sum's kernel
            elif op in MATMUL:
                # the last two operands are the matrices; addmm/baddbmm's added input
                # (operand 0) is read by a loop that fills C first, in any layout
                for o in d["operands"][:-2]:
                    self._buffer_view(o)
                for side, o in enumerate(d["operands"][-2:]):
                    v = self._buffer_view(o)
                    if self.dtype(o).kind == "f" and not _gemm_ok(v, side):
                        self._force_copy(o)
                self._materialize(n)
            elif op in OWN_KERNEL:
                for o in d["operands"]:
                    self._buffer_view(o)
                self._materialize(n)
            else:
                raise UnsupportedOpError(f"{describe(self.g, n)}: op {op!r} has no native lowering")
        for o in self.g.outputs:
            self._materialize(o)

    def _summed_product(self, m: int) -> bool:
        """A batched ``matmul`` read only by a ``sum`` over all its batch dims (the weight
        gradient of a linear layer on 3-D input: ``sum_b A_b^T @ G_b``) is one product
        ``[A_0 .. A_b] @ [B_0; ..; B_b]`` with K' = b*K, when the batch dims and K of each
        operand merge into one stride (no copy): one BLAS call instead of b small ones,
        a (b, M, N) intermediate and a pass summing it.  Records the sum in
        :attr:`summed`; BLAS accumulates the b*K terms in the data's precision, as
        PyTorch's single product for this gradient does (sums are reassociated)."""
        g, d = self.g, self.nd(m)
        us = g.users(m)
        if len(us) != 1 or m in g.outputs or not self.fuse:
            return False
        n = us[0]
        sd = self.nd(n)
        if sd["op"] != "sum" or list(sd["operands"]) != [m] or sd["dtype"] != d["dtype"]:
            return False
        dt = np.dtype(d["dtype"])
        a_id, b_id = d["operands"]
        shp = self.shape(m)
        nb = len(shp) - 2
        if dt.kind != "f" or nb < 1 or self.shape(a_id)[:-2] != shp[:-2]:
            return False
        if self.shape(b_id)[:-2] != shp[:-2] or self.dtype(a_id) != dt or self.dtype(b_id) != dt:
            return False
        if numel(shp) == 0 or numel(self.shape(a_id)) == 0:
            return False
        axes = {int(a) % len(shp) for a in sd["attrs"]["axis"]}
        batch = shp[:nb]
        if not axes <= set(range(nb)) or any(batch[i] != 1 for i in range(nb) if i not in axes):
            return False
        va, vb = self._buffer_view(a_id), self._buffer_view(b_id)
        M, K, N = shp[-2], self.shape(a_id)[-1], shp[-1]
        # A_b: (M, K); [A_0 .. A_b] indexes columns by (batch..., k) row-major
        ka = _merged_stride(batch + (K,), va.strides[:nb] + (va.strides[-1],))
        kb = _merged_stride(batch + (K,), vb.strides[:nb] + (vb.strides[-2],))
        if ka is None or kb is None:
            return False
        kk = numel(batch) * K
        a2 = View(va.buf, va.offset, (va.strides[-2], ka), (M, kk))
        b2 = View(vb.buf, vb.offset, (kb, vb.strides[-1]), (kk, N))
        if blas_layout(a2) is None or blas_layout(b2) is None:
            return False
        if max(M, N, kk) > np.iinfo(np.int32).max:
            return False
        self.summed[n] = (m, a2, b2)
        return True

    def _classify_loop(self, n: int) -> None:
        """A scan/while node: check it against the loop contract (a malformed node is
        refused before any code trusts its sizes), schedule its graphs, and give the
        operands contiguous buffers (the body reads them through plain pointers)."""
        lp = LoopPlan(self, n)
        self.loops[n] = lp
        for o in self.nd(n)["operands"]:
            v = self._buffer_view(o)
            if not v.contiguous():
                self._force_copy(o)

    def _apply_view(self, op: str, v: View, a: dict, n: int) -> Optional[View]:
        return lowering.get(op, describe(self.g, n)).view(v, a)

    # --- phase 2: fusion decisions ------------------------------------------------------
    def _choose_fusion(self) -> None:
        ew = [n for n in self.order if self.nd(n)["op"] in ELEMENTWISE]
        if not self.fuse:
            for n in ew:
                self._materialize(n)
            return
        users: dict = {n: [] for n in self.order}
        for n in self.order:
            for o in self.nd(n)["operands"]:
                users[o].append(n)
        spaces: dict = {}
        for n in reversed(ew):
            if n in self.materialized:
                spaces[n] = {self.shape(n)}
                continue
            s = set()
            for u in users[n]:
                uop = self.nd(u)["op"]
                if u in self.materialized and uop in ELEMENTWISE:
                    s.add(self.shape(u))
                elif uop in REDUCE:
                    s.add(self.shape(n))
                elif u in spaces:
                    s |= spaces[u]
                else:
                    s.add(self.shape(n))
            if len(s) > 1:
                self._materialize(n)
                s = {self.shape(n)}
            spaces[n] = s
        self._materialize_shared_costly(ew, users, spaces)
        # an elementwise value that nothing consumes and is not an output is dead code
        # (the optimizer removes it); it needs no kernel.

    def _materialize_shared_costly(self, ew: list, users: dict, spaces: dict) -> None:
        """Store a costly fused value that several nodes read, instead of recomputing it
        in every kernel that consumes it.  A fused value is recomputed per consumer
        kernel: cheap for ``x + b``, but a training step's softmax computed ``exp`` four
        times over the attention scores (the row sum, the division, two gradient
        kernels) and GELU's gradient recomputed ``erf``.  The cost of a value is its
        op's (:data:`RECOMPUTE_COST`) plus its fused operands'; from
        :data:`RECOMPUTE_MAX` on, a value with two or more users is materialized (a store
        and a load per user cost less than one more exp), and so is a value fused into a
        loop over more elements than it has (a broadcast: Adam's bias corrections
        ``1 - beta ** step`` are two float64 ``pow`` per parameter, which the loop over
        the parameter's elements recomputed per element).  Consumers in the same space
        still run in the producing kernel (:meth:`_reads_in_register`), reading the value
        from a register."""
        ew_set = set(ew)
        cost: dict = {}
        for n in ew:  # topological order
            if n in self.materialized:
                continue  # its users load it: recomputing it costs nothing
            d = self.nd(n)
            c = RECOMPUTE_COST.get(d["op"], 1)
            for o in set(d["operands"]):
                if o in ew_set:
                    c += cost.get(o, 0)
            wider = any(numel(sp) > numel(self.shape(n)) for sp in spaces.get(n, ()))
            if c >= RECOMPUTE_MAX and (wider or len(set(users[n])) >= 2):
                self._materialize(n)
                self.costly.add(n)
                continue
            cost[n] = c

    # --- phase 3: kernels in dependency order, merged by space ----------------------------
    def _build_kernels(self) -> None:
        produced_by: dict = {}  # buffer id -> kernel index
        groups: dict = {}  # space -> list of kernel indices (loop kernels)
        first_out = {}  # materialized node -> output index it is computed into
        done_out = set()  # output indices that need no copy
        for k, o in enumerate(self.g.outputs):
            if o in self.materialized and self.views[o].buf == o and o not in first_out:
                first_out[o] = k
                done_out.add(k)
        for k, o in enumerate(self.g.outputs):
            # an output that is a reshape of a materialized result: compute into the output
            v = self.views.get(o)
            if k in done_out or v is None or not isinstance(v.buf, int) or v.buf == o:
                continue
            b = v.buf
            if (
                b in self.materialized
                and b not in first_out
                and b not in self.copies
                and v.offset == 0
                and v.contiguous()
                and numel(v.shape) == numel(self.shape(b))
            ):
                first_out[b] = k
                done_out.add(k)
        self.out_buffer = first_out
        for n in self.order:
            if n in self.loops:
                kern = self.loops[n].kernel()
                kern.reads = self._reads(kern)
                self.kernels.append(kern)
                for b in kern.writes:
                    produced_by[b] = len(self.kernels) - 1
                continue
            if n not in self.materialized or self.nd(n)["op"] == "loop_out":
                continue
            d = self.nd(n)
            op = d["op"]
            if n in self.copies or op in ELEMENTWISE:
                space = self.shape(n)
                kern = Kernel("loop", space)
                kern.stores.append((n, n))
            elif op in REDUCE and n in self.summed:
                kern = Kernel("matmul", self.shape(n), n)
            elif op in REDUCE:
                space = self.shape(d["operands"][0])
                kern = Kernel("loop", space)
                kern.reduces.append(n)
            elif op in MATMUL:
                kern = Kernel("matmul", self.shape(n), n)
            elif op in ARGREDUCE:
                kern = Kernel("argreduce", self.shape(d["operands"][0]), n)
            elif op in OWN_KERNEL:
                kern = Kernel(OWN_KERNEL[op], self.shape(n), n)
            else:
                continue  # inputs and constants
            kern.writes.add(n)
            kern.reads = self._reads(kern)
            dep = max((produced_by.get(b, -1) for b in kern.reads), default=-1)
            target = None
            if kern.kind == "loop" and self.fuse and numel(kern.space) > 0 and n not in self.remat:
                for gi in reversed(groups.get(kern.space, [])):
                    if gi > dep or (gi == dep and self._reads_in_register(kern, gi, produced_by)):
                        target = gi
                    break
            if target is not None:
                host = self.kernels[target]
                host.stores += kern.stores
                host.reduces += kern.reduces
                host.reads |= kern.reads
                host.writes |= kern.writes
                produced_by[n] = target
            else:
                self.kernels.append(kern)
                produced_by[n] = len(self.kernels) - 1
                if kern.kind == "loop":
                    groups.setdefault(kern.space, []).append(len(self.kernels) - 1)
        # outputs not computed straight into their output array: copy (inputs, views,
        # constants, an output listed twice)
        for k, o in enumerate(self.g.outputs):
            if k in done_out:
                continue
            kern = Kernel("loop", self.shape(o))
            kern.stores.append((o, ("out", k)))
            kern.writes.add(("out", k))
            kern.reads = {self.views[o].buf} if o in self.views else set()
            self.kernels.append(kern)
        self._drop_unread_stores()

    def _store_masks_early(self) -> None:
        """Store a comparison a loop kernel computes from one float buffer as bytes, in
        the earlier kernel that stores that buffer, when the arena gets smaller.

        A ReLU's gradient ``where(y <= 0, 0, g)`` reads the forward's output ``y`` (4
        bytes an element) in the backward, so ``y`` stays live while the incoming
        gradient is made.  The mask ``y <= 0`` computed where ``y`` is stored (from the
        register, no load) and kept as 1 byte an element lets ``y`` go after its last
        other reader (the weight gradient).  Candidates: a bool value of a loop kernel's
        whole space whose fused expression reads nothing but one buffer (and scalars),
        stored at the index it is read by a loop over the same space.  Each is kept
        only when the whole plan (:meth:`_plan_memory`, kernel order included) needs a
        smaller arena with it; the arithmetic is the same either way."""
        if not self.fuse:
            return
        tried = 0
        seen: set = set()
        for kern in list(self.kernels):
            if kern.kind != "loop" or numel(kern.space) == 0:
                continue
            stores = {n for n, _ in kern.stores}
            computed = [
                r
                for r in self.kernel_roots(kern)
                if r in stores or (r not in self.views and r not in self.scalars)
            ]
            for n in self.expr_nodes(computed):
                if n in seen or n in self.views or n in self.scalars or n in stores:
                    continue
                if self.nd(n)["dtype"] != "bool" or self.shape(n) != kern.space:
                    continue
                seen.add(n)
                if tried >= MASK_TRIES:
                    return
                src = self._mask_source(n, kern.space)
                if src is None:
                    continue
                produced_by: dict = {}
                for i, k in enumerate(self.kernels):
                    for b in k.writes:
                        produced_by[b] = i
                pi = produced_by.get(src)
                ki = next(i for i, k in enumerate(self.kernels) if k is kern)
                if pi is None or pi >= ki:
                    continue
                host = self.kernels[pi]
                if host.kind != "loop" or host.space != kern.space or (src, src) not in host.stores:
                    continue
                probe = Kernel("loop", kern.space)
                probe.stores.append((n, n))
                if not self._reads_in_register(probe, pi, produced_by):
                    continue
                tried += 1
                state = self._plan_state()
                kstate = [(k, list(k.stores), set(k.writes), set(k.reads)) for k in self.kernels]
                self.views[n] = self._own(n)
                self.materialized.add(n)
                host.stores.append((n, n))
                host.writes.add(n)
                self._refresh_reads()
                self._reset_plan()
                self._plan_memory()
                if self.arena_bytes < state[-1]:
                    continue
                del self.views[n]  # no smaller: undo
                self.materialized.discard(n)
                for k, st, wr, rd in kstate:
                    k.stores, k.writes, k.reads = st, wr, rd
                self.kernels = state[0]
                self._restore_plan(state)

    # --- rematerialization: recompute a cheap value for its late readers --------------
    def _rematerialize(self) -> None:
        """Recompute cheap elementwise values for the kernels that read them after the
        arena's peak, so the stored values die at their last readers before the peak,
        when the whole plan then needs a smaller arena.

        A training step keeps forward values for the backward: softmax's probabilities
        ``exp / sum`` are a forward product's operand and, transposed, a backward
        product's; a GELU's output ``x * Phi`` and a layer norm's output likewise
        (``exp``, ``sum``, ``x``, the ``erf`` term, the norm's input, mean and
        reciprocal deviation are kept anyway, for the gradient formulas).  Each such
        value lived from the forward to the backward, across the peak.  A copy of the
        node (the same op on the same operands, its fused operands recomputed with it, as
        every kernel recomputes a fused value: the same code, so the same bits) is read by
        the late readers instead, and runs after every reader of the original.  A
        candidate (:meth:`_remat_candidates`) is live at the peak, has readers before and
        after it, and is computed by a loop kernel from nothing but exact cheap ops
        (:data:`REMAT_OPS`) over scalars, constants, inputs and buffers live at its
        first late reader anyway.  All candidates of a plan are recomputed together in
        one new plan, for at most :data:`REMAT_ROUNDS` rounds (each plans the graph
        again; the peak moves); a new plan is kept only when its arena is smaller and it
        writes the same outputs over the same inputs (in-place updates are decided per
        plan)."""
        best = self
        tried: set = set()
        for _ in range(REMAT_ROUNDS):
            cands = best._remat_candidates(tried)
            if not cands:
                break
            g2 = best.g.copy()
            order = list(best.order)
            remat = dict(best.remat)
            for v, late in cands:
                tried.add(v)
                d = best.nd(v)
                c = g2.add_node(
                    d["op"],
                    d["operands"],
                    d["attrs"],
                    shape=d["shape"],
                    dtype=d["dtype"],
                    src=d.get("src", ""),
                    role=d.get("role", "forward"),
                    by="remat",
                )
                for u in late:
                    ops = g2.nx.nodes[u]["operands"]
                    g2.set_operands(u, [c if o == v else o for o in ops])
                first = min(order.index(u) for u in late)
                order.insert(first, c)
                remat[c] = best.remat.get(v, v)
            alt = Schedule(
                g2,
                fuse=self.fuse,
                poison=self.poison,
                inplace=self.inplace_requested,
                _nesting=self.nesting,
                _remat=remat,
                _order=order,
            )
            if alt.arena_bytes >= best.arena_bytes or alt.inplace != best.inplace:
                break
            best = alt
        if best is not self:
            self.__dict__.update(best.__dict__)

    def _remat_candidates(self, tried: set) -> list:
        """``[(node, late users)]``: the arena values worth recomputing for the graph nodes
        that read them after the peak kernel (see :meth:`_rematerialize`)."""
        if not self.intervals or len(self.kernels) > REORDER_LIMIT:
            return []
        peak = self._peak_kernel()
        last_use = self._last_uses()
        outs = set(self.g.outputs)
        aliased: dict = {}  # buffer -> view nodes of it
        for o, vw in self.views.items():
            if vw.buf != o and isinstance(vw.buf, int):
                aliased.setdefault(vw.buf, []).append(o)
        found = []
        for start, end, b, _nbytes, _off in self.intervals:
            if not (isinstance(b, int) and start < peak < end) or b in tried or b in outs:
                continue
            if b in self.out_buffer or b in self.copies or b in self.costly:
                continue
            if self.nd(b)["op"] not in REMAT_OPS or self.kernels[start].kind != "loop":
                continue
            late_from = min(
                (ki for ki in range(peak + 1, len(self.kernels)) if b in self.kernels[ki].reads),
                default=None,
            )
            if late_from is None or not self._remat_leaves_ok(b, late_from, last_use):
                continue
            users = self._remat_users(b, aliased)
            if users is None:
                continue
            early = {u for u, ks in users.items() if max(ks) <= peak}
            late = {u for u, ks in users.items() if min(ks) > peak}
            if not early or not late or early | late != set(users):
                continue
            if set(self.g.users(b)) != set(users):
                continue
            found.append((b, sorted(late)))
        return sorted(found)

    def _peak_kernel(self) -> int:
        """The kernel at which the live arena bytes peak (the first such), as ``peak()``
        finds it, in one sweep: a value stored over its operand shares the operand's
        slot at the kernel that writes it, so it counts from the next kernel."""
        delta = [0] * (len(self.kernels) + 2)
        for start, end, b, nbytes, _off in self.intervals:
            first = start + 1 if b in self.reuse else start
            if first <= end:
                delta[first] += nbytes
                delta[end + 1] -= nbytes
        best, best_k, live = -1, -1, 0
        for ki in range(len(self.kernels)):
            live += delta[ki]
            if live > best:
                best, best_k = live, ki
        return best_k

    def _remat_leaves_ok(self, v: int, late_from: int, last_use: dict) -> bool:
        """Is ``v`` made of :data:`REMAT_OPS` over scalars and over buffers that are inputs,
        constants or arena values still live at kernel ``late_from``?"""
        stack, seen = [v], set()
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if n != v and (n in self.scalars or n in self.views):
                if n in self.scalars:
                    continue
                buf = self.views[n].buf
                if isinstance(buf, tuple):
                    if buf[0] not in ("in", "const"):
                        return False
                elif last_use.get(buf, -1) < late_from or buf in self.remat:
                    return False
                continue
            if self.nd(n)["op"] not in REMAT_OPS:
                return False
            stack += list(self.nd(n)["operands"])
        return True

    def _remat_users(self, v: int, aliased: dict) -> Optional[dict]:
        """Graph users of ``v`` -> the kernels reading ``v``'s buffer on their behalf (a
        view of ``v`` counts for the user it goes through), or None if some read of the
        buffer cannot be traced to a user."""
        views_of = set(aliased.get(v, ())) | {v}

        def direct(x: int) -> Optional[int]:
            # the user of v that x (v itself or a chain of views of it) goes through
            while x != v:
                ops = self.nd(x)["operands"]
                if not ops:
                    return None
                if ops[0] == v:
                    return x
                x = ops[0]
            return None

        users: dict = {}
        for ki, k in enumerate(self.kernels):
            if v not in k.reads:
                continue
            found: set = set()
            if k.kind == "loop":
                stores = {n for n, _ in k.stores}
                roots = self.kernel_roots(k)
                computed = [
                    r
                    for r in roots
                    if r in stores or (r not in self.views and r not in self.scalars)
                ]
                for n in self.expr_nodes(computed):
                    for o in self.nd(n)["operands"]:
                        if o in views_of and o not in computed:
                            found.add(n if o == v else direct(o))
                for r in roots:
                    if r not in computed and r in views_of:
                        found.add(direct(r))
                for n, dest in k.stores:
                    if n in self.copies and self.copies[n] is not None and self.copies[n].buf == v:
                        found.add(direct(n))
                for r in k.reduces:
                    if self.nd(r)["operands"][0] == v:
                        found.add(r)
            elif k.node is not None and k.node not in self.summed:
                for o in self.nd(k.node)["operands"]:
                    if o in views_of:
                        found.add(k.node if o == v else direct(o))
            if not found or None in found:
                return None
            for u in found:
                users.setdefault(u, []).append(ki)
        return users

    def _mask_source(self, n: int, space: tuple) -> Optional[int]:
        """The one buffer-backed node fused bool value ``n`` is computed from (its own
        contiguous buffer of shape ``space``, elements wider than a byte), when every
        other leaf is a scalar constant and every node of it elementwise; else None."""
        leaves = set()
        for m in self.expr_nodes([n]):
            if self.nd(m)["op"] not in ELEMENTWISE or self.nd(m)["operands"] == []:
                return None
            for o in self.nd(m)["operands"]:
                if o in self.views:
                    leaves.add(o)
        if len(leaves) != 1:
            return None
        (src,) = leaves
        v = self.views[src]
        if v.buf != src or v.offset != 0 or v.shape != space or v.strides != cstrides(space):
            return None
        if src not in self.materialized or src in self.copies or self.dtype(src).itemsize < 2:
            return None
        return src

    def _refresh_reads(self) -> None:
        """Recompute the reads of the loop kernels that compute their stores (an output's
        copy kernel keeps the reads it was built with)."""
        for k in self.kernels:
            if k.kind == "loop" and all(dest == m for m, dest in k.stores):
                k.reads = self._reads(k)

    def _drop_unread_stores(self) -> None:
        """A value materialized only to be computed once whose readers all ended up in
        the kernel that computes it (they use the value from a register) needs no
        buffer: it becomes a fused value of that kernel again."""
        aliased = {v.buf for o, v in self.views.items() if v.buf != o}
        outs = set(self.g.outputs)
        for n in sorted(self.costly):
            if n in aliased or n in outs or n in self.out_buffer or n in self.copies:
                continue
            producers = [k for k in self.kernels if n in k.writes]
            if len(producers) != 1 or producers[0].kind != "loop":
                continue
            host = producers[0]
            if any(n in k.reads for k in self.kernels if k is not host):
                continue
            host.stores = [(m, dest) for m, dest in host.stores if m != n]
            host.writes.discard(n)
            self.materialized.discard(n)
            self.costly.discard(n)
            del self.views[n]
            host.reads = self._reads(host)

    def _reads_in_register(self, kern: Kernel, host: int, produced_by: dict) -> bool:
        """Can loop kernel ``kern`` run inside loop kernel ``host`` (the last kernel it
        depends on, over the same space) although it reads values ``host`` computes?
        Only if every such read is of a value ``host`` stores at the very index it is
        read (the node itself, its own contiguous buffer): the fused loop then uses the
        value it just computed (the kernel builder's per-iteration memo), never a
        buffer element another iteration has not written yet."""
        hk = self.kernels[host]
        own = {n for n, dest in hk.stores if dest == n and n not in self.copies}
        if not own or any(n in self.copies for n, _ in kern.stores):
            return False
        if kern.reduces and loop_parallel_ok(self, kern.space, hk.reduces):
            # a row reduction must not make a loop that threads share serial (a separate
            # serial pass over the stored value costs less than that)
            if not loop_parallel_ok(self, kern.space, hk.reduces + kern.reduces):
                return False
        whole = cstrides(kern.space)
        stores = {n for n, _ in kern.stores}
        roots = self.kernel_roots(kern)
        computed = [
            r for r in roots if r in stores or (r not in self.views and r not in self.scalars)
        ]
        leaves = [r for r in roots if r not in computed and r in self.views]
        for n in self.expr_nodes(computed):
            leaves += [o for o in self.nd(n)["operands"] if o in self.views and o not in computed]
        for o in leaves:
            b = self.views[o].buf
            if produced_by.get(b) != host:
                continue
            v = self.views[o]
            if o not in own or v.offset != 0 or v.shape != tuple(kern.space) or v.strides != whole:
                return False
        return True

    def kernel_roots(self, kern: Kernel) -> list:
        """Nodes whose value a loop kernel computes per index (stores and reduce operands)."""
        roots = [n for n, dest in kern.stores if dest == n and n not in self.copies]
        roots += [self.nd(r)["operands"][0] for r in kern.reduces]
        return roots

    def _reads(self, kern: Kernel) -> set:
        if kern.kind != "loop":
            if kern.node in self.summed:
                return {self.summed[kern.node][1].buf, self.summed[kern.node][2].buf}
            return {self.views[o].buf for o in self.nd(kern.node)["operands"] if o in self.views}
        bufs = set()
        for n, dest in kern.stores:
            if dest == n and n in self.copies and self.copies[n] is not None:
                bufs.add(self.copies[n].buf)
        stores = {n for n, _ in kern.stores}
        computed = [
            r
            for r in self.kernel_roots(kern)
            if r in stores or (r not in self.views and r not in self.scalars)
        ]
        for r in self.kernel_roots(kern):
            if r not in computed and r in self.views:
                bufs.add(self.views[r].buf)
        for n in self.expr_nodes(computed):
            for o in self.nd(n)["operands"]:
                if o in self.views and o not in computed:
                    bufs.add(self.views[o].buf)
        return bufs

    def expr_nodes(self, roots: list) -> list:
        """Nodes a kernel computes per index for ``roots``, in topological order.

        Roots are always computed; their operands are computed when they are not
        buffer-backed (then they are loaded) or scalar constants.
        """
        seen, stack = set(), list(roots)
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            for o in self.nd(n)["operands"]:
                if o not in self.views and o not in self.scalars and o not in seen:
                    stack.append(o)
        return sorted(seen, key=self.pos.__getitem__)  # topological (rewrites add ids)

    # --- phase 4: buffers and the arena ------------------------------------------------------
    def _last_uses(self) -> dict:
        """Buffer -> index of the last kernel reading it (an output's: past the last kernel)."""
        last_use: dict = {}
        for ki, k in enumerate(self.kernels):
            for b in k.reads:
                last_use[b] = ki
        for o in self.g.outputs:
            b = self.views[o].buf if o in self.views else o
            last_use[b] = len(self.kernels)
        return last_use

    def _plan_memory(self) -> None:
        """Plan the arena for the kernels in dependency order (:meth:`_plan_in_order`),
        then for the order :meth:`_memory_order` proposes (a kernel that frees more than
        it allocates runs as soon as it may), and keep the order with the smaller arena
        (the built one on a tie).  Independent kernels compute the same values in any
        order, so only lifetimes change: W6's step computed the gradient flowing into the
        hidden layer (256 x 128) before the last layer's weight gradient that was the last
        reader of the hidden activations (another 256 x 128), so both were live at once."""
        self._plan_in_order()
        order = self._memory_order() if len(self.kernels) <= REORDER_LIMIT else None
        if order is None:
            return
        built = list(self.kernels)
        sunk = self._sunk(order)
        self._order_deps = []
        for cand in (order, sunk):
            if cand is None or cand == list(range(len(built))):
                continue
            state = self._plan_state()
            self.kernels = [built[i] for i in cand]
            self._reset_plan()
            self._plan_in_order()
            if self.arena_bytes >= state[-1]:
                self.kernels = state[0]
                self._restore_plan(state)

    def _sunk(self, order: list) -> Optional[list]:
        """``order`` (indices of the built kernels) with every kernel that has readers moved
        as late as its dependencies allow: right before its first dependent, walking from
        the end (so a chain moves together).  The memory-aware order runs a kernel that
        frees more than it allocates as soon as it may, and with it the kernels it waits
        for: W6's loss gathered its class weights (a [256] value read only after the
        arena's peak) in the first kernels, so that value was live across the peak.  A
        product and the loop glued to it (see :meth:`_memory_order`) and kernels nothing
        depends on stay where they are.  Only a proposal: :meth:`_plan_memory` keeps it
        when its planned arena is smaller.  None when nothing moves."""
        ks = self.kernels
        deps = self._order_deps if len(self._order_deps) == len(ks) else self._kernel_deps()
        users: list = [[] for _ in ks]
        for j, ds in enumerate(deps):
            for i in ds:
                users[i].append(j)
        glued = set()
        for i in range(len(ks) - 1):
            if (
                ks[i].kind == "matmul"
                and ks[i + 1].kind == "loop"
                and ks[i].writes & ks[i + 1].reads
            ):
                glued.update((i, i + 1))
        seq = list(order)
        for j in reversed(order):
            if j in glued or not users[j]:
                continue
            p = seq.index(j)
            q = min(seq.index(u) for u in users[j])
            if q > p + 1:
                seq.insert(q, j)  # before the first dependent (indices after p shift down)
                del seq[p]
        return None if seq == order else seq

    def _plan_state(self) -> tuple:
        return (
            list(self.kernels),
            dict(self.buffers),
            list(self.intervals),
            dict(self.reuse),
            dict(self.kernel_of),
            set(self.alias_kernels),
            {k: list(v) for k, v in self.poison_after.items()},
            self.arena_bytes,
        )

    def _restore_plan(self, state: tuple) -> None:
        (
            _,
            self.buffers,
            self.intervals,
            self.reuse,
            self.kernel_of,
            self.alias_kernels,
            self.poison_after,
            self.arena_bytes,
        ) = state

    def _reset_plan(self) -> None:
        self.buffers, self.intervals, self.reuse, self.kernel_of = {}, [], {}, {}
        self.alias_kernels, self.poison_after, self.arena_bytes = set(), {}, 0

    def _kernel_deps(self) -> list:
        """For each kernel, the earlier kernels it must follow: the last writer of every
        buffer it reads or writes, and every reader of a buffer it writes since that
        buffer's last write (read-after-write, write-after-write, write-after-read)."""
        last_writer: dict = {}
        readers: dict = {}
        all_readers: dict = {}  # buffer -> every kernel reading it so far
        deps = []
        for j, k in enumerate(self.kernels):
            ds = set()
            for c in k.writes:  # a recomputed value comes after the original's readers
                if c in self.remat:
                    ds.update(all_readers.get(self.remat[c], ()))
            for b in k.reads:
                if b in last_writer:
                    ds.add(last_writer[b])
            for b in self._writes_for_order(k):
                if b in last_writer:
                    ds.add(last_writer[b])
                ds.update(readers.get(b, ()))
            ds.discard(j)
            deps.append(ds)
            for b in k.reads:
                readers.setdefault(b, set()).add(j)
                all_readers.setdefault(b, set()).add(j)
            for b in self._writes_for_order(k):
                last_writer[b] = j
                readers[b] = set()
        return deps

    def _writes_for_order(self, k: Kernel) -> set:
        """What kernel ``k`` writes, for ordering: an output that may be written over an
        input (``inplace_requested``, decided after the order) also counts as writing that
        input, so the readers of the input stay before it (a later reader would rule the
        in-place write out: the optimizer's update would get an output array and a copy)."""
        out = set(k.writes)
        for b in k.writes:
            idx = b[1] if isinstance(b, tuple) and b[0] == "out" else self.out_buffer.get(b)
            if idx is not None and idx in self.inplace_requested:
                out.add(("in", self.inplace_requested[idx]))
        return out

    def _memory_order(self) -> Optional[list]:
        """A dependency-respecting order of the kernels that keeps fewer bytes live: list
        scheduling that runs, among the kernels whose dependencies have run, the one
        whose arena bytes written minus arena bytes it is the last reader of is the
        smallest (the built order breaks ties).  Only a proposal: :meth:`_plan_memory`
        keeps it when its planned arena is smaller."""
        ks = self.kernels
        deps = self._kernel_deps()
        self._order_deps = deps  # the built order's, for _sunk
        outs = {self.views[o].buf if o in self.views else o for o in self.g.outputs}
        size: dict = {}
        for b, spec in self.buffers.items():
            if spec[0] == "arena" and isinstance(b, int) and b not in outs:
                size[b] = max(ALIGN, -(-spec[2] // ALIGN) * ALIGN)
        pending: dict = {}  # arena buffer -> readers not yet run
        for j, k in enumerate(ks):
            for b in k.reads:
                if b in size:
                    pending[b] = pending.get(b, 0) + 1
        users: list = [[] for _ in ks]
        for j, ds in enumerate(deps):
            for i in ds:
                users[i].append(j)
        # a product and the loop right after it that reads its result stay together:
        # the loop may run inside the product's thread shares (parallel_policy.epilogues)
        glue = {
            i: i + 1
            for i in range(len(ks) - 1)
            if ks[i].kind == "matmul"
            and ks[i + 1].kind == "loop"
            and ks[i].writes & ks[i + 1].reads
        }
        tails = set(glue.values())
        waiting = [len(ds) for ds in deps]
        ready = [j for j in range(len(ks)) if waiting[j] == 0]
        order = []

        def cost(j: int) -> int:
            k = ks[j]
            grow = sum(size.get(b, 0) for b in k.writes) + sum(n for _, n in k.scratch)
            return grow - sum(size[b] for b in k.reads if b in size and pending[b] == 1)

        def run(j: int) -> None:
            ready.remove(j)
            order.append(j)
            for b in ks[j].reads:
                if b in size:
                    pending[b] -= 1
            for u in users[j]:
                waiting[u] -= 1
                if waiting[u] == 0:
                    ready.append(u)

        while ready:
            best, best_key = None, None
            for j in ready:
                if j in tails:
                    continue  # runs right after its product
                if j in glue and waiting[glue[j]] != 1:
                    continue  # its loop waits for more than the product: not yet
                key = (cost(j) + (cost(glue[j]) if j in glue else 0), j)
                if best_key is None or key < best_key:
                    best, best_key = j, key
            if best is None:  # only glued pairs not ready as a unit: the built order's next
                best = min((j for j in ready if j not in tails), default=min(ready))
            run(best)
            if best in glue and waiting[glue[best]] == 0 and glue[best] in ready:
                run(glue[best])
            elif best in glue:
                tails.discard(glue[best])  # cannot follow at once: schedule it on its own
        if len(order) != len(ks):  # cannot happen (deps point backwards): keep the built order
            return None
        return order

    def _plan_in_order(self) -> None:
        """Give every intermediate buffer an arena slot by liveness: a buffer lives from
        the kernel writing it to the last kernel reading it.  Freed slots are merged with
        free neighbours and taken best-fit; a slot at the arena's end grows in place.  A
        loop kernel's stored value may take the slot of an operand whose last reader is
        that kernel, when the kernel reads it only at the element it writes (see
        ``_reusable``): ``relu(x @ w)`` or a gradient's ``where(mask, 0, g)`` need no
        second buffer."""
        last_use = self._last_uses()
        out_pos = {o: k for o, k in self.out_buffer.items()}
        intervals = []
        for ki, k in enumerate(self.kernels):
            for b in sorted(k.writes, key=repr):
                if isinstance(b, tuple):
                    self.buffers[b] = ("out", b[1], 0)
                    continue
                if b in out_pos:
                    self.buffers[b] = ("out", out_pos[b], 0)
                    continue
                nbytes = numel(self.shape(b)) * self.dtype(b).itemsize
                intervals.append((ki, last_use.get(b, ki), b, nbytes))
                self.kernel_of[b] = ki
            for key, nbytes in k.scratch:  # a loop kernel's carries and its graphs' arenas
                intervals.append((ki, ki, key, nbytes))
        # with values stored over their operands, and without (tying lifetimes together
        # can leave worse holes): the smaller arena wins, the reusing one on a tie
        top = self._place(intervals, reuse=True)
        if self.reuse:
            kept = (dict(self.buffers), list(self.intervals), dict(self.reuse), top)
            self.reuse = {}
            alt = self._place(intervals, reuse=False)
            if alt < top:
                top = alt
            else:
                self.buffers, self.intervals, self.reuse, top = kept
        for b in self.reuse:  # one pointer for value and operand, no noalias
            self.alias_kernels.add(self.kernel_of[b])
        if self.poison:
            handed = set(self.reuse.values())
            for start, end, b, nbytes, slot in self.intervals:
                if end < len(self.kernels) and not isinstance(b, tuple) and b not in handed:
                    self.poison_after.setdefault(end, []).append(b)
        if top > MAX_BYTES:
            raise TooBigError(
                f"graph {self.g.name!r}: its intermediates need an arena of {top} bytes at "
                f"once, more than the {MAX_BYTES} bytes memory can address; use smaller sizes "
                "or split the computation"
            )
        self.arena_bytes = top

    def _place(self, intervals: list, reuse: bool) -> int:
        """Arena offsets for ``intervals`` [(first kernel, last kernel, buffer, nbytes)],
        in order of first kernel, then placed again by size when that is smaller
        (``_repack_by_size``); ``reuse``: values may take their operand's slot.  Sets
        ``buffers``, ``intervals``, ``reuse``; returns the arena's size."""
        free: list = []  # (offset, size) blocks available, sorted by offset, merged
        live: list = []  # heap of (end kernel, offset, size, buffer)
        owner: dict = {}  # arena slot offset -> (end, size, buffer) of its live buffer
        top = 0
        self.intervals = []  # (start, end, buffer, nbytes, offset), for peak()
        for start, end, b, nbytes in sorted(intervals, key=_interval_key):
            while live and live[0][0] < start:
                e, off, size, ob = heapq.heappop(live)
                if owner.get(off) != (e, size, ob):
                    continue  # its slot was handed on (see _reusable)
                del owner[off]
                top = _release(free, off, size, top)
            size = max(ALIGN, -(-nbytes // ALIGN) * ALIGN)
            slot = None
            donor = None
            if reuse and isinstance(b, int):
                donor = self._reusable(start, b, size, owner)
            if donor is not None:
                slot = self.buffers[donor][1]
                self.reuse[b] = donor
            else:
                best = None
                for i, (off, fsize) in enumerate(free):
                    if fsize >= size and (best is None or fsize < free[best][1]):
                        best = i
                if best is not None:
                    off, fsize = free[best]
                    slot = off
                    if fsize > size:
                        free[best] = (off + size, fsize - size)
                    else:
                        free.pop(best)
                elif free and free[-1][0] + free[-1][1] == top:  # grow the last free block
                    slot = free.pop()[0]
                    top = slot + size
                else:
                    slot = top
                    top += size
            self.buffers[b] = ("arena", slot, nbytes)
            self.intervals.append((start, end, b, nbytes, slot))
            owner[slot] = (end, size, b)
            heapq.heappush(live, (end, slot, size, b))
        return self._repack_by_size(top)

    def _repack_by_size(self, top: int) -> int:
        """Place the buffers again, largest first, each at the lowest offset where no
        buffer live at the same time overlaps it (best-fit among the gaps), and keep that
        layout when its arena is smaller than the in-order one's (``top``).  Placing big
        blocks first avoids the holes the in-order allocation leaves when a large value
        is made after smaller ones whose lives straddle it.  A value stored over its
        operand (``reuse``) moves with it: a chain of them is one block over their joint
        lifetime.  Skipped above ``REPACK_LIMIT`` blocks (quadratic in the worst case)."""
        ivs = self.intervals
        if len(ivs) < 2 or len(ivs) > REPACK_LIMIT:
            return top
        root: dict = {}
        for b, donor in self.reuse.items():
            r = donor
            while r in self.reuse:
                r = self.reuse[r]
            root[b] = r
        chains: dict = {}  # root buffer -> [start, end, size]
        for start, end, b, nbytes, _ in ivs:
            r = root.get(b, b)
            size = max(ALIGN, -(-nbytes // ALIGN) * ALIGN)
            c = chains.get(r)
            if c is None:
                chains[r] = [start, end, size]
            else:
                c[0], c[1], c[2] = min(c[0], start), max(c[1], end), max(c[2], size)
        keys = sorted(chains, key=lambda r: (-chains[r][2], chains[r][0], _sort_key(r)))
        n = len(keys)
        ps, pe = np.zeros(n, np.int64), np.zeros(n, np.int64)
        po, pz = np.zeros(n, np.int64), np.zeros(n, np.int64)
        offset: dict = {}
        new_top = 0
        for i, r in enumerate(keys):
            s, e, size = chains[r]
            hit = np.nonzero((ps[:i] <= e) & (pe[:i] >= s))[0]
            busy = sorted(zip(po[hit].tolist(), (po[hit] + pz[hit]).tolist()))
            best, prev = None, 0
            for lo, hi in busy:
                if lo - prev >= size and (best is None or lo - prev < best[1]):
                    best = (prev, lo - prev)
                prev = max(prev, hi)
            off = prev if best is None else best[0]
            ps[i], pe[i], po[i], pz[i] = s, e, off, size
            offset[r] = off
            new_top = max(new_top, off + size)
            if new_top >= top:
                return top  # no better than in order: keep that layout
        out = []
        for start, end, b, nbytes, _ in ivs:
            off = offset[root.get(b, b)]
            self.buffers[b] = ("arena", off, nbytes)
            out.append((start, end, b, nbytes, off))
        self.intervals = out
        return new_top

    def _over_operand(self, b: int, size: int, owner: dict, ki: int) -> Optional[int]:
        """The operand whose slot node ``b``'s own kernel (not a loop kernel) may write
        over, or None.  Only ``max_pool2d_grad`` over its input when the windows tile the
        input exactly (stride = kernel size, no padding or dilation, no leftover rows or
        columns) and are unrolled: its kernel loads a whole window before storing that
        window's gradient, and every input element is in exactly one window, so each
        element is loaded before it is overwritten and never read again.  W7's pooling
        gradient (2.8 MB) then needs no second buffer beside the activations it reads."""
        d = self.nd(b)
        if d["op"] != "max_pool2d_grad" or len(d["operands"]) != 2:
            return None
        x, gr = d["operands"]
        a = d["attrs"]
        shp = self.shape(b)
        if len(shp) != 4 or self.shape(x) != shp or self.dtype(x) != self.dtype(b):
            return None
        kh, kw = a["kernel_size"]
        Ho, Wo = self.shape(gr)[2:]
        if (
            tuple(a["stride"]) != (kh, kw)
            or tuple(a["padding"]) != (0, 0)
            or tuple(a["dilation"]) != (1, 1)
            or Ho * kh != shp[2]
            or Wo * kw != shp[3]
            or kh * kw > 16
            or numel(shp) == 0
        ):
            return None
        xv, gv = self.views.get(x), self.views.get(gr)
        if xv is None or gv is None or xv.buf != x or gv.buf == x:
            return None
        if xv.offset != 0 or xv.shape != shp or xv.strides != cstrides(shp):
            return None
        spec = self.buffers.get(x)
        if spec is None or spec[0] != "arena" or owner.get(spec[1]) is None:
            return None
        end, osize, ob = owner[spec[1]]
        if ob != x or end != ki or osize != size or x in self.reuse.values():
            return None
        return x

    def _reusable(self, ki: int, b: int, size: int, owner: dict) -> Optional[int]:
        """An arena buffer whose slot ``b`` (stored by kernel ``ki``) may take over: its
        last reader is ``ki``, a loop kernel storing ``b`` at every element of its index
        space, which reads that buffer only at the element it writes (offset 0, the
        space's own contiguous strides) and loads every element before storing it; the
        operand has the space's shape and ``b``'s element size, and no other value of the
        kernel takes its slot."""
        kern = self.kernels[ki]
        if kern.kind != "loop" and kern.node == b and self.fuse:
            return self._over_operand(b, size, owner, ki)
        if (
            kern.kind != "loop"
            or b in self.copies
            or (b, b) not in kern.stores
            or self.shape(b) != kern.space
            or not self.fuse
        ):
            return None
        taken = {d for n, d in self.reuse.items() if n in kern.writes}
        ident = cstrides(kern.space)
        views: Optional[list] = None  # found only for an operand that passes the rest
        for o in sorted(kern.reads, key=repr):
            if not isinstance(o, int) or o in taken or o in kern.writes:
                continue
            spec = self.buffers.get(o)
            if spec is None or spec[0] != "arena" or owner.get(spec[1]) is None:
                continue
            end, osize, ob = owner[spec[1]]
            if ob != o or end != ki or osize != size:
                continue
            # element i of the value lands exactly on element i of the operand: the same
            # shape (the space) and element size (a float64 over a float32 operand would
            # overwrite elements 2i and 2i+1 before they are loaded)
            if self.shape(o) != kern.space or self.dtype(o).itemsize != self.dtype(b).itemsize:
                continue
            if views is None:
                views = self._loop_views(kern)
            if all(
                v.offset == 0 and v.shape == kern.space and v.strides == ident
                for v in views
                if v.buf == o
            ):
                return o
        return None

    def _loop_views(self, kern: Kernel) -> list:
        """Every view a loop kernel reads or stores through (leaves, copies, stored views);
        also what graphc.backend.parallel_policy.epilogues checks against a product."""
        roots = self.kernel_roots(kern)
        out = []
        for n in self.expr_nodes(roots):
            for o in self.nd(n)["operands"]:
                if o in self.views:
                    out.append(self.views[o])
        for r in roots:
            if r in self.views:
                out.append(self.views[r])
        for n, _ in kern.stores:
            if n in self.copies and self.copies[n] is not None:
                out.append(self.copies[n])
            if n in self.views:
                out.append(self.views[n])
        return out

    def buffer_elements(self, buf) -> int:
        if isinstance(buf, tuple):
            if buf[0] == "in":
                return numel(self.shape(self.g.inputs[buf[1]]))
            if buf[0] == "const":
                return numel(self.shape(buf[1]))
            return numel(self.shape(self.g.outputs[buf[1]]))
        return numel(self.shape(buf))

    def _check_bounds(self) -> None:
        """Every view must address only elements of its buffer (checked before any code runs)."""
        for n, v in list(self.views.items()) + [
            (n, v) for n, v in self.copies.items() if v is not None
        ]:
            if numel(v.shape) == 0:
                continue
            lo = v.offset + sum(min(0, st * (d - 1)) for st, d in zip(v.strides, v.shape))
            hi = v.offset + sum(max(0, st * (d - 1)) for st, d in zip(v.strides, v.shape))
            size = self.buffer_elements(v.buf)
            if lo < 0 or hi >= size:
                raise GraphcError(
                    f"internal error: the view of {describe(self.g, n)} would address elements "
                    f"[{lo}, {hi}] of a buffer of {size}; refusing to generate code (please "
                    "report this graph)"
                )

    def _choose_inplace(self) -> None:
        """Which outputs may be written straight into an input's memory (in-place updates
        such as ``w -= lr * w.grad``), saving an output allocation and a copy back.

        Safe when the output is stored by a loop kernel K that reads the input only at
        the element it writes (same index space, identity strides, no copies), and no
        kernel after K reads that input."""
        last_writer: dict = {}
        last_reader: dict = {}
        for ki, kern in enumerate(self.kernels):
            for b in kern.writes:
                last_writer[b] = ki
            for b in kern.reads:
                last_reader[b] = ki
        for k, i in sorted(self.inplace_requested.items()):
            o = self.g.outputs[k]
            if self.out_buffer.get(o) != k or o in self.copies:
                continue
            src = ("in", i)
            writer = last_writer.get(o)
            if writer is None:
                continue
            kern = self.kernels[writer]
            if kern.kind != "loop" or last_reader.get(src, -1) > writer:
                continue
            if self.shape(o) != kern.space or self.shape(self.g.inputs[i]) != kern.space:
                continue
            ok = True
            for n, dest in kern.stores:
                if n in self.copies or dest != n:
                    ok = False
            roots = self.kernel_roots(kern)
            for n in self.expr_nodes(roots) + roots:
                for o2 in self.nd(n)["operands"] + ((n,) if n in roots else ()):
                    v = self.views.get(o2)
                    if (
                        v is not None
                        and v.buf == src
                        and not (
                            v.offset == 0
                            and v.shape == kern.space
                            and v.strides == cstrides(kern.space)
                        )
                    ):
                        ok = False
            if ok and src in kern.reads:
                self.inplace[k] = i
                self.alias_kernels.add(writer)

    # --- reporting ------------------------------------------------------------------
    def summary(self) -> dict:
        loops = [k for k in self.kernels if k.kind == "loop"]
        return {
            "kernels": len(self.kernels),
            "loop_kernels": len(loops),
            "fused_nodes": sum(
                len(
                    self.expr_nodes(
                        [
                            r
                            for r in self.kernel_roots(k)
                            if r not in self.views or r in {n for n, _ in k.stores}
                        ]
                    )
                )
                for k in loops
            ),
            "arena_bytes": self.arena_bytes,
            "materialized": len(self.materialized),
        }

    def peak(self, top: int = 8) -> dict:
        """Which buffers occupy the arena when most of it is in use: ``{"arena_bytes",
        "kernel"`` (the kernel at which the live buffers' bytes peak), ``"live_bytes"``
        (their bytes then, each slot counted once: a value stored over its operand shares
        its slot), ``"buffers"``: the ``top`` largest live there, largest first, as dicts
        ``node`` (the node's one-line description, or a loop's scratch key), ``bytes``,
        ``offset``, ``kernels`` (first and last kernel using it) and ``over`` (the node
        whose slot it took, or None) and ``recomputes`` (the node a rematerialized copy
        recomputes for late readers, or None)}``.  ``live_bytes`` is at most ``arena_bytes``: the
        difference is fragmentation (free blocks too small for what came next)."""
        best_k, best, best_live = -1, -1, []
        for ki in range(len(self.kernels)):
            live = [iv for iv in self.intervals if iv[0] <= ki <= iv[1]]
            by_slot: dict = {}
            for iv in live:
                by_slot[iv[4]] = max(by_slot.get(iv[4], 0), iv[3])
            total = sum(by_slot.values())
            if total > best:
                best_k, best, best_live = ki, total, live
        best_live.sort(key=lambda iv: (-iv[3], iv[4], repr(iv[2])))
        bufs = []
        for start, end, b, nbytes, off in best_live[:top]:
            bufs.append(
                {
                    "node": describe(self.g, b) if isinstance(b, int) else repr(b),
                    "bytes": nbytes,
                    "offset": off,
                    "kernels": (start, end),
                    "over": self.reuse.get(b),
                    "recomputes": self.remat.get(b),
                }
            )
        return {
            "arena_bytes": self.arena_bytes,
            "kernel": best_k,
            "live_bytes": max(best, 0),
            "buffers": bufs,
        }

    def describe_peak(self, top: int = 8) -> str:
        """``peak()`` as text: the peak kernel, then one line per buffer live there."""
        p = self.peak(top)
        if p["kernel"] < 0:
            return f"plan for {printable(self.g.name)}: no arena"
        lines = [
            f"arena {p['arena_bytes']} bytes; peak at k{p['kernel']} "
            f"({self.kernels[p['kernel']]!r}): {p['live_bytes']} bytes live"
        ]
        for d in p["buffers"]:
            over = f", over %{d['over']}" if d["over"] is not None else ""
            if d.get("recomputes") is not None:
                over += f", recomputes %{d['recomputes']}"
            k0, k1 = d["kernels"]
            lines.append(f"  {d['bytes']:>10} B @{d['offset']:<9} k{k0}-k{k1}{over}  {d['node']}")
        return "\n".join(lines)

    def all_kernels(self) -> list:
        """Every kernel of the plan and of its loops' graphs' plans (nested loops too)."""
        out, stack = [], [self]
        while stack:
            p = stack.pop()
            out += p.kernels
            for lp in p.loops.values():
                stack += [sp for _, sp in lp.graphs()]
        return out

    def describe(self) -> str:
        """The kernels in order; a scan/while kernel is followed by its graphs' plans,
        indented (the LLVM functions are named ``k<i>_body`` / ``k<i>_cond``)."""
        lines = [
            f"plan for {printable(self.g.name)}: {len(self.kernels)} kernels, arena "
            f"{self.arena_bytes} bytes"
        ]
        for i, k in enumerate(self.kernels):
            lines.append(f"  k{i}: {k!r}")
            if k.kind in LOOP_KINDS.values():
                lp = self.loops[k.node]
                lines.append(f"    {lp.header()}")
                for role, sp in lp.graphs():
                    lines.append(f"    {role} (function k{i}_{role}):")
                    lines += ["      " + line for line in sp.describe().split("\n")]
        return "\n".join(lines)


def loop_parallel_ok(
    plan: "Schedule", space: tuple, reduces: list, min_size: int = PARALLEL_MIN
) -> bool:
    """Would a loop kernel over ``space`` with these reductions be split across threads?
    Loops of at least ``min_size`` elements whose reductions are all full reductions
    with 8-byte accumulators (sums, f64/i64 max/min): the planner's thread policy for
    loops (``parallel_policy.parallel_ok`` passes its own ``PARALLEL_MIN``)."""
    if not space or numel(space) < min_size:
        return False
    for r in reduces:
        d = plan.g.nx.nodes[r]
        if numel(d["shape"]) != 1:
            return False
        acc, _ = accumulator(d["op"], np.dtype(d["dtype"]))
        if acc.itemsize != 8:
            return False
    return True


def _merged_stride(sizes: tuple, strides: tuple) -> Optional[int]:
    """The stride of one dimension indexing ``sizes`` row-major (the innermost stride),
    or None when these dimensions do not merge (size-1 dimensions never matter)."""
    live = [(sz, st) for sz, st in zip(sizes, strides) if sz != 1]
    if not live:
        return 1
    for (_, s0), (s1z, s1) in zip(live, live[1:]):
        if s0 != s1 * s1z:
            return None
    return live[-1][1]


def _gemm_ok(v: View, side: int) -> bool:
    return blas_layout(as_matrix(v, side)) is not None


def _release(free: list, off: int, size: int, top: int) -> int:
    """Return block (off, size) to the sorted free list, merged with its neighbours; a
    block ending at the arena's top is kept (the next allocation may grow it).  Returns
    the top (unchanged: the arena's size is the highest top ever reached)."""
    i = bisect.bisect_left(free, (off, size))
    if i < len(free) and free[i][0] == off + size:  # merge the next block
        size += free.pop(i)[1]
    if i > 0 and free[i - 1][0] + free[i - 1][1] == off:  # merge into the previous
        off, size = free[i - 1][0], free[i - 1][1] + size
        free.pop(i - 1)
        i -= 1
    free.insert(i, (off, size))
    return top


def _sort_key(b) -> tuple:
    """A deterministic order over buffer keys (node ids, then loop scratch tuples)."""
    return (0, b, "") if isinstance(b, int) else (1, 0, repr(b))


# the most arena blocks Schedule._repack_by_size places again (it is quadratic at worst)
REPACK_LIMIT = 4000
#: Above this many kernels the memory-aware kernel order is not tried (quadratic).
REORDER_LIMIT = 4000
#: How many comparisons ``Schedule._store_masks_early`` tries storing as bytes (each try
#: plans the arena again).
MASK_TRIES = 8
#: How many rounds of rematerialization ``Schedule._rematerialize`` tries (each plans
#: the graph again), and the ops a recomputed value may be made of: exact IEEE
#: operations, whose result does not depend on the kernel (or vector lane) computing it,
#: and cheap.
REMAT_ROUNDS = 2
REMAT_OPS = frozenset(
    "add sub mul div neg abs where maximum minimum relu lt le gt ge eq ne logical_and "
    "logical_or logical_not".split()
)


def _interval_key(t: tuple) -> tuple:
    """Allocation order: by first kernel, then node buffers by id, then loop scratch."""
    return (t[0], 0, t[2], "") if isinstance(t[2], int) else (t[0], 1, 0, repr(t[2]))


MAX_LOOP_NESTING = 64


class LoopPlan:
    """A ``scan``/``while`` node checked against the loop contract, with the schedules of
    its graphs (``body``, and ``cond`` for a while) and what its kernel writes: the
    buffers of its ``loop_out`` nodes, plus arena scratch for two ping-pong copies of the
    carries (a body output never aliases a body input), the ``y`` slices nothing reads,
    the while's condition byte and each graph's own arena."""

    def __init__(self, plan: Schedule, n: int) -> None:
        self.plan = plan
        self.n = n
        g = plan.g
        d = plan.nd(n)
        self.kind = d["op"]
        self.where = describe(g, n)
        a = d["attrs"]
        ops = list(d["operands"])
        self.length = 0
        self.reverse = False
        self.cond_graph: Optional[Graph] = None
        if self.kind == "scan":
            self.length = self._int(a, "length")
            rev = a.get("reverse")
            if not isinstance(rev, (bool, np.bool_)):
                self._fail(f"attr reverse must be a bool, got {rev!r}")
            self.reverse = bool(rev)
            nc, k = self._int(a, "num_consts"), self._int(a, "num_carry")
            if nc + k > len(ops):
                self._fail(f"num_consts {nc} + num_carry {k} exceed its {len(ops)} operands")
            self.consts, self.carries, self.xs = ops[:nc], ops[nc : nc + k], ops[nc + k :]
            self.cond_consts: list = []
        else:
            ncc = self._int(a, "num_cond_consts")
            nbc = self._int(a, "num_body_consts")
            k = self._int(a, "num_carry")
            if ncc + nbc + k != len(ops):
                self._fail(
                    f"num_cond_consts {ncc} + num_body_consts {nbc} + num_carry {k} != its "
                    f"{len(ops)} operands"
                )
            self.cond_consts = ops[:ncc]
            self.consts, self.carries, self.xs = ops[ncc : ncc + nbc], ops[ncc + nbc :], []
            self.cond_graph = self._graph(a, "cond")
        self.body_graph = self._graph(a, "body")
        carry_t = [self._type(o) for o in self.carries]
        x_t = []
        for j, o in enumerate(self.xs):
            shp, dt = self._type(o)
            if not shp or shp[0] != self.length:
                self._fail(
                    f"xs {j} (%{o}) has shape {list(shp)}, which does not have the scan's "
                    f"length {self.length} as its leading dimension"
                )
            x_t.append((shp[1:], dt))
        body_in = [self._type(o) for o in self.consts] + carry_t + x_t
        self._check_io("body", self.body_graph.inputs, body_in, "input")
        outs = self.body_graph.outputs
        if len(outs) < len(carry_t) or (self.kind == "while" and len(outs) != len(carry_t)):
            self._fail(
                f"its body has {len(outs)} outputs for {len(carry_t)} carries"
                + (" and no y" if self.kind == "while" else "")
            )
        self._check_io("body", outs[: len(carry_t)], carry_t, "output")
        self.results = list(carry_t)
        for j, o in enumerate(outs[len(carry_t) :]):
            bd = self.body_graph.nx.nodes[o]
            shp = (self.length,) + tuple(bd["shape"])
            # length * slice size must be addressable before any offset is computed from it
            check_size(shp, bd["dtype"], f"{self.where}: ys {j}", error=TooBigError)
            self.results.append((shp, np.dtype(bd["dtype"])))
        if self.cond_graph is not None:
            cin = [self._type(o) for o in self.cond_consts] + carry_t
            self._check_io("cond", self.cond_graph.inputs, cin, "input")
            self._check_io(
                "cond", self.cond_graph.outputs, [((), np.dtype("bool"))], "output", count=True
            )
        # the results, read through loop_out nodes (a second one of a result reads the first)
        if n in g.outputs:
            self._fail("a loop node is a token: read its results through loop_out nodes")
        self.outs: dict = {}  # result index -> the (first) loop_out node reading it
        for u in g.users(n):
            ud = plan.nd(u)
            if ud["op"] != "loop_out" or tuple(ud["operands"]) != (n,):
                self._fail(f"its token is used by {describe(g, u)}; only loop_out may read it")
            j = ud["attrs"].get("index")
            if type(j) is not int or not 0 <= j < len(self.results):
                self._fail(f"{describe(g, u)}: index {j!r} is not one of its results")
            shp, dt = self.results[j]
            if tuple(ud["shape"]) != shp or np.dtype(ud["dtype"]) != dt:
                self._fail(
                    f"{describe(g, u)}: result {j} is {dt.name}{list(shp)}, the node says "
                    f"{ud['dtype']}{list(ud['shape'])}"
                )
            self.outs[j] = min(self.outs.get(j, u), u)
        depth = plan.nesting + 1
        if depth > MAX_LOOP_NESTING:
            self._fail(f"loops nested more than {MAX_LOOP_NESTING} deep")
        self.cond: Optional[Schedule] = None
        if self.cond_graph is not None:
            self.cond = self._schedule(self.cond_graph, "cond", depth)
        self.body = self._schedule(self.body_graph, "body", depth)

    # --- checks -------------------------------------------------------------------
    def _fail(self, msg: str) -> None:
        raise GraphVerificationError(f"{self.where}: {msg}")

    def _int(self, a: dict, key: str) -> int:
        v = a.get(key)
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 0:
            self._fail(f"attr {key} must be an int >= 0, got {v!r}")
        return int(v)

    def _graph(self, a: dict, key: str) -> Graph:
        v = a.get(key)
        if not isinstance(v, Graph):
            self._fail(f"attr {key} must be a graphc Graph, got {type(v).__name__}")
        return v

    def _type(self, o: int) -> tuple:
        d = self.plan.nd(o)
        return tuple(d["shape"]), np.dtype(d["dtype"])

    def _check_io(self, role: str, nodes: list, want: list, what: str, count: bool = True) -> None:
        graph = self.body_graph if role == "body" else self.cond_graph
        assert graph is not None
        if count and len(nodes) != len(want):
            self._fail(f"its {role} graph has {len(nodes)} {what}s, the contract {len(want)}")
        for j, (o, (shp, dt)) in enumerate(zip(nodes, want)):
            d = graph.nx.nodes[o]
            if tuple(d["shape"]) != shp or np.dtype(d["dtype"]) != dt:
                self._fail(
                    f"{what} {j} of its {role} graph is {d['dtype']}{list(d['shape'])}, "
                    f"the contract says {dt.name}{list(shp)}"
                )

    def _schedule(self, graph: Graph, role: str, depth: int) -> Schedule:
        try:
            return Schedule(graph, fuse=self.plan.fuse, poison=self.plan.poison, _nesting=depth)
        except GraphcError as e:
            try:
                err = type(e)(f"{self.where}: in its {role} graph: {e}")
            except TypeError:  # an error type with another constructor: as it is
                raise e from None
            raise err from e

    # --- the kernel -----------------------------------------------------------------
    def num_ys(self) -> int:
        """How many stacked ``ys`` a scan has (body outputs after the carries); 0 for a while."""
        return len(self.results) - len(self.carries)

    def kernel(self) -> Kernel:
        """The loop's kernel: writes its loop_out buffers, scratch as the class says."""
        k = Kernel(LOOP_KINDS[self.kind], (), self.n)
        k.writes = set(self.outs.values())
        for j, (shp, dt) in enumerate(self.results[: len(self.carries)]):
            nbytes = numel(shp) * dt.itemsize
            k.scratch += [(("carry", self.n, j, s), nbytes) for s in (0, 1)]
        for j in range(self.num_ys()):
            if len(self.carries) + j not in self.outs:  # computed, never stacked
                shp, dt = self.results[len(self.carries) + j]
                k.scratch.append((("y", self.n, j), numel(shp[1:]) * dt.itemsize))
        if self.cond is not None:
            k.scratch.append((("flag", self.n), 1))
        for role, sp in self.graphs():
            if sp.arena_bytes:
                k.scratch.append((("arena", self.n, role), sp.arena_bytes))
        return k

    def graphs(self) -> list:
        """[(role, Schedule)]: ("cond", ...) first for a while, then ("body", ...)."""
        return ([("cond", self.cond)] if self.cond is not None else []) + [("body", self.body)]

    def header(self) -> str:
        """One line: what the loop runs (for describe() and the IR comments)."""
        if self.kind == "scan":
            return (
                f"scan length {self.length}{' reversed' if self.reverse else ''}: "
                f"{len(self.consts)} consts, {len(self.carries)} carries, {len(self.xs)} xs "
                f"-> {len(self.carries)} carries, {self.num_ys()} ys "
                f"(results read: {sorted(self.outs)})"
            )
        return (
            f"while: {len(self.cond_consts)} cond consts, {len(self.consts)} body consts, "
            f"{len(self.carries)} carries (results read: {sorted(self.outs)})"
        )
