"""Reductions over any set of axes, with keepdim."""

from __future__ import annotations

import numpy as np

import eager.surface as S  # S.where...; by full name ("from .. import" is an edge to eager)
from .registry import Meta, defop, norm_axes, reduced_shape
import eager.ops.onnx_rules as R


def _rng():
    return np.random.default_rng(4321)


def _reduce_shape(dtype_rule):
    def rule(x: Meta, axis, keepdim) -> Meta:
        axes = norm_axes(axis, len(x.shape))
        return Meta(reduced_shape(x.shape, axes, keepdim), dtype_rule(x.dtype))

    return rule


def _keep_shape(shape: tuple, axis: tuple) -> tuple:
    return tuple(1 if i in axis else d for i, d in enumerate(shape))


def _expand_back(g, x, axis):
    """Broadcast a reduced gradient back over the reduced axes of ``x``."""
    return g.reshape(_keep_shape(x.shape, axis)).expand(x.shape)


def _samples():
    r = _rng()
    return [
        ([r.uniform(-2, 2, size=(3, 4))], {"axis": (0, 1), "keepdim": False}),
        ([r.uniform(-2, 2, size=(3, 4))], {"axis": (1,), "keepdim": True}),
        ([r.uniform(-2, 2, size=(2, 3, 4))], {"axis": (0, 2), "keepdim": False}),
        ([r.uniform(-2, 2, size=())], {"axis": (), "keepdim": False}),
        ([r.uniform(-2, 2, size=(0, 3))], {"axis": (1,), "keepdim": False}),
        ([r.uniform(-2, 2, size=(1, 3))], {"axis": (0,), "keepdim": False}),
    ]


def _np_axis(x, axis: tuple) -> tuple:
    """numpy's axes for ``axis``: PyTorch accepts dim 0 (or -1) of a 0-d tensor, which
    names the tensor itself, where numpy has no axis to reduce."""
    return axis if x.ndim else ()


def _sum(x, axis, keepdim):
    return _add_reduce(x, axis=_np_axis(x, axis), keepdims=keepdim)  # np.sum, no wrapper


_add_reduce = np.add.reduce


def _sum_dtype(d: np.dtype) -> np.dtype:
    """numpy's (and PyTorch's) sum widens bools and smaller integers to 64 bits (the
    public ``sum`` casts any integer to int64 first)."""
    if d.kind in "bi" and d.itemsize < 8:
        return np.dtype(np.int64)
    if d.kind == "u" and d.itemsize < 8:
        return np.dtype(np.uint64)
    return d


defop(
    "sum",
    onnx=R.reduce_sum,
    forward=_sum,
    shape=_reduce_shape(_sum_dtype),
    arity=1,
    attrs={"axis": "axes", "keepdim": "bool"},
    saves=(),
    family="reduce",
    samples=_samples,
    vjp=(lambda g, out, x, axis, keepdim: _expand_back(g, x, axis),),
    doc="sum over axes",
)


def _mean_dtype(d: np.dtype) -> np.dtype:
    if d.kind != "f":
        raise RuntimeError(
            "mean(): could not infer output dtype. Input dtype must be either a "
            f"floating point or complex dtype. Got: {d.name}"
        )
    return d


def _mean(x, axis, keepdim):
    _mean_dtype(x.dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.mean(x, axis=_np_axis(x, axis), keepdims=keepdim, dtype=x.dtype)


def _mean_vjp(g, out, x, axis, keepdim):
    n = 1
    for a in _np_axis(x, axis):
        n *= x.shape[a]
    return _expand_back(g / max(n, 1), x, axis) if n else _expand_back(g, x, axis)


defop(
    "mean",
    onnx=R.reduce_mean,
    forward=_mean,
    shape=_reduce_shape(_mean_dtype),
    arity=1,
    attrs={"axis": "axes", "keepdim": "bool"},
    saves=(),
    family="reduce",
    samples=_samples,
    vjp=(_mean_vjp,),
    doc="mean over axes (NaN for an empty mean)",
)


def _check_nonempty(name: str, shape: tuple, axes: tuple, full_error: type) -> None:
    """PyTorch's errors for an extremum over a zero-size dim (there is no identity to
    return).  Over non-empty dims of an empty tensor the result is simply empty.  A
    reduction over every dim raises ``full_error`` with the message of a call without
    ``dim`` (RuntimeError for max/min, IndexError for argmax/argmin).  A 0-d tensor
    holds one element."""
    for a in axes if shape else ():
        if shape[a] == 0:
            if len(axes) == len(shape):
                hint = (
                    " Specify the reduction dim with the 'dim' argument."
                    if full_error is RuntimeError
                    else ""
                )
                raise full_error(
                    f"{name}(): Expected reduction dim to be specified for "
                    f"input.numel() == 0.{hint}"
                )
            raise IndexError(f"{name}(): Expected reduction dim {a} to have non-zero size.")


def _minmax_shape(name):
    def rule(x: Meta, axis, keepdim) -> Meta:
        axes = norm_axes(axis, len(x.shape))
        _check_nonempty(name, x.shape, axes, RuntimeError)
        return Meta(reduced_shape(x.shape, axes, keepdim), x.dtype)

    return rule


def _minmax_forward(fn, name):
    def forward(x, axis, keepdim):
        if x.size == 0:
            _check_nonempty(name, x.shape, axis, RuntimeError)
        return fn(x, axis=_np_axis(x, axis), keepdims=keepdim)

    forward.__name__ = name
    return forward


def _minmax_vjp(g, out, x, axis, keepdim):
    # PyTorch's amax/amin rule (scale_grad_by_count; JAX's reduce_max too): the elements
    # equal to the extremum share the gradient evenly.  A slice holding a NaN has a NaN
    # extremum that no element equals: count is 0 and the whole slice gets NaN, as in
    # PyTorch.  max()/min() over everything and max(dim)/min(dim) route the gradient
    # differently; eager.surface builds them from this op (see TensorOps._minmax).
    keep = _keep_shape(x.shape, axis)
    mask = x == out.reshape(keep)
    # (the primitive, not .sum(): a public dim=() means every dim, as PyTorch's)
    count = mask.to(g._npdtype)._op("sum", "SumBackward1", axis=axis, keepdim=True)
    return (g.reshape(keep) / count).expand(x.shape) * mask


def _nonempty_samples():
    return [s for s in _samples() if 0 not in s[0][0].shape]


defop(
    "max",
    onnx=R.reduce_max,
    forward=_minmax_forward(np.max, "max"),
    shape=_minmax_shape("max"),
    arity=1,
    attrs={"axis": "axes", "keepdim": "bool"},
    saves=(0,),
    saves_out=True,
    family="reduce",
    samples=_nonempty_samples,
    vjp=(_minmax_vjp,),
    doc="largest value over axes (gradient shared among ties)",
)

defop(
    "min",
    onnx=R.reduce_min,
    forward=_minmax_forward(np.min, "min"),
    shape=_minmax_shape("min"),
    arity=1,
    attrs={"axis": "axes", "keepdim": "bool"},
    saves=(0,),
    saves_out=True,
    family="reduce",
    samples=_nonempty_samples,
    vjp=(_minmax_vjp,),
    doc="smallest value over axes (gradient shared among ties)",
)


# max(dim) / min(dim): the same values as max / min over one dim, but PyTorch sends the
# gradient to the one element its index names (value_selecting_reduction_backward), not
# evenly to all ties.  A record of its own, so the forward is the plain reduction and the
# index is computed only when a gradient is.


def _dim_shape(name):
    rule = _minmax_shape(name)

    def dim_rule(x: Meta, axis, keepdim) -> Meta:
        if len(norm_axes(axis, len(x.shape))) != 1 or not x.shape:
            raise RuntimeError(
                f"{name}(dim): expects exactly one dim of a tensor with dims, "
                f"got axis={axis} for shape {list(x.shape)}"
            )
        return rule(x, axis, keepdim)

    return dim_rule


def _dim_vjp(arg: str):
    def rule(g, out, x, axis, keepdim):
        a = axis[0]
        idx = getattr(x, arg)(a, keepdim=True)
        shape = [1] * x.ndim
        shape[a] = x.shape[a]
        hit = x._wrap_const(np.arange(x.shape[a]).reshape(shape)) == idx
        return S.where(hit, _expand_back(g, x, axis), 0)

    return rule


def _dim_samples():
    r = _rng()  # no ties: finite differences split a tie, PyTorch's rule does not
    return [
        ([r.uniform(-2, 2, size=(3, 4))], {"axis": (1,), "keepdim": False}),
        ([r.uniform(-2, 2, size=(3, 4, 2))], {"axis": (0,), "keepdim": True}),
        ([r.uniform(-2, 2, size=(5,))], {"axis": (0,), "keepdim": False}),
        ([r.uniform(-2, 2, size=(0, 3))], {"axis": (1,), "keepdim": False}),
    ]


defop(
    "max_dim",
    onnx=R.reduce_max,
    forward=_minmax_forward(np.max, "max"),
    shape=_dim_shape("max"),
    arity=1,
    attrs={"axis": "axes", "keepdim": "bool"},
    saves=(0,),
    family="reduce",
    samples=_dim_samples,
    vjp=(_dim_vjp("argmax"),),
    doc="the values of max(dim): gradient to the index argmax picks",
)

defop(
    "min_dim",
    onnx=R.reduce_min,
    forward=_minmax_forward(np.min, "min"),
    shape=_dim_shape("min"),
    arity=1,
    attrs={"axis": "axes", "keepdim": "bool"},
    saves=(0,),
    family="reduce",
    samples=_dim_samples,
    vjp=(_dim_vjp("argmin"),),
    doc="the values of min(dim): gradient to the index argmin picks",
)


def _arg_shape(name):
    def rule(x: Meta, axis, keepdim) -> Meta:
        axes = norm_axes(axis, len(x.shape))
        _check_nonempty(name, x.shape, axes if x.shape else (), IndexError)
        return Meta(reduced_shape(x.shape, axes, keepdim), np.dtype(np.int64))

    return rule


def _arg_forward(fn, name):
    def forward(x, axis, keepdim):
        if x.ndim and x.shape[axis] == 0:
            _check_nonempty(name, x.shape, (axis,), IndexError)
        ax = axis if x.ndim else None
        return np.asarray(fn(x, axis=ax, keepdims=keepdim), dtype=np.int64)

    forward.__name__ = name
    return forward


def _arg_samples():
    r = _rng()
    return [
        ([r.uniform(-2, 2, size=(3, 4))], {"axis": 1, "keepdim": False}),
        ([r.uniform(-2, 2, size=(3, 4))], {"axis": 0, "keepdim": True}),
    ]


defop(
    "argmax",
    onnx=R.argmax,
    forward=_arg_forward(np.argmax, "argmax"),
    shape=_arg_shape("argmax"),
    arity=1,
    attrs={"axis": "axes", "keepdim": "bool"},
    vjp=None,
    family="argreduce",
    samples=_arg_samples,
    doc="index of the first largest value along an axis",
)
defop(
    "argmin",
    onnx=R.argmin,
    forward=_arg_forward(np.argmin, "argmin"),
    shape=_arg_shape("argmin"),
    arity=1,
    attrs={"axis": "axes", "keepdim": "bool"},
    vjp=None,
    family="argreduce",
    samples=_arg_samples,
    doc="index of the first smallest value along an axis",
)


def _bool_reduce(fn):
    def forward(x, axis, keepdim):
        return fn(x, axis=_np_axis(x, axis), keepdims=keepdim)

    return forward


defop(
    "all",
    onnx=R.reduce_all,
    forward=_bool_reduce(np.all),
    shape=_reduce_shape(lambda d: np.dtype(np.bool_)),
    arity=1,
    attrs={"axis": "axes", "keepdim": "bool"},
    vjp=None,
    family="reduce",
    samples=_samples,
    doc="logical and over axes",
)
defop(
    "any",
    onnx=R.reduce_any,
    forward=_bool_reduce(np.any),
    shape=_reduce_shape(lambda d: np.dtype(np.bool_)),
    arity=1,
    attrs={"axis": "axes", "keepdim": "bool"},
    vjp=None,
    family="reduce",
    samples=_samples,
    doc="logical or over axes",
)
