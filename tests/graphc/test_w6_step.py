"""The compiled training step's call path (issue 17, the W6 classifier step): what each
warm call re-checks, and that every shortcut keeps eager's numbers."""

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import graphc
import graphc.api as gapi
from graphc.capture import LrCaptured

FAST = 0  # opt_level: the same graph, compiled quickly


def _pair(lr=1e-2, opt_cls=None):
    opt_cls = opt_cls or eager.optim.Adam
    out = []
    for _ in range(2):
        eager.manual_seed(0)
        m = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
        opt = opt_cls(m.parameters(), lr=lr)

        def step(x, y, m=m, opt=opt):
            opt.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            return loss

        out.append((m, opt, step))
    (me, oe, estep), (mc, oc, cstep) = out
    return (me, oe, estep), (mc, oc, graphc.compile(cstep, opt_level=FAST))


def _data(n=10, seed=0):
    rng = np.random.default_rng(seed)
    return (
        eager.tensor(rng.standard_normal((n, 6)).astype(np.float32)),
        eager.tensor(rng.integers(0, 3, size=n)),
    )


def _same(me, mc, oe, oc):
    for pe, pc in zip(me.parameters(), mc.parameters()):
        np.testing.assert_allclose(pc.detach().numpy(), pe.detach().numpy(), rtol=2e-5, atol=1e-6)
        np.testing.assert_allclose(pc.grad.numpy(), pe.grad.numpy(), rtol=2e-5, atol=1e-6)
        for k, v in oe.state[pe].items():
            np.testing.assert_allclose(
                np.asarray(oc.state[pc][k].numpy()), np.asarray(v.numpy()), rtol=2e-5, atol=1e-6
            )


def _count_disjoint(monkeypatch):
    calls = [0]
    real = gapi._disjoint

    def counting(arrays, written):
        calls[0] += 1
        return real(arrays, written)

    monkeypatch.setattr(gapi, "_disjoint", counting)
    return calls


def test_warm_step_skips_the_byte_range_check(monkeypatch):
    """The same lr gives the same lr tensor, so the memory check sees the arrays it passed
    last call and does not compare every byte range again."""
    (me, oe, estep), (mc, oc, cstep) = _pair()
    x, y = _data()
    for _ in range(3):
        estep(x, y), cstep(x, y)
    calls = _count_disjoint(monkeypatch)
    for _ in range(4):
        le, lc = estep(x, y), cstep(x, y)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=2e-5)
    assert calls[0] == 0
    _same(me, mc, oe, oc)


@pytest.mark.parametrize(
    "lrs",
    [
        (1e-2, 3e-3, 3e-3, 1e-2),
        (0.0, -0.0, 0.0),  # equal, different bits: a new tensor each time
        (1e-2, np.float64(1e-2), np.float32(1e-2), 1e-2),  # equal values of other types
        (float("nan"),),
    ],
)
def test_lr_changes_are_read(lrs):
    (me, oe, estep), (mc, oc, cstep) = _pair()
    x, y = _data()
    estep(x, y), cstep(x, y)
    for lr in lrs:
        oe.param_groups[0]["lr"] = oc.param_groups[0]["lr"] = lr
        for _ in range(2):
            le, lc = estep(x, y), cstep(x, y)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=2e-5, equal_nan=True)
        if lr == lr:
            _same(me, mc, oe, oc)
    assert cstep.cache_info().traces == 2


def test_lr_tensor_reuse_rule():
    holder = {"lr": 0.5}
    cap = LrCaptured("opt.param_groups[0]['lr']", lambda a: (holder, "lr"), None)
    t1 = cap.current(())
    assert cap.current(()) is t1 and t1.item() == 0.5
    assert not t1.numpy().flags.writeable  # shared between calls: never written
    holder["lr"] = 0.25
    t2 = cap.current(())
    assert t2 is not t1 and t2.item() == 0.25 and t1.item() == 0.5
    holder["lr"] = 0.0
    z = cap.current(())
    holder["lr"] = -0.0
    nz = cap.current(())
    assert nz is not z and np.signbit(nz.numpy())
    holder["lr"] = np.float32(0.25)
    assert cap.current(()).item() == 0.25
    holder["lr"] = "0.1"
    assert cap.current(()) is None  # the caller names it (test_lr_must_be_a_number)
    del holder["lr"]
    assert cap.current(()) is None
