"""Costly shared values are computed once (graphc.backend.schedule).

A fused elementwise value is recomputed in every kernel that consumes it.  A value
whose chain holds a transcendental op (exp, erf, tanh...) and that several nodes read
is stored instead (``Schedule._materialize_shared_costly``); consumers over the same
index space still run inside the producing kernel and read it from a register
(``Schedule._reads_in_register``), and a store nothing reads from memory is dropped
again (``Schedule._drop_unread_stores``).  Storing instead of recomputing gives the
same elementwise values; a sum that moves to another kernel may be vectorized
differently (sums are reassociated, docs/backend.md), so results are compared with
the recomputing schedule (``RECOMPUTE_MAX`` raised out of reach) to a few float64
ulps / float32 rounding, at one and two threads, and with the interpreter / numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

import eager
import eager.nn.functional as F
import graphc
import graphc.backend.schedule as S
from graphc.runtime import parallel

from .test_fusion_memory import assert_matches_interpreter, plan_of


def _count(plan, op: str) -> int:
    """Loop kernels that compute ``op`` (each computes it once per element)."""
    n = 0
    for k in plan.kernels:
        if k.kind != "loop":
            continue
        nodes = plan.expr_nodes(plan.kernel_roots(k))
        n += sum(1 for m in nodes if plan.g.nx.nodes[m]["op"] == op)
    return n


def _recomputing(monkeypatch):
    monkeypatch.setattr(S, "RECOMPUTE_MAX", 10**9)


def softmax_loss(s, m):
    p = s.masked_fill(m, float("-inf")).softmax(dim=-1)
    return (p * p.cos()).sum()


def gelu_loss(x, b, w):
    return (F.gelu(x + b) @ w).cos().sum()  # the product reads GELU from memory


def _flat(out) -> list:
    res = []
    stack = [out]
    while stack:
        v = stack.pop()
        if isinstance(v, (tuple, list)):
            stack.extend(reversed(v))
        else:
            res.append(np.asarray(v.numpy() if hasattr(v, "numpy") else v))
    return res


def _both(fn, args, monkeypatch) -> tuple:
    """(new results, recomputing results, new plan, recomputing plan)."""
    new = graphc.compile(fn)
    got = _flat(new(*args))
    with monkeypatch.context() as mp:
        _recomputing(mp)
        old = graphc.compile(fn)
        want = _flat(old(*args))
        old_plan = plan_of(old, *args)
    return got, want, plan_of(new, *args), old_plan


def _same(got, want) -> None:
    for a, b in zip(got, want):
        tol = 1e-6 if a.dtype == np.float32 else 1e-13
        scale = float(np.max(np.abs(b))) if b.size else 0.0
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * scale)


def _softmax_args(shape, dt):
    rng = np.random.default_rng(1)
    s = eager.tensor(rng.standard_normal(shape).astype(dt))
    m = eager.tensor(np.triu(np.ones(shape[-2:], bool), 1))
    return s, m


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2])
def test_softmax_gradient_computes_exp_once_and_keeps_every_bit(dt, threads, monkeypatch):
    old_threads = parallel.get_num_threads()
    parallel.set_num_threads(threads)
    try:
        args = _softmax_args((8, 4, 64, 64), dt)
        fn = graphc.value_and_grad(softmax_loss)
        got, want, plan, old_plan = _both(fn, args, monkeypatch)
        assert _count(plan, "exp") == 1
        assert _count(old_plan, "exp") > 1
        _same(got, want)
        assert_matches_interpreter(
            graphc.compile(fn), args, rtol=1e-5 if dt == np.float32 else 1e-12
        )
    finally:
        parallel.set_num_threads(old_threads)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_gelu_gradient_computes_erf_once(dt, monkeypatch):
    rng = np.random.default_rng(2)
    x = eager.tensor(rng.standard_normal((8, 64, 256)).astype(dt))
    b = eager.tensor(rng.standard_normal(256).astype(dt))
    w = eager.tensor(rng.standard_normal((256, 3)).astype(dt))
    fn = graphc.value_and_grad(gelu_loss, argnums=(0, 1))
    got, want, plan, old_plan = _both(fn, (x, b, w), monkeypatch)
    assert _count(plan, "erf") == 1 and _count(old_plan, "erf") > 1
    _same(got, want)
    # vs eager's own autograd
    xe, be = (eager.tensor(v.numpy(), requires_grad=True) for v in (x, b))
    loss = gelu_loss(xe, be, w)
    loss.backward()
    tol = 1e-5 if dt == np.float32 else 1e-12
    np.testing.assert_allclose(got[0], loss.item(), rtol=tol)
    # float32: the compiled erf is float32 arithmetic (<= 2 ulp, docs/backend-accuracy.md),
    # eager's is rounded from float64; the product's outputs (|y| ~ 20, ulp 2e-6) then
    # round differently and cos' gradient amplifies that where its sum cancels
    atol = 3 * tol if dt == np.float32 else tol
    np.testing.assert_allclose(got[1], xe.grad.numpy(), rtol=tol, atol=atol)
    np.testing.assert_allclose(got[2], be.grad.numpy(), rtol=tol, atol=tol * 100)


@pytest.mark.parametrize(
    "shape", [(3, 5, 7), (1, 1), (0, 4), (4, 0), (1, 1, 1, 1), (2, 3, 1, 1)], ids=str
)
def test_odd_and_empty_shapes(shape, monkeypatch):
    args = _softmax_args(shape, np.float64)
    fn = graphc.value_and_grad(softmax_loss)
    got, want, _, _ = _both(fn, args, monkeypatch)
    _same(got, want)


def test_zero_dim_and_non_contiguous_inputs(monkeypatch):
    def f(x, y):
        e = (x * 2.0).exp()
        return e * y + e.sum(), (e * y).tanh()

    rng = np.random.default_rng(3)
    base = rng.standard_normal((6, 9))
    x = eager.tensor(base).t()  # non-contiguous
    y = eager.tensor(np.array(0.7))  # 0-d
    got, want, plan, _ = _both(f, (x, y), monkeypatch)
    _same(got, want)
    e = np.exp(base.T * 2.0)
    np.testing.assert_allclose(got[0], e * 0.7 + e.sum(), rtol=1e-12)
    np.testing.assert_allclose(got[1], np.tanh(e * 0.7), rtol=1e-12)
    z = eager.tensor(np.array(0.3))
    got, want, _, _ = _both(lambda a: (a.exp() + a.exp().sin(), a.exp().sum()), (z,), monkeypatch)
    _same(got, want)


def test_a_transposed_read_of_a_stored_value_is_not_fused_into_its_kernel(monkeypatch):
    # e is stored; e + e.T reads e at another index than the one just computed: that
    # kernel must run after e is complete (fusing it would read unwritten elements)
    def f(a):
        e = a.exp()
        return e + e.t() + e.sum()

    rng = np.random.default_rng(4)
    for n in (1, 5, 64):
        a = rng.standard_normal((n, n))
        cf = graphc.compile(f)
        got = cf(eager.tensor(a)).numpy()
        e = np.exp(a)
        np.testing.assert_allclose(got, e + e.T + e.sum(), rtol=1e-12)
        assert_matches_interpreter(cf, (eager.tensor(a),))


def test_a_value_read_only_in_its_own_kernel_gets_no_buffer():
    # tanh(x) read twice, both in the kernel that computes it: nothing stored
    x = np.random.default_rng(5).standard_normal(10_000)
    cf = graphc.compile(lambda v: (v.tanh() * 2.0 + v.tanh() ** 2).sum())
    cf(x)
    plan = plan_of(cf, x)
    assert len(plan.kernels) == 1 and plan.kernels[0].stores == [] and plan.arena_bytes == 0
    t = np.tanh(x)
    np.testing.assert_allclose(cf(x), np.sum(t * 2.0 + t**2), rtol=1e-12)


def test_compiled_attention_step_matches_eager():
    from graphc.tools.models import build

    M = build()
    rng = np.random.default_rng(8)
    tokens = rng.integers(0, 128, size=(2, 17))
    x, y = eager.tensor(tokens[:, :-1].copy()), eager.tensor(tokens[:, 1:].copy())
    eager.manual_seed(0)
    m1 = M.AttentionBlock(seq=16)
    eager.manual_seed(0)
    m2 = M.AttentionBlock(seq=16)
    o1 = eager.optim.Adam(m1.parameters(), lr=1e-3)
    o2 = eager.optim.Adam(m2.parameters(), lr=1e-3)

    def step(model, opt, a, b):
        opt.zero_grad()
        loss = M.token_loss(model, a, b)
        loss.backward()
        opt.step()
        return loss

    cf = graphc.compile(lambda a, b: step(m2, o2, a, b))
    for _ in range(4):
        le, lc = step(m1, o1, x, y).item(), cf(x, y).item()
        np.testing.assert_allclose(lc, le, rtol=1e-4)
    # Adam moves a weight by about lr whatever its gradient's size: a gradient near zero
    # whose last bits differ (sums reassociate) may move it the other way
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        np.testing.assert_allclose(p2.detach().numpy(), p1.detach().numpy(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_a_costly_scalar_broadcast_over_a_loop_is_computed_once(dt, monkeypatch):
    # Adam's bias correction: (1 - beta ** step) is a scalar the update loop broadcasts
    def update(p, g, step):
        c1 = 1.0 - eager.tensor(0.9, dtype=eager.float64) ** step
        c2 = (1.0 - eager.tensor(0.999, dtype=eager.float64) ** step).sqrt()
        return p - 0.01 * g * c2 / c1

    rng = np.random.default_rng(6)
    p = eager.tensor(rng.standard_normal((33, 65)).astype(dt))
    g = eager.tensor(rng.standard_normal((33, 65)).astype(dt))
    step = eager.tensor(np.array(7.0))
    got, want, plan, old_plan = _both(update, (p, g, step), monkeypatch)
    np.testing.assert_array_equal(got[0], want[0])
    for k in plan.kernels:
        nodes = plan.expr_nodes(plan.kernel_roots(k)) if k.kind == "loop" else []
        if any(plan.g.nx.nodes[m]["op"] == "pow" for m in nodes):
            assert k.space == ()  # computed once, not per element
    big = [k for k in old_plan.kernels if k.kind == "loop" and k.space == (33, 65)]
    assert any(
        plan.g.nx.nodes[m]["op"] == "pow"
        for k in big
        for m in old_plan.expr_nodes(old_plan.kernel_roots(k))
    )
    c1, c2 = 1 - 0.9**7, np.sqrt(1 - 0.999**7)
    np.testing.assert_allclose(got[0], p.numpy() - 0.01 * g.numpy() * c2 / c1, rtol=1e-6)
