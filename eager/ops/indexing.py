"""Op records: gathering, scattering and sorting (gather, scatter_add, index_select, sort, topk...).

See docs/adding-an-op.md for what a record holds and the tests that check it.

``gather``, ``scatter`` and ``scatter_add`` follow PyTorch's ``torch.gather``/``scatter``
exactly: the index has as many dims as the tensor (a 0-d tensor counts as 1-d), its size
along every dim but ``dim`` is at most the tensor's (and at most ``src``'s along every
dim), and it selects ``out[i][j][k] = x[i][index[i][j][k]][k]`` (for dim 1).  An index
out of ``[0, size)`` is an error (no negative wrap-around, as in PyTorch).  ``argsort``
is a stable sort (NaN sorts as the largest value); ``sort``'s values are
``gather(x, dim, argsort(x))``, so their gradient is gather's.
"""

from __future__ import annotations

import numpy as np

from .registry import Meta, defop
import eager.ops.onnx_rules as R


def _rng():
    return np.random.default_rng(1515)


_INDEX_DTYPES = ("int64", "int32")
_INDEX_NP_DTYPES = tuple(np.dtype(n) for n in _INDEX_DTYPES)


def _nd(shape) -> int:
    return max(len(shape), 1)


def _size(shape, d: int) -> int:
    return shape[d] if shape else 1


def _check_dim(op: str, dim: int, x: Meta) -> None:
    n = _nd(x.shape)
    if not 0 <= dim < n:
        raise IndexError(
            f"{op}(): dimension out of range (expected to be in range of [{-n}, {n - 1}], "
            f"but got {dim})"
        )


def _check_index(op: str, x: Meta, index: Meta, dim: int, src=None) -> None:
    """PyTorch's gather/scatter shape checks (aten's scatter_gather_dtype/shape_check)."""
    _check_dim(op, dim, x)
    if index.dtype not in _INDEX_NP_DTYPES:
        raise RuntimeError(f"{op}(): Expected dtype int64 for index")
    if _nd(index.shape) != _nd(x.shape):
        raise RuntimeError(
            "Index tensor must have the same number of dimensions as "
            + ("input tensor" if src is None else "self tensor")
        )
    if src is not None:
        if src.dtype != x.dtype:
            raise RuntimeError(f"{op}(): Expected self.dtype to be equal to src.dtype")
        if _nd(src.shape) != _nd(index.shape):
            raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
    if 0 in index.shape:
        return
    for d in range(_nd(x.shape)):
        i = _size(index.shape, d)
        if d != dim and i > _size(x.shape, d) or (src is not None and i > _size(src.shape, d)):
            if src is None:
                raise RuntimeError(
                    f"Size does not match at dimension {d} expected index {list(index.shape)} "
                    f"to be no larger than self {list(x.shape)} apart from dimension {dim}"
                )
            raise RuntimeError(
                f"Expected index {list(index.shape)} to be no larger than self "
                f"{list(x.shape)} apart from dimension {dim} and to be no larger size than "
                f"src {list(src.shape)}"
            )
    if _size(x.shape, dim) == 0:
        # every index is out of range for an empty dim (native code must not read it)
        raise RuntimeError(f"index 0 is out of bounds for dimension {dim} with size 0")


def _check_bounds(ix: np.ndarray, dim: int, n: int) -> None:
    if ix.size and 0 <= ix.min() and ix.max() < n:  # two reductions, no temporaries
        return
    bad = (ix < 0) | (ix >= n)
    if bad.any():
        v = int(ix[bad].flat[0])
        raise RuntimeError(f"index {v} is out of bounds for dimension {dim} with size {n}")


def _key(ix: np.ndarray, dim: int) -> tuple:
    """The numpy key of ``x[i][index[i][j]][...]``: open grids, ``ix`` along ``dim``."""
    key = list(np.ix_(*[np.arange(n) for n in ix.shape]))
    key[dim] = ix.astype(np.intp)
    return tuple(key)


def _flat_key(ix: np.ndarray, dim: int, shape: tuple) -> np.ndarray:
    """The C-order flat positions in an array of ``shape`` of ``_key(ix, dim)``'s elements,
    in the index's C order (``x.reshape(-1)[flat] is x[key]`` element by element)."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    flat = ix.astype(np.intp) * strides[dim]
    nd = ix.ndim
    for d, n in enumerate(ix.shape):
        if d != dim and n > 1:
            flat += (np.arange(n, dtype=np.intp) * strides[d]).reshape((n,) + (1,) * (nd - d - 1))
    return flat.reshape(-1)


def _metas(*arrays) -> list:
    return [Meta(a.shape, a.dtype) for a in arrays]


def _gather(x, index, dim):
    _check_index("gather", *_metas(x, index), dim)  # eager runs the forward alone
    out_shape = index.shape
    if index.size == 0:
        return np.zeros(out_shape, x.dtype)
    xs = x.reshape(x.shape or (1,))
    ix = index.reshape(index.shape or (1,))
    _check_bounds(ix, dim, xs.shape[dim])
    # index may be smaller than x off ``dim``: x's leading corner, then numpy's gather
    corner = tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(ix.shape))
    got = np.take_along_axis(xs[corner], ix.astype(np.intp, copy=False), axis=dim)
    return np.ascontiguousarray(got).reshape(out_shape)


def _gather_shape(x: Meta, index: Meta, dim) -> Meta:
    _check_index("gather", x, index, dim)
    return Meta(index.shape, x.dtype)


def _zeros(g, shape):
    return g._wrap_const(np.zeros((), g._npdtype)).expand(tuple(shape))


def _gather_vjp(g, out, x, index, dim):
    return _zeros(g, x.shape).scatter_add(dim, index, g)


def _gather_samples():
    r = _rng()
    return [
        ([r.uniform(-1, 1, size=(3, 4)), np.array([[0, 3, 3], [1, 0, 2]])], {"dim": 1}),
        ([r.uniform(-1, 1, size=(3, 4)), np.array([[2, 0, 1, 2], [0, 0, 0, 1]])], {"dim": 0}),
        ([r.uniform(-1, 1, size=(2, 3, 2)), r.integers(0, 3, size=(2, 5, 1))], {"dim": 1}),
        ([r.uniform(-1, 1, size=()), np.array(0)], {"dim": 0}),
        ([r.uniform(-1, 1, size=()), np.array([0, 0])], {"dim": 0}),
        ([r.uniform(-1, 1, size=(1, 4)), np.array([[3, 3]], dtype=np.int32)], {"dim": 1}),
        ([r.uniform(-1, 1, size=(0, 4)), np.zeros((0, 2), np.int64)], {"dim": 1}),
        ([r.uniform(-1, 1, size=(3, 4)), np.zeros((2, 0), np.int64)], {"dim": 0}),
    ]


defop(
    "gather",
    onnx=R.gather,
    forward=_gather,
    shape=_gather_shape,
    arity=2,
    attrs={"dim": "int"},
    saves=(1,),
    family="index",
    vjp=(_gather_vjp, None),
    samples=_gather_samples,
    doc="out[..., i, ...] = x[..., index[..., i, ...], ...] along dim (torch.gather)",
)


def _scatter(add: bool):
    def forward(x, index, src, dim):
        x_, i_, s_ = _metas(x, index, src)
        _check_index("scatter_add" if add else "scatter", x_, i_, dim, s_)
        out = x.copy()
        if index.size == 0:
            return out
        xs = out.reshape(out.shape or (1,))  # a view: out is contiguous
        ix = index.reshape(index.shape or (1,))
        _check_bounds(ix, dim, xs.shape[dim])
        ss = src.reshape(src.shape or (1,))[tuple(slice(0, n) for n in ix.shape)]
        if add:  # repeated indices accumulate, in order (numpy's 1-D add.at is fastest)
            np.add.at(xs.reshape(-1), _flat_key(ix, dim, xs.shape), ss.reshape(-1))
        else:
            xs[_key(ix, dim)] = ss  # the last of repeated indices wins
        return out

    return forward


def _scatter_shape(op: str):
    def rule(x: Meta, index: Meta, src: Meta, dim) -> Meta:
        _check_index(op, x, index, dim, src)
        return Meta(x.shape, x.dtype)

    return rule


def _src_grad(gs, src):
    """``gs`` (index's shape) placed in the leading corner of a zero gradient of src's
    shape: src elements that no index reaches get no gradient."""
    shape = tuple(src.shape)
    if tuple(gs.shape) == shape:
        return gs
    if 0 in tuple(gs.shape):  # an empty index (its other sizes unchecked, as PyTorch's)
        return _zeros(gs, shape)
    corner = tuple(("s", 0, n, None) for n in (gs.shape if shape else ()))
    z = _zeros(gs, shape)
    return z._op("setitem", "CopySlices", gs, index=corner)


def _scatter_samples():
    r = _rng()  # no repeated positions: the src element that loses has a gradient anyway
    return [
        (
            [
                r.uniform(-1, 1, size=(3, 4)),
                np.array([[0, 3, 1], [1, 0, 2]]),
                r.uniform(-1, 1, size=(2, 3)),
            ],
            {"dim": 1},
        ),
        (
            [
                r.uniform(-1, 1, size=(3, 4)),
                np.array([[2, 0, 1], [0, 1, 2]]),
                r.uniform(-1, 1, size=(3, 4)),
            ],
            {"dim": 0},
        ),
        ([r.uniform(-1, 1, size=()), np.array(0), r.uniform(-1, 1, size=())], {"dim": 0}),
        ([r.uniform(-1, 1, size=(4,)), np.array([3, 1]), r.uniform(-1, 1, size=(3,))], {"dim": 0}),
        (
            [
                r.uniform(-1, 1, size=(1, 3)),
                np.array([[2]], dtype=np.int32),
                r.uniform(-1, 1, size=(1, 1)),
            ],
            {"dim": 1},
        ),
        (
            [
                r.uniform(-1, 1, size=(0, 3)),
                np.zeros((0, 2), np.int64),
                r.uniform(-1, 1, size=(0, 2)),
            ],
            {"dim": 1},
        ),
    ]


def _scatter_add_samples():
    r = _rng()
    return _scatter_samples() + [
        (
            [r.uniform(-1, 1, size=(5,)), np.array([1, 1, 4, 1]), r.uniform(-1, 1, size=(4,))],
            {"dim": 0},
        ),
        (
            [
                r.uniform(-1, 1, size=(2, 4)),
                np.array([[0, 3, 3], [1, 1, 2]]),
                r.uniform(-1, 1, size=(2, 3)),
            ],
            {"dim": 1},
        ),
    ]


defop(
    "scatter_add",
    onnx=R.scatter_add,
    forward=_scatter(True),
    shape=_scatter_shape("scatter_add"),
    arity=3,
    attrs={"dim": "int"},
    saves=(1,),
    family="index",
    vjp=(
        lambda g, out, x, index, src, dim: g,
        None,
        lambda g, out, x, index, src, dim: _src_grad(g.gather(dim, index), src),
    ),
    samples=_scatter_add_samples,
    doc="x with src added at the positions index names along dim (repeats accumulate)",
)


def _scatter_vjp_x(g, out, x, index, src, dim):
    return g.scatter(dim, index, _zeros(g, index.shape))


defop(
    "scatter",
    onnx=R.scatter,
    forward=_scatter(False),
    shape=_scatter_shape("scatter"),
    arity=3,
    attrs={"dim": "int"},
    saves=(1,),
    family="index",
    vjp=(
        _scatter_vjp_x,
        None,
        lambda g, out, x, index, src, dim: _src_grad(g.gather(dim, index), src),
    ),
    samples=_scatter_samples,
    doc="x with src written at the positions index names along dim (torch.scatter)",
)


# --- sorting ------------------------------------------------------------------------


def _argsort(x, dim, descending):
    """Stable argsort along ``dim``; NaN is the largest value (numpy's and PyTorch's)."""
    _check_dim("argsort", dim, Meta(x.shape, x.dtype))
    if x.ndim == 0:
        return np.zeros((), np.int64)
    if not descending:
        return np.argsort(x, axis=dim, kind="stable").astype(np.int64, copy=False)
    # descending and stable: sort the reversed row ascending, reverse the order back
    n = x.shape[dim]
    r = np.flip(x, axis=dim)
    idx = np.flip(np.argsort(r, axis=dim, kind="stable"), axis=dim)
    return np.ascontiguousarray((n - 1 - idx).astype(np.int64, copy=False))


def _argsort_shape(x: Meta, dim, descending) -> Meta:
    _check_dim("argsort", dim, x)
    return Meta(x.shape, np.dtype(np.int64))


def _argsort_samples():
    r = _rng()
    return [
        ([r.uniform(-1, 1, size=(3, 5))], {"dim": 1, "descending": False}),
        ([r.uniform(-1, 1, size=(3, 5))], {"dim": 0, "descending": True}),
        # ties, -0.0 == 0.0 and infinities (NaN: tests/eager/ops/test_indexing.py; the
        # native layout test compares inputs without equal_nan)
        (
            [np.array([2.0, 7.0, -np.inf, 2.0, 0.0, -0.0, np.inf, 7.0])],
            {"dim": 0, "descending": True},
        ),
        (
            [np.array([2.0, 7.0, -np.inf, 2.0, 0.0, -0.0, np.inf, 7.0])],
            {"dim": 0, "descending": False},
        ),
        ([r.integers(-3, 3, size=(2, 7))], {"dim": 1, "descending": True}),
        ([r.uniform(-1, 1, size=())], {"dim": 0, "descending": False}),
        ([r.uniform(-1, 1, size=(1, 0))], {"dim": 1, "descending": False}),
    ]


defop(
    "argsort",
    onnx=R.argsort,
    forward=_argsort,
    shape=_argsort_shape,
    arity=1,
    attrs={"dim": "int", "descending": "bool"},
    vjp=None,
    family="index",
    samples=_argsort_samples,
    doc="the indices that sort x along dim (stable; NaN is the largest value)",
)
