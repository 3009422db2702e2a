"""``parameters_to_vector`` / ``vector_to_parameters``."""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

import eager.methods as _methods
from ...autograd.function import Function
from ...tensor import Tensor


class _Flatten(Function):
    """Concatenate flattened tensors (used while eager has no ``cat``)."""

    @staticmethod
    def forward(ctx: Any, *tensors: Any) -> Any:
        ctx.shapes = [tuple(t.shape) for t in tensors]
        return Tensor._make(np.concatenate([np.ravel(t._data) for t in tensors]))

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        out, at = [], 0
        for shape in ctx.shapes:
            n = int(np.prod(shape, dtype=np.int64))
            out.append(grad[at : at + n].reshape(shape))
            at += n
        return tuple(out)


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """Flatten the parameters into one 1-d tensor (differentiable, a concatenation)."""
    vec = [param.reshape(-1) for param in parameters]
    cat = _methods.FUNCTIONS.get("cat")
    if cat is not None:
        return cat(vec)
    return _Flatten.apply(*vec)


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Copy consecutive slices of ``vec`` into the parameters' data."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    pointer = 0
    for param in parameters:
        num_param = param.numel()
        param.data = vec[pointer : pointer + num_param].view_as(param).data
        pointer += num_param
