"""Eager semantics of gather/scatter/index_select/masked_fill/one_hot/embedding/sort/topk
and the comparison utilities, errors included; differential tests against PyTorch when
it is importable."""

import math

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
from eager.autograd import gradcheck, gradgradcheck


def _t(a, **kw):
    """A tensor: Python numbers/lists as PyTorch (float32, int64), arrays keep their dtype."""
    return eager.tensor(a, **kw)


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


# --- gather / scatter --------------------------------------------------------------------


def test_gather_values_dims_and_0d():
    x = np.arange(12.0).reshape(3, 4)
    i = np.array([[0, 3, 3], [1, 0, 2]])
    got = _t(x).gather(1, _t(i))
    np.testing.assert_array_equal(got.numpy(), np.take_along_axis(x[:2], i, 1))
    np.testing.assert_array_equal(_t(x).gather(-1, _t(i)).numpy(), got.numpy())
    np.testing.assert_array_equal(eager.gather(_t(x), 0, _t([[2, 0]])).numpy(), [[8.0, 1.0]])
    assert _t(3.0).gather(0, _t(0)).item() == 3.0
    assert _t(3.0).gather(0, _t([0, 0])).tolist() == [3.0, 3.0]
    assert _t(x).gather(1, _t(np.zeros((3, 0), np.int64))).shape == (3, 0)
    assert _t(x).gather(1, _t(i).int()).dtype == eager.float64


@pytest.mark.parametrize(
    "index, err, msg",
    [
        ([[5]], RuntimeError, "index 5 is out of bounds for dimension 1 with size 4"),
        ([[-1]], RuntimeError, "index -1 is out of bounds for dimension 1 with size 4"),
        ([1], RuntimeError, "Index tensor must have the same number of dimensions as input tensor"),
        (np.zeros((4, 1), np.int64), RuntimeError, "Size does not match at dimension 0"),
        (np.zeros((1, 1)), RuntimeError, "Expected dtype int64 for index"),
    ],
)
def test_gather_errors(index, err, msg):
    x = _t(np.arange(12.0).reshape(3, 4))
    with pytest.raises(err, match=msg):
        x.gather(1, _t(index))


def test_gather_dim_out_of_range():
    with pytest.raises(IndexError, match="dimension out of range"):
        _t(np.zeros((2, 2))).gather(2, _t([[0]]))


def test_gather_gradient_is_scatter_add_and_named():
    x = _t(_rand(3, 4), requires_grad=True)
    i = _t([[0, 3, 3], [1, 0, 2]])
    y = x.gather(1, i)
    assert type(y.grad_fn).__name__ == "GatherBackward0"
    y.backward(eager.ones(2, 3))
    want = np.zeros((3, 4))
    np.add.at(want, (np.array([[0], [1]]), np.array([[0, 3, 3], [1, 0, 2]])), 1.0)
    np.testing.assert_array_equal(x.grad.numpy(), want)


def _gc(fn, *xs):
    assert gradcheck(fn, xs)
    assert gradgradcheck(fn, xs)


def test_gather_scatter_gradcheck_second_order():
    x = _t(_rand(3, 4), dtype=eager.float64, requires_grad=True)
    s = _t(_rand(3, 4, seed=1), dtype=eager.float64, requires_grad=True)
    i = _t([[0, 3, 1], [1, 0, 2]])
    _gc(lambda x: (x.gather(1, i) ** 2).sum() * x.gather(1, i), x)
    _gc(lambda x, s: x.scatter_add(1, i, s) ** 2, x, s)
    _gc(lambda x, s: x.scatter(1, i, s) ** 2, x, s)
    _gc(lambda x: x.scatter(1, i, 2.5) ** 2, x)
    _gc(lambda x: x.index_select(0, _t([2, 0, 2])) ** 2, x)


def test_scatter_forms():
    x = eager.zeros(3, 4)
    i = _t([[0, 3, 1], [1, 0, 2]])
    got = x.scatter(1, i, 2.5)
    want = np.zeros((3, 4))
    want[0, [0, 3, 1]] = 2.5
    want[1, [1, 0, 2]] = 2.5
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(x.scatter(1, i, value=2.5).numpy(), want)
    np.testing.assert_array_equal(
        eager.zeros(3, 4, dtype=eager.int64).scatter(1, i, 2.5).numpy(), (want > 0) * 2
    )
    s = _t(np.arange(6.0).reshape(2, 3), dtype=eager.float32)
    np.testing.assert_array_equal(
        x.scatter_add(1, _t([[1, 1, 1], [0, 0, 0]]), s).numpy()[:2, :2], [[0, 3], [12, 0]]
    )
    np.testing.assert_array_equal(
        x.scatter(1, i, s, reduce="add").numpy(), x.scatter_add(1, i, s).numpy()
    )
    with pytest.raises(NotImplementedError, match="reduce"):
        x.scatter(1, i, s, reduce="multiply")
    with pytest.raises(RuntimeError, match="Expected self.dtype to be equal to src.dtype"):
        x.scatter(1, i, s.double())
    with pytest.raises(RuntimeError, match="index 7 is out of bounds for dimension 1 with size 4"):
        x.scatter(1, _t([[7]]), 1.0)
    with pytest.raises(RuntimeError, match="no larger size than src"):
        x.scatter_add(1, _t([[1]]), eager.ones(1, 0))


def test_scatter_src_larger_than_index_gradient_is_zero_outside():
    s = _t(_rand(3, 3), requires_grad=True)
    y = eager.zeros(3, 4, dtype=eager.float64).scatter_add(1, _t([[1, 2]]), s)
    y.sum().backward()
    np.testing.assert_array_equal(s.grad.numpy(), [[1, 1, 0], [0, 0, 0], [0, 0, 0]])


def test_inplace_scatter_and_masked_fill():
    x = eager.zeros(2, 3)
    assert x.scatter_(1, _t([[2], [0]]), 1.0) is x
    np.testing.assert_array_equal(x.numpy(), [[0, 0, 1], [1, 0, 0]])
    x.scatter_add_(1, _t([[2], [2]]), eager.ones(2, 1))
    np.testing.assert_array_equal(x.numpy(), [[0, 0, 2], [1, 0, 1]])
    x.masked_fill_(_t([True, False, False]), -1.0)
    np.testing.assert_array_equal(x.numpy(), [[-1, 0, 2], [-1, 0, 1]])
    x.index_add_(0, _t([1, 1]), eager.ones(2, 3), alpha=2)
    np.testing.assert_array_equal(x.numpy(), [[-1, 0, 2], [3, 4, 5]])
    # recorded: a non-leaf takes the new node; a leaf that requires grad is refused
    w = _t(_rand(2, 3), requires_grad=True)
    h = w * 1
    h.masked_fill_(_t([True, False, False]), 0.0)
    assert type(h.grad_fn).__name__ == "MaskedFillBackward0"
    h.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [[0, 1, 1], [0, 1, 1]])
    with pytest.raises(RuntimeError, match="leaf Variable"):
        w.scatter_(1, _t([[0]]), 1.0)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        eager.zeros(4).masked_fill_(eager.ones(3, 4, dtype=eager.bool), 1.0)


# --- index_select / index_add / take_along_dim ---------------------------------------------


def test_index_select():
    x = _t(np.arange(12.0).reshape(3, 4), requires_grad=True)
    y = x.index_select(0, _t([2, 0, 2]))
    assert type(y.grad_fn).__name__ == "IndexSelectBackward0"
    np.testing.assert_array_equal(y.detach().numpy(), np.arange(12.0).reshape(3, 4)[[2, 0, 2]])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[:, 0], [1, 0, 2])
    np.testing.assert_array_equal(
        eager.index_select(x, -1, _t(1)).detach().numpy(), [[1.0], [5.0], [9.0]]
    )
    for bad in ([7], [-1]):
        with pytest.raises(IndexError, match="index out of range in self"):
            x.index_select(0, _t(bad))
    with pytest.raises(IndexError, match="Index is supposed to be a vector"):
        x.index_select(0, _t([[1]]))
    with pytest.raises(RuntimeError, match="Expected dtype int32 or int64 for index"):
        x.index_select(0, _t([1.0]))


def test_index_add_and_take_along_dim():
    x = eager.zeros(3, 2)
    got = x.index_add(0, _t([0, 2, 0]), _t(np.arange(6.0).reshape(3, 2), dtype=eager.float32))
    np.testing.assert_array_equal(got.numpy(), [[4, 6], [0, 0], [2, 3]])
    a = _t(np.array([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]]))
    idx = a.argsort(1)
    np.testing.assert_array_equal(eager.take_along_dim(a, idx, 1).numpy(), np.sort(a.numpy(), 1))
    np.testing.assert_array_equal(eager.take_along_dim(a, _t([5, 0])).numpy(), [4.0, 3.0])


# --- masks -------------------------------------------------------------------------------


def test_masked_fill():
    x = _t(np.arange(12.0).reshape(3, 4), dtype=eager.float32)
    m = _t([True, False, True, False])
    got = x.masked_fill(m, 1.5)
    assert got.dtype == eager.float32
    np.testing.assert_array_equal(got.numpy()[0], [1.5, 1, 1.5, 3])
    assert x.long().masked_fill(m, 1.5).numpy()[0].tolist() == [1, 1, 1, 3]
    assert x.long().masked_fill(m, _t(2.5)).numpy()[0].tolist() == [2, 1, 2, 3]
    assert x[0].masked_fill(eager.ones(3, 4, dtype=eager.bool), 1.0).shape == (3, 4)
    with pytest.raises(RuntimeError, match="only supports boolean masks"):
        x.masked_fill(m.float(), 1.0)
    with pytest.raises(RuntimeError, match="0-dimensional value tensor"):
        x.masked_fill(m, _t([1.0]))
    # a 0-d value tensor gets the gradient of the filled positions
    v = _t(2.0, requires_grad=True)
    w = _t(_rand(3, 4), requires_grad=True)
    y = w.masked_fill(m, v)
    assert type(y.grad_fn).__name__ == "MaskedFillBackward0"
    y.sum().backward()
    assert v.grad.item() == 6.0
    np.testing.assert_array_equal(w.grad.numpy()[0], [0, 1, 0, 1])


def test_masked_select_and_nonzero():
    x = _t([1.0, 2.0])
    np.testing.assert_array_equal(eager.masked_select(x, _t([[True], [False]])).numpy(), [1.0, 2.0])
    with pytest.raises(RuntimeError, match="expected BoolTensor for mask"):
        x.masked_select(_t([1, 0]))
    a = _t([[0, 1], [1, 1]])
    np.testing.assert_array_equal(eager.nonzero(a).numpy(), [[0, 1], [1, 0], [1, 1]])
    r, c = a.nonzero(as_tuple=True)
    assert r.tolist() == [0, 1, 1] and c.tolist() == [1, 0, 1]
    assert eager.nonzero(_t(5)).shape == (1, 0)
    assert [t.tolist() for t in eager.nonzero(_t(5), as_tuple=True)] == [[0]]
    assert eager.nonzero(eager.zeros(2, 3)).shape == (0, 2)
    assert eager.nonzero(a).dtype == eager.int64


# --- one_hot / embedding -----------------------------------------------------------------


def test_one_hot():
    got = F.one_hot(_t([0, 2]))
    assert got.dtype == eager.int64 and got.tolist() == [[1, 0, 0], [0, 0, 1]]
    assert F.one_hot(_t(1), 3).tolist() == [0, 1, 0]
    assert F.one_hot(_t(np.zeros(0, np.int64)), 3).shape == (0, 3)
    assert F.one_hot(_t([[1], [0]]), 2).shape == (2, 1, 2)
    for args, msg in [
        ((_t([0, 2]), 2), "Class values must be smaller than num_classes."),
        ((_t([0, -1]), 3), "Class values must be non-negative."),
        ((_t([0, 1]).int(), 3), "only applicable to index tensor of type LongTensor"),
        ((_t(np.zeros(0, np.int64)),), "Can not infer total number of classes from empty tensor."),
    ]:
        with pytest.raises(RuntimeError, match=msg):
            F.one_hot(*args)


def test_embedding_functional():
    w = _t(_rand(4, 3), requires_grad=True)
    i = _t([[1, 2], [1, 3]])
    y = F.embedding(i, w, padding_idx=1)
    np.testing.assert_array_equal(y.detach().numpy(), w.detach().numpy()[[[1, 2], [1, 3]]])
    assert type(y.grad_fn).__name__ == "EmbeddingBackward0"
    y.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy()[:, 0], [0, 0, 1, 1])  # padding row: none
    w.grad = None
    F.embedding(i, w, padding_idx=-3).sum().backward()  # -3 is row 1
    np.testing.assert_array_equal(w.grad.numpy()[:, 0], [0, 0, 1, 1])
    assert F.embedding(i.int(), w).shape == (2, 2, 3)
    with pytest.raises(IndexError, match="index out of range in self"):
        F.embedding(_t([5]), w)
    with pytest.raises(RuntimeError, match="Long, Int; but got torch.FloatTensor"):
        F.embedding(_t([1.0]), w)
    with pytest.raises(AssertionError, match="Padding_idx must be within num_embeddings"):
        F.embedding(i, w, padding_idx=4)
    with pytest.raises(NotImplementedError, match="max_norm"):
        F.embedding(i, w, max_norm=1.0)


def test_embedding_module():
    eager.manual_seed(0)
    e = nn.Embedding(10, 3, padding_idx=1)
    assert repr(e) == "Embedding(10, 3, padding_idx=1)"
    assert repr(nn.Embedding(4, 3)) == "Embedding(4, 3)"
    assert repr(nn.Embedding(4, 3, padding_idx=-1)) == "Embedding(4, 3, padding_idx=3)"
    w = e.weight.detach().numpy()
    assert (w[1] == 0).all() and e.weight.requires_grad and e.weight.shape == (10, 3)
    big = nn.Embedding(1000, 20).weight.detach().numpy()
    assert abs(big.mean()) < 0.02 and abs(big.std() - 1.0) < 0.02  # N(0, 1)
    out = e(_t([[1, 2]]))
    assert out.shape == (1, 2, 3)
    out.sum().backward()
    assert (e.weight.grad.numpy()[1] == 0).all() and (e.weight.grad.numpy()[2] == 1).all()
    assert [n for n, _ in e.named_parameters()] == ["weight"]
    pre = nn.Embedding.from_pretrained(_t([[1.0, 2.0], [3.0, 4.0]]))
    assert not pre.weight.requires_grad and pre(_t([1])).tolist() == [[3.0, 4.0]]
    assert nn.Embedding.from_pretrained(_t([[1.0]]), freeze=False).weight.requires_grad


# --- sorting -------------------------------------------------------------------------------


def test_sort_nan_ties_and_result_type():
    x = _t([3.0, math.nan, 1.0, -math.inf, 1.0, math.nan])
    s = x.sort()
    assert type(s).__name__ == "sort" and s._fields == ("values", "indices")
    assert s.indices.tolist() == [3, 2, 4, 0, 1, 5]
    d = eager.sort(x, descending=True, stable=True)
    assert d.indices.tolist() == [1, 5, 0, 2, 4, 3]
    assert repr(s).startswith("eager.return_types.sort(\nvalues=tensor(")
    assert eager.argsort(_t([2, 1, 2, 1]), stable=True, descending=True).tolist() == [0, 2, 1, 3]
    assert eager.argsort(_t([True, False])).tolist() == [1, 0]
    z = _t(3.0).sort()
    assert z.values.item() == 3.0 and z.indices.item() == 0 and z.indices.shape == ()
    assert _t(np.zeros((2, 0))).sort().values.shape == (2, 0)
    np.testing.assert_array_equal(_t(np.array([[3, 1], [0, 2]])).msort().numpy(), [[0, 1], [3, 2]])


def test_sort_and_topk_gradients():
    x = _t(_rand(3, 5), requires_grad=True)
    v = x.sort(0, descending=True).values
    assert type(v.grad_fn).__name__ == "SortBackward0"
    t = x.topk(2, dim=1)
    assert type(t.values.grad_fn).__name__ == "TopkBackward0"
    np.testing.assert_array_equal(
        t.values.detach().numpy(), -np.sort(-x.detach().numpy(), 1)[:, :2]
    )
    (t.values * _t([[1.0, 10.0]])).sum().backward()
    g = x.grad.numpy()
    assert sorted(g[0].tolist()) == [0, 0, 0, 1, 10]
    xd = _t(_rand(2, 4, seed=3), dtype=eager.float64, requires_grad=True)
    _gc(lambda x: x.sort(1).values ** 2, xd)
    _gc(lambda x: x.topk(2, 1, largest=False).values ** 2, xd)


def test_topk_semantics():
    x = _t([3.0, 1.0, math.nan, 2.0])
    assert x.topk(2).indices.tolist() == [2, 0]
    assert x.topk(2, largest=False).values.tolist() == [1.0, 2.0]
    assert eager.topk(_t(3.0), 1).values.item() == 3.0
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        _t([3.0, 1.0]).topk(5)
    assert type(x.topk(1)).__name__ == "topk"


# --- where with scalars, comparisons ---------------------------------------------------------


def test_where_with_scalars_promotes_as_pytorch():
    c = _t([True, False])
    assert eager.where(c, 0.0, _t([1, 2])).dtype == eager.float32
    assert eager.where(c, _t([1.0, 2.0]), 1).dtype == eager.float32
    assert eager.where(c, _t([1, 2]), 5).dtype == eager.int64
    assert eager.where(c, 0.0, _t([1, 2])).tolist() == [0.0, 2.0]


def test_isclose_allclose_equal():
    a = _t([1.0, math.nan, math.inf, -math.inf, 1.0])
    b = _t([1.0 + 1e-9, math.nan, math.inf, math.inf, 1.1])
    assert eager.isclose(a, b).tolist() == [True, False, True, False, False]
    assert eager.isclose(a, b, equal_nan=True).tolist() == [True, True, True, False, False]
    assert eager.isclose(a, b, atol=0.2).tolist()[-1] is True
    assert eager.isclose(_t([1, 2]), _t([1, 3])).tolist() == [True, False]
    assert eager.allclose(_t([1.0, math.nan]), _t([1.0, math.nan]), equal_nan=True) is True
    assert eager.allclose(_t([1.0]), _t([1.1])) is False
    assert eager.equal(_t([1.0, 2.0]), _t([1, 2])) is True
    assert eager.equal(_t([1.0, 2.0]), _t([1.0])) is False
    assert _t([1.0]).clip(0, 0.5).item() == 0.5 and eager.numel(eager.zeros(2, 3)) == 6
    torch = None
    try:
        import torch
    except ImportError:
        return
    a2, b2 = a.numpy(), b.numpy()
    for kw in ({}, {"equal_nan": True}, {"atol": 0.2}):
        np.testing.assert_array_equal(
            eager.isclose(a, b, **kw).numpy(),
            torch.isclose(torch.tensor(a2), torch.tensor(b2), **kw).numpy(),
        )


# --- against PyTorch -----------------------------------------------------------------------


def test_against_pytorch_values_and_gradients():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    for trial in range(20):
        shape = tuple(int(s) for s in rng.integers(1, 5, size=int(rng.integers(1, 4))))
        x = rng.standard_normal(shape)
        d = int(rng.integers(-len(shape), len(shape)))
        n = shape[d]
        ishape = tuple(int(rng.integers(0, s + 1)) for s in shape)
        ishape = (
            ishape[: d % len(shape)] + (int(rng.integers(1, 4)),) + ishape[d % len(shape) + 1 :]
        )
        idx = rng.integers(0, n, size=ishape)
        perm = np.argsort(rng.random(shape), axis=d)  # no repeated positions for scatter
        fns = {
            "gather": lambda m, x, i, p: x.gather(d, i),
            "scatter_add": lambda m, x, i, p: (x * 2).scatter_add(d, i, x.gather(d, i) * 3),
            "scatter": lambda m, x, i, p: (x * 2).scatter(d, p, x.exp()),
            "scatter_value": lambda m, x, i, p: x.scatter(
                d, p[tuple(slice(0, 1) for _ in shape)], 0.5
            ),
            "index_select": lambda m, x, i, p: x.index_select(d, i.reshape(-1)),
            "masked_fill": lambda m, x, i, p: x.masked_fill(x > 0.3, -2.0),
            "sort": lambda m, x, i, p: x.sort(dim=d, stable=True).values,
            "sort_desc": lambda m, x, i, p: x.sort(dim=d, descending=True, stable=True).values,
            "topk": lambda m, x, i, p: x.topk(min(2, n), d).values,
        }
        for name, fn in fns.items():
            outs, grads = [], []
            for m in (eager, torch):
                xt = m.tensor(x, requires_grad=True)
                it, pt = m.tensor(idx), m.tensor(perm)
                y = fn(m, xt, it, pt)
                gy = np.cos(np.arange(y.numel()).reshape(tuple(y.shape)))
                y.backward(m.tensor(gy))
                outs.append(y.detach().numpy())
                grads.append(xt.grad.numpy())
            np.testing.assert_allclose(outs[0], outs[1], rtol=1e-12, err_msg=f"{name} value")
            np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12, err_msg=f"{name} grad")


def test_against_pytorch_nn_and_sort_nan():
    torch = pytest.importorskip("torch")
    w = np.random.default_rng(1).standard_normal((6, 3))
    ids = np.array([[0, 5, 2], [2, 2, 1]])
    for pad in (None, 2, -1):
        outs = []
        for m in (eager, torch):
            wt = m.tensor(w, requires_grad=True)
            y = m.nn.functional.embedding(m.tensor(ids), wt, padding_idx=pad)
            (y * y).sum().backward()
            outs.append((y.detach().numpy(), wt.grad.numpy()))
        np.testing.assert_allclose(outs[0][0], outs[1][0])
        np.testing.assert_allclose(outs[0][1], outs[1][1])
    for n in (None, 7):
        args = () if n is None else (n,)
        a = F.one_hot(_t(ids), *args).numpy()
        b = torch.nn.functional.one_hot(torch.tensor(ids), *args).numpy()
        np.testing.assert_array_equal(a, b)
    x = np.array([[3.0, np.nan, 1.0, -np.inf, 1.0, np.nan, -0.0, 0.0]])
    for desc in (False, True):
        a = _t(x).sort(dim=1, descending=desc, stable=True)
        b = torch.tensor(x).sort(dim=1, descending=desc, stable=True)
        np.testing.assert_array_equal(a.indices.numpy(), b.indices.numpy())
        np.testing.assert_array_equal(a.values.numpy(), b.values.numpy())
        np.testing.assert_array_equal(
            _t(x).topk(3, largest=not desc).values.numpy(),
            torch.tensor(x).topk(3, largest=not desc).values.numpy(),
        )
    assert repr(nn.Embedding(4, 3, padding_idx=1)) == repr(torch.nn.Embedding(4, 3, padding_idx=1))


def test_kthvalue_and_median():
    x = _t(np.array([[3.0, np.nan, 1.0, np.nan, 2.0], [4.0, 1.0, 2.0, 3.0, 0.0]]))
    m = x.median(1)
    assert type(m).__name__ == "median"
    assert np.isnan(m.values.numpy()[0]) and m.values.numpy()[1] == 2.0
    assert m.indices.tolist() == [1, 2]  # a NaN row: the first NaN, as PyTorch
    assert np.isnan(x.median().item()) and _t([1.0, 2.0, 3.0, 4.0]).median().item() == 2.0
    assert np.isnan(eager.tensor([]).median().item())
    k = eager.kthvalue(x, 2, 1)
    assert (
        type(k).__name__ == "kthvalue"
        and k.values.tolist() == [2.0, 1.0]
        and k.indices.tolist() == [4, 1]
    )
    assert x.kthvalue(1, 0, keepdim=True).values.shape == (1, 5)
    assert _t(3.0).kthvalue(1).indices.shape == ()
    with pytest.raises(RuntimeError, match="selected number k out of range for dimension 1"):
        x.kthvalue(9, 1)
    w = _t(np.array([4.0, 1.0, 2.0, 3.0, 0.0]), requires_grad=True)
    w.median().backward()
    assert w.grad.tolist() == [0, 0, 1, 0, 0]
    with pytest.raises(RuntimeError, match="Index to scalar can have only 1 value, got 2"):
        _t(3.0).index_select(0, _t([0, 0]))
