"""Scalar lowerings of the elementwise ops: one output element from its operands' register
values (:class:`Elem`), inside the loop the scheduler fused the op into.

Use the vector-math functions (``kb.math("exp" | "log" | "tanh" | ..., t, x)``, defined in
graphc/backend/vecmath.py) rather than libm calls, so the loop still vectorizes.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from ...errors import UnsupportedOpError
from ...ir import describe
from ..abi import F64, I1, I8
from ..llvmir import const
from .table import Elem, scalar

_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _compare(kb, e: Elem):
    b = kb.b
    ct = np.result_type(*e.in_dtypes)
    x, y = (kb.convert(v, s, ct) for v, s in zip(e.vals, e.in_dtypes))
    sym = _CMP[e.op]
    if ct.kind == "f":
        if e.op == "ne":
            return b.fcmp_unordered("!=", x, y, name=e.name)
        return b.fcmp_ordered(sym, x, y, name=e.name)
    if ct.kind == "b":
        return b.icmp_unsigned(sym, x, y, name=e.name)
    return b.icmp_signed(sym, x, y, name=e.name)


for _op in _CMP:
    scalar(_op)(_compare)


def _as_bools(kb, e: Elem) -> list:
    return [kb.convert(v, s, np.dtype(bool)) for v, s in zip(e.vals, e.in_dtypes)]


@scalar("logical_not")
def _logical_not(kb, e: Elem):
    return kb.b.xor(_as_bools(kb, e)[0], ir.Constant(I1, 1), name=e.name)


@scalar("logical_and")
def _logical_and(kb, e: Elem):
    x, y = _as_bools(kb, e)
    return kb.b.and_(x, y, name=e.name)


@scalar("logical_or")
def _logical_or(kb, e: Elem):
    x, y = _as_bools(kb, e)
    return kb.b.or_(x, y, name=e.name)


@scalar("where")
def _where(kb, e: Elem):
    c = kb.convert(e.vals[0], e.in_dtypes[0], np.dtype(bool))
    x = kb.convert(e.vals[1], e.in_dtypes[1], e.out)
    y = kb.convert(e.vals[2], e.in_dtypes[2], e.out)
    return kb.b.select(c, x, y, name=e.name)


@scalar("cast")
def _cast(kb, e: Elem):
    return kb.convert(e.vals[0], e.in_dtypes[0], e.out)


@scalar("fill")
def _fill(kb, e: Elem):
    return const(e.out, e.attrs["value"])


@scalar("copy")
def _copy(kb, e: Elem):
    return e.xs[0]


scalar("detach")(_copy)


@scalar("neg")
def _neg(kb, e: Elem):
    if e.out.kind == "b":
        raise UnsupportedOpError(f"{describe(kb.g, e.n)}: negation of bools")
    b, x = kb.b, e.xs[0]
    return b.fneg(x, name=e.name) if e.fl else b.sub(ir.Constant(e.t, 0), x, name=e.name)


def _trig(kb, e: Elem):
    """sin/cos: the vector code, which is accurate for ``|x| < TRIG_ACCURATE_LIMIT``.  A
    loop kernel that uses them records whether an argument was beyond (``trig_flag``)
    and then runs again with ``trig_exact``: libm's sin/cos (a full argument reduction,
    as numpy's) for those arguments (see ``KernelBuilder.loop_kernel``)."""
    b, t, x = kb.b, e.t, e.xs[0]
    fast = kb.math(e.op, t, x)
    limit = kb.vecmath().TRIG_ACCURATE_LIMIT  # the module is imported at its first use
    big = b.fcmp_ordered(">=", kb.math("abs", t, x), ir.Constant(t, limit))
    if kb.trig_exact:
        wide = x if t == F64 else b.fpext(x, F64)
        exact = b.call(kb.module.declare_intrinsic(f"llvm.{e.op}", [F64]), [wide])
        return b.select(big, exact if t == F64 else b.fptrunc(exact, t), fast)
    if kb.trig_flag is not None:
        b.store(b.or_(b.load(kb.trig_flag, typ=I8), b.zext(big, I8)), kb.trig_flag)
    return fast


scalar("sin")(_trig)
scalar("cos")(_trig)


def _vector_math(kb, e: Elem):
    return kb.math(e.op, e.t, e.xs[0])


for _op in ("exp", "log", "tanh", "sigmoid", "sqrt"):
    scalar(_op)(_vector_math)


@scalar("abs")
def _abs(kb, e: Elem):
    x = e.xs[0]
    if e.fl:
        return kb.math("abs", e.t, x)
    if e.out.kind == "b":
        return x
    b, zero = kb.b, ir.Constant(e.t, 0)
    return b.select(b.icmp_signed("<", x, zero), b.sub(zero, x), x, name=e.name)


@scalar("sign")
def _sign(kb, e: Elem):
    # PyTorch's (x > 0) - (x < 0): NaN and -0.0 give +0, a bool is itself
    b, x = kb.b, e.xs[0]
    zero, one, mone = (const(e.out, 0), const(e.out, 1), const(e.out, -1))
    if e.fl:
        pos, neg = b.fcmp_ordered(">", x, zero), b.fcmp_ordered("<", x, zero)
    else:
        pos, neg = kb.icmp(">", x, zero), kb.icmp("<", x, zero)
    return b.select(pos, one, b.select(neg, mone, zero), name=e.name)


@scalar("relu")
def _relu(kb, e: Elem):
    return kb.clamp_to(e.xs[0], "<", const(e.out, 0), e.fl)


@scalar("clamp")
def _clamp(kb, e: Elem):
    x = e.xs[0]
    if e.attrs["min"] is not None:
        x = kb.clamp_to(x, "<", const(e.out, e.attrs["min"]), e.fl)
    if e.attrs["max"] is not None:
        x = kb.clamp_to(x, ">", const(e.out, e.attrs["max"]), e.fl)
    return x


@scalar("maximum")
def _maximum(kb, e: Elem):
    return kb.max_of(e.xs[0], e.xs[1], e.fl)


@scalar("minimum")
def _minimum(kb, e: Elem):
    return kb.min_of(e.xs[0], e.xs[1], e.fl)


def _arith(kb, e: Elem):
    b, (x, y), op = kb.b, e.xs, e.op
    if e.fl:
        return getattr(b, "f" + op)(x, y, name=e.name)
    if e.out.kind == "b":  # bool: add is or, mul is and (sub is refused when traced)
        if op == "add":
            return b.or_(x, y, name=e.name)
        if op == "mul":
            return b.and_(x, y, name=e.name)
        raise UnsupportedOpError(f"{describe(kb.g, e.n)}: {op} of bools")
    return getattr(b, op)(x, y, name=e.name)


for _op in ("add", "sub", "mul"):
    scalar(_op)(_arith)


@scalar("div")
def _div(kb, e: Elem):
    return kb.b.fdiv(e.xs[0], e.xs[1], name=e.name)


@scalar("pow")
def _pow(kb, e: Elem):
    b, (x, y), t = kb.b, e.xs, e.t
    if e.fl:
        yn = kb.g.nx.nodes[e.n]["operands"][1]
        if not kb.g.nx.nodes[yn]["shape"]:
            return _scalar_pow(kb, yn, x, y, t)
        return kb.math("pow", t, x, y)
    if e.out.kind == "b":  # x or not y (eager's bool ** bool)
        return b.or_(x, b.xor(y, ir.Constant(I1, 1)), name=e.name)
    return b.call(_int_pow_function(kb.module, t), [x, y], name=e.name)


def _scalar_pow(kb, yn: int, x, y, t):
    """``x ** y`` for a 0-d exponent node ``yn``, as eager computes it (PyTorch's rule for
    a Python-number exponent): 0.5 is sqrt, -0.5 is 1/sqrt, anything else C's pow.  A
    constant exponent picks its code here; a computed one selects per element."""
    b = kb.b
    known = kb.plan.scalars.get(yn)
    if known is not None:
        v = float(known)
        if v == 0.5:
            return kb.math("sqrt", t, x)
        if v == -0.5:
            return b.fdiv(ir.Constant(t, 1.0), kb.math("sqrt", t, x))
        return kb.math("pow", t, x, y)
    root = kb.math("sqrt", t, x)
    return b.select(
        b.fcmp_ordered("==", y, ir.Constant(t, 0.5)),
        root,
        b.select(
            b.fcmp_ordered("==", y, ir.Constant(t, -0.5)),
            b.fdiv(ir.Constant(t, 1.0), root),
            kb.math("pow", t, x, y),
        ),
    )


def _int_pow_function(module: ir.Module, t: ir.IntType) -> ir.Function:
    """``graphc_ipow_i<w>(x, y)``: eager's (PyTorch's) integer power -- exact, wrapping
    around like numpy, by squaring; a negative exponent gives 1 for base 1, -1 or 1
    for base -1 (odd or even exponent), else 0."""
    name = f"graphc_ipow_i{t.width}"
    f = module.globals.get(name)
    if f is not None:
        return f
    f = ir.Function(module, ir.FunctionType(t, [t, t]), name=name)
    f.linkage = "internal"
    f.attributes.add("nounwind")
    x, y = f.args
    x.name, y.name = "base", "exponent"
    blocks = [f.append_basic_block(s) for s in ("entry", "negative", "loop", "step", "done")]
    entry, negative, loop, step, done = blocks
    b = ir.IRBuilder(entry)
    zero, one = ir.Constant(t, 0), ir.Constant(t, 1)
    b.cbranch(b.icmp_signed("<", y, zero), negative, loop)
    b.position_at_end(negative)
    odd = b.trunc(y, I1)
    b.ret(
        b.select(
            b.icmp_signed("==", x, one),
            one,
            b.select(
                b.icmp_signed("==", x, ir.Constant(t, -1)),
                b.select(odd, ir.Constant(t, -1), one),
                zero,
            ),
        )
    )
    b.position_at_end(loop)
    r, base, e = b.phi(t, "r"), b.phi(t, "b"), b.phi(t, "e")
    b.cbranch(b.icmp_signed("==", e, zero), done, step)
    b.position_at_end(step)
    r2 = b.select(b.trunc(e, I1), b.mul(r, base), r)
    base2, e2 = b.mul(base, base), b.lshr(e, one)
    b.branch(loop)
    for phi, start, nxt in ((r, one, r2), (base, x, base2), (e, y, e2)):
        phi.add_incoming(start, entry)
        phi.add_incoming(nxt, step)
    b.position_at_end(done)
    b.ret(r)
    return f
