"""Which kernels of a schedule run on several threads, and what runs with them: the
planner's thread policy (one pool runs loops and matrix products; see docs/backend.md)."""

from __future__ import annotations


from .abi import GEMM_PARALLEL_MIN, GIL_FREE_MIN, PARALLEL_MIN
from .lowering import conv
from .lowering.matmul import gemm_dims
from .schedule import Kernel, Schedule, loop_parallel_ok
from .strided import cstrides, numel


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
    return loop_parallel_ok(plan, kern.space, kern.reduces, PARALLEL_MIN)


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
        if gd.batch or gd.split != "rows" or nxt.space != (gd.M, gd.N):
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
