"""Issue 17 (W7/W8 speed): the float32 erf body, the opt-in per-kernel profiler."""

import math
import subprocess
import sys

import numpy as np
import pytest

import eager
import graphc


def _erf_ref(xs: np.ndarray) -> np.ndarray:
    return np.array([math.erf(float(v)) for v in xs.astype(np.float64)]).astype(np.float32)


@pytest.mark.parametrize("native", [True, False], ids=["f32-arithmetic", "via-f64"])
def test_erf_float32_within_one_ulp(native, monkeypatch):
    """float32 erf: in float32 arithmetic (the default, 8 lanes) within 2 ulp of the
    correctly rounded result and unbiased; via float64 (``ERF_F32_NATIVE = False``)
    within 1 ulp, correctly rounded but for near-ties."""
    from graphc.backend import vecmath

    monkeypatch.setattr(vecmath, "ERF_F32_NATIVE", native)
    rng = np.random.default_rng(17)
    edges = np.array([0.75, 4.0, 3.9, 6.0, 1e-30, 1e-38, 1.4e-45], np.float32)
    near = np.concatenate([np.nextafter(edges, np.float32(0)), edges, np.nextafter(edges, 9)])
    xs = np.concatenate(
        [
            rng.standard_normal(30000).astype(np.float32) * 2,
            rng.standard_normal(3000).astype(np.float32) * 1e-3,
            np.linspace(-4.5, 4.5, 30001, dtype=np.float32),
            near,
            -near,
        ]
    )
    got = np.asarray(graphc.compile(lambda a: eager.erf(a))(xs))
    ref = _erf_ref(xs)
    diff = got.view(np.int32).astype(np.int64) - ref.view(np.int32).astype(np.int64)
    ulp = np.abs(diff)
    if native:
        assert ulp.max() <= 2
        assert np.mean(ulp == 0) > 0.9  # 93% on this sample (most of it in [0.75, 2])
        assert abs(np.mean(diff[xs > 0])) < 0.05  # no bias (it would add up in sums)
    else:
        assert ulp.max() <= 1
        assert np.mean(ulp == 0) > 0.999  # correctly rounded but for near-ties


def test_erf_float32_special_values():
    xs = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 100.0, -100.0], np.float32)
    got = np.asarray(graphc.compile(lambda a: eager.erf(a))(xs))
    assert got[0] == 0 and not np.signbit(got[0])
    assert got[1] == 0 and np.signbit(got[1])
    assert list(got[2:4]) == [1.0, -1.0] and np.isnan(got[4]) and list(got[5:]) == [1.0, -1.0]


@pytest.mark.parametrize("shape", [(), (0,), (1,), (3, 5)])
def test_gelu_float32_matches_eager(shape):
    rng = np.random.default_rng(1)
    x = eager.tensor(rng.standard_normal(shape).astype(np.float32) * 3, requires_grad=True)
    f = eager.nn.functional.gelu
    y = graphc.compile(f)(x)
    np.testing.assert_allclose(y.detach().numpy(), f(x).detach().numpy(), rtol=2e-6, atol=1e-7)


_PROFILE_SCRIPT = """
import numpy as np, graphc, eager
from graphc.tools.kernel_profile import report, reset, rows
f = graphc.compile(lambda a, b: (a @ b).tanh().sum())
a = np.ones((32, 16), np.float32); b = np.ones((16, 8), np.float32)
assert float(f(a, b)) == float(np.tanh(a @ b).sum())
reset()
for _ in range(3):
    f(a, b)
rs = rows()
assert rs and all(r["calls"] == 3 and r["seconds"] >= 0 for r in rs), rs
assert any(r["kind"] == "matmul" for r in rs), rs
print(report(per_call=3))
"""


def test_kernel_profile_counts_each_kernel_call():
    out = subprocess.run(
        [sys.executable, "-c", _PROFILE_SCRIPT],
        env={**__import__("os").environ, "GRAPHC_PROFILE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "total over" in out.stdout


def test_kernel_profile_off_by_default():
    from graphc.runtime.native import profiling_enabled
    from graphc.tools.kernel_profile import rows

    if profiling_enabled():
        pytest.skip("GRAPHC_PROFILE is set in this environment")
    f = graphc.compile(lambda a: a * 2)
    f(np.ones(3))
    exe = f._entry_for((np.ones(3),)).stages["_executable"]
    assert exe.kernel_profile() == [] and exe.profile_counters is None
    assert all(r["executable"] != exe.name or False for r in rows([exe]))


# --- max pooling: the unrolled in-bounds windows, the store-only gradient ----------------

_POOL_CASES = [
    # (input shape, kernel_size, stride, padding, dilation, ceil_mode)
    ((2, 3, 8, 8), 2, 2, 0, 1, False),  # windows tile the input: no zero pass
    ((2, 3, 11, 9), 2, 2, 0, 1, False),  # a last row/column in no window
    ((1, 2, 9, 9), 3, 2, 0, 1, False),  # overlapping windows: the accumulating path
    ((1, 2, 10, 10), 2, 3, 0, 2, False),  # dilated, disjoint, gaps between windows
    ((1, 2, 7, 7), 2, 2, 1, 1, False),  # padding: the general path
    ((1, 1, 7, 7), 2, 2, 0, 1, True),  # ceil mode: a window past the edge
    ((1, 1, 1, 1), 1, 1, 0, 1, False),
    ((0, 2, 4, 4), 2, 2, 0, 1, False),
    ((1, 1, 5, 20), (5, 4), (5, 4), 0, 1, False),  # kh*kw > 16: the general path
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", _POOL_CASES)
def test_max_pool2d_and_grad_match_eager(case, dtype):
    shape, k, s, p, d, ceil = case
    rng = np.random.default_rng(3)
    xa = rng.standard_normal(shape).astype(dtype)
    if xa.size:
        xa.flat[:: max(1, xa.size // 7)] = np.nan  # NaN wins its window
        xa[..., 1::3, :] = xa[..., :1, :]  # repeated values: ties keep the first
    F = eager.nn.functional

    def loss(x, w):
        y = F.max_pool2d(x, k, s, p, d, ceil_mode=ceil)
        return (y * w).sum(), y

    y_shape = F.max_pool2d(eager.tensor(xa), k, s, p, d, ceil_mode=ceil).shape
    wa = rng.standard_normal(tuple(y_shape)).astype(dtype)
    if wa.size:
        wa.flat[0] = -0.0  # a -0.0 gradient lands as +0.0 (0 + g), as in eager
    outs = []
    for fn in (loss, graphc.compile(loss)):
        x = eager.tensor(xa.copy(), requires_grad=True)
        total, y = fn(x, eager.tensor(wa))
        total.backward()
        outs.append((y.detach().numpy(), x.grad.numpy()))
    (ye, ge), (yc, gc) = outs
    np.testing.assert_array_equal(yc, ye)
    np.testing.assert_array_equal(gc, ge)
    assert np.array_equal(np.signbit(gc), np.signbit(ge))


def test_max_pool2d_non_contiguous_input():
    rng = np.random.default_rng(4)
    base = rng.standard_normal((2, 8, 8, 3)).astype(np.float32)
    x = eager.tensor(base).permute(0, 3, 1, 2)  # a channels-last view
    f = lambda t: eager.nn.functional.max_pool2d(t, 2)  # noqa: E731
    np.testing.assert_array_equal(graphc.compile(f)(x).numpy(), f(x).numpy())


# --- partial float32 sums: added in float32 (bit-identical steps), vectorizable rows ------


@pytest.mark.parametrize(
    "shape, dim", [((3, 65), -1), ((4, 7, 1), -1), ((5, 0), -1), ((2, 9, 33), 1), ((1,), 0)]
)
def test_float32_row_sums_match_float64_reference(shape, dim):
    rng = np.random.default_rng(5)
    xa = rng.standard_normal(shape).astype(np.float32)
    f = graphc.compile(lambda t: (eager.exp(t) * 2.0).sum(dim))
    g = graphc.compile(lambda t: eager.softmax(t, dim) if t.numel() else t)
    got = np.asarray(f(xa).numpy() if hasattr(f(xa), "numpy") else f(xa))
    ref = (np.exp(xa.astype(np.float64)) * 2.0).sum(dim)
    np.testing.assert_allclose(got, ref, rtol=2e-6, atol=1e-6)
    assert got.dtype == np.float32
    if xa.size:
        sm = np.asarray(g(xa))
        e = np.exp(xa.astype(np.float64) - xa.max(dim, keepdims=True))
        np.testing.assert_allclose(sm, e / e.sum(dim, keepdims=True), rtol=3e-6, atol=1e-7)


def test_float32_row_sums_non_contiguous_and_mean():
    rng = np.random.default_rng(6)
    base = rng.standard_normal((40, 30)).astype(np.float32)
    x = eager.tensor(base).t()  # a transposed view: rows are strided
    f = graphc.compile(lambda t: (t.sum(-1), t.mean(-1)))
    s, m = f(x)
    np.testing.assert_allclose(s.numpy(), base.T.astype(np.float64).sum(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(m.numpy(), base.T.astype(np.float64).mean(-1), rtol=1e-5, atol=1e-6)
