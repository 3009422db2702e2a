"""Elementwise primitives: unary math, binary arithmetic, comparisons, where.

Binary rules return the gradient in the broadcast output shape; the caller
sums it back to each input's shape.  Python scalars arrive as 0-d arrays whose
dtype the public API already chose (weak-scalar promotion).
"""

from __future__ import annotations

import numpy as np

import eager.surface as S  # S.where...; by full name ("from .. import" is an edge to eager)
from .registry import Meta, broadcast_shapes, defop
import eager.ops.onnx_rules as R

_RNG_SEED = 1234


def _rng():
    return np.random.default_rng(_RNG_SEED)


def _float_dtype(d: np.dtype) -> np.dtype:
    return d if d.kind == "f" else np.dtype(np.float32)


def _unary_shape(x: Meta) -> Meta:
    return Meta(x.shape, _float_dtype(x.dtype))


def _same_shape(x: Meta) -> Meta:
    return Meta(x.shape, x.dtype)


def _floatify(fn):
    """Integer inputs to transcendental ops give float32, as in PyTorch."""

    def forward(x):
        if x.dtype.kind != "f":
            x = x.astype(np.float32)
        return fn(x)

    forward.__name__ = getattr(fn, "__name__", "forward")
    return forward


def _unary_samples(low=-2.0, high=2.0):
    def samples():
        r = _rng()
        return [([r.uniform(low, high, size=s)], {}) for s in [(3, 4), (), (1,), (0, 2), (2, 1, 3)]]

    return samples


def _binary_samples(low=-2.0, high=2.0, rlow=None, rhigh=None):
    rlow = low if rlow is None else rlow
    rhigh = high if rhigh is None else rhigh

    def samples():
        r = _rng()
        pairs = [
            ((3, 4), (3, 4)),
            ((3, 4), (4,)),
            ((2, 1, 3), (4, 1)),
            ((), (2, 3)),
            ((1,), ()),
            ((0, 3), (3,)),
        ]
        return [
            ([r.uniform(low, high, size=a), r.uniform(rlow, rhigh, size=b)], {}) for a, b in pairs
        ]

    return samples


# --- unary ------------------------------------------------------------------

_NEG_BOOL = (
    "Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
    "to invert a mask, use the `~` or `logical_not()` operator instead."
)
_SUB_BOOL = (
    "Subtraction, the `-` operator, with two bool tensors is not supported. Use "
    "`a != b` (logical xor) instead."
)


def _neg(x):
    try:
        return np.negative(x)
    except TypeError:  # numpy refuses bools too, with its own wording
        if x.dtype.kind == "b":
            raise RuntimeError(_NEG_BOOL) from None
        raise


_neg.raw = np.negative  # gradient plans (floats only) call the ufunc


def _neg_shape(x: Meta) -> Meta:
    if x.dtype.kind == "b":
        raise RuntimeError(_NEG_BOOL)
    return Meta(x.shape, x.dtype)


defop(
    "neg",
    onnx=R.neg,
    forward=_neg,
    shape=_neg_shape,
    arity=1,
    saves=(),
    vjp=(lambda g, out, x: -g,),
    samples=_unary_samples(),
    doc="-x",
)

defop(
    "exp",
    onnx="Exp",
    forward=_floatify(np.exp),
    shape=_unary_shape,
    arity=1,
    saves=(),
    saves_out=True,
    vjp=(lambda g, out, x: g * out,),
    samples=_unary_samples(),
    doc="e ** x",
)

defop(
    "log",
    onnx="Log",
    forward=_floatify(np.log),
    shape=_unary_shape,
    arity=1,
    saves=(0,),
    vjp=(lambda g, out, x: g / x,),
    samples=_unary_samples(0.2, 3.0),
    doc="natural logarithm",
)

defop(
    "sqrt",
    onnx="Sqrt",
    forward=_floatify(np.sqrt),
    shape=_unary_shape,
    arity=1,
    saves=(),
    saves_out=True,
    vjp=(lambda g, out, x: g / (out * 2),),
    samples=_unary_samples(0.2, 3.0),
    doc="square root (correctly rounded)",
)

defop(
    "sin",
    onnx="Sin",
    forward=_floatify(np.sin),
    shape=_unary_shape,
    arity=1,
    saves=(0,),
    vjp=(lambda g, out, x: g * x.cos(),),
    samples=_unary_samples(),
    doc="sine",
)

defop(
    "cos",
    onnx="Cos",
    forward=_floatify(np.cos),
    shape=_unary_shape,
    arity=1,
    saves=(0,),
    vjp=(lambda g, out, x: -(g * x.sin()),),
    samples=_unary_samples(),
    doc="cosine",
)

defop(
    "tanh",
    onnx="Tanh",
    forward=_floatify(np.tanh),
    shape=_unary_shape,
    arity=1,
    saves=(),
    saves_out=True,
    vjp=(lambda g, out, x: g * (1 - out * out),),
    samples=_unary_samples(),
    doc="hyperbolic tangent",
)


def _sigmoid(x):
    with np.errstate(over="ignore"):
        out = np.exp(-x, out=np.empty_like(x))  # an array even for 0-d x (np.exp gives a scalar)
        out += 1
        return np.reciprocal(out, out=out)


defop(
    "sigmoid",
    onnx="Sigmoid",
    forward=_floatify(_sigmoid),
    shape=_unary_shape,
    arity=1,
    saves=(),
    saves_out=True,
    vjp=(lambda g, out, x: g * (out * (1 - out)),),
    samples=_unary_samples(),
    doc="1 / (1 + exp(-x)) without overflow",
)


def _relu(x):
    # PyTorch's relu and clamp return x where it equals the bound (relu(-0.0) is -0.0);
    # numpy's maximum/minimum return their second operand on ties, so x goes second
    return np.maximum(x.dtype.type(0), x)


# PyTorch's threshold_backward: zero where out <= 0, so relu'(0) = 0 and a NaN passes g
defop(
    "relu",
    onnx=R.relu,
    forward=_relu,
    shape=_same_shape,
    arity=1,
    saves=(),
    saves_out=True,
    vjp=(lambda g, out, x: S.where(out <= 0, 0, g),),
    samples=_unary_samples(),
    doc="max(x, 0), gradient 0 at 0",
)

defop(
    "abs",
    onnx=R.abs_,
    forward=np.abs,
    shape=_same_shape,
    arity=1,
    saves=(0,),
    vjp=(lambda g, out, x: g * x.sign(),),
    samples=_unary_samples(),
    doc="absolute value",
)


def _sign(x):
    """PyTorch's sign, ``(x > 0) - (x < 0)``: NaN gives 0 (numpy's NaN), -0.0 gives +0.0,
    and a bool is itself (numpy has no bool loop)."""
    if x.dtype.kind == "b":
        return x.copy()
    out = np.sign(x, out=np.empty_like(x))  # an array even for 0-d x
    if x.dtype.kind == "f":
        np.copyto(out, 0, where=np.isnan(out))
    return out


defop(
    "sign",
    onnx=R.sign,
    forward=_sign,
    shape=_same_shape,
    arity=1,
    saves=(),
    vjp=(lambda g, out, x: g.zeros_like_(),),
    samples=_unary_samples(),
    doc="-1, 0 or 1 (0 for NaN)",
)


def _check_scalar_fits(op: str, dtype, value) -> None:
    """A scalar attribute used as a value of an integer dtype must fit it: numpy raises
    OverflowError for an int out of range, and a float outside the range (or NaN) has no
    defined integer value (numpy warns or raises; compiled code would truncate the
    constant silently)."""
    dt = np.dtype(dtype)
    if dt.kind in "iu" and value is not None and not isinstance(value, (bool, np.bool_)):
        info = np.iinfo(dt)
        if (
            not (isinstance(value, (int, np.integer)) or np.isfinite(value))
            or not info.min <= int(value) <= info.max
        ):
            raise OverflowError(f"{op}: value {value!r} out of bounds for {dt.name}")


def _clamp_shape(x: Meta, min=None, max=None) -> Meta:
    _check_scalar_fits("clamp", x.dtype, min)
    _check_scalar_fits("clamp", x.dtype, max)
    return _same_shape(x)


def _clamp(x, min=None, max=None):
    t = x.dtype.type  # x second: on a tie the result is x, as in PyTorch
    if max is None:
        return np.maximum(t(min), x)
    if min is None:
        return np.minimum(t(max), x)
    return np.minimum(t(max), np.maximum(t(min), x))


def _clamp_vjp(g, out, x, min=None, max=None):
    if min is not None:
        g = S.where(x >= min, g, 0)
    if max is not None:
        g = S.where(x <= max, g, 0)
    return g


def _clamp_samples():
    r = _rng()
    return [
        ([r.uniform(-2, 2, size=(3, 4))], {"min": 0.0, "max": None}),
        ([r.uniform(-2, 2, size=(5,))], {"min": -0.5, "max": 0.5}),
        ([r.uniform(-2, 2, size=())], {"min": None, "max": 0.3}),
        ([r.uniform(-2, 2, size=(1,))], {"min": -1.0, "max": None}),
        ([r.uniform(-2, 2, size=(0, 3))], {"min": 0.0, "max": 1.0}),
    ]


defop(
    "clamp",
    onnx=R.clamp,
    forward=_clamp,
    shape=_clamp_shape,
    arity=1,
    attrs={"min": "number?", "max": "number?"},
    saves=(0,),
    vjp=(_clamp_vjp,),
    samples=_clamp_samples,
    doc="x limited to [lo, hi] (static bounds; tensor bounds are maximum/minimum)",
)

# --- binary -------------------------------------------------------------------


def _binary_shape(name):
    def rule(x: Meta, y: Meta) -> Meta:
        return Meta(broadcast_shapes(x.shape, y.shape, op=name), np.result_type(x.dtype, y.dtype))

    return rule


def _checked(name, fn, bool_error=None):
    """numpy forward with PyTorch-style broadcasting errors naming op and shapes, and
    PyTorch's RuntimeError ``bool_error`` where numpy refuses bools with a TypeError."""

    def forward(x, y):
        try:
            return fn(x, y)
        except ValueError:
            broadcast_shapes(np.shape(x), np.shape(y), op=name)
            raise
        except TypeError:
            if bool_error is not None and np.result_type(x, y).kind == "b":
                raise RuntimeError(bool_error) from None
            raise

    forward.__name__ = name
    forward.raw = fn  # for callers that produce the error message themselves
    return forward


defop(
    "add",
    onnx=R.add,
    forward=_checked("add", np.add),
    shape=_binary_shape("add"),
    arity=2,
    saves=(),
    vjp=(lambda g, out, x, y: g, lambda g, out, x, y: g),
    samples=_binary_samples(),
    doc="x + y",
)


def _sub_shape(x: Meta, y: Meta) -> Meta:
    if x.dtype.kind == "b" and y.dtype.kind == "b":
        raise RuntimeError(_SUB_BOOL)
    return _binary_shape("sub")(x, y)


defop(
    "sub",
    onnx=R.sub,
    forward=_checked("sub", np.subtract, _SUB_BOOL),
    shape=_sub_shape,
    arity=2,
    saves=(),
    vjp=(lambda g, out, x, y: g, lambda g, out, x, y: -g),
    samples=_binary_samples(),
    doc="x - y",
)

defop(
    "mul",
    onnx=R.mul,
    forward=_checked("mul", np.multiply),
    shape=_binary_shape("mul"),
    arity=2,
    vjp=(lambda g, out, x, y: g * y, lambda g, out, x, y: g * x),
    reads=((1,), (0,)),
    samples=_binary_samples(),
    doc="x * y",
)


def _div(x, y):
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.true_divide(x, y)
    if x.dtype.kind != "f" and y.dtype.kind != "f" and out.dtype != np.float32:
        out = out.astype(np.float32)
    return out


def _div_shape(x: Meta, y: Meta) -> Meta:
    d = np.result_type(x.dtype, y.dtype)
    return Meta(broadcast_shapes(x.shape, y.shape, op="div"), _float_dtype(d))


defop(
    "div",
    onnx=R.div,
    forward=_checked("div", _div),
    shape=_div_shape,
    arity=2,
    vjp=(lambda g, out, x, y: g / y, lambda g, out, x, y: -(g * x) / (y * y)),
    reads=((1,), (0, 1)),
    samples=_binary_samples(-2, 2, 0.5, 2.0),
    doc="true division x / y",
)


def _pow(x, y):
    """PyTorch's pow.  A 0-d exponent is computed as PyTorch computes a Python-number
    exponent: 0.5 is ``sqrt`` and -0.5 is ``1 / sqrt`` (so ``(-inf) ** 0.5`` is NaN and
    ``(-0.0) ** 0.5`` is -0.0); any other exponent is C's ``pow`` per element, whatever
    the layout (numpy's loop takes ``sqrt`` for a broadcast exponent of 0.5).  A bool to
    a bool power is ``x or not y`` (numpy would give int8)."""
    dt = np.result_type(x, y)
    if np.ndim(y) == 0:
        if dt == np.result_type(x):
            if y == 2:  # the common x**2 and x**1: no error state to manage
                return np.square(x)
            if y == 1:
                return np.array(x, copy=True) if isinstance(x, np.ndarray) else x
        if dt.kind == "b":
            return np.logical_or(x, np.logical_not(y))
        if dt.kind in "iu":
            return _int_pow(x, y)
        if dt.kind == "f" and (y == 0.5 or y == -0.5):
            with np.errstate(divide="ignore", invalid="ignore"):
                root = np.sqrt(np.asarray(x, dtype=dt))
                return root if y == 0.5 else np.divide(dt.type(1), root)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.power(x, y)
    if dt.kind == "b":
        _pow_shape(Meta(np.shape(x), np.bool_), Meta(np.shape(y), np.bool_))  # PyTorch's error
    if dt.kind in "iu":
        return _int_pow(x, y)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = np.power(x, y)
    if out.dtype.kind == "f":
        half = np.equal(y, 0.5)
        if half.any():  # C's pow(-inf, 0.5) = inf, pow(-0.0, 0.5) = +0.0
            x = np.asarray(x)
            fix = half & ((x == -np.inf) | ((x == 0) & np.signbit(x)))
            np.copyto(out, np.abs(np.broadcast_to(x, out.shape)).astype(out.dtype), where=fix)
    return out


def _int_pow(x, y):
    """PyTorch's integer power: exact, wrapping around like numpy's; a negative exponent
    (numpy raises) gives 1 for base 1, -1 or 1 for base -1 (odd or even exponent), else 0.
    A negative Python-number exponent is refused by ``Tensor.pow``, as PyTorch does."""
    neg = np.less(y, 0)
    with np.errstate(over="ignore"):
        out = np.asarray(np.power(x, np.where(neg, 0, y) if neg.any() else y))
    if neg.any():
        x = np.broadcast_to(x, out.shape)
        np.copyto(
            out,
            np.where(x == 1, 1, np.where(x == -1, 1 - 2 * (np.asarray(y) & 1), 0)),
            where=np.broadcast_to(neg, out.shape),
            casting="unsafe",
        )
    return out


def _pow_shape(x: Meta, y: Meta) -> Meta:
    if x.dtype.kind == "b" and y.dtype.kind == "b" and y.shape:
        raise NotImplementedError("\"pow\" not implemented for 'Bool'")
    return _binary_shape("pow")(x, y)


def _pow_vjp_x(g, out, x, y):
    # d/dx x**y = y * x**(y-1); PyTorch's pow_backward_self gives 0 where y == 0 (x**0 is
    # constant), where the formula would give 0 * inf or 0 * nan at x = 0, inf or nan
    return S.where(y == 0, 0, g * y * x ** (y - 1))


def _pow_vjp_y(g, out, x, y):
    # d/dy x**y = x**y * log(x); PyTorch's pow_backward_exponent masks x == 0 with y >= 0
    # (0 * -inf) to 0; for y < 0 or nan the formula's inf or nan stands
    return g * S.where((x == 0) & (y >= 0), 0, out * x.log())


defop(
    "pow",
    onnx=R.pow_,
    forward=_checked("pow", _pow),
    shape=_pow_shape,
    arity=2,
    saves_out=True,
    vjp=(_pow_vjp_x, _pow_vjp_y),
    samples=_binary_samples(0.3, 2.0, -2.0, 2.0),
    doc="x ** y (C99 special cases)",
)


def _max_vjp(a_wins):
    def rule(g, out, x, y):
        # PyTorch's rule: ties split the gradient evenly, the smaller side gets none, and
        # so a NaN on either side (no order) passes the whole gradient to both
        loses = (x < y) if a_wins else (x > y)
        return S.where(x == y, g / 2, S.where(loses, 0, g))

    return rule


def _min_vjp(a_wins):
    def rule(g, out, x, y):
        loses = (x > y) if a_wins else (x < y)
        return S.where(x == y, g / 2, S.where(loses, 0, g))

    return rule


defop(
    "maximum",
    onnx=R.maximum,
    forward=_checked("maximum", np.maximum),
    shape=_binary_shape("maximum"),
    arity=2,
    vjp=(_max_vjp(True), _max_vjp(False)),
    samples=_binary_samples(),
    doc="elementwise maximum, NaN propagates",
)

defop(
    "minimum",
    onnx=R.minimum,
    forward=_checked("minimum", np.minimum),
    shape=_binary_shape("minimum"),
    arity=2,
    vjp=(_min_vjp(True), _min_vjp(False)),
    samples=_binary_samples(),
    doc="elementwise minimum, NaN propagates",
)

# --- comparisons and logic (no gradient) ------------------------------------------


def _bool_binary_shape(name):
    def rule(x: Meta, y: Meta) -> Meta:
        return Meta(broadcast_shapes(x.shape, y.shape, op=name), np.dtype(np.bool_))

    return rule


_COMPARISON_DOCS = {
    "eq": "x == y",
    "ne": "x != y",
    "lt": "x < y",
    "le": "x <= y",
    "gt": "x > y",
    "ge": "x >= y",
    "logical_and": "x and y",
    "logical_or": "x or y",
}

_ONNX_COMPARISONS = {
    "eq": "Equal",
    "ne": "NotEqual",
    "lt": "Less",
    "le": "LessOrEqual",
    "gt": "Greater",
    "ge": "GreaterOrEqual",
    "logical_and": "And",
    "logical_or": "Or",
}

for _name, _fn in [
    ("eq", np.equal),
    ("ne", np.not_equal),
    ("lt", np.less),
    ("le", np.less_equal),
    ("gt", np.greater),
    ("ge", np.greater_equal),
    ("logical_and", np.logical_and),
    ("logical_or", np.logical_or),
]:
    defop(
        _name,
        forward=_checked(_name, _fn),
        shape=_bool_binary_shape(_name),
        arity=2,
        vjp=None,
        samples=_binary_samples(),
        doc=_COMPARISON_DOCS[_name],
        onnx=R.simple(_ONNX_COMPARISONS[_name], cast="bool" if "logical" in _name else "common"),
    )

defop(
    "logical_not",
    onnx=R.simple("Not", cast="bool"),
    forward=np.logical_not,
    arity=1,
    vjp=None,
    shape=lambda x: Meta(x.shape, np.dtype(np.bool_)),
    samples=_unary_samples(),
    doc="not x",
)

# --- where ----------------------------------------------------------------------------


_SAME_SIZE_INT = {2: np.int16, 4: np.int32, 8: np.int64}


def _select_bits(c, x, y):
    """where(c, x, y) for x, y of one float dtype as ``y ^ ((x ^ y) & -c)`` on their bit
    patterns: the same bits as np.where (NaN payloads and -0.0 kept), with no branch per
    element (np.where branches on the condition: ~10x slower on a random mask, e.g. the
    ReLU gradient's)."""
    shape = np.broadcast_shapes(c.shape, x.shape, y.shape)
    it = _SAME_SIZE_INT[x.dtype.itemsize]
    if x.ndim == 0 and y.shape == shape and c.shape == shape and x.view(it) == 0:
        # where(c, +0.0, y), the ReLU gradient: y & (c - 1), c - 1 being all bits set
        # where c is False and none where it is True; two passes fewer
        m = c.astype(it)
        np.subtract(m, it(1), out=m)
        np.bitwise_and(y.view(it), m, out=m)
        return m.view(x.dtype)
    # astype, not a view as int8: a bool array made by viewing other bytes (uint8 2
    # viewed as bool) holds bytes other than 0/1, which np.where takes as True; the cast
    # gives 0/1 for them
    m = c.astype(it)
    np.negative(m, out=m)  # all bits set where c
    xb, yb = x.view(it), y.view(it)
    r = np.bitwise_xor(xb, yb)
    r = np.bitwise_and(r, m, out=r if r.shape == shape else None)
    np.bitwise_xor(r, yb, out=r)
    return r.view(x.dtype)


def _where_forward(c, x, y):
    try:
        if (
            c.size >= 4096
            and isinstance(x, np.ndarray)
            and isinstance(y, np.ndarray)
            and x.dtype == y.dtype
            and x.dtype.kind == "f"
            and x.dtype.isnative  # (np.where gives native byte order)
            and x.dtype.itemsize in _SAME_SIZE_INT
            and c.dtype == np.bool_
        ):
            return _select_bits(c, x, y)
        return np.where(c, x, y)
    except ValueError:
        broadcast_shapes(np.shape(c), np.shape(x), np.shape(y), op="where")
        raise


def _where_shape(c: Meta, x: Meta, y: Meta) -> Meta:
    if c.dtype.kind != "b":
        raise TypeError(f"where: condition must be a bool tensor, got {c.dtype}")
    return Meta(
        broadcast_shapes(c.shape, x.shape, y.shape, op="where"), np.result_type(x.dtype, y.dtype)
    )


def _where_samples():
    r = _rng()
    return [
        (
            [
                r.uniform(-1, 1, size=(3, 4)) > 0,
                r.uniform(-2, 2, size=(3, 4)),
                r.uniform(-2, 2, size=(4,)),
            ],
            {},
        ),
        ([np.array(True), r.uniform(-2, 2, size=(2,)), r.uniform(-2, 2, size=())], {}),
        (
            [
                r.uniform(-1, 1, size=(2, 1)) > 0,
                r.uniform(-2, 2, size=(1, 3)),
                r.uniform(-2, 2, size=(1,)),
            ],
            {},
        ),
        (
            [
                r.uniform(-1, 1, size=(0, 3)) > 0,
                r.uniform(-2, 2, size=(3,)),
                r.uniform(-2, 2, size=()),
            ],
            {},
        ),
    ]


defop(
    "where",
    onnx=R.where,
    forward=_where_forward,
    shape=_where_shape,
    arity=3,
    saves=(0,),
    vjp=(None, lambda g, out, c, x, y: S.where(c, g, 0), lambda g, out, c, x, y: S.where(c, 0, g)),
    samples=_where_samples,
    doc="cond ? x : y",
)

# --- dtype and copies ---------------------------------------------------------------------


def _cast(x, dtype):
    dt = np.dtype(dtype)
    x = np.asarray(x)
    if x.dtype.kind == "f" and dt in (np.dtype(np.int32), np.dtype(np.int64)):
        # C leaves NaN and out-of-range conversions undefined; numpy and PyTorch on x86 give
        # the integer minimum (cvttsd2si's "integer indefinite"), here on every platform,
        # and compiled code gives the same.  (Narrower types go through a wider integer
        # and wrap, in numpy and PyTorch alike: numpy's cast is kept for them.)
        lo = np.iinfo(dt).min
        with np.errstate(invalid="ignore"):
            ok = (x >= lo) & (x < -float(lo))  # False for NaN
            return np.where(ok, np.where(ok, x, 0).astype(dt), dt.type(lo))
    return x.astype(dt)


defop(
    "cast",
    onnx=R.cast,
    forward=_cast,
    shape=lambda x, dtype: Meta(x.shape, np.dtype(dtype)),
    arity=1,
    attrs={"dtype": "dtype"},
    saves=(),
    vjp=(lambda g, out, x, dtype: g.to(x.dtype),),
    samples=lambda: [
        ([_rng().uniform(-2, 2, size=(3,))], {"dtype": "float32"}),
        ([_rng().uniform(-2, 2, size=())], {"dtype": "float64"}),
        ([_rng().uniform(-2, 2, size=(1, 0))], {"dtype": "float32"}),
    ],
    doc="conversion to another dtype (float to int truncates; NaN gives INT_MIN)",
)

defop(
    "copy",
    onnx=R.identity,
    forward=np.copy,
    shape=_same_shape,
    arity=1,
    saves=(),
    vjp=(lambda g, out, x: g,),
    samples=_unary_samples(),
    doc="a copy (clone)",
)

# ``t.detach()`` inside a graphc trace: the value passes, the gradient stops (JAX's
# stop_gradient).  Eager's Tensor.detach shares storage instead and never records this op.
defop(
    "detach",
    onnx=R.identity,
    forward=np.copy,
    shape=_same_shape,
    arity=1,
    vjp=None,
    samples=_unary_samples(),
    doc="a copy without gradient history",
)


def _fill(x, value):
    return np.full(x.shape, value, dtype=x.dtype)


def _fill_shape(x: Meta, value) -> Meta:
    _check_scalar_fits("fill", x.dtype, value)
    return Meta(x.shape, x.dtype)


defop(
    "fill",
    onnx=R.fill,
    forward=_fill,
    shape=_fill_shape,
    arity=1,
    attrs={"value": "scalar"},
    saves=(),
    vjp=(lambda g, out, x, value: g.zeros_like_(),),
    samples=lambda: [
        ([_rng().uniform(-2, 2, size=(2, 3))], {"value": 0.0}),
        ([_rng().uniform(-2, 2, size=())], {"value": 1.5}),
        ([_rng().uniform(-2, 2, size=(0, 1))], {"value": 0.0}),
    ],
    doc="a tensor of x's shape filled with a value",
)
