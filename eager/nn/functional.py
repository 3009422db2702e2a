"""eager.nn.functional: stateless layers and losses, written with the public tensor ops.

Every function here only calls methods of the shared op surface, so it runs on
eager tensors (recording a tape) and on graphc tracers (recording graph nodes)
alike.  Composite functions therefore name their tape nodes after the primitives
they are built from (``mse_loss`` shows ``SumBackward0``/``PowBackward0``, not
PyTorch's fused ``MseLossBackward0``).
"""

from __future__ import annotations

import warnings
from typing import Optional

from ..surface import TensorOps, matmul
from ._reduction import check_reduction, legacy_reduction


def linear(input: TensorOps, weight: TensorOps, bias: Optional[TensorOps] = None) -> TensorOps:
    """``input @ weight.T + bias`` with ``weight`` of shape (out_features, in_features)."""
    if (
        bias is not None
        and input.ndim == 2
        and input._npdtype == weight._npdtype
        and bias._npdtype == weight._npdtype
    ):
        # PyTorch's path for 2-D input with bias: one addmm (AddmmBackward0), which native
        # code runs as one gemm whose C starts as the broadcast bias.  (Mixed dtypes, which
        # PyTorch refuses, keep eager's promoting matmul + add below.)
        return bias.addmm(input, weight.t())
    out = matmul(input, weight.t())
    if bias is not None:
        out = out + bias
    return out


def relu(input: TensorOps, inplace: bool = False) -> TensorOps:
    """``max(input, 0)`` (in place with ``inplace=True``)."""
    return input.relu_() if inplace else input.relu()


def tanh(input: TensorOps) -> TensorOps:
    """Elementwise hyperbolic tangent."""
    return input.tanh()


def sigmoid(input: TensorOps) -> TensorOps:
    """``1 / (1 + exp(-input))``."""
    return input.sigmoid()


def mse_loss(
    input: TensorOps,
    target: TensorOps,
    size_average: Optional[bool] = None,
    reduce: Optional[bool] = None,
    reduction: str = "mean",
) -> TensorOps:
    """Squared error ``(input - target) ** 2``, averaged, summed or kept elementwise."""
    if size_average is not None or reduce is not None:
        reduction = legacy_reduction(size_average, reduce)
    check_reduction(reduction)
    if tuple(target.shape) != tuple(input.shape):
        warnings.warn(
            f"Using a target size ({target.shape}) that is different to the input size "
            f"({input.shape}). This will likely lead to incorrect results due to "
            "broadcasting. Please ensure they have the same size.",
            UserWarning,
            stacklevel=2,
        )
    err = (input - target).pow(2)
    if reduction == "mean":
        return err.mean()
    if reduction == "sum":
        return err.sum()
    return err


def dropout(
    input: TensorOps, p: float = 0.5, training: bool = True, inplace: bool = False
) -> TensorOps:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``
    while training; the identity otherwise.  The mask is a value of its own, so the
    gradient is ``mask / (1 - p)`` (it is not drawn again)."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        out = input * 0.0
    else:
        from ..factories import rand

        keep = rand(input.shape, dtype=input.dtype) >= p
        out = input * keep.to(input.dtype) * (1.0 / (1.0 - p))
    return input.copy_(out) if inplace else out


__all__ = ["linear", "relu", "tanh", "sigmoid", "mse_loss", "dropout"]

# --- the functional forms by topic: each file's __all__ --------------------------------

from ._fn_pointwise import *  # noqa: E402,F403  (activations: gelu, silu, softplus...)

from ._fn_shape import *  # noqa: E402,F403  (pad...)

from ._fn_stats import *  # noqa: E402,F403  (softmax, losses, normalization...)

from ._fn_indexing import *  # noqa: E402,F403  (embedding, one_hot...)

from ._fn_conv import *  # noqa: E402,F403  (convolution and pooling)

import eager.nn._fn_conv as _fn_conv  # noqa: E402
import eager.nn._fn_indexing as _fn_indexing  # noqa: E402
import eager.nn._fn_pointwise as _fn_pointwise  # noqa: E402
import eager.nn._fn_shape as _fn_shape  # noqa: E402
import eager.nn._fn_stats as _fn_stats  # noqa: E402

for _part in (_fn_pointwise, _fn_shape, _fn_stats, _fn_indexing, _fn_conv):
    __all__ += _part.__all__
