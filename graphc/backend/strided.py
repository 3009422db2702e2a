"""Where a value lives: a :class:`View` of a buffer (offset, strides, shape), the stride
arithmetic of numpy's views and basic indexing, and :class:`Gather`, advanced indexing
decomposed for code generation.  The bottom of the backend's scheduling: the lowering
table (graphc.backend.lowering) and the scheduler (graphc.backend.schedule) both use it."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from eager.interop import decode_index


def cstrides(shape) -> tuple:
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(st))


def numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class View:
    """Elements of buffer ``buf`` at ``offset + sum(i_k * strides[k])`` for an index of
    ``shape``."""

    __slots__ = ("buf", "offset", "strides", "shape")

    def __init__(self, buf, offset: int, strides: tuple, shape: tuple) -> None:
        self.buf = buf
        self.offset = int(offset)
        self.strides = tuple(int(s) for s in strides)
        self.shape = tuple(int(s) for s in shape)

    def contiguous(self) -> bool:
        return all(
            st == c for st, c, d in zip(self.strides, cstrides(self.shape), self.shape) if d != 1
        )

    def broadcast_to(self, shape: tuple) -> tuple:
        """Strides of this view read over index space ``shape`` (numpy broadcasting)."""
        lead = len(shape) - len(self.shape)
        out = [0] * lead
        for d, st in zip(self.shape, self.strides):
            out.append(0 if d == 1 else st)
        return tuple(out)

    def __repr__(self) -> str:
        return f"View({self.buf}, off={self.offset}, strides={self.strides}, shape={self.shape})"


def index_view(v: View, spec: tuple) -> View:
    """Apply a basic index spec (ints, slices, None, Ellipsis) to a view, numpy's semantics.

    numpy itself computes the offset and strides, on a 1-byte dummy array that
    has the view's element strides (no data is touched).
    """
    base = np.zeros(1, dtype=np.uint8)
    probe = (
        np.lib.stride_tricks.as_strided(base, shape=v.shape, strides=v.strides, writeable=False)
        if v.shape
        else base.reshape(())
    )
    try:
        # a trailing new axis keeps the result an array even when every dim is indexed
        key = decode_index(spec, ())
        tail = (None,) if any(k is Ellipsis for k in key) else (Ellipsis, None)
        sub = probe[key + tail]
    except IndexError as e:
        raise IndexError(f"getitem: {e} (tensor shape {list(v.shape)})") from None
    off = sub.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return View(v.buf, v.offset + off, sub.strides[:-1], sub.shape[:-1])


class Gather:
    """Advanced (integer-array) indexing, decomposed for code generation.

    ``view`` is the source with every advanced item replaced by a full slice;
    ``adv`` lists (view dim, operand k or None, int value) per advanced item;
    the broadcast index shape ``bshape`` sits at output position ``bpos`` (numpy:
    where the advanced items are when they are adjacent, else first);
    ``basic_dims`` are the view dims that map to the other output dims.
    """

    def __init__(self, v: View, spec: tuple, idx_shapes: Sequence[tuple]) -> None:
        key = []
        adv = []
        positions = []
        consumed = sum(1 for it in spec if it[0] in ("s", "t", "i"))
        dim = 0
        for k, it in enumerate(spec):
            tag = it[0]
            if tag in ("t", "i"):
                adv.append((dim, it[1] if tag == "t" else None, it[1] if tag == "i" else 0))
                positions.append(k)
                key.append(("s", None, None, None))
                dim += 1
            else:
                key.append(it)
                if tag in ("s", "n"):
                    dim += 1
                elif tag == "e":
                    dim += len(v.shape) - consumed
        self.view = index_view(v, tuple(key))
        self.adv = adv
        shapes = [idx_shapes[k] if k is not None else () for _, k, _ in adv]
        self.bshape = tuple(np.broadcast_shapes(*shapes)) if shapes else ()
        adv_dims = {d for d, _, _ in adv}
        self.basic_dims = [d for d in range(len(self.view.shape)) if d not in adv_dims]
        adjacent = (
            positions == list(range(positions[0], positions[0] + len(positions)))
            if positions
            else True
        )
        first = adv[0][0] if adv else 0
        self.bpos = sum(1 for d in self.basic_dims if d < first) if adjacent else 0
        basic_shape = [self.view.shape[d] for d in self.basic_dims]
        self.out_shape = (
            tuple(basic_shape[: self.bpos]) + self.bshape + tuple(basic_shape[self.bpos :])
        )


def as_matrix(v: View, side: int) -> View:
    """A 1-D matmul operand as the matrix numpy uses: (1, K) on the left, (K, 1) on the right."""
    if len(v.shape) != 1:
        return v
    if side == 0:
        return View(v.buf, v.offset, (0,) + v.strides, (1,) + v.shape)
    return View(v.buf, v.offset, v.strides + (0,), v.shape + (1,))


def blas_layout(v: View) -> Optional[tuple]:
    """(transposed?, leading dimension) if BLAS can read this row-major matrix view, else None."""
    rows, cols = v.shape[-2], v.shape[-1]
    s0, s1 = v.strides[-2], v.strides[-1]
    if rows <= 1:
        s0 = max(cols, 1)
    if cols <= 1:
        s1 = 1
    if s1 == 1 and s0 >= max(cols, 1):
        return False, s0
    if s0 == 1 and s1 >= max(rows, 1):
        return True, s1
    return None
