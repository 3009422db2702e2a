"""Op records: joining and splitting (cat/concat, stack...).

Only ``cat`` is a primitive: it needs a kernel (each operand copied into its slice of
the result).  Everything else of the topic (stack, split, chunk, narrow, flip, roll,
tril, repeat, pad...) is a composite of public ops in eager/methods/shape.py.

See docs/adding-an-op.md for what a record holds and the tests that check it.
"""

from __future__ import annotations

import functools

import numpy as np

import eager._dtype as D
from .registry import Meta, check_size, defop
import eager.ops.onnx_rules as R

#: the most operands one ``cat`` node takes (one VJP rule per operand position);
#: eager.cat nests cats for longer lists
CAT_MAX_OPERANDS = 1024


def _rng():
    return np.random.default_rng(1515)


def cat_skipped(shape: tuple) -> bool:
    """PyTorch's legacy rule: a 1-D empty tensor (shape (0,)) is skipped by cat, whatever
    the other operands' shapes (it still takes part in dtype promotion)."""
    return tuple(shape) == (0,)


def _eff(shape: tuple) -> tuple:
    # the record is total: a 0-d operand counts as one element (eager.cat refuses 0-d
    # operands, as PyTorch does)
    return tuple(shape) if len(shape) else (1,)


def _cat_shape(*xs: Meta, dim) -> Meta:
    if not xs:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    dt = xs[0].dtype
    for x in xs[1:]:
        dt = D.promote(dt, x.dtype)
    ref = next((k for k, x in enumerate(xs) if not cat_skipped(x.shape)), None)
    if ref is None:
        return Meta((0,), dt)
    base = _eff(xs[ref].shape)
    nd = len(base)
    if not 0 <= dim < nd:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {dim})"
        )
    total = 0
    for k, x in enumerate(xs):
        if cat_skipped(x.shape):
            continue
        s = _eff(x.shape)
        if len(s) != nd:
            raise RuntimeError(
                f"Tensors must have same number of dimensions: got {nd} and {len(s)}"
            )
        for i in range(nd):
            if i != dim and s[i] != base[i]:
                raise RuntimeError(
                    f"Sizes of tensors must match except in dimension {dim}. Expected size "
                    f"{base[i]} but got size {s[i]} for tensor number {k} in the list."
                )
        total += s[dim]
    shape = base[:dim] + (total,) + base[dim + 1 :]
    check_size(shape, dt, "cat")
    return Meta(shape, dt)


def _cat(*xs, dim):
    meta = _cat_shape(*[Meta(x.shape, x.dtype) for x in xs], dim=dim)
    parts = [
        np.asarray(x, dtype=meta.dtype).reshape(_eff(x.shape))
        for x in xs
        if not cat_skipped(x.shape)
    ]
    if not parts:
        return np.zeros((0,), meta.dtype)
    return np.concatenate(parts, axis=dim)


def _cat_vjp(i: int, g, out, *xs, dim):
    """Operand ``i``'s gradient: its slice of ``g`` along ``dim``."""
    x = xs[i]
    if cat_skipped(x.shape):
        return g._wrap_const(np.zeros((0,), g._npdtype))
    off = sum(_eff(y.shape)[dim] for y in xs[:i] if not cat_skipped(y.shape))
    n = _eff(x.shape)[dim]
    return g[(slice(None),) * dim + (slice(off, off + n),)]


def _cat_samples():
    r = _rng()
    u = functools.partial(r.uniform, -1, 1)
    return [
        ([u(size=(2, 3)), u(size=(1, 3)), u(size=(4, 3))], {"dim": 0}),
        ([u(size=(2, 3)), u(size=(2, 1))], {"dim": 1}),
        ([u(size=(2, 0, 3)), u(size=(2, 2, 3)), u(size=(2, 1, 3))], {"dim": 1}),
        ([u(size=(3,)), u(size=(0,)), u(size=(2,))], {"dim": 0}),
        ([u(size=(0,)), u(size=(2, 2)), u(size=(2, 2))], {"dim": 1}),  # legacy skip
        ([u(size=()), u(size=()), u(size=(2,))], {"dim": 0}),  # 0-d: one element
        ([u(size=(2, 3))], {"dim": 1}),
        ([u(size=(2, 2)), np.array([[1, 2]], dtype=np.int64)], {"dim": 0}),  # promotion
    ]


defop(
    "cat",
    onnx=R.cat,
    forward=_cat,
    shape=_cat_shape,
    arity=None,
    attrs={"dim": "int"},
    saves=(),
    family="index",
    vjp=tuple(functools.partial(_cat_vjp, i) for i in range(CAT_MAX_OPERANDS)),
    samples=_cat_samples,
    doc="concatenation along dim (1-D empty operands skipped, dtypes promoted)",
)
