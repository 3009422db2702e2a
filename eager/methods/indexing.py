"""Tensor methods: selecting and scattering elements (gather, scatter_add, sort, topk...).

A mixin of :class:`eager.surface.TensorOps` (see eager/methods/__init__.py).

Primitives (eager/ops/indexing.py): ``gather``, ``scatter``, ``scatter_add``, ``argsort``.
Everything else is written with public ops: ``index_select`` and ``take_along_dim`` are
gathers, ``sort``/``topk`` gather the values an ``argsort`` names (their gradient is
gather's), ``masked_fill`` is a ``where``.  ``masked_select``/``nonzero`` have a shape
that depends on the data, so they run eagerly only.
"""

from __future__ import annotations

import builtins
import collections
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

import eager._dtype as D
import eager._operands as O
import eager.methods.stats as _MS
from eager._operands import _dispatch
from eager.ops.registry import broadcast_shapes, norm_axes


def _repr(self) -> str:
    name = type(self).__name__
    return f"eager.return_types.{name}(\nvalues={self.values!r},\nindices={self.indices!r})"


#: ``sort``'s and ``topk``'s results (PyTorch's torch.return_types.sort/topk)
SortResult = collections.namedtuple("sort", ["values", "indices"])  # type: ignore[name-match]
TopkResult = collections.namedtuple("topk", ["values", "indices"])  # type: ignore[name-match]
KthvalueResult = collections.namedtuple("kthvalue", ["values", "indices"])  # type: ignore[name-match]
MedianResult = collections.namedtuple("median", ["values", "indices"])  # type: ignore[name-match]
for _cls in (SortResult, TopkResult, KthvalueResult, MedianResult):
    _cls.__module__ = "eager.return_types"
    _cls.__repr__ = _repr  # type: ignore[assignment,method-assign]


def _tensor_ops() -> type:
    return O.TensorOps  # type: ignore[return-value]


def _concrete(x: Any) -> Optional[np.ndarray]:
    """The data of an eager tensor; None for a traced value (graphc) or a rule's operand."""
    data = getattr(x, "_data", None)
    return data if data.__class__ is np.ndarray else None


def _index_operand(self, index, op: str):
    if not isinstance(index, _tensor_ops()):
        index = self._wrap_const(np.asarray(index, dtype=np.int64))
    return index


def _dim(self, dim, op: str) -> int:
    return norm_axes(dim, self.ndim, op)[0]


def _check_range(index, n: int, message: str = "index out of range in self") -> None:
    """Eagerly: an IndexError for an index outside ``[0, n)`` (compiled code checks it when
    it runs)."""
    data = _concrete(index)
    if data is not None and data.size and (data.min() < 0 or data.max() >= n):
        raise IndexError(message)


def _data_dependent(op: str, instead: str) -> TypeError:
    return TypeError(
        f"{op}: the result's shape depends on the values of the input, which a compiled "
        f"(traced) graph cannot express; use {instead} instead, or run this part eagerly"
    )


class IndexingMethods:
    __slots__ = ()

    if TYPE_CHECKING:  # the rest of the surface: TensorOps and the tensor classes

        def __getattr__(self, name: str) -> Any: ...

    # --- gathers and scatters ---------------------------------------------------------------
    def gather(self, dim, index, *, sparse_grad=False):
        """``out[i][j] = self[i][index[i][j]]`` along ``dim`` (torch.gather)."""
        if sparse_grad:
            raise NotImplementedError("gather: sparse_grad=True is not supported")
        index = _index_operand(self, index, "gather")
        return self._op("gather", "GatherBackward0", index, dim=_dim(self, dim, "gather"))

    def take_along_dim(self, indices, dim=None):
        """``gather`` with broadcasting of self and indices (torch.take_along_dim)."""
        indices = _index_operand(self, indices, "take_along_dim")
        if dim is None:
            return self.reshape(-1).gather(0, indices.reshape(-1))
        d = _dim(self, dim, "take_along_dim")
        if self.ndim != indices.ndim:
            raise RuntimeError(
                "torch.take_along_dim(): input and indices should have the same number of "
                f"dimensions, but got {self.ndim} dimensions for input, and {indices.ndim} "
                "dimensions for indices"
            )
        if self.ndim == 0:
            return self.gather(0, indices)
        xs, ixs = list(self.shape), list(indices.shape)
        xs[d] = ixs[d] = 1
        b = list(broadcast_shapes(tuple(xs), tuple(ixs), op="take_along_dim"))
        bx, bi = list(b), list(b)
        bx[d], bi[d] = self.shape[d], indices.shape[d]
        return self.expand(*bx).gather(d, indices.expand(*bi))

    def _scatter_src(self, index, src, value, op: str):
        if isinstance(src, _tensor_ops()):
            return src, "ScatterBackward0"
        v = src if src is not None else value
        if v is None:
            raise TypeError(f"{op}() missing 1 required argument: 'src' or 'value'")
        const = self._wrap_const(np.asarray(v, dtype=self._npdtype))
        return const.expand(tuple(index.shape)), "ScatterBackward1"

    def scatter(self, dim, index, src=None, value=None, *, reduce=None):
        """self with ``src`` (or the number ``value``) written at the positions ``index``
        names along ``dim`` (torch.scatter; the last of repeated positions wins)."""
        index = _index_operand(self, index, "scatter")
        if reduce is not None:
            if reduce == "add" and isinstance(src, _tensor_ops()):
                return self.scatter_add(dim, index, src)
            raise NotImplementedError(f"scatter: reduce={reduce!r} is not supported")
        s, gname = self._scatter_src(index, src, value, "scatter")
        return self._op("scatter", gname, index, s, dim=_dim(self, dim, "scatter"))

    def scatter_add(self, dim, index, src):
        """self with ``src`` added at the positions ``index`` names along ``dim``
        (repeated positions accumulate)."""
        index = _index_operand(self, index, "scatter_add")
        return self._op(
            "scatter_add", "ScatterAddBackward0", index, src, dim=_dim(self, dim, "scatter_add")
        )

    def index_select(self, dim, index):
        """The slices of self along ``dim`` that the 1-D ``index`` names, in its order."""
        index = _index_operand(self, index, "index_select")
        if index._npdtype.name not in ("int64", "int32"):
            raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
        if index.ndim > 1:
            raise IndexError("index_select(): Index is supposed to be a vector")
        d = _dim(self, dim, "index_select")
        if self.ndim == 0 and index.numel() != 1:
            raise RuntimeError(
                "index_select(): Index to scalar can have only 1 value, got "
                f"{index.numel()} value(s)"
            )
        _check_range(index, self.shape[d] if self.ndim else 1)
        if self.ndim == 0:
            return (
                self.reshape(1)
                ._index_rows(0, index.reshape(-1), "IndexSelectBackward0")
                .reshape(())
            )
        return self._index_rows(d, index.reshape(-1), "IndexSelectBackward0")

    def _index_rows(self, d: int, index, gname: str):
        """``index_select`` without checks: a gather of the rows with an expanded index."""
        shape = list(self.shape)
        shape[d] = index.shape[0]
        lead = [1] * self.ndim
        lead[d] = index.shape[0]
        ix = index.reshape(*lead).expand(*shape)
        return _dispatch("gather", gname, (self, ix), {"dim": d})

    def index_add(self, dim, index, source, *, alpha=1):
        """self with the slices of ``source`` added at the rows ``index`` names along ``dim``."""
        index = _index_operand(self, index, "index_add")
        d = _dim(self, dim, "index_add")
        if index.ndim > 1:
            raise IndexError("index_add_(): Index is supposed to be a vector")
        _check_range(index, self.shape[d] if self.ndim else 1)
        if alpha != 1:
            source = source * alpha
        if self.ndim == 0:
            return self.reshape(1).index_add(0, index, source.reshape(1)).reshape(())
        shape = list(source.shape)
        lead = [1] * self.ndim
        lead[d] = index.reshape(-1).shape[0]
        ix = index.reshape(*lead).expand(*shape)
        return self.scatter_add(d, ix, source)

    def scatter_(self, dim, index, src=None, value=None, *, reduce=None):
        """In-place :meth:`scatter`."""
        return self._inplace_via("scatter", dim, index, src, value, reduce=reduce)

    def scatter_add_(self, dim, index, src):
        """In-place :meth:`scatter_add`."""
        return self._inplace_via("scatter_add", dim, index, src)

    def index_add_(self, dim, index, source, *, alpha=1):
        """In-place :meth:`index_add`."""
        return self._inplace_via("index_add", dim, index, source, alpha=alpha)

    def masked_fill_(self, mask, value):
        """In-place :meth:`masked_fill`."""
        return self._inplace_via("masked_fill", mask, value)

    def _inplace_via(self, method: str, *args, **kwargs):
        """Run ``method`` out of place and write the result into self: eager's in-place
        machinery (``_inplace``), or a traced value's rebinding (functionalization)."""
        rebind = getattr(self, "_rebind", None)
        if rebind is not None:
            return rebind(getattr(self, method)(*args, **kwargs))
        return self._inplace(method, *args, **kwargs)

    # --- masks ---------------------------------------------------------------------------
    def masked_fill(self, mask, value):
        """self with ``value`` where ``mask`` is True (a number or a 0-d tensor)."""
        if not isinstance(mask, _tensor_ops()):
            mask = self._wrap_const(np.asarray(mask))
        if mask._npdtype.kind != "b":
            raise RuntimeError(
                "masked_fill_ only supports boolean masks, but got mask with dtype "
                f"{D.from_np(mask._npdtype).name.replace('float32', 'float')}"
            )
        if isinstance(value, _tensor_ops()):
            if value.ndim != 0:
                raise RuntimeError(
                    "masked_fill_ only supports a 0-dimensional value tensor, but got tensor "
                    f"with {value.ndim} dimension(s)."
                )
            v = value.to(self._npdtype)
        else:
            fill = D.checked_fill(value, self._npdtype)
            fused = _MS.FUSED.get("masked_fill")
            out = fused(self, mask, fill) if fused is not None else None
            if out is not None:
                return out
            v = self._wrap_const(fill)
        return _dispatch("where", "MaskedFillBackward0", (mask, v, self), {})

    def masked_select(self, mask):
        """The elements of self (broadcast with ``mask``) where ``mask`` is True, as a 1-D
        tensor (eager only: the size depends on the mask's values)."""
        if not isinstance(mask, _tensor_ops()) or mask._npdtype.kind != "b":
            raise RuntimeError("masked_select: expected BoolTensor for mask")
        if _concrete(self) is None or _concrete(mask) is None:
            raise _data_dependent(
                "masked_select", "where(mask, x, 0) or masked_fill(~mask, 0) (then a sum)"
            )
        shape = tuple(np.broadcast_shapes(tuple(self.shape), tuple(mask.shape)))
        return self.expand(shape)[mask.expand(shape)]

    def nonzero(self, *, as_tuple=False):
        """The indices of the non-zero elements: an (n, ndim) int64 tensor, or one 1-D
        tensor per dim with ``as_tuple=True`` (eager only: n depends on the values)."""
        data = _concrete(self)
        if data is None:
            raise _data_dependent("nonzero", "a mask (x != 0) with where or masked_fill")
        nz = np.argwhere(data).astype(np.int64)
        if as_tuple:
            if data.ndim == 0:
                return (self._wrap_const(np.zeros(int(bool(data)), np.int64)),)
            return tuple(self._wrap_const(np.ascontiguousarray(nz[:, k])) for k in range(data.ndim))
        return self._wrap_const(nz.reshape(nz.shape[0], data.ndim))

    def argwhere(self):
        """``nonzero()``: the (n, ndim) indices of the non-zero elements (eager only)."""
        return self.nonzero()

    # --- sorting -----------------------------------------------------------------------
    def argsort(self, dim=-1, descending=False, stable=False):
        """The indices that sort self along ``dim`` (always a stable sort here; NaN is the
        largest value, as in PyTorch)."""
        return self._op(
            "argsort", "", dim=_dim(self, dim, "argsort"), descending=builtins.bool(descending)
        )

    def sort(self, dim=-1, descending=False, stable=False):
        """(values, indices) of self sorted along ``dim``; the sort is always stable here
        (PyTorch's stable=False may order ties differently)."""
        d = _dim(self, dim, "sort")
        idx = self.argsort(d, descending=descending)
        return SortResult(_dispatch("gather", "SortBackward0", (self, idx), {"dim": d}), idx)

    def msort(self):
        """``sort(dim=0).values``."""
        return self.sort(0).values

    def topk(self, k, dim=-1, largest=True, sorted=True):
        """(values, indices) of the ``k`` largest (or smallest) elements along ``dim``, in
        sorted order (ties: the first occurrence first; NaN counts as the largest)."""
        d = _dim(self, dim, "topk")
        n = self.shape[d] if self.ndim else 1
        k = builtins.int(k)
        if not 0 <= k <= n:
            raise RuntimeError("selected index k out of range")
        idx = self.argsort(d, descending=largest)
        if self.ndim:
            idx = idx[(slice(None),) * d + (slice(0, k),)]
        return TopkResult(_dispatch("gather", "TopkBackward0", (self, idx), {"dim": d}), idx)

    def _select_sorted(self, d: int, pos, keepdim, cls, gname: str):
        """The element at sorted position ``pos`` (an int, or an index tensor of the keepdim
        shape) along ``d``, and its index."""
        idx = self.argsort(d)
        if self.ndim:
            if isinstance(pos, builtins.int):
                idx = idx[(slice(None),) * d + (slice(pos, pos + 1),)]
            else:
                idx = idx.gather(d, pos)
        values = _dispatch("gather", gname, (self, idx), {"dim": d})
        if self.ndim and not keepdim:
            values, idx = values.squeeze(d), idx.squeeze(d)
        return cls(values, idx)

    def kthvalue(self, k, dim=-1, keepdim=False):
        """(values, indices) of the k-th smallest element along ``dim`` (NaN the largest)."""
        d = _dim(self, dim, "kthvalue")
        k = builtins.int(k)
        if not 1 <= k <= (self.shape[d] if self.ndim else 1):
            raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
        return self._select_sorted(d, k - 1, keepdim, KthvalueResult, "KthvalueBackward0")

    def median(self, dim=None, keepdim=False):
        """The lower median (of all elements, or (values, indices) along ``dim``); NaN
        when the elements hold one (then its index is the first NaN's), as PyTorch."""
        if dim is None:
            flat = self.reshape(-1)
            if flat.shape[0] == 0:
                return self._wrap_const(np.array(np.nan, self._npdtype))
            return flat.median(0).values
        d = _dim(self, dim, "median")
        n = self.shape[d] if self.ndim else 1
        if n == 0:
            raise IndexError(f"median(): Expected reduction dim {d} to have non-zero size.")
        pos = (n - 1) // 2
        if self._npdtype.kind == "f" and self.ndim:
            nans = (self != self).sum(d, keepdim=True)  # NaNs sort last: the first one
            return self._select_sorted(
                d, O.where(nans > 0, n - nans, pos), keepdim, MedianResult, "MedianBackward1"
            )
        return self._select_sorted(d, pos, keepdim, MedianResult, "MedianBackward1")

    # --- comparisons ---------------------------------------------------------------------
    def isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
        """Elementwise ``|self - other| <= atol + rtol * |other|`` (equal infinities are
        close; NaNs only with ``equal_nan``)."""
        if not isinstance(other, _tensor_ops()):
            other = self._wrap_const(np.asarray(other, dtype=self._npdtype))
        if self._npdtype != other._npdtype:
            raise RuntimeError(
                f"{D.from_np(self._npdtype).name} did not match {D.from_np(other._npdtype).name}"
            )
        eq = self == other
        if self._npdtype.kind != "f":
            if self._npdtype.kind == "b":
                return eq
            a, b = self.to(D.float64), other.to(D.float64)
        else:
            a, b = self, other
        err = (a - b).abs()  # finite and within the tolerance (inf - inf is NaN: not close)
        close = eq | ((err < float("inf")) & (err <= atol + rtol * b.abs()))
        if equal_nan and self._npdtype.kind == "f":
            close = close | ((a != a) & (b != b))
        return close

    def allclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
        """Whether every element is :meth:`isclose` to ``other`` (a Python bool)."""
        return builtins.bool(self.isclose(other, rtol, atol, equal_nan).all())

    def equal(self, other) -> bool:
        """Whether self and ``other`` have the same shape and elements (a Python bool)."""
        if tuple(self.shape) != tuple(other.shape):
            return False
        return builtins.bool((self == other).all())


#: module-level functions that are not methods, by name
FUNCTIONS: dict = {}
#: methods that are also module-level functions (``eager.name(x, ...)``)
METHOD_FUNCTIONS: list = [
    "gather",
    "take_along_dim",
    "scatter",
    "scatter_add",
    "index_select",
    "index_add",
    "masked_fill",
    "masked_select",
    "nonzero",
    "argwhere",
    "argsort",
    "sort",
    "msort",
    "topk",
    "kthvalue",
    "median",
    "isclose",
    "allclose",
    "equal",
]
