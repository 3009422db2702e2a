"""Big graphs run their kernels from part functions, not all from the entry point.

LLVM's optimizer and code generator are superlinear in the size of one function:
with every kernel call in ``graphc_entry`` (and the kernels inlined into it), a
tanh RNN unrolled over 300 time steps spent most of its compile time in the greedy
register allocator and the inliner-fed scalar passes of that one function.  So a
plan with more than :data:`SPLIT_ABOVE` kernels calls them from ``graphc_part<p>``
functions of at most :data:`PART_KERNELS` kernels each, in order; the entry point
only calls the parts.  Each part is ``noinline``, so every function LLVM sees stays
bounded, and a kernel function shared by several kernels (graphc.backend.dedup) is
``noinline`` too, so its body is optimized and compiled once instead of once per
inlined copy.  Small graphs (W0-W5) keep one entry function with their kernels
inlined into it, as before.

A part is ``i32 graphc_part<p>(i64 *ctx)``: ``ctx`` holds the data pointers of the
inputs and outputs, the arena and the thread count, written once by the entry
point; a part loads only the slots its kernels use.  It returns 0, or the nonzero
code of a failing indexing kernel, which the entry point handles as before.
"""

from __future__ import annotations

from llvmlite import ir

from .abi import I32, I64, PTR

PART_KERNELS = 64  # kernels per part function
SPLIT_ABOVE = 96  # plans with more kernels than this are split into parts


def split(plan) -> bool:
    """Whether the lowering runs ``plan``'s kernels through part functions."""
    return len(plan.kernels) > SPLIT_ABOVE


class _Slots:
    """The data pointers of a part, loaded from ``ctx`` in its entry block on first use
    (``data[k]`` as in the entry point's list)."""

    def __init__(self, b: ir.IRBuilder, ctx, n: int) -> None:
        self.b, self.ctx, self.n = b, ctx, n
        self.loaded: dict = {}

    def load(self, k: int, name: str, typ=PTR):
        v = self.loaded.get(k)
        if v is None:
            b = self.b
            with b.goto_entry_block():
                raw = b.load(b.gep(self.ctx, [ir.Constant(I64, k)], source_etype=I64), typ=I64)
                v = b.inttoptr(raw, PTR, name=name) if typ is PTR else b.trunc(raw, typ, name=name)
            self.loaded[k] = v
        return v

    def __getitem__(self, k: int):
        if not 0 <= k < self.n:
            raise IndexError(k)
        return self.load(k, f"data{k}")

    def __len__(self) -> int:
        return self.n


def run_in_parts(low, b: ir.IRBuilder, fn: ir.Function, kfns: list, data: list, arena, fail):
    """Emit, at ``b`` in the entry point ``fn``, the calls of the part functions running
    every kernel of ``low.plan`` in order (what ``Lowerer._run_kernels`` emits inline for
    small plans).  Returns the entry's rc slot (or None when no kernel can fail)."""
    plan = low.plan
    n = len(plan.kernels)
    ndata = len(data)
    nslots = ndata + 2  # data pointers, the arena, the thread count
    with b.goto_entry_block():
        ctx = b.bitcast(b.alloca(I64, size=nslots, name="parts_ctx"), PTR)
    for k, v in enumerate(list(data) + [arena if arena is not None else ir.Constant(PTR, None)]):
        b.store(b.ptrtoint(v, I64), b.gep(ctx, [ir.Constant(I64, k)], source_etype=I64))
    nthreads = getattr(low, "nthreads", None)
    if nthreads is not None:
        b.store(b.zext(nthreads, I64), b.gep(ctx, [ir.Constant(I64, ndata + 1)], source_etype=I64))
    # a kernel function called for several kernels is compiled once, not inlined per call
    calls: dict = {}
    for f in kfns:
        calls[id(f)] = calls.get(id(f), 0) + 1
    for f in {id(f): f for f in kfns}.values():
        if calls[id(f)] > 1 and "noinline" not in f.attributes:
            f.attributes.add("noinline")
    part_ty = ir.FunctionType(I32, [PTR])
    rc_slot = None
    saved = (getattr(low, "nthreads", None), low._tstate)
    for p, lo in enumerate(range(0, n, PART_KERNELS)):
        hi = min(lo + PART_KERNELS, n)
        part = ir.Function(low.module, part_ty, name=f"graphc_part{p}")
        part.linkage = "internal"
        part.attributes.add("nounwind")
        part.attributes.add("noinline")
        (pctx,) = part.args
        pctx.name = "ctx"
        pb = ir.IRBuilder(part.append_basic_block("entry"))
        pb.comment(f"kernels k{lo}..k{hi - 1}")
        slots = _Slots(pb, pctx, ndata)
        parena = slots.load(ndata, "arena") if arena is not None else None
        if nthreads is not None:
            low.nthreads = slots.load(ndata + 1, "nthreads", I32)
        low._tstate = None  # a failing part returns its rc; the entry point fails
        pfail = part.append_basic_block("kernel_failed")
        prc = low._run_kernels(pb, part, kfns, slots, parena, pfail, indices=range(lo, hi))
        pb.ret(ir.Constant(I32, 0))
        pb.position_at_end(pfail)
        pb.ret(pb.load(prc, typ=I32) if prc is not None else ir.Constant(I32, 0))
        low.nthreads, low._tstate = saved
        rc = b.call(part, [ctx], name=f"rc_part{p}")
        if prc is None:
            continue
        if rc_slot is None:
            with b.goto_entry_block():
                rc_slot = b.alloca(I32, name="rc")
        nxt = fn.append_basic_block(f"after_part{p}")
        b.store(rc, rc_slot)
        b.cbranch(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), fail, nxt)
        b.position_at_end(nxt)
    return rc_slot


__all__ = ["PART_KERNELS", "SPLIT_ABOVE", "run_in_parts", "split"]
