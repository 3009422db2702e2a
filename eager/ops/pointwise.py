"""Op records: elementwise math and activations (erf, log1p, floor, remainder, isnan...).

See docs/adding-an-op.md for what a record holds and the tests that check it.  The
activations (gelu, silu, elu, softplus...) and isnan/isinf/isfinite/nan_to_num are
composites of these and of the core ops (eager/methods/pointwise.py), so they need no
record.
"""

from __future__ import annotations

import math

import numpy as np

from .elementwise import _binary_samples, _float_dtype, _floatify, _unary_samples
from .registry import Meta, broadcast_shapes, defop

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_LN2 = math.log(2.0)
_LN10 = math.log(10.0)


def _unary_float(x: Meta) -> Meta:
    return Meta(x.shape, _float_dtype(x.dtype))


def _quiet(fn):
    """numpy's ufunc without its warnings (NaN for a domain error, inf for a pole)."""

    def forward(x):
        with np.errstate(all="ignore"):
            return fn(x)

    forward.__name__ = getattr(fn, "__name__", "forward")
    return forward


def _special_samples(low, high):
    """The unary samples over the function's smooth domain (special values: the tests of
    tests/eager/ops/test_pointwise.py and tests/graphc/test_ops_pointwise.py)."""
    return _unary_samples(low, high)


# erf(x)/x = sum_n (-1)^n 2/sqrt(pi) x^(2n) / (n! (2n+1)), a series in t = x*x for |x| < 1
# (19 terms: truncation below 2**-60), and erfc(x) exp(x*x) on four intervals of [1, 6) as
# polynomials in s = (x - centre) / half-width: the coefficients graphc's native erf uses
# (graphc/backend/vecmath_constants.py; eager cannot import graphc, so they are repeated).
_ERF_TAYLOR = (
    1.1283791670955126, -0.37612638903183754, 0.11283791670955126, -0.026866170645131252,
    0.005223977625442188, -0.0008548327023450853, 0.00012055332981789664,
    -1.492565035840625e-05, 1.6462114365889248e-06, -1.6365844691234924e-07,
    1.4807192815879218e-08, -1.2290555301717928e-09, 9.422759064650411e-11,
    -6.7113668551641105e-12, 4.4632242632864775e-13, -2.7835162072109215e-14,
    1.6342614095367152e-15, -9.063970842808673e-17, 4.763348040515068e-18,
)  # fmt: skip
_ERFC_INTERVALS = ((1.0, 1.375), (1.375, 1.75), (1.75, 2.75), (2.75, 6.0))
_ERFC_BOUNDS = np.array([1.375, 1.75, 2.75])
_ERFC_G = (
    (0.38130405896671776, -0.041771630071794075, 0.004104506314882128, -0.0003697599236462644,
     3.0984846014540934e-05, -2.4401613412158157e-06, 1.81998095087621e-07,
     -1.293193758675204e-08, 8.795457938359785e-10, -5.8121063517546645e-11,
     3.711192811395314e-12),
    (0.3116486086481297, -0.028964487200645248, 0.0024707067882235208, -0.000196295249179251,
     1.4676205853695126e-05, -1.0405341311636729e-06, 7.037217559374698e-08,
     -4.56111701966494e-09, 2.843745343372728e-10, -1.7271318056288898e-11,
     1.0231078137468153e-12),
    (0.23108725873039215, -0.044243251404385855, 0.00799815685258692, -0.0013752575943474146,
     0.00022618721113443901, -3.574151574220648e-05, 5.445857833864462e-06,
     -8.025099431391985e-07, 1.146801930224095e-07, -1.5910128606938523e-08,
     2.131148493789148e-09, -2.946255097530104e-10, 4.4972645399377065e-11),
    (0.12582358822967235, -0.0445620015957886, 0.015444927054812024, -0.005245205806571221,
     0.0017470154828836404, -0.0005718231903380378, 0.00018449128639807556,
     -5.2970078994180395e-05, 2.965371461240672e-05, 9.69398544271513e-06,
     1.3949250669427135e-05, 5.320516319495469e-06, 1.4850900893655095e-06),
)  # fmt: skip


def _horner(t, coefs):
    acc = np.full(t.shape, coefs[-1])
    for c in reversed(coefs[:-1]):
        acc *= t
        acc += c
    return acc


@np.errstate(all="ignore")
def _erf_vectorized(x):
    """erf of a float64 array in a few passes (error ~1e-16, so rounding it to float32
    gives libm's erf rounded to float32 but for ~1 value in 10**8).  NaN stays NaN,
    -0.0 stays -0.0, +-inf give +-1."""
    shape = x.shape
    x = x.reshape(-1)
    ax = np.abs(x)
    small = ax < 1.0
    out = x * _horner(x * x, _ERF_TAYLOR)  # every element: cheaper than gathering
    rest = np.flatnonzero(~small & (ax < 6.0))  # NaN is in neither
    if rest.size:
        v = ax[rest]
        k = np.searchsorted(_ERFC_BOUNDS, v, side="right")  # the interval of each
        acc = np.zeros(v.shape)
        for j, ((a, b), g) in enumerate(zip(_ERFC_INTERVALS, _ERFC_G)):
            m = np.flatnonzero(k == j)
            if m.size:
                w = v[m]
                acc[m] = _horner((w - (a + b) / 2) * (2 / (b - a)), g)
        hi = v * v  # exp(-x*x) with x*x's rounding error (Veltkamp split) added back
        c = v * 134217729.0
        a1 = c - (c - v)
        a2 = v - a1
        lo = ((a1 * a1 - hi) + 2 * a1 * a2) + a2 * a2
        erfc = np.exp(-hi) * (1.0 - lo) * acc
        out[rest] = np.copysign(1.0 - erfc, x[rest])
    big = np.flatnonzero(ax >= 6.0)
    if big.size:
        out[big] = np.copysign(1.0, x[big])
    return out.reshape(shape)


def _erf(x):
    """numpy has no erf.  float64: math.erf per element (libm's erf, as PyTorch's); lower
    precisions: a vectorized float64 evaluation rounded to the input's dtype."""
    if x.dtype.itemsize < 8 and x.dtype.kind == "f":
        return _erf_vectorized(x.astype(np.float64)).astype(x.dtype)
    flat = np.fromiter((math.erf(v) for v in x.ravel().tolist()), np.float64, x.size)
    return flat.reshape(x.shape).astype(x.dtype)


# name -> (numpy forward, VJP rule, saves, saves_out, samples)
_UNARY = {
    "log1p": (
        np.log1p,
        lambda g, out, x: g / (x + 1),
        (0,),
        False,
        _special_samples(-0.8, 3.0),
    ),
    "expm1": (
        np.expm1,
        lambda g, out, x: g * (out + 1),
        (),
        True,
        _special_samples(-2.0, 2.0),
    ),
    "erf": (
        _erf,
        lambda g, out, x: g * ((x * x).neg().exp() * _TWO_OVER_SQRT_PI),
        (0,),
        False,
        _special_samples(-3.0, 3.0),
    ),
    "tan": (
        np.tan,
        lambda g, out, x: g * (out * out + 1),
        (),
        True,
        _special_samples(-1.4, 1.4),
    ),
    "asin": (
        np.arcsin,
        lambda g, out, x: g * (1 - x * x).rsqrt(),
        (0,),
        False,
        _special_samples(-0.95, 0.95),
    ),
    "acos": (
        np.arccos,
        lambda g, out, x: -(g * (1 - x * x).rsqrt()),
        (0,),
        False,
        _special_samples(-0.95, 0.95),
    ),
    "atan": (
        np.arctan,
        lambda g, out, x: g / (x * x + 1),
        (0,),
        False,
        _special_samples(-3.0, 3.0),
    ),
    "sinh": (
        np.sinh,
        lambda g, out, x: g * x.cosh(),
        (0,),
        False,
        _special_samples(-3.0, 3.0),
    ),
    "cosh": (
        np.cosh,
        lambda g, out, x: g * x.sinh(),
        (0,),
        False,
        _special_samples(-3.0, 3.0),
    ),
    "asinh": (
        np.arcsinh,
        lambda g, out, x: g * (x * x + 1).rsqrt(),
        (0,),
        False,
        _special_samples(-3.0, 3.0),
    ),
    "acosh": (
        np.arccosh,
        lambda g, out, x: g * (x * x - 1).rsqrt(),
        (0,),
        False,
        _special_samples(1.1, 4.0),
    ),
    "atanh": (
        np.arctanh,
        lambda g, out, x: g / (1 - x * x),
        (0,),
        False,
        _special_samples(-0.9, 0.9),
    ),
    "log2": (
        np.log2,
        lambda g, out, x: g / (x * _LN2),
        (0,),
        False,
        _special_samples(0.2, 3.0),
    ),
    "log10": (
        np.log10,
        lambda g, out, x: g / (x * _LN10),
        (0,),
        False,
        _special_samples(0.2, 3.0),
    ),
    "exp2": (
        np.exp2,
        lambda g, out, x: g * (out * _LN2),
        (),
        True,
        _special_samples(-3.0, 3.0),
    ),
}

for _name, (_fn, _rule, _saves, _saves_out, _samples) in _UNARY.items():
    defop(
        _name,
        forward=_floatify(_quiet(_fn)),
        shape=_unary_float,
        arity=1,
        saves=_saves,
        saves_out=_saves_out,
        vjp=(_rule,),
        samples=_samples,
        doc=f"{_name}(x), elementwise; integer inputs give float32",
    )

# --- rounding: the dtype is kept (an integer is its own floor), the gradient is zero ------


def _rounding_shape(name):
    def rule(x: Meta) -> Meta:
        if x.dtype.kind == "b":
            raise NotImplementedError(f"\"{name}_vml_cpu\" not implemented for 'Bool'")
        return Meta(x.shape, x.dtype)

    return rule


def _rounding(fn, name):
    def forward(x):
        _rounding_shape(name)(Meta(x.shape, x.dtype))  # PyTorch's error for bools
        if x.dtype.kind != "f":
            return np.array(x, copy=True)
        return fn(x)

    forward.__name__ = fn.__name__
    return forward


for _name, _fn in (("floor", np.floor), ("ceil", np.ceil), ("round", np.rint), ("trunc", np.trunc)):
    defop(
        _name,
        forward=_rounding(_fn, _name),
        shape=_rounding_shape(_name),
        arity=1,
        saves=(),
        vjp=(lambda g, out, x: g.zeros_like_(),),
        samples=_special_samples(-4.0, 4.0),
        doc=f"{_name}(x), elementwise (round: half to even); integers unchanged; gradient 0",
    )

# --- division with rounding: floor_divide, remainder (Python's sign), fmod (C's sign) -----

_ZERO_DIV = "ZeroDivisionError"


def _int_divisor_check(x, y):
    """PyTorch's integer kernels raise on a zero divisor they use: the divisor broadcast to
    the result (an empty result divides nothing, so it does not raise)."""
    y = np.asarray(y)
    if y.dtype.kind in "biu":
        used = np.broadcast_to(y, np.broadcast_shapes(np.shape(x), y.shape))
        if np.any(np.equal(used, 0)):
            raise RuntimeError(_ZERO_DIV)


def _floor_divide(x, y):
    """PyTorch's div_floor: for floats ``(x - fmod(x, y)) / y`` corrected to the floor
    (numpy's algorithm too), ``x / y`` for a zero divisor; Python's ``//`` for integers."""
    dt = np.result_type(x, y)
    if dt.kind in "iu":
        _int_divisor_check(x, y)
        with np.errstate(all="ignore"):
            return np.asarray(np.floor_divide(x, y))
    x, y = np.asarray(x, dtype=dt), np.asarray(y, dtype=dt)
    with np.errstate(all="ignore"):
        mod = np.fmod(x, y)
        div = (x - mod) / y
        fix = (mod != 0) & (np.less(y, 0) != np.less(mod, 0))
        div = np.where(fix, div - dt.type(1), div)
        fl = np.floor(div)
        fl = np.where(div - fl > dt.type(0.5), fl + dt.type(1), fl)
        q = x / y
        out = np.where(div != 0, fl, np.copysign(dt.type(0), q))
        return np.asarray(np.where(y == 0, q, out), dtype=dt)


def _remainder(x, y):
    """PyTorch's remainder: ``fmod(x, y)`` moved by ``y`` when the signs differ (so the
    result has the sign of ``y``, as Python's ``%``); a zero result keeps fmod's sign."""
    dt = np.result_type(x, y)
    if dt.kind in "iu":
        _int_divisor_check(x, y)
        with np.errstate(all="ignore"):
            return np.asarray(np.remainder(x, y))
    x, y = np.asarray(x, dtype=dt), np.asarray(y, dtype=dt)
    with np.errstate(all="ignore"):
        mod = np.fmod(x, y)
        fix = (mod != 0) & (np.less(y, 0) != np.less(mod, 0))
        return np.asarray(np.where(fix, mod + y, mod), dtype=dt)


def _fmod(x, y):
    """C's fmod: the result has the sign of ``x``."""
    dt = np.result_type(x, y)
    if dt.kind in "iu":
        _int_divisor_check(x, y)
    with np.errstate(all="ignore"):
        return np.asarray(np.fmod(x, y), dtype=dt)


_KERNEL_NAMES = {"floor_divide": "div_floor_cpu", "remainder": "remainder_cpu", "fmod": "fmod_cpu"}


def _no_bools(name, dt) -> None:
    if np.dtype(dt).kind == "b":
        raise NotImplementedError(f"\"{_KERNEL_NAMES[name]}\" not implemented for 'Bool'")


def _division_shape(name):
    def rule(x: Meta, y: Meta) -> Meta:
        dt = np.result_type(x.dtype, y.dtype)
        _no_bools(name, dt)
        return Meta(broadcast_shapes(x.shape, y.shape, op=name), dt)

    return rule


def _checked(name, fn):
    def forward(x, y):
        if name in _KERNEL_NAMES:
            _no_bools(name, np.result_type(x, y))
        try:
            return fn(x, y)
        except ValueError:
            broadcast_shapes(np.shape(x), np.shape(y), op=name)
            raise

    forward.__name__ = name
    return forward


def _division_samples():
    # divisors away from 0 on both sides, so finite differences do not cross a jump
    out = _binary_samples(-3.0, 3.0, 0.6, 1.7)()
    for k, (ins, attrs) in enumerate(out):
        if k % 2:
            ins[1] = -ins[1]
    return out


# The gradients are PyTorch's: remainder and fmod pass g to x and give -g * (x / y rounded)
# to y; floor_divide's is zero (PyTorch's div(rounding_mode="floor") rule).
defop(
    "floor_divide",
    forward=_checked("floor_divide", _floor_divide),
    shape=_division_shape("floor_divide"),
    arity=2,
    saves=(),
    vjp=(lambda g, out, x, y: g.zeros_like_(), lambda g, out, x, y: g.zeros_like_()),
    samples=_division_samples,
    doc="x // y rounded to the floor (Python's //); gradient 0",
)

defop(
    "remainder",
    forward=_checked("remainder", _remainder),
    shape=_division_shape("remainder"),
    arity=2,
    vjp=(
        lambda g, out, x, y: g,
        lambda g, out, x, y: -(g * x.floor_divide(y)),
    ),
    reads=((), (0, 1)),
    samples=_division_samples,
    doc="x - floor(x / y) * y: the sign of y, as Python's %",
)

defop(
    "fmod",
    forward=_checked("fmod", _fmod),
    shape=_division_shape("fmod"),
    arity=2,
    vjp=(
        lambda g, out, x, y: g,
        lambda g, out, x, y: -(g * ((x - out) / y).round()),
    ),
    saves_out=True,
    reads=((), (0, 1)),
    samples=_division_samples,
    doc="C's fmod: x - trunc(x / y) * y, the sign of x",
)

# --- atan2 -----------------------------------------------------------------------------------


def _atan2_shape(y: Meta, x: Meta) -> Meta:
    dt = np.result_type(y.dtype, x.dtype)
    return Meta(broadcast_shapes(y.shape, x.shape, op="atan2"), _float_dtype(dt))


def _atan2(y, x):
    dt = _float_dtype(np.result_type(y, x))
    with np.errstate(all="ignore"):
        return np.asarray(np.arctan2(np.asarray(y, dtype=dt), np.asarray(x, dtype=dt)))


def _atan2_samples():
    return _binary_samples(-2.0, 2.0, 0.3, 2.0)()


defop(
    "atan2",
    forward=_checked("atan2", _atan2),
    shape=_atan2_shape,
    arity=2,
    vjp=(
        lambda g, out, y, x: g * x / (x * x + y * y),
        lambda g, out, y, x: -(g * y) / (x * x + y * y),
    ),
    samples=_atan2_samples,
    doc="atan2(y, x): the angle of the point (x, y), in (-pi, pi]",
)
