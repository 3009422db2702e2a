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
from .ir.loops import LOOP_OPS, operand_groups


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
            elif op in LOOP_OPS:
                steps.append((n, op, _loop_runner(d), d["operands"], {}, free))
            elif op == "loop_out":
                j = d["attrs"]["index"]
                steps.append((n, op, lambda res, j=j: res[j], d["operands"], {}, free))
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
                env[n] = v if op in LOOP_OPS else np.asarray(v)
            if record is not None:
                record[n] = env[n]
            for o in free:
                env.pop(o, None)
        return [env[o] for o in self.outputs]


def _loop_runner(d: dict):
    """The numpy semantics of a scan or while node (graphc.ir.loops): a Python loop
    running its body graph's Program; returns the tuple of results."""
    a = d["attrs"]
    groups = {k: list(r) for k, r in operand_groups(d).items()}
    k = a["num_carry"]
    body = Program(a["body"])

    if d["op"] == "scan":
        n, reverse = a["length"], a["reverse"]
        ys_types = [body.types[o] for o in body.outputs[k:]]

        def scan(*vals):
            consts = [vals[i] for i in groups["consts"]]
            carry = [vals[i] for i in groups["carries"]]
            xs = [vals[i] for i in groups["xs"]]
            ys = [np.empty((n,) + s, dt) for s, dt in ys_types]
            for i in reversed(range(n)) if reverse else range(n):
                out = body.run(consts + carry + [x[i] for x in xs])
                carry = [np.array(c) for c in out[:k]]  # never an alias of an input
                for y, v in zip(ys, out[k:]):
                    y[i] = v
            return tuple(np.array(c) for c in carry) + tuple(ys)

        return scan
    cond = Program(a["cond"])

    def while_(*vals):
        cc = [vals[i] for i in groups["cond_consts"]]
        bc = [vals[i] for i in groups["body_consts"]]
        carry = [vals[i] for i in groups["carries"]]
        while bool(cond.run(cc + carry)[0]):
            carry = [np.array(c) for c in body.run(bc + carry)]
        return tuple(np.array(c) for c in carry)

    return while_


def interpret(graph: Graph, *arrays: Any) -> list:
    """Run ``graph`` on numpy arrays with each op's numpy forward; returns the outputs."""
    return Program(graph).run(arrays)


def interpret_all(graph: Graph, *arrays: Any) -> dict:
    """Every node's value (for debugging: finding where two runs diverge)."""
    record: dict = {}
    Program(graph).run(arrays, record=record)
    return record
