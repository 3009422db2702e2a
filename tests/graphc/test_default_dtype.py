"""eager.set_default_dtype changes what a trace would bake in (float factories, float
constants with integer tensors), so a compiled function re-traces under another default
dtype instead of returning the old dtype silently."""

from __future__ import annotations

import numpy as np
import pytest

import eager
import graphc


@pytest.fixture(autouse=True)
def _restore_default_dtype():
    yield
    eager.set_default_dtype(eager.float32)


def test_factories_inside_a_compiled_function_follow_the_default_dtype():
    f = graphc.compile(lambda x: x + eager.ones(3) * 0.5)
    x = np.arange(3)
    assert f(x).dtype == np.float32
    eager.set_default_dtype(eager.float64)
    out = f(x)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, (eager.tensor(x) + eager.ones(3) * 0.5).numpy())
    assert f.recompile_reasons[-1].endswith("default dtype (eager.set_default_dtype): "
                                            "float32 -> float64")
    eager.set_default_dtype(eager.float32)
    assert f(x).dtype == np.float32
    assert f.cache_info().traces == 2  # the float32 trace is reused


def test_tensor_arguments_and_python_floats_follow_the_default_dtype():
    g = graphc.compile(lambda t: t * 0.5)
    assert g(eager.arange(3)).dtype == eager.float32
    eager.set_default_dtype(eager.float64)
    out = g(eager.arange(3))
    assert out.dtype == eager.float64 == (eager.arange(3) * 0.5).dtype
