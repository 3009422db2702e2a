"""Rematerialization in the memory plan (docs/backend.md, "Memory plan"): a cheap
elementwise value read before and after the arena's peak (softmax's probabilities, a
GELU's output, a layer norm's output) is recomputed for its late readers by a copy of
its node, so the stored value dies early.  Checked bit for bit against the plan without
it (the copy runs the same code), with freed arena bytes poisoned, against the
interpreter, eager and finite differences, on 1-3 threads."""

from __future__ import annotations

import numpy as np
import pytest

import eager
import graphc
import graphc.backend.schedule as S
from graphc.backend.schedule import Schedule

from tests.graphc._steps import flat_outputs as _flat
from tests.graphc._steps import plan_of, train_step
from tests.graphc._steps import same_bits as _same_bits

from .test_fusion_memory import arena_overlaps_are_never_live_together

F = eager.nn.functional


def _ops_recomputed(plan: Schedule) -> list:
    return sorted(plan.g.nx.nodes[v]["op"] for v in plan.remat.values())


def _check_plan(plan: Schedule) -> None:
    arena_overlaps_are_never_live_together(plan)
    deps = plan._kernel_deps()
    assert all(i < j for j, ds in enumerate(deps) for i in ds)
    # every copy runs after every kernel reading the value it recomputes
    for c, v in plan.remat.items():
        kc = min(ki for ki, k in enumerate(plan.kernels) if c in k.writes)
        assert all(ki < kc for ki, k in enumerate(plan.kernels) if v in k.reads), plan.describe()
        d0, d1 = plan.g.nx.nodes[c], plan.g.nx.nodes[v]
        assert (d0["op"], d0["operands"], d0["shape"], d0["dtype"]) == (
            d1["op"], d1["operands"], d1["shape"], d1["dtype"])


def _block(x, w1, b1, w2, g, beta, wv):
    """layer norm -> product -> GELU -> product -> softmax -> product: the three
    values worth recomputing, each read by a forward and a backward product."""
    h = F.layer_norm(x, (x.shape[-1],), g, beta)
    a = F.gelu(h @ w1 + b1)
    s = (a @ w2).softmax(dim=-1)
    return ((s @ wv) ** 2).sum()


def _block_args(dtype, b=4, t=16, d=8, m=32, rng=None):
    rng = rng or np.random.default_rng(21)
    return (
        rng.standard_normal((b, t, d)).astype(dtype),
        (rng.standard_normal((d, m)) * 0.5).astype(dtype),
        (rng.standard_normal(m) * 0.1).astype(dtype),
        (rng.standard_normal((m, t)) * 0.5).astype(dtype),
        (1 + 0.1 * rng.standard_normal(d)).astype(dtype),
        (0.1 * rng.standard_normal(d)).astype(dtype),
        rng.standard_normal((t, d)).astype(dtype),
    )


def _compile_both(fn, args, monkeypatch, threads=None):
    old = graphc.get_num_threads()
    if threads is not None:
        graphc.set_num_threads(threads)
    try:
        cf = graphc.compile(fn, poison_freed=True, disk_cache=False)
        got = _flat(cf(*args))
        plan = plan_of(cf, *args)
        with monkeypatch.context() as mp:
            mp.setattr(S, "REMAT_ROUNDS", 0)
            cf0 = graphc.compile(fn, poison_freed=True, disk_cache=False)
            want = _flat(cf0(*args))
            plan0 = plan_of(cf0, *args)
    finally:
        graphc.set_num_threads(old)
    return got, plan, want, plan0


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_block_values_are_recomputed_bit_for_bit(dtype, threads, monkeypatch):
    args = _block_args(dtype)
    vg = graphc.value_and_grad(_block, argnums=tuple(range(7)))
    got, plan, want, plan0 = _compile_both(vg, args, monkeypatch, threads)
    assert plan.remat, plan.describe()
    assert not plan0.remat
    assert {"div", "mul"} <= set(_ops_recomputed(plan)), _ops_recomputed(plan)
    assert plan.arena_bytes < plan0.arena_bytes
    _check_plan(plan)
    _same_bits(got, want)
    interp = _flat(graphc.compile(vg, backend="interpreter")(*args))
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for a, b in zip(got, interp):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def test_block_gradients_match_finite_differences():
    args = _block_args(np.float64)
    g = graphc.compile(graphc.grad(_block, argnums=tuple(range(7))), poison_freed=True,
                       disk_cache=False)
    grads = g(*args)
    assert plan_of(g, *args).remat
    eps = 1e-6
    for k, idx in ((1, (2, 5)), (4, (3,)), (0, (1, 2, 3))):
        lo, hi = [np.array(a) for a in args], [np.array(a) for a in args]
        lo[k][idx] -= eps
        hi[k][idx] += eps
        fd = (_block(*[eager.tensor(a) for a in hi]).item()
              - _block(*[eager.tensor(a) for a in lo]).item()) / (2 * eps)
        np.testing.assert_allclose(grads[k][idx], fd, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("seed", range(10))
def test_random_chains_recompute_only_what_saves_and_stay_exact(seed, monkeypatch):
    """Random shapes (size-1 dims included), random mixes of layer norm / GELU /
    softmax / ReLU / scaling between products; with and without rematerialization the
    results are the same bits, and a kept plan always has the smaller arena."""
    rng = np.random.default_rng(1000 + seed)
    b, t, d, m = (int(v) for v in rng.integers(1, 9, size=4))
    kinds = [str(k) for k in rng.choice(["ln", "gelu", "softmax", "relu", "scale"], size=4)]

    def f(x, w1, w2):
        h = x
        for i, k in enumerate(kinds):
            if k == "ln":
                h = F.layer_norm(h, (h.shape[-1],))
            elif k == "gelu":
                h = F.gelu(h)
            elif k == "softmax":
                h = h.softmax(dim=-1)
            elif k == "relu":
                h = h.relu()
            else:
                h = h * 0.5 + 1.0
            h = h @ (w1 if i % 2 == 0 else w2)
        return (h * h).sum()

    args = (rng.standard_normal((b, t, d)).astype(np.float32),
            (rng.standard_normal((d, m)) * 0.5).astype(np.float32),
            (rng.standard_normal((m, d)) * 0.5).astype(np.float32))
    vg = graphc.value_and_grad(f, argnums=(0, 1, 2))
    got, plan, want, plan0 = _compile_both(vg, args, monkeypatch)
    if plan.remat:
        assert plan.arena_bytes < plan0.arena_bytes
    else:
        assert plan.arena_bytes == plan0.arena_bytes
    _check_plan(plan)
    _same_bits(got, want)
    interp = _flat(graphc.compile(vg, backend="interpreter")(*args))
    for a, c in zip(got, interp):
        np.testing.assert_allclose(a, c, rtol=2e-4, atol=2e-4)


def test_size_zero_and_zero_d_compile_without_recomputation(monkeypatch):
    args = _block_args(np.float32, b=0)
    vg = graphc.value_and_grad(_block, argnums=(1, 3))
    got, plan, want, plan0 = _compile_both(vg, args, monkeypatch)
    assert not plan.remat
    _same_bits(got, want)
    f = graphc.compile(graphc.grad(lambda x: (x * 2.0 + 1.0).exp()), disk_cache=False)
    assert float(f(np.float64(0.5))) == pytest.approx(2 * np.exp(2.0))


def _w8_step(rounds: int, monkeypatch):
    from graphc.tools.models import build

    rng = np.random.default_rng(8)
    tokens = rng.integers(0, 128, size=(8, 65))
    batch = (eager.tensor(tokens[:, :-1].copy()), eager.tensor(tokens[:, 1:].copy()))
    M = build()
    eager.manual_seed(0)
    m = M.AttentionBlock()
    opt = eager.optim.Adam(m.parameters(), lr=1e-3)

    step = train_step(m, opt, M.token_loss)
    with monkeypatch.context() as mp:
        mp.setattr(S, "REMAT_ROUNDS", rounds)
        cf = graphc.compile(step, poison_freed=True, disk_cache=False)
        losses = [float(cf(*batch)) for _ in range(3)]
        plan = plan_of(cf, *batch)
    ps = list(m.parameters())
    return losses, [p.detach().numpy().copy() for p in ps] + [p.grad.numpy().copy() for p in ps], plan


def test_w8_step_recomputes_probabilities_gelu_and_norms_bit_for_bit(monkeypatch):
    """W8's whole training step (attention, GELU MLP, Adam updating the parameters in
    place, some of which the recomputed values read): the same losses, parameters and
    gradients to the bit, the same in-place updates, a smaller arena."""
    l1, p1, plan1 = _w8_step(S.REMAT_ROUNDS, monkeypatch)
    l0, p0, plan0 = _w8_step(0, monkeypatch)
    assert l1 == l0
    _same_bits(p1, p0)
    assert plan1.inplace == plan0.inplace and plan1.inplace
    assert _ops_recomputed(plan1) == ["add", "add", "div", "mul"], _ops_recomputed(plan1)
    assert plan1.arena_bytes <= 0.75 * plan0.arena_bytes, (plan1.arena_bytes, plan0.arena_bytes)
    _check_plan(plan1)
    # the peak's report names the copies
    text = plan1.describe_peak(40)
    assert "arena" in text
