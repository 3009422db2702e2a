"""Error context for passes: which pass, rule and node was being worked on.

A pass does not wrap its steps in ``try`` blocks.  It asks for the current
context once (``ctx = current()``) and records the node it is looking at
(``ctx.node = n``) and, for rule-based passes, the rule it is applying
(``ctx.rule = name``).  When an exception escapes the pass, the pass manager
reads the context and re-raises it as a :class:`PassError` naming the pass, the
rule, the node (id, op, operands, type) and the user's source line; the original
exception is the ``__cause__``, and the new one is still an instance of the
original type, so ``except ZeroDivisionError`` keeps working.
"""

from __future__ import annotations

import threading
from typing import Optional

from ..errors import GraphcError, with_context
from ..ir import Graph, describe


class PassError(GraphcError):
    """An exception raised inside an optimizer pass, with the pass and node named.

    ``pass_name``, ``node`` (an id or None), ``rule`` (or None) and ``original`` (the
    exception raised by the pass) are attributes."""

    def __init__(
        self,
        message: str,
        pass_name: str = "",
        node: Optional[int] = None,
        rule: Optional[str] = None,
        original: Optional[BaseException] = None,
    ) -> None:
        Exception.__init__(self, message)  # not super(): the original type's __init__
        self.message = message  # may take other arguments
        self.pass_name = pass_name
        self.node = node
        self.rule = rule
        self.original = original

    def __str__(self) -> str:
        return self.message


class PassContext:
    """What the running pass is working on; updated by the pass, read on an error."""

    __slots__ = ("pass_name", "node", "rule", "stats")

    def __init__(self, pass_name: str = "") -> None:
        self.pass_name = pass_name
        self.node: Optional[int] = None  # the node being looked at
        self.rule: Optional[str] = None  # the rule being tried (rule-based passes)
        self.stats: dict = {}  # counters the pass keeps, e.g. rule -> hits


_local = threading.local()  # compiles in different threads have their own context


def current() -> PassContext:
    """The context of the pass running in this thread (a scratch one outside the manager,
    e.g. when a pass function is called directly)."""
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        ctx = _local.ctx = PassContext()
    return ctx


def enter(pass_name: str) -> tuple:
    """Make a fresh context current for one pass run; returns (context, previous)."""
    prev = getattr(_local, "ctx", None)
    ctx = _local.ctx = PassContext(pass_name)
    return ctx, prev


def leave(prev: Optional[PassContext]) -> None:
    _local.ctx = prev


def where(g: Graph, node: Optional[int]) -> str:
    """`` at %12 = mul(%3, %4) : f64[3] (from model.py:17)`` or the bare id of a node
    the pass already removed; empty without a node."""
    if node is None:
        return ""
    if node in g:
        return f" at {describe(g, node)}"
    return f" at %{node} (no longer in the graph)"


def pass_error(ctx: PassContext, g: Graph, exc: Exception) -> PassError:
    """The PassError to raise ``from exc``: names the pass, rule, node, op and source."""
    rule = f" (rule {ctx.rule!r})" if ctx.rule else ""
    try:
        at = where(g, ctx.node)
    except Exception:  # a pass may leave the node half rewritten
        at = f" at %{ctx.node}"
    msg = f"graphc: pass {ctx.pass_name!r}{rule} failed{at}: {type(exc).__name__}: {exc}"
    return with_context(PassError, msg, exc, pass_name=ctx.pass_name, node=ctx.node, rule=ctx.rule)
