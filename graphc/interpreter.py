"""The reference interpreter: each node's numpy forward, in topological order.

It is the oracle every later stage (passes, native code) is tested against.
Intermediate values are dropped after their last use, as a compiled program
would, so interpreting a long chain does not hold every intermediate.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from eager.interop import OPS

from .errors import GraphcError
from .ir import Graph, describe


class Program:
    """A graph prepared for repeated interpretation (order, forwards, last uses): the
    interpreter's program, not to be confused with the backend's kernel Plan."""

    def __init__(self, g: Graph) -> None:
        order = g.topo_order()
        pos = {n: i for i, n in enumerate(order)}
        last = {}
        for n in order:
            for o in g.nx.nodes[n]["operands"]:
                last[o] = pos[n]
        for o in g.outputs:
            last[o] = len(order)
        steps = []
        for i, n in enumerate(order):
            d = g.nx.nodes[n]
            op = d["op"]
            free = tuple(o for o in set(d["operands"]) if last.get(o) == i)
            if op == "input":
                steps.append((n, "input", g.inputs.index(n), (), None, free))
            elif op == "const":
                steps.append((n, "const", d["attrs"]["value"], (), None, free))
            else:
                steps.append((n, op, OPS[op].forward, d["operands"], d["attrs"], free))
        self.steps = steps
        self.graph = g
        self.n_inputs = len(g.inputs)
        self.outputs = list(g.outputs)
        self.types = {
            n: (tuple(g.nx.nodes[n]["shape"]), np.dtype(g.nx.nodes[n]["dtype"])) for n in order
        }

    def run(self, arrays: Sequence[Any], record: dict = None) -> list:
        if len(arrays) != self.n_inputs:
            raise GraphcError(
                f"graph {self.graph.name!r} takes {self.n_inputs} inputs, got {len(arrays)}"
            )
        env: dict = {}
        for n, op, fwd, operands, attrs, free in self.steps:
            if op == "input":
                shape, dtype = self.types[n]
                v = np.asarray(arrays[fwd])
                if v.shape != shape or v.dtype != dtype:
                    raise GraphcError(
                        f"input {self.graph.input_names[fwd]!r} of graph {self.graph.name!r} "
                        f"expects {dtype}{list(shape)}, got {v.dtype}{list(v.shape)}"
                    )
                env[n] = v
            elif op == "const":
                env[n] = fwd
            else:
                try:
                    with np.errstate(all="ignore"):
                        v = fwd(*[env[o] for o in operands], **attrs)
                except Exception as e:
                    raise GraphcError(f"interpreting {describe(self.graph, n)} failed: {e}") from e
                env[n] = np.asarray(v)
            if record is not None:
                record[n] = env[n]
            for o in free:
                env.pop(o, None)
        return [env[o] for o in self.outputs]


def interpret(graph: Graph, *arrays: Any) -> list:
    """Run ``graph`` on numpy arrays with each op's numpy forward; returns the outputs."""
    return Program(graph).run(arrays)


def interpret_all(graph: Graph, *arrays: Any) -> dict:
    """Every node's value (for debugging: finding where two runs diverge)."""
    record: dict = {}
    Program(graph).run(arrays, record=record)
    return record
