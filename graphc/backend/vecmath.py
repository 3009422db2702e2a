"""Vectorizable transcendental functions emitted as LLVM IR.

A call to libm's ``exp`` inside a loop stops LLVM's loop vectorizer, so the
backend emits its own scalar implementations instead: straight-line code (one
basic block, special cases resolved with ``select``, no calls except LLVM
intrinsics that have vector forms), defined once per module as ``internal``
``alwaysinline`` functions.  After inlining, the vectorizer turns a loop over
them into ``<4 x double>`` / ``<8 x float>`` (or wider) code.

Methods (all classic, see fdlibm / Cephes):

* exp: Cody-Waite reduction ``x = n ln2 + r`` (``ln2`` split in a short head so
  ``n * head`` is exact), polynomial for ``e**r - 1``, scale by ``2**n`` built
  from bits in two halves so results in the subnormal range are rounded once
  and overflow happens naturally.  ``n`` is rounded with the ``1.5 * 2**52``
  shifter trick instead of a rounding instruction.
* log: exponent and mantissa taken from the bits (subnormals pre-scaled),
  mantissa moved to ``[sqrt(1/2), sqrt(2))``, then the fdlibm
  ``log(1+f) = f - hfsq + s*(hfsq+R(s*s))`` formula.
* tanh: ``tanh|x| = -u / (u + 2)`` with ``u = expm1(-2|x|)`` (an expm1 for
  non-positive arguments, trimmed for speed: see ``_expm1_nonpositive``), sign
  restored with ``copysign`` so ``-0.0`` stays.  One expm1 and one division
  cover every |x|; a polynomial for small |x| next to ``1 - 2/(e**2|x| + 1)``
  would have to evaluate both in straight-line code and is slower.
* sigmoid: ``e = exp(-|x|)``; ``1/(1+e)`` for ``x >= 0`` else ``e/(1+e)``:
  never NaN for finite ``x``, no overflow; 0 where eager's and PyTorch's
  ``1/(1+exp(-x))`` is 0 (``exp(-x)`` overflows: ``x < -709.78`` in f64,
  ``x < -88.72`` in f32) instead of the subnormal true value.
* sin/cos: ``x = n pi/2 + r`` with a 4-part Cody-Waite split (exact products
  for ``|n| < 2**20``), fdlibm-style kernels on ``|r| <= pi/4``, quadrant from
  the low bits of ``n``.  Accurate for ``|x| < 2**20 * pi/2``; beyond that the
  reduction error grows like ``|x| * 2**-53`` (the result is the sine of a
  number within about one ulp of ``x``), and for ``|x| >= 2**51`` the result is
  NaN.  Compiled programs never see those results: a loop kernel that meets an
  argument beyond ``TRIG_ACCURATE_LIMIT`` runs again with libm's ``sin``/``cos``
  (a full reduction, as numpy's), see ``kernel_builder.KernelBuilder.loop_kernel``.
* pow (f64): ``exp(y * log|x|)`` evaluated in double-double: ``log`` with a
  5-interval select-based second reduction and an error-free split of the
  result, ``y * log`` with Dekker's exact product, ``exp`` taking the low part
  as a correction.  C99/numpy special cases (signed zeros, infinities,
  negative bases with integer exponents, ``pow(1, nan) = pow(nan, 0) = 1``)
  are applied with selects.
* f32: exp, log, tanh and sigmoid have native single-precision polynomials (8
  lanes per AVX2 register); sin, cos and pow convert to double, reuse the f64
  code and round once, which keeps them within one ulp for a 2x lane cost.

Polynomial coefficients are Chebyshev fits (``mpmath.chebyfit``, 60 digits)
of the smooth remainder functions named at each table, rounded to the target
precision; ``docs/backend-accuracy.md`` shows how to regenerate them and the
measured accuracy (:func:`measure_ulp`).

Polynomials use ``llvm.fmuladd`` (fused where the CPU has FMA, never a libm
call).  No fast-math flags are used anywhere, so NaN and infinities behave
as in IEEE arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from llvmlite import ir

from .vecmath_constants import (
    _ATAN_P_F64,
    _COS_C_F64,
    _ERF_TAYLOR_F64,
    _ERFC_G_F64,
    _ERFC_INTERVALS,
    _ERF_F32_LARGE,
    _ERF_F32_LARGE_F32,
    _ERF_F32_SMALL,
    _LN2_HI_F64,
    _LN2_LO_F64,
    _LOG10_2_F64,
    _LOG10E_F64,
    _PI_HI,
    _PI_LO,
    _PIO2_HI,
    _PIO2_LO,
    _PIO4_HI,
    _PIO4_LO,
    _TAN_PI_8,
    _F32,
    _F64,
    _LOGDD_BOUNDS,
    _LOGDD_CENTRES,
    _LOGDD_G_F64,
    _LOGDD_LOGC,
    _PIO2_PARTS,
    _POW_Y_CLAMP,
    _SIN_S_F64,
    _TWO_OVER_PI,
    SPECS,
    TRIG_ACCURATE_LIMIT,
    TRIG_NAN_LIMIT,
    _Spec,
)
from .vecmath_emitter import _Emitter

__all__ = [
    "FUNCTIONS",
    "UNARY_FUNCTIONS",
    "BINARY_FUNCTIONS",
    "TRIG_ACCURATE_LIMIT",
    "TRIG_NAN_LIMIT",
    "ULP_BOUNDS",
    "get_function",
    "get_exp",
    "get_log",
    "get_tanh",
    "get_sigmoid",
    "get_sin",
    "get_cos",
    "get_pow",
    "get_sqrt",
    "get_abs",
    "define_map_kernel",
    "SPECS",
]

# ---------------------------------------------------------------------------
# Function bodies
# ---------------------------------------------------------------------------


#: Lanes below ``exp_lo`` (whose result is +0.0: a causal mask's -inf scores) are
#: computed from 0.0 and their result selected as +0.0, instead of computing exp(exp_lo)
#: through an underflowing product: on AMD cores each vector product that underflows
#: takes a microcode assist (a masked softmax's ``exp`` loop ran 2.3x slower).  Same
#: bits either way (``tests/graphc/backend/test_exp_underflow.py``); False: the old code.
EXP_UNDERFLOW_SELECT = True


def _exp_core(e: _Emitter, x, lo=None):
    """e**(x + lo) for any x (NaN propagates, +-inf and out-of-range clamp)."""
    s = e.s
    xc = e.sel(e.gt(x, s.exp_hi), s.exp_hi, x)
    under = None
    if EXP_UNDERFLOW_SELECT:
        under = e.lt(xc, s.exp_lo)  # false for NaN
        xc = e.sel(under, 0.0, xc)
    else:
        xc = e.sel(e.lt(xc, s.exp_lo), s.exp_lo, xc)
    nf, n = e.round_shift(e.mul(xc, s.log2e))
    r = e.sub(e.sub(xc, e.mul(nf, s.ln2_hi)), e.mul(nf, s.ln2_lo))
    if lo is not None:
        r = e.add(r, e.sel(e.eq(xc, x), lo, 0.0))
    p = e.add(1.0, e.fma(e.mul(r, r), e.poly(r, s.exp_q), r))
    # 2**n = 2**n1 * 2**n2 with n1 = floor(n/2): both factors stay normal for
    # n in [-1076, 1024], and the second product rounds once (subnormals, inf).
    m = e.iadd(n, 2 * (s.bias + 1))
    m1 = e.lshr(m, 1)
    e1 = e.isub(m1, 1)
    e2 = e.isub(e.isub(m, m1), 1)
    s1 = e.from_bits(e.shl(e1, s.mant))
    s2 = e.from_bits(e.shl(e2, s.mant))
    res = e.mul(e.mul(p, s1), s2)
    return res if under is None else e.sel(under, 0.0, res)


def _expm1_nonpositive(e: _Emitter, y):
    """e**y - 1 for y <= 0 (or NaN), accurate near 0.

    Like :func:`_exp_core`, with savings that the narrow range allows (tanh's inner
    loop, so every operation counts): ``y`` is clamped to ``[expm1_lo, 0]``, so
    ``2**n`` is always one normal power of two (no two-step scaling); the shifter carries the
    exponent bias, so the bits of ``t = y*log2e + shifter + bias`` shifted left by
    the mantissa width are ``2**n`` (the shifter's own bits shift out); ``n`` is
    rounded from one ``fmuladd``; the Cody-Waite steps are ``fmuladd`` too
    (``nf * ln2_hi`` is exact, so the first one is exact with or without FMA);
    and the polynomial is evaluated as two interleaved Horner chains
    (:meth:`_Emitter.poly2`), which shortens the dependency chain at no cost in
    operations.  About 15% fewer vector operations than the generic form.
    """
    s = e.s
    yc = e.sel(e.lt(y, s.expm1_lo), s.expm1_lo, y)
    shifter = s.shifter + s.bias
    t = e.fma(yc, s.log2e, shifter)
    nf = e.sub(t, shifter)
    r = e.fma(nf, -s.ln2_hi, yc)
    r = e.fma(nf, -s.ln2_lo, r)
    r2 = e.mul(r, r)
    em1 = e.fma(r2, e.poly2(r, r2, s.exp_q), r)
    scale = e.from_bits(e.shl(e.bits(t), s.mant))
    return e.fma(scale, em1, e.sub(scale, 1.0))


def _body_exp(e: _Emitter, x):
    return _exp_core(e, x)


def _log_reduce(e: _Emitter, x):
    """(k as float, m) with x = 2**k * m, m in [sqrt(1/2), sqrt(2)), for finite x > 0."""
    s = e.s
    tiny = e.lt(x, s.min_normal)
    xs = e.sel(tiny, e.mul(x, 2.0**s.mant), x)
    ix = e.iadd(e.bits(xs), s.one_bits - s.sqrt_half_bits)
    k = e.isub(e.lshr(ix, s.mant), s.bias)
    k = e.b.add(k, e.b.select(tiny, e.ci(-s.mant), e.ci(0)))
    m = e.from_bits(e.iadd(e.iand(ix, (1 << s.mant) - 1), s.sqrt_half_bits))
    return e.int_to_float(k), m


def _body_log(e: _Emitter, x):
    s = e.s
    kf, m = _log_reduce(e, x)
    f = e.sub(m, 1.0)
    hfsq = e.mul(e.mul(f, f), 0.5)
    sv = e.div(f, e.add(f, 2.0))
    z = e.mul(sv, sv)
    big_r = e.mul(z, e.poly(z, s.log_g))
    inner = e.add(e.mul(sv, e.add(hfsq, big_r)), e.mul(kf, s.ln2_lo))
    res = e.sub(e.mul(kf, s.ln2_hi), e.sub(e.sub(hfsq, inner), f))
    res = e.sel(e.eq(x, math.inf), math.inf, res)
    res = e.sel(e.lt(x, 0.0), math.nan, res)
    res = e.sel(e.eq(x, 0.0), -math.inf, res)
    return e.sel(e.unordered(x, x), x, res)


def _body_tanh(e: _Emitter, x):
    # tanh|x| = -u/(u+2); copysign ignores the sign of its first operand, so the
    # minus is left out
    u = _expm1_nonpositive(e, e.mul(e.fabs(x), -2.0))
    return e.copysign(e.div(u, e.add(u, 2.0)), x)


def _body_sigmoid(e: _Emitter, x):
    ex = _exp_core(e, e.neg(e.fabs(x)))
    res = e.div(e.sel(e.ge(x, 0.0), 1.0, ex), e.add(ex, 1.0))
    # eager and PyTorch compute 1 / (1 + exp(-x)): exactly 0 once exp(-x) overflows
    return e.sel(e.lt(x, -e.s.exp_finite_max), 0.0, res)


def _trig(e: _Emitter, x, quadrant_offset: int):
    """sin(x) (offset 0) or cos(x) = sin(x + pi/2) (offset 1), f64 only."""
    ok = e.lt(e.fabs(x), TRIG_NAN_LIMIT)
    xs = e.sel(ok, x, 0.0)
    nf, n = e.round_shift(e.mul(xs, _TWO_OVER_PI))
    q = e.iand(e.iadd(n, quadrant_offset), 3)
    r = xs
    for part in _PIO2_PARTS:
        r = e.sub(r, e.mul(nf, part))
    w = e.mul(r, r)
    sin_r = e.fma(e.mul(r, w), e.poly(w, _SIN_S_F64), r)
    hz = e.mul(w, 0.5)
    one_minus_hz = e.sub(1.0, hz)
    cos_tail = e.add(e.sub(e.sub(1.0, one_minus_hz), hz), e.mul(e.mul(w, w), e.poly(w, _COS_C_F64)))
    cos_r = e.add(one_minus_hz, cos_tail)
    res = e.sel(e.inz(e.iand(q, 1)), cos_r, sin_r)
    res = e.sel(e.inz(e.iand(q, 2)), e.neg(res), res)
    if quadrant_offset == 0:
        res = e.sel(e.eq(x, 0.0), x, res)  # sin(-0.0) = -0.0: -0.0 + 0.0 rounds to +0.0
    return e.sel(ok, res, math.nan)


def _body_sin(e: _Emitter, x):
    return _trig(e, x, 0)


def _body_cos(e: _Emitter, x):
    return _trig(e, x, 1)


def _log_dd(e: _Emitter, ax):
    """log(ax) as an unevaluated sum hi + lo (about 2**-63 relative), ax finite > 0."""
    kf, m = _log_reduce(e, ax)
    # second reduction: m = c * (1+s)/(1-s) with c one of five centres
    c = e.c(_LOGDD_CENTRES[-1])
    lc_hi = e.c(_LOGDD_LOGC[-1][0])
    lc_lo = e.c(_LOGDD_LOGC[-1][1])
    for j in reversed(range(len(_LOGDD_BOUNDS))):
        below = e.lt(m, _LOGDD_BOUNDS[j])
        c = e.sel(below, _LOGDD_CENTRES[j], c)
        lc_hi = e.sel(below, _LOGDD_LOGC[j][0], lc_hi)
        lc_lo = e.sel(below, _LOGDD_LOGC[j][1], lc_lo)
    num = e.sub(m, c)  # exact (Sterbenz)
    den, den_lo = e.two_sum(m, c)
    inv = e.div(1.0, den)  # one division; s_lo absorbs its rounding
    sv = e.mul(num, inv)
    prod = e.mul(sv, den)
    prod_err = e.two_prod_err(sv, den, prod)
    s_lo = e.mul(e.sub(e.sub(e.sub(num, prod), prod_err), e.mul(sv, den_lo)), inv)
    z = e.mul(sv, sv)
    tail = e.mul(e.mul(sv, z), e.poly(z, _LOGDD_G_F64))
    # log = k*ln2_hi + log(c)_hi + 2s  +  (small terms)
    s1, err1 = e.two_sum(e.mul(kf, _F64.ln2_hi), lc_hi)
    s2, err2 = e.two_sum(s1, e.mul(sv, 2.0))
    small = e.add(e.add(e.mul(kf, _F64.ln2_lo), lc_lo), e.add(e.mul(s_lo, 2.0), tail))
    return e.fast_two_sum(s2, e.add(e.add(err1, err2), small))


def _is_integer(e: _Emitter, a):
    """a is an integer, for a = |y| >= 0 (every double >= 2**52 is)."""
    rounded = e.sub(e.add(a, 2.0**52), 2.0**52)
    return e.or_(e.ge(a, 2.0**52), e.eq(rounded, a))


def _body_pow(e: _Emitter, x, y, double_double: bool = True):
    """pow for f64; ``double_double=False`` is the cheaper core used for f32 inputs."""
    ax = e.fabs(x)
    ay = e.fabs(y)
    finite_pos = e.and_(e.gt(ax, 0.0), e.lt(ax, math.inf))
    base = e.sel(finite_pos, ax, 1.0)
    # |y| > 2**64 with |x| != 1 over/underflows exactly like 2**64 does.
    yc = e.sel(e.gt(y, _POW_Y_CLAMP), _POW_Y_CLAMP, y)
    yc = e.sel(e.lt(yc, -_POW_Y_CLAMP), -_POW_Y_CLAMP, yc)
    if double_double:
        l_hi, l_lo = _log_dd(e, base)
        t_hi = e.mul(yc, l_hi)
        t_lo = e.add(e.two_prod_err(yc, l_hi, t_hi), e.mul(yc, l_lo))
        res = _exp_core(e, t_hi, t_lo)
    else:
        # float inputs: |y log x| < 104 unless the float result over/underflows,
        # so a plain double product is accurate to ~2**-46 relative, far below
        # float's 2**-24.
        res = _exp_core(e, e.mul(yc, _body_log(e, base)))

    y_int = _is_integer(e, ay)
    half_int = _is_integer(e, e.mul(ay, 0.5))
    y_odd = e.and_(e.and_(y_int, e.not_(half_int)), e.lt(ay, 2.0**53))
    y_neg = e.lt(y, 0.0)
    res = e.sel(e.eq(ax, 0.0), e.sel(y_neg, math.inf, 0.0), res)
    res = e.sel(e.eq(ax, math.inf), e.sel(y_neg, 0.0, math.inf), res)
    res = e.sel(e.and_(e.sign_bit(x), y_odd), e.neg(res), res)
    neg_base_frac = e.and_(e.and_(e.lt(x, 0.0), e.lt(ax, math.inf)), e.not_(y_int))
    res = e.sel(neg_base_frac, math.nan, res)
    res = e.sel(e.unordered(x, y), math.nan, res)
    return e.sel(e.or_(e.eq(x, 1.0), e.eq(y, 0.0)), 1.0, res)


# --- log1p, expm1, erf, atan family, hyperbolics, log2/log10/exp2 -------------------------


def _body_log1p(e: _Emitter, x):
    """log(1 + x) as ``log(u) * x / (u - 1)`` with ``u = 1 + x`` (Goldberg): the quotient
    cancels the rounding of ``u``; ``x`` itself where ``u`` rounds to 1."""
    u = e.add(x, 1.0)
    res = e.mul(_body_log(e, u), e.div(x, e.sub(u, 1.0)))
    res = e.sel(e.eq(u, 1.0), x, res)
    return e.sel(e.eq(x, math.inf), math.inf, res)


def _body_expm1(e: _Emitter, x):
    """e**x - 1: ``x = n ln2 + r``, ``2**n (e**r - 1) + (2**n - 1)`` (exact for the
    small ``n`` of ``|x| <= big``); exp(x) beyond ``big``, where the -1 no longer counts."""
    s = e.s
    big = 40.0 if s.mant > 23 else 20.0
    xc = e.sel(e.gt(x, big), big, x)
    xc = e.sel(e.lt(xc, s.expm1_lo), s.expm1_lo, xc)
    nf, n = e.round_shift(e.mul(xc, s.log2e))
    r = e.sub(e.sub(xc, e.mul(nf, s.ln2_hi)), e.mul(nf, s.ln2_lo))
    em1 = e.fma(e.mul(r, r), e.poly(r, s.exp_q), r)
    scale = e.pow2(n)
    res = e.fma(scale, em1, e.sub(scale, 1.0))
    res = e.sel(e.gt(x, big), _exp_core(e, x), res)
    return e.sel(e.eq(x, 0.0), x, res)  # keeps -0.0


def _body_erf(e: _Emitter, x):
    """erf, f64: ``x P(x*x)`` (Taylor) for |x| < 1; ``1 - exp(-x*x) G(|x|)`` with ``G`` a
    fit of ``erfc(x) exp(x*x)`` on four intervals (coefficients chosen by select) and
    ``x*x`` split exactly (Dekker) so exp sees the full argument; 1 from |x| = 6."""
    ax = e.fabs(x)
    small = e.mul(x, e.poly(e.mul(x, x), _ERF_TAYLOR_F64))
    bounds = [e.lt(ax, b) for _, b in _ERFC_INTERVALS[:-1]]

    def pick(values):
        v = e.c(values[-1])
        for cond, val in reversed(list(zip(bounds, values[:-1]))):
            v = e.sel(cond, val, v)
        return v

    centre = pick([(a + b) / 2 for a, b in _ERFC_INTERVALS])
    inv_half = pick([2 / (b - a) for a, b in _ERFC_INTERVALS])
    sv = e.mul(e.sub(ax, centre), inv_half)
    acc = pick([g[-1] for g in _ERFC_G_F64])
    for k in reversed(range(len(_ERFC_G_F64[0]) - 1)):
        acc = e.fma(acc, sv, pick([g[k] for g in _ERFC_G_F64]))
    hi = e.mul(ax, ax)
    lo = e.two_prod_err(ax, ax, hi)
    erfc = e.mul(_exp_core(e, e.neg(hi), e.neg(lo)), acc)
    large = e.copysign(e.sub(1.0, erfc), x)
    res = e.sel(e.lt(ax, 1.0), small, e.sel(e.lt(ax, 6.0), large, e.copysign(e.c(1.0), x)))
    return e.sel(e.unordered(x, x), x, res)


def _body_erf_for_f32(e: _Emitter, x):
    """erf in f64 exact enough for a float32 result (error below 1e-11, far under half a
    float ulp): ``x P(x*x)`` for |x| < 0.75, one polynomial in ``(|x| - 2.375) / 1.625``
    with the sign of x on [0.75, 4] (|x| clamped to 4: erf rounds to 1 in float32 there).
    No exp, no interval selects: about 30 operations a lane."""
    ax = e.fabs(x)
    small = e.mul(x, e.poly(e.mul(x, x), _ERF_F32_SMALL))
    s = e.fma(e.sel(e.gt(ax, 4.0), e.c(4.0), ax), 1.0 / 1.625, -2.375 / 1.625)
    large = e.copysign(e.poly2(s, e.mul(s, s), _ERF_F32_LARGE), x)
    return e.sel(e.lt(ax, 0.75), small, large)  # NaN: the large branch, NaN


def _body_erf_f32(e: _Emitter, x):
    """erf in float32 arithmetic (8 lanes where the f64 bodies have 4): the polynomials of
    ``erf_for_f32`` with float32 coefficients, ``x + x (P(x*x) - 1)`` for |x| < 0.75 and,
    on [0.75, 4] (|x| clamped to 4), the degree-20 polynomial in ``s`` without its
    constant term, added last (the rounding errors of the evaluation stay relative to the
    smaller sum).  At most 2 ulp from erf (measured on every float in [0, 4] spaced 97
    apart, and at the edges: docs/backend-accuracy.md); ±0, ±inf and NaN as erf."""
    ax = e.fabs(x)
    t = e.mul(x, x)
    # x c0 + x t Q(t), with c0 = 2/sqrt(pi) as a float pair: one rounding of the main
    # term, so tiny and subnormal x give round(x * 2/sqrt(pi))
    r = e.mul(x, e.mul(t, e.poly(t, _ERF_F32_SMALL[1:])))
    small = e.fma(x, _ERF_C0_HI_F32, e.fma(x, _ERF_C0_LO_F32, r))
    s = e.mul(e.sub(e.sel(e.gt(ax, 4.0), e.c(4.0), ax), 2.0), 0.5)
    s2 = e.mul(s, s)
    even = (0.0,) + _ERF_F32_LARGE_F32[2::2]
    q = e.fma(e.poly(s2, _ERF_F32_LARGE_F32[1::2]), s, e.poly(s2, even))
    # erf rounds to 1 in float32 from 3.919206 (erfc below half an ulp of 1)
    # + the constant term as a float pair (its float32 rounding alone biased results by
    # up to half an ulp)
    large = e.add(e.add(q, _ERF_LARGE_C0_LO_F32), _ERF_LARGE_C0_HI_F32)
    large = e.sel(e.ge(ax, _ERF_ONE_F32), e.c(1.0), large)
    # NaN: the large branch, NaN; the sign of x also for -0.0 (the small sum gives +0.0)
    return e.copysign(e.sel(e.lt(ax, 0.75), small, large), x)


_ERF_C0_HI_F32 = 1.128379225730896  # float32(2/sqrt(pi))
_ERF_C0_LO_F32 = -5.8635383e-08  # float32(2/sqrt(pi) - _ERF_C0_HI_F32)
_ERF_LARGE_C0_HI_F32 = 0.9953222870826721  # float32(_ERF_F32_LARGE_F32[0])
_ERF_LARGE_C0_LO_F32 = -2.2078264549918458e-08  # float32(_ERF_F32_LARGE_F32[0] - the above)
_ERF_ONE_F32 = 3.919206  # float32: the least x with erfc(x) < 2**-25


#: float32 erf in float32 arithmetic (:func:`_body_erf_f32`, <= 2 ulp, 8 lanes); False:
#: evaluated in float64 and rounded once (``erf_for_f32``, < 0.5 ulp + 1e-11, 4 lanes)
ERF_F32_NATIVE = True


def _emit_erf(builder: ir.IRBuilder, spec: _Spec, x: ir.Value) -> ir.Value:
    if spec is not _F64 and ERF_F32_NATIVE:
        return _native(_body_erf_f32)(builder, spec, x)
    return _via_f64("erf", "erf_for_f32")(builder, spec, x)


def _atan_unit(e: _Emitter, t):
    """atan(t) for t in [0, 1] (or NaN): above tan(pi/8), pi/4 + atan((t-1)/(t+1))."""
    red = e.gt(t, _TAN_PI_8)
    z = e.sel(red, e.div(e.sub(t, 1.0), e.add(t, 1.0)), t)
    z2 = e.mul(z, z)
    p = e.fma(e.mul(z, z2), e.poly(z2, _ATAN_P_F64), z)
    return e.sel(red, e.add(_PIO4_HI, e.add(p, _PIO4_LO)), p)


def _body_atan(e: _Emitter, x):
    ax = e.fabs(x)
    inv = e.gt(ax, 1.0)
    a = _atan_unit(e, e.sel(inv, e.div(1.0, ax), ax))
    a = e.sel(inv, e.sub(_PIO2_HI, e.sub(a, _PIO2_LO)), a)
    return e.copysign(a, x)


def _body_atan2(e: _Emitter, y, x):
    """atan2(y, x) with C99's special cases (signed zeros, infinities)."""
    ax, ay = e.fabs(x), e.fabs(y)
    swap = e.gt(ay, ax)
    num, den = e.sel(swap, ax, ay), e.sel(swap, ay, ax)
    t = e.div(num, den)
    t = e.sel(e.eq(den, 0.0), 0.0, t)  # both zero
    t = e.sel(e.eq(num, math.inf), 1.0, t)  # both infinite
    a = _atan_unit(e, t)
    a = e.sel(swap, e.sub(_PIO2_HI, e.sub(a, _PIO2_LO)), a)
    a = e.sel(e.sign_bit(x), e.sub(_PI_HI, e.sub(a, _PI_LO)), a)
    return e.sel(e.unordered(x, y), math.nan, e.copysign(a, y))


def _sqrt_one_minus_sq(e: _Emitter, x):
    sqrt = e.b.call(e._intrinsic("llvm.sqrt", 1), [e.mul(e.sub(1.0, x), e.add(1.0, x))])
    return sqrt


def _body_asin(e: _Emitter, x):
    return _body_atan2(e, x, _sqrt_one_minus_sq(e, x))


def _body_acos(e: _Emitter, x):
    return _body_atan2(e, _sqrt_one_minus_sq(e, x), x)


def _body_sinh(e: _Emitter, x):
    """(u + u/(u+1))/2 with u = expm1(|x|) (no cancellation near 0); exp(|x|/2)**2/2
    from |x| = 22 (finite up to where sinh overflows); sign restored."""
    ax = e.fabs(x)
    u = _body_expm1(e, ax)
    small = e.mul(e.add(u, e.div(u, e.add(u, 1.0))), 0.5)
    h = _exp_core(e, e.mul(ax, 0.5))
    res = e.sel(e.lt(ax, 22.0), small, e.mul(e.mul(h, 0.5), h))
    return e.copysign(res, x)


def _body_cosh(e: _Emitter, x):
    ax = e.fabs(x)
    ex = _exp_core(e, ax)
    small = e.mul(e.add(ex, e.div(1.0, ex)), 0.5)
    h = _exp_core(e, e.mul(ax, 0.5))
    return e.sel(e.lt(ax, 22.0), small, e.mul(e.mul(h, 0.5), h))


def _log_specials(e: _Emitter, x, res):
    res = e.sel(e.eq(x, math.inf), math.inf, res)
    res = e.sel(e.lt(x, 0.0), math.nan, res)
    res = e.sel(e.eq(x, 0.0), -math.inf, res)
    return e.sel(e.unordered(x, x), x, res)


def _body_log2(e: _Emitter, x):
    """k + log(m) log2(e) for x = 2**k m: exact at powers of two."""
    kf, m = _log_reduce(e, e.sel(e.gt(x, 0.0), x, 1.0))
    return _log_specials(e, x, e.fma(_body_log(e, m), e.s.log2e, kf))


def _body_log10(e: _Emitter, x):
    kf, m = _log_reduce(e, e.sel(e.gt(x, 0.0), x, 1.0))
    res = e.add(e.mul(kf, _LOG10_2_F64), e.mul(_body_log(e, m), _LOG10E_F64))
    return _log_specials(e, x, res)


def _body_exp2(e: _Emitter, x):
    """2**x = e**(x ln2) with x ln2 as an exact double-double (f64): exact at integers."""
    hi = e.mul(x, _LN2_HI_F64)
    lo = e.add(e.two_prod_err(x, e.c(_LN2_HI_F64), hi), e.mul(x, _LN2_LO_F64))
    return _exp_core(e, hi, lo)


def _body_asinh(e: _Emitter, x):
    s = e.s
    ax = e.fabs(x)
    big = 2.0 ** (s.mant // 2 + 1)
    sq = e.mul(ax, ax)
    sqrt1 = e.b.call(e._intrinsic("llvm.sqrt", 1), [e.add(sq, 1.0)])
    small = _body_log1p(e, e.add(ax, e.div(sq, e.add(sqrt1, 1.0))))
    large = e.add(_body_log(e, ax), e.add(s.ln2_hi, s.ln2_lo))
    return e.copysign(e.sel(e.gt(ax, big), large, small), x)


def _body_acosh(e: _Emitter, x):
    s = e.s
    big = 2.0 ** (s.mant // 2 + 1)
    t = e.sub(x, 1.0)
    root = e.b.call(e._intrinsic("llvm.sqrt", 1), [e.add(e.mul(t, 2.0), e.mul(t, t))])
    small = _body_log1p(e, e.add(t, root))
    large = e.add(_body_log(e, x), e.add(s.ln2_hi, s.ln2_lo))
    res = e.sel(e.gt(x, big), large, small)
    return e.sel(e.lt(x, 1.0), math.nan, res)


def _body_atanh(e: _Emitter, x):
    ax = e.fabs(x)
    res = e.mul(_body_log1p(e, e.div(e.mul(ax, 2.0), e.sub(1.0, ax))), 0.5)
    return e.copysign(res, x)


# ---------------------------------------------------------------------------
# Public getters
# ---------------------------------------------------------------------------


def _spec(ty: ir.Type) -> _Spec:
    if isinstance(ty, ir.DoubleType):
        return _F64
    if isinstance(ty, ir.FloatType):
        return _F32
    raise TypeError(f"vecmath supports float and double, not {ty}")


def _define(
    module: ir.Module, name: str, ty: ir.Type, nargs: int, emit_body: Callable[..., ir.Value]
) -> ir.Function:
    """Define ``name`` once per module as an internal, always-inlined pure function."""
    spec = _spec(ty)
    full = f"graphc.vm.{name}.{spec.suffix}"
    existing = module.globals.get(full)
    if existing is not None:
        return existing
    fn = ir.Function(module, ir.FunctionType(spec.fty, [spec.fty] * nargs), name=full)
    fn.linkage = "internal"
    for attr in ("alwaysinline", "nounwind", "readnone"):
        fn.attributes.add(attr)
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    builder.ret(emit_body(builder, spec, *fn.args))
    return fn


def _native(body: Callable[..., ir.Value]) -> Callable[..., ir.Value]:
    def emit(builder: ir.IRBuilder, spec: _Spec, *args: ir.Value) -> ir.Value:
        return body(_Emitter(builder, spec), *args)

    return emit


def _via_f64(name: str, f32_body: str | None = None) -> Callable[..., ir.Value]:
    """f32 variant that widens to double, calls an f64 function and rounds once.

    ``f32_body`` names a cheaper f64 body that is still exact enough for float.
    """

    def emit(builder: ir.IRBuilder, spec: _Spec, *args: ir.Value) -> ir.Value:
        if spec is _F64:
            return _native(_BODIES[name])(builder, spec, *args)
        inner = f32_body or name
        f64 = _define(builder.module, inner, ir.DoubleType(), len(args), _native(_BODIES[inner]))
        wide = [builder.fpext(a, ir.DoubleType()) for a in args]
        return builder.fptrunc(builder.call(f64, wide), spec.fty)

    return emit


_BODIES: dict[str, Callable[..., ir.Value]] = {
    "exp": _body_exp,
    "log": _body_log,
    "tanh": _body_tanh,
    "sigmoid": _body_sigmoid,
    "sin": _body_sin,
    "cos": _body_cos,
    "pow": _body_pow,
    "pow_for_f32": lambda e, x, y: _body_pow(e, x, y, double_double=False),
    "erf": _body_erf,
    "erf_for_f32": _body_erf_for_f32,
    "atan": _body_atan,
    "atan2": _body_atan2,
    "asin": _body_asin,
    "acos": _body_acos,
    "exp2": _body_exp2,
}
_EMITTERS: dict[str, tuple[int, Callable[..., ir.Value]]] = {
    "exp": (1, _native(_body_exp)),
    "log": (1, _native(_body_log)),
    "tanh": (1, _native(_body_tanh)),
    "sigmoid": (1, _native(_body_sigmoid)),
    "sin": (1, _via_f64("sin")),
    "cos": (1, _via_f64("cos")),
    "pow": (2, _via_f64("pow", "pow_for_f32")),
    "log1p": (1, _native(_body_log1p)),
    "expm1": (1, _native(_body_expm1)),
    "erf": (1, _emit_erf),
    "atan": (1, _via_f64("atan")),
    "atan2": (2, _via_f64("atan2")),
    "asin": (1, _via_f64("asin")),
    "acos": (1, _via_f64("acos")),
    "sinh": (1, _native(_body_sinh)),
    "cosh": (1, _native(_body_cosh)),
    "asinh": (1, _native(_body_asinh)),
    "acosh": (1, _native(_body_acosh)),
    "atanh": (1, _native(_body_atanh)),
    "log2": (1, _native(_body_log2)),
    "log10": (1, _native(_body_log10)),
    "exp2": (1, _via_f64("exp2")),
}


def get_exp(module: ir.Module, ty: ir.Type) -> ir.Function:
    """exp(x): ``ty`` is ``ir.FloatType()`` or ``ir.DoubleType()``."""
    return get_function(module, "exp", ty)


def get_log(module: ir.Module, ty: ir.Type) -> ir.Function:
    """log(x): -inf at +-0, NaN for x < 0."""
    return get_function(module, "log", ty)


def get_tanh(module: ir.Module, ty: ir.Type) -> ir.Function:
    """tanh(x): odd, keeps -0.0, saturates to +-1."""
    return get_function(module, "tanh", ty)


def get_sigmoid(module: ir.Module, ty: ir.Type) -> ir.Function:
    """1 / (1 + exp(-x)) without overflow or NaN for finite x."""
    return get_function(module, "sigmoid", ty)


def get_sin(module: ir.Module, ty: ir.Type) -> ir.Function:
    """sin(x); accurate for |x| < TRIG_ACCURATE_LIMIT, NaN for |x| >= TRIG_NAN_LIMIT."""
    return get_function(module, "sin", ty)


def get_cos(module: ir.Module, ty: ir.Type) -> ir.Function:
    """cos(x); same ranges as :func:`get_sin`."""
    return get_function(module, "cos", ty)


def get_pow(module: ir.Module, ty: ir.Type) -> ir.Function:
    """pow(x, y) with C99/numpy special cases."""
    return get_function(module, "pow", ty)


def get_sqrt(module: ir.Module, ty: ir.Type) -> ir.Function:
    """``llvm.sqrt`` (correctly rounded, vectorizes to sqrtpd/sqrtps)."""
    _spec(ty)
    return module.declare_intrinsic("llvm.sqrt", [ty])


def get_abs(module: ir.Module, ty: ir.Type) -> ir.Function:
    """``llvm.fabs`` (clears the sign bit, also of NaN and -0.0)."""
    _spec(ty)
    return module.declare_intrinsic("llvm.fabs", [ty])


FUNCTIONS: dict[str, Callable[[ir.Module, ir.Type], ir.Function]] = {
    "exp": get_exp,
    "log": get_log,
    "tanh": get_tanh,
    "sigmoid": get_sigmoid,
    "sin": get_sin,
    "cos": get_cos,
    "pow": get_pow,
    "sqrt": get_sqrt,
    "abs": get_abs,
}
UNARY_FUNCTIONS: tuple[str, ...] = ("exp", "log", "tanh", "sigmoid", "sin", "cos", "sqrt", "abs")
BINARY_FUNCTIONS: tuple[str, ...] = ("pow",)
#: the functions of the pointwise ops (log1p, erf, atan2...), defined like the others
POINTWISE_UNARY = (
    "log1p", "expm1", "erf", "atan", "asin", "acos", "sinh", "cosh",
    "asinh", "acosh", "atanh", "log2", "log10", "exp2",
)  # fmt: skip


def _getter(name: str) -> Callable[[ir.Module, ir.Type], ir.Function]:
    def get(module: ir.Module, ty: ir.Type) -> ir.Function:
        return get_function(module, name, ty)

    get.__doc__ = f"{name}: see ULP_BOUNDS and docs/backend-accuracy.md."
    return get


for _name in POINTWISE_UNARY + ("atan2",):
    FUNCTIONS[_name] = _getter(_name)
UNARY_FUNCTIONS += POINTWISE_UNARY
BINARY_FUNCTIONS += ("atan2",)


def get_function(module: ir.Module, name: str, ty: ir.Type) -> ir.Function:
    """The function ``name`` (see :data:`FUNCTIONS`) for ``ty``, defined in ``module`` once."""
    if name == "sqrt":
        return get_sqrt(module, ty)
    if name == "abs":
        return get_abs(module, ty)
    try:
        nargs, emit = _EMITTERS[name]
    except KeyError:
        raise KeyError(
            f"vecmath has no function {name!r}; available: {', '.join(FUNCTIONS)}"
        ) from None
    return _define(module, name, ty, nargs, emit)


def define_map_kernel(
    module: ir.Module, name: str, ty: ir.Type, kernel_name: str | None = None
) -> ir.Function:
    """Define ``void k(T* x, [T* y,] T* out, i64 n)``: ``out[i] = name(x[i][, y[i]])``.

    A plain counted loop with ``noalias`` pointers, used to measure accuracy
    and to check that the functions vectorize.
    """
    fn_math = get_function(module, name, ty)
    nargs = len(fn_math.function_type.args)
    ptr, i64 = ir.PointerType(), ir.IntType(64)
    kname = kernel_name or f"map_{name}_{_spec(ty).suffix}"
    kernel = ir.Function(
        module, ir.FunctionType(ir.VoidType(), [ptr] * (nargs + 1) + [i64]), name=kname
    )
    for arg in kernel.args[:-1]:
        arg.add_attribute("noalias")
    *inputs, out, n = kernel.args
    entry = kernel.append_basic_block("entry")
    loop = kernel.append_basic_block("loop")
    done = kernel.append_basic_block("done")
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, ir.Constant(i64, 0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(i64, name="i")
    i.add_incoming(ir.Constant(i64, 0), entry)
    vals = [b.load(b.gep(p, [i], source_etype=ty), typ=ty) for p in inputs]
    b.store(b.call(fn_math, vals), b.gep(out, [i], source_etype=ty))
    nxt = b.add(i, ir.Constant(i64, 1), flags=["nuw", "nsw"])
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("==", nxt, n), done, loop)
    b.position_at_end(done)
    b.ret_void()
    return kernel


# ---------------------------------------------------------------------------
# Accuracy measurement
# ---------------------------------------------------------------------------

#: Documented max ulp error per (function, dtype) on the measured domains
#: (sin/cos: |x| < TRIG_ACCURATE_LIMIT), with some margin over the measured
#: maxima in docs/backend-accuracy.md.  Tests assert these.
ULP_BOUNDS: dict[tuple[str, str], float] = {
    ("exp", "float64"): 1.5,
    ("exp", "float32"): 1.5,
    ("log", "float64"): 1.0,
    ("log", "float32"): 1.0,
    ("tanh", "float64"): 3.0,
    ("tanh", "float32"): 3.0,
    ("sigmoid", "float64"): 2.5,
    ("sigmoid", "float32"): 2.5,
    ("sin", "float64"): 3.0,
    ("sin", "float32"): 1.0,
    ("cos", "float64"): 3.0,
    ("cos", "float32"): 1.0,
    ("pow", "float64"): 1.5,
    ("pow", "float32"): 1.0,
    # the pointwise ops' functions (measured on random and special inputs, see
    # tests/graphc/test_ops_pointwise.py and docs/backend-accuracy.md)
    ("log1p", "float64"): 3.0,
    ("log1p", "float32"): 3.0,
    ("expm1", "float64"): 2.5,
    ("expm1", "float32"): 2.0,
    ("erf", "float64"): 3.0,
    ("erf", "float32"): 2.0,
    ("atan", "float64"): 2.5,
    ("atan", "float32"): 1.0,
    ("atan2", "float64"): 3.5,
    ("atan2", "float32"): 1.0,
    ("asin", "float64"): 3.5,
    ("asin", "float32"): 1.0,
    ("acos", "float64"): 3.5,
    ("acos", "float32"): 1.0,
    ("sinh", "float64"): 3.0,
    ("sinh", "float32"): 3.0,
    ("cosh", "float64"): 3.0,
    ("cosh", "float32"): 3.0,
    ("asinh", "float64"): 3.5,
    ("asinh", "float32"): 3.0,
    ("acosh", "float64"): 3.5,
    ("acosh", "float32"): 3.0,
    ("atanh", "float64"): 3.0,
    ("atanh", "float32"): 3.5,
    ("log2", "float64"): 1.5,
    ("log2", "float32"): 2.0,
    ("log10", "float64"): 2.0,
    ("log10", "float32"): 3.0,
    ("exp2", "float64"): 1.5,
    ("exp2", "float32"): 1.0,
}
