"""docs/ops.md: the catalogue of what PyTorch-style code can call, generated from the code.

Nothing on that page is written by hand: the tables come from the op records
(``eager.ops.registry.OPS``), the lowering table (``graphc.backend.lowering``), the
method mixins of the shared op surface, ``eager``'s module-level functions,
``eager.nn.functional`` and ``eager.nn``.  Each public name's description is the first
line of its docstring.  ``python3 dev.py docs`` rewrites the page and
tests/test_docs.py fails when it is stale.

A name is *primitive-backed* when it is a method that hands one op record to the
surface; otherwise it is a composite of public ops, which eager records as the tape
nodes of its primitives and graphc traces, differentiates and fuses like any code.
Both run eagerly and compiled unless the description says otherwise ("eager only").
"""

from __future__ import annotations

import inspect

import eager
from eager.interop import ATTR_TYPES, FAMILIES, METHOD_MODULES, OPS, TensorOps
from eager.interop import NN as nn
from eager.interop import NN_FUNCTIONAL as F

from ..backend import lowering

BEGIN, END = "<!-- ops: begin -->\n", "<!-- ops: end -->"


def _first_line(obj) -> str:
    doc = inspect.getdoc(obj) or ""
    line = doc.strip().split("\n\n")[0].replace("\n", " ").strip()
    return line.replace("|", "\\|")


def _lowering_kind(op: str) -> str:
    low = lowering.LOWERINGS.get(op)
    if low is None:
        return "none (refused when compiled)"
    if low.scalar is not None:
        return "fused loop (scalar)"
    if low.reduction is not None:
        return f"loop reduction ({low.reduction.combine}{', mean' if low.reduction.mean else ''})"
    if low.view is not None and low.kernel is None:
        return "view (strides only)"
    if low.view is not None:
        return f"view or kernel `{low.kernel_kind}`"
    return f"kernel `{low.kernel_kind}`"


def _surface_rows() -> list:
    """(topic, name, module-level?, description) for every public method of TensorOps."""
    topics = [("core", TensorOps)] + [
        (
            m.__name__.rsplit(".", 1)[1],
            next(c for c in vars(m).values() if inspect.isclass(c) and c.__module__ == m.__name__),
        )
        for m in METHOD_MODULES
    ]
    rows, seen = [], set()
    for topic, cls in topics:
        for name in sorted(vars(cls)):
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            attr = inspect.getattr_static(TensorOps, name)
            kind = "property" if isinstance(attr, property) else "method"
            module_level = "yes" if callable(getattr(eager, name, None)) else ""
            rows.append((topic, name, kind, module_level, _first_line(getattr(TensorOps, name))))
    return rows


def ops_page() -> str:
    """The generated part of docs/ops.md."""
    out = [
        "## Tensor methods",
        "",
        "Shared by `eager.Tensor` and graphc's tracer (so every one runs eagerly and "
        "compiled, unless its description says otherwise); *module-level* means "
        "`eager.name(x, ...)` exists too.",
        "",
        "| topic | name | kind | module-level | what it does |",
        "|---|---|---|---|---|",
    ]
    out += [f"| {t} | `{n}` | {k} | {m} | {d} |" for t, n, k, m, d in _surface_rows()]
    funcs = {}
    for m in METHOD_MODULES:
        funcs.update(m.FUNCTIONS)
    out += [
        "",
        "## Functions of `eager` that are not methods",
        "",
        "| name | what it does |",
        "|---|---|",
    ]
    out += [f"| `eager.{n}` | {_first_line(f)} |" for n, f in sorted(funcs.items())]
    out += ["", "## `eager.nn.functional`", "", "| name | what it does |", "|---|---|"]
    out += [f"| `F.{n}` | {_first_line(getattr(F, n))} |" for n in sorted(F.__all__)]
    layers = sorted(n for n in nn.__all__ if inspect.isclass(getattr(nn, n, None)))
    out += ["", "## `eager.nn` layers and losses", "", "| name | what it is |", "|---|---|"]
    out += [f"| `nn.{n}` | {_first_line(getattr(nn, n))} |" for n in layers]
    out += [
        "",
        "## Primitives (op records)",
        "",
        "Every primitive has a numpy forward, a shape rule and (when differentiable) VJP "
        "rules written with public ops, so gradients of any order work eagerly and "
        "compiled; its native code is the lowering entry named here.",
        "",
        "| op | family | operands | attrs (type) | differentiable | native code | doc |",
        "|---|---|---|---|---|---|---|",
    ]
    for fam in FAMILIES:
        for name in sorted(n for n, op in OPS.items() if op.family == fam):
            op = OPS[name]
            operands = "variadic" if op.arity is None else str(op.arity)
            attrs = ", ".join(f"`{a}` ({t})" for a, t in op.attr_types.items()) or "none"
            doc = op.doc.replace("|", "\\|").replace("\n", " ")
            out.append(
                f"| `{name}` | {fam} | {operands} | {attrs} | "
                f"{'yes' if op.differentiable else 'no'} | {_lowering_kind(name)} | {doc} |"
            )
    out += [
        "",
        f"{len(OPS)} primitives; attribute types: " + ", ".join(f"`{t}`" for t in ATTR_TYPES) + ".",
    ]
    return "\n".join(out) + "\n"
