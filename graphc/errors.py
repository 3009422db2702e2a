"""graphc's error hierarchy: every message names the argument, op, shape or source line."""

from __future__ import annotations

from typing import Any


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


class LoweringError(GraphcError):
    """An exception raised while generating native code for a node, with the node named
    (``node``: its id; ``original``: the exception raised).  Also an instance of the
    original exception's type, so handlers for that type still catch it."""

    def __init__(self, message: str, node=None, original=None) -> None:
        Exception.__init__(self, message)  # not super(): the original type's __init__
        self.message = message  # may take other arguments
        self.node = node
        self.original = original

    def __str__(self) -> str:
        return self.message


_combined: dict = {}  # (context error type, original exception type) -> combined type


def combined_type(base: type, original: type) -> type:
    """A subclass of the context error ``base`` (PassError, LoweringError) that is also an
    ``original`` (so ``except ZeroDivisionError`` still catches it); ``base`` itself when
    the two cannot be combined."""
    cls = _combined.get((base, original))
    if cls is None:
        try:
            cls = type(
                base.__name__,
                (base, original),
                {"__module__": base.__module__, "__str__": base.__str__},
            )
        except TypeError:  # layout conflicts between built-in exception types
            cls = base
        _combined[(base, original)] = cls
    return cls


def with_context(base: type[Any], message: str, original: BaseException, **fields: Any) -> Any:
    """The ``base`` error (a context error class whose __init__ takes the message, then
    keyword fields and ``original``) to raise ``from original``."""
    cls = combined_type(base, type(original))
    err: Any
    try:
        err = cls.__new__(cls, message)
        base.__init__(err, message, original=original, **fields)
    except Exception:
        err = base(message, original=original, **fields)
    return err
