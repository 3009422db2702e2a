"""Issue 17's memory levers (docs/backend.md, "Memory plan"): a ReLU's mask stored as
bytes where its activation is made, the kernels run in an order that keeps fewer bytes
live, and a pooling gradient written over the input it pools (its mask moved onto the
pooled values by the ``simplify`` rule "mask of a pooling gradient").  Each is checked
bit for bit against the plan without it, with freed arena bytes poisoned, against the
interpreter and eager, and on 1-3 threads."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import eager
import graphc
from graphc.backend.schedule import Schedule

from tests.graphc._steps import flat_outputs as _flat
from tests.graphc._steps import plan_of, train_step, w6_data
from tests.graphc._steps import same_bits as _same_bits

from .test_fusion_memory import arena_overlaps_are_never_live_together

F = eager.nn.functional
# the module (graphc.passes.simplify is also the pass function's name)
simplify_mod = importlib.import_module("graphc.passes.simplify")


def _mlp(x, w1, w2):
    h = (x @ w1).relu()
    return ((h @ w2) ** 2).sum()


def _mlp_args(dtype=np.float64, n=64):
    rng = np.random.default_rng(17)
    return (rng.standard_normal((n, 16)).astype(dtype), rng.standard_normal((16, 32)).astype(dtype),
            rng.standard_normal((32, 4)).astype(dtype))


def test_relu_mask_is_stored_as_bytes_and_the_arena_shrinks(monkeypatch):
    args = _mlp_args()
    vg = graphc.value_and_grad(_mlp, argnums=(0, 1, 2))
    cf = graphc.compile(vg, poison_freed=True, disk_cache=False)
    got = _flat(cf(*args))
    plan = plan_of(cf, *args)
    masks = [n for n in plan.materialized if plan.g.nx.nodes[n]["dtype"] == "bool"]
    assert masks, plan.describe()
    (m,) = masks
    writer = next(k for k in plan.kernels if m in k.writes)
    relu = [n for n, _ in writer.stores if plan.g.nx.nodes[n]["op"] == "relu"]
    assert relu                                 # computed in the ReLU's own loop
    arena_overlaps_are_never_live_together(plan)
    with monkeypatch.context() as mp:
        mp.setattr(Schedule, "_store_masks_early", lambda self: None)
        cf0 = graphc.compile(vg, poison_freed=True, disk_cache=False)
        want = _flat(cf0(*args))
        plan0 = plan_of(cf0, *args)
    assert plan.arena_bytes < plan0.arena_bytes
    assert not [n for n in plan0.materialized if plan0.g.nx.nodes[n]["dtype"] == "bool"]
    _same_bits(got, want)
    # and the numbers are right (finite differences of float64 on one weight)
    x, w1, w2 = args
    eps = 1e-6
    d = np.zeros_like(w1)
    d[3, 5] = eps
    fd = (_mlp(eager.tensor(x), eager.tensor(w1 + d), eager.tensor(w2)).item()
          - _mlp(eager.tensor(x), eager.tensor(w1 - d), eager.tensor(w2)).item()) / (2 * eps)
    np.testing.assert_allclose(got[2][3, 5], fd, rtol=1e-6)


def test_kernel_order_is_kept_only_when_the_arena_shrinks(monkeypatch):
    args = _mlp_args()
    vg = graphc.value_and_grad(_mlp, argnums=(1, 2))
    cf = graphc.compile(vg, poison_freed=True, disk_cache=False)
    got = _flat(cf(*args))
    plan = plan_of(cf, *args)
    with monkeypatch.context() as mp:
        mp.setattr(Schedule, "_memory_order", lambda self: None)
        cf0 = graphc.compile(vg, poison_freed=True, disk_cache=False)
        want = _flat(cf0(*args))
        plan0 = plan_of(cf0, *args)
    assert plan.arena_bytes <= plan0.arena_bytes
    _same_bits(got, want)
    # every kernel still follows the kernels it depends on
    deps = plan._kernel_deps()
    assert all(i < j for j, ds in enumerate(deps) for i in ds)


def _pool_net(x, w):
    h = F.conv2d(x, w).relu()
    return (F.max_pool2d(h, 2) ** 2).sum()


def _pool_args(size=10, ties=False, nan=False, dtype=np.float32):
    rng = np.random.default_rng(3)
    if ties:  # small integers: equal maxima in many windows, exact zeros after the ReLU
        x = rng.integers(-2, 3, size=(2, 1, size, size)).astype(dtype)
        w = np.ones((3, 1, 1, 1), dtype)
        w[1] = -1
    else:
        x = rng.standard_normal((2, 1, size, size)).astype(dtype)
        w = rng.standard_normal((3, 1, 3, 3)).astype(dtype)
    if nan:
        x[0, 0, 1, 1] = np.nan
    return x, w


def _without_pool_rule():
    rule = next(r for r in simplify_mod.RULES if r.name == "mask of a pooling gradient")
    simplify_mod.remove_rule(rule.name)
    return rule


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("case", ["plain", "ties", "nan"])
def test_pooling_gradient_is_written_over_its_input(case, threads, monkeypatch):
    args = _pool_args(ties=case == "ties", nan=case == "nan")
    g = graphc.grad(_pool_net, argnums=(0, 1))
    old = graphc.get_num_threads()
    graphc.set_num_threads(threads)
    try:
        cf = graphc.compile(g, poison_freed=True, disk_cache=False)
        got = _flat(cf(*args))
        plan = plan_of(cf, *args)
        ops = {plan.g.nx.nodes[b]["op"] for b in plan.reuse}
        assert "max_pool2d_grad" in ops, plan.describe()
        # the ReLU's mask is applied to the pooled gradient, not the input's
        nodes = plan.g.nx.nodes
        (pg,) = [d for _, d in nodes(data=True) if d["op"] == "max_pool2d_grad"]
        pooled = tuple(nodes[pg["operands"][1]]["shape"])
        wheres = [tuple(d["shape"]) for _, d in nodes(data=True) if d["op"] == "where"]
        assert wheres and all(s == pooled for s in wheres), (wheres, pooled)
        arena_overlaps_are_never_live_together(plan)
        interp = _flat(graphc.compile(g, backend="interpreter")(*args))
        rule = _without_pool_rule()
        try:  # without the rule and without bytes masks, the input is read after it
            monkeypatch.setattr(Schedule, "_store_masks_early", lambda self: None)
            cf0 = graphc.compile(g, poison_freed=True, disk_cache=False)
            want = _flat(cf0(*args))
            plan0 = plan_of(cf0, *args)
        finally:
            simplify_mod.add_rule(rule)
            monkeypatch.undo()
    finally:
        graphc.set_num_threads(old)
    assert "max_pool2d_grad" not in {plan0.g.nx.nodes[b]["op"] for b in plan0.reuse}
    assert plan.arena_bytes < plan0.arena_bytes
    _same_bits(got, want)
    _same_bits(got, interp)
    # eager's autograd on the same code
    xt, wt = (eager.tensor(a, requires_grad=True) for a in args)
    _pool_net(xt, wt).backward()
    np.testing.assert_allclose(got[0], xt.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], wt.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("geom", [dict(kernel_size=2, stride=1), dict(kernel_size=3),
                                  dict(kernel_size=2, padding=1)])
def test_pooling_gradients_that_do_not_tile_are_not_rewritten(geom):
    def f(x):
        return (F.max_pool2d(x.relu(), **geom) ** 2).sum()

    x = np.random.default_rng(4).standard_normal((2, 2, 8, 8))
    cf = graphc.compile(graphc.grad(f), poison_freed=True, disk_cache=False)
    got = cf(x)
    plan = plan_of(cf, x)
    assert "max_pool2d_grad" not in {plan.g.nx.nodes[b]["op"] for b in plan.reuse}
    xt = eager.tensor(x, requires_grad=True)
    f(xt).backward()
    np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("fill", [1.0, -0.0])
def test_pooling_rule_needs_a_zero_branch(fill):
    """where(mask, c, pool_grad) with c not +0.0 is not a ReLU's gradient: left alone
    (elements outside the argmax would get c, not 0)."""
    pool_grad = graphc.grad(lambda y: (F.max_pool2d(y, 2) ** 2).sum())

    def f(x):
        y = x.relu()
        return eager.where(y <= 0, eager.tensor(fill, dtype=eager.float64), pool_grad(y))

    x = np.random.default_rng(5).standard_normal((1, 1, 4, 4))
    cf = graphc.compile(f, disk_cache=False)
    got = np.asarray(cf(x))
    plan = plan_of(cf, x)
    assert "where" in {d["op"] for _, d in plan.g.nx.nodes(data=True)}
    interp = np.asarray(graphc.compile(f, backend="interpreter")(x))
    _same_bits([got], [interp])
    y = np.maximum(x, 0)
    assert (got[y <= 0] == fill).all() and np.signbit(got[y <= 0]).all() == np.signbit(fill)


def test_reordered_step_keeps_the_optimizer_updates_in_place(monkeypatch):
    """A parameter's update may be written over the parameter only when no later kernel
    reads it: the order counts that write as a write of the parameter, so the readers
    (the backward's products with the weight) stay before it."""
    from graphc.tools.models import build

    x, y = w6_data()

    def run(patch):
        M = build()
        eager.manual_seed(0)
        m = M.Classifier(64, 128, 10)
        opt = eager.optim.Adam(m.parameters(), lr=1e-3)
        step = train_step(m, opt, M.class_loss)
        with monkeypatch.context() as mp:
            if patch:
                mp.setattr(Schedule, "_memory_order", lambda self: None)
            cf = graphc.compile(step, poison_freed=True, disk_cache=False)
            losses = [float(cf(x, y)) for _ in range(3)]
            plan = plan_of(cf, x, y)
        return losses, [p.detach().numpy().copy() for p in m.parameters()], plan

    l1, p1, plan1 = run(False)
    l0, p0, plan0 = run(True)
    assert plan1.inplace == plan0.inplace and plan1.inplace
    assert plan1.arena_bytes < plan0.arena_bytes
    assert l1 == l0
    _same_bits(p1, p0)
