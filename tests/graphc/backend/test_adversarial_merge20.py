"""Adversarial checks of the changes merged for W6-W8 (batched small products, float32
erf, conv/pooling thread splits, the memory plan's masks/reorder/pooling gradient over
its input and the simplify rule "mask of a pooling gradient", the prepared step call and
the lr tensor reuse, the first call's backend/pool threads).

Each test pins a behaviour an adversarial fuzz session found correct, on the inputs most
likely to break it: every comparison and branch order of the pooling-mask rule with NaN,
-0.0, +-inf and ties, odd/broadcast/negative-stride/size-0 batched products on 1-3
threads with the split thresholds lowered (so the small test sizes take the threaded
kernels), erf's float32 edges, pooling with all -inf windows, padding and ceil mode,
in-place updates that the kernel reorder must keep in program order, compiled optimizer
steps under learning-rate and param-group edits, and a first call interrupted while the
backend and the pool load on their threads."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import eager
import graphc
import graphc.backend.lowering.conv as conv_mod
import graphc.backend.parallel_policy as policy_mod
from graphc.runtime import parallel

F = eager.nn.functional
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

_CMP = {
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
}


@pytest.fixture
def split_small(monkeypatch):
    """Lower the thread-split thresholds so small inputs run the threaded kernels;
    yields set_num_threads and restores the thread count."""
    for mod in (conv_mod, policy_mod):
        for name in ("GEMM_PARALLEL_MIN", "PARALLEL_MIN", "GIL_FREE_MIN"):
            if hasattr(mod, name):
                monkeypatch.setattr(mod, name, 1)
    before = parallel.get_num_threads()
    yield parallel.set_num_threads
    parallel.set_num_threads(before)


# --- simplify rule "mask of a pooling gradient" ---------------------------------------


def _pool_mask_fn(op, c, swap, rev, k):
    def f(y, G):
        p, vjp = graphc.vjp(lambda t: F.max_pool2d(t, k), y)
        (pg,) = vjp(G)
        cc = eager.tensor(c, dtype=y.dtype)
        m = _CMP[op](cc, y) if rev else _CMP[op](y, cc)
        z = eager.tensor(0.0, dtype=y.dtype)
        return (eager.where(m, pg, z) if swap else eager.where(m, z, pg)), p

    return f


@pytest.mark.parametrize("op", sorted(_CMP))
@pytest.mark.parametrize("c", [0.0, -0.0, 1.0, float("nan"), float("-inf")])
@pytest.mark.parametrize("swap", [False, True])
def test_pool_mask_rule_matches_eager_for_every_comparison_and_branch_order(op, c, swap):
    """where(cmp(y, c), 0, max_pool2d_grad(y, G)) (either operand order of the
    comparison, either branch order) with NaN, -0.0, +-inf and tied maxima in y: the
    rewritten graph gives eager's bits (the rule fires: the mask is on the pooled side)."""
    rng = np.random.default_rng(hash((op, c, swap)) % 2**32)
    for k, rev, dt, n in [(2, False, np.float64, 2), (3, True, np.float32, 1), (1, False, np.float32, 0)]:
        y = rng.integers(-2, 3, size=(n, 2, 2 * k, 3 * k)).astype(dt)
        y[rng.random(y.shape) < 0.1] = np.nan
        y[rng.random(y.shape) < 0.1] = -0.0
        y[rng.random(y.shape) < 0.05] = np.inf
        G = rng.standard_normal((n, 2, 2, 3)).astype(dt)
        G[rng.random(G.shape) < 0.2] = -0.0
        f = _pool_mask_fn(op, c, swap, rev, k)
        cf = graphc.compile(f, disk_cache=False, poison_freed=True)
        got = np.asarray(cf(y, G)[0])
        yt = eager.tensor(y, requires_grad=True)
        F.max_pool2d(yt, k).backward(eager.tensor(G))
        pg = yt.grad.numpy()
        cc = np.asarray(c, dtype=dt)
        m = _CMP[op](cc, y) if rev else _CMP[op](y, cc)
        want = np.where(m, pg, 0) if swap else np.where(m, 0, pg)
        np.testing.assert_array_equal(got, want.astype(dt))
        assert np.array_equal(np.signbit(got), np.signbit(want)), "sign of zero"
        if n:
            plan = cf._native((y, G)).plan
            shapes = [tuple(d["shape"]) for _, d in plan.g.nx.nodes(data=True) if d["op"] == "where"]
            assert shapes == [(n, 2, 2, 3)], shapes


# --- batched small products ------------------------------------------------------------


_GEMM_CASES = [
    # (A shape, B shape, A transform, B transform)
    ((4, 1, 1), (4, 1, 1), "", ""),
    ((5, 7, 1), (5, 1, 17), "", "T"),
    ((6, 3, 5), (1, 5, 63), "T", ""),
    ((2, 3, 65, 2), (3, 2, 7), "", "flip"),
    ((40, 2, 3), (40, 3, 65), "flip", "T"),
    ((4, 64, 64), (4, 64, 64), "", ""),
    ((7, 63, 17), (17,), "", ""),
    ((17,), (9, 17, 5), "", ""),
    ((4, 1, 5, 3), (1, 6, 3, 2), "slice", ""),
    ((4, 3, 5), (4, 5, 0), "", ""),
    ((0, 3, 5), (0, 5, 2), "", ""),
]


def _layout(a: np.ndarray, how: str) -> np.ndarray:
    if how == "T" and a.ndim >= 2:  # the same values, transposed strides
        return np.swapaxes(np.ascontiguousarray(np.swapaxes(a, -1, -2)), -1, -2)
    if how == "slice":  # every other column of a wider array
        w = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        w[..., ::2] = a
        return w[..., ::2]
    return a


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_small_batched_products_odd_sizes_layouts_and_threads(dt, threads, split_small):
    """Odd M/N/K (1, 3, 5, 17, 63, 65), K = 1, broadcast and 1-D operands, transposed,
    sliced and reversed (negative stride) operands, size 0, NaN/Inf: against float64
    numpy, the same bits on every call, and the gradients against eager."""
    split_small(threads)
    rng = np.random.default_rng(7)
    tol = 2e-4 if dt == np.float32 else 1e-11
    for sa, sb, ta, tb in _GEMM_CASES:
        a0 = rng.standard_normal(sa).astype(dt)
        b0 = rng.standard_normal(sb).astype(dt)
        if a0.size > 3:
            a0.flat[1], a0.flat[3] = np.nan, np.inf
        a, b = _layout(a0, ta), _layout(b0, tb)
        fa = (lambda t: t.flip(-1)) if ta == "flip" else (lambda t: t)
        fb = (lambda t: t.flip(-2)) if tb == "flip" else (lambda t: t)
        na = a[..., ::-1] if ta == "flip" else a
        nb = b[..., ::-1, :] if tb == "flip" else b
        cf = graphc.compile(lambda x, y: fa(x) @ fb(y), disk_cache=False)
        want = np.matmul(na.astype(np.float64), nb.astype(np.float64))
        got = [np.asarray(cf(a, b)) for _ in range(2)]
        assert got[0].shape == want.shape, (sa, sb)
        np.testing.assert_allclose(got[0], want, rtol=tol, atol=tol * 20, equal_nan=True)
        np.testing.assert_array_equal(got[0], got[1])
        if a.size == 0 or b.size == 0:
            continue
        a, b = np.nan_to_num(a, nan=0.5, posinf=2.0), b
        g = graphc.compile(
            graphc.grad(lambda x, y: ((fa(x) @ fb(y)).sin()).sum(), argnums=(0, 1)), disk_cache=False
        )(a, b)
        at = eager.tensor(a.astype(np.float64), requires_grad=True)
        bt = eager.tensor(b.astype(np.float64), requires_grad=True)
        ((fa(at) @ fb(bt)).sin()).sum().backward()
        np.testing.assert_allclose(g[0], at.grad.numpy(), rtol=tol * 10, atol=tol * 50)
        np.testing.assert_allclose(g[1], bt.grad.numpy(), rtol=tol * 10, atol=tol * 50)


@pytest.mark.parametrize("threads", [1, 3])
def test_small_batched_products_inside_a_scan_body_and_its_gradient(threads, split_small):
    split_small(threads)
    rng = np.random.default_rng(3)
    B, M, K, N, T = 6, 17, 5, 3, 3
    h0 = rng.standard_normal((B, M, K))
    ws = rng.standard_normal((T, B, K, K)) / math.sqrt(K)
    wo = rng.standard_normal((B, K, N))

    def f(h0, ws, wo):
        def body(h, w):
            h2 = (h @ w).tanh()
            return h2, (h2 @ wo).sum()

        h, ys = graphc.loops.scan(body, h0, ws)
        return ys.sum() + (h @ wo).sum()

    def ref(h0, ws, wo):
        h, tot = h0, 0
        for t in range(T):
            h = (h @ ws[t]).tanh()
            tot = tot + (h @ wo).sum()
        return tot + (h @ wo).sum()

    v, gs = graphc.compile(graphc.value_and_grad(f, argnums=(0, 1, 2)), disk_cache=False)(h0, ws, wo)
    ts = [eager.tensor(a, requires_grad=True) for a in (h0, ws, wo)]
    loss = ref(*ts)
    loss.backward()
    np.testing.assert_allclose(np.asarray(v), loss.item(), rtol=1e-12)
    for g, t in zip(gs, ts):
        np.testing.assert_allclose(np.asarray(g), t.grad.numpy(), rtol=1e-10, atol=1e-12)


# --- float32 erf -------------------------------------------------------------------------


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ia, ib = a.view(np.int32).astype(np.int64), b.view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return np.abs(ia - ib)


def test_float32_erf_edges():
    """±0 (sign kept), subnormals, the 0.75 switch, the round-to-1 point 3.919206 and
    the clamp at 4 (with their float neighbours), huge values, ±inf and NaN: within the
    documented 2 ulp of erf, exact where erf is exactly representable."""
    f32 = np.float32
    pts = [0.75, 3.919206, 4.0, 1.0, 2.0]
    near = [np.nextafter(f32(p), f32(d)) for p in pts for d in (0, 10)] + [f32(p) for p in pts]
    x = np.array(
        [0.0, -0.0, 1e-45, 1.1754942e-38, 1.17549435e-38, 1e-30, 1e-10, 5.0, 10.0, 1e10, 3.4028235e38]
        + near,
        f32,
    )
    x = np.concatenate([x, -x])
    got = np.asarray(graphc.compile(lambda t: t.erf(), disk_cache=False)(x))
    want = np.array([math.erf(float(v)) for v in x]).astype(f32)
    assert _ulps(got, want).max() <= 2, list(zip(x, got, want))
    assert (np.signbit(got) == np.signbit(x)).all()
    special = np.array([np.inf, -np.inf, np.nan], f32)
    s = np.asarray(graphc.compile(lambda t: t.erf(), disk_cache=False)(special))
    assert s[0] == 1.0 and s[1] == -1.0 and np.isnan(s[2])


def test_float32_gelu_and_its_gradient_match_eager_in_float64():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(4099) * 3, [0.0, -0.0, 6.0, -6.0, 40.0, -40.0]]).astype(np.float32)
    y = np.asarray(graphc.compile(lambda t: F.gelu(t), disk_cache=False)(x))
    g = np.asarray(graphc.compile(graphc.grad(lambda t: F.gelu(t).sum()), disk_cache=False)(x))
    xt = eager.tensor(x.astype(np.float64), requires_grad=True)
    F.gelu(xt).sum().backward()
    # float32's 1 + erf(x / sqrt 2) cancels for negative x: absolute, not relative, error
    np.testing.assert_allclose(y, F.gelu(eager.tensor(x.astype(np.float64))).numpy(), rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(g, xt.grad.numpy(), rtol=2e-6, atol=1e-6)


# --- pooling with -inf / NaN windows, padding, ceil mode; conv splits ------------------


@pytest.mark.parametrize("threads", [1, 2])
def test_max_pool_with_inf_nan_windows_padding_and_ceil_mode_matches_eager(threads, split_small):
    """Windows that are all -inf, NaN (the last NaN is the argmax), padded and
    ceil-mode windows past the edge: graphc's values and gradients are eager's bits
    (eager's were checked against PyTorch 2.13 on the same inputs)."""
    split_small(threads)
    rng = np.random.default_rng(0)
    vals = [-np.inf, np.nan, 1.0, 0.0, -0.0, np.inf, -1.0]
    for _ in range(25):
        k, s = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        p, d, ceil = int(rng.integers(0, k // 2 + 1)), int(rng.integers(1, 3)), bool(rng.integers(2))
        H, W = int(rng.integers(k, 9)), int(rng.integers(k, 9))
        x = rng.choice(vals, size=(3, 2, H, W), p=[0.4, 0.1, 0.15, 0.1, 0.1, 0.05, 0.1])

        def f(t):
            return F.max_pool2d(t, k, stride=s, padding=p, dilation=d, ceil_mode=ceil)

        xt = eager.tensor(x, requires_grad=True)
        try:
            y = f(xt)
        except (RuntimeError, ValueError):
            continue
        G = np.arange(y.numel(), dtype=np.float64).reshape(tuple(y.shape)) + 1
        (y * eager.tensor(G)).sum().backward()
        cy = np.asarray(graphc.compile(f, disk_cache=False)(x))
        cg = np.asarray(
            graphc.compile(graphc.grad(lambda t, G: (f(t) * G).sum()), disk_cache=False)(x, G)
        )
        geom = (k, s, p, d, ceil, x.shape)
        np.testing.assert_array_equal(cy, y.detach().numpy(), err_msg=str(geom))
        np.testing.assert_array_equal(cg, xt.grad.numpy(), err_msg=str(geom))


@pytest.mark.parametrize("seed", range(3))
def test_conv_relu_pool_split_across_threads_matches_eager(seed, split_small):
    """conv2d (stride/padding/dilation/groups, batch 0..5, non-contiguous input) -> ReLU
    -> max pooling (any geometry, ceil mode), value and both gradients on 1-3 threads."""
    rng = np.random.default_rng(seed)
    for _ in range(8):
        split_small(int(rng.integers(1, 4)))
        dt = [np.float32, np.float64][int(rng.integers(2))]
        N, groups = int(rng.choice([0, 1, 2, 3, 5])), int(rng.choice([1, 2]))
        Cin, Cout = groups * int(rng.integers(1, 4)), groups * int(rng.integers(1, 4))
        kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        st, pd, dl = tuple(rng.integers(1, 3, 2)), tuple(rng.integers(0, 2, 2)), tuple(rng.integers(1, 3, 2))
        st, pd, dl = tuple(map(int, st)), tuple(map(int, pd)), tuple(map(int, dl))
        H, W = int(rng.integers((kh - 1) * dl[0] + 1, 16)), int(rng.integers((kw - 1) * dl[1] + 1, 16))
        x = rng.standard_normal((N, Cin, H, 2 * W)).astype(dt)[..., ::2]
        w = rng.standard_normal((Cout, Cin // groups, kh, kw)).astype(dt)
        pk, ps, ceil = int(rng.integers(1, 3)), int(rng.integers(1, 3)), bool(rng.integers(2))

        def f(x, w):
            h = F.conv2d(x, w, stride=st, padding=pd, dilation=dl, groups=groups).relu()
            return F.max_pool2d(h, pk, stride=ps, ceil_mode=ceil)

        xt = eager.tensor(x.astype(np.float64), requires_grad=True)
        wt = eager.tensor(w.astype(np.float64), requires_grad=True)
        try:
            out = f(xt, wt)
        except (RuntimeError, ValueError):
            continue
        G = rng.standard_normal(tuple(out.shape))
        (out * eager.tensor(G)).sum().backward()
        y = np.asarray(graphc.compile(f, disk_cache=False)(x, w))
        gx, gw = graphc.compile(
            graphc.grad(lambda x, w, G: (f(x, w) * G).sum(), argnums=(0, 1)), disk_cache=False
        )(x, w, G.astype(dt))
        tol = 2e-3 if dt == np.float32 else 1e-9
        np.testing.assert_allclose(y, out.detach().numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(np.asarray(gx), xt.grad.numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(np.asarray(gw), wt.grad.numpy(), rtol=tol, atol=tol)


# --- in-place updates under the memory-aware kernel order ----------------------------


def _updates_then_reads(w, b, x):
    h = (x @ w + b).relu()
    g = x.t() @ (h > 0).to(x.dtype)
    old = w * 1.0
    w.add_(g * 0.01)
    b.add_(h.sum(0) * 0.01)
    z = (x @ w + b).relu()
    return h.sum(), z.sum(), (old - w).abs().sum(), h.max()


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("n,k", [(3, 4), (64, 64), (200, 128)])
def test_inplace_updates_keep_program_order_under_reordering(n, k, threads, split_small):
    """Readers of a parameter before its in-place update see the old values, readers
    after it the new ones, with the kernel order chosen for memory and freed bytes
    poisoned."""
    split_small(threads)
    rng = np.random.default_rng(n + k)
    w0, b0, x = rng.standard_normal((k, k)), rng.standard_normal(k), rng.standard_normal((n, k))
    cf = graphc.compile(_updates_then_reads, disk_cache=False, poison_freed=True)

    def run(fn):
        w, b = eager.tensor(w0.copy()), eager.tensor(b0.copy())
        with eager.no_grad():
            out = fn(w, b, eager.tensor(x))
        return [np.asarray(o) for o in out] + [w.numpy(), b.numpy()]

    want = run(_updates_then_reads)
    for _ in range(2):
        for a, e in zip(run(cf), want):
            np.testing.assert_allclose(a, e, rtol=1e-10, atol=1e-10)


# --- compiled optimizer steps under lr / param-group edits --------------------------


_OPTS = {
    "sgd_nesterov": lambda p: eager.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True),
    "adamw": lambda p: eager.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
    "rmsprop": lambda p: eager.optim.RMSprop(p, lr=1e-2, momentum=0.5),
    "adagrad": lambda p: eager.optim.Adagrad(p, lr=0.1),
    "adam_amsgrad": lambda p: eager.optim.Adam(p, lr=1e-2, amsgrad=True),
}


def _edits():
    def lr_other_type(m, o):  # the same value as another type: a new lr tensor
        v = o.param_groups[0]["lr"]
        o.param_groups[0]["lr"] = np.float32(v) if isinstance(v, float) else float(v)

    def lr_neg_zero(m, o):
        o.param_groups[0]["lr"] = -0.0

    def lr_zero(m, o):
        o.param_groups[0]["lr"] = 0.0

    def lr_back(m, o):
        o.param_groups[0]["lr"] = 0.01

    def lr_int(m, o):
        o.param_groups[0]["lr"] = 1

    def split_group(m, o):
        if len(o.param_groups) == 1:
            last = o.param_groups[0]["params"].pop()
            o.add_param_group({"params": [last], "lr": 0.003})

    def state_roundtrip(m, o):
        import copy

        o.load_state_dict(copy.deepcopy(o.state_dict()))

    def freeze(m, o):
        m[4].bias.requires_grad_(False)

    def unfreeze(m, o):
        m[4].bias.requires_grad_(True)

    def data_inplace(m, o):
        with eager.no_grad():
            m[0].weight.mul_(0.9)

    def grad_none(m, o):
        m[0].weight.grad = None

    def nothing(m, o):
        pass

    return [lr_other_type, lr_neg_zero, lr_zero, lr_back, lr_int, split_group, state_roundtrip,
            freeze, unfreeze, data_inplace, grad_none, nothing, nothing]


@pytest.mark.parametrize("opt", sorted(_OPTS))
def test_compiled_conv_step_matches_eager_under_lr_and_group_edits(opt):
    """A conv/ReLU/pool/linear classifier's compiled step (prepared warm call, memory
    plan with the pooling gradient over its input) against eager after every step, with
    lr edits (-0.0, 0, int, float32 of the same value), a StepLR scheduler, a param
    group split off with add_param_group, a state_dict round trip, freezing, in-place
    .data edits and .grad cleared between steps."""
    rng = np.random.default_rng(sorted(_OPTS).index(opt))
    nn = eager.nn

    def build():
        eager.manual_seed(0)
        m = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(4 * 4 * 4, 3))
        o = _OPTS[opt](m.parameters())
        sch = eager.optim.lr_scheduler.StepLR(o, 2, gamma=0.5)

        def step(x, y):
            o.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            o.step()
            return loss

        return m, o, step, sch

    me, oe, estep, se = build()
    mc, oc, cstep, sc = build()
    cstep = graphc.compile(cstep)
    x = eager.tensor(rng.standard_normal((5, 2, 8, 8)).astype(np.float32))
    y = eager.tensor(rng.integers(0, 3, size=5))
    edits = _edits()
    for _ in range(14):
        e = edits[rng.integers(len(edits))]
        e(me, oe), e(mc, oc)
        le, lc = estep(x, y), cstep(x, y)
        se.step(), sc.step()
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-4)
        for pe, pc in zip(me.parameters(), mc.parameters()):
            np.testing.assert_allclose(pc.detach().numpy(), pe.detach().numpy(), rtol=1e-3, atol=1e-4)
            assert (pe.grad is None) == (pc.grad is None)
            if pe.grad is not None:
                np.testing.assert_allclose(pc.grad.numpy(), pe.grad.numpy(), rtol=1e-3, atol=1e-4)
            st_e, st_c = oe.state.get(pe, {}), oc.state.get(pc, {})
            assert set(st_e) == set(st_c)
            for key in st_e:
                a = np.asarray(st_e[key].numpy() if hasattr(st_e[key], "numpy") else st_e[key])
                b = np.asarray(st_c[key].numpy() if hasattr(st_c[key], "numpy") else st_c[key])
                np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-4)


def test_read_only_grad_array_does_not_half_apply_a_compiled_step():
    nn = eager.nn

    def build():
        eager.manual_seed(0)
        m = nn.Linear(3, 2)
        o = eager.optim.SGD(m.parameters(), lr=0.1)

        def step(x):
            o.zero_grad()
            loss = (m(x) ** 2).sum()
            loss.backward()
            o.step()
            return loss

        return m, step

    me, estep = build()
    mc, cstep = build()
    cstep = graphc.compile(cstep)
    x = eager.tensor(np.arange(12, dtype=np.float32).reshape(4, 3) / 10)
    for _ in range(3):
        estep(x), cstep(x)
    me.weight.grad.numpy().flags.writeable = False
    mc.weight.grad.numpy().flags.writeable = False
    estep(x)
    cstep(x)  # was: ValueError (assignment destination is read-only), half applied
    for _ in range(2):  # and the calls after it
        for pe, pc in zip(me.parameters(), mc.parameters()):
            np.testing.assert_allclose(pc.detach().numpy(), pe.detach().numpy(), rtol=1e-6, atol=1e-7)
            # float32 sums in another order: a few ulp of the largest term
            np.testing.assert_allclose(pc.grad.numpy(), pe.grad.numpy(), rtol=1e-5, atol=1e-6)
        assert mc.weight.grad.numpy().flags.writeable  # a new .grad, as eager's
        estep(x), cstep(x)


# --- the first call's backend/pool threads -------------------------------------------


_INTERRUPTED_FIRST_CALL = textwrap.dedent(
    """
    import signal, threading, numpy as np, graphc
    x = np.random.default_rng(0).standard_normal((300, 300))
    f = lambda a: (a @ a.T).relu().sum(0) + a.sin().sum()
    want = np.maximum(x @ x.T, 0).sum(0) + np.sin(x).sum()
    def boom(*a):
        raise KeyboardInterrupt
    for d in DELAYS:
        cf = graphc.compile(f, disk_cache=False)
        signal.signal(signal.SIGALRM, boom)
        signal.setitimer(signal.ITIMER_REAL, d)
        try:
            cf(x)
        except KeyboardInterrupt:
            pass
        signal.setitimer(signal.ITIMER_REAL, 0)
        assert np.allclose(cf(x), want)
        assert np.allclose(graphc.compile(f, disk_cache=False)(x), want)
    print("ok")
    """
)


@pytest.mark.parametrize("delays", [(0.02,), (0.15,), (0.3,)])
def test_first_call_interrupted_while_backend_or_pool_loads_then_works_and_exits(delays):
    """A KeyboardInterrupt at some point of the process's first native call (while the
    backend imports and the pool compiles on their threads): the next calls compile and
    give the right numbers, and the process exits (no thread left hanging)."""
    code = _INTERRUPTED_FIRST_CALL.replace("DELAYS", repr(list(delays)))
    env = dict(os.environ, PYTHONPATH=ROOT, GRAPHC_NUM_THREADS="2")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]


@pytest.mark.parametrize("zero", ["optimizer", "module"])
def test_compiled_step_with_zero_grad_set_to_none_false_matches_eager(zero):
    """``opt.zero_grad(set_to_none=False)`` (or the module's) inside a compiled step,
    once the .grad arrays exist: traced (the traced .grad has no ``grad_fn``; this was
    an AttributeError at the second call) and equal to eager, .grad zeroed and refilled
    in place at every step."""
    nn = eager.nn

    def build():
        eager.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))
        o = eager.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

        def step(x):
            (o if zero == "optimizer" else m).zero_grad(set_to_none=False)
            loss = (m(x) ** 2).sum()
            loss.backward()
            o.step()
            return loss

        return m, step

    me, estep = build()
    mc, cstep = build()
    cstep = graphc.compile(cstep)
    x = eager.tensor(np.arange(8, dtype=np.float32).reshape(2, 4) / 8)
    for _ in range(5):
        le, lc = estep(x), cstep(x)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-6)
        for pe, pc in zip(me.parameters(), mc.parameters()):
            np.testing.assert_allclose(pc.detach().numpy(), pe.detach().numpy(), rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(pc.grad.numpy(), pe.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_compiled_step_with_tied_weights_matches_eager():
    nn = eager.nn

    def build():
        eager.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4))
        m[2].weight = m[0].weight  # tied, as an LM's embedding and output layer
        o = eager.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

        def step(x):
            o.zero_grad()
            loss = (m(x) ** 2).sum()
            loss.backward()
            o.step()
            return loss

        return m, step

    me, estep = build()
    mc, cstep = build()
    cstep = graphc.compile(cstep)
    x = eager.tensor(np.arange(8, dtype=np.float32).reshape(2, 4) / 8)
    for _ in range(3):
        le, lc = estep(x), cstep(x)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-6)
        for pe, pc in zip(me.parameters(), mc.parameters()):
            np.testing.assert_allclose(pc.detach().numpy(), pe.detach().numpy(), rtol=1e-6, atol=1e-7)
