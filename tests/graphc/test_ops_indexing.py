"""gather/scatter/index_select/embedding/one_hot/masked_fill/sort/topk compiled: native
code (and the interpreter) == eager, values and gradients (first and second order);
out-of-range indices are an error at run time and never an out-of-bounds access; the
data-dependent ops refuse to compile with a clear error."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import eager
import eager.nn.functional as F
import graphc
from graphc.errors import GraphcError

CONFIGS = ({}, {"opt_level": 0}, {"backend": "interpreter"})


def _eager(fn, *arrays):
    out = fn(*[eager.tensor(a.copy()) for a in arrays])
    outs = out if isinstance(out, tuple) else (out,)
    return [o.detach().numpy() for o in outs]


def _same(fn, *arrays, rtol=1e-13):
    want = _eager(fn, *arrays)
    for cfg in CONFIGS:
        got = graphc.compile(fn, **cfg)(*[a.copy() for a in arrays])
        got = got if isinstance(got, tuple) else (got,)
        for w, g in zip(want, got):
            assert np.asarray(g).dtype == w.dtype and np.asarray(g).shape == w.shape, cfg
            if rtol and w.dtype.kind == "f":  # sums and vector math round differently
                np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-14, err_msg=str(cfg))
            else:
                np.testing.assert_array_equal(g, w, err_msg=str(cfg))


def _eager_grad(fn, x, *rest):
    xt = eager.tensor(x.copy(), requires_grad=True)
    fn(xt, *[eager.tensor(r) for r in rest]).backward()
    return xt.grad.numpy()


def _same_grad(fn, x, *rest):
    want = _eager_grad(fn, x, *rest)
    got = graphc.grad(fn)(x.copy(), *rest)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)
    got = graphc.compile(graphc.grad(fn), opt_level=0)(x.copy(), *rest)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)


R = np.random.default_rng(15)
X = R.standard_normal((4, 5))
IDX = np.array([[0, 3, 3], [1, 0, 2], [2, 2, 0]])
PERM = np.argsort(R.random((4, 5)), axis=1)


def _layouts(a):
    return {
        "c": a,
        "fortran": np.asfortranarray(a),
        "reversed": np.ascontiguousarray(a[::-1, ::-1])[::-1, ::-1],
        "transposed": np.ascontiguousarray(a.T).T,
    }


CASES = {
    "gather": (lambda x, i: x.gather(1, i), IDX),
    "gather0": (lambda x, i: x.gather(0, i), IDX),
    "scatter_add": (lambda x, i: (x * 2).scatter_add(1, i, x.exp()), IDX),
    "scatter_src": (lambda x, p: x.scatter(1, p, x.sin() * 3), PERM),
    "scatter_value": (lambda x, i: x.scatter(1, i, -7.5), IDX),
    "index_select": (
        lambda x, i: x.index_select(0, i.reshape(-1)[:5]) * x.index_select(1, i[0]).sum(),
        IDX,
    ),
    "take_along_dim": (lambda x, p: eager.take_along_dim(x, p, 1) * x, PERM),
    "embedding": (lambda w, i: F.embedding(i, w, padding_idx=2) * 2, IDX),
    "masked_fill": (
        lambda x, i: x.masked_fill(x > 0.2, -1.0) + x.masked_fill(x < 0, eager.tensor(3.0)),
        IDX,
    ),
    "sort": (lambda x, i: x.sort(dim=1).values * x.sort(0, descending=True).values, IDX),
    "median": (
        lambda x, i: x.median(0).values * x.median() + x.kthvalue(2, 0, keepdim=True).values,
        IDX,
    ),
    "topk": (
        lambda x, i: x.topk(3, dim=1).values.exp() + x.topk(2, dim=1, largest=False).values.sum(),
        IDX,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("layout", ["c", "fortran", "reversed", "transposed"])
def test_compiled_equals_eager_values(name, layout):
    fn, idx = CASES[name]
    x = _layouts(X)[layout]
    _same(fn, x, _layouts(idx)[layout] if idx.ndim == 2 else idx)


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_equals_eager_gradients(name):
    fn, idx = CASES[name]
    _same_grad(lambda x, i: (fn(x, i) * fn(x, i).cos()).sum(), X, idx)


@pytest.mark.parametrize(
    "name", ["gather", "scatter_add", "scatter_src", "index_select", "embedding", "sort", "topk"]
)
def test_second_order_matches_eager_double_backward(name):
    fn, idx = CASES[name]
    f = lambda x, i: (fn(x, i) ** 3).sum()  # noqa: E731
    v = np.cos(np.arange(X.size)).reshape(X.shape)
    xt = eager.tensor(X.copy(), requires_grad=True)
    (g,) = eager.autograd.grad(f(xt, eager.tensor(idx)), xt, create_graph=True)
    (g * eager.tensor(v)).sum().backward()
    hv = graphc.grad(lambda x, i: (graphc.grad(f)(x, i) * eager.tensor(v)).sum())(X.copy(), idx)
    np.testing.assert_allclose(hv, xt.grad.numpy(), rtol=1e-6, atol=1e-10)


def test_one_hot_and_integer_dtypes_compiled():
    _same(lambda i: F.one_hot(i, 6), np.array([[0, 5], [3, 3]]))
    _same(lambda i: F.one_hot(i, 3), np.array(2))
    _same(
        lambda x: x.sort(dim=-1, descending=True).values,
        np.array([[3, -1, 7, 7, 0], [1, 1, 1, 0, 2]]),
    )
    _same(lambda x: x.argsort(0), R.integers(-2, 2, size=(9, 3)).astype(np.int32))
    _same(lambda x: x.argsort(), np.array([True, False, True, False]))
    _same(lambda x, i: x.scatter_add(0, i, x), np.arange(5), np.array([4, 4, 0, 1, 4]))


def test_sort_nan_inf_ties_and_long_rows_compiled():
    x = R.standard_normal((3, 257))
    x[0, ::7] = np.nan
    x[1, ::3] = 1.0
    x[2, 5:40] = np.inf
    x[2, 50:60] = -np.inf
    x[:, 100] = -0.0
    x[:, 101] = 0.0
    for desc in (False, True):
        _same(lambda x: x.sort(dim=1, descending=desc), x)
        _same(lambda x: x.argsort(dim=0, descending=desc), x.T.copy())
    big = R.standard_normal((4, 20000))
    got = graphc.compile(lambda x: x.argsort())(big)
    np.testing.assert_array_equal(got, np.argsort(big, axis=1, kind="stable"))


def test_inplace_forms_are_functionalized():
    def f(x, i):
        y = x * 1
        y.scatter_(1, i, 0.5)
        y.scatter_add_(1, i, x[:, :3])
        y.masked_fill_(y > 1.0, 1.0)
        y.index_add_(0, i[0], x[:3], alpha=2)
        return y

    _same(f, X, IDX)
    _same_grad(lambda x, i: f(x, i).sum() * f(x, i).exp().sum(), X, IDX)


@pytest.mark.parametrize(
    "fn, idx",
    [
        (lambda x, i: x.gather(1, i), np.array([[0, 5]])),
        (lambda x, i: x.gather(1, i), np.array([[-1, 0]])),
        (lambda x, i: x.scatter(1, i, 1.0), np.array([[9]])),
        (lambda x, i: x.scatter_add(0, i, x[:1, :2]), np.array([[4, 0]])),
        (lambda x, i: x.index_select(0, i), np.array([4])),
        (lambda x, i: x.index_select(0, i), np.array([-1])),
        (lambda x, i: F.embedding(i, x), np.array([[1, 2], [7, 0]])),
    ],
)
def test_out_of_range_index_is_an_error_compiled(fn, idx):
    f = graphc.compile(fn)
    with pytest.raises(IndexError, match="out of range"):
        f(X.copy(), idx)
    # the same function still runs with good indices
    np.testing.assert_array_equal(
        f(X.copy(), np.zeros_like(idx)), _eager(fn, X, np.zeros_like(idx))[0]
    )
    with pytest.raises(GraphcError, match="out of bounds|out of range"):
        graphc.compile(fn, backend="interpreter")(X.copy(), idx)
    with pytest.raises((IndexError, RuntimeError)):
        _eager(fn, X, idx)


def test_one_hot_out_of_range_compiled():
    f = graphc.compile(lambda i: F.one_hot(i, 3))
    with pytest.raises(IndexError):
        f(np.array([0, 3]))
    with pytest.raises(IndexError):
        f(np.array([-1, 0]))


def test_huge_indices_in_a_subprocess_never_touch_memory_out_of_bounds():
    code = textwrap.dedent(
        """
        import numpy as np, graphc
        x = np.zeros((3, 4))
        for fn in (lambda x, i: x.gather(1, i), lambda x, i: x.scatter(1, i, 1.0),
                   lambda x, i: x.scatter_add(1, i, x[:, :2])):
            f = graphc.compile(fn)
            for bad in (2**62, -2**62, 2**31, -5):
                try:
                    f(x, np.full((3, 2), bad))
                except IndexError:
                    pass
                else:
                    raise SystemExit("no error")
        print("ok")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_data_dependent_ops_refuse_to_compile():
    with pytest.raises(TypeError, match="masked_select.*where"):
        graphc.compile(lambda x: x.masked_select(x > 0))(X)
    with pytest.raises(TypeError, match="nonzero"):
        graphc.compile(lambda x: x.nonzero())(X)
    with pytest.raises(RuntimeError, match="pass num_classes"):
        graphc.compile(lambda i: F.one_hot(i))(np.array([0, 1]))


def test_median_with_nan_compiled():
    x = X.copy()
    x[1, 3] = x[2, 0] = x[2, 4] = np.nan
    _same(lambda x: x.median(1), x)
    _same(lambda x: x.median(0, keepdim=True), x)
    _same(lambda x: x.median(), x)


def test_where_with_scalars_compiled():
    _same(lambda c, x: eager.where(c, 0.0, x), np.array([True, False]), np.array([1, 2]))
    _same(
        lambda c, x: eager.where(c, x, 1), np.array([True, False]), np.array([1.5, 2.5], np.float32)
    )


def test_isclose_compiled():
    a = np.array([1.0, np.nan, np.inf, -np.inf, 1.0])
    b = np.array([1.0 + 1e-9, np.nan, np.inf, np.inf, 1.1])
    with np.errstate(invalid="ignore"):
        _same(lambda a, b: eager.isclose(a, b, equal_nan=True), a, b)
