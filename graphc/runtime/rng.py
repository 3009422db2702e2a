"""Random numbers for compiled code: drawn per call, reproducible after manual_seed.

A random op traced inside a compiled function (``eager.randn``, ``rand``,
``randint``, their ``_like`` forms, ``normal_``, ``uniform_``, ``bernoulli``,
dropout) becomes a graph input whose values the call draws just before running the
code, from graphc's own stream: a Philox 4x32-10 generator (counter-based, as PyTorch's
and JAX's), seeded by ``eager.manual_seed``.  So every call draws fresh numbers, the
same seed reproduces a sequence of calls exactly, and the numbers do not depend on the
thread count.  Eager keeps its own stream: eager and compiled code draw different
numbers for the same seed (as PyTorch's CPU and CUDA generators do).
"""
from __future__ import annotations

import os
import threading

import numpy as np

from eager.tensor import SEED

_lock = threading.Lock()
_gen = None
_seen = None                 # eager's (seed, count) the stream was made from


def _generator() -> np.random.Generator:
    global _gen, _seen
    seed = tuple(SEED)
    if _gen is None or seed != _seen:
        # a fixed offset keeps compiled code's stream apart from eager's for one seed
        key = None if seed[0] is None else (seed[0] + 0x9E3779B97F4A7C15) % (1 << 64)
        _gen = np.random.Generator(np.random.Philox(key=key))
        _seen = seed
    return _gen


def draw(specs: list) -> list:
    """One array per ``(kind, shape, dtype, params)``, in order, from the stream."""
    with _lock:
        g = _generator()
        out = []
        for kind, shape, dtype, params in specs:
            dt = np.dtype(dtype)
            if kind == "normal":
                a = g.standard_normal(shape, dtype=dt if dt in (np.float32, np.float64)
                                      else np.float64)
            elif kind == "uniform":
                a = g.random(shape, dtype=dt if dt in (np.float32, np.float64) else np.float64)
            else:
                a = g.integers(params["low"], params["high"], size=shape)
            out.append(np.ascontiguousarray(a, dtype=dt))
        return out


def _reset_in_child() -> None:
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_in_child)
