"""Adversarial regression tests for round 21's eager fused conv2d / max_pool2d: odd
shapes, padding/stride/dilation/groups, ceil_mode, non-contiguous input, NaN/-inf and
ties in the pool, and in-place modification between forward and backward (PyTorch's
version-counter errors), all against PyTorch."""

import itertools

import numpy as np
import pytest

import eager
import eager.nn.functional as EF


def _conv_pool(lib, F, x, w, b, kw, pool, mutate):
    X = lib.tensor(x, requires_grad=True)
    W = lib.tensor(w, requires_grad=True)
    B = None if b is None else lib.tensor(b, requires_grad=True)
    y = F.conv2d(X.transpose(2, 3) if mutate == "noncontig" else X, W, B, **kw)
    if pool:
        y = F.max_pool2d(y, **pool)
    if mutate == "out":
        y.mul_(2)
    try:
        if mutate == "weight":
            with lib.no_grad():
                W.add_(1)
        (y * y).sum().backward()
    except RuntimeError:
        return ("err",)
    return (
        "ok",
        y.detach().numpy(),
        X.grad.numpy(),
        W.grad.numpy(),
        None if B is None else B.grad.numpy(),
    )


POOLS = [
    None,
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=2, dilation=2, ceil_mode=True),
]


def _cases(n):
    rng = np.random.RandomState(0)
    grid = list(
        itertools.product(
            [1, 2],
            [2, 4],
            [5, 8],
            [4],
            [1, 3],
            [1, 2],
            [0, 1, (2, 0)],
            [1, 2],
            [1, 2],
            [True, False],
            range(len(POOLS)),
            [None, "out", "weight", "noncontig"],
        )
    )
    idx = rng.choice(len(grid), size=n, replace=False)
    return [grid[i] for i in sorted(idx)]


@pytest.mark.parametrize("case", _cases(60))
def test_fused_conv_pool_like_pytorch(case):
    torch = pytest.importorskip("torch")
    N, C, H, Co, k, s, p, d, g, bias, pi, mut = case
    rng = np.random.RandomState(N * 1000 + C * 100 + H * 10 + k)  # (str hashes vary)
    x = rng.randn(N, C, 7, H) if mut == "noncontig" else rng.randn(N, C, H, 7)
    w = rng.randn(Co, C // g, k, k)
    b = rng.randn(Co) if bias else None
    kw = dict(stride=s, padding=p, dilation=d, groups=g)
    try:
        t = _conv_pool(torch, torch.nn.functional, x, w, b, kw, POOLS[pi], mut)
    except RuntimeError:  # a shape PyTorch refuses: eager must refuse too
        with pytest.raises(RuntimeError):
            _conv_pool(eager, EF, x, w, b, kw, POOLS[pi], mut)
        return
    a = _conv_pool(eager, EF, x, w, b, kw, POOLS[pi], mut)
    assert a[0] == t[0]
    for u, v in zip(a[1:], t[1:]):
        if u is not None:
            assert u.shape == v.shape
            np.testing.assert_allclose(u, v, rtol=1e-10, atol=1e-10)


def _scenario(lib, name):
    F = lib.nn.functional
    rng = np.random.RandomState(0)
    X = lib.tensor(rng.randn(2, 4, 9, 9), requires_grad=True)
    W = lib.tensor(rng.randn(6, 4, 3, 3), requires_grad=True)
    B = lib.tensor(rng.randn(6), requires_grad=True)
    try:
        if name == "conv_input_mutated":
            h = X * 1
            y = F.conv2d(h, W, B, padding=1)
            h.add_(1)
        elif name == "pool_input_mutated":
            h = F.conv2d(X, W, B)
            y = F.max_pool2d(h, 2)
            h.mul_(-1)
        elif name == "pool_output_mutated":
            y = F.max_pool2d(F.conv2d(X, W, B), 3, stride=2, ceil_mode=True)
            y.mul_(3)
        elif name == "relu_inplace_then_pool":
            h = F.conv2d(X, W, B, stride=2, padding=2)
            F.relu(h, inplace=True)
            y = F.max_pool2d(h, 2, ceil_mode=True)
        elif name == "conv_output_view_zeroed":
            y = F.conv2d(X, W, B)
            y[:, 0].zero_()
        elif name == "pool_all_ties":
            y = F.max_pool2d(F.conv2d(X, W * 0, B), 2)
        elif name == "pool_nan":
            h = F.conv2d(X, W, B)
            y = F.max_pool2d(h.masked_fill(h > 2, float("nan")), 2, ceil_mode=True)
            y = lib.where(lib.isnan(y), lib.zeros_like(y), y)
        elif name == "pool_neg_inf":
            h = F.conv2d(X, W, B)
            y = F.max_pool2d(h.masked_fill(h < -1, float("-inf")), 3, stride=1, padding=1)
            y = y.clamp(min=-5)
        elif name == "bias_mutated":
            y = F.conv2d(X, W, B)
            with lib.no_grad():
                B.mul_(2)
        (y * y).sum().backward()
    except RuntimeError:
        return ("err",)
    return ("ok", y.detach().numpy(), X.grad.numpy(), W.grad.numpy(), B.grad.numpy())


@pytest.mark.parametrize(
    "name",
    [
        "conv_input_mutated",
        "pool_input_mutated",
        "pool_output_mutated",
        "relu_inplace_then_pool",
        "conv_output_view_zeroed",
        "pool_all_ties",
        "pool_nan",
        "pool_neg_inf",
        "bias_mutated",
    ],
)
def test_fused_conv_pool_inplace_like_pytorch(name):
    torch = pytest.importorskip("torch")
    a, t = _scenario(eager, name), _scenario(torch, name)
    assert a[0] == t[0]
    for u, v in zip(a[1:], t[1:]):
        np.testing.assert_allclose(u, v, rtol=1e-10, atol=1e-10, equal_nan=True)


def test_where_refuses_an_int64_condition_like_pytorch():
    c = eager.tensor([1, 0])
    with pytest.raises(RuntimeError, match="where expected condition to be a boolean tensor"):
        eager.where(c, eager.tensor([1.0, 2.0]), eager.tensor([3.0, 4.0]))


@pytest.mark.parametrize(
    "dtype, name", [("float32", "Float"), ("float64", "Double"), ("int32", "Int")]
)
def test_where_refuses_other_non_bool_conditions_naming_the_dtype(dtype, name):
    c = eager.tensor(np.array([1, 0], dtype=dtype))
    with pytest.raises(RuntimeError, match=f"but got a tensor with dtype {name}$"):
        eager.where(c, eager.tensor([1.0, 2.0]), eager.tensor([3.0, 4.0]))


def test_where_takes_a_uint8_condition_with_pytorchs_deprecation_warning():
    c = eager.tensor(np.array([1, 0], dtype=np.uint8))
    with pytest.warns(UserWarning, match="where received a uint8 condition tensor"):
        r = eager.where(c, eager.tensor([1.0, 2.0]), eager.tensor([3.0, 4.0]))
    np.testing.assert_array_equal(r.numpy(), [1.0, 4.0])
