"""Arguments that share memory, found at call time.

A compiled function that writes an argument in place reads its other arguments from
their own graph inputs; when two arguments are views of the same memory, eager (and
PyTorch) would see the write through the other one too.  Before such a call the
arguments' byte ranges are compared (only for calls that write in place); overlapping
ones are described as strided views of one buffer, the description becomes part of the
cache key, and the function is traced for exactly that sharing (``tracer.trace_flat``'s
``aliases``), so the compiled result is eager's.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from .errors import SignatureError


def _bounds(a: np.ndarray) -> tuple:
    """[lo, hi) byte addresses of the elements of ``a`` (numpy's byte_bounds)."""
    lo = hi = a.__array_interface__["data"][0]
    for n, st in zip(a.shape, a.strides):
        if st < 0:
            lo += st * (n - 1)
        else:
            hi += st * (n - 1)
    return lo, hi + a.itemsize


def alias_groups(
    arrays: Sequence[np.ndarray], written: Sequence[int], names: Sequence[str]
) -> Optional[tuple]:
    """The groups of arguments whose memory overlaps a written argument's, as
    ``(n, dtype, ((index, offset, strides), ...))`` in elements of the smallest buffer
    holding them all; None when no written argument overlaps another.  Sharing the
    compiled code cannot reproduce exactly (different dtypes, misaligned views, an
    argument overlapping itself) raises ``SignatureError``."""
    bounds = [None if a.size == 0 else _bounds(a) for a in arrays]
    parent = list(range(len(arrays)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    found = False
    for w in written:
        bw = bounds[w]
        if bw is None:
            continue
        for j, bj in enumerate(bounds):
            if j != w and bj is not None and bw[0] < bj[1] and bj[0] < bw[1]:
                parent[find(j)] = find(w)
                found = True
    if not found:
        return None
    groups: dict = {}
    for i in range(len(arrays)):
        groups.setdefault(find(i), []).append(i)
    out = []
    for root in sorted(groups):
        members = sorted(groups[root])
        if len(members) < 2:
            continue
        first = arrays[members[0]]
        dtype = first.dtype
        isz = dtype.itemsize
        lo = min(bounds[i][0] for i in members)
        hi = max(bounds[i][1] for i in members)
        desc = []
        for i in members:
            a = arrays[i]
            who = f"arguments {names[members[0]]} and {names[i]}"
            if a.dtype != dtype:
                raise SignatureError(
                    f"{who} share memory with different dtypes ({dtype} and {a.dtype}) and one "
                    "of them is written in place; the compiled function cannot reproduce that. "
                    "Pass a copy of one of them."
                )
            off = a.__array_interface__["data"][0] - lo
            if off % isz or any(st % isz for st in a.strides):
                raise SignatureError(
                    f"{who} share memory at offsets that are not whole elements and one of "
                    "them is written in place; pass a copy of one of them."
                )
            strides = tuple(st // isz for st in a.strides)
            if not _no_self_overlap(a.shape, strides):
                raise SignatureError(
                    f"argument {names[i]} overlaps itself in memory (a broadcast or "
                    "as_strided view) and shares memory with an argument written in place; "
                    "pass a copy."
                )
            desc.append((i, off // isz, strides))
        out.append(((hi - lo) // isz, dtype.str, tuple(desc)))
    return tuple(out) or None


def _no_self_overlap(shape: tuple, strides: tuple) -> bool:
    """Does every element of a view with these element strides have its own address?
    (Sufficient test: each stride, smallest first, exceeds the reach of the dims before.)"""
    reach = 0
    for st, n in sorted((abs(st), n) for n, st in zip(shape, strides) if n > 1):
        if st <= reach:
            return False
        reach += st * (n - 1)
    return True
