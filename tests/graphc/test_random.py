"""Random numbers inside compiled code: drawn at every call, reproducible by seed.

Draws are graph inputs the call fills from graphc's Philox stream (graphc.runtime.rng);
the mask of a dropout is one of them, so its gradient is the same mask, not a new one.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import eager
import graphc
from eager import nn

X = np.zeros(4)


def test_two_calls_draw_different_numbers_and_a_seed_reproduces_them():
    f = graphc.compile(lambda x: x + eager.randn(4))
    a, b = f(X), f(X)
    assert not np.array_equal(a, b)
    eager.manual_seed(7)
    first = [f(X) for _ in range(3)]
    eager.manual_seed(7)
    again = [f(X) for _ in range(3)]
    for p, q in zip(first, again):
        np.testing.assert_array_equal(p, q)
    assert f.cache_info().traces == 1


@pytest.mark.parametrize("make, mean, var", [
    (lambda x: eager.randn_like(x), 0.0, 1.0),
    (lambda x: eager.rand_like(x), 0.5, 1 / 12),
    (lambda x: eager.randint(0, 10, (x.shape[0],)).to(x.dtype), 4.5, 99 / 12),
    (lambda x: eager.bernoulli(eager.full_like(x, 0.3)), 0.3, 0.21),
    (lambda x: (x * 1).normal_(2.0, 3.0), 2.0, 9.0),
    (lambda x: (x * 1).uniform_(-1.0, 1.0), 0.0, 1 / 3),
], ids=["randn", "rand", "randint", "bernoulli", "normal_", "uniform_"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_million_draws_have_the_right_mean_and_variance(make, mean, var, dtype):
    n = 1_000_000
    out = np.asarray(graphc.compile(make)(np.zeros(n, dtype)))
    assert out.dtype == dtype
    sd = np.sqrt(var)
    assert abs(out.mean() - mean) < 6 * sd / np.sqrt(n)        # six standard errors
    assert abs(out.var() - var) < 0.01 * var + 1e-3


def test_dropout_gradient_is_its_mask_times_the_scale():
    d = graphc.compile(lambda w: nn.functional.dropout(w, 0.25))
    w = eager.tensor(np.ones(1000), requires_grad=True)
    out = d(w)
    out.sum().backward()
    kept = out.detach().numpy() != 0
    np.testing.assert_allclose(out.detach().numpy()[kept], 1 / 0.75)
    np.testing.assert_allclose(w.grad.numpy(), kept / 0.75)
    assert 0.65 < kept.mean() < 0.85
    val, g = graphc.compile(graphc.value_and_grad(
        lambda w: (nn.functional.dropout(w, 0.5) * w).sum()))(np.full(1000, 2.0))
    mask = g != 0                                   # d/dw (m w^2 / 0.5) = 4 m w = 8 m
    np.testing.assert_allclose(g[mask], 8.0)
    np.testing.assert_allclose(val, 8.0 * mask.sum())


def test_dropout_respects_train_and_eval():
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5))
    cm = graphc.compile(model)
    x = eager.tensor(np.ones((4, 8), np.float32))
    with eager.no_grad():
        a, b = cm(x).numpy(), cm(x).numpy()
        assert not np.array_equal(a, b)
        cm.eval()
        np.testing.assert_allclose(cm(x).numpy(), model[0](x).numpy(), rtol=1e-6)


def test_the_numbers_do_not_depend_on_the_thread_count():
    from graphc.backend import blas
    from graphc.runtime import parallel
    f = graphc.compile(lambda x: (x + eager.rand_like(x)).exp())
    x = np.zeros(1 << 19)
    outs = []
    old, old_blas = parallel.get_num_threads(), blas.get_num_threads()
    try:
        for n in (1, 2):
            parallel.set_num_threads(n)
            eager.manual_seed(11)
            outs.append(f(x))
    finally:                    # (set_num_threads sets BLAS's count too: both restored)
        parallel.set_num_threads(old)
        blas.set_num_threads(old_blas)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_eager_keeps_its_own_stream():
    eager.manual_seed(5)
    e1 = eager.randn(4).numpy()
    eager.manual_seed(5)
    e2 = eager.randn(4).numpy()
    np.testing.assert_array_equal(e1, e2)
    eager.manual_seed(5)
    c = graphc.compile(lambda x: x + eager.randn(4))(X)
    assert not np.array_equal(c, e1)                # documented: different streams


def test_python_and_numpy_global_random_warn_that_they_are_frozen():
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        f = graphc.compile(lambda x: x + np.random.randn(4))
        a = f(X)
    assert any("np.random" in str(w.message) and "constants" in str(w.message) for w in ws)
    np.testing.assert_array_equal(f(X), a)          # frozen, as the warning says
    import random
    with pytest.warns(RuntimeWarning, match="Python's random module"):
        graphc.compile(lambda x: x * random.random())(X)
