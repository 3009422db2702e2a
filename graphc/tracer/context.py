"""The TraceContext: everything one trace records (its graph, inputs, writes, random
draws, leaves) and how new nodes are attributed.  Each trace has its own, so two
threads trace at once without sharing state."""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from eager.interop import GRAD_MODE as _GRAD
from eager.interop import check_size

from ..errors import TooBigError, TracerError
from ..ir import Graph
from ..layout import c_layout
from .source import user_src
from .tensor import Tracer


class TraceContext:
    """One trace in progress: its graph and whether tracers may still be used."""

    def __init__(self, graph: Graph, fn_name: str) -> None:
        self.graph = graph
        self.fn_name = fn_name
        self.active = True
        self.input_paths: dict = {}  # input node id -> readable argument path
        self._consts: dict = {}  # id(array) -> (array, node) to dedupe closed-over arrays
        self.mutations: dict = {}  # input index -> tracer holding its final value
        self._input_of: dict = {}  # id(input tracer) -> flattened input index
        self.leaves: list = []  # input tracers of tensors that require grad
        # input tracers of tensors that do not require grad but have a .grad (frozen)
        self.grad_holders: list = []
        self.closed_rg: dict = {}  # const node -> src: closed-over tensors requiring grad
        self.layout_uses: list = []  # reshapes of argument buffers: see _note_layout_use
        self.lifted_nodes: dict = {}  # id(lifted tracer) -> its input node
        self.randoms: list = []  # (kind, shape, dtype, params) of each random draw
        self.rng_state = None  # tracer of the generator-state input, once drawn
        self.rng_count = 0  # counters (elements) the draws take per call
        # did the function read or write a .grad, or call backward()?  If not, whether a
        # lifted parameter has a .grad does not matter to the trace
        self.grads_used = False
        # id(input tracer) -> the .grad tracer it started with (driver._record_grads)
        self.initial_grads: dict = {}
        self.grad_old_writes: list = []  # driver._record_grads: TraceResult.grad_old_writes
        self.grad_moves: list = []  # driver._record_grads: TraceResult.grad_moves
        self.optimizers: list = []  # graphc.capture.OptCaptured the function reaches
        self.installed: list = []  # those installed while traced (driver._Installed)
        self.arg_tensors: dict = {}  # id(eager tensor argument) -> its path
        self.nonleaf_args: set = set()  # input nodes of arguments that have a grad_fn
        self.where = user_src(3)
        # ops traced under eager.no_grad() inside a function traced with grad enabled give
        # values autodiff must not look through (as eager records no tape for them)
        self.grad_on = _GRAD.enabled
        # how new nodes are attributed, per trace (so threads tracing at once never see
        # each other's): ``role`` "backward" and ``by`` "grad" while graphc.autodiff emits
        # gradient nodes; ``src`` the source line to give them while it replays or
        # differentiates (None: the user's line, found on the stack)
        self.role = "forward"
        self.src: Optional[str] = None
        self.by = "trace"
        # loop bodies (graphc.tracer.body) trace in contexts nested in this one: ``depth``
        # counts the nesting, ``inner`` is the body being traced now (None if none); while
        # one is, this trace's values may be read (captured) but not written
        self.depth = 0
        self.parent: Optional[TraceContext] = None
        self.inner: Optional[TraceContext] = None
        self.scan_saved: dict = {}  # scan node -> its saved carries (graphc.autodiff)

    def capture(self, t: "Tracer", src: str) -> int:
        """The node of this trace that stands for ``t``, a value of an enclosing trace.
        A top-level trace has none: values of another trace cannot be used in it."""
        raise TracerError(
            f"at {src}: a value traced by another (outer) trace was used inside this trace of "
            f"{self.fn_name}; pass it as an argument instead of closing over it"
        )

    def nested_in(self, other: "TraceContext") -> bool:
        """Whether this trace runs inside ``other`` (directly or through nested traces)."""
        c = self.parent
        while c is not None:
            if c is other:
                return True
            c = c.parent
        return False

    def random(self, kind: str, shape: tuple, dtype: Any, params: dict) -> "Tracer":
        """A random draw inside the trace: a ``philox`` node (eager/ops/random.py) of the
        call's generator state, an input the call fills from graphc's stream
        (graphc.runtime.rng) with a fresh counter, so each call draws fresh numbers.
        Each draw takes its own range of counters: ``offset`` is the elements drawn
        before it in the same call."""
        dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in shape)
        check_size(shape, dtype, kind, TooBigError)
        if self.rng_state is None:
            nid = self.graph.add_input("rng_state", (2,), np.dtype(np.int64))
            self.input_paths[nid] = "graphc's random stream (key, counter)"
            self.rng_state = Tracer(self, nid, (2,), np.dtype(np.int64), c_layout((2,)))
        if kind == "integers":
            draw = dtype if dtype in (np.int64, np.int32) else np.dtype(np.int64)
            low, high = int(params["low"]), int(params["high"])
            if not low < high:
                raise RuntimeError(
                    f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}"
                )
        else:
            draw = dtype if dtype in (np.float32, np.float64) else np.dtype(np.float64)
            low, high = 0, 1
        n = math.prod(shape)
        out = self.rng_state._op(
            "philox",
            None,
            dist=kind,
            shape=shape,
            dtype=draw.name,
            low=low,
            high=high,
            offset=self.rng_count,
        )
        self.rng_count += n
        self.randoms.append((kind, shape, dtype.name, dict(params)))
        return out if draw == dtype else out.to(dtype)

    def factory(self, arr: np.ndarray, requires_grad: bool) -> "Tracer":
        """A tensor made by an eager factory while tracing (``eager.zeros`` & co.): a
        constant of the graph, traced so that in-place writes into it are traced."""
        arr = np.asarray(arr)
        nid = self.graph.add_const(arr, src=user_src(3))
        t = Tracer(self, nid, arr.shape, arr.dtype, c_layout(arr.shape))
        if requires_grad:
            t.requires_grad_(True)
        return t

    def const(self, value: Any, src: str = "") -> int:
        if isinstance(value, np.ndarray):
            hit = self._consts.get(id(value))
            if hit is not None and hit[0] is value:
                return hit[1]
            nid = self.graph.add_const(value.copy(), src=src)
            self._consts[id(value)] = (value, nid)
            return nid
        return self.graph.add_const(np.asarray(value), src=src)

    def depends_on(self, nid: int) -> list:
        """Readable paths of the inputs that node ``nid`` depends on (iterative walk)."""
        g = self.graph.nx
        seen, stack, found = {nid}, [nid], []
        while stack:
            n = stack.pop()
            if n in self.input_paths:
                found.append(self.input_paths[n])
            for p in g.predecessors(n):
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
        return sorted(found)
