"""The IR emission helper of the vector math: a thin wrapper over llvmlite's IRBuilder so
the formulas of graphc.backend.vecmath read like the math."""

from __future__ import annotations


from llvmlite import ir

from .vecmath_constants import _VELTKAMP, _Spec


# ---------------------------------------------------------------------------
# IR emission helpers
# ---------------------------------------------------------------------------


class _Emitter:
    """Thin wrapper over IRBuilder so the math below reads like the formulas."""

    def __init__(self, builder: ir.IRBuilder, spec: _Spec) -> None:
        self.b = builder
        self.s = spec
        self.module = builder.module

    # constants
    def c(self, value: float) -> ir.Constant:
        return ir.Constant(self.s.fty, value)

    def ci(self, value: int) -> ir.Constant:
        return ir.Constant(self.s.ity, value)

    def f(self, v: ir.Value | float) -> ir.Value:
        return v if isinstance(v, ir.Value) else self.c(v)

    # floating point
    def add(self, a, b):
        return self.b.fadd(self.f(a), self.f(b))

    def sub(self, a, b):
        return self.b.fsub(self.f(a), self.f(b))

    def mul(self, a, b):
        return self.b.fmul(self.f(a), self.f(b))

    def div(self, a, b):
        return self.b.fdiv(self.f(a), self.f(b))

    def neg(self, a):
        return self.b.fneg(a)

    def _intrinsic(self, name: str, nargs: int) -> ir.Function:
        fty = self.s.fty
        return self.module.declare_intrinsic(name, [fty], fnty=ir.FunctionType(fty, [fty] * nargs))

    def fma(self, a, b, c):
        """a*b + c, fused when the target has FMA (``llvm.fmuladd``)."""
        return self.b.call(self._intrinsic("llvm.fmuladd", 3), [self.f(a), self.f(b), self.f(c)])

    def fabs(self, a):
        return self.b.call(self._intrinsic("llvm.fabs", 1), [a])

    def copysign(self, mag, sign):
        return self.b.call(self._intrinsic("llvm.copysign", 2), [mag, sign])

    def poly(self, x, coeffs: tuple[float, ...]):
        """Horner evaluation of sum(coeffs[i] * x**i)."""
        acc = self.c(coeffs[-1])
        for k in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, k)
        return acc

    def poly2(self, x, x2, coeffs: tuple[float, ...]):
        """sum(coeffs[i] * x**i) as E(x2) + x * O(x2) (``x2 = x*x``): as many operations
        as Horner, but two independent chains of half the length."""
        return self.fma(self.poly(x2, coeffs[1::2]), x, self.poly(x2, coeffs[0::2]))

    # comparisons (ordered: false when an operand is NaN)
    def lt(self, a, b):
        return self.b.fcmp_ordered("<", self.f(a), self.f(b))

    def le(self, a, b):
        return self.b.fcmp_ordered("<=", self.f(a), self.f(b))

    def gt(self, a, b):
        return self.b.fcmp_ordered(">", self.f(a), self.f(b))

    def ge(self, a, b):
        return self.b.fcmp_ordered(">=", self.f(a), self.f(b))

    def eq(self, a, b):
        return self.b.fcmp_ordered("==", self.f(a), self.f(b))

    def unordered(self, a, b):
        """True when a or b is NaN."""
        return self.b.fcmp_unordered("uno", a, b)

    def sel(self, cond, a, b):
        return self.b.select(cond, self.f(a), self.f(b))

    def and_(self, a, b):
        return self.b.and_(a, b)

    def or_(self, a, b):
        return self.b.or_(a, b)

    def not_(self, a):
        return self.b.not_(a)

    # integers / bits
    def bits(self, x):
        return self.b.bitcast(x, self.s.ity)

    def from_bits(self, i):
        return self.b.bitcast(i, self.s.fty)

    def iadd(self, a, b):
        return self.b.add(a, self.ci(b) if isinstance(b, int) else b)

    def isub(self, a, b):
        return self.b.sub(a, self.ci(b) if isinstance(b, int) else b)

    def iand(self, a, b: int):
        return self.b.and_(a, self.ci(b))

    def lshr(self, a, k: int):
        return self.b.lshr(a, self.ci(k))

    def shl(self, a, k: int):
        return self.b.shl(a, self.ci(k))

    def inz(self, a):
        """a != 0 for an integer."""
        return self.b.icmp_unsigned("!=", a, self.ci(0))

    def sign_bit(self, x):
        return self.b.icmp_signed("<", self.bits(x), self.ci(0))

    # composite steps
    def round_shift(self, v):
        """(float(rint(v)), int bits holding rint(v)) for |v| < 2**(mant-1).

        Adding 1.5 * 2**mant forces rounding to an integer; the integer then
        sits in the low mantissa bits.  Branch-free and vectorizable on any
        SSE2 target, unlike ``llvm.rint`` without SSE4.1.
        """
        t = self.add(v, self.s.shifter)
        return self.sub(t, self.s.shifter), self.isub(self.bits(t), self.s.shifter_bits)

    def int_to_float(self, k):
        """float(k) for |k| < 2**(mant-1), via the shifter (AVX2 has no i64 -> f64)."""
        return self.sub(self.from_bits(self.iadd(k, self.s.shifter_bits)), self.s.shifter)

    def pow2(self, n):
        """2**n from bits, for n in the normal exponent range."""
        return self.from_bits(self.shl(self.iadd(n, self.s.bias), self.s.mant))

    def two_sum(self, a, b):
        """(s, e) with s = fl(a+b) and a + b = s + e exactly (Knuth)."""
        s = self.add(a, b)
        bb = self.sub(s, a)
        e = self.add(self.sub(a, self.sub(s, bb)), self.sub(b, bb))
        return s, e

    def fast_two_sum(self, a, b):
        """(s, e) with a + b = s + e exactly, valid when |a| >= |b| (Dekker)."""
        s = self.add(a, b)
        return s, self.sub(b, self.sub(s, a))

    def split(self, a):
        """Veltkamp split of a into two 26-bit halves (no FMA needed)."""
        t = self.mul(a, _VELTKAMP)
        hi = self.sub(t, self.sub(t, a))
        return hi, self.sub(a, hi)

    def two_prod_err(self, a, b, p):
        """Error term e with a*b = p + e exactly, p = fl(a*b) (Dekker)."""
        ah, al = self.split(a)
        bh, bl = self.split(b)
        e = self.sub(self.mul(ah, bh), p)
        e = self.add(e, self.mul(ah, bl))
        e = self.add(e, self.mul(al, bh))
        return self.add(e, self.mul(al, bl))
