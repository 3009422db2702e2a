"""Random numbers: the kernel of the ``philox`` op."""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..abi import F32, F64, I32, I64
from ..strided import numel
from .table import kernel

from eager.interop import random_op


@kernel("philox")
def philox_kernel(kb, n: int) -> None:
    """Element i of a ``philox`` node: Philox 4x32-10 of counter ``counter + offset + i``
    and the state's key (eager/ops/random.py says how words become numbers).  Straight
    integer code per element, so LLVM vectorizes the loop; a pure function of i, so
    any split among threads gives the same numbers."""
    b, g = kb.b, kb.g
    d = g.nx.nodes[n]
    a = d["attrs"]
    dt = np.dtype(d["dtype"])
    total = numel(d["shape"])
    if total == 0:
        return
    sv = kb.plan.views[d["operands"][0]]
    i64t = np.dtype(np.int64)
    key = kb.load(sv.buf, i64t, ir.Constant(I64, sv.offset), name="key")
    base = kb.load(sv.buf, i64t, ir.Constant(I64, sv.offset + sv.strides[0]), name="counter")
    off = int(a["offset"]) % 2**64
    base = b.add(base, ir.Constant(I64, off - 2**64 if off >= 2**63 else off))
    k0, k1 = b.trunc(key, I32), b.trunc(b.lshr(key, ir.Constant(I64, 32)), I32)

    def c64(v: int) -> ir.Constant:  # two's complement: bits, not a value
        v %= 2**64
        return ir.Constant(I64, v - 2**64 if v >= 2**63 else v)

    def c32(v: int) -> ir.Constant:
        v %= 2**32
        return ir.Constant(I32, v - 2**32 if v >= 2**31 else v)

    def u64(lo, hi):  # a float64 in [0, 1) from 27 + 26 bits of two words
        x = b.uitofp(b.lshr(lo, c32(5)), F64)
        y = b.uitofp(b.lshr(hi, c32(6)), F64)
        return b.fmul(
            b.fadd(b.fmul(x, ir.Constant(F64, 67108864.0)), y), ir.Constant(F64, 2.0**-53)
        )

    def body(idx):
        ctr = b.add(base, idx[0])
        w = [b.trunc(ctr, I32), b.trunc(b.lshr(ctr, c64(32)), I32), c32(0), c32(0)]
        kk = [k0, k1]
        for r in range(random_op.ROUNDS):
            p0 = b.mul(b.zext(w[0], I64), c64(random_op.M0))
            p1 = b.mul(b.zext(w[2], I64), c64(random_op.M1))
            w = [
                b.xor(b.xor(b.trunc(b.lshr(p1, c64(32)), I32), w[1]), kk[0]),
                b.trunc(p1, I32),
                b.xor(b.xor(b.trunc(b.lshr(p0, c64(32)), I32), w[3]), kk[1]),
                b.trunc(p0, I32),
            ]
            if r + 1 < random_op.ROUNDS:
                kk = [b.add(kk[0], c32(random_op.W0)), b.add(kk[1], c32(random_op.W1))]
        dist = a["dist"]
        if dist == "uniform" and dt == np.float32:
            v = b.fmul(b.uitofp(b.lshr(w[0], c32(8)), F32), ir.Constant(F32, 2.0**-24))
        elif dist == "uniform":
            v = u64(w[0], w[1])
        elif dist == "normal":
            u1 = b.fsub(ir.Constant(F64, 1.0), u64(w[0], w[1]))
            u2 = u64(w[2], w[3])
            rad = kb.math("sqrt", F64, b.fmul(ir.Constant(F64, -2.0), kb.math("log", F64, u1)))
            ang = b.fmul(ir.Constant(F64, 2.0 * np.pi), u2)
            v = b.fmul(rad, kb.math("cos", F64, ang))
            if dt == np.float32:
                v = b.fptrunc(v, F32)
        else:
            bits = b.or_(b.zext(w[0], I64), b.shl(b.zext(w[1], I64), c64(32)))
            v = b.add(b.urem(bits, c64(int(a["high"]) - int(a["low"]))), c64(int(a["low"])))
            if dt == np.int32:
                v = b.trunc(v, I32)
        kb.store(n, dt, idx[0], v)

    if kb.par is not None:
        kb.outer_size = total
        kb.loop([total], body, name="r", outer_range=(kb.par[0], kb.par[1]))
    else:
        kb.loop([total], body, name="r")
