"""``clip_grad_norm_`` and ``clip_grad_value_``: PyTorch's gradient clipping, in place."""

from __future__ import annotations

import math
import types
import warnings
from typing import Any, Optional

import eager.methods.shape as _shape

from ...autograd.grad_mode import no_grad
from ...factories import TRACING
from ...factories import tensor as _tensor
from ...surface import TensorOps
from ...tensor import Tensor


def _norm(g: Any, p: float) -> Any:
    """The ``p``-norm of a tensor viewed as one vector (``torch.linalg.vector_norm``),
    written with public tensor methods so a compiler can trace it."""
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
    """The ``norm_type``-norm of all ``tensors`` taken together (as one vector): the norm
    of the stacked per-tensor norms, a 0-d tensor (PyTorch's ``get_total_norm``).

    Only tensor ops (no ``float()``), so it runs inside a compiled function too, except
    ``error_if_nonfinite=True`` there: whether to raise depends on the values, which a
    compiled function does not look at; that is refused with a RuntimeError."""
    tensors = [tensors] if isinstance(tensors, TensorOps) else list(tensors)
    norm_type = float(norm_type)
    if len(tensors) == 0:
        return _tensor(0.0)
    if math.isinf(norm_type):
        for t in tensors:
            if t.numel() == 0:  # max/min of nothing: PyTorch refuses, with these words
                if norm_type > 0 and foreach is not False:
                    raise RuntimeError(
                        "_foreach_norm cannot compute the infinity norm on an empty tensor "
                        "because the operation does not have an identity"
                    )
                raise RuntimeError(
                    f"linalg.vector_norm cannot compute the {norm_type} norm on an empty "
                    "tensor because the operation does not have an identity"
                )
    with no_grad():
        norms = [_norm(t, norm_type) for t in tensors]
        total = _norm(_shape.stack(norms), norm_type)
    if error_if_nonfinite:
        if TRACING.tracer is not None and type(total) is not Tensor:
            raise RuntimeError(
                "clip_grad_norm_/get_total_norm(error_if_nonfinite=True) inside a function "
                "being compiled: raising depends on the gradients' values, which the "
                "compiled code does not check. Pass error_if_nonfinite=False and test "
                "the returned total norm (torch.isfinite(total_norm)) outside the compiled "
                "function, or call it eagerly"
            )
        if bool(total.isnan() | total.isinf()):
            raise RuntimeError(
                f"The total norm of order {norm_type} for gradients from "
                "`parameters` is non-finite, so it cannot be clipped. To disable "
                "this error and scale the gradients by the non-finite norm anyway, "
                "set `error_if_nonfinite=False`"
            )
    return total


def clip_grads_with_norm_(
    parameters: Any,
    max_norm: float,
    total_norm: Tensor,
    foreach: Optional[bool] = None,
) -> None:
    """Scale the gradients of ``parameters`` in place by
    ``min(1, max_norm / (total_norm + 1e-6))`` (``total_norm`` a 0-d tensor, e.g. from
    :func:`get_total_norm`), as tensor ops: no data-dependent branch."""
    if isinstance(parameters, TensorOps):  # (a compiler's tracer too)
        parameters = [parameters]
    grads = [p.grad for p in parameters if p.grad is not None]
    max_norm = float(max_norm)
    if len(grads) == 0:
        return
    with no_grad():
        clip_coef = (max_norm / (total_norm + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(clip_coef.to(g.dtype))


def clip_grad_norm_(
    parameters: Any,
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: Optional[bool] = None,
) -> Tensor:
    """Scale the gradients in place so their total norm is at most ``max_norm``; returns
    the total norm (before clipping) as a 0-d tensor.  :func:`get_total_norm` followed
    by :func:`clip_grads_with_norm_`, both tensor ops, so a compiled training step can
    call it (``error_if_nonfinite=True`` is refused there)."""
    if isinstance(parameters, TensorOps):  # (a compiler's tracer too)
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
    clip_grads_with_norm_(parameters, max_norm, total_norm, foreach)
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
    """Clamp every gradient in place to ``[-clip_value, clip_value]``; returns None.

    Parameters whose ``.grad`` is None are skipped; with no gradient at all (an empty
    list or generator, every ``.grad`` None) nothing is clipped, for any ``foreach``
    (PyTorch 2.13 raises an internal error there; docs/limitations.md)."""
    if isinstance(parameters, TensorOps):  # (a compiler's tracer too)
        parameters = [parameters]
    clip_value = float(clip_value)
    with no_grad():
        for p in parameters:
            if p.grad is not None:
                p.grad.clamp_(min=-clip_value, max=clip_value)
