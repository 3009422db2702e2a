"""The layers: ``Linear``, the activations ``ReLU``/``Tanh``/``Sigmoid``, ``Dropout``."""

from __future__ import annotations

import math
from typing import Any

import eager.nn.functional as F  # by full name: "from . import" is an edge to eager.nn
from ..autograd.grad_mode import no_grad
from ..factories import empty, rand
from ..tensor import Tensor
from .module import Module, Parameter


def _uniform_(t: Tensor, low: float, high: float) -> Tensor:
    """Fill ``t`` in place with U(low, high) draws from eager's generator (``manual_seed``)."""
    with no_grad():
        t.copy_(rand(tuple(t.shape), dtype=t.dtype) * (high - low) + low)
    return t


class Linear(Module):
    """``y = x @ weight.T + bias`` with PyTorch's default init U(-1/sqrt(in), 1/sqrt(in))."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(empty((out_features, in_features), dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(empty(out_features, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # kaiming_uniform_(a=sqrt(5)) on the weight reduces to this bound; bias uses the same.
        bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0.0
        _uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            _uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


class ReLU(Module):
    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.relu(input, inplace=self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Tanh(Module):
    def forward(self, input: Tensor) -> Tensor:
        return F.tanh(input)


class Sigmoid(Module):
    def forward(self, input: Tensor) -> Tensor:
        return F.sigmoid(input)


class Dropout(Module):
    """``F.dropout`` with this module's ``p``, active in ``train()`` mode only."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if p < 0.0 or p > 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"
