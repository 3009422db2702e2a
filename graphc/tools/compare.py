"""``graphc.compare``: run one function eagerly and compiled, side by side.

(The module is ``graphc.tools.compare``; its report is ``graphc.tools.report``.)

The two ways of running the same code differ in speed, memory, graph size,
numerics and what they can express at all.  ``compare`` measures each of these
on the caller's own inputs and returns a :class:`ComparisonReport` that prints
as a table and serializes to JSON:

* time per call (medians over repeats; the number of calls per repeat adapts
  so the measurement takes a fraction of a second), the cold first call of the
  compiled function, its compile time (first call minus a warm call) and the
  break-even number of calls after which compiling pays off;
* peak memory: eager's is the ``tracemalloc`` peak during one forward+backward
  call (numpy registers its data allocations with tracemalloc, so this counts
  every array on the tape); compiled's is the planned arena plus the outputs;
* graph sizes: eager's tape, the traced graph (and its gradient nodes), the
  optimized graph and the native kernels;
* numerics: every output and gradient of both modes against a float64 eager
  run; when the compiled side disagrees, the first node of the optimized graph
  whose native value differs from the interpreter;
* a third engine, ONNX Runtime, when the function came from ``graphc.import_onnx``
  or ``graphc.export_onnx`` exists and onnx/onnxruntime are installed: its time per
  forward call and its outputs' agreement (``graphc.tools.onnx_column``);
* when tracing is impossible (``if`` on a value, ``.item()``...), the report
  keeps the eager column and says why, where, and what to do instead.
"""

from __future__ import annotations

import inspect
import math
import os
import re
import statistics
import time
import tracemalloc
import traceback
from typing import Any, Callable, Optional, Sequence

import numpy as np

import eager
from eager.interop import Tensor

from ..pytree import flatten, leaf_paths, unflatten
from ..errors import GraphcError
from ..ir import type_str
from ..tracer import arg_names
from .report import ComparisonReport

# Largest normwise relative error (max|x - ref| / max|ref|) still called agreement,
# by dtype of the value.  float32 sums and products of a few thousand terms stay
# well inside 1e-4; float64 against the float64 reference is exact up to rounding.
TOLERANCE = {"float16": 1e-2, "float32": 1e-4, "float64": 1e-9}

MEMORY_NOTE = (
    "eager peak = tracemalloc peak during one forward+backward call (numpy "
    "reports its array allocations to tracemalloc, so this covers every tensor "
    "alive on the tape); compiled peak = planned arena bytes + output bytes"
)


# ---------------------------------------------------------------------------
# measurement helpers


def _measure(call: Callable, repeat: Optional[int], warmup: int, budget: float) -> tuple:
    """(median seconds per call, calls per repeat, repeats): calls are batched so the
    whole measurement takes about ``budget`` seconds."""
    for _ in range(max(warmup, 1)):
        t0 = time.perf_counter()
        call()
        one = time.perf_counter() - t0
    one = max(one, 1e-7)
    reps = repeat if repeat else max(3, min(9, int(budget / one)))
    number = max(1, min(100_000, int(budget / (reps * one))))
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(number):
            call()
        samples.append((time.perf_counter() - t0) / number)
    return statistics.median(samples), number, reps


def _errors(x: np.ndarray, ref: np.ndarray) -> tuple:
    """(max abs error, normwise relative error) of ``x`` against ``ref``."""
    x = np.asarray(x, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if x.shape != ref.shape:
        return float("inf"), float("inf")
    if x.size == 0:
        return 0.0, 0.0
    with np.errstate(invalid="ignore"):
        diff = np.abs(x - ref)
    both_nan = np.isnan(x) & np.isnan(ref)
    diff = np.where(both_nan, 0.0, diff)
    diff = np.where(np.isnan(diff), np.inf, diff)
    ab = float(np.max(diff))
    scale = float(np.max(np.abs(np.where(np.isfinite(ref), ref, 0.0))))
    return ab, (ab / scale if scale > 0 else ab)


def _as_array(v: Any) -> np.ndarray:
    if isinstance(v, Tensor):
        return np.array(v.detach().numpy())
    return np.array(v)


def _tape_nodes(out: Any) -> int:
    """Operation nodes on the eager tape reachable from ``out`` (leaves not counted)."""
    from eager.interop import AccumulateGrad

    root = out.grad_fn if isinstance(out, Tensor) else None
    if root is None:
        return 0
    seen = {root}
    stack = [root]
    while stack:
        node = stack.pop()
        for nxt, _ in node.next_functions:
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return sum(1 for n in seen if not isinstance(n, AccumulateGrad))


def _error_info(exc: BaseException, fn: Callable) -> dict:
    """Type, message, argument, user source line and suggested fix of a compile failure."""
    msg = str(exc)
    info = {
        "type": type(exc).__name__,
        "message": msg,
        "argument": None,
        "line": None,
        "source": None,
        "fix": None,
    }
    m = re.search(r"depends on arguments? (.+?), which", msg)
    if m:
        info["argument"] = m.group(1)
    m = re.search(r"Instead: (.*)$", msg, re.S)
    if m:
        info["fix"] = m.group(1).strip()
    # the innermost frame in user code (outside eager/ and graphc/)
    pkg_dirs = (
        os.path.dirname(os.path.abspath(eager.__file__)) + os.sep,
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
    )
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not os.path.abspath(f.filename).startswith(pkg_dirs)
    ]
    code = getattr(fn, "__code__", None)
    if code is not None:
        own = [f for f in frames if f.filename == code.co_filename]
        frames = own or frames
    if frames:
        f = frames[-1]
        info["line"] = f"{f.filename}:{f.lineno}"
        info["source"] = (f.line or "").strip() or None
    else:
        m = re.search(r" at (\S+:\d+)", msg)
        if m:
            info["line"] = m.group(1)
    return info


# ---------------------------------------------------------------------------
# compare


class _Inputs:
    """The caller's arguments split into array leaves (by argument) and static values."""

    def __init__(self, fn: Callable, args: tuple) -> None:
        self.names = arg_names(fn, len(args))
        self.trees = []  # per argument: (treedef, [leaf or None for arrays], paths)
        self.arrays = []  # per argument: list of (leaf index, np.ndarray)
        for i, a in enumerate(args):
            leaves, td = flatten(a)
            paths = leaf_paths(td, self.names[i])
            arrs = []
            for k, x in enumerate(leaves):
                if isinstance(x, (Tensor, np.ndarray, np.generic)):
                    arrs.append((k, _as_array(x)))
            self.trees.append((td, leaves, paths))
            self.arrays.append(arrs)

    def float_args(self) -> list:
        """Positions of arguments whose leaves are all floating-point arrays."""
        out = []
        for i, ((td, leaves, _), arrs) in enumerate(zip(self.trees, self.arrays)):
            if arrs and len(arrs) == len(leaves) and all(a.dtype.kind == "f" for _, a in arrs):
                out.append(i)
        return out

    def build(self, make: Callable[[np.ndarray, int], Any]) -> tuple:
        """The arguments with each array leaf replaced by ``make(array, arg position)``."""
        args = []
        for i, ((td, leaves, _), arrs) in enumerate(zip(self.trees, self.arrays)):
            new = list(leaves)
            for k, a in arrs:
                new[k] = make(a, i)
            args.append(unflatten(td, new))
        return tuple(args)

    def array_leaves(self, args: tuple) -> list:
        """(path, value) of every array leaf of ``args`` (built by ``build``)."""
        out = []
        for a, (_, _, paths), arrs in zip(args, self.trees, self.arrays):
            leaves = flatten(a)[0]
            out.extend((paths[k], leaves[k]) for k, _ in arrs)
        return out

    def signature(self, fname: str) -> str:
        parts = []
        for name, (td, leaves, paths), arrs in zip(self.names, self.trees, self.arrays):
            if td.kind == "leaf" and arrs:
                parts.append(f"{name}: {type_str(arrs[0][1].shape, arrs[0][1].dtype)}")
            elif td.kind == "leaf":
                parts.append(f"{name}={leaves[0]!r}")
            else:
                parts.append(f"{name}: {td!r}")
        return f"{fname}({', '.join(parts)})"

    def grad_names(self, positions: list) -> list:
        out = []
        for i in positions:
            out.extend(self.trees[i][2])
        return out


class _State:
    """What ``fn`` reaches by name and a call may change (module parameters and buffers,
    closed-over tensors, their ``.grad``, ``eager.optim`` optimizers' state and groups):
    snapshotted once, restored between compare's runs (eager, float64 reference,
    compiled, timing), so that each run starts from the same model and optimizer and
    compare leaves them as it found them."""

    def __init__(self, fn: Callable, args: tuple) -> None:
        from ..capture import Captured, LrCaptured, OptCaptured, find

        found = find(fn, args)
        self.opts = [oc for oc in found.values() if isinstance(oc, OptCaptured)]
        state_ids = {
            id(v)
            for oc in self.opts
            for st in oc.opt.state.values()
            for v in st.values()
            if isinstance(v, Tensor)
        }
        self.tensors = [
            (c.name, c.tensor, np.array(c.tensor.detach().numpy()), self._grad(c.tensor))
            for c in found.values()
            if isinstance(c, Captured)
            and not isinstance(c, LrCaptured)
            and id(c.tensor) not in state_ids
        ]
        self.opt_saved = [
            (
                oc,
                {
                    p: {
                        k: (v, np.array(v.detach().numpy())) if isinstance(v, Tensor) else v
                        for k, v in st.items()
                    }
                    for p, st in oc.opt.state.items()
                },
                [{k: v for k, v in g.items() if k != "params"} for g in oc.opt.param_groups],
            )
            for oc in self.opts
        ]

    @staticmethod
    def _grad(t: Tensor) -> Any:
        g = t.grad
        return None if g is None else (g, np.array(g.detach().numpy()))

    def __bool__(self) -> bool:
        return bool(self.tensors or self.opts)

    def grads_changed(self) -> bool:
        """Whether a call set or changed the ``.grad`` of a tensor it reaches by name (it
        called ``backward()``: a training step; a buffer updated by a forward, as batch
        norm's running statistics, is not one)."""
        for _, t, _arr, g in self.tensors:
            now = t.grad
            if (g is None) != (now is None) or (g is not None and now is not g[0]):
                return True
            if g is not None and not np.array_equal(now.detach().numpy(), g[1], equal_nan=True):
                return True
        return False

    def updates(self) -> list:
        """(name, array) of every tensor, .grad and optimizer state tensor a call changed."""
        out = []
        for name, t, arr, g in self.tensors:
            now = t.detach().numpy()
            if not np.array_equal(now, arr, equal_nan=True):
                out.append((f"{name} (updated)", np.array(now)))
            if t.grad is not None and (
                g is None or not np.array_equal(t.grad.detach().numpy(), g[1], equal_nan=True)
            ):
                out.append((f"{name}.grad", np.array(t.grad.detach().numpy())))
        for oc in self.opts:
            for gi, pi, cap in oc.params:
                for k, v in (oc.opt.state.get(cap.tensor) or {}).items():
                    if isinstance(v, Tensor):
                        out.append((f"{oc.name}.state[{cap.name}][{k!r}]", np.array(v.numpy())))
        return out

    def restore(self) -> None:
        """Put every snapshotted value back (in place: the same tensor objects)."""
        with eager.no_grad():
            for _, t, arr, g in self.tensors:
                _copy_into(t, arr)
                if g is None:
                    if t.grad is not None:
                        t.grad = None
                else:
                    _copy_into(g[0], g[1])
                    if t.grad is not g[0]:
                        t.grad = g[0]
            for oc, st, groups in self.opt_saved:
                opt = oc.opt
                opt.state.clear()
                for p, entries in st.items():
                    new = {}
                    for k, v in entries.items():
                        if isinstance(v, tuple):
                            _copy_into(v[0], v[1])
                            v = v[0]
                        new[k] = v
                    opt.state[p] = new
                for g, saved in zip(opt.param_groups, groups):
                    g.update(saved)


def _copy_into(t: Tensor, arr: np.ndarray) -> None:
    """``t``'s values set to ``arr`` in place (left alone when equal: a read-only view a
    function closes over, never written, is never written here either)."""
    if not np.array_equal(t.detach().numpy(), arr, equal_nan=True):
        t.copy_(eager.from_numpy(np.array(arr, copy=True)))


def _leaf_tensors(args: tuple) -> list:
    return [x for x in flatten(args)[0] if isinstance(x, Tensor) and x.requires_grad]


def _tensor_maker(track: set, cast: Optional[np.dtype] = None) -> Callable:
    """Array -> fresh eager Tensor; floats of tracked arguments require grad."""

    def make(a: np.ndarray, i: int) -> Tensor:
        if cast is not None and a.dtype.kind == "f":
            a = a.astype(cast)
        t = eager.from_numpy(np.array(a, copy=True))
        if i in track and a.dtype.kind == "f":
            t.requires_grad_(True)
        return t

    return make


def _first(out: Any) -> Any:
    return out if isinstance(out, Tensor) else flatten(out)[0][0]


class _EagerRun:
    """Outputs, gradients, tape size and peak memory of one eager call.

    A function that calls ``backward()`` itself (a training step) is a *step*: its
    ``.grad`` and in-place updates are its results, so they are compared too, and
    timed calls leave ``.grad`` alone as a training loop would.
    """

    def __init__(
        self,
        fn: Callable,
        inputs: _Inputs,
        grads: bool,
        grad_pos: list,
        track: set,
        cast: Optional[np.dtype] = None,
        measure_memory: bool = False,
        state: Optional[_State] = None,
    ) -> None:
        self.args = inputs.build(_tensor_maker(track, cast))
        self.leaves = _leaf_tensors(self.args)
        self.step = False
        self.fn, self.grads = fn, grads
        self.grad_tensors = [x for i in grad_pos for x in flatten(self.args[i])[0]]
        t0 = time.perf_counter()
        out = fn(*self.args)
        self.tape_nodes = _tape_nodes(_first(out))
        called_backward = any(t.grad is not None for t in self.leaves) or bool(
            state and state.grads_changed()
        )
        if grads and called_backward:
            raise _CallsBackward()
        if grads:
            self._backward(out)
        self.first_call_s = time.perf_counter() - t0
        self.out_is_tensor = isinstance(out, Tensor)
        self.outputs = [_as_array(v) for v in flatten(out)[0]]
        self.gradients = [
            np.zeros(t.shape, t.numpy().dtype) if t.grad is None else _as_array(t.grad)
            for t in self.grad_tensors
        ]
        self.step = not grads and called_backward
        self.updated = _updated(inputs, self.args) + (state.updates() if state else [])
        if measure_memory:  # after the checked first call, so errors come from there
            self.peak_bytes = self._peak()

    def _backward(self, out: Any) -> None:
        first = _first(out)
        if not isinstance(first, Tensor) or first.numel() != 1 or not first.is_floating_point():
            raise ValueError(
                f"graphc.compare(grads=True): the first output of {self.fn.__name__} must be a "
                f"floating-point scalar tensor to differentiate, got "
                f"{type(first).__name__}{list(getattr(first, 'shape', []))}; pass "
                "grads=False to compare values only"
            )
        if first.requires_grad:
            first.backward()

    def call(self) -> None:
        if not self.step:
            for t in self.leaves:
                t.grad = None
        out = self.fn(*self.args)
        if self.grads:
            first = _first(out)
            if first.requires_grad:
                first.backward()

    def _peak(self) -> int:
        started = not tracemalloc.is_tracing()
        if started:
            tracemalloc.start()
        try:
            for t in self.leaves:
                t.grad = None
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            self.call()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            if started:
                tracemalloc.stop()
        for t in self.leaves:
            t.grad = None
        return max(0, peak - base)


def compare(
    fn: Callable,
    *args: Any,
    grads: bool = True,
    argnums: Optional[Sequence[int]] = None,
    repeat: Optional[int] = None,
    warmup: int = 3,
    budget: float = 0.25,
) -> ComparisonReport:
    """Run ``fn(*args)`` eagerly and compiled on the same inputs and compare the two.

    ``args`` are numpy arrays or eager Tensors (nested tuples/lists/dicts of them),
    and Python scalars, which both sides treat as constants.  Eager gets Tensors
    with ``requires_grad=True`` on floating-point inputs; with ``grads`` it calls
    ``backward()`` on the first (scalar) output, and the compiled side compiles
    ``graphc.value_and_grad`` of ``fn`` w.r.t. every argument made of float arrays
    (or only the arguments in ``argnums``, which are then the only ones eager tracks).
    A function from ``graphc.import_onnx`` (or any function, when ``graphc.export_onnx``
    exists and onnx/onnxruntime are installed) also gets an ONNX Runtime column: time
    per forward call and agreement of its outputs (``report.onnxruntime``).
    ``repeat`` fixes the number of timing repeats (default: adaptive); ``budget``
    is the target seconds of timed calls per mode.
    """
    if not callable(fn):
        raise TypeError(f"graphc.compare expects a callable, got {type(fn).__name__}")
    from ..api import CompiledFunction

    if isinstance(fn, CompiledFunction):  # compare the Python function it compiles
        fn = fn.__wrapped__
    name = getattr(fn, "__name__", type(fn).__name__)
    inputs = _Inputs(fn, args)
    track = _tracked(inputs, argnums)
    grad_pos = sorted(track) if grads else []
    notes = [MEMORY_NOTE]
    if grads and not grad_pos:
        notes.append(
            "no argument is made of floating-point arrays: nothing to differentiate, values only"
        )
        grads = False

    state = _State(fn, args)
    try:
        return _compare(
            fn, name, inputs, grads, grad_pos, track, notes, state, repeat, warmup, budget
        )
    finally:
        if state:  # compare leaves the model and optimizer as it found them
            state.restore()


class _CallsBackward(Exception):
    """The function called backward() itself: a training step, compared with grads=False."""


def _compare(
    fn: Callable,
    name: str,
    inputs: _Inputs,
    grads: bool,
    grad_pos: list,
    track: set,
    notes: list,
    state: _State,
    repeat: Optional[int],
    warmup: int,
    budget: float,
) -> ComparisonReport:
    try:
        ev, ref = _eager_runs(fn, inputs, grads, grad_pos, track, notes, state)
    except _CallsBackward:
        if state:
            state.restore()
        grads, grad_pos = False, []  # the step's .grad are its results (noted below)
        ev, ref = _eager_runs(fn, inputs, grads, grad_pos, track, notes, state)
    e_time, e_number, reps = _measure(ev.call, repeat, warmup, budget)
    if state:  # the timed calls stepped the model: the compiled side starts where eager did
        state.restore()
    eager_col = {
        "time_per_call_s": e_time,
        "first_call_s": ev.first_call_s,
        "peak_bytes": ev.peak_bytes,
        "tape_nodes": ev.tape_nodes,
    }
    if ev.step:
        notes.append(
            f"{name} calls backward() itself: it is compared as a training step "
            "(inputs are eager Tensors on both sides; .grad and in-place updates after "
            "the first call are compared as values)"
        )

    comp = _CompiledRun(fn, inputs, ev, grads, grad_pos, track, state)
    compiled_col = comp.measure(reps, warmup, budget) if comp.error is None else None
    rows, all_agree = _agreement(inputs, grad_pos, ev, ref, comp)
    divergence = None
    if comp.error is None and not all_agree:
        divergence = _divergence(comp.cf, comp.args)
    speedup, break_even = _payoff(e_time, compiled_col)
    ort_col, ort_error = None, None
    if ev.step:
        from .onnx_column import step_note

        ort_error = step_note(fn)
    else:
        from .onnx_column import COLUMN_NOTE, onnxruntime_column

        ort_col, ort_error = onnxruntime_column(
            fn,
            [a for arrs in inputs.arrays for _, a in arrs],
            ref.outputs,
            ev.outputs,
            lambda call: _measure(call, reps, warmup, budget),
            _errors,
            TOLERANCE,
            example_args=inputs.build(lambda a, i: a.copy()),
        )
        if ort_col is not None:
            notes.append(COLUMN_NOTE)
    return ComparisonReport(
        function=name,
        signature=inputs.signature(name),
        grads=grads,
        eager=eager_col,
        mode="training step" if ev.step else "value and gradients" if grads else "value",
        compiled=compiled_col,
        compiled_error=comp.error,
        speedup=speedup,
        break_even_calls=break_even,
        agreement=rows,
        all_agree=all_agree if comp.error is None else None,
        divergence=divergence,
        onnxruntime=ort_col,
        onnxruntime_error=ort_error,
        timing={
            "repeat": reps,
            "warmup": warmup,
            "eager_number": e_number,
            "compiled_number": comp.number,
        },
        notes=notes,
    )


def _tracked(inputs: _Inputs, argnums: Optional[Sequence[int]]) -> set:
    """Positions of the arguments eager tracks (requires_grad): ``argnums``, checked to
    be arguments made of float arrays, or all of those."""
    floats = inputs.float_args()
    if argnums is None:
        return set(floats)
    argnums = [argnums] if isinstance(argnums, int) else [int(a) for a in argnums]
    for a in argnums:
        if a not in floats:
            raise ValueError(
                f"graphc.compare: argnums {a} is not an argument made of "
                f"floating-point arrays (those are positions {floats})"
            )
    return set(argnums)


def _eager_runs(
    fn: Callable,
    inputs: _Inputs,
    grads: bool,
    grad_pos: list,
    track: set,
    notes: list,
    state: Optional[_State] = None,
) -> tuple:
    """The eager run (with its peak memory) and the float64 reference run, each from the
    snapshotted model and optimizer state (restored after each)."""
    try:
        ev = _EagerRun(fn, inputs, grads, grad_pos, track, measure_memory=True, state=state)
    finally:
        if state:
            state.restore()
    try:
        ref = _EagerRun(fn, inputs, grads, grad_pos, track, cast=np.dtype(np.float64), state=state)
    except _CallsBackward:
        raise
    except Exception as exc:  # e.g. code that mixes dtypes and breaks in float64
        ref = ev
        notes.append(
            f"the float64 reference run failed ({type(exc).__name__}: {exc}); errors "
            "are measured against the eager run instead"
        )
    finally:
        if state:
            state.restore()
    return ev, ref


class _CompiledRun:
    """The compiled side: its cold calls, outputs, gradients and in-place updates, or
    why it could not compile (``error``, from ``_error_info``)."""

    def __init__(
        self,
        fn: Callable,
        inputs: _Inputs,
        ev: _EagerRun,
        grads: bool,
        grad_pos: list,
        track: set,
        state: Optional[_State] = None,
    ) -> None:
        # arrays in, or for a step the same kind of Tensors eager got
        self.args = cargs = inputs.build(
            _tensor_maker(track) if ev.step else (lambda a, i: a.copy())
        )
        self.cf = self.error = self.outs = self.grads = self.updated = self.number = None
        try:
            from ..api import compile as _compile

            target = _compiled_target(fn, grads, grad_pos, ev.out_is_tensor)
            # the first call's native code too: the comparison is of the code a compiled
            # step runs (an optimizer's first step would otherwise be interpreted)
            self.cf = cf = _compile(target, interpret_first_step=False)
            t0 = time.perf_counter()
            res = cf(*cargs)
            first = time.perf_counter() - t0
            self.outs, self.grads = _split_compiled(res, grads, ev.out_is_tensor)
            self.updated = _updated(inputs, cargs) + (state.updates() if state else [])
            # a call that creates .grad changes the next call's signature: keep calling
            # (cold) while calls still trace, so compile time covers every signature a
            # loop meets
            n_cold = 1
            while n_cold < 4:
                traces = cf.cache_info().traces
                t0 = time.perf_counter()
                cf(*cargs)
                dt = time.perf_counter() - t0
                if cf.cache_info().traces == traces:
                    break
                first += dt
                n_cold += 1
            self.first, self.n_cold = first, n_cold
        except GraphcError as exc:
            self.error = _error_info(exc, fn)

    def measure(self, reps: int, warmup: int, budget: float) -> dict:
        """The compiled column of the report: time per call, compile time, memory and
        graph sizes."""
        cf, cargs = self.cf, self.args
        c_time, self.number, _ = _measure(lambda: cf(*cargs), reps, warmup, budget)
        st = cf.stats(*cargs)
        traced = cf.graph(*cargs)
        out_bytes = sum(np.asarray(o).nbytes for o in self.outs + self.grads)
        return {
            "time_per_call_s": c_time,
            "first_call_s": self.first,
            "compile_s": max(self.first - self.n_cold * c_time, 0.0),
            "cold_calls": self.n_cold,
            "peak_bytes": int(st.get("arena_bytes", 0)) + int(out_bytes),
            "arena_bytes": int(st.get("arena_bytes", 0)),
            "output_bytes": int(out_bytes),
            "traced_nodes": st["traced_nodes"],
            "gradient_nodes": sum(
                1 for _, d in traced.nx.nodes(data=True) if d.get("role") == "backward"
            ),
            "optimized_nodes": st["optimized_nodes"],
            "kernels": st.get("kernels", 0),
            "loop_kernels": st.get("loop_kernels", 0),
            "fused_nodes": st.get("fused_nodes", 0),
            "traces": cf.cache_info().traces,
        }


def _agreement(
    inputs: _Inputs, grad_pos: list, ev: _EagerRun, ref: _EagerRun, comp: _CompiledRun
) -> tuple:
    """(one row per output, gradient and in-place update: the errors of eager and compiled
    against the float64 reference, whether compiled agrees; do all agree)."""
    c_outs, c_grads = comp.outs, comp.grads
    out_names = (
        ["output"] if len(ev.outputs) == 1 else [f"output[{k}]" for k in range(len(ev.outputs))]
    )
    values = [
        (n, e, r, None if c_outs is None else c_outs[k])
        for k, (n, e, r) in enumerate(zip(out_names, ev.outputs, ref.outputs))
    ]
    gnames = [f"grad {p}" for p in inputs.grad_names(grad_pos)]
    values += [
        (n, e, r, None if c_grads is None else c_grads[k])
        for k, (n, e, r) in enumerate(zip(gnames, ev.gradients, ref.gradients))
    ]
    if ev.step:
        c_upd = dict(comp.updated) if c_outs is not None else {}
        r_upd = dict(ref.updated)
        values += [(p, e, r_upd[p], c_upd.get(p)) for p, e in ev.updated if p in r_upd]
    rows = []
    all_agree = True
    for nm, e, r, c in values:
        ea, er = _errors(e, r)
        row = {
            "name": nm,
            "type": type_str(e.shape, e.dtype),
            "eager_abs": ea,
            "eager_rel": er,
            "compiled_abs": None,
            "compiled_rel": None,
            "ok": None,
        }
        if c is not None:
            ca, cr = _errors(c, r)
            tol = TOLERANCE.get(np.asarray(c).dtype.name, 1e-4)
            ok = bool(
                cr <= tol or ca <= 4 * ea + 1e-12 or (e.dtype.kind != "f" and np.array_equal(c, e))
            )
            row.update(compiled_abs=ca, compiled_rel=cr, ok=ok)
            all_agree = all_agree and ok
        rows.append(row)
    return rows, all_agree


def _divergence(cf: Any, cargs: tuple) -> str:
    """The first node of the optimized graph whose native value differs from the
    interpreter's, for a compiled function that disagrees with eager."""
    try:
        from .debug import first_divergence
        from ..api import _arrays

        key, dyn = cf._signature(cargs)
        entry = cf._entry_for(cargs)
        if entry.trace.captured or entry.trace.randoms:
            entry, dyn = cf._with_captured(entry, cargs, dyn)
        opt = entry.stages["optimized"]
        return (
            first_divergence(opt, _arrays(dyn, entry.trace.in_specs))
            or "no single node differs from the interpreter (the difference is in rounding "
            "order, not in one node)"
        )
    except Exception as exc:  # the search itself failed: report, do not hide the table
        return f"could not locate ({type(exc).__name__}: {exc})"


def _payoff(e_time: float, compiled_col: Optional[dict]) -> tuple:
    """(speedup, calls after which compiling paid off or "never"); Nones without a
    compiled column."""
    if compiled_col is None:
        return None, None
    c_time = compiled_col["time_per_call_s"]
    speedup = e_time / c_time if c_time > 0 else None
    gain = e_time - c_time
    return speedup, math.ceil(compiled_col["compile_s"] / gain) if gain > 0 else "never"


def _updated(inputs: _Inputs, args: tuple) -> list:
    """(name, array) of each input changed in place by a call, and of each .grad it set."""
    out = []
    orig = [a for arrs in inputs.arrays for _, a in arrs]
    for (path, v), a0 in zip(inputs.array_leaves(args), orig):
        now = _as_array(v)
        if now.shape != a0.shape or not np.array_equal(
            now.astype(a0.dtype), a0, equal_nan=now.dtype.kind == "f"
        ):
            out.append((f"{path} (updated)", now))
        if isinstance(v, Tensor) and v.grad is not None:
            out.append((f"{path}.grad", _as_array(v.grad)))
    return out


def _compiled_target(fn: Callable, grads: bool, grad_pos: list, single: bool) -> Callable:
    """``fn`` itself, or value_and_grad of it with fn's parameter names (so the IR names
    inputs as the user did).  A function returning more than one tensor keeps its whole
    output as aux and is differentiated through its first leaf."""
    if not grads:
        return fn
    from ..transforms import value_and_grad

    if single:
        inner = fn
    else:

        def inner(*a):
            out = fn(*a)
            return _first(out), out

        inner.__name__ = getattr(fn, "__name__", "fn")
    target = value_and_grad(inner, argnums=tuple(grad_pos), has_aux=not single)
    try:
        target.__signature__ = inspect.signature(fn)
    except (TypeError, ValueError):
        pass
    return target


def _split_compiled(res: Any, grads: bool, single: bool) -> tuple:
    """(output arrays, gradient arrays) from what the compiled target returned."""
    if not grads:
        return [_as_array(v) for v in flatten(res)[0]], []
    value, g = res
    if not single:
        value = value[1]  # (value, aux): aux is the whole output
    outs = [_as_array(v) for v in flatten(value)[0]]
    return outs, [_as_array(v) for v in flatten(g)[0]]


__all__ = ["compare", "ComparisonReport"]
