"""A compiled bound method reads what its object holds by name: ``graphc.compile(
trainer.train_step)`` of a user's class whose ``self.model`` / ``self.opt`` are a module
and an optimizer, and ``graphc.compile(opt.step)``.  Before, both were refused (the
optimizer was not among what the function reads), and ``opt.step`` on gradients made
outside failed with an invalid graph (tests/graphc/test_compiled_optimizer.py)."""

import copy

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import graphc


class Trainer:
    def __init__(self, model, opt_cls, **kw):
        self.model = model
        self.opt = opt_cls(model.parameters(), **kw)
        self.scale = 1.0

    def train_step(self, x, y):
        self.opt.zero_grad()
        loss = F.cross_entropy(self.model(x), y) * self.scale
        loss.backward()
        self.opt.step()
        return loss


def _model(seed=0):
    eager.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))


def _data(seed=0):
    rng = np.random.default_rng(seed)
    x = eager.tensor(rng.standard_normal((6, 5)).astype(np.float32))
    return x, eager.tensor(rng.integers(0, 3, size=6))


def _close(a, b):
    for p, q in zip(a.parameters(), b.parameters()):
        np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize(
    "opt_cls,kw",
    [(eager.optim.SGD, dict(lr=0.1, momentum=0.9)), (eager.optim.Adam, dict(lr=1e-2))],
    ids=["sgd-momentum", "adam"],
)
def test_trainer_method_compiled_matches_eager(opt_cls, kw):
    m = _model()
    te, tc = Trainer(m, opt_cls, **kw), Trainer(copy.deepcopy(m), opt_cls, **kw)
    step = graphc.compile(tc.train_step)
    x, y = _data()
    for _ in range(4):
        np.testing.assert_allclose(step(x, y).item(), te.train_step(x, y).item(), rtol=2e-5)
    _close(te.model, tc.model)
    assert step.cache_info().entries == 1  # (the first step's trace is replaced)


def test_trainer_attributes_are_read_at_every_call():
    """A module rebound on the object between calls is what the next call uses (it is
    read through the object's attribute dict, as a global through its module's)."""
    t = Trainer(_model(0), eager.optim.SGD, lr=0.1)
    step = graphc.compile(t.train_step)
    x, y = _data()
    step(x, y)
    other = _model(1)
    t.model, t.opt = other, eager.optim.SGD(other.parameters(), lr=0.1)
    ref = copy.deepcopy(other)
    ref_opt = eager.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(2):
        got = step(x, y)
        ref_opt.zero_grad()
        want = F.cross_entropy(ref(x), y)
        want.backward()
        ref_opt.step()
        np.testing.assert_allclose(got.item(), want.item(), rtol=2e-5)
    _close(ref, other)


def test_optimizer_step_method_compiled():
    m = _model()
    mc = copy.deepcopy(m)
    oe, oc = eager.optim.Adam(m.parameters(), lr=1e-2), eager.optim.Adam(mc.parameters(), lr=1e-2)
    x, y = _data()
    F.cross_entropy(m(x), y).backward()
    F.cross_entropy(mc(x), y).backward()
    step = graphc.compile(oc.step)
    for _ in range(3):
        oe.step()
        step()
    _close(m, mc)


def test_error_inside_a_trainer_method_names_the_module_by_its_attribute():
    t = Trainer(_model(), eager.optim.SGD, lr=0.1)
    step = graphc.compile(t.train_step)
    x, y = _data()
    with pytest.raises(Exception, match=r"self\.model\.0"):
        step(eager.randn(6, 4), y)  # Linear(5, 7) given 4 features


def test_parameters_frozen_as_constants_are_warned_about_at_the_callers_line():
    """A parameter reached through something graphc does not look into (a tuple) is a
    constant of the compiled code: no longer silent, a RuntimeWarning at the line that
    called the compiled function says so; a parameter found by name gives none."""
    import warnings

    holder = (nn.Linear(3, 2),)
    lifted = nn.Linear(3, 2)

    def frozen(x):
        with eager.no_grad():
            return holder[0](x)

    def live(x):
        with eager.no_grad():
            return lifted(x)

    x = eager.randn(4, 3)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        graphc.compile(frozen)(x)
        graphc.compile(live)(x)
    msgs = [m for m in w if "require grad" in str(m.message)]
    assert len(msgs) == 1 and str(msgs[0].message).startswith("graphc: frozen read ")
    assert msgs[0].filename == __file__
