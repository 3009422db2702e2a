"""Matrix products (numpy's matmul semantics: 1-D, 2-D and batched)."""

from __future__ import annotations

import numpy as np

from .registry import Meta, broadcast_shapes, defop


def _rng():
    return np.random.default_rng(7)


def _matmul_shape(a: Meta, b: Meta) -> Meta:
    if not a.shape or not b.shape:
        raise RuntimeError("matmul: both arguments need at least 1 dimension")
    ka = a.shape[-1]
    kb = b.shape[0] if len(b.shape) == 1 else b.shape[-2]
    if ka != kb:
        raise RuntimeError(
            f"matmul: shapes {list(a.shape)} and {list(b.shape)} cannot be "
            f"multiplied ({ka} != {kb})"
        )
    dt = np.result_type(a.dtype, b.dtype)
    if len(a.shape) == 1 and len(b.shape) == 1:
        return Meta((), dt)
    if len(b.shape) == 1:
        return Meta(a.shape[:-1], dt)
    if len(a.shape) == 1:
        return Meta(b.shape[:-2] + b.shape[-1:], dt)
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], op="matmul")
    return Meta(batch + (a.shape[-2], b.shape[-1]), dt)


def _mT(t):
    return t.transpose(-2, -1)


def _vjp_a(g, out, a, b):
    if a.ndim == 1 and b.ndim == 1:
        return g * b
    if b.ndim == 1:  # (..., m, n) @ (n,) -> (..., m)
        return g.unsqueeze(-1) * b
    if a.ndim == 1:  # (n,) @ (..., n, p) -> (..., p)
        return (b @ g.unsqueeze(-1)).squeeze(-1)
    return g @ _mT(b)


def _vjp_b(g, out, a, b):
    if a.ndim == 1 and b.ndim == 1:
        return g * a
    if b.ndim == 1:  # grad (n,) = sum over batch/m of a^T g
        return (_mT(a) @ g.unsqueeze(-1)).squeeze(-1)
    if a.ndim == 1:
        return a.unsqueeze(-1) * g.unsqueeze(-2)
    return _mT(a) @ g


def _samples():
    r = _rng()
    shapes = [
        ((3, 4), (4, 2)),
        ((4,), (4,)),
        ((3, 4), (4,)),
        ((4,), (4, 2)),
        ((2, 3, 4), (4, 5)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((0, 4), (4, 3)),
        ((3, 0), (0, 2)),
    ]
    return [([r.uniform(-1, 1, size=a), r.uniform(-1, 1, size=b)], {}) for a, b in shapes]


def _matmul(a, b):
    return np.matmul(a, b)


defop(
    "matmul",
    forward=_matmul,
    shape=_matmul_shape,
    arity=2,
    family="matmul",
    vjp=(_vjp_a, _vjp_b),
    reads=((1,), (0,)),
    samples=_samples,
)
