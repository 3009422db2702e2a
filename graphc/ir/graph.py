"""graphc's IR: a networkx MultiDiGraph with ordered operands per node.

Every node has ``op``, ``shape``, ``dtype`` (a numpy dtype name), ``attrs`` (the
op's static attributes), ``operands`` (an ordered tuple of node ids; the edges
mirror it, keyed by operand position, so ``x * x`` has two edges) and
provenance: ``src`` (user file:line), ``role`` (``forward``/``backward``) and
``by`` (the pass or transform that created it).  Two ops exist only in the IR:
``input`` (attrs: ``name``, ``index``) and ``const`` (attrs: ``value``, a numpy
array).  Structured loops (``scan``, ``while`` and their ``loop_out`` results, see
graphc.ir.loops) hold their bodies as graphs.  Every other op is a record of
``eager.ops.OPS``.

Node ids are increasing integers and operands always have smaller ids than
their users when built by tracing; walks use
``lexicographical_topological_sort`` keyed by id so output is deterministic
after any rewrite.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

import networkx as nx
import numpy as np

from eager.interop import OPS, Meta, check_size

from ..errors import GraphVerificationError, TooBigError
from .loops import LOOP_OPS, STRUCT_OPS, TOKEN_DTYPE, TOKEN_SHAPE, loop_out_meta
from .printer import to_dot as _to_dot, to_text as _to_text
from .serialize import from_json as _from_json, to_json as _to_json
from .verify import verify

IR_OPS = ("input", "const") + STRUCT_OPS


class Graph:
    """A traced program: ordered inputs, ordered outputs, nodes in a MultiDiGraph."""

    # graphc.autodiff installs its ``grad_graph`` here when it is imported (graphc's
    # package import always does): the IR sits below autodiff and never imports it
    _grad_graph: Optional[Callable] = None

    def __init__(self, name: str = "graph") -> None:
        self.nx = nx.MultiDiGraph()
        self.name = name
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.input_names: list[str] = []
        self.meta: dict = {}  # free-form info (e.g. which outputs are gradients)
        self._next_id = 0

    # --- construction -------------------------------------------------------------
    def add_node(
        self,
        op: str,
        operands: Sequence[int] = (),
        attrs: Optional[dict] = None,
        *,
        shape: Optional[tuple] = None,
        dtype: Any = None,
        src: str = "",
        role: str = "forward",
        by: str = "trace",
    ) -> int:
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
        self.nx.add_node(
            nid,
            op=op,
            operands=operands,
            attrs=attrs,
            shape=tuple(shape),
            dtype=np.dtype(dtype).name,
            src=src,
            role=role,
            by=by,
        )
        for pos, o in enumerate(operands):
            self.nx.add_edge(o, nid, key=pos)
        return nid

    def add_input(self, name: str, shape: tuple, dtype: Any) -> int:
        nid = self.add_node(
            "input",
            (),
            {"name": name, "index": len(self.inputs)},
            shape=shape,
            dtype=dtype,
            by="trace",
        )
        self.inputs.append(nid)
        self.input_names.append(name)
        return nid

    def add_const(self, value: Any, src: str = "", role: str = "forward", by: str = "trace") -> int:
        arr = np.array(value)
        arr.setflags(write=False)
        return self.add_node(
            "const", (), {"value": arr}, shape=arr.shape, dtype=arr.dtype, src=src, role=role, by=by
        )

    def infer(self, op: str, operands: Sequence[int], attrs: dict) -> Meta:
        """Shape and dtype of ``op`` applied to existing nodes (the op's shape rule)."""
        if op == "loop_out":
            return loop_out_meta(self, operands, attrs)
        if op in LOOP_OPS:
            return Meta(TOKEN_SHAPE, np.dtype(TOKEN_DTYPE))
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
        """Deterministic topological order (ties broken by node id): the smallest id whose
        operands are all placed comes next.  When every edge goes from a smaller id to a
        larger one (a graph as traced, and after most rewrites) that is just the ids in
        increasing order, found without networkx's general walk (which every pass runs)."""
        if all(u < v for u, v in self.nx.edges()):
            return sorted(self.nx.nodes)
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
        return _to_text(self)

    def __repr__(self) -> str:
        return (
            f"<graphc.Graph {self.name}: {len(self.inputs)} inputs, {len(self)} nodes, "
            f"{len(self.outputs)} outputs>"
        )

    def to_dot(self) -> str:
        return _to_dot(self)

    def to_json(self) -> str:
        return _to_json(self)

    @staticmethod
    def from_json(text: str) -> "Graph":
        return _from_json(text, Graph)

    def verify(self, pass_name: Optional[str] = None) -> "Graph":
        verify(self, pass_name)
        return self

    def grad(self, wrt: Optional[Iterable[int]] = None, output: int = 0) -> "Graph":
        """Forward + backward graph: outputs are (value, d value / d each ``wrt`` input)."""
        if Graph._grad_graph is None:
            raise RuntimeError("Graph.grad needs graphc.autodiff: import graphc first")
        return Graph._grad_graph(self, wrt=wrt, output=output)


def iter_nodes(g: Graph) -> Iterator[tuple]:
    """(id, data) in deterministic topological order."""
    for nid in g.topo_order():
        yield nid, g.nx.nodes[nid]
