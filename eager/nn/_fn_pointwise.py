"""nn.functional: activations and elementwise math (re-exported by eager/nn/functional.py)."""

from __future__ import annotations

__all__: list = []
