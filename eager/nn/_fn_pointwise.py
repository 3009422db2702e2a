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
from ..ops.pointwise import _erf, erf_float32_fast
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


#: float32 GELU's erf: :func:`eager.ops.pointwise.erf_float32_fast` (within 0.504 ulp of
#: erf, ~1.4x faster; PyTorch's own float32 erf is within 0.69 ulp) when True, else the
#: erf op's correctly rounded evaluation (what the composite, and so graphc, computes)
FAST_ERF = True


@frees_ctx  # (ctx.erf: the step's whole erf array)
class _Gelu(Function):
    """Eager's GELU on a float32/float64 tensor: the composite's forward on numpy (the same
    operations: bit-identical values in float64; in float32 its erf is
    :func:`~eager.ops.pointwise.erf_float32_fast`, within 0.504 ulp of the erf op's, unless
    :data:`FAST_ERF` is off) as one node (PyTorch's ``GeluBackward0``) whose
    gradient g * (Phi(x) + x * phi(x)) is one fused numpy pass over reused buffers instead
    of the composite's ~12 recorded ops.  With ``create_graph`` (grad mode on during
    backward) the gradient is built from tensor ops instead, so it is differentiable again
    (double backward, ``eager.func.jvp``)."""

    @staticmethod
    @np.errstate(all="ignore")  # (NaN/inf propagate as in the composite, without warnings)
    def forward(ctx: Any, input: Any) -> Any:
        x = input._data.reshape(-1)  # (0-d: ufuncs would return numpy scalars)
        z = x * _SQRT1_2
        e = erf_float32_fast(z) if z.dtype == np.float32 and FAST_ERF else _erf(z)
        out = x * 0.5
        out *= e + 1.0
        ctx.save_for_backward(input)
        ctx.erf = e
        return Tensor._make(out.reshape(input.shape))

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        (input,) = ctx.saved_tensors
        if is_grad_enabled():  # create_graph: a differentiable gradient
            cdf = (input * _SQRT1_2).erf() * 0.5 + 0.5
            pdf = (input * input * -0.5).exp() * _INV_SQRT_2PI
            return grad * (cdf + input * pdf)
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
