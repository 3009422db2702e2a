"""Python's cyclic garbage collector paused while graphc compiles.

A compile allocates a great many objects that live until it ends (graph node
dicts, tracers, llvmlite's IR objects); each of the collector's generation-2
passes walks every live object, so they made the compile of a big graph about
half again as slow as it is without them (a 300-step unrolled RNN: 12 s of CPU
with the collector, 8 s without).  :func:`paused` turns automatic collection off
for the duration of a compile and back on after (only if it was on, and only when
the last of several concurrent or nested compiles ends).  Nothing is lost: a
cycle created meanwhile is collected by the first collection after the compile.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Run the body with ``gc`` automatic collection disabled (re-entrant, thread-safe)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()


__all__ = ["paused"]
