"""Convolution and pooling in eager: gradients to second order (float64 gradcheck and
gradgradcheck), PyTorch's error messages, the layers, and (behind importorskip) every
function and option against real PyTorch, ties in max pooling included."""

from __future__ import annotations

import numpy as np
import pytest

import eager
import eager.nn.functional as F
from eager import nn
from eager.autograd import gradcheck, gradgradcheck


def _t(a, rg=True):
    return eager.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


def _r(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape)


CONV_CASES = [
    # (x shape, w shape, kwargs)
    ((2, 3, 6, 5), (4, 3, 3, 2), {}),
    ((1, 4, 7, 6), (6, 2, 3, 3), dict(stride=2, padding=1, groups=2)),
    ((2, 2, 7, 7), (3, 2, 2, 3), dict(stride=(2, 1), padding=(1, 2), dilation=(2, 1))),
    ((1, 2, 6, 6), (4, 2, 2, 3), dict(padding="same", dilation=(1, 2))),  # even kernel
    ((1, 3, 5, 5), (3, 1, 3, 3), dict(padding="same", groups=3)),  # depthwise
    ((3, 5, 5), (2, 3, 3, 3), dict(padding="valid")),  # unbatched
    ((0, 2, 4, 4), (3, 2, 2, 2), {}),  # empty batch
]


@pytest.mark.parametrize("xs, ws, kw", CONV_CASES)
def test_conv2d_gradcheck_and_gradgradcheck(xs, ws, kw):
    x, w, b = _t(_r(*xs, seed=1)), _t(_r(*ws, seed=2)), _t(_r(ws[0], seed=3))
    f = lambda x, w, b: F.conv2d(x, w, b, **kw)  # noqa: E731
    assert gradcheck(f, (x, w, b))
    assert gradgradcheck(f, (x, w, b))


@pytest.mark.parametrize(
    "xs, ws, kw",
    [
        ((1, 4, 3, 4), (4, 3, 3, 2), {}),
        ((2, 4, 3, 3), (4, 2, 3, 3), dict(stride=2, padding=1, output_padding=1, groups=2)),
        ((1, 2, 3, 3), (2, 3, 2, 2), dict(stride=(2, 3), dilation=(2, 1), output_padding=(1, 2))),
        ((2, 3, 3), (2, 2, 2, 2), {}),  # unbatched
    ],
)
def test_conv_transpose2d_gradcheck_and_gradgradcheck(xs, ws, kw):
    x, w, b = _t(_r(*xs, seed=1)), _t(_r(*ws, seed=2)), _t(_r(ws[1] * kw.get("groups", 1)))
    f = lambda x, w, b: F.conv_transpose2d(x, w, b, **kw)  # noqa: E731
    assert gradcheck(f, (x, w, b))
    assert gradgradcheck(f, (x, w, b))


def test_conv1d_and_transpose1d_gradients():
    x, w = _t(_r(2, 4, 9, seed=1)), _t(_r(6, 2, 3, seed=2))
    f = lambda x, w: F.conv1d(x, w, stride=2, padding=1, groups=2)  # noqa: E731
    assert gradcheck(f, (x, w)) and gradgradcheck(f, (x, w))
    g = lambda x, w: F.conv1d(x, w, padding="same", dilation=2)  # noqa: E731
    assert gradcheck(g, (x[0], _t(_r(3, 4, 2, seed=3))))
    wt = _t(_r(4, 3, 3, seed=4))
    h = lambda x, w: F.conv_transpose1d(x, w, stride=2, output_padding=1)  # noqa: E731
    assert gradcheck(h, (x, wt)) and gradgradcheck(h, (x, wt))


def _distinct(*shape, seed=0):
    """Values at least 1e-2 apart: finite differences never cross a max-pooling tie."""
    n = int(np.prod(shape))
    v = np.random.default_rng(seed).permutation(n) * 1e-2 - n * 5e-3
    return v.reshape(shape)


@pytest.mark.parametrize(
    "kw",
    [
        dict(kernel_size=2),
        dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
        dict(kernel_size=(2, 3), stride=1, dilation=(2, 1)),
    ],
)
def test_pools_gradcheck_and_gradgradcheck(kw):
    x = _t(_distinct(2, 2, 7, 6, seed=5))
    f = lambda x: F.max_pool2d(x, **kw)  # noqa: E731
    assert gradcheck(f, (x,)) and gradgradcheck(f, (x,))
    akw = {k: v for k, v in kw.items() if k != "dilation"}
    for extra in ({}, dict(count_include_pad=False), dict(divisor_override=3)):
        g = lambda x: F.avg_pool2d(x, **akw, **extra)  # noqa: E731
        assert gradcheck(g, (x,)) and gradgradcheck(g, (x,))
    h = lambda x: F.adaptive_avg_pool2d(x, (3, 4))  # noqa: E731
    assert gradcheck(h, (x,)) and gradgradcheck(h, (x,))
    assert gradcheck(lambda x: F.max_pool2d(x[0], **kw), (x,))  # unbatched


def test_max_pool2d_gradient_goes_to_one_element_per_window():
    """ReLU zeros tie: the first element of the window (row-major) takes the gradient."""
    x = eager.zeros(1, 1, 4, 4, requires_grad=True)
    F.max_pool2d(x, 2).sum().backward()
    want = np.zeros((4, 4))
    want[::2, ::2] = 1
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], want)
    x.grad = None
    F.max_pool2d(x, 2, stride=1).sum().backward()  # each window's top-left
    want = np.zeros((4, 4))
    want[:3, :3] = 1
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], want)
    # overlapping windows sharing one maximum accumulate into it
    y = eager.zeros(1, 1, 4, 4)
    y[0, 0, 1, 1] = 1.0
    y.requires_grad_(True)
    F.max_pool2d(y, 2, stride=1).sum().backward()
    assert y.grad.numpy()[0, 0, 1, 1] == 4 and y.grad.sum().item() == 9


def test_max_pool2d_nan_propagates_and_takes_the_gradient():
    a = np.zeros((1, 1, 2, 2))
    a[0, 0, 1, 0] = np.nan
    x = _t(a)
    y = F.max_pool2d(x, 2)
    assert np.isnan(y.item())
    y.sum().backward()
    assert x.grad.numpy()[0, 0, 1, 0] == 1 and x.grad.sum().item() == 1
    _, idx = F.max_pool2d(x, 2, return_indices=True)
    assert idx.dtype == eager.int64 and idx.item() == 2


def test_grad_fn_names():
    x, w = _t(_r(1, 1, 4, 4)), _t(_r(2, 1, 3, 3))
    y = F.conv2d(x, w)
    assert type(y.grad_fn).__name__ == "ConvolutionBackward0"
    assert type(F.max_pool2d(x, 2).grad_fn).__name__ == "MaxPool2DWithIndicesBackward0"
    (gx,) = eager.autograd.grad(y.sum(), x, create_graph=True)
    assert type(gx.grad_fn).__name__ == "ConvolutionBackwardBackward0"


@pytest.mark.parametrize(
    "fn, msg",
    [
        (lambda: F.conv2d(eager.zeros(1, 1, 28, 28), eager.zeros(16, 3, 3, 3)),
         "Given groups=1, weight of size [16, 3, 3, 3], expected input[1, 1, 28, 28] to have 3 "
         "channels, but got 1 channels instead"),
        (lambda: F.conv2d(eager.zeros(1, 3, 2, 2), eager.zeros(16, 3, 3, 3)),
         "Calculated padded input size per channel: (2 x 2). Kernel size: (3 x 3). Kernel size "
         "can't be greater than actual input size"),
        (lambda: F.conv2d(eager.zeros(3, 2, 2, 2, 2), eager.zeros(16, 3, 3, 3)),
         "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: "
         "[3, 2, 2, 2, 2]"),
        (lambda: F.conv2d(eager.zeros(1, 4, 5, 5), eager.zeros(3, 2, 3, 3), groups=2),
         "Given groups=2, expected weight to be divisible by 2 at dimension 0, but got weight "
         "of size [[3, 2, 3, 3]] instead"),
        (lambda: F.conv2d(eager.zeros(1, 4, 5, 5), eager.zeros(4, 4, 3, 3), eager.zeros(3)),
         "Given weight of size [4, 4, 3, 3], expected bias to be 1-dimensional with 4 elements, "
         "but got bias of size [3] instead"),
        (lambda: F.conv2d(eager.zeros(1, 4, 5, 5), eager.zeros(4, 4, 3, 3), stride=0),
         "non-positive stride is not supported"),
        (lambda: F.conv2d(eager.zeros(1, 4, 5, 5), eager.zeros(4, 4, 3, 3), padding=-1),
         "negative padding is not supported"),
        (lambda: F.conv2d(eager.zeros(1, 4, 5, 5), eager.zeros(4, 4, 3, 3), padding="same",
                          stride=2),
         "padding='same' is not supported for strided convolutions"),
        (lambda: F.conv2d(eager.zeros(1, 4, 5, 5), eager.zeros(4, 4, 3, 3), padding="foo"),
         "Invalid padding string: 'foo'"),
        (lambda: F.conv2d(eager.zeros(1, 4, 5, 5), eager.zeros(4, 4, 3, 3, dtype=eager.float64)),
         "expected scalar type Float but found Double"),
        (lambda: F.conv2d(eager.zeros(1, 4, 5, 5), eager.zeros(0, 4, 3, 3)),
         "Given groups=1, expected weight to be at least 1 at dimension 0, but got weight of "
         "size [0, 4, 3, 3] instead"),
        (lambda: F.conv2d(eager.zeros(1, 4, 5, 5), eager.zeros(4, 4, 3, 3), stride=(1, 1, 1)),
         "expected stride to be a single integer value or a list of 2 values to match the "
         "convolution dimensions, but got stride=[1, 1, 1]"),
        (lambda: F.max_pool2d(eager.zeros(1, 4, 5, 5), 3, padding=2),
         "pad should be at most half of effective kernel size, but got pad=2, kernel_size=3 and "
         "dilation=1"),
        (lambda: F.max_pool2d(eager.zeros(1, 4, 2, 2), 3),
         "Given input size: (4x2x2). Calculated output size: (4x0x0). Output size is too small"),
        (lambda: F.avg_pool2d(eager.zeros(1, 4, 2, 2), 3),
         "Given input size: (4x2x2). Calculated output size: (4x0x0). Output size is too small"),
        (lambda: F.conv_transpose2d(eager.zeros(1, 4, 5, 5), eager.zeros(4, 2, 3, 3),
                                    output_padding=1),
         "output padding must be smaller than either stride or dilation"),
        (lambda: F.conv_transpose2d(eager.zeros(1, 3, 5, 5), eager.zeros(4, 2, 3, 3)),
         "Given transposed=1, weight of size [4, 2, 3, 3], expected input[1, 3, 5, 5] to have 4 "
         "channels, but got 3 channels instead"),
        (lambda: F.adaptive_avg_pool2d(eager.zeros(1, 3, 0, 5), (1, 2)),
         "adaptive_avg_pool2d(): Expected input to have non-zero size for non-batch dimensions, "
         "but input has sizes [1, 3, 0, 5] with dimension 2 being empty"),
    ],
)
def test_errors_are_pytorchs(fn, msg):
    with pytest.raises(RuntimeError) as e:
        fn()
    assert msg in str(e.value)


def test_unsupported_arguments_are_refused_clearly():
    with pytest.raises(NotImplementedError, match="padding_mode"):
        nn.Conv2d(1, 2, 3, padding_mode="reflect")
    with pytest.raises(RuntimeError, match="not supported"):
        F.conv2d(eager.zeros(1, 1, 3, 3, dtype=eager.int64), eager.zeros(1, 1, 2, 2,
                                                                          dtype=eager.int64))


def test_layers_params_init_and_repr():
    eager.manual_seed(0)
    c = nn.Conv2d(1, 16, 3)
    assert repr(c) == "Conv2d(1, 16, kernel_size=(3, 3), stride=(1, 1))"
    assert [n for n, _ in c.named_parameters()] == ["weight", "bias"]
    assert tuple(c.weight.shape) == (16, 1, 3, 3) and tuple(c.bias.shape) == (16,)
    bound = 1 / 3
    assert c.weight.abs().max().item() <= bound and c.bias.abs().max().item() <= bound
    assert c(eager.zeros(2, 1, 8, 8)).shape == (2, 16, 6, 6)
    t = nn.ConvTranspose2d(4, 2, 3, stride=2, output_padding=1, groups=2)
    assert tuple(t.weight.shape) == (4, 1, 3, 3)
    assert repr(t) == (
        "ConvTranspose2d(4, 2, kernel_size=(3, 3), stride=(2, 2), output_padding=(1, 1), "
        "groups=2)"
    )
    assert t(eager.zeros(1, 4, 3, 3)).shape == (1, 2, 8, 8)
    assert repr(nn.MaxPool2d(2)) == (
        "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)"
    )
    assert repr(nn.AvgPool2d(2)) == "AvgPool2d(kernel_size=2, stride=2, padding=0)"
    assert repr(nn.AdaptiveAvgPool2d((5, 7))) == "AdaptiveAvgPool2d(output_size=(5, 7))"
    assert nn.Conv1d(2, 4, 3, padding="same")(eager.zeros(1, 2, 9)).shape == (1, 4, 9)


# ---------------------------------------------------------------------------
# against real PyTorch


def _vs_torch(fe, ft, arrays, seed=0, tol=1e-10):
    torch = pytest.importorskip("torch")
    te = [eager.tensor(a, requires_grad=True) for a in arrays]
    tt = [torch.tensor(a, requires_grad=True) for a in arrays]
    oe, ot = fe(*te), ft(*tt)
    oe = oe[0] if isinstance(oe, tuple) else oe
    ot = ot[0] if isinstance(ot, tuple) else ot
    np.testing.assert_allclose(oe.detach().numpy(), ot.detach().numpy(), atol=tol, rtol=tol)
    g = np.random.default_rng(seed).standard_normal(tuple(ot.shape))
    oe.backward(eager.tensor(g))
    ot.backward(torch.tensor(g))
    for a, b in zip(te, tt):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), atol=tol, rtol=tol)


@pytest.mark.parametrize("xs, ws, kw", CONV_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_conv2d_matches_torch(xs, ws, kw, bias):
    torch = pytest.importorskip("torch")
    arrays = [_r(*xs, seed=1), _r(*ws, seed=2)] + ([_r(ws[0], seed=3)] if bias else [])
    _vs_torch(lambda *a: F.conv2d(*a, **kw), lambda *a: torch.nn.functional.conv2d(*a, **kw),
              arrays)


@pytest.mark.parametrize(
    "xs, ws, kw",
    [
        ((2, 4, 3, 4), (4, 3, 3, 2), dict(stride=2, padding=1, output_padding=1)),
        ((1, 4, 5, 3), (4, 3, 2, 3), dict(stride=(2, 3), padding=(0, 1), groups=2,
                                          dilation=(1, 2), output_padding=(1, 2))),
        ((4, 3, 3), (4, 2, 3, 3), {}),
    ],
)
def test_conv_transpose2d_matches_torch(xs, ws, kw):
    torch = pytest.importorskip("torch")
    b = _r(ws[1] * kw.get("groups", 1), seed=4)
    _vs_torch(lambda *a: F.conv_transpose2d(*a, **kw),
              lambda *a: torch.nn.functional.conv_transpose2d(*a, **kw),
              [_r(*xs, seed=1), _r(*ws, seed=2), b])


@pytest.mark.parametrize("kw", [{}, dict(stride=2, padding=1, groups=2), dict(padding="same",
                                                                              dilation=2)])
def test_conv1d_matches_torch(kw):
    torch = pytest.importorskip("torch")
    x, w, b = _r(2, 4, 9, seed=1), _r(6, 4 // kw.get("groups", 1), 3, seed=2), _r(6, seed=3)
    _vs_torch(lambda *a: F.conv1d(*a, **kw), lambda *a: torch.nn.functional.conv1d(*a, **kw),
              [x, w, b])
    _vs_torch(lambda *a: F.conv1d(*a, **kw), lambda *a: torch.nn.functional.conv1d(*a, **kw),
              [x[0], w])
    _vs_torch(lambda *a: F.conv_transpose1d(*a, stride=2),
              lambda *a: torch.nn.functional.conv_transpose1d(*a, stride=2),
              [x, _r(4, 2, 3, seed=5), _r(2, seed=6)])


POOL_KW = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0), ceil_mode=True),
    dict(kernel_size=2, stride=3, ceil_mode=True),
]


@pytest.mark.parametrize("kw", POOL_KW + [dict(kernel_size=(3, 2), stride=1, dilation=(2, 1)),
                                          dict(kernel_size=3, padding=1, dilation=2,
                                               ceil_mode=True)])
@pytest.mark.parametrize("data", ["relu", "nan_inf"])
def test_max_pool2d_matches_torch_with_ties(kw, data):
    torch = pytest.importorskip("torch")
    x = np.maximum(_r(2, 3, 7, 8, seed=7), 0)  # many zero ties, as after a ReLU
    if data == "nan_inf":
        x[0, 0, 1, 1] = x[0, 0, 2, 3] = np.nan
        x[1, 1, :3, :3] = -np.inf
        x[1, 2] = -np.inf
    tx = torch.tensor(x)
    v, i = F.max_pool2d(eager.tensor(x), **kw, return_indices=True)
    tv, ti = torch.nn.functional.max_pool2d(tx, **kw, return_indices=True)
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    if data == "relu":
        _vs_torch(lambda a: F.max_pool2d(a, **kw), lambda a: torch.nn.functional.max_pool2d(
            a, **kw), [x], tol=0)
        _vs_torch(lambda a: F.max_pool1d(a, 3, 2, 1), lambda a: torch.nn.functional.max_pool1d(
            a, 3, 2, 1), [x[0]], tol=0)
    else:
        xe, xt = eager.tensor(x, requires_grad=True), tx.requires_grad_(True)
        F.max_pool2d(xe, **kw).sum().backward()
        torch.nn.functional.max_pool2d(xt, **kw).sum().backward()
        np.testing.assert_array_equal(xe.grad.numpy(), xt.grad.numpy())


@pytest.mark.parametrize("kw", POOL_KW)
@pytest.mark.parametrize("extra", [{}, dict(count_include_pad=False), dict(divisor_override=5)])
def test_avg_pool2d_matches_torch(kw, extra):
    torch = pytest.importorskip("torch")
    _vs_torch(lambda a: F.avg_pool2d(a, **kw, **extra),
              lambda a: torch.nn.functional.avg_pool2d(a, **kw, **extra), [_r(2, 3, 7, 8)])
    _vs_torch(lambda a: F.avg_pool2d(a, **kw, **extra),
              lambda a: torch.nn.functional.avg_pool2d(a, **kw, **extra), [_r(3, 7, 8)])


def test_avg_pool1d_matches_torch():
    torch = pytest.importorskip("torch")
    _vs_torch(lambda a: F.avg_pool1d(a, 3, 2, 1, ceil_mode=True, count_include_pad=False),
              lambda a: torch.nn.functional.avg_pool1d(a, 3, 2, 1, ceil_mode=True,
                                                       count_include_pad=False),
              [_r(2, 3, 8)])


@pytest.mark.parametrize("size", [1, (3, 4), (5, None), (7, 8), (10, 3), (4, 13)])
def test_adaptive_avg_pool2d_matches_torch(size):
    torch = pytest.importorskip("torch")
    _vs_torch(lambda a: F.adaptive_avg_pool2d(a, size),
              lambda a: torch.nn.functional.adaptive_avg_pool2d(a, size), [_r(2, 3, 7, 8)])
    _vs_torch(lambda a: F.adaptive_avg_pool1d(a, 3),
              lambda a: torch.nn.functional.adaptive_avg_pool1d(a, 3), [_r(2, 3, 7)])


def test_layer_init_matches_torch_bounds_and_reprs():
    torch = pytest.importorskip("torch")
    for name, args, kw in [
        ("Conv2d", (1, 16, 3), {}),
        ("Conv2d", (4, 8, (3, 2)), dict(stride=2, padding=1, dilation=2, groups=2, bias=False)),
        ("Conv1d", (2, 4, 3), dict(padding="same")),
        ("ConvTranspose2d", (4, 2, 3), dict(stride=2, output_padding=1, groups=2)),
        ("MaxPool2d", (2,), dict(stride=1, padding=1, ceil_mode=True)),
        ("AvgPool2d", (2,), dict(padding=1)),
        ("AdaptiveAvgPool2d", ((5, 7),), {}),
    ]:
        assert repr(getattr(nn, name)(*args, **kw)) == repr(getattr(torch.nn, name)(*args, **kw))


TILED_KW = [
    dict(kernel_size=2),  # the CNN's pooling
    dict(kernel_size=(3, 2)),  # a remainder row and column dropped
    dict(kernel_size=(2, 3), stride=(2, 3), ceil_mode=True),  # ceil adds a partial window
    dict(kernel_size=2, ceil_mode=True),
    dict(kernel_size=1),
]


@pytest.mark.parametrize("kw", TILED_KW)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("data", ["ties", "signed_zero", "nan_inf", "strided"])
def test_max_pool2d_tiling_windows_match_torch_bitwise(kw, dtype, data):
    """Windows that tile the input take eager's fast path (eager/ops/conv.py _tiled_max):
    values, indices and gradients equal PyTorch's bit for bit, the sign of zero included
    (the first of tied -0.0/0.0 wins; the gradient's zeros are +0.0 even for g = -0.0)."""
    torch = pytest.importorskip("torch")
    x = np.round(_r(2, 3, 7, 9, seed=11) * 2).astype(dtype)  # many ties
    g_of = lambda o: np.round(_r(*o.shape, seed=12) * 2).astype(dtype)  # noqa: E731
    if data == "signed_zero":
        x = np.where(np.random.default_rng(3).random(x.shape) < 0.5, -0.0, 0.0).astype(dtype)
        g_of = lambda o: -np.abs(np.round(_r(*o.shape, seed=12) * 2)).astype(dtype)  # noqa: E731
    if data == "nan_inf":
        x[0, 0, 1, 1] = x[0, 1, 4, 4] = np.nan
        x[1, 1, :3, :3] = -np.inf
        x[1, 2, 2, 2] = np.inf
        g_base = g_of
        g_of = lambda o: np.where(np.arange(o.size).reshape(o.shape) % 7 == 0, np.inf,  # noqa: E731
                                  g_base(o)).astype(dtype)
    if data == "strided":
        x = np.asfortranarray(x)[:, :, ::-1]
    v, i = F.max_pool2d(eager.tensor(x), **kw, return_indices=True)
    tv, ti = torch.nn.functional.max_pool2d(torch.tensor(x.copy()), **kw, return_indices=True)
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    np.testing.assert_array_equal(np.signbit(v.numpy()), np.signbit(tv.numpy()))
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    xe = eager.tensor(x, requires_grad=True)
    xt = torch.tensor(x.copy(), requires_grad=True)
    oe, ot = F.max_pool2d(xe, **kw), torch.nn.functional.max_pool2d(xt, **kw)
    g = g_of(ot.detach().numpy())
    oe.backward(eager.tensor(g))
    ot.backward(torch.tensor(g))
    np.testing.assert_array_equal(xe.grad.numpy(), xt.grad.numpy())
    np.testing.assert_array_equal(np.signbit(xe.grad.numpy()), np.signbit(xt.grad.numpy()))


WIDE_CONV_CASES = [
    # at least 32 output channels per group and 32 taps: the one-product-per-group path
    ((3, 4, 7, 6), (32, 4, 3, 3), {}),
    ((2, 8, 9, 8), (64, 4, 3, 3), dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)),
    ((2, 16, 5, 5), (32, 16, 2, 2), dict(padding="same")),
    ((0, 4, 6, 6), (32, 4, 3, 3), {}),  # empty batch
]


@pytest.mark.parametrize("xs, ws, kw", WIDE_CONV_CASES)
def test_wide_conv2d_matches_torch_with_gradients(xs, ws, kw):
    """Wide convolutions run their forward and both gradients as one BLAS product per group
    over the batch (eager/ops/conv.py _one_product); narrow ones, per batch item."""
    torch = pytest.importorskip("torch")
    _vs_torch(lambda *a: F.conv2d(*a, **kw), lambda *a: torch.nn.functional.conv2d(*a, **kw),
              [_r(*xs, seed=1), _r(*ws, seed=2), _r(ws[0], seed=3)])
    x32 = _r(*xs, seed=1).astype(np.float32)
    w32 = _r(*ws, seed=2).astype(np.float32)
    got = F.conv2d(eager.tensor(x32), eager.tensor(w32), **kw)
    want = torch.nn.functional.conv2d(torch.tensor(x32), torch.tensor(w32), **kw)
    assert got.dtype == eager.float32 and got.is_contiguous()
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_wide_conv2d_gradgradcheck():
    x = _t(_r(1, 4, 4, 4, seed=4))
    w = _t(_r(32, 4, 3, 3, seed=5))
    assert gradgradcheck(lambda a, b: F.conv2d(a, b, padding=1), (x, w))
