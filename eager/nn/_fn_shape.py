"""nn.functional: padding and other shape helpers (re-exported by eager/nn/functional.py)."""

from __future__ import annotations

__all__: list = []
