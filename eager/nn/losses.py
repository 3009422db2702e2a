"""The losses (``MSELoss``): modules holding a ``reduction`` around ``nn.functional``."""

from __future__ import annotations

from typing import Optional

import eager.nn.functional as F  # by full name: "from . import" is an edge to eager.nn
from ..tensor import Tensor
from .module import Module

__all__ = ["MSELoss"]


class _Loss(Module):
    def __init__(
        self,
        size_average: Optional[bool] = None,
        reduce: Optional[bool] = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        if size_average is not None or reduce is not None:
            reduction = F.legacy_reduction(size_average, reduce)
        self.reduction = F.check_reduction(reduction)


class MSELoss(_Loss):
    """Mean squared error; ``reduction='sum'`` gives the seed's sum of squares."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.mse_loss(input, target, reduction=self.reduction)
