"""graphc's error hierarchy: every message names the argument, op, shape or source line."""
from __future__ import annotations


class GraphcError(Exception):
    """Base class of graphc's own errors."""


class TracerError(GraphcError, TypeError):
    """Something a static trace cannot do with a traced value."""


class TracerBoolConversionError(TracerError):
    """Python control flow (``if``, ``while``, ``and``...) on a traced value."""


class ConcretizationTypeError(TracerError):
    """``float(t)``, ``int(t)``, ``t.item()``, ``t.numpy()``: a concrete value was needed."""


class TracerArrayConversionError(TracerError):
    """A traced value was passed to a numpy function."""


class LeakedTracerError(GraphcError, RuntimeError):
    """A tracer escaped the trace that created it and was used afterwards."""


class GraphVerificationError(GraphcError, ValueError):
    """The IR violates an invariant (arity, shapes, acyclicity...); names node and pass."""


class GraphFormatError(GraphcError, ValueError):
    """A serialized graph failed schema validation."""


class SignatureError(GraphcError, TypeError):
    """Arguments of a compiled function that cannot be traced or cached."""


class UnsupportedOpError(GraphcError, NotImplementedError):
    """An operation the compiler does not support."""


class TooBigError(GraphcError, RuntimeError):
    """A value or arena whose byte size numpy cannot address (more than ``sys.maxsize``
    bytes); raised while building the graph or planning memory, before anything runs."""
