"""Thread count for graphc's parallel loops and matrix products (one pool for both).

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


def _cores() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _default() -> int:
    """``GRAPHC_NUM_THREADS`` when set, else every CPU this process may use.  The planner
    decides per loop and per product whether to share it out at all (only above
    ``PARALLEL_MIN`` elements / ``GEMM_PARALLEL_MIN`` multiply-adds, backend/abi.py), so
    small work stays on the calling thread whatever the count."""
    env = os.environ.get("GRAPHC_NUM_THREADS")
    if env is None or env == "":
        return max(1, min(_cores(), MAX_THREADS))
    try:
        n = int(env)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"GRAPHC_NUM_THREADS must be a positive integer, got {env!r}")
    return min(n, MAX_THREADS)


STATE = _State(_default())


def get_num_threads() -> int:
    """Threads graphc's compiled code may use for its big loops and matrix products."""
    return STATE.n


def set_num_threads(n: int) -> None:
    """Threads for graphc's big loops and matrix products (1 = sequential and
    bit-reproducible).  Its BLAS always runs single-threaded inside each thread's share;
    numpy's own BLAS pool is not graphc's and is left alone."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"thread count must be a positive int, got {n!r}")
    STATE.n = min(n, MAX_THREADS)
