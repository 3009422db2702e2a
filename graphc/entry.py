"""One cached signature of a compiled function (``_Entry``): its trace, the executable
that runs it, and the call made for it once, so a call on a known signature does as
little as possible: plain arrays go straight to native code (``_fast_call``) and the
outputs are rebuilt into the user's structure by one prepared function
(``_output_builder``)."""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from eager.interop import tensor_from_array

from .tracer import TraceResult


class _Entry:
    """One cached signature: its trace and the executable that runs it."""

    # stamp: last use, for the process-wide engine LRU (graphc.runtime.cache)
    __slots__ = (
        "trace",
        "run",
        "stages",
        "key",
        "fast",
        "build_out",
        "stamp",
        "__weakref__",
        "call",
        "mem_ok",
        "sibling",
    )

    def __init__(self, trace: TraceResult, run: Callable, stages: dict, key: tuple) -> None:
        self.trace = trace
        self.run = run
        self.stages = stages
        self.key = key
        # the fast call path: plain native-endian ndarrays in, plain outputs, nothing to
        # write back -- decided once per signature so the call does no extra checks
        self.fast = (
            not trace.tensor_io
            and not trace.mutated_inputs
            and not trace.grad_writes
            and not trace.grad_clears
            and not trace.randoms
            and not trace.layout_inputs
            and all(_plain_array_item(it) for it in key)
        )
        self.build_out = _output_builder(trace)
        self.call = _fast_call(run, self.build_out) if self.fast else None
        exe = getattr(run, "__self__", None)
        if self.call is not None and exe is not None and getattr(exe, "tier", 1) == 0:
            # quick-tier native code (graphc.runtime.native.TIERED): the fast call bound
            # the counting entry; bind the optimized one once the code is upgraded
            exe.on_upgrade(self._rebind_call)
        self.mem_ok = ()  # weakrefs to the arrays of the last call found not to overlap
        self.sibling: Optional["_Entry"] = None  # this signature traced in the other grad mode

    def _rebind_call(self) -> None:
        """Re-bind the fast call path to the executable's current native entry."""
        self.call = _fast_call(self.run, self.build_out)


def _fast_call(run: Callable, build_out: Callable) -> Callable:
    """The whole call for plain arrays, with everything it touches bound locally
    (native executables: one builtin call allocates the outputs and runs the code)."""
    exe = getattr(run, "__self__", None)
    if exe is None or not hasattr(exe, "_native") or exe._inplace:
        return lambda arrays: build_out(run(arrays))
    native, slow = exe._native, exe._slow

    def call(arrays):  # arrays: the tuple of the call's arguments
        outs = native(arrays)
        if outs.__class__ is int:  # a code instead of the outputs (e.g. strided inputs)
            outs = slow(arrays, outs)
        return build_out(outs)

    return call


def _inplace_pairs(tr) -> dict:
    """{graph output: graph input} for in-place updates of arguments and of their .grad
    (the backend writes them straight into the caller's buffers when that is safe)."""
    from .tracer import _graph_input_pos

    specs = tr.in_specs
    pairs = {}
    for idx, out_pos in tr.mutated_inputs:
        pairs[out_pos] = _graph_input_pos(specs, idx)
    for idx, out_pos in tr.grad_writes:
        if specs[idx].has_grad:
            pairs[out_pos] = _graph_input_pos(specs, idx) + 1
    return pairs


def _plain_array_item(item) -> bool:
    """A key item of an exact, native-endian ndarray argument (or a static value)."""
    if isinstance(item, tuple) and item and item[0] in ("static_arg", "S"):
        return True
    return (
        isinstance(item, tuple)
        and len(item) == 3
        and item[0] == "A"
        and isinstance(item[2], np.dtype)
        and item[2].isnative
    )


def _output_builder(tr) -> Callable[[tuple], Any]:
    """A function rebuilding the user's output structure from the tuple of outputs.

    Plain outputs are taken with ``operator.itemgetter``, in C: a tuple of consecutive
    outputs is one slice of the tuple, and a tuple of such items one itemgetter (so
    value_and_grad's ``(value, (g0, g1...))`` is ``itemgetter(0, slice(1, n))``).
    """
    import operator

    make = tensor_from_array if tr.tensor_io else None
    leaves = iter(range(tr.out_tree.num_leaves))
    next_out = [0]  # index of the next array output (leaves are in order)

    def fn(spec):
        return operator.itemgetter(spec[1]) if spec[0] == "item" else spec[1]

    def build(td):
        """("item", int or slice) when the value is ``outs[item]``, else ("fn", f)."""
        if td.kind == "leaf":
            k = next(leaves)
            if k in tr.out_static:
                return "fn", (lambda o, v=tr.out_static[k]: v)
            j = next_out[0]
            next_out[0] += 1
            return ("item", j) if make is None else ("fn", lambda o, j=j: make(o[j]))
        if td.kind == "none":
            return "fn", (lambda o: None)
        kids = [build(c) for c in td.children]
        if td.kind == "tuple":
            items = [k[1] for k in kids if k[0] == "item"]
            if len(items) == len(kids):
                ints = [i for i in items if isinstance(i, int)]
                if items and len(ints) == len(items) and ints == list(range(ints[0], ints[-1] + 1)):
                    return "item", slice(ints[0], ints[-1] + 1)  # a flat tuple: one slice
                if len(items) >= 2:
                    return "fn", operator.itemgetter(*items)
            fs = [fn(k) for k in kids]
            if len(fs) == 2:
                f0, f1 = fs
                return "fn", (lambda o: (f0(o), f1(o)))
            return "fn", (lambda o: tuple([f(o) for f in fs]))
        fs = [fn(k) for k in kids]
        if td.kind == "list":
            return "fn", (lambda o: [f(o) for f in fs])
        if td.kind == "dict":
            keys = td.aux
            return "fn", (lambda o: {k: f(o) for k, f in zip(keys, fs)})
        cls = td.aux  # namedtuple
        return "fn", (lambda o: cls(*[f(o) for f in fs]))

    return fn(build(tr.out_tree))


def _foreign_byte_order(key) -> bool:
    """Does a signature hold an ndarray in non-native byte order (e.g. ``'>f8'``)?

    The graph's inputs are native (the tracer normalizes them) and native code
    reads raw bytes, so such arguments must be converted before the call.
    """
    stack = [key]
    while stack:
        item = stack.pop()
        if not isinstance(item, tuple) or not item:
            continue
        if item[0] in ("S", "static_arg"):
            continue
        if item[0] == "A" and len(item) == 3 and isinstance(item[2], np.dtype):
            if not item[2].isnative:
                return True
            continue
        stack.extend(item)
    return False


def _native_order(run: Callable) -> Callable:
    """Wrap an executable's run: byte-swapped arrays are converted to native order first."""

    def run_native_order(arrays):
        return run([a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("=")) for a in arrays])

    return run_native_order
