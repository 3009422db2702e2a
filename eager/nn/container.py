"""nn: ModuleList, ModuleDict, ParameterList."""

from __future__ import annotations

__all__: list = []
