"""nn: normalization layers (LayerNorm, BatchNorm1d/2d, GroupNorm) and Softmax/LogSoftmax."""

from __future__ import annotations

__all__: list = []
