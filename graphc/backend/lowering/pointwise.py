"""Lowering entries: elementwise math and activations.

See table.py for the entry each family needs.  The transcendentals are graphc's vector
math (vecmath.py: branch-free, they vectorize); tan is libm's (a scalar call: the vector
sin/cos lose accuracy for huge arguments, and tan is rarely hot).  Rounding maps to
LLVM's intrinsics; floor_divide / remainder / fmod follow PyTorch's float algorithms
(``frem`` is C's fmod).  Integer division needs a divisor known not to be 0 or -1 (a
constant): eager raises PyTorch's ZeroDivisionError for 0, which a kernel cannot.
"""

from __future__ import annotations

from llvmlite import ir

from ...errors import UnsupportedOpError
from ...ir import describe
from ..abi import F64
from ..llvmir import const
from .table import Elem, scalar


def _vector_math(kb, e: Elem):
    return kb.math(e.op, e.t, *e.xs)


for _op in (
    "log1p", "expm1", "erf", "asin", "acos", "atan", "sinh", "cosh",
    "asinh", "acosh", "atanh", "log2", "log10", "exp2", "atan2",
):  # fmt: skip
    scalar(_op)(_vector_math)


@scalar("tan")
def _tan(kb, e: Elem):
    b, x = kb.b, e.xs[0]
    fn = kb.module.globals.get("tan")
    if fn is None:
        fn = ir.Function(kb.module, ir.FunctionType(F64, [F64]), name="tan")
    wide = x if e.t == F64 else b.fpext(x, F64)
    res = b.call(fn, [wide])
    return res if e.t == F64 else b.fptrunc(res, e.t, name=e.name)


def _rounding(intrinsic: str):
    def lower(kb, e: Elem):
        x = e.xs[0]
        if not e.fl:
            return x  # an integer is its own floor
        return kb.b.call(kb.module.declare_intrinsic(intrinsic, [e.t]), [x], name=e.name)

    return lower


for _op, _intr in (
    ("floor", "llvm.floor"),
    ("ceil", "llvm.ceil"),
    ("trunc", "llvm.trunc"),
    ("round", "llvm.roundeven"),
):
    scalar(_op)(_rounding(_intr))


def _floor(kb, t, v):
    return kb.b.call(kb.module.declare_intrinsic("llvm.floor", [t]), [v])


def _float_mod_fix(kb, e: Elem):
    """(fmod(x, y), whether it must move by y to take y's sign) for floats."""
    b, (x, y) = kb.b, e.xs
    zero = ir.Constant(e.t, 0.0)
    mod = b.frem(x, y)
    differ = b.xor(b.fcmp_ordered("<", y, zero), b.fcmp_ordered("<", mod, zero))
    return mod, b.and_(b.fcmp_unordered("!=", mod, zero), differ)


def _int_divisor(kb, e: Elem) -> int:
    """The constant integer divisor of an integer division; refused unless known and not
    0 (eager raises ZeroDivisionError) or -1 (the minimum integer overflows)."""
    yn = kb.g.nx.nodes[e.n]["operands"][1]
    known = kb.plan.scalars.get(yn)
    if known is None or int(known) in (0, -1):
        raise UnsupportedOpError(
            f"{describe(kb.g, e.n)}: integer {e.op} is compiled only for a constant divisor "
            "other than 0 and -1 (eager raises ZeroDivisionError for 0); divide floats, or "
            "run it eagerly"
        )
    return int(known)


def _int_division(kb, e: Elem):
    """(quotient, remainder) truncated toward zero, and whether they need the floor fix."""
    b, (x, y) = kb.b, e.xs
    _int_divisor(kb, e)
    q, r = b.sdiv(x, y), b.srem(x, y)
    zero = ir.Constant(e.t, 0)
    differ = b.xor(b.icmp_signed("<", r, zero), b.icmp_signed("<", y, zero))
    return q, r, b.and_(b.icmp_signed("!=", r, zero), differ)


@scalar("fmod")
def _fmod(kb, e: Elem):
    if e.fl:
        return kb.b.frem(e.xs[0], e.xs[1], name=e.name)
    _int_divisor(kb, e)
    return kb.b.srem(e.xs[0], e.xs[1], name=e.name)


@scalar("remainder")
def _remainder(kb, e: Elem):
    b = kb.b
    if e.fl:
        mod, fix = _float_mod_fix(kb, e)
        return b.select(fix, b.fadd(mod, e.xs[1]), mod, name=e.name)
    _, r, fix = _int_division(kb, e)
    return b.select(fix, b.add(r, e.xs[1]), r, name=e.name)


@scalar("floor_divide")
def _floor_divide(kb, e: Elem):
    b, (x, y), t = kb.b, e.xs, e.t
    if not e.fl:
        q, _, fix = _int_division(kb, e)
        return b.select(fix, b.sub(q, ir.Constant(t, 1)), q, name=e.name)
    # PyTorch's div_floor_floating (numpy's npy_divmod): exact for every representable
    # quotient, unlike floor(x / y)
    mod, fix = _float_mod_fix(kb, e)
    div = b.fdiv(b.fsub(x, mod), y)
    div = b.select(fix, b.fsub(div, const(e.out, 1.0)), div)
    fl = _floor(kb, t, div)
    fl = b.select(
        b.fcmp_ordered(">", b.fsub(div, fl), const(e.out, 0.5)), b.fadd(fl, const(e.out, 1.0)), fl
    )
    q = b.fdiv(x, y)
    sign_zero = b.call(
        kb.module.declare_intrinsic("llvm.copysign", [t], fnty=ir.FunctionType(t, [t, t])),
        [const(e.out, 0.0), q],
    )
    out = b.select(b.fcmp_unordered("!=", div, const(e.out, 0.0)), fl, sign_zero)
    return b.select(b.fcmp_ordered("==", y, const(e.out, 0.0)), q, out, name=e.name)
