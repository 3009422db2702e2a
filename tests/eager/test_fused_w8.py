"""W8's eager fast paths (issue 17): float32 GELU's table kernel
(eager.nn._fn_pointwise.gelu_float32_table), masked_fill with a number as one
MaskedFillBackward0 node, layer_norm's means (eager/nn/_fused.py).  Against PyTorch
(values, gradients, grad_fn names, errors), finite differences in float64, the composite
definitions they replace, and the attention block W8 trains."""

from __future__ import annotations

import math

import numpy as np
import pytest

import eager
import eager.nn._fn_pointwise as FP
import eager.nn.functional as F
from eager.autograd import gradcheck, gradgradcheck
from eager.nn._fused import _mean

R = np.random.default_rng(17)


# --- float32 GELU's accuracy contract -------------------------------------------------

#: the largest |gelu(x) - exact| of float32 GELU over the sweep below: eager's table kernel
#: 2.379e-7 (the output's own rounding, at x in [4, 8)); PyTorch 2.13's F.gelu (float32, CPU,
#: AVX2 build path): 3.750e-7 (at x ~ 3.08), measured on the same sweep
GELU_F32_ERR = 2.4e-7
TORCH_GELU_F32_ERR = 3.75e-7
#: the same for the gradient factor gelu'(x): eager 1.43e-7 (in [0.5, 1): the rounding of
#: r(a) and of 1/2 + r), PyTorch 3.05e-7
GELU_F32_GRAD_ERR = 1.45e-7
TORCH_GELU_F32_GRAD_ERR = 3.06e-7


def _sweep():
    """Every 218th float32 in [0, 10] and its negative: 10,023,088 values."""
    pos = np.arange(0, 0x41200001, 218, dtype=np.int32).view(np.float32)
    return np.concatenate([pos, -pos])


def _gelu_exact(x):
    """gelu and gelu' in float64 to ~1e-14: erf(z) and erf'(z), z = x / sqrt 2, by their
    Taylor series of degree 4 and 3 around the nearest node k / 1024 (|h| <= 2**-11), the
    node values from math.erf and erf's derivative recurrence (a sequential gather: the
    sweep is sorted, so 10**7 values take ~0.3 s)."""
    z = x.astype(np.float64) * math.sqrt(0.5)
    k = np.rint(z * 1024)
    h = z - k / 1024
    idx = k.astype(np.intp)
    k_min = int(idx.min())
    idx -= k_min
    n = (np.arange(int(idx.max()) + 1) + k_min) / 1024  # the nodes the chunk uses
    d1 = 2 / math.sqrt(math.pi) * np.exp(-n * n)
    cols = [np.array([math.erf(v) for v in n.tolist()]), d1, -2 * n * d1]
    cols += [(4 * n * n - 2) * d1, (12 * n - 8 * n**3) * d1]
    c = [col.take(idx) for col in cols]
    erf = c[4] / 24 * h + c[3] / 6
    erf *= h
    erf += c[2] / 2
    erf *= h
    erf += c[1]
    erf *= h
    erf += c[0]
    derf = c[4] / 6 * h + c[3] / 2
    derf *= h
    derf += c[2]
    derf *= h
    derf += c[1]
    xd = x.astype(np.float64)
    cdf = (erf + 1.0) * 0.5
    return xd * cdf, cdf + xd * derf / (2 * math.sqrt(2.0))


def _sweep_errors(fn, step=1):
    """The largest |fn(x)[0] - gelu(x)| and |fn(x)[1] - gelu'(x)| over the sweep (every
    ``step``-th value), in chunks of 2**16 (cache-sized: 10**7 values in ~0.4 s)."""
    x = _sweep()[::step]
    err = derr = 0.0
    for i in range(0, x.size, 1 << 16):
        xc = x[i : i + (1 << 16)]
        want, dwant = _gelu_exact(xc)
        y, d = fn(xc)
        err = max(err, float(np.abs(y - want).max()))
        derr = max(derr, float(np.abs(d - dwant).max()))
    return err, derr


def test_gelu_float32_error_on_a_dense_sweep_is_within_pytorchs():
    """The contract: float32 gelu(x) within PyTorch 2.13's own error of the exact value
    (absolute, over 10**7 floats of [-10, 10]), its gradient factor too."""
    assert _sweep().size >= 10**7
    err, derr = _sweep_errors(lambda x: FP.gelu_float32_table(x, grad=True))
    assert err <= GELU_F32_ERR <= TORCH_GELU_F32_ERR
    assert derr <= GELU_F32_GRAD_ERR <= TORCH_GELU_F32_GRAD_ERR


def test_gelu_float32_error_against_pytorch_on_the_sweep():
    """On every 13th value of the sweep, eager's F.gelu node (the table kernel's values)
    is no further from the exact values than the installed PyTorch's F.gelu, value and
    gradient (PyTorch 2.13 here: 3.75e-7 and 3.05e-7, TORCH_GELU_F32_ERR)."""
    torch = pytest.importorskip("torch")

    def torch_gelu(x):
        t = torch.tensor(x, requires_grad=True)
        y = torch.nn.functional.gelu(t)
        y.backward(torch.ones_like(y))
        return y.detach().numpy(), t.grad.numpy()

    def eager_gelu(x):
        t = eager.tensor(x, requires_grad=True)
        y = F.gelu(t)
        y.backward(eager.ones_like(y))
        return y.detach().numpy(), t.grad.numpy()

    err_t, derr_t = _sweep_errors(torch_gelu, 13)
    err_e, derr_e = _sweep_errors(eager_gelu, 13)
    # the contract against the PyTorch installed, whatever its build's vector path gives
    assert err_e <= err_t and derr_e <= derr_t
    assert err_e <= GELU_F32_ERR and derr_e <= GELU_F32_GRAD_ERR


def test_gelu_float32_special_values_like_pytorch():
    """+-0, tiny, huge, NaN, +-inf: values and gradients as PyTorch's float32 kernel's
    (NaN at -inf; gradient NaN at NaN and +-inf) but for the sign of a zero result, which
    is x's as the composite's (PyTorch's: +0.0)."""
    sp = [0.0, -0.0, 1e-45, -1e-45, 1e-30, -1e-30, 13.99, -13.99, 14.0, -14.0, 30.0, -30.0]
    sp += [3e38, -3e38, np.inf, -np.inf, np.nan]
    x = np.array(sp, np.float32)
    y, d = FP.gelu_float32_table(x, grad=True)
    want_y = [0, 0, 0, 0, 5e-31, -5e-31, 13.99, 0, 14, 0, 30, 0, 3e38, 0, np.inf, np.nan, np.nan]
    want_d = [0.5] * 6 + [1, 0] * 4 + [np.nan] * 3
    np.testing.assert_allclose(y, np.array(want_y, np.float32), rtol=1e-6, atol=2e-43)
    np.testing.assert_allclose(d, np.array(want_d, np.float32), rtol=1e-6, atol=1e-6)
    assert list(np.signbit(y[:4])) == [False, True, False, True]  # (x's sign: the
    assert np.signbit(y[11]) and np.signbit(y[13])  # composite's; PyTorch's is +0.0)
    for shape in [(), (0,), (0, 3), (1,), (2, 3, 4)]:  # shapes; one element per branch
        xs = np.full(shape, -0.75, np.float32)
        out, dd = FP.gelu_float32_table(xs, grad=True)
        assert out.shape == dd.shape == shape and out.dtype == np.float32
        xs = np.full(shape, 20.0, np.float32)
        assert FP.gelu_float32_table(xs)[0].shape == shape


def test_gelu_float32_special_values_against_pytorch():
    """The special values' outputs and gradients against PyTorch's float32 kernel.  Not
    +inf and 3e38: PyTorch 2.13's AVX512 kernel computes x (1 + erf) / 2 and gives NaN and
    inf there (its AVX2 kernel: inf and 3e38, eager's values, checked above)."""
    torch = pytest.importorskip("torch")
    sp = [0.0, -0.0, 1e-45, -1e-45, 1e-30, -1e-30, 13.99, -13.99, 14.0, -14.0, 30.0, -30.0]
    x = np.array(sp + [-3e38, -np.inf, np.nan], np.float32)
    y, d = FP.gelu_float32_table(x, grad=True)
    t = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.gelu(t)
    yt.backward(torch.ones_like(yt))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-6, atol=2e-43)
    np.testing.assert_allclose(d, t.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_gelu_float32_no_grad_paths_give_the_same_values():
    """Under no_grad, without requires_grad, and the recorded node: the same bits."""
    x = (R.standard_normal((33, 17)) * 4).astype(np.float32)
    a = F.gelu(eager.tensor(x)).numpy()
    with eager.no_grad():
        b = F.gelu(eager.tensor(x, requires_grad=True)).numpy()
    y = F.gelu(eager.tensor(x, requires_grad=True))
    assert type(y.grad_fn).__name__ == "GeluBackward0"
    assert a.tobytes() == b.tobytes() == y.detach().numpy().tobytes()


def test_gelu_float32_create_graph_goes_through_the_composite():
    """With create_graph the float32 node's gradient is built from tensor ops: its
    second derivative is the composite's (within float32 rounding), and the first
    derivative it returns agrees with the table's."""
    xn = (R.standard_normal(40) * 3).astype(np.float32)
    a, b = eager.tensor(xn, requires_grad=True), eager.tensor(xn, requires_grad=True)
    (ga,) = eager.autograd.grad(F.gelu(a).sum(), a, create_graph=True)
    (gb,) = eager.autograd.grad(FP._gelu_composite(b).sum(), b, create_graph=True)
    np.testing.assert_allclose(ga.detach().numpy(), gb.detach().numpy(), rtol=1e-6, atol=3e-7)
    np.testing.assert_allclose(
        ga.detach().numpy(), FP.gelu_float32_table(xn, grad=True)[1], rtol=1e-6, atol=3e-7
    )
    (gga,) = eager.autograd.grad(ga.sum(), a)
    (ggb,) = eager.autograd.grad(gb.sum(), b)
    np.testing.assert_allclose(gga.numpy(), ggb.numpy(), rtol=1e-5, atol=1e-6)


def test_the_erf_op_keeps_libm_rounding():
    """The erf op (the composite's, what graphc traces) does not take the fast path."""
    x = (R.standard_normal(2000) * 2).astype(np.float32)
    want = np.array([math.erf(v) for v in x.astype(np.float64).tolist()]).astype(np.float32)
    np.testing.assert_array_equal(eager.tensor(x).erf().numpy(), want)


# --- GELU ---------------------------------------------------------------------------------


def test_gelu_switch_gives_the_composite_bits_in_float32():
    x = (R.standard_normal((17, 9)) * 4).astype(np.float32)
    FP.FAST_GELU = False
    try:
        y = F.gelu(eager.tensor(x)).numpy()
    finally:
        FP.FAST_GELU = True
    np.testing.assert_array_equal(y, FP._gelu_composite(eager.tensor(x)).numpy())
    assert np.abs(F.gelu(eager.tensor(x)).numpy() - y).max() <= 2 * GELU_F32_ERR


def test_gelu_float64_finite_differences_and_double_backward():
    x = eager.tensor(R.standard_normal((3, 4)) * 2, requires_grad=True)
    assert gradcheck(F.gelu, (x,))
    assert gradgradcheck(F.gelu, (x,))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", [(), (0, 4), (1,), (8, 64, 33)])
def test_gelu_matches_pytorch(dt, approximate, shape):
    torch = pytest.importorskip("torch")
    x = (R.standard_normal(shape) * 3).astype(dt)
    if x.size > 6:
        x.flat[:6] = [0.0, -0.0, 9.0, -9.0, -40.0, 1e-30]
    g = R.standard_normal(shape).astype(dt)
    a, t = eager.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ya, yt = (
        F.gelu(a, approximate=approximate),
        torch.nn.functional.gelu(t, approximate=approximate),
    )
    assert type(ya.grad_fn).__name__ == yt.grad_fn.name() == "GeluBackward0"
    tol = dict(rtol=1e-6, atol=1e-6) if dt == np.float32 else dict(rtol=1e-13, atol=1e-14)
    if approximate == "tanh":  # (1 + tanh cancels for negative x: PyTorch's kernel rounds
        # differently from eager's composite)
        tol = dict(rtol=1e-5, atol=5e-6) if dt == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ya.detach().numpy(), yt.detach().numpy(), **tol)
    ya.backward(eager.tensor(g))
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), **tol)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_gelu_tanh_node_values_are_the_composites_bit_for_bit(dt):
    x = (R.standard_normal((17, 9)) * 4).astype(dt)
    x.flat[:6] = [0.0, -0.0, 40.0, -40.0, np.inf, np.nan]
    a, b = eager.tensor(x, requires_grad=True), eager.tensor(x, requires_grad=True)
    ya = F.gelu(a, approximate="tanh")
    inner = (b + b * b * b * 0.044715) * math.sqrt(2 / math.pi)
    yb = b * 0.5 * (inner.tanh() + 1.0)
    assert type(ya.grad_fn).__name__ == "GeluBackward0"
    assert ya.detach().numpy().tobytes() == yb.detach().numpy().tobytes()
    g = R.standard_normal(x.shape).astype(dt)
    with np.errstate(all="ignore"):
        ya.backward(eager.tensor(g))
        yb.backward(eager.tensor(g))
    fin = np.isfinite(x)
    tol = 1e-5 if dt == np.float32 else 1e-12
    np.testing.assert_allclose(a.grad.numpy()[fin], b.grad.numpy()[fin], rtol=tol, atol=tol)


def test_gelu_tanh_finite_differences_double_backward_and_inplace_error():
    x = eager.tensor(R.standard_normal((3, 4)) * 2, requires_grad=True)
    f = lambda t: F.gelu(t, approximate="tanh")  # noqa: E731
    assert gradcheck(f, (x,))
    assert gradgradcheck(f, (x,))
    a = x * 1.0
    y = f(a)
    a.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    h = eager.tensor(np.array([0.5, -1.0], np.float16), requires_grad=True)
    assert F.gelu(h, approximate="tanh").dtype == eager.float16  # (the composite)


def test_gelu_non_contiguous_input_matches_contiguous():
    x = (R.standard_normal((9, 12)) * 3).astype(np.float32)
    xt = eager.tensor(x).t()[::2]
    np.testing.assert_array_equal(F.gelu(xt).numpy(), F.gelu(xt.contiguous()).numpy())


# --- masked_fill --------------------------------------------------------------------------


def _causal(t):
    return np.triu(np.ones((t, t)), 1).astype(bool)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("value", [float("-inf"), 0.0, -2.5, 7])
def test_masked_fill_then_softmax_matches_pytorch(dt, value):
    torch = pytest.importorskip("torch")
    x = R.standard_normal((2, 3, 5, 5)).astype(dt)
    m = _causal(5)
    g = R.standard_normal(x.shape).astype(dt)
    a, t = eager.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ya = (a * 1.0).masked_fill(eager.tensor(m), value)
    yt = (t * 1.0).masked_fill(torch.from_numpy(m), value)
    assert type(ya.grad_fn).__name__ == yt.grad_fn.name() == "MaskedFillBackward0"
    sa, st = ya.softmax(-1), yt.softmax(-1)
    np.testing.assert_array_equal(ya.detach().numpy(), yt.detach().numpy())
    tol = dict(rtol=1e-5, atol=1e-6) if dt == np.float32 else dict(rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(sa.detach().numpy(), st.detach().numpy(), **tol)
    sa.backward(eager.tensor(g))
    st.backward(torch.tensor(g))
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), **tol)
    assert a.grad.dtype == a.dtype


def test_masked_fill_all_masked_row_softmax_is_nan_like_pytorch():
    torch = pytest.importorskip("torch")
    x = R.standard_normal((2, 4)).astype(np.float32)
    m = np.array([[True] * 4, [False, True, False, True]])
    a, t = eager.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    sa = a.masked_fill(eager.tensor(m), float("-inf")).softmax(-1)
    st = t.masked_fill(torch.from_numpy(m), float("-inf")).softmax(-1)
    np.testing.assert_array_equal(np.isnan(sa.detach().numpy()), np.isnan(st.detach().numpy()))
    np.testing.assert_allclose(sa.detach().numpy()[1], st.detach().numpy()[1], rtol=1e-6)
    sa.sum().backward()
    st.sum().backward()
    np.testing.assert_array_equal(np.isnan(a.grad.numpy()), np.isnan(t.grad.numpy()))


def test_masked_fill_fast_and_composite_agree_bit_for_bit():
    import eager.methods.stats as MS

    x = R.standard_normal((3, 4, 6)).astype(np.float32)
    x[0, 0, 0], x[1, 1, 1] = -0.0, np.nan
    m = R.standard_normal((4, 6)) > 0
    g = R.standard_normal(x.shape).astype(np.float32)
    outs = []
    for fast in (True, False):
        saved = MS.FUSED.pop("masked_fill")
        if fast:
            MS.FUSED["masked_fill"] = saved
        try:
            a = eager.tensor(x, requires_grad=True)
            y = (a * 1).masked_fill(eager.tensor(m), -1.5)
            y.backward(eager.tensor(g))
            outs.append((y.detach().numpy(), a.grad.numpy(), type(y.grad_fn).__name__))
        finally:
            MS.FUSED["masked_fill"] = saved
    (y1, g1, n1), (y2, g2, n2) = outs
    assert n1 == n2 == "MaskedFillBackward0"
    assert y1.tobytes() == y2.tobytes() and g1.tobytes() == g2.tobytes()


def test_masked_fill_shapes_the_fast_path_leaves_to_the_composite():
    torch = pytest.importorskip("torch")
    cases = [
        ((4,), (3, 4)),  # the mask broadcasts self: the result is the mask's shape
        ((3, 4), (3, 4)),
        ((), ()),
        ((0, 3), (3,)),
        ((2, 1), (2, 5)),
    ]
    for xs, ms in cases:
        x = R.standard_normal(xs).astype(np.float64)
        m = np.asarray(R.standard_normal(ms) > 0)
        a, t = eager.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        ya, yt = a.masked_fill(eager.tensor(m), 3.0), t.masked_fill(torch.from_numpy(m), 3.0)
        assert tuple(ya.shape) == tuple(yt.shape)
        np.testing.assert_array_equal(ya.detach().numpy(), yt.detach().numpy())
        ya.sum().backward()
        yt.sum().backward()
        np.testing.assert_array_equal(a.grad.numpy(), t.grad.numpy())


def test_masked_fill_value_tensor_int_self_and_errors():
    torch = pytest.importorskip("torch")
    x = R.standard_normal((3, 4))
    m = R.standard_normal((3, 4)) > 0
    a = eager.tensor(x, requires_grad=True)
    v = eager.tensor(2.0, requires_grad=True)
    y = a.masked_fill(eager.tensor(m), v)
    y.sum().backward()
    assert v.grad.item() == m.sum()
    ints = eager.tensor([[1, 2], [3, 4]]).masked_fill(eager.tensor([[True, False]] * 2), 9)
    assert ints.tolist() == [[9, 2], [9, 4]]
    with pytest.raises(RuntimeError, match="only supports boolean masks"):
        eager.tensor(x).masked_fill(eager.tensor(m.astype(np.int64)), 1.0)
    with pytest.raises(RuntimeError) as te:
        torch.tensor(x).masked_fill(torch.from_numpy(m.astype(np.int64)), 1.0)
    assert "only supports boolean masks" in str(te.value)


def test_masked_fill_mask_modified_in_place_raises_like_pytorch():
    torch = pytest.importorskip("torch")
    for lib in (eager, torch):
        x = lib.tensor(R.standard_normal((3, 4)), requires_grad=True)
        m = lib.tensor(_causal(4)[:3])
        y = x.masked_fill(m, 1.0)
        m.fill_(True)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_masked_fill_in_place_on_a_non_leaf_and_double_backward():
    torch = pytest.importorskip("torch")
    x = R.standard_normal((3, 4))
    m = _causal(4)[:3]
    grads = []
    for lib in (eager, torch):
        a = lib.tensor(x, requires_grad=True)
        b = a * 2
        b.masked_fill_(lib.tensor(m) if lib is eager else torch.from_numpy(m), -1.0)
        assert type(b.grad_fn).__name__ == "MaskedFillBackward0"
        (b * b).sum().backward()
        grads.append(a.grad.numpy())
    np.testing.assert_array_equal(*grads)
    a = eager.tensor(x, requires_grad=True)
    mt = eager.tensor(m)
    assert gradcheck(lambda t: t.masked_fill(mt, 0.5).sin(), (a,))
    assert gradgradcheck(lambda t: t.masked_fill(mt, 0.5).sin(), (a,))


def test_masked_fill_of_a_transposed_input_is_c_contiguous_and_views():
    torch = pytest.importorskip("torch")
    x = R.standard_normal((4, 6)).astype(np.float32)
    m = R.standard_normal((6, 4)) > 0
    a = eager.tensor(x, requires_grad=True)
    y = a.t().masked_fill(eager.tensor(m), 0.0)
    assert y.is_contiguous()
    y.view(24).sum().backward()
    t = torch.tensor(x, requires_grad=True)
    yt = t.t().contiguous().masked_fill(torch.from_numpy(m), 0.0)
    yt.view(24).sum().backward()
    np.testing.assert_array_equal(y.detach().numpy(), yt.detach().numpy())
    np.testing.assert_array_equal(a.grad.numpy(), t.grad.numpy())


def test_masked_fill_in_place_on_a_view_gives_copyslices_grads_like_pytorch():
    torch = pytest.importorskip("torch")
    x = R.standard_normal((3, 4))
    m = np.array([True, False, True, False])
    grads = []
    for lib in (eager, torch):
        a = lib.tensor(x, requires_grad=True)
        b = a * 2
        b[1].masked_fill_(lib.tensor(m) if lib is eager else torch.from_numpy(m), -1.0)
        assert "CopySlices" in (type(b.grad_fn).__name__ if lib is eager else b.grad_fn.name())
        (b * b).sum().backward()
        grads.append(a.grad.numpy())
    np.testing.assert_array_equal(*grads)


def test_masked_fill_no_grad_and_leaf_without_grad():
    x = eager.tensor(R.standard_normal((2, 3)).astype(np.float32))
    m = eager.tensor(_causal(3)[:2])
    assert x.masked_fill(m, 0.0).grad_fn is None
    a = eager.tensor(x.numpy(), requires_grad=True)
    with eager.no_grad():
        assert a.masked_fill(m, 0.0).grad_fn is None


# --- layer_norm's means -------------------------------------------------------------------


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_mean_helper_is_numpys_mean_bit_for_bit(dt):
    for shape, axes in [((8, 64, 64), (2,)), ((5, 7, 3), (1, 2)), ((3, 1), (1,)), ((2, 3), (0, 1))]:
        a = (R.standard_normal(shape) * 100).astype(dt)
        want = a.mean(axis=axes, keepdims=True)
        got = _mean(a, axes)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("ns,affine,eps", [((64,), True, 1e-5), ((4, 6), True, 1e-3),
                                           ((6,), False, 1e-5), ((1,), True, 0.1)])  # fmt: skip
def test_layer_norm_matches_pytorch(dt, ns, affine, eps):
    torch = pytest.importorskip("torch")
    x = (R.standard_normal((3, 5) + ns) * 2 + 1).astype(dt)
    x = np.ascontiguousarray(x.swapaxes(0, 1)).swapaxes(0, 1)  # non-contiguous
    g = R.standard_normal(x.shape).astype(dt)
    w = (R.standard_normal(ns) + 1).astype(dt)
    b = R.standard_normal(ns).astype(dt)
    res = []
    for lib in (eager, torch):
        xs = lib.tensor(x, requires_grad=True)
        ps = [lib.tensor(p, requires_grad=True) for p in (w, b)] if affine else [None, None]
        y = lib.nn.functional.layer_norm(xs, ns, ps[0], ps[1], eps)
        y.backward(lib.tensor(g))
        res.append(
            [y.detach().numpy(), xs.grad.numpy()] + [p.grad.numpy() for p in ps if p is not None]
        )
        res[-1].append(type(y.grad_fn).__name__ if lib is eager else y.grad_fn.name())
    tol = dict(rtol=2e-5, atol=2e-5) if dt == np.float32 else dict(rtol=1e-11, atol=1e-12)
    for e, t in zip(res[0][:-1], res[1][:-1]):
        np.testing.assert_allclose(e, t, **tol)
    assert res[0][-1] == res[1][-1] == "NativeLayerNormBackward0"


# --- the attention block ------------------------------------------------------------------


def test_w8_attention_block_loss_and_grads_match_pytorch():
    torch = pytest.importorskip("torch")
    from graphc.tools.bench_models import _copy_weights
    from graphc.tools.models import build

    M, Mt = build(), build(torch)
    eager.manual_seed(0)
    m = M.AttentionBlock()
    mt = Mt.AttentionBlock()
    _copy_weights(m, mt, torch)
    tokens = np.random.default_rng(8).integers(0, 128, size=(8, 65))
    x, y = tokens[:, :-1].copy(), tokens[:, 1:].copy()
    le = M.token_loss(m, eager.tensor(x), eager.tensor(y))
    lt = Mt.token_loss(mt, torch.from_numpy(x), torch.from_numpy(y))
    le.backward()
    lt.backward()
    assert abs(le.item() - lt.item()) < 1e-5
    for (name, p), q in zip(m.named_parameters(), mt.parameters()):
        np.testing.assert_allclose(
            p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=2e-6, err_msg=name
        )
    names, seen = set(), set()
    stack = [le.grad_fn]
    while stack:
        n = stack.pop()
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        names.add(type(n).__name__)
        stack.extend(f for f, _ in n.next_functions)
    assert {"MaskedFillBackward0", "GeluBackward0", "SoftmaxBackward0"} <= names
