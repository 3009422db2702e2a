"""Convolution and max-pooling kernels split across threads (batch items, or the weight
gradient's columns) and reading their operands in place: compiled == eager for 1, 2
and 3 threads, deterministic per thread count, in every geometry and layout."""

from __future__ import annotations

import numpy as np
import pytest

import eager
import eager.nn.functional as F
import graphc
from graphc.backend.abi import GEMM_PARALLEL_MIN, PARALLEL_MIN


def _r(shape, seed, dtype):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


def _tol(dtype):
    return dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)


@pytest.fixture
def threads():
    """Restores the thread count a test changes."""
    before = graphc.get_num_threads()
    yield graphc.set_num_threads
    graphc.set_num_threads(before)


# (x shape, w shape, stride, padding, dilation, groups): big enough to be split, except
# the marked ones (which must still be right)
CONVS = [
    ((13, 8, 15, 15), (16, 8, 3, 3), 1, 0, 1, 1),  # odd batch, W7-like
    ((64, 1, 28, 28), (16, 1, 3, 3), 1, 0, 1, 1),  # W7's first convolution
    ((9, 6, 40, 40), (12, 6, 3, 2), (2, 1), (1, 2), (1, 2), 1),  # stride/padding/dilation
    ((7, 8, 30, 29), (16, 4, 3, 3), 1, 1, 1, 2),  # groups: the weight gradient not split
    ((1, 16, 30, 30), (32, 16, 3, 3), 1, 0, 1, 1),  # one item: conv2d not split
    ((5, 3, 9, 9), (4, 3, 1, 1), 1, 0, 1, 1),  # small: serial
    ((0, 3, 9, 9), (4, 3, 3, 3), 1, 0, 1, 1),  # empty batch
    ((6, 2, 5, 5), (3, 2, 5, 5), 1, 0, 1, 1),  # 1x1 output
]


def _macs(xs, ws, out_hw):
    return xs[0] * ws[0] * ws[1] * ws[2] * ws[3] * out_hw


def test_cases_cover_the_split_kernels():
    """The first four cases are big enough to be split, the rest are not."""
    for k, (xs, ws, s, p, d, g) in enumerate(CONVS):
        y = F.conv2d(eager.zeros(xs), eager.zeros(ws), stride=s, padding=p, dilation=d, groups=g)
        big = _macs(xs, ws, y.shape[2] * y.shape[3]) >= GEMM_PARALLEL_MIN and xs[0] >= 2
        assert big == (k < 4), k
    assert 64 * 16 * 26 * 26 >= PARALLEL_MIN


def _layout(a, how):
    if how == "c":
        return a
    if how == "f":
        return np.asfortranarray(a)
    big = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)  # every other column
    big[..., ::2] = a
    return big[..., ::2]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", range(len(CONVS)))
def test_conv2d_value_and_grads_match_eager_on_1_2_3_threads(case, dtype, threads):
    xs, ws, s, p, d, g = CONVS[case]
    x, w = _r(xs, 1, dtype), _r(ws, 2, dtype) * 0.3

    def loss(x, w):
        y = F.conv2d(x, w, stride=s, padding=p, dilation=d, groups=g)
        # a gradient that is not contiguous in the conv's output layout
        return (y * y.detach().transpose(2, 3).contiguous().transpose(2, 3).cos()).sum(), y

    xt, wt = eager.tensor(x, requires_grad=True), eager.tensor(w, requires_grad=True)
    ev, ey = loss(xt, wt)
    ev.backward()
    want = [ey.detach().numpy(), xt.grad.numpy(), wt.grad.numpy()]
    f = graphc.compile(graphc.value_and_grad(loss, argnums=(0, 1), has_aux=True))
    per_count = {}
    for n in (1, 2, 3):
        threads(n)
        for how in ("c", "f", "strided"):
            (v, y), (gx, gw) = f(_layout(x, how), _layout(w, how))
            got = [np.asarray(y), np.asarray(gx), np.asarray(gw)]
            for a, b in zip(got, want):
                np.testing.assert_allclose(a, b, **_tol(dtype))
            if how == "c":
                again = [np.asarray(t) for t in (f(x, w)[0][1],) + tuple(f(x, w)[1])]
                for a, b in zip(again, got):
                    np.testing.assert_array_equal(a, b)  # deterministic per thread count
                per_count[n] = got
    # batch splits are bitwise the serial result: the forward and the input gradient
    for n in (2, 3):
        np.testing.assert_array_equal(per_count[n][0], per_count[1][0])
        np.testing.assert_array_equal(per_count[n][1], per_count[1][1])


def test_conv2d_transposed_weights_and_input_views(threads):
    """Operands that BLAS cannot read in place are copied: a weight view with permuted
    dimensions, an input with channels last."""
    x = _r((10, 12, 12, 6), 3, np.float64).transpose(0, 3, 1, 2)  # channels-last view
    w = _r((3, 3, 6, 16), 4, np.float64).transpose(3, 2, 0, 1)
    f = lambda x, w: (F.conv2d(x, w) ** 2).sum()  # noqa: E731
    xt, wt = eager.tensor(x, requires_grad=True), eager.tensor(w, requires_grad=True)
    f(xt, wt).backward()
    cg = graphc.compile(graphc.grad(f, argnums=(0, 1)))
    for n in (1, 2, 3):
        threads(n)
        gx, gw = cg(x, w)
        np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(gw, wt.grad.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "shape, k, s, p",
    [
        ((64, 16, 26, 26), 2, 2, 0),  # W7's first pooling: split, windows tile
        ((9, 16, 45, 45), 2, 2, 0),  # split, a last row/column in no window
        ((9, 16, 45, 45), 3, 2, 1),  # split, padding: the general path
        ((1, 300, 31, 31), 2, 2, 0),  # one item: not split
    ],
)
def test_max_pool2d_split_matches_eager_exactly(shape, k, s, p, dtype, threads):
    rng = np.random.default_rng(5)
    xa = rng.standard_normal(shape).astype(dtype)
    xa[..., 1::3, :] = xa[..., :1, :]  # ties keep the first maximum
    xa.flat[::997] = np.nan  # NaN wins its window

    def loss(x, w):
        y = F.max_pool2d(x.relu(), k, s, p)
        return (y * w).sum(), y

    ys = F.max_pool2d(eager.tensor(xa), k, s, p).shape
    wa = rng.standard_normal(tuple(ys)).astype(dtype)
    x = eager.tensor(xa, requires_grad=True)
    total, ey = loss(x, eager.tensor(wa))
    total.backward()
    f = graphc.compile(graphc.value_and_grad(loss, has_aux=True))
    first = None
    for n in (1, 2, 3):
        threads(n)
        (_, y), gx = f(xa, wa)
        np.testing.assert_array_equal(np.asarray(y), ey.detach().numpy())
        if k > s:  # overlapping windows: gradients summed in window order (float rounding)
            np.testing.assert_allclose(np.asarray(gx), x.grad.numpy(), rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(np.asarray(gx), x.grad.numpy())
        first = np.asarray(gx) if first is None else first
        np.testing.assert_array_equal(np.asarray(gx), first)  # the batch split is exact


def test_lenet_step_is_deterministic_per_thread_count(threads):
    """W7's whole compiled step: the same loss and weights for the same thread count,
    and the 1- and 2-thread runs agree to float32 rounding."""
    from graphc.tools.models import build

    M = build()
    rng = np.random.default_rng(7)
    x = eager.tensor(rng.random((64, 1, 28, 28), dtype=np.float32))
    y = eager.tensor(rng.integers(0, 10, size=64))
    runs = {}
    for n in (1, 2, 2, 3):
        threads(n)
        eager.manual_seed(0)
        m = M.LeNet()
        opt = eager.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)

        def step(a, b):
            opt.zero_grad()
            loss = M.class_loss(m, a, b)
            loss.backward()
            opt.step()
            return loss

        c = graphc.compile(step)
        losses = [float(c(x, y)) for _ in range(3)]
        got = (losses, [p.detach().numpy().copy() for p in m.parameters()])
        if n in runs:
            assert got[0] == runs[n][0]
            for a, b in zip(got[1], runs[n][1]):
                np.testing.assert_array_equal(a, b)
        runs[n] = got
    for n in (2, 3):
        np.testing.assert_allclose(runs[n][0], runs[1][0], rtol=1e-5)
        for a, b in zip(runs[n][1], runs[1][1]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_the_split_kernels_are_parallel():
    """The planner splits W7-sized convolutions (all three kernels) and poolings, and
    not a grouped convolution's weight gradient or a one-item batch."""
    from graphc.backend.parallel_policy import parallel_ok

    def split_kinds(fn, *args):
        f = graphc.compile(fn)
        f(*args)
        plan = f._entry_for(args).stages["_executable"].plan
        return sorted(k.kind for k in plan.kernels if k.kind != "loop" and parallel_ok(plan, k))

    x, w = _r((64, 16, 13, 13), 0, np.float32), _r((32, 16, 3, 3), 1, np.float32)

    def loss(x, w, groups=1):
        return F.max_pool2d(F.conv2d(x, w, groups=groups).relu(), 2).sum()

    # (the pooling of the (64, 32, 11, 11) activations: 247,808 elements, split since the
    # pooling threshold is 2^16)
    assert split_kinds(graphc.grad(loss, argnums=(0, 1)), x, w) == [
        "conv2d",
        "conv2d_input_grad",
        "conv2d_weight_grad",
        "max_pool2d_grad",
    ]
    x2 = _r((64, 16, 26, 26), 0, np.float32)
    assert split_kinds(graphc.grad(lambda x: F.max_pool2d(x, 2).sum()), x2) == ["max_pool2d_grad"]
    assert split_kinds(lambda x: F.max_pool2d(x, 2), x2) == ["max_pool2d"]
    wg = _r((32, 8, 3, 3), 1, np.float32)
    grouped = graphc.grad(lambda x, w: loss(x, w, 2), argnums=(0, 1))
    assert "conv2d_weight_grad" not in split_kinds(grouped, x, wg)
    assert split_kinds(lambda x, w: F.conv2d(x, w), x[:1], w) == []


def test_split_kernels_without_blas_match(monkeypatch, threads):
    """The plain-loop fallback (no BLAS, or a share's malloc failed) runs its share too."""
    import graphc.backend.lowering.conv as LC

    monkeypatch.setattr(LC._Conv, "blas_ok", lambda self: False)
    x, w = _r((13, 8, 15, 15), 1, np.float64), _r((16, 8, 3, 3), 2, np.float64)

    def loss(x, w):
        return (F.conv2d(x, w, padding=1) ** 2).sum()

    xt, wt = eager.tensor(x, requires_grad=True), eager.tensor(w, requires_grad=True)
    loss(xt, wt).backward()
    f = graphc.compile(graphc.grad(loss, argnums=(0, 1)), disk_cache=False)
    for n in (1, 2, 3):
        threads(n)
        gx, gw = f(x, w)
        np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(gw, wt.grad.numpy(), rtol=1e-10, atol=1e-10)
