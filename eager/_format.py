"""Tensor ``repr`` that matches PyTorch 2.x ``torch._tensor_str`` exactly.

The goal is byte-for-byte equality with ``repr(torch_tensor)`` for CPU
tensors (default print options: precision 4, threshold 1000, edgeitems 3,
linewidth 80), so that tutorials and doctests written against PyTorch read
the same with eager.  The only intended difference is the dtype prefix:
``eager.float64`` instead of ``torch.float64``.

PyTorch formats every element after converting it to a Python float
(``Tensor.item()`` / ``Tensor.tolist()``), i.e. the float32 value widened
exactly to double.  ``ndarray.tolist()`` performs the same exact widening,
so all decisions below are made on Python scalars from ``tolist()``; this
is also much faster than many small numpy calls for the tiny tensors that
are printed most often.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["format_dtype", "format_tensor"]

_PRECISION = 4
_THRESHOLD = 1000
_EDGEITEMS = 3
_LINEWIDTH = 80
_SCI_MODE: bool | None = None  # None: chosen from the values, as PyTorch
_PROFILES = {
    "default": (4, 1000, 3, 80),
    "short": (2, 1000, 2, 80),
    "full": (4, math.inf, 3, 80),
}


def set_printoptions(
    precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None
) -> None:
    """``torch.set_printoptions``: digits, summarization threshold, edge items, line width
    (a ``profile`` 'default', 'short' or 'full' first) and a forced ``sci_mode``."""
    global _PRECISION, _THRESHOLD, _EDGEITEMS, _LINEWIDTH, _SCI_MODE
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"Invalid profile {profile!r}; expected one of {sorted(_PROFILES)}")
        _PRECISION, _THRESHOLD, _EDGEITEMS, _LINEWIDTH = _PROFILES[profile]
    if precision is not None:
        _PRECISION = int(precision)
    if threshold is not None:
        _THRESHOLD = threshold
    if edgeitems is not None:
        _EDGEITEMS = int(edgeitems)
    if linewidth is not None:
        _LINEWIDTH = int(linewidth)
    _SCI_MODE = sci_mode


_PREFIX = "tensor("

# Dtypes PyTorch leaves out of a non-empty tensor's repr: the default float
# dtype, its complex counterpart, int64 and bool.  numpy's dtype names
# ("float16", "bool", "complex64", ...) are spelled exactly like torch's.
_IMPLICIT_DTYPES = frozenset({"float32", "complex64", "int64", "bool"})
_DEFAULT_DTYPE = "float32"


def format_dtype(np_dtype: Any) -> str:
    """Return the user-facing dtype name, e.g. ``"eager.float64"``."""
    return "eager." + np.dtype(np_dtype).name


class _Formatter:
    """Per-tensor element formatter; mirrors ``torch._tensor_str._Formatter``.

    The mode (integral floats, scientific notation) and the column width
    are fixed once from all printed values so every column lines up.
    """

    __slots__ = ("floating", "int_mode", "sci_mode", "width")

    def __init__(self, values: list[Any], floating: bool) -> None:
        self.floating = floating
        self.int_mode = True
        self.sci_mode = False
        width = 1
        if not floating:
            for value in values:
                width = max(width, len(str(value)))
            self.width = width
            return

        finite = [v for v in values if v != 0.0 and math.isfinite(v)]
        if finite:
            # Widening float16/float32 to double is exact, so abs/min/max
            # and the ratio below match torch's double-precision math.
            magnitudes = [abs(v) for v in finite]
            lo, hi = min(magnitudes), max(magnitudes)
            self.int_mode = all(v.is_integer() for v in finite)
            self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4
            if _SCI_MODE is not None:
                self.sci_mode = bool(_SCI_MODE)
            if self.sci_mode:
                spec = f".{_PRECISION}e"
                extra = 0
            elif self.int_mode:
                spec = ".0f"
                extra = 1  # room for the trailing "." of "3."
            else:
                spec = f".{_PRECISION}f"
                extra = 0
            for value in finite:
                width = max(width, len(format(value, spec)) + extra)
        self.width = width

    def format(self, value: Any) -> str:
        """Format one Python scalar, right-justified to the column width."""
        if not self.floating:
            text = str(value)
        elif self.sci_mode:
            text = format(value, f"{self.width}.{_PRECISION}e")
        elif self.int_mode:
            text = format(value, ".0f")
            if math.isfinite(value):
                text += "."
        else:
            text = format(value, f".{_PRECISION}f")
        return text.rjust(self.width)


class _Printer:
    """Renders nested lists the way ``_tensor_str_with_formatter`` does."""

    __slots__ = ("real", "imag", "cut")

    def __init__(self, real: _Formatter, imag: _Formatter | None, cut: tuple[bool, ...]) -> None:
        self.real = real
        self.imag = imag
        # cut[d]: axis d was reduced to its edge items and needs a "...".
        self.cut = cut

    def scalar(self, value: Any) -> str:
        """One element; complex values join real and imaginary parts."""
        if self.imag is None:
            return self.real.format(value)
        real = self.real.format(value.real)
        imag = (self.imag.format(value.imag) + "j").lstrip()
        if imag[0] in "+-":
            return real + imag
        return real + "+" + imag

    def block(self, rows: list[Any], depth: int, indent: int) -> str:
        """An n-d block; its rank-k sub-blocks are k - 1 blank lines apart."""
        ndim = len(self.cut)
        if depth == ndim - 1:
            return self.vector(rows, depth, indent)
        parts = [self.block(row, depth + 1, indent + 1) for row in rows]
        if self.cut[depth]:
            parts.insert(_EDGEITEMS, "...")
        sep = "," + "\n" * (ndim - depth - 1) + " " * (indent + 1)
        return "[" + sep.join(parts) + "]"

    def vector(self, row: list[Any], depth: int, indent: int) -> str:
        """The innermost axis, wrapped to fit ``_LINEWIDTH`` columns."""
        item_len = self.real.width + 2
        if self.imag is not None:
            item_len += self.imag.width + 1
        per_line = max(1, (_LINEWIDTH - indent) // item_len)
        items = [self.scalar(value) for value in row]
        if self.cut[depth]:
            items.insert(_EDGEITEMS, " ...")
        lines = [", ".join(items[i : i + per_line]) for i in range(0, len(items), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _edge_items(data: np.ndarray) -> tuple[np.ndarray, tuple[bool, ...]]:
    """Keep only the first/last edge items of every long axis.

    This is ``get_summarized_data``: the formatter then sees exactly the
    values that are printed, as in PyTorch.
    """
    cut = tuple(n > 2 * _EDGEITEMS for n in data.shape)
    index = []
    for n, is_cut in zip(data.shape, cut):
        if is_cut:
            index.append([*range(_EDGEITEMS), *range(n - _EDGEITEMS, n)])
        else:
            index.append(range(n))
    return data[np.ix_(*index)], cut


def _make_formatter(data: np.ndarray) -> _Formatter:
    return _Formatter(data.ravel().tolist(), data.dtype.kind == "f")


def _body(data: np.ndarray) -> str:
    """The bracketed contents that follow ``tensor(``."""
    cut = (False,) * data.ndim
    if data.size > _THRESHOLD:
        data, cut = _edge_items(data)
    if data.dtype.kind == "c":
        real, imag = _make_formatter(data.real), _make_formatter(data.imag)
    else:
        real, imag = _make_formatter(data), None
    printer = _Printer(real, imag, cut)
    if data.ndim == 0:
        return printer.scalar(data.item())
    return printer.block(data.tolist(), 0, len(_PREFIX))


def _add_suffixes(text: str, suffixes: list[str], indent: int) -> str:
    """Append ``, key=value`` items, wrapping them past the line width.

    The line-length bookkeeping (including its off-by-two when ``text`` has
    no newline) is copied from PyTorch so the wrap points agree.
    """
    parts = [text]
    last_line_len = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last_line_len + len(suffix) + 2 > _LINEWIDTH:
            parts.append(",\n" + " " * indent + suffix)
            last_line_len = indent + len(suffix)
        else:
            parts.append(", " + suffix)
            last_line_len += len(suffix) + 2
    parts.append(")")
    return "".join(parts)


def format_tensor(data: np.ndarray, suffixes: list[str]) -> str:
    """Return what PyTorch's ``repr`` prints for a CPU tensor of ``data``.

    ``suffixes`` are the extra items PyTorch appends after the values and
    dtype, e.g. ``["grad_fn=<AddBackward0>"]`` or ``["requires_grad=True"]``.
    The ``size=`` and ``dtype=`` items are added here, where PyTorch would.
    """
    data = np.asarray(data)
    extra: list[str] = []
    if data.size == 0:
        # Nothing to infer the dtype from, so only float32 stays implicit.
        if data.ndim != 1:
            extra.append(f"size={tuple(data.shape)}")
        if data.dtype.name != _DEFAULT_DTYPE:
            extra.append("dtype=" + format_dtype(data.dtype))
        body = "[]"
    else:
        if data.dtype.name not in _IMPLICIT_DTYPES:
            extra.append("dtype=" + format_dtype(data.dtype))
        body = _body(data)
    return _add_suffixes(_PREFIX + body, extra + list(suffixes), len(_PREFIX))
