"""The lowering table (see :mod:`.table`) with every family file's entries registered."""

from __future__ import annotations

from . import elementwise, indexing, matmul, random, reduce, views  # noqa: F401  (register)
from . import pointwise  # noqa: F401  (elementwise math and activations)

from . import joining  # noqa: F401  (cat, stack...)

from . import stats  # noqa: F401  (prod, cumsum...)

from . import gather  # noqa: F401  (gather, scatter, sort...)

from . import conv  # noqa: F401  (convolution and pooling)

from .table import LOWERINGS, Elem, Lowering, Reduction, get, problems

__all__ = ["LOWERINGS", "Elem", "Lowering", "Reduction", "get", "problems"]
