"""The Tensor API the seeds use, checked against numpy values and PyTorch's semantics.

Creation functions, dtype/device arguments, dtype promotion, every method and
operator the issue names (method form and module-level form), indexing and
assignment, conversions, and the error messages users see.
"""
from __future__ import annotations

import operator

import numpy as np
import pytest

import eager

A = np.array([[1.5, -2.0, 3.0], [4.0, 0.5, -6.0]], dtype=np.float32)
B = np.array([[0.5, 2.0, -1.0], [1.0, -3.0, 2.5]], dtype=np.float32)
P = np.array([[0.3, 1.2, 2.0], [0.7, 1.5, 3.0]], dtype=np.float32)     # positive


def t(a, **kw):
    return eager.tensor(a, **kw)


def close(got, want, rtol=1e-6, atol=1e-7):
    """Values and dtype of a tensor against a numpy array."""
    want = np.asarray(want)
    assert isinstance(got, eager.Tensor), type(got)
    assert got.dtype == eager._dtype.from_np(want.dtype), (got.dtype, want.dtype)
    assert tuple(got.shape) == want.shape
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got.numpy(), want)
    else:
        np.testing.assert_allclose(got.numpy(), want, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------
# creation


def test_tensor_infers_pytorch_dtypes_and_copies():
    assert t([1.0, 2.0]).dtype == eager.float32
    assert t([1, 2]).dtype == eager.int64
    assert t([True, False]).dtype == eager.bool
    assert t(2.5).shape == () and t(2.5).item() == 2.5
    assert t([[1, 2], [3, 4]]).shape == (2, 2)
    assert t(np.zeros(2, np.float64)).dtype == eager.float64    # numpy arrays keep their dtype
    src = np.array([1.0, 2.0])
    x = t(src)
    src[0] = 100
    assert x[0].item() == 1.0                                     # tensor() copies
    assert t(x).data_ptr() != x.data_ptr()


def test_tensor_constructor_forms():
    u = eager.Tensor(3, 5)
    assert u.shape == (3, 5) and u.dtype == eager.float32 and not u.requires_grad
    close(eager.Tensor([[1, 2], [3, 4]]), np.array([[1, 2], [3, 4]], np.float32))
    close(eager.Tensor([1.5]), np.array([1.5], np.float32))
    assert eager.Tensor().shape == (0,)
    assert eager.Tensor(0).shape == (0,)
    f = eager.FloatTensor(3, 3)
    assert f.shape == (3, 3) and f.dtype == eager.float32
    close(eager.FloatTensor([1, 2]), np.array([1, 2], np.float32))
    close(eager.DoubleTensor([1, 2]), np.array([1, 2], np.float64))
    assert eager.DoubleTensor(2, 4).dtype == eager.float64
    assert eager.LongTensor([1, 2]).dtype == eager.int64
    w = eager.FloatTensor(3, 3)
    w.requires_grad = True                       # the seed's way to make it require grad
    assert w.requires_grad and w.is_leaf


def test_fill_creators():
    close(eager.zeros(2, 3), np.zeros((2, 3), np.float32))
    close(eager.zeros((2, 3)), np.zeros((2, 3), np.float32))
    close(eager.ones(4), np.ones(4, np.float32))
    close(eager.ones((2, 2), dtype=eager.float64), np.ones((2, 2)))
    close(eager.zeros(2, dtype=eager.int64), np.zeros(2, np.int64))
    close(eager.full((2, 2), 4.5), np.full((2, 2), 4.5, np.float32))
    close(eager.full((3,), 7), np.full(3, 7, np.int64))
    close(eager.full((2,), 1.0, dtype=eager.float64), np.ones(2))
    x = t(A)
    close(eager.zeros_like(x), np.zeros_like(A))
    close(eager.ones_like(x), np.ones_like(A))
    close(eager.ones_like(t([1, 2])), np.ones(2, np.int64))
    close(eager.zeros_like(x, dtype=eager.float64), np.zeros((2, 3)))
    assert eager.zeros(0, 3).shape == (0, 3)
    assert eager.ones(()).shape == ()


def test_arange_and_eye():
    close(eager.arange(5), np.arange(5))
    close(eager.arange(2, 11, 3), np.arange(2, 11, 3))
    close(eager.arange(0, 1, 0.25), np.arange(0, 1, 0.25, dtype=np.float32))
    close(eager.arange(4, dtype=eager.float64), np.arange(4, dtype=np.float64))
    close(eager.eye(3), np.eye(3, dtype=np.float32))
    close(eager.eye(2, 3), np.eye(2, 3, dtype=np.float32))


def test_random_creators_and_manual_seed():
    eager.manual_seed(7)
    a = eager.randn(3, 4)
    b = eager.rand((2, 5))
    eager.manual_seed(7)
    np.testing.assert_array_equal(eager.randn(3, 4).numpy(), a.numpy())
    np.testing.assert_array_equal(eager.rand((2, 5)).numpy(), b.numpy())
    assert not np.array_equal(eager.randn(3, 4).numpy(), a.numpy())   # the stream moves on
    assert a.shape == (3, 4) and a.dtype == eager.float32
    assert b.shape == (2, 5) and ((b.numpy() >= 0) & (b.numpy() < 1)).all()
    assert eager.randn(2, dtype=eager.float64).dtype == eager.float64
    r = eager.randn((3, 3), requires_grad=True)
    assert r.requires_grad and r.is_leaf and r.grad is None
    big = eager.randn(20000).numpy()
    assert abs(big.mean()) < 0.05 and abs(big.std() - 1) < 0.05


def test_from_numpy_shares_memory_and_numpy_too():
    arr = np.zeros(3, np.float64)
    x = eager.from_numpy(arr)
    assert x.dtype == eager.float64
    arr[0] = 5.0
    x[1] = 7.0
    np.testing.assert_array_equal(arr, [5.0, 7.0, 0.0])
    np.testing.assert_array_equal(x.numpy(), [5.0, 7.0, 0.0])
    y = t([1.0, 2.0])
    y.numpy()[0] = 9.0
    assert y[0].item() == 9.0
    with pytest.raises(TypeError):
        eager.from_numpy([1, 2])


# ---------------------------------------------------------------------------
# dtype= and device=


@pytest.mark.parametrize("dtype, np_dtype", [
    (eager.float32, np.float32), (eager.float64, np.float64), (eager.float, np.float32),
    (eager.double, np.float64), (eager.int64, np.int64), (eager.long, np.int64),
    (eager.int32, np.int32), (eager.bool, np.bool_), (eager.float16, np.float16),
])
def test_dtype_argument(dtype, np_dtype):
    x = t([1, 0, 2], dtype=dtype)
    assert x.dtype == dtype and x.numpy().dtype == np_dtype
    assert eager.zeros(2, dtype=dtype).dtype == dtype
    assert eager.ones(2, 2, dtype=dtype).numpy().dtype == np_dtype


@pytest.mark.parametrize("bad", ["complex64", "foo", 5, np.complex128, object])
def test_bad_dtype_argument(bad):
    with pytest.raises(TypeError, match="dtype"):
        t([1.0], dtype=bad)
    with pytest.raises(TypeError, match="dtype"):
        eager.zeros(2, dtype=bad)


@pytest.mark.parametrize("dev", ["cpu", eager.device("cpu"), "cpu:0", None])
def test_device_cpu(dev):
    x = eager.ones(2, device=dev)
    assert x.device == eager.device("cpu")
    assert x.device.type == "cpu" and repr(x.device) == "device(type='cpu')"
    assert t([1.0], device=dev).device == "cpu"
    assert eager.zeros(2, device=dev).to(dev).shape == (2,)


@pytest.mark.parametrize("make", [
    lambda: t([1.0], device="cuda"),
    lambda: eager.zeros(2, device="cuda"),
    lambda: eager.randn(2, device="cuda:0"),
    lambda: eager.Tensor(2, device="cuda"),
    lambda: eager.ones(2, device=eager.device("cuda")),  # the name constructs, as in PyTorch
    lambda: eager.ones(2).to("cuda"),
    lambda: eager.ones(2).to(device="mps"),
])
def test_bad_device_is_a_clear_error(make):
    with pytest.raises(RuntimeError, match="CPU only.*not available"):
        make()


# ---------------------------------------------------------------------------
# dtype promotion


f32 = lambda: t([1.5, 2.0])                           # noqa: E731
f64 = lambda: t([1.5, 2.0], dtype=eager.float64)      # noqa: E731
i64 = lambda: t([1, 2])                               # noqa: E731
i32 = lambda: t([1, 2], dtype=eager.int32)            # noqa: E731
bl = lambda: t([True, False])                         # noqa: E731


@pytest.mark.parametrize("expr, dtype", [
    (lambda: f32() * 2.0, eager.float32),
    (lambda: 2.0 * f32(), eager.float32),
    (lambda: f32() * 2, eager.float32),
    (lambda: f64() * 2.0, eager.float64),
    (lambda: i64() + 2.5, eager.float32),
    (lambda: 2.5 + i64(), eager.float32),
    (lambda: i64() * 2.5, eager.float32),
    (lambda: i64() - 0.5, eager.float32),
    (lambda: i64() + 2, eager.int64),
    (lambda: i32() + 2, eager.int32),
    (lambda: i64() + f32(), eager.float32),
    (lambda: f32() + i64(), eager.float32),
    (lambda: i32() + i64(), eager.int64),
    (lambda: f32() + f64(), eager.float64),
    (lambda: f64() * f32(), eager.float64),
    (lambda: i64() / 2, eager.float32),
    (lambda: i64() / i64(), eager.float32),
    (lambda: i64() ** 2, eager.int64),
    (lambda: bl() + 1, eager.int64),
    (lambda: f32() > 1, eager.bool),
    (lambda: i64() == 2, eager.bool),
    (lambda: f32() <= f64(), eager.bool),
    (lambda: i64() < 1.5, eager.bool),
    (lambda: f32().maximum(f64()), eager.float64),
    (lambda: eager.where(bl(), i64(), 2.5), eager.float32),
    (lambda: eager.where(bl(), f32(), 0.0), eager.float32),
    (lambda: i64().float(), eager.float32),
    (lambda: f32().double(), eager.float64),
    (lambda: i64().exp(), eager.float32),
    (lambda: i64().sum(), eager.int64),
    (lambda: bl().sum(), eager.int64),
])
def test_dtype_promotion(expr, dtype):
    assert expr().dtype == dtype


def test_promotion_values():
    close(i64() + 2.5, np.array([3.5, 4.5], np.float32))
    close(i64() / 2, np.array([0.5, 1.0], np.float32))
    close(i64().clamp(min=1.5), np.array([1.5, 2.0], np.float32))
    close(i64().clamp(min=2), np.array([2, 2], np.int64))


# ---------------------------------------------------------------------------
# operators and methods against numpy


BINARY_OPS = [
    ("add", operator.add, np.add),
    ("sub", operator.sub, np.subtract),
    ("mul", operator.mul, np.multiply),
    ("truediv", operator.truediv, np.true_divide),
    ("lt", operator.lt, np.less),
    ("le", operator.le, np.less_equal),
    ("gt", operator.gt, np.greater),
    ("ge", operator.ge, np.greater_equal),
    ("eq", operator.eq, np.equal),
    ("ne", operator.ne, np.not_equal),
]


@pytest.mark.parametrize("name, op, ref", BINARY_OPS, ids=[b[0] for b in BINARY_OPS])
def test_binary_operators(name, op, ref):
    x, y = t(A), t(B)
    close(op(x, y), ref(A, B))                               # tensor, tensor
    close(op(x, 2.0), ref(A, np.float32(2.0)))               # tensor, python float
    close(op(x, 3), ref(A, np.float32(3)))                   # tensor, python int
    close(op(2.0, x), ref(np.float32(2.0), A))               # reflected
    close(op(x, t(B[1])), ref(A, B[1]))                      # broadcasting
    close(op(x, t(np.float32(0.5))), ref(A, np.float32(0.5)))  # 0-d tensor


def test_pow_forms():
    x = t(P)
    close(x ** 2, P ** 2)
    close(x.pow(2), P ** 2)
    close(x ** 0.5, P ** 0.5, rtol=1e-6)
    close(x.pow(t(B)), P ** B, rtol=1e-5)
    close(2 ** x, np.float32(2) ** P, rtol=1e-6)
    close(eager.pow(x, 3), P ** 3, rtol=1e-6)


def test_matmul_forms():
    a, b = np.float32(np.arange(6).reshape(2, 3)), np.float32(np.arange(12).reshape(3, 4))
    v = np.float32([1.0, -1.0, 2.0])
    close(t(a) @ t(b), a @ b)
    close(t(a).mm(t(b)), a @ b)
    close(t(a).matmul(t(b)), a @ b)
    close(eager.matmul(t(a), t(b)), a @ b)
    close(eager.mm(t(a), t(b)), a @ b)
    close(t(a) @ t(v), a @ v)
    close(t(v) @ t(v), np.float32(v @ v))
    close(t(v) @ t(b), v @ b)
    batch = np.float32(np.random.default_rng(0).standard_normal((2, 2, 3)))
    close(t(batch) @ t(b), batch @ b, rtol=1e-5, atol=1e-6)
    close(t(v).dot(t(v)), np.float32(v @ v))


UNARY = [
    ("neg", lambda x: -x, np.negative, A),
    ("abs", lambda x: x.abs(), np.abs, A),
    ("builtin_abs", lambda x: abs(x), np.abs, A),
    ("exp", lambda x: x.exp(), np.exp, A),
    ("log", lambda x: x.log(), np.log, P),
    ("sqrt", lambda x: x.sqrt(), np.sqrt, P),
    ("sin", lambda x: x.sin(), np.sin, A),
    ("cos", lambda x: x.cos(), np.cos, A),
    ("tanh", lambda x: x.tanh(), np.tanh, A),
    ("sigmoid", lambda x: x.sigmoid(), lambda a: 1 / (1 + np.exp(-a)), A),
    ("relu", lambda x: x.relu(), lambda a: np.maximum(a, 0), A),
    ("clamp", lambda x: x.clamp(-1, 2), lambda a: np.clip(a, -1, 2), A),
    ("clamp_min", lambda x: x.clamp(min=0), lambda a: np.maximum(a, 0), A),
    ("clamp_max", lambda x: x.clamp(max=0.5), lambda a: np.minimum(a, 0.5), A),
    ("clone", lambda x: x.clone(), np.copy, A),
]


@pytest.mark.parametrize("name, method, ref, data", UNARY, ids=[u[0] for u in UNARY])
def test_unary_methods(name, method, ref, data):
    close(method(t(data)), ref(data).astype(np.float32), rtol=1e-6)
    close(method(t(data, dtype=eager.float64)), ref(data.astype(np.float64)), rtol=1e-12)
    close(method(t(np.float32(0.25))), ref(np.float32(0.25)).astype(np.float32))   # 0-d


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "relu",
                                  "abs", "neg", "clone"])
def test_module_level_unary(name):
    x = t(P)
    close(getattr(eager, name)(x), getattr(x, name)().numpy())


def test_module_level_functions():
    x, y = t(A), t(B)
    close(eager.where(x > 0, x, y), np.where(A > 0, A, B))
    close(eager.where(x > 0, x, 0.0), np.where(A > 0, A, np.float32(0)))
    close(eager.maximum(x, y), np.maximum(A, B))
    close(eager.minimum(x, y), np.minimum(A, B))
    close(eager.add(x, y), A + B)
    close(eager.mul(x, 2), A * 2)
    close(eager.sum(x), np.float32(A.sum()))
    close(eager.sum(x, 1), A.sum(1))
    close(eager.mean(x, 0, keepdim=True), A.mean(0, keepdims=True))
    close(eager.max(x), np.float32(A.max()))
    close(eager.max(x, 1).values, A.max(1))
    close(eager.max(x, y), np.maximum(A, B))
    close(eager.min(x, 0).indices, A.argmin(0))
    close(eager.argmax(x), np.int64(A.argmax()))
    close(eager.clamp(x, min=0), np.maximum(A, 0))
    close(eager.reshape(x, (3, 2)), A.reshape(3, 2))
    close(eager.transpose(x, 0, 1), A.T)
    close(eager.t(x), A.T)
    close(eager.flatten(x), A.reshape(-1))
    close(eager.unsqueeze(x, 0), A[None])
    close(eager.squeeze(t(A[None])), A)
    close(eager.eq(x, x), np.ones_like(A, bool))
    close(eager.all(x == x), np.bool_(True))
    close(eager.any(x > 100), np.bool_(False))


def test_where_method_and_forms():
    x, y = t(A), t(B)
    close(x.where(x > 0, y), np.where(A > 0, A, B))
    close(x.where(x > 0, 0.0), np.where(A > 0, A, 0).astype(np.float32))
    close(eager.where(x > 0, 1.0, 0.0), np.where(A > 0, 1, 0).astype(np.float32))
    close(eager.where(t(A[0]) > 0, x, y), np.where(A[0] > 0, A, B))       # broadcast condition


def test_maximum_method():
    x, y = t(A), t(B)
    close(x.maximum(y), np.maximum(A, B))
    close(x.maximum(t(np.float32(0.0))), np.maximum(A, 0))
    close(x.minimum(y), np.minimum(A, B))


def test_reductions():
    x = t(A)
    close(x.sum(), np.float32(A.sum()))
    close(x.sum(0), A.sum(0))
    close(x.sum(1, keepdim=True), A.sum(1, keepdims=True))
    close(x.sum(dim=-1), A.sum(-1))
    close(x.sum((0, 1)), np.float32(A.sum()))
    close(x.mean(), np.float32(A.mean()))
    close(x.mean(1), A.mean(1))
    close(x.mean(0, keepdim=True), A.mean(0, keepdims=True))
    close(t([1, 2, 3]).sum(), np.int64(6))
    close((x > 0).sum(), np.int64(4))
    close(eager.zeros(0, 3).sum(0), np.zeros(3, np.float32))


def test_max_min_argmax():
    x = t(A)
    close(x.max(), np.float32(A.max()))
    close(x.min(), np.float32(A.min()))
    values, indices = x.max(1)
    close(values, A.max(1))
    close(indices, A.argmax(1))
    r = x.max(dim=0, keepdim=True)
    close(r.values, A.max(0, keepdims=True))
    close(r.indices, A.argmax(0)[None])
    r = x.min(1)
    close(r[0], A.min(1))
    close(r[1], A.argmin(1))
    close(x.argmax(), np.int64(A.argmax()))
    close(x.argmax(1), A.argmax(1))
    close(x.argmax(0, keepdim=True), A.argmax(0)[None])
    close(x.argmin(), np.int64(A.argmin()))
    with pytest.raises(RuntimeError, match="Expected reduction dim to be specified"):
        eager.zeros(0, 3).max()


def test_all_any_eq():
    x = t(A)
    close(x.eq(x), np.ones_like(A, bool))
    close(x.eq(t(B)), A == B)
    close(x.eq(3.0), A == 3)
    close((x > 0).all(), np.bool_(False))
    close((x > -10).all(), np.bool_(True))
    close((x > 0).any(), np.bool_(True))
    close((x > 0).all(1), (A > 0).all(1))
    close((x > 0).any(0), (A > 0).any(0))
    close((x > 0).any(dim=1, keepdim=True), (A > 0).any(1, keepdims=True))
    assert bool(x.eq(x).all()) and not bool((x > 100).any())


# ---------------------------------------------------------------------------
# movement


def test_transpose_family():
    x = t(A)
    close(x.t(), A.T)
    close(x.T, A.T)
    close(x.transpose(0, 1), A.T)
    close(x.transpose(-1, 0), A.T)
    c = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    close(t(c).transpose(0, 2), c.transpose(2, 1, 0))
    close(t(c).permute(1, 2, 0), c.transpose(1, 2, 0))
    close(t(A[0]).t(), A[0])                                     # t() of 1-D is itself
    with pytest.raises(RuntimeError, match="t\\(\\) expects a tensor with <= 2 dimensions"):
        t(c).t()


def test_reshape_view_flatten():
    x = t(A)
    close(x.reshape(3, 2), A.reshape(3, 2))
    close(x.reshape((6,)), A.reshape(6))
    close(x.reshape(-1, 2), A.reshape(-1, 2))
    close(x.view(3, 2), A.reshape(3, 2))
    close(x.view(-1), A.reshape(-1))
    close(x.flatten(), A.reshape(-1))
    c = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    close(t(c).flatten(1), c.reshape(2, 12))
    close(t(c).flatten(0, 1), c.reshape(6, 4))
    close(t(np.float32(2.0)).flatten(), np.float32([2.0]))
    close(t(np.float32(2.0)).reshape(1, 1), np.float32([[2.0]]))


def test_unsqueeze_squeeze_expand():
    x = t(A)
    assert x.unsqueeze(0).shape == (1, 2, 3)
    assert x.unsqueeze(-1).shape == (2, 3, 1)
    assert x.unsqueeze(1).shape == (2, 1, 3)
    y = t(A.reshape(1, 2, 1, 3))
    close(y.squeeze(), A)
    assert y.squeeze(0).shape == (2, 1, 3)
    assert y.squeeze(1).shape == (1, 2, 1, 3)                   # not size 1: unchanged
    assert y.squeeze(-2).shape == (1, 2, 3)
    col = t(np.float32([[1.0], [2.0]]))
    close(col.expand(2, 3), np.broadcast_to(np.float32([[1.0], [2.0]]), (2, 3)))
    close(col.expand(-1, 3), np.broadcast_to(np.float32([[1.0], [2.0]]), (2, 3)))
    close(col.expand(4, 2, 3), np.broadcast_to(np.float32([[1.0], [2.0]]), (4, 2, 3)))
    with pytest.raises(RuntimeError, match="expand"):
        col.expand(3, 3)


# ---------------------------------------------------------------------------
# indexing and assignment


@pytest.mark.parametrize("key", [
    0, -1, (1, 2), (0, -1), slice(None), slice(1, None), (slice(None), 1), (Ellipsis, 0),
    (slice(None), slice(None, None, 2)), None, (None, 0), [1, 0, 1], ([0, 1], [2, 0]),
    (slice(None), [0, 2]),
], ids=str)
def test_getitem_matches_numpy(key):
    close(t(A)[key], np.asarray(A[key]))


def test_getitem_masks_and_index_tensors():
    x = t(A)
    close(x[x > 0], A[A > 0])
    close(x[t(A[:, 0] > 2)], A[A[:, 0] > 2])
    close(x[t([1, 0])], A[[1, 0]])
    close(x[:, t([2, 2, 0])], A[:, [2, 2, 0]])
    close(x[x > 100], A[A > 100])                                 # empty selection
    assert x[1, 2].item() == -6.0 and x[1, 2].shape == ()


# PyTorch 2.x (torch oracle, run once): a 0-d bool index is an advanced index that adds
# a dim of size 1 (True) or 0 (False), broadcast with the other advanced indices
ZERO_D_BOOL_SHAPES = {
    "b": {True: (1, 2, 3), False: (0, 2, 3)},
    "b, 1": {True: (1, 3), False: (0, 3)},
    "1, b": {True: (1, 3), False: (0, 3)},
    "b, None": {True: (1, 1, 2, 3), False: (0, 1, 2, 3)},
    "..., b": {True: (2, 3, 1), False: (2, 3, 0)},
    "None, b": {True: (1, 1, 2, 3), False: (1, 0, 2, 3)},
    "b, b": {True: (1, 2, 3), False: (0, 2, 3)},
    "b, [0]": {True: (1, 3), False: (0, 3)},
    ":, b, [0, 2]": {True: (2, 2), False: IndexError},      # shapes [0] and [2]
    "[[0], [1]], b, [0, 2]": {True: (2, 2), False: IndexError},
}


@pytest.mark.parametrize("key", list(ZERO_D_BOOL_SHAPES))
@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize("kind", ["tensor", "python", "numpy"])
def test_getitem_zero_d_bool_matches_torch(key, value, kind):
    x = eager.arange(6.0).reshape(2, 3).requires_grad_()
    b = {"tensor": eager.tensor(value), "python": value, "numpy": np.array(value)}[kind]
    want = ZERO_D_BOOL_SHAPES[key][value]
    if want is IndexError:
        with pytest.raises(IndexError, match="shape mismatch: indexing"):
            eval(f"x[{key}]", {"x": x, "b": b})
        return
    y = eval(f"x[{key}]", {"x": x, "b": b})
    assert tuple(y.shape) == want
    ids = np.arange(6).reshape(2, 3)
    picked = eval(f"ids[{key}]", {"ids": ids, "b": value})
    close(y.detach(), picked.astype(np.float32))
    (y * 2).sum().backward()           # 2 for every time an element was picked
    close(x.grad, 2 * np.bincount(picked.ravel(), minlength=6).reshape(2, 3).astype(np.float32))


def test_setitem_like_the_seed():
    h = t(A)
    grad_h = t(B).clone()
    grad_h[h < 0] = 0
    want = B.copy()
    want[A < 0] = 0
    close(grad_h, want)
    z = eager.zeros(3, 4)
    z[0] = 1.0
    z[1, 2] = 5
    z[:, 3] = t(np.float32([7, 8, 9]))
    z[2, :2] = t(np.float32([[3, 4]]))[0]
    ref = np.zeros((3, 4), np.float32)
    ref[0] = 1
    ref[1, 2] = 5
    ref[:, 3] = [7, 8, 9]
    ref[2, :2] = [3, 4]
    close(z, ref)
    z[t([0, 2])] = -1.0
    ref[[0, 2]] = -1
    close(z, ref)


def test_clone_is_independent():
    x = t(A)
    c = x.clone()
    c[0, 0] = 100.0
    assert x[0, 0].item() == 1.5 and c[0, 0].item() == 100.0


# ---------------------------------------------------------------------------
# conversions and attributes


def test_scalar_and_list_conversions():
    x = t(A)
    assert x[0, 0].item() == 1.5 and isinstance(x[0, 0].item(), float)
    assert isinstance(t([3]).item(), int) and t([3]).item() == 3
    assert t(True).item() is True
    assert x.tolist() == A.tolist()
    assert t(2.5).tolist() == 2.5
    assert float(t(2.5)) == 2.5 and int(t(7)) == 7
    np.testing.assert_array_equal(x.numpy(), A)
    assert isinstance(x.numpy(), np.ndarray)
    with pytest.raises(RuntimeError,
                       match="a Tensor with 6 elements cannot be converted to Scalar"):
        x.item()
    with pytest.raises(RuntimeError, match="detach\\(\\).numpy\\(\\)"):
        eager.ones(2, requires_grad=True).numpy()


def test_shape_size_dim_numel_dtype_device():
    x = t(np.zeros((2, 3, 4), np.float32))
    assert x.shape == (2, 3, 4) and x.shape == eager.Size([2, 3, 4])
    assert isinstance(x.shape, tuple) and repr(x.shape) == "eager.Size([2, 3, 4])"
    assert x.size() == (2, 3, 4) and x.size(1) == 3 and x.size(-1) == 4
    assert x.dim() == 3 and x.ndim == 3
    assert x.numel() == 24 and t(1.0).numel() == 1 and eager.zeros(0, 5).numel() == 0
    assert x.dtype == eager.float32 and repr(x.dtype) == "eager.float32"
    assert x.device == eager.device("cpu") and x.device.type == "cpu"
    assert t(1.0).dim() == 0 and t(1.0).shape == ()


def test_float_double_conversions():
    i = t([1, 2])
    close(i.float(), np.float32([1, 2]))
    close(i.double(), np.float64([1, 2]))
    close(t(A).double(), A.astype(np.float64))
    close(t(A).double().float(), A)
    close(t(A).to(eager.float64), A.astype(np.float64))
    x = t(A)
    assert x.float() is x                                # no-op conversion returns self


# ---------------------------------------------------------------------------
# errors users see


def test_add_shape_mismatch_names_both_shapes():
    with pytest.raises(RuntimeError) as exc:
        t(A) + t(np.zeros(2, np.float32))
    msg = str(exc.value)
    assert "[2, 3]" in msg and "[2]" in msg
    assert "must match the size of tensor b (2) at non-singleton dimension 1" in msg
    with pytest.raises(RuntimeError, match=r"\[2, 3\].*\[4, 3\]"):
        t(A) * t(np.zeros((4, 3), np.float32))


def test_mm_shape_mismatch_message():
    with pytest.raises(RuntimeError,
                       match=r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)"):
        eager.ones(2, 3).mm(eager.ones(4, 5))
    with pytest.raises(RuntimeError, match=r"\(2x3 and 4x5\)"):
        eager.ones(2, 3) @ eager.ones(4, 5)
    with pytest.raises(RuntimeError, match="2-D"):
        eager.ones(2, 3).mm(eager.ones(3))
    with pytest.raises(RuntimeError, match="at least 1 dimension"):
        eager.ones(()) @ eager.ones(3)


@pytest.mark.parametrize("shape", [(4, 2), (5,), (-1, 4), (-1, -1), (7, -1)])
def test_bad_reshape(shape):
    with pytest.raises(RuntimeError, match="invalid for input of size 6|only one dimension"):
        t(A).reshape(*shape)
    with pytest.raises(RuntimeError):
        t(A).view(shape)


def test_other_errors():
    with pytest.raises(RuntimeError, match="only Tensors of floating point dtype"):
        t([1, 2], requires_grad=True)
    with pytest.raises(IndexError, match="out of range"):
        t(A).sum(2)
    with pytest.raises(IndexError):
        t(A)[5]
    with pytest.raises(RuntimeError, match="clamp"):
        t(A).clamp()
    with pytest.raises(RuntimeError, match="mean\\(\\)"):
        t([1, 2]).mean()
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(t(A))


# ---------------------------------------------------------------------------
# the methods above also carry gradients (spot checks against numpy derivatives)


def test_method_gradients_spot_checks():
    a = A.astype(np.float64)
    x = eager.tensor(a, dtype=eager.float64, requires_grad=True)
    (x.sigmoid() * x.tanh() + x.clamp(-1, 2) + x.abs()).sum().backward()
    s = 1 / (1 + np.exp(-a))
    want = (s * (1 - s) * np.tanh(a) + s * (1 - np.tanh(a) ** 2)
            + ((a >= -1) & (a <= 2)) + np.sign(a))
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-12)
    x.grad = None
    v, _ = x.max(1)
    v.sum().backward()
    want = np.zeros_like(a)
    want[np.arange(2), a.argmax(1)] = 1
    np.testing.assert_allclose(x.grad.numpy(), want)
    x.grad = None
    x[x > 0].sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), (a > 0).astype(np.float64))


@pytest.mark.parametrize("requires_grad", [False, True])
def test_setitem_errors_have_torchs_types(requires_grad):
    """PyTorch: IndexError for a bad index (mask shape, out of range), RuntimeError for a
    value that does not broadcast; eager gave RuntimeError, or ValueError when recording."""
    y = eager.ones(3, 3, requires_grad=requires_grad) * 1
    for key in (t([True, False]), 5, t([5])):
        with pytest.raises(IndexError, match="index"):
            y[key] = 0.0
    with pytest.raises(RuntimeError, match="could not broadcast"):
        y[0] = eager.ones(4)


def test_size_pickles_under_its_public_name_and_old_pickles_load():
    import pickle

    s = eager.zeros(2, 3).shape
    data = pickle.dumps(s, protocol=0)
    assert b"eager\nSize" in data and b"_operands" not in data
    assert pickle.loads(data) == (2, 3) and type(pickle.loads(data)) is type(s)
    old = data.replace(b"ceager\nSize", b"ceager._surface\nSize")   # as earlier versions wrote it
    assert old != data and pickle.loads(old) == (2, 3)
