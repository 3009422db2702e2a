"""Which kernels of a schedule run on several threads, and what runs with them: the
planner's thread policy (one pool runs loops and matrix products; see docs/backend.md)."""

from __future__ import annotations


import numpy as np

from .abi import GEMM_PARALLEL_MIN, GIL_FREE_MIN
from .lowering import conv
from .lowering.matmul import gemm_dims
from .lowering.reduce import reduction
from .schedule import RECOMPUTE_COST, Kernel, Schedule, loop_parallel_ok
from .strided import cstrides, numel

#: Split loops with row reductions (reduced dims inside, the outer dim kept) across
#: threads by rows, with the work threshold weighted by the loop's per-element cost
#: (:func:`loop_work`).  Off: only the loops ``loop_parallel_ok`` takes (kept as a
#: switch to measure against).
ROW_PARALLEL = True
#: Run a loop over a folded product's (..., m, N) rows as that product's epilogue
#: (:func:`epilogues`); off: only loops over a 2-D product's (M, N) (a switch to
#: measure against).
FOLDED_EPILOGUES = True
#: elements a loop (or random-draw) kernel needs before it is split across threads.  It
#: was 2^18 (``abi.PARALLEL_MIN``, which schedule's fusion still uses); with workers
#: that spin 500 us between jobs (runtime/pool.py) a split of 2^16 elements pays off:
#: W7's compiled step 2.62 -> 2.52 and 2.72 -> 2.65 ms with this and the pooling
#: kernels' threshold (lowering/conv.py) lowered together, W6 and W8 unchanged
#: (0.158/0.158, 2.297/2.297 ms; A/B in one process, six alternating rounds)
PARALLEL_MIN = 1 << 16
#: the :func:`loop_work` from which such a loop is split: 2^20 (4x the 2^18 elements
#: ``PARALLEL_MIN`` was), since on a shared 2-core machine each extra fork/join risks
#: waiting for a descheduled worker
ROW_PARALLEL_MIN_WORK = 1 << 20


def parallel_ok(plan: Schedule, kern: Kernel) -> bool:
    """Split this kernel across threads?  Big loop kernels whose reductions are all full
    reductions with 8-byte accumulators (sums, f64/i64 max/min), and matrix products
    with at least ``GEMM_PARALLEL_MIN`` multiply-adds (rows or columns of the result
    shared out, BLAS single-threaded in each share: one pool runs loops and products);
    convolutions and max pooling by :func:`graphc.backend.lowering.conv.parallel_ok`."""
    if kern.kind in conv.PARALLEL_KINDS:
        assert kern.node is not None
        return conv.parallel_ok(plan, kern.node)
    if kern.kind == "matmul":
        assert kern.node is not None
        gd = gemm_dims(plan, kern.node)
        return (
            gd.blas
            and gd.split_size >= 2
            and numel(gd.batch + (gd.M, gd.K, gd.N)) >= GEMM_PARALLEL_MIN
        )
    if kern.kind == "philox":
        return numel(kern.space) >= PARALLEL_MIN
    if kern.kind != "loop":
        return False
    if loop_parallel_ok(plan, kern.space, kern.reduces, PARALLEL_MIN):
        return True
    return (
        ROW_PARALLEL
        and rows_parallel_ok(plan, kern)
        and loop_work(plan, kern) >= ROW_PARALLEL_MIN_WORK
    )


def loop_work(plan: Schedule, kern: Kernel) -> int:
    """A loop kernel's elements times its per-element cost: 1 plus, for each costly op
    it computes, that op's relative cost (``schedule.RECOMPUTE_COST``: exp, tanh, log
    ... 10, erf and pow 20; cheap ops count 0, their loops are bound by memory).  From
    ``ROW_PARALLEL_MIN_WORK`` on, such a loop is split: a (8, 4, 64, 64) softmax row
    ``exp``-and-sum loop (131k elements x 11, ~230 us on one core) qualifies, its
    gradient's ``div+mul+neg+sum`` (131k x 1, ~60 us) does not."""
    cost = 1
    for n in plan.expr_nodes(plan.kernel_roots(kern)):
        cost += RECOMPUTE_COST.get(plan.g.nx.nodes[n]["op"], 0)
    return numel(kern.space) * cost


def rows_parallel_ok(plan: Schedule, kern: Kernel) -> bool:
    """Can loop kernel ``kern`` be split across threads by its outer dim although it has
    reductions that keep dims (row sums)?  Every such reduction must keep dim 0 (each
    output element then belongs to one chunk's rows, accumulated there in the serial
    loop's order: the same bits on every thread count) and not be a float max/min (those
    run the vectorized ``llvm.maximum`` kernel, serial only).  A full reduction (to one
    element) keeps the loop serial: its chunks' partials would be summed in another
    order than the serial loop's, and these loops were serial before; so the results
    of every loop taken here are bitwise those of the serial loop, on any thread count."""
    space = kern.space
    if not space or space[0] < 2:
        return False
    for r in kern.reduces:
        d = plan.g.nx.nodes[r]
        dt = np.dtype(d["dtype"])
        if numel(d["shape"]) == 1:
            return False  # split into per-chunk partials: bits would follow the threads
        axes = {a % len(space) for a in d["attrs"]["axis"]}
        if 0 in axes:
            return False
        if dt.kind == "f" and reduction(d["op"]).combine in ("max", "min"):
            return False
    return True


def canonical(plan: Schedule, buf):
    """An output written over an input (in place) is that input's buffer; an arena
    buffer written over a dying operand's slot (``plan.reuse``) is that operand's."""
    while not isinstance(buf, tuple) and buf in plan.reuse:
        buf = plan.reuse[buf]
    spec = plan.buffers.get(buf) if not isinstance(buf, tuple) else None
    if spec is not None and spec[0] == "out" and spec[1] in plan.inplace:
        return ("in", plan.inplace[spec[1]])
    return buf


def epilogues(plan: Schedule) -> dict:
    """{product kernel i: loop kernel i + 1} for loops that run inside the product's
    thread shares: a parallel 2-D product shared by rows, followed by a loop over the
    same (M, N) space without reductions that reads the product only elementwise (row r
    of the loop reads row r of the product) and writes nothing the product reads or
    writes.  Each thread then updates the rows it just computed, while they are in its
    core's cache: measured on the seed MLP's step, the SGD update after a product shared
    by two threads ran ~3x slower on one thread than the product's own shares take."""
    out = {}
    ks = plan.kernels
    for i in range(len(ks) - 1):
        k, nxt = ks[i], ks[i + 1]
        if k.kind != "matmul" or nxt.kind != "loop" or nxt.reduces or not parallel_ok(plan, k):
            continue
        gd = gemm_dims(plan, k.node)
        # (M, N), or (..., m, N) over a product whose batch was folded into its rows
        # (``F.linear`` on 3-D input: one gemm of M = prod(...) * m rows); the loop's
        # outer dim must then split at row boundaries, which the lowering checks
        # (``Lowerer._run_kernels`` runs it as a parallel call of its own otherwise)
        rows_space = nxt.space == (gd.M, gd.N) or (
            FOLDED_EPILOGUES
            and len(nxt.space) >= 2
            and nxt.space[-1] == gd.N
            and numel(nxt.space[:-1]) == gd.M
        )
        if gd.batch or gd.split != "rows" or not rows_space:
            continue
        mine = {canonical(plan, b) for b in k.writes}
        theirs = {canonical(plan, b) for b in k.reads}
        # the loop may write over the product's own result (plan.reuse: read only at the
        # element it writes, checked below), never over what the product reads
        if any(
            canonical(plan, b) in theirs or (canonical(plan, b) in mine and b not in plan.reuse)
            for b in nxt.writes
        ):
            continue
        if _overwrites_product_memory(plan, k, nxt):
            continue
        ok = True
        for v in plan._loop_views(nxt):
            if canonical(plan, v.buf) in mine and (
                v.offset != 0 or v.broadcast_to(nxt.space) != cstrides(nxt.space) or gd.N == 0
            ):
                ok = False
                break
        if ok:
            out[i] = i + 1
    return out


def _arena_span(plan: Schedule, buf):
    """The arena bytes [start, end) of buffer ``buf``, or None when it is not in the arena."""
    spec = plan.buffers.get(buf)
    if spec is None or spec[0] != "arena":
        return None
    return spec[1], spec[1] + max(1, spec[2])


def _overwrites_product_memory(plan: Schedule, k: Kernel, nxt: Kernel) -> bool:
    """Would loop ``nxt``, run inside product ``k``'s thread shares, store into arena
    bytes the product still uses in another thread's share?  Liveness lets a value the
    loop makes take the slot of an operand whose last reader is the product (the arena
    plan sees two kernels in a row), but inside the product's shares the other threads
    are still reading that operand.  Only a store over the product's own result (a value
    written over it, ``plan.reuse``, read only at the element it writes) is allowed."""
    used = [b for b in k.reads | k.writes] + [key for key, _ in k.scratch]
    spans = [(b, _arena_span(plan, b)) for b in used]
    mine = {canonical(plan, b) for b in k.writes}
    for w in nxt.writes:
        ws = _arena_span(plan, w)
        if ws is None:
            continue
        for b, sp in spans:
            if sp is None or sp[1] <= ws[0] or ws[1] <= sp[0]:
                continue
            if b in k.writes and canonical(plan, w) in mine and w in plan.reuse:
                continue  # written over the product's result: checked by epilogues()
            return True
    return False


def needs_pool(plan: Schedule) -> bool:
    """Does the code for ``plan`` call the worker pool (``POOL_RUN``)?  Then the pool must
    be registered (``graphc.runtime.pool.ensure()``) before the code is loaded."""
    return any(parallel_ok(plan, k) for k in plan.kernels) or any(
        needs_pool(sp) for lp in plan.loops.values() for _, sp in lp.graphs()
    )


def work(plan: Schedule) -> int:
    """Loop elements the kernels of ``plan`` cover in one run: a scan's body's work times
    its length; a while's trip count is unknown, so it counts as big."""
    total = 0
    for k in plan.kernels:
        if k.kind == "scan_loop":
            lp = plan.loops[k.node]
            total += lp.length * work(lp.body)
        elif k.kind == "while_loop":
            total += GIL_FREE_MIN + 1
        else:
            total += numel(k.space)
    return total


def releases_gil(plan: Schedule) -> bool:
    """Does the entry point release the GIL while its kernels run?  Only for graphs whose
    kernels cover more than ``GIL_FREE_MIN`` elements: for small ones, releasing and
    taking it back again costs more than it lets other threads do."""
    return work(plan) > GIL_FREE_MIN
