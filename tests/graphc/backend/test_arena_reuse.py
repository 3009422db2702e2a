"""The memory plan's slot reuse (docs/backend.md, "Memory plan"): a value stored over the
slot of an operand its kernel reads last and only at the element it writes
(``plan.reuse``), freed blocks merged and taken best-fit, and the by-size repacking.
Checked bit for bit with freed arena bytes poisoned (``poison_freed=True``) on the real
models' whole training steps (W6-W8's models, smaller batches) and against eager."""

from __future__ import annotations

import numpy as np
import pytest

import eager
import graphc
from graphc.backend.schedule import Schedule
from graphc.tools.models import build

from tests.graphc._steps import plan_of, train_step, w6_data

from .test_fusion_memory import arena_overlaps_are_never_live_together, assert_matches_interpreter


def _steps(make, make_opt, loss, batch, poison, n=3):
    """n whole training steps compiled (poisoned or not) and eagerly, from one seed:
    (compiled losses, eager losses, compiled params, eager params, plan)."""
    M = build()
    out = []
    for compiled in (True, False):
        eager.manual_seed(0)
        m = make(M)
        opt = make_opt(m)
        step = train_step(m, opt, getattr(M, loss))
        run = graphc.compile(step, poison_freed=poison, disk_cache=False) if compiled else step
        losses = [float(run(*batch)) for _ in range(n)]
        params = [p.detach().numpy().copy() for p in m.parameters()]
        plan = plan_of(run, *batch) if compiled else None
        out.append((losses, params, plan))
    (cl, cp, plan), (el, ep, _) = out
    return cl, el, cp, ep, plan


def _w6():
    x, y = w6_data()
    return (lambda M: M.Classifier(64, 128, 10),
            lambda m: eager.optim.Adam(m.parameters(), lr=1e-3), "class_loss", (x, y))


def _w7():
    rng = np.random.default_rng(7)
    x = eager.tensor(rng.random((4, 1, 28, 28), dtype=np.float32))
    y = eager.tensor(rng.integers(0, 10, size=4))
    return (lambda M: M.LeNet(),
            lambda m: eager.optim.SGD(m.parameters(), lr=0.01, momentum=0.9), "class_loss",
            (x, y))


def _w8():
    rng = np.random.default_rng(8)
    tokens = rng.integers(0, 128, size=(2, 65))
    return (lambda M: M.AttentionBlock(),
            lambda m: eager.optim.Adam(m.parameters(), lr=1e-3), "token_loss",
            (eager.tensor(tokens[:, :-1].copy()), eager.tensor(tokens[:, 1:].copy())))


@pytest.mark.parametrize("workload", [_w6, _w7, _w8], ids=["W6", "W7", "W8"])
def test_model_steps_are_bit_identical_with_poisoning_and_match_eager(workload, monkeypatch):
    make, make_opt, loss, batch = workload()
    cl, el, cp, ep, plan = _steps(make, make_opt, loss, batch, poison=True)
    cl0, _, cp0, _, plan0 = _steps(make, make_opt, loss, batch, poison=False)
    assert cl == cl0                                            # bit for bit
    for a, b in zip(cp, cp0):
        np.testing.assert_array_equal(a, b)
    # the same numbers as without slot reuse and repacking (the plan before issue 17)
    with monkeypatch.context() as mp:
        mp.setattr(Schedule, "_reusable", lambda *a: None)
        mp.setattr(Schedule, "_repack_by_size", lambda self, top: top)
        cl1, _, cp1, _, plan1 = _steps(make, make_opt, loss, batch, poison=True)
    assert not plan1.reuse and plan1.arena_bytes >= plan0.arena_bytes
    assert cl1 == cl0
    for a, b in zip(cp1, cp0):
        np.testing.assert_array_equal(a, b)
    # and eager's, to float32 rounding (Adam divides by sqrt(v): a tiny gradient's
    # rounding moves its parameter by up to ~lr * 1e-2)
    np.testing.assert_allclose(cl, el, rtol=1e-4, atol=1e-5)
    for a, b in zip(cp, ep):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)
    assert plan.poison_after
    assert plan0.arena_bytes == plan.arena_bytes
    arena_overlaps_are_never_live_together(plan0)
    p = plan0.peak(3)
    assert p["live_bytes"] <= p["arena_bytes"] and len(p["buffers"]) <= 3
    assert p["buffers"][0]["bytes"] >= p["buffers"][-1]["bytes"]


def test_relu_of_a_product_is_stored_over_it_and_its_gradient_over_the_incoming_one():
    def f(x, w, v):
        h = (x @ w).relu()
        return ((h @ v) ** 2).sum()

    rng = np.random.default_rng(3)
    args = (rng.standard_normal((32, 16)), rng.standard_normal((16, 24)),
            rng.standard_normal((24, 4)))
    vg = graphc.value_and_grad(f, argnums=(1, 2))
    cf = graphc.compile(vg, poison_freed=True)
    got = cf(*args)
    plain = graphc.compile(vg)(*args)
    np.testing.assert_array_equal(got[0], plain[0])
    for a, b in zip(got[1], plain[1]):
        np.testing.assert_array_equal(a, b)
    x, w, v = args
    pre = x @ w
    h = np.maximum(pre, 0)
    d = 2 * (h @ v)
    np.testing.assert_allclose(got[1][1], h.T @ d, rtol=1e-12)
    np.testing.assert_allclose(got[1][0], x.T @ ((d @ v.T) * (pre > 0)), rtol=1e-12)
    plan = plan_of(cf, *args)
    g = plan.g
    ops = {g.nx.nodes[b]["op"] for b in plan.reuse}
    assert "relu" in ops                                        # relu over x @ w
    arena_overlaps_are_never_live_together(plan)
    text = cf.memory(*args, top=2)
    assert text.startswith("arena ") and "peak at k" in text and len(text.splitlines()) == 3


def test_no_reuse_when_the_operand_is_read_at_another_element():
    def f(x):
        a = x.exp()                      # materialized: read transposed below
        return (a + a.T).sin() * 2.0     # stored over a would clobber a.T's reads

    x = np.random.default_rng(4).standard_normal((24, 24))
    cf = graphc.compile(f, poison_freed=True)
    np.testing.assert_allclose(cf(x), np.sin(np.exp(x) + np.exp(x).T) * 2.0, rtol=1e-12)
    plan = plan_of(cf, x)
    exps = [n for n in plan.g.node_ids() if plan.g.nx.nodes[n]["op"] == "exp"]
    assert exps and all(n in plan.views for n in exps)       # a materialized buffer
    assert not set(exps) & set(plan.reuse.values())          # nobody stored over it
    assert_matches_interpreter(cf, (x,), rtol=1e-12)


def test_no_reuse_of_a_broadcast_operand():
    def f(x, y):
        r = x.exp().sum(dim=1, keepdim=True)   # (n, 1), read broadcast over (n, m)
        return (y * r).tanh()

    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((8, 1)), rng.standard_normal((8, 6))
    cf = graphc.compile(f, poison_freed=True)
    np.testing.assert_allclose(cf(x, y), np.tanh(y * np.exp(x).sum(1, keepdims=True)),
                               rtol=1e-12)
    plan = plan_of(cf, x, y)
    for b, donor in plan.reuse.items():
        assert tuple(plan.g.nx.nodes[b]["shape"]) == tuple(plan.g.nx.nodes[donor]["shape"])


def test_no_reuse_across_element_sizes():
    """A float64 value over a float32 operand of the same 64-byte block would overwrite
    operand elements 2i and 2i+1 while storing element i, before they are loaded."""

    def f(x, w, v):
        a = x @ w                                    # float32 (2, 4): 32 bytes
        b = a.to(eager.float64) * 1.5                # float64 (2, 4): 64 bytes
        return b @ v

    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    w = rng.standard_normal((4, 4)).astype(np.float32)
    v = rng.standard_normal((4, 3))
    cf = graphc.compile(f, poison_freed=True)
    want = (x @ w).astype(np.float64) * 1.5 @ v
    np.testing.assert_allclose(cf(x, w, v), want, rtol=1e-6)
    plan = plan_of(cf, x, w, v)
    for b, donor in plan.reuse.items():
        assert plan.dtype(b).itemsize == plan.dtype(donor).itemsize
    arena_overlaps_are_never_live_together(plan)
