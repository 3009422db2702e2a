"""Tracing a Python function: flatten its arguments into graph inputs (and lift the
eager tensors it reaches by name, graphc.capture), run it on Tracers, and record its
outputs, the arguments it wrote and the ``.grad`` it set as graph outputs."""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional, Sequence

import numpy as np

from eager.interop import data_of, grad_of, requires_grad_of, version_of
from eager.interop import PINNED, TRACING, Tensor, set_grad, set_requires_grad_flag

from ..pytree import flatten, leaf_paths, unflatten
from ..errors import SignatureError, TracerError
from ..ir import Graph, type_str
from ..layout import c_layout
from .arguments import _SUPPORTED, LeafSpec, _sanitize, arg_names, classify_leaf
from .context import TraceContext
from .tensor import Tracer, _check_live

#: Held while a trace has its tracers in the user's modules, optimizers, closure cells and
#: globals (:func:`_call`), and by every CompiledFunction call that reads or writes such
#: state on its general path: another thread must not see (or trace with, or write
#: through) the tracers of a trace in progress.  Always taken before a
#: CompiledFunction's own lock, never after it (graphc.api), so the two cannot deadlock.
STATE_LOCK = threading.RLock()


class TraceResult:
    """What tracing produced: the graph plus how to map Python values in and out."""

    def __init__(
        self,
        graph,
        in_specs,
        out_tree,
        out_static,
        mutated_inputs,
        tensor_io,
        grad_writes=(),
        layout_inputs=(),
        captured=(),
        randoms=(),
    ):
        self.graph = graph
        self.in_specs = in_specs  # LeafSpec per flattened dynamic leaf
        self.out_tree = out_tree
        self.out_static = out_static  # {leaf index: python value} for non-array outputs
        self.mutated_inputs = mutated_inputs  # [(input index, graph output index)]
        self.tensor_io = tensor_io
        self.grad_writes = list(grad_writes)  # [(input index, graph output index)] for .grad
        self.layout_inputs = list(layout_inputs)  # input indices that must be C-contiguous
        # eager tensors the function reads by name (graphc.capture): graph inputs after the
        # arguments' (their LeafSpecs end in_specs), read again at every call
        self.captured = list(captured)
        # random draws (graphc.runtime.rng): one last input, the generator state, filled
        # by each call with a fresh counter range of rng_count elements
        self.randoms = list(randoms)
        self.rng_count = 0
        self.n_args = len(in_specs) - len(self.captured) - (1 if self.randoms else 0)
        # dynamic leaves written in place (their memory is compared with the others')
        self.written = tuple(i for i, _ in self.mutated_inputs)
        # grad mode while tracing (it decides which values have a gradient history: a call
        # in the other mode needs a trace of its own), and per user output whether it has one
        self.grad_on = True
        self.grad_clears: list = []  # input indices whose .grad it set to None
        # input indices of grad_writes whose .grad at the end is a NEW tensor (not the one
        # the argument had: zero_grad(set_to_none=True) or ``p.grad = None`` before
        # backward(), or no .grad before): the call sets a new .grad, as eager does, and
        # never writes into the old one (a reference held to it keeps its values)
        self.grad_new: frozenset = frozenset()
        # [(input index, graph output index)]: the .grad a call began with, written in
        # place and then replaced: its final values, written back into its buffer
        self.grad_old_writes: list = []
        # [(input index, source input index, written)]: the final .grad is the object
        # another argument's .grad was when the call began (``b.grad = a.grad``, a swap):
        # that object is set, its buffer given the final values when ``written``
        self.grad_moves: list = []
        self.grads_used = False  # lifted tensors' .grad (set or not) matters
        # [(Captured, had a .grad)]: lifted tensors the trace dropped as unused while it
        # looked at .grad (grads_used): an optimizer skips a parameter whose .grad is
        # None, so a .grad that appears (or goes) later must re-trace, as for kept ones
        self.grad_guards: list = []
        self.out_rg: list = []
        self.all_out_rg = True
        # optimizers the function steps (graphc.capture.OptCaptured): each call checks
        # their guard(args) (None: the trace fits), then sets the state the step created
        # or rebound: [(holder(args) -> state dict of a parameter, key, graph output)] and
        # [(holder, key, python value)]
        self.opt_guards: list = []
        self.state_writes: list = []
        self.state_sets: list = []


def _graph_input_pos(specs: list, idx: int) -> int:
    """Graph input position of dynamic leaf ``idx`` (a leaf with .grad takes two inputs)."""
    return idx + sum(1 for s in specs[:idx] if s.has_grad)


def _unique_name(path: str, used_names: set) -> str:
    """An identifier for the graph input of ``path`` that no other input has (``x``,
    ``x_2``, ...); it is added to ``used_names``."""
    nm = base = _sanitize(path)
    k = 1
    while nm in used_names:
        k += 1
        nm = f"{base}_{k}"
    used_names.add(nm)
    return nm


def _add_input(ctx: TraceContext, nm: str, path: str, spec: LeafSpec, lay) -> Tracer:
    """The graph input named ``nm`` and its tracer for one dynamic leaf; for a tensor that
    requires grad, the tracer is a leaf whose .grad backward() inside fills, and a .grad
    the tensor has now is a second input (``spec.grad_node``) that it accumulates into
    (a tensor without requires_grad keeps a .grad it has as that input too: a frozen
    parameter's stale .grad, which eager code may read)."""
    g = ctx.graph
    nid = g.add_input(nm, spec.shape, spec.dtype)
    ctx.input_paths[nid] = path
    t = Tracer(ctx, nid, spec.shape, spec.dtype, lay)
    set_requires_grad_flag(t, spec.requires_grad)
    if spec.requires_grad:
        ctx.leaves.append(t)
    elif spec.has_grad:
        ctx.grad_holders.append(t)
    if spec.has_grad:  # (also without requires_grad: a frozen tensor keeps its .grad)
        gid = g.add_input(f"{nm}_grad", spec.shape, spec.dtype)
        ctx.input_paths[gid] = f"{path}.grad"
        gt = Tracer(ctx, gid, spec.shape, spec.dtype, c_layout(spec.shape))
        set_grad(t, gt)
        ctx.initial_grads[id(t)] = gt  # _record_grads: is the final .grad this object?
        spec.grad_node = gid
    return t


class _Arguments:
    """The arguments of one traced call, bound to graph inputs."""

    def __init__(self) -> None:
        self.call_args: list = []  # what the function is called with: tracers for the leaves
        self.specs: list = []  # LeafSpec of each dynamic leaf
        self.inputs: list = []  # the input tracer of each dynamic leaf
        self.watched: list = []  # (eager Tensor argument, path, version, .grad) before tracing
        self.arg_leaves: list = []  # (argument leaf, path, LeafSpec): re-checked after tracing
        self.used_names: set = set()
        self.tensor_io = False  # an eager Tensor among them


def _bind_arguments(
    ctx: TraceContext, fn: Callable, args: tuple, static_argnums: Sequence[int]
) -> _Arguments:
    """A graph input and tracer for every dynamic leaf of ``args``, in flattened order;
    static arguments and static leaves are passed as they are."""
    names = arg_names(fn, len(args))
    bound = _Arguments()
    for i, a in enumerate(args):
        if i in static_argnums:
            bound.call_args.append(a)
            continue
        leaves, td = flatten(a)
        paths = leaf_paths(td, names[i])
        new_leaves = [_bind_leaf(ctx, bound, leaf, path) for leaf, path in zip(leaves, paths)]
        bound.call_args.append(unflatten(td, new_leaves))
    return bound


def _bind_leaf(ctx: TraceContext, bound: _Arguments, leaf: Any, path: str) -> Any:
    """The tracer of one argument leaf (the leaf itself when it is static)."""
    _, spec = classify_leaf(leaf, path)
    if spec.kind == "static":
        return leaf
    bound.tensor_io = bound.tensor_io or spec.kind == "tensor"
    t = _add_input(ctx, _unique_name(path, bound.used_names), path, spec, c_layout(spec.shape))
    ctx._input_of[id(t)] = len(bound.specs)
    bound.specs.append(spec)
    bound.inputs.append(t)
    if spec.kind == "tensor":
        bound.watched.append(
            (leaf, f"argument {path}", version_of(leaf)[0], grad_of(leaf), requires_grad_of(leaf))
        )
        if leaf.grad_fn is not None:
            ctx.nonleaf_args.add(t._node)
    bound.arg_leaves.append((leaf, path, spec))
    return t


def _lift(
    ctx: TraceContext,
    fn: Callable,
    args: tuple,
    specs: list,
    inputs: list,
    watched: list,
    used_names: set,
) -> list:
    """A graph input and tracer for every eager tensor ``fn`` reaches by name (see
    graphc.capture), after the arguments' inputs: [(Captured, Tracer)]."""
    from ..capture import find as find_captured

    from ..capture import OptCaptured

    out = []
    for cap in find_captured(fn, args).values():
        if isinstance(cap, OptCaptured):
            ctx.optimizers.append(cap)
            continue
        t = cap.tensor
        d = data_of(t).dtype
        if d not in _SUPPORTED:
            continue  # stays a constant if it is used at all
        nm = _unique_name(cap.name, used_names)
        shape = data_of(t).shape
        spec = LeafSpec(
            "tensor",
            shape,
            d,
            requires_grad=requires_grad_of(t),
            has_grad=grad_of(t) is not None,
        )
        tr = _add_input(
            ctx, nm, cap.name, spec, c_layout(shape) if data_of(t).flags.c_contiguous else None
        )
        ctx._input_of[id(tr)] = len(specs)
        specs.append(spec)
        inputs.append(tr)
        watched.append((t, cap.name, version_of(t)[0], grad_of(t), requires_grad_of(t)))
        ctx.lifted_nodes[id(tr)] = tr._node
        out.append((cap, tr))
    return out


def _prune_lifted(ctx: TraceContext, lifted: list, n_args: int, specs: list) -> tuple:
    """Drop the lifted inputs the trace never read nor wrote; renumber the rest.
    Returns the Captured of the kept ones, in input order, and the grad guards of the
    dropped ones (``TraceResult.grad_guards``)."""
    g = ctx.graph
    keep, kept_caps = [], []
    for i, (cap, t) in enumerate(lifted):
        nid = ctx.lifted_nodes[id(t)]
        idx = n_args + i
        grad_node = specs[idx].grad_node
        grad_changed = (grad_of(t) is not None) != (grad_node is not None) or (
            grad_node is not None
            and (not isinstance(grad_of(t), Tracer) or grad_of(t).node != grad_node)
        )
        if g.nx.out_degree(nid) or nid in g.outputs or idx in ctx.mutations or grad_changed:
            keep.append((i, nid, t))
            kept_caps.append(cap)
    drop, grad_guards = [], []
    kept = {k for k, _, _ in keep}
    for i, (cap, t) in enumerate(lifted):
        spec = specs[n_args + i]
        if i not in kept:
            drop.append(ctx.lifted_nodes[id(t)])
            if ctx.grads_used and cap.place is not None:  # (before the .grad is unset)
                grad_guards.append((cap, spec.grad_node is not None))
        if spec.grad_node is not None and (i not in kept or not ctx.grads_used):
            drop.append(spec.grad_node)  # a .grad the function never looked at
            spec.has_grad, spec.grad_node = False, None
            set_grad(t, None)
            ctx.initial_grads.pop(id(t), None)
    for nid in drop:
        g.nx.remove_node(nid)
        g.inputs.remove(nid)
        ctx.input_paths.pop(nid, None)
        ctx.closed_rg.pop(nid, None)
    remap = {n_args + i: n_args + j for j, (i, _, _) in enumerate(keep)}
    kept_specs = [specs[n_args + i] for i, _, _ in keep]
    del specs[n_args:]
    specs.extend(kept_specs)
    for _, t in lifted:
        old = ctx._input_of.pop(id(t), None)
        if old in remap:
            ctx._input_of[id(t)] = remap[old]
    ctx.mutations = {
        remap.get(k, k): v for k, v in ctx.mutations.items() if k < n_args or k in remap
    }
    return kept_caps, grad_guards


def _name_the_module(e: Exception, fn: Callable, args: tuple) -> None:
    """Add the module the error came through (``in module self.layers.2 (Linear)``) to
    its message, for a model the user compiles."""
    from eager.interop import CALLS
    from ..capture import module_path

    if not CALLS.tracing or not e.args or not isinstance(e.args[0], str):
        return
    mod = CALLS.tracing[0]
    path = module_path(fn, args, mod)
    if path is not None and "[in module " not in e.args[0]:
        e.args = (f"{e.args[0]}  [in module {path} ({type(mod).__name__})]",) + e.args[1:]


def _global_random_states() -> tuple:
    import random

    return random.getstate(), np.random.get_state(legacy=False)


def _warn_if_global_random_used(fname: str, py_state: Any, np_state: Any) -> None:
    """Python's ``random`` and numpy's global ``np.random`` run while tracing: their
    numbers are frozen into the graph as constants, the same at every call."""
    import warnings

    now_py, now_np = _global_random_states()
    moved = []
    if now_py != py_state:
        moved.append("Python's random module")
    a, b = now_np["state"], np_state["state"]
    if (
        a["pos"] != b["pos"]
        or not np.array_equal(a["key"], b["key"])
        or now_np["has_gauss"] != np_state["has_gauss"]
    ):
        moved.append("numpy's np.random")
    if moved:
        warnings.warn(
            f"graphc: {fname} drew numbers from {' and '.join(moved)} while it was traced; "
            "those values are constants of the compiled code, the same at every call. Use "
            "eager.randn / eager.rand / eager.randint (drawn at every call) instead.",
            RuntimeWarning,
            stacklevel=_user_level(),
        )


def _warn_if_parameters_frozen(ctx: TraceContext, fname: str) -> None:
    """Eager tensors that require grad (parameters, most likely) which the function
    reached without graphc finding them by name are constants of the compiled code: an
    update to them (an optimizer step outside the function) is not seen by later calls.
    A backward() into them is refused (graphc.autodiff); anything else is said here."""
    if not ctx.closed_rg:
        return
    import warnings

    srcs = sorted(set(ctx.closed_rg.values()))
    more = f" and {len(srcs) - 3} more" if len(srcs) > 3 else ""
    warnings.warn(
        f"graphc: {fname} read {len(ctx.closed_rg)} tensor(s) that require grad (used at "
        f"{', '.join(srcs[:3])}{more}) which graphc did not find by name, so their values "
        "are constants of the compiled code: later updates to them are not seen. Reach "
        "them through an argument, a module, the method's self, a closure, a global, a "
        "default, or a list/dict of those (docs/limitations.md).",
        RuntimeWarning,
        stacklevel=_user_level(),
    )


def _user_level() -> int:
    """``stacklevel`` of a warning issued in this module pointing at the first frame
    outside graphc: the user's line that called the compiled function."""
    import os
    import sys

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # graphc/
    level, f = 2, sys._getframe(2)  # (the warning's own caller is frame 1)
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(here + os.sep):
        level, f = level + 1, f.f_back
    return level


def _check_arguments_unchanged(fname: str, arg_leaves: list) -> None:
    """The graph is built for each argument's shape, dtype and buffer as they were when
    tracing started; a function that changed one of them behind the trace (numpy's
    ``a.shape = ...``, ``a.resize(...)``, a swapped ``.data``) would give native code a
    buffer it was not compiled for."""
    for leaf, path, spec in arg_leaves:
        arr = data_of(leaf) if isinstance(leaf, Tensor) else leaf
        if type(arr) is not np.ndarray:
            arr = np.asarray(arr)
        if arr.shape != spec.shape or arr.dtype.newbyteorder("=") != spec.dtype:
            raise TracerError(
                f"{fname}: argument {path} changed from {type_str(spec.shape, spec.dtype)} to "
                f"{type_str(arr.shape, arr.dtype.newbyteorder('='))} while it was being traced "
                "(its shape, dtype or buffer was replaced). Change arguments outside the "
                "compiled function."
            )


def _check_untouched(fname: str, watched: list) -> None:
    """Tracing sees tracers, never the eager tensors passed in: an object that holds those
    tensors itself (an optimizer, a module) and updates them while tracing would update them
    once, outside the graph, and never again."""
    for t, path, version, grad, rg in watched:
        if requires_grad_of(t) != rg:
            raise TracerError(
                f"{fname}: {path} had requires_grad changed while tracing, on the eager "
                "Tensor rather than on the traced argument; the compiled graph was traced for "
                f"requires_grad={rg}. Set it before calling the compiled function."
            )
        if version_of(t)[0] != version or grad_of(t) is not grad:
            what = "its data" if version_of(t)[0] != version else "its .grad"
            raise TracerError(
                f"{fname}: {path} had {what} changed directly while tracing, on the "
                "eager Tensor rather than on the traced argument (e.g. by an optimizer or module "
                "that holds the eager tensor). The compiled graph would not contain that update. "
                "Update the argument the function receives (`w -= lr * w.grad` under "
                "eager.no_grad()), or call the optimizer outside the compiled function."
            )


def _alias_inputs(ctx: TraceContext, groups: tuple, by_idx: list) -> list:
    """Make the input tracers of arguments that share memory views of one buffer tracer.

    The buffer starts as the members scattered into it (they agree where they overlap, being
    the same memory); each member is a gather of it, so writes through any member update the
    buffer and every other member re-reads it.  Returns [(leaf index, tracer)]."""
    g = ctx.graph
    out = []
    for n, dtype, members in groups:
        dtype = np.dtype(dtype)
        zero = g.add_const(np.zeros((), dtype))
        node = g.add_node("expand", (zero,), {"shape": (n,)}, shape=(n,), dtype=dtype)
        root = Tracer(ctx, node, (n,), dtype, c_layout((n,)))
        gathers = []
        for idx, off, strides in members:
            t = by_idx[idx]
            flat = np.full(t._meta_shape, off, dtype=np.int64)
            for d, (size, st) in enumerate(zip(t._meta_shape, strides)):
                shape = [1] * len(t._meta_shape)
                shape[d] = size
                flat = flat + (np.arange(size, dtype=np.int64) * st).reshape(shape)
            ix = g.add_const(flat)
            gathers.append(ix)
            spec = (("t", 0),)
            node = g.add_node(
                "setitem", (node, t._node, ix), {"index": spec}, shape=(n,), dtype=dtype
            )
        root._node = node
        for (idx, off, strides), ix in zip(members, gathers):
            t = by_idx[idx]
            t._view = (root, "getitem", {"index": (("t", 0),)}, None, (ix,))
            t._stor = root._stor
            t._lay = (off, tuple(strides))
            out.append((idx, t))
    return out


def trace_flat(
    fn: Callable,
    args: tuple,
    static_argnums: Sequence[int] = (),
    name: Optional[str] = None,
    aliases: tuple = (),
) -> TraceResult:
    """Trace ``fn(*args)``; dynamic leaves become graph inputs in flattened order.

    ``aliases``: arguments that share memory, as groups ``(n, dtype, ((leaf index, offset,
    strides), ...))`` in elements of one buffer of ``n`` elements (see ``alias_groups``):
    their tracers become views of that buffer, so a write through one is seen by all."""
    fname = name or getattr(fn, "__name__", "fn")
    fname = _sanitize(fname) if not fname.isidentifier() else fname
    g = Graph(fname)
    ctx = TraceContext(g, fname)
    bound = _bind_arguments(ctx, fn, args, static_argnums)
    specs, watched = bound.specs, bound.watched
    members = _alias_inputs(ctx, aliases, bound.inputs)
    n_args = len(specs)
    ctx.arg_tensors = {
        id(leaf): f"argument {path}"
        for leaf, path, _ in bound.arg_leaves
        if isinstance(leaf, Tensor)
    }
    lifted = _lift(ctx, fn, args, specs, bound.inputs, watched, bound.used_names)
    py_state, np_state = _global_random_states()
    try:
        out = _call(ctx, fn, args, bound.call_args, lifted, watched, fname)
        _check_untouched(fname, watched)
        _check_arguments_unchanged(fname, bound.arg_leaves)
        _warn_if_global_random_used(fname, py_state, np_state)
        _warn_if_parameters_frozen(ctx, fname)
        out_tree, out_static, out_rg = _record_outputs(ctx, out, fname)
        _check_lifted_requires_grad(fname, lifted)
        captured, grad_guards = _prune_lifted(ctx, lifted, n_args, specs)
        if ctx.rng_state is not None:  # the generator state: the last input
            specs.append(LeafSpec("array", (2,), np.dtype(np.int64)))
        mutated = _record_writes(ctx, specs, members)
        grad_writes, grad_clears, grad_new = _record_grads(ctx, specs, fname)
        state_writes, state_sets = _record_optimizers(ctx, fname)
        layout_inputs = _layout_inputs(ctx, specs)
    finally:
        ctx.active = False
    res = TraceResult(
        g,
        specs,
        out_tree,
        out_static,
        mutated,
        bound.tensor_io or bool(captured),
        grad_writes,
        layout_inputs,
        captured,
        ctx.randoms,
    )
    res.grad_on = ctx.grad_on
    res.rng_count = ctx.rng_count
    res.grad_clears = grad_clears
    res.grad_new = grad_new
    res.grad_old_writes = ctx.grad_old_writes
    res.grad_moves = ctx.grad_moves
    res.grads_used = ctx.grads_used
    res.grad_guards = grad_guards
    res.out_rg = out_rg
    res.all_out_rg = all(out_rg)
    res.opt_guards = [oc.guard for oc in ctx.optimizers]
    res.state_writes = state_writes
    res.state_sets = state_sets
    return res


def _call(
    ctx: TraceContext,
    fn: Callable,
    args: tuple,
    call_args: list,
    lifted: list,
    watched: list,
    fname: str,
) -> Any:
    """``fn(*call_args)`` on the tracers.  Meanwhile the function reads each lifted tensor's
    tracer where it reads the tensor, eager's factories (eager.randn, eager.zeros & co.)
    give values of this trace, and the eager tensors passed in are pinned (eager refuses
    to write them); all of that is undone afterwards."""
    pinned = [w[0] for w in watched if id(w[0]) not in PINNED]
    for t, path, *_ in watched:
        PINNED.setdefault(id(t), (t, f"{path} while graphc traces {fname}"))
    swapped = []
    from eager.interop import CALLS

    outer_tracer, outer_calls = TRACING.tracer, CALLS.tracing
    installed: list = ctx.installed
    STATE_LOCK.acquire()
    try:
        for cap, t in lifted:  # the function reads the tracer where it reads the
            if cap.place is not None:  # tensor: self.weight.t() is traced
                for place in [cap.place] + cap.also:
                    holder, key = place(args)
                    swapped.append((holder, key, holder[key]))
                    holder[key] = t
        _install_optimizers(ctx, lifted, installed, fname)
        TRACING.tracer = ctx  # eager.randn, eager.zeros & co. give traced values
        CALLS.tracing = []  # which module an error came through
        return fn(*call_args)
    except Exception as e:
        _name_the_module(e, fn, args)
        raise
    finally:
        CALLS.tracing = outer_calls
        TRACING.tracer = outer_tracer
        _uninstall_optimizers(installed)
        for holder, key, old in reversed(swapped):
            holder[key] = old
        for t in pinned:
            PINNED.pop(id(t), None)
        STATE_LOCK.release()


class _Installed:
    """An optimizer while traced: what it held before (restored after) and the state the
    traced step saw and left."""

    __slots__ = (
        "oc",
        "groups",
        "params",
        "state",
        "trace_state",
        "before",
        "lrs",
        "n_after",
        "tracers",
    )

    def __init__(self, oc: Any) -> None:
        self.oc = oc
        opt = oc.opt
        self.groups = list(opt.param_groups)  # the group dicts
        self.params = [g["params"] for g in self.groups]  # their lists of eager tensors
        self.state = opt.state
        self.trace_state: dict = {}  # tracer of a parameter -> its state dict while traced
        self.before: dict = {}  # id(tracer) -> (tracer, the state dict as the step found it)
        self.lrs = [g["lr"] for g in self.groups]  # the lr tracers (after: still there?)
        self.n_after = len(self.groups)  # how many groups the function left
        self.tracers: list = []  # per group, the tracers of its parameters


def _install_optimizers(ctx: TraceContext, lifted: list, installed: list, fname: str) -> None:
    """Each optimizer the function reaches holds tracers while traced: its param groups'
    parameters and lr, and a state dict keyed by the parameters' tracers whose values are
    the lifted state tensors' tracers; its step() then runs as tensor ops on them."""
    tracer_of = {id(cap.tensor): t for cap, t in lifted}
    for oc in ctx.optimizers:
        opt = oc.opt
        inst = _Installed(oc)
        eager_params = [[] for _ in inst.groups]  # the slots may hold tracers already
        for gi, _, cap in oc.params:
            eager_params[gi].append(cap.tensor)
        for gi, (g, params) in enumerate(zip(inst.groups, eager_params)):
            new = []
            for pi, p in enumerate(params):
                t = tracer_of.get(id(p))
                if id(p) in ctx.arg_tensors:
                    raise TracerError(
                        f"{fname}: {ctx.arg_tensors[id(p)]} is passed as an argument and is "
                        f"also a parameter {oc.name} updates "
                        f"({oc.name}.param_groups[{gi}]['params'][{pi}]); a function that "
                        "steps an optimizer must read its parameters by name (a module, a "
                        "global or closure variable), not receive them as arguments"
                    )
                if t is None:
                    raise TracerError(
                        f"{fname}: {oc.name} updates a parameter of dtype "
                        f"{data_of(p).dtype} ({oc.name}.param_groups[{gi}]['params'][{pi}]), "
                        "which graphc does not compile; step that optimizer outside"
                    )
                new.append(t)
                st = inst.state.get(p)
                if st is not None:
                    for k, v in st.items():
                        if isinstance(v, Tensor) and not isinstance(v, Tracer):
                            raise TracerError(
                                f"{fname}: {oc.name}.state[...][{k!r}] is a tensor of dtype "
                                f"{data_of(v).dtype}, which graphc does not compile"
                            )
                    inst.trace_state[t] = dict(st)
                    inst.before[id(t)] = (t, dict(st))
            g["params"] = new
            inst.tracers.append(new)
        installed.append(inst)
        opt.state = inst.trace_state
        opt._traced_by = ctx


def _uninstall_optimizers(installed: list) -> None:
    for inst in reversed(installed):
        opt = inst.oc.opt
        opt.__dict__.pop("_traced_by", None)
        inst.trace_state = opt.state
        opt.state = inst.state
        inst.n_after = len(opt.param_groups)
        inst.lrs = [g["lr"] is lr for g, lr in zip(inst.groups, inst.lrs)]  # still its tracer
        for g, params in zip(inst.groups, inst.params):
            g["params"] = params
        del opt.param_groups[len(inst.groups) :]  # groups added while traced: refused after


def _record_outputs(ctx: TraceContext, out: Any, fname: str) -> tuple:
    """Make the function's array results graph outputs.  Returns (output tree,
    {leaf index: python value} for the other results, per graph output whether eager
    gives it a grad_fn)."""
    g = ctx.graph
    out_leaves, out_tree = flatten(out)
    out_static = {}
    out_rg = []
    for k, leaf in enumerate(out_leaves):
        if isinstance(leaf, Tracer):
            if leaf._ctx is not ctx:
                _check_live(leaf, "returning a value")
                raise TracerError(f"{fname} returned a tracer of another trace")
            g.outputs.append(leaf.node)
            out_rg.append(bool(requires_grad_of(leaf)))
        elif isinstance(leaf, Tensor):
            g.outputs.append(ctx.const(data_of(leaf)))
            out_rg.append(False)
        elif isinstance(leaf, (np.ndarray, np.generic)):
            g.outputs.append(ctx.const(np.asarray(leaf)))
            out_rg.append(False)
        elif isinstance(leaf, (bool, int, float)) or leaf is None:
            out_static[k] = leaf
        else:
            raise SignatureError(
                f"{fname} returned an unsupported value of type "
                f"{type(leaf).__name__} (output leaf {k})"
            )
    return out_tree, out_static, out_rg


def _check_lifted_requires_grad(fname: str, lifted: list) -> None:
    """A lifted tensor's requires_grad is the eager tensor's; the trace must not change it."""
    for cap, t in lifted:
        if requires_grad_of(t) != requires_grad_of(cap.tensor):
            raise TracerError(
                f"{fname}: requires_grad of {cap.name} changed while tracing (the "
                "function set it, or wrote a value that requires grad into it); graphc "
                "does not write that back to the eager tensor. Set requires_grad before "
                "calling the compiled function."
            )


def _record_writes(ctx: TraceContext, specs: list, members: list) -> list:
    """Graph outputs for the arguments written in place (also through another argument's
    memory): [(input index, graph output index)]."""
    g = ctx.graph
    for idx, t in members:  # written through another argument's memory
        if t._gen != 0 or t._stor.gen != 0:
            ctx.mutations[idx] = t
    mutated = []
    for idx, t in sorted(ctx.mutations.items()):
        if t.node != g.inputs[_graph_input_pos(specs, idx)]:
            mutated.append((idx, len(g.outputs)))
            g.outputs.append(t.node)
    return mutated


def _record_grads(ctx: TraceContext, specs: list, fname: str) -> tuple:
    """Graph outputs for the .grad the function set on arguments that require grad (or
    that do not but had a .grad):
    ([(input index, graph output index)], input indices whose .grad it set to None,
    frozenset of the written input indices whose final .grad is a new tensor object, not
    the one the argument had when the call began: ``TraceResult.grad_new``).  A .grad the
    call began with, written in place and then replaced, is a graph output of its own
    (``TraceResult.grad_old_writes``, left in ``ctx.grad_old_writes``): eager leaves that
    tensor with the values written into it, which a reference held to it sees."""
    g = ctx.graph
    grad_writes, grad_clears, grad_new = [], [], set()
    grad_old_writes: list = []
    grad_moves: list = []
    holders = [t for t in ctx.grad_holders if not any(t is u for u in ctx.leaves)]
    owner = {}  # id(initial .grad tracer) -> the input index whose .grad it was
    for t in ctx.leaves + holders:
        i, g0 = ctx._input_of.get(id(t)), ctx.initial_grads.get(id(t))
        if i is not None and g0 is not None:
            owner[id(g0)] = i
    for t in ctx.leaves + holders:
        idx = ctx._input_of.get(id(t))
        gr = grad_of(t)
        if idx is None or not (specs[idx].requires_grad or specs[idx].has_grad):
            continue  # .grad of a leaf made inside the function stays inside it
        g0 = ctx.initial_grads.get(id(t))
        if g0 is not None and gr is not g0 and g0.node != specs[idx].grad_node:
            # the .grad the call began with was written in place, then replaced (set to
            # None, or a new tensor by backward()): its buffer gets its final values too
            grad_old_writes.append((idx, len(g.outputs)))
            g.outputs.append(g0.node)
        if gr is None:
            if specs[idx].has_grad:  # set to None (zero_grad()): so is the tensor's
                grad_clears.append(idx)
            continue
        if not isinstance(gr, Tracer) or gr._ctx is not ctx:
            raise TracerError(
                f"{fname}: .grad of argument {ctx.input_paths[t.node]} was set "
                "to something that is not a traced value"
            )
        initial = specs[idx].grad_node
        if gr.node != initial:
            grad_writes.append((idx, len(g.outputs)))
            g.outputs.append(gr.node)
            if gr is not ctx.initial_grads.get(id(t)):
                grad_new.add(idx)
                src = owner.get(id(gr))
                if src is not None:  # another argument's .grad object: b.grad = a.grad
                    grad_moves.append((idx, src, gr.node != specs[src].grad_node))
    ctx.grad_old_writes = grad_old_writes
    ctx.grad_moves = grad_moves
    return grad_writes, grad_clears, frozenset(grad_new)


def _state_holder(oc: Any, gi: int, pi: int) -> Callable:
    """``holder(args)``: the state dict of parameter ``pi`` of group ``gi`` (made if none)."""

    def holder(args: tuple) -> dict:
        opt = oc.current(args)
        return opt.state.setdefault(opt.param_groups[gi]["params"][pi], {})

    return holder


def _record_optimizers(ctx: TraceContext, fname: str) -> tuple:
    """Graph outputs for the optimizer state the traced steps created or rebound (the
    state written in place is a lifted input written back like any other):
    ([(holder, key, graph output)], [(holder, key, python value)])."""
    g = ctx.graph
    writes: list = []
    sets: list = []
    for inst in ctx.installed:
        oc = inst.oc
        if inst.n_after != len(inst.groups):
            raise TracerError(
                f"{fname}: {oc.name}.add_param_group() was called inside the compiled "
                "function; add param groups outside it (the next call re-traces)"
            )
        for gi, kept in enumerate(inst.lrs):
            if not kept:
                raise TracerError(
                    f"{fname}: {oc.name}.param_groups[{gi}]['lr'] was set inside the compiled "
                    "function; set it (or call lr_scheduler.step()) outside: each call reads it"
                )
        pos = {id(t): (gi, pi) for gi, ts in enumerate(inst.tracers) for pi, t in enumerate(ts)}
        for t, st in inst.trace_state.items():
            where = pos.get(id(t))
            if where is None:
                raise TracerError(
                    f"{fname}: {oc.name}.state got an entry for something that is not one of "
                    "its parameters while traced; graphc cannot write that back"
                )
            gi, pi = where
            _, old = inst.before.get(id(t), (None, {}))
            pname = oc.param_name(gi, pi)
            for k in old:
                if k not in st:
                    raise TracerError(
                        f"{fname}: {oc.name}.state[{pname}][{k!r}] was deleted while traced; "
                        "graphc cannot write that back"
                    )
            holder = _state_holder(oc, gi, pi)
            for k, v in st.items():
                if k in old and v is old[k]:
                    continue  # the lifted tensor (written in place: a mutated input)
                if isinstance(v, Tracer) and v._ctx is ctx:
                    writes.append((holder, k, len(g.outputs)))
                    g.outputs.append(v.node)
                elif isinstance(v, Tensor):
                    raise TracerError(
                        f"{fname}: {oc.name}.state[{pname}][{k!r}] was set to an eager tensor "
                        "while traced; set state tensors with tensor ops on the parameters"
                    )
                else:
                    sets.append((holder, k, v))
    return writes, sets


def _layout_inputs(ctx: TraceContext, specs: list) -> list:
    """Arguments whose C layout decided a reshape's view-or-copy that a write then made
    observable: the call checks them (eager would decide differently on others)."""
    return (
        list(range(len(specs) - (ctx.rng_state is not None)))
        if any(s1.gen > g1 or s2.gen > g2 for _, s1, g1, s2, g2 in ctx.layout_uses)
        else []
    )


def trace(fn: Callable, *example_args: Any, static_argnums: Sequence[int] = ()) -> Graph:
    """Trace ``fn`` on example arguments and return the verified Graph."""
    from ..ir import verify

    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    res = trace_flat(fn, example_args, tuple(static_argnums))
    verify(res.graph, "trace")
    return res.graph
