"""Helpers the training-step tests share (not collected: the name starts with "_").

Imported as ``from tests.graphc._steps import ...``, as tests.parity's helpers are:

* :func:`make_optimizer` and :func:`train_step`: an ``eager.optim`` optimizer by kind, and
  the step a training loop runs (``zero_grad``, the loss, ``backward``, ``step``);
* :func:`w6_data`: the batch of the W6 benchmark (the classifier on 8x8 images);
* :func:`snapshot` / :func:`assert_same_snapshot`: copies of a model's parameters, their
  ``.grad`` and its optimizer's state, keyed by name, compared bitwise;
* :func:`plan_of`, :func:`flat_outputs`, :func:`same_bits`: a compiled function's memory
  plan and its outputs compared bit for bit (the remat and memory-plan tests).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

import eager


def make_optimizer(kind: str, params: Any):
    """``adam`` (lr 1e-2), ``adamw`` (lr 1e-2, weight decay 0.1) or ``sgd`` (lr 0.1,
    momentum 0.9) over ``params``."""
    if kind == "adam":
        return eager.optim.Adam(params, lr=1e-2)
    if kind == "adamw":
        return eager.optim.AdamW(params, lr=1e-2, weight_decay=0.1)
    return eager.optim.SGD(params, lr=0.1, momentum=0.9)


def mse_loss(m: Any, x: Any, y: Any):
    """``((m(x) - y) ** 2).mean()``."""
    return ((m(x) - y) ** 2).mean()


def train_step(m: Any, opt: Any, loss_fn: Callable = mse_loss) -> Callable:
    """``step(x, y)``: ``opt.zero_grad()``, ``loss_fn(m, x, y)``, ``backward()``,
    ``opt.step()``; returns the loss.  (The argument names are the graph's input names:
    an ONNX export's ``x`` and ``y``.)"""

    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(m, x, y)
        loss.backward()
        opt.step()
        return loss

    return step


def w6_data(seed: int = 6, n: int = 32) -> tuple:
    """W6's batch: ``n`` float32 8x8 images and their int64 labels in [0, 10)."""
    rng = np.random.default_rng(seed)
    x = eager.tensor(rng.random((n, 1, 8, 8), dtype=np.float32))
    y = eager.tensor(rng.integers(0, 10, size=n))
    return x, y


def snapshot(m: Any, opt: Any, grads: bool = True) -> dict:
    """Copies of ``m``'s parameters (key: name), of their ``.grad`` (``name.grad``, None
    when unset; left out with ``grads=False``) and of ``opt``'s state (``name.key``)."""
    out = {n: p.detach().numpy().copy() for n, p in m.named_parameters()}
    if grads:
        out.update(
            {
                f"{n}.grad": None if p.grad is None else p.grad.numpy().copy()
                for n, p in m.named_parameters()
            }
        )
    for n, p in m.named_parameters():
        for k, v in opt.state.get(p, {}).items():
            out[f"{n}.{k}"] = np.array(v.detach().numpy())
    return out


def assert_same_snapshot(a: dict, b: dict) -> None:
    """The same keys and, key by key, both None or bitwise-equal arrays."""
    assert sorted(a) == sorted(b)
    for k in a:
        if a[k] is None or b[k] is None:
            assert a[k] is None and b[k] is None, k
        else:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def plan_of(cf: Any, *args: Any):
    """The memory plan (graphc.backend.schedule.Schedule) of ``cf``'s native code for
    these arguments."""
    return cf._native(args).plan


def flat_outputs(out: Any) -> list:
    """A result (an array, or a tuple/list of arrays and of tuples/lists of them) as a flat
    list of numpy arrays."""
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    flat = []
    for v in out:
        flat.extend(v if isinstance(v, (tuple, list)) else [v])
    return [np.asarray(v) for v in flat]


def same_bits(a: list, b: list) -> None:
    """Two lists of arrays with the same dtypes, shapes and bytes."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x.reshape(-1).view(np.uint8), y.reshape(-1).view(np.uint8))
