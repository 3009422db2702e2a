"""Random numbers inside compiled code: drawn at every call, reproducible by seed.

Draws are ``philox`` nodes generated in native code from the call's generator state
(graphc.runtime.rng): the backward recomputes a dropout's mask from the same state, so
its gradient is the same mask, not a new one.
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
    from graphc.backend import parallel_policy
    from graphc.runtime import parallel
    f = graphc.compile(lambda x: (x + eager.rand_like(x)).exp() + eager.randn(x.shape[0]))
    x = np.zeros(1 << 19)                  # above PARALLEL_MIN: the draws are shared out
    outs = []
    old = parallel.get_num_threads()
    try:
        for n in (1, 2, 3):
            parallel.set_num_threads(n)
            eager.manual_seed(11)
            outs.append(f(x))
    finally:
        parallel.set_num_threads(old)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])
    plan = next(iter(f._cache.values())).stages["_executable"].plan
    assert any(k.kind == "philox" and parallel_policy.parallel_ok(plan, k) for k in plan.kernels)


def test_philox_matches_the_published_known_answers():
    """Random123's known-answer vectors for Philox 4x32-10 (kat_vectors)."""
    from eager.ops.random import philox4x32

    def run(ctr, key):
        words = philox4x32(*[np.array([c], np.uint64) for c in ctr], *key)
        return [int(w[0]) for w in words]

    assert run((0, 0, 0, 0), (0, 0)) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    f = 0xFFFFFFFF
    assert run((f, f, f, f), (f, f)) == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
    assert run((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0)) == \
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


@pytest.mark.parametrize("dist,dtype", [("uniform", "float32"), ("uniform", "float64"),
                                        ("integers", "int64"), ("integers", "int32"),
                                        ("normal", "float32"), ("normal", "float64")])
@pytest.mark.parametrize("shape", [(), (0,), (3, 5), (1 << 18 | 3,)])
def test_native_draws_are_the_interpreters(dist, dtype, shape):
    """The native kernel and the numpy forward (graphc's interpreter) give the same bits;
    a float64 normal may differ in its last bit (log and cos are not libm's)."""
    from eager.ops import OPS
    state = np.array([-0x0123456789ABCDEF, 2 ** 63 - 5], np.int64)   # counters wrap
    high = 2 ** 40 if dtype == "int64" else 1000
    attrs = dict(dist=dist, shape=shape, dtype=dtype, low=-7, high=high, offset=3)
    want = OPS["philox"].forward(state, **attrs)
    got = graphc.compile(lambda s: s._op("philox", None, **attrs))(state)
    assert got.dtype == want.dtype and got.shape == want.shape
    if dist == "normal" and dtype == "float64":
        np.testing.assert_allclose(got, want, rtol=4e-16, atol=4e-16)
    else:
        np.testing.assert_array_equal(got, want)
    if dist == "integers" and want.size:
        assert want.min() >= -7 and want.max() < high


def test_a_graph_with_random_draws_round_trips_through_json():
    from graphc.ir import from_json, to_json
    g = graphc.trace(lambda x: x + eager.randn(3) * eager.rand(3), np.zeros(3))
    text = to_json(g)
    assert to_json(from_json(text)) == text
    assert [g.nx.nodes[n]["attrs"]["offset"] for n in g.nx.nodes
            if g.nx.nodes[n]["op"] == "philox"] == [0, 3]


def test_draws_of_zero_dimensional_and_empty_shapes():
    f = graphc.compile(lambda x: (eager.randn(()) + x, eager.rand(0, 4), eager.randint(3, (0,))))
    a, b, c = f(np.zeros(()))
    assert a.shape == () and np.isfinite(a)
    assert b.shape == (0, 4) and c.shape == (0,) and c.dtype == np.int64


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
