"""eager.autograd: the tape engine, custom Functions, grad modes and gradient checks."""

from __future__ import annotations

import warnings

from . import grad_mode
from .engine import backward, grad
from .function import AccumulateGrad, Function, FunctionCtx, Node
from .grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)

# Imported eagerly: this rebinds the package attribute ``gradcheck`` (set to the submodule by the
# import system) to the function, as in PyTorch.
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from . import functional


def Variable(data, requires_grad: bool = False, volatile: bool = False):
    """Deprecated since PyTorch 0.4: returns a plain Tensor (``volatile`` means no grad)."""
    from ..factories import tensor
    from ..tensor import Tensor

    warnings.warn(
        "The Variable API is deprecated: Variable(tensor) returns a Tensor; use tensors "
        "with requires_grad=True (and torch.no_grad() instead of volatile=True).",
        DeprecationWarning,
        stacklevel=2,
    )
    t = data.detach() if isinstance(data, Tensor) else tensor(data)
    if volatile:
        warnings.warn(
            "volatile was removed and now has no effect on graph recording except that "
            "this tensor will not require grad. Use `with eager.no_grad():` instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        return t
    if requires_grad:
        t.requires_grad_(True)
    return t


__all__ = [
    "Variable",
    "Function",
    "FunctionCtx",
    "Node",
    "AccumulateGrad",
    "backward",
    "grad",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "is_grad_enabled",
    "inference_mode",
    "is_inference_mode_enabled",
    "gradcheck",
    "gradgradcheck",
    "GradcheckError",
    "grad_mode",
    "functional",
]
