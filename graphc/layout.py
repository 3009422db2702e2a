"""Element layouts of views: numpy's own rules, asked of a probe that holds no data.

Whether ``x.reshape(...)`` shares memory with ``x`` (and so whether a later
in-place write through one is seen by the other) depends on ``x``'s strides,
exactly as in numpy and PyTorch.  The tracer follows the strides of every
traced view relative to its storage with these helpers, so the compiled graph
makes the same view-or-copy decision eager makes.  Strides and offsets are in
elements.  numpy computes them on a zero-size-element stand-in: a 1-byte
buffer viewed with the element strides as byte strides (nothing is read).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

Layout = tuple  # (offset, strides), both in elements


def c_strides(shape: tuple) -> tuple:
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(st))


def c_layout(shape: tuple) -> Layout:
    return 0, c_strides(shape)


def _probe(shape: tuple, strides: tuple) -> np.ndarray:
    base = np.zeros(1, dtype=np.uint8)
    if not shape:
        return base.reshape(())
    return np.lib.stride_tricks.as_strided(base, shape=shape, strides=strides, writeable=False)


def index_layout(shape: tuple, lay: Layout, key: tuple) -> Layout:
    """The layout of ``x[key]`` (basic indexing only: ints, slices, None, Ellipsis)."""
    off, strides = lay
    base = np.zeros(1, dtype=np.uint8)
    probe = _probe(shape, strides)
    # a trailing new axis keeps the result an array even when every dim is indexed
    tail = (None,) if any(k is Ellipsis for k in key) else (Ellipsis, None)
    sub = probe[key + tail]
    moved = sub.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    if not shape:
        moved = 0
    return off + moved, tuple(sub.strides[:-1])


def reshape_layout(shape: tuple, lay: Layout, new_shape: tuple) -> Optional[Layout]:
    """The layout of ``x.reshape(new_shape)`` if numpy returns a view, None if it copies."""
    off, strides = lay
    probe = _probe(shape, strides)
    try:
        view = np.reshape(probe, new_shape, copy=False)
    except ValueError:  # "Unable to avoid creating a copy while reshaping"
        return None
    except TypeError:  # pragma: no cover - numpy < 2.1 has no copy=
        view = probe.view()
        try:
            view.shape = new_shape
        except AttributeError:
            return None
    return off, tuple(view.strides)


def transpose_layout(lay: Layout, perm: tuple) -> Layout:
    off, strides = lay
    return off, tuple(strides[p] for p in perm)


def expand_layout(shape: tuple, lay: Layout, new_shape: tuple) -> Layout:
    off, strides = lay
    lead = len(new_shape) - len(shape)
    out = [0] * lead
    for d, n, st in zip(shape, new_shape[lead:], strides):
        out.append(0 if d == 1 and n != 1 else st)
    return off, tuple(out)


def makes_c_output(shape: tuple, lay: Optional[Layout]) -> bool:
    """Does numpy write an op's result in C order for an operand with this layout?  It
    follows the operands' memory order, which is C when the strides of the dims that
    matter (size > 1, not broadcast) decrease in magnitude from first to last."""
    if lay is None:
        return False
    st = [abs(s) for s, d in zip(lay[1], shape) if d > 1 and s != 0]
    return all(a > b for a, b in zip(st, st[1:]))
