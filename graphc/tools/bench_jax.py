"""JAX columns of the real-model benchmarks W6-W9 (docs/benchmarks.md), imported only
when JAX is importable (JAX is never a dependency).

Each workload's step is written here with plain ``jax.numpy`` and ``jax.lax`` (no
flax or optax): the model's forward, the cross-entropy, and the optimizer update
(PyTorch's Adam, or SGD with momentum), functionally, in one step function
``step(params, opt_state, batch) -> (params, opt_state, loss)`` that the benchmark
wraps in ``jax.jit``.  ``params`` is a dict from the eager model's parameter names
(``model.named_parameters()``) to arrays, so the JAX step starts from the eager
model's very weights and its losses can be checked against eager's before anything
is timed (:func:`check_losses`).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np


def params_from(model: Any) -> dict:
    """The eager ``model``'s parameters as a dict name -> float32 numpy array (copies)."""
    return {k: np.array(p.detach().numpy(), dtype=np.float32) for k, p in model.named_parameters()}


# ---------------------------------------------------------------------------
# building blocks (each takes the jax module, so importing this file needs no JAX)


def _linear(jnp, p: dict, name: str, x):
    return x @ p[name + ".weight"].T + p[name + ".bias"]


def _cross_entropy(jax, logits, labels):
    """Mean cross-entropy of ``logits`` (n, classes) against integer ``labels`` (n,)."""
    jnp = jax.numpy
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


def _layer_norm(jnp, p: dict, name: str, x, eps: float = 1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * p[name + ".weight"] + p[name + ".bias"]


def _gelu(jax, x):
    """PyTorch's default (exact, erf) GELU; ``jax.nn.gelu`` defaults to the tanh form."""
    return 0.5 * x * (1.0 + jax.lax.erf(x * (1.0 / math.sqrt(2.0))))


def _maxpool2(jax, x):
    return jax.lax.reduce_window(
        x, -jax.numpy.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID"
    )


def _conv(jax, p: dict, name: str, x):
    y = jax.lax.conv_general_dilated(
        x, p[name + ".weight"], (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW")
    )
    return y + p[name + ".bias"][None, :, None, None]


# ---------------------------------------------------------------------------
# the models' losses: (params, batch) -> scalar


def classifier_loss(jax) -> Callable:
    """W6's loss: flatten, linear 64->128, ReLU, linear 128->10, cross-entropy."""
    jnp = jax.numpy

    def loss(p, batch):
        x, labels = batch
        h = jnp.maximum(_linear(jnp, p, "net.1", x.reshape(x.shape[0], -1)), 0)
        return _cross_entropy(jax, _linear(jnp, p, "net.3", h), labels)

    return loss


def lenet_loss(jax) -> Callable:
    """W7's loss: conv 3x3 + ReLU + max-pool 2, twice, flatten, linear, cross-entropy."""
    jnp = jax.numpy

    def loss(p, batch):
        x, labels = batch
        h = _maxpool2(jax, jnp.maximum(_conv(jax, p, "net.0", x), 0))
        h = _maxpool2(jax, jnp.maximum(_conv(jax, p, "net.3", h), 0))
        return _cross_entropy(jax, _linear(jnp, p, "net.7", h.reshape(h.shape[0], -1)), labels)

    return loss


def attention_loss(jax, heads: int = 4) -> Callable:
    """W8's loss: the pre-norm causal attention block of ``models.AttentionBlock`` and
    next-token cross-entropy over every position."""
    jnp = jax.numpy

    def loss(p, batch):
        tokens, targets = batch
        b, t = tokens.shape
        x = p["embed.weight"][tokens] + p["pos"][:t]
        w = x.shape[-1]
        d = w // heads
        qkv = _linear(jnp, p, "qkv", _layer_norm(jnp, p, "ln1", x))
        q, k, v = (
            qkv[..., i * w : (i + 1) * w].reshape(b, t, heads, d).transpose(0, 2, 1, 3)
            for i in range(3)
        )
        att = (q @ k.transpose(0, 1, 3, 2)) * d**-0.5
        causal = jnp.triu(jnp.ones((t, t), bool), k=1)
        att = jax.nn.softmax(jnp.where(causal, -jnp.inf, att), axis=-1)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(b, t, w)
        x = x + _linear(jnp, p, "proj", y)
        h = _gelu(jax, _linear(jnp, p, "mlp.0", _layer_norm(jnp, p, "ln2", x)))
        x = x + _linear(jnp, p, "mlp.2", h)
        logits = _linear(jnp, p, "head", x)
        return _cross_entropy(jax, logits.reshape(b * t, -1), targets.reshape(-1))

    return loss


def rnn_loss(jax) -> Callable:
    """W9's loss (``bench_models.rnn_loss``) with ``jax.lax.scan``:
    ``(Wx, Wh, b, xs, h0) -> mean(hs**2)``."""
    jnp = jax.numpy

    def loss(Wx, Wh, b, xs, h0):
        def step(h, x):
            h = jnp.tanh(x @ Wx + h @ Wh + b)
            return h, h

        _, hs = jax.lax.scan(step, h0, xs)
        return (hs * hs).mean()

    return loss


# ---------------------------------------------------------------------------
# optimizers, functionally (PyTorch's update rules, no weight decay)


def adam(jax, lr: float = 1e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
    """``(init, update)`` of PyTorch's Adam: ``init(params) -> state``,
    ``update(params, grads, state) -> (params, state)``; the step count lives in the
    state as an array, so a jitted step does not retrace."""
    jnp = jax.numpy
    tree = jax.tree_util

    def init(params):
        zeros = tree.tree_map(jnp.zeros_like, params)
        return {"t": jnp.zeros((), jnp.float32), "m": zeros, "v": zeros}

    def update(params, grads, state):
        t = state["t"] + 1
        m = tree.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state["m"], grads)
        v = tree.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, state["v"], grads)
        step_size = lr / (1 - b1**t)
        root_bc2 = jnp.sqrt(1 - b2**t)
        params = tree.tree_map(
            lambda p, m, v: p - step_size * m / (jnp.sqrt(v) / root_bc2 + eps), params, m, v
        )
        return params, {"t": t, "m": m, "v": v}

    return init, update


def sgd_momentum(jax, lr: float = 0.01, momentum: float = 0.9):
    """``(init, update)`` of PyTorch's SGD with momentum (no dampening): the buffer is
    ``momentum * buf + g`` (``g`` on the first step, which a zero buffer gives too)."""
    tree = jax.tree_util

    def init(params):
        return tree.tree_map(jax.numpy.zeros_like, params)

    def update(params, grads, bufs):
        bufs = tree.tree_map(lambda b, g: momentum * b + g, bufs, grads)
        return tree.tree_map(lambda p, b: p - lr * b, params, bufs), bufs

    return init, update


def make_step(jax, loss: Callable, update: Callable) -> Callable:
    """The (unjitted) training step ``(params, opt_state, batch) -> (params, opt_state,
    loss)``: value and gradient of ``loss(params, batch)``, then ``update``."""

    def step(params, opt_state, batch):
        value, grads = jax.value_and_grad(loss)(params, batch)
        params, opt_state = update(params, grads, opt_state)
        return params, opt_state, value

    return step


STEPS = {
    "W6": (classifier_loss, lambda jax: adam(jax, lr=1e-3)),
    "W7": (lenet_loss, lambda jax: sgd_momentum(jax, lr=0.01, momentum=0.9)),
    "W8": (attention_loss, lambda jax: adam(jax, lr=1e-3)),
}


def build_step(jax, wid: str, params: dict) -> tuple:
    """``(jitted step, params, opt_state)`` of workload ``wid`` ("W6", "W7" or "W8"),
    starting from ``params`` (name -> array, e.g. :func:`params_from` of the eager
    model); a fresh ``jax.jit``, so its first call compiles."""
    make_loss, make_opt = STEPS[wid]
    init, update = make_opt(jax)
    jparams = {k: jax.numpy.asarray(v) for k, v in params.items()}
    step = jax.jit(make_step(jax, make_loss(jax), update))
    return step, jparams, init(jparams)


def check_losses(wid: str, jax_losses: list, eager_losses: list, rtol: float = 1e-4) -> None:
    """Raise AssertionError unless the JAX step's losses equal eager's step by step
    (float32 rounding)."""
    for i, (lj, le) in enumerate(zip(jax_losses, eager_losses)):
        if not np.isclose(lj, le, rtol=rtol, atol=1e-5):
            raise AssertionError(f"{wid}: JAX loss {lj} != eager loss {le} at step {i + 1}")
    if len(jax_losses) != len(eager_losses):
        raise AssertionError(f"{wid}: {len(jax_losses)} JAX losses vs {len(eager_losses)}")
