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
        "tcall",
        "shared",
        "unread_grads",
        "provisional",
        "interpreted_calls",
    )

    def __init__(
        self,
        trace: TraceResult,
        run: Callable,
        stages: dict,
        key: tuple,
        provisional: Optional[Callable] = None,
    ) -> None:
        self.trace = trace
        # a signature whose trace made optimizer state (an optimizer's first step) runs on
        # the interpreter: ``provisional()`` builds its native executable and run if the
        # entry is ever used again (CompiledFunction._make_native); None once native
        self.provisional = provisional
        self.interpreted_calls = 0
        self.run = run
        self.stages = stages
        self.key = key
        # the fast call path: plain native-endian ndarrays in, plain outputs, nothing to
        # write back -- decided once per signature so the call does no extra checks
        self.fast = (
            provisional is None
            and not trace.tensor_io
            and not trace.mutated_inputs
            and not trace.grad_writes
            and not trace.grad_clears
            and not trace.randoms
            and not trace.grad_guards
            and not trace.layout_inputs
            and all(_plain_array_item(it) for it in key)
        )
        self.build_out = _output_builder(trace)
        # the .grad the step replaces by a new tensor without reading the old one (the
        # memory checks leave these out: nothing writes or reads them)
        self.unread_grads = unread_new_grads(trace)
        self.call = _fast_call(run, self.build_out) if self.fast else None
        exe = getattr(run, "__self__", None)
        if self.call is not None and exe is not None and getattr(exe, "tier", 1) == 0:
            # quick-tier native code (graphc.runtime.native.TIERED): the fast call bound
            # the counting entry; bind the optimized one once the code is upgraded
            exe.on_upgrade(self._rebind_call)
        self.mem_ok = ()  # weakrefs to the arrays of the last call found not to overlap
        self.sibling: Optional["_Entry"] = None  # this signature traced in the other grad mode
        self.shared = _writes_shared_state(trace)
        # the prepared call of a training step on tensors (None: CompiledFunction._run)
        self.tcall = (
            None
            if self.call is not None or provisional is not None
            else (_tensor_call(self) or _step_call(self))
        )

    def go_native(self, exe: Any, run: Callable) -> None:
        """Switch a provisional (interpreted) entry to native code: ``exe`` (a
        NativeExecutable) and its ``run``; the prepared call paths are made again."""
        self.stages["_executable"] = exe
        self.run = run
        self.provisional = None
        self.mem_ok = ()
        self.tcall = _tensor_call(self) or _step_call(self)

    def _rebind_call(self) -> None:
        """Re-bind the fast call path to the executable's current native entry."""
        self.call = _fast_call(self.run, self.build_out)


def _writes_shared_state(tr) -> bool:
    """Does the traced function write state it reads by name (a training step: lifted
    parameters, their ``.grad``, an optimizer's state)?  Such a call runs under
    ``graphc.tracer.driver.STATE_LOCK``: a trace (another thread's first call or
    re-trace, of this or another compiled function) puts tracers into those very modules
    and optimizers while it runs and checks that the tensors it lifted are not written
    meanwhile; a call reading or writing them then would see tracers or break the trace.
    Calls of a function that only reads them (inference) take no lock on their warm
    path; when they see a tracer they wait for the trace and look again
    (``CompiledFunction._with_captured``).  Calls on plain arguments take no lock."""
    if tr.opt_guards:
        return True
    if not tr.captured:
        return False
    n = tr.n_args
    return (
        any(i >= n for i, _ in tr.mutated_inputs)
        or any(i >= n for i, _ in tr.grad_writes)
        or any(i >= n for i in tr.grad_clears)
    )


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
        # a .grad the step replaces by a new tensor (zero_grad(set_to_none=True) before
        # backward) is not written into the old one: a reference held to it keeps its values
        if specs[idx].has_grad and idx not in tr.grad_new:
            pairs[out_pos] = _graph_input_pos(specs, idx) + 1
    return pairs


def unread_new_grads(tr) -> frozenset:
    """Input indices whose ``.grad`` the step replaces by a new tensor (``tr.grad_new``)
    without ever reading the old one (its graph input has no reader: zero_grad() then
    backward()).  The old array is neither read nor written, so the memory checks
    (``CompiledFunction._for_memory``, the prepared calls' identity check) leave it out:
    the new ``.grad`` each call makes must not send the next call down the general path."""
    from .tracer import _graph_input_pos

    g = tr.graph
    out = set()
    outputs = set(g.outputs)
    for idx, _ in tr.grad_writes:
        if idx not in tr.grad_new or not tr.in_specs[idx].has_grad:
            continue
        node = g.inputs[_graph_input_pos(tr.in_specs, idx) + 1]
        if not g.nx.out_degree(node) and node not in outputs:
            out.add(idx)
    return frozenset(out)


def obey_leaf_layout(arr: np.ndarray, leaf: np.ndarray) -> np.ndarray:
    """``arr`` (a new ``.grad``'s values, a fresh array) in the layout eager's engine gives
    a leaf's new ``.grad`` (PyTorch's layout contract, eager.autograd.engine._obeys): the
    strides of the leaf ``leaf`` (its data) when it is dense but not in C order (a
    transposed or permuted parameter), else C order.  ``arr`` itself when it already has
    that layout (every C-ordered parameter: one flag test)."""
    if leaf.flags.c_contiguous or arr.size == 0 or arr.shape != leaf.shape:
        return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
    expect = leaf.itemsize
    for st, n in sorted((st, n) for st, n in zip(leaf.strides, leaf.shape) if n != 1):
        if st != expect:  # not dense: C order
            return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
        expect *= n
    if all(
        a // arr.itemsize == b // leaf.itemsize
        for a, b, n in zip(arr.strides, leaf.strides, arr.shape)
        if n != 1
    ):
        return arr
    out = np.empty_like(leaf, dtype=arr.dtype)  # order K: the dense leaf's strides
    np.copyto(out, arr)
    return out


def owned_outputs(exe) -> Callable[[int], bool]:
    """``owned(k)``: is output ``k`` of executable ``exe`` always a new array that nothing
    else references (the native entry allocates each output, ``PyArray_New``, except the
    ones written over an input, ``exe._inplace``)?  Such an array can become a new
    ``.grad`` (or optimizer state) as it is, without the copy other outputs need (the
    interpreter's may be a constant of the graph or a view of another value)."""
    if exe is None or not hasattr(exe, "_native"):
        return lambda k: False
    inplace = dict(getattr(exe, "_inplace", {}))
    return lambda k: k not in inplace


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


# what a prepared tensor call returns when this call needs the general path instead
SLOW = object()


def _emit_run_and_write_back(L: list, tr, direct: bool, exe: Any = None) -> None:
    """The end of a prepared call (:func:`_tensor_call`, :func:`_step_call`): run the
    code on ``ins``, write the outputs back into the mutated arguments (``a{i}``, data
    ``d{i}``) and their ``.grad`` (``g{i}``, data ``e{i}``), clear the ``.grad`` the step
    clears, and return the outputs with eager's no-grad note."""
    if direct:
        # the native entry refuses to start (returns a code, having written nothing) when
        # an input it would write, or one written back after, is read-only or strided:
        # the general path then checks every write-back target before anything is written
        L.append("    outs = exe._native(ins)")
        L.append("    if outs.__class__ is int:")
        L.append("        return SLOW")
    else:
        written = [f"d{i}" for i, _ in tr.mutated_inputs]
        written += [
            f"e{i}" for i, _ in tr.grad_writes if tr.in_specs[i].has_grad and i not in tr.grad_new
        ]
        if written:  # as the native entry checks: all writeable, or the general path
            cond = " and ".join(f"{w}.flags.writeable" for w in written)
            L.append(f"    if not ({cond}):")
            L.append("        return SLOW")
        L.append("    outs = run(ins)")
    for i, p in tr.mutated_inputs:
        L.append(f"    o = outs[{p}]")
        L.append(f"    if o is not d{i}:")
        L.append(f"        copyto(d{i}, o, casting='same_kind')")
        L.append(f"    version_of(a{i})[0] += 1")
    owned = owned_outputs(exe if direct else None)
    for i, p in tr.grad_writes:
        if tr.in_specs[i].has_grad and i not in tr.grad_new:  # accumulated in place
            L.append(f"    o = outs[{p}]")
            L.append(f"    if o is not e{i}:")
            L.append(f"        copyto(e{i}, o, casting='same_kind')")
            L.append(f"    version_of(g{i})[0] += 1")
        elif owned(p):  # a new .grad: the output array the native entry made for it
            L.append(f"    set_grad(a{i}, make(obey(outs[{p}], d{i})))")
        else:  # a new .grad (no .grad yet, or the step set it to None first)
            L.append(f"    set_grad(a{i}, make(obey(np_array(outs[{p}]), d{i})))")
    for i in tr.grad_clears:
        L.append(f"    set_grad(a{i}, None)")
    n_user = tr.out_tree.num_leaves - len(tr.out_static)
    L.append("    res = build_out(outs)")
    if n_user:
        L.append("    if res.__class__ is Tensor:")
        L.append("        if data_of(res).dtype.kind == 'f':")
        L.append("            NO_GRAD_NOTE[0] = (cf, entry.trace, GRAD_ON, [weakref_ref(res)])")
        L.append("    else:")
        L.append("        note_no_grad(cf, entry.trace, res)")
    L.append("    return res")


def _call_globals(entry: "_Entry", exe) -> dict:
    """The names the code of a prepared call reads (see :func:`_emit_run_and_write_back`)."""
    import weakref

    from eager.interop import (
        GRAD_MODE,
        Tensor,
        data_of,
        grad_of,
        requires_grad_of,
        set_grad,
        version_of,
    )

    from .autograd_bridge import _NO_GRAD_NOTE, _note_no_grad

    return {
        "GRAD_MODE": GRAD_MODE,
        "GRAD_ON": entry.trace.grad_on,
        "SLOW": SLOW,
        "data_of": data_of,
        "grad_of": grad_of,
        "requires_grad_of": requires_grad_of,
        "set_grad": set_grad,
        "version_of": version_of,
        "copyto": np.copyto,
        "np_array": np.array,
        "obey": obey_leaf_layout,
        "make": tensor_from_array,
        "exe": exe,
        "run": entry.run,
        "build_out": entry.build_out,
        "Tensor": Tensor,
        "NO_GRAD_NOTE": _NO_GRAD_NOTE,
        "note_no_grad": _note_no_grad,
        "weakref_ref": weakref.ref,
    }


def _tensor_call(entry: "_Entry") -> Optional[Callable]:
    """The whole call of a signature whose arguments are all eager tensors and whose
    function writes arguments or their ``.grad`` in place (a training step), prepared
    once: ``call(cf, entry, dyn)`` gives the result, or :data:`SLOW` when this call needs
    ``CompiledFunction._run`` (the other grad mode, arrays not seen by the last call's
    memory check, a ``.grad`` that appeared).

    It does what ``_run`` does for such a call, in the same order, as straight-line code
    generated for the signature: the graph inputs (data, then ``.grad`` where traced), the
    memory check's arrays compared with those the last check passed (``mem_ok``: any
    other arrays take the general path, which checks aliasing and layout), the native
    call, the write-back of arguments and of their ``.grad`` with version bumps, ``.grad``
    clears, the outputs and the no-grad note.  None when the signature does not qualify
    (read-by-name tensors, random streams, optimizer state, pytree arguments, a call that
    gives gradients through eager autograd)."""
    tr, key = entry.trace, entry.key
    if (
        not tr.tensor_io
        or tr.captured
        or tr.randoms
        or tr.grad_guards
        or tr.opt_guards
        or tr.state_writes
        or tr.state_sets
        or tr.grad_old_writes
        or tr.grad_moves
        or not (tr.mutated_inputs or tr.grad_writes or tr.grad_clears)
    ):
        return None
    items = key[:-1] if key and key[-1][:1] == ("default_dtype",) else key
    if len(items) != tr.n_args or len(tr.in_specs) != tr.n_args:
        return None
    for it in items:
        if not (isinstance(it, tuple) and len(it) == 5 and it[0] == "T"):
            return None
    rg = [it[3] for it in items]
    has_grad = [it[4] for it in items]
    if any(h != s.has_grad for h, s in zip(has_grad, tr.in_specs)):
        return None
    if tr.grad_on and not tr.grad_writes and not tr.grad_clears and any(rg):
        return None  # outputs get a gradient history: _run_differentiable
    exe = entry.stages.get("_executable")
    direct = exe is not None and hasattr(exe, "_native") and entry.run == exe.run_trusted
    n = tr.n_args
    ns: dict = {}
    L = [
        "def call(cf, entry, dyn):",
        "    if GRAD_MODE.enabled is not GRAD_ON:",
        "        return SLOW",
        *_unpack_args(n),
    ]
    for i in range(n):
        L.append(f"    d{i} = data_of(a{i})")
        if has_grad[i]:  # the key says it is set
            L.append(f"    g{i} = grad_of(a{i})")
            L.append(f"    e{i} = data_of(g{i})")
            _emit_unread_grad_check(L, entry, i, ns)
    if tr.mutated_inputs or tr.grad_writes or tr.layout_inputs:
        mem = [f"d{i}" for i in range(n)]
        for i, _ in tr.grad_writes:
            if has_grad[i]:
                if i not in entry.unread_grads:
                    mem.append(f"e{i}")
            elif not rg[i]:  # no requires_grad: the key does not say whether .grad is set
                L.append(f"    if grad_of(a{i}) is not None:")
                L.append("        return SLOW")
        _emit_mem_check(L, mem)
    ins = _native_ins(n, has_grad)
    L.append(f"    ins = ({', '.join(ins)},)")
    _emit_run_and_write_back(L, tr, direct, exe)
    ns.update(_call_globals(entry, exe))
    exec(compile("\n".join(L) + "\n", f"<graphc tensor call {tr.n_args} args>", "exec"), ns)
    return ns["call"]


def _emit_unread_grad_check(L: list, entry: "_Entry", i: int, ns: dict) -> None:
    """Generated lines: an old ``.grad`` the step replaces unread (``entry.unread_grads``,
    left out of the memory check) is still a graph input, so it must have the traced
    shape and dtype, else the general path (which passes zeros instead, ``_fresh_grads``)."""
    if i not in entry.unread_grads:
        return
    spec = entry.trace.in_specs[i]
    ns[f"gshape{i}"], ns[f"gdtype{i}"] = tuple(spec.shape), spec.dtype
    L.append(f"    if e{i}.shape != gshape{i} or e{i}.dtype != gdtype{i}:")
    L.append("        return SLOW")


def _emit_mem_check(L: list, mem: list) -> None:
    """Generated lines: the arrays named ``mem`` are, by identity, those the last full
    memory check passed (``entry.mem_ok``), else the general path (SLOW)."""
    L.append("    ok = entry.mem_ok")
    L.append(f"    if len(ok) != {len(mem)}:")
    L.append("        return SLOW")
    for k, name in enumerate(mem):
        L.append(f"    if ok[{k}]() is not {name}:")
        L.append("        return SLOW")


def _native_ins(n: int, has_grad: list) -> list:
    """The native entry's input names: each tensor's data, followed by its ``.grad``'s data
    when it has one."""
    ins = []
    for i in range(n):
        ins.append(f"d{i}")
        if has_grad[i]:
            ins.append(f"e{i}")
    return ins


def _unpack_args(n: int) -> list:
    """The generated lines binding the call's ``n`` arguments (``dyn``) to ``a0 .. a{n-1}``:
    ``a0, = dyn`` for one, and for none a check that none came (a step that takes no
    arguments and reads its model and data by name)."""
    if n == 0:
        return ["    if dyn:", "        return SLOW"]
    return [f"    {', '.join(f'a{i}' for i in range(n))}{',' if n == 1 else ''} = dyn"]


def _step_call(entry: "_Entry") -> Optional[Callable]:
    """The whole warm call of a compiled training step that reads its model and
    optimizer by name (``opt.zero_grad(); loss(model...).backward(); opt.step()``), prepared
    once per signature like :func:`_tensor_call`: ``call(cf, entry, dyn)`` gives the
    result, or :data:`SLOW` when anything differs from what the general path
    (``CompiledFunction._run``: ``_with_captured``, ``_for_memory``, the write-back)
    checked and accepted on an earlier call.

    Straight-line code generated for the signature: the grad mode; every optimizer's
    guard (its groups, hyper-parameters, state keys and parameters); every lifted tensor
    found again at its place, with the class, shape, dtype, requires_grad and ``.grad``
    presence the trace assumed; the memory check's arrays compared by identity with those
    the last full check passed (``entry.mem_ok``, so aliasing, read-only and layout checks
    are not skipped: other arrays take the general path); the native call; the write-back
    of arguments, lifted tensors and their ``.grad`` with version bumps; ``.grad`` clears;
    the outputs.  None when the signature does not qualify: no optimizer, arguments that
    are not all tensors, random streams, the optimizer's first step (state it creates)."""
    tr, key = entry.trace, entry.key
    if (
        not tr.tensor_io
        or not tr.opt_guards
        or tr.randoms
        or tr.state_writes
        or tr.state_sets
        or tr.grad_old_writes
        or tr.grad_moves
        or entry.call is not None
    ):
        return None
    items = key[:-1] if key and key[-1][:1] == ("default_dtype",) else key
    if len(items) != tr.n_args:
        return None
    for it in items:
        if not (isinstance(it, tuple) and len(it) == 5 and it[0] == "T"):
            return None
    specs = tr.in_specs
    n_args, n = tr.n_args, len(specs)
    if n != n_args + len(tr.captured):
        return None
    for it, s in zip(items, specs):
        if it[4] != s.has_grad:
            return None
    exe = entry.stages.get("_executable")
    direct = exe is not None and hasattr(exe, "_native") and entry.run == exe.run_trusted
    ns: dict = {}
    L = [
        "def call(cf, entry, dyn):",
        "    if GRAD_MODE.enabled is not GRAD_ON:",
        "        return SLOW",
    ]
    for k in range(len(tr.opt_guards)):
        ns[f"guard{k}"] = tr.opt_guards[k]
        L.append(f"    if guard{k}(dyn) is not None:")
        L.append("        return SLOW")
    L.extend(_unpack_args(n_args))
    for k, (cap, had) in enumerate(tr.grad_guards):  # as _grad_guard_reason checks
        ns[f"gcur{k}"] = cap.current
        L.append(f"    t{k} = gcur{k}(dyn)")
        L.append(f"    if t{k}.__class__ is Tensor and (grad_of(t{k}) is not None) != {bool(had)}:")
        L.append("        return SLOW")
    for i in range(n):
        s = specs[i]
        if i >= n_args:  # a lifted tensor: as _with_captured checks it
            cap = tr.captured[i - n_args]
            ns[f"cur{i}"], ns[f"shape{i}"], ns[f"dtype{i}"] = cap.current, s.shape, s.dtype
            L.append(f"    a{i} = cur{i}(dyn)")
            L.append(f"    if a{i}.__class__ is not Tensor:")
            L.append("        return SLOW")
            L.append(f"    d{i} = data_of(a{i})")
            L.append(
                f"    if d{i}.shape != shape{i} or d{i}.dtype != dtype{i} or "
                f"requires_grad_of(a{i}) != {bool(s.requires_grad)}:"
            )
            L.append("        return SLOW")
            if tr.grads_used:
                L.append(f"    if (grad_of(a{i}) is not None) != {bool(s.has_grad)}:")
                L.append("        return SLOW")
        else:
            L.append(f"    d{i} = data_of(a{i})")
        if s.has_grad:
            L.append(f"    g{i} = grad_of(a{i})")
            L.append(f"    if g{i} is None:")
            L.append("        return SLOW")
            L.append(f"    e{i} = data_of(g{i})")
            _emit_unread_grad_check(L, entry, i, ns)
    mem = [f"d{i}" for i in range(n)]
    for i, _ in tr.grad_writes:
        if specs[i].has_grad:
            if i not in entry.unread_grads:
                mem.append(f"e{i}")
        else:  # a .grad that appeared: the general path checks it
            L.append(f"    if grad_of(a{i}) is not None:")
            L.append("        return SLOW")
    _emit_mem_check(L, mem)
    ins = _native_ins(n, [s.has_grad for s in specs])
    L.append(f"    ins = ({', '.join(ins)},)")
    _emit_run_and_write_back(L, tr, direct, exe)
    # the whole call under graphc.tracer.driver.STATE_LOCK: a trace (another thread's, of
    # this or another compiled function) swaps tracers into the modules and optimizers
    # this call reads, and checks that what it lifted is not written meanwhile
    # (_writes_shared_state); looked up at each call (a forked child has a new lock)
    from .tracer import driver

    ns["driver"] = driver
    L = [L[0], "    with driver.STATE_LOCK:"] + ["    " + line for line in L[1:]]
    ns.update(_call_globals(entry, exe))
    exec(compile("\n".join(L) + "\n", f"<graphc step call {n} inputs>", "exec"), ns)
    return ns["call"]
