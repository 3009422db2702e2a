"""graphc's IR: a networkx MultiDiGraph with ordered operands per node.

Every node has ``op``, ``shape``, ``dtype`` (a numpy dtype name), ``attrs`` (the
op's static attributes), ``operands`` (an ordered tuple of node ids; the edges
mirror it, keyed by operand position, so ``x * x`` has two edges) and
provenance: ``src`` (user file:line), ``role`` (``forward``/``backward``) and
``by`` (the pass or transform that created it).  Two ops exist only in the IR:
``input`` (attrs: ``name``, ``index``) and ``const`` (attrs: ``value``, a numpy
array).  Every other op is a record of ``eager.ops.OPS``.

Node ids are increasing integers and operands always have smaller ids than
their users when built by tracing; walks use
``lexicographical_topological_sort`` keyed by id so output is deterministic
after any rewrite.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator, Optional, Sequence

import networkx as nx
import numpy as np

from eager.interop import OPS, Meta, check_size, norm_axes

from .errors import GraphVerificationError, TooBigError

IR_OPS = ("input", "const")
_SHORT = {"float32": "f32", "float64": "f64", "float16": "f16", "int64": "i64", "int32": "i32",
          "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "bool"}


def short_dtype(dtype: Any) -> str:
    name = np.dtype(dtype).name
    return _SHORT.get(name, name)


def type_str(shape: Sequence[int], dtype: Any) -> str:
    return f"{short_dtype(dtype)}[{','.join(str(d) for d in shape)}]"


def printable(text: object) -> str:
    """A name or source location as one visible line: control, format and separator
    characters (``\\r``, ``\\x1b``, ``\\u2028``...) are spelled as escapes, so a
    hostile string cannot rewrite or hide lines of the printed IR, an error message or a
    terminal.  Printable Unicode (a non-ASCII file name) is kept."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(ch if ch.isprintable() else
                   (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"
                    if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}") for ch in s)


class Graph:
    """A traced program: ordered inputs, ordered outputs, nodes in a MultiDiGraph."""

    def __init__(self, name: str = "graph") -> None:
        self.nx = nx.MultiDiGraph()
        self.name = name
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.input_names: list[str] = []
        self.meta: dict = {}           # free-form info (e.g. which outputs are gradients)
        self._next_id = 0

    # --- construction -------------------------------------------------------------
    def add_node(self, op: str, operands: Sequence[int] = (), attrs: Optional[dict] = None, *,
                 shape: Optional[tuple] = None, dtype: Any = None, src: str = "",
                 role: str = "forward", by: str = "trace") -> int:
        """Add a node; shape/dtype are derived with the op's shape rule when not given."""
        attrs = dict(attrs or {})
        operands = tuple(int(o) for o in operands)
        if shape is None or dtype is None:
            m = self.infer(op, operands, attrs)
            shape, dtype = m.shape, m.dtype
        # every node passes here (tracer, autodiff, passes, the JSON loader): a size numpy
        # could not address never enters a graph, so later stages compute sizes safely
        check_size(shape, dtype, f"{op} at {src}" if src else op, error=TooBigError)
        nid = self._next_id
        self._next_id += 1
        self.nx.add_node(nid, op=op, operands=operands, attrs=attrs, shape=tuple(shape),
                         dtype=np.dtype(dtype).name, src=src, role=role, by=by)
        for pos, o in enumerate(operands):
            self.nx.add_edge(o, nid, key=pos)
        return nid

    def add_input(self, name: str, shape: tuple, dtype: Any) -> int:
        nid = self.add_node("input", (), {"name": name, "index": len(self.inputs)},
                            shape=shape, dtype=dtype, by="trace")
        self.inputs.append(nid)
        self.input_names.append(name)
        return nid

    def add_const(self, value: Any, src: str = "", role: str = "forward", by: str = "trace") -> int:
        arr = np.array(value)
        arr.setflags(write=False)
        return self.add_node("const", (), {"value": arr}, shape=arr.shape, dtype=arr.dtype,
                             src=src, role=role, by=by)

    def infer(self, op: str, operands: Sequence[int], attrs: dict) -> Meta:
        """Shape and dtype of ``op`` applied to existing nodes (the op's shape rule)."""
        if op in IR_OPS:
            raise GraphVerificationError(f"{op} nodes need an explicit shape and dtype")
        metas = [self.meta_of(o) for o in operands]
        return OPS[op].shape(*metas, **attrs)

    def meta_of(self, nid: int) -> Meta:
        d = self.nx.nodes[nid]
        return Meta(d["shape"], d["dtype"])

    # --- queries ------------------------------------------------------------------------
    def __getitem__(self, nid: int) -> dict:
        return self.nx.nodes[nid]

    def __len__(self) -> int:
        return self.nx.number_of_nodes()

    def __contains__(self, nid: int) -> bool:
        return nid in self.nx

    def node_ids(self) -> list:
        return sorted(self.nx.nodes)

    def topo_order(self) -> list:
        """Deterministic topological order (ties broken by node id)."""
        return list(nx.lexicographical_topological_sort(self.nx, key=lambda n: n))

    def users(self, nid: int) -> list:
        """Nodes that use ``nid`` as an operand (sorted, each once)."""
        return sorted(set(self.nx.successors(nid)))

    def op_counts(self) -> dict:
        counts: dict = {}
        for _, d in self.nx.nodes(data=True):
            counts[d["op"]] = counts.get(d["op"], 0) + 1
        return dict(sorted(counts.items()))

    # --- rewriting ----------------------------------------------------------------------
    def set_operands(self, nid: int, operands: Sequence[int]) -> None:
        old = self.nx.nodes[nid]["operands"]
        for pos, o in enumerate(old):
            self.nx.remove_edge(o, nid, key=pos)
        operands = tuple(int(o) for o in operands)
        self.nx.nodes[nid]["operands"] = operands
        for pos, o in enumerate(operands):
            self.nx.add_edge(o, nid, key=pos)

    def replace_uses(self, old: int, new: int) -> None:
        """Point every user of ``old`` (and the graph outputs) at ``new``."""
        for u in self.users(old):
            ops = self.nx.nodes[u]["operands"]
            self.set_operands(u, tuple(new if o == old else o for o in ops))
        self.outputs = [new if o == old else o for o in self.outputs]

    def remove_node(self, nid: int) -> None:
        if nid in self.inputs:
            raise GraphVerificationError(f"cannot remove input node %{nid}")
        self.nx.remove_node(nid)

    def copy(self) -> "Graph":
        g = Graph(self.name)
        g.nx = self.nx.copy()
        for n in g.nx.nodes:
            d = g.nx.nodes[n]
            d["attrs"] = dict(d["attrs"])
        g.inputs = list(self.inputs)
        g.outputs = list(self.outputs)
        g.input_names = list(self.input_names)
        g.meta = dict(self.meta)
        g._next_id = self._next_id
        return g

    # --- printing ------------------------------------------------------------------------
    def __str__(self) -> str:
        from .printer import to_text
        return to_text(self)

    def __repr__(self) -> str:
        return (f"<graphc.Graph {self.name}: {len(self.inputs)} inputs, {len(self)} nodes, "
                f"{len(self.outputs)} outputs>")

    def to_dot(self) -> str:
        from .printer import to_dot
        return to_dot(self)

    def to_json(self) -> str:
        from .serialize import to_json
        return to_json(self)

    @staticmethod
    def from_json(text: str) -> "Graph":
        from .serialize import from_json
        return from_json(text)

    def verify(self, pass_name: Optional[str] = None) -> "Graph":
        verify(self, pass_name)
        return self

    def grad(self, wrt: Optional[Iterable[int]] = None, output: int = 0) -> "Graph":
        """Forward + backward graph: outputs are (value, d value / d each ``wrt`` input)."""
        from .autodiff import grad_graph
        return grad_graph(self, wrt=wrt, output=output)


def describe(g: Graph, nid: int) -> str:
    """One-line description of a node for error messages."""
    d = g.nx.nodes[nid]
    ops = ", ".join(f"%{o}" for o in d["operands"])
    where = f" (from {printable(d['src'])})" if d.get("src") else ""
    return f"%{nid} = {d['op']}({ops}) : {type_str(d['shape'], d['dtype'])}{where}"


def verify(g: Graph, pass_name: Optional[str] = None) -> None:
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
            if not isinstance(v, np.ndarray) or v.shape != tuple(d["shape"]) or \
                    v.dtype.name != d["dtype"]:
                fail("const value does not match the node's shape/dtype", nid)
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
            fail(f"recorded type {type_str(d['shape'], d['dtype'])} but the shape rule derives "
                 f"{type_str(m.shape, m.dtype)}", nid)
        if "axis" in d["attrs"]:
            want = _canonical_axis(op, d["attrs"]["axis"], len(g.nx.nodes[operands[0]]["shape"]))
            if want is not None:
                fail(f"axis={d['attrs']['axis']!r} is not in the canonical form {want!r} the "
                     "tracer records and the passes and backend rely on", nid)


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


def iter_nodes(g: Graph) -> Iterator[tuple]:
    """(id, data) in deterministic topological order."""
    for nid in g.topo_order():
        yield nid, g.nx.nodes[nid]
