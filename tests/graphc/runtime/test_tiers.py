"""Tiered compilation (graphc/runtime/native.py, docs/backend.md "Tiered compilation"):
quick code first, the fully optimized build after a few calls, the same bits in both."""

import os
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

import eager
import graphc
from graphc.runtime import native

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


def _exe(f):
    (entry,) = f._cache.values()
    return entry, entry.stages["_executable"]


def _leaves(out):
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _leaves(o)]
    return [np.asarray(out.numpy() if hasattr(out, "numpy") else out)]


def _same_bits(a, b):
    la, lb = _leaves(a), _leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes(), (x, y)


@pytest.fixture
def untiered(monkeypatch):
    """Compile one function with tiering off (the reference build)."""

    def compile_untiered(fn, *args):
        monkeypatch.setattr(native, "TIERED", False)
        try:
            f = graphc.compile(fn)
            out = f(*args)
        finally:
            monkeypatch.setattr(native, "TIERED", True)
        assert _exe(f)[1].tier == 1
        return out

    return compile_untiered


rng = np.random.default_rng(0)
X32 = rng.standard_normal((37, 29)).astype(np.float32)
X64 = rng.standard_normal((5, 1000))
W = rng.standard_normal((29, 8)).astype(np.float32)

F = eager.nn.functional
IMG = rng.standard_normal((2, 3, 10, 10)).astype(np.float32)
KER = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
IMG64 = rng.standard_normal((2, 3, 20, 10))
KER64 = rng.standard_normal((4, 3, 3, 3))


def _conv_pool(a, k):
    return F.max_pool2d(F.conv2d(a, k, padding=1).relu(), 2)


CASES = {
    "tanh-exp": (lambda a: (a * 0.7 - 0.3).tanh() * a.exp(), (X64,)),
    "sum-f32": (lambda a: (a * a).sum(), (X32,)),
    "sum-f64": (lambda a: (a.sin() * 1.5).sum(), (X64,)),
    "mean-axis": (lambda a: (a - a.mean(1, keepdim=True)).pow(2).mean(0), (X64,)),
    "prod-axis": (lambda a: (a * 0.01 + 1.0).prod(1), (X64,)),
    "max": (lambda a: a.amax(1) + a.sum(), (X32,)),
    "softmax": (
        lambda a: (
            (a - a.amax(1, keepdim=True)).exp()
            / (a - a.amax(1, keepdim=True)).exp().sum(1, keepdim=True)
        ),
        (X32,),
    ),
    "mlp": (lambda a, w: ((a @ w).clamp(min=0) ** 2).sum(), (X32, W)),
    "grad": (graphc.value_and_grad(lambda a, w: ((a @ w).tanh() ** 2).sum(), argnums=1), (X32, W)),
    "0-d": (lambda a: (a * 3.0).exp().sum(), (np.array(0.25),)),
    "size-1": (lambda a: a.log1p().sum(), (np.array([0.5]),)),
    "size-0": (lambda a: (a * 2.0).sum() + 1.0, (np.zeros((0, 3)),)),
    "strided": (lambda a: (a * a).sum(0), (X64[:, ::3],)),
    # hand-written kernels: convolution and pooling (and their gradients), a gather
    # (cross-entropy's target), a sort, a cumulative sum
    "conv-pool": (lambda a, k: _conv_pool(a, k).sum(), (IMG, KER)),
    "conv-pool-grad": (
        graphc.value_and_grad(lambda a, k: (_conv_pool(a, k) ** 2).mean(), argnums=(0, 1)),
        (IMG, KER),
    ),
    "conv-f64-strided": (lambda a, k: _conv_pool(a, k).sum(), (IMG64[:, :, ::2], KER64)),
    "cross-entropy-grad": (
        graphc.value_and_grad(lambda a, t: F.cross_entropy(a, t), argnums=0),
        (X32[:, :10], np.arange(37) % 10),
    ),
    "argsort": (lambda a: a.argsort(1) + (a * 2.0).sum(), (X32,)),
    "cumsum": (lambda a: (a * 0.5).cumsum(1), (X64,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_quick_tier_and_full_tier_give_the_same_bits(name, untiered):
    fn, args = CASES[name]
    want = untiered(fn, *args)
    f = graphc.compile(fn)
    first = f(*args)
    entry, exe = _exe(f)
    _same_bits(first, want)
    for _ in range(native.TIER_UP_CALLS + 2):
        _same_bits(f(*args), want)
    assert exe.tier == 1


def test_seed_step_starts_quick_and_upgrades_after_a_few_calls(monkeypatch):
    from graphc.tools.workloads import D_IN, D_OUT, H, N, seed_step

    r = np.random.default_rng(3)
    x = eager.tensor(r.standard_normal((N, D_IN), dtype=np.float32))
    y = eager.tensor(r.standard_normal((N, D_OUT), dtype=np.float32))
    w1_0 = r.standard_normal((D_IN, H), dtype=np.float32)
    w2_0 = r.standard_normal((H, D_OUT), dtype=np.float32)

    def train(tiered):
        monkeypatch.setattr(native, "TIERED", tiered)
        w1 = eager.tensor(w1_0.copy(), requires_grad=True)
        w2 = eager.tensor(w2_0.copy(), requires_grad=True)
        f = graphc.compile(seed_step)
        losses, tiers = [], []
        for _ in range(native.TIER_UP_CALLS + 3):
            losses.append(float(f(x, y, w1, w2)))
            tiers.append(sorted(e.stages["_executable"].tier for e in f._cache.values()))
        return losses, w1.detach().numpy(), w2.detach().numpy(), tiers

    ref_losses, ref_w1, ref_w2, ref_tiers = train(False)
    losses, w1, w2, tiers = train(True)
    assert ref_tiers[0] == [1]
    assert tiers[0] == [0]  # the first call ran quick code
    # the step's 2nd signature (.grad now set) runs every later call: upgraded
    assert tiers[-1] == [0, 1]
    assert losses == ref_losses  # every step, bit for bit
    assert w1.tobytes() == ref_w1.tobytes() and w2.tobytes() == ref_w2.tobytes()
    ew1 = eager.tensor(w1_0.copy(), requires_grad=True)
    ew2 = eager.tensor(w2_0.copy(), requires_grad=True)
    for want in ref_losses:
        np.testing.assert_allclose(want, float(seed_step(x, y, ew1, ew2)), rtol=1e-5)
    np.testing.assert_allclose(w1, ew1.detach().numpy(), rtol=1e-4, atol=1e-6)


def test_the_fast_call_path_is_rebound_to_the_optimized_code():
    f = graphc.compile(lambda a: (a * a).sum())
    f(X64)
    entry, exe = _exe(f)
    assert exe.tier == 0
    assert exe.upgrade() is True and exe.upgrade() is False
    cells = [c.cell_contents for c in entry.call.__closure__]
    assert exe._native in cells  # the counting wrapper is gone from the call path
    np.testing.assert_allclose(f(X64), (X64 * X64).sum(), rtol=1e-12)


def test_inspection_shows_the_optimized_code():
    f = graphc.compile(lambda a: (a * 2.0).tanh().sum())
    f(X64)
    _, exe = _exe(f)
    assert exe.tier == 0
    text = f.llvm_ir(X64, optimized=True)
    assert exe.tier == 1 and "graphc_entry" in text


def test_threads_calling_across_the_switch_get_the_same_bits(untiered):
    fn = CASES["grad"][0]
    args = CASES["grad"][1]
    want = untiered(fn, *args)
    f = graphc.compile(fn)
    f(*args)
    _, exe = _exe(f)
    assert exe.tier == 0
    barrier = threading.Barrier(4)
    errors = []

    def worker():
        try:
            barrier.wait()
            for _ in range(3 * native.TIER_UP_CALLS):
                _same_bits(f(*args), want)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ts = [threading.Thread(target=worker) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert not errors, errors[0]
    assert exe.tier == 1


def test_a_differing_reduction_keeps_the_quick_code_with_a_warning(monkeypatch):
    f = graphc.compile(lambda a: (a.exp() * a).sum())
    want = f(X64)
    _, exe = _exe(f)
    assert exe.tier == 0
    calls = []

    def differ(text, names):
        calls.append(1)
        return {n: text for n in names}  # the two modules' texts differ

    monkeypatch.setattr(native, "optimized_functions", differ)
    with pytest.warns(RuntimeWarning, match="differ between the quick and the full build"):
        for _ in range(native.TIER_UP_CALLS):
            _same_bits(f(X64), want)
    assert exe.tier == 0
    n = len(calls)
    for _ in range(2 * native.TIER_UP_CALLS):
        _same_bits(f(X64), want)
    assert len(calls) == n  # tried once, not at every call


def test_big_graphs_and_disk_cache_compile_fully_at_once(tmp_path):
    big = np.ones(native.TIER0_MAX_WORK + 1)
    f = graphc.compile(lambda a: (a * 2.0).sum())
    f(big)
    assert _exe(f)[1].tier == 1
    cached = graphc.compile(lambda a: (a * 3.0).sum(), disk_cache=str(tmp_path / "c"))
    cached(X64)
    _, exe = _exe(cached)
    assert exe.tier == 1 and exe.cache_status == "disk-stored"


def test_conv_pool_gather_graphs_start_quick_and_upgrade_after_two_calls_when_big():
    conv = graphc.compile(lambda a, k: F.conv2d(a, k))
    conv(eager.ones(1, 1, 6, 6), eager.ones(1, 1, 3, 3))
    _, exe = _exe(conv)
    assert exe.tier == 0
    # a graph over more than TIER_UP_WORK elements switches at its 2nd call, not its 1st
    big = (native.TIER_UP_WORK + 1) // 64
    f = graphc.compile(lambda a: (a * 2.0 + 1.0).tanh())
    f(np.ones((big, 64)))
    _, exe = _exe(f)
    assert exe.tier == 0
    f(np.ones((big, 64)))
    assert exe.tier == 1


def test_kernels_that_need_the_optimizer_stay_optimized_in_the_quick_build():
    f = graphc.compile(lambda a: a.argsort(1) + (a * 2.0).sum())
    f(X32)
    _, exe = _exe(f)
    assert exe.tier == 0
    names = native.optimized_kernels(exe.plan)
    assert names and all(n.endswith("_argsort") for n in names)
    quick_ir = exe.jit.llvm_ir(False)
    for line in quick_ir.splitlines():
        if line.startswith("define"):
            name = line.split("@", 1)[1].split("(", 1)[0].strip('"')
            if name in names:
                assert "optnone" not in line, line
            elif name.endswith("_loop") and name not in exe._reductions:
                assert "optnone" in line, line


def test_whole_cnn_training_step_quick_then_full_gives_the_same_bits(monkeypatch):
    """A LeNet step (conv, pooling, cross-entropy, backward, Adam) compiled whole: its
    first call (state created) and every later one equal a build with tiering off."""
    from graphc.tools.models import build

    M = build()
    r = np.random.default_rng(7)
    x = eager.tensor(r.random((4, 1, 28, 28), dtype=np.float32))
    y = eager.tensor(r.integers(0, 10, size=4))

    def train(tiered):
        monkeypatch.setattr(native, "TIERED", tiered)
        eager.manual_seed(0)
        m = M.LeNet()
        opt = eager.optim.Adam(m.parameters(), lr=1e-2)

        # the first call's native code too (by default it would run on the interpreter:
        # it creates Adam's state, graphc.api _interpret_first)
        @graphc.compile(interpret_first_step=False)
        def step(a, b):
            opt.zero_grad()
            loss = M.class_loss(m, a, b)
            loss.backward()
            opt.step()
            return loss

        losses, tiers = [], []
        for _ in range(native.TIER_UP_CALLS + 3):
            losses.append(step(x, y).numpy().tobytes())
            tiers.append(sorted(e.stages["_executable"].tier for e in step._cache.values()))
        return losses, [p.detach().numpy().tobytes() for p in m.parameters()], tiers

    ref_losses, ref_params, ref_tiers = train(False)
    losses, params, tiers = train(True)
    assert ref_tiers[0] == [1] and tiers[0] == [0] and tiers[-1] == [1]
    assert losses == ref_losses
    assert params == ref_params


def test_reduction_kernels_are_noinline_in_every_build():
    f = graphc.compile(lambda a: (a * a).sum())
    f(X64)
    _, exe = _exe(f)
    assert exe._reductions
    exe.upgrade()
    for name, body in native.optimized_functions(exe.jit.llvm_ir(True), exe._reductions).items():
        assert "vector" in body or "<" in body  # still its own (vectorized) function


def test_environment_variable_turns_tiering_off():
    code = "import graphc.runtime.native as n; print(n.TIERED)"
    env = dict(os.environ, PYTHONPATH=ROOT, GRAPHC_TIERED="0")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.stdout.strip() == "False", out.stderr


def test_blas_convolutions_run_quick_code_and_sorts_optimized_code():
    f = graphc.compile(lambda a, k: _conv_pool(a, k).sum() + a.argsort(3).sum())
    f(IMG, KER)
    _, exe = _exe(f)
    assert exe.tier == 0
    kinds = {k.kind for k in exe.plan.kernels}
    assert "conv2d" in kinds
    # convolutions on BLAS: their own code only copies (quick); the sort needs the optimizer
    assert {n.split("_", 1)[1] for n in native.optimized_kernels(exe.plan)} == {"argsort"}
