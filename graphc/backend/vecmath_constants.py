"""The vector math's constants, computed exactly at import from high-precision values
(pi, logs, the splits of pi/2 for argument reduction, the per-dtype limits); used by
graphc.backend.vecmath."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction

from llvmlite import ir


# ---------------------------------------------------------------------------
# Constants (computed exactly at import from high-precision values)
# ---------------------------------------------------------------------------

_PI = Fraction(
    Decimal("3.14159265358979323846264338327950288419716939937510582097494459230781640628620899863")
)


def _ln(x: float) -> Fraction:
    with localcontext() as ctx:
        ctx.prec = 80
        return Fraction(Decimal(x).ln())


_LN2 = _ln(2.0)


def _round_bits(v: Fraction, bits: int) -> float:
    """``v`` rounded to ``bits`` significant bits (so products with short ints are exact)."""
    e = math.floor(math.log2(abs(v)))
    if Fraction(2) ** e > abs(v):
        e -= 1
    elif Fraction(2) ** (e + 1) <= abs(v):
        e += 1
    scale = Fraction(2) ** (bits - 1 - e)
    return float(Fraction(round(v * scale)) / scale)


def _f32(x: float) -> float:
    """Nearest float32 value, as a Python float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _split(
    v: Fraction, bits: int, to_type: Callable[[float], float] = float
) -> tuple[float, float]:
    """Cody-Waite pair ``hi + lo ~= v`` with ``hi`` of ``bits`` significant bits."""
    hi = _round_bits(v, bits)
    return hi, to_type(float(v - Fraction(hi)))


def _f64_bits(x: float) -> int:
    return struct.unpack("<q", struct.pack("<d", x))[0]


def _f32_bits(x: float) -> int:
    return struct.unpack("<i", struct.pack("<f", x))[0]


# Polynomial tables, lowest degree first.
# e**r = 1 + r + r*r * Q(r), Q(r) = (e**r - 1 - r) / r**2 on |r| <= ln2/2.
_EXP_Q_F64 = (
    0.5,
    0.1666666666666667,
    0.04166666666666667,
    0.008333333333326025,
    0.001388888888888367,
    0.00019841269875205077,
    2.4801587325822283e-05,
    2.75572549134867e-06,
    2.7557273295539724e-07,
    2.5105419192016337e-08,
    2.091483135138041e-09,
)
_EXP_Q_F32 = (
    0.5,
    0.1666666716337204,
    0.041666463017463684,
    0.00833331048488617,
    0.0013933820882812142,
    0.00019891180272679776,
)
# log(1+f) = 2s + s*z*G(z), s = f/(2+f), z = s*s, G(z) = (2 atanh(s)/s - 2)/z,
# on z <= ((sqrt2-1)/(sqrt2+1))**2.
_LOG_G_F64 = (
    0.666666666666667,
    0.3999999999989827,
    0.28571428626533335,
    0.22222211043822487,
    0.18182895746801428,
    0.1533150172120742,
    0.1461916477718642,
)
_LOG_G_F32 = (0.6666666865348816, 0.4000012278556824, 0.28550735116004944, 0.23332761228084564)
# Same G on the narrower range of the 5-interval reduction used by pow
# (|s| <= (2**0.1-1)/(2**0.1+1)).
_LOGDD_G_F64 = (
    0.6666666666666666,
    0.39999999999996483,
    0.28571428594191267,
    0.22222170676431602,
    0.1822944632802616,
)
# sin r = r + r**3 S(w), cos r = 1 - w/2 + w*w C(w), w = r*r, |r| <= pi/4.
_SIN_S_F64 = (
    -0.16666666666666666,
    0.008333333333333331,
    -0.00019841269841264968,
    2.755731921926441e-06,
    -2.5052106206531682e-08,
    1.605852751943773e-10,
    -7.586455940017973e-13,
)
_COS_C_F64 = (
    0.041666666666666664,
    -0.0013888888888887367,
    2.480158729872029e-05,
    -2.7557317248229367e-07,
    2.0876141380294955e-09,
    -1.1382280957702634e-11,
)


@dataclass(frozen=True)
class _Spec:
    """Per-precision constants; one instance for f32 and one for f64."""

    suffix: str
    fty: ir.Type
    ity: ir.IntType
    mant: int
    bias: int
    shifter: float
    shifter_bits: int
    ln2_hi: float
    ln2_lo: float
    log2e: float
    exp_hi: float  # clamp: above, exp overflows to inf by itself
    exp_lo: float  # clamp: below, exp underflows to 0 by itself
    expm1_lo: float  # below, expm1 rounds to -1 and tanh to +-1
    exp_finite_max: float  # the largest x whose exp is finite (ln of the largest float)
    min_normal: float
    one_bits: int
    sqrt_half_bits: int
    exp_q: tuple[float, ...]
    log_g: tuple[float, ...]


def _make_f64() -> _Spec:
    hi, lo = _split(_LN2, 40)
    shifter = 1.5 * 2.0**52
    return _Spec(
        suffix="f64",
        fty=ir.DoubleType(),
        ity=ir.IntType(64),
        mant=52,
        bias=1023,
        shifter=shifter,
        shifter_bits=_f64_bits(shifter),
        ln2_hi=hi,
        ln2_lo=lo,
        log2e=float(1 / _LN2),
        exp_hi=710.0,
        exp_lo=-746.0,
        expm1_lo=-44.0,
        min_normal=2.0**-1022,
        exp_finite_max=float.fromhex("0x1.62e42fefa39efp+9"),
        one_bits=_f64_bits(1.0),
        sqrt_half_bits=_f64_bits(math.sqrt(0.5)),
        exp_q=_EXP_Q_F64,
        log_g=_LOG_G_F64,
    )


def _make_f32() -> _Spec:
    hi, lo = _split(_LN2, 16, _f32)
    shifter = 1.5 * 2.0**23
    return _Spec(
        suffix="f32",
        fty=ir.FloatType(),
        ity=ir.IntType(32),
        mant=23,
        bias=127,
        shifter=shifter,
        shifter_bits=_f32_bits(shifter),
        ln2_hi=hi,
        ln2_lo=lo,
        log2e=_f32(float(1 / _LN2)),
        exp_hi=89.0,
        exp_lo=-104.0,
        expm1_lo=-20.0,
        min_normal=2.0**-126,
        exp_finite_max=float.fromhex("0x1.62e42ep+6"),
        one_bits=_f32_bits(1.0),
        sqrt_half_bits=_f32_bits(_f32(math.sqrt(0.5))),
        exp_q=_EXP_Q_F32,
        log_g=_LOG_G_F32,
    )


_F64 = _make_f64()
_F32 = _make_f32()
#: the constants of each float type's code (exp's finite range...), by dtype name
SPECS = {"float32": _F32, "float64": _F64}


def _pio2_parts() -> tuple[float, ...]:
    """pi/2 in four parts; the first three have 33 bits so n * part is exact for |n| < 2**20."""
    rest = _PI / 2
    parts = []
    for _ in range(3):
        hi = _round_bits(rest, 33)
        parts.append(hi)
        rest -= Fraction(hi)
    parts.append(float(rest))
    return tuple(parts)


_PIO2_PARTS = _pio2_parts()
_TWO_OVER_PI = float(2 / _PI)

#: Below this |x|, sin/cos are accurate to a few ulp (exact Cody-Waite products).
TRIG_ACCURATE_LIMIT = 2.0**20 * math.pi / 2
#: From this |x| on, the vector sin/cos return NaN (the reduction cannot find the quadrant);
#: compiled kernels recompute such elements with libm.
TRIG_NAN_LIMIT = 2.0**51

# pow: 5 intervals of the mantissa in [2**-0.5, 2**0.5) with centres 2**(j/5);
# the middle centre is exactly 1 so log stays relatively accurate near x = 1.
_LOGDD_BOUNDS = tuple(2.0 ** ((2 * j + 1) / 10) for j in range(-2, 2))
_LOGDD_CENTRES = tuple(2.0 ** (j / 5) if j else 1.0 for j in range(-2, 3))


def _log_dd_const(c: float) -> tuple[float, float]:
    v = _ln(c)
    hi = float(v)
    return hi, float(v - Fraction(hi))


_LOGDD_LOGC = tuple(_log_dd_const(c) for c in _LOGDD_CENTRES)
_VELTKAMP = 2.0**27 + 1.0
_POW_Y_CLAMP = 2.0**64


# --- erf, atan (graphc.backend.vecmath's erf/atan/atan2 bodies, f64; f32 goes through them) --
# erf(x)/x = sum_n (-1)^n 2/sqrt(pi) x^(2n) / (n! (2n+1)): its Taylor series in t = x*x,
# used for |x| < 1 (19 terms: the truncation error is below 2**-60 there).
_ERF_TAYLOR_F64 = (
    1.1283791670955126, -0.37612638903183754, 0.11283791670955126, -0.026866170645131252,
    0.005223977625442188, -0.0008548327023450853, 0.00012055332981789664,
    -1.492565035840625e-05, 1.6462114365889248e-06, -1.6365844691234924e-07,
    1.4807192815879218e-08, -1.2290555301717928e-09, 9.422759064650411e-11,
    -6.7113668551641105e-12, 4.4632242632864775e-13, -2.7835162072109215e-14,
    1.6342614095367152e-15, -9.063970842808673e-17, 4.763348040515068e-18,
)  # fmt: skip
# erfc(x) * exp(x*x) on [1, 1.375], [1.375, 1.75], [1.75, 2.75], [2.75, 6] (beyond 6, erf
# is 1 in f64), as polynomials in s = (x - centre) / half-width: weighted least-squares
# fits (the weight erfc(x): what matters is the absolute error of erfc, i.e. of erf) to
# 80-digit values.
_ERFC_INTERVALS = ((1.0, 1.375), (1.375, 1.75), (1.75, 2.75), (2.75, 6.0))
_ERFC_G_F64 = (
    (0.38130405896671776, -0.041771630071794075, 0.004104506314882128, -0.0003697599236462644,
     3.0984846014540934e-05, -2.4401613412158157e-06, 1.81998095087621e-07,
     -1.293193758675204e-08, 8.795457938359785e-10, -5.8121063517546645e-11,
     3.711192811395314e-12, 0.0, 0.0),
    (0.3116486086481297, -0.028964487200645248, 0.0024707067882235208, -0.000196295249179251,
     1.4676205853695126e-05, -1.0405341311636729e-06, 7.037217559374698e-08,
     -4.56111701966494e-09, 2.843745343372728e-10, -1.7271318056288898e-11,
     1.0231078137468153e-12, 0.0, 0.0),
    (0.23108725873039215, -0.044243251404385855, 0.00799815685258692, -0.0013752575943474146,
     0.00022618721113443901, -3.574151574220648e-05, 5.445857833864462e-06,
     -8.025099431391985e-07, 1.146801930224095e-07, -1.5910128606938523e-08,
     2.131148493789148e-09, -2.946255097530104e-10, 4.4972645399377065e-11),
    (0.12582358822967235, -0.0445620015957886, 0.015444927054812024, -0.005245205806571221,
     0.0017470154828836404, -0.0005718231903380378, 0.00018449128639807556,
     -5.2970078994180395e-05, 2.965371461240672e-05, 9.69398544271513e-06,
     1.3949250669427135e-05, 5.320516319495469e-06, 1.4850900893655095e-06),
)  # fmt: skip
# erf for float32 results, evaluated in f64 (graphc.backend.vecmath ``erf_for_f32``): the
# f64 body's double-double exp and four selected intervals are far more than a float needs.
# erf(x)/x as a polynomial in t = x*x for |x| < 0.75 (relative error 4e-13), and erf(x)
# for x in [0.75, 4] as one polynomial in s = (x - 2.375) / 1.625 (absolute error 3e-12);
# erf is 1 in float32 from x = 4 (erfc(4) = 1.5e-8 is below half an ulp of 1).  Chebyshev
# least-squares fits (numpy.polynomial.chebyshev.chebfit, degree 7 and 20) to math.erf on
# Chebyshev nodes, converted to monomials (docs/backend-accuracy.md).
_ERF_F32_SMALL = (
    1.1283791670951155, -0.3761263889410163, 0.11283791330130186, -0.02686612185205557,
    0.005223633728479534, -0.0008535105338292418, 0.00011771163503370753,
    -1.1673210749962185e-05,
)  # fmt: skip
_ERF_F32_LARGE = (
    0.9992170617799332, 0.00651052651376214, -0.025126562779264172, 0.05891793452461263,
    -0.09157661126530192, 0.09469729807340753, -0.0573386274283126, 0.003688404316869092,
    0.02888379247792521, -0.026668056412119133, 0.007036442436061299, 0.0065935256043741855,
    -0.007089513687116167, 0.0017382603794812396, 0.0015722404966937412, -0.001357032728854875,
    9.589839547062623e-05, 0.00033560545908599876, -0.00011491526569205667,
    -3.4290267208071627e-05, 1.8603959787526766e-05,
)  # fmt: skip

# erf on [0.75, 4] evaluated in float32 (graphc.backend.vecmath ``_body_erf_f32``): one
# polynomial in s = (x - 2) / 2 (x - 2 is exact from x = 1 and the halving always: the
# f64 fit's (x - 2.375) / 1.625 in float32 rounded the scale and biased results by
# -0.5 ulp), degree 20, float32 coefficients (each of c1..c20 rounded in turn and the
# others refitted by least squares on Chebyshev nodes; absolute error 6.1e-11); c0 is
# added last as a float pair.  Measured: within 1.8 ulp of erf, mean error < 0.1 ulp.
_ERF_F32_LARGE_F32 = (
    0.9953222650044072, 0.04133396968245506, -0.16533587872982025, 0.3857837915420532,
    -0.5511198043823242, 0.41884955763816833, 0.02939695678651333, -0.4324854612350464,
    0.4072631597518921, -0.025706330314278603, -0.26888135075569153, 0.2124880850315094,
    0.020766085013747215, -0.13229799270629883, 0.06524602323770523, 0.029054341837763786,
    -0.04384985566139221, 0.009752843528985977, 0.010344686917960644,
    -0.007449425756931305, 0.0015243181260302663,
)  # fmt: skip

# atan(z) = z + z**3 P(z*z) for |z| <= tan(pi/8): weighted least-squares fit of P (relative
# error of atan below 2**-53) to 55-digit values of the series.
_ATAN_P_F64 = (
    -0.3333333333332993, 0.19999999999041557, -0.14285714191744892, 0.1111110652285497,
    -0.0909077962958247, 0.07690032227447204, -0.06640831349397558, 0.056911289164004134,
    -0.043552896514807635, 0.021216109554315698,
)  # fmt: skip
_TAN_PI_8 = float(Fraction(Decimal(2).sqrt() - 1))
_PI_HI = float(_PI)
_PI_LO = float(_PI - Fraction(_PI_HI))
_PIO2_HI = float(_PI / 2)
_PIO2_LO = float(_PI / 2 - Fraction(_PIO2_HI))
_PIO4_HI = float(_PI / 4)
_PIO4_LO = float(_PI / 4 - Fraction(_PIO4_HI))
_LN2_HI_F64 = float(_LN2)
_LN2_LO_F64 = float(_LN2 - Fraction(_LN2_HI_F64))
_LOG2E_F64 = float(1 / _LN2)
_LOG10E_F64 = float(1 / _ln(10.0))
_LOG10_2_F64 = float(_LN2 / _ln(10.0))
