"""nn.functional: activations and elementwise math (re-exported by eager/nn/functional.py).

Every activation here is a composite of elementwise primitives (erf, expm1, log1p,
tanh, sigmoid, where...): eager differentiates it to any order and graphc fuses it into
one loop.  Derivatives at the kinks are PyTorch's (hardtanh and relu6 have gradient 0 at
their bounds, leaky_relu has ``negative_slope`` at 0, elu ``alpha`` at 0).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import eager._operands as O  # by full name: "from .. import" is an edge to eager
from ..autograd.function import Function
from ..autograd.grad_mode import is_grad_enabled
from ..ops.pointwise import _erf
from ..tensor import Tensor
from ._fused import frees_ctx

__all__ = [
    "gelu",
    "silu",
    "softplus",
    "leaky_relu",
    "leaky_relu_",
    "elu",
    "elu_",
    "hardtanh",
    "hardtanh_",
    "relu6",
    "mish",
    "hardswish",
    "hardsigmoid",
    "logsigmoid",
]

_SQRT1_2 = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _check_float(input, name: str):
    if input._npdtype.kind != "f":
        dt = {"b": "Bool", "u": "Byte"}.get(input._npdtype.kind, "Long")
        raise NotImplementedError(f"\"{name}\" not implemented for '{dt}'")


def _maybe_inplace(input, out, inplace: bool):
    """PyTorch's ``inplace=True``: the result written into ``input`` (which is returned)."""
    return input.copy_(out) if inplace else out


def _inplace_source(input, inplace: bool):
    # computing from a clone keeps the saved values of the backward away from the write
    return input.clone() if inplace else input


_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_FUSED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _gelu_composite(input):
    """The definition: x * 0.5 * (1 + erf(x / sqrt 2)), recorded op by op (what graphc
    traces and differentiates; eager's fused path below computes the same values)."""
    return input * 0.5 * ((input * _SQRT1_2).erf() + 1.0)


# float32 GELU without erf: gelu(x) = max(x, 0) - |x| q(|x|), q(a) = Phi(-a) (for x < 0
# it is x Phi(x), for x > 0 x - x Phi(-x) = x Phi(x)), and its derivative
# gelu'(x) = Phi(x) + x phi(x) = 1/2 + copysign(r(|x|), x), r(a) = 1/2 - q(a) + a phi(a) >= 0.
# Both q and r come from tables of lines indexed by the float32 bits of a = |x|: row
# k = bits(a) >> 12 is a's exponent and top 11 mantissa bits, a cell [lo, lo + h) with
# h = lo / 2048..lo / 4096, and holds the line c0 + c1 a through the function at the
# cell's two Chebyshev points (error <= h**2 / 16 max|f''|).  Every step is a plain numpy
# pass (a shift, contiguous gathers, multiply-adds, sign-bit ORs): no erf, no exp, no
# strided access.  Rows below a = 2**-9 hold the Taylor lines at 0 (q = 1/2 - phi(0) a,
# r = 2 phi(0) a: error ~a**3); q = 0 on the rows where a q(a) is subnormal (a > 13.1:
# error < 1.2e-38, where c0 + c1 a would cancel to ~1e-43 of noise) and on the row of
# a = 14, the last (r = 1/2 there).  Error over every float32 of [-10, 10] (against
# scipy's float64 ndtr): output 2.390e-7 absolute (its own rounding, half an ulp of
# [4, 8) being 2.384e-7; PyTorch 2.13's F.gelu: 3.8e-7), gradient factor 1.27e-7
# (PyTorch: 3.1e-7).  Down the negative tail (x < -4, |gelu(x)| < 1.3e-4) the error stays
# below 1e-8 absolute, 1.9e-4 relative (to x = -13.1).  (Rows of 10 mantissa bits, half
# the table and ~3% faster, gave 2.4026e-7, 1.4896e-7 and 6.8e-4: over the contract.)
_GT_MAX = 14.0
_GT_SHIFT = 12  # 23 - 12 = 11 mantissa bits per row
_GT_TABLE: list = []


def _gelu_table_rows() -> tuple:
    """``(k0, k1)``: the first row fitted per cell (a = 2**-9) and the row of a = 14, the
    last row (all larger a are clamped to 14 by the caller)."""
    bits = np.array([2.0**-9, _GT_MAX], np.float32).view(np.int32) >> _GT_SHIFT
    return int(bits[0]), int(bits[1])


def _gelu_table() -> Any:
    """``(q0, q1, r0, r1)``: four float32 arrays of ``k1 + 1`` rows, q(a) ~ q0[k] + q1[k] a
    and r(a) ~ r0[k] + r1[k] a on row k (made on first use, ~13 ms; 4.3 MB)."""
    if not _GT_TABLE:
        k0, k1 = _gelu_table_rows()
        ks = np.arange(k0, k1, dtype=np.int64)
        lo = (ks << _GT_SHIFT).astype(np.int32).view(np.float32).astype(np.float64)
        hi = ((ks + 1) << _GT_SHIFT).astype(np.int32).view(np.float32).astype(np.float64)
        mid, half = (lo + hi) / 2, (hi - lo) / 2 * _SQRT1_2
        pts = [mid - half, mid + half]

        def q_r(p):
            q = np.array([0.5 * math.erfc(v * _SQRT1_2) for v in p.tolist()])
            return q, 0.5 - q + p * np.exp(-0.5 * p * p) * _INV_SQRT_2PI

        (qa, ra), (qb, rb) = q_r(pts[0]), q_r(pts[1])
        phi0 = _INV_SQRT_2PI
        flush = lo * np.array([0.5 * math.erfc(v * _SQRT1_2) for v in lo.tolist()]) < 2.0**-126
        tables = []
        for fa, fb, tiny0, tiny1, end0 in ((qa, qb, 0.5, -phi0, 0.0), (ra, rb, 0.0, 2 * phi0, 0.5)):
            c1 = (fb - fa) / (pts[1] - pts[0])
            c0 = fa - c1 * pts[0]
            t0 = np.full(k1 + 1, tiny0)
            t1 = np.full(k1 + 1, tiny1)
            t0[k0:k1], t1[k0:k1] = c0, c1
            if end0 == 0.0:  # q: zero where a q(a) < 2**-126 (float32's smallest normal)
                t0[k0:k1][flush], t1[k0:k1][flush] = 0.0, 0.0
            t0[k1], t1[k1] = end0, 0.0
            tables += [t0.astype(np.float32), t1.astype(np.float32)]
        _GT_TABLE.append(tuple(tables))
    return _GT_TABLE[0]


_SIGN_BIT = np.uint32(0x80000000)
#: elements per chunk of :func:`gelu_float32_table` (its temporaries: ~0.6 MB in all)
GELU_CHUNK = 1 << 15


@np.errstate(all="ignore")
def gelu_float32_table(x: Any, grad: bool = False) -> tuple:
    """float32 GELU of a float32 array by tables of lines for Phi(-|x|) (no erf, no exp;
    error at most 2.4e-7 on [-10, 10]; not part of ``F``): ``(gelu(x), d)`` with ``d`` the
    derivative ``gelu'(x)`` when ``grad`` (else None), both new float32 arrays of x's
    shape.  NaN gives NaN, +inf gives +inf, -inf gives NaN (PyTorch's -inf * 0), and the
    derivative is NaN at NaN and +-inf, as PyTorch's float32 kernel gives; a zero result
    has x's sign (the composite's -0.0 for x <= -0.0, where PyTorch's gives +0.0)."""
    q0, q1, r0, r1 = _gelu_table()
    flat = x.reshape(-1)  # (a 0-d array's ufunc results would be numpy scalars)
    n = flat.size
    out = np.empty(n, np.float32)
    d = np.empty(n, np.float32) if grad else None
    # In chunks of GELU_CHUNK elements with temporaries reused across chunks: each
    # chunk's ~16 passes then run on data that stays in the core's cache (W8's 131,072
    # values: 0.66 -> 0.53 ms forward with the derivative, one call per pass more)
    c = min(n, GELU_CHUNK)
    a_buf, k32_buf = np.empty(c, np.float32), np.empty(c, np.int32)
    k_buf, t_buf, s_buf = np.empty(c, np.intp), np.empty(c, np.float32), np.empty(c, np.uint32)
    big = False
    for lo in range(0, n, GELU_CHUNK):
        hi = min(lo + GELU_CHUNK, n)
        m = hi - lo
        xs, a, k, t, sign = flat[lo:hi], a_buf[:m], k_buf[:m], t_buf[:m], s_buf[:m]
        np.abs(xs, out=a)
        if not a.max() < _GT_MAX:  # some |x| >= 14, inf or NaN: clamped, fixed below
            big = True  # (NaN stays NaN: its row is some row, and c0 + c1 NaN is NaN)
            np.minimum(a, np.float32(_GT_MAX), out=a)
        np.right_shift(a.view(np.int32), _GT_SHIFT, out=k32_buf[:m])
        k[...] = k32_buf[:m]  # (take wants intp indices; it would convert each call)
        # ("wrap": every index is in range but NaN's, whose row does not matter)
        q = out[lo:hi]
        q1.take(k, out=q, mode="wrap")
        q *= a
        q0.take(k, out=t, mode="wrap")
        q += t  # q(a)
        q *= a  # a q(a)
        np.maximum(xs, np.float32(0), out=t)
        np.subtract(t, q, out=q)  # max(x, 0) - a q(a): <= 0 for x < 0, >= 0 for x > 0
        # gelu(x) has x's sign; a zero result too (-0.0 for x <= -0.0: the composite's
        # x * Phi(x), so graphc's values; PyTorch's float32 kernel gives +0.0 there)
        np.bitwise_and(xs.view(np.uint32), _SIGN_BIT, out=sign)
        qv = q.view(np.uint32)
        np.bitwise_or(qv, sign, out=qv)
        if d is not None:  # gelu'(x) = 1/2 + copysign(r(a), x), r >= 0: the copysign is an OR
            dd = d[lo:hi]
            r1.take(k, out=dd, mode="wrap")
            dd *= a
            r0.take(k, out=t, mode="wrap")
            dd += t
            dv = dd.view(np.uint32)
            np.bitwise_or(dv, sign, out=dv)
            dd += np.float32(0.5)
    if big:
        out[flat == -np.inf] = np.nan
        if d is not None:
            d[~np.isfinite(flat)] = np.nan
    return out.reshape(x.shape), (None if d is None else d.reshape(x.shape))


#: float32 GELU (``approximate='none'``) by :func:`gelu_float32_table` (tables of lines,
#: no erf, no exp: forward + backward ~2.5x faster than the former float32 erf path;
#: absolute error at most 2.4e-7 on [-10, 10], within PyTorch 2.13's 3.8e-7, gradient
#: within 1.45e-7) when True; when False, the composite's values bit for bit (the erf
#: op's correctly rounded erf: what graphc computes)
FAST_GELU = True


@frees_ctx  # (ctx.erf / ctx.d: the step's whole erf or derivative array)
class _Gelu(Function):
    """Eager's GELU on a float32/float64 tensor as one node (PyTorch's ``GeluBackward0``).
    float64 (and float32 with :data:`FAST_GELU` off): the composite's forward on numpy (the
    same operations: bit-identical values) and the gradient g * (Phi(x) + x * phi(x)) as
    one fused numpy pass over reused buffers instead of the composite's ~12 recorded ops.
    float32: :func:`gelu_float32_table`, which also gives the derivative, so the gradient
    is one multiply.  With ``create_graph`` (grad mode on during
    backward) the gradient is built from tensor ops instead, so it is differentiable again
    (double backward, ``eager.func.jvp``)."""

    @staticmethod
    @np.errstate(all="ignore")  # (NaN/inf propagate as in the composite, without warnings)
    def forward(ctx: Any, input: Any) -> Any:
        ctx.save_for_backward(input)
        if input._npdtype == np.float32 and FAST_GELU:
            out, ctx.d = gelu_float32_table(input._data, grad=True)
            return Tensor._make(out)
        x = input._data.reshape(-1)  # (0-d: ufuncs would return numpy scalars)
        z = x * _SQRT1_2
        e = _erf(z)
        out = x * 0.5
        out *= e + 1.0
        ctx.erf = e
        return Tensor._make(out.reshape(input.shape))

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        (input,) = ctx.saved_tensors
        if is_grad_enabled():  # create_graph: a differentiable gradient
            cdf = (input * _SQRT1_2).erf() * 0.5 + 0.5
            pdf = (input * input * -0.5).exp() * _INV_SQRT_2PI
            return grad * (cdf + input * pdf)
        d = getattr(ctx, "d", None)
        if d is not None:
            return Tensor._make(np.multiply(grad._data, d))
        x, e = input._data.reshape(-1), ctx.erf
        with np.errstate(all="ignore"):
            return Tensor._make(_gelu_grad(x, e, grad._data.reshape(-1)).reshape(input.shape))


def _gelu_grad(x, e, g):
    """g * (0.5 * (1 + e) + x * phi(x)) with e = erf(x / sqrt 2), in two buffers."""
    d = np.multiply(x, x)
    d *= -0.5
    np.exp(d, out=d)
    d *= x
    d *= _INV_SQRT_2PI  # x * phi(x)
    cdf = np.multiply(e, 0.5)
    cdf += 0.5
    d += cdf
    d *= g
    return d


_Gelu._backward_cls.__name__ = _Gelu._backward_cls.__qualname__ = "GeluBackward0"


_GELU_TANH_K = 0.044715


@frees_ctx  # (ctx.t: the step's whole tanh array)
class _GeluTanh(Function):
    """``approximate='tanh'`` GELU on a float32/float64 tensor as one ``GeluBackward0``
    node (PyTorch's name): the composite's numpy operations in its order (bit-identical
    values), and the gradient ``g * (0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 k x^2))`` in
    two buffers (t the forward's tanh, c = sqrt(2/pi), k = 0.044715).  With
    ``create_graph`` the gradient is built from tensor ops (double backward)."""

    @staticmethod
    @np.errstate(all="ignore")
    def forward(ctx: Any, input: Any) -> Any:
        x = input._data.reshape(-1)  # (0-d: ufuncs would return numpy scalars)
        t = np.multiply(x, x)  # the composite: (x + x * x * x * k) * c, tanh
        t *= x
        t *= _GELU_TANH_K
        np.add(x, t, out=t)
        t *= _SQRT_2_OVER_PI
        np.tanh(t, out=t)
        out = x * 0.5
        out *= t + 1.0
        ctx.save_for_backward(input)
        ctx.t = t
        return Tensor._make(out.reshape(input.shape))

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        (input,) = ctx.saved_tensors
        if is_grad_enabled():  # create_graph: a differentiable gradient
            x = input
            t = ((x + x * x * x * _GELU_TANH_K) * _SQRT_2_OVER_PI).tanh()
            du = (x * x * (3 * _GELU_TANH_K) + 1.0) * _SQRT_2_OVER_PI
            return grad * ((t + 1.0) * 0.5 + x * 0.5 * (1.0 - t * t) * du)
        x, t = input._data.reshape(-1), ctx.t
        with np.errstate(all="ignore"):
            d = np.multiply(x, x)
            d *= 3 * _GELU_TANH_K
            d += 1.0
            d *= _SQRT_2_OVER_PI  # du/dx
            s = np.multiply(t, t)
            np.subtract(1.0, s, out=s)
            s *= d
            s *= x  # x (1 - t^2) du/dx
            s += t
            s += 1.0
            s *= 0.5
            s *= grad._data.reshape(-1)
        return Tensor._make(s.reshape(input.shape))


_GeluTanh._backward_cls.__name__ = _GeluTanh._backward_cls.__qualname__ = "GeluBackward0"


def gelu(input, approximate: str = "none"):
    """x * Phi(x) with Phi the standard normal CDF (``approximate='tanh'``: its tanh form)."""
    _check_float(input, "GeluKernelImpl")
    if approximate == "none":
        if isinstance(input, Tensor) and input._npdtype in _FUSED_DTYPES:
            if input._npdtype == np.float32 and FAST_GELU:
                if not (input.requires_grad and is_grad_enabled()):  # no node to record
                    return Tensor._make(gelu_float32_table(input._data)[0])
            return _Gelu.apply(input)
        return _gelu_composite(input)
    if approximate == "tanh":
        if isinstance(input, Tensor) and input._npdtype in _FUSED_DTYPES:
            return _GeluTanh.apply(input)
        inner = (input + input * input * input * 0.044715) * _SQRT_2_OVER_PI
        return input * 0.5 * (inner.tanh() + 1.0)
    raise RuntimeError(f"approximate argument must be either none or tanh. Got {approximate}")


def silu(input, inplace: bool = False):
    """x * sigmoid(x)."""
    x = _inplace_source(input, inplace)
    return _maybe_inplace(input, x * x.sigmoid(), inplace)


def softplus(input, beta: float = 1.0, threshold: float = 20.0):
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold."""
    _check_float(input, "softplus")
    bx = input * beta if beta != 1 else input
    # the clamp keeps exp finite on the side where() discards (no 0 * inf in the backward)
    soft = bx.clamp(max=float(threshold)).exp().log1p()
    if beta != 1:
        soft = soft / beta
    return O.where(bx > threshold, input, soft)


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False):
    """x where x > 0, else negative_slope * x."""
    x = _inplace_source(input, inplace)
    return _maybe_inplace(input, O.where(x > 0, x, x * negative_slope), inplace)


def leaky_relu_(input, negative_slope: float = 0.01):
    """In-place :func:`leaky_relu`."""
    return leaky_relu(input, negative_slope, inplace=True)


def elu(input, alpha: float = 1.0, inplace: bool = False):
    """x where x > 0, else alpha * (exp(x) - 1)."""
    _check_float(input, "elu")
    x = _inplace_source(input, inplace)
    neg = x.clamp(max=0.0).expm1() * alpha
    return _maybe_inplace(input, O.where(x > 0, x, neg), inplace)


def elu_(input, alpha: float = 1.0):
    """In-place :func:`elu`."""
    return elu(input, alpha, inplace=True)


def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    """x clamped to [min_val, max_val]; the gradient is 0 at the bounds and beyond."""
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    if input._npdtype.kind == "b":
        raise NotImplementedError("\"hardtanh\" not implemented for 'Bool'")
    x = _inplace_source(input, inplace)
    # the value is clamp's (x itself on a tie: hardtanh(-0.0, 0, 6) is -0.0); the gradient
    # passes only strictly inside the bounds, as PyTorch's hardtanh_backward
    bounded = x.clamp(min_val, max_val)
    out = O.where((x <= min_val) | (x >= max_val), bounded.detach(), x)
    if out._npdtype != input._npdtype:
        out = out.to(input._npdtype)
    return _maybe_inplace(input, out, inplace)


def hardtanh_(input, min_val: float = -1.0, max_val: float = 1.0):
    """In-place :func:`hardtanh`."""
    return hardtanh(input, min_val, max_val, inplace=True)


def relu6(input, inplace: bool = False):
    """min(max(x, 0), 6) (PyTorch's hardtanh(x, 0, 6), with its gradient)."""
    return hardtanh(input, 0.0, 6.0, inplace)


def mish(input, inplace: bool = False):
    """x * tanh(softplus(x))."""
    x = _inplace_source(input, inplace)
    return _maybe_inplace(input, x * softplus(x).tanh(), inplace)


def hardswish(input, inplace: bool = False):
    """x * relu6(x + 3) / 6, with PyTorch's gradient (0 up to -3, 1 from 3)."""
    _check_float(input, "hardswish")
    x = _inplace_source(input, inplace)
    mid = x * (x + 3.0) / 6.0
    out = O.where(x <= -3.0, x * 0.0, O.where(x < 3.0, mid, x))
    return _maybe_inplace(input, out, inplace)


def hardsigmoid(input, inplace: bool = False):
    """relu6(x + 3) / 6, with gradient 1/6 strictly between -3 and 3."""
    _check_float(input, "hardsigmoid")
    x = _inplace_source(input, inplace)
    out = O.where(x <= -3.0, 0.0, O.where(x >= 3.0, 1.0, (x + 3.0) / 6.0))
    return _maybe_inplace(input, out, inplace)


def logsigmoid(input):
    """log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|)), without overflow."""
    _check_float(input, "log_sigmoid_forward")
    return O.minimum(input, 0.0) - input.abs().neg().exp().log1p()
