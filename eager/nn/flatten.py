"""nn: Flatten, Unflatten and Identity."""

from __future__ import annotations

__all__: list = []
