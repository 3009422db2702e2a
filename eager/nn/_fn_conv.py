"""nn.functional: convolution and pooling (re-exported by eager/nn/functional.py)."""

from __future__ import annotations

__all__: list = []
