"""Adversarial tests of compiled training steps on tensors (the prepared call of
graphc/entry.py ``_tensor_call`` and its fallback ``CompiledFunction._run``): each step is
run eagerly and compiled on twin tensors, with the tensors changed between calls the way
user code changes them (.data replaced, non-contiguous data, the same tensor twice, .grad
set to None or replaced, requires_grad toggled, no_grad around the call, fresh tensors),
and everything compared: outputs, data, .grad, whether versions moved, errors.

Modest by default; GRAPHC_FUZZ_LONG=1 runs more seeds and steps."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import eager
import graphc

LONG = os.environ.get("GRAPHC_FUZZ_LONG", "") not in ("", "0")
LR = 0.1


def _s1(w, x):
    loss = ((x @ w) ** 2).sum()
    loss.backward()
    with eager.no_grad():
        w -= LR * w.grad
    w.grad.zero_()
    return loss


def _s2(a, b):
    with eager.no_grad():
        a.mul_(2.0)
        b.add_(a)
    return a.sum() + b.sum()


def _s3(w, v, x):
    loss = ((x @ w).tanh() @ v).pow(2).sum()
    loss.backward()
    with eager.no_grad():
        for p in (w, v):
            if p.grad is not None:  # (an optimizer's test: a frozen p may keep a .grad)
                p -= LR * p.grad
    w.grad = None
    if v.grad is not None:
        v.grad.zero_()
    return {"loss": loss, "both": (w * 1.0, v.sum())}


STEPS = {"s1": (_s1, "wx"), "s2": (_s2, "aa"), "s3": (_s3, "wvx")}


def _snap(ts):
    return [
        (
            t.detach().numpy().copy(),
            t.requires_grad,
            None if t.grad is None else t.grad.numpy().copy(),
            t._version[0],
        )
        for t in ts
    ]


def _leaves(r):
    if isinstance(r, dict):
        return [x for k in sorted(r) for x in _leaves(r[k])]
    if isinstance(r, (tuple, list)):
        return [x for v in r for x in _leaves(v)]
    return [r]


def _twin(ts):
    out = []
    for t in ts:
        c = t.detach().clone().requires_grad_(t.requires_grad)
        if t.grad is not None:
            c.grad = t.grad.detach().clone()
        out.append(c)
    return out


def _call(f, args, nograd):
    try:
        if nograd:
            with eager.no_grad():
                return "ok", f(*args)
        return "ok", f(*args)
    except Exception as ex:  # compared below
        return "exc", f"{type(ex).__name__}: {ex}"


def _fuzz(seed: int, n_steps: int) -> list:
    """Differences between eager and compiled over one random sequence of calls."""
    rng = np.random.default_rng(seed)
    name = sorted(STEPS)[seed % 3]
    fn, kinds = STEPS[name]
    cf = graphc.compile(fn)
    dt = [np.float32, np.float64][int(rng.integers(2))]
    n = int(rng.choice([0, 1, 3]))
    shapes = {"w": (n, 2), "v": (2, 3), "x": (4, n), "a": (n + 2,)}
    E = [
        eager.tensor(rng.standard_normal(shapes[k]).astype(dt), requires_grad=k in "wv")
        for k in kinds
    ]
    C = _twin(E)
    diffs = []
    for step in range(n_steps):
        op = int(rng.integers(0, 9)) if step >= 2 else 0
        k = int(rng.integers(len(E)))
        ae, ac, nograd = list(E), list(C), False
        if op == 1:  # .data replaced
            new = rng.standard_normal(tuple(E[k].shape)).astype(dt)
            E[k].data, C[k].data = eager.tensor(new.copy()), eager.tensor(new.copy())
        elif op == 2 and name == "s2":  # the same tensor twice
            ae, ac = [E[0], E[0]], [C[0], C[0]]
        elif op == 3:  # .grad set to None
            E[k].grad = C[k].grad = None
        elif op == 4:  # .grad replaced by a new tensor
            g = rng.standard_normal(tuple(E[k].shape)).astype(dt)
            E[k].grad, C[k].grad = eager.tensor(g.copy()), eager.tensor(g.copy())
        elif op == 5 and E[k].ndim == 2:  # non-contiguous data
            new = rng.standard_normal(tuple(E[k].shape)[::-1]).astype(dt)
            E[k].data, C[k].data = eager.tensor(new.copy()).t(), eager.tensor(new.copy()).t()
        elif op == 6:  # requires_grad toggled (a frozen tensor keeps its .grad)
            r = not E[k].requires_grad
            E[k].requires_grad_(r)
            C[k].requires_grad_(r)
        elif op == 7:
            nograd = True
        elif op == 8:  # fresh tensors
            E, C = _twin(E), _twin(C)
            ae, ac = list(E), list(C)
        be, bc = _snap(ae), _snap(ac)
        (ke, re_), (kc, rc) = _call(fn, ae, nograd), _call(cf, ac, nograd)
        tag = f"seed {seed} {name} n={n} {np.dtype(dt).name} step {step} op {op}"
        if ke != kc:
            # the compiled call may refuse (a clear error) what it cannot reproduce
            if not (kc == "exc" and rc.split(":")[0] in ("GraphcError", "SignatureError")):
                diffs.append(
                    f"{tag}: eager {ke} {re_ if ke == 'exc' else ''} / compiled {kc} {rc if kc == 'exc' else ''}"
                )
            C = _twin(E)
            continue
        if ke == "exc":
            if re_.split(":")[0] != rc.split(":")[0]:
                diffs.append(f"{tag}: eager raised {re_} / compiled {rc}")
            C = _twin(E)
            continue
        tol = 1e-5 if dt == np.float32 else 1e-12
        for a, b in zip(_leaves(re_), _leaves(rc)):
            if not np.allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol):
                diffs.append(f"{tag}: output")
        for i, (se, sc, pe, pc) in enumerate(zip(_snap(ae), _snap(ac), be, bc)):
            if not np.allclose(se[0], sc[0], rtol=tol, atol=tol):
                diffs.append(f"{tag}: data of {i}")
            if se[1] != sc[1]:
                diffs.append(f"{tag}: requires_grad of {i}")
            if (se[2] is None) != (sc[2] is None):
                diffs.append(f"{tag}: .grad of {i} is None: eager {se[2] is None}")
            elif se[2] is not None and not np.allclose(se[2], sc[2], rtol=tol, atol=tol):
                diffs.append(f"{tag}: .grad of {i}")
            if (se[3] != pe[3]) != (sc[3] != pc[3]):
                diffs.append(
                    f"{tag}: version of {i} moved: eager {se[3] - pe[3]}, compiled {sc[3] - pc[3]}"
                )
    return diffs


@pytest.mark.parametrize("seed", range(60 if LONG else 9))
def test_compiled_step_matches_eager_under_changes_between_calls(seed):
    diffs = _fuzz(seed, 14 if LONG else 8)
    assert not diffs, "\n".join(diffs[:20])


def test_frozen_tensor_keeps_its_grad():
    """A tensor with requires_grad=False that has a .grad (a frozen parameter after
    requires_grad_(False)): eager code reads and writes that .grad.  The signature did not
    count such a .grad, so the trace saw None: an optimizer-style ``if p.grad is not None``
    skipped the update silently, and ``p.grad.zero_()`` was dropped."""

    def step(w, v, x):
        loss = ((x @ w) @ v).pow(2).sum()
        loss.backward()
        with eager.no_grad():
            for p in (w, v):
                if p.grad is not None:
                    p -= 0.1 * p.grad
        v.grad.zero_()
        return loss

    def make():
        r = np.random.default_rng(1)
        return [
            eager.tensor(r.standard_normal((1, 2)), requires_grad=True),
            eager.tensor(r.standard_normal((2, 3)), requires_grad=True),
            eager.tensor(r.standard_normal((4, 1))),
        ]

    cf = graphc.compile(step)
    E, C = make(), make()
    for _ in range(2):
        step(*E)
        cf(*C)
    for t in (E[1], C[1]):
        t.requires_grad_(False)
        t.grad.fill_(1.0)  # a stale gradient the loop above applies
    for _ in range(3):
        le, lc = step(*E), cf(*C)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-12)
        for a, b in zip(E, C):
            np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-12)
            assert (a.grad is None) == (b.grad is None)
            if a.grad is not None:
                np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-12)
        E[1].grad.fill_(1.0)
        C[1].grad.fill_(1.0)


@pytest.mark.parametrize("how", ["read-only", "expanded"])
def test_written_read_only_argument_is_refused_like_eager(how):
    def step(w):
        with eager.no_grad():
            w.mul_(2.0)
        return w.sum()

    def make():
        if how == "read-only":
            arr = np.ones((4, 3))
            arr.flags.writeable = False
            return eager.from_numpy(arr)
        return eager.ones(1, 3).expand(4, 3)

    with pytest.raises(RuntimeError, match="read-only buffer and cannot be written in place"):
        step(make())
    cf = graphc.compile(step)
    for _ in range(2):  # the first call and the one after
        w = make()
        with pytest.raises(RuntimeError, match="argument w .* read-only buffer"):
            cf(w)
        assert w._version[0] == 0
    ok = eager.ones(4, 3)
    cf(ok)
    np.testing.assert_array_equal(ok.numpy(), 2.0)


def test_saved_tensor_mutated_by_compiled_step_raises_on_backward():
    def step(w):
        w.mul_(2.0)
        return w.sum()

    cf = graphc.compile(step)
    base0 = eager.tensor(np.ones((4, 3)), requires_grad=True)
    for view in (lambda b: b.detach(), lambda b: b.detach()[1], lambda b: b.detach().t()[1]):
        for f in (step, cf, cf, cf):
            base = base0 * 1.0
            y = (base * base).sum()
            f(view(base))
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                y.backward()


def test_threads_share_one_compiled_step():
    def step(w, x):
        loss = ((x @ w) ** 2).sum()
        loss.backward()
        with eager.no_grad():
            w -= 0.01 * w.grad
        w.grad.zero_()
        return loss

    cf = graphc.compile(step)
    rng = np.random.default_rng(0)
    pairs = [
        (
            eager.tensor(rng.standard_normal((64, 32)), requires_grad=True),
            eager.tensor(rng.standard_normal((16, 64))),
        )
        for _ in range(4)
    ]
    twins = [(w.detach().clone().requires_grad_(), x) for w, x in pairs]
    for w, x in pairs:
        cf(w, x)
    n = 60

    def work(k):
        w, x = pairs[k]
        for _ in range(n):
            cf(w, x)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for w, x in twins:
        for _ in range(n + 1):
            step(w, x)
    for (a, _), (b, _) in zip(pairs, twins):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_after_warm_up():
    cf = graphc.compile(_s1)
    rng = np.random.default_rng(0)
    w = eager.tensor(rng.standard_normal((3, 2)), requires_grad=True)
    x = eager.tensor(rng.standard_normal((4, 3)))
    for _ in range(3):
        cf(w, x)
    we = w.detach().clone().requires_grad_()
    we.grad = w.grad.clone()
    r, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child runs the warm step and reports its result
        try:
            cf(w, x)
            os.write(wfd, w.detach().numpy().tobytes())
        finally:
            os._exit(0)
    os.close(wfd)
    data = b""
    while True:
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    _s1(we, x)
    np.testing.assert_allclose(
        np.frombuffer(data, np.float64).reshape(3, 2), we.detach().numpy(), rtol=1e-12
    )
