"""Compile time that grows linearly with graph size: the mechanisms, checked for the same
results as before (shared kernel functions, kernels run from part functions, the fast
topological order, the heap-based memory planner, the collector paused during a compile)
and structurally (what grows with the number of unrolled steps), never timed."""

import gc
import heapq  # noqa: F401 - the reference planner below mirrors the old code

import networkx as nx
import numpy as np
import pytest

import eager
import graphc
from graphc.backend import dedup, parts
from graphc.backend.schedule import ALIGN, Schedule, numel
from graphc.ir import Graph
from graphc.runtime import gcpause
from graphc.tools.compile_scaling import (
    format_table,
    measure,
    rnn_inputs,
    rnn_loss,
)
from llvmlite import ir


def _rnn_eager(steps: int, dtype=np.float64):
    args = [a.astype(dtype) for a in rnn_inputs(steps)]
    ts = [eager.from_numpy(a.copy()) for a in args]
    for t in ts[1:]:
        t.requires_grad_()
    loss = rnn_loss(*ts)
    loss.backward()
    return args, loss.detach().numpy(), [t.grad.numpy() for t in ts[1:]]


def _compiled_rnn(args):
    return graphc.compile(graphc.value_and_grad(rnn_loss, argnums=(1, 2, 3)), disk_cache=False)(
        *args
    )


# ---------------------------------------------------------------------------------------
# dedup: one LLVM function per distinct kernel body


def _kernel(module, name, const, arg_names=("a", "b")):
    f = ir.Function(module, ir.FunctionType(ir.IntType(32), [ir.PointerType()] * 2), name=name)
    for a, nm in zip(f.args, arg_names):
        a.name = nm
    b = ir.IRBuilder(f.append_basic_block("entry"))
    b.comment(f"kernel {name}")
    v = b.load(
        b.gep(f.args[0], [ir.Constant(ir.IntType(64), const)], source_etype=ir.DoubleType()),
        typ=ir.DoubleType(),
        name=f"x_{name}",
    )
    b.store(b.fadd(v, v, name=f"y_{name}"), f.args[1])
    nxt = f.append_basic_block(f"exit_{name}")
    b.branch(nxt)
    b.position_at_end(nxt)
    b.ret(ir.Constant(ir.IntType(32), 0))
    return f


def test_canonical_text_ignores_local_names_and_comments_only():
    m = ir.Module("m")
    f1 = _kernel(m, "k1_loop", 3)
    f2 = _kernel(m, "k2_loop", 3, ("p", "q"))  # renamed values, labels, comment
    f3 = _kernel(m, "k3_loop", 4)  # another offset: another function
    assert dedup.canonical_text(f1) == dedup.canonical_text(f2)
    assert dedup.canonical_text(f1) != dedup.canonical_text(f3)
    assert "k1" not in dedup.canonical_text(f1) and ";" not in dedup.canonical_text(f1)


def test_canonical_text_keeps_argument_order():
    m = ir.Module("m")
    f1 = _kernel(m, "k1", 0)
    f2 = ir.Function(m, f1.ftype, name="k2")  # the same body with the arguments swapped
    b = ir.IRBuilder(f2.append_basic_block("entry"))
    v = b.load(
        b.gep(f2.args[1], [ir.Constant(ir.IntType(64), 0)], source_etype=ir.DoubleType()),
        typ=ir.DoubleType(),
    )
    b.store(b.fadd(v, v), f2.args[0])
    nxt = f2.append_basic_block("exit")
    b.branch(nxt)
    b.position_at_end(nxt)
    b.ret(ir.Constant(ir.IntType(32), 0))
    assert dedup.canonical_text(f1) != dedup.canonical_text(f2)


def test_share_identical_keeps_the_first_and_removes_the_rest():
    m = ir.Module("m")
    fns = [_kernel(m, "k0", 1), _kernel(m, "k1", 2), _kernel(m, "k2", 1), _kernel(m, "k3", 2)]
    out = dedup.share_identical(m, fns)
    assert out == [fns[0], fns[1], fns[0], fns[1]]
    assert sorted(f.name for f in m.functions) == ["k0", "k1"]
    assert dedup.last_stats == {"kernels": 4, "distinct": 2, "removed": 2}


# ---------------------------------------------------------------------------------------
# the RNN: numbers, and what grows with the number of steps


@pytest.mark.parametrize("split", [False, True], ids=["one_entry", "parts"])
def test_rnn_value_and_grad_matches_eager(split, monkeypatch):
    if split:  # every plan through parts of 3 kernels
        monkeypatch.setattr(parts, "SPLIT_ABOVE", 0)
        monkeypatch.setattr(parts, "PART_KERNELS", 3)
    args, want_v, want_g = _rnn_eager(7)
    v, g = _compiled_rnn(args)
    np.testing.assert_allclose(v, want_v, rtol=1e-12)
    for a, b in zip(g, want_g):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-14)


def _lowered_module(fn, *args, **kw):
    cf = graphc.compile(fn, disk_cache=False, **kw)
    cf(*args)
    (entry,) = cf._cache.values()
    return entry.stages["_executable"]


def test_distinct_kernel_functions_grow_slower_than_kernels():
    """Kernels grow by a fixed number per step; distinct kernel bodies by fewer (the
    matrix products of ``xs[t]`` keep their offset), and at 20 steps are under half."""
    rows = {}
    for steps in (10, 20):
        exe = _lowered_module(
            graphc.value_and_grad(rnn_loss, argnums=(1, 2, 3)), *rnn_inputs(steps)
        )
        rows[steps] = (len(exe.plan.kernels), dedup.last_stats["distinct"])
    (k10, d10), (k20, d20) = rows[10], rows[20]
    assert d20 < k20 / 2
    assert d20 - d10 < (k20 - k10) / 2


def test_parts_bound_every_function(monkeypatch):
    monkeypatch.setattr(parts, "SPLIT_ABOVE", 10)
    monkeypatch.setattr(parts, "PART_KERNELS", 8)
    exe = _lowered_module(graphc.value_and_grad(rnn_loss, argnums=(1, 2, 3)), *rnn_inputs(6))
    n = len(exe.plan.kernels)
    text = exe.llvm_ir()
    nparts = text.count('define internal i32 @"graphc_part')
    assert nparts == -(-n // 8)
    entry = text[text.index('@"graphc_entry"') :]
    entry = entry[: entry.index("\n}\n")]
    assert entry.count('call i32 @"graphc_part') == nparts
    assert '@"k' not in entry  # no kernel called from the entry itself
    # shared kernel functions are compiled once, not inlined per call site
    assert "noinline" in text


def test_small_graphs_keep_one_entry_function():
    exe = _lowered_module(lambda x, y: (x * y + 1).sum(), np.ones(3), np.ones(3))
    assert "graphc_part" not in exe.llvm_ir()


def test_failing_kernel_inside_a_part_raises_and_the_function_recovers(monkeypatch):
    monkeypatch.setattr(parts, "SPLIT_ABOVE", 0)
    monkeypatch.setattr(parts, "PART_KERNELS", 2)

    def fn(x, i):
        y = (x * 2).exp()
        z = y.index_select(0, i) + 1
        return (z * z).sum() + y.sum()

    f = graphc.compile(fn, disk_cache=False)
    x = np.arange(12.0).reshape(4, 3) / 10
    with pytest.raises(IndexError, match="out of range"):
        f(x, np.array([4]))
    good = np.array([1, 3])
    want = fn(eager.from_numpy(x), eager.from_numpy(good)).numpy()
    np.testing.assert_allclose(
        f(x, good), want.detach().numpy() if hasattr(want, "detach") else want, rtol=1e-12
    )


def test_parallel_kernels_inside_parts(monkeypatch):
    from graphc.backend.abi import PARALLEL_MIN

    monkeypatch.setattr(parts, "SPLIT_ABOVE", 0)
    monkeypatch.setattr(parts, "PART_KERNELS", 2)
    x = np.random.default_rng(0).normal(size=(PARALLEL_MIN + 37, 3))
    w = np.random.default_rng(1).normal(size=(3, 4))

    def fn(x, w):
        h = (x @ w).tanh()
        return h.sum(0), (h * h).mean(), h.amax(1)

    old = graphc.get_num_threads()
    try:
        graphc.set_num_threads(2)
        got = graphc.compile(fn, disk_cache=False)(x, w)
    finally:
        graphc.set_num_threads(old)
    want = fn(eager.from_numpy(x), eager.from_numpy(w))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------------------
# topological order and memory planning: the same results as the general algorithms


def _random_graph(seed: int, n: int = 40) -> Graph:
    rng = np.random.default_rng(seed)
    g = Graph("r")
    ids = [g.add_input("x", (3,), "float64"), g.add_input("y", (3,), "float64")]
    for _ in range(n):
        a, b = rng.choice(ids, 2)
        ids.append(g.add_node("add" if rng.random() < 0.5 else "mul", (int(a), int(b))))
    g.outputs = [ids[-1], ids[-5]]
    return g


@pytest.mark.parametrize("seed", range(6))
def test_topo_order_is_networkx_lexicographical_order(seed):
    g = _random_graph(seed)
    want = list(nx.lexicographical_topological_sort(g.nx, key=lambda n: n))
    assert g.topo_order() == want  # the fast path (every edge goes up in id)
    # rewire a node to use a later one: the general walk, still networkx's order
    rng = np.random.default_rng(seed)
    nodes = g.node_ids()
    u = nodes[len(nodes) // 3]
    if g[u]["op"] != "input":
        later = nodes[len(nodes) // 2]
        if not nx.has_path(g.nx, u, later):
            g.set_operands(u, (later, g[u]["operands"][1]))
    assert g.topo_order() == list(nx.lexicographical_topological_sort(g.nx, key=lambda n: n))
    del rng


def _plan_memory_reference(plan: Schedule) -> dict:
    """The memory planner as it was (an O(live) scan and a sort per buffer)."""
    last_use = plan._last_uses()
    intervals = []
    for ki, k in enumerate(plan.kernels):
        for b in sorted(k.writes, key=repr):
            if isinstance(b, tuple) or b in plan.out_buffer:
                continue
            nbytes = numel(plan.shape(b)) * plan.dtype(b).itemsize
            intervals.append((ki, last_use.get(b, ki), b, nbytes))
    free, live, top, out = [], [], 0, {}
    for start, end, b, nbytes in sorted(intervals, key=lambda t: (t[0], t[2])):
        still = []
        for e, off, size in live:
            (free.append((off, size)) if e < start else still.append((e, off, size)))
        live = still
        size = max(ALIGN, -(-nbytes // ALIGN) * ALIGN)
        free.sort()
        slot = None
        for i, (off, fsize) in enumerate(free):
            if fsize >= size:
                slot = off
                if fsize > size:
                    free[i] = (off + size, fsize - size)
                else:
                    free.pop(i)
                break
        if slot is None:
            slot, top = top, top + size
        out[b] = ("arena", slot, nbytes)
        live.append((end, slot, size))
    return {"buffers": out, "top": top}


@pytest.mark.parametrize("steps", [1, 4, 9])
def test_memory_plan_is_never_bigger_than_before(steps):
    """The planner now merges freed blocks, takes them best-fit, grows the last one and
    stores elementwise values over dying operands (plan.reuse): the same buffers, never a
    bigger arena than the first-fit planner it replaced, and no two buffers live at once
    share bytes (except a value over the operand it was stored over)."""
    from graphc.passes import optimize
    from graphc.tracer import trace_flat

    res = trace_flat(graphc.value_and_grad(rnn_loss, argnums=(1, 2, 3)), rnn_inputs(steps), ())
    g, _ = optimize(res.graph)
    plan = Schedule(g)
    ref = _plan_memory_reference(plan)
    assert plan.arena_bytes <= ref["top"]
    for b, spec in ref["buffers"].items():
        assert plan.buffers[b][0] == "arena" and plan.buffers[b][2] == spec[2]
    spans = {iv[2]: iv for iv in plan.intervals}
    for x, (s1, e1, _, n1, o1) in spans.items():
        for y, (s2, e2, _, n2, o2) in spans.items():
            if x != y and o1 < o2 + max(n2, 1) and o2 < o1 + max(n1, 1):
                assert e1 < s2 or e2 < s1 or plan.reuse.get(y) == x or plan.reuse.get(x) == y


# ---------------------------------------------------------------------------------------
# the collector, paused during a compile


def test_gc_is_paused_while_compiling_and_restored_after():
    seen = []

    def fn(x):
        seen.append(gc.isenabled())
        return x + 1

    assert gc.isenabled()
    graphc.compile(fn)(np.ones(2))
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        graphc.compile(fn)(np.ones(3))
        assert not gc.isenabled()  # left off when it was off
    finally:
        gc.enable()


def test_gc_pause_is_reentrant_and_survives_errors():
    with gcpause.paused():
        with gcpause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ZeroDivisionError):
        with gcpause.paused():
            1 / 0
    assert gc.isenabled()


# ---------------------------------------------------------------------------------------
# the tool


def test_compile_scaling_tool_reports_every_stage():
    r = measure(3)
    assert r["steps"] == 3 and r["nodes"] > r["kernels"] > 0
    for stage in (
        "trace",
        "autodiff",
        "passes",
        "schedule",
        "llvm ir build",
        "llvm optimize",
        "llvm codegen",
    ):
        assert stage in r["stages"]
    assert set(r["passes"]) >= {"cse", "dce", "fold", "simplify"}
    table = format_table([r])
    assert "nodes traced" in table and "llvm codegen" in table


def test_passes_on_the_unrolled_rnn_never_need_the_general_topological_walk(monkeypatch):
    """Structural: every topological order of the RNN's compile (tracing, the four
    passes, the schedule) takes the sorted-ids path, so each walk is O(n log n)."""
    import graphc.ir.graph as graph_mod

    calls = []
    real = graph_mod.nx.lexicographical_topological_sort

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(graph_mod.nx, "lexicographical_topological_sort", counting)
    walks = []
    real_topo = graph_mod.Graph.topo_order
    monkeypatch.setattr(
        graph_mod.Graph, "topo_order", lambda self: walks.append(1) or real_topo(self)
    )
    graphc.compile(graphc.value_and_grad(rnn_loss, argnums=(1, 2, 3)), disk_cache=False)(
        *rnn_inputs(5)
    )
    assert walks and not calls
