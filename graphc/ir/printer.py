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
    if hasattr(v, "nx") and hasattr(v, "outputs"):  # a loop's body graph, printed below it
        return f"<graph {_show(v.name)}>"
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
    """The text form; a loop's body graphs print nested under its instruction, indented
    (as jaxprs print ``scan``)."""
    return "\n".join(_text_lines(g, ""))


def _text_lines(g, indent: str) -> list:
    names = operand_names(g)
    params = ", ".join(
        f"{names[i]}: {type_str(g.nx.nodes[i]['shape'], g.nx.nodes[i]['dtype'])}" for i in g.inputs
    )
    lines = [f"{indent}graph {_show(g.name)}({params}) {{"]
    for nid in g.topo_order():
        d = g.nx.nodes[nid]
        if d["op"] == "input" or (d["op"] == "const" and d["attrs"]["value"].ndim == 0):
            continue
        lines.append(indent + node_line(g, nid, names))
        for key in sorted(d["attrs"]):
            sub = d["attrs"][key]
            if hasattr(sub, "nx") and hasattr(sub, "outputs"):
                lines.extend(_text_lines(sub, indent + "    "))
    outs = ", ".join(names[o] for o in g.outputs)
    lines.append(f"{indent}  return ({outs})")
    lines.append(f"{indent}}}")
    return lines


def _dot_escape(s: str) -> str:
    return "\\n".join(
        _show(part).replace("\\", "\\\\").replace('"', '\\"') for part in s.split("\n")
    )


def to_dot(g) -> str:
    """Graphviz DOT: inputs as ellipses, consts as notes, backward nodes shaded; a loop's
    body graphs are clusters beside it, joined to the loop node by a dashed edge."""
    lines = [
        f'digraph "{_dot_escape(g.name)}" {{',
        "  rankdir=TB;",
        '  node [shape=box, fontname="monospace", fontsize=10];',
    ]
    lines += _dot_body(g, "n", "")
    lines.append("}")
    return "\n".join(lines)


def _dot_body(g, p: str, indent: str) -> list:
    """The DOT statements of ``g`` with node names prefixed by ``p`` (unique per nesting)."""
    out_ids = set(g.outputs)
    lines: list = []
    clusters: list = []
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
        lines.append(f'{indent}  {p}{nid} [label="{_dot_escape(label)}", {style}];')
        for key in sorted(d["attrs"]):
            sub = d["attrs"][key]
            if hasattr(sub, "nx") and hasattr(sub, "outputs"):
                q = f"{p}{nid}_{key}_"
                clusters.append(f"{indent}  subgraph cluster_{q} {{")
                clusters.append(f'{indent}    label="{_dot_escape(key + ": " + sub.name)}";')
                clusters.append(f"{indent}    style=dashed;")
                clusters += _dot_body(sub, q, indent + "  ")
                clusters.append(f"{indent}  }}")
                first = sub.outputs[0] if sub.outputs else None
                if first is not None:
                    clusters.append(f"{indent}  {q}{first} -> {p}{nid} [style=dashed];")
    for nid in g.topo_order():
        for pos, o in enumerate(g.nx.nodes[nid]["operands"]):
            lines.append(f'{indent}  {p}{o} -> {p}{nid} [label="{pos}", fontsize=8];')
    for i, o in enumerate(g.outputs):
        oname = f"out{i}" if p == "n" else f"{p}out{i}"
        lines.append(f'{indent}  {oname} [label="out[{i}]", shape=plaintext];')
        lines.append(f"{indent}  {p}{o} -> {oname};")
    return lines + clusters
