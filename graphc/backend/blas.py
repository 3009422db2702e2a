"""OpenBLAS from the ``scipy-openblas32`` wheel, callable from Python and from JIT code.

A hand-written matmul in generated code does not come near a tuned BLAS, so
matrix products call ``cblas_?gemm``.  The wheel ships OpenBLAS with every
symbol prefixed (``scipy_cblas_sgemm``) so it cannot clash with another BLAS in
the process.  We load it with ``RTLD_GLOBAL`` and register the gemm addresses
with ``llvm.add_symbol`` under stable names (:data:`SGEMM_SYMBOL`,
:data:`DGEMM_SYMBOL`), so generated IR declares those names and never depends
on the wheel's prefix.  Integers are 32-bit (``blasint`` of the "32" wheel).

If the wheel is missing, :func:`available` is False and :func:`unavailable_reason`
says why; everything else raises :class:`BlasUnavailableError`.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from dataclasses import dataclass, field

import numpy as np
from llvmlite import ir

from graphc.errors import GraphcError

__all__ = [
    "SGEMM_SYMBOL",
    "DGEMM_SYMBOL",
    "CBLAS_ROW_MAJOR",
    "CBLAS_COL_MAJOR",
    "CBLAS_NO_TRANS",
    "CBLAS_TRANS",
    "BlasUnavailableError",
    "available",
    "unavailable_reason",
    "library_path",
    "config",
    "sgemm_address",
    "dgemm_address",
    "gemm_symbol",
    "declare_gemm",
    "set_num_threads",
    "get_num_threads",
    "gemm",
]

#: Names under which the gemm routines are registered for JIT code.
SGEMM_SYMBOL = "graphc_cblas_sgemm"
DGEMM_SYMBOL = "graphc_cblas_dgemm"

# CBLAS enum values (cblas.h); they are C ints in the ABI.
CBLAS_ROW_MAJOR = 101
CBLAS_COL_MAJOR = 102
CBLAS_NO_TRANS = 111
CBLAS_TRANS = 112

# Prefixes tried in order: the scipy-openblas wheels use "scipy_"; a plain
# OpenBLAS build has none.
_PREFIXES = ("scipy_", "")


class BlasUnavailableError(GraphcError, RuntimeError):
    """The BLAS library could not be loaded; the message says why and what to install."""


@dataclass
class _Blas:
    lib: ctypes.CDLL
    path: str
    prefix: str
    sgemm: ctypes._CFuncPtr
    dgemm: ctypes._CFuncPtr
    set_threads: ctypes._CFuncPtr | None
    get_threads: ctypes._CFuncPtr | None
    addresses: dict[str, int] = field(default_factory=dict)


_lock = threading.Lock()
_state: _Blas | None = None


def _new_lock_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # held by a thread of the parent: see jit._new_lock_in_child


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)
_reason: str | None = None
_loaded = False


def _find(lib: ctypes.CDLL, name: str) -> tuple[str, ctypes._CFuncPtr] | None:
    for prefix in _PREFIXES:
        try:
            return prefix, getattr(lib, prefix + name)
        except AttributeError:
            continue
    return None


def _library_file() -> str:
    """Path of scipy-openblas32's shared library.

    Found without importing the package where its layout is the known one
    (``<package>/lib/libscipy_openblas*``, as ``get_library(fullname=True)`` picks
    it): importing it reads its version through ``importlib.metadata``, ~10 ms
    of a fresh process's first compile.  Anything else asks the package itself.
    """
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.find_spec("scipy_openblas32")  # locates, never executes it
    if spec is None:
        raise ImportError("no module named 'scipy_openblas32'")
    if sys.platform != "win32" and spec.submodule_search_locations:
        lib_dir = os.path.join(list(spec.submodule_search_locations)[0], "lib")
        try:
            libs = [x for x in os.listdir(lib_dir) if x.startswith("libscipy_openblas")]
        except OSError:
            libs = []
        if libs:
            return os.path.join(lib_dir, libs[0])
    import scipy_openblas32  # noqa: PLC0415 - optional dependency, imported on first use

    lib_dir = scipy_openblas32.get_lib_dir()
    return os.path.join(lib_dir, scipy_openblas32.get_library(fullname=True))


def _gemm_argtypes(ctype: type) -> list:
    i32, ptr = ctypes.c_int, ctypes.c_void_p
    return [i32, i32, i32, i32, i32, i32, ctype, ptr, i32, ptr, i32, ctype, ptr, i32]


def _load() -> _Blas:
    """Load the library once; remember the failure reason instead of raising at import."""
    global _state, _reason, _loaded
    if _loaded:
        if _state is None:
            raise BlasUnavailableError(_reason)
        return _state
    with _lock:
        if not _loaded:
            try:
                _state = _open()
            except BlasUnavailableError as exc:
                _reason = str(exc)
            _loaded = True
    if _state is None:
        raise BlasUnavailableError(_reason)
    return _state


#: OpenBLAS reads its thread count from these when the library is loaded (its constructor
#: starts that many threads less one), the first one set winning.
_THREAD_ENV = ("OPENBLAS_NUM_THREADS",)


def _dlopen_single_threaded(path: str) -> ctypes.CDLL:
    """Load OpenBLAS with ``OPENBLAS_NUM_THREADS=1`` in the environment, restored after.

    Its constructor otherwise starts one thread per core less one, and each spins about
    0.1 s waiting for work before it sleeps: ~30-55 ms of CPU on a 2-core host during a
    fresh process's first compile, although :func:`_open` sets one thread right after
    and graphc shares products out among its own pool.  ``set_num_threads(n)`` still
    starts more threads later (OpenBLAS creates them on demand)."""
    saved = {k: os.environ.get(k) for k in _THREAD_ENV}
    for k in _THREAD_ENV:
        os.environ[k] = "1"
    try:
        return ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _open() -> _Blas:
    try:
        path = _library_file()
    except ImportError:
        raise BlasUnavailableError(
            "BLAS unavailable: the 'scipy-openblas32' wheel is not installed "
            "(pip install scipy-openblas32); matmul cannot be compiled to a BLAS call"
        ) from None
    except (OSError, IndexError) as exc:
        raise BlasUnavailableError(
            f"BLAS unavailable: scipy-openblas32 is installed but its library was not found ({exc})"
        ) from None
    try:
        lib = _dlopen_single_threaded(path)
    except OSError as exc:
        raise BlasUnavailableError(f"BLAS unavailable: cannot load {path}: {exc}") from None
    found_s, found_d = _find(lib, "cblas_sgemm"), _find(lib, "cblas_dgemm")
    if found_s is None or found_d is None:
        raise BlasUnavailableError(
            f"BLAS unavailable: {path} has no cblas_sgemm/cblas_dgemm (tried prefixes {_PREFIXES})"
        )
    prefix, sgemm = found_s
    _, dgemm = found_d
    sgemm.argtypes = _gemm_argtypes(ctypes.c_float)
    dgemm.argtypes = _gemm_argtypes(ctypes.c_double)
    sgemm.restype = dgemm.restype = None
    set_threads = _find(lib, "openblas_set_num_threads")
    get_threads = _find(lib, "openblas_get_num_threads")
    if set_threads is not None:
        set_threads[1].argtypes = [ctypes.c_int]
        set_threads[1].restype = None
    if get_threads is not None:
        get_threads[1].argtypes = []
        get_threads[1].restype = ctypes.c_int
    state = _Blas(
        lib=lib,
        path=path,
        prefix=prefix,
        sgemm=sgemm,
        dgemm=dgemm,
        set_threads=set_threads[1] if set_threads else None,
        get_threads=get_threads[1] if get_threads else None,
    )
    state.addresses = {
        SGEMM_SYMBOL: ctypes.cast(sgemm, ctypes.c_void_p).value,
        DGEMM_SYMBOL: ctypes.cast(dgemm, ctypes.c_void_p).value,
    }
    # One thread: graphc shares a big product out among its own worker pool (rows or
    # columns of the result, each share one single-threaded gemm, see backend/parallel_policy.py),
    # so its loops and its products never have two pools spinning against each other on
    # the same cores.  This OpenBLAS is graphc's own copy (prefixed symbols): numpy's BLAS
    # pool in the same process is the user's and keeps its settings.
    if set_threads is not None:
        set_threads[1](1)
    return state


def addresses() -> dict[str, int]:
    """The gemm functions' addresses under the names the generated code calls them by
    (graphc.runtime.native registers them with LLVM); empty when BLAS is unavailable."""
    return dict(_load().addresses) if available() else {}


def available() -> bool:
    """True when OpenBLAS is loaded and its gemm symbols are registered for JIT code."""
    try:
        _load()
    except BlasUnavailableError:
        return False
    return True


def unavailable_reason() -> str | None:
    """Why BLAS is unavailable, or None when it is available."""
    return None if available() else _reason


def library_path() -> str:
    """Path of the loaded OpenBLAS shared library."""
    return _load().path


def config() -> str:
    """OpenBLAS build description (version, kernel, threading), for bug reports."""
    state = _load()
    found = _find(state.lib, "openblas_get_config")
    if found is None:
        return "unknown"
    fn = found[1]
    fn.restype = ctypes.c_char_p
    return fn().decode()


def sgemm_address() -> int:
    """Address of ``cblas_sgemm`` (also registered as :data:`SGEMM_SYMBOL`)."""
    return _load().addresses[SGEMM_SYMBOL]


def dgemm_address() -> int:
    """Address of ``cblas_dgemm`` (also registered as :data:`DGEMM_SYMBOL`)."""
    return _load().addresses[DGEMM_SYMBOL]


def gemm_symbol(dtype: np.dtype | type) -> str:
    """Registered symbol name of the gemm for ``dtype`` (float32 or float64)."""
    dt = np.dtype(dtype)
    if dt == np.float32:
        return SGEMM_SYMBOL
    if dt == np.float64:
        return DGEMM_SYMBOL
    raise TypeError(f"BLAS gemm supports float32 and float64, not {dt}")


def declare_gemm(module: ir.Module, dtype: np.dtype | type) -> ir.Function:
    """Declare the cblas gemm for ``dtype`` in ``module`` under its registered name.

    Signature (all ints i32): ``void(order, transa, transb, M, N, K, alpha,
    A*, lda, B*, ldb, beta, C*, ldc)``.  Loads the library so the symbol
    resolves when the module is JIT-compiled.
    """
    _load()
    name = gemm_symbol(dtype)
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    fty = ir.FloatType() if np.dtype(dtype) == np.float32 else ir.DoubleType()
    i32, ptr = ir.IntType(32), ir.PointerType()
    fnty = ir.FunctionType(
        ir.VoidType(), [i32, i32, i32, i32, i32, i32, fty, ptr, i32, ptr, i32, fty, ptr, i32]
    )
    fn = ir.Function(module, fnty, name=name)
    fn.attributes.add("nounwind")
    return fn


def set_num_threads(n: int) -> None:
    """Set OpenBLAS's thread count (process-wide); 1 avoids oversubscription in threaded callers."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"thread count must be a positive int, got {n!r}")
    state = _load()
    if state.set_threads is None:
        raise BlasUnavailableError(f"{state.path} has no openblas_set_num_threads")
    state.set_threads(n)


def get_num_threads() -> int:
    """OpenBLAS's current thread count."""
    state = _load()
    if state.get_threads is None:
        raise BlasUnavailableError(f"{state.path} has no openblas_get_num_threads")
    return int(state.get_threads())


def gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for 2-D float32/float64 arrays through cblas (a reference for JIT gemm calls)."""
    state = _load()
    a = np.asarray(a)
    b = np.asarray(b)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"gemm needs 2-D arrays, got shapes {a.shape} and {b.shape}")
    if a.dtype != b.dtype:
        raise TypeError(f"gemm needs equal dtypes, got {a.dtype} and {b.dtype}")
    fn = {np.dtype(np.float32): state.sgemm, np.dtype(np.float64): state.dgemm}.get(a.dtype)
    if fn is None:
        raise TypeError(f"gemm supports float32 and float64, not {a.dtype}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"gemm: inner dimensions differ: {a.shape} @ {b.shape}")
    limit = np.iinfo(np.int32).max
    if max(m, n, k) > limit:
        raise ValueError(f"gemm: dimension exceeds the 32-bit BLAS limit {limit}")
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    c = np.zeros((m, n), dtype=a.dtype)
    if m and n and k:
        fn(
            CBLAS_ROW_MAJOR,
            CBLAS_NO_TRANS,
            CBLAS_NO_TRANS,
            m,
            n,
            k,
            1.0,
            a.ctypes.data,
            max(k, 1),
            b.ctypes.data,
            max(n, 1),
            0.0,
            c.ctypes.data,
            max(n, 1),
        )
    return c
