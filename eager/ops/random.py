"""Counter-based random numbers: the ``philox`` primitive.

graphc traces ``eager.randn``, ``rand``, ``randint`` (and everything built on them:
``normal_``, ``uniform_``, ``bernoulli``, dropout) into this op.  Its one operand is the
call's generator state, an int64 pair ``(key, counter)`` that the compiled function
receives at each call (graphc.runtime.rng advances the counter); element ``i`` of a node
is a pure function of ``(key, counter + offset + i)``: Philox 4x32-10 (Salmon et al.,
"Parallel random numbers: as easy as 1, 2, 3", SC 2011; the generator of PyTorch's CUDA
and JAX's ``rbg`` keys).  So the numbers do not depend on how the elements are split
among threads, and this numpy forward (graphc's interpreter) and the native kernel
(graphc/backend/lower.py ``philox_kernel``) give the same bits for uniform and integer
draws; normal draws agree to the last bits of float64's log and cos before rounding.

Per element, one Philox block gives four 32-bit words w0..w3:

* uniform: float32 ``(w0 >> 8) * 2**-24``; float64 ``((w0 >> 5) * 2**26 + (w1 >> 6)) *
  2**-53``: in [0, 1);
* normal: Box-Muller on two float64 uniforms, ``u1 = 1 - U(w0, w1)`` in (0, 1] and
  ``u2 = U(w2, w3)``: ``sqrt(-2 log u1) * cos(2 pi u2)``, rounded to the dtype;
* integers in [low, high): ``low + (w0 + 2**32 w1) mod (high - low)`` (a bias below
  2**-32 for ranges under 2**32, as PyTorch's CPU generator has).
"""

from __future__ import annotations

import math

import numpy as np

from .registry import Meta, check_size, defop
import eager.ops.onnx_rules as R

M0, M1 = 0xD2511F53, 0xCD9E8D57  # Philox 4x32 multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85  # Weyl key increments
ROUNDS = 10
DISTS = ("uniform", "normal", "integers")
_MASK = np.uint64(0xFFFFFFFF)


def philox4x32(c0, c1, c2, c3, k0: int, k1: int) -> tuple:
    """Philox 4x32-10 of counter words (uint64 arrays holding 32-bit values) and a key."""
    m0, m1 = np.uint64(M0), np.uint64(M1)
    for _ in range(ROUNDS):
        p0, p1 = c0 * m0, c2 * m1  # exact: 32 x 32 -> 64 bits
        c0, c1, c2, c3 = (
            (p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0),
            p1 & _MASK,
            (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1),
            p0 & _MASK,
        )
        k0, k1 = (k0 + W0) & 0xFFFFFFFF, (k1 + W1) & 0xFFFFFFFF
    return c0, c1, c2, c3


def _uniform64(a, b):
    return (
        (a >> np.uint64(5)).astype(np.float64) * 67108864.0 + (b >> np.uint64(6)).astype(np.float64)
    ) * 2.0**-53


def _philox(state, dist, shape, dtype, low, high, offset):
    dt = np.dtype(dtype)
    n = math.prod(int(d) for d in shape)
    st = np.ascontiguousarray(state, dtype=np.int64).view(np.uint64)
    key, base = int(st[0]), int(st[1])
    with np.errstate(over="ignore"):
        ctr = np.arange(n, dtype=np.uint64) + np.uint64((base + offset) % 2**64)
    zero = np.zeros(n, np.uint64)
    w0, w1, w2, w3 = philox4x32(
        ctr & _MASK, ctr >> np.uint64(32), zero, zero, key & 0xFFFFFFFF, key >> 32
    )
    if dist == "uniform":
        if dt == np.float32:
            out = (w0 >> np.uint64(8)).astype(np.float32) * np.float32(2.0**-24)
        else:
            out = _uniform64(w0, w1)
    elif dist == "normal":
        u1 = 1.0 - _uniform64(w0, w1)
        u2 = _uniform64(w2, w3)
        out = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
    else:
        span = np.uint64(int(high) - int(low))
        out = ((w0 | (w1 << np.uint64(32))) % span).astype(np.int64) + int(low)
    return np.asarray(out, dtype=dt).reshape(tuple(shape))


def _philox_shape(state: Meta, dist, shape, dtype, low, high, offset) -> Meta:
    if state.shape != (2,) or state.dtype != np.int64:
        raise RuntimeError(
            f"philox: the generator state must be int64 [2] (key, counter), "
            f"got {state.dtype} {list(state.shape)}"
        )
    if dist not in DISTS:
        raise RuntimeError(f"philox: dist must be one of {DISTS}, got {dist!r}")
    dt = np.dtype(dtype)
    if dist == "integers":
        if dt not in (np.int64, np.int32):
            raise RuntimeError(f"philox: integers are drawn as int64 or int32, not {dt}")
        info = np.iinfo(dt)
        if not int(low) < int(high) or int(high) - int(low) > 2**63:
            raise RuntimeError(
                f"philox: integers need low < high (a range below 2**63), got [{low}, {high})"
            )
        if int(low) < info.min or int(high) - 1 > info.max:
            raise RuntimeError(f"philox: [{low}, {high}) is out of bounds for {dt}")
    elif dt not in (np.float32, np.float64):
        raise RuntimeError(f"philox: {dist} draws are float32 or float64, not {dt}")
    if int(offset) < 0:
        raise RuntimeError(f"philox: offset must be >= 0, got {offset}")
    check_size(shape, dt, "philox")
    return Meta(tuple(int(d) for d in shape), dt)


def _samples() -> list:
    state = np.array([0x1234_5678_9ABC, 7], np.int64)
    return [
        (
            [state],
            {
                "dist": "uniform",
                "shape": (3, 4),
                "dtype": "float32",
                "low": 0,
                "high": 1,
                "offset": 0,
            },
        ),
        (
            [state],
            {"dist": "uniform", "shape": (), "dtype": "float64", "low": 0, "high": 1, "offset": 5},
        ),
        (
            [state],
            {
                "dist": "normal",
                "shape": (2, 0),
                "dtype": "float32",
                "low": 0,
                "high": 1,
                "offset": 0,
            },
        ),
        (
            [state],
            {
                "dist": "normal",
                "shape": (1, 5),
                "dtype": "float64",
                "low": 0,
                "high": 1,
                "offset": 12,
            },
        ),
        (
            [state],
            {
                "dist": "integers",
                "shape": (7,),
                "dtype": "int64",
                "low": -3,
                "high": 9,
                "offset": 1,
            },
        ),
    ]


defop(
    "philox",
    onnx=R.NoOnnx(
        "ONNX's RandomNormal/RandomUniform cannot reproduce graphc's Philox 4x32-10 bits: "
        "draw the random numbers outside and pass them in as an input"
    ),
    forward=_philox,
    shape=_philox_shape,
    arity=1,
    attrs={
        "dist": "str",
        "shape": "shape",
        "dtype": "dtype",
        "low": "int",
        "high": "int",
        "offset": "count",
    },
    vjp=None,
    family="random",
    samples=_samples,
    doc="random draws: Philox 4x32-10 of (key, counter + offset + element index)",
)
