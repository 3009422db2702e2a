"""eager.nn: PyTorch-style modules (``Module``, ``Linear``, ``Sequential``, losses...).

The package gathers what its modules define: ``module`` (``Module``, ``Parameter``,
``Sequential``), ``layers`` (``Linear``, ``ReLU``, ``Tanh``, ``Sigmoid``, ``Dropout``),
``losses`` (``MSELoss``) and ``functional`` (the stateless forms, ``nn.functional``).
See eager/nn/module.py for why ``nn.Parameter(t)`` returns a plain ``Tensor``.
"""

from __future__ import annotations

from . import functional  # noqa: F401
from .layers import Dropout, Linear, ReLU, Sigmoid, Tanh, _uniform_  # noqa: F401
from .losses import MSELoss, _Loss  # noqa: F401
from .module import (
    CALLS,
    Module,
    Parameter,
    Sequential,
    _addindent,  # noqa: F401
    _Calls,
    _check_name,
    _IncompatibleKeys,
    _ParameterMeta,
    _PARAMS,
    _register_param,
    _remove_from,
    _typename,
    _zero_grad,
    is_parameter,
)

__all__ = [
    "Module",
    "Parameter",
    "is_parameter",
    "Linear",
    "ReLU",
    "Tanh",
    "Sigmoid",
    "Dropout",
    "Sequential",
    "MSELoss",
    "functional",
]
