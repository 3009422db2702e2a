"""The pass registry: every optimizer pass registers itself with one decorator.

``@register_pass(name, order=..., min_level=..., may=(...))`` records a pass
function ``fn(graph) -> changed`` together with what it is allowed to change.
The pass manager builds its pipelines from here: every registered pass whose
``min_level`` is at most the ``opt_level``, sorted by ``(order, name)``, so the
order never depends on import order.

``may`` lists the kinds of change a pass makes (:data:`CHANGES`).  Whatever a
pass declares, it never touches the inputs, never changes how many outputs
there are and never changes an output's shape or dtype.  With
``verify_each=True`` the pass manager checks every pass run against its
declaration (:func:`graphc.passes.manager.check_promise`).
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional

#: the kinds of change a pass may declare
CHANGES = {
    "add nodes": "creates nodes",
    "remove nodes": "deletes nodes",
    "rewrite nodes": "changes the op, attrs or operands of a node that keeps its id",
    "redirect uses": "points users of a node, or graph outputs, at another node",
}

LEVELS = (0, 1, 2, 3)


class PassInfo:
    """One registered pass: its function and its declared effects."""

    __slots__ = ("name", "fn", "order", "min_level", "may", "doc")

    def __init__(self, name: str, fn: Callable, order: int, min_level: int, may: frozenset) -> None:
        self.name = name
        self.fn = fn
        self.order = order
        self.min_level = min_level
        self.may = may
        self.doc = (fn.__doc__ or "").strip().split("\n")[0]

    def __repr__(self) -> str:
        return (
            f"<pass {self.name!r}: order {self.order}, opt_level >= {self.min_level}, "
            f"may {', '.join(sorted(self.may)) or 'change nothing'}>"
        )


REGISTRY: dict = {}  # name -> PassInfo
# The two tables the pass manager reads; kept in step with REGISTRY by register_pass and
# unregister_pass (tools and tests may also patch them directly, e.g. bisect experiments).
PASSES: dict = {}  # name -> fn(graph) -> changed
PIPELINES: dict = {}  # opt_level -> tuple of pass names, in order


def _rebuild() -> None:
    infos = sorted(REGISTRY.values(), key=lambda p: (p.order, p.name))
    PASSES.clear()
    PASSES.update((p.name, p.fn) for p in infos)
    PIPELINES.clear()
    PIPELINES.update((lvl, tuple(p.name for p in infos if p.min_level <= lvl)) for lvl in LEVELS)


def register_pass(
    name: str, *, order: int, min_level: int = 2, may: Iterable[str] = ()
) -> Callable:
    """Decorator: register ``fn(graph) -> changed`` as the pass ``name``.

    ``order`` places it in the pipeline (smaller runs first), ``min_level`` is the
    lowest ``opt_level`` whose pipeline includes it (0 never runs passes), ``may``
    names the changes it makes (keys of :data:`CHANGES`).
    """
    may = frozenset(may)
    unknown = may - set(CHANGES)
    if unknown:
        raise ValueError(
            f"pass {name!r} declares unknown changes {sorted(unknown)}; known: {', '.join(CHANGES)}"
        )
    if min_level not in LEVELS[1:]:
        raise ValueError(f"min_level must be 1, 2 or 3, got {min_level!r}")

    def deco(fn: Callable) -> Callable:
        if name in REGISTRY:
            raise ValueError(f"a pass named {name!r} is already registered")
        REGISTRY[name] = PassInfo(name, fn, int(order), int(min_level), may)
        _rebuild()
        return fn

    return deco


def unregister_pass(name: str) -> None:
    """Remove a registered pass (tests and experiments that registered their own)."""
    del REGISTRY[name]
    _rebuild()


def pass_info(name: str) -> Optional[PassInfo]:
    """The registration of ``name``, or None for a pass only patched into PASSES."""
    return REGISTRY.get(name)
