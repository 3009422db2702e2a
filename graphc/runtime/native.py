"""Native execution of a graph: plan, lower, JIT, and a one-crossing call.

The generated entry point is a CPython ``METH_O`` function; :func:`_builtin`
wraps it in a builtin function object (``PyCFunction_NewEx``), so a call costs
what calling any builtin costs, with no ctypes argument conversion.  It takes
the tuple of input array objects, checks each one's type is exactly
``ndarray`` (anything else comes back here: subclasses are converted, other
objects refused), reads each array's data pointer and flags
from numpy's array struct, allocates the outputs with numpy's own
``PyArray_New`` and returns them as a tuple.  The struct offsets, the C-API
functions it calls and numpy's C-API table are checked once, here, at import.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import threading
import warnings
import weakref
from typing import Callable, Optional, Sequence

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir as ll

from ..backend import irtext
from ..backend import abi, blas
from ..backend import lower as L
from ..backend import kernel_builder as _kernel_builder
from ..backend import parallel_policy
from ..backend.lowering.conv import CALLS_BLAS as _CONV_BLAS
from ..backend.lowering.matmul import gemm_dims
from ..backend.schedule import Schedule
from ..backend.strided import numel
from ..errors import GraphcError
from ..ir import Graph, describe, printable, verify
from . import cache, llvm_engine as jit, parallel, pool
from . import imports as _imports

# the backend's lazy imports (vector math) hold the lock fork waits for
_kernel_builder.import_lock = lambda: _imports.IMPORT_LOCK

_PYAPI = (
    "PyTuple_New",
    "PyLong_FromSsize_t",
    "Py_IncRef",
    "Py_DecRef",
    "PyEval_SaveThread",
    "PyEval_RestoreThread",
)
_PyArray_New_SLOT = 93  # numpy's C-API table (stable since numpy 1.0)
_PyArray_Type_SLOT = 2


def _numpy_api_table() -> "ctypes.Array":
    """numpy's C-API function table (what ``import_array()`` gives C extensions)."""
    try:
        from numpy._core import _multiarray_umath as mu  # numpy >= 2
    except ImportError:  # pragma: no cover
        from numpy.core import _multiarray_umath as mu
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    table = get(mu._ARRAY_API, None)
    if not table:
        raise RuntimeError("numpy's _ARRAY_API capsule is empty")
    return ctypes.cast(table, ctypes.POINTER(ctypes.c_void_p))


def _check_abi() -> Optional[str]:
    """None if numpy's PyArrayObject, CPython's tuple and numpy's C-API table are what
    the generated code expects."""
    try:
        a = np.zeros((4, 4))
        data = ctypes.c_void_p.from_address(id(a) + abi.DATA_OFFSET).value
        if data != a.__array_interface__["data"][0]:
            return "data pointer offset differs"
        flags = ctypes.c_int.from_address(id(a) + abi.FLAGS_OFFSET).value
        want = abi.NPY_C_CONTIGUOUS | abi.NPY_ALIGNED
        if flags & want != want:
            return "flags offset differs"
        t = a.T
        tflags = ctypes.c_int.from_address(id(t) + abi.FLAGS_OFFSET).value
        if tflags & abi.NPY_C_CONTIGUOUS:
            return "flags offset differs (transposed array reads as C-contiguous)"
        tup = (a, t)
        items = [
            ctypes.c_void_p.from_address(id(tup) + abi.TUPLE_ITEMS_OFFSET + 8 * i).value
            for i in range(2)
        ]
        if items != [id(a), id(t)]:
            return "tuple item offset differs"
        if ctypes.c_void_p.from_address(id(tup) + abi.OB_TYPE_OFFSET).value != id(tuple):
            return "object type offset differs"
        if ctypes.c_ssize_t.from_address(id(tup) + abi.OB_SIZE_OFFSET).value != 2:
            return "tuple size offset differs"
        table = _numpy_api_table()
        if table[_PyArray_Type_SLOT] != id(np.ndarray):
            return "numpy's C-API table does not start as expected"
        new = ctypes.PYFUNCTYPE(
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_ssize_t),
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_void_p,
        )(table[_PyArray_New_SLOT])
        dims = (ctypes.c_ssize_t * 2)(2, 3)
        p = new(id(np.ndarray), 2, dims, np.dtype(np.int32).num, None, None, 0, 0, None)
        if not p:
            return "numpy's PyArray_New failed"
        made = ctypes.cast(p, ctypes.py_object).value  # a second reference ...
        ctypes.pythonapi.Py_DecRef(ctypes.py_object(made))  # ... and the new one dropped
        if (
            made.__class__ is not np.ndarray
            or made.shape != (2, 3)
            or made.dtype != np.int32
            or not made.flags.c_contiguous
            or sys.getrefcount(made) != 2
        ):
            return "numpy's PyArray_New does not make the arrays expected"
    except Exception as e:  # pragma: no cover - exotic Python builds
        return f"probe failed: {e}"
    return None


ABI_PROBLEM = _check_abi()


def _register_symbols() -> None:
    """Give JIT code the addresses of the C API it calls (``lower.PY_SYMBOLS``), the
    type objects it compares against and the thread count, under stable names."""
    addrs = {
        "graphc_" + n: ctypes.cast(getattr(ctypes.pythonapi, n), ctypes.c_void_p).value
        for n in _PYAPI
    }
    addrs["graphc_PyArray_New"] = _numpy_api_table()[_PyArray_New_SLOT]
    addrs["graphc_PyArray_Type"] = id(np.ndarray)
    addrs["graphc_PyTuple_Type"] = id(tuple)
    addrs[abi.NUM_THREADS] = ctypes.addressof(parallel.NATIVE)
    assert set(addrs) == set(abi.PY_SYMBOLS) | set(abi.PY_TYPES) | {abi.NUM_THREADS}
    with jit.LLVM_LOCK:
        for name, addr in addrs.items():
            llvm.add_symbol(name, addr)


if ABI_PROBLEM is None:
    _register_symbols()

_PROFILED: list = []  # weak references to the executables built with profiling on


def profiling_enabled() -> bool:
    """True when ``GRAPHC_PROFILE`` is set to a non-empty value other than ``0``: native
    executables built then time each kernel call (see docs/backend.md, "Profiling")."""
    v = os.environ.get("GRAPHC_PROFILE", "")
    return v not in ("", "0")


def profiled_executables() -> list:
    """The live native executables built with ``GRAPHC_PROFILE`` on, oldest first."""
    return [x for x in (r() for r in _PROFILED) if x is not None]


def _clock_gettime_address() -> int:
    addr = ctypes.cast(ctypes.CDLL(None).clock_gettime, ctypes.c_void_p).value
    if not addr:  # pragma: no cover
        raise GraphcError("GRAPHC_PROFILE: clock_gettime is not available")
    return int(addr)


def _kernel_label(plan: Schedule, kern) -> str:
    """Short text for a kernel: its ops (graph order) and the shape of its first output."""
    nodes = [kern.node] if kern.node is not None else []
    if kern.node in plan.summed:  # a batch-summed product: "matmul+sum"
        nodes.insert(0, plan.summed[kern.node][0])
    nodes += [n for n, _ in kern.stores] + list(kern.reduces)
    if kern.kind == "loop":  # every op the loop computes, not only what it stores
        nodes = plan.expr_nodes(plan.kernel_roots(kern)) + nodes
    g = plan.g.nx
    ops = []
    for n in nodes:
        op = g.nodes[n].get("op") if n in g else None
        if op is not None and op not in ops:
            ops.append(op)
    shape = tuple(g.nodes[nodes[0]].get("shape", ())) if nodes and nodes[0] in g else ()
    return f"{'+'.join(ops) or kern.kind} {shape}"


_BLAS_REGISTERED = [False]
# the kernel kinds whose code may call BLAS's gemm (their symbols must be registered first)
_CALLS_BLAS = frozenset({"matmul"}) | _CONV_BLAS


def register_blas() -> None:
    """Give JIT code the gemm functions of graphc's OpenBLAS (graphc.backend.blas), once."""
    if _BLAS_REGISTERED[0]:
        return
    addrs = blas.addresses()
    with jit.LLVM_LOCK:
        for name, addr in addrs.items():
            llvm.add_symbol(name, addr)
    _BLAS_REGISTERED[0] = bool(addrs)


def start_backend(disk_cache=None) -> bool:
    """Do the native backend's one-time start-up now instead of in the first compile.

    Initializes LLVM's native target, reads the host CPU, compiles (or loads from
    ``disk_cache``, default the process-wide setting) the worker pool and gives JIT
    code the BLAS functions: what the first compile of a process otherwise pays
    before its own work.  Importing this module has already loaded llvmlite.  Returns
    True if anything was still to do (False on later calls, which cost nothing).
    Benchmarks call it before timing a first call so that the timer holds the compile
    only, as JAX's first-call timer does not hold its backend's start-up either.
    """
    if pool.status is not None and _BLAS_REGISTERED[0]:
        return False
    jit._ensure_initialized()
    jit._host()
    pool.ensure(disk_cache if disk_cache is not None else pool._process_disk_cache())
    register_blas()
    return True


class _MethodDef(ctypes.Structure):
    """CPython's ``PyMethodDef``."""

    _fields_ = [
        ("ml_name", ctypes.c_char_p),
        ("ml_meth", ctypes.c_void_p),
        ("ml_flags", ctypes.c_int),
        ("ml_doc", ctypes.c_char_p),
    ]


_METH_O = 0x0008
_new_cfunction = ctypes.pythonapi.PyCFunction_NewEx
_new_cfunction.restype = ctypes.py_object  # a new reference, which ctypes takes
_new_cfunction.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p]


def _builtin(module: "jit.JitModule", symbol: str):
    """A builtin function object calling ``symbol`` (``PyObject *f(PyObject *self,
    PyObject *arg)``) of ``module``.  Its ``__self__`` holds the module and the method
    definition, so the machine code lives as long as the function object (and any call
    in flight) does."""
    md = _MethodDef(symbol.encode(), module.address(symbol), _METH_O, None)
    return _new_cfunction(ctypes.addressof(md), (module, md), None)


#: Tiered compilation (docs/backend.md, "Tiered compilation"): a small graph compiled
#: without a disk cache first runs quick code, where LLVM optimizes only the kernels
#: that accumulate a ``reassoc`` sum or product and leaves every other function
#: ``optnone`` (about 3x cheaper to compile); after :data:`TIER_UP_CALLS` calls, or once
#: its calls covered :data:`TIER_UP_WORK` loop elements in all, the module is compiled
#: with the full pipeline and swapped in.  Counted, not timed, so the call that switches
#: is the same in every run; and the reduction kernels are ``noinline`` in every build,
#: so both tiers run the same optimized reductions (checked at the switch) and give the
#: same bits.  False (or the environment variable ``GRAPHC_TIERED=0``): every graph is
#: compiled with the full pipeline at once.
TIERED = os.environ.get("GRAPHC_TIERED", "1").strip() != "0"
TIER_UP_CALLS = 8
TIER_UP_WORK = 1 << 22
#: Elements of the loop kernels (:func:`quick_work`) above which a graph skips the quick
#: tier: one call of slow code over more elements would cost more than the compile time
#: saved.
TIER0_MAX_WORK = 1 << 23


def reduction_functions(module) -> frozenset:
    """Names of the functions ``module`` defines that hold a ``reassoc`` instruction (the
    accumulation of a float sum or product, which LLVM's vectorizer may reorder)."""
    out = []
    for fn in module.functions:
        if fn.is_declaration:
            continue
        if any("reassoc" in getattr(i, "flags", ()) for bb in fn.blocks for i in bb.instructions):
            out.append(fn.name)
    return frozenset(out)


def _mark_functions(
    module, reductions: frozenset, quick: bool, optimized: frozenset = frozenset()
) -> None:
    """Reduction kernels ``noinline`` (every build: optimized on their own, the same in
    both tiers); with ``quick``, every other defined function ``optnone noinline``
    except those named in ``optimized`` (hand-written kernels, :func:`optimized_kernels`,
    which LLVM optimizes in the quick build too).  ``alwaysinline`` helpers (vector
    math) are left alone: they become part of their callers."""
    for fn in module.functions:
        if fn.is_declaration or "alwaysinline" in fn.attributes:
            continue
        if fn.name in reductions:
            fn.attributes.add("noinline")
        elif quick and fn.name not in optimized:
            fn.attributes.add("noinline")
            fn.attributes.add("optnone")


def _defined(module) -> set:
    """Names of the functions ``module`` (an llvmlite module) defines."""
    return {f.name for f in module.functions if not f.is_declaration}


def _serial_pool_run(module) -> None:
    """Define ``graphc_pool_run`` in ``module`` (internal): every chunk on the calling
    thread, in chunk order, as the pool runs a job when it has no worker.  For quick code
    compiled before the pool exists in the process (a fresh process's first compile):
    the pool's own compile (~25 ms CPU, its IR build and text a third of it) then waits
    for the tier-up, and the first call does not.  The chunks are the ones the pool
    would run (their count depends on the thread count, not on which thread runs them),
    so the results are the same bits; only the first calls of such a graph run their
    parallel loops and shared products on one thread."""
    fn = module.globals.get(abi.POOL_RUN)
    if fn is None or not fn.is_declaration:
        return
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    chunk, ctx, n, _nthreads = fn.args
    entry, cond, body, done = (fn.append_basic_block(s) for s in ("entry", "cond", "body", "done"))
    b = ll.IRBuilder(entry)
    i64 = ll.IntType(64)
    slot = b.alloca(i64)
    b.store(ll.Constant(i64, 0), slot)
    b.branch(cond)
    b.position_at_end(cond)
    c = b.load(slot, typ=i64)
    b.cbranch(b.icmp_signed("<", c, n), body, done)
    b.position_at_end(body)
    pool._call_chunk(b, chunk, ctx, c)
    b.store(b.add(c, ll.Constant(i64, 1)), slot)
    b.branch(cond)
    b.position_at_end(done)
    b.ret_void()


_DEFINE = re.compile(r"^define [^\n]*?@\"?([^\s\"(]+)\"?\(", re.M)
_ATTR_REF = re.compile(r"#\d+|!\d+")
# pointer facts LLVM infers from the callers (which differ between the tiers): they
# never change the arithmetic, so they are dropped before the bodies are compared
_POINTER_FACTS = re.compile(
    r"\b(?:nonnull|noundef|nocapture|readonly|writeonly|"
    r"dereferenceable(?:_or_null)?\(\d+\)|captures\([^)]*\)) "
)


def optimized_functions(ir_text: str, names: frozenset) -> dict:
    """{name: its body} for the functions ``names`` in optimized LLVM IR: the instructions,
    which decide the arithmetic, without the ``define`` line (LLVM infers parameter
    attributes such as ``nonnull`` from the callers, which differ between the tiers),
    without such pointer facts on the calls inside (``nonnull``, ``noundef``,
    ``dereferenceable(n)``...: they never change the arithmetic) and with attribute group
    and metadata numbers blanked (they differ between modules)."""
    out = {}
    for m in _DEFINE.finditer(ir_text):
        if m.group(1) in names:
            start = ir_text.find("\n", m.start())
            end = ir_text.find("\n}\n", start)
            out[m.group(1)] = _POINTER_FACTS.sub("", _ATTR_REF.sub("#", ir_text[start:end]))
    return out


_HOST_HAS_FMA: Optional[bool] = None  # the host CPU has fused multiply-add (read once)


def _host_has_fma() -> bool:
    """Does the host CPU have FMA?  ``llvm.fmuladd`` is fused by the code generator only
    where it does, while LLVM's constant folder always folds it as one fused operation:
    without FMA an optimized build (which folds more) and a quick one could round a
    polynomial differently, so such hosts never start on quick code."""
    global _HOST_HAS_FMA
    if _HOST_HAS_FMA is None:
        feats = jit.host_cpu_features().split(",")
        _HOST_HAS_FMA = "+fma" in feats or "+fma4" in feats
    return _HOST_HAS_FMA


def _needs_optimizer(plan: Schedule, k) -> bool:
    """Is kernel ``k`` a loop nest whose unoptimized code would be much slower than one
    pass over its elements: a product or convolution that does not run on BLAS (its
    arithmetic is then a hand-written loop nest), or a sort?  Everything else (loops,
    BLAS products and convolutions, whose own code only copies, pooling, gathers,
    scatters, indexing, cumulative sums) is about one pass over its elements."""
    if k.kind == "matmul":
        return k.node is None or not gemm_dims(plan, k.node).blas
    if k.kind in _CONV_BLAS:
        if k.node is None:
            return True
        dt = np.dtype(plan.g.nx.nodes[k.node]["dtype"])
        return not (blas.available() and dt in (np.dtype(np.float32), np.dtype(np.float64)))
    return k.kind == "argsort"


def optimized_kernels(plan: Schedule) -> frozenset:
    """Names of the LLVM functions the quick build optimizes besides the reductions: the
    kernels that need the optimizer even for one call (:func:`_needs_optimizer`:
    products and convolutions off BLAS, sorts).  None of them accumulates with
    ``reassoc`` unless it is a reduction kernel too, so they give the same bits inlined
    into the entry (full build) or not (quick build)."""
    return frozenset(
        f"k{i}_{k.kind}" for i, k in enumerate(plan.kernels) if _needs_optimizer(plan, k)
    )


def quick_work(plan: Schedule) -> int:
    """Elements the kernels that run unoptimized in the quick tier cover in one run
    (every kernel but :func:`optimized_kernels`): what :data:`TIER0_MAX_WORK` and
    :data:`TIER_UP_WORK` count."""
    return sum(numel(k.space) for k in plan.kernels if not _needs_optimizer(plan, k))


def quick_tier_ok(plan: Schedule) -> bool:
    """Does ``plan`` start on quick code?  Plans without scan/while loops whose
    unoptimized kernels cover at most :data:`TIER0_MAX_WORK` elements
    (:func:`quick_work`), and only on a host CPU with fused multiply-add (see
    :func:`_host_has_fma`).  Convolutions, pooling, gathers and the other hand-written
    kernels start on quick code too; the few that need the optimizer even for one call
    (:func:`optimized_kernels`) are optimized in the quick build."""
    if plan.loops or not _host_has_fma():
        return False
    return quick_work(plan) <= TIER0_MAX_WORK


_QUICK: "weakref.WeakSet" = weakref.WeakSet()  # executables started on quick code


def _new_tier_locks_in_child() -> None:
    """After ``fork``: a thread of the parent may have held an executable's tier lock
    (compiling its full build), and that thread does not exist in the child; give every
    quick-tier executable a fresh lock, and finish a switch the fork interrupted after
    the new code was installed but before the call paths were re-bound."""
    for exe in list(_QUICK):
        exe._tier_lock = threading.Lock()
        if exe.tier != 0 and exe._tier_listeners:
            listeners, exe._tier_listeners = exe._tier_listeners, []
            for ref in listeners:
                cb = ref()
                if cb is not None:
                    cb()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_tier_locks_in_child)


class NativeExecutable:
    """A compiled graph: ``run(arrays) -> tuple of new output arrays``.

    ``verified=True`` skips checking ``graph`` (``ir.verify``) when the caller has just
    done so and nothing changed it since.  ``tier`` is 0 while it runs quick code (see
    :data:`TIERED`), 1 once its code is fully optimized (:meth:`upgrade`).
    """

    def __init__(
        self,
        graph: Graph,
        opt_level: int = 3,
        name: Optional[str] = None,
        fuse: Optional[bool] = None,
        poison: bool = False,
        disk_cache: Optional["cache.DiskCache"] = None,
        inplace: Optional[dict] = None,
        verified: bool = False,
    ) -> None:
        if ABI_PROBLEM is not None:
            raise GraphcError(
                f"the native backend cannot read numpy arrays on this build "
                f"({ABI_PROBLEM}); use backend='interpreter'"
            )
        if not verified:  # graphc.compile verified this very graph after its passes
            verify(graph, "lowering")
        self.graph = graph
        self.name = printable(name or graph.name)  # shown in every error message
        fuse = (opt_level >= 1) if fuse is None else fuse
        self.plan = Schedule(graph, fuse=fuse, poison=poison, inplace=inplace)
        self.opt_level = opt_level
        # its code calls graphc_pool_run: the pool is registered before the code is
        # loaded (below; quick code compiled before the pool exists runs its chunks
        # itself, see _serial_pool_run)
        self._needs_pool = parallel_policy.needs_pool(self.plan)
        if any(k.kind in _CALLS_BLAS for k in self.plan.all_kernels()):  # may call gemm
            register_blas()
        self._inspect = None  # a JIT module with IR text, for code from disk
        # opt-in per-kernel timing: [ns per kernel..., calls per kernel...], written by
        # the generated code (whose address it bakes in, so never from/to the disk cache)
        self.profile_counters: Optional[np.ndarray] = None
        if profiling_enabled():
            self.profile_counters = np.zeros(2 * len(self.plan.kernels), np.int64)
            _PROFILED.append(weakref.ref(self))
            disk_cache = None
        key = None
        if disk_cache is not None:
            try:
                # every option that changes the generated code is part of the key
                key = disk_cache.key(
                    graph,
                    opt_level,
                    fuse=fuse,
                    poison=poison,
                    inplace=sorted(self.plan.inplace.items()),
                    written=sorted(set(self.plan.inplace_requested.values())),
                )
            except Exception:  # a graph the JSON form cannot hold: no disk caching
                key = None
        quick = None
        if (
            TIERED
            and disk_cache is None
            and self.profile_counters is None  # profiled code is timed as it runs after
            and opt_level >= 1
            and quick_tier_ok(self.plan)
        ):
            module = L.lower(self.plan, self.name)
            self._reductions = reds = reduction_functions(module)
            inlined = {fn.name for fn in module.functions if "alwaysinline" in fn.attributes}
            # the entry holds a parallel sum's combination; an always-inlined sum would
            # be optimized with its caller: then no quick tier
            if abi.ENTRY not in reds and not (reds & inlined):
                if self._needs_pool and pool.status is None:
                    _serial_pool_run(module)  # the pool is compiled at the tier-up
                _mark_functions(
                    module, self._reductions, quick=True, optimized=optimized_kernels(self.plan)
                )
                quick = module
        if self._needs_pool and (quick is None or abi.POOL_RUN not in _defined(quick)):
            pool.ensure(disk_cache)  # its object code comes from the disk cache when on
        # "compiled", "disk-stored" or "disk-hit" (LLVM skipped: object code reloaded)
        self.jit, self.cache_status = cache.load_or_compile(
            self._lower if quick is None else (lambda: quick),
            disk_cache,
            key,
            opt_level,
            self.name,
            fast_regalloc=quick is not None,  # code that runs a few times: same bits
        )
        self.tier = 1 if quick is None else 0
        quick = module = None
        self._init_call()
        if self.tier == 0:
            self._start_quick_tier()

    def _lower(self):
        # the llvmlite module is not kept (~250 KB of Python objects per signature);
        # the JIT module keeps its IR text for llvm_ir() and asm()
        if self._needs_pool and pool.status is None:  # after quick code that ran its chunks
            pool.ensure(cache.resolve_disk_cache(None))  # itself: the pool, for the full build
        prof = None
        if self.profile_counters is not None:
            prof = (self.profile_counters.ctypes.data, _clock_gettime_address())
        module = L.lower(self.plan, self.name, profile=prof)
        _mark_functions(module, reduction_functions(module), quick=False)
        return module

    def kernel_profile(self) -> list:
        """Per-kernel times of a profiled executable (built with ``GRAPHC_PROFILE=1``):
        one dict per kernel that ran -- ``index``, ``kind``, ``nodes`` (its ops and
        shape), ``calls`` and ``seconds`` (summed over calls since the last
        :meth:`reset_profile`; a product's fused epilogue counts in the product's time).
        An empty list when the executable was built without profiling."""
        c = self.profile_counters
        if c is None:
            return []
        n = len(self.plan.kernels)
        rows = []
        for i, kern in enumerate(self.plan.kernels):
            calls = int(c[n + i])
            if calls:
                rows.append(
                    {
                        "index": i,
                        "kind": kern.kind,
                        "nodes": _kernel_label(self.plan, kern),
                        "calls": calls,
                        "seconds": int(c[i]) * 1e-9,
                    }
                )
        return rows

    def reset_profile(self) -> None:
        """Zero the per-kernel counters of a profiled executable (no-op otherwise)."""
        if self.profile_counters is not None:
            self.profile_counters[:] = 0

    def _init_call(self) -> None:
        g = self.graph
        self.n_in = len(g.inputs)
        self.out_specs = [
            (tuple(g.nx.nodes[o]["shape"]), np.dtype(g.nx.nodes[o]["dtype"])) for o in g.outputs
        ]
        self.in_specs = [
            (tuple(g.nx.nodes[i]["shape"]), np.dtype(g.nx.nodes[i]["dtype"])) for i in g.inputs
        ]
        # small graphs keep the GIL (cheaper call); big ones release it while running
        self.releases_gil = parallel_policy.releases_gil(self.plan)
        self._native = _builtin(self.jit, abi.ENTRY)
        self._inplace = dict(self.plan.inplace)

    @property
    def arena_bytes(self) -> int:
        return self.plan.arena_bytes

    def run(self, arrays: Sequence[np.ndarray]) -> tuple:
        """The outputs for these input arrays: a tuple of new arrays (an output updated in
        place is its input array).  Each input must be an ndarray of the compiled shape and
        dtype (the native code trusts both); a wrong one raises GraphcError naming it.  An
        ndarray subclass is read as its base array (a masked array is refused)."""
        if arrays.__class__ is not tuple:
            arrays = tuple(arrays)
        if len(arrays) != self.n_in:
            raise GraphcError(f"{self.name}: takes {self.n_in} input arrays, got {len(arrays)}")
        arrays = tuple(
            a if type(a) is np.ndarray else self._base_array(k, a) for k, a in enumerate(arrays)
        )
        for k, (a, (shape, dt)) in enumerate(zip(arrays, self.in_specs)):
            if a.shape != shape or a.dtype != dt:
                raise GraphcError(
                    f"{self.name}: input {k} is {a.dtype}{list(a.shape)}, compiled "
                    f"for {dt}{list(shape)}; pass an array of that shape and dtype "
                    "(or call the CompiledFunction, which recompiles)"
                )
        return self.run_trusted(arrays)

    def _base_array(self, k: int, a) -> np.ndarray:
        """Input ``k`` as a plain ndarray: a subclass (np.matrix, np.memmap, a user class)
        is viewed as its base array; a masked array or anything else is refused -- checked
        on the real type, never on ``__class__``, which any object can fake."""
        t = type(a)
        if not issubclass(t, np.ndarray):
            raise GraphcError(
                f"{self.name}: input {k} is of type {t.__name__}, not a numpy "
                "array; pass np.asarray(...) of it"
            )
        ma = sys.modules.get("numpy.ma")  # no masked array exists unless it was imported
        if ma is not None and issubclass(t, ma.MaskedArray):
            raise GraphcError(
                f"{self.name}: input {k} is a masked array; masks are not "
                "supported: pass x.filled(value) or np.ma.getdata(x)"
            )
        return np.asarray(a)

    def run_trusted(self, arrays: tuple) -> tuple:
        """:meth:`run` for callers that already matched the inputs against the compiled
        signature (CompiledFunction's cache key covers shape and dtype)."""
        if arrays.__class__ is not tuple:
            arrays = tuple(arrays)
        outs = self._native(arrays)
        if outs.__class__ is int:
            return self._slow(arrays, outs)
        return outs

    def _slow(self, arrays: tuple, rc: int) -> tuple:
        """A call that returned a code instead of the outputs (``rc``: graphc.backend.abi RC_*)."""
        if rc in (abi.RC_LAYOUT, abi.RC_TYPE):
            fixed = []
            for k, (a, (shape, dt)) in enumerate(zip(arrays, self.in_specs)):
                if type(a) is not np.ndarray:
                    a = self._base_array(k, a)
                if a.shape != shape:
                    raise GraphcError(
                        f"{self.name}: input {k} has shape {a.shape} where {shape} was compiled"
                    )
                fixed.append(np.array(a, dtype=dt, order="C", copy=True))
            outs = self._native(tuple(fixed))
            if outs.__class__ is not int:
                return outs
            rc = outs
        if rc == abi.RC_INDEX:
            raise IndexError(
                f"{self.name}: an index tensor holds a value out of range for the "
                "dimension it indexes"
            )
        if rc == abi.RC_NOMEM:
            raise MemoryError(
                f"{self.name}: could not allocate {self.plan.arena_bytes} bytes for intermediates"
            )
        if rc == abi.RC_ARGS:
            raise GraphcError(
                f"{self.name}: the native entry takes a tuple of {self.n_in} "
                f"arrays, got {type(arrays).__name__} of {len(arrays)}"
            )
        raise GraphcError(f"{self.name}: native call failed with code {rc}")

    # --- tiers -----------------------------------------------------------------
    def _start_quick_tier(self) -> None:
        """Route calls through a counter until the code is upgraded (see :data:`TIERED`).

        Only the quick tier pays for the counter: :meth:`upgrade` replaces
        ``self._native`` with the optimized builtin and tells the fast call paths that
        bound the counting one (:meth:`on_upgrade`) to bind the new one.
        """
        quick_native = self._native
        self._tier_lock = threading.Lock()
        _QUICK.add(self)  # a forked child gets a fresh lock (_new_tier_locks_in_child)
        self._tier_calls = 0
        self._tier_listeners: list = []
        # calls after which the code is upgraded: TIER_UP_CALLS, fewer for big graphs
        # (at least 2: the first call is what the quick build is for)
        up = min(TIER_UP_CALLS, max(2, -(-TIER_UP_WORK // max(1, quick_work(self.plan)))))
        me = weakref.ref(self)  # the counter must not keep the executable alive

        def counting_native(arrays):
            exe = me()
            if exe is not None and exe.tier != 0:
                # a call path still bound to this function after the switch (a fast
                # path made while the switch ran, or a fork that interrupted it): the
                # optimized code, which gives the same bits
                return exe._native(arrays)
            outs = quick_native(arrays)
            if exe is not None and exe.tier == 0:
                exe._tier_calls += 1
                if exe._tier_calls >= up:
                    exe._upgrade_from_call()
            return outs

        self._native = counting_native

    def on_upgrade(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once this executable's code has been upgraded (at once if it
        already is).  Only a weak reference to a bound method's object is kept."""
        if self.tier != 0:
            callback()
            return
        ref = weakref.WeakMethod(callback) if hasattr(callback, "__self__") else None
        self._tier_listeners.append(ref if ref is not None else (lambda cb=callback: cb))

    def _upgrade_from_call(self) -> None:
        """The tier-up a call triggers: never blocks (another thread already compiling
        keeps running the quick code meanwhile) and never fails the call (a compile
        error leaves the quick code in place, with a warning)."""
        if not self._tier_lock.acquire(blocking=False):
            return
        try:
            self._upgrade_locked()
        except Exception as e:  # the quick code is correct: keep running it
            self._tier_calls = -(1 << 62)  # never try again
            try:
                warnings.warn(
                    f"graphc: {self.name}: re-compiling with the full LLVM pipeline failed "
                    f"({type(e).__name__}: {e}); keeping the quick code",
                    RuntimeWarning,
                    stacklevel=3,
                )
            except Exception:  # warnings turned into errors (-W error): the call's
                pass  # outputs are already computed and correct; do not lose them
        finally:
            self._tier_lock.release()

    def upgrade(self) -> bool:
        """Compile this graph with the full LLVM pipeline now and switch every call path
        to that code, if it still runs quick code (tier 0).  Returns True if it switched.
        Safe with calls in flight on other threads: they finish on the quick code, which
        stays alive as long as anything refers to it."""
        if self.tier != 0:
            return False
        with self._tier_lock:
            return self._upgrade_locked()

    def _upgrade_locked(self) -> bool:
        if self.tier != 0:
            return False
        mod, _ = cache.load_or_compile(self._lower, None, None, self.opt_level, self.name)
        names = self._reductions
        if optimized_functions(mod.llvm_ir(True), names) != optimized_functions(
            self.jit.llvm_ir(True), names
        ):
            # never observed; would mean a sum's last bits change at the switch
            mod.close()
            raise GraphcError(
                f"the optimized reduction kernels ({', '.join(sorted(names))}) differ "
                "between the quick and the full build; the quick build stays in use"
            )
        native = _builtin(mod, abi.ENTRY)
        # a call still running the quick code holds the counting function, which holds
        # the quick builtin, which holds its JIT module: that code stays alive until then
        self.jit, self._native, self.tier = mod, native, 1
        listeners, self._tier_listeners = self._tier_listeners, []
        for ref in listeners:
            cb = ref()
            if cb is not None:
                cb()
        return True

    # --- inspection -----------------------------------------------------------
    def _inspectable(self) -> "jit.JitModule":
        """A JIT module with IR text: code loaded from the disk cache has none, so the
        first inspection compiles the same module again (used for inspection only).
        Quick-tier code is upgraded first: inspection shows the code hot calls run."""
        try:
            self.upgrade()
        except GraphcError:  # the quick build stays (see _upgrade_locked): show it
            pass
        if self.jit.opt_level is not None:
            return self.jit
        if self._inspect is None:
            mod = jit.compile_module(self._lower(), self.opt_level, name=self.name)
            mod.close()  # only its IR text is needed (asm() re-generates code)
            self._inspect = mod
        return self._inspect

    def legend(self, mark: str = ";") -> str:
        """Comment lines naming each kernel's graph nodes and source lines.

        LLVM drops comments when it parses IR and inlines the kernels into
        ``graphc_entry`` at O1+, so optimized IR and assembly start with this
        table to tie the code back to the graph.  Names and source lines are escaped
        (``irtext.escape``): the text may be fed back to LLVM.
        """
        lines = [
            f"{mark} graphc: {irtext.escape(self.graph.name)}: {len(self.plan.kernels)} "
            f"kernel(s), arena {self.plan.arena_bytes} bytes; kernels k<i>_<kind> may be "
            f"inlined into {abi.ENTRY}"
        ]
        # (plan, function name prefix, indent, next kernel) or a line: a loop's graphs
        # right after its kernel, nested (iteratively, depth first)
        stack: list = [(self.plan, "", "  ", 0)]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                lines.append(item)
                continue
            plan, prefix, ind, i = item
            if i >= len(plan.kernels):
                continue
            k = plan.kernels[i]
            stack.append((plan, prefix, ind, i + 1))
            nodes = {n for n, _ in k.stores} | set(k.reduces)
            if k.node is not None:
                nodes.add(k.node)
            if k.kind == "loop":  # the elementwise nodes fused into the loop, too
                nodes |= {
                    n
                    for n in plan.expr_nodes(plan.kernel_roots(k))
                    if plan.g.nx.nodes[n]["op"] not in ("input", "const")
                }
            lines.append(f"{mark} {ind}{prefix}k{i}_{k.kind}:")
            lines += [f"{mark} {ind}  {irtext.escape(describe(plan.g, n))}" for n in sorted(nodes)]
            if k.kind in ("scan_loop", "while_loop"):
                lp = plan.loops[k.node]
                lines.append(f"{mark} {ind}  {irtext.escape(lp.header())}")
                for role, sp in reversed(lp.graphs()):
                    stack.append((sp, f"{prefix}k{i}_{role}_", ind + "    ", 0))
                    stack.append(
                        f"{mark} {ind}  {prefix}k{i}_{role}: graph {irtext.escape(sp.g.name)}, "
                        f"{len(sp.kernels)} kernel(s), arena {sp.arena_bytes} bytes"
                    )
        return "\n".join(lines) + "\n"

    def llvm_ir(self, optimized: bool = False) -> str:
        text = self._inspectable().llvm_ir(optimized=optimized)
        return self.legend(";") + text if optimized else text

    def asm(self) -> str:
        return self.legend("#") + self._inspectable().asm()
