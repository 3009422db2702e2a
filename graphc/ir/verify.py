"""The IR verifier: the invariants every graph keeps between stages (acyclic, edges that
mirror the operand lists, known ops with their exact attributes, recorded types the op's
shape rule derives, canonical axes).  It takes any ``graphc.ir.graph.Graph`` and does not
import it: ``Graph.verify`` calls down into this module."""

from __future__ import annotations

from typing import Any, Optional

import networkx as nx
import numpy as np

from eager.interop import OPS, norm_axes

from ..errors import GraphVerificationError
from .loops import STRUCT_OPS, check_node
from .text import describe, type_str


def verify(g, pass_name: Optional[str] = None) -> None:
    """Check the invariants; raise GraphVerificationError naming the node and the pass."""
    after = f" after pass {pass_name!r}" if pass_name else ""

    def fail(msg: str, nid: Optional[int] = None) -> None:
        node = f" at {describe(g, nid)}" if nid is not None and nid in g.nx else ""
        raise GraphVerificationError(f"invalid graph {g.name!r}{after}{node}: {msg}")

    G = g.nx
    if not nx.is_directed_acyclic_graph(G):
        cycle = nx.find_cycle(G)
        fail(f"the graph has a cycle through nodes {[e[0] for e in cycle]}")
    for nid in g.inputs:
        if nid not in G or G.nodes[nid]["op"] != "input":
            fail(f"input %{nid} is not an input node", nid)
    for nid in g.outputs:
        if nid not in G:
            fail(f"output %{nid} does not exist")
    for nid, d in G.nodes(data=True):
        op = d["op"]
        operands = d["operands"]
        edges = sorted((k, u) for u, _, k in G.in_edges(nid, keys=True))
        if edges != list(enumerate(operands)):
            fail(f"edges {edges} do not match the operand list {list(operands)}", nid)
        if op == "input":
            if operands:
                fail("input nodes take no operands", nid)
            if nid not in g.inputs:
                fail("input node is not listed in graph.inputs", nid)
            continue
        if op == "const":
            v = d["attrs"].get("value")
            if (
                not isinstance(v, np.ndarray)
                or v.shape != tuple(d["shape"])
                or v.dtype.name != d["dtype"]
            ):
                fail("const value does not match the node's shape/dtype", nid)
            continue
        if op in STRUCT_OPS:

            def sub(body, where: str) -> None:
                try:
                    verify(body, pass_name)
                except GraphVerificationError as e:
                    fail(f"in the {where}: {e}", nid)

            check_node(g, nid, fail, sub)
            continue
        if op not in OPS:
            fail(f"unknown op {op!r}", nid)
        opdef = OPS[op]
        if opdef.arity is not None and len(operands) != opdef.arity:
            fail(f"{op} takes {opdef.arity} operands, got {len(operands)}", nid)
        if opdef.arity is None and not operands:
            fail(f"{op} needs at least one operand", nid)
        if set(d["attrs"]) != set(opdef.attrs):
            fail(f"{op} expects attrs {sorted(opdef.attrs)}, got {sorted(d['attrs'])}", nid)
        try:
            m = opdef.shape(*[g.meta_of(o) for o in operands], **d["attrs"])
        except Exception as e:  # the shape rule's own error, re-raised with the node
            fail(f"shape rule failed: {e}", nid)
        if tuple(m.shape) != tuple(d["shape"]) or m.dtype.name != d["dtype"]:
            fail(
                f"recorded type {type_str(d['shape'], d['dtype'])} but the shape rule derives "
                f"{type_str(m.shape, m.dtype)}",
                nid,
            )
        if "axis" in d["attrs"]:
            want = _canonical_axis(op, d["attrs"]["axis"], len(g.nx.nodes[operands[0]]["shape"]))
            if want is not None:
                fail(
                    f"axis={d['attrs']['axis']!r} is not in the canonical form {want!r} the "
                    "tracer records and the passes and backend rely on",
                    nid,
                )


def _canonical_axis(op: str, axis: Any, ndim: int) -> Any:
    """None if ``axis`` (already accepted by the op's shape rule) is canonical, else the
    canonical form: a sorted tuple of distinct non-negative dims for reductions, one
    non-negative dim (an int) for argmax/argmin."""
    dims = norm_axes(axis, ndim, op)
    if op in ("argmax", "argmin"):
        ok = type(axis) is int and len(dims) == 1 and axis == dims[0]
        return None if ok else (dims[0] if len(dims) == 1 else dims)
    ok = type(axis) is tuple and all(type(a) is int for a in axis) and axis == dims
    return None if ok else dims
