"""glibc malloc thresholds for eager's array traffic (docs/eager-engine.md, "Memory").

A training step allocates and frees the same large numpy arrays (activations, their
gradients, temporaries of 0.1-10 MB) every step.  glibc serves a request above
``M_MMAP_THRESHOLD`` with a fresh ``mmap`` and gives freed memory above
``M_TRIM_THRESHOLD`` at the heap's top back to the kernel, so every step touches new
pages again: a page fault per 4 KiB, ~2 us each on a loaded machine.  W7 (the CNN
step) took ~2,900 faults a step (~6 ms of its ~20 ms) and W8 ~2,100; with the
thresholds below, none.

glibc starts with 128 KiB thresholds and raises them itself, up to 32 MiB (mmap) and
64 MiB (trim), as mmapped chunks are freed, but only when a freed chunk happens to be
the largest yet, so whether a workload keeps faulting depends on the order of its
allocations (W8 run alone: 2,100 faults a step; after W7 in the same process: 0).
``tune()`` sets the values glibc's own adjustment tops out at from the start: at most
64 MiB of freed memory stays mapped at the heap's top, the price of not faulting.

Skipped when the C library is not glibc, when the user set glibc's own
``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` / ``GLIBC_TUNABLES``
(their choice wins), or when ``EAGER_NO_MALLOPT=1``.
"""

from __future__ import annotations

import os

# glibc's malloc.h: M_TRIM_THRESHOLD = -1, M_MMAP_THRESHOLD = -3
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems
TRIM_THRESHOLD = 64 << 20  # twice the mmap threshold, as glibc's dynamic adjustment sets

_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")
_state: dict = {}


def tune() -> bool:
    """Set glibc's mmap and trim thresholds to 32 MiB / 64 MiB once per process (see the
    module's docstring); True when they were set by this or an earlier call."""
    if "done" in _state:
        return _state["done"]
    _state["done"] = False
    if os.environ.get("EAGER_NO_MALLOPT", "") not in ("", "0"):
        return False
    if any(k in os.environ for k in _USER_SETTINGS):
        return False
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
    except (AttributeError, ValueError, OSError):  # not glibc (musl, macOS, Windows)
        return False
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
        mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        mallopt.restype = ctypes.c_int
        ok = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
        ok = bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and ok
    except (ImportError, OSError, AttributeError, TypeError, ValueError):
        # (ImportError: a Python built without _ctypes; eager must import anyway)
        return False
    _state["done"] = ok
    return ok
