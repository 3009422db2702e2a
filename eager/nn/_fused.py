"""Fused eager kernels of softmax, log_softmax, layer_norm, cross_entropy, embedding,
masked_fill with a number, conv2d (bias included) and tiling max_pool2d.

Each is one backward node (PyTorch's ``SoftmaxBackward0``, ``LogSoftmaxBackward0``,
``NativeLayerNormBackward0``, ``NllLossBackward0``, ``EmbeddingBackward0``,
``MaskedFillBackward0``, ``ConvolutionBackward0``, ``MaxPool2DWithIndicesBackward0``)
whose forward and gradient are a
few numpy passes over reused buffers, instead of the ~5-15 recorded ops of the
composite definitions in :mod:`eager.methods.stats` and :mod:`eager.nn._fn_stats` (what
graphc traces, and what these functions fall back to outside their fast path).  The
forward values are the composite's (the same numpy operations in the same order), except
over many short last-axis rows (2 to :data:`ROW_MAX_LEN` elements, at least
:data:`ROW_MIN_COUNT` rows: W8's attention scores, layer norms and logits), where softmax,
log_softmax, layer_norm and cross_entropy take their row maxima by halving (np.max's
values) and their row sums by einsum (:func:`_row_sum`: the same accuracy as numpy's
pairwise sum at these lengths, not its bits), so they agree with the composite to a few
ulps (tests/eager/test_fused_w8.py measures both against extended precision and PyTorch).

With ``create_graph`` (grad mode on while the backward runs) the gradient is built from
tensor ops instead, recomputed from the saved input, so it is differentiable again
(double backward, ``eager.func.jvp``); if that input was modified in place since the
forward, that path raises PyTorch's in-place error instead of differentiating the new
values.  Each ``fused_*`` function returns None when its fast path does not apply (a
traced value, a dtype other than float32/float64, a 0-d or empty input, class weights,
ignored targets, label smoothing...): the caller then runs the composite.

Importing this module installs :func:`fused_softmax`, :func:`fused_log_softmax` and
:func:`fused_masked_fill` as the fast paths of the ``Tensor.softmax`` /
``Tensor.log_softmax`` / ``Tensor.masked_fill`` methods
(:data:`eager.methods.stats.FUSED`; the methods layer cannot import autograd itself).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

import eager.methods.stats as _MS
import eager.ops.conv as _C
from eager.ops.registry import Meta as _Meta
from ..autograd.function import Function
from ..autograd.grad_mode import is_grad_enabled
from ..tensor import Tensor

__all__: list = []

_FAST = (np.dtype(np.float32), np.dtype(np.float64))


def _inplace_error(t: Any, expected: int, what: str, node: str) -> RuntimeError:
    """PyTorch's error for a saved tensor modified in place before the backward."""
    name = {"float32": "FloatTensor", "float64": "DoubleTensor"}.get(
        t._data.dtype.name, t._data.dtype.name
    )
    return RuntimeError(
        "one of the variables needed for gradient computation has been modified by an "
        f"inplace operation: [torch.{name} {list(t.shape)}], which is {what}, is at version "
        f"{t._version[0]}; expected version {expected} instead. Hint: the operation that "
        f"saved it is {node}; avoid modifying it in place, or clone() it first."
    )


def _fresh(arr: np.ndarray) -> Tensor:
    return Tensor._make(arr)


def _release(node: Any) -> None:
    """After the backward ran without ``retain_graph``: drop everything the ctx holds
    (its arrays and inputs, not only ``save_for_backward``'s tensors), so a graph kept
    alive by its output (the loss of the last step) does not keep them."""
    ctx = node._ctx
    ctx.__dict__.clear()
    ctx._freed = True
    ctx._to_save = ()


def frees_ctx(cls: Any) -> Any:
    """Class decorator for a Function whose ``ctx`` keeps arrays as attributes: its node's
    ``release`` drops them all (see :func:`_release`)."""
    cls._backward_cls.release = _release
    return cls


# --- row reductions along a short last axis ------------------------------------------------

#: the longest row the row helpers below take: einsum's sums accumulate each row in a few
#: SIMD lanes one element after another (numpy's sum is pairwise past 128 elements), so
#: their error grows with the row: on random float32 rows of up to 256 elements it stayed
#: within 2.4 eps * sum(|x|) (numpy's sum: 3.0), at 4096 it reached 12 (numpy's 2.5); and
#: the halving max's passes cost more than numpy's max from ~512 elements on
ROW_MAX_LEN = 256
#: the fewest rows the row helpers take: numpy's reductions cost ~20-85 ns a row, the
#: helpers ~1-3 us a call (einsum's parsing, a pass per halving); below ~100 rows numpy's
#: are as fast or faster (softmax of (64, 64) float32: 14 us numpy, 16 us the helpers;
#: (128, 64): 26 vs 22; W8's (2048, 64): ~2x)
ROW_MIN_COUNT = 128


def _rows(a: np.ndarray, k: int = 1) -> Optional[np.ndarray]:
    """``a`` as a C-contiguous (R, n) matrix whose rows are its last ``k`` dims (a copy
    when ``a`` is not C-contiguous), when there are at least :data:`ROW_MIN_COUNT` rows
    of 2 to :data:`ROW_MAX_LEN` elements; else None (the caller keeps numpy's
    reductions)."""
    n = 1
    for d in a.shape[a.ndim - k :]:
        n *= d
    if n < 2 or n > ROW_MAX_LEN or a.size < ROW_MIN_COUNT * n:
        return None
    return np.ascontiguousarray(a).reshape(-1, n)


def _row_max(a2: np.ndarray) -> np.ndarray:
    """The (R, 1) maxima of the rows of a C-contiguous (R, n) matrix, n >= 2: the same
    values as ``a2.max(axis=1, keepdims=True)`` (a maximum does not depend on the order
    it is taken in; np.maximum propagates a NaN as np.max does), by halving the rows with
    np.maximum of their even and odd columns.  numpy's max along a short contiguous axis
    costs ~85 ns per row (171 us on W8's (8, 4, 64, 64) scores); the halvings are six
    passes whose strided operands numpy runs as one flat loop each (~35 us).  (Where +0.0
    and -0.0 tie for the maximum either may come out, as from np.max: the softmaxes only
    subtract the maximum, and x - (+0.0) and x - (-0.0) differ only in the sign of a zero
    whose exp is 1 either way.)"""
    n = a2.shape[1]
    m = a2
    while n > 1:
        h = n >> 1
        nxt = np.maximum(m[:, 0 : 2 * h : 2], m[:, 1 : 2 * h : 2])
        if n & 1:  # the odd column out joins the first pair
            np.maximum(nxt[:, :1], m[:, n - 1 :], out=nxt[:, :1])
        m, n = nxt, h
    return m


def _row_sum(a2: np.ndarray, b2: Optional[np.ndarray] = None) -> np.ndarray:
    """The (R,) sums of the rows of a C-contiguous (R, n) matrix (of ``a2 * b2`` when
    ``b2`` is given, without the product's temporary) by einsum: ~4x faster than numpy's
    sum along a short axis (11 us vs 45 us on (2048, 64) float32).  The rounding is not
    numpy's pairwise sum's (the values differ from the composite's in the last bits, as
    numpy's differ from PyTorch's), but each row's sum is the same whatever the rows
    around it and the alignment (a BLAS product with a ones vector, as fast, gives a row
    different bits depending on its position in the matrix)."""
    if b2 is None:
        return np.einsum("ij->i", a2)
    return np.einsum("ij,ij->i", a2, b2)


# --- softmax / log_softmax ------------------------------------------------------------


@frees_ctx
class _Softmax(Function):
    """softmax (``log=False``) or log_softmax (``log=True``) over ``axes`` as one node.
    The fast backward reads the saved output: softmax g -> y * (g - sum(g * y)),
    log_softmax g -> g - exp(y) * sum(g)."""

    @staticmethod
    @np.errstate(all="ignore")  # (inf - inf, NaN rows: as the composite, without warnings)
    def forward(ctx: Any, x: Any, axes: tuple, log: bool) -> Any:
        a = x._data
        a2 = _rows(a) if axes == (a.ndim - 1,) else None
        ctx.rows = a2 is not None
        if a2 is not None:  # the last axis: row helpers (see _row_max, _row_sum)
            out = np.subtract(a2, _row_max(a2))
            if log:
                s = _row_sum(np.exp(out))
                np.log(s, out=s)
                out -= s[:, None]
            else:
                np.exp(out, out=out)
                out /= _row_sum(out)[:, None]
            out = out.reshape(a.shape)
        elif log:
            out = np.subtract(a, a.max(axis=axes, keepdims=True))
            s = np.exp(out).sum(axis=axes, keepdims=True)
            np.log(s, out=s)
            out -= s
        else:
            out = np.subtract(a, a.max(axis=axes, keepdims=True))
            np.exp(out, out=out)
            out /= out.sum(axis=axes, keepdims=True)
        res = Tensor._make(out)
        ctx.y, ctx.yver, ctx.x, ctx.xv = out, res._version, x, x._version[0]
        ctx.axes, ctx.log = axes, log
        return res

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        axes, log = ctx.axes, ctx.log
        node = "LogSoftmaxBackward0" if log else "SoftmaxBackward0"
        if is_grad_enabled():  # create_graph: a differentiable gradient, from x
            x = ctx.x
            if x._version[0] != ctx.xv:
                raise _inplace_error(x, ctx.xv, "the input of " + node, node)
            if log:
                y = _MS.composite_log_softmax(x, axes)
                return grad - y.exp() * grad.sum(axes, keepdim=True), None, None
            y = _MS.composite_softmax(x, axes)
            return y * (grad - (grad * y).sum(axes, keepdim=True)), None, None
        y = ctx.y
        if ctx.yver[0] != 0:
            raise _inplace_error(_fresh(y), 0, "output 0 of " + node, node)
        g = grad._data
        if ctx.rows and g.dtype == y.dtype:  # the last axis: row sums by einsum
            n = y.shape[-1]
            y2, g2 = y.reshape(-1, n), np.ascontiguousarray(g).reshape(-1, n)
            with np.errstate(all="ignore"):
                if log:
                    t = np.exp(y2)
                    t *= _row_sum(g2)[:, None]
                    np.subtract(g2, t, out=t)
                else:
                    t = np.subtract(g2, _row_sum(g2, y2)[:, None])
                    t *= y2
            return _fresh(t.reshape(y.shape)), None, None
        with np.errstate(all="ignore"):
            if log:
                t = np.exp(y)
                t *= g.sum(axis=axes, keepdims=True)
                np.subtract(g, t, out=t)
            else:
                t = np.multiply(g, y)
                s = t.sum(axis=axes, keepdims=True)
                np.subtract(g, s, out=t)
                t *= y
        return _fresh(t.astype(y.dtype, copy=False)), None, None


_Softmax._backward_cls.__name__ = _Softmax._backward_cls.__qualname__ = "SoftmaxBackward0"


@frees_ctx
class _LogSoftmax(_Softmax):
    """(The same node as :class:`_Softmax`, named ``LogSoftmaxBackward0``.)"""


_LogSoftmax._backward_cls.__name__ = "LogSoftmaxBackward0"
_LogSoftmax._backward_cls.__qualname__ = "LogSoftmaxBackward0"


def _fast_input(x: Any) -> bool:
    return (
        x.__class__ is Tensor and x._data.dtype in _FAST and x._data.ndim > 0 and x._data.size > 0
    )


def fused_softmax(x: Any, axes: tuple) -> Optional[Any]:
    """``x.softmax`` over ``axes`` as one ``SoftmaxBackward0`` node, or None when the
    fast path does not apply (see the module docstring)."""
    if not _fast_input(x):
        return None
    return _Softmax.apply(x, axes, False)


def fused_log_softmax(x: Any, axes: tuple) -> Optional[Any]:
    """``x.log_softmax`` over ``axes`` as one ``LogSoftmaxBackward0`` node, or None."""
    if not _fast_input(x):
        return None
    return _LogSoftmax.apply(x, axes, True)


_MS.FUSED["softmax"] = fused_softmax
_MS.FUSED["log_softmax"] = fused_log_softmax


# --- masked_fill with a number ------------------------------------------------------------


@frees_ctx
class _MaskedFill(Function):
    """``x.masked_fill(mask, value)`` for a number ``value`` and a mask that broadcasts to
    x's shape, as one node: a copy of x with the fill written where the mask is set
    (:func:`_fill_bits`, or ``np.copyto(..., where=mask)``) instead of the composite's
    ``where``, and the gradient the incoming one with zeros written there.  The mask is
    saved (its version checked at the backward, as PyTorch's)."""

    @staticmethod
    def forward(ctx: Any, x: Any, mask: Any, fill: np.ndarray) -> Any:
        a, m = x._data, mask._data
        out = _fill_bits(a, m, fill)
        if out is None:
            out = np.array(a, order="C")  # (C order, as the composite's where gives)
            np.copyto(out, fill, where=m)
        ctx.save_for_backward(mask)
        return Tensor._make(out)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        (mask,) = ctx.saved_tensors  # (checks its version, as PyTorch's)
        if is_grad_enabled():  # create_graph: the composite's differentiable where
            return grad.masked_fill(mask, 0), None, None
        m = mask._data
        g = _fill_bits(grad._data, m, np.zeros((), grad._data.dtype))
        if g is None:
            g = np.array(grad._data, order="C")
            np.copyto(g, 0, where=m)
        return _fresh(g), None, None


_BITS = {np.dtype(np.float32): np.int32, np.dtype(np.float64): np.int64}


def _fill_bits(a: np.ndarray, m: np.ndarray, fill: np.ndarray) -> Optional[np.ndarray]:
    """``a`` with ``fill`` (a 0-d array of a's dtype) where the bool mask ``m`` (which
    broadcasts to a's shape) is set, as a new C-contiguous array, by bit operations
    against two mask-sized integer masks: ``(a & keep) | put``, ``keep`` all bits set
    where ``m`` is False, ``put`` fill's bits where ``m`` is True: two flat passes over
    ``a`` (one when fill is +0.0, the gradient's) instead of a copy and np.copyto's masked
    write.  On W8's (64, 64) mask over (8, 4, 64, 64) scores, alone: ~45 vs ~62 us for
    -inf, ~36 vs ~66 us for 0; inside the masked_fill + softmax step (memory-bound) the
    gain shrinks to ~10 us of ~670.  The same bits as np.copyto (NaN payloads, -0.0).
    None (np.copyto then) unless the mask is at most a quarter of a's size (building the
    integer masks costs passes over the mask) and a is float32/float64 in native byte
    order."""
    it = _BITS.get(a.dtype)
    if it is None or m.size * 4 > a.size or m.dtype != np.bool_:
        return None
    keep = np.atleast_1d(m).astype(it)  # (astype: a bool view of other bytes than 0/1 gives 1)
    put = np.negative(keep)  # all bits set where m
    np.subtract(keep, it(1), out=keep)  # all bits set where not m
    out = np.empty(a.shape, it)
    np.bitwise_and(a.view(it), keep, out=out)
    bits = fill.astype(a.dtype).view(it)
    if bits != 0:
        np.bitwise_and(put, bits, out=put)
        np.bitwise_or(out, put, out=out)
    return out.view(a.dtype)


_MaskedFill._backward_cls.__name__ = "MaskedFillBackward0"
_MaskedFill._backward_cls.__qualname__ = "MaskedFillBackward0"


def fused_masked_fill(x: Any, mask: Any, fill: np.ndarray) -> Optional[Any]:
    """``x.masked_fill(mask, value)`` (the mask already checked to be bool, the number
    already converted to ``fill``, a 0-d array of x's dtype) as one ``MaskedFillBackward0``
    node, when x is a non-empty float32/float64 eager tensor and ``mask`` an eager tensor
    broadcasting to x's shape; else None (the caller runs the composite ``where``)."""
    if not _fast_input(x) or mask.__class__ is not Tensor:
        return None
    shape = x._data.shape
    m = mask._data.shape
    if len(m) > len(shape) or any(a != 1 and a != b for a, b in zip(m[::-1], shape[::-1])):
        return None
    return _MaskedFill.apply(x, mask, fill)


_MS.FUSED["masked_fill"] = fused_masked_fill


# --- layer_norm -------------------------------------------------------------------------


def _mean(a: np.ndarray, axes: tuple) -> np.ndarray:
    """``a.mean(axis=axes, keepdims=True)`` for a float array, the same bits (numpy's mean
    is this sum divided by the intp count) without np.mean's Python layer."""
    n = 1
    for ax in axes:
        n *= a.shape[ax]
    s = np.add.reduce(a, axis=axes, keepdims=True)
    return np.true_divide(s, np.intp(n), out=s, casting="unsafe")


def _row_mean(a2: np.ndarray, b2: Optional[np.ndarray] = None) -> np.ndarray:
    """:func:`_row_sum` divided by the row length in the array's dtype: the same bits as
    :func:`_mean`'s float64 quotient rounded to float32 (the row length, at most
    :data:`ROW_MAX_LEN`, is exact in float32, and a float64 quotient rounded to float32 is
    the correctly rounded float32 quotient), without the casting loop (1.9 vs 0.7 us)."""
    s = _row_sum(a2, b2)
    return np.true_divide(s, s.dtype.type(a2.shape[1]), out=s)


@frees_ctx
class _LayerNorm(Function):
    """layer_norm over the last ``k`` dims as one node; saves x-hat and 1/std.  When the
    normalized rows are short (:func:`_rows`) their means are einsum sums (:func:`_row_sum`)
    divided as numpy's mean divides; else numpy's means (:func:`_mean`)."""

    @staticmethod
    @np.errstate(all="ignore")
    def forward(ctx: Any, x: Any, weight: Any, bias: Any, k: int, eps: float) -> Any:
        a = x._data
        axes = tuple(range(a.ndim - k, a.ndim))
        a2 = _rows(a, k)
        ctx.rows = 0 if a2 is None else a2.shape[1]  # (the row length)
        if a2 is not None:
            keep = a.shape[: a.ndim - k] + (1,) * k  # (the shape of the means)
            d = np.subtract(a2, _row_mean(a2)[:, None]).reshape(a.shape)
            var = _row_mean(d.reshape(a2.shape), d.reshape(a2.shape)).reshape(keep)
        else:
            d = np.subtract(a, _mean(a, axes))
            var = _mean(np.multiply(d, d), axes)
        var += eps
        rstd = np.sqrt(var, out=var)
        np.divide(1, rstd, out=rstd)
        d *= rstd  # x-hat
        if weight is not None:
            out = np.multiply(d, weight._data)
            if bias is not None:
                out += bias._data
        elif bias is not None:
            out = np.add(d, bias._data)
        else:
            out = d.copy()
        ctx.save_for_backward(x, weight, bias)
        ctx.xhat, ctx.rstd, ctx.axes, ctx.eps = d, rstd, axes, eps
        return Tensor._make(out)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        x, weight, bias = ctx.saved_tensors  # (checks their versions, as PyTorch's)
        axes = ctx.axes
        lead = tuple(range(x.ndim - len(axes)))
        nx, nw, nb = ctx.needs_input_grad[:3]
        if is_grad_enabled():  # create_graph: a differentiable gradient, from x
            mu = x.mean(axes, keepdim=True)
            d = x - mu
            rstd = ((d * d).mean(axes, keepdim=True) + ctx.eps).rsqrt()
            xhat = d * rstd
            gxhat = grad * weight if weight is not None else grad
            gx = gw = gb = None
            if nx:
                gx = rstd * (
                    gxhat
                    - gxhat.mean(axes, keepdim=True)
                    - xhat * (gxhat * xhat).mean(axes, keepdim=True)
                )
            if nw:
                gw = (grad * xhat).sum(lead) if lead else grad * xhat
            if nb:
                gb = grad.sum(lead) if lead else grad * 1.0
            return gx, gw, gb, None, None
        g = grad._data
        xhat, rstd = ctx.xhat, ctx.rstd
        dt = xhat.dtype
        gx = gw = gb = None
        with np.errstate(all="ignore"):
            if ctx.rows and lead and (nb or nw):  # column sums by einsum: the rows added
                # one after another, as numpy's axis-0 sum adds them (the same bits on the
                # shapes tried), ~2x faster and without the (g * xhat) temporary
                g2 = g.astype(dt, copy=False).reshape(-1, ctx.rows)
                if nb:
                    gb = _fresh(np.einsum("ij->j", g2).reshape(xhat.shape[-len(axes) :]))
                if nw:
                    u = np.einsum("ij,ij->j", g2, xhat.reshape(g2.shape))
                    gw = _fresh(u.reshape(xhat.shape[-len(axes) :]))
            elif nb or nw:
                if nb:
                    gb = _fresh(g.sum(axis=lead).astype(dt, copy=False) if lead else g.astype(dt))
                if nw:
                    u = np.multiply(g, xhat)
                    gw = _fresh(u.sum(axis=lead).astype(dt, copy=False) if lead else u)
            if nx and ctx.rows:  # the row means by einsum (see _row_sum)
                if weight is not None:  # (a new array: no second copy unless needed)
                    t = np.array(np.multiply(g, weight._data), dt, order="C", copy=None)
                else:  # (a copy: the incoming gradient is not written)
                    t = np.array(g, dt, order="C")
                t2, xhat2 = t.reshape(-1, ctx.rows), xhat.reshape(-1, ctx.rows)
                m1 = _row_mean(t2)[:, None]
                m2 = _row_mean(t2, xhat2)[:, None]
                u = np.multiply(xhat2, m2)
                t2 -= m1
                t2 -= u
                t *= rstd
                gx = _fresh(t)
            elif nx:
                t = np.multiply(g, weight._data) if weight is not None else np.array(g, dt)
                m1 = _mean(t, axes)
                u = np.multiply(t, xhat)
                m2 = _mean(u, axes)
                np.multiply(xhat, m2, out=u)
                t -= m1
                t -= u
                t *= rstd
                gx = _fresh(t.astype(dt, copy=False))
        return gx, gw, gb, None, None


_LayerNorm._backward_cls.__name__ = "NativeLayerNormBackward0"
_LayerNorm._backward_cls.__qualname__ = "NativeLayerNormBackward0"


def fused_layer_norm(input: Any, ns: tuple, weight: Any, bias: Any, eps: float) -> Optional[Any]:
    """``F.layer_norm`` (shapes already checked) as one ``NativeLayerNormBackward0``
    node, when ``input`` is a float32/float64 eager tensor and ``weight``/``bias`` are
    None or eager tensors of shape ``ns`` and the same dtype; else None."""
    if not _fast_input(input):
        return None
    dt = input._data.dtype
    for p in (weight, bias):
        if p is not None and (
            not isinstance(p, Tensor) or p._data.dtype != dt or p._data.shape != ns
        ):
            return None
    return _LayerNorm.apply(input, weight, bias, len(ns), float(eps))


# --- cross_entropy of class indices -------------------------------------------------------


@frees_ctx
class _CrossEntropy(Function):
    """cross_entropy of (N, C) logits and N class indices, no weights, no ignored
    targets, no smoothing: one node whose gradient is (softmax - one_hot) * g."""

    @staticmethod
    @np.errstate(all="ignore")
    def forward(ctx: Any, x: Any, target: np.ndarray, reduction: str) -> Any:
        a = x._data
        n = a.shape[0]
        a2 = _rows(a)
        rows = np.arange(n)
        if a2 is not None:  # short rows: the row helpers (see _row_max, _row_sum)
            e = np.subtract(a2, _row_max(a2))
            shifted = e[rows, target]
            np.exp(e, out=e)
            se = _row_sum(e)[:, None]
        else:
            e = np.subtract(a, a.max(axis=1, keepdims=True))
            shifted = e[rows, target]
            np.exp(e, out=e)
            se = e.sum(axis=1, keepdims=True)
        lse = np.log(se)
        picked = shifted - lse[:, 0]  # log_softmax at each target
        if reduction == "mean":
            out = np.asarray(-picked.sum() / float(n), a.dtype)
        elif reduction == "sum":
            out = np.asarray(-picked.sum(), a.dtype)
        else:
            out = -picked
        e /= se  # softmax, what the gradient reads (divided while e is in cache)
        ctx.p, ctx.rows, ctx.target, ctx.red = e, rows, target, reduction
        ctx.x, ctx.xv = x, x._version[0]
        return Tensor._make(out)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        red, n = ctx.red, ctx.p.shape[0]
        if is_grad_enabled():  # create_graph: a differentiable gradient, from x
            x = ctx.x
            if x._version[0] != ctx.xv:
                raise _inplace_error(x, ctx.xv, "the input of NllLossBackward0", "NllLossBackward0")
            p = _MS.composite_softmax(x, (1,))
            hot = np.zeros(ctx.p.shape, ctx.p.dtype)
            hot[ctx.rows, ctx.target] = 1
            diff = p - x._wrap_const(hot)
            if red == "mean":
                return diff * (grad / float(n)), None, None
            return diff * (grad if red == "sum" else grad.unsqueeze(1)), None, None
        p, g = ctx.p, grad._data
        dt = p.dtype
        with np.errstate(all="ignore"):
            if red == "none":
                gc = g.astype(dt, copy=False)
                gx = np.multiply(p, gc[:, None])
                gx[ctx.rows, ctx.target] -= gc
            else:
                scale = dt.type(g / dt.type(n)) if red == "mean" else dt.type(g)
                gx = np.multiply(p, scale)
                gx[ctx.rows, ctx.target] -= scale
        return _fresh(gx), None, None


_CrossEntropy._backward_cls.__name__ = "NllLossBackward0"
_CrossEntropy._backward_cls.__qualname__ = "NllLossBackward0"


def fused_cross_entropy(
    input: Any, target: Any, reduction: str, ignore_index: int
) -> Optional[Any]:
    """``F.cross_entropy`` of 2-D float32/float64 logits and a 1-D int64 class target
    (already checked in range) with no class weights and no label smoothing, as one
    ``NllLossBackward0`` node; None when a target equals ``ignore_index`` or the
    inputs fall outside that case."""
    if not _fast_input(input) or input._data.ndim != 2 or target.__class__ is not Tensor:
        return None
    t = target._data
    if t.ndim != 1 or t.dtype != np.int64 or input._data.shape[1] == 0:
        return None
    if (t == ignore_index).any():
        return None
    return _CrossEntropy.apply(input, t.copy(), reduction)


# --- embedding ------------------------------------------------------------------------------


@frees_ctx
class _Embedding(Function):
    """The rows of ``weight`` at ``index`` (an int array, checked in range) as one node;
    the gradient sums the incoming rows per index with one ``np.bincount`` (float64
    sums, rounded once to the weight's dtype) instead of the gather VJP's ``np.add.at``."""

    @staticmethod
    def forward(ctx: Any, weight: Any, index: np.ndarray) -> Any:
        w = weight._data
        ctx.index, ctx.n, ctx.dt = index, w.shape[0], w.dtype
        out = np.take(w, index.reshape(-1), axis=0)
        return Tensor._make(out.reshape(index.shape + (w.shape[1],)))

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        index, n, dt = ctx.index, ctx.n, ctx.dt
        d = grad.shape[-1]
        flat = index.reshape(-1)
        if is_grad_enabled():  # create_graph: the gradient as tensor ops (linear in grad)
            z = grad._wrap_const(np.zeros((n, d), dt))
            return z.index_add(0, grad._wrap_const(flat), grad.reshape(-1, d)), None
        g = grad._data.reshape(-1, d)
        if flat.size == 0 or d == 0:
            return _fresh(np.zeros((n, d), dt)), None
        pos = flat.astype(np.intp)[:, None] * d + np.arange(d, dtype=np.intp)
        sums = np.bincount(pos.reshape(-1), weights=g.reshape(-1), minlength=n * d)
        return _fresh(sums.astype(dt, copy=False).reshape(n, d)), None


_Embedding._backward_cls.__name__ = "EmbeddingBackward0"
_Embedding._backward_cls.__qualname__ = "EmbeddingBackward0"


def fused_embedding(input: Any, weight: Any) -> Optional[Any]:
    """``F.embedding(input, weight)`` without ``padding_idx`` (arguments already checked,
    indices in range) as one ``EmbeddingBackward0`` node, when both are eager tensors and
    ``weight`` is a non-empty float32/float64 matrix; else None."""
    if not isinstance(weight, Tensor) or input.__class__ is not Tensor:
        return None
    w = weight._data
    if w.dtype not in _FAST or w.ndim != 2 or w.size == 0:
        return None
    return _Embedding.apply(weight, input._data.copy())  # (kept: a later write must not change it)


# --- conv2d and max_pool2d (W7's CNN) -------------------------------------------------------

_CONV_BWD2 = "ConvolutionBackwardBackward0"

#: whether the fused conv2d keeps its im2col columns for the weight gradient (faster
#: backward, more memory held between forward and backward) or rebuilds them from x
KEEP_COLS = True
_POOL_BWD = "MaxPool2DWithIndicesBackward0"


@frees_ctx
class _Conv2d(Function):
    """conv2d of a batched input plus its bias as one node (PyTorch's
    ``ConvolutionBackward0`` also covers the bias): the forward keeps its im2col columns
    (when the weight needs a gradient), so the weight gradient is one product of them
    with the incoming gradient instead of a second im2col of x."""

    @staticmethod
    def forward(
        ctx: Any, x: Any, w: Any, b: Any, stride: tuple, pad: tuple, dil: tuple, groups: int
    ) -> Any:
        out, cols = _C.conv2d_keep_cols(x._data, w._data, stride, pad, dil, groups)
        if b is not None:
            out += b._data.reshape(1, -1, 1, 1)
        ctx.save_for_backward(x, w)
        ctx.cols = cols if w.requires_grad and KEEP_COLS else None
        ctx.p = dict(stride=stride, padding=pad, dilation=dil, groups=groups)
        return Tensor._make(out)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        x, w = ctx.saved_tensors  # (checks their versions, as PyTorch's)
        nx, nw, nb = ctx.needs_input_grad[:3]
        p = ctx.p
        size = tuple(int(v) for v in x.shape[2:])
        ksize = tuple(int(v) for v in w.shape[2:])
        gx = gw = gb = None
        if is_grad_enabled():  # create_graph: the composite's differentiable ops
            if nx:
                gx = grad._op("conv2d_input_grad", _CONV_BWD2, w, input_size=size, **p)
            if nw:
                gw = x._op("conv2d_weight_grad", _CONV_BWD2, grad, kernel_size=ksize, **p)
            if nb:
                gb = grad.sum((0, 2, 3))
            return gx, gw, gb, None, None, None, None
        dt = x._data.dtype
        g = grad._data.astype(dt, copy=False)
        if nx:
            gx = _fresh(_C._conv2d_input_grad(g, w._data, input_size=size, **p))
        if nw:
            cols = ctx.cols
            if cols is None and x._data.size and g.size:  # (w did not need it in forward)
                gw = _fresh(_C._conv2d_weight_grad(x._data, g, kernel_size=ksize, **p))
            else:
                gw = _fresh(_C.conv2d_weight_grad_cols(cols, g, p["groups"], w._data.shape))
        if nb:
            gb = _fresh(g.sum(axis=(0, 2, 3)))
        return gx, gw, gb, None, None, None, None


_Conv2d._backward_cls.__name__ = "ConvolutionBackward0"
_Conv2d._backward_cls.__qualname__ = "ConvolutionBackward0"


def fused_conv2d(
    x: Any, weight: Any, bias: Any, stride: tuple, pad: tuple, dilation: tuple, groups: int
) -> Optional[Any]:
    """``F.conv2d`` of a batched (N, C, H, W) float32/float64 eager tensor (plus its bias)
    as one ``ConvolutionBackward0`` node, when ``weight`` (and ``bias``, if given) are
    eager tensors of the same dtype, the bias of shape (C_out,); else None (the caller
    runs the composite: a traced value, another dtype, an empty input...).  Shape errors
    are the composite's (the conv2d record's checks run first)."""
    if not _fast_input(x) or x._data.ndim != 4 or weight.__class__ is not Tensor:
        return None
    dt = x._data.dtype
    w = weight._data
    if w.dtype != dt or w.ndim != 4:
        return None
    if bias is not None and (
        bias.__class__ is not Tensor or bias._data.dtype != dt or bias._data.shape != w.shape[:1]
    ):
        return None
    return _Conv2d.apply(x, weight, bias, stride, pad, dilation, int(groups))


@frees_ctx
class _MaxPool2d(Function):
    """max_pool2d over windows that tile the input (stride == kernel_size, no padding or
    dilation) as one node that keeps the window maxima: the gradient goes to the first
    tap (row-major) equal to its window's maximum, PyTorch's tie rule, without
    recomputing the maxima.  A NaN in the input, a non-finite gradient or an output
    modified in place take the general scatter (``max_pool2d_grad``)."""

    @staticmethod
    def forward(ctx: Any, x: Any, k: tuple, ceil_mode: bool) -> Any:
        a = x._data
        best = _C._tiled_values(_C._tiles(a, k, k, (0, 0), (1, 1), ceil_mode))
        res = Tensor._make(best)
        ctx.save_for_backward(x)
        ctx.best, ctx.ver = best, res._version
        ctx.attrs = dict(
            kernel_size=k, stride=k, padding=(0, 0), dilation=(1, 1), ceil_mode=ceil_mode
        )
        return res

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        (x,) = ctx.saved_tensors  # (checks its version, as PyTorch's)
        attrs = ctx.attrs
        if is_grad_enabled():  # create_graph: the composite's differentiable op
            return x._op("max_pool2d_grad", _POOL_BWD, grad, **attrs), None, None
        a, best = x._data, ctx.best
        g = grad._data.astype(a.dtype, copy=False)
        if ctx.ver[0] != 0 or np.isnan(best).any() or not np.isfinite(g).all():
            return _fresh(_C._max_pool2d_grad(a, g, **attrs)), None, None
        kh, kw = attrs["kernel_size"]
        xr = _C._tiles(a, (kh, kw), (kh, kw), (0, 0), (1, 1), attrs["ceil_mode"])
        out = np.zeros(a.shape, a.dtype)
        dst = _C._tiles(out, (kh, kw), (kh, kw), (0, 0), (1, 1), attrs["ceil_mode"])
        free = np.ones(best.shape, bool)  # windows whose argmax is not found yet
        hit = np.empty(best.shape, bool)
        last = kh * kw - 1
        for k in range(kh * kw):  # the first tap equal to the maximum gets g
            i, j = divmod(k, kw)
            np.equal(xr[:, :, :, i, :, j], best, out=hit)
            if k:
                np.logical_and(hit, free, out=hit)
            np.multiply(g, hit, out=dst[:, :, :, i, :, j])
            if k < last:
                np.not_equal(free, hit, out=free)
        # PyTorch adds g to zeros: +0.0 where g * False gave -0.0 (and -0.0 + 0 -> +0.0)
        np.add(out, a.dtype.type(0), out=out)
        return _fresh(out), None, None


_MaxPool2d._backward_cls.__name__ = _POOL_BWD
_MaxPool2d._backward_cls.__qualname__ = _POOL_BWD


def fused_max_pool2d(
    x: Any, k: tuple, s: tuple, p: tuple, d: tuple, ceil_mode: bool
) -> Optional[Any]:
    """``F.max_pool2d`` (no ``return_indices``) of a batched float32/float64 eager tensor
    whose windows tile it (``stride == kernel_size``, no padding, no dilation, fewer
    than 128 taps) as one ``MaxPool2DWithIndicesBackward0`` node that keeps the maxima
    for the gradient; else None (the caller runs the composite)."""
    if not _fast_input(x) or x._data.ndim != 4:
        return None
    if tuple(s) != tuple(k) or any(p) or tuple(d) != (1, 1) or k[0] * k[1] >= 128:
        return None
    a = x._data
    attrs = dict(kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=bool(ceil_mode))
    _C._max_pool2d_shape(_Meta(a.shape, a.dtype), **attrs)  # (the composite's errors)
    if _C._tiles(a, k, k, (0, 0), (1, 1), bool(ceil_mode)) is None:
        return None
    return _MaxPool2d.apply(x, tuple(k), bool(ceil_mode))
