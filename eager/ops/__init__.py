"""Op records by family; importing this package registers every primitive."""

from . import elementwise, linalg, movement, random, reduce  # noqa: F401  (registration)
from . import pointwise  # noqa: F401  (elementwise math and activations)

from . import joining  # noqa: F401  (cat, stack and other joins)

from . import stats  # noqa: F401  (prod, cumsum and other statistics)

from . import indexing  # noqa: F401  (gather, scatter, sort...)

from . import conv  # noqa: F401  (convolution and pooling)

from .registry import OPS, Meta, OpDef, get

__all__ = ["OPS", "Meta", "OpDef", "get"]
