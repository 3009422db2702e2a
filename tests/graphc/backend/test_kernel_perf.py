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


def test_erf_float32_within_one_ulp():
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
    ulp = np.abs(got.view(np.int32).astype(np.int64) - ref.view(np.int32).astype(np.int64))
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
