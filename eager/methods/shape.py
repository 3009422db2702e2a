"""Tensor methods: joining, splitting and rearranging (cat, stack, split, tril, flip...).

A mixin of :class:`eager.surface.TensorOps` (see eager/methods/__init__.py).

``cat`` is the one primitive (eager/ops/joining.py); the rest are composites of public
ops, so eager, graphc, gradients and higher order come for free.  A composite that
PyTorch documents as returning a new tensor (flip, roll, repeat, repeat_interleave)
ends with a copy, so a write into its result never reaches the input (numpy's
negative-step slice, like graphc's, is a view).  Where the last op of a composite
records the backward node, it gets PyTorch's name (``FlipBackward0``...).
"""

from __future__ import annotations

import builtins
import math
from typing import TYPE_CHECKING, Any

import numpy as np

import eager._operands as O
from eager.ops.joining import CAT_MAX_OPERANDS, cat_skipped


def _is_tensor(x: Any) -> bool:
    cls: Any = O.TensorOps  # bound at import time by eager.factories' wiring block
    return isinstance(x, cls)


def _dim_error(dim: int, nd: int) -> IndexError:
    lim = max(nd, 1)
    return IndexError(
        f"Dimension out of range (expected to be in range of [{-lim}, {lim - 1}], but got {dim})"
    )


def _wrap(dim: Any, nd: int) -> int:
    """PyTorch's maybe_wrap_dim: a dim of an ``nd``-dim tensor (0-d takes 0 and -1)."""
    if not isinstance(dim, (builtins.int, np.integer)) or isinstance(
        dim, (builtins.bool, np.bool_)
    ):
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    dim = builtins.int(dim)
    lim = max(nd, 1)
    if not -lim <= dim < lim:
        raise _dim_error(dim, nd)
    return dim % lim


def _dims(dims: Any, nd: int) -> tuple:
    """An int or a sequence of ints as wrapped dims, PyTorch's error for a repeat."""
    if isinstance(dims, (builtins.int, np.integer)):
        dims = (dims,)
    out = [_wrap(d, nd) for d in dims]
    for d in out:
        if out.count(d) > 1:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    return tuple(out)


def _ints(args: tuple, what: str) -> tuple:
    """``f(2, 3)`` or ``f((2, 3))`` as a tuple of ints."""
    if len(args) == 1 and isinstance(args[0], (tuple, list, O.Size)):
        args = tuple(args[0])
    out = []
    for a in args:
        if not isinstance(a, (builtins.int, np.integer)) or isinstance(a, builtins.bool):
            raise TypeError(f"{what}: expected a sequence of ints, got {type(a).__name__}")
        out.append(builtins.int(a))
    return tuple(out)


def _slice_at(dim: int, s: Any) -> tuple:
    return (slice(None),) * dim + (s,)


def _tensor_list(tensors: Any, op: str) -> list:
    if _is_tensor(tensors) or not isinstance(tensors, (list, tuple)):
        raise TypeError(
            f"{op}(): argument 'tensors' (position 1) must be tuple of Tensors, "
            f"not {type(tensors).__name__ if not _is_tensor(tensors) else 'Tensor'}"
        )
    out = list(tensors)
    for i, t in enumerate(out):
        if not _is_tensor(t):
            raise TypeError(
                f"expected Tensor as element {i} in argument 0, but got {type(t).__name__}"
            )
    return out


def _cat(tensors: list, dim: int, gname: str):
    if len(tensors) > CAT_MAX_OPERANDS:  # one node takes at most CAT_MAX_OPERANDS
        n = CAT_MAX_OPERANDS
        tensors = [_cat(tensors[i : i + n], dim, "CatBackward0") for i in range(0, len(tensors), n)]
    return O._dispatch("cat", gname, tuple(tensors), {"dim": dim})


def cat(tensors, dim=0, *, out=None):
    """Concatenate tensors along an existing dim (1-D empty tensors are skipped)."""
    if out is not None:
        raise NotImplementedError("cat: the out= argument is not supported")
    ts = _tensor_list(tensors, "cat")
    if not ts:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(ts):
        if t.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    ref = next((t for t in ts if not cat_skipped(t.shape)), None)
    d = 0 if ref is None else _wrap(dim, ref.ndim)
    return _cat(ts, d, "CatBackward0")


def stack(tensors, dim=0, *, out=None):
    """Join tensors of one shape along a new dim."""
    if out is not None:
        raise NotImplementedError("stack: the out= argument is not supported")
    ts = _tensor_list(tensors, "stack")
    if not ts:
        raise RuntimeError("stack expects a non-empty TensorList")
    s0 = tuple(ts[0].shape)
    for i, t in enumerate(ts[1:], 1):
        if tuple(t.shape) != s0:
            raise RuntimeError(
                f"stack expects each tensor to be equal size, but got {list(s0)} at entry 0 "
                f"and {list(t.shape)} at entry {i}"
            )
    d = _wrap(dim, len(s0) + 1)
    return _cat([t.unsqueeze(d) for t in ts], d, "StackBackward0")


def _atleast(t, n: int):
    while t.ndim < n:
        t = t.unsqueeze(0)
    return t


def hstack(tensors, *, out=None):
    """Concatenate along dim 1 (dim 0 for 1-D tensors)."""
    ts = [_atleast(t, 1) for t in _tensor_list(tensors, "hstack")]
    if not ts:
        raise RuntimeError("hstack expects a non-empty TensorList")
    return cat(ts, 0 if ts[0].ndim == 1 else 1, out=out)


def vstack(tensors, *, out=None):
    """Concatenate along dim 0, 1-D tensors taken as rows."""
    ts = [_atleast(t, 2) for t in _tensor_list(tensors, "vstack")]
    if not ts:
        raise RuntimeError("vstack expects a non-empty TensorList")
    return cat(ts, 0, out=out)


def _atleast_nd(n: int, tensors: tuple):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        return tuple(_atleast_nd(n, (t,)) for t in tensors[0])
    if len(tensors) != 1:
        return tuple(_atleast_nd(n, (t,)) for t in tensors)
    t = tensors[0]
    if not _is_tensor(t):
        raise TypeError(f"atleast_{n}d(): expected a Tensor, got {type(t).__name__}")
    if n == 3 and t.ndim == 1:
        return t.reshape(1, t.shape[0], 1)
    if n == 3 and t.ndim == 2:
        return t.unsqueeze(-1)
    return _atleast(t, n)


def atleast_1d(*tensors):
    """The tensor (or each tensor) as at least 1-D (a 0-d one becomes shape (1,))."""
    return _atleast_nd(1, tensors)


def atleast_2d(*tensors):
    """The tensor (or each tensor) as at least 2-D (a 1-D one becomes one row)."""
    return _atleast_nd(2, tensors)


def atleast_3d(*tensors):
    """The tensor (or each tensor) as at least 3-D ((n,) -> (1, n, 1), (m, n) -> (m, n, 1))."""
    return _atleast_nd(3, tensors)


def dstack(tensors, *, out=None):
    """Concatenate along dim 2 after making every tensor at least 3-D."""
    ts = [_atleast_nd(3, (t,)) for t in _tensor_list(tensors, "dstack")]
    if not ts:
        raise RuntimeError("dstack expects a non-empty TensorList")
    return cat(ts, 2, out=out)


def column_stack(tensors, *, out=None):
    """Stack 0-d/1-D tensors as columns (and 2-D ones as they are) along dim 1."""
    ts = [
        t.reshape(t.numel(), 1) if t.ndim <= 1 else t for t in _tensor_list(tensors, "column_stack")
    ]
    if not ts:
        raise RuntimeError("column_stack expects a non-empty TensorList")
    return cat(ts, 1, out=out)


class ShapeMethods:
    """The methods of this topic, mixed into TensorOps (which defines the rest)."""

    __slots__ = ()

    if TYPE_CHECKING:  # what this mixin uses of the surface it is part of (TensorOps)
        shape: Any
        ndim: int
        _npdtype: np.dtype

        def _op(self, op: str, gname: str, *operands: Any, **attrs: Any) -> Any: ...
        def _wrap_const(self, arr: np.ndarray) -> Any: ...
        def __getitem__(self, key: Any) -> Any: ...
        def reshape(self, *shape: Any, _gname: str = ...) -> Any: ...
        def permute(self, *dims: Any) -> Any: ...
        def transpose(self, dim0: int, dim1: int) -> Any: ...
        def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Any: ...
        def tolist(self) -> Any: ...

    # --- splitting ------------------------------------------------------------------
    def split(self, split_size_or_sections, dim=0):
        """Views of consecutive pieces along ``dim``: of one size (the last may be smaller)
        or of the given sizes."""
        if self.ndim == 0:
            raise RuntimeError("split expects at least a 1-dimensional tensor")
        d = _wrap(dim, self.ndim)
        n = self.shape[d]
        if isinstance(split_size_or_sections, (builtins.int, np.integer)):
            s = builtins.int(split_size_or_sections)
            if s < 0:
                raise RuntimeError(
                    f"split expects split_size be non-negative, but got split_size={s}"
                )
            if s == 0 and n != 0:
                raise RuntimeError(
                    "split_size can only be 0 if dimension size is 0, but got dimension "
                    f"size of {n}"
                )
            k = builtins.max((n + s - 1) // s, 1) if s else 1
            sizes = [builtins.min(s, n - i * s) for i in range(k)]
        else:
            sizes = list(_ints((split_size_or_sections,), "split"))
            if builtins.any(s < 0 for s in sizes):
                raise RuntimeError(
                    "split_with_sizes expects split_sizes have only non-negative entries, "
                    f"but got split_sizes={sizes}"
                )
            if builtins.sum(sizes) != n:
                raise RuntimeError(
                    f"split_with_sizes expects split_sizes to sum exactly to {n} (input "
                    f"tensor's size at dimension {d}), but got split_sizes={sizes}"
                )
        return self._pieces(d, sizes)

    def _pieces(self, d: int, sizes: list) -> tuple:
        out, start = [], 0
        for s in sizes:
            out.append(self[_slice_at(d, slice(start, start + s))])
            start += s
        return tuple(out)

    def split_with_sizes(self, split_sizes, dim=0):
        """``split`` with a list of sizes."""
        return self.split(list(split_sizes), dim)

    def chunk(self, chunks, dim=0):
        """At most ``chunks`` views of (nearly) equal size along ``dim``."""
        if self.ndim == 0:
            raise RuntimeError("chunk expects at least a 1-dimensional tensor")
        chunks = builtins.int(chunks)
        if chunks <= 0:
            raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
        d = _wrap(dim, self.ndim)
        n = self.shape[d]
        size = (n + chunks - 1) // chunks
        if size == 0 and n == 0:
            return self._pieces(d, [0] * chunks)
        return self.split(size, d)

    def tensor_split(self, indices_or_sections, dim=0):
        """Views split at the given indices, or into ``sections`` pieces of near-equal size."""
        if self.ndim == 0:
            raise RuntimeError(
                "tensor_split expected at least a 1-dimensional tensor, but got a tensor "
                "with 0 dims"
            )
        d = _wrap(dim, self.ndim)
        n = self.shape[d]
        spec = indices_or_sections
        if _is_tensor(spec):
            if spec.ndim > 1 or spec._npdtype.kind not in "iu":
                raise RuntimeError(
                    "tensor_split expected tensor_indices_or_sections to be a zero-dimensional "
                    "or one-dimensional tensor of integers"
                )
            vals = spec.tolist()  # a traced value raises: the split points must be known
            spec = vals if spec.ndim == 1 else builtins.int(vals)
        if isinstance(spec, (builtins.int, np.integer)):
            k = builtins.int(spec)
            if k <= 0:
                raise RuntimeError(f"number of sections must be larger than 0, got {k}")
            q, r = divmod(n, k)
            return self._pieces(d, [q + 1] * r + [q] * (k - r))
        idx = _ints((spec,), "tensor_split")
        # PyTorch: piece i is self[idx[i-1]:idx[i]] along d with the raw indices (a negative
        # one counts from the end, as a slice's), so a decreasing index gives an empty piece
        # and the next one starts from that index again, not from the largest so far
        out, prev = [], 0
        for i in list(idx) + [None]:
            out.append(self[_slice_at(d, slice(prev, i))])
            prev = i
        return tuple(out)

    def narrow(self, dim, start, length):
        """A view of ``length`` elements of ``dim`` from ``start``."""
        if self.ndim == 0:
            raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
        d = _wrap(dim, self.ndim)
        if _is_tensor(start):
            start = builtins.int(start.item())
        n = self.shape[d]
        start, length = builtins.int(start), builtins.int(length)
        if length < 0:
            raise RuntimeError("narrow(): length must be non-negative.")
        if not -n <= start <= n:
            raise IndexError(
                f"start out of range (expected to be in range of [{-n}, {n}], but got {start})"
            )
        if start < 0:
            start += n
        if start + length > n:
            raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({n}).")
        return self[_slice_at(d, slice(start, start + length))]

    def select(self, dim, index):
        """The view at ``index`` of ``dim`` (that dim removed)."""
        if self.ndim == 0:
            raise IndexError("select() cannot be applied to a 0-dim tensor.")
        d = _wrap(dim, self.ndim)
        n = self.shape[d]
        i = builtins.int(index)
        if not -n <= i < n:
            raise IndexError(
                f"select(): index {i} out of range for tensor of size {list(self.shape)} "
                f"at dimension {d}"
            )
        return self[_slice_at(d, i % n)]

    # --- rearranging ----------------------------------------------------------------
    def movedim(self, source, destination):
        """Move dims ``source`` to positions ``destination`` (the others keep their order)."""
        nd = self.ndim
        src = [source] if isinstance(source, (builtins.int, np.integer)) else list(source)
        dst = (
            [destination]
            if isinstance(destination, (builtins.int, np.integer))
            else list(destination)
        )
        if len(src) != len(dst):
            raise RuntimeError(
                f"movedim: Invalid source or destination dims: source ({src} dims) should "
                f"contain the same number of dims as destination ({dst} dims)"
            )
        s = [_wrap(x, nd) for x in src]
        t = [_wrap(x, nd) for x in dst]
        if len(set(s)) != len(s):
            raise RuntimeError(f"movedim: repeated dim in `source` ({src})")
        if len(set(t)) != len(t):
            raise RuntimeError(f"movedim: repeated dim in `destination` ({dst})")
        if nd == 0:
            return self.permute(())
        perm = [-1] * nd
        for a, b in zip(s, t):
            perm[b] = a
        rest = iter(i for i in range(nd) if i not in s)
        perm = [p if p != -1 else next(rest) for p in perm]
        return self.permute(tuple(perm))

    moveaxis = movedim

    def squeeze(self, dim=None):
        """Remove size-1 dims: all of them, or those of ``dim`` (an int or a tuple of ints,
        negative allowed; a named dim of another size stays)."""
        shp = tuple(self.shape)
        if dim is None:
            new = tuple(s for s in shp if s != 1)
            return self.reshape(new, _gname="SqueezeBackward0")
        axes = _dims(dim, self.ndim)
        new = tuple(s for i, s in enumerate(shp) if not (i in axes and s == 1))
        gname = (
            "SqueezeBackward1"
            if isinstance(dim, (builtins.int, np.integer))
            else "SqueezeBackward2"
        )
        return self.reshape(new, _gname=gname)

    def swapdims(self, dim0, dim1):
        """Alias of ``transpose``."""
        return self.transpose(dim0, dim1)

    def flip(self, *dims):
        """A copy with the order of elements along ``dims`` reversed (not a view)."""
        ds = _dims(_ints(dims, "flip"), self.ndim)
        if not ds or not self.ndim:
            return self._op("copy", "FlipBackward0")
        # a negative-step slice (the public getitem refuses one, as PyTorch does) is a
        # view in numpy and in graphc: the copy makes the result a tensor of its own
        key = tuple(("s", None, None, -1 if i in ds else None) for i in range(self.ndim))
        return self._op("getitem", "FlipBackward0", index=key)._op("copy", "FlipBackward0")

    def fliplr(self):
        """Flip along dim 1 (a copy)."""
        if self.ndim < 2:
            raise RuntimeError("Input must be >= 2-d.")
        return self.flip(1)

    def flipud(self):
        """Flip along dim 0 (a copy)."""
        if self.ndim < 1:
            raise RuntimeError("Input must be >= 1-d.")
        return self.flip(0)

    def roll(self, shifts, dims=None):
        """Shift elements circularly along ``dims`` (of the flattened tensor without dims)."""
        sh = (shifts,) if isinstance(shifts, (builtins.int, np.integer)) else tuple(shifts)
        if dims is None:
            if len(sh) != 1:
                raise RuntimeError(f"shifts and dimensions must align. shifts: {len(sh)}, dims:0")
            return self.flatten().roll(sh[0], 0).reshape(self.shape, _gname="RollBackward0")
        ds = (dims,) if isinstance(dims, (builtins.int, np.integer)) else tuple(dims)
        if len(sh) != len(ds):
            raise RuntimeError(
                f"shifts and dimensions must align. shifts: {len(sh)}, dims:{len(ds)}"
            )
        ds = tuple(_wrap(d, self.ndim) for d in ds)
        out = self
        for s, d in zip(sh, ds):
            n = out.shape[d] if out.ndim else 1
            s = builtins.int(s) % n if n else 0
            if s and out.ndim:
                out = _cat(
                    [out[_slice_at(d, slice(n - s, None))], out[_slice_at(d, slice(0, n - s))]],
                    d,
                    "RollBackward0",
                )
        return out._op("copy", "RollBackward0") if out is self else out

    def _triangle(self, diagonal: int, lower: bool, op: str):
        if self.ndim < 2:
            raise RuntimeError(f"{op}: input tensor must have at least 2 dimensions")
        r, c = self.shape[-2], self.shape[-1]
        rows = self._wrap_const(np.arange(r, dtype=np.int64).reshape(r, 1))
        cols = self._wrap_const(np.arange(c, dtype=np.int64))
        k = builtins.int(diagonal)
        mask = (cols - rows <= k) if lower else (cols - rows >= k)
        zero = self._wrap_const(np.zeros((), self._npdtype))
        gname = "TrilBackward0" if lower else "TriuBackward0"
        return O._dispatch("where", gname, (mask, self, zero), {})

    def tril(self, diagonal=0):
        """The lower triangle of the last two dims (elements above ``diagonal`` are 0)."""
        return self._triangle(diagonal, True, "tril")

    def triu(self, diagonal=0):
        """The upper triangle of the last two dims (elements below ``diagonal`` are 0)."""
        return self._triangle(diagonal, False, "triu")

    def repeat(self, *sizes):
        """Tile the tensor ``sizes[i]`` times along dim i (new leading dims as needed)."""
        reps = _ints(sizes, "repeat")
        nd = self.ndim
        if len(reps) < nd:
            raise RuntimeError(
                "Number of dimensions of repeat dims can not be smaller than number of "
                "dimensions of tensor"
            )
        shape = (1,) * (len(reps) - nd) + tuple(self.shape)
        final = tuple(r * s for r, s in zip(reps, shape))
        for r in reps:
            if r < 0:
                raise RuntimeError(
                    f"Trying to create tensor with negative dimension {r}: {list(final)}"
                )
        inter = tuple(v for s in shape for v in (1, s))
        big = tuple(v for r, s in zip(reps, shape) for v in (r, s))
        y = self.reshape(inter).expand(big)._op("copy", "RepeatBackward0")
        return y.reshape(final, _gname="RepeatBackward0")

    def tile(self, *dims):
        """``repeat`` with ``dims`` padded with leading 1s to the tensor's rank."""
        reps = _ints(dims, "tile")
        reps = (1,) * (self.ndim - len(reps)) + reps
        return self.repeat(reps)

    def repeat_interleave(self, repeats=None, dim=None, *, output_size=None):
        """Repeat each element ``repeats`` times along ``dim`` (the flattened tensor
        without dim); a tensor ``repeats`` gives each element its own count (its values
        must be known: not a traced value)."""
        if repeats is None:  # torch.repeat_interleave(repeats): indices repeated
            vals = np.asarray(self.tolist(), dtype=np.int64).reshape(-1)
            if (vals < 0).any():
                raise RuntimeError("repeats can not be negative")
            idx = np.repeat(np.arange(len(vals), dtype=np.int64), vals)
            return self._wrap_const(idx).to(self._npdtype)
        x = self.flatten() if dim is None else self
        d = 0 if dim is None else _wrap(dim, x.ndim)
        if x.ndim == 0:
            x = x.reshape(1)
        n = x.shape[d]
        if _is_tensor(repeats):
            if repeats.ndim > 1:
                raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
            try:
                vals = np.asarray(repeats.tolist(), dtype=np.int64).reshape(-1)
            except Exception as e:
                raise NotImplementedError(
                    "repeat_interleave: a traced tensor of repeats gives a data-dependent "
                    "shape, which a static graph cannot express; pass the repeats as an int, "
                    "a list or an eager tensor known before tracing"
                ) from e
            if repeats.ndim == 0 or vals.size == 1:
                repeats = builtins.int(vals[0])
            else:
                if vals.size != n:
                    raise RuntimeError(
                        "repeats must have the same size as input along dim, but got "
                        f"repeats.size(0) = {vals.size} and input.size({d}) = {n}"
                    )
                if (vals < 0).any():
                    raise RuntimeError("repeats can not be negative")
                idx = x._wrap_const(np.repeat(np.arange(n, dtype=np.int64), vals))
                return x[_slice_at(d, idx)]
        r = builtins.int(repeats)
        if r < 0:
            raise RuntimeError("Repeats must be non-negative")
        shp = tuple(x.shape)
        y = x.unsqueeze(d + 1).expand(shp[: d + 1] + (r,) + shp[d + 1 :])
        y = y._op("copy", "RepeatInterleaveBackward0")
        return y.reshape(shp[:d] + (n * r,) + shp[d + 1 :])

    def unflatten(self, dim, sizes):
        """Split dim ``dim`` into the dims ``sizes`` (one may be -1)."""
        sizes = _ints((sizes,), "unflatten")
        if self.ndim == 0:
            raise RuntimeError(
                f"unflatten: Dimension specified as {dim} but tensor has no dimensions"
            )
        d = _wrap(dim, self.ndim)
        if not sizes:
            raise RuntimeError("unflatten: sizes must be non-empty")
        n = self.shape[d]
        if sizes.count(-1) > 1:
            raise RuntimeError("unflatten: only one dimension can be inferred")
        known = math.prod(s for s in sizes if s != -1)
        if -1 in sizes:
            if known == 0 or n % known:
                raise RuntimeError(
                    f"unflatten: Provided sizes {list(sizes)} don't multiply up to the size "
                    f"of dim {dim} ({n}) in the input tensor"
                )
            sizes = tuple(n // known if s == -1 else s for s in sizes)
        elif known != n:
            raise RuntimeError(
                f"unflatten: Provided sizes {list(sizes)} don't multiply up to the size of "
                f"dim {dim} ({n}) in the input tensor"
            )
        shp = tuple(self.shape)
        return self.reshape(shp[:d] + sizes + shp[d + 1 :])


#: module-level functions that are not methods, by name
FUNCTIONS: dict = {
    "cat": cat,
    "concat": cat,
    "concatenate": cat,
    "stack": stack,
    "hstack": hstack,
    "vstack": vstack,
    "dstack": dstack,
    "column_stack": column_stack,
    "atleast_1d": atleast_1d,
    "atleast_2d": atleast_2d,
    "atleast_3d": atleast_3d,
}
#: methods that are also module-level functions (``eager.name(x, ...)``)
METHOD_FUNCTIONS: list = [
    "split",
    "split_with_sizes",
    "chunk",
    "tensor_split",
    "narrow",
    "select",
    "movedim",
    "moveaxis",
    "swapdims",
    "swapaxes",
    "flip",
    "fliplr",
    "flipud",
    "roll",
    "tril",
    "triu",
    "tile",
    "repeat_interleave",
    "unflatten",
]
