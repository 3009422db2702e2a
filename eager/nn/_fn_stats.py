"""nn.functional: softmax, losses and normalization (re-exported by eager/nn/functional.py)."""

from __future__ import annotations

__all__: list = []
