"""The prepared call of a compiled training step on tensors (``graphc.entry._tensor_call``).

A step whose arguments are eager tensors and that writes them (or their ``.grad``) in
place runs generated straight-line code instead of ``CompiledFunction._run``.  It must
leave every tensor exactly as the general path (and eager) does: data, ``.grad`` (same
object, updated in place), version counters, and hand every call it cannot prove
equivalent to the general path: other arrays (memory check), aliasing, grad mode, a
``.grad`` that appeared or went away.
"""
from __future__ import annotations

import numpy as np
import pytest

import eager
import graphc
from graphc.entry import SLOW
from graphc.tools.workloads import seed_step


def _data(seed=0, n=5, d=7, h=3, o=2, dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = eager.from_numpy(rng.standard_normal((n, d)).astype(dtype))
    y = eager.from_numpy(rng.standard_normal((n, o)).astype(dtype))
    w1 = eager.tensor(rng.standard_normal((d, h)).astype(dtype), requires_grad=True)
    w2 = eager.tensor(rng.standard_normal((h, o)).astype(dtype), requires_grad=True)
    return [x, y, w1, w2]


def _clone(ts):
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in ts]


def _entry(cf, args):
    key, _ = cf._signature(tuple(args))
    return cf._cache[key]


def _general(cf, args):
    """The call through CompiledFunction._run (the path the prepared call replaces)."""
    key, dyn = cf._signature(tuple(args))
    entry = cf._cache.get(key) or cf._miss(tuple(args), key)
    return cf._run(entry, tuple(args), dyn)


def _state(ws):
    return [(w._version[0], None if w.grad is None else (id(w.grad), w.grad._version[0])) for w in ws]


@pytest.mark.parametrize("backend", ["native", "interpreter"])
def test_seed_step_prepared_matches_eager_and_the_general_path(backend):
    e = _data()
    c = _clone(e)
    g = _clone(e)
    cf = graphc.compile(seed_step, backend=backend)
    cg = graphc.compile(seed_step, backend=backend)
    for step in range(6):
        c_before, g_before = _state(c[2:]), _state(g[2:])
        le = seed_step(*e)
        lc = cf(*c)
        lg = _general(cg, g)
        if step >= 1:  # .grad set: the prepared call's signature
            assert _entry(cf, c).tcall is not None
            # the same .grad objects, the same version bumps as the general path
            dc = [(a[0] - b[0], a[1][0] == b[1][0], a[1][1] - b[1][1]) for a, b in zip(_state(c[2:]), c_before)]
            dg = [(a[0] - b[0], a[1][0] == b[1][0], a[1][1] - b[1][1]) for a, b in zip(_state(g[2:]), g_before)]
            assert dc == dg and all(same for _, same, _ in dc), (dc, dg)
        np.testing.assert_allclose(lc.numpy(), le.detach().numpy(), rtol=1e-5)
        np.testing.assert_array_equal(lc.numpy(), lg.numpy())
        assert not lc.requires_grad and lc.grad_fn is None
        for a, b, h in zip(e[2:], c[2:], g[2:]):
            np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(b.detach().numpy(), h.detach().numpy())
            assert b.grad is not None and not b.grad.numpy().any()


def test_prepared_call_refuses_what_it_cannot_prove():
    x, y, w1, w2 = _data()
    cf = graphc.compile(seed_step)
    cf(x, y, w1, w2)
    cf(x, y, w1, w2)
    entry = _entry(cf, (x, y, w1, w2))
    assert entry.tcall(cf, entry, (x, y, w1, w2)) is not SLOW
    # other arrays than the last memory check saw: the general path checks them
    v1 = eager.tensor(w1.detach().numpy().copy(), requires_grad=True)
    v1.grad = eager.zeros_like(v1)
    assert entry.tcall(cf, entry, (x, y, v1, w2)) is SLOW
    cf(x, y, v1, w2)  # checked there, then prepared
    assert entry.tcall(cf, entry, (x, y, v1, w2)) is not SLOW
    # a new .grad object behind the same tensor: checked again
    w2.grad = eager.zeros_like(w2)
    assert entry.tcall(cf, entry, (x, y, v1, w2)) is SLOW
    # grad mode off: the other trace
    with eager.no_grad():
        assert entry.tcall(cf, entry, (x, y, v1, w2)) is SLOW


def test_prepared_call_keeps_the_aliasing_refusal():
    x, y, w1, w2 = _data(d=3, h=3, o=3)
    cf = graphc.compile(seed_step)
    cf(x, y, w1, w2)
    cf(x, y, w1, w2)
    # a .grad sharing memory with a weight written in place
    w2.grad = eager.from_numpy(w1.detach().numpy())
    with pytest.raises(graphc.SignatureError, match="share memory|shares memory"):
        cf(x, y, w1, w2)


def test_prepared_call_after_arrays_change_matches_eager():
    e = _data(seed=3)
    c = _clone(e)
    cf = graphc.compile(seed_step)
    for step in range(5):
        if step == 3:  # new weights (same shapes), their .grad set
            for ws in (e, c):
                for k in (2, 3):
                    ws[k] = eager.tensor(np.ones(tuple(ws[k].shape), np.float32), requires_grad=True)
                    ws[k].grad = eager.zeros_like(ws[k])
        le, lc = seed_step(*e), cf(*c)
        np.testing.assert_allclose(lc.numpy(), le.detach().numpy(), rtol=1e-5)
        for a, b in zip(e[2:], c[2:]):
            np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_grad_accumulated_cleared_and_created():
    def accumulate(x, w):
        (x * w).sum().backward()
        return w.grad.sum()

    def clear(x, w):
        with eager.no_grad():
            w -= 0.5 * w.grad
        w.grad = None
        return (x * 2).sum()

    for fn in (accumulate, clear):
        x = eager.from_numpy(np.arange(4.0))
        we = eager.tensor(np.ones(4), requires_grad=True)
        we.grad = eager.full((4,), 3.0, dtype=eager.float64)
        wc = we.detach().clone().requires_grad_(True)
        wc.grad = eager.full((4,), 3.0, dtype=eager.float64)
        cf = graphc.compile(fn)
        for _ in range(3):
            if fn is clear:
                we.grad = eager.full((4,), 3.0, dtype=eager.float64)
                wc.grad = eager.full((4,), 3.0, dtype=eager.float64)
            re, rc = fn(x, we), cf(x, wc)
            np.testing.assert_array_equal(rc.numpy(), re.numpy())
            np.testing.assert_array_equal(wc.detach().numpy(), we.detach().numpy())
            assert (wc.grad is None) == (we.grad is None)
            if we.grad is not None:
                np.testing.assert_array_equal(wc.grad.numpy(), we.grad.numpy())
                assert wc.grad._version == we.grad._version
            assert wc._version == we._version


def test_in_place_update_of_arguments_without_requires_grad():
    def step(x, w):
        with eager.no_grad():
            x.add_(1.0)
        return (x * w).sum()

    x = eager.from_numpy(np.zeros(3))
    w = eager.from_numpy(np.ones(3))
    cf = graphc.compile(step)
    for k in range(3):
        r = cf(x, w)
        assert r.item() == 3.0 * (k + 1)
    assert x._version[0] == 3
    assert _entry(cf, (x, w)).tcall is not None


@pytest.mark.parametrize(
    "shape,dtype", [((), np.float64), ((0,), np.float32), ((1,), np.float32), ((3, 2), np.float64)]
)
def test_sgd_like_step_on_odd_shapes_matches_the_general_path(shape, dtype):
    def step(x, w):
        loss = (x * w).sum()
        loss.backward()
        with eager.no_grad():
            w -= 0.1 * w.grad
            w.grad.zero_()
        return loss

    rng = np.random.default_rng(5)
    xs = rng.standard_normal(shape).astype(dtype)
    w0 = rng.standard_normal(shape).astype(dtype)
    c = [eager.from_numpy(xs.copy()), eager.tensor(w0.copy(), requires_grad=True)]
    g = [eager.from_numpy(xs.copy()), eager.tensor(w0.copy(), requires_grad=True)]
    e = [eager.from_numpy(xs.copy()), eager.tensor(w0.copy(), requires_grad=True)]
    cf, cg = graphc.compile(step), graphc.compile(step)
    for k in range(4):
        if k == 2:  # .data replaced behind the same tensors: the memory check runs again
            for ws in (c, g, e):
                ws[1].data = eager.from_numpy(np.full(shape, 0.5, dtype))
        le, lc, lg = step(*e), cf(*c), _general(cg, g)
        np.testing.assert_array_equal(lc.numpy(), lg.numpy())
        np.testing.assert_allclose(lc.numpy(), le.detach().numpy(), rtol=1e-6)
        np.testing.assert_array_equal(c[1].detach().numpy(), g[1].detach().numpy())
        np.testing.assert_allclose(c[1].detach().numpy(), e[1].detach().numpy(), rtol=1e-6)
        assert c[1]._version[0] - g[1]._version[0] == 0
    assert _entry(cf, c).tcall is not None
