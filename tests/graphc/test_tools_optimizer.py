"""Tools built on traces, given a training step with an ``eager.optim`` optimizer inside:
graphc.compare snapshots and restores the model and optimizer between its runs (and
compares the updated parameters and optimizer state), bisect_passes checks the state
outputs too and changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

import eager
import graphc
from graphc.tools.bisect import bisect_passes
from tests.graphc._steps import assert_same_snapshot, make_optimizer, snapshot, train_step


def _setup(kind="adam"):
    eager.manual_seed(0)
    m = eager.nn.Linear(3, 2)
    opt = make_optimizer(kind, m.parameters())
    x = eager.tensor(np.random.RandomState(0).randn(4, 3).astype(np.float32))
    y = eager.tensor(np.zeros((4, 2), np.float32))
    return m, opt, x, y, train_step(m, opt)


@pytest.mark.parametrize("kind", ["adam", "sgd"])
@pytest.mark.parametrize("stepped", [False, True])
@pytest.mark.parametrize("grads", [True, False])
def test_compare_training_step_with_optimizer(kind, stepped, grads):
    m, opt, x, y, step = _setup(kind)
    if stepped:  # the optimizer has state already
        step(x, y)
    before = snapshot(m, opt)
    # what one step from here gives, eagerly (to check compare compared from here)
    r = graphc.compare(step, x, y, grads=grads, budget=0.01, repeat=2)
    assert_same_snapshot(before, snapshot(m, opt))  # compare left the model and optimizer as they were
    assert r.mode == "training step"
    assert r.compiled_error is None, r.compiled_error
    assert r.all_agree, str(r)
    names = [row["name"] for row in r.agreement]
    assert "m.weight (updated)" in names and "m.bias (updated)" in names
    key = "exp_avg_sq" if kind == "adam" else "momentum_buffer"
    assert f"opt.state[m.weight][{key!r}]" in names
    # the loss compare reports is the loss of one step from the state it found
    loss = step(x, y).item()
    assert "output" in names
    assert np.isfinite(loss)
    assert any("training step" in n for n in r.notes)


def test_compare_catches_a_compiled_step_that_starts_elsewhere():
    """Each run starts from the snapshot: eager's and compiled's first steps see the same
    weights, so their updated weights agree exactly-ish (not after eager's timed steps)."""
    m, opt, x, y, step = _setup("sgd")
    r = graphc.compare(step, x, y, grads=False, budget=0.01, repeat=3)
    rows = {row["name"]: row for row in r.agreement}
    assert rows["m.weight (updated)"]["ok"]
    assert rows["m.weight (updated)"]["compiled_abs"] < 1e-6


@pytest.mark.parametrize("stepped", [False, True])
def test_bisect_step_with_optimizer_changes_nothing(stepped):
    m, opt, x, y, step = _setup("adam")
    if stepped:
        step(x, y)
    before = snapshot(m, opt)
    rep = bisect_passes(step, x, y, native=False)
    assert rep.ok
    assert_same_snapshot(before, snapshot(m, opt))


def test_compare_forward_that_updates_a_buffer_is_not_a_step():
    """A forward that updates a tensor it reads by name (a counter, running statistics)
    without backward() is still compared as value and gradients, and the tensor and the
    .grad eager's backward set are restored afterwards."""
    count = eager.zeros(())
    w = eager.tensor(np.array([1.0, -2.0, 3.0], np.float32), requires_grad=True)

    def f(x):
        with eager.no_grad():
            count.add_(1.0)
        return (x * w).tanh().sum()

    x = np.random.RandomState(1).randn(3).astype(np.float32)
    r = graphc.compare(f, x, budget=0.01, repeat=2)
    assert r.mode == "value and gradients"
    assert r.compiled_error is None, r.compiled_error
    assert r.all_agree, str(r)
    assert count.item() == 0.0
    assert w.grad is None
