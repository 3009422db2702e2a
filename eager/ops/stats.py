"""Op records: statistics beyond the basic reductions (prod, cumsum, cumprod...).

See docs/adding-an-op.md for what a record holds and the tests that check it.
"""

from __future__ import annotations

import numpy as np

from .reduce import _keep_shape, _np_axis, _reduce_shape, _sum_dtype
from .registry import Meta, defop
import eager.ops.onnx_rules as R


def _rng():
    return np.random.default_rng(2468)


# --- prod: a reduction combining by multiplication -------------------------------------------


def _prod(x, axis, keepdim):
    dt = _sum_dtype(x.dtype)
    return np.multiply.reduce(x, axis=_np_axis(x, axis), keepdims=keepdim, dtype=dt)


def _prod_vjp(g, out, x, axis, keepdim):
    # grad_i = the product of the other elements of its slice = (exclusive prefix product)
    # * (exclusive suffix product) along the reduced axes flattened to one: no division, so
    # exact with any number of zeros, and differentiable again (cumprod, linrec).
    keep = _keep_shape(x.shape, axis)
    gk = g.reshape(keep)
    nd = x.ndim
    axes = sorted({a % nd for a in axis}) if nd else []
    if not axes:
        return gk  # a product over nothing is the element itself
    kept = [i for i in range(nd) if i not in axes]
    r = 1
    for a in axes:
        r *= x.shape[a]
    if r == 0 or any(x.shape[i] == 0 for i in kept):
        return x.zeros_like_()  # nothing to differentiate
    xf = x.permute(tuple(kept + axes)).reshape(tuple(x.shape[i] for i in kept) + (r,))
    k = len(kept)
    pre = _shift(xf, k, 1.0, later=False)._op("cumprod", "CumprodBackward0", dim=k)
    ends = _shift(xf.zeros_like_(), k, 1.0, later=True)  # 1 at the last position, else 0
    suf = _linrec(_shift(xf, k, 0.0, later=True), ends, k, True)  # prod of x[j > i]
    others = (pre * suf).reshape(tuple(x.shape[i] for i in kept + axes))
    inv = [0] * nd
    for pos, d in enumerate(kept + axes):
        inv[d] = pos
    return gk * others.permute(tuple(inv))


def _prod_samples():
    r = _rng()
    z = r.uniform(0.5, 1.5, size=(3, 4)) * r.choice([-1, 1], size=(3, 4))
    z[0, 1] = 0.0  # one zero in row 0 / column 1
    z[2, 0] = z[2, 3] = 0.0  # two zeros in row 2, the first leading
    z3 = r.uniform(0.5, 1.5, size=(2, 3, 4)) * r.choice([-1, 1], size=(2, 3, 4))
    z3[0, 0, 0] = z3[1, 0, 2] = 0.0  # slice 0 of axes (0, 2): two zeros, one leading
    z3[1, 1, 3] = 0.0  # slice 1: one zero (slice 2: none)
    return [
        ([z3], {"axis": (0, 2), "keepdim": True}),
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
    onnx=R.reduce_prod,
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


# --- helpers of the scan VJPs: shifts along one axis (static shapes only) ------------------


def _as(t, like):
    """``t`` in ``like``'s dtype (a no-op when they agree)."""
    return t if t._npdtype == like._npdtype else t.to(like._npdtype)


def _shift(x, axis: int, fill: float, later: bool):
    """``x`` moved one step along ``axis`` with ``fill`` entering at the free end: with
    ``later`` y_i = x_{i+1} (fill last), else y_i = x_{i-1} (fill first)."""
    n = x.shape[axis]
    if n == 0:
        return x
    pre = (slice(None),) * axis
    end = x[pre + (slice(0, 1),)]._op("fill", "FillBackward0", value=fill)
    if n == 1:
        return end
    if later:
        return x[pre + (slice(1, n),)]._op("cat", "CatBackward0", end, dim=axis)
    return end._op("cat", "CatBackward0", x[pre + (slice(0, n - 1),)], dim=axis)


def _linrec(a, b, dim: int, reverse: bool):
    return a._op("linrec", "LinrecBackward0", b, dim=dim, reverse=reverse)


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
    # grad_i = sum_{k>=i} g_k prod_{j<=k, j!=i} x_j = L_i * r_i with L the exclusive running
    # product (prod x[j < i]) and r the reverse linear recurrence r_i = g_i + x_{i+1} r_{i+1}.
    # No division: exact with zeros at every order (cumprod and linrec differentiate again).
    if x.ndim == 0 or x.shape[dim % x.ndim] == 0:
        return g
    axis = dim % x.ndim
    left = _shift(x, axis, 1.0, later=False)._op("cumprod", "CumprodBackward0", dim=axis)
    r = _linrec(_shift(x, axis, 0.0, later=True), _as(g, x), axis, True)
    return left * r


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
    onnx=R.cumsum,
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
    onnx=R.cumprod,
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


# --- linrec: a first-order linear recurrence along one axis -----------------------------------
# s_i = b_i + a_i * s_{i-1} with s_0 = b_0 (from the end when reverse).  Not a PyTorch op: the
# VJPs of cumprod and prod are built from it, and its own VJPs are linear recurrences again,
# so derivatives of every order stay exact and division-free.


def _linrec_shape(a: Meta, b: Meta, dim, reverse) -> Meta:
    if tuple(a.shape) != tuple(b.shape):
        raise RuntimeError(
            f"linrec: a and b must have the same shape, got {list(a.shape)} and {list(b.shape)}"
        )
    if a.dtype != b.dtype or np.dtype(a.dtype).kind != "f":
        raise RuntimeError(
            f"linrec: a and b must have the same floating dtype, got {np.dtype(a.dtype).name} "
            f"and {np.dtype(b.dtype).name}"
        )
    return _scan_shape("linrec")(a, dim=dim)


def _linrec_fwd(a, b, dim, reverse):
    meta = _linrec_shape(Meta(a.shape, a.dtype), Meta(b.shape, b.dtype), dim, reverse)
    s = np.array(b, dtype=meta.dtype, copy=True)
    if s.ndim == 0 or s.size == 0:
        return s
    ax = dim % s.ndim
    sv, av = np.moveaxis(s, ax, 0), np.moveaxis(np.asarray(a), ax, 0)
    n = sv.shape[0]
    order = range(n - 2, -1, -1) if reverse else range(1, n)
    step = 1 if reverse else -1
    for i in order:
        sv[i] = sv[i] + av[i] * sv[i + step]
    return s


def _linrec_vjp_b(g, out, a, b, dim, reverse):
    # r_i = g_i + a_{i+1} r_{i+1}: the same recurrence from the other end
    if a.ndim == 0:
        return g
    ax = dim % a.ndim
    return _linrec(_shift(a, ax, 0.0, later=not reverse), _as(g, a), ax, not reverse)


def _linrec_vjp_a(g, out, a, b, dim, reverse):
    if a.ndim == 0:
        return g.zeros_like_()  # s_0 = b_0 does not depend on a_0
    ax = dim % a.ndim
    prev = _shift(out, ax, 0.0, later=reverse)  # s_{i-1} (0 where the recurrence starts)
    return _linrec_vjp_b(g, out, a, b, dim, reverse) * prev


def _linrec_samples():
    r = _rng()
    u = r.uniform
    z = u(-1.5, 1.5, size=(3, 5))
    z[0, 2] = 0.0
    z[1, 1] = z[1, 3] = 0.0
    z[2, 0] = 0.0
    return [
        ([u(-1.5, 1.5, size=(3, 4)), u(-2, 2, size=(3, 4))], {"dim": 1, "reverse": False}),
        ([u(-1.5, 1.5, size=(3, 4)), u(-2, 2, size=(3, 4))], {"dim": 0, "reverse": True}),
        ([z, u(-2, 2, size=(3, 5))], {"dim": -1, "reverse": False}),
        ([z, u(-2, 2, size=(3, 5))], {"dim": 1, "reverse": True}),
        ([u(-1.5, 1.5, size=(2, 3, 4)), u(-2, 2, size=(2, 3, 4))], {"dim": 1, "reverse": False}),
        ([u(-1.5, 1.5, size=()), u(-2, 2, size=())], {"dim": 0, "reverse": False}),
        ([u(-1.5, 1.5, size=(0, 3)), u(-2, 2, size=(0, 3))], {"dim": 0, "reverse": True}),
        ([u(-1.5, 1.5, size=(1, 3)), u(-2, 2, size=(1, 3))], {"dim": 0, "reverse": False}),
    ]


defop(
    "linrec",
    onnx=R.linrec,
    forward=_linrec_fwd,
    shape=_linrec_shape,
    arity=2,
    attrs={"dim": "int", "reverse": "bool"},
    saves=(0,),
    saves_out=True,
    family="scan",
    samples=_linrec_samples,
    vjp=(_linrec_vjp_a, _linrec_vjp_b),
    doc="s_i = b_i + a_i s_(i-1) along one axis, s_0 = b_0 (from the end when reverse)",
)
