"""``clip_grad_norm_`` and ``clip_grad_value_``: PyTorch's gradient clipping, in place."""

from __future__ import annotations

import math
import types
import warnings
from typing import Any, Optional

from ...autograd.grad_mode import no_grad
from ...factories import tensor as _tensor
from ...tensor import Tensor


def _norm(g: Any, p: float) -> Any:
    """The ``p``-norm of a gradient, written with public tensor methods."""
    if g.numel() == 0:
        return _tensor(0.0, dtype=g.dtype)
    if p == math.inf:
        return g.abs().amax()
    if p == -math.inf:
        return g.abs().amin()
    if p == 0:
        return (g != 0).sum().to(g.dtype)
    if p == 1:
        return g.abs().sum()
    if p == 2:
        return (g * g).sum().sqrt()
    return g.abs().pow(p).sum().pow(1.0 / p)


def get_total_norm(
    tensors: Any,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: Optional[bool] = None,
) -> Tensor:
    """The ``norm_type``-norm of all ``tensors`` taken together (as one vector)."""
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    norm_type = float(norm_type)
    if len(tensors) == 0:
        return _tensor(0.0)
    with no_grad():
        norms = [_norm(t, norm_type) for t in tensors]
        if norm_type == math.inf:
            total = norms[0]
            for n in norms[1:]:
                total = total.maximum(n.to(total.dtype))
        elif norm_type == -math.inf:
            total = norms[0]
            for n in norms[1:]:
                total = total.minimum(n.to(total.dtype))
        else:
            total = _norm(_stack(norms), norm_type)
    if error_if_nonfinite and not math.isfinite(float(total)):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from "
            "`parameters` is non-finite, so it cannot be clipped. To disable "
            "this error and scale the gradients by the non-finite norm anyway, "
            "set `error_if_nonfinite=False`"
        )
    return total


def _stack(norms: list) -> Any:
    dtype = norms[0].dtype
    return _tensor([float(n) for n in norms], dtype=dtype) if len(norms) > 1 else norms[0]


def clip_grad_norm_(
    parameters: Any,
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: Optional[bool] = None,
) -> Tensor:
    """Scale the gradients in place so their total norm is at most ``max_norm``; returns
    the total norm (before clipping)."""
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    else:
        is_generator = isinstance(parameters, types.GeneratorType)
        parameters = list(parameters)
        if is_generator and len(parameters) == 0:
            warnings.warn(
                "`parameters` is an empty generator, no gradient clipping will occur.",
                stacklevel=2,
            )
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    if not grads:
        return total_norm
    max_norm = float(max_norm)
    with no_grad():
        clip_coef = (max_norm / (total_norm + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(clip_coef.to(g.dtype))
    return total_norm


def clip_grad_norm(
    parameters: Any,
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: Optional[bool] = None,
) -> Tensor:
    """Deprecated alias of :func:`clip_grad_norm_`."""
    warnings.warn(
        "`torch.nn.utils.clip_grad_norm` is now deprecated in favor of "
        "`torch.nn.utils.clip_grad_norm_`.",
        FutureWarning,
        stacklevel=2,
    )
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def clip_grad_value_(parameters: Any, clip_value: float, foreach: Optional[bool] = None) -> None:
    """Clamp every gradient in place to ``[-clip_value, clip_value]``."""
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    clip_value = float(clip_value)
    with no_grad():
        for p in parameters:
            if p.grad is not None:
                p.grad.clamp_(min=-clip_value, max=clip_value)
