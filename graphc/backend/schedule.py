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

from ..errors import GraphcError, TooBigError, UnsupportedOpError
from ..ir import Graph, describe, printable
from . import lowering
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
NATIVE_DTYPES = frozenset({"float32", "float64", "int64", "int32", "bool"})
ALIGN = 64


class Kernel:
    """One unit of generated code, run in order by the entry point."""

    def __init__(self, kind: str, space: tuple = (), node: Optional[int] = None) -> None:
        self.kind = (
            kind  # loop | matmul | argreduce | getitem | getitem_grad | setitem | philox | copy
        )
        self.space = tuple(space)
        self.node = node  # the node of a non-loop kernel
        self.stores: list = []  # [(node, dest buffer)] elementwise results stored over space
        self.reduces: list = []  # reduce nodes accumulated over space
        self.reads: set = set()  # buffers read
        self.writes: set = set()  # buffers written

    def __repr__(self) -> str:
        what = [f"store %{n}" for n, _ in self.stores] + [f"reduce %{n}" for n in self.reduces]
        if self.node is not None and not what:
            what = [f"%{self.node}"]
        return f"<{self.kind} {list(self.space)}: {', '.join(what)}>"


class Schedule:
    """The complete schedule of a graph: kernels in order, views, buffers and arena offsets."""

    def __init__(
        self, g: Graph, fuse: bool = True, poison: bool = False, inplace: Optional[dict] = None
    ) -> None:
        self.g = g
        self.inplace_requested = dict(inplace or {})  # output index -> input index
        self.inplace: dict = {}  # the pairs found safe: output k written over input i
        self.alias_kernels: set = set()  # kernels whose buffer args may alias
        self.fuse = fuse
        self.poison = poison  # debugging: overwrite arena buffers after their last use
        self.poison_after: dict = {}  # kernel index -> arena buffers whose last use it is
        self.order = g.topo_order()
        self.pos = {n: i for i, n in enumerate(self.order)}
        self.views: dict = {}  # node -> View for buffer-backed nodes
        self.scalars: dict = {}  # node -> numpy 0-d const
        self.copies: dict = {}  # node -> View to copy from (materialized views)
        self.materialized: set = set()
        self.out_buffer: dict = {}  # node -> output index it is computed into
        self.kernels: list = []
        self.buffers: dict = {}  # buffer id -> (kind, index/offset, nbytes, dtype)
        self.arena_bytes = 0
        self._check_dtypes()
        self._classify()
        self._choose_fusion()
        self._build_kernels()
        self._plan_memory()
        self._check_bounds()
        self._choose_inplace()

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
            elif op in REDUCE:
                if not self.fuse:
                    self._buffer_view(d["operands"][0])
                self._materialize(n)
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
        # an elementwise value that nothing consumes and is not an output is dead code
        # (the optimizer removes it); it needs no kernel.

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
            if n not in self.materialized:
                continue
            d = self.nd(n)
            op = d["op"]
            if n in self.copies or op in ELEMENTWISE:
                space = self.shape(n)
                kern = Kernel("loop", space)
                kern.stores.append((n, n))
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
            if kern.kind == "loop" and self.fuse and numel(kern.space) > 0:
                for gi in reversed(groups.get(kern.space, [])):
                    if gi > dep:
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

    def kernel_roots(self, kern: Kernel) -> list:
        """Nodes whose value a loop kernel computes per index (stores and reduce operands)."""
        roots = [n for n, dest in kern.stores if dest == n and n not in self.copies]
        roots += [self.nd(r)["operands"][0] for r in kern.reduces]
        return roots

    def _reads(self, kern: Kernel) -> set:
        if kern.kind != "loop":
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
        free: list = []  # (offset, size) blocks available, sorted by offset
        live: list = []  # heap of (end kernel, offset, size): O(log n) per buffer, not O(n)
        top = 0
        for start, end, b, nbytes in sorted(intervals, key=lambda t: (t[0], t[2])):
            while live and live[0][0] < start:
                _, off, size = heapq.heappop(live)
                bisect.insort(free, (off, size))
            size = max(ALIGN, -(-nbytes // ALIGN) * ALIGN)
            slot = None
            for i, (off, fsize) in enumerate(free):
                if fsize >= size:
                    slot = off
                    if fsize > size:
                        free[i] = (off + size, fsize - size)
                    else:
                        free.pop(i)
                    break
            if slot is None:
                slot = top
                top += size
            self.buffers[b] = ("arena", slot, nbytes)
            heapq.heappush(live, (end, slot, size))
            if self.poison and end < len(self.kernels):  # not the bases of output views
                self.poison_after.setdefault(end, []).append(b)
        if top > MAX_BYTES:
            raise TooBigError(
                f"graph {self.g.name!r}: its intermediates need an arena of {top} bytes at "
                f"once, more than the {MAX_BYTES} bytes memory can address; use smaller sizes "
                "or split the computation"
            )
        self.arena_bytes = top

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
        for k, i in sorted(self.inplace_requested.items()):
            o = self.g.outputs[k]
            if self.out_buffer.get(o) != k or o in self.copies:
                continue
            src = ("in", i)
            writer = None
            for ki, kern in enumerate(self.kernels):
                if o in kern.writes:
                    writer = ki
            if writer is None:
                continue
            kern = self.kernels[writer]
            if kern.kind != "loop" or any(src in kk.reads for kk in self.kernels[writer + 1 :]):
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

    def describe(self) -> str:
        lines = [
            f"plan for {printable(self.g.name)}: {len(self.kernels)} kernels, arena "
            f"{self.arena_bytes} bytes"
        ]
        for i, k in enumerate(self.kernels):
            lines.append(f"  k{i}: {k!r}")
        return "\n".join(lines)


def _gemm_ok(v: View, side: int) -> bool:
    return blas_layout(as_matrix(v, side)) is not None
