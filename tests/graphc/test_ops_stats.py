"""Statistics, losses and normalization compiled: graphc.compile / graphc.grad == eager,
values and gradients; a BatchNorm training step compiled == eager incl. running stats."""

import copy

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import graphc

INF = float("inf")
RNG = np.random.default_rng(5)


def _close(a, b, rtol=1e-6, atol=1e-9):
    a = a.detach().numpy() if isinstance(a, eager.Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, eager.Tensor) else np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)


def _eager_grad(f, *args):
    xs = [eager.tensor(a, requires_grad=True) for a in args]
    f(*xs).backward()
    return [x.grad for x in xs]


FUNCS = {
    "softmax": lambda x: (x.softmax(1) * x).sum(),
    "log_softmax": lambda x: (x.log_softmax(0) ** 2).sum(),
    "logsumexp": lambda x: x.logsumexp(1).sum(),
    "logsumexp_keep": lambda x: (x.logsumexp((0, 1), keepdim=True) * x).sum(),
    "var": lambda x: x.var(1).sum(),
    "std": lambda x: x.std(0, correction=0).sum(),
    "var_mean": lambda x: sum(t.sum() for t in eager.var_mean(x, 1)),
    "norm": lambda x: x.norm(),
    "norm3": lambda x: x.norm(p=3, dim=1).sum(),
    "norm_inf": lambda x: x.norm(p=INF),
    "vector_norm": lambda x: eager.linalg.vector_norm(x, 1, dim=0).sum(),
    "layer_norm": lambda x: (F.layer_norm(x, (4,)) * x).sum(),
    "group_norm": lambda x: (F.group_norm(x.reshape(1, 3, 4), 3) ** 3).sum(),
    "aliases": lambda x: x.sum(axis=1, keepdims=True).amax(axis=0) + x.mean(axis=0).sum(),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(FUNCS))
def test_compiled_value_and_grad_equal_eager(name, dtype):
    f = FUNCS[name]
    a = RNG.normal(size=(3, 4)).astype(dtype)
    tol = 2e-5 if dtype == np.float32 else 1e-10
    _close(graphc.compile(f)(a), f(eager.tensor(a)), rtol=tol)
    _close(graphc.grad(f)(a), _eager_grad(f, a)[0], rtol=tol, atol=tol)


def test_softmax_infinities_compiled():
    a = np.array([[-INF, -INF], [1.0, INF], [0.0, 1.0], [-INF, 3.0]])
    for f in (lambda x: x.logsumexp(1), lambda x: x.softmax(1), lambda x: x.log_softmax(1)):
        with np.errstate(all="ignore"):
            _close(graphc.compile(f)(a), f(eager.tensor(a)))


def test_second_order_compiled():
    f = lambda x: x.logsumexp(1).sum()  # noqa: E731
    a = RNG.normal(size=(2, 3))
    hv = graphc.grad(lambda x: (graphc.grad(f)(x) * x).sum())(a)
    x = eager.tensor(a, requires_grad=True)
    (g,) = eager.autograd.grad(f(x), x, create_graph=True)
    (want,) = eager.autograd.grad((g * x).sum(), x)
    _close(hv, want)


LOSSES = {
    "ce": lambda x, t, w: F.cross_entropy(x, t),
    "ce_w_ign_ls": lambda x, t, w: F.cross_entropy(x, t, w, ignore_index=1, label_smoothing=0.1),
    "ce_none": lambda x, t, w: F.cross_entropy(x, t, reduction="none").sum(),
    "ce_probs": lambda x, t, w: F.cross_entropy(x, x.detach().softmax(1), w),
    "nll_sum": lambda x, t, w: F.nll_loss(x.log_softmax(1), t, w, reduction="sum"),
    "bce": lambda x, t, w: F.binary_cross_entropy(x.sigmoid(), (x.detach() > 0).double(), w),
    "bce_logits": lambda x, t, w: F.binary_cross_entropy_with_logits(
        x, (x.detach() > 0).double() * 0.7, pos_weight=w),
    "l1": lambda x, t, w: F.l1_loss(x, x.detach() * 0.5),
    "smooth_l1": lambda x, t, w: F.smooth_l1_loss(x, x.detach() * 0.1, beta=0.5),
    "huber": lambda x, t, w: F.huber_loss(x, x.detach() * -0.5, delta=0.8),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_losses_compiled_equal_eager(name):
    f = LOSSES[name]
    x = RNG.normal(size=(5, 4))
    t = RNG.integers(0, 4, size=5)
    t[2] = 1
    w = RNG.uniform(0.5, 2.0, size=4)
    te, we = eager.tensor(t), eager.tensor(w)
    _close(graphc.compile(f)(x, te, we), f(eager.tensor(x), te, we), rtol=1e-10)
    _close(graphc.grad(f)(x, te, we), _eager_grad(lambda x: f(x, te, we), x)[0], rtol=1e-9,
           atol=1e-12)


def test_cross_entropy_spatial_compiled():
    x = RNG.normal(size=(2, 3, 4, 2))
    t = eager.tensor(RNG.integers(0, 3, size=(2, 4, 2)))
    f = lambda x, t: F.cross_entropy(x, t, ignore_index=0)  # noqa: E731
    _close(graphc.compile(f)(x, t), f(eager.tensor(x), t), rtol=1e-10)


def test_out_of_range_target_raises_eager_and_compiled():
    x, t = eager.randn(3, 4), eager.tensor([0, 1, 7])
    with pytest.raises(IndexError, match="Target 7 is out of bounds."):
        F.cross_entropy(x, t)
    # compiled, the check runs in the kernel (a gather at the targets): never a silent 0
    with pytest.raises(IndexError, match="out of range"):
        graphc.compile(lambda x, t: F.cross_entropy(x, t, reduction="none"))(x, t)


class Net(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.bn = nn.BatchNorm1d(4, **kw)
        self.ln = nn.LayerNorm(4)

    def forward(self, x, t):
        return F.cross_entropy(self.ln(self.bn(self.fc(x))), t)


@pytest.mark.parametrize("kw", [{}, {"momentum": None}, {"affine": False}])
def test_batchnorm_training_step_compiled_equals_eager(kw):
    eager.manual_seed(0)
    a = Net(**kw)
    b = copy.deepcopy(a)
    cb = graphc.compile(b)
    oa = eager.optim.SGD(a.parameters(), lr=0.1)
    ob = eager.optim.SGD(b.parameters(), lr=0.1)
    x = eager.randn(6, 3)
    t = eager.tensor([0, 1, 2, 3, 0, 1])
    for _ in range(4):
        for fn, opt in ((a, oa), (cb, ob)):
            opt.zero_grad()
            loss = fn(x, t)
            loss.backward()
            opt.step()
        for (k, v), (k2, v2) in zip(a.state_dict().items(), b.state_dict().items()):
            assert k == k2
            _close(v2, v, rtol=1e-5, atol=1e-6)
    assert b.bn.num_batches_tracked.item() == 4
    a.eval()
    cb.eval()
    with eager.no_grad():
        _close(cb(x, t), a(x, t), rtol=1e-5)


ZEROS = np.array([[1.5, -2.0, 0.0, 3.0], [0.0, 2.0, 0.0, 1.0], [2.0, 3.0, -0.5, 1.25]])
SCANS = {
    "prod": lambda x: (x.prod(1) * 1.5).sum(),
    "prod_all": lambda x: x.prod(),
    "prod_keep": lambda x: (x.prod(0, keepdim=True) * x).sum(),
    "cumsum": lambda x: (x.cumsum(1) ** 2).sum(),
    "cumsum0": lambda x: (x.cumsum(0) * x).sum(),
    "cumprod": lambda x: (x.cumprod(1) * x).sum(),
    "cumprod_t": lambda x: x.t().cumprod(1).sum(),
    "cumsum_strided": lambda x: x[:, ::2].cumsum(1).sum(0).prod(),
}


@pytest.mark.parametrize("zeros", [False, True])
@pytest.mark.parametrize("opt", [0, 2])
@pytest.mark.parametrize("name", sorted(SCANS))
def test_prod_and_scans_compiled_equal_eager(name, opt, zeros):
    f = SCANS[name]
    a = ZEROS if zeros else RNG.uniform(0.5, 1.5, size=(3, 4))
    _close(graphc.compile(f, opt_level=opt)(a), f(eager.tensor(a)), rtol=1e-12)
    _close(graphc.grad(f)(a), _eager_grad(f, a)[0], rtol=1e-12, atol=1e-14)
    # second order, exact with zeros too
    hv = graphc.grad(lambda x: (graphc.grad(f)(x) * x).sum())(a)
    x = eager.tensor(a, requires_grad=True)
    (g,) = eager.autograd.grad(f(x), x, create_graph=True)
    (want,) = eager.autograd.grad((g * x).sum(), x)
    _close(hv, want, rtol=1e-10, atol=1e-13)


ZEROS5 = np.array([[1.5, -2.0, 0.0, 3.0, 0.5],  # one zero
                   [0.0, 2.0, 0.0, 1.0, -1.0],  # two zeros
                   [2.0, 3.0, -0.5, 1.25, 4.0],  # none
                   [0.0, 1.0, 2.0, 3.0, 4.0]])  # a leading zero
HIGHER = {
    "prod1": lambda x: x.prod(1),
    "prod0": lambda x: x.prod(0, keepdim=True),
    "prod_all": lambda x: x[1:3].prod(),
    "prod_3d": lambda x: x.reshape(2, 2, 5)._op("prod", "ProdBackward1", axis=(0, 2),
                                                 keepdim=False),
    "cumprod1": lambda x: x.cumprod(1),
    "cumprod0": lambda x: x.cumprod(0),
    "cumprod_t": lambda x: x.t().cumprod(-1),
}


def _hvp(grad, f, u):
    """x -> d/dx (u . df/dx), with ``grad`` graphc.grad or an eager equivalent."""
    return lambda x: grad(lambda y: (grad(f)(y) * u).sum())(x)


@pytest.mark.parametrize("name", sorted(HIGHER))
def test_third_order_compiled_with_zeros(name):
    """grad of grad of grad compiled == eager, and == central differences of the (exact)
    compiled second order: prod and cumprod are polynomials, exact with any zeros."""
    f0 = HIGHER[name]
    c = RNG.normal(size=tuple(f0(eager.tensor(ZEROS5)).shape))
    f = lambda x: (f0(x) * c).sum()  # noqa: E731
    u, v, w = (RNG.normal(size=ZEROS5.shape) for _ in range(3))
    second = graphc.compile(lambda x: (_hvp(graphc.grad, f, u)(x) * v).sum())
    third = graphc.grad(lambda x: (_hvp(graphc.grad, f, u)(x) * v).sum())
    got = float((np.asarray(third(ZEROS5)) * w).sum())
    h = 1e-5
    want = (float(second(ZEROS5 + h * w)) - float(second(ZEROS5 - h * w))) / (2 * h)
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-8)
    x = eager.tensor(ZEROS5, requires_grad=True)
    (g1,) = eager.autograd.grad(f(x), x, create_graph=True)
    (g2,) = eager.autograd.grad((g1 * eager.tensor(u)).sum(), x, create_graph=True)
    (g3,) = eager.autograd.grad((g2 * eager.tensor(v)).sum(), x)
    _close(third(ZEROS5), g3, rtol=1e-10, atol=1e-12)


def test_third_order_compiled_where_three_zeros_meet():
    a = np.array([0.0, 0.0, 0.0, 2.0])
    w = RNG.normal(size=4)
    c = RNG.normal(size=4)
    for f, want in ((lambda x: x.prod(), 12 * w[0] * w[1] * w[2]),
                    (lambda x: (x.cumprod(0) * c).sum(), 6 * w[0] * w[1] * w[2] * (c[2] + 2 * c[3]))):
        t3 = graphc.grad(lambda x: (_hvp(graphc.grad, f, w)(x) * w).sum())(a)
        np.testing.assert_allclose(float((np.asarray(t3) * w).sum()), want, rtol=1e-12)


def test_scans_native_bit_exact_and_int():
    a = RNG.normal(size=(5, 7)).astype(np.float32)
    for f in (lambda x: x.cumsum(1), lambda x: x.cumprod(0), lambda x: x.t().cumsum(1)):
        np.testing.assert_array_equal(np.asarray(graphc.compile(f)(a)), f(eager.tensor(a)).numpy())
    i = np.arange(12, dtype=np.int64).reshape(3, 4) - 5
    for f in (lambda x: x.cumsum(0), lambda x: x.cumprod(1), lambda x: x.prod(1)):
        np.testing.assert_array_equal(np.asarray(graphc.compile(f)(i)), f(eager.tensor(i)).numpy())
    b = np.array([[True, False], [True, True]])
    f = lambda x: x.cumsum(1)  # noqa: E731
    np.testing.assert_array_equal(np.asarray(graphc.compile(f)(b)), f(eager.tensor(b)).numpy())
