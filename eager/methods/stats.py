"""Tensor methods: reductions and statistics (softmax, logsumexp, var, std, norm, prod, cumsum...).

A mixin of :class:`eager.surface.TensorOps` (see eager/methods/__init__.py).

The softmax family, the variance and the norms are composites of public ops (amax, exp,
sum, log, where, sqrt), so they run eagerly, trace, fuse and differentiate to any order.
``sum``/``mean``/``amax``/``amin`` live here (moved from eager/surface.py) because they
take PyTorch's numpy-style aliases ``axis=`` and ``keepdims=``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

import eager._dtype as D
from eager._operands import _axes, where

_INF = float("inf")

# PyTorch's names of the scalar types, for its "not implemented for 'Long'" errors
_TORCH_NAMES = {
    "int64": "Long",
    "int32": "Int",
    "int16": "Short",
    "int8": "Char",
    "uint8": "Byte",
    "bool": "Bool",
    "float16": "Half",
    "float32": "Float",
    "float64": "Double",
}


def _torch_name(npd: np.dtype) -> str:
    return _TORCH_NAMES.get(np.dtype(npd).name, np.dtype(npd).name)


def _alias(name: str, a, alias_name: str, b, default):
    """PyTorch's python-arg-parser aliases: ``dim``/``axis``, ``keepdim``/``keepdims``."""
    if b is not None:
        if a is not None and a is not default:
            raise TypeError(f"got multiple values for argument '{name}' (alias '{alias_name}')")
        return b
    return default if a is None else a


def _count(shape: tuple, axes: tuple) -> int:
    n = 1
    for a in axes if shape else ():
        n *= shape[a]
    return n


def _reduced(x, axes: tuple, keepdim: bool):
    """``x`` reduced with keepdim=True, reshaped to the keepdim=False shape if asked."""
    if keepdim or not x.ndim:
        return x
    return x.reshape(tuple(d for i, d in enumerate(x.shape) if i not in axes))


def _safe_max(x, axes: tuple):
    """The detached amax over ``axes`` (keepdim) with infinities replaced by 0: the shift
    of the stable exp-sums.  Its gradient contributes nothing (the shift cancels), so it
    is detached and the composite's gradient is exact.  None when a reduced dim is empty."""
    if x.ndim and any(x.shape[a] == 0 for a in axes):
        return None
    m = x.amax(axes, keepdim=True).detach()
    return where(m.abs() == _INF, 0.0, m)


def _softmax_input(x, dim, dtype, name: str):
    if dtype is not None:
        x = x.to(dtype)
    if x._npdtype.kind != "f":
        raise NotImplementedError(
            f"\"{name}_lastdim_kernel_impl\" not implemented for '{_torch_name(x._npdtype)}'"
        )
    if dim is None:
        raise TypeError(f"{name}() missing 1 required positional argument: 'dim'")
    if not isinstance(dim, (int, np.integer)):
        raise TypeError(f"{name}(): argument 'dim' must be int, not {type(dim).__name__}")
    return x, _axes(int(dim), x.ndim, name)


def _all_if_empty(dim):
    """PyTorch reduces over every dim when ``dim`` is an empty tuple or list (numpy's
    axis=() reduces over none; eager followed numpy and returned the input unreduced)."""
    return None if isinstance(dim, (tuple, list)) and len(dim) == 0 else dim


def _check_float(x, msg: str) -> None:
    if x._npdtype.kind != "f":
        raise RuntimeError(msg.format(_torch_name(x._npdtype)))


def _var(x, dim, unbiased, keepdim, correction, name: str):
    """(variance, mean with keepdim=True, axes) with PyTorch's correction rules."""
    if isinstance(dim, bool):  # var(True): the legacy positional ``unbiased``
        dim, unbiased = None, dim
    _check_float(x, "std and var only support floating point and complex dtypes")
    if unbiased is not None and correction is not None:
        raise RuntimeError(f"{name}(): can only set one of 'unbiased' or 'correction'")
    c = 1.0 if correction is None and unbiased is None else float(correction or 0)
    if unbiased is not None:
        c = 1.0 if unbiased else 0.0
    axes = _axes(_all_if_empty(dim), x.ndim, name)
    n = _count(tuple(x.shape), axes)
    mu = x.mean(axes, keepdim=True)
    d = x - mu
    dof = max(n - c, 0.0)
    if dof <= 0:
        warnings.warn(
            f"{name}(): degrees of freedom is <= 0. Correction should be strictly less than "
            "the reduction factor (input numel divided by output numel).",
            UserWarning,
            stacklevel=4,
        )
    s = (d * d).sum(axes, keepdim=bool(keepdim))
    return s / dof, mu, axes  # dof 0: 0/0 is NaN, s/0 inf, as PyTorch


def _safe_root(s, p: float):
    """``s ** (1/p)`` whose gradient is 0 where ``s`` is 0 (PyTorch's norm backward masks the
    zero norm) instead of inf * 0."""
    z = s == 0
    safe = where(z, 1.0, s)
    r = safe.sqrt() if p == 2 else safe ** (1.0 / p)
    return where(z, 0.0, r)


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """``linalg.vector_norm``: the ``ord``-norm of ``x`` over ``dim`` (every dim by default)."""
    if dtype is not None:
        x = x.to(dtype)
    _check_float(
        x, "linalg.vector_norm: Expected a floating point or complex tensor as input. Got {}"
    )
    if isinstance(ord, str):
        raise RuntimeError(f"linalg.vector_norm: ord must be a number, got '{ord}'")
    p = float(ord)
    axes = _axes(_all_if_empty(dim), x.ndim, "linalg.vector_norm")
    keepdim = bool(keepdim)
    if p < 0 and p != -_INF and x.ndim and _count(tuple(x.shape), axes) == 0:
        # |x|^p summed over nothing is 0 and 0 ** (1/p) is inf: PyTorch refuses it
        if _all_if_empty(dim) is None:
            raise RuntimeError(
                f"linalg.vector_norm cannot compute the {ord} norm on an empty tensor because "
                "the operation does not have an identity"
            )
        d = next(a for a in axes if x.shape[a] == 0)
        raise RuntimeError(
            f"linalg.vector_norm cannot compute the {ord} norm on the dimension {d}because this "
            "dimension is empty and the operation does not have an identity"
        )
    if p == _INF or p == -_INF:
        if x.numel() == 0 and _count(tuple(x.shape), axes) == 0:
            raise RuntimeError(
                f"linalg.vector_norm cannot compute the {ord} norm on an empty tensor because "
                "the operation does not have an identity"
            )
        a = x.abs()
        return a.amax(axes, keepdim) if p > 0 else a.amin(axes, keepdim)
    if p == 0:  # the count of nonzeros; differentiable with a zero gradient, as PyTorch's
        return where(x != 0, 1.0, x * 0.0).sum(axes, keepdim)
    if p == 1:
        return x.abs().sum(axes, keepdim)
    if p == 2:
        return _safe_root((x * x).sum(axes, keepdim), 2)
    a = x.abs()
    if p > 0:  # |x|^p with a zero gradient at 0 (no inf * 0), as PyTorch's backward masks
        z = a == 0
        ap = where(z, 0.0, where(z, 1.0, a) ** p)
        return _safe_root(ap.sum(axes, keepdim), p)
    return (a**p).sum(axes, keepdim) ** (1.0 / p)


class StatsMethods:
    __slots__ = ()

    # --- reductions with PyTorch's numpy-style aliases (moved from eager/surface.py) -----
    def sum(self, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
        """Sum over ``dim`` (all dims by default); bool/int inputs sum in int64."""
        dim = _all_if_empty(_alias("dim", dim, "axis", axis, None))
        keepdim = _alias("keepdim", keepdim, "keepdims", keepdims, False)
        x = self if dtype is None else self.to(dtype)
        if x._npdtype.kind in "biu":
            x = x.to(D.int64)
        gname = "SumBackward0" if dim is None else "SumBackward1"
        out = x._op("sum", gname, axis=_axes(dim, self.ndim, "sum"), keepdim=bool(keepdim))
        # an explicit integer dtype is the result's (int64 arithmetic wraps to the same value)
        return out if dtype is None or out.dtype == dtype else out.to(dtype)

    def mean(self, dim=None, keepdim=False, *, dtype=None, axis=None, keepdims=None):
        """Mean over ``dim`` (all dims by default); floating point only."""
        dim = _all_if_empty(_alias("dim", dim, "axis", axis, None))
        keepdim = _alias("keepdim", keepdim, "keepdims", keepdims, False)
        x = self if dtype is None else self.to(dtype)
        if x._npdtype.kind != "f":
            raise RuntimeError(
                f"mean(): could not infer output dtype. Input dtype must be either "
                f"a floating point or complex dtype. Got: {D.from_np(x._npdtype).name}"
            )
        gname = "MeanBackward0" if dim is None else "MeanBackward1"
        return x._op("mean", gname, axis=_axes(dim, self.ndim, "mean"), keepdim=bool(keepdim))

    def amax(self, dim=None, keepdim=False, *, axis=None, keepdims=None):
        """Largest value over ``dim``; ties share the gradient evenly."""
        dim = _all_if_empty(_alias("dim", dim, "axis", axis, None))
        keepdim = _alias("keepdim", keepdim, "keepdims", keepdims, False)
        return self._op(
            "max", "AmaxBackward0", axis=_axes(dim, self.ndim, "amax"), keepdim=bool(keepdim)
        )

    def amin(self, dim=None, keepdim=False, *, axis=None, keepdims=None):
        """Smallest value over ``dim``; ties share the gradient evenly."""
        dim = _all_if_empty(_alias("dim", dim, "axis", axis, None))
        keepdim = _alias("keepdim", keepdim, "keepdims", keepdims, False)
        return self._op(
            "min", "AminBackward0", axis=_axes(dim, self.ndim, "amin"), keepdim=bool(keepdim)
        )

    # --- the softmax family ----------------------------------------------------------
    def softmax(self, dim=None, dtype=None):
        """``exp(x) / exp(x).sum(dim)``, shifted by the (detached) max for stability."""
        x, axes = _softmax_input(self, dim, dtype, "softmax")
        fused = FUSED.get("softmax")
        out = fused(x, axes) if fused is not None else None
        return out if out is not None else composite_softmax(x, axes)

    def log_softmax(self, dim=None, dtype=None):
        """``x - logsumexp(x, dim)``, shifted by the (detached) max for stability."""
        x, axes = _softmax_input(self, dim, dtype, "log_softmax")
        fused = FUSED.get("log_softmax")
        out = fused(x, axes) if fused is not None else None
        return out if out is not None else composite_log_softmax(x, axes)

    def logsumexp(self, dim=None, keepdim=False):
        """``log(exp(x).sum(dim))`` without overflow; all -inf gives -inf, a +inf gives +inf."""
        x = self if self._npdtype.kind == "f" else self.to(D.float32)
        if dim is None:
            dim = tuple(range(x.ndim))
        elif isinstance(dim, (tuple, list)) and not dim and x.ndim:
            # PyTorch raises (a shape error) rather than reduce over nothing or everything
            raise RuntimeError("logsumexp(): dim must name at least one dimension, got ()")
        axes = _axes(dim, x.ndim, "logsumexp")
        m = _safe_max(x, axes)
        if m is None:
            out = x.exp().sum(axes, keepdim=True).log()
        else:
            out = (x - m).exp().sum(axes, keepdim=True).log() + m
        return _reduced(out, axes, bool(keepdim))

    # --- moments --------------------------------------------------------------------
    def var(self, dim=None, unbiased=None, keepdim=False, *, correction=None, axis=None,
            keepdims=None):  # fmt: skip
        """Variance over ``dim`` with Bessel's ``correction`` (1 by default; ``unbiased``)."""
        dim = _alias("dim", dim, "axis", axis, None)
        keepdim = _alias("keepdim", keepdim, "keepdims", keepdims, False)
        return _var(self, dim, unbiased, keepdim, correction, "var")[0]

    def std(self, dim=None, unbiased=None, keepdim=False, *, correction=None, axis=None,
            keepdims=None):  # fmt: skip
        """Standard deviation: the square root of :meth:`var`."""
        dim = _alias("dim", dim, "axis", axis, None)
        keepdim = _alias("keepdim", keepdim, "keepdims", keepdims, False)
        return _var(self, dim, unbiased, keepdim, correction, "std")[0].sqrt()

    # --- norms ----------------------------------------------------------------------
    def norm(self, p="fro", dim=None, keepdim=False, dtype=None):
        """``torch.norm``: 'fro' (the 2-norm of the elements) or a number (vector norm)."""
        if p is None:
            p = "fro"
        if isinstance(p, str):
            if p == "nuc":
                raise NotImplementedError("norm(p='nuc'): the nuclear norm is not supported")
            if p != "fro":
                raise RuntimeError(
                    f"norm(): unsupported p={p!r}; expected 'fro', 'nuc' or a number"
                )
            if dim is not None and not isinstance(dim, (int, np.integer)) and len(dim) > 2:
                raise RuntimeError(f"frobenius norm expects at most two dims, got {tuple(dim)}")
            p = 2
        return vector_norm(self, p, dim, keepdim, dtype=dtype)

    # --- products and scans -----------------------------------------------------------
    def prod(self, dim=None, keepdim=False, dtype=None, *, axis=None, keepdims=None):
        """Product over one ``dim`` (all elements by default); bool/int inputs give int64."""
        dim = _alias("dim", dim, "axis", axis, None)
        keepdim = _alias("keepdim", keepdim, "keepdims", keepdims, False)
        x = self if dtype is None else self.to(dtype)
        if x._npdtype.kind in "biu":
            x = x.to(D.int64)
        if dim is None:
            out = x._op("prod", "ProdBackward0", axis=_axes(None, x.ndim, "prod"), keepdim=False)
        else:
            if not isinstance(dim, (int, np.integer)):
                raise TypeError(f"prod(): argument 'dim' must be int, not {type(dim).__name__}")
            axes = _axes(int(dim), x.ndim, "prod")
            out = x._op("prod", "ProdBackward1", axis=axes, keepdim=bool(keepdim))
        # an explicit integer dtype is the result's (int64 arithmetic wraps to the same value)
        return out if dtype is None or out.dtype == dtype else out.to(dtype)

    def _scan(self, op: str, gname: str, dim, dtype, **attrs):
        if dim is None:
            raise TypeError(f"{op}() missing 1 required positional argument: 'dim'")
        x: Any = self if dtype is None else self.to(dtype)  # type: ignore[attr-defined]
        if x._npdtype.kind in "biu":
            x = x.to(D.int64)
        out = x._op(op, gname, dim=_axes(int(dim), x.ndim, op)[0], **attrs)
        # an explicit integer dtype is the result's (int64 arithmetic wraps to the same value)
        return out if dtype is None or out.dtype == dtype else out.to(dtype)

    def cumsum(self, dim=None, *, dtype=None):
        """Running sum along ``dim``; bool/int inputs give int64."""
        return self._scan("cumsum", "CumsumBackward0", dim, dtype, reverse=False)

    def cumprod(self, dim=None, *, dtype=None):
        """Running product along ``dim`` (gradient exact with zeros)."""
        return self._scan("cumprod", "CumprodBackward0", dim, dtype)

    def count_nonzero(self, dim=None):
        """Number of nonzero elements over ``dim`` (int64)."""
        return (self != 0).sum(dim)


#: fast paths of methods, installed by a higher layer (eager/nn/_fused.py installs
#: "softmax" and "log_softmax", ``f(x, axes)``, and "masked_fill", ``f(x, mask, fill)``
#: with ``fill`` the value as a 0-d array of x's dtype): each returns the result, or None
#: to run the composite definition
FUSED: dict = {}


def composite_softmax(x, axes: tuple):
    """softmax over ``axes`` as recorded tensor ops (what graphc traces and what eager's
    fused softmax falls back to and differentiates twice with)."""
    m = _safe_max_raw(x, axes)
    e = (x - m).exp() if m is not None else x.exp()
    return e / e.sum(axes, keepdim=True)


def composite_log_softmax(x, axes: tuple):
    """log_softmax over ``axes`` as recorded tensor ops (see :func:`composite_softmax`)."""
    m = _safe_max_raw(x, axes)
    s = x - m if m is not None else x
    return s - s.exp().sum(axes, keepdim=True).log()


def _safe_max_raw(x, axes: tuple):
    """The detached amax over ``axes`` (keepdim), infinities kept: softmax of a row holding
    +inf (or only -inf) is NaN, as PyTorch's.  None when a reduced dim is empty."""
    if x.ndim and any(x.shape[a] == 0 for a in axes):
        return None
    return x.amax(axes, keepdim=True).detach()


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(var, mean)`` of ``input`` over ``dim``."""
    v, mu, axes = _var(input, dim, unbiased, keepdim, correction, "var_mean")
    return v, _reduced(mu, axes, bool(keepdim))


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(std, mean)`` of ``input`` over ``dim``."""
    v, mu, axes = _var(input, dim, unbiased, keepdim, correction, "std_mean")
    return v.sqrt(), _reduced(mu, axes, bool(keepdim))


#: module-level functions that are not methods, by name
FUNCTIONS: dict = {"var_mean": var_mean, "std_mean": std_mean}
#: methods that are also module-level functions (``eager.name(x, ...)``)
METHOD_FUNCTIONS: list = [
    "softmax",
    "log_softmax",
    "logsumexp",
    "var",
    "std",
    "norm",
    "count_nonzero",
    "prod",
    "cumsum",
    "cumprod",
]
