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
#: 2.379e-7 (over every float32 of [-10, 10]: 2.390e-7, the output's own rounding at x in
#: [4, 8), half an ulp there being 2.384e-7); PyTorch 2.13's F.gelu (float32, CPU, AVX2
#: build path): 3.750e-7 (at x ~ 3.08), measured on the same sweep
GELU_F32_ERR = 2.4e-7
TORCH_GELU_F32_ERR = 3.75e-7
#: the same for the gradient factor gelu'(x): eager 1.27e-7 over every float32 of [-10, 10]
#: (the rounding of r(a) and of 1/2 + r), PyTorch 3.05e-7
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


# --- row reductions along a short last axis (eager/nn/_fused.py) --------------------------

ROW_LENGTHS = [2, 3, 4, 5, 7, 8, 31, 63, 64, 65, 127, 128, 129, 1024]


def _specials(dt, n, rows=41, seed=0):
    """(rows, n) values with NaN, +-inf, -0.0 sprinkled in, a row of -inf, a row of NaN,
    a row of zeros of both signs and a row with its maximum twice."""
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((rows, n)) * 3).astype(dt)
    flat = a.reshape(-1)
    for v in (np.nan, np.inf, -np.inf, -0.0, 0.0):
        flat[rng.integers(0, flat.size, max(1, flat.size // 50))] = v
    a[0] = -np.inf
    a[1] = np.nan
    a[2] = np.where(np.arange(n) % 2, -0.0, 0.0)
    a[3, :2] = 50.0
    return a


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("n", ROW_LENGTHS)
def test_row_max_gives_numpys_max(dt, n):
    from eager.nn._fused import _row_max

    a = _specials(dt, n)
    got = _row_max(a)
    want = a.max(axis=1, keepdims=True)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)  # (NaN where numpy's is NaN)
    assert not np.shares_memory(got, a)


def _exact_sums(a, b=None):
    """Row sums of a (times b) in extended precision (np.longdouble: 64-bit mantissa on
    x86; float32 products are exact in it), and the sums of magnitudes."""
    p = a.astype(np.longdouble) if b is None else a.astype(np.longdouble) * b
    return p.sum(axis=1), np.abs(p).sum(axis=1)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("n", ROW_LENGTHS)
def test_row_sum_is_accurate_and_each_rows_own(dt, n):
    """einsum's row sums stay within 4 eps * sum(|x|) of the exact sums, numpy's pairwise
    sum's bound at these lengths (measured: up to 3.6 at 1024 on random rows, numpy's
    3.0), on rows whose sums cancel; a row's sum does not depend on the rows around it or
    on the array's alignment."""
    from eager.nn._fused import _row_sum

    rng = np.random.default_rng(n)
    eps = np.finfo(dt).eps
    a = (rng.standard_normal((97, n)) * 10.0 ** rng.integers(-3, 4, (97, 1))).astype(dt)
    a[:, -1] = -a[:, :-1].sum(axis=1)  # sums near zero: cancellation
    b = rng.standard_normal((97, n)).astype(dt)
    for got, (exact, mag) in ((_row_sum(a), _exact_sums(a)), (_row_sum(a, b), _exact_sums(a, b))):
        assert got.shape == (97,) and got.dtype == dt
        err = np.abs(got.astype(np.longdouble) - exact)
        assert np.all(err <= 4 * eps * mag), float(np.max(err / (eps * mag)))
    whole = _row_sum(a)
    raw = np.empty(a.size * a.itemsize + a.itemsize, np.uint8)[a.itemsize // 2 :]
    shifted = raw[: a.nbytes].view(dt).reshape(a.shape)  # a misaligned copy
    shifted[...] = a
    np.testing.assert_array_equal(_row_sum(shifted), whole)
    for i in (0, 1, 5, 96):
        assert _row_sum(a[i : i + 1])[0] == whole[i]
        assert _row_sum(a[i : i + 3])[0] == whole[i]


def test_row_sum_of_special_values():
    from eager.nn._fused import _row_sum

    a = np.array(
        [[np.inf, 1.0, 2.0], [np.inf, -np.inf, 0.0], [np.nan, 1.0, 2.0],
         [-0.0, -0.0, -0.0], [3e38, 3e38, 0.0], [1e-45, 1e-45, 0.0]],
        np.float32,
    )  # fmt: skip
    with np.errstate(all="ignore"):
        want = a.sum(axis=1)
        got = _row_sum(a)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_row_mean_divides_as_mean_does(dt):
    """_row_mean divides in the array's dtype; _mean (numpy's mean) divides by an intp,
    a float64 quotient rounded to float32: the same bits for every row length it takes."""
    from eager.nn._fused import ROW_MAX_LEN, _row_mean, _row_sum

    rng = np.random.default_rng(11)
    for n in range(2, ROW_MAX_LEN + 1):
        a = (rng.standard_normal((64, n)) * 10.0 ** rng.integers(-30, 30, (64, 1))).astype(dt)
        s = _row_sum(a)
        want = np.true_divide(s, np.intp(n), casting="unsafe", dtype=np.float64).astype(dt)
        assert _row_mean(a).tobytes() == want.tobytes(), n


def test_rows_takes_many_short_rows():
    from eager.nn._fused import ROW_MAX_LEN, ROW_MIN_COUNT, _rows

    assert ROW_MIN_COUNT == 128 and ROW_MAX_LEN == 256  # (the shapes below assume these)
    a = np.zeros((8, 16, 5), np.float32)
    assert _rows(a).shape == (128, 5) and np.shares_memory(_rows(a), a)
    assert _rows(np.zeros((128, 4, 5)), 2).shape == (128, 20)
    t = a.transpose(1, 0, 2)  # a copy, C-contiguous
    r = _rows(t)
    assert r.shape == (128, 5) and r.flags.c_contiguous and not np.shares_memory(r, a)
    assert _rows(np.zeros((300, 1))) is None  # (1-element rows: numpy's reductions)
    assert _rows(np.zeros((200, ROW_MAX_LEN + 1))) is None  # (long rows)
    assert _rows(np.zeros((127, 64))) is None  # (few rows)
    assert _rows(np.zeros((0, 8))) is None
    assert _rows(np.zeros((128, ROW_MAX_LEN))).shape == (128, ROW_MAX_LEN)


# --- softmax / log_softmax through the row helpers: float64 references, PyTorch ---------


def _softmax_ref(x, g, log):
    """softmax or log_softmax of x along the last axis and its gradient for the incoming
    g, in extended precision, with the scales the errors are measured against."""
    x, g = x.astype(np.longdouble), g.astype(np.longdouble)
    s = x - x.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(s).sum(axis=-1, keepdims=True))
    y = s - lse
    p = np.exp(y)
    if log:
        gx = g - p * g.sum(axis=-1, keepdims=True)
        return y, np.abs(y) + 1, gx, np.abs(g) + p * np.abs(g).sum(axis=-1, keepdims=True)
    gx = p * (g - (g * p).sum(axis=-1, keepdims=True))
    return p, p, gx, p * (np.abs(g) + (np.abs(g) * p).sum(axis=-1, keepdims=True))


def _rel_err(got, want, scale, dt):
    """The largest |got - want| in units of eps * scale (0 where both are equal, so a zero
    scale with an exact value counts as no error; NaN where got is NaN)."""
    err = np.abs(got.astype(np.longdouble) - want)
    with np.errstate(divide="ignore", invalid="ignore"):
        units = np.where(err == 0, 0, err / (scale * np.finfo(dt).eps))
    return float(np.max(units))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("n", [2, 3, 63, 64, 65, 128, 256, 1024])
def test_softmax_fast_path_error_against_extended_precision(dt, log, n):
    """Values and gradients within 24 eps of the exact ones (relative to the value, and to
    the gradient's terms): exp's relative error grows with |x - max| (the rounding of the
    difference, ~|x - max| / 2 eps: up to ~22 here); PyTorch 2.13 measured up to 14.2 eps
    on inputs like these, eager up to 16.6.  (1024-element rows take numpy's reductions.)"""
    from eager.nn._fused import _rows

    rng = np.random.default_rng(n)
    x = (rng.standard_normal((4, 32, n)) * 4).astype(dt)
    assert (_rows(x) is None) == (n > 256)
    g = rng.standard_normal(x.shape).astype(dt)
    name = "log_softmax" if log else "softmax"
    a = eager.tensor(x, requires_grad=True)
    y = getattr(a, name)(-1)
    assert type(y.grad_fn).__name__ == ("LogSoftmaxBackward0" if log else "SoftmaxBackward0")
    y.backward(eager.tensor(g))
    yr, ys, gr, gs = _softmax_ref(x, g, log)
    assert y.dtype == a.grad.dtype == a.dtype
    assert _rel_err(y.detach().numpy(), yr, ys, dt) <= 24
    assert _rel_err(a.grad.numpy(), gr, gs, dt) <= 24


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("n", [1, 2, 3, 63, 64, 65, 257])
@pytest.mark.parametrize("rows", [130, 12])
def test_softmax_special_values_and_row_lengths_match_pytorch(dt, log, n, rows):
    """NaN, +-inf, -0.0, all -inf rows (NaN, as PyTorch's), rows of zeros, the last axis
    strided (a transposed input), and shapes the fast path leaves to numpy (rows of 1 or
    257 elements, 12 rows):
    eager's values and gradients where PyTorch's are NaN and close to them elsewhere; the
    extended-precision error of both is compared on the finite rows."""
    torch = pytest.importorskip("torch")
    x = _specials(dt, n, rows=rows, seed=n)
    rng = np.random.default_rng(1)
    g = rng.standard_normal(x.shape).astype(dt)
    name = "log_softmax" if log else "softmax"
    eps = np.finfo(dt).eps
    for src in (x, np.ascontiguousarray(x.T).T):  # (C order, then the last axis strided)
        a, t = eager.tensor(src, requires_grad=True), torch.tensor(src, requires_grad=True)
        with np.errstate(all="ignore"):
            y = getattr(a, name)(-1)
            y.backward(eager.tensor(g))
        yt = getattr(t, name)(-1)
        yt.backward(torch.tensor(g))
        for got, want in (
            (y.detach().numpy(), yt.detach().numpy()),
            (a.grad.numpy(), t.grad.numpy()),
        ):
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            np.testing.assert_allclose(got, want, rtol=64 * eps, atol=64 * eps)
    fin = np.isfinite(x).all(axis=1)
    yr, ys, gr, gs = _softmax_ref(x[fin], g[fin], log)
    err_e = _rel_err(y.detach().numpy()[fin], yr, ys, dt)
    err_t = _rel_err(yt.detach().numpy()[fin], yr, ys, dt)
    assert err_e <= max(16.0, 1.5 * err_t)


def test_softmax_over_other_axes_and_0_size_take_numpys_reductions():
    """softmax over a non-last axis, of a size-0 input and of 1-element rows: the
    composite's numpy operations, the composite's bits."""
    import eager.methods.stats as MS

    x = eager.tensor(R.standard_normal((4, 6, 5)).astype(np.float32))
    for dim in (0, 1):
        np.testing.assert_array_equal(
            x.softmax(dim).numpy(), MS.composite_softmax(x, (dim,)).numpy()
        )
    z = eager.tensor(np.zeros((0, 4), np.float32), requires_grad=True)
    assert z.softmax(-1).shape == (0, 4)
    one = eager.tensor(R.standard_normal((3, 1)), requires_grad=True)
    y = one.log_softmax(-1)
    np.testing.assert_array_equal(y.detach().numpy(), np.zeros((3, 1)))
    y.sum().backward()
    np.testing.assert_array_equal(one.grad.numpy(), np.zeros((3, 1)))


def test_w8_masked_softmax_against_extended_precision_and_pytorch():
    """W8's shapes: scores (8, 4, 64, 64) masked causally with -inf, then softmax(-1):
    values and gradients against the extended-precision reference (the masked entries
    are exact zeros) and PyTorch's error on the same input."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((8, 4, 64, 64)) * 2).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    m = _causal(64)
    a, t = eager.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    y = (a * 1.0).masked_fill(eager.tensor(m), float("-inf")).softmax(-1)
    yt = (t * 1.0).masked_fill(torch.from_numpy(m), float("-inf")).softmax(-1)
    y.backward(eager.tensor(g))
    yt.backward(torch.tensor(g))
    xm = np.where(m, -np.inf, x)
    yr, ys, gr, gs = _softmax_ref(xm, g, False)
    ye = y.detach().numpy()
    assert np.all(ye[:, :, m] == 0) and np.all(a.grad.numpy()[:, :, m] == 0)
    keep = ~np.broadcast_to(m, x.shape)
    gr = gr * keep  # (the gradient through the fill is zero)
    for got, want, ref, sc in (
        (ye, yt.detach().numpy(), yr, ys),
        (a.grad.numpy(), t.grad.numpy(), gr, gs),
    ):
        with np.errstate(invalid="ignore"):
            sc = np.where(keep, sc, 1)
        err_e, err_t = _rel_err(got, ref, sc, np.float32), _rel_err(want, ref, sc, np.float32)
        assert err_e <= max(16.0, 1.5 * err_t), (err_e, err_t)


# --- masked_fill's bit masks ------------------------------------------------------------


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_fill_bits_gives_np_copytos_bits(dt):
    from eager.nn._fused import _fill_bits

    it = np.int32 if dt == np.float32 else np.int64
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 2, 8, 8)).astype(dt)
    xb = x.view(it).reshape(-1)
    xb[:5] = np.array(
        [-1, 0x7FC00001, -(2**31) if it is np.int32 else -(2**63), 1, 0x7F800001]
    ).astype(it)  # NaN payloads, -0.0, a subnormal
    fills = [-np.inf, np.inf, 0.0, -0.0, np.nan, 2.5, 1e-45]
    masks = [_causal(8), rng.standard_normal((8, 1)) > 0, np.array(True), np.zeros((8, 8), bool),
             rng.standard_normal((2, 1, 8)) > 0]  # fmt: skip
    for src in (x, x.transpose(0, 1, 3, 2)):
        for m in masks:
            for v in fills:
                fill = np.asarray(v, dt)
                got = _fill_bits(src, m, fill)
                want = np.array(src, order="C")
                np.copyto(want, fill, where=m)
                assert got.flags.c_contiguous and got.dtype == dt
                assert got.tobytes() == want.tobytes()
    raw = np.array([[0, 2], [1, 255]], np.uint8).view(bool)  # bytes other than 0/1: True
    got = _fill_bits(np.zeros((4, 2, 2), dt), raw, np.asarray(7.0, dt))
    np.testing.assert_array_equal(got, np.broadcast_to([[0, 7], [7, 7]], (4, 2, 2)))
    assert _fill_bits(x, rng.standard_normal(x.shape) > 0, np.asarray(1.0, dt)) is None
    assert _fill_bits(x.astype(np.float16), _causal(8), np.asarray(1.0, np.float16)) is None


# --- layer_norm and cross_entropy through the row helpers ---------------------------------


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("ns", [(64,), (4, 6), (3,), (1,), (300,)])
@pytest.mark.parametrize("lead", [(8, 16), (4, 5)])
def test_layer_norm_row_paths_against_extended_precision_and_pytorch(dt, ns, lead):
    """layer_norm's fast path (row means and the weight/bias gradients' column sums by
    einsum) on 128 rows, and numpy's means (1- and 300-element rows, 20 rows): values and
    the three gradients against an extended-precision reference, with a bound of 64 eps
    relative to each quantity's scale, and PyTorch's error on the same scale."""
    from eager.nn._fused import _rows

    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(len(ns) + ns[0])
    x = (rng.standard_normal(lead + ns) * 3 + 2).astype(dt)
    assert (_rows(x, len(ns)) is None) == (lead == (4, 5) or ns in ((1,), (300,)))
    g = rng.standard_normal(x.shape).astype(dt)
    w = (rng.standard_normal(ns) + 1).astype(dt)
    b = rng.standard_normal(ns).astype(dt)
    eps = 1e-5
    res = []
    for lib in (eager, torch):
        xs, ws, bs = (lib.tensor(v, requires_grad=True) for v in (x, w, b))
        y = lib.nn.functional.layer_norm(xs, ns, ws, bs, eps)
        y.backward(lib.tensor(g))
        res.append([y.detach().numpy(), xs.grad.numpy(), ws.grad.numpy(), bs.grad.numpy()])
    axes = tuple(range(2, x.ndim))
    X, G, W = (v.astype(np.longdouble) for v in (x, g, w))
    d = X - X.mean(axis=axes, keepdims=True)
    rstd = 1 / np.sqrt((d * d).mean(axis=axes, keepdims=True) + eps)
    xh = d * rstd
    t = G * W
    gx = rstd * (
        t - t.mean(axis=axes, keepdims=True) - xh * (t * xh).mean(axis=axes, keepdims=True)
    )
    refs = [xh * W + b, gx, (G * xh).sum(axis=(0, 1)), G.sum(axis=(0, 1))]
    scales = [np.abs(xh * W) + np.abs(b) + 1, rstd * (np.abs(t) + np.abs(t).mean(axis=axes, keepdims=True) * 3),
              np.abs(G * xh).sum(axis=(0, 1)), np.abs(G).sum(axis=(0, 1))]  # fmt: skip
    for e, t_, r, s in zip(res[0], res[1], refs, scales):
        assert _rel_err(e, r, s, dt) <= 64
        # PyTorch's error on the same scale (but of 1-element rows its x-hat is rounding
        # noise, not 0: its weight gradient is ~1e-4 in float32 where the exact one is 0)
        assert ns == (1,) or _rel_err(t_, r, s, dt) <= 64
    if ns == (1,):  # eager's x-hat of a 1-element row is exactly 0: so are x's and w's grads
        assert not res[0][1].any() and not res[0][2].any()


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("c", [1, 2, 3, 65, 128, 257])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_row_paths_match_pytorch(dt, c, reduction):
    """cross_entropy's fast path (row max by halving, sums by einsum, the softmax's
    division folded into the gradient) for class counts on and off it, against PyTorch,
    with a row holding +inf and one holding NaN (NaN losses and gradients, as PyTorch's)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(c)
    x = (rng.standard_normal((130, c)) * 3).astype(dt)
    from eager.nn._fused import _rows

    assert (_rows(x) is None) == (c in (1, 257))
    x[5, 0] = np.inf
    x[7, -1] = np.nan
    tg = rng.integers(0, c, 130)
    grad = rng.standard_normal(130).astype(dt) if reduction == "none" else None
    res = []
    for lib in (eager, torch):
        xs = lib.tensor(x, requires_grad=True)
        with np.errstate(all="ignore"):
            loss = lib.nn.functional.cross_entropy(xs, lib.tensor(tg), reduction=reduction)
            loss.backward(None if grad is None else lib.tensor(grad))
        res.append((loss.detach().numpy(), xs.grad.numpy()))
        assert (
            type(loss.grad_fn).__name__ if lib is eager else loss.grad_fn.name()
        ) == "NllLossBackward0"
    tol = 64 * np.finfo(dt).eps
    for e, t in zip(res[0], res[1]):
        np.testing.assert_array_equal(np.isnan(e), np.isnan(t))
        np.testing.assert_allclose(e, t, rtol=tol, atol=tol)
    # finite rows only: against extended precision
    ok = np.ones(130, bool)
    ok[[5, 7]] = False
    xs = eager.tensor(x[ok], requires_grad=True)
    loss = F.cross_entropy(xs, eager.tensor(tg[ok]), reduction="sum")
    loss.backward()
    X = x[ok].astype(np.longdouble)
    s = X - X.max(axis=1, keepdims=True)
    lse = np.log(np.exp(s).sum(axis=1))
    picked = s[np.arange(ok.sum()), tg[ok]] - lse
    p = np.exp(s - lse[:, None])
    p[np.arange(ok.sum()), tg[ok]] -= 1
    assert _rel_err(loss.detach().numpy(), -picked.sum(), np.abs(picked).sum() + 1, dt) <= 64
    assert _rel_err(xs.grad.numpy(), p, np.abs(p) + np.exp(s - lse[:, None]), dt) <= 64


@pytest.mark.parametrize("n", [1, 5, 32767, 32768, 32769, 65536 + 3])
def test_gelu_float32_chunks_give_the_one_pass_bits(n, monkeypatch):
    """gelu_float32_table runs in chunks of GELU_CHUNK elements with reused temporaries:
    the same bits as one chunk over everything, special values at the chunk edges and a
    big value (the clamped branch) in one chunk only, strided and 2-D inputs too."""
    x = (R.standard_normal(n) * 5).astype(np.float32)
    if n >= 3:
        x[[0, n - 1, n // 2]] = [np.nan, -np.inf, 20.0]
    edge = [i for i in (32767, 32768) if 0 < i < n - 1 and i != n // 2]
    x[edge] = -0.0
    views = [x, x[::-1], x[: n - n % 3].reshape(-1, 3)[:, 1], x.reshape(1, n)]
    got = [FP.gelu_float32_table(v, grad=True) for v in views]
    monkeypatch.setattr(FP, "GELU_CHUNK", 1 << 30)
    for v, (y, d) in zip(views, got):
        y1, d1 = FP.gelu_float32_table(v, grad=True)
        assert y.shape == v.shape == d.shape
        assert y.tobytes() == y1.tobytes() and d.tobytes() == d1.tobytes()
        assert FP.gelu_float32_table(v)[0].tobytes() == y1.tobytes()
    y, d = got[0]
    if n >= 3:
        assert np.isnan(y[0]) and np.isnan(y[n - 1]) and np.isnan(d[[0, n - 1]]).all()
        assert y[n // 2] == 20.0 and d[n // 2] == 1.0
