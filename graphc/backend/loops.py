"""Native code of the structured loops ``scan`` and ``while``: a real loop, never unrolled.

The scheduler (graphc.backend.schedule.LoopPlan) gives a loop node a kernel of its own
and its graphs (``body``, and ``cond`` for a while) schedules of their own.  Each graph
is lowered once, by a Lowerer of its own into the same LLVM module, as a function

    i32 k<i>_body(ptr in0, ..., ptr out0, ..., ptr arena)

that runs the graph's kernels in order over raw pointers (``Lowerer.body_function``;
its kernels are named ``k<i>_body_k<j>_<kind>``, so a loop inside a body nests its names
the same way).  The loop kernel ``k<i>_scan_loop`` / ``k<i>_while_loop`` then:

* copies the initial carries into scratch buffer A (the carries ping-pong between two
  scratch buffers A and B in the outer arena, so a body output never overlaps a body
  input within an iteration, and permuted carries -- new carry 0 = old carry 1 -- are
  read from one buffer and written to the other);
* per iteration calls the body with the consts, the current carries, x slice ``i`` of
  every xs (``base + i * slice bytes``, i reversed for ``reverse``) and, as outputs, the
  other carry buffer and y slice ``i`` of each stacked ys (a y nothing reads goes to a
  scratch slice); a while first calls its cond into a scratch byte and stops at False;
* a nonzero rc of the body (an index out of bounds) returns at once: the entry point
  frees what it allocated and raises;
* finally copies the last carries into the ``loop_out`` buffers.

The code size does not depend on the length (a loop of 10 and of 10**6 steps differ
only in one constant).  Parallel kernels inside a body run on the pool from the thread
running the loop, one job at a time, exactly as they do from the entry point.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir

from ..errors import GraphcError, LoweringError, with_context
from ..ir import describe, printable
from . import irtext
from .abi import I1, I32, I64, I8, PTR, RC_OK
from .schedule import LOOP_KINDS, Kernel
from .strided import numel

KINDS = tuple(LOOP_KINDS.values())  # scan_loop, while_loop


class _NoPool:
    """What the entry point asks of a kernel's builder: a loop kernel is never split."""

    par = None


def _nbytes(shape: tuple, dtype: Any) -> int:
    return numel(shape) * np.dtype(dtype).itemsize


def loop_kernel(low: Any, i: int, kern: Kernel) -> tuple:
    """The function of scan/while kernel ``i`` of ``low`` (a graphc.backend.lower.Lowerer):
    ``i32 k<i>_<kind>(ptr buffers..., ptr scratch...)`` with the kernel's distinct buffers
    (``low._kernel_bufs``) then its scratch (``kern.scratch``, in order).  Returns
    (function, builder stand-in)."""
    plan = low.plan
    g = plan.g
    node = kern.node
    assert node is not None  # a loop kernel is its loop node's
    lp = plan.loops[node]
    bufs = low._kernel_bufs(kern)
    name = f"{low.prefix}k{i}_{kern.kind}"
    fn = ir.Function(
        low.module, ir.FunctionType(I32, [PTR] * (len(bufs) + len(kern.scratch))), name=name
    )
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    ptrs: dict = {}
    for buf, arg in zip(bufs, fn.args):
        arg.name = f"n{buf}" if not isinstance(buf, tuple) else f"{buf[0]}{buf[1]}"
        ptrs[buf] = arg
    scratch = {}
    for (key, _), arg in zip(kern.scratch, fn.args[len(bufs) :]):
        arg.name = "s_" + "_".join(str(p) for p in key[:1] + key[2:])
        scratch[key] = arg
    funcs = {}
    for role, sp in lp.graphs():
        funcs[role] = _graph_function(low, i, node, role, sp)
    low.current_node = node
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    irtext.comment(b, describe(g, node))
    irtext.comment(b, lp.header())
    for role in funcs:
        irtext.comment(b, f"{role}: function {funcs[role].name} (graph {lp_graph_name(lp, role)})")
    rc_slot = b.alloca(I32, name="rc")
    b.store(ir.Constant(I32, RC_OK), rc_slot)
    parity = b.alloca(I1, name="parity")  # 0: the carries are in A, 1: in B
    b.store(ir.Constant(I1, 0), parity)
    t_slot = b.alloca(I64, name="t")
    b.store(ir.Constant(I64, 0), t_slot)

    def operand(o: int):
        """Pointer to the first element of operand ``o`` (contiguous: see LoopPlan)."""
        v = plan.views[o]
        base = ptrs[low._canonical(v.buf)]
        if not v.offset:
            return base
        off = v.offset * np.dtype(plan.nd(o)["dtype"]).itemsize
        return b.gep(base, [ir.Constant(I64, off)], source_etype=I8, name=f"op_n{o}")

    def out_ptr(j: int):
        u = lp.outs.get(j)
        return None if u is None else ptrs[low._canonical(u)]

    memcpy = low.module.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])

    def copy(dst, src, nbytes: int) -> None:
        if nbytes:
            b.call(memcpy, [dst, src, ir.Constant(I64, nbytes), ir.Constant(I1, 0)])

    k = len(lp.carries)
    carry_bytes = [_nbytes(*lp.results[j]) for j in range(k)]
    a_bufs = [scratch[("carry", lp.n, j, 0)] for j in range(k)]
    b_bufs = [scratch[("carry", lp.n, j, 1)] for j in range(k)]
    consts = [operand(o) for o in lp.consts]
    cond_consts = [operand(o) for o in lp.cond_consts]
    b.comment("the initial carries into scratch A")
    for j, o in enumerate(lp.carries):
        copy(a_bufs[j], operand(o), carry_bytes[j])
    null = ir.Constant(PTR, None)

    def arena(role: str):
        return scratch.get(("arena", lp.n, role), null)

    def carries(swap: bool) -> list:
        p = b.load(parity, typ=I1)
        first, second = (b_bufs, a_bufs) if swap else (a_bufs, b_bufs)
        return [b.select(p, y, x) for x, y in zip(first, second)]

    fail = fn.append_basic_block("failed")
    done = fn.append_basic_block("done")

    def call(role: str, args: list, after: str) -> None:
        rc = b.call(funcs[role], args, name=f"rc_{role}")
        b.store(rc, rc_slot)
        nxt = fn.append_basic_block(after)
        b.cbranch(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), fail, nxt)
        b.position_at_end(nxt)

    cond_bb = fn.append_basic_block("iteration")
    b.branch(cond_bb)
    b.position_at_end(cond_bb)
    t = b.load(t_slot, typ=I64, name="step")
    cur = carries(False)
    if lp.kind == "scan":
        body_bb = fn.append_basic_block("body")
        b.cbranch(b.icmp_signed("<", t, ir.Constant(I64, lp.length)), body_bb, done)
        b.position_at_end(body_bb)
        idx = b.sub(ir.Constant(I64, lp.length - 1), t, name="i") if lp.reverse else t
        xs = []
        for o in lp.xs:
            shp, dt = lp.plan.nd(o)["shape"], lp.plan.nd(o)["dtype"]
            step = ir.Constant(I64, _nbytes(tuple(shp)[1:], dt))
            xs.append(b.gep(operand(o), [b.mul(idx, step, flags=["nsw", "nuw"])], source_etype=I8))
        ys = []
        for m in range(lp.num_ys()):
            shp, dt = lp.results[k + m]
            dst = out_ptr(k + m)
            if dst is None:
                ys.append(scratch[("y", lp.n, m)])
            else:
                step = ir.Constant(I64, _nbytes(shp[1:], dt))
                ys.append(b.gep(dst, [b.mul(idx, step, flags=["nsw", "nuw"])], source_etype=I8))
        nxt = carries(True)
        call("body", consts + cur + xs + nxt + ys + [arena("body")], "body_ok")
    else:
        flag = scratch[("flag", lp.n)]
        call("cond", cond_consts + cur + [flag, arena("cond")], "cond_ok")
        go = b.icmp_unsigned("!=", b.load(flag, typ=I8), ir.Constant(I8, 0))
        body_bb = fn.append_basic_block("body")
        b.cbranch(go, body_bb, done)
        b.position_at_end(body_bb)
        nxt = carries(True)
        call("body", consts + cur + nxt + [arena("body")], "body_ok")
    b.store(b.xor(b.load(parity, typ=I1), ir.Constant(I1, 1)), parity)
    b.store(b.add(t, ir.Constant(I64, 1)), t_slot)
    b.branch(cond_bb)
    b.position_at_end(done)
    b.comment("the final carries into their loop_out buffers")
    final = carries(False)
    for j in range(k):
        dst = out_ptr(j)
        if dst is not None:
            copy(dst, final[j], carry_bytes[j])
    b.ret(ir.Constant(I32, RC_OK))
    b.position_at_end(fail)
    b.ret(b.load(rc_slot, typ=I32))
    return fn, _NoPool()


def lp_graph_name(lp: Any, role: str) -> str:
    """The printable name of a loop's ``body`` or ``cond`` graph."""
    graph = lp.body_graph if role == "body" else lp.cond_graph
    return printable(graph.name)


def _graph_function(low: Any, i: int, node: int, role: str, sp: Any) -> ir.Function:
    """Lower the graph ``role`` of loop kernel ``i`` into ``k<i>_<role>`` of the same
    module; an unexpected failure names the node of that graph and the loop node."""
    sub = type(low)(sp, sp.g.name, module=low.module, prefix=f"{low.prefix}k{i}_{role}_")
    try:
        return sub.body_function(f"{low.prefix}k{i}_{role}")
    except GraphcError:
        raise
    except Exception as e:
        n = sub.current_node
        at = f" at {describe(sp.g, n)}" if n is not None and n in sp.g else ""
        raise with_context(
            LoweringError,
            f"graphc: lowering the {role} graph of {describe(low.g, node)} failed{at}: "
            f"{type(e).__name__}: {e}",
            e,
            node=node,
        ) from e
