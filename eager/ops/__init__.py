"""Op records by family; importing this package registers every primitive."""

from . import elementwise, linalg, movement, random, reduce  # noqa: F401  (registration)
from .registry import OPS, Meta, OpDef, get

__all__ = ["OPS", "Meta", "OpDef", "get"]
