"""Why a compiled function traced again: the readable difference between two cache keys
(input signatures) of ``graphc.compile``, as ``CompiledFunction.recompile_reasons``
reports it."""

from __future__ import annotations

import numpy as np

from .pytree import TreeDef, leaf_paths


def describe_key_item(item) -> str:
    """Readable form of one cache-key item, whatever kind of argument made it."""
    tag = item[0] if isinstance(item, tuple) and item else None
    if tag == "S":
        return f"static value {item[2]!r}"
    if tag == "static_arg":
        return f"static argument value {item[1]!r}"
    if tag == "mode":
        return "modules " + ", ".join("train" if t else "eval" for t in item[1])
    if tag == "Mod":
        return f"module {item[2].__name__} ({'train' if all(item[3]) else 'eval'})"
    if tag in ("T", "A") and len(item) >= 3:
        kind = "Tensor" if tag == "T" else "ndarray"
        rg = ", requires_grad" if tag == "T" and item[3] else ""
        return f"{kind} {np.dtype(item[2]).name}{list(item[1])}{rg}"
    if isinstance(tag, TreeDef):
        return "None" if tag.kind == "none" else f"structure {tag!r}"
    return repr(item)


def same_kind(a, b) -> bool:
    """Are two cache-key items the same kind of argument (array, tensor, static value, or
    a container of one structure), differing only in a field or a leaf?"""
    return (
        isinstance(a, tuple)
        and isinstance(b, tuple)
        and bool(a)
        and bool(b)
        and type(a[0]) is type(b[0])
        and a[0] == b[0]
    )


def diff_item(name: str, a, b) -> str:
    if (
        isinstance(a, tuple)
        and isinstance(b, tuple)
        and a
        and b
        and a[0] == b[0]
        and a[0] in ("T", "A")
    ):
        parts = []
        if a[1] != b[1]:
            parts.append(f"shape {list(a[1])} -> {list(b[1])}")
        if a[2] != b[2]:
            parts.append(
                f"dtype {np.dtype(a[2]).str} -> {np.dtype(b[2]).str}"
                if np.dtype(a[2]).name == np.dtype(b[2]).name
                else f"dtype {np.dtype(a[2]).name} -> {np.dtype(b[2]).name}"
            )
        if a[0] == "T" and a[3] != b[3]:
            parts.append(f"requires_grad {a[3]} -> {b[3]}")
        if a[0] == "T" and a[4] != b[4]:  # .grad is a graph input once it is set
            parts.append(f".grad {'set' if a[4] else 'None'} -> {'set' if b[4] else 'None'}")
        return f"argument {name}: " + ", ".join(parts)
    if (
        isinstance(a, tuple)
        and isinstance(b, tuple)
        and a
        and b
        and isinstance(a[0], TreeDef)
        and isinstance(b[0], TreeDef)
    ):
        if a[0] != b[0]:
            return f"argument {name}: structure {a[0]!r} -> {b[0]!r}"
        for path, x, y in zip(leaf_paths(a[0], name), a[1:], b[1:]):
            if x != y:
                return diff_item(path, x, y)
    return f"argument {name}: {describe_key_item(a)} -> {describe_key_item(b)}"
