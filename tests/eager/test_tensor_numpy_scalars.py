"""eager.tensor / eager.as_tensor of numpy scalars take the scalar's dtype, as PyTorch's
torch.tensor does (np.float64(1.5) -> float64), and lists holding numpy scalars promote
their elements' dtypes (a Python float counts as the default float dtype)."""

from __future__ import annotations

import numpy as np
import pytest

import eager

CASES = [
    (np.float64(1.5), "float64"),
    (np.float32(1.5), "float32"),
    (np.float16(1.5), "float16"),
    (np.int64(3), "int64"),
    (np.int32(3), "int32"),
    (np.int16(3), "int16"),
    (np.int8(3), "int8"),
    (np.uint8(3), "uint8"),
    (np.bool_(True), "bool"),
    (np.array(1.5), "float64"),
    (np.array(1.5, np.float32), "float32"),
    (np.array(3), "int64"),
    (np.array(True), "bool"),
    (1.5, "float32"),
    ([1.5], "float32"),
    (3, "int64"),
    ([np.float64(1.5), 2.0], "float64"),
    ((np.float64(1.0),), "float64"),
    ([np.float32(1.5), 2.0], "float32"),
    ([2.0, np.float32(1.5)], "float32"),
    ([np.int32(1), 2.5], "float32"),
    ([np.int32(1), 2], "int64"),
    ([np.int32(1), np.int32(2)], "int32"),
    ([np.int32(1), np.int64(2)], "int64"),
    ([np.float32(1), np.float64(2)], "float64"),
    ([np.int8(1), True], "int8"),
    ([np.float16(1), 1], "float16"),
    ([1, np.float16(1)], "float16"),
    ([np.uint8(1), np.int8(1)], "int16"),
    ([[np.float64(1.0)], [2.0]], "float64"),
]


def _ids(cases):
    return [f"{i}-{type(v).__name__}" for i, (v, _) in enumerate(cases)]


@pytest.mark.parametrize("data,want", CASES, ids=_ids(CASES))
def test_numpy_scalar_dtype(data, want):
    assert eager.tensor(data).dtype == getattr(eager, want)
    assert eager.as_tensor(data).dtype == getattr(eager, want)
    np.testing.assert_array_equal(eager.tensor(data).numpy(), np.array(data, dtype=want))


def test_numpy_scalar_mixed_with_tensors():
    assert eager.tensor([np.float64(1.5), eager.tensor(1.0)]).dtype == eager.float64
    assert eager.tensor([eager.tensor(1), np.float64(1.5)]).dtype == eager.float64
    assert eager.tensor([eager.tensor(1), np.int32(2)]).dtype == eager.int64


def test_numpy_scalar_with_default_dtype():
    old = eager.get_default_dtype()
    eager.set_default_dtype(eager.float64)
    try:
        assert eager.tensor(np.float32(1.5)).dtype == eager.float32
        assert eager.tensor([np.float32(1.5), 2.0]).dtype == eager.float64
        assert eager.tensor(1.5).dtype == eager.float64
    finally:
        eager.set_default_dtype(old)


def test_explicit_dtype_wins_and_full_is_unchanged():
    assert eager.tensor(np.float64(1.5), dtype=eager.float32).dtype == eager.float32
    # torch.full treats numpy scalars as Python numbers
    assert eager.full((2,), np.float64(1.5)).dtype == eager.float32
    assert eager.full((2,), np.int32(1)).dtype == eager.int64
    assert (eager.ones(2) * np.float64(2.0)).dtype == eager.float32


@pytest.mark.parametrize("data,want", CASES, ids=_ids(CASES))
def test_against_pytorch(data, want):
    torch = pytest.importorskip("torch")
    assert str(torch.tensor(data).dtype) == f"torch.{want}"
    assert str(torch.as_tensor(data).dtype) == f"torch.{want}"
