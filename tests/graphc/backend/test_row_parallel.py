"""Loops split across threads by rows although they reduce (``parallel_policy.
rows_parallel_ok``: softmax's row ``exp``-and-sum, a row mean), costly elementwise
loops under ``PARALLEL_MIN`` elements (GELU's ``erf``), and loops over a folded
product's (..., m, N) rows run inside the product's shares (``epilogues``).

Each output row is accumulated by one chunk in the serial loop's order, so results must
be *bitwise* those of the serial code (the switches off), on every thread count, and
close to numpy's / eager's."""

from __future__ import annotations

import numpy as np
import pytest

import eager
import graphc
from graphc.backend import blas, parallel_policy as pp
from graphc.runtime import parallel


@pytest.fixture
def threads():
    before = parallel.get_num_threads()
    yield parallel.set_num_threads
    parallel.set_num_threads(before)


@pytest.fixture
def switches():
    before = pp.ROW_PARALLEL, pp.FOLDED_EPILOGUES

    def set_(on: bool) -> None:
        pp.ROW_PARALLEL = pp.FOLDED_EPILOGUES = on

    yield set_
    pp.ROW_PARALLEL, pp.FOLDED_EPILOGUES = before


def _plan_of(cf):
    entry = next(iter(cf._cache.values()))
    return entry.stages["_executable"].plan


def _rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(dtype)


def _runs(fn, args, threads, switches):
    """{(switches on, threads): outputs as numpy arrays}, plus the plan with them on."""
    out, plan = {}, None
    for on in (False, True):
        switches(on)
        for nt in (1, 2, 3):
            threads(nt)
            cf = graphc.compile(fn)
            res = cf(*args)
            res = res if isinstance(res, tuple) else (res,)
            out[(on, nt)] = [np.asarray(r) for r in res]
            if on:
                plan = _plan_of(cf)
    return out, plan


def _assert_bitwise(out, per_threads: bool = False):
    """Every run equals the serial plan's on one thread (``per_threads``: on the same
    thread count -- a BLAS product shared by rows may round differently per count)."""
    for key, got in out.items():
        base = out[(False, key[1] if per_threads else 1)]
        for a, b in zip(base, got):
            assert a.dtype == b.dtype and a.shape == b.shape, key
            assert np.array_equal(a, b, equal_nan=True), key


def _row_kernels(plan):
    """Loop kernels with a kept-dims reduction that run in parallel."""
    g = plan.g.nx
    return [
        k
        for k in plan.kernels
        if k.kind == "loop"
        and pp.parallel_ok(plan, k)
        and any(int(np.prod(g.nodes[r]["shape"])) != 1 for r in k.reduces)
    ]


SOFTMAX_SHAPES = [(8, 4, 64, 64), (3, 5, 70, 300), (2, 1, 1, 70000), (7, 2049, 30), (3, 5, 7, 9)]


@pytest.mark.parametrize("shape", SOFTMAX_SHAPES, ids=str)
def test_a_masked_softmax_row_sum_is_split_by_rows_and_bitwise_serial(threads, switches, shape):
    x = _rand(*shape)
    mask = np.triu(np.ones(shape[-2:], bool), 1)

    def f(a, m):
        s = (a * 0.25).masked_fill(m, float("-inf"))
        e = (s - s.amax(-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True), e.sum(-1)

    out, plan = _runs(f, (x, mask), threads, switches)
    _assert_bitwise(out)
    if np.prod(shape) >= 1 << 17:
        assert _row_kernels(plan), plan.describe()
    ref = eager.tensor(x)
    want = (ref * 0.25).masked_fill(eager.tensor(mask), float("-inf")).softmax(-1).numpy()
    np.testing.assert_allclose(out[(True, 2)][0], want, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_means_and_sums_over_middle_dims(threads, switches, dtype):
    x = _rand(40, 33, 250, dtype=dtype)

    def f(a):
        e = a.exp()
        return e.mean(-1), e.sum((1, 2), keepdim=True), (e * a).mean((-1, -2))

    out, plan = _runs(f, (x,), threads, switches)
    _assert_bitwise(out)
    assert _row_kernels(plan), plan.describe()
    e = np.exp(x.astype(np.float64))
    np.testing.assert_allclose(out[(True, 2)][0], e.mean(-1), rtol=1e-5)
    np.testing.assert_allclose(out[(True, 2)][1], e.sum((1, 2), keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(out[(True, 2)][2], (e * x).mean((-1, -2)), rtol=1e-5)


def test_a_full_sum_in_the_loop_keeps_it_serial(threads, switches):
    x = _rand(64, 4096)

    def f(a):
        e = a.exp()
        return e.sum(-1), e.sum()

    out, plan = _runs(f, (x,), threads, switches)
    _assert_bitwise(out)  # a full sum split into partials would change with threads
    assert not _row_kernels(plan)


def test_a_reduction_over_dim_0_or_a_float_max_is_not_split(threads, switches):
    x = _rand(512, 256)

    def f(a):
        e = a.exp()
        return e.sum(0), (a * 3.0).exp().amax(-1)

    out, plan = _runs(f, (x,), threads, switches)
    _assert_bitwise(out)
    assert not _row_kernels(plan)


def test_cheap_row_loops_stay_serial(threads, switches):
    switches(True)
    threads(2)
    f = graphc.compile(lambda a: (a * 2.0).sum(-1))
    f(_rand(8, 4, 64, 64))
    plan = _plan_of(f)
    assert not any(pp.parallel_ok(plan, k) for k in plan.kernels if k.kind == "loop")


def test_gelu_loop_under_parallel_min_is_split_and_bitwise_serial(threads, switches):
    x = _rand(8, 64, 256)

    def f(a):
        return eager.nn.functional.gelu(a + 0.5)

    out, plan = _runs(f, (x,), threads, switches)
    _assert_bitwise(out)
    assert any(k.kind == "loop" and pp.parallel_ok(plan, k) for k in plan.kernels)


def test_size_0_and_size_1_rows(threads, switches):
    for shape in [(0, 5, 7), (3, 0, 7), (1, 1, 1), (300000, 1)]:
        x = _rand(*shape)

        def f(a):
            return a.exp().sum(-1), a.exp().mean(-1, keepdim=True)

        out, _ = _runs(f, (x,), threads, switches)
        _assert_bitwise(out)
        np.testing.assert_allclose(out[(True, 2)][0], np.exp(x).sum(-1), rtol=1e-6)


def test_non_contiguous_rows(threads, switches):
    x = _rand(70, 300, 64).transpose(1, 0, 2)[:, ::2]  # (300, 35, 64), strided

    def f(a):
        e = a.exp()
        return e / e.sum(-1, keepdim=True)

    out, plan = _runs(f, (x,), threads, switches)
    _assert_bitwise(out)
    e = np.exp(x.astype(np.float64))
    np.testing.assert_allclose(out[(True, 2)][0], e / e.sum(-1, keepdims=True), rtol=1e-5)


def test_gradients_of_a_softmax_attention_are_bitwise_serial(threads, switches):
    q, k = _rand(4, 4, 64, 16), _rand(4, 4, 64, 16, seed=3)

    def loss(q, k):
        att = (q @ k.transpose(-2, -1)).softmax(-1)
        return (att * att).sum()

    out, _ = _runs(graphc.grad(loss, argnums=(0, 1)), (q, k), threads, switches)
    _assert_bitwise(out)


@pytest.mark.skipif(not blas.available(), reason="products run as loops: no shares")
def test_a_folded_linear_runs_its_bias_loop_inside_its_shares(threads, switches):
    x, w, b = _rand(8, 64, 512), _rand(256, 512, seed=4), _rand(256, seed=5)
    pos = _rand(64, 256, seed=6)

    def f(x, w, b):
        return (x @ w.T).tanh() * 2.0 + b

    def g(x, w, p):  # a (64, 256) operand broadcast over the batch: no row split
        return (x @ w.T) * p

    for fn, args in ((f, (x, w, b)), (g, (x, w, pos))):
        out, plan = _runs(fn, args, threads, switches)
        _assert_bitwise(out, per_threads=True)
        ref = x.astype(np.float64) @ w.T.astype(np.float64)
        ref = np.tanh(ref) * 2.0 + b if fn is f else ref * pos
        np.testing.assert_allclose(out[(True, 2)][0], ref, rtol=1e-4, atol=1e-4)
    switches(True)
    threads(2)
    cf = graphc.compile(f)
    cf(x, w, b)
    assert pp.epilogues(_plan_of(cf))


@pytest.mark.skipif(not blas.available(), reason="products run as loops: no shares")
def test_the_attention_block_step_is_bitwise_the_serial_plans(threads, switches):
    from graphc.tools.models import build

    M = build()
    rng = np.random.default_rng(8)
    tokens = rng.integers(0, 128, size=(8, 65))
    batch = (eager.tensor(tokens[:, :-1].copy()), eager.tensor(tokens[:, 1:].copy()))
    results = {}
    threads(2)
    for on in (False, True):
        switches(on)
        eager.manual_seed(0)
        m = M.AttentionBlock()
        opt = eager.optim.Adam(m.parameters(), lr=1e-3)

        def step(a, b, m=m, opt=opt):
            opt.zero_grad()
            loss = M.token_loss(m, a, b)
            loss.backward()
            opt.step()
            return loss

        c = graphc.compile(step)
        losses = [c(*batch).item() for _ in range(3)]
        results[on] = losses, [p.detach().numpy().copy() for p in m.parameters()]
    assert results[False][0] == results[True][0]
    for a, b in zip(results[False][1], results[True][1]):
        assert np.array_equal(a, b)
