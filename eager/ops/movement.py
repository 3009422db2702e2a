"""Movement primitives: reshape, transpose (any permutation), expand, indexing."""

from __future__ import annotations

import math

import numpy as np

from typing import Optional

import eager.surface as S  # S.where...; by full name ("from .. import" is an edge to eager)
from .registry import Meta, check_size, defop
import eager.ops.onnx_rules as R


def _rng():
    return np.random.default_rng(99)


def _reshape_shape(x: Meta, shape) -> Meta:
    n_in = math.prod(x.shape)  # Python ints: exact for any size
    n_out = math.prod(shape)
    if n_in != n_out:
        raise RuntimeError(f"reshape: shape {list(shape)} is invalid for input of size {n_in}")
    return Meta(tuple(shape), x.dtype)


defop(
    "reshape",
    onnx=R.reshape,
    forward=lambda x, shape: x.reshape(shape),
    shape=_reshape_shape,
    arity=1,
    attrs={"shape": "shape"},
    saves=(),
    family="view",
    view=True,
    vjp=(lambda g, out, x, shape: g.reshape(x.shape),),
    samples=lambda: [
        ([_rng().uniform(-1, 1, size=(3, 4))], {"shape": (2, 6)}),
        ([_rng().uniform(-1, 1, size=())], {"shape": (1, 1)}),
        ([_rng().uniform(-1, 1, size=(0, 4))], {"shape": (4, 0)}),
    ],
    doc="the same elements in a new shape",
)


def _inverse(perm):
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def _transpose_shape(x: Meta, perm) -> Meta:
    if sorted(perm) != list(range(len(x.shape))):
        raise RuntimeError(
            f"transpose: perm {list(perm)} is not a permutation of {len(x.shape)} dims"
        )
    return Meta(tuple(x.shape[p] for p in perm), x.dtype)


defop(
    "transpose",
    onnx=R.transpose,
    forward=lambda x, perm: x.transpose(perm),
    shape=_transpose_shape,
    arity=1,
    attrs={"perm": "perm"},
    saves=(),
    family="view",
    view=True,
    vjp=(lambda g, out, x, perm: g._op("transpose", "PermuteBackward0", perm=_inverse(perm)),),
    samples=lambda: [
        ([_rng().uniform(-1, 1, size=(3, 4))], {"perm": (1, 0)}),
        ([_rng().uniform(-1, 1, size=(2, 3, 4))], {"perm": (2, 0, 1)}),
        ([_rng().uniform(-1, 1, size=())], {"perm": ()}),
        ([_rng().uniform(-1, 1, size=(1, 0, 3))], {"perm": (2, 1, 0)}),
    ],
    doc="dimensions permuted",
)


def _expand_shape(x: Meta, shape) -> Meta:
    lead = len(shape) - len(x.shape)
    if lead < 0 or any(d != 1 and d != shape[i + lead] for i, d in enumerate(x.shape)):
        raise RuntimeError(f"expand: cannot expand shape {list(x.shape)} to {list(shape)}")
    return Meta(tuple(shape), x.dtype)


def broadcast_view(src: np.ndarray, shape) -> Optional[np.ndarray]:
    """np.broadcast_to(src, shape) for a C-contiguous, non-empty ``src`` (a read-only view,
    built directly: broadcast_to's nditer costs about 2 us), or None if it does not apply."""
    lead = len(shape) - src.ndim
    strides = [0] * lead
    try:
        for n, s, st in zip(shape[lead:], src.shape, src.strides):
            if s == n:
                strides.append(st if n != 1 else 0)
            elif s == 1 and n.__class__ is int and n >= 0:
                strides.append(0)
            else:
                return None
        if lead and any(n.__class__ is not int or n < 0 for n in shape[:lead]):
            return None
        out = np.ndarray(shape, src.dtype, src, 0, strides)
    except (TypeError, ValueError):
        return None
    out.flags.writeable = False
    return out


def _expand(x, shape):
    if x.__class__ is np.ndarray and x.flags.c_contiguous and x.size and len(shape) >= x.ndim:
        out = broadcast_view(x, shape)
        if out is not None:
            return out
    try:
        return np.broadcast_to(x, shape)
    except ValueError:  # PyTorch's error for a size numpy cannot address
        check_size(shape, x.dtype, "expand")
        raise


defop(
    "expand",
    onnx=R.expand,
    forward=_expand,
    shape=_expand_shape,
    arity=1,
    attrs={"shape": "shape"},
    saves=(),
    family="view",
    view=True,
    vjp=(lambda g, out, x, shape: g,),  # sum_to(g, x.shape) is applied by the caller
    samples=lambda: [
        ([_rng().uniform(-1, 1, size=(3, 1))], {"shape": (2, 3, 4)}),
        ([_rng().uniform(-1, 1, size=())], {"shape": (2,)}),
        ([_rng().uniform(-1, 1, size=(1,))], {"shape": (3, 0)}),
    ],
    doc="broadcast to a larger shape",
)


# --- indexing -------------------------------------------------------------------

# The VJP rules of the indexing ops read the index operands (never the data): save
# every operand from position 1 on (numpy allows at most 64 index arrays).
_INDEX_OPERANDS = tuple(range(1, 66))


def _getitem(x, *idx, index):
    key = S.decode_index(index, idx)
    try:
        out = x[key]
    except IndexError as e:
        raise IndexError(f"getitem: {e} (tensor shape {list(x.shape)})") from None
    if out.__class__ is not np.ndarray:
        # all-integer index: numpy returns a scalar copy, PyTorch a 0-d view (a[1].add_(5)
        # writes into a); a trailing ``...`` makes numpy return the same element as a view
        out = x[key + (Ellipsis,)]
    return out


def _getitem_shape(x: Meta, *idx: Meta, index) -> Meta:
    for item in index:
        if item[0] == "t" and idx[item[1]].dtype.kind == "b":
            # a 0-d bool index too: x[b] has a dim of size 1 or 0 depending on b's value
            raise TypeError(
                "getitem: boolean-mask indexing has a data-dependent shape, which a "
                "static graph cannot express; use graphc.where(mask, x, 0) (or sum of "
                "a masked product) instead, or run this part eagerly"
                if idx[item[1]].shape != ()
                else "getitem: indexing with a 0-d bool tensor (x[b], x[True]) adds a dim "
                "of size 1 or 0 depending on its value, which a static graph cannot "
                "express; use graphc.where(b, x, 0) or x.unsqueeze(0) instead, or "
                "run this part eagerly"
            )
    # Index a zero-strided dummy of the right shape: exact numpy semantics, no data touched.
    dummy = np.broadcast_to(np.zeros((), np.int8), x.shape)
    try:
        ints = [it[1] for it in index if it[0] == "t"]  # integer index tensors (bools
        if not ints:  # were refused above)
            return Meta(np.shape(dummy[S.decode_index(index, ())]), x.dtype)  # basic: a view
        return Meta(_advanced_index_shape(dummy, idx, index, ints), x.dtype)
    except IndexError as e:
        raise IndexError(f"getitem: {e} (tensor shape {list(x.shape)})") from None


def _stand_ins(idx, lead: tuple = (), ndim: int = 0, only=()) -> list:
    """Zero-strided zero arrays for index operands (nothing allocated); those in ``only``
    get shape ``lead + (1,) * (ndim - their ndim) + their shape``."""
    return [
        np.broadcast_to(
            np.zeros((), m.dtype),
            lead + (1,) * (ndim - len(m.shape)) + tuple(m.shape) if k in only else m.shape,
        )
        for k, m in enumerate(idx)
    ]


def _advanced_index_shape(dummy, idx, index, ints) -> tuple:
    """numpy's result shape for integer index arrays, computed on empty stand-ins.

    Indexing a dummy with the real index arrays allocates (and fills) the whole result,
    which a hostile graph file can make huge.  Every integer index operand becomes an
    empty zero-strided array of shape ``(0, M) + broadcast shape``, so numpy places the
    broadcast dims exactly as it would (first, or where the index arrays are) in a result
    of size 0.  Done for M = 1 and 2, the first dim that differs tells where the marker
    dims sit; dropping them gives the real shape.  Bounds: integer items are checked by
    numpy as usual, and a non-empty index on a size-0 dim is found on a copy of the
    problem where every size is at most 1.
    """
    key = S.decode_index
    small = np.broadcast_to(np.zeros((), np.int8), tuple(min(d, 1) for d in dummy.shape))
    tiny = [np.zeros(tuple(min(d, 1) for d in m.shape), m.dtype) for m in idx]
    small[key(tuple(("i", 0) if it[0] == "i" else it for it in index), tiny)]
    try:
        bshape = np.broadcast_shapes(*(idx[k].shape for k in ints))
    except ValueError:
        raise IndexError(
            "shape mismatch: indexing arrays could not be broadcast together "
            f"with shapes {' '.join(str(tuple(idx[k].shape)) for k in ints)}"
        ) from None
    one, two = (dummy[key(index, _stand_ins(idx, (0, m), len(bshape), ints))].shape for m in (1, 2))
    p = next(i for i, (a, b) in enumerate(zip(one, two)) if a != b) - 1
    return one[:p] + one[p + 2 :]


def _getitem_vjp(g, out, x, *idx, index):
    return g._op("getitem_grad", "IndexBackward0", *idx, index=index, shape=tuple(x.shape))


def _getitem_grad(g, *idx, index, shape):
    z = np.zeros(shape, dtype=g.dtype)
    key = S.decode_index(index, idx)
    if any(item[0] == "t" for item in index):
        np.add.at(z, key, g)  # repeated indices accumulate
    else:
        z[key] = g
    return z


def _getitem_grad_shape(g: Meta, *idx: Meta, index, shape) -> Meta:
    _check_assigned("getitem_grad", g, Meta(tuple(shape), g.dtype), idx, index)
    return Meta(tuple(shape), g.dtype)


def assigned_shape(v_shape: tuple, x: Meta, idx: tuple, index: tuple) -> tuple:
    """The shape ``x[index] = v`` assigns ``v`` as: numpy and PyTorch drop leading size-1
    dims of a value with more dims than the selection (``a[..., :1] = ones(1, 1)`` for a
    1-D ``a``).  Callers reshape the value to it before making a ``setitem``."""
    v_shape = tuple(v_shape)
    if any(it[0] == "t" and idx[it[1]].dtype.kind == "b" for it in index):
        return v_shape
    sel = _getitem_shape(x, *idx, index=index).shape
    while len(v_shape) > len(sel) and v_shape[0] == 1:
        v_shape = v_shape[1:]
    return v_shape


def _check_assigned(op: str, v: Meta, x: Meta, idx: tuple, index: tuple) -> None:
    """``x[index] = v`` must be well formed: the index valid for ``x`` and ``v``
    broadcastable to what it selects (as numpy requires), so the code that assigns never
    reads ``v`` with strides it does not have.  A boolean mask selects a data-dependent
    number of elements; numpy checks those when it runs.  RuntimeError, as eager and
    PyTorch raise for the value of ``x[i] = v``."""
    if any(it[0] == "t" and idx[it[1]].dtype.kind == "b" for it in index):
        return
    sel = _getitem_shape(x, *idx, index=index).shape
    try:
        ok = np.broadcast_shapes(tuple(v.shape), sel) == sel
    except ValueError:
        ok = False
    if not ok:
        raise RuntimeError(
            f"{op}: shape mismatch: value array of shape {list(v.shape)} "
            f"could not be broadcast to indexing result of shape {list(sel)}"
        )


def _getitem_samples():
    r = _rng()
    return [
        ([r.uniform(-1, 1, size=(4, 5))], {"index": (("i", 1),)}),
        ([r.uniform(-1, 1, size=(4, 5))], {"index": (("s", 1, None, 2), ("n",), ("e",))}),
        ([r.uniform(-1, 1, size=(4, 5)), np.array([0, 2, 2])], {"index": (("t", 0),)}),
        ([r.uniform(-1, 1, size=(4, 5))], {"index": (("e",), ("i", -1))}),
        ([r.uniform(-1, 1, size=())], {"index": (("n",),)}),
        ([r.uniform(-1, 1, size=(0, 3))], {"index": (("s", None, None, None), ("i", 1))}),
        (
            [r.uniform(-1, 1, size=(1, 3)), np.array([[0, 2], [1, 1]])],
            {"index": (("i", 0), ("t", 0))},
        ),
    ]


defop(
    "getitem",
    onnx=R.getitem,
    forward=_getitem,
    shape=_getitem_shape,
    arity=None,
    attrs={"index": "index"},
    saves=_INDEX_OPERANDS,
    family="index",
    view=True,
    vjp=(_getitem_vjp,),
    samples=_getitem_samples,
    doc="basic and advanced indexing (slices, ints, None, Ellipsis, index tensors)",
)


def _getitem_grad_samples():
    r = _rng()
    return [
        ([r.uniform(-1, 1, size=(5,))], {"index": (("i", 1),), "shape": (4, 5)}),
        (
            [r.uniform(-1, 1, size=(3, 5)), np.array([0, 2, 2])],
            {"index": (("t", 0),), "shape": (4, 5)},
        ),
    ]


defop(
    "getitem_grad",
    onnx=R.getitem_grad,
    forward=_getitem_grad,
    shape=_getitem_grad_shape,
    arity=None,
    attrs={"index": "index", "shape": "shape"},
    saves=_INDEX_OPERANDS,
    family="index",
    vjp=(
        lambda g, out, gy, *idx, index, shape: g._op(
            "getitem", "IndexBackward0", *idx, index=index
        ),
    ),
    samples=_getitem_grad_samples,
    doc="the gradient of getitem: g scattered (added) into zeros of the input's shape",
)


def _setitem(x, v, *idx, index):
    out = x.copy()
    try:
        out[S.decode_index(index, idx)] = v
    except ValueError as e:  # PyTorch: a bad index is an IndexError, a bad value not
        raise RuntimeError(
            f"index assignment: {e} (tensor shape {list(x.shape)}, value shape {list(np.shape(v))})"
        ) from None
    return out


def _setitem_shape(x: Meta, v: Meta, *idx: Meta, index) -> Meta:
    _check_assigned("setitem", v, x, idx, index)
    return Meta(x.shape, x.dtype)


def _setitem_vjp_x(g, out, x, v, *idx, index):
    zero = g._wrap_const(np.zeros((), dtype=g._npdtype))
    return g._op("setitem", "CopySlices", zero, *idx, index=index)


def _setitem_vjp_v(g, out, x, v, *idx, index):
    if (
        len(index) == 1
        and index[0][0] == "t"
        and len(v.shape) <= 1
        and int(np.prod(v.shape)) == 1
        and idx[index[0][1]]._npdtype.kind == "b"
        and tuple(idx[index[0][1]].shape) == tuple(x.shape)
    ):
        # x[mask] = scalar: g[mask] has a data-dependent shape (a static graph cannot hold
        # it); the masked g in x's shape sums to the same gradient
        return S.where(idx[index[0][1]], g, 0)
    return g._op("getitem", "IndexBackward0", *idx, index=index)


def _setitem_samples():
    r = _rng()
    return [
        ([r.uniform(-1, 1, size=(4, 5)), r.uniform(-1, 1, size=(5,))], {"index": (("i", 1),)}),
        (
            [r.uniform(-1, 1, size=(4, 5)), r.uniform(-1, 1, size=())],
            {"index": (("s", None, 2, None),)},
        ),
        (
            [r.uniform(-1, 1, size=(4, 5)), r.uniform(-1, 1, size=(5,)), np.array([3, 0])],
            {"index": (("t", 0),)},
        ),
        # grad_h[h < 0] = 0: a boolean mask and a 0-d value
        (
            [
                r.uniform(-1, 1, size=(3, 4)),
                r.uniform(-1, 1, size=()),
                r.uniform(-1, 1, size=(3, 4)) < 0,
            ],
            {"index": (("t", 0),)},
        ),
        ([r.uniform(-1, 1, size=(1, 3)), r.uniform(-1, 1, size=(1,))], {"index": (("i", 0),)}),
        (
            [r.uniform(-1, 1, size=(0, 3)), r.uniform(-1, 1, size=(3,))],
            {"index": (("s", None, None, None),)},
        ),
    ]


defop(
    "setitem",
    onnx=R.setitem,
    forward=_setitem,
    shape=_setitem_shape,
    arity=None,
    attrs={"index": "index"},
    saves=_INDEX_OPERANDS[1:],
    family="index",
    vjp=(_setitem_vjp_x, _setitem_vjp_v),
    samples=_setitem_samples,
    doc="a copy of x with the indexed elements replaced (functional index assignment)",
)
