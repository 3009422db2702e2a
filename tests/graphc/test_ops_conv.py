"""Convolution and pooling compiled: native (and interpreter) == eager, values and
gradients, a LeNet-like network end to end, odd input layouts, second order."""

from __future__ import annotations

import numpy as np
import pytest

import eager
import eager.nn.functional as F
import graphc
from eager import nn


def _r(*shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


def _lenet(x, w1, b1, w2, b2, w3, b3):
    h = F.max_pool2d(F.conv2d(x, w1, b1, padding=2).relu(), 2)
    h = F.max_pool2d(F.conv2d(h, w2, b2).relu(), 2)
    h = h.reshape(h.shape[0], -1)
    return F.linear(h, w3, b3)


def _lenet_args(n=4, dtype=np.float32, seed=0):
    return [
        _r(n, 1, 28, 28, seed=seed, dtype=dtype),
        _r(6, 1, 5, 5, seed=seed + 1, dtype=dtype) * 0.4,
        _r(6, seed=seed + 2, dtype=dtype) * 0.1,
        _r(16, 6, 5, 5, seed=seed + 3, dtype=dtype) * 0.2,
        _r(16, seed=seed + 4, dtype=dtype) * 0.1,
        _r(10, 400, seed=seed + 5, dtype=dtype) * 0.05,
        _r(10, seed=seed + 6, dtype=dtype) * 0.1,
    ]


def _eager_value_and_grads(f, args):
    ts = [eager.tensor(a, requires_grad=True) for a in args]
    out = f(*ts)
    out.backward()
    return out.detach().numpy(), [t.grad.numpy() for t in ts]


def _tol(dtype):
    return dict(rtol=2e-4, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("backend", ["native", "interpreter"])
def test_lenet_compiled_matches_eager(dtype, backend):
    args = _lenet_args(dtype=dtype)
    kw = {} if backend == "native" else {"backend": "interpreter"}
    got = graphc.compile(_lenet, **kw)(*args)
    want = _lenet(*[eager.tensor(a) for a in args]).numpy()
    np.testing.assert_allclose(got, want, **_tol(dtype))

    def loss(*a):
        return (_lenet(*a) ** 2).mean()

    v, gs = graphc.compile(graphc.value_and_grad(loss, argnums=tuple(range(7))), **kw)(*args)
    ev, egs = _eager_value_and_grads(loss, args)
    np.testing.assert_allclose(v, ev, **_tol(dtype))
    for g, eg in zip(gs, egs):
        np.testing.assert_allclose(g, eg, **_tol(dtype))


class _Flatten(nn.Module):
    def forward(self, x):
        return x.reshape(x.shape[0], -1)


def test_lenet_module_compiled_matches_eager():
    eager.manual_seed(3)
    net = nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        _Flatten(), nn.Linear(400, 10),
    )
    x = eager.tensor(_r(8, 1, 28, 28, dtype=np.float32))
    cnet = graphc.compile(net)
    got, want = cnet(x), net(x)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=2e-4,
                               atol=2e-5)
    (want**2).sum().backward()  # eager autograd through the compiled module reaches the
    eg = [p.grad.numpy().copy() for p in net.parameters()]  # same parameters
    net.zero_grad()
    (got**2).sum().backward()
    for p, g in zip(net.parameters(), eg):
        np.testing.assert_allclose(p.grad.numpy(), g, rtol=2e-3, atol=2e-5)


def _layouts(a: np.ndarray) -> list:
    """The same values as C-order, Fortran-order, transposed-view, strided and reversed."""
    big = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
    big[..., ::2] = a
    rev = np.ascontiguousarray(a[..., ::-1])[..., ::-1]
    tr = np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
    return [a, np.asfortranarray(a), tr, big[..., ::2], rev]


FUNCS = {
    "conv2d": (lambda x, w: F.conv2d(x, w, stride=(2, 1), padding=(1, 2), dilation=(1, 2),
                                     groups=2), [(2, 4, 7, 8), (6, 2, 3, 2)]),
    "conv2d_same": (lambda x, w: F.conv2d(x, w, padding="same"), [(1, 2, 6, 5), (3, 2, 2, 3)]),
    "conv2d_unbatched": (lambda x, w: F.conv2d(x, w, padding=1), [(2, 5, 6), (3, 2, 3, 3)]),
    "conv1d": (lambda x, w: F.conv1d(x, w, stride=2, padding=1), [(2, 3, 9), (4, 3, 3)]),
    "conv_transpose2d": (lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1,
                                                         output_padding=1, groups=2),
                         [(2, 4, 3, 4), (4, 3, 3, 3)]),
    "max_pool2d": (lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), [(2, 3, 7, 8)]),
    "max_pool2d_relu_ties": (lambda x: F.max_pool2d(x.relu(), 2), [(2, 3, 6, 8)]),
    "max_pool2d_dilated": (lambda x: F.max_pool2d(x, (2, 3), 1, dilation=(2, 1)),
                           [(1, 2, 7, 8)]),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                   [(2, 3, 7, 8)]),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, (3, 5)), [(2, 3, 7, 8)]),
}


@pytest.mark.parametrize("name", sorted(FUNCS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_functions_compiled_match_eager_in_every_layout(name, dtype):
    f, shapes = FUNCS[name]
    args = [_r(*s, seed=i, dtype=dtype) for i, s in enumerate(shapes)]

    def loss(*a):
        return (f(*a) * f(*a).detach().sin()).sum()

    want = f(*[eager.tensor(a) for a in args]).numpy()
    ev, egs = _eager_value_and_grads(loss, args)
    cf = graphc.compile(f)
    cg = graphc.compile(graphc.value_and_grad(loss, argnums=tuple(range(len(args)))))
    for k in range(5):
        laid = [_layouts(a)[k] for a in args]
        np.testing.assert_allclose(cf(*laid), want, **_tol(dtype))
        v, gs = cg(*laid)
        np.testing.assert_allclose(v, ev, **_tol(dtype))
        for g, eg in zip(gs, egs):
            np.testing.assert_allclose(g, eg, **_tol(dtype))


@pytest.mark.parametrize("name", ["conv2d", "conv_transpose2d", "max_pool2d", "avg_pool2d"])
def test_second_order_compiled_matches_eager(name):
    """grad of (sum of squared gradients): the adjoint ops differentiated once more."""
    f, shapes = FUNCS[name]
    args = [_r(*s, seed=i) for i, s in enumerate(shapes)]
    nums = tuple(range(len(args)))

    def loss(*a):
        return (f(*a) ** 2).sum()

    def gnorm(*a):
        gs = graphc.grad(loss, argnums=nums)(*a)
        return sum((g**2).sum() for g in gs)

    got = graphc.compile(graphc.grad(gnorm, argnums=nums))(*args)
    ts = [eager.tensor(a, requires_grad=True) for a in args]
    gs = eager.autograd.grad(loss(*ts), ts, create_graph=True)
    sum((g**2).sum() for g in gs).backward()
    for g, t in zip(got, ts):
        np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-9, atol=1e-10)


def test_conv2d_without_blas_path_matches(monkeypatch):
    """The plain-loop kernels (no BLAS, or malloc failed) give the same numbers."""
    import graphc.backend.lowering.conv as LC

    monkeypatch.setattr(LC._Conv, "blas_ok", lambda self: False)
    f, shapes = FUNCS["conv2d"]
    args = [_r(*s, seed=i) for i, s in enumerate(shapes)]

    def loss(x, w):
        return (f(x, w) ** 2).sum()

    v, gs = graphc.compile(graphc.value_and_grad(loss, argnums=(0, 1)), disk_cache=False)(*args)
    ev, egs = _eager_value_and_grads(loss, args)
    np.testing.assert_allclose(v, ev, rtol=1e-12)
    for g, eg in zip(gs, egs):
        np.testing.assert_allclose(g, eg, rtol=1e-10, atol=1e-12)
