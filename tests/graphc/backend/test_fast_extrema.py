"""Float max/min rows of loop kernels run vectorized (llvm.maximum/minimum) and fall back
to the exact scalar step when a result is a zero or NaN (KernelBuilder._fast_extrema_kernel).
The results must be bit-identical to the exact step's: the first zero met wins a tie of
+0.0 and -0.0, the last NaN of a row wins.  (PyTorch's own vectorized CPU amax does not
pin the sign of a zero maximum over long rows; only values are compared with it.)"""

import numpy as np
import pytest

import eager
import graphc
import graphc.backend.kernel_builder as KB


def _bits(a) -> np.ndarray:
    a = np.ascontiguousarray(np.asarray(a))
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


def _both(fn, *args):
    """``fn`` compiled with the vectorized extrema and with the exact step alone."""
    fast = graphc.compile(fn)(*args)
    old = KB.FAST_EXTREMA
    KB.FAST_EXTREMA = False
    try:
        exact = graphc.compile(fn)(*args)
    finally:
        KB.FAST_EXTREMA = old
    return fast, exact


def _nasty(shape, dt, rng, zeros=True, nans=False) -> np.ndarray:
    """Values <= 0 with zeros of both signs scattered (so the max is often a zero and
    which zero wins shows), optionally NaNs."""
    x = -rng.random(shape).astype(dt) - 0.5
    if zeros:
        m = rng.random(shape)
        x[m < 0.04] = -0.0
        x[(m >= 0.04) & (m < 0.08)] = 0.0
    if nans:
        x[rng.random(shape) < 0.01] = np.nan
    return x


def _causal(t):
    n = max(t.shape[-2], t.shape[-1])
    return eager.ones(n, n).triu(1).bool()[: t.shape[-2], : t.shape[-1]]


FNS = {
    "amax_last": lambda t: t.amax(-1, keepdim=True),
    "amin_last": lambda t: (-t).amin(-1),
    "amax_first": lambda t: t.amax(0),
    "amin_middle": lambda t: (-t).amin(1),
    "max_dim_values": lambda t: t.max(dim=-1).values,
    "softmax": lambda t: t.softmax(-1),
    "masked_softmax": lambda t: t.masked_fill(_causal(t), float("-inf")).softmax(-1),
}


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(FNS))
@pytest.mark.parametrize("nans", [False, True])
def test_vectorized_extrema_are_bitwise_the_exact_step(name, dt, nans):
    rng = np.random.default_rng(17)
    for shape in [(3, 5, 67), (2, 4, 64), (4, 9, 8), (2, 1, 1), (1, 3, 33)]:
        x = _nasty(shape, dt, rng, nans=nans)
        fast, exact = _both(FNS[name], x)
        np.testing.assert_array_equal(_bits(fast), _bits(exact), err_msg=f"{name} {shape}")
        ref = np.asarray(FNS[name](eager.tensor(x)).numpy())
        np.testing.assert_allclose(np.asarray(fast), ref, rtol=1e-6, atol=1e-7)


def test_zero_ties_keep_the_first_zero_in_every_lane():
    # -0.0 early in the row and +0.0 in a later vector lane: maximum alone would give +0.0
    x = np.full((4, 40), -1.0, np.float32)
    x[0, 3], x[0, 20] = -0.0, 0.0
    x[1, 11], x[1, 30] = -0.0, 0.0
    x[2, 5], x[2, 6] = 0.0, -0.0
    x[3, 39] = -0.0
    fast, exact = _both(lambda t: t.amax(1), x)
    assert list(np.signbit(np.asarray(fast))) == [True, True, False, True]
    np.testing.assert_array_equal(_bits(fast), _bits(exact))
    fast, exact = _both(lambda t: t.amin(1), -x)
    assert list(np.signbit(np.asarray(fast))) == [False, False, True, False]


def test_nan_rows_and_infinities():
    x = np.full((5, 70), 2.0, np.float64)
    x[0, 10] = np.nan
    x[1, 10], x[1, 60] = np.nan, -np.nan
    x[2] = -np.inf
    x[3, 69] = np.inf
    x[4, :] = np.arange(70.0)
    fast, exact = _both(lambda t: t.amax(1), x)
    np.testing.assert_array_equal(_bits(fast), _bits(exact))
    assert np.isnan(np.asarray(fast)[:2]).all()
    assert list(np.asarray(fast)[2:]) == [-np.inf, np.inf, 69.0]


def test_non_contiguous_and_broadcast_inputs():
    rng = np.random.default_rng(3)
    base = _nasty((6, 80, 3), "float32", rng)
    x = base.transpose(2, 0, 1)[:, :, ::2]  # strided rows
    fast, exact = _both(lambda t: (t * 2.0).amax(-1), x)
    np.testing.assert_array_equal(_bits(fast), _bits(exact))
    np.testing.assert_array_equal(np.asarray(fast), (x * 2).max(-1))
    y = _nasty((1, 37), "float32", rng)
    z = _nasty((5, 1), "float32", rng)
    fast, exact = _both(lambda a, b: (a + b).amax(0), y, z)
    np.testing.assert_array_equal(_bits(fast), _bits(exact))


def test_gradient_of_max_through_the_fast_path():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 6, 50))
    g = graphc.grad(lambda t: (t.amax(-1) * t.amin(-1)).sum())(x)
    ref = np.zeros_like(x)
    i = x.argmax(-1)[..., None]
    j = x.argmin(-1)[..., None]
    np.put_along_axis(ref, i, np.take_along_axis(x, j, -1), -1)
    np.put_along_axis(ref, j, np.take_along_axis(x, i, -1), -1)
    np.testing.assert_allclose(np.asarray(g), ref)


def test_the_fast_form_is_emitted_only_where_it_is_safe():
    x = np.zeros((8, 64), np.float32)
    ll = graphc.compile(lambda t: t.amax(-1)).llvm_ir(x)
    assert "llvm.maximum" in ll
    ll = graphc.compile(lambda t: t.amax()).llvm_ir(x)  # a full reduction: exact step
    assert "llvm.maximum" not in ll
    # a masked row (softmax's causal mask): the where's -inf must not hide the reduction
    # from LLVM's vectorizer (the freeze in KernelBuilder._combine)
    mask = np.triu(np.ones((64, 64), bool), 1)
    x4 = np.zeros((2, 3, 64, 64), np.float32)
    ll = graphc.compile(lambda t, m: (t * 0.25).masked_fill(m, float("-inf")).amax(-1)).llvm_ir(
        x4, mask, optimized=True
    )
    assert "llvm.vector.reduce.fmaximum" in ll
    xi = np.zeros((8, 64), np.int32)
    assert "llvm.maximum" not in graphc.compile(lambda t: t.amax(-1)).llvm_ir(xi)


def test_values_match_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    x = _nasty((16, 3, 45), "float32", rng)
    got = np.asarray(graphc.compile(lambda t: t.amax(-1))(x))
    want = torch.from_numpy(x).amax(-1).numpy()
    np.testing.assert_array_equal(got, want)  # == : a zero's sign is PyTorch's lanes' choice


def test_row_max_inside_a_scan_body_and_in_place_updates():
    rng = np.random.default_rng(21)
    xs = _nasty((6, 5, 40), "float32", rng, nans=True)
    h0 = _nasty((5, 40), "float32", rng)

    def f(h, xs):
        def step(c, x):
            m = (c + x).amax(-1, keepdim=True)
            return (c + x) - m, m

        return graphc.scan(step, h, xs)

    (cf, ysf), (ce, yse) = _both(f, h0, xs)
    np.testing.assert_array_equal(_bits(cf), _bits(ce))
    np.testing.assert_array_equal(_bits(ysf), _bits(yse))

    def g(a):
        a = a * 1.0
        a -= a.amax(-1, keepdim=True)  # an in-place update next to the reduction
        return a

    x = _nasty((4, 64), "float64", rng)
    fast, exact = _both(g, x)
    np.testing.assert_array_equal(_bits(fast), _bits(exact))
    np.testing.assert_array_equal(np.asarray(fast), x - x.max(-1, keepdims=True))
