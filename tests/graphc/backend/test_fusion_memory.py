"""Fusion and memory planning of the native backend (graphc.backend.schedule).

* Fusion: W2's value and both gradients are ONE loop over x with three reductions;
  broadcasting elementwise chains are one kernel; independent reductions and stores
  over one index space share a kernel (multi-output fusion); a value needed in two
  different index spaces is materialized once.  Results always match the interpreter.
* Memory: intermediates share one arena by liveness (a long chain needs two slots, not
  one per value), a checker re-derives from the kernels that no two buffers sharing
  bytes are ever live together, and the poison mode (``compile(poison_freed=True)``)
  NaN-fills every arena buffer right after its last use: random programs and the seed
  workloads give bit-identical results with it, and it exposes a deliberately broken
  liveness analysis that is silent without it.
"""
from __future__ import annotations

import numpy as np
import pytest

import eager
import graphc
from graphc.backend.schedule import Schedule
from graphc.tools.workloads import seed_step  # W1: the seed MLP step, defined once
from eager.tensor import Tensor


def plan_of(cf, *args) -> Schedule:
    return cf._native(args).plan


def loop_kernels(plan: Schedule) -> list:
    return [k for k in plan.kernels if k.kind == "loop"]


def assert_matches_interpreter(cf, args, rtol=1e-12, atol=1e-13) -> list:
    """Native results close to the interpreter's (absolute floor for cancellation to ~0)."""
    got = cf(*args)
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    flat = []
    for v in got:
        flat.extend(v if isinstance(v, (tuple, list)) else [v])
    want = graphc.interpret(cf.graph(*args), *args)
    assert len(flat) == len(want)
    for a, b in zip(flat, want):
        a = a.numpy() if isinstance(a, Tensor) else np.asarray(a)
        scale = float(np.max(np.abs(b))) if b.size else 0.0
        np.testing.assert_allclose(a, b, rtol=rtol, atol=max(rtol * scale, atol))
    return flat


# ---------------------------------------------------------------------------
# fusion


def w2(x, w, b):
    return ((x * w + b).tanh() ** 2).sum()


@pytest.fixture(scope="module")
def w2_data():
    rng = np.random.default_rng(0)
    return rng.standard_normal(100_000), np.array(0.5), np.array(-0.1)


def test_w2_value_and_grads_are_one_loop_kernel_with_three_reductions(w2_data):
    x, w, b = w2_data
    cf = graphc.compile(graphc.value_and_grad(w2, argnums=(1, 2)))
    (val, (gw, gb)) = cf(x, w, b)
    plan = plan_of(cf, x, w, b)
    assert len(plan.kernels) == 1
    (k,) = plan.kernels
    assert k.kind == "loop" and k.space == (100_000,)
    assert len(k.reduces) == 3 and k.stores == []
    assert plan.arena_bytes == 0                      # nothing of x's size is stored
    assert cf.plan(x, w, b).splitlines()[1].count("reduce") == 3
    t = np.tanh(x * w + b)
    dz = 2 * t * (1 - t * t)
    np.testing.assert_allclose(val, np.sum(t * t), rtol=1e-12)
    np.testing.assert_allclose(gw, np.sum(dz * x), rtol=1e-10)
    np.testing.assert_allclose(gb, np.sum(dz), rtol=1e-10)
    assert_matches_interpreter(cf, (x, w, b), rtol=1e-10)
    st = cf.stats(x, w, b)
    assert st["kernels"] == st["loop_kernels"] == 1 and st["arena_bytes"] == 0


def test_w2_forward_alone_is_one_reduction(w2_data):
    x, w, b = w2_data
    cf = graphc.compile(w2)
    np.testing.assert_allclose(cf(x, w, b), np.sum(np.tanh(x * w + b) ** 2), rtol=1e-12)
    (k,) = plan_of(cf, x, w, b).kernels
    assert len(k.reduces) == 1 and not k.stores


def test_a_broadcasting_elementwise_chain_is_one_kernel():
    def chain(x, r, c, s):
        return ((x * r + c).exp() - s).tanh() * r

    rng = np.random.default_rng(1)
    args = (rng.standard_normal((64, 32)), rng.standard_normal(32),
            rng.standard_normal((64, 1)), np.array(0.3))
    cf = graphc.compile(chain)
    (out,) = assert_matches_interpreter(cf, args)
    x, r, c, s = args
    np.testing.assert_allclose(out, np.tanh(np.exp(x * r + c) - s) * r, rtol=1e-12)
    plan = plan_of(cf, *args)
    assert len(plan.kernels) == 1 and plan.kernels[0].space == (64, 32)
    assert len(plan.kernels[0].stores) == 1 and plan.arena_bytes == 0
    assert plan.summary()["fused_nodes"] >= 6        # mul add exp sub tanh mul in one loop


def test_multi_output_fusion_merges_stores_and_reductions_over_one_space():
    def multi(x):
        return x * 2.0, (x * x).sum(), x.amax(), x.tanh().sum(dim=1), x.mean(dim=0)

    x = np.random.default_rng(2).standard_normal((16, 8))
    cf = graphc.compile(multi)
    outs = assert_matches_interpreter(cf, (x,))
    plan = plan_of(cf, x)
    assert len(plan.kernels) == 1
    (k,) = plan.kernels
    assert len(k.stores) == 1 and len(k.reduces) == 4
    np.testing.assert_allclose(outs[3], np.tanh(x).sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(outs[4], x.mean(axis=0), rtol=1e-12)


def test_a_value_used_in_two_index_spaces_is_materialized_once():
    def two_spaces(x, m):
        y = (x * 2.0).exp()
        return y[None, :] + m, y * 3.0

    x, m = np.linspace(-1, 1, 32), np.random.default_rng(3).standard_normal((8, 32))
    cf = graphc.compile(two_spaces)
    a, b = assert_matches_interpreter(cf, (x, m))
    np.testing.assert_allclose(a, np.exp(2 * x) + m, rtol=1e-12)
    np.testing.assert_allclose(b, np.exp(2 * x) * 3, rtol=1e-12)
    plan = plan_of(cf, x, m)
    g = plan.g
    (y,) = [n for n in g.nx.nodes if g.nx.nodes[n]["op"] == "exp"]
    assert y in plan.materialized and plan.buffers[y][0] == "arena"
    computing = [k for k in loop_kernels(plan) if y in plan.expr_nodes(plan.kernel_roots(k))
                 and (y, y) in k.stores]
    assert len(computing) == 1                          # exp is evaluated in one kernel
    spaces = {k.space for k in plan.kernels}
    assert spaces == {(32,), (8, 32)}
    for k in plan.kernels:                              # the others load it
        if k is not computing[0]:
            assert y in k.reads


def test_reductions_feeding_broadcasts_are_epilogues_then_reloaded():
    def softmax(x):
        # amax: max(dim).values gathers at argmax (PyTorch's gradient goes to that index)
        e = (x - x.amax(dim=1, keepdim=True)).exp()
        return e / e.sum(dim=1, keepdim=True)

    x = np.random.default_rng(4).standard_normal((6, 10))
    cf = graphc.compile(softmax)
    (p,) = assert_matches_interpreter(cf, (x,))
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(p, e / e.sum(axis=1, keepdims=True), rtol=1e-12)
    plan = plan_of(cf, x)
    assert all(k.kind == "loop" and k.space == (6, 10) for k in plan.kernels)
    reduces = sum(len(k.reduces) for k in plan.kernels)
    assert reduces == 2 and len(plan.kernels) <= 3


@pytest.mark.parametrize("seed", range(6))
def test_random_broadcast_multi_output_fusion_matches_the_interpreter(seed):
    rng = np.random.default_rng(seed)
    shapes = [(5, 4), (4,), (5, 1), (), (1, 4)]
    args = [rng.uniform(-1, 1, size=shapes[i]) for i in range(5)]

    def f(a, b, c, d, e):
        u = (a * b + c).tanh()
        v = (u - d).sigmoid() * e
        return v, u.sum(dim=0), (u * v).sum(), (v + c).amax(dim=1), b * 2.0 + d

    cf = graphc.compile(f)
    assert_matches_interpreter(cf, tuple(args))
    plan = plan_of(cf, *args)
    g = plan.g
    chain = [n for n in g.nx.nodes if g.nx.nodes[n]["op"] in ("mul", "add", "tanh", "sub",
                                                             "sigmoid")]
    outs = set(g.outputs)
    assert not [n for n in chain if n in plan.materialized and n not in outs]  # all fused
    assert plan.arena_bytes == 0 and all(k.kind == "loop" for k in plan.kernels)


# ---------------------------------------------------------------------------
# memory planning


def arena_overlaps_are_never_live_together(plan: Schedule) -> int:
    """Re-derive buffer lifetimes from the kernels and check the arena; returns the number
    of buffer pairs that share bytes (reuse happened) -- each is checked disjoint in time,
    except a value stored over an operand's slot by the operand's last reader
    (``plan.reuse``), which must be a loop kernel reading the operand only at the element
    it writes (same offset, the space's contiguous strides) and be the same size."""
    first, last = {}, {}
    for ki, k in enumerate(plan.kernels):
        for b in k.writes:
            first.setdefault(b, ki)
            last[b] = max(last.get(b, ki), ki)
        for b in k.reads:
            last[b] = ki
    for o in plan.g.outputs:
        b = plan.views[o].buf if o in plan.views else o
        last[b] = len(plan.kernels)
    arena = [(b, off, nbytes) for b, (kind, off, nbytes) in plan.buffers.items()
             if kind == "arena"]
    shared = 0
    for i, (b1, o1, n1) in enumerate(arena):
        assert o1 % 64 == 0 and o1 + n1 <= plan.arena_bytes
        for b2, o2, n2 in arena[i + 1:]:
            if o1 < o2 + n2 and o2 < o1 + n1:           # bytes overlap
                shared += 1
                live1, live2 = (first[b1], last[b1]), (first[b2], last[b2])
                touching = False
                for (x, lx), (y, ly) in (((b1, live1), (b2, live2)), ((b2, live2), (b1, live1))):
                    if plan.reuse.get(y) == x and lx[1] == ly[0]:
                        assert_written_over_elementwise(plan, ly[0], x, y)
                        assert (o1, n1) == (o2, n2)
                        touching = True             # checked: adjacent by design
                if touching:
                    continue
                assert live1[1] < live2[0] or live2[1] < live1[0], \
                    f"%{b1} {live1} and %{b2} {live2} share arena bytes while both live"
    return shared


def assert_written_over_elementwise(plan: Schedule, ki: int, src, dst) -> None:
    """Kernel ``ki`` stores ``dst`` over ``src``'s slot: a loop kernel storing ``dst``
    over its whole space and reading ``src`` only at the element it stores."""
    k = plan.kernels[ki]
    if k.kind == "max_pool2d_grad":  # over its input, windows tiling it (Schedule._over_operand)
        d = plan.g.nx.nodes[dst]
        assert k.node == dst and d["operands"][0] == src
        assert tuple(d["attrs"]["stride"]) == tuple(d["attrs"]["kernel_size"])
        assert plan.views[src].buf == src and plan.views[src].offset == 0
        return
    assert k.kind == "loop" and (dst, dst) in k.stores and src in k.reads
    assert tuple(plan.g.nx.nodes[dst]["shape"]) == k.space
    ident = tuple(int(np.prod(k.space[i + 1:])) for i in range(len(k.space)))
    nodes = plan.expr_nodes(plan.kernel_roots(k))
    seen = [plan.views[o] for n in nodes for o in plan.g.nx.nodes[n]["operands"]
            if o in plan.views and plan.views[o].buf == src]
    seen += [v for v in plan.copies.values() if v is not None and v.buf == src
             and any(n in plan.copies for n, _ in k.stores)]
    for v in seen:
        assert v.offset == 0 and tuple(v.shape) == k.space
        assert tuple(v.strides) == ident or numel_one(k.space), (v, k.space)


def numel_one(space) -> bool:
    return int(np.prod(space)) <= 1


def _mlp_chain(x, w):
    h = x
    for _ in range(12):
        h = (h @ w).tanh()
    return h.sum(), h[0]          # h[0]: an output that is a view of an arena buffer


def test_a_long_chain_of_intermediates_reuses_the_arena():
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((64, 64)), rng.standard_normal((64, 64)) * 0.15
    cf = graphc.compile(_mlp_chain)
    assert_matches_interpreter(cf, (x, w), rtol=1e-10)
    plan = plan_of(cf, x, w)
    inter = [b for b, spec in plan.buffers.items() if spec[0] == "arena"]
    total = sum(plan.buffers[b][2] for b in inter)
    assert len(inter) >= 23                         # 12 matmuls, 11+ tanh for the next one
    assert plan.arena_bytes <= 2 * 64 * 64 * 8      # two live slots suffice
    assert plan.arena_bytes * 10 < total
    assert arena_overlaps_are_never_live_together(plan) > 100


class MemoryProgram:
    """Seeded random programs rich in materialized intermediates: matmuls, reductions
    over an axis, transposed copies, gathers, and skip connections that stretch lifetimes."""

    def __init__(self, seed: int) -> None:
        self.rng = rng = np.random.default_rng(seed)
        n, d = int(rng.integers(3, 9)), int(rng.integers(2, 7))
        self.inputs = [rng.standard_normal((n, d)), rng.standard_normal((d, d)) * 0.5,
                       rng.standard_normal(d)]
        self.ops = [str(s) for s in rng.choice(["mm", "norm", "gather", "skip", "transpose",
                                                "ew", "maxred"], size=int(rng.integers(5, 11)))]
        self.idx = rng.integers(0, n, size=n)

    def __call__(self, x, w, b):
        hs = [x]
        h = x
        for o in self.ops:
            if o == "mm":
                h = (h @ w + b).tanh()
            elif o == "norm":
                h = h - h.mean(dim=1, keepdim=True)
            elif o == "gather":
                h = h[self.idx] * 0.9
            elif o == "skip":
                h = h + hs[len(hs) // 2]
            elif o == "transpose":
                h = (h @ w).T.reshape(h.shape[0], -1) * 0.5
            elif o == "ew":
                h = (h * b).sigmoid()
            else:
                h = h * h.max(dim=0, keepdim=True).values
            hs.append(h)
        return h.sum(), h, hs[1].sum(dim=0)


def test_arena_invariants_hold_on_random_memory_programs():
    reused = 0
    for seed in range(12):
        prog = MemoryProgram(seed)
        cf = graphc.compile(prog)
        assert_matches_interpreter(cf, tuple(prog.inputs), rtol=1e-10)
        reused += arena_overlaps_are_never_live_together(plan_of(cf, *prog.inputs))
    assert reused > 0


# --- poisoning freed buffers -------------------------------------------------------------


def test_poison_marks_every_arena_buffer_after_its_last_use():
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((16, 16)), rng.standard_normal((16, 16)) * 0.3
    cf = graphc.compile(_mlp_chain, poison_freed=True)
    plain = graphc.compile(_mlp_chain)
    for a, b in zip(cf(x, w), plain(x, w)):
        np.testing.assert_array_equal(a, b)               # bit for bit
    plan = plan_of(cf, x, w)
    poisoned = [b for bufs in plan.poison_after.values() for b in bufs]
    arena = [b for b, spec in plan.buffers.items() if spec[0] == "arena"]
    assert len(poisoned) == len(set(poisoned))             # each at most once
    last = plan._last_uses()
    for ki, bufs in plan.poison_after.items():
        for b in bufs:
            assert ki == last.get(b, ki) and ki < len(plan.kernels)
    kept = [b for b in arena if last.get(b) == len(plan.kernels)]   # bases of output views
    # a buffer whose slot its last reader stores a value over (plan.reuse) is not
    # poisoned: the new value lives there (the tanh of each product, here)
    handed = sorted(set(plan.reuse.values()))
    assert len(handed) >= 10
    assert sorted(poisoned + kept + handed) == sorted(arena)
    assert not set(handed) & set(poisoned)
    ir = cf.llvm_ir(x, w)
    assert ir.count("call void @\"llvm.memset") == len(poisoned) > 10
    assert "llvm.memset" not in plain.llvm_ir(x, w)
    assert not plan_of(plain, x, w).poison_after


@pytest.mark.parametrize("seed", range(16))
def test_random_programs_are_bit_identical_with_poisoning(seed):
    prog = MemoryProgram(seed)
    args = tuple(prog.inputs)
    poisoned = graphc.compile(prog, poison_freed=True)
    got = assert_matches_interpreter(poisoned, args, rtol=1e-10)
    for a, b in zip(got, graphc.compile(prog)(*args)):
        np.testing.assert_array_equal(a, b)
    assert not any(np.isnan(a).any() for a in got)


def _first_reader_liveness(self):
    """A broken liveness analysis: a buffer dies at its FIRST reader, not its last."""
    first = {}
    for ki, k in enumerate(self.kernels):
        for b in k.reads:
            first.setdefault(b, ki)
    for o in self.g.outputs:
        b = self.views[o].buf if o in self.views else o
        first[b] = len(self.kernels)
    return first


def test_poison_exposes_a_liveness_bug_that_is_silent_without_it(monkeypatch):
    def f(x, w1, w2, w3):
        a = x @ w1                       # read by the tanh kernel and by a later matmul
        b = a.tanh() @ w2                # bigger than a: it does not land in a's slot
        return (a @ w3) + b

    rng = np.random.default_rng(7)
    args = (rng.standard_normal((8, 8)), rng.standard_normal((8, 4)),
            rng.standard_normal((4, 16)), rng.standard_normal((4, 16)))
    want = graphc.interpret(graphc.trace(f, *args), *args)[0]
    monkeypatch.setattr(Schedule, "_last_uses", _first_reader_liveness)
    # in order, without slot reuse or repacking by size (the tanh would be stored over
    # ``a``, its "last" reader, or b's block moved onto a's: the bug would show unpoisoned)
    monkeypatch.setattr(Schedule, "_reusable", lambda *a: None)
    monkeypatch.setattr(Schedule, "_repack_by_size", lambda self, top: top)
    silent = graphc.compile(f)(*args)
    caught = graphc.compile(f, poison_freed=True)(*args)
    np.testing.assert_allclose(silent, want, rtol=1e-12)    # the bug hides...
    assert np.isnan(caught).all()                            # ...until buffers are poisoned
    monkeypatch.undo()
    np.testing.assert_allclose(graphc.compile(f, poison_freed=True)(*args), want, rtol=1e-12)


def test_poison_uses_a_sentinel_for_integer_and_bool_buffers():
    def f(x, i):
        k = (x > 0).sum(dim=1)            # int64 intermediate
        m = (x > 0.5) | (x < -0.5)        # bool, materialized by the gather below
        return k[i] * 2, m[i], x.argmax(dim=1)[i]

    rng = np.random.default_rng(8)
    x, i = rng.standard_normal((6, 5)), np.array([0, 5, 2, 2])
    cf = graphc.compile(f, poison_freed=True)
    got = cf(x, i)
    for a, b in zip(got, graphc.compile(f)(x, i)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got[0], (x > 0).sum(axis=1)[i] * 2)
    np.testing.assert_array_equal(got[1], ((x > 0.5) | (x < -0.5))[i])
    ir = cf.llvm_ir(x, i)
    assert "i8 -91" in ir or "i8 165" in ir               # 0xA5 bytes for ints and bools


# --- the seed workloads with poisoning -------------------------------------------------

def test_w1_training_step_is_bit_identical_with_poisoning():
    eager.manual_seed(0)
    x, y = eager.randn(64, 1000), eager.randn(64, 10)
    w1, w2 = eager.randn(1000, 100, requires_grad=True), eager.randn(100, 10, requires_grad=True)
    states = []
    for poison in (False, True):
        a = w1.detach().clone().requires_grad_(True)
        b = w2.detach().clone().requires_grad_(True)
        step = graphc.compile(seed_step, poison_freed=poison)
        losses = [float(step(x, y, a, b)) for _ in range(3)]
        states.append((losses, a.detach().numpy().copy(), b.detach().numpy().copy(),
                       a.grad.numpy().copy(), step))
    (l0, a0, b0, g0, s0), (l1, a1, b1, g1, s1) = states
    assert l0 == l1 and l0[2] < l0[0]
    np.testing.assert_array_equal(a0, a1)
    np.testing.assert_array_equal(b0, b1)
    np.testing.assert_array_equal(g0, g1)
    assert not np.isnan(a1).any()
    plan = plan_of(s1, x, y, a, b)
    assert plan.poison_after and plan.arena_bytes > 0
    assert arena_overlaps_are_never_live_together(plan) >= 0


def w3(a, w1, w2, w3_, w4):
    b = w1 * a
    c = w2 * a
    d = w3_ * b + w4 * c
    return (10 - d).sum()


def test_w2_and_w3_are_bit_identical_with_poisoning(w2_data):
    x, w, b = w2_data
    rng = np.random.default_rng(9)
    w3_args = tuple(rng.standard_normal((3, 3)) for _ in range(5))
    for fn, args in ((w2, (x[:5000], w, b)), (w3, w3_args)):
        vg = graphc.value_and_grad(fn, argnums=tuple(range(1, len(args))) if fn is w2
                                   else tuple(range(5)))
        plain = graphc.compile(vg)(*args)
        poisoned_cf = graphc.compile(vg, poison_freed=True)
        poisoned = poisoned_cf(*args)
        np.testing.assert_array_equal(plain[0], poisoned[0])
        for a_, b_ in zip(plain[1], poisoned[1]):
            np.testing.assert_array_equal(a_, b_)
        want = graphc.interpret(poisoned_cf.graph(*args), *args)
        np.testing.assert_allclose(poisoned[0], want[0], rtol=1e-10)
    a, w1, w2_, w3v, w4 = w3_args
    np.testing.assert_allclose(poisoned[1][0], -(w3v * w1 + w4 * w2_), rtol=1e-12)
