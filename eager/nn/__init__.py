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

# --- the layers by topic: each file's __all__ ----------------------------------------

from .activation import *  # noqa: E402,F403

from .flatten import *  # noqa: E402,F403

from .normalization import *  # noqa: E402,F403

from .sparse import *  # noqa: E402,F403

from .conv import *  # noqa: E402,F403

from .container import *  # noqa: E402,F403

from .losses import *  # noqa: E402,F403

import eager.nn.activation as _activation  # noqa: E402
import eager.nn.container as _container  # noqa: E402
import eager.nn.conv as _conv  # noqa: E402
import eager.nn.flatten as _flatten  # noqa: E402
import eager.nn.losses as _losses  # noqa: E402
import eager.nn.normalization as _normalization  # noqa: E402
import eager.nn.sparse as _sparse  # noqa: E402

for _part in (_activation, _flatten, _normalization, _sparse, _conv, _container, _losses):
    __all__ += [n for n in _part.__all__ if n not in __all__]

import eager.nn.init as init  # noqa: E402
import eager.nn.utils as utils  # noqa: E402

from .container import ModuleDict, ModuleList, ParameterDict, ParameterList  # noqa: E402,F401
