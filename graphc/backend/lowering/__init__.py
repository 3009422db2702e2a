"""The lowering table (see :mod:`.table`) with every family file's entries registered."""

from __future__ import annotations

from . import elementwise, indexing, matmul, random, reduce, views  # noqa: F401  (register)
from .table import LOWERINGS, Elem, Lowering, Reduction, get, problems

__all__ = ["LOWERINGS", "Elem", "Lowering", "Reduction", "get", "problems"]
