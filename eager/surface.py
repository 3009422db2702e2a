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
from typing import Any, Optional

import numpy as np

import eager._dtype as D

# The operand steps and module-level op functions live in eager._operands (a layer
# below); the methods use these names, and this module re-exports them.
from ._operands import (
    BOOL_NEG,
    Size,
    _SCALARS,
    _as_operand,
    _axes,
    _check_bool_sub,  # noqa: F401
    _clamp_tensor,
    _coerce_pair,
    _const_like,
    _dispatch,
    _infer_shape,
    _opt_int,
    _pair,
    _shape_arg,
    decode_index,
    encode_index,
    getitem,
    matmul,
    maximum,
    minimum,
    sum_to,
    where,
)
from .ops.registry import norm_axes
from .methods.indexing import IndexingMethods
from .methods.linalg import LinalgMethods
from .methods.pointwise import PointwiseMethods
from .methods.shape import ShapeMethods
from .methods.stats import StatsMethods

# --- wiring: the constructors of eager.factories (a layer above) -------------------------
# The surface calls a few tensor factories (``randn``/``rand`` for ``normal_``/
# ``uniform_``, ``bernoulli``, ``device`` to check a device).  eager.factories defines
# them after importing this module, so it hands them down once through :func:`bind`
# (its wiring block) instead of this module importing upwards.
_device = _rand = _randn = _bernoulli = None


def check_view_args(shape: tuple) -> None:
    """``view()`` with no size: PyTorch's TypeError (a 1-element tensor would otherwise
    become 0-d through reshape)."""
    if not shape:
        raise TypeError(
            "view() received an invalid combination of arguments - got (), but expected one "
            "of:\n * (torch.dtype dtype)\n * (tuple of ints size)"
        )


def bind(*, device, rand, randn, bernoulli) -> None:
    """Receive eager.factories' constructors (called once, by its wiring block)."""
    global _device, _rand, _randn, _bernoulli
    _device, _rand, _randn, _bernoulli = device, rand, randn, bernoulli


MaxResult = collections.namedtuple("MaxResult", ["values", "indices"])
MaxResult.__module__ = "eager.return_types"


class TensorOps(PointwiseMethods, ShapeMethods, StatsMethods, IndexingMethods, LinalgMethods):
    """Mixin giving a tensor-like class the full PyTorch-style op surface.

    The methods of this class are the core; the mixins of ``eager/methods/`` add the
    rest by topic (a method defined here wins over a mixin's of the same name)."""

    __slots__ = ()
    __array_ufunc__ = None  # numpy defers to our reflected operators
    _priority = 0

    # --- implemented by subclasses -------------------------------------
    def _apply(self, op: str, gname: str, operands: tuple, attrs: dict) -> "TensorOps":
        raise NotImplementedError

    @property
    def _npdtype(self) -> np.dtype:
        raise NotImplementedError

    @property
    def shape(self) -> tuple:
        """The size of each dimension, as an ``eager.Size``."""
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
        """``self + alpha * other`` (broadcasting, PyTorch's type promotion)."""
        return self + (other if alpha == 1 else other * alpha)

    def sub(self, other, *, alpha=1):
        """``self - alpha * other``."""
        return self - (other if alpha == 1 else other * alpha)

    def mul(self, other):
        """``self * other``, elementwise with broadcasting."""
        return self * other

    def div(self, other):
        """``self / other``: true division (integers give float32)."""
        return self / other

    def true_divide(self, other):
        """Alias of ``div``."""
        return self / other

    def neg(self):
        """``-self``."""
        return -self

    def pow(self, exponent):
        """``self ** exponent`` (tensor or number exponent)."""
        if exponent.__class__ is builtins.int and exponent < 0 and self._npdtype.kind in "biu":
            raise RuntimeError("Integers to negative integer powers are not allowed.")
        if (
            isinstance(exponent, TensorOps)
            and self._npdtype.kind == "b"
            and exponent._npdtype.kind == "b"
        ):
            raise NotImplementedError("\"pow\" not implemented for 'Bool'")  # numpy gives int8
        gname = "PowBackward1" if isinstance(exponent, TensorOps) else "PowBackward0"
        return self._binary("pow", exponent, gname)

    def square(self):
        """``self * self``."""
        return self._binary("pow", 2, "PowBackward0")

    def matmul(self, other):
        """Matrix product with numpy's/PyTorch's 1-D, 2-D and batched broadcasting rules."""
        return matmul(self, other)

    # --- elementwise math --------------------------------------------------
    def exp(self):
        """Elementwise ``e ** x``."""
        return self._op("exp", "ExpBackward0")

    def log(self):
        """Natural logarithm (``-inf`` at 0, NaN below)."""
        return self._op("log", "LogBackward0")

    def sqrt(self):
        """Elementwise square root."""
        return self._op("sqrt", "SqrtBackward0")

    def rsqrt(self):
        """``1 / sqrt(x)``."""
        return 1.0 / self.sqrt()

    def sin(self):
        """Elementwise sine."""
        return self._op("sin", "SinBackward0")

    def cos(self):
        """Elementwise cosine."""
        return self._op("cos", "CosBackward0")

    def tanh(self):
        """Elementwise hyperbolic tangent."""
        return self._op("tanh", "TanhBackward0")

    def sigmoid(self):
        """``1 / (1 + exp(-x))``, without overflow."""
        return self._op("sigmoid", "SigmoidBackward0")

    def relu(self):
        """``max(x, 0)``; gradient 0 at 0, as PyTorch."""
        if self._npdtype.kind == "b":
            raise RuntimeError("Boolean inputs not supported for relu")
        return self._op("relu", "ReluBackward0")

    def abs(self):
        """Elementwise absolute value."""
        return self._op("abs", "AbsBackward0")

    def sign(self):
        """-1, 0 or 1 by sign (0 for NaN, as PyTorch)."""
        return self._op("sign", "SignBackward0")

    def clamp(self, min=None, max=None):
        """Limit values to ``[min, max]`` (numbers or tensors; either may be None)."""
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
            raise NotImplementedError("\"clamp\" not implemented for 'Bool'")
        if target != self._npdtype:
            return self.to(target).clamp(min, max)
        gname = (
            "ClampBackward1"
            if min is not None and max is not None
            else "ClampMinBackward0"
            if min is not None
            else "ClampMaxBackward0"
        )
        lo = None if min is None else builtins.float(min)
        hi = None if max is None else builtins.float(max)
        return self._op("clamp", gname, min=lo, max=hi)

    clip = clamp

    def where(self, condition, other):
        """``x.where(condition, y)`` is ``where(condition, x, y)``."""
        return where(condition, self, other)

    def maximum(self, other):
        """Elementwise maximum of two tensors (NaN propagates)."""
        return maximum(self, other)

    def minimum(self, other):
        """Elementwise minimum of two tensors (NaN propagates)."""
        return minimum(self, other)

    def eq(self, other):
        """Elementwise ``==`` (bool result)."""
        return self == other

    def ne(self, other):
        """Elementwise ``!=`` (bool result)."""
        return self != other

    def lt(self, other):
        """Elementwise ``<`` (bool result)."""
        return self < other

    def le(self, other):
        """Elementwise ``<=`` (bool result)."""
        return self <= other

    def gt(self, other):
        """Elementwise ``>`` (bool result)."""
        return self > other

    def ge(self, other):
        """Elementwise ``>=`` (bool result)."""
        return self >= other

    def logical_not(self):
        """Elementwise logical not (bool result)."""
        return self._op("logical_not", "")

    def logical_and(self, other):
        """Elementwise logical and (bool result)."""
        return self & other

    def logical_or(self, other):
        """Elementwise logical or (bool result)."""
        return self | other

    # --- reductions ----------------------------------------------------------
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
                op, f"{cap}Backward1", axis=axes, keepdim=False
            )
            nans = where(nan, self, 0).sum() / maximum(nan.sum(), 1)  # NaN: g / #NaN each
            return _dispatch("where", f"{cap}Backward1", (nan.any(), nans, m), {})
        axes = _axes(dim, self.ndim, op)
        keepdim = bool(keepdim)
        if self.ndim == 0:
            return MaxResult(
                self._op(op, f"{cap}Backward0", axis=axes, keepdim=keepdim),
                self._op(argop, "", axis=0, keepdim=keepdim),
            )
        values = self._op(f"{op}_dim", f"{cap}Backward0", axis=axes, keepdim=keepdim)
        return MaxResult(values, self._op(argop, "", axis=axes[0], keepdim=keepdim))

    def max(self, dim=None, keepdim=False, *, other=None):
        """Largest element; along ``dim``: ``(values, indices)``; with a tensor: maximum."""
        if isinstance(dim, TensorOps):
            return maximum(self, dim)
        return self._minmax("max", "argmax", dim, keepdim, other)

    def min(self, dim=None, keepdim=False, *, other=None):
        """Smallest element; along ``dim``: ``(values, indices)``; with a tensor: minimum."""
        if isinstance(dim, TensorOps):
            return minimum(self, dim)
        return self._minmax("min", "argmin", dim, keepdim, other)

    def argmax(self, dim=None, keepdim=False):
        """Index of the largest value (over the flattened tensor, or along ``dim``)."""
        if dim is None:
            return self.reshape(-1)._op("argmax", "", axis=0, keepdim=False)
        return self._op(
            "argmax", "", axis=_axes(dim, self.ndim, "argmax")[0], keepdim=bool(keepdim)
        )

    def argmin(self, dim=None, keepdim=False):
        """Index of the smallest value (over the flattened tensor, or along ``dim``)."""
        if dim is None:
            return self.reshape(-1)._op("argmin", "", axis=0, keepdim=False)
        return self._op(
            "argmin", "", axis=_axes(dim, self.ndim, "argmin")[0], keepdim=bool(keepdim)
        )

    def all(self, dim=None, keepdim=False):
        """True where every element (over ``dim``) is non-zero."""
        return self._op("all", "", axis=_axes(dim, self.ndim, "all"), keepdim=bool(keepdim))

    def any(self, dim=None, keepdim=False):
        """True where some element (over ``dim``) is non-zero."""
        return self._op("any", "", axis=_axes(dim, self.ndim, "any"), keepdim=bool(keepdim))

    # --- movement -------------------------------------------------------------
    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self.shape)

    def dim(self) -> int:
        """The number of dimensions."""
        return len(self.shape)

    def numel(self) -> int:
        """The number of elements."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    def size(self, dim: Optional[int] = None):
        """The shape (an ``eager.Size``), or the size of dimension ``dim``."""
        if dim is None:
            return Size(self.shape)
        return self.shape[norm_axes(dim, self.ndim, "size")[0]]

    def reshape(self, *shape, _gname: str = "ViewBackward0"):
        """The same elements in a new shape (a view when the layout allows, else a copy)."""
        shape = _shape_arg(shape)
        new = _infer_shape(shape, self.numel(), self.shape)
        return self._op("reshape", _gname, shape=new)

    def view(self, *shape):
        """The same elements in a new shape; always a view (refused where PyTorch refuses)."""
        check_view_args(shape)
        return self.reshape(*shape)

    def view_as(self, other):
        """``view`` to another tensor's shape (refused where ``view`` is)."""
        return self.view(other.shape)

    def reshape_as(self, other):
        """``reshape`` to another tensor's shape."""
        return self.reshape(other.shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1):
        """Merge dimensions ``start_dim`` to ``end_dim`` into one."""
        if self.ndim == 0:
            return self.reshape(1)
        s, e = (
            norm_axes(start_dim, self.ndim, "flatten")[0],
            norm_axes(end_dim, self.ndim, "flatten")[0],
        )
        if s > e:
            raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
        shp = tuple(self.shape)
        n = 1
        for d in shp[s : e + 1]:
            n *= d
        return self.reshape(shp[:s] + (n,) + shp[e + 1 :])

    def unsqueeze(self, dim: int):
        """Insert a dimension of size 1 at ``dim`` (negative counts from the end)."""
        nd = self.ndim + 1
        if not -nd <= dim < nd:
            raise IndexError(
                f"unsqueeze: dimension out of range (expected to be in range of "
                f"[{-nd}, {nd - 1}], but got {dim})"
            )
        d = dim % nd
        shp = tuple(self.shape)
        return self.reshape(shp[:d] + (1,) + shp[d:], _gname="UnsqueezeBackward0")

    def expand(self, *shape):
        """A broadcast view to a larger shape (-1 keeps a size); writes to it are refused."""
        shape = _shape_arg(shape)
        cur = tuple(self.shape)
        if len(shape) < len(cur):
            raise RuntimeError(
                f"expand: the number of sizes provided ({len(shape)}) must be greater "
                f"or equal to the number of dimensions in the tensor ({len(cur)})"
            )
        lead = len(shape) - len(cur)
        new = []
        for i, s in enumerate(shape):
            old = cur[i - lead] if i >= lead else None
            if s == -1:
                if old is None:
                    raise RuntimeError(
                        "expand: -1 is not allowed in a leading, non-existing dimension"
                    )
                s = old
            if old is not None and old != 1 and old != s:
                raise RuntimeError(
                    f"expand: the expanded size of the tensor ({s}) must match the "
                    f"existing size ({old}) at non-singleton dimension {i}. "
                    f"Target sizes: {list(shape)}. Tensor sizes: {list(cur)}"
                )
            new.append(int(s))
        new = tuple(new)
        return self._op("expand", "ExpandBackward0", shape=new)

    def expand_as(self, other):
        """``expand`` to another tensor's shape."""
        return self.expand(other.shape)

    def broadcast_to(self, *shape):
        """``expand`` to ``shape``."""
        return self.expand(*shape)

    def permute(self, *dims):
        """A view with the dimensions reordered."""
        dims = _shape_arg(dims)
        perm = tuple(norm_axes(d, self.ndim, "permute")[0] for d in dims) if self.ndim else ()
        if sorted(perm) != list(range(self.ndim)):
            raise RuntimeError(
                f"permute: dims {list(dims)} are not a permutation of {self.ndim} dimensions"
            )
        return self._op("transpose", "PermuteBackward0", perm=perm)

    def transpose(self, dim0: int, dim1: int):
        """A view with two dimensions swapped."""
        nd = self.ndim
        perm = list(range(nd))
        if nd:
            a, b = norm_axes(dim0, nd, "transpose")[0], norm_axes(dim1, nd, "transpose")[0]
            perm[a], perm[b] = perm[b], perm[a]
        return self._op("transpose", "TransposeBackward0", perm=tuple(perm))

    swapaxes = transpose

    def t(self):
        """Transpose of a tensor with at most 2 dimensions."""
        if self.ndim > 2:
            raise RuntimeError(
                f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D"
            )
        perm = tuple(reversed(range(self.ndim)))
        return self._op("transpose", "TBackward0", perm=perm)

    @property
    def T(self):
        """All dimensions reversed (a matrix's transpose)."""
        return self._op("transpose", "PermuteBackward0", perm=tuple(reversed(range(self.ndim))))

    @property
    def mT(self):
        """The last two dimensions swapped (batched matrix transpose)."""
        if self.ndim < 2:
            raise RuntimeError(
                "tensor.mT is only supported on matrices or batches of matrices. "
                f"Got {self.ndim}-D tensor."
            )
        return self.transpose(-2, -1)

    def __getitem__(self, key):
        return getitem(self, key)

    def unbind(self, dim: int = 0) -> tuple:
        """The slices along ``dim``, as views (``for row in x`` iterates over them)."""
        if self.ndim == 0:
            raise RuntimeError("Dimension specified as 0 but tensor has no dimensions")
        d = norm_axes(dim, self.ndim, "unbind")[0]
        lead = (("s", None, None, None),) * d
        return self._multi_output_views(
            tuple(
                _dispatch("getitem", "UnbindBackward0", (self,), {"index": lead + (("i", i),)})
                for i in range(self.shape[d])
            )
        )

    def _multi_output_views(self, views: tuple) -> tuple:
        return views

    # --- dtype ----------------------------------------------------------------
    @property
    def is_floating_point_(self) -> bool:
        """Whether the dtype is a floating-point type (eager's internal spelling)."""
        return self._npdtype.kind == "f"

    def is_floating_point(self) -> bool:
        """Whether the dtype is a floating-point type."""
        return self._npdtype.kind == "f"

    def to(self, *args, **kwargs):
        """``to(dtype)``, ``to(device)``, ``to(device, dtype)``, ``to(other)``; ``copy=True``
        always returns a new tensor; a device other than the CPU is a clear error."""
        dtype = kwargs.pop("dtype", None)
        copy = kwargs.pop("copy", False)
        kwargs.pop("non_blocking", None)
        kwargs.pop("memory_format", None)
        device = kwargs.pop("device", None)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        flags = []
        for a in args:
            if isinstance(a, bool):
                flags.append(a)  # positional non_blocking, copy
            elif isinstance(a, (D.dtype, np.dtype, type)):
                dtype = a
            elif isinstance(a, TensorOps):
                dtype = a._npdtype
            else:
                device = a
        if len(flags) > 1:
            copy = flags[1]
        if device is not None:
            _device(device)  # validates: only the CPU exists
        npd = self._npdtype if dtype is None else D.to_np(dtype)
        if npd == self._npdtype:
            return self.clone() if copy else self
        return self._op("cast", "ToCopyBackward0", dtype=npd.name)

    def float(self):
        """Cast to float32."""
        return self.to(D.float32)

    def double(self):
        """Cast to float64."""
        return self.to(D.float64)

    def half(self):
        """Cast to float16."""
        return self.to(D.float16)

    def long(self):
        """Cast to int64."""
        return self.to(D.int64)

    def int(self):
        """Cast to int32."""
        return self.to(D.int32)

    def bool(self):
        """Cast to bool."""
        return self.to(D.bool)

    def type_as(self, other):
        """Cast to another tensor's dtype."""
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
        """0/1 draws with probability ``p`` (or the tensor's own values)."""
        return _bernoulli(self, p)

    def clone(self):
        """A copy that keeps the gradient history."""
        return self._op("copy", "CloneBackward0")

    def contiguous(self):
        """Self when its elements are laid out in C order, else a C-ordered copy (as in
        PyTorch: a write through the result reaches self only in the first case)."""
        return self if self.is_contiguous() else self.clone()

    def zeros_like_(self):
        """A zero tensor of this shape and dtype (used by VJP rules)."""
        return self._op("fill", "FillBackward0", value=0.0)
