"""VJP plans (eager/autograd/backward_codegen.py): the registry's rules compiled to numpy code.

A plan must give exactly what running the rules on tensors gives (same numpy calls in
the same order and dtypes: bit-identical), keep every autograd check (saved tensors
modified in place), never hand a leaf a buffer someone else holds, and fall back to
the rules on tensors whenever it cannot express a signature.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import eager
from eager.surface import _dispatch
from eager.autograd import backward_codegen as codegen
from eager.ops import OPS
from eager.tensor import Tensor

ALL_DIFF = sorted(n for n in OPS if OPS[n].differentiable)


@contextlib.contextmanager
def plans_enabled(flag: bool):
    old = codegen.enabled
    codegen.enabled = flag
    try:
        yield
    finally:
        codegen.enabled = old


def _grads(name: str, ins: list, attrs: dict, dtype, g_seed: int = 0) -> list:
    op = OPS[name]
    xs = []
    for i, a in enumerate(ins):
        a = a.astype(dtype) if a.dtype.kind == "f" else a
        t = Tensor._make(np.array(a))
        if a.dtype.kind == "f" and i < len(op.vjp) and op.vjp[i] is not None:
            t.requires_grad_(True)
        xs.append(t)
    out = _dispatch(name, "X", tuple(xs), attrs)
    if out.grad_fn is None:
        return [None] * len(xs)
    g = np.random.default_rng(g_seed).uniform(-1, 1, size=out.shape).astype(out.numpy(
        force=True).dtype)
    out.backward(eager.from_numpy(g))
    return [None if x.grad is None else x.grad.numpy() for x in xs]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", ALL_DIFF)
def test_plan_is_bit_identical_to_the_rules_on_tensors(name, dtype):
    for k, (ins, attrs) in enumerate(OPS[name].samples()):
        with plans_enabled(False):
            want = _grads(name, ins, attrs, dtype)
        with plans_enabled(True):
            got = _grads(name, ins, attrs, dtype)
            again = _grads(name, ins, attrs, dtype)      # the cached plan, second use
        for i, (w, a, b) in enumerate(zip(want, got, again)):
            assert (w is None) == (a is None) == (b is None), f"{name} sample {k} input {i}"
            if w is not None:
                assert a.dtype == w.dtype and a.shape == w.shape, f"{name} sample {k} input {i}"
                np.testing.assert_array_equal(a, w, err_msg=f"{name} sample {k} input {i}")
                np.testing.assert_array_equal(b, w, err_msg=f"{name} sample {k} input {i}")


def test_plans_are_used_and_cached():
    codegen.clear()
    a = eager.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    b = eager.tensor([[5.0, 6.0], [7.0, 8.0]], requires_grad=True)
    out = a * b
    node = out.grad_fn
    src = codegen.source(node, eager.ones(2, 2, dtype=eager.float32))
    assert "f_mul(g, x1)" in src and "f_mul(g, x0)" in src
    n = codegen.cache_size()
    for _ in range(3):
        (a * b).sum().backward()
    assert codegen.cache_size() == n + 1          # the sum's plan; mul's was reused
    np.testing.assert_array_equal(a.grad.numpy(), 3 * b.detach().numpy())


def test_unhashable_attrs_fall_back_to_the_rules():
    x = eager.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    idx = eager.tensor([0, 2, 2])
    y = x[idx]                                   # getitem with an index tensor operand
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 0.0, 2.0, 0.0])
    x.grad = None
    x[[0, 0, 3]].sum().backward()                # a list index: attrs are not hashable
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 0.0, 0.0, 1.0])


def test_saved_tensor_modified_in_place_still_raises():
    a = eager.tensor([1.0, 2.0], requires_grad=True)
    b = a * 2
    c = b * b                                    # saves b
    with eager.no_grad():
        b.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()
    x = eager.tensor([0.5, 1.5], requires_grad=True)
    y = x.exp()                                  # exp's rule reads its output
    z = y * 1
    with eager.no_grad():
        y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_pass_through_gradients_are_not_shared_between_leaves():
    a = eager.tensor([1.0, 2.0], requires_grad=True)
    c = eager.tensor([3.0, 4.0], requires_grad=True)
    (a + c).sum().backward()                     # add's rules return the gradient itself
    assert not np.shares_memory(a.grad.numpy(), c.grad.numpy())
    (a + c).sum().backward()                     # accumulating into one must not touch the other
    np.testing.assert_array_equal(a.grad.numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(c.grad.numpy(), [2.0, 2.0])


def test_user_gradient_is_never_stolen_by_a_leaf():
    a = eager.tensor([1.0, 2.0], requires_grad=True)
    g = eager.tensor([10.0, 20.0])
    (a * 1).backward(g)
    assert not np.shares_memory(a.grad.numpy(), g.numpy())
    (a * 1).backward(g)
    np.testing.assert_array_equal(g.numpy(), [10.0, 20.0])
    np.testing.assert_array_equal(a.grad.numpy(), [20.0, 40.0])


def test_create_graph_runs_the_rules_on_tensors():
    x = eager.tensor(2.0, requires_grad=True)
    y = x ** 3
    (gx,) = eager.autograd.grad(y, x, create_graph=True)
    assert gx.grad_fn is not None                # recorded: plans only serve create_graph=False
    (ggx,) = eager.autograd.grad(gx, x)
    assert gx.item() == 12.0 and ggx.item() == 12.0


def test_disabling_plans_gives_the_same_training_run():
    def run():
        rng = np.random.default_rng(0)
        x = eager.from_numpy(rng.standard_normal((8, 5)).astype(np.float32))
        y = eager.from_numpy(rng.standard_normal((8, 2)).astype(np.float32))
        w1 = eager.tensor(rng.standard_normal((5, 4)).astype(np.float32), requires_grad=True)
        w2 = eager.tensor(rng.standard_normal((4, 2)).astype(np.float32), requires_grad=True)
        losses = []
        for _ in range(20):
            loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
            loss.backward()
            with eager.no_grad():
                w1 -= 1e-3 * w1.grad
                w2 -= 1e-3 * w2.grad
                w1.grad.zero_()
                w2.grad.zero_()
            losses.append(loss.item())
        return losses, w1.detach().numpy().copy()
    with plans_enabled(True):
        on = run()
    with plans_enabled(False):
        off = run()
    assert on[0] == off[0]
    np.testing.assert_array_equal(on[1], off[1])


def test_plan_cache_is_bounded():
    old = codegen.MAX_CACHED
    codegen.MAX_CACHED = 4
    try:
        codegen.clear()
        for n in range(1, 12):
            a = eager.ones(n, requires_grad=True)
            (a * a).sum().backward()
            assert codegen.cache_size() <= 4
    finally:
        codegen.MAX_CACHED = old
        codegen.clear()


def test_plans_write_into_dead_temporaries():
    x = eager.tensor(np.linspace(-2, 2, 50), requires_grad=True)
    y = x.tanh()
    src = codegen.source(y.grad_fn, eager.ones(50, dtype=eager.float64))
    # g * (1 - out * out): the subtraction and the product reuse the first temporary
    assert "f_sub(c1, t0, out=t0)" in src and "f_mul(g, t1, out=t1)" in src
    y.backward(eager.ones(50, dtype=eager.float64))
    want = 1 - np.tanh(np.linspace(-2, 2, 50)) ** 2
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-15)
    assert not np.shares_memory(x.grad.numpy(), y.detach().numpy())


def test_a_returned_temporary_is_never_overwritten():
    # mul's two gradients are separate temporaries that are both returned
    a = eager.tensor(np.arange(1.0, 7.0).reshape(2, 3), requires_grad=True)
    b = eager.tensor(np.arange(2.0, 8.0).reshape(2, 3), requires_grad=True)
    (a * b * a).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), 2 * a.detach().numpy() * b.detach().numpy())
    np.testing.assert_array_equal(b.grad.numpy(), a.detach().numpy() ** 2)


def test_buffer_reuse_never_overwrites_a_buffer_a_view_still_reads():
    from eager.autograd.backward_codegen import RuleTracer, _Recorder
    rec = _Recorder()
    g = RuleTracer(rec, "g", (2, 3), np.dtype(np.float64))
    t0 = g * g                       # a fresh temporary
    v = t0.reshape(3, 2)             # a view of it, used at the end
    t1 = t0 + 1.0                    # t0's last use: it must not be overwritten
    lines = rec.lines([v._name, t1._name])
    assert not any("out=" in ln for ln in lines), lines
    rec = _Recorder()
    g = RuleTracer(rec, "g", (2, 3), np.dtype(np.float64))
    t0 = g * g
    t1 = t0 + 1.0                    # no view: the temporary is reused
    assert any("out=t0" in ln for ln in rec.lines([t1._name]))


def test_buffer_reuse_keeps_numpys_memory_layout():
    # an F-ordered temporary (through x.t()) times a C-ordered gradient: numpy's result is
    # C-ordered, and the bias gradient sums it in that order; a reused buffer would not be
    r = np.random.default_rng(0)
    X, B, W = (r.standard_normal(s).astype(np.float32) for s in [(300, 1000), (300,), (1000, 300)])

    def bias_grad():
        x = eager.tensor(X, requires_grad=True)
        b = eager.tensor(B, requires_grad=True)
        ((x.t() + b).tanh() * eager.tensor(W)).sum().backward()
        return b.grad.numpy()
    with plans_enabled(False):
        want = bias_grad()
    with plans_enabled(True):
        bias_grad()
        got = bias_grad()
    np.testing.assert_array_equal(got, want)


def test_nan_attrs_share_one_plan():
    codegen.clear()
    for _ in range(5):
        x = eager.tensor([1.0, 2.0, 3.0], requires_grad=True)
        x.clamp(min=float("nan")).sum().backward()
    assert codegen.cache_size() == 2              # clamp's and sum's
