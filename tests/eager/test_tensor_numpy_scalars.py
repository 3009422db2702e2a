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


# a numpy bool scalar stored into an integer tensor from Python data: PyTorch raises
# TypeError (numpy's "'numpy.bool' object cannot be interpreted as an integer": it stores
# each element through __index__); into a float, bool or int-free tensor it is taken
NP_BOOL_REFUSED = [
    ([np.bool_(True), 1], {}),
    ([1, np.bool_(True)], {}),
    ([np.bool_(True), np.int64(2)], {}),
    ([[np.bool_(False)], [2]], {}),
    ([np.bool_(True)], dict(dtype="int64")),
    ([np.bool_(True), 1.5], dict(dtype="int64")),
    ([np.bool_(True)], dict(dtype="int32")),
    ([np.bool_(True)], dict(dtype="uint8")),
    (np.bool_(True), dict(dtype="int64")),
]
NP_BOOL_TAKEN = [
    ([np.bool_(True), 1.5], {}, "float32"),
    ([np.bool_(True), 1], dict(dtype="float32"), "float32"),
    ([np.bool_(True), 1], dict(dtype="bool"), "bool"),
    ([np.bool_(True), False], {}, "bool"),
    ([np.bool_(True), np.float32(2)], {}, "float32"),
    ([True, 1], {}, "int64"),  # a Python bool is an int
    ([True, np.int64(2)], {}, "int64"),
    (np.array([True, False]), dict(dtype="int64"), "int64"),  # an array, not Python data
]


def _kw(lib, kw):
    return {k: getattr(lib, v) for k, v in kw.items()}


@pytest.mark.parametrize("data,kw", NP_BOOL_REFUSED)
def test_numpy_bool_into_integer_tensor_refused(data, kw):
    msg = "'numpy.bool' object cannot be interpreted as an integer"
    with pytest.raises(TypeError, match=msg):
        eager.tensor(data, **_kw(eager, kw))
    with pytest.raises(TypeError, match=msg):
        eager.as_tensor(data, **_kw(eager, kw))
    if isinstance(data, list) and not kw:
        with pytest.raises(TypeError, match=msg):
            eager.LongTensor(data)


@pytest.mark.parametrize("data,kw,want", NP_BOOL_TAKEN)
def test_numpy_bool_taken(data, kw, want):
    t = eager.tensor(data, **_kw(eager, kw))
    assert t.dtype == getattr(eager, want)
    np.testing.assert_array_equal(t.numpy(), np.array(data, dtype=want))


@pytest.mark.parametrize("data,kw", NP_BOOL_REFUSED)
def test_numpy_bool_into_integer_tensor_against_pytorch(data, kw):
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError) as te:
        torch.tensor(data, **_kw(torch, kw))
    with pytest.raises(TypeError) as ee:
        eager.tensor(data, **_kw(eager, kw))
    assert str(ee.value) == str(te.value)


@pytest.mark.parametrize("data,kw,want", NP_BOOL_TAKEN)
def test_numpy_bool_taken_against_pytorch(data, kw, want):
    torch = pytest.importorskip("torch")
    t = torch.tensor(data, **_kw(torch, kw))
    assert str(t.dtype) == f"torch.{want}"
    np.testing.assert_array_equal(eager.tensor(data, **_kw(eager, kw)).numpy(), t.numpy())
