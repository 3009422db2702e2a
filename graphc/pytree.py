"""Flatten/unflatten nested tuples, lists and dicts of leaves (a tiny pytree)."""

from __future__ import annotations

from typing import Any, Callable, Optional


class TreeDef:
    """The structure of a nested container; hashable so it can key a cache."""

    __slots__ = ("kind", "children", "aux", "_hash")

    def __init__(self, kind: str, children: tuple = (), aux: Any = None) -> None:
        self.kind = kind  # "leaf" | "tuple" | "list" | "dict" | "namedtuple" | "none"
        self.children = children
        self.aux = aux  # dict keys for "dict", the class for "namedtuple"
        self._hash = hash((kind, children, aux))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TreeDef)
            and self._hash == other._hash
            and self.kind == other.kind
            and self.aux == other.aux
            and self.children == other.children
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = ", ".join(repr(c) for c in self.children)
        if self.kind == "tuple":
            return f"({inner}{',' if len(self.children) == 1 else ''})"
        if self.kind == "list":
            return f"[{inner}]"
        if self.kind == "namedtuple":
            return f"{self.aux.__name__}({inner})"
        return "{" + ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.aux, self.children)) + "}"

    @property
    def num_leaves(self) -> int:
        n = 0
        stack = [self]
        while stack:
            t = stack.pop()
            if t.kind == "leaf":
                n += 1
            stack.extend(t.children)
        return n


LEAF = TreeDef("leaf")
NONE = TreeDef("none")


def flatten(obj: Any, is_leaf: Optional[Callable[[Any], bool]] = None) -> tuple:
    """Return (leaves, treedef).  Containers: tuple, namedtuple, list, dict (sorted keys), None."""
    leaves: list = []

    def rec(o: Any, depth: int) -> TreeDef:
        if depth > 200:
            raise RecursionError("argument nesting is deeper than 200 levels")
        if is_leaf is not None and is_leaf(o):
            leaves.append(o)
            return LEAF
        if o is None:
            return NONE
        t = type(o)
        if t is tuple or t is list:
            kids = tuple(rec(c, depth + 1) for c in o)
            return TreeDef("tuple" if t is tuple else "list", kids)
        if isinstance(o, tuple) and hasattr(t, "_fields"):  # e.g. max(dim) -> (values, indices)
            return TreeDef("namedtuple", tuple(rec(c, depth + 1) for c in o), t)
        if t is dict:
            keys = tuple(sorted(o, key=repr))
            kids = tuple(rec(o[k], depth + 1) for k in keys)
            return TreeDef("dict", kids, keys)
        leaves.append(o)
        return LEAF

    td = rec(obj, 0)
    return leaves, td


def unflatten(td: TreeDef, leaves: list) -> Any:
    it = iter(leaves)

    def rec(t: TreeDef) -> Any:
        if t.kind == "leaf":
            return next(it)
        if t.kind == "none":
            return None
        kids = [rec(c) for c in t.children]
        if t.kind == "tuple":
            return tuple(kids)
        if t.kind == "list":
            return kids
        if t.kind == "namedtuple":
            return t.aux(*kids)
        return dict(zip(t.aux, kids))

    return rec(td)


def leaf_paths(td: TreeDef, prefix: str) -> list:
    """Human-readable path of each leaf, e.g. ``params['w1']`` or ``args[0][1]``."""
    out: list = []

    def rec(t: TreeDef, path: str) -> None:
        if t.kind == "leaf":
            out.append(path)
        elif t.kind in ("tuple", "list", "namedtuple"):
            for i, c in enumerate(t.children):
                rec(c, f"{path}[{i}]")
        elif t.kind == "dict":
            for k, c in zip(t.aux, t.children):
                rec(c, f"{path}[{k!r}]")

    rec(td, prefix)
    return out
