"""nn: convolution and pooling layers."""

from __future__ import annotations

__all__: list = []
