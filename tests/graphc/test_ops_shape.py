"""Joining, splitting and rearranging, compiled: graphc.compile (native at two opt levels
and the interpreter) == eager, graphc.grad / grad of grad == eager's tape, and writes into
results of ops that copy (flip, roll, repeat) never reach their input, as in eager."""
from __future__ import annotations

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import graphc

CONFIGS = ({}, {"opt_level": 0}, {"backend": "interpreter"})


def _r(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def _eager_run(fn, *arrays):
    ts = [eager.tensor(a.copy()) for a in arrays]
    out = fn(*ts)
    outs = out if isinstance(out, tuple) else (out,)
    return [np.asarray(o.detach().numpy()) for o in outs], [t.numpy() for t in ts]


def _same(fn, *arrays, configs=CONFIGS):
    want, want_args = _eager_run(fn, *arrays)
    for cfg in configs:
        args = [a.copy() for a in arrays]
        out = graphc.compile(fn, **cfg)(*args)
        got = [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]
        assert len(got) == len(want)
        for w, g in zip(want + want_args, got + args):
            assert g.shape == w.shape and g.dtype == w.dtype, (cfg, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-13, atol=0, err_msg=str(cfg))


def _grads_same(fn, *arrays):
    """graphc.grad (first order) and grad of grad (a Hessian-vector product) == eager."""
    n = len(arrays)
    loss = lambda *xs: (fn(*xs) ** 2).sum()  # noqa: E731
    ts = [eager.tensor(a, requires_grad=True) for a in arrays]
    gs = eager.autograd.grad(loss(*ts), ts, create_graph=True, allow_unused=True)
    gs = [eager.zeros_like(t) if g is None else g for g, t in zip(gs, ts)]
    v = [_r(*a.shape, seed=7 + i) for i, a in enumerate(arrays)]
    hv = eager.autograd.grad(
        sum((g * eager.tensor(w)).sum() for g, w in zip(gs, v) if g.requires_grad),
        ts,
        allow_unused=True,
    )
    got = graphc.grad(loss, argnums=tuple(range(n)))(*arrays)
    for g, w in zip(got, gs):
        np.testing.assert_allclose(np.asarray(g), w.detach().numpy(), rtol=1e-12, atol=1e-14)

    def hvp(*xs):
        g = graphc.grad(loss, argnums=tuple(range(n)))(*xs)
        return sum((gi * wi).sum() for gi, wi in zip(g, v))

    got2 = graphc.grad(hvp, argnums=tuple(range(n)))(*arrays)
    for g, w in zip(got2, hv):
        want = np.zeros_like(np.asarray(g)) if w is None else w.numpy()
        np.testing.assert_allclose(np.asarray(g), want, rtol=1e-12, atol=1e-14)


CASES = {
    "cat": lambda a, b: eager.cat([a, b * 2, a[:1]], 0),
    "cat_dim1_strided": lambda a, b: eager.cat([a.t(), b.t()[:, ::2], a.t().flip(1)], 1),
    "cat_promotes": lambda a, b: eager.cat([a, (b > 0).to(eager.int64)], 1),
    "cat_legacy_empty": lambda a, b: eager.cat([a[:0, 0], a, b], 0),
    "stack": lambda a, b: eager.stack([a, b.exp()], 1),
    "dstack_column_stack": lambda a, b: eager.dstack([a, b])[..., 1] + eager.column_stack([a[:, 0], b[:, 1:]]),
    "hstack_vstack": lambda a, b: eager.hstack([a, b]) + eager.vstack([a, b]).reshape(3, 8),
    "split": lambda a, b: a.split(3, 1)[1] * 2 + b.split([1, 2, 1], 1)[2],
    "chunk": lambda a, b: eager.cat(a.chunk(3, 1)[::-1], 1) * b,
    "tensor_split": lambda a, b: a.tensor_split([1, 3], 1)[1] + b[:, :2],
    "narrow_select": lambda a, b: a.narrow(1, 1, 2).sum(1) * b.select(1, -1),
    "movedim": lambda a, b: a.unsqueeze(0).movedim((0, 2), (2, 0)) * 3,
    "flip": lambda a, b: a.flip(0, 1) * b + a.fliplr(),
    "flip_of_transposed": lambda a, b: a.t().flip(0) * b.t(),
    "roll": lambda a, b: a.roll(3) + b.roll((-1, 2), (0, 1)),
    "roll_full_turn": lambda a, b: a.roll(4, 1) * b,
    "tril_triu": lambda a, b: a.tril(-1) + b.triu(2) + a.unsqueeze(0).tril(1)[0],
    "repeat": lambda a, b: a.repeat(2, 1, 2) * 2,
    "tile": lambda a, b: a.tile(2) + b.tile((1, 2)),
    "repeat_interleave": lambda a, b: a.repeat_interleave(2, 1) + b.repeat_interleave(2).reshape(3, 8),
    "repeat_interleave_tensor": lambda a, b: a.repeat_interleave(eager.tensor([2, 0, 1, 1]), 1) * b,
    "unflatten_squeeze": lambda a, b: a.unflatten(1, (2, -1)).squeeze((-1, 0)) * 2 + b[:, :2, None],
    "pad_constant": lambda a, b: F.pad(a, (1, 2, 0, 1), value=0.5) * 2,
    "pad_crop": lambda a, b: F.pad(a, (-1, 2, 1, -1)) + 1,
    "pad_reflect": lambda a, b: F.pad(a.unsqueeze(0), (2, 3), mode="reflect")[0] * b[:, :1],
    "pad_replicate": lambda a, b: F.pad(a.unsqueeze(0), (1, 2, 2, 1), mode="replicate") * 3,
    "pad_circular": lambda a, b: F.pad(a.unsqueeze(0), (1, 3), mode="circular") * 3,
    "flatten_layers": lambda a, b: nn.Unflatten(1, (2, 2))(nn.Flatten(0)(a).reshape(3, 4)) * nn.Identity()(b)[:, :2, None],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_matches_eager(name):
    _same(CASES[name], _r(3, 4, seed=1), _r(3, 4, seed=2))


@pytest.mark.parametrize("name", sorted(n for n in CASES if n != "cat_promotes"))
def test_gradients_match_eager_to_second_order(name):
    _grads_same(CASES[name], _r(3, 4, seed=1), _r(3, 4, seed=2))


@pytest.mark.parametrize("op", [
    lambda b: b.flip(0),
    lambda b: b.flip(0, 1),
    lambda b: b.roll(1, 0),
    lambda b: b.roll(0, 0),
    lambda b: b.repeat(1, 1),
    lambda b: b.repeat_interleave(1, 0),
    lambda b: b.tile(1),
    lambda b: eager.cat([b], 0),
    lambda b: b.tril(5),
])
def test_writes_into_copying_results_do_not_reach_the_input(op):
    def f(a):
        b = a * 1
        y = op(b)
        y.add_(100.0)
        return b, y

    _same(f, _r(3, 4))


@pytest.mark.parametrize("op", [
    lambda b: b.narrow(1, 1, 2),
    lambda b: b.select(0, 1),
    lambda b: b.split(2, 1)[1],
    lambda b: b.chunk(2)[0],
    lambda b: b.movedim(0, 1),
    lambda b: b.unflatten(1, (2, 2)),
])
def test_writes_into_views_reach_the_base(op):
    def f(a):
        b = a * 1
        op(b).mul_(10.0)
        return b

    _same(f, _r(3, 4))


def test_cat_of_many_operands_and_empty():
    def f(a):
        return eager.cat([a[i : i + 1] * i for i in range(3)] + [a[:0]], 0)

    _same(f, _r(3, 4))
    _same(lambda a: eager.cat([a.reshape(-1)[:0], a.reshape(-1)[:0]], 0), _r(3, 4))


def test_cat_ir_node_and_json_round_trip():
    f = lambda a, b: eager.cat([a, b], 1)  # noqa: E731
    g = graphc.trace(f, np.zeros((2, 3)), np.zeros((2, 1)))
    text = str(g)
    assert "cat(" in text and "dim=1" in text
    g2 = graphc.Graph.from_json(g.to_json())
    a, b = _r(2, 3), _r(2, 1)
    np.testing.assert_array_equal(graphc.interpret(g2, a, b)[0], np.concatenate([a, b], 1))


def test_traced_repeats_tensor_is_refused_clearly():
    def f(a, r):
        return a.repeat_interleave(r, 0)

    with pytest.raises(Exception, match="repeat_interleave: a traced tensor of repeats"):
        graphc.compile(f)(_r(3, 4), np.array([1, 2, 0]))


def test_int_and_bool_cat_compiled():
    f = lambda a: eager.cat([(a > 0), (a < -1)], 0)  # noqa: E731
    _same(f, _r(3, 4))
    g = lambda a: eager.cat([a.to(eager.int32), (a * 10).to(eager.int64)], 1)  # noqa: E731
    _same(g, _r(3, 4))
