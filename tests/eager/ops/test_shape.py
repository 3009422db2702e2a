"""Joining, splitting and rearranging (eager): cat/stack/split/chunk/narrow/select/flip/
roll/tril/triu/repeat/tile/repeat_interleave/unflatten/movedim, F.pad and the Flatten,
Unflatten and Identity layers.  PyTorch's values, dtypes, grad_fn names and errors; the
differential tests against real PyTorch run when it is importable."""

import numpy as np
import pytest

import eager
from eager.autograd import gradcheck, gradgradcheck


def _r(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def _t(*shape, seed=0, rg=False, dtype=eager.float64):
    return eager.tensor(_r(*shape, seed=seed), dtype=dtype, requires_grad=rg)


# --- cat / stack ----------------------------------------------------------------------


def test_cat_values_grad_fn_and_gradient():
    a, b = _t(2, 3, rg=True), _t(1, 3, seed=1, rg=True)
    y = eager.cat([a, b])
    assert y.grad_fn.name() == "CatBackward0"
    np.testing.assert_array_equal(y.detach().numpy(), np.concatenate([a.detach().numpy(), b.detach().numpy()]))
    (y * eager.arange(3.0, dtype=eager.float64)).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.tile([0.0, 1.0, 2.0], (2, 1)))
    assert eager.concat is eager.cat and eager.concatenate is eager.cat


def test_cat_promotes_and_skips_legacy_empty():
    y = eager.cat([eager.ones(2, dtype=eager.int32), eager.ones(2)])
    assert y.dtype == eager.float32
    e = eager.empty(0, dtype=eager.float64, requires_grad=True)
    x = _t(2, 3, rg=True)
    y = eager.cat([e, x], 1)
    assert y.shape == (2, 3) and y.dtype == eager.float64
    y.sum().backward()
    assert e.grad.shape == (0,)
    assert eager.cat([eager.empty(0)], 5).shape == (0,)
    assert eager.cat([eager.ones(2, dtype=eager.bool), eager.ones(2, dtype=eager.int64)]).dtype == eager.int64


@pytest.mark.parametrize("args, exc, msg", [
    (([eager.ones(2, 3), eager.ones(2)],), RuntimeError, "Tensors must have same number of dimensions: got 2 and 1"),
    (([eager.ones(2, 3), eager.ones(2, 2)], 0), RuntimeError,
     "Sizes of tensors must match except in dimension 0. Expected size 3 but got size 2 for tensor number 1 in the list."),
    (([eager.ones(3, 3), eager.ones(2, 3)], 1), RuntimeError,
     "Sizes of tensors must match except in dimension 1. Expected size 3 but got size 2 for tensor number 1 in the list."),
    (([eager.ones(())],), RuntimeError, "zero-dimensional tensor (at position 0) cannot be concatenated"),
    (([],), ValueError, "expected a non-empty list of Tensors"),
    (([eager.ones(2, 3)], 2), IndexError, "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    ((eager.ones(2),), TypeError, "must be tuple of Tensors, not Tensor"),
    (([eager.ones(2), 1],), TypeError, "expected Tensor as element 1 in argument 0, but got int"),
])
def test_cat_errors(args, exc, msg):
    with pytest.raises(exc) as e:
        eager.cat(*args)
    assert msg in str(e.value)


def test_cat_many_operands_nests():
    ts = [eager.full((1,), float(i)) for i in range(2100)]
    np.testing.assert_array_equal(eager.cat(ts).numpy(), np.arange(2100.0, dtype=np.float32))


def test_cat_second_order():
    a, b = _t(2, 3, rg=True), _t(2, 2, seed=1, rg=True)
    assert gradcheck(lambda a, b: eager.cat([a, b.sin()], 1) ** 2, (a, b))
    assert gradgradcheck(lambda a, b: eager.cat([a, b.sin()], 1) ** 2, (a, b))


def test_stack():
    a, b = _t(2, 3, rg=True), _t(2, 3, seed=1, rg=True)
    y = eager.stack([a, b], -1)
    assert y.shape == (2, 3, 2) and y.grad_fn.name() == "StackBackward0"
    np.testing.assert_array_equal(y.detach().numpy(), np.stack([a.detach().numpy(), b.detach().numpy()], -1))
    assert eager.stack([eager.tensor(1.0), eager.tensor(2.0)]).shape == (2,)
    with pytest.raises(RuntimeError, match=r"stack expects each tensor to be equal size, but got \[2, 3\] at entry 0 and \[3\] at entry 1"):
        eager.stack([a, b[0]])
    with pytest.raises(RuntimeError, match="non-empty TensorList"):
        eager.stack([])
    assert gradgradcheck(lambda a, b: eager.stack([a, b * a]) ** 2, (a, b))
    assert eager.hstack([eager.ones(2), eager.ones(3)]).shape == (5,)
    assert eager.vstack([eager.ones(2), eager.ones(1, 2)]).shape == (2, 2)


# --- splitting ----------------------------------------------------------------------------


def test_split_chunk_tensor_split_shapes_and_views():
    x = _t(5, 4)
    assert [p.shape[0] for p in x.split(2)] == [2, 2, 1]
    assert [p.shape[1] for p in eager.split(x, [1, 3], dim=1)] == [1, 3]
    assert [p.shape[0] for p in x.chunk(3)] == [2, 2, 1]
    assert [p.shape[0] for p in eager.empty(0, 3).chunk(3)] == [0, 0, 0]
    assert [p.shape[0] for p in eager.empty(6).chunk(4)] == [2, 2, 2]
    assert [p.shape[0] for p in x.tensor_split(3)] == [2, 2, 1]
    assert [p.shape[0] for p in x.tensor_split([1, 4, 10])] == [1, 3, 1, 0]
    assert [p.shape[0] for p in eager.empty(0).split(0)] == [0]
    p = x.split(2)[1]
    p.fill_(7.0)  # split returns views, as in PyTorch
    assert (x.numpy()[2:4] == 7).all()


@pytest.mark.parametrize("fn, exc, msg", [
    (lambda x: x.split(0), RuntimeError, "split_size can only be 0 if dimension size is 0, but got dimension size of 2"),
    (lambda x: x.split(-1), RuntimeError, "split expects split_size be non-negative, but got split_size=-1"),
    (lambda x: x.split([1, 2]), RuntimeError, "split_with_sizes expects split_sizes to sum exactly to 2"),
    (lambda x: x.squeeze(2), IndexError, "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    (lambda x: x.chunk(0), RuntimeError, "chunk expects `chunks` to be greater than 0, got: 0"),
    (lambda x: eager.tensor(1.0).chunk(1), RuntimeError, "chunk expects at least a 1-dimensional tensor"),
    (lambda x: x.narrow(1, 4, 1), IndexError, "start out of range (expected to be in range of [-3, 3], but got 4)"),
    (lambda x: x.narrow(1, 2, 2), RuntimeError, "start (2) + length (2) exceeds dimension size (3)."),
    (lambda x: x.narrow(1, 0, -1), RuntimeError, "narrow(): length must be non-negative."),
    (lambda x: x.select(0, 5), IndexError, "select(): index 5 out of range for tensor of size [2, 3] at dimension 0"),
    (lambda x: eager.tensor(1.0).select(0, 0), IndexError, "select() cannot be applied to a 0-dim tensor."),
    (lambda x: x.movedim((0, 1), (0,)), RuntimeError, "should contain the same number of dims as destination"),
    (lambda x: x.movedim((0, 0), (0, 1)), RuntimeError, "movedim: repeated dim in `source` ([0, 0])"),
    (lambda x: x.flip(0, 0), RuntimeError, "dim 0 appears multiple times in the list of dims"),
    (lambda x: x.flip(2), IndexError, "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    (lambda x: eager.ones(3).fliplr(), RuntimeError, "Input must be >= 2-d."),
    (lambda x: x.roll((1, 2)), RuntimeError, "shifts and dimensions must align. shifts: 2, dims:0"),
    (lambda x: x.roll((1, 2), (0,)), RuntimeError, "shifts and dimensions must align. shifts: 2, dims:1"),
    (lambda x: eager.ones(3).tril(), RuntimeError, "tril: input tensor must have at least 2 dimensions"),
    (lambda x: x.repeat(2), RuntimeError, "Number of dimensions of repeat dims can not be smaller"),
    (lambda x: x.repeat(-2, 2), RuntimeError, "Trying to create tensor with negative dimension -2: [-4, 6]"),
    (lambda x: x.repeat_interleave(-1), RuntimeError, "Repeats must be non-negative"),
    (lambda x: x.repeat_interleave(eager.tensor([1, 2]), 1), RuntimeError,
     "repeats must have the same size as input along dim, but got repeats.size(0) = 2 and input.size(1) = 3"),
    (lambda x: x.unflatten(1, (2, 2)), RuntimeError,
     "unflatten: Provided sizes [2, 2] don't multiply up to the size of dim 1 (3) in the input tensor"),
    (lambda x: x.unflatten(1, ()), RuntimeError, "unflatten: sizes must be non-empty"),
    (lambda x: eager.tensor(1.0).unflatten(0, (1,)), RuntimeError, "Dimension specified as 0 but tensor has no dimensions"),
    (lambda x: x.squeeze((0, 0)), RuntimeError, "dim 0 appears multiple times"),
])
def test_errors(fn, exc, msg):
    x = eager.arange(6.0).reshape(2, 3)
    with pytest.raises(exc) as e:
        fn(x)
    assert msg in str(e.value)


def test_narrow_select_values():
    x = _t(3, 4)
    np.testing.assert_array_equal(x.narrow(1, -2, 2).numpy(), x.numpy()[:, 2:])
    np.testing.assert_array_equal(eager.select(x, 1, -1).numpy(), x.numpy()[:, -1])
    assert x.select(0, 1).grad_fn is None


# --- rearranging ----------------------------------------------------------------------------


def test_flip_copies():
    x = _t(2, 3)
    y = x.flip(0, 1)
    np.testing.assert_array_equal(y.numpy(), x.numpy()[::-1, ::-1])
    y.add_(1.0)
    np.testing.assert_array_equal(y.numpy(), x.numpy()[::-1, ::-1] + 1)  # x untouched
    z = eager.zeros(3)
    z.flip(0).fill_(1.0)
    assert (z.numpy() == 0).all()
    np.testing.assert_array_equal(x.fliplr().numpy(), x.numpy()[:, ::-1])
    np.testing.assert_array_equal(eager.flipud(x).numpy(), x.numpy()[::-1])
    assert eager.tensor(2.0).flip(()).item() == 2.0
    xr = _t(2, 3, rg=True)
    assert xr.flip(1).grad_fn.name() == "FlipBackward0"
    assert gradgradcheck(lambda a: a.flip(1) * a, (xr,))


def test_roll():
    x = _t(3, 4)
    np.testing.assert_array_equal(x.roll(1).numpy(), np.roll(x.numpy(), 1))
    np.testing.assert_array_equal(x.roll((1, -5), (0, 1)).numpy(), np.roll(x.numpy(), (1, -5), (0, 1)))
    np.testing.assert_array_equal(x.roll(0, 0).numpy(), x.numpy())
    y = x.roll(4, 1)  # a whole turn: still a copy
    y.add_(1.0)
    np.testing.assert_array_equal(y.numpy(), x.numpy() + 1)
    assert eager.empty(0, 3).roll(2, 0).shape == (0, 3)
    xr = _t(3, 4, rg=True)
    assert xr.roll(1, 0).grad_fn.name() == "RollBackward0"
    assert gradgradcheck(lambda a: a.roll((1, 2), (0, 1)) * a, (xr,))


@pytest.mark.parametrize("k", [-4, -1, 0, 1, 3, 5])
def test_tril_triu(k):
    x = _t(2, 3, 4)
    np.testing.assert_array_equal(x.tril(k).numpy(), np.tril(x.numpy(), k))
    np.testing.assert_array_equal(eager.triu(x, k).numpy(), np.triu(x.numpy(), k))
    i = eager.arange(12).reshape(3, 4)
    assert i.tril(k).dtype == eager.int64
    np.testing.assert_array_equal(i.tril(k).numpy(), np.tril(i.numpy(), k))
    b = eager.ones(3, 3, dtype=eager.bool)
    assert b.triu(k).dtype == eager.bool


def test_tril_nan_and_grad():
    x = eager.tensor([[1.0, float("nan")], [2.0, 3.0]], requires_grad=True)
    y = x.tril()
    assert y.grad_fn.name() == "TrilBackward0"
    np.testing.assert_array_equal(y.detach().numpy(), [[1.0, 0.0], [2.0, 3.0]])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[1.0, 0.0], [1.0, 1.0]])
    assert gradgradcheck(lambda a: a.triu(1) * a, (_t(3, 3, rg=True),))


def test_repeat_tile():
    x = _t(2, 3)
    np.testing.assert_array_equal(x.repeat(2, 1, 3).numpy(), np.tile(x.numpy(), (2, 1, 3)))
    np.testing.assert_array_equal(x.tile(2).numpy(), np.tile(x.numpy(), 2))
    np.testing.assert_array_equal(eager.tile(x, (2, 1, 1)).numpy(), np.tile(x.numpy(), (2, 1, 1)))
    y = eager.ones(1).repeat(3)  # a copy, never a (read-only) broadcast view
    y.add_(1.0)
    assert y.tolist() == [2.0, 2.0, 2.0]
    z = x.repeat(1, 1)
    z.add_(1.0)
    np.testing.assert_array_equal(z.numpy(), x.numpy() + 1)
    assert x.repeat(0, 2).shape == (0, 6)
    xr = _t(2, 3, rg=True)
    assert xr.repeat(2, 2).grad_fn.name() == "RepeatBackward0"
    assert gradgradcheck(lambda a: a.repeat(2, 1, 2) ** 2, (xr,))


def test_repeat_interleave():
    x = _t(2, 3)
    np.testing.assert_array_equal(x.repeat_interleave(2).numpy(), np.repeat(x.numpy(), 2))
    np.testing.assert_array_equal(x.repeat_interleave(2, dim=1).numpy(), np.repeat(x.numpy(), 2, 1))
    r = eager.tensor([1, 0, 2])
    np.testing.assert_array_equal(x.repeat_interleave(r, dim=1).numpy(), np.repeat(x.numpy(), [1, 0, 2], 1))
    np.testing.assert_array_equal(eager.repeat_interleave(r).numpy(), [0, 2, 2])
    y = x.repeat_interleave(1, 0)
    y.add_(1.0)
    np.testing.assert_array_equal(y.numpy(), x.numpy() + 1)
    assert gradgradcheck(lambda a: a.repeat_interleave(3, 0) ** 2, (_t(2, 3, rg=True),))


def test_movedim_unflatten_squeeze_swapdims():
    x = _t(2, 3, 4)
    np.testing.assert_array_equal(x.movedim(0, -1).numpy(), np.moveaxis(x.numpy(), 0, -1))
    np.testing.assert_array_equal(
        eager.moveaxis(x, (0, 1), (2, 0)).numpy(), np.moveaxis(x.numpy(), (0, 1), (2, 0))
    )
    assert x.unflatten(-1, (2, -1)).shape == (2, 3, 2, 2)
    assert x.unflatten(1, (1, 3, 1)).shape == (2, 1, 3, 1, 4)
    assert eager.ones(1, 2, 1).squeeze((0, -1)).shape == (2,)
    assert eager.ones(1, 2, 1).squeeze(-1).shape == (1, 2)
    assert eager.ones(1, 2).unsqueeze(-1).shape == (1, 2, 1)
    assert x.swapdims(0, 2).shape == (4, 3, 2) and eager.swapaxes(x, 0, 1).shape == (3, 2, 4)
    assert x.flatten(-2, -1).shape == (2, 12)


# --- against PyTorch ----------------------------------------------------------------------

CASES = [
    ("cat0", lambda m, a, b: m.cat([a, b, a[:1]], 0)),
    ("cat1", lambda m, a, b: m.cat([a, b.tanh()], -1)),
    ("stack", lambda m, a, b: m.stack([a, b], 1)),
    ("hstack", lambda m, a, b: m.hstack([a, b])),
    ("vstack", lambda m, a, b: m.vstack([a, b])),
    ("split", lambda m, a, b: a.split(2, 1)[1] * b.split([1, 3], 1)[1][:, :1]),
    ("chunk", lambda m, a, b: m.cat(a.chunk(3, 1)[::-1], 1)),
    ("tensor_split", lambda m, a, b: a.tensor_split([1, 3], 1)[1] * 2),
    ("narrow", lambda m, a, b: a.narrow(1, 1, 2) + b.narrow(0, -3, 3)[:, :2]),
    ("select", lambda m, a, b: a.select(1, 2) * b.select(1, -1)),
    ("movedim", lambda m, a, b: a.unsqueeze(0).movedim((0, 2), (2, 0))),
    ("flip", lambda m, a, b: a.flip(0, 1) * b + m.fliplr(a)),
    ("roll", lambda m, a, b: a.roll(3) + b.roll((-1, 2), (0, 1))),
    ("tril", lambda m, a, b: a.tril(-1) + b.triu(2)),
    ("repeat", lambda m, a, b: a.repeat(2, 1, 2)),
    ("tile", lambda m, a, b: a.tile(2) + m.tile(b, (1, 2))),
    ("repeat_interleave", lambda m, a, b: a.repeat_interleave(2, 1) + b.repeat_interleave(2)[:8].reshape(1, 8)),
    ("unflatten", lambda m, a, b: a.unflatten(1, (2, -1)) * 2),
]


@pytest.mark.parametrize("name, fn", CASES, ids=[c[0] for c in CASES])
def test_against_pytorch(name, fn):
    torch = pytest.importorskip("torch")
    a, b = _r(3, 4, seed=1), _r(3, 4, seed=2)
    ea, eb = (eager.tensor(v, requires_grad=True) for v in (a, b))
    ta, tb = (torch.tensor(v, requires_grad=True) for v in (a, b))
    ey, ty = fn(eager, ea, eb), fn(torch, ta, tb)
    np.testing.assert_allclose(ey.detach().numpy(), ty.detach().numpy(), rtol=1e-12)
    assert str(ey.dtype).split(".")[-1] == str(ty.dtype).split(".")[-1]
    w = _r(*ty.shape, seed=3)
    (ey * eager.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    for e, t in ((ea, ta), (eb, tb)):
        if t.grad is None:
            assert e.grad is None or not e.grad.numpy().any()
        else:
            np.testing.assert_allclose(e.grad.numpy(), t.grad.numpy(), rtol=1e-12)


# --- F.pad and the layers -----------------------------------------------------------------

PAD_CASES = [
    ((2, 3, 4), (1, 2), "constant", None),
    ((2, 3, 4), (1, 2, 0, 3), "constant", 1.5),
    ((2, 3, 4), (-1, 2, 1, -2), "constant", None),
    ((2, 3, 4), (1, 1, 1, 1, 1, 1), "constant", -2.0),
    ((2, 3, 4), (2, 3), "reflect", None),
    ((2, 3, 4), (2, 1, 1, 2), "reflect", None),
    ((1, 2, 3, 4), (1, 2, 0, 1), "reflect", None),
    ((2, 3, 4), (3, 5), "replicate", None),
    ((2, 3, 4), (1, 2, 2, 0), "replicate", None),
    ((2, 2, 3, 4), (1, 1, 1, 1, 1, 1), "replicate", None),
    ((2, 3, 4), (4, 2), "circular", None),
    ((2, 3, 4), (1, 3, 2, 1), "circular", None),
    ((2, 3, 4), (-1, 2), "replicate", None),
    ((2, 3, 4), (-1, 2), "circular", None),
]


@pytest.mark.parametrize("shape, pad, mode, value", PAD_CASES)
def test_pad_against_pytorch(shape, pad, mode, value):
    torch = pytest.importorskip("torch")
    a = _r(*shape, seed=4)
    kw = {} if value is None else {"value": value}
    e = eager.tensor(a, requires_grad=True)
    t = torch.tensor(a, requires_grad=True)
    ey = eager.nn.functional.pad(e, pad, mode=mode, **kw)
    ty = torch.nn.functional.pad(t, pad, mode=mode, **kw)
    np.testing.assert_array_equal(ey.detach().numpy(), ty.detach().numpy())
    w = _r(*ty.shape, seed=5)
    (ey * eager.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(e.grad.numpy(), t.grad.numpy(), rtol=1e-12)


def test_pad_values_dtypes_and_errors():
    F = eager.nn.functional
    x = eager.arange(6).reshape(1, 2, 3)
    y = F.pad(x, (1, 2), value=2.7)
    assert y.dtype == eager.int64 and y.tolist() == [[[2, 0, 1, 2, 2, 2], [2, 3, 4, 5, 2, 2]]]
    xr = _t(1, 2, 3, rg=True)
    assert F.pad(xr, (1, 1)).grad_fn.name() == "ConstantPadNdBackward0"
    assert F.pad(xr, (1, 1), mode="reflect").grad_fn.name() == "ReflectionPad1DBackward0"
    assert F.pad(xr, (1, 1, 1, 1), mode="replicate").grad_fn.name() == "ReplicationPad2DBackward0"
    z = F.pad(xr, (0, 0)).detach()
    z.add_(1.0)  # a copy: the input is untouched
    np.testing.assert_array_equal(z.numpy(), xr.detach().numpy() + 1)
    assert gradgradcheck(lambda a: F.pad(a, (2, 1), mode="reflect") ** 2, (xr,))
    assert gradgradcheck(lambda a: F.pad(a, (1, -1, 1, 0), value=3.0) ** 2, (xr,))
    for args, kw, exc, msg in [
        (((1,),), {}, RuntimeError, "Padding length must be divisible by 2"),
        (((1,) * 8,), {}, RuntimeError, "Padding length should be less than or equal to two times"),
        (((3, 3),), {"mode": "reflect"}, RuntimeError,
         "Padding size should be less than the corresponding input dimension, but got: padding (3, 3) at dimension 2"),
        (((1, 1),), {"mode": "reflect", "value": 1.0}, RuntimeError,
         'Padding mode "reflect" doesn\'t take in value argument'),
        (((4, 4),), {"mode": "circular"}, RuntimeError, "Padding value causes wrapping around more than once."),
        (((1, 1),), {"mode": "foo"}, NotImplementedError, "Unrecognised padding mode foo"),
        (((1,) * 6,), {"mode": "replicate"}, NotImplementedError, "Padding size 6 is not supported for 3D input tensor."),
        (((-2, -2),), {}, RuntimeError, "narrow(): length must be non-negative."),
    ]:
        with pytest.raises(exc) as e:
            F.pad(xr, *args, **kw)
        assert msg in str(e.value)
    with pytest.raises(RuntimeError, match="Expected 2D or 3D"):
        F.pad(eager.ones(2, 0, 3), (1, 1), mode="replicate")


def test_flatten_unflatten_identity_layers():
    nn = eager.nn
    assert repr(nn.Flatten()) == "Flatten(start_dim=1, end_dim=-1)"
    assert repr(nn.Unflatten(1, (2, 3))) == "Unflatten(dim=1, unflattened_size=(2, 3))"
    assert repr(nn.Identity(54, unused="x")) == "Identity()"
    x = _t(2, 3, 4)
    assert nn.Flatten()(x).shape == (2, 12)
    assert nn.Flatten(0, -2)(x).shape == (6, 4)
    assert nn.Unflatten(-1, (2, 2))(x).shape == (2, 3, 2, 2)
    assert nn.Identity()(x) is x
    s = nn.Sequential(nn.Flatten(), nn.Unflatten(1, [3, 4]), nn.Identity())
    assert s(x).shape == (2, 3, 4)
    assert "(0): Flatten(start_dim=1, end_dim=-1)" in repr(s)
    with pytest.raises(TypeError, match="unflattened_size must be tuple of ints"):
        nn.Unflatten(1, (2, 2.0))


def test_atleast_dstack_column_stack():
    assert eager.atleast_1d(eager.tensor(1.0)).shape == (1,)
    assert eager.atleast_2d(eager.ones(3)).shape == (1, 3)
    assert eager.atleast_3d(eager.ones(3)).shape == (1, 3, 1)
    assert eager.atleast_3d(eager.ones(2, 3)).shape == (2, 3, 1)
    assert [t.shape for t in eager.atleast_2d(eager.tensor(1.0), eager.ones(3))] == [(1, 1), (1, 3)]
    assert eager.dstack([eager.ones(2), eager.zeros(2)]).shape == (1, 2, 2)
    y = eager.column_stack([eager.ones(2), eager.zeros(2, 3)])
    assert y.shape == (2, 4) and y.tolist() == [[1.0, 0.0, 0.0, 0.0]] * 2
