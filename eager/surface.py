"""The one operator surface shared by eager.Tensor and graphc's tracer.

Every public method turns its arguments into an op name, operands and static
attrs, then calls ``_apply`` on the operand class with the highest
``_priority`` (a tracer beats a tensor, so closed-over tensors become graph
constants).  eager.Tensor implements ``_apply`` by running the op's numpy
forward and recording a tape node; graphc.Tracer implements it by adding a
graph node.  The second argument of ``_apply`` is the name PyTorch gives the
backward node (``AddBackward0``...), which only eager uses.
"""
from __future__ import annotations

import builtins
import collections
from typing import Any, Optional, Sequence

import numpy as np

import eager._dtype as D
from .ops.registry import norm_axes

_SCALARS = (builtins.int, builtins.float, builtins.bool, np.number, np.bool_)

# --- wiring: the constructors of eager.tensor (a layer above) -------------------------
# The surface calls a few tensor factories (``tensor(x)`` for a non-tensor operand,
# ``randn``/``rand`` for ``normal_``/``uniform_``...).  eager.tensor defines them after
# importing this module, so it hands them down once through :func:`bind` (at the end of
# eager/tensor.py) instead of this module importing upwards.
_tensor = _device = _rand = _randn = _bernoulli = None


def bind(*, tensor, device, rand, randn, bernoulli) -> None:
    """Receive eager.tensor's factories (called once, by eager.tensor at import)."""
    global _tensor, _device, _rand, _randn, _bernoulli
    _tensor, _device, _rand, _randn, _bernoulli = tensor, device, rand, randn, bernoulli


MaxResult = collections.namedtuple("MaxResult", ["values", "indices"])
MaxResult.__module__ = "eager.return_types"


class TensorOps:
    """Mixin giving a tensor-like class the full PyTorch-style op surface."""

    __slots__ = ()
    __array_ufunc__ = None      # numpy defers to our reflected operators
    _priority = 0

    # --- implemented by subclasses -------------------------------------
    def _apply(self, op: str, gname: str, operands: tuple, attrs: dict) -> "TensorOps":
        raise NotImplementedError

    @property
    def _npdtype(self) -> np.dtype:
        raise NotImplementedError

    @property
    def shape(self) -> tuple:
        raise NotImplementedError

    # --- dispatch helpers --------------------------------------------------
    def _op(self, op: str, gname: str, *operands: Any, **attrs: Any) -> "TensorOps":
        return _dispatch(op, gname, (self,) + operands, attrs)

    def _binary(self, op: str, other: Any, gname: str) -> "TensorOps":
        a, b = _coerce_pair(self, other, op)
        return _dispatch(op, gname, (a, b), {})

    def _rbinary(self, op: str, other: Any, gname: str) -> "TensorOps":
        b, a = _coerce_pair(self, other, op)
        return _dispatch(op, gname, (a, b), {})

    # --- arithmetic ---------------------------------------------------------
    def __add__(self, other):
        return self._binary("add", other, "AddBackward0")

    def __radd__(self, other):
        return self._rbinary("add", other, "AddBackward0")

    def __sub__(self, other):
        return self._binary("sub", other, "SubBackward0")

    def __rsub__(self, other):
        return self._rbinary("sub", other, "RsubBackward1")

    def __mul__(self, other):
        return self._binary("mul", other, "MulBackward0")

    def __rmul__(self, other):
        return self._rbinary("mul", other, "MulBackward0")

    def __truediv__(self, other):
        return self._binary("div", other, "DivBackward0")

    def __rtruediv__(self, other):
        return self._rbinary("div", other, "DivBackward0")

    def __pow__(self, other):
        return self.pow(other)

    def __rpow__(self, other):
        return self._rbinary("pow", other, "PowBackward2")

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(other, self)

    def __neg__(self):
        if self._npdtype.kind == "b":
            raise RuntimeError(BOOL_NEG)
        return self._op("neg", "NegBackward0")

    def __pos__(self):
        return self

    def __abs__(self):
        return self.abs()

    def __lt__(self, other):
        return self._binary("lt", other, "")

    def __le__(self, other):
        return self._binary("le", other, "")

    def __gt__(self, other):
        return self._binary("gt", other, "")

    def __ge__(self, other):
        return self._binary("ge", other, "")

    def __eq__(self, other):  # type: ignore[override]
        return self._binary("eq", other, "")

    def __ne__(self, other):  # type: ignore[override]
        return self._binary("ne", other, "")

    __hash__ = object.__hash__

    def __invert__(self):
        return self.logical_not()

    def __and__(self, other):
        return self._binary("logical_and", other, "")

    def __or__(self, other):
        return self._binary("logical_or", other, "")

    def add(self, other, *, alpha=1):
        return self + (other if alpha == 1 else other * alpha)

    def sub(self, other, *, alpha=1):
        return self - (other if alpha == 1 else other * alpha)

    def mul(self, other):
        return self * other

    def div(self, other):
        return self / other

    def true_divide(self, other):
        return self / other

    def neg(self):
        return -self

    def pow(self, exponent):
        if exponent.__class__ is builtins.int and exponent < 0 and self._npdtype.kind in "biu":
            raise RuntimeError("Integers to negative integer powers are not allowed.")
        if (isinstance(exponent, TensorOps) and self._npdtype.kind == "b"
                and exponent._npdtype.kind == "b"):
            raise NotImplementedError('"pow" not implemented for \'Bool\'')  # numpy gives int8
        gname = "PowBackward1" if isinstance(exponent, TensorOps) else "PowBackward0"
        return self._binary("pow", exponent, gname)

    def square(self):
        return self._binary("pow", 2, "PowBackward0")

    def matmul(self, other):
        return matmul(self, other)

    def mm(self, other):
        if self.ndim != 2 or getattr(other, "ndim", None) != 2:
            raise RuntimeError(f"mm: both arguments must be 2-D matrices, got shapes "
                               f"{list(self.shape)} and {list(getattr(other, 'shape', ()))}")
        return matmul(self, other)

    def dot(self, other):
        return matmul(self, other)

    # --- elementwise math --------------------------------------------------
    def exp(self):
        return self._op("exp", "ExpBackward0")

    def log(self):
        return self._op("log", "LogBackward0")

    def sqrt(self):
        return self._op("sqrt", "SqrtBackward0")

    def rsqrt(self):
        return 1.0 / self.sqrt()

    def sin(self):
        return self._op("sin", "SinBackward0")

    def cos(self):
        return self._op("cos", "CosBackward0")

    def tanh(self):
        return self._op("tanh", "TanhBackward0")

    def sigmoid(self):
        return self._op("sigmoid", "SigmoidBackward0")

    def relu(self):
        if self._npdtype.kind == "b":
            raise RuntimeError("Boolean inputs not supported for relu")
        return self._op("relu", "ReluBackward0")

    def abs(self):
        return self._op("abs", "AbsBackward0")

    def sign(self):
        return self._op("sign", "SignBackward0")

    def clamp(self, min=None, max=None):
        if min is None and max is None:
            raise RuntimeError("clamp: at least one of 'min' or 'max' must not be None")
        if isinstance(min, TensorOps) or isinstance(max, TensorOps):
            return _clamp_tensor(self, min, max)
        # the bounds are weak scalars: an int tensor with a float bound gives float32, a
        # bool tensor with an int bound int64 (as in PyTorch)
        target = self._npdtype
        for bound in (min, max):
            if bound is not None:
                target = D.scalar_dtype(bound, target)
        if target.kind == "b":
            raise NotImplementedError('"clamp" not implemented for \'Bool\'')
        if target != self._npdtype:
            return self.to(target).clamp(min, max)
        gname = ("ClampBackward1" if min is not None and max is not None
                 else "ClampMinBackward0" if min is not None else "ClampMaxBackward0")
        lo = None if min is None else builtins.float(min)
        hi = None if max is None else builtins.float(max)
        return self._op("clamp", gname, min=lo, max=hi)

    clip = clamp

    def where(self, condition, other):
        """``x.where(condition, y)`` is ``where(condition, x, y)``."""
        return where(condition, self, other)

    def maximum(self, other):
        return maximum(self, other)

    def minimum(self, other):
        return minimum(self, other)

    def eq(self, other):
        return self == other

    def ne(self, other):
        return self != other

    def lt(self, other):
        return self < other

    def le(self, other):
        return self <= other

    def gt(self, other):
        return self > other

    def ge(self, other):
        return self >= other

    def logical_not(self):
        return self._op("logical_not", "")

    def logical_and(self, other):
        return self & other

    def logical_or(self, other):
        return self | other

    # --- reductions ----------------------------------------------------------
    def sum(self, dim=None, keepdim=False, *, dtype=None, axis=None):
        dim = axis if dim is None else dim
        x = self if dtype is None else self.to(dtype)
        if x._npdtype.kind in "biu":
            x = x.to(D.int64)
        gname = "SumBackward0" if dim is None else "SumBackward1"
        return x._op("sum", gname, axis=_axes(dim, self.ndim, "sum"), keepdim=bool(keepdim))

    def mean(self, dim=None, keepdim=False, *, dtype=None, axis=None):
        dim = axis if dim is None else dim
        x = self if dtype is None else self.to(dtype)
        if x._npdtype.kind != "f":
            raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either "
                               f"a floating point or complex dtype. Got: {D.from_np(x._npdtype).name}")
        gname = "MeanBackward0" if dim is None else "MeanBackward1"
        return x._op("mean", gname, axis=_axes(dim, self.ndim, "mean"), keepdim=bool(keepdim))

    def _differentiable(self) -> bool:
        """Could a VJP rule later run through an op on this value?  A traced one: always
        (graphc differentiates whole graphs); eager.Tensor: only while recording."""
        return True

    def _minmax(self, op: str, argop: str, dim, keepdim, other):
        """max/min over everything or along one dim, with PyTorch's gradient routing.

        The ``max``/``min`` primitive has amax's rule (ties share the gradient; a NaN
        slice gets NaN).  ``max(dim)`` sends it to the element its index names (PyTorch's
        value_selecting_reduction_backward): the ``max_dim`` primitive, whose VJP does.
        ``max()`` shares it among the NaNs when the result is NaN (evenly_distribute_
        backward), so NaNs are reduced apart from the rest."""
        if other is not None:
            return maximum(self, other) if op == "max" else minimum(self, other)
        cap = op.capitalize()
        if dim is None:
            axes = _axes(None, self.ndim, op)
            if self._npdtype.kind != "f" or not self._differentiable():
                return self._op(op, f"{cap}Backward1", axis=axes, keepdim=False)
            nan = self != self
            m = where(nan, float("-inf") if op == "max" else float("inf"), self)._op(
                op, f"{cap}Backward1", axis=axes, keepdim=False)
            nans = where(nan, self, 0).sum() / maximum(nan.sum(), 1)   # NaN: g / #NaN each
            return _dispatch("where", f"{cap}Backward1", (nan.any(), nans, m), {})
        axes = _axes(dim, self.ndim, op)
        keepdim = bool(keepdim)
        if self.ndim == 0:
            return MaxResult(self._op(op, f"{cap}Backward0", axis=axes, keepdim=keepdim),
                             self._op(argop, "", axis=0, keepdim=keepdim))
        values = self._op(f"{op}_dim", f"{cap}Backward0", axis=axes, keepdim=keepdim)
        return MaxResult(values, self._op(argop, "", axis=axes[0], keepdim=keepdim))

    def max(self, dim=None, keepdim=False, *, other=None):
        if isinstance(dim, TensorOps):
            return maximum(self, dim)
        return self._minmax("max", "argmax", dim, keepdim, other)

    def min(self, dim=None, keepdim=False, *, other=None):
        if isinstance(dim, TensorOps):
            return minimum(self, dim)
        return self._minmax("min", "argmin", dim, keepdim, other)

    def amax(self, dim=None, keepdim=False):
        return self._op("max", "AmaxBackward0", axis=_axes(dim, self.ndim, "amax"),
                        keepdim=bool(keepdim))

    def amin(self, dim=None, keepdim=False):
        return self._op("min", "AminBackward0", axis=_axes(dim, self.ndim, "amin"),
                        keepdim=bool(keepdim))

    def argmax(self, dim=None, keepdim=False):
        if dim is None:
            return self.reshape(-1)._op("argmax", "", axis=0, keepdim=False)
        return self._op("argmax", "", axis=_axes(dim, self.ndim, "argmax")[0], keepdim=bool(keepdim))

    def argmin(self, dim=None, keepdim=False):
        if dim is None:
            return self.reshape(-1)._op("argmin", "", axis=0, keepdim=False)
        return self._op("argmin", "", axis=_axes(dim, self.ndim, "argmin")[0], keepdim=bool(keepdim))

    def all(self, dim=None, keepdim=False):
        return self._op("all", "", axis=_axes(dim, self.ndim, "all"), keepdim=bool(keepdim))

    def any(self, dim=None, keepdim=False):
        return self._op("any", "", axis=_axes(dim, self.ndim, "any"), keepdim=bool(keepdim))

    # --- movement -------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def size(self, dim: Optional[int] = None):
        if dim is None:
            return Size(self.shape)
        return self.shape[norm_axes(dim, self.ndim, "size")[0]]

    def reshape(self, *shape, _gname: str = "ViewBackward0"):
        shape = _shape_arg(shape)
        new = _infer_shape(shape, self.numel(), self.shape)
        return self._op("reshape", _gname, shape=new)

    def view(self, *shape):
        return self.reshape(*shape)

    def view_as(self, other):
        return self.reshape(other.shape)

    def reshape_as(self, other):
        return self.reshape(other.shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1):
        if self.ndim == 0:
            return self.reshape(1)
        s, e = (norm_axes(start_dim, self.ndim, "flatten")[0],
                norm_axes(end_dim, self.ndim, "flatten")[0])
        if s > e:
            raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
        shp = tuple(self.shape)
        n = 1
        for d in shp[s:e + 1]:
            n *= d
        return self.reshape(shp[:s] + (n,) + shp[e + 1:])

    def unsqueeze(self, dim: int):
        nd = self.ndim + 1
        if not -nd <= dim < nd:
            raise IndexError(f"unsqueeze: dimension out of range (expected to be in range of "
                             f"[{-nd}, {nd - 1}], but got {dim})")
        d = dim % nd
        shp = tuple(self.shape)
        return self.reshape(shp[:d] + (1,) + shp[d:], _gname="UnsqueezeBackward0")

    def squeeze(self, dim=None):
        shp = tuple(self.shape)
        if dim is None:
            new = tuple(s for s in shp if s != 1)
            return self.reshape(new, _gname="SqueezeBackward0")
        axes = norm_axes(dim, self.ndim, "squeeze")
        new = tuple(s for i, s in enumerate(shp) if not (i in axes and s == 1))
        return self.reshape(new, _gname="SqueezeBackward1")

    def expand(self, *shape):
        shape = _shape_arg(shape)
        cur = tuple(self.shape)
        if len(shape) < len(cur):
            raise RuntimeError(f"expand: the number of sizes provided ({len(shape)}) must be greater "
                               f"or equal to the number of dimensions in the tensor ({len(cur)})")
        lead = len(shape) - len(cur)
        new = []
        for i, s in enumerate(shape):
            old = cur[i - lead] if i >= lead else None
            if s == -1:
                if old is None:
                    raise RuntimeError("expand: -1 is not allowed in a leading, non-existing dimension")
                s = old
            if old is not None and old != 1 and old != s:
                raise RuntimeError(f"expand: the expanded size of the tensor ({s}) must match the "
                                   f"existing size ({old}) at non-singleton dimension {i}. "
                                   f"Target sizes: {list(shape)}. Tensor sizes: {list(cur)}")
            new.append(int(s))
        new = tuple(new)
        return self._op("expand", "ExpandBackward0", shape=new)

    def expand_as(self, other):
        return self.expand(other.shape)

    def broadcast_to(self, *shape):
        return self.expand(*shape)

    def permute(self, *dims):
        dims = _shape_arg(dims)
        perm = tuple(norm_axes(d, self.ndim, "permute")[0] for d in dims) if self.ndim else ()
        if sorted(perm) != list(range(self.ndim)):
            raise RuntimeError(f"permute: dims {list(dims)} are not a permutation of "
                               f"{self.ndim} dimensions")
        return self._op("transpose", "PermuteBackward0", perm=perm)

    def transpose(self, dim0: int, dim1: int):
        nd = self.ndim
        perm = list(range(nd))
        if nd:
            a, b = norm_axes(dim0, nd, "transpose")[0], norm_axes(dim1, nd, "transpose")[0]
            perm[a], perm[b] = perm[b], perm[a]
        return self._op("transpose", "TransposeBackward0", perm=tuple(perm))

    swapaxes = transpose

    def t(self):
        if self.ndim > 2:
            raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
        perm = tuple(reversed(range(self.ndim)))
        return self._op("transpose", "TBackward0", perm=perm)

    @property
    def T(self):
        return self._op("transpose", "PermuteBackward0", perm=tuple(reversed(range(self.ndim))))

    @property
    def mT(self):
        if self.ndim < 2:
            raise RuntimeError("tensor.mT is only supported on matrices or batches of matrices. "
                               f"Got {self.ndim}-D tensor.")
        return self.transpose(-2, -1)

    def __getitem__(self, key):
        return getitem(self, key)

    def unbind(self, dim: int = 0) -> tuple:
        """The slices along ``dim``, as views (``for row in x`` iterates over them)."""
        if self.ndim == 0:
            raise RuntimeError("Dimension specified as 0 but tensor has no dimensions")
        d = norm_axes(dim, self.ndim, "unbind")[0]
        lead = (("s", None, None, None),) * d
        return self._multi_output_views(tuple(
            _dispatch("getitem", "UnbindBackward0", (self,), {"index": lead + (("i", i),)})
            for i in range(self.shape[d])))

    def _multi_output_views(self, views: tuple) -> tuple:
        return views

    # --- dtype ----------------------------------------------------------------
    @property
    def is_floating_point_(self) -> bool:
        return self._npdtype.kind == "f"

    def is_floating_point(self) -> bool:
        return self._npdtype.kind == "f"

    def to(self, *args, **kwargs):
        dtype = kwargs.pop("dtype", None)
        kwargs.pop("copy", None)
        kwargs.pop("non_blocking", None)
        device = kwargs.pop("device", None)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, (D.dtype, np.dtype, type)):
                dtype = a
            elif isinstance(a, TensorOps):
                dtype = a._npdtype
            else:
                device = a
        if device is not None:
            _device(device)  # validates: only the CPU exists
        if dtype is None:
            return self
        npd = D.to_np(dtype)
        if npd == self._npdtype:
            return self
        return self._op("cast", "ToCopyBackward0", dtype=npd.name)

    def float(self):
        return self.to(D.float32)

    def double(self):
        return self.to(D.float64)

    def half(self):
        return self.to(D.float16)

    def long(self):
        return self.to(D.int64)

    def int(self):
        return self.to(D.int32)

    def bool(self):
        return self.to(D.bool)

    def type_as(self, other):
        return self.to(other._npdtype)

    def normal_(self, mean: float = 0.0, std: float = 1.0):
        """Fill with draws from N(mean, std**2) in place (not recorded by autograd)."""
        from .autograd.grad_mode import no_grad
        with no_grad():
            return self.copy_(_randn(tuple(self.shape), dtype=self._npdtype) * std + mean)

    def uniform_(self, a: float = 0.0, b: float = 1.0):
        """Fill with draws from U[a, b) in place (not recorded by autograd)."""
        from .autograd.grad_mode import no_grad
        with no_grad():
            return self.copy_(_rand(tuple(self.shape), dtype=self._npdtype) * (b - a) + a)

    def bernoulli(self, p=None):
        return _bernoulli(self, p)

    def clone(self):
        return self._op("copy", "CloneBackward0")

    def contiguous(self):
        """Self when its elements are laid out in C order, else a C-ordered copy (as in
        PyTorch: a write through the result reaches self only in the first case)."""
        return self if self.is_contiguous() else self.clone()

    def zeros_like_(self):
        """A zero tensor of this shape and dtype (used by VJP rules)."""
        return self._op("fill", "FillBackward0", value=0.0)


class Size(tuple):
    """``tensor.shape``/``tensor.size()``: a tuple that prints like PyTorch's."""

    def __repr__(self) -> str:
        return f"eager.Size({list(self)})"

    def numel(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n


# ---------------------------------------------------------------------------
# module-level op functions (also used by the VJP rules)


def _dispatch(op: str, gname: str, operands: tuple, attrs: dict):
    best = None
    for o in operands:
        if isinstance(o, TensorOps) and (best is None or o._priority > best._priority):
            best = o
    if best is None:
        raise TypeError(f"{op}: expected at least one tensor operand, got "
                        f"{[type(o).__name__ for o in operands]}")
    return best._apply(op, gname, operands, attrs)


BOOL_NEG = ("Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
            "to invert a mask, use the `~` or `logical_not()` operator instead.")


def _check_bool_sub(a: Any, b: Any) -> None:
    """PyTorch refuses ``-`` with a bool operand (numpy's bool ``-`` is not a subtraction)."""
    na = isinstance(a, (builtins.bool, np.bool_)) or (
        isinstance(a, TensorOps) and a._npdtype.kind == "b")
    nb = isinstance(b, (builtins.bool, np.bool_)) or (
        isinstance(b, TensorOps) and b._npdtype.kind == "b")
    if na and nb:
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not "
                           "supported. Use the `^` or `logical_xor()` operator instead.")
    if na or nb:
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. "
                           "If you are trying to invert a mask, use the `~` or `logical_not()` "
                           "operator instead.")


def _coerce_pair(t: TensorOps, other: Any, op: str):
    """Return (t, other) as operands with PyTorch's dtype promotion applied."""
    if op == "sub":
        _check_bool_sub(t, other)
    if isinstance(other, TensorOps):
        da, db = t._npdtype, other._npdtype
        if da != db:
            target = D.promote(da, db)
            if da.kind != db.kind or da.kind != "f":
                if da != target:
                    t = t.to(target)
                if db != target:
                    other = other.to(target)
        return t, other
    if isinstance(other, _SCALARS):
        sd = D.scalar_dtype(other, t._npdtype)
        if sd != t._npdtype:
            # the scalar changes the category (int tensor + 2.5 -> float32, bool + 1 -> int64);
            # numpy would widen int64 with a float32 0-d operand to float64, so cast first
            t = t.to(sd)
        return t, np.asarray(other, dtype=sd)
    if isinstance(other, np.ndarray):
        return _coerce_pair(t, _const_like(t, other), op)
    if isinstance(other, (list, tuple)):
        return _coerce_pair(t, _const_like(t, np.asarray(other)), op)
    raise TypeError(f"{op}: unsupported operand type {type(other).__name__} "
                    f"(expected a tensor or a Python number)")


def _const_like(t: TensorOps, arr: np.ndarray):
    """Wrap a numpy array operand in the same world as tensor ``t``."""
    return t._wrap_const(arr)


def _as_operand(x: Any, like: Optional[TensorOps] = None, op: str = "op"):
    if isinstance(x, TensorOps):
        return x
    if like is not None and isinstance(x, _SCALARS):
        return np.asarray(x, dtype=D.scalar_dtype(x, like._npdtype))
    return _tensor(x)


def _axes(dim, ndim: int, op: str) -> tuple:
    return norm_axes(dim, ndim, op)


def _shape_arg(shape: tuple) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, Size)):
        shape = tuple(shape[0])
    out = []
    for s in shape:
        if isinstance(s, TensorOps):
            raise TypeError("shape entries must be Python ints, not tensors")
        try:
            out.append(builtins.int(s))
        except (TypeError, ValueError):
            raise TypeError(f"shape entries must be ints, got {s!r}") from None
    return tuple(out)


def _infer_shape(shape: tuple, numel: int, old: tuple) -> tuple:
    neg = [i for i, s in enumerate(shape) if s == -1]
    if len(neg) > 1:
        raise RuntimeError("only one dimension can be inferred")
    if any(s < -1 for s in shape):
        raise RuntimeError(f"invalid shape dimension in {list(shape)}")
    known = 1
    for s in shape:
        if s != -1:
            known *= s
    if neg:
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape = tuple(numel // known if s == -1 else s for s in shape)
    elif known != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel} "
                           f"(input shape {list(old)})")
    return tuple(shape)


def where(condition, x, y):
    """Elementwise ``x if condition else y`` (both sides are evaluated)."""
    ref = next((o for o in (x, y, condition) if isinstance(o, TensorOps)), None)
    if ref is None:
        condition = _tensor(condition)
        ref = condition
    if not isinstance(condition, TensorOps):
        condition = ref._wrap_const(np.asarray(condition, dtype=bool))
    elif condition._npdtype.kind != "b":
        condition = condition.to(D.bool)
    like = x if isinstance(x, TensorOps) else y if isinstance(y, TensorOps) else None
    if like is None:
        x = np.asarray(x, dtype=D.infer_np_dtype(x))
        x = condition._wrap_const(x)
        like = x
    # a scalar side may also cast the tensor side (int64 tensor vs 2.5 -> float32)
    if not isinstance(x, TensorOps):
        y, x = _coerce_pair(like, x, "where")
    elif not isinstance(y, TensorOps):
        x, y = _coerce_pair(like, y, "where")
    if isinstance(x, TensorOps) and isinstance(y, TensorOps) and x._npdtype != y._npdtype:
        x, y = _coerce_pair(x, y, "where")
    return _dispatch("where", "WhereBackward0", (condition, x, y), {})


def _clamp_tensor(x, lo, hi):
    """``clamp`` with tensor bounds: the value is ``minimum(maximum(x, lo), hi)`` (NaN
    propagates), and the gradient goes where PyTorch's clamp_backward_min_max sends it:
    to x where lo <= x <= hi, to lo where x < lo < hi, to hi where x > hi or hi < lo;
    nowhere at a NaN or when x < lo == hi.  (maximum's rule would split ties and pass a
    NaN's gradient to both sides.)  The selects return the value they route."""
    v = x
    if lo is not None:
        v = maximum(v, lo)
    if hi is not None:
        v = minimum(v, hi)
    if v._npdtype.kind != "f":
        return v
    rest = v.detach()
    if hi is None:
        return where(x >= lo, x, where(x < lo, lo, rest))
    if lo is None:
        return where(x <= hi, x, where(x > hi, hi, rest))
    return where((x >= lo) & (x <= hi), x,
                 where((x < lo) & (hi > lo), lo, where((x > hi) | (hi < lo), hi, rest)))


def maximum(a, b):
    a, b = _pair(a, b, "maximum")
    return _dispatch("maximum", "MaximumBackward0", (a, b), {})


def minimum(a, b):
    a, b = _pair(a, b, "minimum")
    return _dispatch("minimum", "MinimumBackward0", (a, b), {})


def _pair(a, b, op):
    if isinstance(a, TensorOps):
        return _coerce_pair(a, b, op)
    b2, a2 = _coerce_pair(b, a, op)
    return a2, b2


def matmul(a, b):
    if not isinstance(a, TensorOps):
        a = _as_operand(a)
    if not isinstance(b, TensorOps):
        b = _as_operand(b)
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"matmul: both arguments need at least 1 dimension, got shapes "
                           f"{list(a.shape)} and {list(b.shape)}")
    ka = a.shape[-1]
    kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if ka != kb:
        if a.ndim == 2 and b.ndim == 2:
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied "
                               f"({a.shape[0]}x{a.shape[1]} and {b.shape[0]}x{b.shape[1]})")
        raise RuntimeError(f"matmul: inner dimensions do not match: shapes {list(a.shape)} and "
                           f"{list(b.shape)}")
    if a._npdtype != b._npdtype:
        a, b = _coerce_pair(a, b, "matmul")
    gname = {(2, 2): "MmBackward0", (1, 1): "DotBackward0", (2, 1): "MvBackward0"}.get(
        (a.ndim, b.ndim), "MatmulBackward0")
    return _dispatch("matmul", gname, (a, b), {})


def sum_to(g, shape: tuple):
    """Sum a gradient in a broadcast shape back to ``shape`` (used after every VJP rule)."""
    gs = tuple(g.shape)
    shape = tuple(shape)
    if gs == shape:
        return g
    lead = len(gs) - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, d in enumerate(shape)
                                      if d == 1 and gs[i + lead] != 1)
    if axes:
        g = g._op("sum", "SumBackward1", axis=axes, keepdim=True)
    if tuple(g.shape) != shape:
        g = g._op("reshape", "ViewBackward0", shape=shape)
    return g


def getitem(x: TensorOps, key):
    """Indexing: static parts (ints, slices, None, Ellipsis) become attrs, tensors operands."""
    spec, arrays, kind = encode_index(key, x)
    gname = {"basic_int": "SelectBackward0", "basic": "SliceBackward0"}.get(kind, "IndexBackward0")
    return _dispatch("getitem", gname, (x,) + tuple(arrays), {"index": spec})


def encode_index(key, like) -> tuple:
    """Turn a Python index into (spec, index operands, kind).

    ``spec`` is a tuple of hashable items: ``("i", n)`` int, ``("s", start, stop,
    step)`` slice, ``("n",)`` None, ``("e",)`` Ellipsis, ``("t", k)`` the k-th
    index tensor operand.  It is what graphc stores as the node's attr.
    """
    if not isinstance(key, tuple):
        key = (key,)
    spec, arrays = [], []
    has_int = has_adv = False
    for k in key:
        if k is None:
            spec.append(("n",))
        elif k is Ellipsis:
            spec.append(("e",))
        elif isinstance(k, slice):
            for part in (k.start, k.stop, k.step):
                if isinstance(part, TensorOps):
                    raise TypeError("slice bounds must be Python ints, not tensors")
            if k.step is not None and k.step <= 0:
                raise ValueError("step must be greater than zero")
            spec.append(("s", _opt_int(k.start), _opt_int(k.stop), _opt_int(k.step)))
        elif isinstance(k, (builtins.bool, np.bool_)):
            arrays.append(like._wrap_const(np.asarray(k)))
            spec.append(("t", len(arrays) - 1))
            has_adv = True
        elif isinstance(k, (builtins.int, np.integer)):
            spec.append(("i", builtins.int(k)))
            has_int = True
        elif isinstance(k, TensorOps):
            if k._npdtype.kind not in "biu":
                raise IndexError("tensors used as indices must be long, int or bool tensors")
            arrays.append(k)
            spec.append(("t", len(arrays) - 1))
            has_adv = True
        elif isinstance(k, (list, np.ndarray)):
            arr = np.asarray(k)
            if arr.dtype.kind not in "biu":
                raise IndexError("index arrays must hold integers or booleans")
            arrays.append(like._wrap_const(arr))
            spec.append(("t", len(arrays) - 1))
            has_adv = True
        else:
            raise IndexError(f"unsupported index {k!r} of type {type(k).__name__}; use ints, "
                             f"slices, None, ..., or integer/bool tensors")
    kind = "advanced" if has_adv else ("basic_int" if has_int else "basic")
    return tuple(spec), arrays, kind


def _opt_int(v):
    if v is None:
        return None
    return builtins.int(v)


def decode_index(spec: tuple, arrays: Sequence) -> tuple:
    """Inverse of :func:`encode_index` over concrete arrays (numpy key)."""
    out = []
    for item in spec:
        tag = item[0]
        if tag == "i":
            out.append(item[1])
        elif tag == "s":
            out.append(slice(item[1], item[2], item[3]))
        elif tag == "n":
            out.append(None)
        elif tag == "e":
            out.append(Ellipsis)
        else:
            out.append(arrays[item[1]])
    return tuple(out)
