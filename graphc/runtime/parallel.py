"""Thread count for graphc's parallel loops and its BLAS calls (one setting for both).

Large fused loops are split into chunks that the calling thread and graphc's
persistent worker threads (``graphc/runtime/pool.py``) run; small ones run on the
calling thread.  ``set_num_threads(1)`` reproduces single-threaded results bit
for bit (one chunk), and a parallel sum adds per-chunk partial sums in chunk
order, so results are deterministic for a given thread count.

Generated code reads the count from the C ``int32`` :data:`NATIVE` (registered
for JIT code as ``graphc_num_threads`` by graphc.runtime.native), which
``STATE.n`` keeps in step.
"""
from __future__ import annotations

import ctypes
import os

MAX_THREADS = 64

#: the thread count as generated code reads it (an atomic 32-bit load per call)
NATIVE = ctypes.c_int32(1)


class _State:
    def __init__(self, n: int) -> None:
        self.n = n

    @property
    def n(self) -> int:
        return self._n

    @n.setter
    def n(self, n: int) -> None:
        self._n = n
        NATIVE.value = n


STATE = _State(max(1, min(os.cpu_count() or 1, MAX_THREADS)))


def get_num_threads() -> int:
    return STATE.n


def set_num_threads(n: int) -> None:
    """Threads for parallel loops and for BLAS (1 = sequential, bit-reproducible)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"thread count must be a positive int, got {n!r}")
    STATE.n = min(n, MAX_THREADS)
    from ..backend import blas
    if blas.available():
        blas.set_num_threads(_blas_threads(STATE.n))


def _blas_threads(n: int) -> int:
    return n          # an explicit setting applies to both (see backend/blas.py for the default)


def init_blas_threads() -> None:
    """Apply GRAPHC_NUM_THREADS (if set) to loops and BLAS once, at first use."""
    env = os.environ.get("GRAPHC_NUM_THREADS")
    if env:
        try:
            set_num_threads(int(env))
        except ValueError:
            raise ValueError(f"GRAPHC_NUM_THREADS must be a positive integer, got {env!r}") \
                from None
