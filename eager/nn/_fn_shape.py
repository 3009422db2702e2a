"""nn.functional: padding and other shape helpers (re-exported by eager/nn/functional.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

import eager._operands as O
import eager.methods.shape as MS

__all__: list = ["pad"]

_MODES = ("constant", "reflect", "replicate", "circular")


def _check_non_constant(x: Any, n: int) -> None:
    """PyTorch's shape rules of reflect/replicate/circular padding of the last ``n`` dims."""
    if x.ndim not in (n + 1, n + 2):
        raise NotImplementedError(
            f"Padding size {2 * n} is not supported for {x.ndim}D input tensor.\n"
            "Supported combinations for non-constant padding:\n"
            "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
            "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
            "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)"
        )


def _check_sizes(x: Any, n: int) -> None:
    batch = x.ndim == n + 2
    if any(s == 0 for s in tuple(x.shape)[1 if batch else 0 :]):
        raise RuntimeError(
            f"Expected {n + 1}D or {n + 2}D (batch mode) tensor with possibly 0 batch size and "
            f"other non-zero dimensions for input, but got: {list(x.shape)}"
        )


def pad(input, pad, mode: str = "constant", value=None):
    """Pad (or, with negative amounts, crop) the last len(pad) // 2 dims: ``pad`` is
    (left of the last dim, right of the last dim, left of the one before, ...)."""
    x = input
    pads = tuple(int(p) for p in pad)
    if len(pads) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    n = len(pads) // 2
    if n > x.ndim:
        raise RuntimeError(
            "Padding length should be less than or equal to two times the input dimension "
            f"but got padding length {len(pads)} and input of dimension {x.ndim}"
        )
    if mode not in _MODES:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if mode != "constant" and value is not None:
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    nd = x.ndim
    pairs = [(nd - 1 - i, pads[2 * i], pads[2 * i + 1]) for i in range(n)]  # (dim, lo, hi)
    if mode == "constant":
        return _constant(x, pairs, 0 if value is None else value)
    _check_non_constant(x, n)
    if mode != "circular":
        _check_sizes(x, n)
    outs = [x.shape[d] + lo + hi for d, lo, hi in pairs]
    if mode != "circular" and max(outs) < 1:  # PyTorch: an empty result is an error here
        names = "WHD"[: len(pairs)][::-1]
        sizes = ", ".join(f"{c}: {x.shape[d]}" for c, (d, _, _) in zip(names, pairs[::-1]))
        got = " ".join(f"{c}: {o}" for c, o in zip(names, outs[::-1]))
        raise RuntimeError(f"input ({sizes}) is too small. Calculated output {got}")
    for d, lo, hi in pairs:
        size = x.shape[d]
        if mode == "reflect" and (lo >= size or hi >= size):
            raise RuntimeError(
                "Argument #4: Padding size should be less than the corresponding input "
                f"dimension, but got: padding ({lo}, {hi}) at dimension {d} of input "
                f"{list(x.shape)}"
            )
        if mode == "circular" and (lo > size or hi > size):
            raise RuntimeError("Padding value causes wrapping around more than once.")
    gname = {
        "reflect": f"ReflectionPad{n}DBackward0",
        "replicate": f"ReplicationPad{n}DBackward0",
        "circular": "CatBackward0",
    }[mode]
    out = x
    for d, lo, hi in pairs:
        out = _crop(out, d, lo, hi)
        size = out.shape[d]
        lo, hi = max(lo, 0), max(hi, 0)
        if not (lo or hi):
            continue
        if mode == "reflect":
            left, right = out.narrow(d, 1, lo).flip(d), out.narrow(d, size - 1 - hi, hi).flip(d)
        elif mode == "replicate":
            shape = list(out.shape)
            edge = [out.narrow(d, 0, 1), out.narrow(d, size - 1, 1)]
            left, right = (
                e.expand(shape[:d] + [k] + shape[d + 1 :]) for e, k in zip(edge, (lo, hi))
            )
        else:
            left, right = out.narrow(d, size - lo, lo), out.narrow(d, 0, hi)
        out = MS._cat([left, out, right], d, gname)
    if out is x:
        return x._op("copy", gname)
    return out


def _crop(x: Any, d: int, lo: int, hi: int) -> Any:
    size = x.shape[d]
    start, stop = max(-lo, 0), size - max(-hi, 0)
    if start or stop != size:
        return x.narrow(d, start, stop - start)
    return x


def _constant(x: Any, pairs: list, value: Any) -> Any:
    for d, lo, hi in pairs:
        x = _crop(x, d, lo, hi)
    shape = list(x.shape)
    index = [("s", None, None, None)] * x.ndim
    for d, lo, hi in pairs:
        lo, hi = max(lo, 0), max(hi, 0)
        shape[d] += lo + hi
        index[d] = ("s", lo, lo + x.shape[d], None)
    dt = x._npdtype
    fill = x._wrap_const(np.asarray(np.asarray(value).astype(dt), dtype=dt)).expand(tuple(shape))
    return O._dispatch("setitem", "ConstantPadNdBackward0", (fill, x), {"index": tuple(index)})
