"""The LLVM engine wrapper (thread-safe): LLVM IR text (or an llvmlite.ir.Module) in,
callable addresses out.

Every compiled module gets its own LLVM context and its own MCJIT execution
engine, so modules never see each other's symbols (two modules may both define
``kernel``) and freeing one never touches another.  All LLVM work (parsing,
optimisation, code generation, engine creation and disposal) happens under one
process-wide re-entrant lock, :data:`LLVM_LOCK`; LLVM's global state (target
registry, option parser, ``add_symbol`` table) is not safe to use from several
threads at once, and llvmlite only locks single C calls, not sequences of them.

:func:`compile_module` has the target machine write the module's object file
(the bytes MCJIT would generate) and loads it into an engine of its own, which
never holds the LLVM module; a disk cache can store :meth:`JitModule.object_code`
and later bring the code back with :func:`load_object_code` without running
LLVM's optimiser or code generator again.  Cache keys must include
:func:`host_cpu_key` because the code is tuned for (and may only run on) the
host CPU.

Known cost: llvmlite (0.50) never frees the instrumentation callbacks of a
``PassBuilder``, about 90 KB per optimised compilation (not per call).  A pass
builder cannot be reused safely (its callbacks point into the previous run),
so the disk cache is the remedy for processes that compile thousands of
modules.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator

import llvmlite
import llvmlite.binding as llvm
from llvmlite import ir

from graphc.backend import irtext
from graphc.errors import GraphcError
from graphc.runtime import imports as _imports

__all__ = [
    "LLVM_LOCK",
    "JitError",
    "JitModule",
    "compile_module",
    "load_object_code",
    "host_cpu_key",
    "host_cpu_name",
    "host_cpu_features",
]

#: Hold this around any other direct use of ``llvmlite.binding``.
LLVM_LOCK = threading.RLock()


def _ffi_lock():
    """llvmlite's own lock around every call into LLVM (``llvmlite.binding.ffi``): a thread
    may hold it outside LLVM_LOCK too (an object freed by the garbage collector)."""
    return getattr(getattr(getattr(llvm.ffi, "lib", None), "_lock", None), "_lock", None)


def _hold_for_fork() -> None:
    """``fork`` waits for a compile in flight on another thread, and for any call into
    LLVM: LLVM's state and llvmlite's lock are then consistent in the child, where that
    thread does not exist.  graphc.runtime.imports runs it once it holds graphc's
    lazy-import lock: the order every thread takes the two in."""
    LLVM_LOCK.acquire()
    ffi = _ffi_lock()
    if ffi is not None:
        ffi.acquire()


def _release_after_fork() -> None:
    ffi = _ffi_lock()
    if ffi is not None:
        ffi.release()
    LLVM_LOCK.release()


def _new_lock_in_child() -> None:
    global LLVM_LOCK
    LLVM_LOCK = threading.RLock()
    lib_lock = getattr(getattr(llvm.ffi, "lib", None), "_lock", None)
    if lib_lock is not None and hasattr(lib_lock, "_lock"):
        lib_lock._lock = threading.RLock()


# Through graphc's own fork hooks, not os.register_at_fork: this module is imported
# lazily, possibly while a fork waits for that import (see graphc.runtime.imports).
_imports.at_fork(
    before=_hold_for_fork,
    after_in_parent=_release_after_fork,
    after_in_child=_new_lock_in_child,
)

# id(JitModule) -> (engine, context): see JitModule.__init__
_LIVE: dict = {}

_initialized = False
_host_info: tuple[str, str, str] | None = None


class JitError(GraphcError, RuntimeError):
    """LLVM rejected a module or a symbol was not found; the message says which."""


def _ensure_initialized() -> None:
    """Initialise the native target once (``llvm.initialize()`` raises on llvmlite >= 0.45)."""
    global _initialized
    if _initialized:
        return
    with LLVM_LOCK:
        if not _initialized:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _initialized = True


def _host() -> tuple[str, str, str]:
    """(triple, cpu name, feature string) of the host, computed once."""
    global _host_info
    if _host_info is None:
        _ensure_initialized()
        with LLVM_LOCK:
            _host_info = (
                llvm.get_process_triple(),
                llvm.get_host_cpu_name(),
                llvm.get_host_cpu_features().flatten(),
            )
    return _host_info


def host_cpu_name() -> str:
    """The CPU LLVM tunes for, e.g. ``'skylake'``."""
    return _host()[1]


def host_cpu_features() -> str:
    """LLVM feature string of the host, e.g. ``'+avx2,+fma,...'`` (sorted)."""
    return _host()[2]


def host_cpu_key() -> str:
    """A string that changes whenever compiled code could differ: use it in cache keys.

    Includes the triple, CPU name, CPU features, the LLVM version and the
    llvmlite version (the latter decides the LLVM passes' behaviour too).
    """
    triple, cpu, features = _host()
    llvm_version = ".".join(str(v) for v in llvm.llvm_version_info)
    return f"{triple}|{cpu}|{features}|llvm-{llvm_version}|llvmlite-{llvmlite.__version__}"


def _target_machine(opt_level: int) -> llvm.TargetMachine:
    """A host-tuned target machine configured like the one MCJIT uses."""
    triple, cpu, features = _host()
    target = llvm.Target.from_triple(triple)
    return target.create_target_machine(
        cpu=cpu, features=features, opt=opt_level, reloc="default", codemodel="jitdefault", jit=True
    )


def _check_opt_level(opt_level: int) -> int:
    if not isinstance(opt_level, int) or not 0 <= opt_level <= 3:
        raise ValueError(f"opt_level must be an int in 0..3, got {opt_level!r}")
    return opt_level


def _optimize(module: llvm.ModuleRef, tm: llvm.TargetMachine, opt_level: int) -> None:
    """Run LLVM's standard O1..O3 pipeline (new pass manager) tuned for ``tm``.

    The vectorizers are switched on from O2 like clang does; the target
    machine supplies the cost model that picks the vector width.
    """
    if opt_level == 0:
        return
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = opt_level >= 2
    pto.slp_vectorization = opt_level >= 2
    pb = llvm.create_pass_builder(tm, pto)
    mpm = pb.getModulePassManager()
    try:
        mpm.run(module, pb)
    finally:
        mpm.close()
        pb.close()
        pto.close()


def _first_lines(text: str, n: int = 12) -> str:
    lines = text.splitlines()
    more = f"\n... ({len(lines) - n} more lines)" if len(lines) > n else ""
    return "\n".join(lines[:n]) + more


class JitModule:
    """Native code for one LLVM module, alive as long as this object is.

    Keep a reference for as long as any address obtained from
    :meth:`address` may be called: closing (or garbage collecting) the module
    frees the machine code.
    """

    def __init__(
        self,
        *,
        name: str,
        opt_level: int | None,
        engine: llvm.ExecutionEngine,
        context: llvm.ContextRef,
        object_code: bytes | None,
        ir_before: str | None,
        ir_after: str | None,
        function_names: tuple[str, ...],
    ) -> None:
        self.name = name
        self.opt_level = opt_level
        self.function_names = function_names
        self._engine = engine
        self._context = context
        self._object_code = object_code
        self._ir_before = ir_before
        self._ir_after = ir_after
        self._asm: str | None = None
        # registers allocated as at -O0 (compile_module's fast_regalloc): asm() does too
        self.fast_regalloc = False
        self._addresses: dict[str, int] = {}
        # seconds per compile stage ("ir text", "llvm parse", "llvm optimize", "llvm
        # codegen", and "load" for a reload from object code): graphc.tools.compile_scaling
        self.stage_seconds: dict[str, float] = {}
        # The context must outlive the engine.  If this object dies inside a reference
        # cycle, the garbage collector finalizes everything unreachable in arbitrary
        # order, and llvmlite's own finalizers would dispose the context before the
        # engine (a crash).  Holding both from a module-level registry keeps them
        # reachable until close() disposes them in the right order.
        _LIVE[id(self)] = (engine, context)

    def __repr__(self) -> str:
        state = "closed" if self._engine is None else f"O{self.opt_level}"
        return f"<JitModule {self.name!r} {state} functions={list(self.function_names)}>"

    def address(self, name: str) -> int:
        """Address of the defined function ``name``, for ``ctypes.CFUNCTYPE(...)(addr)``."""
        cached = self._addresses.get(name)
        if cached is not None:
            return cached
        with LLVM_LOCK:
            if self._engine is None:
                raise JitError(f"JitModule {self.name!r} is closed")
            addr = self._engine.get_function_address(name)
        if not addr:
            known = ", ".join(self.function_names) or "unknown (loaded from object code)"
            raise JitError(
                f"no function {name!r} in JIT module {self.name!r}; defined functions: {known}"
            )
        self._addresses[name] = addr
        return addr

    def llvm_ir(self, optimized: bool = True) -> str:
        """LLVM IR text after (default) or before the optimisation pipeline."""
        text = self._ir_after if optimized else self._ir_before
        if text is None:
            raise JitError(
                f"JIT module {self.name!r} was loaded from object code "
                "without its IR text; pass llvm_ir=/optimized_ir= to "
                "load_object_code to keep it"
            )
        return text

    def asm(self) -> str:
        """Target assembly of the optimised module (generated on first use).

        Produced by a separate code generation from the optimised IR with the
        same target settings MCJIT used, so it matches the code that runs.
        """
        if self._asm is None:
            ir_text = self.llvm_ir(optimized=True)
            opt = 2 if self.opt_level is None else self.opt_level
            with LLVM_LOCK:
                context = llvm.create_context()
                module = llvm.parse_assembly(ir_text, context=context)
                tm = _target_machine(opt)
                try:
                    with _register_allocation(opt > 0 and not self.fast_regalloc, opt):
                        self._asm = tm.emit_assembly(module)
                finally:
                    tm.close()
                    module.close()
                    context.close()
        return self._asm

    def object_code(self) -> bytes:
        """The relocatable object file MCJIT loaded; feed it to :func:`load_object_code`."""
        if self._object_code is None:
            raise JitError(f"no object code was captured for JIT module {self.name!r}")
        return self._object_code

    def close(self) -> None:
        """Free the machine code now; addresses handed out become invalid."""
        with LLVM_LOCK:
            engine, context = self._engine, self._context
            self._engine = self._context = None
            self._addresses.clear()
            _LIVE.pop(id(self), None)
            if engine is not None:
                engine.close()
            if context is not None:
                context.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: llvmlite may already be gone
            pass


def _new_engine(module: llvm.ModuleRef, opt_level: int) -> tuple[llvm.ExecutionEngine, list[bytes]]:
    """An MCJIT engine owning ``module``, plus a list that will receive its object file."""
    tm = _target_machine(opt_level)
    engine = llvm.create_mcjit_compiler(module, tm)  # the engine now owns tm
    captured: list[bytes] = []
    engine.set_object_cache(notify_func=lambda _mod, buf: captured.append(bytes(buf)))
    return engine, captured


#: The register allocation graphc last set for LLVM's code generator (None: never set,
#: LLVM's default, the greedy allocator at -O1..-O3 and the fast one at -O0):
#: ``-optimize-regalloc`` is a process-wide option of LLVM's, read when a module's code
#: generation pipeline is built (:func:`_register_allocation`).
_OPTIMIZED_REGALLOC: list = [None]


@contextlib.contextmanager
def _register_allocation(optimized: bool, opt_level: int) -> Iterator[None]:
    """LLVM's greedy register allocator and the passes around it (``optimized``) or its
    fast allocator (what ``-O0`` runs) for the code generated in the body; call under
    LLVM_LOCK.  Register allocation decides where values live, never which operations
    run, so the machine code computes the same bits either way; the fast allocator
    spills more and generates a quick-tier module's code ~40% faster (docs/backend.md).
    After a change the option is left at ``true``, LLVM's choice at -O1..-O3, which
    other users of LLVM in the process expect (at -O0 they then get the greedy
    allocator: slower to compile, the same code)."""
    current = _OPTIMIZED_REGALLOC[0]
    if (current if current is not None else opt_level > 0) is optimized:
        yield
        return
    llvm.set_option("graphc", f"-optimize-regalloc={'true' if optimized else 'false'}")
    _OPTIMIZED_REGALLOC[0] = optimized
    try:
        yield
    finally:
        if not optimized:
            llvm.set_option("graphc", "-optimize-regalloc=true")
            _OPTIMIZED_REGALLOC[0] = True


def compile_module(
    llvm_ir: str | ir.Module,
    opt_level: int = 3,
    *,
    name: str | None = None,
    fast_regalloc: bool = False,
) -> JitModule:
    """Parse, verify, optimise at ``opt_level`` (0 = no passes) and JIT-compile for the host.

    ``llvm_ir`` is LLVM IR text or an ``llvmlite.ir.Module``.  The module's
    triple and data layout are set to the host's.  With ``fast_regalloc`` the code
    generator allocates registers as at ``-O0`` (cheaper to compile, same arithmetic,
    slower code: the quick tier's modules, whose code runs a few times); otherwise as
    LLVM does at ``opt_level``.  Raises :class:`JitError`
    with the LLVM message when the IR does not parse or verify, and before
    parsing when the text holds anything but printable ASCII, tabs and
    newlines (``irtext.check``: how injected IR would get in).
    """
    _check_opt_level(opt_level)
    t0 = time.thread_time()
    text = str(llvm_ir)
    if name is None:
        name = llvm_ir.name if isinstance(llvm_ir, ir.Module) else "<llvm ir>"
    try:
        irtext.check(text)  # a stray \r or NUL would let a name or comment become code
    except ValueError as exc:
        raise JitError(f"refusing to compile module {name!r}: {exc}") from None
    _ensure_initialized()
    seconds = {"ir text": time.thread_time() - t0}
    with LLVM_LOCK:
        context = llvm.create_context()
        module = None
        try:
            t0 = time.thread_time()
            try:
                module = llvm.parse_assembly(text, context=context)
            except RuntimeError as exc:
                raise JitError(
                    f"LLVM could not parse module {name!r}: {exc}\n{_first_lines(text)}"
                ) from None
            try:
                module.verify()
            except RuntimeError as exc:
                raise JitError(f"LLVM IR of module {name!r} is invalid: {exc}") from None
            seconds["llvm parse"] = time.thread_time() - t0
            tm = _target_machine(opt_level)
            try:
                module.triple = tm.triple
                module.data_layout = str(tm.target_data)
                t0 = time.thread_time()
                _optimize(module, tm, opt_level)
                seconds["llvm optimize"] = time.thread_time() - t0
                ir_after = str(module)
                functions = tuple(f.name for f in module.functions if not f.is_declaration)
                # The object file straight from the target machine MCJIT would be given
                # (the same bytes MCJIT generates: tests/graphc/runtime/test_coldstart.py),
                # loaded below into an engine that never holds the module: an MCJIT engine
                # built on the module would generate and load the code once more only to be
                # thrown away for the small engine (cache.load_or_compile used to do that).
                t0 = time.thread_time()
                try:
                    with _register_allocation(opt_level > 0 and not fast_regalloc, opt_level):
                        code = tm.emit_object(module)
                except RuntimeError as exc:
                    raise JitError(f"code generation failed for module {name!r}: {exc}") from None
                seconds["llvm codegen"] = time.thread_time() - t0
            finally:
                tm.close()
        finally:
            # the module is not kept: its IR texts and object code are all that is used
            if module is not None:
                module.close()
            context.close()
        t0 = time.thread_time()
        mod = load_object_code(
            code, name=name, function_names=functions, llvm_ir=text, optimized_ir=ir_after
        )
        seconds["load"] = time.thread_time() - t0
    mod.opt_level = opt_level
    mod.stage_seconds = seconds
    mod.fast_regalloc = fast_regalloc
    return mod


def load_object_code(
    data: bytes,
    *,
    name: str = "<object code>",
    function_names: tuple[str, ...] = (),
    llvm_ir: str | None = None,
    optimized_ir: str | None = None,
) -> JitModule:
    """Load an object file from :meth:`JitModule.object_code` without recompiling.

    The caller must have checked :func:`host_cpu_key` (the code may use CPU
    features another host lacks) and the integrity of the bytes (store a hash
    next to them): LLVM rejects data that is not an object file, but a
    truncated or corrupted one can crash the process.  Pass the IR texts along
    to keep :meth:`JitModule.llvm_ir` and :meth:`JitModule.asm` working.
    """
    if not isinstance(data, (bytes, bytearray)) or not data:
        raise JitError("load_object_code needs the non-empty bytes of an object file")
    _ensure_initialized()
    with LLVM_LOCK:
        context = llvm.create_context()
        empty = engine = None
        try:
            empty = llvm.parse_assembly("", context=context)
            tm = _target_machine(2)
            try:
                empty.triple = tm.triple
                empty.data_layout = str(tm.target_data)
            finally:
                tm.close()
            engine, _ = _new_engine(empty, 2)
            obj = llvm.ObjectFileRef.from_data(bytes(data))
            if not obj._ptr:  # LLVM rejected it; passing it on would crash
                raise JitError(
                    f"could not load object code for {name!r}: not an object file LLVM understands"
                )
            try:
                engine.add_object_file(obj)
                engine.finalize_object()
            except RuntimeError as exc:
                raise JitError(f"could not load object code for {name!r}: {exc}") from None
        except BaseException:
            if engine is not None:
                engine.close()
            elif empty is not None:
                empty.close()
            context.close()
            raise
    return JitModule(
        name=name,
        opt_level=None,
        engine=engine,
        context=context,
        object_code=bytes(data),
        ir_before=llvm_ir,
        ir_after=optimized_ir,
        function_names=tuple(function_names),
    )
