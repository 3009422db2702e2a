"""nn.functional: embedding, one_hot and other lookups (re-exported by eager/nn/functional.py)."""

from __future__ import annotations

__all__: list = []
