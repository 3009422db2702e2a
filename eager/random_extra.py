"""Random functions built on the factories' draws: ``randperm`` and ``multinomial``.

Eagerly they draw from numpy (the global stream, or a ``torch.Generator``'s).  Inside
a compiled function they are composites of traced uniform draws (``philox`` nodes), so
each call draws anew: ``randperm`` is the argsort of n uniforms and ``multinomial`` the
Gumbel-max trick (with replacement: the argmax of ``log p + Gumbel`` noise per sample;
without: the top-k of one noise draw, distributed as sequential sampling without
replacement).  The numbers differ from PyTorch's (and eager's from compiled code's).
"""

from __future__ import annotations

import builtins

import numpy as np

import eager._dtype as D
import eager.factories as FA
from .tensor import Tensor


def randperm(
    n: int, *, generator=None, dtype=None, device=None, requires_grad=False, **_kw
) -> Tensor:
    """A random permutation of ``0 .. n-1`` (int64 by default)."""
    n = builtins.int(n)
    if n < 0:
        raise RuntimeError(f"n must be non-negative, got{n}")
    npd = FA._dt(dtype, np.dtype(np.int64))
    if FA.TRACING.tracer is not None:
        FA._rng(generator, "randperm")
        return FA.rand(n, dtype=D.float64).argsort().to(D.from_np(npd))
    perm = FA._rng(generator, "randperm").permutation(n).astype(npd)
    return FA._finish(perm, requires_grad, device)


_LAST = 1e30  # below every log weight plus Gumbel noise: zero weights come last


def _check_values(p: np.ndarray, num_samples: int, replacement: bool) -> None:
    if not np.isfinite(p).all() or (p < 0).any():
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    if (p.sum(-1) <= 0).any():
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")


def multinomial(input, num_samples: int, replacement: bool = False, *, generator=None, out=None):
    """``num_samples`` category indices per row of ``input``'s (unnormalized) weights."""
    if out is not None:
        raise NotImplementedError("multinomial: out= is not supported by eager")
    if input.dim() not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not input.is_floating_point():
        raise RuntimeError(
            f"multinomial only supports floating-point dtypes for input, got: {input.dtype}"
        )
    num_samples = builtins.int(num_samples)
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    n = input.shape[-1]
    if not replacement and num_samples > n:
        raise RuntimeError(
            "cannot sample n_sample > prob_dist.size(-1) samples without replacement"
        )
    p = input.detach()
    p2 = p if p.dim() == 2 else p.unsqueeze(0)
    rows = p2.shape[0]
    if FA.TRACING.tracer is not None:
        FA._rng(generator, "multinomial")
        logp = p2.double().log()
        if replacement:
            u = FA.rand((rows, num_samples, n), dtype=D.float64)
            idx = (logp.unsqueeze(1) - (-u.log()).log()).argmax(-1)
        else:
            u = FA.rand((rows, n), dtype=D.float64)
            gumbel = -(-u.log()).log()
            # zero weights last, in random order (PyTorch's CPU kernel picks them then)
            keys = (logp + gumbel).where(p2 > 0, gumbel - _LAST)
            idx = keys.topk(num_samples, dim=-1).indices
        return idx if p.dim() == 2 else idx.squeeze(0)
    arr = np.asarray(p2.numpy(), dtype=np.float64)
    _check_values(arr, num_samples, replacement)
    g = FA._rng(generator, "multinomial")
    res = np.empty((rows, num_samples), np.int64)
    for r in range(rows):
        if replacement:
            res[r] = g.choice(n, size=num_samples, p=arr[r] / arr[r].sum())
        else:  # Gumbel top-k, zero weights last in random order (as compiled)
            gumbel = -np.log(-np.log(g.random(n)))
            with np.errstate(divide="ignore"):
                keys = np.where(arr[r] > 0, np.log(arr[r]) + gumbel, gumbel - _LAST)
            res[r] = np.argsort(-keys, kind="stable")[:num_samples]
    return FA._finish(res if p.dim() == 2 else res[0], False)


def normal(mean, std=1.0, size=None, *, generator=None, dtype=None, requires_grad=False, **_kw):
    """Draws from N(mean, std**2): tensor ``mean``/``std`` broadcast elementwise, or
    numbers with a ``size``."""
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        if size is not None:
            raise RuntimeError("normal: size is only allowed when mean and std are numbers")
        like = mean if isinstance(mean, Tensor) else std
        shape = like.shape
        if isinstance(mean, Tensor) and isinstance(std, Tensor):
            shape = np.broadcast_shapes(tuple(mean.shape), tuple(std.shape))
        z = FA.randn(tuple(shape), dtype=like.dtype, generator=generator)
        return (z * std + mean).detach()
    if size is None:
        raise TypeError("normal() missing the size argument (mean and std are numbers)")
    z = FA.randn(tuple(size), dtype=dtype, generator=generator)
    out = z * float(std) + float(mean)
    return out.requires_grad_() if requires_grad else out


def randint_like(input, low, high=None, *, dtype=None, generator=None, **_kw) -> Tensor:
    """``randint`` in ``input``'s shape (and dtype, unless ``dtype`` is given)."""
    if high is None:
        low, high = 0, low
    t = FA.randint(low, high, tuple(input.shape), generator=generator)
    return t.to(dtype if dtype is not None else input.dtype)
