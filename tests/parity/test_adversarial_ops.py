"""Adversarial regression cases for the newer ops: special values, odd dtypes and
arguments, eager vs compiled (and vs PyTorch when it is importable).  Each case was a
bug once; the comment says what was wrong."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import eager
import graphc

try:  # PyTorch is never a dependency: the differential parts run only where it is
    import torch as _torch
except ImportError:  # pragma: no cover
    _torch = None


def _same(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
    np.testing.assert_array_equal(got, want)
    if got.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def _all_ways(fn, *arrays, want=None, levels=(0, 3), rtol=0.0):
    """fn eagerly, compiled at ``levels`` and in the interpreter: all equal (and to want;
    within ``rtol`` when it is not 0)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        e = fn(*[eager.tensor(a.copy()) for a in arrays]).numpy()
        if want is not None:
            _same(e, want)
        for cfg in [{"opt_level": lv} for lv in levels] + [{"backend": "interpreter"}]:
            got = graphc.compile(fn, **cfg)(*[a.copy() for a in arrays])
            if rtol:
                np.testing.assert_allclose(got, e, rtol=rtol)
            else:
                _same(got, e)
    return e


# --- cumsum of -0.0: the running sum starts at +0 (numpy's cumsum kept -0.0 eagerly, native
# code and PyTorch give +0.0)


@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_of_negative_zeros_is_positive_zero(reverse):
    x = np.array([[-0.0, -0.0, 1.0], [-0.0, 2.0, -0.0]])
    want = np.array([[0.0, 0.0, 1.0], [0.0, 2.0, 2.0]])
    if reverse:
        fn = lambda t: t.flip(1).cumsum(1).flip(1)  # noqa: E731
        want = np.array([[1.0, 1.0, 1.0], [2.0, 2.0, 0.0]])
    else:
        fn = lambda t: t.cumsum(-1)  # noqa: E731
    _all_ways(fn, x, want=want)
    _all_ways(lambda t: t.t().cumsum(0), x, want=want.T if not reverse else None)
    r = eager.tensor(x)._op("cumsum", "CumsumBackward0", dim=1, reverse=True).numpy()
    assert not np.signbit(r[r == 0]).any()


# --- an explicit integer dtype= of sum/prod/cumsum/cumprod is the result's dtype (eager
# widened it to int64)


@pytest.mark.parametrize("op", ["sum", "prod", "cumsum", "cumprod"])
@pytest.mark.parametrize("dtype", ["int32", "int16", "uint8"])
def test_integer_dtype_argument_is_the_result_dtype(op, dtype):
    x = np.array([2**20, 2**20, 3, -7], dtype=np.int64)
    dt = getattr(eager, dtype)
    fn = lambda t: getattr(t, op)(0, dtype=dt)  # noqa: E731
    if dtype == "int32":
        got = _all_ways(fn, x)
    else:  # (the native backend refuses int16/uint8 clearly)
        got = fn(eager.tensor(x)).numpy()
    assert got.dtype == np.dtype(dtype)
    ref = getattr(np, op)(x.astype(dtype), dtype=dtype)
    _same(got, ref)
    if _torch is not None:
        t = getattr(_torch.from_numpy(x), op)(0, dtype=getattr(_torch, dtype)).numpy()
        _same(got, t)


# --- addmm/baddbmm/addmv/addbmm with alpha=0: the product is ignored, as PyTorch's gemm
# (eager multiplied NaN/inf products by 0 and gave NaN; the BLAS kernel gave beta * input;
# the no-BLAS loops gave NaN again)

_NAN_MATS = [
    (np.full((2, 3), np.nan), np.ones((3, 2))),
    (np.ones((2, 3)), np.full((3, 2), np.inf)),
    (np.zeros((2, 3)), np.full((3, 2), np.inf)),
]


@pytest.mark.parametrize("beta", [0.0, 1.0, 0.5])
@pytest.mark.parametrize("mats", range(len(_NAN_MATS)))
@pytest.mark.parametrize("blas_on", [True, False])
def test_alpha_zero_ignores_the_product(beta, mats, blas_on, monkeypatch):
    from graphc.backend import blas

    if not blas_on:
        monkeypatch.setattr(blas, "available", lambda: False)
    m1, m2 = _NAN_MATS[mats]
    inp = np.array([[1.0, -2.0], [np.inf, 4.0]])
    want = beta * inp if beta else np.zeros((2, 2))
    fns = {
        "addmm": lambda i, a, b: eager.addmm(i, a, b, beta=beta, alpha=0),
        "baddbmm": lambda i, a, b: eager.baddbmm(i, a[None], b[None], beta=beta, alpha=0)[0],
        "addbmm": lambda i, a, b: eager.addbmm(i, a[None], b[None], beta=beta, alpha=0),
        "addmv": lambda i, a, b: eager.addmv(i[0], a, b[:, 0], beta=beta, alpha=0),
    }
    for name, fn in fns.items():
        w = want[0] if name == "addmv" else want
        _all_ways(fn, inp, m1, m2, want=w, levels=(0, 3) if blas_on else (2,))
        if _torch is not None and name != "baddbmm":  # (its small-batch path propagates NaN)
            ts = [_torch.from_numpy(a.copy()) for a in (inp, m1, m2)]
            _same(_run_torch(name, ts, beta), w)


def _run_torch(name, ts, beta):
    i, a, b = ts
    if name == "addmm":
        return _torch.addmm(i, a, b, beta=beta, alpha=0).numpy()
    if name == "addbmm":
        return _torch.addbmm(i, a[None], b[None], beta=beta, alpha=0).numpy()
    return _torch.addmv(i[0], a, b[:, 0], beta=beta, alpha=0).numpy()


# --- cross_entropy/nll_loss compiled with a target out of [0, C): graphc's IndexError, as
# eager raises PyTorch's (the traced target could not be checked: the loss silently
# selected no class and returned a number)


@pytest.mark.parametrize("bad", [3, -1, 2**62, -(2**63)])
@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
def test_class_target_out_of_range_compiled_raises(bad, loss):
    fn = getattr(eager.nn.functional, loss)
    x = np.random.default_rng(0).standard_normal((4, 3))
    t = np.array([0, bad, 1, 2])
    with pytest.raises(IndexError, match="out of bounds"):
        fn(eager.tensor(x), eager.tensor(t))
    for lv in (0, 3):
        with pytest.raises(IndexError, match="out of range"):
            graphc.compile(lambda a, b: fn(a, b), opt_level=lv)(x, t)
        with pytest.raises(IndexError, match="out of range"):
            graphc.compile(graphc.grad(lambda a, b: fn(a, b)), opt_level=lv)(x, t)


@pytest.mark.parametrize("kw", [{}, {"label_smoothing": 0.2}, {"reduction": "none"},
                                 {"weight": True, "label_smoothing": 0.1}])
def test_class_target_in_range_and_ignored_compiled(kw):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 5))
    t = np.array([[0, 7, 1, 2, 7], [2, 2, 1, 0, 7]])  # 7: ignored, out of range
    w = np.array([0.5, 1.0, 2.0])

    def f(a, b, ww):
        extra = {k: v for k, v in kw.items() if k != "weight"}
        return eager.nn.functional.cross_entropy(
            a, b, weight=ww if kw.get("weight") else None, **{"ignore_index": 7, **extra})

    e = f(eager.tensor(x), eager.tensor(t), eager.tensor(w)).numpy()
    for lv in (0, 3):
        np.testing.assert_allclose(graphc.compile(f, opt_level=lv)(x, t, w), e, rtol=1e-12)
    if _torch is not None:
        tw = _torch.from_numpy(w)
        extra = {k: v for k, v in kw.items() if k != "weight"}
        ref = _torch.nn.functional.cross_entropy(
            _torch.from_numpy(x), _torch.from_numpy(t), weight=tw if kw.get("weight") else None,
            **{"ignore_index": 7, **extra}).numpy()
        np.testing.assert_allclose(e, ref, rtol=1e-12)


# --- take_along_dim with shapes that do not broadcast: PyTorch's RuntimeError (numpy's
# ValueError leaked)


def test_take_along_dim_shape_mismatch_is_a_runtime_error():
    x, i = eager.ones(3, 4), eager.zeros(2, 2, dtype=eager.int64)
    with pytest.raises(RuntimeError, match="must match the size of tensor b"):
        eager.take_along_dim(x, i, 1)
    with pytest.raises(RuntimeError, match="must match the size of tensor b"):
        graphc.compile(lambda a, b: eager.take_along_dim(a, b, 1))(x.numpy(), i.numpy())


# --- an empty dim tuple/list reduces over every dim, as PyTorch (eager followed numpy's
# axis=() and returned the input unreduced: a silently wrong number)

_EMPTY_DIM = {
    "sum": lambda t, d: t.sum(d),
    "sum_kd": lambda t, d: t.sum(d, keepdim=True),
    "mean": lambda t, d: t.mean(d),
    "amax": lambda t, d: t.amax(d),
    "amin": lambda t, d: t.amin(d, keepdim=True),
    "var": lambda t, d: t.var(d),
    "std": lambda t, d: t.std(d, correction=0),
    "count_nonzero": lambda t, d: t.count_nonzero(d),
    "norm": lambda t, d: t.norm(2, d),
    "norm_inf": lambda t, d: t.norm(float("inf"), d),
}


@pytest.mark.parametrize("name", sorted(_EMPTY_DIM))
@pytest.mark.parametrize("empty", [(), []])
def test_empty_dim_reduces_every_dim(name, empty):
    x = np.arange(-3.0, 9.0).reshape(3, 4) / 3
    fn = _EMPTY_DIM[name]
    full = fn(eager.tensor(x), None).numpy()
    got = _all_ways(lambda t: fn(t, empty), x, rtol=1e-12)
    if name == "sum_kd" or name == "amin":
        full = full.reshape(1, 1)
    np.testing.assert_allclose(got, full, rtol=1e-12)
    if _torch is not None:
        np.testing.assert_allclose(got, fn(_torch.from_numpy(x), empty).numpy(), rtol=1e-12)


# --- tensor_split at indices that decrease or count from the end: each piece is
# self[idx[i-1]:idx[i]] with the raw indices, as PyTorch (eager clamped each start to the
# largest index so far: [3, 1] gave a last piece of 1 column instead of 3)


@pytest.mark.parametrize("idx", [[3, 1], [1, 5, -1], [2, -1, 3], [-5, 2], [4, 0, 2], [-1, -3]])
@pytest.mark.parametrize("dim", [1, -1, 0])
def test_tensor_split_with_unordered_indices(idx, dim):
    x = np.arange(12.0).reshape(3, 4)
    n = x.shape[dim]
    bounds = [0] + idx + [None]
    want = [np.take(x, range(n)[slice(a, b)], axis=dim) for a, b in zip(bounds, bounds[1:])]
    got = eager.tensor(x).tensor_split(idx, dim)
    comp = graphc.compile(lambda t: t.tensor_split(idx, dim))(x)
    assert len(got) == len(comp) == len(want)
    for g, c, w in zip(got, comp, want):
        _same(g.numpy(), w)
        _same(np.asarray(c), w)
    if _torch is not None:
        for g, t in zip(got, _torch.from_numpy(x).tensor_split(idx, dim)):
            _same(g.numpy(), t.numpy())


# --- NaN, inf or an out-of-range number written into an integer tensor: PyTorch's
# RuntimeError (numpy's cast silently gave INT_MIN or a wrapped value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 2**63, 1e30])
def test_unrepresentable_fill_value_for_int64_is_an_error(value):
    x = eager.tensor([1, 2])
    msg = "value cannot be converted to type int64_t without overflow"
    with pytest.raises(RuntimeError, match=msg):
        x.masked_fill(x > 1, value)
    with pytest.raises(RuntimeError, match=msg):
        graphc.compile(lambda t: t.masked_fill(t > 1, value))(x.numpy())
    with pytest.raises(RuntimeError, match=msg):
        eager.full((2,), value, dtype=eager.int64)


def test_representable_fill_values_keep_working():
    x = eager.tensor([1, 2])
    _same(x.masked_fill(x > 1, 2.7).numpy(), np.array([1, 2]))  # truncated, as PyTorch
    _same(x.int().masked_fill(x > 1, 2**31 - 1).numpy(), np.array([1, 2**31 - 1], np.int32))
    with pytest.raises(RuntimeError, match="type int without overflow"):
        x.int().masked_fill(x > 1, 2**31)
    _same(eager.full((2,), -1, dtype=eager.uint8).numpy(), np.array([255, 255], np.uint8))
    _same(eager.full((1,), -(2**63)).numpy(), np.array([-(2**63)]))
    _same(eager.full((2,), True).numpy(), np.array([True, True]))
    _same((x > 1).masked_fill(x > 1, 5).numpy(), np.array([False, True]))


# --- a negative-p norm over an empty dim: PyTorch refuses it (no identity); eager gave inf


@pytest.mark.parametrize("p", [-1, -2, -0.5])
def test_negative_p_norm_over_an_empty_dim_is_an_error(p):
    x = eager.zeros(2, 0)
    with pytest.raises(RuntimeError, match="on the dimension 1because this dimension is empty"):
        x.norm(p, 1)
    with pytest.raises(RuntimeError, match="on an empty tensor because"):
        x.norm(p)
    with pytest.raises(RuntimeError, match="does not have an identity"):
        graphc.compile(lambda t: t.norm(p, 1))(x.numpy())
    assert x.norm(p, 0).shape == (0,)  # nothing reduced over an empty dim: fine
    _all_ways(lambda t: t.norm(p, 1), np.ones((2, 3)), rtol=1e-12)


# --- conv2d/max_pool2d with a stride larger than the input (one output per dim): eager's
# im2col view multiplied the huge stride into a byte stride (OverflowError) while the
# native kernel gave PyTorch's value


@pytest.mark.parametrize("s", [2**31, 2**62, 2**63 - 1])
def test_huge_stride_with_one_output(s):
    x, w = np.arange(9.0).reshape(1, 1, 3, 3), np.ones((1, 1, 2, 2))
    F = eager.nn.functional
    _all_ways(lambda a, b: F.conv2d(a, b, stride=s), x, w, want=np.array([[[[8.0]]]]))
    _all_ways(lambda a, b: F.conv2d(a, b, stride=(1, s)), x, w,
              want=np.array([[[[8.0], [20.0]]]]))  # fmt: skip
    _all_ways(lambda a: F.max_pool2d(a, 2, stride=s), x, want=np.array([[[[4.0]]]]))


# --- reflect/replicate padding that crops everything: PyTorch's "too small" error (eager
# returned an empty tensor)


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("pad", [(-2, -2), (-4, 0), (-4, 0, 0, -3)])
def test_reflect_replicate_pad_to_nothing_is_an_error(mode, pad):
    x = np.arange(24.0).reshape(2, 3, 4)
    F = eager.nn.functional
    with pytest.raises(RuntimeError, match=r"is too small. Calculated output"):
        F.pad(eager.tensor(x), pad, mode=mode)
    with pytest.raises(RuntimeError, match=r"is too small. Calculated output"):
        graphc.compile(lambda t: F.pad(t, pad, mode=mode))(x)
    # one padded dim still non-empty: PyTorch returns the (empty) result, and so does eager
    assert F.pad(eager.tensor(x), (0, 0, -3, 0), mode=mode).shape == (2, 0, 4)
    _all_ways(lambda t: F.pad(t, (-2, -1), mode=mode), x)


def test_logsumexp_of_an_empty_dim_is_an_error():
    # (after the empty-dim fix it reduced everything but kept a (1, 1) shape)
    x = eager.tensor(np.arange(6.0).reshape(2, 3))
    with pytest.raises(RuntimeError, match="logsumexp"):
        x.logsumexp(())
    np.testing.assert_allclose(x.logsumexp((0, 1)).numpy(), np.log(np.exp(np.arange(6.0)).sum()))


@pytest.mark.parametrize("op", ["max", "min", "prod"])
def test_reduction_vjps_over_no_axes_are_the_identity(op):
    # a record with axis=() (a graph file, or a 0-d tensor) reduces over nothing: its VJP
    # must not follow the public methods' "empty dim = every dim" rule
    x = eager.tensor(np.array([[1.0, 0.0, 2.0], [3.0, 4.0, -1.0]]), requires_grad=True)
    y = x._op(op, "Backward0", axis=(), keepdim=False)
    (y * eager.tensor(np.arange(6.0).reshape(2, 3))).sum().backward()
    np.testing.assert_array_equal(y.detach().numpy(), x.detach().numpy())
    np.testing.assert_array_equal(x.grad.numpy(), np.arange(6.0).reshape(2, 3))


# --- the src gradient of scatter/scatter_add with an empty index larger than src in another
# dim (PyTorch skips the size check for an empty index): eager's backward crashed placing
# the (empty) index-shaped gradient into src's shape (fuzz seed 1300156)


@pytest.mark.parametrize("op", ["scatter", "scatter_add"])
def test_scatter_src_gradient_with_an_empty_index(op):
    x, src = np.ones((4, 0, 2)), np.ones((4, 0, 1))
    index = np.zeros((4, 0, 2), dtype=np.int64)

    def f(a, s):
        return (getattr(a, op)(-3, eager.tensor(index), s) * 2.0).sum()

    ts = [eager.tensor(a, requires_grad=True) for a in (x, src)]
    gx, gs = eager.autograd.grad(f(*ts), ts)
    assert gx.shape == (4, 0, 2) and gs.shape == (4, 0, 1)
    cx, cs = graphc.compile(graphc.grad(f, argnums=(0, 1)))(x, src)
    assert np.asarray(cx).shape == (4, 0, 2) and np.asarray(cs).shape == (4, 0, 1)
    if _torch is not None:
        tx, ts_ = (_torch.tensor(a, requires_grad=True) for a in (x, src))
        (getattr(tx, op)(-3, _torch.from_numpy(index), ts_) * 2.0).sum().backward()
        assert tuple(ts_.grad.shape) == (4, 0, 1)
