"""eager's fused softmax, log_softmax, layer_norm and cross_entropy (eager/nn/_fused.py)
against PyTorch: values and gradients in float32/float64, non-contiguous inputs, size-0
and size-1 dims, NaN/inf rows, the cross_entropy variants that take the composite
path, double backward (create_graph), and in-place errors; and against the composite
definitions they replace (no PyTorch needed)."""

from __future__ import annotations

import numpy as np
import pytest

import eager
import eager.methods.stats as MS
import eager.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

TOL = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}


def _pair(x, rg=True):
    return eager.tensor(x, requires_grad=rg), torch.tensor(x, requires_grad=rg)


def _check(fe, ft, arrays, dt, grad_seed=0, tol=None):
    """Values and gradients of fe (eager) and ft (PyTorch) at ``arrays`` agree."""
    tol = tol or TOL[dt]
    es, ts = zip(*(_pair(a) for a in arrays))
    oe, ot = fe(*es), ft(*ts)
    assert oe.dtype == getattr(eager, str(ot.dtype).split(".")[1])
    want = ot.detach().numpy()
    np.testing.assert_allclose(oe.detach().numpy(), want, **tol)
    g = np.random.default_rng(grad_seed).standard_normal(want.shape).astype(dt)
    oe.backward(eager.tensor(g))
    ot.backward(torch.tensor(g))
    for e, t in zip(es, ts):
        np.testing.assert_allclose(e.grad.numpy(), t.grad.numpy(), **tol)
    return oe, ot


DTYPES = [np.float32, np.float64]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape,dim", [((4, 7), -1), ((3, 4, 5), 1), ((3, 4, 5), 0),
                                       ((1, 1), -1), ((6,), 0), ((2, 1, 3), 1)])  # fmt: skip
@pytest.mark.parametrize("log", [False, True])
def test_softmax_matches_pytorch(dt, shape, dim, log):
    x = np.random.default_rng(1).standard_normal(shape).astype(dt) * 3
    name = "log_softmax" if log else "softmax"
    oe, ot = _check(lambda a: getattr(a, name)(dim), lambda a: getattr(a, name)(dim), [x], dt)
    assert type(oe.grad_fn).__name__ == ot.grad_fn.name()


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_of_non_contiguous_and_transposed(dt, log):
    x = np.random.default_rng(2).standard_normal((5, 6, 4)).astype(dt)
    name = "log_softmax" if log else "softmax"
    _check(lambda a: getattr(a.transpose(0, 2)[:, ::2], name)(-1),
           lambda a: getattr(a.transpose(0, 2)[:, ::2], name)(-1), [x], dt)  # fmt: skip


@pytest.mark.parametrize("log", [False, True])
def test_softmax_nan_and_inf_rows(log):
    x = np.array(
        [[1.0, 2.0, 3.0], [np.inf, 0.0, 1.0], [-np.inf, -np.inf, -np.inf],
         [np.nan, 1.0, 2.0], [-np.inf, 0.0, 1.0], [np.inf, np.inf, 0.0]],
        np.float32,
    )  # fmt: skip
    name = "log_softmax" if log else "softmax"
    es, ts = _pair(x)
    oe, ot = getattr(es, name)(1), getattr(ts, name)(1)
    np.testing.assert_allclose(oe.detach().numpy(), ot.detach().numpy(), rtol=1e-6, atol=1e-7)
    g = np.ones(x.shape, np.float32)
    oe.backward(eager.tensor(g))
    ot.backward(torch.tensor(g))
    np.testing.assert_allclose(es.grad.numpy(), ts.grad.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("log", [False, True])
def test_softmax_size_zero_and_0d(log):
    name = "log_softmax" if log else "softmax"
    for shape, dim in [((0, 3), 1), ((3, 0), 1), ((), 0)]:
        x = np.ones(shape)
        es, ts = _pair(x)
        oe, ot = getattr(es, name)(dim), getattr(ts, name)(dim)
        np.testing.assert_array_equal(oe.detach().numpy(), ot.detach().numpy())
        oe.sum().backward()
        ot.sum().backward()
        np.testing.assert_array_equal(es.grad.numpy(), ts.grad.numpy())


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_equals_the_composite_to_rounding(dt, log):
    """Over 130 rows of 9 the fused node's row sums are einsum's (eager/nn/_fused.py
    _row_sum), not numpy's pairwise sum the composite runs: the values agree to a few
    ulps, not bit for bit (test_fused_w8.py checks both against extended precision and
    PyTorch); over the other axis (9 rows of 130) the fused node runs the composite's numpy
    operations, the same bits."""
    x = eager.tensor(np.random.default_rng(3).standard_normal((130, 9)).astype(dt))
    fused = x.log_softmax(1) if log else x.softmax(1)
    comp = (MS.composite_log_softmax if log else MS.composite_softmax)(x, (1,))
    eps = np.finfo(dt).eps
    np.testing.assert_allclose(fused.numpy(), comp.numpy(), rtol=4 * eps, atol=4 * eps)
    fused = x.log_softmax(0) if log else x.softmax(0)
    comp = (MS.composite_log_softmax if log else MS.composite_softmax)(x, (0,))
    np.testing.assert_array_equal(fused.numpy(), comp.numpy())


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("ns,affine", [((5,), True), ((5,), False), ((4, 5), True),
                                       ((3, 4, 5), True), ((1,), True)])  # fmt: skip
def test_layer_norm_matches_pytorch(dt, ns, affine):
    r = np.random.default_rng(4)
    arrays = [r.standard_normal((3, 4, 5)[: 3 - len(ns)] + ns if len(ns) < 3 else ns).astype(dt)]
    if ns == (1,):
        arrays = [r.standard_normal((6, 1)).astype(dt)]
    if affine:
        arrays += [r.standard_normal(ns).astype(dt), r.standard_normal(ns).astype(dt)]
        oe, ot = _check(lambda x, w, b: F.layer_norm(x, ns, w, b),
                        lambda x, w, b: TF.layer_norm(x, ns, w, b), arrays, dt,
                        tol=dict(rtol=1e-4, atol=1e-4) if dt == np.float32 else None)  # fmt: skip
    else:
        oe, ot = _check(lambda x: F.layer_norm(x, ns), lambda x: TF.layer_norm(x, ns), arrays,
                        dt, tol=dict(rtol=1e-4, atol=1e-5) if dt == np.float32 else None)  # fmt: skip
    assert type(oe.grad_fn).__name__ == ot.grad_fn.name()


def test_layer_norm_non_contiguous_weight_only_and_module():
    r = np.random.default_rng(5)
    x = r.standard_normal((6, 3, 8))
    w = r.standard_normal(8)
    _check(lambda a, b: F.layer_norm(a.transpose(0, 1), (8,), b),
           lambda a, b: TF.layer_norm(a.transpose(0, 1), (8,), b), [x, w], np.float64)  # fmt: skip
    _check(lambda a, b: F.layer_norm(a, (8,), None, b),
           lambda a, b: TF.layer_norm(a, (8,), None, b), [x, w], np.float64)  # fmt: skip
    me, mt = eager.nn.LayerNorm(8), torch.nn.LayerNorm(8)
    xe, xt = _pair(x.astype(np.float32))
    me(xe).sum().backward()
    mt(xt).sum().backward()
    np.testing.assert_allclose(xe.grad.numpy(), xt.grad.numpy(), atol=1e-5)
    np.testing.assert_allclose(me.weight.grad.numpy(), mt.weight.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(me.bias.grad.numpy(), mt.bias.grad.numpy(), rtol=1e-5)


def test_layer_norm_nan_inf_rows_and_empty():
    x = np.array([[1.0, 2.0, 3.0], [np.nan, 1.0, 2.0], [np.inf, 0.0, 1.0], [5.0, 5.0, 5.0]])
    es, ts = _pair(x)
    oe, ot = F.layer_norm(es, (3,)), TF.layer_norm(ts, (3,))
    np.testing.assert_allclose(oe.detach().numpy(), ot.detach().numpy(), equal_nan=True)
    oe.sum().backward()
    ot.sum().backward()
    np.testing.assert_allclose(es.grad.numpy(), ts.grad.numpy(), atol=1e-12, equal_nan=True)
    es, ts = _pair(np.ones((0, 3)))
    assert F.layer_norm(es, (3,)).shape == TF.layer_norm(ts, (3,)).shape


def test_layer_norm_mixed_dtypes_take_the_composite():
    x = eager.randn(4, 5, dtype=eager.float32, requires_grad=True)
    w = eager.ones(5, dtype=eager.float64, requires_grad=True)
    out = F.layer_norm(x, (5,), w)
    assert type(out.grad_fn).__name__ != "NativeLayerNormBackward0"
    out.sum().backward()
    assert x.grad.shape == (4, 5) and w.grad.shape == (5,)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_pytorch(dt, reduction):
    r = np.random.default_rng(6)
    x = r.standard_normal((9, 5)).astype(dt) * 4
    y = r.integers(0, 5, 9)
    oe, ot = _check(lambda a: F.cross_entropy(a, eager.tensor(y), reduction=reduction),
                    lambda a: TF.cross_entropy(a, torch.tensor(y), reduction=reduction), [x], dt)  # fmt: skip
    assert type(oe.grad_fn).__name__ == ot.grad_fn.name() == "NllLossBackward0"


@pytest.mark.parametrize(
    "kw",
    [dict(ignore_index=2), dict(label_smoothing=0.2), dict(ignore_index=1, reduction="sum"),
     dict(weight=True), dict(label_smoothing=0.1, reduction="none"), dict(ignore_index=-100)],
)  # fmt: skip
def test_cross_entropy_variants_match_pytorch(kw):
    r = np.random.default_rng(7)
    x = r.standard_normal((8, 4))
    y = np.array([0, 1, 2, 3, 2, 2, 1, 0])
    kw = dict(kw)
    kwe, kwt = dict(kw), dict(kw)
    if kw.pop("weight", None):
        wn = r.random(4)
        kwe["weight"], kwt["weight"] = eager.tensor(wn), torch.tensor(wn)
    _check(lambda a: F.cross_entropy(a, eager.tensor(y), **kwe),
           lambda a: TF.cross_entropy(a, torch.tensor(y), **kwt), [x], np.float64)  # fmt: skip


def test_cross_entropy_non_contiguous_size_one_nan_inf_and_3d():
    r = np.random.default_rng(8)
    x = r.standard_normal((5, 7))
    y = r.integers(0, 5, 7)
    _check(lambda a: F.cross_entropy(a.t(), eager.tensor(y)),
           lambda a: TF.cross_entropy(a.t(), torch.tensor(y)), [x], np.float64)  # fmt: skip
    _check(lambda a: F.cross_entropy(a, eager.tensor([0])),
           lambda a: TF.cross_entropy(a, torch.tensor([0])), [np.ones((1, 1))], np.float64)  # fmt: skip
    x3 = r.standard_normal((2, 3, 4))
    y3 = r.integers(0, 3, (2, 4))
    _check(lambda a: F.cross_entropy(a, eager.tensor(y3)),
           lambda a: TF.cross_entropy(a, torch.tensor(y3)), [x3], np.float64)  # fmt: skip
    bad = np.array([[1.0, np.inf, 0.0], [np.nan, 0.0, 1.0], [-np.inf, 0.0, 1.0], [0.0, 1.0, 2.0]])
    yb = np.array([0, 1, 0, 2])
    for red in ("none", "mean"):
        es, ts = _pair(bad)
        oe = F.cross_entropy(es, eager.tensor(yb), reduction=red)
        ot = TF.cross_entropy(ts, torch.tensor(yb), reduction=red)
        np.testing.assert_allclose(oe.detach().numpy(), ot.detach().numpy(), rtol=1e-15)
        oe.sum().backward()
        ot.sum().backward()
        np.testing.assert_allclose(es.grad.numpy(), ts.grad.numpy(), rtol=1e-15, atol=1e-16)


def test_cross_entropy_empty_batch_and_bad_target():
    es, ts = _pair(np.ones((0, 3)))
    for red in ("mean", "sum", "none"):
        oe = F.cross_entropy(es, eager.zeros(0, dtype=eager.int64), reduction=red)
        ot = TF.cross_entropy(ts, torch.zeros(0, dtype=torch.int64), reduction=red)
        np.testing.assert_array_equal(oe.detach().numpy(), ot.detach().numpy())
    with pytest.raises(IndexError, match="Target 5 is out of bounds"):
        F.cross_entropy(eager.randn(2, 3), eager.tensor([0, 5]))


@pytest.mark.parametrize(
    "name",
    ["softmax", "log_softmax", "log_softmax_last", "layer_norm", "cross_entropy_mean",
     "cross_entropy_none"],
)  # fmt: skip
@pytest.mark.parametrize("rows", [4, 130])  # (130 rows: the row helpers' forward)
def test_double_backward_matches_pytorch(name, rows):
    r = np.random.default_rng(9)
    x = r.standard_normal((rows, 6))
    w = r.standard_normal(6)
    y = r.integers(0, 6, rows)

    def f(lib, F_, a, wt):
        if name == "softmax":
            return a.softmax(-1)
        if name == "log_softmax":
            return a.log_softmax(0)
        if name == "log_softmax_last":
            return a.log_softmax(-1)
        if name == "layer_norm":
            return F_.layer_norm(a, (6,), wt, wt * 0.5)
        red = name.split("_")[-1]
        return F_.cross_entropy(a, lib.tensor(y), reduction=red)

    res = []
    for lib, F_ in ((eager, F), (torch, TF)):
        a = lib.tensor(x, requires_grad=True)
        wt = lib.tensor(w, requires_grad=True)
        out = f(lib, F_, a, wt)
        c = lib.tensor(np.cos(np.arange(out.numel()).reshape(tuple(out.shape))))
        ga, gw = lib.autograd.grad((out * c).sum(), (a, wt), create_graph=True, allow_unused=True)
        h = (ga * ga).sum() + (gw * gw).sum() if gw is not None else (ga * ga).sum()
        h.backward()
        res.append(
            (ga.detach().numpy(), a.grad.numpy(), None if wt.grad is None else wt.grad.numpy())
        )
    (ge, he, hwe), (gt, ht, hwt) = res
    np.testing.assert_allclose(ge, gt, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(he, ht, rtol=1e-9, atol=1e-11)
    if hwt is not None:
        np.testing.assert_allclose(hwe, hwt, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("rows", [3, 128])  # (128 rows: the row helpers' forward)
def test_gradcheck_and_gradgradcheck(rows):
    r = np.random.default_rng(10)
    x = eager.tensor(r.standard_normal((rows, 5)), requires_grad=True)
    w = eager.tensor(r.standard_normal(5), requires_grad=True)
    y = eager.tensor(r.integers(0, 5, rows))
    for fn in (
        lambda a: a.softmax(1),
        lambda a: a.log_softmax(0),
        lambda a: a.log_softmax(1),
        lambda a: F.layer_norm(a, (5,), w, w * 2),
        lambda a: F.cross_entropy(a, y),
        lambda a: F.cross_entropy(a, y, reduction="none"),
    ):
        assert eager.autograd.gradcheck(fn, (x,))
        assert eager.autograd.gradgradcheck(fn, (x,))


@pytest.mark.parametrize("rows", [3, 130])  # (130 rows: the row helpers' forward)
def test_inplace_after_forward_raises_pytorch_error(rows):
    x = eager.randn(rows, 4, requires_grad=True)
    y = (x * 1).softmax(1)
    y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    # softmax saves its result, not its input: writing the input is fine (as PyTorch)
    a = x * 1
    s = a.softmax(1)
    a.add_(1)
    s.sum().backward()
    # layer_norm saves its input (PyTorch's NativeLayerNormBackward0 too)
    a = x * 1
    out = F.layer_norm(a, (4,))
    a.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
    # the create_graph path recomputes softmax from its input: refused once it changed
    a = x * 1
    s = a.softmax(1)
    a.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        eager.autograd.grad((s * s).sum(), x, create_graph=True)


@pytest.mark.parametrize("rows", [4, 132])  # (132 rows: the row helpers' forward)
def test_retain_graph_twice_and_no_grad(rows):
    x = eager.randn(rows, 3, requires_grad=True)
    y = eager.tensor([0, 2, 1, 1] * (rows // 4))
    loss = F.cross_entropy(x, y) + x.softmax(1)[:, 0].sum() + F.layer_norm(x, (3,)).pow(2).sum()
    loss.backward(retain_graph=True)
    g1 = x.grad.numpy().copy()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * g1, rtol=1e-6)
    with eager.no_grad():
        assert F.cross_entropy(x, y).grad_fn is None and x.softmax(1).grad_fn is None


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("ishape", [(8, 5), (7,), (), (0,), (3, 0), (1, 1)])
def test_embedding_matches_pytorch(dt, ishape):
    r = np.random.default_rng(11)
    w = r.standard_normal((6, 4)).astype(dt)
    idx = r.integers(0, 6, ishape)
    oe, ot = _check(lambda a: F.embedding(eager.tensor(idx), a),
                    lambda a: TF.embedding(torch.tensor(idx), a), [w], dt)  # fmt: skip
    if ishape != ():
        assert type(oe.grad_fn).__name__ == ot.grad_fn.name() == "EmbeddingBackward0"


def test_embedding_padding_int32_module_double_backward_and_index_write():
    r = np.random.default_rng(12)
    w = r.standard_normal((5, 3))
    idx = np.array([[0, 2, 2], [4, 2, 1]])
    _check(lambda a: F.embedding(eager.tensor(idx), a, padding_idx=2),
           lambda a: TF.embedding(torch.tensor(idx), a, padding_idx=2), [w], np.float64)  # fmt: skip
    i32 = idx.astype(np.int32)
    _check(lambda a: F.embedding(eager.tensor(i32), a),
           lambda a: TF.embedding(torch.tensor(i32), a), [w], np.float64)  # fmt: skip
    res = []
    for lib, F_ in ((eager, F), (torch, TF)):
        a = lib.tensor(w, requires_grad=True)
        out = F_.embedding(lib.tensor(idx), a)
        c = lib.tensor(np.cos(np.arange(out.numel()).reshape(tuple(out.shape))))
        (g,) = lib.autograd.grad((out * out * c).sum(), a, create_graph=True)
        (g * g).sum().backward()
        res.append((g.detach().numpy(), a.grad.numpy()))
    np.testing.assert_allclose(res[0][0], res[1][0], rtol=1e-12)
    np.testing.assert_allclose(res[0][1], res[1][1], rtol=1e-12)
    a = eager.tensor(w, requires_grad=True)
    ix = eager.tensor(idx)
    out = F.embedding(ix, a)
    ix[0, 0] = 4  # the node kept its own copy of the indices
    out.sum().backward()
    want = np.bincount(idx.reshape(-1), minlength=5)[:, None] * np.ones((1, 3))
    np.testing.assert_array_equal(a.grad.numpy(), want)
    with pytest.raises(IndexError):
        F.embedding(eager.tensor([5]), a)


def test_a_finished_graph_keeps_no_arrays():
    """After backward (no retain_graph) the fused nodes drop their ctx's arrays, so the
    last step's loss, which keeps its graph alive, does not keep them too."""
    x = eager.randn(16, 8, requires_grad=True)
    w = eager.ones(8, requires_grad=True)
    y = eager.tensor(np.arange(16) % 8)
    h = F.gelu(F.layer_norm(x, (8,), w, w).softmax(1).log_softmax(0))
    loss = F.cross_entropy(h + F.embedding(y, x[:8]), y)
    loss.backward()
    seen, stack = set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        ctx = getattr(node, "_ctx", None)
        if ctx is not None:
            assert not [
                k for k, v in vars(ctx).items() if isinstance(v, (np.ndarray, eager.Tensor))
            ]
            with pytest.raises(RuntimeError, match="backward through the graph a second time"):
                node.apply([eager.ones(())])
        stack.extend(n for n, _ in node.next_functions)
    assert len(seen) > 6


def test_jvp_and_hessian_match_pytorch():
    r = np.random.default_rng(13)
    x, v = r.standard_normal((4, 6)), r.standard_normal((4, 6))
    y, w = r.integers(0, 6, 4), r.standard_normal(6)
    fns = [
        (lambda a: a.softmax(1), lambda a: a.softmax(1)),
        (lambda a: a.log_softmax(0), lambda a: a.log_softmax(0)),
        (lambda a: F.layer_norm(a, (6,), eager.tensor(w), eager.tensor(w)),
         lambda a: TF.layer_norm(a, (6,), torch.tensor(w), torch.tensor(w))),
        (lambda a: F.cross_entropy(a, eager.tensor(y)), lambda a: TF.cross_entropy(a, torch.tensor(y))),
        (lambda a: F.embedding(eager.tensor(y % 4), a), lambda a: TF.embedding(torch.tensor(y % 4), a)),
    ]  # fmt: skip
    for fe, ft in fns:
        pe, te = eager.func.jvp(fe, (eager.tensor(x),), (eager.tensor(v),))
        pt, tt = torch.func.jvp(ft, (torch.tensor(x),), (torch.tensor(v),))
        np.testing.assert_allclose(pe.numpy(), pt.numpy(), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(te.numpy(), tt.numpy(), rtol=1e-12, atol=1e-14)
        he = eager.autograd.functional.hessian(lambda a: (fe(a) ** 2).sum(), eager.tensor(x))
        ht = torch.autograd.functional.hessian(lambda a: (ft(a) ** 2).sum(), torch.tensor(x))
        np.testing.assert_allclose(he.numpy(), ht.numpy(), rtol=1e-10, atol=1e-12)
