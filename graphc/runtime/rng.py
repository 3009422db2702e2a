"""The state of compiled code's random stream: a key and a counter.

A random op traced inside a compiled function (``eager.randn``, ``rand``, ``randint``,
their ``_like`` forms, ``normal_``, ``uniform_``, ``bernoulli``, dropout) becomes a
``philox`` node of the graph (eager/ops/random.py) whose operand is the generator state,
an int64 pair ``(key, counter)``, the function's last input.  Each call takes the next
range of counters from this stream (:func:`advance`), and native code turns
``(key, counter + i)`` into element i with Philox 4x32-10 (counter-based, as PyTorch's
CUDA generator and JAX's are): so every call draws fresh numbers, the same seed
reproduces a sequence of calls exactly, and the numbers do not depend on the thread
count.  The key comes from ``eager.manual_seed`` (mixed, so compiled code's stream is
not eager's: eager and compiled code draw different numbers for one seed, as PyTorch's
CPU and CUDA generators do), or from the OS when no seed was ever set.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from eager.interop import SEED

_lock = threading.Lock()
_key = 0
_counter = 0
_seen = None  # eager's (seed, count) the stream was made from


def _mix(x: int) -> int:
    """splitmix64's finalizer: a seed's bits spread over the whole key."""
    x = (x + 0x9E3779B97F4A7C15) % 2**64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) % 2**64
    return x ^ (x >> 31)


def advance(n: int) -> np.ndarray:
    """The generator state for a call drawing ``n`` numbers: int64 ``[key, counter]``;
    the stream's counter moves on by ``n``."""
    global _key, _counter, _seen
    with _lock:
        seed = tuple(SEED)
        if seed != _seen:
            _key = (
                _mix(seed[0] % 2**64)
                if seed[0] is not None
                else int.from_bytes(os.urandom(8), "little")
            )
            _counter = 0
            _seen = seed
        out = np.array([_key, _counter], np.uint64).view(np.int64)
        _counter = (_counter + int(n)) % 2**64
        return out


def _reset_in_child() -> None:
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_in_child)
