"""Op records: statistics beyond the basic reductions (prod, cumsum, cumprod...).

See docs/adding-an-op.md for what a record holds and the tests that check it.
"""

from __future__ import annotations

import numpy as np

import eager.surface as S  # S.where; by full name ("from .. import" is an edge to eager)
from .reduce import _keep_shape, _np_axis, _reduce_shape, _sum_dtype
from .registry import Meta, defop


def _rng():
    return np.random.default_rng(2468)


# --- prod: a reduction combining by multiplication -------------------------------------------


def _prod(x, axis, keepdim):
    dt = _sum_dtype(x.dtype)
    return np.multiply.reduce(x, axis=_np_axis(x, axis), keepdims=keepdim, dtype=dt)


def _prod_vjp(g, out, x, axis, keepdim):
    # PyTorch's rule: g * out / x where a slice holds no zero; where it holds exactly one,
    # the zero gets g * (the product of the others) and the rest 0; two or more: all 0.
    # Exact at first order with zeros (second order is exact away from zeros).
    keep = _keep_shape(x.shape, axis)
    o, gk = out.reshape(keep), g.reshape(keep)
    z = x == 0
    # (the primitive, not .sum(): a public dim=() means every dim, as PyTorch's)
    nz = z.long()._op("sum", "SumBackward1", axis=axis, keepdim=True)
    safe = S.where(z, 1, x)
    others = safe._op("prod", "ProdBackward1", axis=axis, keepdim=True)
    one_zero = S.where(z & (nz == 1), gk * others, 0)
    return S.where(nz == 0, gk * (o / safe), one_zero)


def _prod_samples():
    r = _rng()
    z = r.uniform(0.5, 1.5, size=(3, 4)) * r.choice([-1, 1], size=(3, 4))
    z[0, 1] = 0.0  # one zero in row 0 / column 1
    z[2, 0] = z[2, 3] = 0.0  # two zeros in row 2
    return [
        ([r.uniform(0.5, 1.5, size=(3, 4))], {"axis": (0, 1), "keepdim": False}),
        ([z], {"axis": (1,), "keepdim": True}),
        ([z], {"axis": (0,), "keepdim": False}),
        ([r.uniform(0.5, 1.5, size=(2, 3, 4))], {"axis": (0, 2), "keepdim": False}),
        ([r.uniform(0.5, 1.5, size=())], {"axis": (), "keepdim": False}),
        ([r.uniform(0.5, 1.5, size=(0, 3))], {"axis": (0,), "keepdim": False}),
        ([r.uniform(0.5, 1.5, size=(1, 3))], {"axis": (0,), "keepdim": True}),
    ]


defop(
    "prod",
    forward=_prod,
    shape=_reduce_shape(_sum_dtype),
    arity=1,
    attrs={"axis": "axes", "keepdim": "bool"},
    saves=(0,),
    saves_out=True,
    family="reduce",
    samples=_prod_samples,
    vjp=(_prod_vjp,),
    doc="product over axes (bool and small ints widen to int64)",
)


# --- cumsum / cumprod: scans along one axis ---------------------------------------------------


def _scan_shape(name):
    def rule(x: Meta, dim, **_attrs) -> Meta:
        lim = max(x.ndim, 1)
        if not -lim <= dim < lim:
            raise IndexError(
                f"{name}: dimension out of range (expected to be in range of "
                f"[{-lim}, {lim - 1}], but got {dim})"
            )
        return Meta(x.shape, x.dtype)

    return rule


def _cumsum(x, dim, reverse):
    if x.ndim == 0:
        return x.copy()
    if reverse:
        out = np.flip(np.cumsum(np.flip(x, dim), axis=dim, dtype=x.dtype), dim).copy()
    else:
        out = np.cumsum(x, axis=dim, dtype=x.dtype)
    if out.dtype.kind == "f":
        out += 0.0  # the running sum starts at +0 (PyTorch, native): -0.0 + 0.0 is +0.0
    return out


def _cumprod(x, dim):
    if x.ndim == 0:
        return x.copy()
    return np.cumprod(x, axis=dim, dtype=x.dtype)


def _cumsum_vjp(g, out, x, dim, reverse):
    # the gradient of a running sum is the running sum from the other end
    return g._op("cumsum", "CumsumBackward0", dim=dim, reverse=not reverse)


def _cumprod_vjp(g, out, x, dim):
    axis = dim % max(x.ndim, 1)
    # Exact with zeros, without data-dependent control flow.  Before the first zero of a
    # slice: reversed_cumsum(g * out) / x (PyTorch's formula; out is 0 from the zero on, so
    # those terms vanish).  At the first zero z: out[z-1] * sum_{k>=z} g[k] * prod(x[z+1..k]).
    # After it: 0 (every product holds x[z] = 0).
    if x.ndim == 0:
        return g
    zeros = (x == 0).long()
    seen = zeros._op("cumsum", "CumsumBackward0", dim=axis, reverse=False)  # zeros up to i
    before = seen == 0
    first = (x == 0) & (seen == 1)
    safe = S.where(before, x, 1)
    rev = (g * out)._op("cumsum", "CumsumBackward0", dim=axis, reverse=True)
    part1 = S.where(before, rev / safe, 0)
    tail = S.where(before | first, 1, x)._op("cumprod", "CumprodBackward0", dim=axis)
    t = S.where(seen >= 1, g * tail, 0).sum(axis, keepdim=True)
    left = safe._op("prod", "ProdBackward1", axis=(axis,), keepdim=True)
    return part1 + S.where(first, left * t, 0)


def _scan_samples(attrs):
    def samples():
        r = _rng()
        z = r.uniform(0.5, 1.5, size=(3, 5)) * r.choice([-1, 1], size=(3, 5))
        z[0, 2] = 0.0  # one zero
        z[1, 1] = z[1, 3] = 0.0  # two zeros
        z[2, 0] = 0.0  # a leading zero
        return [
            ([r.uniform(-2, 2, size=(3, 4))], {"dim": 1, **attrs}),
            ([r.uniform(-2, 2, size=(3, 4))], {"dim": 0, **attrs}),
            ([z], {"dim": 1, **attrs}),
            ([z], {"dim": 0, **attrs}),
            ([r.uniform(-2, 2, size=(2, 3, 4))], {"dim": 1, **attrs}),
            ([r.uniform(-2, 2, size=())], {"dim": 0, **attrs}),
            ([r.uniform(-2, 2, size=(0, 3))], {"dim": 0, **attrs}),
            ([r.uniform(-2, 2, size=(1, 3))], {"dim": 0, **attrs}),
        ]

    return samples


def _cumsum_samples():
    return _scan_samples({"reverse": False})() + [
        (ins, {**a, "reverse": True}) for ins, a in _scan_samples({})()[:3]
    ]


defop(
    "cumsum",
    forward=_cumsum,
    shape=_scan_shape("cumsum"),
    arity=1,
    attrs={"dim": "int", "reverse": "bool"},
    saves=(),
    family="scan",
    samples=_cumsum_samples,
    vjp=(_cumsum_vjp,),
    doc="running sum along one axis (from the end when reverse)",
)

defop(
    "cumprod",
    forward=_cumprod,
    shape=_scan_shape("cumprod"),
    arity=1,
    attrs={"dim": "int"},
    saves=(0,),
    saves_out=True,
    family="scan",
    samples=_scan_samples({}),
    vjp=(_cumprod_vjp,),
    doc="running product along one axis",
)
