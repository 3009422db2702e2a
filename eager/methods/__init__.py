"""Tensor methods by topic, mixed into the shared op surface (``eager.surface.TensorOps``).

Each module defines one mixin class of methods (written, like every surface method,
as an op name, operands and attrs handed to ``self._op``, or as a composite of other
public methods), and ``FUNCTIONS``: the module-level functions ``eager`` exports from
it (``eager.cat``, ``eager.softmax``...), by name.  ``eager/__init__.py`` exports every
module's ``FUNCTIONS``; a method that is also a module-level function (``eager.erf(x)``)
is listed in ``METHOD_FUNCTIONS`` instead and gets the same wrapper as ``eager.exp``.
"""

from __future__ import annotations

from eager.methods import indexing, linalg, pointwise, shape, stats

MODULES = (pointwise, shape, stats, indexing, linalg)

#: module-level functions that are not methods, by name (``eager.cat``, ``eager.einsum``)
FUNCTIONS: dict = {}
#: names of methods that also exist as module-level functions (``eager.erf(x)``)
METHOD_FUNCTIONS: list = []
for _m in MODULES:
    for _name, _fn in _m.FUNCTIONS.items():
        if _name in FUNCTIONS:
            raise ValueError(f"eager.{_name} is defined by two method modules")
        FUNCTIONS[_name] = _fn
    METHOD_FUNCTIONS.extend(_m.METHOD_FUNCTIONS)
