"""nn: normalization layers (LayerNorm, BatchNorm1d/2d, GroupNorm) and Softmax/LogSoftmax."""

from __future__ import annotations

from typing import Any, Optional

import eager.nn.functional as F  # by full name: "from . import" is an edge to eager.nn
from ..autograd.grad_mode import no_grad
from ..factories import ones, tensor, zeros
from ..surface import TensorOps
from .module import Module, Parameter

__all__: list = [
    "Softmax",
    "LogSoftmax",
    "Softmin",
    "LayerNorm",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "GroupNorm",
]


class Softmax(Module):
    """``softmax(input, dim)`` as a layer."""

    def __init__(self, dim: Optional[int] = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: TensorOps) -> TensorOps:
        return F.softmax(input, self.dim, _stacklevel=5)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    """``log_softmax(input, dim)`` as a layer."""

    def forward(self, input: TensorOps) -> TensorOps:
        return F.log_softmax(input, self.dim, _stacklevel=5)


class Softmin(Softmax):
    """``softmin(input, dim)`` as a layer."""

    def forward(self, input: TensorOps) -> TensorOps:
        return F.softmin(input, self.dim, _stacklevel=5)


class LayerNorm(Module):
    """Normalize the last dims (``normalized_shape``), then an elementwise affine map."""

    def __init__(
        self,
        normalized_shape: Any,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(s) for s in normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, dtype=dtype, device=device))
            if bias:
                self.bias = Parameter(zeros(self.normalized_shape, dtype=dtype, device=device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def reset_parameters(self) -> None:
        """Weight 1, bias 0."""
        with no_grad():
            if self.weight is not None:
                self.weight.fill_(1.0)
            if self.bias is not None:
                self.bias.zero_()

    def forward(self, input: TensorOps) -> TensorOps:
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}"
        )


class _BatchNorm(Module):
    _dims: tuple = (2, 3)

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: Optional[float] = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: Any = None,
        dtype: Any = None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = Parameter(ones(num_features, dtype=dtype, device=device))
            if bias:
                self.bias = Parameter(zeros(num_features, dtype=dtype, device=device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype, device=device))
            self.register_buffer("running_var", ones(num_features, dtype=dtype, device=device))
            self.register_buffer("num_batches_tracked", tensor(0))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self) -> None:
        """Running mean 0, variance 1, no batch tracked."""
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1.0)
                self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        """Reset the running statistics, weight 1, bias 0."""
        self.reset_running_stats()
        with no_grad():
            if self.weight is not None:
                self.weight.fill_(1.0)
            if self.bias is not None:
                self.bias.zero_()

    def _check_input_dim(self, input: TensorOps) -> None:
        if input.ndim not in self._dims:
            want = " or ".join(f"{d}D" for d in self._dims)
            raise ValueError(f"expected {want} input (got {input.ndim}D input)")

    def forward(self, input: TensorOps) -> TensorOps:
        self._check_input_dim(input)
        factor: Any = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:  # the cumulative average: 1 / batches seen
                factor = 1.0 / self.num_batches_tracked.to(self.running_mean.dtype)
        bn_training = self.training or (self.running_mean is None and self.running_var is None)
        track = not self.training or self.track_running_stats
        return F.batch_norm(
            input,
            self.running_mean if track else None,
            self.running_var if track else None,
            self.weight,
            self.bias,
            bn_training,
            factor,
            self.eps,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, bias={self.bias is not None}, "
            f"track_running_stats={self.track_running_stats}"
        )


class BatchNorm1d(_BatchNorm):
    """Batch normalization of (N, C) or (N, C, L) inputs over N (and L)."""

    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalization of (N, C, H, W) inputs over N, H, W."""

    _dims = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch normalization of (N, C, D, H, W) inputs over N, D, H, W."""

    _dims = (5,)


class GroupNorm(Module):
    """Normalize groups of ``num_channels / num_groups`` channels of each sample."""

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        device: Any = None,
        dtype: Any = None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if num_channels % num_groups != 0:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        if affine:
            self.weight = Parameter(ones(num_channels, dtype=dtype, device=device))
            if bias:
                self.bias = Parameter(zeros(num_channels, dtype=dtype, device=device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input: TensorOps) -> TensorOps:
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
            f"bias={self.bias is not None}"
        )
