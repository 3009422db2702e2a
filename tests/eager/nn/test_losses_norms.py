"""Losses and normalization layers: eager against real PyTorch (values and gradients),
every option combination; errors and reprs; state_dict keys."""

import itertools
import warnings

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

RNG = np.random.default_rng(7)


def _pair(a, requires_grad=True):
    """The same float64 data as an eager and a torch tensor."""
    a = np.asarray(a)
    return (eager.tensor(a, requires_grad=requires_grad),
            torch.tensor(a, requires_grad=requires_grad))


def _close(e, t, rtol=1e-7, atol=1e-9):
    np.testing.assert_allclose(np.asarray(e.detach().numpy()), t.detach().numpy(), rtol=rtol,
                               atol=atol, equal_nan=True)


def _check(fe, ft, arrays, grad_of=None, rtol=1e-7, atol=1e-9):
    """fe(eager tensors) == ft(torch tensors) and their gradients (of the float inputs)."""
    grad_of = range(len(arrays)) if grad_of is None else grad_of
    es, ts = [], []
    for i, a in enumerate(arrays):
        e, t = _pair(a, requires_grad=i in grad_of and np.asarray(a).dtype.kind == "f")
        es.append(e)
        ts.append(t)
    oe, ot = fe(*es), ft(*ts)
    _close(oe, ot, rtol, atol)
    ge = np.asarray(RNG.uniform(0.5, 1.5, size=tuple(ot.shape)))
    oe.backward(eager.tensor(ge))
    ot.backward(torch.tensor(ge))
    for e, t in zip(es, ts):
        if t.requires_grad:
            assert e.grad is not None
            _close(e.grad, t.grad, rtol, atol)


# --- cross_entropy / nll_loss -------------------------------------------------------

SHAPES = [(5, 4), (4,), (2, 3, 4), (2, 3, 2, 2)]


def _targets(shape, ignore):
    c = shape[0] if len(shape) == 1 else shape[1]
    tshape = () if len(shape) == 1 else shape[:1] + shape[2:]
    t = RNG.integers(0, c, size=tshape)
    if ignore is not None and t.size > 1:
        t.flat[1] = ignore
    return t, c


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 1, -100])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_class_indices(shape, reduction, weighted, ignore, smoothing):
    x = RNG.normal(size=shape)
    t, c = _targets(shape, ignore)
    w = RNG.uniform(0.2, 2.0, size=c) if weighted else None
    kw = dict(reduction=reduction, label_smoothing=smoothing)
    if ignore is not None:
        kw["ignore_index"] = ignore
    arrays = [x, t] + ([w] if weighted else [])
    _check(lambda x, t, *w: F.cross_entropy(x, t, *w, **kw),
           lambda x, t, *w: TF.cross_entropy(x, t, *w, **kw), arrays, grad_of=(0,))
    if smoothing == 0.0:  # nll_loss of the same log-probabilities
        _check(lambda x, t, *w: F.nll_loss(x.log_softmax(-1 if x.ndim == 1 else 1), t, *w,
                                           **{k: v for k, v in kw.items() if k != "label_smoothing"}),
               lambda x, t, *w: TF.nll_loss(x.log_softmax(-1 if x.ndim == 1 else 1), t, *w,
                                            **{k: v for k, v in kw.items() if k != "label_smoothing"}),
               arrays, grad_of=(0,))


@pytest.mark.parametrize("shape", [(5, 4), (4,), (2, 3, 4)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_cross_entropy_probabilities(shape, reduction, weighted, smoothing):
    x = RNG.normal(size=shape)
    cdim = 0 if len(shape) == 1 else 1
    p = RNG.uniform(size=shape)
    p = p / p.sum(axis=cdim, keepdims=True)
    w = RNG.uniform(0.2, 2.0, size=shape[cdim]) if weighted else None
    kw = dict(reduction=reduction, label_smoothing=smoothing)
    arrays = [x, p] + ([w] if weighted else [])
    _check(lambda x, t, *w: F.cross_entropy(x, t, *w, **kw),
           lambda x, t, *w: TF.cross_entropy(x, t, *w, **kw), arrays, grad_of=(0, 1))


def test_all_ignored_mean_is_nan_like_pytorch():
    x = RNG.normal(size=(3, 4))
    t = np.full(3, -100)
    got = F.nll_loss(eager.tensor(x), eager.tensor(t))
    want = TF.nll_loss(torch.tensor(x), torch.tensor(t))
    assert np.isnan(got.item()) and np.isnan(want.item())


@pytest.mark.parametrize("call, exc, msg", [
    (lambda: F.cross_entropy(eager.ones(3, 4), eager.tensor([0, 1, 5])), IndexError,
     "Target 5 is out of bounds."),
    (lambda: F.nll_loss(eager.ones(3, 4), eager.tensor([0, 1, -1])), IndexError,
     "Target -1 is out of bounds."),
    (lambda: F.cross_entropy(eager.ones(3, 4), eager.tensor([0.0, 1, 1])), RuntimeError,
     "expected target dtype to be Long or Byte, but got Float"),
    (lambda: F.nll_loss(eager.ones(3, 4), eager.tensor([0, 1, 2], dtype=eager.int32)),
     RuntimeError, "expected target dtype to be Long or Byte, but got Int"),
    (lambda: F.nll_loss(eager.ones(3, 4), eager.tensor([0, 1])), ValueError,
     "Expected input batch_size (3) to match target batch_size (2)."),
    (lambda: F.nll_loss(eager.ones(2, 4, 5), eager.zeros(2, 4, dtype=eager.int64)),
     RuntimeError, "Expected target size [2, 5], got [2, 4]"),
    (lambda: F.nll_loss(eager.ones(3, 4), eager.tensor([0, 1, 2]), weight=eager.ones(3)),
     RuntimeError, "weight tensor should be defined either for all 4 classes or no classes"),
    (lambda: F.cross_entropy(eager.ones(3, 4), eager.ones(3, 4), ignore_index=1), RuntimeError,
     "ignore_index is not supported for floating point target"),
    (lambda: F.cross_entropy(eager.ones(3, 4), eager.tensor([0, 1, 2]), label_smoothing=1.5),
     RuntimeError, "label_smoothing must be between 0.0 and 1.0. Got: 1.5"),
    (lambda: F.binary_cross_entropy(eager.tensor([0.5, 1.5]), eager.tensor([0.0, 1.0])),
     RuntimeError, "all elements of input should be between 0 and 1"),
    (lambda: F.binary_cross_entropy(eager.tensor([0.5, 0.5]), eager.tensor([[0.0, 1.0]])),
     ValueError, "is deprecated. Please ensure they have the same size."),
    (lambda: F.smooth_l1_loss(eager.ones(2), eager.ones(2), beta=-1), RuntimeError,
     "smooth_l1_loss does not support negative values for beta."),
    (lambda: F.huber_loss(eager.ones(2), eager.ones(2), delta=-1), RuntimeError,
     "huber_loss does not support non-positive values for delta."),
    (lambda: F.layer_norm(eager.ones(3, 4), (5,)), RuntimeError,
     "Given normalized_shape=[5], expected input with shape [*, 5], but got input of size[3, 4]"),
    (lambda: F.group_norm(eager.ones(2, 6, 3), 4), RuntimeError,
     "Expected number of channels in input to be divisible by num_groups, but got input of "
     "shape [2, 6, 3] and num_groups=4"),
    (lambda: F.batch_norm(eager.ones(1, 3), eager.zeros(3), eager.ones(3), training=True),
     ValueError, "Expected more than 1 value per channel when training"),
    (lambda: F.mse_loss(eager.ones(2), eager.ones(2), reduction="avg"), ValueError,
     "avg is not a valid value for reduction"),
])
def test_errors_as_pytorch(call, exc, msg):
    with pytest.raises(exc) as info:
        call()
    assert msg in str(info.value)


# --- the other losses ----------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(reduction, weighted):
    x = RNG.uniform(0.05, 0.95, size=(4, 3))
    t = RNG.uniform(size=(4, 3))
    arrays = [x, t] + ([RNG.uniform(0.5, 2, size=(3,))] if weighted else [])
    _check(lambda x, t, *w: F.binary_cross_entropy(x, t, *w, reduction=reduction),
           lambda x, t, *w: TF.binary_cross_entropy(x, t, *w, reduction=reduction), arrays,
           grad_of=(0, 1))


def test_binary_cross_entropy_clamps_the_log_at_minus_100():
    x, t = np.array([0.0, 1.0, 0.0, 1.0]), np.array([1.0, 0.0, 0.0, 1.0])
    got = F.binary_cross_entropy(eager.tensor(x), eager.tensor(t), reduction="none")
    want = TF.binary_cross_entropy(torch.tensor(x), torch.tensor(t), reduction="none")
    _close(got, want)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("pos", [False, True])
def test_binary_cross_entropy_with_logits(reduction, weighted, pos):
    x = RNG.normal(scale=3, size=(4, 3))
    x[0, 0], x[0, 1], x[1, 0] = 40.0, -40.0, 0.0
    t = RNG.uniform(size=(4, 3))
    t[0, 0] = 1.0
    w = RNG.uniform(0.5, 2, size=(3,))
    pw = RNG.uniform(0.5, 2, size=(3,))

    def run(F_, x, t, w, pw):
        return F_(x, t, w if weighted else None, reduction=reduction,
                  pos_weight=pw if pos else None)

    _check(lambda x, t, w, pw: run(F.binary_cross_entropy_with_logits, x, t, w, pw),
           lambda x, t, w, pw: run(TF.binary_cross_entropy_with_logits, x, t, w, pw),
           [x, t, w, pw], grad_of=(0, 1), rtol=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name, kw", [("l1_loss", {}), ("smooth_l1_loss", {"beta": 0.5}),
                                      ("smooth_l1_loss", {}), ("smooth_l1_loss", {"beta": 0.0}),
                                      ("huber_loss", {"delta": 0.7}), ("huber_loss", {}),
                                      ("mse_loss", {})])
def test_regression_losses(name, kw, reduction):
    x = RNG.normal(size=(3, 4))
    t = x + RNG.normal(scale=1.5, size=(3, 4))
    _check(lambda x, t: getattr(F, name)(x, t, reduction=reduction, **kw),
           lambda x, t: getattr(TF, name)(x, t, reduction=reduction, **kw), [x, t])


@pytest.mark.parametrize("size_average, reduce", list(itertools.product([None, True, False],
                                                                         [None, True, False])))
def test_legacy_flags(size_average, reduce):
    x = RNG.normal(size=(3, 4))
    t = RNG.integers(0, 4, size=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in ("cross_entropy", "nll_loss"):
            _check(lambda x, t: getattr(F, name)(x, t, size_average=size_average, reduce=reduce),
                   lambda x, t: getattr(TF, name)(x, t, size_average=size_average, reduce=reduce),
                   [x, t], grad_of=(0,))
        y = RNG.uniform(0.1, 0.9, size=(3, 4))
        for cls in ("L1Loss", "SmoothL1Loss", "BCELoss", "BCEWithLogitsLoss", "MSELoss"):
            _check(lambda x, t: getattr(nn, cls)(size_average=size_average, reduce=reduce)(x, t),
                   lambda x, t: getattr(torch.nn, cls)(size_average=size_average,
                                                       reduce=reduce)(x, t), [y, y * 0.5])


@pytest.mark.parametrize("cls, kw", [
    ("CrossEntropyLoss", {}), ("CrossEntropyLoss", {"label_smoothing": 0.1, "ignore_index": 2}),
    ("CrossEntropyLoss", {"reduction": "none"}), ("NLLLoss", {"reduction": "sum"}),
    ("CrossEntropyLoss", {"weight": "w"}), ("NLLLoss", {"weight": "w", "ignore_index": 0}),
])
def test_class_losses_as_modules(cls, kw):
    x = RNG.normal(size=(6, 4))
    t = RNG.integers(0, 4, size=6)
    w = RNG.uniform(0.5, 2, size=4)
    ke = {k: (eager.tensor(w) if v == "w" else v) for k, v in kw.items()}
    kt = {k: (torch.tensor(w) if v == "w" else v) for k, v in kw.items()}
    me, mt = getattr(nn, cls)(**ke), getattr(torch.nn, cls)(**kt)
    assert repr(me) == repr(mt)
    assert list(me.state_dict()) == list(mt.state_dict())
    _check(lambda x, t: me(x.log_softmax(1) if cls == "NLLLoss" else x, t),
           lambda x, t: mt(x.log_softmax(1) if cls == "NLLLoss" else x, t), [x, t], grad_of=(0,))


def test_loss_reprs_and_state_dicts():
    for cls, kw in [("L1Loss", {}), ("SmoothL1Loss", {"beta": 0.5}), ("HuberLoss", {}),
                    ("BCELoss", {}), ("BCEWithLogitsLoss", {"pos_weight": np.ones(3)}),
                    ("BCEWithLogitsLoss", {"weight": np.ones(3)})]:
        me = getattr(nn, cls)(**{k: eager.tensor(v) if isinstance(v, np.ndarray) else v
                                 for k, v in kw.items()})
        mt = getattr(torch.nn, cls)(**{k: torch.tensor(v) if isinstance(v, np.ndarray) else v
                                       for k, v in kw.items()})
        assert repr(me) == repr(mt)
        assert list(me.state_dict()) == list(mt.state_dict())


# --- softmax functional forms and layers -------------------------------------------------

@pytest.mark.parametrize("ndim", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "softmin"])
def test_softmax_implicit_dim_warns_as_pytorch(name, ndim):
    x = RNG.normal(size=(2, 3, 4, 5)[:ndim])
    with pytest.warns(UserWarning, match=f"Implicit dimension choice for {name}"):
        got = getattr(F, name)(eager.tensor(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = getattr(TF, name)(torch.tensor(x))
    _close(got, want)


@pytest.mark.parametrize("cls", ["Softmax", "LogSoftmax", "Softmin"])
def test_softmax_layers(cls):
    x = RNG.normal(size=(3, 4))
    me, mt = getattr(nn, cls)(dim=1), getattr(torch.nn, cls)(dim=1)
    assert repr(me) == repr(mt)
    _check(me, mt, [x])
    assert repr(getattr(nn, cls)()) == repr(getattr(torch.nn, cls)())


def test_softmax_dtype_argument():
    x = RNG.normal(size=(3, 4)).astype(np.float32)
    got = F.softmax(eager.tensor(x), 1, dtype=eager.float64)
    want = TF.softmax(torch.tensor(x), 1, dtype=torch.float64)
    assert got.dtype == eager.float64
    _close(got, want)


# --- normalization ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape, ns", [((3, 4), (4,)), ((2, 3, 4), (3, 4)), ((2, 5), 5)])
@pytest.mark.parametrize("affine", [0, 1, 2])  # none, weight only, weight and bias
def test_layer_norm(shape, ns, affine):
    x = RNG.normal(size=shape)
    nshape = (ns,) if isinstance(ns, int) else ns
    w, b = RNG.normal(size=nshape), RNG.normal(size=nshape)
    extra = [w, b][:affine]
    _check(lambda x, *wb: F.layer_norm(x, ns, *wb, eps=1e-3),
           lambda x, *wb: TF.layer_norm(x, nshape, *wb, eps=1e-3), [x] + extra)


@pytest.mark.parametrize("shape, groups", [((2, 6, 3), 3), ((2, 4, 2, 3), 2), ((3, 4), 4),
                                           ((2, 4, 5), 1)])
@pytest.mark.parametrize("affine", [False, True])
def test_group_norm(shape, groups, affine):
    x = RNG.normal(size=shape)
    c = shape[1]
    extra = [RNG.normal(size=c), RNG.normal(size=c)] if affine else []
    _check(lambda x, *wb: F.group_norm(x, groups, *wb), lambda x, *wb: TF.group_norm(x, groups, *wb),
           [x] + extra)


@pytest.mark.parametrize("shape", [(5, 3), (4, 3, 2), (2, 3, 2, 2)])
@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("momentum", [0.1, 0.5])
def test_batch_norm_functional(shape, training, momentum):
    x = RNG.normal(size=shape)
    rm, rv = RNG.normal(size=3), RNG.uniform(0.5, 2, size=3)
    w, b = RNG.normal(size=3), RNG.normal(size=3)
    rme, rve, rmt, rvt = eager.tensor(rm), eager.tensor(rv), torch.tensor(rm), torch.tensor(rv)
    _check(lambda x, w, b: F.batch_norm(x, rme, rve, w, b, training, momentum),
           lambda x, w, b: TF.batch_norm(x, rmt, rvt, w, b, training, momentum), [x, w, b])
    _close(rme, rmt)
    _close(rve, rvt)


@pytest.mark.parametrize("cls, shape", [("BatchNorm1d", (6, 3)), ("BatchNorm1d", (4, 3, 5)),
                                        ("BatchNorm2d", (2, 3, 4, 2))])
@pytest.mark.parametrize("kw", [{}, {"momentum": None}, {"affine": False},
                                {"track_running_stats": False}, {"bias": False}, {"eps": 0.1}])
def test_batch_norm_layers(cls, shape, kw):
    me, mt = getattr(nn, cls)(3, **kw).double(), getattr(torch.nn, cls)(3, **kw).double()
    assert repr(me) == repr(mt)
    assert list(me.state_dict()) == list(mt.state_dict())
    for step in range(3):
        x = RNG.normal(size=shape)
        _check(me, mt, [x])
        for k, v in mt.state_dict().items():
            _close(me.state_dict()[k], v)
    me.eval()
    mt.eval()
    _check(me, mt, [RNG.normal(size=shape)])
    me.load_state_dict({k: eager.tensor(v.numpy()) for k, v in mt.state_dict().items()})


def test_norm_layers_repr_and_state_dict():
    pairs = [(nn.LayerNorm((4, 5)), torch.nn.LayerNorm((4, 5))),
             (nn.LayerNorm(4, bias=False), torch.nn.LayerNorm(4, bias=False)),
             (nn.LayerNorm(4, elementwise_affine=False), torch.nn.LayerNorm(4, elementwise_affine=False)),
             (nn.GroupNorm(2, 4), torch.nn.GroupNorm(2, 4)),
             (nn.GroupNorm(2, 4, affine=False), torch.nn.GroupNorm(2, 4, affine=False))]
    for me, mt in pairs:
        assert repr(me) == repr(mt)
        assert list(me.state_dict()) == list(mt.state_dict())
        shape = (2, 4, 5) if isinstance(me, nn.GroupNorm) or me.normalized_shape == (4, 5) else (2, 5, 4)
        _check(me.double(), mt.double(), [RNG.normal(size=shape)])


def test_batch_norm_input_dims():
    with pytest.raises(ValueError, match="expected 4D input"):
        nn.BatchNorm2d(3)(eager.ones(2, 3))
    with pytest.raises(ValueError, match="expected 2D or 3D input"):
        nn.BatchNorm1d(3)(eager.ones(2, 3, 4, 5))


@pytest.mark.parametrize("tdtype", [np.int64, np.uint8])
def test_cross_entropy_every_target_counts_gather_path(tdtype):
    """Targets without ignore_index and no class weights select with one gather
    (eager/nn/_fn_stats.py _picked_all): PyTorch's values, first and second derivatives,
    for uint8 targets too."""
    x = RNG.normal(size=(6, 5)).astype(np.float32)
    t = RNG.integers(0, 5, size=6).astype(tdtype)
    xe = eager.tensor(x, requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    le = F.cross_entropy(xe, eager.tensor(t))
    lt = TF.cross_entropy(xt, torch.tensor(t))
    np.testing.assert_allclose(le.item(), lt.item(), rtol=1e-6)
    (ge,) = eager.autograd.grad(le, xe, create_graph=True)
    (gt,) = torch.autograd.grad(lt, xt, create_graph=True)
    np.testing.assert_allclose(ge.detach().numpy(), gt.detach().numpy(), rtol=1e-5, atol=1e-7)
    (ge * ge).sum().backward()
    (gt * gt).sum().backward()
    np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-8)
    with pytest.raises(IndexError, match="Target 5 is out of bounds."):
        F.cross_entropy(xe, eager.tensor(np.array([0, 5, 1, 2, 3, 4], tdtype)))
