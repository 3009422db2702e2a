"""backward() runs the newest pending node first (no discovery pass): every node must be
newer than the nodes its edges point to, and each node runs once, with the sum of all
the gradients it receives."""
from __future__ import annotations

import numpy as np
import pytest

import eager


class Double(eager.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def _hook_calls(t):
    calls = []
    t.register_hook(lambda g: calls.append(g.numpy().copy()))
    return calls


def test_custom_function_on_a_fresh_leaf_sums_before_the_hook():
    x = eager.tensor([1.0, 2.0], requires_grad=True)     # no AccumulateGrad yet
    calls = _hook_calls(x)
    y = Double.apply(x) + x * 3
    y.sum().backward()
    assert len(calls) == 1                                  # one delivery: the full sum
    np.testing.assert_array_equal(calls[0], [5.0, 5.0])
    np.testing.assert_array_equal(x.grad.numpy(), [5.0, 5.0])


def test_every_node_runs_once_on_a_diamond():
    x = eager.tensor([0.5, -1.0], dtype=eager.float64, requires_grad=True)
    h = x.exp()
    mid_calls = _hook_calls(h)
    a, b, c = h * 2, h.sin(), h * h
    out = (a + b) * c
    out.sum().backward()
    assert len(mid_calls) == 1
    hx = np.exp(np.array([0.5, -1.0]))
    dh = (2 + np.cos(hx)) * hx * hx + (2 * hx + np.sin(hx)) * 2 * hx
    np.testing.assert_allclose(mid_calls[0], dh)
    np.testing.assert_allclose(x.grad.numpy(), dh * hx)


def test_a_node_reached_only_through_unused_outputs_does_not_run():
    x = eager.tensor([1.0, 2.0], requires_grad=True)
    v = x.max(dim=0).values                                 # argmax output carries no gradient
    y = x.max(dim=0)
    (v * 1).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0])
    assert y.values.grad_fn is not None


def test_a_long_chain_with_a_side_branch():
    x = eager.tensor(1.0, dtype=eager.float64, requires_grad=True)
    y = x
    side = []
    for i in range(2000):
        y = y * 1.0001
        if i % 500 == 0:
            side.append(y)
    total = y + sum(side)
    total.backward()
    want = 1.0001 ** 2000 + sum(1.0001 ** (i + 1) for i in range(0, 2000, 500))
    assert x.grad.item() == pytest.approx(want, rel=1e-12)


def test_a_leaf_keeps_one_accumulator_and_graphs_do_not_keep_leaves_alive():
    import gc
    import weakref
    x = eager.tensor([1.0, 2.0], requires_grad=True)
    acc1 = (x * 2).grad_fn.next_functions[0][0]
    acc2 = (x * 3).grad_fn.next_functions[0][0]
    assert acc1 is acc2 and type(acc1).__name__ == "AccumulateGrad" and acc1.variable is x
    y = (x + 1).sum()                       # add saves nothing
    ref = weakref.ref(x)
    acc = y.grad_fn.next_functions[0][0].next_functions[0][0]
    del x, acc1, acc2
    gc.collect()
    assert ref() is None                    # the graph held it only weakly (PyTorch: strongly)
    assert acc.variable is None
    y.backward()                            # nothing to accumulate into: no error
    assert "AccumulateGrad" in eager.viz.to_dot(y)


class _Twice(eager.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        return x * y

    @staticmethod
    def backward(ctx, g):
        h = g * 2
        return h, h                      # one tensor for both inputs


@pytest.mark.parametrize("with_inputs", [False, True])
def test_a_function_returning_one_tensor_twice_gives_leaves_separate_grads(with_inputs):
    x = eager.zeros(3, requires_grad=True)
    y = eager.zeros(3, requires_grad=True)
    kw = {"inputs": [x, y]} if with_inputs else {}
    _Twice.apply(x, y).sum().backward(**kw)
    (x * 1).sum().backward(**({"inputs": [x]} if with_inputs else {}))
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(y.grad.numpy(), [2.0, 2.0, 2.0])


def test_a_leaf_hook_keeps_what_it_returned():
    x = eager.tensor([1.0, 2.0], requires_grad=True)
    kept = []

    def hook(g):
        r = g * 10
        kept.append(r)
        return r
    x.register_hook(hook)
    (x * 1).sum().backward()
    (x * 1).sum().backward()
    np.testing.assert_array_equal(kept[0].numpy(), [10.0, 10.0])     # PyTorch: 10, not 20
    np.testing.assert_array_equal(x.grad.numpy(), [20.0, 20.0])
