"""eager.viz: look at the backward graph that an eager computation recorded.

``to_dot`` gives Graphviz DOT (torchviz's layout: edges run from an input's
node to the node that consumes it, the output tensor at the bottom, leaves in
blue); ``to_text`` an indented tree for the terminal; ``render`` writes the DOT
file and, when Graphviz is installed, an SVG next to it.

Nodes are the tape's ``grad_fn`` objects, named by class (``MulBackward0``);
a leaf appears as its ``AccumulateGrad`` node, labelled with its name from the
optional ``params`` mapping ``{name: tensor}`` and its shape.  Node ids
(``n0``, ``n1``...) follow a depth-first pre-order walk from the output through
``next_functions`` in order, so the same computation always prints the same
text, and ``to_text`` and ``to_dot`` use the same ids.  All walks are
iterative: a 100,000-op chain renders in well under a second.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Mapping, Optional

from .autograd.function import AccumulateGrad, Node
from .tensor import Tensor

# Beyond this depth to_text stops indenting (and prints the depth instead), so a deep
# chain costs linear, not quadratic, output.
MAX_INDENT = 40


def _shape_str(t: Tensor) -> str:
    return "(" + ", ".join(str(d) for d in t.shape) + ")"


def _root(tensor: Tensor) -> Optional[Node]:
    if tensor.grad_fn is not None:
        return tensor.grad_fn
    if tensor.requires_grad:
        return tensor._grad_accumulator()
    return None


def _inputs(node: Node) -> list:
    return [(nxt, nr) for nxt, nr in node.next_functions if nxt is not None]


def _number(root: Optional[Node]) -> dict:
    """Node -> id in depth-first pre-order (children in ``next_functions`` order)."""
    ids: dict = {}
    if root is None:
        return ids
    stack = [root]
    while stack:
        node = stack.pop()
        if node in ids:
            continue
        ids[node] = len(ids)
        stack.extend(nxt for nxt, _ in reversed(_inputs(node)) if nxt not in ids)
    return ids


def _names(params: Optional[Mapping[str, Tensor]]) -> dict:
    if not params:
        return {}
    return {id(t): name for name, t in params.items()}


def _label_parts(node: Node, names: dict) -> tuple:
    """(class name, leaf name or '', leaf shape or '')."""
    if isinstance(node, AccumulateGrad):
        var = node.variable
        if var is None:  # the leaf was deleted (graphs hold leaves weakly)
            return node.name(), "", ""
        return node.name(), names.get(id(var), ""), _shape_str(var)
    return node.name(), "", ""


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(tensor: Tensor, params: Optional[Mapping[str, Tensor]] = None) -> str:
    """Graphviz DOT source of the backward graph reachable from ``tensor.grad_fn``."""
    names = _names(params)
    root = _root(tensor)
    ids = _number(root)
    lines = [
        "digraph backward {",
        '  node [shape=box, style=filled, fillcolor=white, fontname="Helvetica", fontsize=10];',
    ]
    edges = []
    for node, i in ids.items():
        kind, name, shape = _label_parts(node, names)
        if isinstance(node, AccumulateGrad):
            label = f"{name or kind}\n{shape}"
            lines.append(f"  n{i} [label={_quote(label)}, fillcolor=lightblue];")
        else:
            lines.append(f"  n{i} [label={_quote(kind)}];")
        for nxt, nr in _inputs(node):
            attr = f" [label={_quote(str(nr))}]" if nr else ""
            edges.append(f"  n{ids[nxt]} -> n{i}{attr};")
    out_label = names.get(id(tensor), "output") + "\n" + _shape_str(tensor)
    lines.append(f"  out [label={_quote(out_label)}, fillcolor=darkolivegreen1];")
    lines.extend(edges)
    if root is not None:
        lines.append(f"  n{ids[root]} -> out;")
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_text(tensor: Tensor, params: Optional[Mapping[str, Tensor]] = None) -> str:
    """An indented tree of the backward graph, output's grad_fn first, inputs indented below.

    Each node is expanded once; a node reached again (a tensor used twice) is
    printed as ``[nK] ... (see above)`` without its subtree.
    """
    names = _names(params)
    root = _root(tensor)
    if root is None:
        return "(no backward graph: the tensor does not require grad)\n"
    ids = _number(root)
    lines = []
    done = set()
    stack = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        kind, name, shape = _label_parts(node, names)
        label = " ".join(p for p in (f"[n{ids[node]}]", kind, name, shape) if p)
        if depth > MAX_INDENT:
            indent = "  " * MAX_INDENT + f"<depth {depth}> "
        else:
            indent = "  " * depth
        if node in done:
            lines.append(f"{indent}{label} (see above)")
            continue
        done.add(node)
        lines.append(indent + label)
        stack.extend((nxt, depth + 1) for nxt, _ in reversed(_inputs(node)))
    return "\n".join(lines) + "\n"


def render(tensor: Tensor, path: str, params: Optional[Mapping[str, Tensor]] = None) -> tuple:
    """Write ``<path>.dot`` (or ``path`` if it ends in .dot) and, with Graphviz, an SVG.

    Returns ``(dot_path, svg_path)``; ``svg_path`` is None when the Graphviz
    ``dot`` program is not installed, in which case a message says how to get it.
    """
    path = os.fspath(path)
    stem = path[:-4] if path.endswith(".dot") else path
    dot_path, svg_path = stem + ".dot", stem + ".svg"
    with open(dot_path, "w", encoding="utf-8") as f:
        f.write(to_dot(tensor, params))
    exe = shutil.which("dot")
    if exe is None:
        print(
            f"eager.viz.render: wrote {dot_path}; no SVG because the Graphviz 'dot' program "
            f"is not on PATH. Install Graphviz (e.g. 'apt-get install graphviz') and run: "
            f"dot -Tsvg {dot_path} -o {svg_path}",
            file=sys.stderr,
        )
        return dot_path, None
    subprocess.run([exe, "-Tsvg", dot_path, "-o", svg_path], check=True)
    return dot_path, svg_path


__all__ = ["to_dot", "to_text", "render"]
