"""nn.functional: softmax, losses and normalization (re-exported by eager/nn/functional.py).

Every function is a composite of public tensor ops, so it runs eagerly, traces under
graphc and differentiates to any order.  Class-index targets select their class with a
one-hot mask ``target.unsqueeze(1) == arange(C)`` (no gather), which traces.  A target
out of range raises IndexError in eager; under graphc.compile the check needs data and
cannot run: an out-of-range target then selects no class (its loss term is 0).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Optional, Sequence

import numpy as np

from ..autograd.grad_mode import no_grad
from ..surface import TensorOps, where
from ..tensor import Tensor
from ._fused import fused_cross_entropy, fused_layer_norm
from ._reduction import check_reduction, legacy_reduction

__all__: list = [
    "softmax",
    "log_softmax",
    "softmin",
    "nll_loss",
    "cross_entropy",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "layer_norm",
    "batch_norm",
    "group_norm",
]


# --- the softmax family ------------------------------------------------------------


def _get_softmax_dim(name: str, ndim: int, stacklevel: int) -> int:
    warnings.warn(
        f"Implicit dimension choice for {name} has been deprecated. "
        "Change the call to include dim=X as an argument.",
        UserWarning,
        stacklevel=stacklevel,
    )
    return 0 if ndim in (0, 1, 3) else 1


def softmax(
    input: TensorOps, dim: Optional[int] = None, _stacklevel: int = 3, dtype=None
) -> TensorOps:
    """``exp(x) / exp(x).sum(dim)``; without ``dim``, PyTorch's legacy implicit choice."""
    if dim is None:
        dim = _get_softmax_dim("softmax", input.ndim, _stacklevel)
    return input.softmax(dim, dtype=dtype)


def log_softmax(
    input: TensorOps, dim: Optional[int] = None, _stacklevel: int = 3, dtype=None
) -> TensorOps:
    """``x - logsumexp(x, dim)``; without ``dim``, PyTorch's legacy implicit choice."""
    if dim is None:
        dim = _get_softmax_dim("log_softmax", input.ndim, _stacklevel)
    return input.log_softmax(dim, dtype=dtype)


def softmin(
    input: TensorOps, dim: Optional[int] = None, _stacklevel: int = 3, dtype=None
) -> TensorOps:
    """``softmax(-x, dim)``."""
    if dim is None:
        dim = _get_softmax_dim("softmin", input.ndim, _stacklevel)
    return (-input).softmax(dim, dtype=dtype)


# --- helpers of the losses -------------------------------------------------------------


def _reduction(size_average, reduce, reduction: str) -> str:
    if size_average is not None or reduce is not None:
        reduction = legacy_reduction(size_average, reduce)
    return check_reduction(reduction)


def _reduce(loss: TensorOps, reduction: str) -> TensorOps:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _torch_dtype_name(x: TensorOps) -> str:
    names = {"int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char",
             "uint8": "Byte", "bool": "Bool", "float32": "Float", "float64": "Double",
             "float16": "Half"}  # fmt: skip
    return names.get(x._npdtype.name, x._npdtype.name)


def _class_shape(ndim: int, cdim: int, c: int) -> tuple:
    return tuple(c if i == cdim else 1 for i in range(ndim))


_INT64, _UINT8 = np.dtype(np.int64), np.dtype(np.uint8)


def _check_class_target(input: TensorOps, target: TensorOps, weight, ignore_index: int) -> int:
    """PyTorch's checks of a class-index target; returns the class dim."""
    tdt = target._npdtype
    if tdt != _INT64 and tdt != _UINT8:
        raise RuntimeError(
            f"expected target dtype to be Long or Byte, but got {_torch_dtype_name(target)}"
        )
    if input.ndim < 1:
        raise ValueError("Expected 1 or more dimensions (got 0)")
    cdim = 0 if input.ndim == 1 else 1
    c = input.shape[cdim]
    ishape, tshape = tuple(input.shape), tuple(target.shape)
    if input.ndim == 1:
        if tshape != ():
            raise RuntimeError(
                f"0D or 1D target tensor expected, multi-target not supported; got {list(tshape)}"
            )
    elif input.ndim == 2:
        if len(tshape) != 1:
            raise RuntimeError(
                f"0D or 1D target tensor expected, multi-target not supported; got {list(tshape)}"
            )
        if tshape[0] != ishape[0]:
            raise ValueError(
                f"Expected input batch_size ({ishape[0]}) to match target batch_size ({tshape[0]})."
            )
    else:
        want = ishape[:1] + ishape[2:]
        if tshape != want:
            raise RuntimeError(f"Expected target size {list(want)}, got {list(tshape)}")
    if weight is not None and tuple(weight.shape) != (c,):
        raise RuntimeError(
            f"weight tensor should be defined either for all {c} classes or no classes but "
            f"got weight tensor of shape: {list(weight.shape)}"
        )
    if isinstance(target, Tensor):  # eager: the data is here (a traced target has none)
        t = target._data.astype(np.int64, copy=False)
        if t.size and (t.min() < 0 or t.max() >= c):  # then find the first bad one
            bad = (t != ignore_index) & ((t < 0) | (t >= c))
            if bad.any():
                raise IndexError(f"Target {int(t[bad].flat[0])} is out of bounds.")
    return cdim


def _picked_all(logp: Any, target: TensorOps, weight, ignore_index: int, cdim: int):
    """``logp`` at each target's class, when every target counts (an eager target without
    ``ignore_index``, no class weights): one gather instead of the masked selection of
    :func:`_class_terms` (the same values: the selection adds zeros to the one element),
    else None."""
    if weight is not None or not isinstance(target, Tensor) or logp.ndim == 0:
        return None
    t = target._data
    if t.size and ((t == ignore_index).any() if t.min() <= ignore_index <= t.max() else False):
        return None
    if t.dtype != _INT64:
        target = target.long()
    return logp.gather(cdim, target.unsqueeze(cdim)).squeeze(cdim)


def _class_terms(logp: Any, target: TensorOps, weight, ignore_index: int, cdim: int):
    """(the one-hot mask of each target's class, the weight of each target (0 where
    ignored), the valid mask), all selected without gather."""
    c = logp.shape[cdim]
    cls = logp._wrap_const(np.arange(c, dtype=np.int64).reshape(_class_shape(logp.ndim, cdim, c)))
    hit = target.unsqueeze(cdim) == cls
    valid = target != ignore_index
    if weight is not None:
        wb = weight.to(logp._npdtype).reshape(_class_shape(logp.ndim, cdim, c))
        wt = where(valid, where(hit, wb, 0.0).sum(cdim), 0.0)
    else:
        wt = valid.to(logp._npdtype)
    if not isinstance(target, Tensor):
        # traced (no data to check now): a gather of ones at the non-ignored targets raises
        # graphc's IndexError at run time for a target out of [0, c), as eager raises
        # PyTorch's; without it an out-of-range target silently selected no class
        ones = logp._wrap_const(np.ones(c, dtype=logp._npdtype))
        safe = where(valid, target, 0).reshape(-1)
        wt = wt * ones.gather(0, safe).reshape(tuple(wt.shape))
    return hit, wt, valid


def _nll(logp, target, weight, ignore_index: int, reduction: str, cdim: int):
    picked = _picked_all(logp, target, weight, ignore_index, cdim)
    if picked is not None:
        if reduction == "mean":  # PyTorch's mean over the (all non-ignored) targets
            n = picked.numel()
            return (-picked).sum() / (float(n) if n else float("nan"))
        return (-picked).sum() if reduction == "sum" else -picked
    hit, wt, valid = _class_terms(logp, target, weight, ignore_index, cdim)
    picked = where(hit, logp, 0.0).sum(cdim)
    loss = where(valid, -(picked * wt), 0.0)
    if reduction == "mean":
        return loss.sum() / wt.sum()  # PyTorch's weighted mean: over the non-ignored weights
    if reduction == "sum":
        return loss.sum()
    return loss


def nll_loss(
    input: TensorOps,
    target: TensorOps,
    weight: Optional[TensorOps] = None,
    size_average: Optional[bool] = None,
    ignore_index: int = -100,
    reduce: Optional[bool] = None,
    reduction: str = "mean",
) -> TensorOps:
    """Negative log likelihood of class indices ``target`` under log-probabilities ``input``."""
    reduction = _reduction(size_average, reduce, reduction)
    cdim = _check_class_target(input, target, weight, ignore_index)
    return _nll(input, target, weight, ignore_index, reduction, cdim)


def cross_entropy(
    input: TensorOps,
    target: TensorOps,
    weight: Optional[TensorOps] = None,
    size_average: Optional[bool] = None,
    ignore_index: int = -100,
    reduce: Optional[bool] = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> TensorOps:
    """``nll_loss(log_softmax(input, 1), target)`` for class indices, or the cross entropy
    with class probabilities ``target`` (same shape as ``input``); PyTorch's weighting,
    ``ignore_index`` and ``label_smoothing`` rules."""
    reduction = _reduction(size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(
            f"label_smoothing must be between 0.0 and 1.0. Got: {float(label_smoothing):g}"
        )
    if input.ndim < 1:
        raise ValueError("Expected 1 or more dimensions (got 0)")
    cdim = 0 if input.ndim == 1 else 1
    c = input.shape[cdim]
    if target._npdtype.kind == "f" and tuple(target.shape) == tuple(input.shape):
        return _cross_entropy_probs(input, target, weight, ignore_index, reduction,
                                    label_smoothing, cdim)  # fmt: skip
    cdim = _check_class_target(input, target, weight, ignore_index)
    if weight is None and label_smoothing <= 0.0:
        fused = fused_cross_entropy(input, target, reduction, ignore_index)
        if fused is not None:  # one node, a numpy gradient (eager/nn/_fused.py)
            return fused
    logp = input.log_softmax(cdim)
    nll = _nll(logp, target, weight, ignore_index, reduction, cdim)
    if label_smoothing <= 0.0:
        return nll
    hit, wt, valid = _class_terms(logp, target, weight, ignore_index, cdim)
    if weight is not None:
        wb = weight.to(logp._npdtype).reshape(_class_shape(logp.ndim, cdim, c))
        smooth = -(logp * wb).sum(cdim)
    else:
        smooth = -logp.sum(cdim)
    smooth = where(valid, smooth, 0.0)
    if reduction == "mean":
        ret = smooth.sum() / (wt.sum() if weight is not None else valid.sum())
    elif reduction == "sum":
        ret = smooth.sum()
    else:
        ret = smooth
    return nll * (1.0 - label_smoothing) + ret * (label_smoothing / c)


def _cross_entropy_probs(input, target, weight, ignore_index, reduction, eps, cdim):
    if ignore_index >= 0:
        raise RuntimeError("ignore_index is not supported for floating point target")
    c = input.shape[cdim]
    if weight is not None and tuple(weight.shape) != (c,):
        raise RuntimeError(
            f"weight tensor should be defined either for all {c} classes or no classes but "
            f"got weight tensor of shape: {list(weight.shape)}"
        )
    logp = input.log_softmax(cdim)
    if eps > 0.0:
        target = target * (1.0 - eps) + eps / c
    terms = logp * target
    if weight is not None:
        terms = terms * weight.to(logp._npdtype).reshape(_class_shape(logp.ndim, cdim, c))
    if reduction == "mean":
        n = math.prod(input.shape) // c if c else 0
        return -terms.sum() / (n if n else float("nan"))
    if reduction == "sum":
        return -terms.sum()
    return -terms.sum(cdim)


def _same_size(input: TensorOps, target: TensorOps, deprecated: bool) -> None:
    if tuple(target.shape) != tuple(input.shape):
        if deprecated:
            raise ValueError(
                f"Using a target size ({target.shape}) that is different to the input size "
                f"({input.shape}) is deprecated. Please ensure they have the same size."
            )
        raise ValueError(
            f"Target size ({target.shape}) must be the same as input size ({input.shape})"
        )


def _warn_size(input: TensorOps, target: TensorOps) -> None:
    if tuple(target.shape) != tuple(input.shape):
        warnings.warn(
            f"Using a target size ({target.shape}) that is different to the input size "
            f"({input.shape}). This will likely lead to incorrect results due to "
            "broadcasting. Please ensure they have the same size.",
            UserWarning,
            stacklevel=3,
        )


def _log_clamped(x: TensorOps) -> TensorOps:
    """``max(log(x), -100)`` (PyTorch's BCE clamp) with a zero gradient at x == 0."""
    pos = x > 0
    return where(pos, where(pos, x, 1.0).log().clamp(min=-100.0), -100.0)


def binary_cross_entropy(
    input: TensorOps,
    target: TensorOps,
    weight: Optional[TensorOps] = None,
    size_average: Optional[bool] = None,
    reduce: Optional[bool] = None,
    reduction: str = "mean",
) -> TensorOps:
    """``-(t log(x) + (1 - t) log(1 - x))`` with the logs clamped at -100 as PyTorch."""
    reduction = _reduction(size_average, reduce, reduction)
    _same_size(input, target, deprecated=True)
    if isinstance(input, Tensor):
        a = input.detach().numpy()
        if ((a < 0) | (a > 1)).any():
            raise RuntimeError("all elements of input should be between 0 and 1")
    loss = -(target * _log_clamped(input) + (1.0 - target) * _log_clamped(1.0 - input))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def _log1p(u: TensorOps) -> TensorOps:
    """``log(1 + u)`` accurate for tiny ``u`` (Goldberg's trick: log(w) * u / (w - 1))."""
    w = 1.0 + u
    d = w - 1.0
    small = d == 0
    return where(small, u, w.log() * u / where(small, 1.0, d))


def binary_cross_entropy_with_logits(
    input: TensorOps,
    target: TensorOps,
    weight: Optional[TensorOps] = None,
    size_average: Optional[bool] = None,
    reduce: Optional[bool] = None,
    reduction: str = "mean",
    pos_weight: Optional[TensorOps] = None,
) -> TensorOps:
    """``binary_cross_entropy(sigmoid(input), target)`` computed stably from the logits."""
    reduction = _reduction(size_average, reduce, reduction)
    _same_size(input, target, deprecated=False)
    # -log(sigmoid(x)) = max(-x, 0) + log1p(exp(-|x|)), written with selects whose
    # branches are smooth at 0, so the gradient there is sigmoid(0) - t as PyTorch's
    neg = input < 0
    softplus_neg = where(neg, -input, 0.0) + _log1p(where(neg, input, -input).exp())
    if pos_weight is not None:
        log_weight = (pos_weight - 1.0) * target + 1.0
        loss = (1.0 - target) * input + log_weight * softplus_neg
    else:
        loss = (1.0 - target) * input + softplus_neg
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def l1_loss(
    input: TensorOps,
    target: TensorOps,
    size_average: Optional[bool] = None,
    reduce: Optional[bool] = None,
    reduction: str = "mean",
) -> TensorOps:
    """Absolute error ``|input - target|``, averaged, summed or kept elementwise."""
    reduction = _reduction(size_average, reduce, reduction)
    _warn_size(input, target)
    return _reduce((input - target).abs(), reduction)


def smooth_l1_loss(
    input: TensorOps,
    target: TensorOps,
    size_average: Optional[bool] = None,
    reduce: Optional[bool] = None,
    reduction: str = "mean",
    beta: float = 1.0,
) -> TensorOps:
    """``0.5 d^2 / beta`` where ``|d| < beta``, ``|d| - beta / 2`` elsewhere."""
    reduction = _reduction(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    _warn_size(input, target)
    d = (input - target).abs()
    if beta == 0.0:
        return _reduce(d, reduction)
    loss = where(d < beta, (d * d) * (0.5 / beta), d - 0.5 * beta)
    return _reduce(loss, reduction)


def huber_loss(
    input: TensorOps,
    target: TensorOps,
    reduction: str = "mean",
    delta: float = 1.0,
    weight: Optional[TensorOps] = None,
) -> TensorOps:
    """``0.5 d^2`` where ``|d| < delta``, ``delta (|d| - delta / 2)`` elsewhere."""
    check_reduction(reduction)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    _warn_size(input, target)
    d = (input - target).abs()
    loss = where(d < delta, (d * d) * 0.5, (d - 0.5 * delta) * delta)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


# --- normalization -----------------------------------------------------------------------


def _normalize(x: TensorOps, axes: tuple, eps: float) -> TensorOps:
    """``(x - mean) / sqrt(var + eps)`` over ``axes`` with the biased variance."""
    mu = x.mean(axes, keepdim=True)
    d = x - mu
    var = (d * d).mean(axes, keepdim=True)
    return d * (var + eps).rsqrt()


def layer_norm(
    input: TensorOps,
    normalized_shape: Sequence[int],
    weight: Optional[TensorOps] = None,
    bias: Optional[TensorOps] = None,
    eps: float = 1e-5,
) -> TensorOps:
    """Normalize over the last ``len(normalized_shape)`` dims, then scale and shift."""
    if isinstance(normalized_shape, (int, np.integer)):
        normalized_shape = (int(normalized_shape),)
    ns = tuple(int(s) for s in normalized_shape)
    k = len(ns)
    if k == 0 or input.ndim < k or tuple(input.shape[input.ndim - k :]) != ns:
        raise RuntimeError(
            f"Given normalized_shape={list(ns)}, expected input with shape "
            f"[*, {', '.join(map(str, ns))}], but got input of size{list(input.shape)}"
        )
    fused = fused_layer_norm(input, ns, weight, bias, eps)
    if fused is not None:  # one node, a numpy gradient (eager/nn/_fused.py)
        return fused
    out = _normalize(input, tuple(range(input.ndim - k, input.ndim)), eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def _channel(t: TensorOps, ndim: int) -> TensorOps:
    """A (C,) tensor shaped (1, C, 1, ...) to broadcast over an (N, C, *) input."""
    return t.reshape(_class_shape(ndim, 1, t.shape[0])) if ndim > 1 else t


def batch_norm(
    input: TensorOps,
    running_mean: Any,
    running_var: Any,
    weight: Optional[TensorOps] = None,
    bias: Optional[TensorOps] = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> TensorOps:
    """Normalize each channel (dim 1) with the batch's statistics while training (and
    update the running ones in place, the variance unbiased), the running ones otherwise."""
    if input.ndim < 2:
        raise ValueError(f"expected 2D or higher input (got {input.ndim}D input)")
    axes = (0,) + tuple(range(2, input.ndim))
    n = math.prod(input.shape[a] for a in axes)
    if training:
        if n == 1:
            raise ValueError(
                "Expected more than 1 value per channel when training, got input size "
                f"{input.shape}"
            )
        mu = input.mean(axes, keepdim=True)
        d = input - mu
        var = (d * d).mean(axes, keepdim=True)
        out = d * (var + eps).rsqrt()
        if running_mean is not None or running_var is not None:
            m = momentum if isinstance(momentum, TensorOps) else float(momentum or 0.0)
            with no_grad():
                if running_mean is not None:
                    running_mean.mul_(1.0 - m).add_(mu.reshape(-1).detach() * m)
                if running_var is not None:
                    unbiased = var.reshape(-1).detach() * (n / max(n - 1, 1))
                    running_var.mul_(1.0 - m).add_(unbiased * m)
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("running_mean and running_var must be defined in evaluation mode")
        rm = _channel(running_mean, input.ndim)
        rv = _channel(running_var, input.ndim)
        out = (input - rm) * (rv + eps).rsqrt()
    if weight is not None:
        out = out * _channel(weight, input.ndim)
    if bias is not None:
        out = out + _channel(bias, input.ndim)
    return out


def group_norm(
    input: TensorOps,
    num_groups: int,
    weight: Optional[TensorOps] = None,
    bias: Optional[TensorOps] = None,
    eps: float = 1e-5,
) -> TensorOps:
    """Normalize each group of ``C / num_groups`` channels of every sample."""
    if input.ndim < 2:
        raise RuntimeError(
            f"Expected at least 2 dimensions for input tensor but received {input.ndim}"
        )
    shape = tuple(input.shape)
    c = shape[1]
    if num_groups <= 0 or c % num_groups:
        raise RuntimeError(
            "Expected number of channels in input to be divisible by num_groups, but got "
            f"input of shape {list(shape)} and num_groups={num_groups}"
        )
    x = input.reshape(shape[0], num_groups, -1) if math.prod(shape) else input
    out = _normalize(x, (2,), eps).reshape(shape) if math.prod(shape) else input * 1.0
    if weight is not None:
        out = out * _channel(weight, input.ndim)
    if bias is not None:
        out = out + _channel(bias, input.ndim)
    return out
