"""A compiled training step with gradient clipping (nn.utils.clip_grad_norm_ /
clip_grad_value_) and with a Tensor learning rate, against the same step run eagerly."""

import math

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import graphc
from graphc.tools.models import build

FAST = 0  # opt_level=0: the same graph, unoptimized native code (fast to build)


def _data(n=32, seed=6):
    rng = np.random.default_rng(seed)
    x = eager.tensor(rng.random((n, 1, 8, 8), dtype=np.float32))
    y = eager.tensor(rng.integers(0, 10, size=n))
    return x, y


def _classifier(dtype=None):
    eager.manual_seed(0)
    m = build().Classifier(64, 16, 10)
    return m if dtype is None else m.to(dtype)


def _pair(make_opt, body, dtype=None):
    """Two copies of the W6 classifier; the step ``body(model, opt, x, y)`` eagerly and
    compiled."""
    me, mc = _classifier(dtype), _classifier(dtype)
    oe, oc = make_opt(me), make_opt(mc)

    def estep(x, y):
        return body(me, oe, x, y)

    def cstep(x, y):
        return body(mc, oc, x, y)

    return (me, oe, estep), (mc, oc, graphc.compile(cstep, opt_level=FAST))


def _clip_body(clip):
    def body(m, opt, x, y):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        out = clip(m)
        opt.step()
        return loss, out

    return body


def _close(a, b, exact):
    a, b = np.asarray(a), np.asarray(b)
    if exact:
        np.testing.assert_array_equal(b, a)
    else:
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=1e-6)


CLIPS = {
    "norm2": lambda m: nn.utils.clip_grad_norm_(m.parameters(), 0.05),
    "norm_inf": lambda m: nn.utils.clip_grad_norm_(m.parameters(), 0.01, norm_type=math.inf),
    "norm_3": lambda m: nn.utils.clip_grad_norm_(list(m.parameters()), 0.02, norm_type=3),
    "norm_big": lambda m: nn.utils.clip_grad_norm_(m.parameters(), 1e6),  # coef clamped to 1
    "norm_0": lambda m: nn.utils.clip_grad_norm_(m.parameters(), 0.0),
    "value": lambda m: nn.utils.clip_grad_value_(m.parameters(), 0.003),
    "one_tensor": lambda m: nn.utils.clip_grad_norm_(m.net[1].weight, 0.01),
}


@pytest.mark.parametrize("name", sorted(CLIPS))
@pytest.mark.parametrize("dtype", [None, eager.float64])
def test_clip_in_compiled_step(name, dtype):
    x, y = _data()
    if dtype is not None:
        x = x.double()
    (me, oe, estep), (mc, oc, cstep) = _pair(
        lambda m: eager.optim.Adam(m.parameters(), lr=1e-2), _clip_body(CLIPS[name]), dtype
    )
    for _ in range(4):
        (le, ne), (lc, nc) = estep(x, y), cstep(x, y)
        _close(float(le), float(lc), False)
        if ne is None:
            assert nc is None
        else:
            assert isinstance(nc, eager.Tensor) and nc.dim() == 0 and nc.dtype == ne.dtype
            _close(float(ne), float(nc), False)
    for p, q in zip(me.parameters(), mc.parameters()):
        _close(p.detach().numpy(), q.detach().numpy(), False)
        _close(p.grad.numpy(), q.grad.numpy(), False)
    assert len(cstep.recompile_reasons) <= 1  # the optimizer's first step creates its state


def test_clip_grads_shared_by_backprop_are_scaled_once():
    # backprop gives a + b's two leaves the same gradient value: each .grad is its own
    # buffer (as in eager), so clipping them in place scales each exactly once
    a = nn.Parameter(eager.tensor([3.0, 4.0]))
    b = nn.Parameter(eager.tensor([1.0, 2.0]))

    def step(x):
        a.grad = b.grad = None
        ((a + b) * x).sum().backward()
        return nn.utils.clip_grad_norm_([a, b], 1.0)

    x = eager.tensor([3.0, 4.0])
    ne = step(x)
    ge = (a.grad.numpy().copy(), b.grad.numpy().copy())
    nc = graphc.compile(step, opt_level=FAST)(x)
    assert float(nc) == float(ne)
    np.testing.assert_array_equal(a.grad.numpy(), ge[0])
    np.testing.assert_array_equal(b.grad.numpy(), ge[1])
    np.testing.assert_allclose(ge[0], [3 / (50**0.5 + 1e-6), 4 / (50**0.5 + 1e-6)], rtol=1e-6)


def test_clip_exact_in_float64():
    # one Linear, float64, SGD: the compiled clipping and update match eager bit for bit
    def make():
        eager.manual_seed(1)
        return nn.Linear(4, 1).double()

    me, mc = make(), make()
    oe = eager.optim.SGD(me.parameters(), lr=0.1)
    oc = eager.optim.SGD(mc.parameters(), lr=0.1)
    x = eager.tensor(np.linspace(-1, 1, 4)[None], dtype=eager.float64)

    def body(m, opt, x):
        opt.zero_grad()
        m(x).sum().backward()
        n = nn.utils.clip_grad_norm_(m.parameters(), 0.5, norm_type=math.inf)
        opt.step()
        return n

    cstep = graphc.compile(lambda x: body(mc, oc, x), opt_level=FAST)
    for _ in range(3):
        assert float(cstep(x)) == float(body(me, oe, x))
    for p, q in zip(me.parameters(), mc.parameters()):
        np.testing.assert_array_equal(q.detach().numpy(), p.detach().numpy())


def test_error_if_nonfinite_refused_when_compiled():
    m = _classifier()

    @graphc.compile
    def step(x, y):
        F.cross_entropy(m(x), y).backward()
        return nn.utils.clip_grad_norm_(m.parameters(), 1.0, error_if_nonfinite=True)

    with pytest.raises(RuntimeError, match=r"error_if_nonfinite=True\) inside a function being"):
        step(*_data())


def test_nonfinite_grads_clipped_like_eager():
    # error_if_nonfinite=False: grads scaled by a non-finite norm (nan), as eagerly
    def body(p, w):
        p.grad = None
        (p * w).sum().backward()
        return nn.utils.clip_grad_norm_([p], 1.0)

    pe, pc = nn.Parameter(eager.ones(2)), nn.Parameter(eager.ones(2))
    w = eager.tensor([1.0, math.inf])
    ne = body(pe, w)
    nc = graphc.compile(lambda w: body(pc, w), opt_level=FAST)(w)
    assert math.isinf(float(ne)) and math.isinf(float(nc))
    np.testing.assert_array_equal(pc.grad.numpy(), pe.grad.numpy())


# --- a Tensor learning rate ---------------------------------------------------------------
OPTS = [
    ("SGD", dict(momentum=0.9, weight_decay=0.01)),
    ("Adam", dict(amsgrad=True)),
    ("AdamW", dict(weight_decay=0.1)),
    ("RMSprop", dict(centered=True, momentum=0.3)),
    ("Adagrad", dict(lr_decay=0.05)),
]


def _step_body(m, opt, x, y):
    opt.zero_grad()
    loss = F.cross_entropy(m(x), y)
    loss.backward()
    opt.step()
    return loss


@pytest.mark.parametrize("lr_dtype", [eager.float32, eager.float64])
@pytest.mark.parametrize("name,kw", OPTS)
def test_tensor_lr_compiled_step(name, kw, lr_dtype):
    cls = getattr(eager.optim, name)
    lrs = {}

    def make(m):
        lr = eager.tensor(0.02, dtype=lr_dtype)
        lrs[id(m)] = lr
        return cls(m.parameters(), lr=lr, **kw)

    x, y = _data()
    (me, oe, estep), (mc, oc, cstep) = _pair(make, _step_body)
    se = eager.optim.lr_scheduler.StepLR(oe, step_size=2, gamma=0.5)
    sc = eager.optim.lr_scheduler.StepLR(oc, step_size=2, gamma=0.5)
    for i in range(6):
        _close(float(estep(x, y)), float(cstep(x, y)), False)
        se.step()
        sc.step()
        if i == 3:  # a write between calls is read by the next call
            lrs[id(me)].fill_(0.05)
            lrs[id(mc)].fill_(0.05)
    assert oc.param_groups[0]["lr"] is lrs[id(mc)]
    assert float(lrs[id(mc)]) == float(lrs[id(me)])
    for p, q in zip(me.parameters(), mc.parameters()):
        _close(p.detach().numpy(), q.detach().numpy(), False)
    # the first call creates the optimizer state; nothing after re-traces
    assert len(cstep.recompile_reasons) <= 1, cstep.recompile_reasons


def test_tensor_lr_one_element_and_number_switch():
    x, y = _data()
    (me, oe, estep), (mc, oc, cstep) = _pair(
        lambda m: eager.optim.SGD(m.parameters(), lr=eager.tensor([0.1])), _step_body
    )
    for _ in range(2):
        _close(float(estep(x, y)), float(cstep(x, y)), False)
    oe.param_groups[0]["lr"] = oc.param_groups[0]["lr"] = 0.05  # a number now: re-traced
    _close(float(estep(x, y)), float(cstep(x, y)), False)
    assert any("is now a float" in r or "now a number" in r for r in cstep.recompile_reasons)
    oe.param_groups[0]["lr"] = eager.tensor(0.2)
    oc.param_groups[0]["lr"] = eager.tensor(0.2)  # and a Tensor again
    _close(float(estep(x, y)), float(cstep(x, y)), False)
    for p, q in zip(me.parameters(), mc.parameters()):
        _close(p.detach().numpy(), q.detach().numpy(), False)


def test_tensor_lr_also_read_by_name():
    # the same lr tensor is the optimizer's and a global the step reads: both are the
    # call's input (not a constant baked at trace time)
    global LR
    LR = eager.tensor(0.1)
    m = nn.Linear(3, 1)
    opt = eager.optim.SGD(m.parameters(), lr=LR)

    @graphc.compile
    def step(x):
        opt.zero_grad()
        m(x).sum().backward()
        opt.step()
        return LR * 2

    x = eager.ones(2, 3)
    assert float(step(x)) == pytest.approx(0.2)
    LR.fill_(0.5)
    w = m.weight.detach().numpy().copy()
    assert float(step(x)) == pytest.approx(1.0)
    np.testing.assert_allclose(m.weight.detach().numpy(), w - 0.5 * 2.0, rtol=1e-6)
