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
import eager.ops.onnx_rules as R

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


# erf of float32/float16 arrays: a table of erf's Taylor coefficients of degree 6 at the
# nodes j/64 of [0, 6] (beyond 6, erf is 1 in float64), evaluated in float64 around the
# nearest node (|h| <= 1/128: truncation below 1e-17).  erf^(k)(x) = 2/sqrt(pi)
# (-1)^(k-1) H_{k-1}(x) exp(-x*x) with Hermite's H; the values erf(j/64) are libm's.
_ERF_STEP = 64
_ERF_TABLE: list = []


def _erf_table() -> tuple:
    """The coefficient columns c_k(x_j) = erf^(k)(x_j) / k!, k = 0..6 (made on first use)."""
    if not _ERF_TABLE:
        x = np.arange(6 * _ERF_STEP + 1) / _ERF_STEP
        cols = [np.array([math.erf(v) for v in x.tolist()])]
        d = _TWO_OVER_SQRT_PI * np.exp(-x * x)
        h_prev, h = np.zeros_like(x), np.ones_like(x)  # H_{-1} (unused), H_0
        for k in range(1, 7):
            cols.append((-1) ** (k - 1) * h * d / math.factorial(k))
            h_prev, h = h, 2 * x * h - 2 * (k - 1) * h_prev
        _ERF_TABLE.extend(cols)
    return tuple(_ERF_TABLE)


# 2**52 + k for 0 <= k < 2**51 is exact in float64 with k in the low mantissa bits, so
# adding 2**52 rounds to the nearest integer (half to even, as np.rint) and subtracting
# the bit pattern of 2**52 from the int64 view reads it: ~15x faster than np.rint of
# non-integers followed by astype(intp)
_ROUND_MAGIC = float(2**52)
_ROUND_MAGIC_BITS = np.int64(0x4330000000000000)


@np.errstate(all="ignore")
def _erf_vectorized(x):
    """erf of a float64 array (error ~1e-16, so rounding it to float32 gives libm's erf
    rounded to float32 but for ~1 value in 10**8).  NaN stays NaN, -0.0 stays -0.0,
    +-inf give +-1."""
    cols = _erf_table()
    shape = x.shape
    x = x.reshape(-1)  # (a 0-d array's ufunc results would be numpy scalars)
    ax = np.abs(x)
    np.minimum(ax, 6.0, out=ax)  # NaN stays NaN here...
    any_nan = bool(np.isnan(ax.max())) if ax.size else False
    if any_nan:
        nan = np.isnan(ax)
        ax[nan] = 0.0  # ...and is put back at the end
    # j = rint(ax * 64) (the nearest node), h = ax - j / 64 (|h| <= 1/128), then Horner
    # over the node's Taylor coefficients; every pass writes into one of three buffers
    y = np.multiply(ax, float(_ERF_STEP))
    y += _ROUND_MAGIC
    j = y.view(np.int64)
    j -= _ROUND_MAGIC_BITS
    h = np.multiply(j, -1.0 / _ERF_STEP)
    h += ax
    out = cols[6].take(j)
    tmp = ax  # ax is not read again
    for c in cols[5::-1]:
        out *= h
        out += c.take(j, out=tmp, mode="clip")  # (j is in range; "raise" buffers out)
    np.copysign(out, x, out=out)
    if any_nan:
        out[nan] = np.nan
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

# how each exports to ONNX: one operator, or a rule where ONNX has none (or an inaccurate one)
_ONNX_UNARY = {
    "log1p": R.log1p,
    "expm1": R.expm1,
    "erf": "Erf",
    "tan": "Tan",
    "asin": "Asin",
    "acos": "Acos",
    "atan": "Atan",
    "sinh": "Sinh",
    "cosh": "Cosh",
    "asinh": "Asinh",
    "acosh": "Acosh",
    "atanh": "Atanh",
    "log2": R.log2,
    "log10": R.log10,
    "exp2": R.exp2,
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
        onnx=_ONNX_UNARY[_name],
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
        onnx=R.rounding(_name),
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
    onnx=R.floor_divide,
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
    onnx=R.remainder,
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
    onnx=R.fmod,
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
    onnx=R.atan2,
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
