"""``graphc.compile``: trace once per input signature, cache, and run the cached program."""

from __future__ import annotations

import collections
import functools
import os
import weakref
import sys
import time
import threading
import warnings
from typing import Any, Callable, Optional, Sequence

import numpy as np

import eager
from eager.interop import data_of, grad_of, requires_grad_of, set_grad
from eager.interop import Tensor, default_float_dtype, tensor_from_array, version_of

from .pytree import flatten, leaf_paths, unflatten
from .errors import GraphcError, SignatureError
from .autograd_bridge import (
    _arrays,
    _graph_inputs,
    _note_no_grad,  # noqa: F401 - tools
    _run_differentiable,
    _write_back,
)
from .cond import cond, where  # noqa: F401 - graphc.api.cond / where, as before
from .entry import (
    SLOW as _SLOW,
    _Entry,
    _foreign_byte_order,
    _inplace_pairs,
    _native_order,
    obey_leaf_layout,
    owned_outputs,
)
from .inspection import Inspection, _grad_stage  # noqa: F401 - graphc.api._grad_stage, as before
from .interpreter import Program
from .runtime import cache as _engine_cache
from .runtime import imports as _imports
from .runtime.gcpause import paused as _gc_paused
from .ir import verify
from .signature import describe_key_item, diff_item, same_kind
from .tracer import Tracer, arg_names, classify_leaf, static_key, trace_flat
from .tracer.driver import STATE_LOCK

_tick = _engine_cache.tick
# the files of CompiledFunction's methods (a warning points at the caller's line)
_OWN_FILES = frozenset({__file__, sys.modules[Inspection.__module__].__file__})
_ndarray = np.ndarray

# every CompiledFunction, so a forked child can replace locks its parent's threads held
_LIVE: "weakref.WeakSet" = weakref.WeakSet()


def _new_locks_in_child() -> None:
    from .tracer import driver

    driver.STATE_LOCK = threading.RLock()
    globals()["STATE_LOCK"] = driver.STATE_LOCK
    for cf in list(_LIVE):
        cf._lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_locks_in_child)

_loaded = {False: False, True: False}  # the compiler's modules, without / with the backend


def _load_compiler(native: bool) -> None:
    """Import the modules a compile uses (the native backend's too with ``native``) under
    the lock ``fork`` waits for (graphc.runtime.imports): a child forked while another
    thread compiles for the first time never waits on a half-done import."""
    if _loaded[native]:
        return
    with _imports.IMPORT_LOCK:
        from .capture import _is_module as _c  # noqa: F401
        from .passes import PASSES as _p  # noqa: F401

        if native:
            from .runtime import native as _native_backend  # noqa: F401
        _loaded[native] = True


# the dtypes native code handles (graphc.backend.schedule.NATIVE_DTYPES, which loads
# llvmlite; tests/graphc/test_adversarial_merge23.py checks the two agree)
_NATIVE_DTYPES = frozenset({"float32", "float64", "int64", "int32", "bool"})


class _InlineCall(Exception):
    """A compiled function called on tracers: it is part of an outer trace (inlined)."""


CacheInfo = collections.namedtuple("CacheInfo", ["hits", "misses", "traces", "entries"])


_F32 = np.dtype(np.float32)


def _split_default_dtype(key: tuple) -> tuple:
    """A cache key without its trailing default-dtype item, and that dtype's name."""
    if key and isinstance(key[-1], tuple) and key[-1] and key[-1][0] == "default_dtype":
        return key[:-1], key[-1][1]
    return key, "float32"


try:  # numpy >= 2
    from numpy.lib.array_utils import byte_bounds as _byte_bounds
except ImportError:  # pragma: no cover - numpy 1.x
    _byte_bounds = np.byte_bounds


def _disjoint(arrays: list, written: list) -> bool:
    """True if no written array's bytes can overlap another array's: the byte ranges of
    all arrays compared at once (a training step writes every parameter and optimizer
    state, so pairwise ``np.may_share_memory`` calls cost more than the native step).
    False means "maybe": the caller then tests the pairs exactly."""
    try:
        bounds = np.array([_byte_bounds(a) for a in arrays], dtype=np.int64)
    except (TypeError, AttributeError, ValueError, OverflowError):  # not plain ndarrays
        return False
    lo, hi = bounds[:, 0], bounds[:, 1]
    w = np.asarray(written, dtype=np.intp)
    hit = (lo[w, None] < hi[None, :]) & (lo[None, :] < hi[w, None])
    hit[np.arange(len(w)), w] = False  # an array and itself
    return not hit.any()


class CompiledFunction(Inspection):
    """A function compiled per input signature.  Call it like the original."""

    # every float output has a gradient history when an input requires grad (set for the
    # compiled gradient functions of the autograd bridge); else eager's rule per output
    _outputs_differentiable = False

    def __init__(
        self,
        fn: Callable,
        static_argnums: Sequence[int] = (),
        opt_level: int = 2,
        recompile_limit: int = 8,
        backend: str = "native",
        disable_passes: Sequence[str] = (),
        print_after: Sequence[str] = (),
        verify_passes: bool = False,
        poison_freed: bool = False,
        disk_cache: Any = None,
        interpret_first_step: bool = True,
        **options: Any,
    ) -> None:
        if isinstance(static_argnums, int):
            static_argnums = (static_argnums,)
        if not callable(fn):
            raise TypeError(f"graphc.compile expects a callable, got {type(fn).__name__}")
        self.__wrapped__ = fn
        functools.update_wrapper(self, fn, updated=())
        if "__name__" not in self.__dict__:  # a callable object or functools.partial
            self.__name__ = type(fn).__name__
        self.static_argnums = tuple(static_argnums)
        _load_compiler(native=False)
        from .capture import _is_module

        # the module whose train()/eval() modes are part of every call's signature
        self._module = (
            fn
            if _is_module(fn)
            else (fn.__self__ if _is_module(getattr(fn, "__self__", None)) else None)
        )
        self._all_dynamic = not self.static_argnums and self._module is None
        self.opt_level = int(opt_level)
        self.recompile_limit = int(recompile_limit)
        if backend not in ("native", "interpreter"):
            raise ValueError(f"backend must be 'native' or 'interpreter', got {backend!r}")
        if self.opt_level not in (0, 1, 2, 3):
            raise ValueError(f"opt_level must be 0, 1, 2 or 3, got {opt_level!r}")
        from .passes import PASSES

        for p in list(disable_passes) + list(print_after):
            if p not in PASSES:
                raise ValueError(f"unknown pass {p!r}; passes are {', '.join(PASSES)}")
        self.backend = backend
        self.disable_passes = tuple(disable_passes)
        self.print_after = tuple(print_after)
        self.verify_passes = bool(verify_passes)
        self.poison_freed = bool(poison_freed)  # debug: NaN-fill arena buffers once dead
        _engine_cache.resolve_disk_cache(disk_cache)  # validates the setting
        self.disk_cache = disk_cache  # None: process-wide setting; True/False; a directory
        self.evictions = 0  # entries dropped by the engine LRU
        # a call whose trace creates optimizer state (the lazily made state of a first
        # opt.step()) has a signature the next call cannot have: it runs on the
        # interpreter, and native code is built only if it recurs (_make_native)
        self.interpret_first_step = bool(interpret_first_step)
        self._first_steps: set = set()  # keys whose state-creating trace was interpreted
        self.interpreted_calls = 0  # calls run on the interpreter (explain())
        self.options = options
        if options:
            raise TypeError(f"graphc.compile got unknown options {sorted(options)}")
        self._cache: dict = {}
        self._aliased: dict = {}  # (key, sharing of memory) -> entry: graphc.aliasing
        self._order: list = []
        self._hits = 0
        self._misses = 0
        self._traces = 0
        self._warned = False
        self._lock = threading.RLock()
        _LIVE.add(self)
        self.recompile_reasons: list = []
        try:
            import inspect

            self._sig = inspect.signature(fn.forward if self._module is fn else fn)
        except (TypeError, ValueError):
            self._sig = None

    # --- signature --------------------------------------------------------------
    def _signature(self, args: tuple) -> tuple:
        df = default_float_dtype()
        if df is not _F32:
            # eager.set_default_dtype: float constants and factories trace in that dtype
            key, dyn = self._signature_items(args)
            return key + (("default_dtype", df.name),), dyn
        return self._signature_items(args)

    def _signature_items(self, args: tuple) -> tuple:
        if self._all_dynamic:
            # the common case, plain arrays only: no per-argument branching beyond one test
            # (of the real type: ``__class__`` can be faked, and native code trusts it)
            ndarray = np.ndarray
            for a in args:
                if type(a) is not ndarray:
                    break
            else:
                return tuple([("A", a.shape, a.dtype) for a in args]), args
        names = None
        items = []
        dyn = []
        for i, a in enumerate(args):
            if i in self.static_argnums:
                try:
                    hash(a)
                except TypeError:
                    names = names or arg_names(self.__wrapped__, len(args))
                    raise SignatureError(
                        f"static argument {names[i]} (position {i}) must be "
                        f"hashable, got {type(a).__name__}"
                    ) from None
                # 2 and 2.0 trace differently; so do 0.0 and -0.0
                items.append(("static_arg", *static_key(a), type(a)))
                continue
            if type(a) is Tensor:
                d, rg = data_of(a), requires_grad_of(a)
                # (.grad is part of the signature without requires_grad too: a frozen tensor
                # keeps the .grad it had, which the function may read)
                items.append(("T", d.shape, d.dtype, rg, grad_of(a) is not None))
                dyn.append(a)
                continue
            if type(a) is np.ndarray:
                items.append(("A", a.shape, a.dtype))
                dyn.append(a)
                continue
            leaves, td = flatten(a)
            names = names or arg_names(self.__wrapped__, len(args))
            paths = leaf_paths(td, names[i])
            sub = [td]
            for leaf, path in zip(leaves, paths):
                if isinstance(leaf, Tracer):
                    raise _InlineCall
                k, spec = classify_leaf(leaf, path)
                sub.append(k)
                if spec.kind == "array" and type(leaf) is not np.ndarray:
                    leaf = np.asarray(leaf)  # a numpy scalar or an ndarray subclass
                if spec.kind != "static":
                    dyn.append(leaf)
            items.append(tuple(sub) if td.kind != "leaf" else sub[1])
        if self._module is not None:  # train()/eval() of every submodule: traced as is
            items.append(("mode", tuple([m.training for m in self._module.modules()])))
        return tuple(items), tuple(dyn)

    def _check_arity(self, args: tuple) -> None:
        """Python's own binding rules (defaults count); the message names the argument."""
        if self._sig is None:
            return
        try:
            self._sig.bind(*args)
        except TypeError as e:
            params = ", ".join(self._sig.parameters)
            raise SignatureError(
                f"{self.__name__}({params}) called with {len(args)} positional "
                f"argument{'s' if len(args) != 1 else ''}: {e}"
            ) from None

    # --- calling ---------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            args = self._bind(args, kwargs)
        if self._all_dynamic:  # inline of _signature's plain-array fast path
            for a in args:
                if type(a) is not _ndarray:
                    try:
                        key, dyn = self._signature(args)
                    except _InlineCall:  # called on tracers: part of an outer trace
                        return self.__wrapped__(*args)
                    break
            else:
                key, dyn = tuple([("A", a.shape, a.dtype) for a in args]), args
                if default_float_dtype() is not _F32:
                    key += (("default_dtype", default_float_dtype().name),)
        else:
            try:
                key, dyn = self._signature(args)
            except _InlineCall:
                return self.__wrapped__(*args)
        entry = self._cache.get(key)
        if entry is None:
            entry = self._miss(args, key)
        else:
            self._hits += 1
            entry.stamp = _tick()
        if entry.call is not None:
            return entry.call(dyn)
        if entry.tcall is not None:  # a step on tensors writing in place: prepared
            res = entry.tcall(self, entry, dyn)
            if res is not _SLOW:
                return res
        return self._run(entry, args, dyn)

    def _bind(self, args: tuple, kwargs: dict) -> tuple:
        """Keyword arguments bound by the function's signature, as positional ones (the
        cache key sees every argument in its parameter's place)."""
        if self._sig is None:
            raise TypeError(
                f"compiled {self.__name__}() takes positional arguments only (its "
                f"signature is unknown); got keyword arguments {sorted(kwargs)}"
            )
        try:
            ba = self._sig.bind(*args, **kwargs)
        except TypeError as e:
            raise SignatureError(f"{self.__name__}: {e}") from None
        ba.apply_defaults()
        if ba.kwargs:
            raise TypeError(
                f"compiled {self.__name__}(): keyword-only arguments "
                f"{sorted(ba.kwargs)} are not supported; make them positional or "
                "bind them with functools.partial"
            )
        return ba.args

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        """``@graphc.compile`` on a method: bound to the instance, which is then the first
        argument (a module's parameters are read through it at every call)."""
        if obj is None:
            return self
        import types

        return types.MethodType(self, obj)

    def __getattr__(self, name: str) -> Any:
        # graphc.compile(model) still answers as the model: parameters(), state_dict(),
        # train(), eval() ... (only names the compiled function does not have itself)
        module = self.__dict__.get("_module")
        if (
            module is not None
            and module is self.__dict__.get("__wrapped__")
            and not name.startswith("__")
        ):
            if name == "forward":
                return self
            return getattr(module, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _miss(self, args: tuple, key: tuple) -> _Entry:
        with STATE_LOCK, self._lock:  # STATE_LOCK first, always (tracer/driver.py)
            entry = self._cache.get(key)
            if entry is not None:
                self._hits += 1
                return entry
            self._check_arity(args)
            self._misses += 1
            if self._cache:
                self.recompile_reasons.append(self._reason(key))
            entry = self._build(args, key)
            self._cache[key] = entry
            self._order.append(key)
            if self.backend == "native":
                _engine_cache.register(self, entry)  # may evict least recently used entries
            if len(self._cache) > self.recompile_limit and not self._warned:
                self._warned = True
                level, f = 1, sys._getframe(0)  # point at the first frame outside the
                while f is not None and f.f_code.co_filename in _OWN_FILES:  # api's files
                    level, f = level + 1, f.f_back
                warnings.warn(
                    f"graphc: {self.__name__} was traced {len(self._cache)} times (limit "
                    f"{self.recompile_limit}); each new input signature re-traces. Latest reason: "
                    f"{self.recompile_reasons[-1] if self.recompile_reasons else 'n/a'}. Use "
                    "stable shapes/dtypes, or raise recompile_limit=.",
                    RuntimeWarning,
                    stacklevel=level,
                )
            return entry

    def _build(self, args: tuple, key: tuple, aliases: tuple = ()) -> _Entry:
        # no cyclic-GC passes over the compile's many live objects (runtime/gcpause.py)
        with _gc_paused():
            return self._build_entry(args, key, aliases)

    def _build_entry(self, args: tuple, key: tuple, aliases: tuple) -> _Entry:
        self._traces += 1
        res = trace_flat(
            self.__wrapped__, args, self.static_argnums, name=self.__name__, aliases=aliases
        )
        verify(res.graph, "trace")
        stages = {"traced": res.graph}
        from .passes import PassManager

        t0 = time.perf_counter()
        pm = PassManager(
            self.opt_level,
            disable=self.disable_passes,
            print_after=self.print_after,
            verify_each=self.verify_passes,
        )
        opt = res.graph.copy()
        pm.run(opt)
        verify(opt, "optimize")
        stages["optimized"] = opt
        stages["_passes"] = pm
        provisional = None
        if self.backend == "native" and self._interpret_first(res, key, aliases):
            # the optimizer's first step: interpreted (its signature does not recur);
            # native code is built if this entry is used again (_make_native)
            self._first_steps.add((key, aliases))
            exe, run = self._interpreter_run(opt, key, owned=True)
            stages["_interpreted"] = "interpreted"

            def provisional():
                return self._native_run(opt, key, res, aliases)

        elif self.backend == "native":
            exe, run = self._native_run(opt, key, res, aliases)
        else:
            exe, run = self._interpreter_run(opt, key)
        stages["_executable"] = exe
        stages["_compile_seconds"] = time.perf_counter() - t0
        return _Entry(res, run, stages, key, provisional)

    def _interpret_first(self, res: Any, key: tuple, aliases: tuple) -> bool:
        """Does this trace run on the interpreter: it creates optimizer state (the
        lazily made state of an optimizer's first ``step()``: ``res.state_writes`` /
        ``state_sets``), so the next call's optimizer guard sees that state and traces
        again; and this signature's state-creating trace was never interpreted before (a
        second one recurs, e.g. the state is cleared again and again: native code)."""
        return (
            self.interpret_first_step
            and bool(res.opt_guards)
            and bool(res.state_writes or res.state_sets)
            and (key, aliases) not in self._first_steps
            # a graph native code refuses (float16: UnsupportedOpError) raises on the first
            # call, as with interpret_first_step=False, not on the second after one step
            and all(d["dtype"] in _NATIVE_DTYPES for _, d in res.graph.nx.nodes(data=True))
        )

    def _native_run(self, opt: Any, key: tuple, res: Any, aliases: tuple) -> tuple:
        """The native executable of the optimized graph ``opt`` and its run function."""
        _load_compiler(native=True)
        from .runtime.native import NativeExecutable

        # arguments sharing memory are never written while the code still reads them
        exe = NativeExecutable(
            opt,
            self.opt_level,
            name=self.__name__,
            inplace={} if aliases else _inplace_pairs(res),
            poison=self.poison_freed,
            disk_cache=_engine_cache.resolve_disk_cache(self.disk_cache),
            verified=True,  # verify(opt, "optimize") above
        )
        run = exe.run_trusted  # the cache key already matched shapes/dtypes
        if _foreign_byte_order(key):  # decided per signature: no per-call check
            run = _native_order(run)
        return exe, run

    def _interpreter_run(self, opt: Any, key: tuple, owned: bool = False) -> tuple:
        """The interpreter's Program of ``opt`` and a run function giving its outputs as a
        tuple, as the native backend does.  ``owned``: every output is a new array of its
        own (no view, constant of the graph or output repeated), as native outputs are."""
        exe = Program(opt)
        plan_run = exe.run
        consts = [id(st[2]) for st in exe.steps if st[1] == "const"]  # the graph's own

        def run(arrays):  # outputs as a tuple, as the native backend gives them
            # never an alias of an argument (an output the optimizer reduced to an
            # input, ``x * 1.0``, or a view of one): the native backend returns new
            # arrays, and an in-place write-back into the argument must not change it
            outs = plan_run(arrays)
            if owned:
                seen: set = set(consts)
                fresh = []
                for o in outs:
                    # C order, as every native output (state made from it keeps the
                    # layout the next, native, trace assumes)
                    if (
                        o.base is not None
                        or id(o) in seen
                        or not o.flags.c_contiguous
                        or not o.flags.owndata
                        or any(np.may_share_memory(o, a) for a in arrays)
                    ):
                        o = np.array(o, order="C")
                    seen.add(id(o))
                    fresh.append(o)
                return tuple(fresh)
            return tuple(
                np.array(o) if any(np.may_share_memory(o, a) for a in arrays) else o for o in outs
            )

        if _foreign_byte_order(key):  # as the native entry: convert '>f8' input
            run = _native_order(run)
        return exe, run

    def _make_native(self, entry: _Entry, why: str) -> None:
        """Build the native code of a provisional (interpreted) entry and switch it over."""
        build = entry.provisional
        if build is None:
            return
        t0 = time.perf_counter()
        with _gc_paused():
            exe, run = build()
        st = entry.stages
        st["_compile_seconds"] = st.get("_compile_seconds", 0.0) + time.perf_counter() - t0
        st["_interpreted"] = why
        entry.go_native(exe, run)

    def _build_native_for_inspection(self, entry: _Entry) -> None:
        """:meth:`_make_native` under the locks a call takes (inspection's llvm_ir, asm,
        plan, memory of an interpreted first step)."""
        with STATE_LOCK, self._lock:
            self._make_native(entry, "interpreted once; native code built for inspection")

    def _run_provisional(self, entry: _Entry, arrays: list) -> tuple:
        """Run an interpreted entry (its trace created optimizer state): on the interpreter
        the first time; a second use means the signature recurs, so its native code is
        built first.  An error from the interpreter builds the native code and runs it
        instead, so the call raises exactly what native code raises (nothing was written:
        the interpreter writes no argument in place)."""
        if entry.interpreted_calls:
            self._make_native(entry, "interpreted once, then native (used again)")
            return entry.run(arrays)
        try:
            outs = entry.run(arrays)
        except Exception:
            self._make_native(entry, "native: the interpreter raised on its first call")
            return entry.run(arrays)
        entry.interpreted_calls += 1
        self.interpreted_calls += 1
        return outs

    def _run(self, entry: _Entry, args: tuple, dyn: list) -> Any:
        if entry.fast:
            return entry.build_out(entry.run(dyn))
        if entry.shared:  # a step writing what it reads by name: see entry._writes_shared_state
            with STATE_LOCK, self._lock:
                return self._run_call(entry, args, dyn)
        return self._run_call(entry, args, dyn)

    def _run_call(self, entry: _Entry, args: tuple, dyn: list) -> Any:
        """:meth:`_run` of a call that is not on the fast path (under the lock if the
        entry writes shared state)."""
        tr = entry.trace
        grad_on = eager.is_grad_enabled()
        if tr.tensor_io and tr.grad_on is not grad_on:
            entry = self._other_grad_mode(entry, args)
            tr = entry.trace
        if tr.captured or tr.randoms or tr.opt_guards or tr.grad_guards:
            entry, dyn = self._with_captured(entry, args, dyn)
            tr = entry.trace
        if tr.mutated_inputs or tr.grad_writes or tr.layout_inputs:
            entry = self._for_memory(entry, args, dyn)
            tr = entry.trace
        if (
            grad_on
            and tr.tensor_io
            and not tr.grad_writes
            and not tr.grad_clears
            and not tr.opt_guards
            and any(a.__class__ is Tensor and requires_grad_of(a) for a in dyn)
        ):
            return _run_differentiable(self, entry, dyn)
        arrays = _arrays(dyn, tr.in_specs)
        # b.grad = a.grad: the object a's .grad was when the call began becomes b's (its
        # buffer given the final values when the step wrote into it), as in eager
        moved = {}
        for idx, src, written in tr.grad_moves:
            obj = grad_of(dyn[src])
            if written and not data_of(obj).flags.writeable:
                # eager's accumulation into a read-only .grad makes a new tensor per
                # parameter, so the two would part with different values: refused
                who = [_leaf_label(self, tr, args, i) for i in (src, idx)]
                raise ValueError(
                    f"{self.__name__}: the .grad of {who[0]} is read-only and becomes the .grad "
                    f"of {who[1]} inside the function, which writes into it (nothing was "
                    "written); make it writeable or give each parameter its own .grad"
                )
            moved[idx] = obj
        fresh = _fresh_grads(self, tr, args, dyn, arrays) if tr.grad_writes else ()
        for idx, _ in tr.grad_old_writes:  # (all-or-nothing: checked before anything runs)
            if not data_of(grad_of(dyn[idx])).flags.writeable:
                who = _leaf_label(self, tr, args, idx)
                raise ValueError(
                    f"{self.__name__}: the .grad of {who} is read-only, and the function "
                    "writes into it in place (nothing was written)"
                )
        if entry.provisional is None:
            outs = entry.run(arrays)
        else:
            outs = self._run_provisional(entry, arrays)
        n_user = (
            len(outs)
            - len(tr.mutated_inputs)
            - len(tr.grad_writes)
            - len(tr.grad_old_writes)
            - len(tr.state_writes)
        )
        _write_back(tr, dyn, outs)
        for idx, out_pos in tr.grad_old_writes:  # before the new .grad replaces it
            old = grad_of(dyn[idx])
            if outs[out_pos] is not data_of(old):
                np.copyto(data_of(old), outs[out_pos], casting="same_kind")
            version_of(old)[0] += 1
        owned = owned_outputs(entry.stages.get("_executable"))
        if tr.opt_guards:  # the optimizer state the step created (its first step)
            for holder, k, out_pos in tr.state_writes:
                o = outs[out_pos]
                holder(args)[k] = tensor_from_array(o if owned(out_pos) else np.array(o))
            for holder, k, v in tr.state_sets:
                holder(args)[k] = v
        for idx, out_pos in tr.grad_writes:
            target = dyn[idx]
            obj = moved.get(idx)
            if obj is not None:
                if outs[out_pos] is not data_of(obj):
                    np.copyto(data_of(obj), outs[out_pos], casting="same_kind")
                    version_of(obj)[0] += 1
                set_grad(target, obj)
            elif grad_of(target) is None or idx in fresh or idx in tr.grad_new:
                # a new .grad, as eager's backward makes one: the native entry's own output
                # array as it is (no second copy), else a copy
                o = outs[out_pos]
                o = o if owned(out_pos) else np.array(o)
                set_grad(target, tensor_from_array(obey_leaf_layout(o, data_of(target))))
            else:
                if outs[out_pos] is not data_of(grad_of(target)):
                    np.copyto(data_of(grad_of(target)), outs[out_pos], casting="same_kind")
                version_of(grad_of(target))[0] += 1
        for idx in tr.grad_clears:
            set_grad(dyn[idx], None)
        res = self._wrap_outputs(tr, outs[:n_user])
        if tr.tensor_io and n_user:
            _note_no_grad(self, tr, res)
        return res

    def _other_grad_mode(self, entry: _Entry, args: tuple) -> _Entry:
        """The trace of this signature made in the current grad mode.  Grad mode decides
        which values have a gradient history (``no_grad()`` blocks inside the function,
        writes to leaves), so a trace made under ``no_grad()`` must not give gradients."""
        sib = entry.sibling
        if sib is None or sib.trace.grad_on is not eager.is_grad_enabled():
            with STATE_LOCK, self._lock:
                self._misses += 1
                mode = "on" if eager.is_grad_enabled() else "off (no_grad)"
                self.recompile_reasons.append(
                    f"traced {self.__name__} again: called with grad mode {mode}, traced with "
                    "the other"
                )
                sib = self._build(args, entry.key)
                entry.sibling, sib.sibling = sib, entry
        return sib

    def _with_captured(self, entry: _Entry, args: tuple, dyn: list) -> tuple:
        """The call's dynamic leaves followed by the tensors the function reads by name
        (parameters, buffers, closed-over tensors), as they are now.  A tensor whose
        shape, dtype or requires_grad changed since the trace, or that is gone, re-traces
        this signature, with the reason recorded."""
        waited = False
        for _ in range(3):
            tr = entry.trace
            now = list(dyn)
            reason = None
            for guard in tr.opt_guards:  # an optimizer's groups, hyper-parameters, state keys
                reason = guard(args)
                if reason is not None:
                    break
            for cap, spec in zip(tr.captured if reason is None else (), tr.in_specs[tr.n_args :]):
                t = cap.current(args)
                if t.__class__ is not Tensor:
                    if t is None and cap.also:
                        reason = (
                            f"{cap.name} is no longer the same tensor at every place it was "
                            "found (a tied parameter was untied, or a module is gone)"
                        )
                    elif isinstance(t, Tensor) or t is None:
                        reason = f"{cap.name} is no longer a tensor"
                    else:
                        reason = f"{cap.name} is now a {type(t).__name__}"
                    break
                d = data_of(t)
                if tr.grads_used and (grad_of(t) is not None) != spec.has_grad:
                    reason = f"{cap.name}.grad is now " + (
                        "set" if grad_of(t) is not None else "None"
                    )
                    break
                if (
                    d.shape != spec.shape
                    or d.dtype != spec.dtype
                    or requires_grad_of(t) != spec.requires_grad
                ):
                    was = describe_key_item(("T", spec.shape, spec.dtype, spec.requires_grad))
                    now = describe_key_item(("T", d.shape, d.dtype, requires_grad_of(t)))
                    reason = f"{cap.name}: {was} -> {now}"
                    break
                now.append(t)
            if reason is None:
                reason = _grad_guard_reason(tr, args)
            if reason is None:
                if tr.randoms:  # this call's counters of the stream
                    from .runtime import rng

                    now.append(tensor_from_array(rng.advance(tr.rng_count)))
                return entry, now
            if not waited:
                # what looked changed may be another thread's trace in progress (it puts
                # tracers where the tensors are): once it is done, look again
                waited = True
                with STATE_LOCK:
                    continue
            with STATE_LOCK, self._lock:
                self._misses += 1
                self.recompile_reasons.append(f"re-traced {self.__name__}: {reason}")
                entry = self._build(args, entry.key)
                self._cache[entry.key] = entry
                self._aliased = {k: v for k, v in self._aliased.items() if k[0] != entry.key}
        raise GraphcError(
            f"{self.__name__}: the tensors it reads by name changed while it was "
            f"being traced ({reason})"
        )

    def _for_memory(self, entry: _Entry, args: tuple, dyn: list) -> _Entry:
        """The entry for how this call's arguments use memory, for a function that writes
        an argument in place: arguments sharing memory with a written one get a trace of
        their own (``graphc.aliasing``); an argument whose C layout the trace assumed must
        have it."""
        tr = entry.trace
        arrays = [data_of(a) if a.__class__ is Tensor else a for a in dyn]
        unread = entry.unread_grads  # a .grad replaced unread: neither read nor written
        for i, _ in tr.grad_writes:  # a .grad written in place is memory too
            g = grad_of(dyn[i])
            if g is not None and i not in unread:
                arrays.append(data_of(g))
        n_dyn = len(dyn)
        # every call (not only for new arrays: a flag can be flipped in place), before
        # anything runs or is written: numpy would raise only at the write-back, after
        # the rest of the step was written.  A read-only .grad is not refused: the call
        # gives it a new array, as eager's backward does (_fresh_grads)
        for w in tr.written:
            a = arrays[w]
            if isinstance(a, np.ndarray) and not a.flags.writeable:
                # eager's refusal (eager/_views.py), before anything runs: numpy would
                # raise only at the write-back, after the rest of the step
                who = _leaf_label(self, tr, args, w)
                if w < n_dyn and dyn[w].__class__ is not Tensor:  # numpy's own refusal
                    raise ValueError(
                        f"{self.__name__}: {who} is written in place but its array "
                        "is read-only (numpy: assignment destination is read-only); pass a "
                        "writeable copy"
                    )
                raise RuntimeError(
                    f"{self.__name__}: {who} is written in place but is a broadcast "
                    "(expanded) view or read-only buffer and cannot be written in place; "
                    "clone() it first (nothing was written: the step did not run)"
                )
        # one tensor at two leaf inputs whose .grad the step writes (passed twice, or passed
        # and also read by name): the trace has a leaf for each, so eager's one .grad
        # accumulating both was given only one of them (a wrong number): refused.  Two
        # tensors on one array (x.detach()) are fine but keep this check on every call
        lone = True
        if len(tr.grad_writes) > 1:
            seen: dict = {}
            for i, _ in tr.grad_writes:
                j = seen.setdefault(id(arrays[i]), i)
                if j != i:
                    lone = False
                    if dyn[j] is dyn[i]:
                        who = [_leaf_label(self, tr, args, k, " (read by name)") for k in (j, i)]
                        raise SignatureError(
                            f"{self.__name__}: {who[0]} and {who[1]} are the same tensor (they "
                            "share memory) and "
                            "the step writes its .grad; graphc traces each as a leaf of its "
                            "own, so the gradients would not add up in one .grad as eagerly. "
                            "Nothing was written. Pass it once."
                        )
        ok = entry.mem_ok  # the same arrays as last time: same answer
        if lone and len(ok) == len(arrays):
            for r, a in zip(ok, arrays):
                if r() is not a:
                    break
            else:
                return entry
        for idx in tr.layout_inputs:
            if not arrays[idx].flags.c_contiguous:
                who = _leaf_label(self, tr, args, idx)
                raise SignatureError(
                    f"{self.__name__}: {who} is not "
                    "C-contiguous, but the function writes in place through (or into) a "
                    "reshape of it, which eager makes a view or a copy depending on the memory "
                    "layout; the compiled code was traced for a C-contiguous argument. Pass "
                    "np.ascontiguousarray(...)."
                )
        written = list(tr.written) + list(range(n_dyn, len(arrays)))
        if not written or _disjoint(arrays, written):
            entry.mem_ok = tuple(weakref.ref(a) for a in arrays) if lone else ()
            return entry
        share = np.may_share_memory  # a bounds test in C: the common call is cheap
        for w in written:
            aw = arrays[w]
            for j, b in enumerate(arrays):
                if j != w and share(aw, b):
                    break
            else:
                continue
            break
        else:
            entry.mem_ok = tuple(weakref.ref(a) for a in arrays) if lone else ()
            return entry
        entry.mem_ok = ()
        from .aliasing import alias_groups

        names = _leaf_names(self, args)
        n_args = tr.n_args
        for w in written:  # tensors read by name take no part in aliasing
            for j, b in enumerate(arrays):
                if j != w and (w >= n_args or j >= n_args) and share(arrays[w], b):

                    def who(i):
                        return (
                            names[i]
                            if i < n_args
                            else tr.captured[i - n_args].name
                            if i < n_args + len(tr.captured)
                            else "a .grad"
                        )

                    raise SignatureError(
                        f"{self.__name__}: {who(w)} is written in place and shares memory "
                        f"with {who(j)}; graphc follows sharing between arguments only "
                        "(tensors read by name, such as parameters that are views of one "
                        "another, cannot share memory with what the step writes). Nothing "
                        "was written. Pass both as arguments, or give each its own memory "
                        "(clone())."
                    )
        arrays, written = arrays[:n_args], [w for w in written if w < n_args]
        groups = alias_groups(arrays, written, names + [".grad"] * (len(arrays) - len(names)))
        if groups is None:
            return entry
        for _, _, members in groups:
            for i, _, _ in members:
                if i >= len(dyn) or (dyn[i].__class__ is Tensor and requires_grad_of(dyn[i])):
                    raise SignatureError(
                        f"{self.__name__}: arguments (or their .grad) that require grad share "
                        "memory with an argument written in place; graphc cannot reproduce "
                        "eager's gradients for that. Pass separate tensors (clone())."
                    )
        with STATE_LOCK, self._lock:
            akey = (entry.key, groups)
            alias = self._aliased.get(akey)
            if alias is None:
                alias = self._aliased[akey] = self._build(args, entry.key, aliases=groups)
        return alias

    def _wrap_outputs(self, tr, outs: list, make=None) -> Any:
        leaves = []
        it = iter(outs)
        for k in range(tr.out_tree.num_leaves):
            if k in tr.out_static:
                leaves.append(tr.out_static[k])
            else:
                v = next(it)
                if make is not None:
                    leaves.append(make(v))
                else:
                    leaves.append(tensor_from_array(v) if tr.tensor_io else v)
        return unflatten(tr.out_tree, leaves)

    def _reason(self, key: tuple) -> str:
        """Which field of which argument differs from the nearest cached signature: the
        one with the fewest differing arguments, then the fewest that changed kind (so a
        leaf of a dict that changed is named, not the dict against a cached array)."""
        key, now_dt = _split_default_dtype(key)
        names = arg_names(self.__wrapped__, len(key))
        best, best_rank = None, None
        for old in self._cache:
            old, was_dt = _split_default_dtype(old)
            diffs = []
            if was_dt != now_dt:
                diffs.append(f"default dtype (eager.set_default_dtype): {was_dt} -> {now_dt}")
            rank = (len(key) + 1, 0)
            if len(old) != len(key):
                diffs.append(f"number of arguments changed from {len(old)} to {len(key)}")
            else:
                pairs = [(i, a, b) for i, (a, b) in enumerate(zip(old, key)) if a != b]
                for i, a, b in pairs:
                    if isinstance(a, tuple) and a and a[0] == "mode":
                        diffs.append(
                            f"train()/eval(): {describe_key_item(a)} -> {describe_key_item(b)}"
                        )
                    else:
                        diffs.append(diff_item(names[i], a, b))
                rank = (
                    len(pairs) + (was_dt != now_dt),
                    sum(1 for _, a, b in pairs if not same_kind(a, b)),
                )
            if best_rank is None or rank < best_rank:
                best, best_rank = diffs, rank
        return f"re-traced {self.__name__}: " + "; ".join(best or ["new signature"])

    # --- the entry of a signature, for inspection and the tools ------------------------
    def _entry_for(self, args: tuple) -> _Entry:
        key, _ = self._signature(args)
        entry = self._cache.get(key)
        return entry if entry is not None else self._miss(args, key)

    def cache_info(self) -> CacheInfo:
        return CacheInfo(self._hits, self._misses, self._traces, len(self._cache))

    def _evict_entry(self, entry: _Entry) -> bool:
        """Drop ``entry`` (called by the engine LRU); False when a compile holds the lock."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._cache.get(entry.key) is entry:
                del self._cache[entry.key]
                try:
                    self._order.remove(entry.key)
                except ValueError:
                    pass
                self.evictions += 1
            return True
        finally:
            self._lock.release()

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()
            self._order.clear()

    def __repr__(self) -> str:
        return f"<graphc.CompiledFunction {self.__name__} ({len(self._cache)} signatures)>"


def _fresh_grads(cf: "CompiledFunction", tr: Any, args: tuple, dyn: Any, arrays: list) -> dict:
    """``{dynamic leaf: array}`` for the ``.grad`` this call writes that cannot be written
    in place: read-only (``numpy().flags.writeable = False``), or of another shape or
    dtype than the trace's (``p.grad.data = ...``).  Eager's backward gives such a
    ``.grad`` a new array (its ``zero_grad()`` drops the old one, and accumulation into
    a read-only array makes a new one); so does the call: the graph input becomes a
    writeable copy (the same values), which the write-back then sets as a new ``.grad``.
    A ``.grad`` of another shape or dtype that the step reads (accumulates into) is
    refused, before anything runs.  Replaces the arrays in ``arrays`` (the graph inputs)."""
    from .tracer.driver import _graph_input_pos

    specs = tr.in_specs
    fresh: dict = {}
    for idx, _ in tr.grad_writes:
        spec = specs[idx]
        if not spec.has_grad:
            continue
        e = data_of(grad_of(dyn[idx]))
        same = e.shape == spec.shape and e.dtype == spec.dtype
        if same and (e.flags.writeable or idx in tr.grad_new):  # written, or only read
            continue
        pos = _graph_input_pos(specs, idx) + 1
        if same:
            rep = np.array(e)
        else:
            node = tr.graph.inputs[pos]
            if tr.graph.nx.out_degree(node) or node in tr.graph.outputs:
                who = _leaf_label(cf, tr, args, idx)
                raise RuntimeError(
                    f"{cf.__name__}: {who}.grad has shape {list(e.shape)} and dtype {e.dtype} "
                    f"but the step accumulates into it as {list(spec.shape)} {spec.dtype} "
                    "(was its .data replaced?); nothing was written: set the .grad to None "
                    "or to a tensor of the parameter's shape and dtype"
                )
            rep = np.zeros(spec.shape, spec.dtype)
        arrays[pos] = rep
        fresh[idx] = rep
    return fresh


def _leaf_label(cf: "CompiledFunction", tr: Any, args: tuple, idx: int, lifted: str = "") -> str:
    """How an error message names dynamic leaf ``idx`` of a call: ``argument x``, a tensor
    read by name by its path (plus ``lifted``), or ``a .grad`` past both."""
    if idx < tr.n_args:
        return "argument " + _leaf_names(cf, args)[idx]
    if idx < tr.n_args + len(tr.captured):
        return tr.captured[idx - tr.n_args].name + lifted
    return "a .grad"


def _leaf_names(cf: "CompiledFunction", args: tuple) -> list:
    """Readable paths of the dynamic argument leaves, in order (for error messages)."""
    names = arg_names(cf.__wrapped__, len(args))
    out = []
    for i, a in enumerate(args):
        if i in cf.static_argnums:
            continue
        leaves, td = flatten(a)
        for leaf, path in zip(leaves, leaf_paths(td, names[i])):
            if classify_leaf(leaf, path)[1].kind != "static":
                out.append(path)
    return out


def compile(
    fn: Optional[Callable] = None,
    *,
    static_argnums: Sequence[int] = (),
    opt_level: int = 2,
    recompile_limit: int = 8,
    **options: Any,
):
    """Compile ``fn``: trace per input signature, verify, cache and run the graph.

    Usable as ``@graphc.compile``, ``@graphc.compile(static_argnums=(1,))`` or
    ``graphc.compile(fn, ...)``.
    """
    if fn is None:
        return lambda f: CompiledFunction(
            f,
            static_argnums=static_argnums,
            opt_level=opt_level,
            recompile_limit=recompile_limit,
            **options,
        )
    return CompiledFunction(
        fn,
        static_argnums=static_argnums,
        opt_level=opt_level,
        recompile_limit=recompile_limit,
        **options,
    )


def _grad_guard_reason(tr: Any, args: tuple) -> Optional[str]:
    """Why the trace does not fit: a lifted tensor it dropped as unused (its ``.grad``
    looked at and found None, as an optimizer does for a parameter without a gradient)
    now has a ``.grad``, or the other way round (``TraceResult.grad_guards``)."""
    for cap, had in tr.grad_guards:
        t = cap.current(args)
        if t.__class__ is Tensor and (grad_of(t) is not None) != had:
            return f"{cap.name}.grad is now " + ("set" if not had else "None")
    return None
