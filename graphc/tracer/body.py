"""Tracing a loop body into a graph of its own, nested in the trace that calls the loop.

The body is traced once, on tracers of a :class:`BodyContext` whose parent is the
enclosing trace.  Values of an enclosing trace that the body reads (closed-over
weights, a module's parameters) are *captured*: each becomes an input of the body
graph, and the loop node passes the outer value in (the ``consts`` of ``scan``).  An
op whose operands all come from enclosing traces is recorded there, once, outside the
loop.  The body may not write an enclosing trace's values (the loop would run the
write once per iteration, eager once per call): that raises, as do random draws.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from eager.interop import TRACING as FACTORY_TRACING
from eager.interop import Tensor, data_of, set_requires_grad_flag

from ..errors import TracerError
from ..ir import Graph
from ..layout import c_layout
from .context import TraceContext
from .source import user_src
from .tensor import Tracer


class BodyContext(TraceContext):
    """The trace of a loop body, nested in ``parent``."""

    def __init__(
        self, graph: Graph, fn_name: str, parent: TraceContext, what: str = "the loop body"
    ) -> None:
        super().__init__(graph, fn_name)
        self.what = what  # for messages: "the loop body", "the function vmap maps"
        self.parent = parent
        self.depth = parent.depth + 1
        self.grad_on = parent.grad_on
        self.captured: list = []  # the enclosing trace's tracers, one per capture input
        self.declared: set = set()  # ids of the input tracers of the declared leaves
        self._capture_of: dict = {}  # node of the parent trace -> input node here

    def capture(self, t: Tracer, src: str) -> int:
        if t._ctx is self:
            return t.node
        c: Optional[TraceContext] = self
        while c is not None and c is not t._ctx:
            c = c.parent
        parent = self.parent
        if c is None or parent is None:
            return TraceContext.capture(self, t, src)
        if parent is not t._ctx:  # captured by each body between its trace and this
            t = _tracer_of(parent, parent.capture(t, src))
        nid = self._capture_of.get(t.node)
        if nid is None:
            names = parent.graph.nx.nodes[t.node]
            name = names["attrs"]["name"] if names["op"] == "input" else f"captured{t.node}"
            nid = self.graph.add_input(name, t._meta_shape, t._meta_dtype)
            self.input_paths[nid] = f"a value of {parent.fn_name} read by the body"
            self._capture_of[t.node] = nid
            self.captured.append(t)
        return nid

    def random(self, kind: str, shape: tuple, dtype: Any, params: dict) -> Tracer:
        raise TracerError(
            f"random draw ({kind}) inside {self.what} {self.fn_name} (at {user_src(3)}): "
            "graphc traces it once, so the draws eager makes per iteration or per example "
            "cannot be reproduced. Draw the numbers outside (one slice per step or example) "
            "and pass them in (as xs, or as a mapped argument)."
        )


def _tracer_of(ctx: TraceContext, nid: int) -> Tracer:
    d = ctx.graph.nx.nodes[nid]
    return Tracer(ctx, nid, d["shape"], d["dtype"], c_layout(d["shape"]))


def trace_body(
    parent: TraceContext,
    name: str,
    fn: Callable,
    in_specs: Sequence[tuple],
    leaves_of: Callable[[Any], list],
    role: str = "forward",
) -> tuple:
    """Trace ``fn`` as a loop body nested in ``parent``.

    ``in_specs`` gives one (path, shape, dtype, requires_grad) per input leaf, in order;
    ``fn`` is called with the list of input tracers (their ``_ctx`` is the body's trace)
    and returns its result, which
    ``leaves_of`` flattens into output leaves (tracers of this body, tracers of an
    enclosing trace, eager tensors or arrays).  Returns (graph, the enclosing trace's
    captured tracers, the raw result); the graph's inputs are the captures first, then
    the leaves of ``in_specs``, and its outputs are the result's leaves.
    """
    g = Graph(name)
    ctx = BodyContext(g, name, parent)
    ctx.role = role
    ctx.by = parent.by
    ins = []
    for path, shape, dtype, rg in in_specs:
        nid = g.add_input(_ident(path), shape, dtype)
        ctx.input_paths[nid] = path
        t = Tracer(ctx, nid, shape, dtype, c_layout(shape))
        if rg:
            set_requires_grad_flag(t, True)
        ins.append(t)
        ctx.declared.add(id(t))
    prev_inner, prev_tracer = parent.inner, FACTORY_TRACING.tracer
    parent.inner = ctx
    FACTORY_TRACING.tracer = ctx  # type: ignore[assignment]  # eager types it as None
    try:
        result = fn(ins)
        outs = []
        for leaf in leaves_of(result):
            if isinstance(leaf, Tracer):
                outs.append(ctx.capture(leaf, "the body's result"))
            else:
                outs.append(ctx.const(np.asarray(_data(leaf))))
    finally:
        parent.inner = prev_inner
        FACTORY_TRACING.tracer = prev_tracer
        ctx.active = False
    # inputs: captures first (the loop's consts), then the declared leaves
    declared = list(g.inputs)
    caps = [ctx._capture_of[t.node] for t in ctx.captured]
    g.inputs = caps + [i for i in declared if i not in set(caps)]
    g.input_names = [g.nx.nodes[i]["attrs"]["name"] for i in g.inputs]
    for pos, i in enumerate(g.inputs):
        g.nx.nodes[i]["attrs"]["index"] = pos
    g.outputs = outs
    return g, list(ctx.captured), result


def _data(x: Any) -> Any:
    return data_of(x) if isinstance(x, Tensor) else x


def _ident(path: str) -> str:
    s = "".join(c if c.isalnum() else "_" for c in path).strip("_") or "x"
    return s if not s[0].isdigit() else "x" + s
