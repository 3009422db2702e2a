"""Small llvmlite helpers the lowering shares: register and memory types of a dtype,
constants, and a counted loop."""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from .abi import F32, F64, I1, I8, I32, I64


def reg_type(dtype: np.dtype) -> ir.Type:
    """Type of a value in registers (bool is i1)."""
    return {"float32": F32, "float64": F64, "int64": I64, "int32": I32, "bool": I1}[dtype.name]


def mem_type(dtype: np.dtype) -> ir.Type:
    """Type of an element in memory (bool is one byte)."""
    return {"float32": F32, "float64": F64, "int64": I64, "int32": I32, "bool": I8}[dtype.name]


def const(dtype: np.dtype, value) -> ir.Constant:
    t = reg_type(dtype)
    if dtype.kind == "f":
        return ir.Constant(t, float(value))
    if dtype.kind == "b":
        return ir.Constant(I1, int(bool(value)))
    return ir.Constant(t, int(value))


def counted_loop(b: ir.IRBuilder, fn: ir.Function, start, stop, body, name: str) -> None:
    """``for t in range(start, stop): body(t)`` with runtime bounds, in the entry point.
    ``body`` may branch, as long as it leaves ``b`` in a block that falls through."""
    slot = b.alloca(I64, name=f"{name}_t")
    b.store(start, slot)
    cond = fn.append_basic_block(f"{name}_cond")
    blk = fn.append_basic_block(name)
    done = fn.append_basic_block(f"{name}_done")
    b.branch(cond)
    b.position_at_end(cond)
    t = b.load(slot, typ=I64)
    b.cbranch(b.icmp_signed("<", t, stop), blk, done)
    b.position_at_end(blk)
    body(t)
    b.store(b.add(t, ir.Constant(I64, 1)), slot)
    b.branch(cond)
    b.position_at_end(done)


def no_unroll_loop_id(module: ir.Module) -> ir.values.MDValue:
    """The module's ``!llvm.loop`` node that tells LLVM's unroller to leave a loop alone
    (``llvm.loop.unroll.disable``); one node per module, so the latches of identical
    kernels print the same text (graphc.backend.dedup)."""
    md = getattr(module, "_graphc_no_unroll", None)
    if md is None:
        disable = module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])
        # a loop id's first operand is the node itself (LangRef, "llvm.loop")
        md = ir.values.MDValue(module, [], name=str(len(module.metadata)))
        md.operands = (md, disable)
        module._graphc_no_unroll = md
    return md
