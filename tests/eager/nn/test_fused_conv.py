"""eager's fused conv2d (``ConvolutionBackward0``, bias inside, im2col kept for the
weight gradient) and tiling max_pool2d (``MaxPool2DWithIndicesBackward0``, maxima kept
for the gradient) in eager/nn/_fused.py, against PyTorch: values and gradients in
float32/float64, stride/padding/dilation/groups, both product layouts, batch 1, size-0
batches and unbatched inputs, non-contiguous inputs, ties and NaN in pooling windows,
double backward, in-place errors; and the composite paths they fall back to."""

from __future__ import annotations

import numpy as np
import pytest

import eager
import eager.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

TOL = {np.float32: dict(rtol=2e-4, atol=2e-5), np.float64: dict(rtol=1e-10, atol=1e-11)}
DTYPES = [np.float32, np.float64]


def _pair(a, rg=True):
    return eager.tensor(a, requires_grad=rg), torch.tensor(a, requires_grad=rg)


def _check(fe, ft, arrays, dt, rg=None, seed=0, exact=False):
    """Values and gradients of fe (eager) and ft (PyTorch) agree; returns the outputs."""
    rg = rg or [True] * len(arrays)
    pairs = [_pair(a, r) for a, r in zip(arrays, rg)]
    es, ts = [p[0] for p in pairs], [p[1] for p in pairs]
    oe, ot = fe(*es), ft(*ts)
    want = ot.detach().numpy()
    assert oe.dtype == getattr(eager, str(ot.dtype).split(".")[1])
    assert oe.shape == tuple(ot.shape)
    cmp = (
        np.testing.assert_array_equal
        if exact
        else (lambda a, b: np.testing.assert_allclose(a, b, **TOL[dt]))
    )
    cmp(oe.detach().numpy(), want)
    g = np.random.default_rng(seed).standard_normal(want.shape).astype(dt)
    oe.backward(eager.tensor(g))
    ot.backward(torch.tensor(g))
    for e, t, r in zip(es, ts, rg):
        if r:
            assert e.grad is not None and e.grad.dtype == oe.dtype
            cmp(e.grad.numpy(), t.grad.numpy())
    return oe, ot


def _fused(t) -> bool:
    """Whether t comes from a fused node (an autograd.Function's, with a ctx)."""
    return hasattr(t.grad_fn, "_ctx")


# --- conv2d -------------------------------------------------------------------------------

CONV_CASES = [
    # x shape, w shape, kwargs: W7's two layers (thin per-item path and one product)
    ((4, 1, 12, 12), (16, 1, 3, 3), {}),
    ((3, 16, 9, 9), (32, 16, 3, 3), {}),
    ((2, 3, 9, 8), (4, 3, 3, 2), dict(stride=2, padding=1)),
    ((2, 4, 9, 9), (40, 4, 3, 3), dict(padding=(2, 1), dilation=(2, 1))),
    ((2, 64, 6, 6), (64, 32, 2, 2), dict(groups=2, padding="same")),
    ((1, 6, 7, 5), (6, 1, 3, 3), dict(groups=6, stride=(1, 2))),  # depthwise, batch 1
    ((2, 40, 5, 5), (33, 40, 1, 1), {}),
    ((1, 33, 3, 3), (36, 33, 3, 3), dict(padding=1)),  # 1x1 output with padding
]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("xs,ws,kw", CONV_CASES)
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_matches_pytorch(dt, xs, ws, kw, bias):
    r = np.random.default_rng(3)
    arrs = [r.standard_normal(xs).astype(dt), r.standard_normal(ws).astype(dt)]
    if bias:
        arrs.append(r.standard_normal(ws[:1]).astype(dt))
    oe, ot = _check(lambda *a: F.conv2d(*a, **kw), lambda *a: TF.conv2d(*a, **kw), arrs, dt)
    assert type(oe.grad_fn).__name__ == ot.grad_fn.name() == "ConvolutionBackward0"
    assert _fused(oe) == (len(xs) == 4 and xs[0] > 0)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("rg", [(True, False, False), (False, True, True), (False, False, True),
                                (True, True, False)])  # fmt: skip
def test_conv2d_partial_requires_grad(dt, rg):
    r = np.random.default_rng(4)
    arrs = [r.standard_normal(s).astype(dt) for s in ((2, 16, 7, 7), (32, 16, 3, 3), (32,))]
    _check(F.conv2d, TF.conv2d, arrs, dt, rg=list(rg))


def test_conv2d_non_contiguous_unbatched_batch_one_and_empty():
    r = np.random.default_rng(5)
    dt = np.float32
    x = r.standard_normal((9, 8, 16, 2)).astype(dt).transpose(3, 2, 1, 0)  # (2, 16, 8, 9)
    w = r.standard_normal((3, 3, 16, 32)).astype(dt).transpose(3, 2, 1, 0)
    _check(lambda a, b: F.conv2d(a.transpose(2, 3), b), lambda a, b: TF.conv2d(a.transpose(2, 3), b),
           [x, w], dt)  # fmt: skip
    for xs in ((1, 16, 5, 5), (16, 5, 5), (0, 16, 5, 5)):
        a = r.standard_normal(xs).astype(dt)
        wb = r.standard_normal((32, 16, 3, 3)).astype(dt)
        _check(F.conv2d, TF.conv2d, [a, wb, r.standard_normal(32).astype(dt)], dt)


def test_conv2d_double_backward_matches_pytorch():
    r = np.random.default_rng(6)
    arrs = [r.standard_normal(s) for s in ((2, 3, 6, 6), (4, 3, 3, 3), (4,))]
    es = [eager.tensor(a, requires_grad=True) for a in arrs]
    ts = [torch.tensor(a, requires_grad=True) for a in arrs]
    res = []
    for lib, F_, xs in ((eager, F, es), (torch, TF, ts)):
        out = F_.conv2d(*xs, padding=1)
        gs = lib.autograd.grad((out * out).sum(), xs, create_graph=True)
        total = sum((g * g).sum() for g in gs)
        res.append([v.detach().numpy() for v in lib.autograd.grad(total, xs)])
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


def test_conv2d_inplace_change_of_input_raises_as_pytorch():
    x = eager.randn(2, 3, 5, 5, requires_grad=True)
    w = eager.randn(4, 3, 3, 3, requires_grad=True)
    h = x * 1.0
    out = F.conv2d(h, w)
    h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_conv2d_other_dtype_and_mixed_bias_take_the_composite():
    x = eager.randn(1, 2, 4, 4, requires_grad=True)
    w = eager.randn(3, 2, 3, 3, requires_grad=True)
    out = F.conv2d(x, w, eager.randn(3, dtype=eager.float64))  # bias of another dtype
    assert type(out.grad_fn).__name__ != "ConvolutionBackward0"
    out.sum().backward()
    assert x.grad.shape == (1, 2, 4, 4)


def test_conv2d_retain_graph_second_backward_equal():
    r = np.random.default_rng(7)
    x = eager.tensor(r.standard_normal((2, 16, 6, 6)), requires_grad=True)
    w = eager.tensor(r.standard_normal((32, 16, 3, 3)), requires_grad=True)
    out = F.conv2d(x, w).sum()
    out.backward(retain_graph=True)
    g1 = w.grad.numpy().copy()
    out.backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * g1)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out.backward()


def test_conv2d_nonfinite_weights_and_inputs_match_pytorch():
    """The stride-1 input gradient adds 0 * w: non-finite weights take the strided path."""
    r = np.random.default_rng(8)
    x = r.standard_normal((2, 32, 6, 6)).astype(np.float32)
    w = r.standard_normal((32, 32, 3, 3)).astype(np.float32)
    w[0, 0, 1, 1] = np.inf
    x[0, 0, 2, 2] = np.nan
    pe, pt = _pair(x), _pair(w)
    oe, ot = F.conv2d(pe[0], pt[0]), TF.conv2d(pe[1], pt[1])
    np.testing.assert_allclose(oe.detach().numpy(), ot.detach().numpy(), rtol=1e-4, atol=1e-4)
    oe.sum().backward()
    ot.sum().backward()
    for e, t in ((pe[0], pe[1]), (pt[0], pt[1])):
        np.testing.assert_allclose(e.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-3)


# --- max_pool2d -----------------------------------------------------------------------------

POOL_CASES = [
    ((4, 3, 8, 8), dict(kernel_size=2)),
    ((2, 2, 7, 9), dict(kernel_size=2)),  # remainders dropped
    ((2, 2, 7, 9), dict(kernel_size=2, ceil_mode=True)),  # composite (windows overhang)
    ((1, 3, 9, 9), dict(kernel_size=3)),
    ((2, 2, 6, 8), dict(kernel_size=(2, 4))),
    ((2, 2, 6, 6), dict(kernel_size=2, stride=1)),  # overlapping: composite
    ((2, 2, 6, 6), dict(kernel_size=2, padding=1)),  # padded: composite
    ((1, 1, 1, 1), dict(kernel_size=1)),
    ((3, 5, 5), dict(kernel_size=2)),  # unbatched
    ((0, 2, 4, 4), dict(kernel_size=2)),  # empty batch: composite
]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("xs,kw", POOL_CASES)
def test_max_pool2d_matches_pytorch(dt, xs, kw):
    x = np.random.default_rng(9).standard_normal(xs).astype(dt)
    oe, ot = _check(lambda a: F.max_pool2d(a, **kw), lambda a: TF.max_pool2d(a, **kw), [x], dt,
                    exact="stride" not in kw and "padding" not in kw)  # fmt: skip
    if oe.numel() and len(xs) == 4:  # (unbatched: eager's node is the squeeze's)
        assert type(oe.grad_fn).__name__ == ot.grad_fn.name()
        tiles = "stride" not in kw and "padding" not in kw and not kw.get("ceil_mode")
        assert _fused(oe) == tiles


@pytest.mark.parametrize("dt", DTYPES)
def test_max_pool2d_ties_signed_zeros_and_relu_zeros(dt):
    """PyTorch gives the gradient to the first maximum of a window in row-major order."""
    r = np.random.default_rng(10)
    x = np.maximum(r.standard_normal((3, 4, 8, 8)), 0).astype(dt)  # many all-zero windows
    x[0, 0, :2, :2] = [[1.0, 1.0], [1.0, 1.0]]
    x[0, 1, :2, :2] = [[-0.0, 0.0], [0.0, -0.0]]
    x[0, 2, :2, :2] = [[0.0, -0.0], [-0.0, 0.0]]
    x[0, 3, :2, :2] = [[-1.0, 2.0], [2.0, 2.0]]
    x[1, 0, :2, :2] = [[np.inf, np.inf], [1.0, np.inf]]
    x[1, 1, :2, :2] = [[-np.inf, -np.inf], [-np.inf, -np.inf]]
    oe, _ = _check(lambda a: F.max_pool2d(a, 2), lambda a: TF.max_pool2d(a, 2), [x], dt,
                   exact=True)  # fmt: skip
    assert oe.detach().numpy()[0, 1, 0, 0] == 0 and np.signbit(
        oe.detach().numpy()[0, 1, 0, 0]
    )  # first: -0.0


@pytest.mark.parametrize("dt", DTYPES)
def test_max_pool2d_nan_windows_match_pytorch(dt):
    r = np.random.default_rng(11)
    x = r.standard_normal((2, 3, 6, 6)).astype(dt)
    x[0, 0, 0, 1] = np.nan
    x[0, 1, 2, 2] = x[0, 1, 3, 3] = np.nan
    x[1, 2, 4:, 4:] = np.nan
    for kw in (dict(kernel_size=2), dict(kernel_size=3)):
        _check(lambda a: F.max_pool2d(a, **kw), lambda a: TF.max_pool2d(a, **kw), [x], dt,
               exact=True)  # fmt: skip


def test_max_pool2d_nonfinite_and_signed_zero_gradients_match_pytorch():
    x = np.random.default_rng(12).standard_normal((1, 2, 4, 4)).astype(np.float32)
    for gval in (np.inf, np.nan, -0.0):
        xe, xt = _pair(x)
        oe, ot = F.max_pool2d(xe, 2), TF.max_pool2d(xt, 2)
        g = np.ones(tuple(ot.shape), np.float32)
        g[0, 0, 0, 0] = gval
        oe.backward(eager.tensor(g))
        ot.backward(torch.tensor(g))
        ge, gt = xe.grad.numpy(), xt.grad.numpy()
        np.testing.assert_array_equal(ge, gt)
        np.testing.assert_array_equal(np.signbit(ge), np.signbit(gt))


def test_max_pool2d_non_contiguous_and_modified_output():
    r = np.random.default_rng(13)
    x = r.standard_normal((8, 6, 3, 2)).astype(np.float32)
    for lib, F_ in ((eager, F), (torch, TF)):
        t = lib.tensor(x, requires_grad=True)
        out = F_.max_pool2d(t.permute(3, 2, 1, 0), 2)  # (2, 3, 6, 8) non-contiguous
        out.mul_(3)  # the output modified in place: the gradient does not read it
        out.sum().backward()
        if lib is eager:
            ge = t.grad.numpy()
        else:
            np.testing.assert_array_equal(ge, t.grad.numpy())


def test_max_pool2d_double_backward_and_inplace_input_error():
    r = np.random.default_rng(14)
    x = r.standard_normal((2, 2, 4, 4))
    res = []
    for lib, F_ in ((eager, F), (torch, TF)):
        t = lib.tensor(x, requires_grad=True)
        out = F_.max_pool2d(t * t, 2)
        (g,) = lib.autograd.grad(out.sum(), t, create_graph=True)
        (gg,) = lib.autograd.grad((g * g).sum(), t)
        res.append(gg.detach().numpy())
    np.testing.assert_allclose(res[0], res[1], rtol=1e-12)
    t = eager.tensor(x, requires_grad=True)
    h = t * 1.0
    out = F.max_pool2d(h, 2)
    h.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_lenet_step_matches_pytorch():
    """W7's CNN (conv-relu-pool twice, linear, cross-entropy): loss and every gradient."""
    r = np.random.default_rng(15)
    x = r.random((8, 1, 28, 28), dtype=np.float32)
    y = r.integers(0, 10, size=8)
    ps = [r.standard_normal(s).astype(np.float32) * 0.2
          for s in ((16, 1, 3, 3), (16,), (32, 16, 3, 3), (32,), (10, 800), (10,))]  # fmt: skip
    out = []
    for lib, F_ in ((eager, F), (torch, TF)):
        w = [lib.tensor(p, requires_grad=True) for p in ps]
        h = F_.max_pool2d(F_.relu(F_.conv2d(lib.tensor(x), w[0], w[1])), 2)
        h = F_.max_pool2d(F_.relu(F_.conv2d(h, w[2], w[3])), 2)
        loss = F_.cross_entropy(F_.linear(h.flatten(1), w[4], w[5]), lib.tensor(y))
        loss.backward()
        out.append([loss.detach().numpy()] + [t.grad.numpy() for t in w])
    for a, b in zip(*out):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6)


def test_func_transforms_through_the_fused_nodes_match_torch_func():
    """eager.func.jvp (double backward), grad and jacrev through conv2d/relu/max_pool2d."""
    r = np.random.default_rng(16)
    x, v = r.standard_normal((2, 3, 6, 6)), r.standard_normal((2, 3, 6, 6))
    w, b = r.standard_normal((4, 3, 3, 3)), r.standard_normal(4)

    def net(lib, F_):
        return lambda t: F_.max_pool2d(F_.relu(F_.conv2d(t, lib.tensor(w), lib.tensor(b))), 2)

    fe, ft = net(eager, F), net(torch, TF)
    _, te = eager.func.jvp(fe, (eager.tensor(x),), (eager.tensor(v),))
    _, tt = torch.func.jvp(ft, (torch.tensor(x),), (torch.tensor(v),))
    np.testing.assert_allclose(te.numpy(), tt.numpy(), rtol=1e-12, atol=1e-12)
    je = eager.func.jacrev(fe)(eager.tensor(x))
    jt = torch.func.jacrev(ft)(torch.tensor(x))
    np.testing.assert_allclose(je.numpy(), jt.numpy(), rtol=1e-12, atol=1e-12)


def test_keep_cols_off_rebuilds_the_columns():
    import eager.nn._fused as FU

    r = np.random.default_rng(17)
    arrs = [r.standard_normal(s) for s in ((2, 16, 6, 6), (32, 16, 3, 3), (32,))]
    old = FU.KEEP_COLS
    try:
        FU.KEEP_COLS = False
        _check(F.conv2d, TF.conv2d, arrs, np.float64)
    finally:
        FU.KEEP_COLS = old
