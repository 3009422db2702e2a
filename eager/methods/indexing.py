"""Tensor methods: selecting and scattering elements (gather, scatter_add, sort, topk...).

A mixin of :class:`eager.surface.TensorOps` (see eager/methods/__init__.py).
"""

from __future__ import annotations


class IndexingMethods:
    __slots__ = ()


#: module-level functions that are not methods, by name
FUNCTIONS: dict = {}
#: methods that are also module-level functions (``eager.name(x, ...)``)
METHOD_FUNCTIONS: list = []
