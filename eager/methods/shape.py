"""Tensor methods: joining, splitting and rearranging (cat, stack, split, tril, flip...).

A mixin of :class:`eager.surface.TensorOps` (see eager/methods/__init__.py).
"""

from __future__ import annotations


class ShapeMethods:
    __slots__ = ()


#: module-level functions that are not methods, by name
FUNCTIONS: dict = {}
#: methods that are also module-level functions (``eager.name(x, ...)``)
METHOD_FUNCTIONS: list = []
