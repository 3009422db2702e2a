"""Tensors a compiled function reaches through the functions it calls are live inputs.

A helper ``loss(x) -> helper(x) -> model(x)`` or the user function inside a transform
(``graphc.value_and_grad(f)``) reads ``model`` by name as the compiled function itself
would: an update of the parameters between calls must be seen (a constant baked into
the trace would silently give stale results)."""

from __future__ import annotations

import numpy as np

import eager
import graphc

X = np.ones((2, 3), np.float32)


def _bump(m):
    with eager.no_grad():
        for p in m.parameters():
            p += 1


_model = None


def _helper(x):
    return _model(x).sum()


def _deeper(x):
    return _helper(x) * 2


def test_a_global_helper_reads_the_model_live():
    global _model
    eager.manual_seed(0)
    _model = eager.nn.Linear(3, 1)
    x = eager.tensor(X)
    for fn in (_helper, _deeper, lambda x: _deeper(x) + 1):
        c = graphc.compile(fn)
        assert np.isclose(c(x).item(), fn(x).item())
        _bump(_model)
        assert np.isclose(c(x).item(), fn(x).item())
        assert c.cache_info().traces == 1


def test_a_closure_helper_and_a_default_argument_read_the_model_live():
    eager.manual_seed(0)
    m = eager.nn.Linear(3, 2)

    def inner(x):
        return m(x)

    def outer(x, f=inner):
        return f(x).pow(2).sum()

    x = eager.tensor(X)
    c = graphc.compile(outer)
    assert np.isclose(c(x).item(), outer(x).item())
    _bump(m)
    assert np.isclose(c(x).item(), outer(x).item(), rtol=1e-6)


def test_value_and_grad_of_a_function_using_batch_norm_updates_its_statistics():
    eager.manual_seed(0)
    bn = eager.nn.BatchNorm1d(3)
    bn_ref = eager.nn.BatchNorm1d(3)
    x = eager.tensor(np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32))
    w = eager.tensor(np.arange(3, dtype=np.float32))

    def f(w, x):
        return (bn(x) * w).sum()

    def f_ref(w, x):
        return (bn_ref(x) * w).sum()

    vg = graphc.value_and_grad(f)
    for _ in range(2):
        v, g = vg(w, x)
        wr = w.detach().requires_grad_()
        vr = f_ref(wr, x)
        vr.backward()
        np.testing.assert_allclose(v.item(), vr.item(), atol=1e-5)
        np.testing.assert_allclose(g.numpy(), wr.grad.numpy(), atol=1e-5)
        np.testing.assert_allclose(bn.running_mean.numpy(), bn_ref.running_mean.numpy(), rtol=1e-6)
        np.testing.assert_allclose(bn.running_var.numpy(), bn_ref.running_var.numpy(), rtol=1e-6)


def test_recursive_and_mutually_referring_helpers_terminate():
    eager.manual_seed(0)
    m = eager.nn.Linear(3, 1)

    def a(x, n=2):
        return m(x).sum() if n == 0 else b(x, n - 1)

    def b(x, n):
        return a(x, n)

    x = eager.tensor(X)
    c = graphc.compile(lambda x: a(x))
    assert np.isclose(c(x).item(), a(x).item())
    _bump(m)
    assert np.isclose(c(x).item(), a(x).item())
