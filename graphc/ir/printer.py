"""Text (jaxpr-like) and DOT forms of a graph.  The grammar is in docs/ir.md.

The functions take any ``graphc.ir.graph.Graph``; this module does not import it
(``str(graph)`` and ``Graph.to_dot`` call down into it)."""

from __future__ import annotations

import numpy as np

from .text import printable as _show, type_str


def _fmt_scalar(v: np.ndarray) -> str:
    x = v.item()
    if isinstance(x, float):
        if np.isnan(x):
            return "nan"
        if np.isinf(x):
            return "inf" if x > 0 else "-inf"
        # shortest text that round-trips in the constant's own dtype: f32 1e-6 is "1e-06",
        # not the float64 expansion "9.999999974752427e-07"
        r = repr(x) if v.dtype == np.float64 else str(v.dtype.type(x))
        return r if ("." in r or "e" in r or "n" in r) else r + ".0"
    return repr(x)


def _fmt_attr(v) -> str:
    if isinstance(v, np.ndarray):
        return f"<{type_str(v.shape, v.dtype)}>"
    if isinstance(v, tuple):
        if len(v) == 1:
            return f"({_fmt_attr(v[0])},)"
        return "(" + ", ".join(_fmt_attr(x) for x in v) + ")"
    if isinstance(v, str):
        return _show(v)
    return repr(v)


def operand_names(g) -> dict:
    """How each node is referenced in text: inputs by name, 0-d consts inline, else %id."""
    names = {}
    for nid, d in g.nx.nodes(data=True):
        if d["op"] == "input":
            names[nid] = _show(d["attrs"]["name"])
        elif d["op"] == "const" and d["attrs"]["value"].ndim == 0:
            names[nid] = _fmt_scalar(d["attrs"]["value"])
        else:
            names[nid] = f"%{nid}"
    return names


def node_line(g, nid: int, names: dict) -> str:
    d = g.nx.nodes[nid]
    args = [names[o] for o in d["operands"]]
    attrs = d["attrs"]
    if d["op"] == "const":
        body = f"const {_fmt_attr(attrs['value'])}"
    else:
        args += [f"{k}={_fmt_attr(attrs[k])}" for k in sorted(attrs)]
        body = f"{d['op']}({', '.join(args)})"
    line = f"  %{nid} = {body} : {type_str(d['shape'], d['dtype'])}"
    notes = []
    if d.get("src"):
        notes.append(_show(d["src"]))
    if d.get("role") == "backward":
        notes.append("backward")
    if d.get("by") not in (None, "trace", "grad"):
        notes.append(f"by {_show(d['by'])}")
    if notes:
        line = f"{line:<52}  # {', '.join(notes)}"
    return line


def to_text(g) -> str:
    names = operand_names(g)
    params = ", ".join(
        f"{names[i]}: {type_str(g.nx.nodes[i]['shape'], g.nx.nodes[i]['dtype'])}" for i in g.inputs
    )
    lines = [f"graph {_show(g.name)}({params}) {{"]
    for nid in g.topo_order():
        d = g.nx.nodes[nid]
        if d["op"] == "input" or (d["op"] == "const" and d["attrs"]["value"].ndim == 0):
            continue
        lines.append(node_line(g, nid, names))
    outs = ", ".join(names[o] for o in g.outputs)
    lines.append(f"  return ({outs})")
    lines.append("}")
    return "\n".join(lines)


def _dot_escape(s: str) -> str:
    return "\\n".join(
        _show(part).replace("\\", "\\\\").replace('"', '\\"') for part in s.split("\n")
    )


def to_dot(g) -> str:
    """Graphviz DOT: inputs as ellipses, consts as notes, backward nodes shaded."""
    out_ids = set(g.outputs)
    lines = [
        f'digraph "{_dot_escape(g.name)}" {{',
        "  rankdir=TB;",
        '  node [shape=box, fontname="monospace", fontsize=10];',
    ]
    for nid in g.topo_order():
        d = g.nx.nodes[nid]
        ty = type_str(d["shape"], d["dtype"])
        if d["op"] == "input":
            label = f"{d['attrs']['name']}\n{ty}"
            style = 'shape=ellipse, style=filled, fillcolor="#dde8ff"'
        elif d["op"] == "const":
            v = d["attrs"]["value"]
            label = (_fmt_scalar(v) if v.ndim == 0 else "const") + f"\n{ty}"
            style = "shape=note, fontsize=9"
        else:
            label = f"%{nid} {d['op']}\n{ty}"
            style = (
                'style=filled, fillcolor="#ffe9d6"'
                if d.get("role") == "backward"
                else 'style=filled, fillcolor="#eeeeee"'
            )
        if nid in out_ids:
            style += ", penwidth=2"
        lines.append(f'  n{nid} [label="{_dot_escape(label)}", {style}];')
    for nid in g.topo_order():
        for pos, o in enumerate(g.nx.nodes[nid]["operands"]):
            lines.append(f'  n{o} -> n{nid} [label="{pos}", fontsize=8];')
    for i, o in enumerate(g.outputs):
        lines.append(f'  out{i} [label="out[{i}]", shape=plaintext];')
        lines.append(f"  n{o} -> out{i};")
    lines.append("}")
    return "\n".join(lines)
