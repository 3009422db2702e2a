"""How each op exports to ONNX: the rules an op record's ``onnx`` field points at.

An op record (:class:`eager.ops.registry.OpDef`) says how it exports in its ``onnx`` field:

* a string: a standard ONNX operator with the same operands and no attributes
  (``"Sin"``); every operand is first cast to the op's result dtype (graphc's ops
  promote; ONNX's want equal types);
* a rule, a callable ``rule(b, xs, ms, out, **attrs) -> str``: ``b`` is the exporter's
  builder (duck-typed, passed in by the compiler: ``b.op(op_type, inputs, outputs=1,
  **attributes)``, ``b.const(array)``, ``b.cast(name, from_dtype, to_dtype)`` and
  ``b.fail(message)``), ``xs`` the ONNX names of the operands, ``ms`` their
  :class:`Meta`, ``out`` the result's :class:`Meta`; it returns the result's name;
* a :class:`NoOnnx`: the op cannot be exported, and why (the exporter's error says it).

This module imports numpy only: eager never imports the compiler or the ``onnx``
package; the builder is what the compiler hands in.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

#: the ONNX opset the rules are written against (reductions take ``axes`` as an input,
#: ``ScatterElements`` has ``reduction="max"``...)
MIN_OPSET = 18


class NoOnnx:
    """An op record's explicit refusal to export: ``reason`` says why (and what to use)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"NoOnnx({self.reason!r})"


# --- helpers -----------------------------------------------------------------------------


def _to(b, x: str, m: Any, dtype: Any) -> str:
    """``x`` (of meta ``m``) as ``dtype``."""
    return b.cast(x, m.dtype, np.dtype(dtype))


def _c(b, value: Any, dtype: Any) -> str:
    return b.const(np.array(value, dtype=np.dtype(dtype)))


def _i64(b, values: Any) -> str:
    return b.const(np.array(values, dtype=np.int64).reshape(-1))


def _reshape(b, x: str, shape: Any) -> str:
    """Reshape to a static shape (``allowzero``: a 0 in it is a size, not "copy")."""
    shape = [int(d) for d in shape]
    return b.op("Reshape", [x, _i64(b, shape)], **({"allowzero": 1} if 0 in shape else {}))


def simple(op_type: str, cast: str = "out", **fixed: Any) -> Callable:
    """A rule applying one ONNX operator: operands cast to the result dtype (``cast=
    "out"``), to their common dtype (``"common"``, comparisons) or to bool (``"bool"``)."""

    def rule(b, xs, ms, out, **_attrs):
        if cast == "out":
            dt = out.dtype
        elif cast == "common":
            dt = np.result_type(*[m.dtype for m in ms])
            if dt.kind == "b" and op_type not in ("Equal", "NotEqual"):
                dt = np.dtype(np.int32)  # ONNX orders numbers, not bools
        else:
            dt = np.dtype(bool)
        ins = [_to(b, x, m, dt) for x, m in zip(xs, ms)]
        if op_type == "NotEqual":  # ONNX has Equal only
            return b.op("Not", [b.op("Equal", ins, **fixed)])
        return b.op(op_type, ins, **fixed)

    rule.__doc__ = f"ONNX {op_type}"
    return rule


def _float_in(b, xs, ms, out):
    return [_to(b, x, m, out.dtype) for x, m in zip(xs, ms)]


# --- elementwise ---------------------------------------------------------------------------


def exp2(b, xs, ms, out, **_):
    """2 ** x."""
    (x,) = _float_in(b, xs, ms, out)
    return b.op("Pow", [_c(b, 2.0, out.dtype), x])


def _log_base(base: float) -> Callable:
    def rule(b, xs, ms, out, **_):
        (x,) = _float_in(b, xs, ms, out)
        return b.op("Div", [b.op("Log", [x]), _c(b, np.log(base), out.dtype)])

    return rule


log2 = _log_base(2.0)
log10 = _log_base(10.0)


def log1p(b, xs, ms, out, **_):
    """Kahan's accurate log1p: u = 1 + x; x where u == 1, else log(u) * x / (u - 1)."""
    (x,) = _float_in(b, xs, ms, out)
    one = _c(b, 1.0, out.dtype)
    u = b.op("Add", [one, x])
    um1 = b.op("Sub", [u, one])
    ratio = b.op("Div", [b.op("Mul", [b.op("Log", [u]), x]), um1])
    # u == inf (x == inf): log(u) itself
    ratio = b.op("Where", [b.op("IsInf", [u]), b.op("Log", [u]), ratio])
    return b.op("Where", [b.op("Equal", [u, one]), x, ratio])


def expm1(b, xs, ms, out, **_):
    """Kahan's accurate expm1: u = exp(x); x where u == 1, u - 1 where u - 1 == -1 or u is
    inf, else (u - 1) * x / log(u)."""
    (x,) = _float_in(b, xs, ms, out)
    one = _c(b, 1.0, out.dtype)
    u = b.op("Exp", [x])
    um1 = b.op("Sub", [u, one])
    ratio = b.op("Div", [b.op("Mul", [um1, x]), b.op("Log", [u])])
    plain = b.op("Or", [b.op("Equal", [um1, _c(b, -1.0, out.dtype)]), b.op("IsInf", [u])])
    ratio = b.op("Where", [plain, um1, ratio])
    return b.op("Where", [b.op("Equal", [u, one]), x, ratio])


def atan2(b, xs, ms, out, **_):
    """atan2(y, x) from Atan with the quadrant corrections."""
    y, x = _float_in(b, xs, ms, out)
    zero = _c(b, 0.0, out.dtype)
    pi = _c(b, np.pi, out.dtype)
    half = _c(b, np.pi / 2, out.dtype)
    base = b.op("Atan", [b.op("Div", [y, x])])
    ylt = b.op("Less", [y, zero])
    # y's sign bit (atan2(-0.0, -1) == -pi): 1 / y < 0 for y == -0.0
    yneg = b.op("Or", [ylt, b.op("Less", [b.op("Div", [_c(b, 1.0, out.dtype), y]), zero])])
    shift = b.op("Where", [yneg, b.op("Neg", [pi]), pi])
    xlt = b.op("Less", [x, zero])
    # x < 0 (and x == -0.0): add +-pi
    xneg = b.op("Or", [xlt, b.op("Less", [b.op("Div", [_c(b, 1.0, out.dtype), x]), zero])])
    r = b.op("Where", [xneg, b.op("Add", [base, shift]), base])
    # x == 0: +-pi/2 by y's sign, 0 when y == 0 (base is NaN there): keep the signed zero
    xz = b.op("Equal", [x, zero])
    yz = b.op("Equal", [y, zero])
    side = b.op("Where", [yneg, b.op("Neg", [half]), half])
    r = b.op("Where", [b.op("And", [xz, b.op("Not", [yz])]), side, r])
    # y == 0 and x == 0: +-0 or +-pi by the signs
    zz = b.op("Where", [xneg, shift, y])
    r = b.op("Where", [b.op("And", [xz, yz]), zz, r])
    # both infinite: +-pi/4 or +-3pi/4
    both = b.op("And", [b.op("IsInf", [x]), b.op("IsInf", [y])])
    q = b.op("Where", [xneg, _c(b, 3 * np.pi / 4, out.dtype), _c(b, np.pi / 4, out.dtype)])
    q = b.op("Where", [yneg, b.op("Neg", [q]), q])
    return b.op("Where", [both, q, r])


def clamp(b, xs, ms, out, min=None, max=None):
    """Clip with the bounds as constants (a bound of None is absent)."""
    (x,) = _float_in(b, xs, ms, out)
    if min is not None and max is not None and min > max:
        # PyTorch: every element becomes max
        return b.op("Expand", [_c(b, max, out.dtype), _i64(b, out.shape)])
    lo = "" if min is None else _c(b, min, out.dtype)
    hi = "" if max is None else _c(b, max, out.dtype)
    if np.dtype(out.dtype).kind == "f":
        # Clip's NaN bounds and NaN inputs: PyTorch keeps NaN inputs, Min/Max propagate
        r = x
        if min is not None:
            r = b.op("Max", [r, lo])
        if max is not None:
            r = b.op("Min", [r, hi])
        return b.op("Identity", [r]) if r == x else r
    if np.dtype(out.dtype).kind == "b":
        wide = type(out)(out.shape, np.int32)
        lo_b = None if min is None else int(bool(min))  # numpy casts the bounds to bool
        hi_b = None if max is None else int(bool(max))
        r = clamp(b, [_to(b, x, out, np.int32)], [wide], wide, min=lo_b, max=hi_b)
        return _to(b, r, wide, bool)
    return b.op("Clip", [x, lo, hi])


def div(b, xs, ms, out, **_):
    """True division in the result dtype (ints are promoted to float first)."""
    x, y = _float_in(b, xs, ms, out)
    return b.op("Div", [x, y])


def floor_divide(b, xs, ms, out, **_):
    """Floor division: Floor(x / y) for floats; (x - mod(x, y)) / y for ints."""
    x, y = _float_in(b, xs, ms, out)
    if np.dtype(out.dtype).kind == "f":
        # numpy's: div = (x - fmod(x, y)) / y, corrected by one when the remainder's sign
        # differs from y's, then rounded to the nearest integer
        mod = b.op("Mod", [x, y], fmod=1)
        d = b.op("Div", [b.op("Sub", [x, mod]), y])
        zero = _c(b, 0.0, out.dtype)
        fix = b.op(
            "And",
            [
                b.op("Not", [b.op("Equal", [mod, zero])]),
                b.op("Xor", [b.op("Less", [mod, zero]), b.op("Less", [y, zero])]),
            ],
        )
        d = b.op("Where", [fix, b.op("Sub", [d, _c(b, 1.0, out.dtype)]), d])
        fl = b.op("Floor", [d])
        d = b.op(
            "Where",
            [
                b.op("Greater", [b.op("Sub", [d, fl]), _c(b, 0.5, out.dtype)]),
                b.op("Add", [fl, _c(b, 1.0, out.dtype)]),
                fl,
            ],
        )
        plain = b.op("Div", [x, y])
        # y == 0 (inf or nan) and non-finite x: x / y
        return b.op("Where", [b.op("Equal", [y, zero]), plain, d])
    if np.dtype(out.dtype).kind == "b":
        b.fail("floor_divide of bool tensors")
    return b.op("Div", [b.op("Sub", [x, b.op("Mod", [x, y], fmod=0)]), y])


def remainder(b, xs, ms, out, **_):
    """Python's modulo (the sign of the divisor)."""
    x, y = _float_in(b, xs, ms, out)
    if np.dtype(out.dtype).kind != "f":
        return b.op("Mod", [x, y], fmod=0)
    r = b.op("Mod", [x, y], fmod=1)
    zero = _c(b, 0.0, out.dtype)
    fix = b.op(
        "And",
        [
            b.op("Not", [b.op("Equal", [r, zero])]),
            b.op("Xor", [b.op("Less", [r, zero]), b.op("Less", [y, zero])]),
        ],
    )
    return b.op("Where", [fix, b.op("Add", [r, y]), r])


def fmod(b, xs, ms, out, **_):
    """C's fmod (the sign of the dividend)."""
    x, y = _float_in(b, xs, ms, out)
    return b.op("Mod", [x, y], fmod=1)


def sign(b, xs, ms, out, **_):
    """Sign, with NaN -> 0 as PyTorch's (x > 0) - (x < 0)."""
    (x,) = _float_in(b, xs, ms, out)
    if np.dtype(out.dtype).kind == "b":
        return b.op("Identity", [x])
    s = b.op("Sign", [x])
    if np.dtype(out.dtype).kind == "f":
        s = b.op("Where", [b.op("IsNaN", [x]), _c(b, 0.0, out.dtype), s])
    return s


def relu(b, xs, ms, out, **_):
    """Relu (Max with 0 for integers)."""
    (x,) = _float_in(b, xs, ms, out)
    if np.dtype(out.dtype).kind == "f":
        return b.op("Relu", [x])
    if np.dtype(out.dtype).kind == "b":
        return b.op("Identity", [x])
    return b.op("Max", [x, _c(b, 0, out.dtype)])


def neg(b, xs, ms, out, **_):
    """Neg."""
    (x,) = _float_in(b, xs, ms, out)
    return b.op("Neg", [x])


def abs_(b, xs, ms, out, **_):
    """Abs (identity for bool)."""
    (x,) = _float_in(b, xs, ms, out)
    return b.op("Identity" if np.dtype(out.dtype).kind == "b" else "Abs", [x])


def _minmax(op_type: str) -> Callable:
    def rule(b, xs, ms, out, **_):
        x, y = _float_in(b, xs, ms, out)
        if np.dtype(out.dtype).kind == "b":
            return b.op("Or" if op_type == "Max" else "And", [x, y])
        return b.op(op_type, [x, y])  # ONNX's Max/Min propagate NaN, as PyTorch's

    return rule


maximum = _minmax("Max")
minimum = _minmax("Min")


def _arith(op_type: str) -> Callable:
    def rule(b, xs, ms, out, **_):
        x, y = _float_in(b, xs, ms, out)
        if np.dtype(out.dtype).kind == "b":
            # bool + bool is logical or, bool * bool logical and (PyTorch)
            if op_type == "Add":
                return b.op("Or", [x, y])
            if op_type == "Mul":
                return b.op("And", [x, y])
            b.fail(f"{op_type} of bool tensors")
        return b.op(op_type, [x, y])

    return rule


add = _arith("Add")
sub = _arith("Sub")
mul = _arith("Mul")


def pow_(b, xs, ms, out, **_):
    """Pow in the result dtype."""
    x, y = _float_in(b, xs, ms, out)
    if np.dtype(out.dtype).kind == "b":
        return b.op("Or", [x, b.op("Not", [y])])  # x ** y for bools: 1 unless 0 ** 1
    return b.op("Pow", [x, y])


def where(b, xs, ms, out, **_):
    """Where(bool(c), x, y)."""
    c = _to(b, xs[0], ms[0], bool)
    x = _to(b, xs[1], ms[1], out.dtype)
    y = _to(b, xs[2], ms[2], out.dtype)
    return b.op("Where", [c, x, y])


def cast(b, xs, ms, out, dtype=None):
    """Cast (identity when the dtype does not change)."""
    r = _to(b, xs[0], ms[0], out.dtype)
    return r if r != xs[0] else b.op("Identity", [r])


def identity(b, xs, ms, out, **_):
    """Identity (copy, detach: ONNX values are immutable)."""
    return b.op("Identity", [xs[0]])


def fill(b, xs, ms, out, value=None):
    """A tensor of x's shape filled with ``value``."""
    return b.op("Expand", [_c(b, value, out.dtype), _i64(b, out.shape)])


# --- views ------------------------------------------------------------------------------


def reshape(b, xs, ms, out, shape=None):
    """Reshape to the static result shape."""
    return _reshape(b, xs[0], out.shape)


def transpose(b, xs, ms, out, perm=None):
    """Transpose(perm)."""
    if not perm:
        return b.op("Identity", [xs[0]])
    return b.op("Transpose", [xs[0]], perm=[int(p) for p in perm])


def expand(b, xs, ms, out, shape=None):
    """Expand to the static result shape."""
    return b.op("Expand", [xs[0], _i64(b, out.shape)])


# --- reductions -------------------------------------------------------------------------


def _axes(axis: Any, ndim: int) -> list:
    if axis is None:
        return list(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (axis,)
    return sorted(int(a) % max(ndim, 1) for a in axis) if ndim else []


def _reduce(op_type: str, via: Any = None) -> Callable:
    """Reduce<op_type> over the static axes (``via``: compute in that dtype, then cast)."""

    def rule(b, xs, ms, out, axis=None, keepdim=False):
        m = ms[0]
        axes = _axes(axis, m.ndim)
        work = np.dtype(via) if via is not None else out.dtype
        x = _to(b, xs[0], m, work)
        if not axes:
            r = b.op("Identity", [x])
        else:
            r = b.op(op_type, [x, _i64(b, axes)], keepdims=int(bool(keepdim)))
        return _to(b, r, type(m)(out.shape, work), out.dtype)

    rule.__doc__ = f"ONNX {op_type}"
    return rule


reduce_sum = _reduce("ReduceSum")
_mean = _reduce("ReduceMean")


def reduce_mean(b, xs, ms, out, axis=None, keepdim=False):
    """ReduceMean; NaN over no elements (PyTorch's 0 / 0, where ReduceMean gives 0)."""
    m = ms[0]
    if any(m.shape[a] == 0 for a in _axes(axis, m.ndim)):
        return b.op("Expand", [_c(b, np.nan, out.dtype), _i64(b, out.shape)])
    return _mean(b, xs, ms, out, axis=axis, keepdim=keepdim)


reduce_prod = _reduce("ReduceProd")


def _reduce_extreme(op_type: str) -> Callable:
    def rule(b, xs, ms, out, axis=None, keepdim=False):
        m = ms[0]
        if np.dtype(m.dtype).kind == "b":
            return _reduce(op_type, via=np.int32)(b, xs, ms, out, axis=axis, keepdim=keepdim)
        r = _reduce(op_type)(b, xs, ms, out, axis=axis, keepdim=keepdim)
        if np.dtype(m.dtype).kind == "f" and _axes(axis, m.ndim):
            # PyTorch propagates NaN through max/min; ORT's ReduceMax may skip it
            nan = _reduce("ReduceMax", via=np.int32)(
                b,
                [b.op("IsNaN", [xs[0]])],
                [type(m)(m.shape, np.dtype(bool))],
                type(m)(out.shape, np.dtype(bool)),
                axis=axis,
                keepdim=keepdim,
            )
            r = b.op("Where", [nan, _c(b, np.nan, out.dtype), r])
        return r

    return rule


reduce_max = _reduce_extreme("ReduceMax")
reduce_min = _reduce_extreme("ReduceMin")


def _count_true(b, xs, ms, out, axis, keepdim, negate: bool) -> str:
    m = ms[0]
    x = _to(b, xs[0], m, bool)
    if negate:
        x = b.op("Not", [x])
    n = _reduce("ReduceSum")(
        b,
        [_to(b, x, type(m)(m.shape, bool), np.int64)],
        [type(m)(m.shape, np.int64)],
        type(m)(out.shape, np.int64),
        axis=axis,
        keepdim=keepdim,
    )
    return n


def reduce_all(b, xs, ms, out, axis=None, keepdim=False):
    """No false element: ReduceSum of not x == 0 (True over no elements, as PyTorch)."""
    n = _count_true(b, xs, ms, out, axis, keepdim, True)
    return _to(b, b.op("Equal", [n, _c(b, 0, np.int64)]), type(out)(out.shape, bool), out.dtype)


def reduce_any(b, xs, ms, out, axis=None, keepdim=False):
    """Some true element: ReduceSum of x > 0."""
    n = _count_true(b, xs, ms, out, axis, keepdim, False)
    return _to(b, b.op("Greater", [n, _c(b, 0, np.int64)]), type(out)(out.shape, bool), out.dtype)


def _argreduce(op_type: str) -> Callable:
    def rule(b, xs, ms, out, axis=None, keepdim=False):
        m = ms[0]
        x = xs[0]
        if np.dtype(m.dtype).kind == "b":
            x = _to(b, x, m, np.int32)
        if axis is None or m.ndim == 0:
            flat = b.op("Reshape", [x, _i64(b, [-1])])
            r = b.op(op_type, [flat], axis=0, keepdims=0)
            return _reshape(b, r, out.shape)
        ax = _axes(axis, m.ndim)[0]
        return b.op(op_type, [x], axis=ax, keepdims=int(bool(keepdim)))

    return rule


argmax = _argreduce("ArgMax")
argmin = _argreduce("ArgMin")


# --- scans --------------------------------------------------------------------------------


def cumsum(b, xs, ms, out, dim=0, reverse=False):
    """CumSum along ``dim``."""
    x = _to(b, xs[0], ms[0], out.dtype)
    if ms[0].ndim == 0:
        return b.op("Identity", [x])
    ax = b.const(np.array(int(dim) % ms[0].ndim, np.int64))
    return b.op("CumSum", [x, ax], reverse=int(bool(reverse)))


def _to_front(b, x: str, m: Any, ax: int) -> tuple:
    """x with axis ``ax`` moved to the front, and its Meta."""
    perm = [ax] + [i for i in range(m.ndim) if i != ax]
    shape = tuple(m.shape[i] for i in perm)
    if ax == 0:
        return x, type(m)(shape, m.dtype), perm
    return b.op("Transpose", [x], perm=perm), type(m)(shape, m.dtype), perm


def _from_front(b, x: str, perm: list) -> str:
    if perm == sorted(perm):
        return x
    inv = [perm.index(i) for i in range(len(perm))]
    return b.op("Transpose", [x], perm=inv)


def cumprod(b, xs, ms, out, dim=0):
    """A running product: an ONNX Scan along ``dim`` (ONNX has CumSum only)."""
    m = ms[0]
    x = _to(b, xs[0], m, out.dtype)
    if m.ndim == 0 or 0 in tuple(m.shape):
        return b.op("Identity", [x])
    xf, mf, perm = _to_front(b, x, type(m)(m.shape, out.dtype), int(dim) % m.ndim)
    sm = type(m)(mf.shape[1:], out.dtype)
    one = b.op("Expand", [_c(b, 1, out.dtype), _i64(b, sm.shape)])
    mul = "And" if np.dtype(out.dtype).kind == "b" else "Mul"

    def step(sb, states, slices):
        p = sb.op(mul, [states[0], slices[0]])
        return [(p, sm)], [(p, sm)]

    _, ys = b.scan([(one, sm)], [(xf, mf)], step)
    return _from_front(b, ys, perm)


def linrec(b, xs, ms, out, dim=0, reverse=False):
    """s[0] = b[0], s[i] = b[i] + a[i] * s[i - 1] (from the end when ``reverse``): an ONNX
    Scan along ``dim`` over the elements after the first."""
    ma, mb = ms
    if mb.ndim == 0 or 0 in tuple(mb.shape):
        return b.op("Identity", [xs[1]])
    ax = int(dim) % mb.ndim
    af, mf, perm = _to_front(b, xs[0], ma, ax)
    bf, _, _ = _to_front(b, xs[1], mb, ax)
    n = mf.shape[0]
    if n == 1:  # nothing to recur over (ONNX Runtime refuses a Scan of length 0)
        return b.op("Identity", [xs[1]])
    sm = type(mb)(mf.shape[1:], out.dtype)
    first = n - 1 if reverse else 0
    rest = (0, n - 1) if reverse else (1, n)

    def part(x, lo, hi):
        return b.op("Slice", [x, _i64(b, [lo]), _i64(b, [hi]), _i64(b, [0])])

    s0 = part(bf, first, first + 1)
    init = _reshape(b, s0, sm.shape)
    rm = type(mb)((n - 1,) + tuple(sm.shape), out.dtype)

    def step(sb, states, slices):
        s = sb.op("Add", [slices[1], sb.op("Mul", [slices[0], states[0]])])
        return [(s, sm)], [(s, sm)]

    _, ys = b.scan(
        [(init, sm)], [(part(af, *rest), rm), (part(bf, *rest), rm)], step, reverse=reverse
    )
    parts = [ys, s0] if reverse else [s0, ys]
    return _from_front(b, b.op("Concat", parts, axis=0), perm)


# --- matrix products ----------------------------------------------------------------------


def matmul(b, xs, ms, out, **_):
    """MatMul (numpy's rules for 1-D operands, as ONNX's)."""
    x, y = _float_in(b, xs, ms, out)
    return b.op("MatMul", [x, y])


def addmm(b, xs, ms, out, beta=1.0, alpha=1.0):
    """Gemm(m1, m2, input, alpha, beta); beta == 0 ignores input (PyTorch)."""
    c, x, y = _float_in(b, xs, ms, out)
    if np.dtype(out.dtype).kind != "f":
        return baddbmm(b, xs, ms, out, beta=beta, alpha=alpha)
    if beta == 0:
        return b.op("Gemm", [x, y], alpha=float(alpha))
    return b.op("Gemm", [x, y, c], alpha=float(alpha), beta=float(beta))


def baddbmm(b, xs, ms, out, beta=1.0, alpha=1.0):
    """beta * input + alpha * (b1 @ b2)."""
    c, x, y = _float_in(b, xs, ms, out)
    p = b.op("MatMul", [x, y])
    if alpha != 1:
        p = b.op("Mul", [p, _c(b, alpha, out.dtype)])
    if beta == 0:
        return b.op("Expand", [p, _i64(b, out.shape)])
    if beta != 1:
        c = b.op("Mul", [c, _c(b, beta, out.dtype)])
    return b.op("Add", [c, p])


# --- joining and indexing -----------------------------------------------------------------


def cat(b, xs, ms, out, dim=0):
    """Concat along ``dim`` (operands cast to the result dtype)."""
    ins = []
    for x, m in zip(xs, ms):
        if m.ndim == 0:
            x = _reshape(b, x, (1,))
        elif m.ndim != out.ndim:  # PyTorch skips a legacy empty (0,) operand
            continue
        ins.append(_to(b, x, m, out.dtype))
    return b.op("Concat", ins, axis=int(dim) % max(out.ndim, 1))


def gather(b, xs, ms, out, dim=0):
    """GatherElements along ``dim``."""
    if ms[0].ndim == 0:
        return b.op("Expand", [xs[0], _i64(b, out.shape)])
    return b.op("GatherElements", [xs[0], xs[1]], axis=int(dim) % ms[0].ndim)


def _scatter(reduction: str) -> Callable:
    def rule(b, xs, ms, out, dim=0):
        x, idx, src = xs
        src = _to(b, src, ms[2], out.dtype)
        if ms[0].ndim == 0:
            return b.op("Identity", [src]) if reduction == "none" else b.op("Add", [x, src])
        kw = {} if reduction == "none" else {"reduction": reduction}
        if tuple(ms[2].shape) != tuple(ms[1].shape):  # src may be larger than index
            src = b.op(
                "Slice",
                [src, _i64(b, [0] * ms[1].ndim), _i64(b, ms[1].shape), _i64(b, range(ms[1].ndim))],
            )
        return b.op("ScatterElements", [x, idx, src], axis=int(dim) % ms[0].ndim, **kw)

    return rule


scatter = _scatter("none")
scatter_add = _scatter("add")


def argsort(b, xs, ms, out, dim=0, descending=False):
    """TopK over the whole axis, keeping the indices (stable: TopK prefers lower indices
    among equal values)."""
    m = ms[0]
    if m.ndim == 0:
        return _c(b, 0, np.int64)
    ax = int(dim) % m.ndim
    k = _i64(b, [m.shape[ax]])
    _, idx = b.op("TopK", [xs[0], k], outputs=2, axis=ax, largest=int(bool(descending)), sorted=1)
    return idx


def _static_positions(shape: tuple, index: tuple) -> np.ndarray:
    """The flat positions ``x[index]`` reads, for an index of static items only."""
    key = []
    for item in index:
        tag = item[0]
        if tag == "i":
            key.append(item[1])
        elif tag == "s":
            key.append(slice(item[1], item[2], item[3]))
        elif tag == "n":
            key.append(None)
        else:
            key.append(Ellipsis)
    n = int(np.prod(shape, dtype=np.int64))
    pos = np.arange(n, dtype=np.int64).reshape(shape)[tuple(key)]
    return np.asarray(pos, dtype=np.int64)


def _no_tensor_index(b, index: tuple, op: str) -> None:
    if any(item[0] == "t" for item in index):
        b.fail(
            f"{op} with this tensor index (advanced indexing) does not export yet: one integer "
            "tensor index reads, integer rows x[idx] = v and a full-shape mask x[m] = s write; "
            "otherwise use gather/scatter (torch.gather, Tensor.scatter_)"
        )


def _slices_only(index: tuple, shape: tuple) -> Any:
    """(starts, ends, axes, steps) when the index is slices (and one Ellipsis) only."""
    if not all(item[0] in ("s", "e") for item in index):
        return None
    items = list(index)
    if sum(1 for it in items if it[0] == "e") > 1:
        return None
    if any(it[0] == "e" for it in items):
        k = [i for i, it in enumerate(items) if it[0] == "e"][0]
        fill = len(shape) - (len(items) - 1)
        items = items[:k] + [("s", None, None, None)] * fill + items[k + 1 :]
    starts, ends, axes, steps = [], [], [], []
    for ax, it in enumerate(items):
        s = slice(it[1], it[2], it[3])
        if s == slice(None):
            continue
        start, stop, step = s.indices(shape[ax])
        if step < 0:
            return None
        starts.append(start)
        ends.append(max(stop, start))
        axes.append(ax)
        steps.append(step)
    return starts, ends, axes, steps


def _one_int_tensor(index: tuple, ms: list) -> Any:
    """(position of the tensor item, the index with that item as a full slice) when the
    index has exactly one tensor item, of integers, adjacent to every int item (numpy then
    puts the tensor's dims where the item is); else None."""
    ts = [k for k, it in enumerate(index) if it[0] == "t"]
    if len(ts) != 1:
        return None
    p = ts[0]
    if np.dtype(ms[1 + index[p][1]].dtype).kind not in "iu":
        return None
    run = [k for k, it in enumerate(index) if it[0] in ("i", "t")]
    if run != list(range(run[0], run[-1] + 1)):
        return None
    return p, tuple(("s", None, None, None) if k == p else it for k, it in enumerate(index))


def _basic_getitem(b, x: str, m: Any, index: tuple) -> str:
    shape = tuple(m.shape)
    sl = _slices_only(index, shape)
    if sl is not None:
        starts, ends, axes, steps = sl
        if not axes:
            return b.op("Identity", [x])
        return b.op("Slice", [x, _i64(b, starts), _i64(b, ends), _i64(b, axes), _i64(b, steps)])
    pos = _static_positions(shape, index)
    flat = b.op("Reshape", [x, _i64(b, [-1])])
    return b.op("Gather", [flat, b.const(pos)], axis=0)


def getitem(b, xs, ms, out, index=()):
    """Slice for an index of slices; otherwise Gather of the flat positions it reads; one
    integer tensor index: the basic part, then Gather along the tensor's axis."""
    one = _one_int_tensor(index, ms)
    if one is not None:
        p, basic = one
        y = _basic_getitem(b, xs[0], ms[0], basic)
        # the axis the tensor indexes in y: one per slice or None item before it
        q = sum(1 for it in index[:p] if it[0] in ("s", "n"))
        if any(it[0] == "e" for it in index[:p]):
            q += ms[0].ndim - sum(1 for it in index if it[0] in ("s", "i", "t"))
        return b.op("Gather", [y, xs[1 + index[p][1]]], axis=q)
    _no_tensor_index(b, index, "getitem")
    return _basic_getitem(b, xs[0], ms[0], index)


def _assign(b, base: str, base_m: Any, v: str, v_m: Any, index: tuple, reduction: str) -> str:
    pos = _static_positions(tuple(base_m.shape), index)
    v = _to(b, v, v_m, base_m.dtype)
    vshape = tuple(v_m.shape)
    while len(vshape) > pos.ndim and vshape[0] == 1:
        vshape = vshape[1:]
    if vshape != tuple(v_m.shape):
        v = _reshape(b, v, vshape)
    v = b.op("Expand", [v, _i64(b, pos.shape)])
    flat = b.op("Reshape", [base, _i64(b, [-1])])
    vflat = b.op("Reshape", [v, _i64(b, [-1])])
    kw = {} if reduction == "none" else {"reduction": reduction}
    r = b.op("ScatterElements", [flat, b.const(pos.reshape(-1)), vflat], axis=0, **kw)
    return _reshape(b, r, base_m.shape)


def _leading_tensor(index: tuple, ms: list, x: Any) -> Any:
    """The index's tensor operand position when the index is ``[t]`` or ``[t, :, ...]``
    (the tensor indexes the first axis)."""
    if not index or index[0][0] != "t":
        return None
    if not all(it == ("s", None, None, None) or it[0] == "e" for it in index[1:]):
        return None
    return index[0][1]


def _scatter_rows(b, base: str, base_m: Any, v: str, v_m: Any, idx: str, idx_m: Any, red: str):
    """base with rows ``idx`` (of axis 0) set to (``red="add"``: added) ``v``."""
    rows = tuple(idx_m.shape) + tuple(base_m.shape[1:])
    v = _to(b, v, v_m, base_m.dtype)
    vshape = tuple(v_m.shape)
    while len(vshape) > len(rows) and vshape[0] == 1:
        vshape = vshape[1:]
    if vshape != tuple(v_m.shape):
        v = _reshape(b, v, vshape)
    v = b.op("Expand", [v, _i64(b, rows)])
    # negative rows count from the end (as in numpy); ScatterND accepts them too
    ind = b.op("Unsqueeze", [idx, _i64(b, [-1])])
    kw = {} if red == "none" else {"reduction": red}
    return b.op("ScatterND", [base, ind, v], **kw)


def setitem(b, xs, ms, out, index=()):
    """x with x[index] = v: ScatterElements at the flat positions the index selects;
    ScatterND for integer rows ``x[idx] = v``; Where for a full-shape mask ``x[m] = s``."""
    k = _leading_tensor(index, ms, ms[0])
    if k is not None:
        im = ms[2 + k]
        if np.dtype(im.dtype).kind in "iu":
            return _scatter_rows(b, xs[0], ms[0], xs[1], ms[1], xs[2 + k], im, "none")
        if (
            np.dtype(im.dtype).kind == "b"
            and tuple(im.shape) == tuple(ms[0].shape)
            and int(np.prod(ms[1].shape, dtype=np.int64)) == 1
        ):
            v = _reshape(b, _to(b, xs[1], ms[1], out.dtype), ())
            return b.op("Where", [xs[2 + k], v, xs[0]])
    _no_tensor_index(b, index, "setitem")
    return _assign(b, xs[0], ms[0], xs[1], ms[1], index, "none")


def getitem_grad(b, xs, ms, out, index=(), shape=()):
    """zeros(shape) with g added at the positions ``index`` selects."""
    zeros = b.op("Expand", [_c(b, 0, out.dtype), _i64(b, out.shape)])
    k = _leading_tensor(index, ms, out)
    if k is not None and np.dtype(ms[1 + k].dtype).kind in "iu":
        return _scatter_rows(b, zeros, out, xs[0], ms[0], xs[1 + k], ms[1 + k], "add")
    _no_tensor_index(b, index, "getitem_grad")
    return _assign(b, zeros, out, xs[0], ms[0], index, "add")


# --- convolution and pooling --------------------------------------------------------------


def conv2d(b, xs, ms, out, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """Conv (no bias: graphc adds it as its own op)."""
    x, w = _float_in(b, xs, ms, out)
    t, bo, le, r = padding
    return b.op(
        "Conv",
        [x, w],
        strides=list(stride),
        pads=[t, le, bo, r],
        dilations=list(dilation),
        group=int(groups),
        kernel_shape=list(ms[1].shape[2:]),
    )


def conv2d_input_grad(
    b, xs, ms, out, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, input_size=()
):
    """ConvTranspose of the output gradient with the weight (output_padding makes the
    input's size)."""
    g, w = _float_in(b, xs, ms, out)
    H, W = input_size[-2:]
    kh, kw = ms[1].shape[2:]
    Ho, Wo = ms[0].shape[2:]
    t, bo, le, r = padding
    bh = stride[0] * (Ho - 1) + dilation[0] * (kh - 1) + 1 - t - bo
    bw = stride[1] * (Wo - 1) + dilation[1] * (kw - 1) + 1 - le - r
    return b.op(
        "ConvTranspose",
        [g, w],
        strides=list(stride),
        pads=[t, le, bo, r],
        dilations=list(dilation),
        group=int(groups),
        kernel_shape=[int(kh), int(kw)],
        output_padding=[int(H - bh), int(W - bw)],
    )


def conv2d_weight_grad(
    b, xs, ms, out, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, kernel_size=()
):
    """A Conv of the input (batch as channels) with the output gradient as the kernel."""
    x, g = _float_in(b, xs, ms, out)
    if groups != 1:
        b.fail("conv2d_weight_grad with groups > 1 does not export yet")
    t, bo, le, rr = padding
    xt = b.op("Transpose", [x], perm=[1, 0, 2, 3])  # (C, N, H, W)
    gt = b.op("Transpose", [g], perm=[1, 0, 2, 3])  # (O, N, Ho, Wo)
    r = b.op(
        "Conv",
        [xt, gt],
        strides=list(dilation),
        pads=[t, le, bo, rr],
        dilations=list(stride),
        kernel_shape=list(ms[1].shape[2:]),
    )  # (C, O, kh', kw') with kh' >= kh
    r = b.op("Transpose", [r], perm=[1, 0, 2, 3])
    kh, kw = kernel_size[-2:]
    return b.op("Slice", [r, _i64(b, [0, 0]), _i64(b, [kh, kw]), _i64(b, [2, 3]), _i64(b, [1, 1])])


def _pool_attrs(kernel_size, stride, padding, dilation, ceil_mode) -> dict:
    ph, pw = padding
    return dict(
        kernel_shape=list(kernel_size),
        strides=list(stride),
        pads=[ph, pw, ph, pw],
        dilations=list(dilation),
        ceil_mode=int(bool(ceil_mode)),
    )


def _pool_indices(b, x: str, m: Any, a: dict) -> str:
    """Per-plane flat argmax indices (PyTorch's), from MaxPool's N*C*H*W ones."""
    _, idx = b.op("MaxPool", [x], outputs=2, **_pool_attrs(**a))
    H, W = m.shape[2:]
    return b.op("Mod", [idx, _c(b, max(H * W, 1), np.int64)], fmod=0)


def max_pool2d(b, xs, ms, out, **a):
    """MaxPool."""
    return b.op("MaxPool", [xs[0]], **_pool_attrs(**a))


def max_pool2d_indices(b, xs, ms, out, **a):
    """MaxPool's Indices, made per (H, W) plane as PyTorch's."""
    return _pool_indices(b, xs[0], ms[0], a)


def max_pool2d_select(b, xs, ms, out, **a):
    """u at each window's argmax of x: GatherElements over the flat planes."""
    N, C, H, W = ms[0].shape
    idx = _pool_indices(b, xs[0], ms[0], a)
    Ho, Wo = out.shape[2:]
    u = _reshape(b, xs[1], [N, C, H * W])
    i = _reshape(b, idx, [N, C, Ho * Wo])
    r = b.op("GatherElements", [u, i], axis=2)
    return _reshape(b, r, out.shape)


def max_pool2d_grad(b, xs, ms, out, **a):
    """g added at each window's argmax of x (ScatterElements with reduction='add')."""
    N, C, H, W = ms[0].shape
    Ho, Wo = ms[1].shape[2:]
    idx = _pool_indices(b, xs[0], ms[0], a)
    i = _reshape(b, idx, [N, C, Ho * Wo])
    g = _reshape(b, _to(b, xs[1], ms[1], out.dtype), [N, C, Ho * Wo])
    zeros = b.op("Expand", [_c(b, 0, out.dtype), _i64(b, [N, C, H * W])])
    r = b.op("ScatterElements", [zeros, i, g], axis=2, reduction="add")
    return _reshape(b, r, out.shape)


def rounding(name: str) -> Callable:
    """Floor/Ceil/Round (half to even, numpy's rint)/trunc; integers are their own."""

    def rule(b, xs, ms, out, **_):
        x = xs[0]
        if np.dtype(out.dtype).kind != "f":
            return b.op("Identity", [x])
        if name == "trunc":
            # trunc(x) = sign(x) * floor(|x|), keeping -0.0 and NaN
            fl = b.op("Floor", [b.op("Abs", [x])])
            return b.op("Where", [b.op("Less", [x, _c(b, 0.0, out.dtype)]), b.op("Neg", [fl]), fl])
        return b.op({"floor": "Floor", "ceil": "Ceil", "round": "Round"}[name], [x])

    rule.__doc__ = f"ONNX {name}"
    return rule
