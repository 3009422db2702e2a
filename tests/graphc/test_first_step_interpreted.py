"""An optimizer's first step runs on the interpreter (graphc.api ``_interpret_first``):
its trace creates the optimizer's state, so its signature cannot recur, and native code
for it would run once.  Checked adversarially against eager and against the same step
compiled natively (``interpret_first_step=False``): every optimizer, held references to
``.grad`` and state, state_dict, memory sharing, dropout's random stream, errors raised in
the first call, threads racing on the first call, fork, a signature that does recur,
inspection."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import eager
import graphc
from graphc.runtime import rng as grng

OPTIMIZERS = {
    "sgd": lambda p: eager.optim.SGD(p, lr=0.1),  # no state: never interpreted
    "sgd_momentum": lambda p: eager.optim.SGD(p, lr=0.1, momentum=0.9),
    "sgd_nesterov_wd": lambda p: eager.optim.SGD(
        p, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01
    ),
    "sgd_dampening": lambda p: eager.optim.SGD(p, lr=0.05, momentum=0.5, dampening=0.3),
    "adam": lambda p: eager.optim.Adam(p, lr=1e-2),
    "adam_amsgrad": lambda p: eager.optim.Adam(p, lr=1e-2, amsgrad=True, weight_decay=0.1),
    "adamw": lambda p: eager.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
    "rmsprop": lambda p: eager.optim.RMSprop(p, lr=1e-2),
    "rmsprop_centered_momentum": lambda p: eager.optim.RMSprop(
        p, lr=1e-2, centered=True, momentum=0.9
    ),
    "adagrad": lambda p: eager.optim.Adagrad(p, lr=0.1),
}

RNG = np.random.default_rng(23)
X = RNG.standard_normal((5, 4)).astype(np.float32)
Y = RNG.standard_normal((5, 2)).astype(np.float32)


def _model(dropout: float = 0.0):
    eager.manual_seed(0)
    layers = [eager.nn.Linear(4, 8), eager.nn.Tanh()]
    if dropout:
        layers.append(eager.nn.Dropout(dropout))
    return eager.nn.Sequential(*layers, eager.nn.Linear(8, 2))


def _setup(kind: str, mode: str, dropout: float = 0.0, set_to_none: bool = True):
    """(model, optimizer, step) with step eager, compiled ("interp": the default) or
    compiled with the first step native ("native")."""
    m = _model(dropout)
    opt = OPTIMIZERS[kind](m.parameters())

    def step(x, y):
        opt.zero_grad(set_to_none=set_to_none)
        loss = ((m(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    if mode == "eager":
        return m, opt, step
    return m, opt, graphc.compile(step, interpret_first_step=(mode == "interp"))


def _state_arrays(opt) -> list:
    return [
        (i, k, v)
        for i, s in enumerate(opt.state.values())
        for k, v in sorted(s.items())
        if isinstance(v, eager.Tensor)
    ]


def _no_shared_memory(m, opt) -> None:
    arrays = [p.grad.numpy() for p in m.parameters() if p.grad is not None]
    arrays += [p.detach().numpy() for p in m.parameters()]
    arrays += [v.numpy() for _, _, v in _state_arrays(opt)]
    for i, a in enumerate(arrays):
        for b in arrays[i + 1 :]:
            assert not np.may_share_memory(a, b)


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_every_optimizer_matches_eager_and_native_over_steps(kind):
    x, y = eager.tensor(X), eager.tensor(Y)
    runs = {}
    for mode in ("eager", "interp", "native"):
        m, opt, step = _setup(kind, mode)
        losses = []
        for i in range(4):
            losses.append(step(x, y).item())
            if i == 0 and mode != "eager":
                _no_shared_memory(m, opt)
                assert all(v.numpy().flags.c_contiguous for _, _, v in _state_arrays(opt))
        sd = opt.state_dict()
        runs[mode] = (
            losses,
            [p.detach().numpy().copy() for p in m.parameters()],
            [(i, k, v.numpy().copy()) for i, k, v in _state_arrays(opt)],
            sorted(sd["state"]),
            step,
        )
    e, i, n = runs["eager"], runs["interp"], runs["native"]
    np.testing.assert_allclose(i[0], e[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(i[0], n[0], rtol=1e-6, atol=1e-6)
    for a, b, c in zip(i[1], e[1], n[1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(a, c, rtol=1e-6, atol=1e-6)
    assert [k[:2] for k in i[2]] == [k[:2] for k in e[2]] and i[3] == e[3]
    for (_, _, a), (_, _, b) in zip(i[2], e[2]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # plain SGD has no state; Adagrad makes its state in its constructor (as PyTorch's)
    assert i[4].interpreted_calls == (0 if kind in ("sgd", "adagrad") else 1)
    assert n[4].interpreted_calls == 0
    assert i[4].cache_info().traces == n[4].cache_info().traces


@pytest.mark.parametrize("set_to_none", [True, False])
def test_held_references_and_identities_follow_eager(set_to_none):
    """References to .grad and state tensors held across the first and second call: the
    same objects (or new ones) and values as eager; nothing shares memory."""
    x, y = eager.tensor(X), eager.tensor(Y)
    seen = {}
    for mode in ("eager", "interp"):
        m, opt, step = _setup("adam", mode, set_to_none=set_to_none)
        if not set_to_none:  # a .grad already there: accumulated in place
            ((m(x) - y) ** 2).sum().backward()
        params = list(m.parameters())
        g0 = [p.grad for p in params]
        v0 = [None if g is None else g.numpy().copy() for g in g0]
        step(x, y)
        g1 = [p.grad for p in params]
        s1 = [dict(opt.state[p]) for p in params]
        vals1 = [g.numpy().copy() for g in g1]
        sv1 = [{k: v.numpy().copy() for k, v in s.items()} for s in s1]
        if mode == "interp":
            _no_shared_memory(m, opt)
        step(x, y)
        seen[mode] = (
            [a is b for a, b in zip(g0, g1)],
            [p.grad is g for p, g in zip(params, g1)],
            [all(opt.state[p][k] is v for k, v in s.items()) for p, s in zip(params, s1)],
            [None if g is None else g.numpy().copy() for g in g0],
            v0,
            [g.numpy().copy() for g in g1],
            vals1,
            [{k: v.numpy().copy() for k, v in s.items()} for s in s1],
            sv1,
        )
    e, c = seen["eager"], seen["interp"]
    assert c[:3] == e[:3]
    for a, b in zip(c[3:], e[3:]):
        flat_a = a if not isinstance(a[0], dict) else [v for d in a for v in d.values()]
        flat_b = b if not isinstance(b[0], dict) else [v for d in b for v in d.values()]
        for u, w in zip(flat_a, flat_b):
            if u is None or w is None:
                assert u is None and w is None
            else:
                np.testing.assert_allclose(u, w, rtol=1e-5, atol=1e-6)


def test_dropout_draws_what_native_code_draws():
    """The interpreted first step draws the same Philox numbers as native code: losses over
    steps and the stream's counter after them are those of the all-native step."""
    x, y = eager.tensor(X), eager.tensor(Y)
    out = {}
    for mode in ("interp", "native"):
        m, opt, step = _setup("adam", mode, dropout=0.4)
        eager.manual_seed(11)
        losses = [step(x, y).item() for _ in range(3)]
        out[mode] = (losses, grng.advance(0).tolist(), [p.detach().numpy() for p in m.parameters()])
        assert step.interpreted_calls == (mode == "interp")
    assert out["interp"][0] == out["native"][0]
    assert out["interp"][1] == out["native"][1]
    for a, b in zip(out["interp"][2], out["native"][2]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_error_in_the_first_call_is_natives_and_writes_nothing():
    m = _model()
    opt = eager.optim.Adam(m.parameters(), lr=1e-2)
    x = eager.tensor(X)

    def step(x, idx):
        opt.zero_grad()
        loss = m(x).gather(1, idx).sum()
        loss.backward()
        opt.step()
        return loss

    errors = []
    before = [p.detach().numpy().copy() for p in m.parameters()]
    for flag in (True, False):
        cf = graphc.compile(step, interpret_first_step=flag)
        with pytest.raises(Exception) as info:
            cf(x, eager.tensor(np.full((5, 1), 7)))
        errors.append((type(info.value), str(info.value)))
        assert not opt.state
        assert all(p.grad is None for p in m.parameters())
        for p, b in zip(m.parameters(), before):
            np.testing.assert_array_equal(p.detach().numpy(), b)
        assert cf.interpreted_calls == 0
    assert errors[0] == errors[1]
    assert errors[0][0] is IndexError
    # the same entry, good indices: native code already built, runs on
    idx = eager.tensor(np.ones((5, 1), np.int64))
    m2, opt2 = m, opt
    assert cf(x, idx).item() == pytest.approx(step_eager_gather(x, idx), rel=1e-5)
    assert opt2.state and m2 is m


def step_eager_gather(x, idx):
    m = _model()
    opt = eager.optim.Adam(m.parameters(), lr=1e-2)
    opt.zero_grad()
    loss = m(x).gather(1, idx).sum()
    loss.backward()
    opt.step()
    return loss.item()


def test_threads_racing_on_the_first_call():
    """Four threads call the step at once, first call included: the calls serialize; the
    result is four eager steps (same batch), one call interpreted at most."""
    x, y = eager.tensor(X), eager.tensor(Y)
    m, opt, step = _setup("adam", "interp")
    barrier = threading.Barrier(4)
    errors = []

    def work():
        try:
            barrier.wait()
            step(x, y)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    me, oe, se = _setup("adam", "eager")
    for _ in range(4):
        se(x, y)
    for a, b in zip(m.parameters(), me.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert step.interpreted_calls == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_after_the_first_call():
    x, y = eager.tensor(X), eager.tensor(Y)
    m, opt, step = _setup("sgd_momentum", "interp")
    step(x, y)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            vals = [step(x, y).item() for _ in range(2)]
            os.write(w, repr(vals).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    child = eval(data.decode())
    assert child == [step(x, y).item() for _ in range(2)]


def test_a_signature_that_recurs_gets_native_code():
    """State cleared again: the second state-creating trace of the signature is compiled;
    a fresh optimizer (guards pass on the interpreted entry): that entry goes native."""
    x, y = eager.tensor(X), eager.tensor(Y)
    m, opt, step = _setup("adam", "interp")
    me, oe, se = _setup("adam", "eager")
    for i in range(5):
        if i in (2, 4):
            opt.state.clear()
            oe.state.clear()
        assert step(x, y).item() == pytest.approx(se(x, y).item(), rel=1e-5)
    assert step.interpreted_calls == 1
    # a new optimizer under the same name each call: the interpreted entry is hit again
    holder = {}

    def step2(x, y):
        o = holder["opt"]
        o.zero_grad()
        loss = ((m(x) - y) ** 2).mean()
        loss.backward()
        o.step()
        return loss

    cf = graphc.compile(step2)
    for _ in range(3):
        holder["opt"] = eager.optim.Adam(m.parameters(), lr=1e-2)
        want = step2_eager(m, x, y)
        assert cf(x, y).item() == pytest.approx(want, rel=1e-5)
    assert cf.interpreted_calls == 1
    (entry,) = cf._cache.values()
    assert entry.provisional is None and hasattr(entry.stages["_executable"], "plan")


def step2_eager(m, x, y):
    """The loss a step with a fresh Adam gives on a copy of ``m`` (nothing changed)."""
    import copy

    mc = copy.deepcopy(m)
    return ((mc(x) - y) ** 2).mean().item()


def test_inspection_says_the_first_call_was_interpreted():
    x, y = eager.tensor(X), eager.tensor(Y)
    m, opt, step = _setup("adam", "interp")
    step(x, y)
    assert step.stats(x, y)["native_code"] == "interpreted"
    assert "1 call interpreted, not compiled" in step.explain()
    # asking for the native code of that signature builds it (and it then runs natively)
    (entry,) = step._cache.values()
    assert "define" in step.llvm_ir(x, y)
    assert entry.provisional is None
    assert step.stats(x, y)["native_code"] != "interpreted"
    step(x, y)  # re-traced: the state now exists
    assert step.cache_info().traces == 2
    _, _, native = _setup("adam", "native")
    native(x, y)
    assert "interpreted" not in native.explain()
    assert native.stats(x, y)["native_code"] != "interpreted"


def test_step_writing_captured_state():
    """A step that also writes a captured counter in place (and returns a no-grad value):
    equal to eager, first call interpreted, the counter written once per call."""
    x, y = eager.tensor(X), eager.tensor(Y)
    out = {}
    for mode in ("eager", "interp"):
        m, opt, _ = _setup("sgd_momentum", "eager")
        counter = eager.zeros(())

        def step(x, y):
            counter.add_(1.0)
            opt.zero_grad()
            loss = ((m(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            with eager.no_grad():
                return loss * counter

        f = step if mode == "eager" else graphc.compile(step)
        vals = [f(x, y).item() for _ in range(3)]
        out[mode] = (vals, counter.item(), [p.detach().numpy().copy() for p in m.parameters()])
        if mode == "interp":
            assert f.interpreted_calls == 1
    np.testing.assert_allclose(out["interp"][0], out["eager"][0], rtol=1e-5)
    assert out["interp"][1] == out["eager"][1] == 3.0
    for a, b in zip(out["interp"][2], out["eager"][2]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_interpret_first_step_must_be_a_keyword_and_is_validated():
    f = graphc.compile(lambda a: a, interpret_first_step=False)
    assert f.interpret_first_step is False
    with pytest.raises(TypeError, match="unknown options"):
        graphc.compile(lambda a: a, interpret_first_stepp=False)
