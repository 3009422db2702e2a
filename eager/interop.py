"""What eager exports on purpose for a compiler (graphc): the one door to eager's insides.

``import eager`` is the PyTorch-style API for users.  A compiler needs more: the numpy
array behind a tensor without a property call, the raw requires-grad flag, the op
registry, the thread-local switches a trace flips...  Those live in modules whose
layout may change; this module names them once, and graphc imports eager only as
``eager`` (the public API) and ``eager.interop`` (``tests/eager/test_layering.py``
checks it).

The accessors are ``operator.attrgetter`` objects (C code, one call) and the setters
plain functions.  graphc's ``Tracer`` keeps fields of the same names as a Tensor's
(``_data`` aside), so the same accessors read and set a tracer's flag and grad.

This module is the top layer of eager (docs/eager-layers.md): it imports the layers
below and nothing imports it inside eager.
"""

from __future__ import annotations

from operator import attrgetter

import eager.ops.random as random_op  # the counter-based random generator
import eager._dtype as _D
from ._dtype import FROM_NP, check_inplace_result
from .autograd.engine import NO_GRAD_HINTS
from .autograd.function import AccumulateGrad
from .autograd.grad_mode import STATE as GRAD_MODE
from .nn.module import CALLS, Module
from .optim.optimizer import Optimizer
from .ops.movement import assigned_shape
from .ops.registry import ATTR_TYPES, FAMILIES, MAX_BYTES, OPS, Meta, check_size, norm_axes, ops_of
from .surface import Size, TensorOps, decode_index, encode_index, sum_to
from ._views import MULTI_OUTPUT_VIEW_INPLACE, NO_GRAD_VIEW_INPLACE, VIEW_OF_LEAF_INPLACE
from .factories import SEED, TRACING
from .tensor import PINNED, Tensor
import eager.nn as NN  # the layers and losses, for the generated catalogue (docs/ops.md)
import eager.nn.functional as NN_FUNCTIONAL
from .methods import MODULES as METHOD_MODULES  # the surface's method mixins, by topic


def default_float_dtype():
    """The numpy dtype of float data and float factories (``eager.set_default_dtype``):
    a trace bakes it into its constants, so a compiler keys its traces by it."""
    return _D.DEFAULT_FLOAT


# --- a tensor's fields, read and written without the public properties' checks ------------
data_of = attrgetter("_data")  # the numpy array holding a tensor's values
requires_grad_of = attrgetter("_rg")  # the requires-grad flag (no property call)
grad_of = attrgetter("_grad")  # .grad as stored (no non-leaf warning)
version_of = attrgetter("_version")  # the version counter: a one-item list shared by views
grad_fn_of = attrgetter("grad_fn")  # the backward node, or None for a leaf
tensor_from_array = Tensor._make  # a Tensor around an array, no history, no copy


def set_requires_grad_flag(t, flag: bool) -> None:
    """Set the raw requires-grad flag (no leaf check, unlike ``requires_grad_``)."""
    t._rg = flag


def set_grad(t, grad) -> None:
    """Set ``.grad`` as stored (no shape or dtype check, unlike the property)."""
    t._grad = grad


__all__ = [
    # tensors
    "Tensor",  # eager's tensor class
    "TensorOps",  # the op surface a tracer shares with Tensor
    "Size",  # the shape type (a tuple subclass)
    "tensor_from_array",
    "data_of",
    "requires_grad_of",
    "grad_of",
    "version_of",
    "grad_fn_of",
    "set_requires_grad_flag",
    "set_grad",
    # what a trace switches or reads
    "TRACING",  # thread-local: the tracer eager's factories defer to
    "PINNED",  # id -> (tensor, why): tensors an in-place op must refuse
    "SEED",  # [seed, draws]: the manual_seed state random ops follow
    "GRAD_MODE",  # thread-local grad mode (``.enabled``)
    "default_float_dtype",  # eager.get_default_dtype() as a numpy dtype
    "NO_GRAD_HINTS",  # callables explaining a missing grad_fn in errors
    "CALLS",  # thread-local: the nn.Module an error came through
    "Module",  # nn.Module, to recognise modules among arguments
    "Optimizer",  # eager.optim.Optimizer: lifted with its state by a compiled training step
    "AccumulateGrad",  # the node that accumulates into a leaf's .grad
    # what the generated catalogue of ops (docs/ops.md) lists
    "METHOD_MODULES",  # eager/methods/: the op surface's mixins by topic
    "NN",  # eager.nn
    "NN_FUNCTIONAL",  # eager.nn.functional
    # op records and their helpers
    "OPS",
    "ops_of",
    "FAMILIES",
    "ATTR_TYPES",
    "Meta",
    "check_size",
    "norm_axes",
    "MAX_BYTES",
    "sum_to",
    "encode_index",
    "decode_index",
    "assigned_shape",
    "random_op",
    "FROM_NP",
    "check_inplace_result",
    # eager's (PyTorch's) error messages for in-place writes through views
    "VIEW_OF_LEAF_INPLACE",
    "NO_GRAD_VIEW_INPLACE",
    "MULTI_OUTPUT_VIEW_INPLACE",
]
