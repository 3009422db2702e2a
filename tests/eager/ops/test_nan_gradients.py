"""Gradients at NaN, infinities and ties follow PyTorch.

``max()`` shares the gradient among the NaNs when the result is NaN (PyTorch's
evenly_distribute_backward), ``max(dim)`` sends it to the element its index names
(value_selecting_reduction_backward), ``amax`` shares it among equal elements and gives a
NaN slice NaN (scale_grad_by_count), ``maximum`` passes a NaN's gradient to both sides,
``relu'(NaN) = 1``, ``clamp`` with tensor bounds gives no gradient at a NaN, and
``x ** 0`` has gradient 0 even at x = 0, inf or NaN.  The expected numbers were produced
by PyTorch 2.13 (``run`` below, with ``import torch``); when torch is importable the test
also compares live.  The rules are shared with graphc's
autodiff, so compiled gradients must give the same numbers.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import eager
import graphc

nan, inf = float("nan"), float("inf")


def cases(torch):
    """name -> (function of float32 tensors, input values)."""
    X = [nan, 1., 2., 0., 5., 3., 3., 1., -inf, inf, 2., 2.]
    LO = [0., nan, 2., 1., 1., 4., 3., 1., 0., 0., 2., 3.]
    HI = [1., 3., nan, 2., 4., 2., 3., 0., 1., inf, 2., 1.]
    v = [nan, -1., 0., 0.5, 1., 2., inf, -inf]
    return {
        "max()": (lambda x: x.max(), [[1., nan, 3., nan]]),
        "max() tie": (lambda x: x.max(), [[1., 3., 3.]]),
        "max() nan+tie": (lambda x: x.max(), [[3., nan, 3.]]),
        "max() all nan": (lambda x: x.max(), [[nan, nan]]),
        "max() 0-d nan": (lambda x: x.max(), [nan]),
        "max() inf tie": (lambda x: x.max(), [[1., inf, inf]]),
        "max() -inf": (lambda x: x.max(), [[-inf, -inf]]),
        "min()": (lambda x: x.min(), [[1., nan, 3., nan]]),
        "min() tie": (lambda x: x.min(), [[1., 1., 3.]]),
        "max(0)": (lambda x: x.max(0)[0], [[1., nan, 3., nan]]),
        "max(0) tie": (lambda x: x.max(0)[0], [[3., 1., 3.]]),
        "max(0) -inf": (lambda x: x.max(0)[0], [[-inf, -inf]]),
        "max(1) 2d": (lambda x: x.max(1).values, [[[1., nan, 3.], [2., 2., 1.]]]),
        "max(0) 2d keepdim": (lambda x: x.max(0, keepdim=True).values,
                              [[[1., nan, 3.], [2., 2., 3.]]]),
        "max(1) keepdim": (lambda x: x.max(1, keepdim=True)[0], [[[nan, nan], [1., 1.]]]),
        "max(-1) 3d": (lambda x: x.max(-1).values, [[[[1., 1.], [nan, 2.]], [[0., 3.], [3., 3.]]]]),
        "min(0)": (lambda x: x.min(0)[0], [[1., nan, 3., nan]]),
        "min(1) 2d": (lambda x: x.min(1).values, [[[1., nan, 1.], [2., 1., 1.]]]),
        "amax": (lambda x: x.amax(), [[1., nan, 3., nan]]),
        "amax tie": (lambda x: x.amax(), [[1., 3., 3.]]),
        "amax(1)": (lambda x: x.amax(1), [[[1., nan, 3.], [2., 2., 1.]]]),
        "amax -inf": (lambda x: x.amax(), [[-inf, -inf]]),
        "amin": (lambda x: x.amin(), [[1., nan, 3., nan]]),
        "amin(1)": (lambda x: x.amin(1), [[[1., nan, 3.], [2., 2., 1.]]]),
        "maximum": (lambda x, y: torch.maximum(x, y),
                    [[nan, 1., nan, 2., inf, -inf, 3.], [1., nan, nan, 2., inf, -inf, 1.]]),
        "minimum": (lambda x, y: torch.minimum(x, y),
                    [[nan, 1., nan, 2., inf, -inf, 3.], [1., nan, nan, 2., inf, -inf, 1.]]),
        "max(other)": (lambda x, y: x.max(y), [[nan, 1., 2.], [1., nan, 2.]]),
        "clamp(0, 1)": (lambda x: x.clamp(0., 1.), [v]),
        "clamp(min=0)": (lambda x: x.clamp(min=0.), [v]),
        "clamp(max=1)": (lambda x: x.clamp(max=1.), [v]),
        "clamp(min=nan)": (lambda x: x.clamp(min=nan), [[1., 2.]]),
        "clamp(0, nan)": (lambda x: x.clamp(0., nan), [[1., -2.]]),
        "clamp(t, t)": (lambda x, lo, hi: x.clamp(lo, hi), [X, LO, HI]),
        "clamp(min=t)": (lambda x, lo: x.clamp(min=lo), [X, LO]),
        "clamp(max=t)": (lambda x, hi: x.clamp(max=hi), [X, HI]),
        "relu": (lambda x: x.relu(), [v]),
        "x ** 0": (lambda x: x ** 0, [[0., nan, inf, 2.]]),
        "polynomial": (lambda x: x ** 0 + x ** 1 + x ** 2, [[0., 1.]]),
        "x ** y": (lambda x, y: x ** y, [[0., 0., 0., nan, 0., 2., -0., 2.],
                                         [0., -1., nan, 0., 2., 0., -1., -inf]]),
    }


def run(torch, fn, xs):
    """(output values, gradient of each input) for upstream gradient ones."""
    ts = [torch.tensor(x, dtype=torch.float32, requires_grad=True) for x in xs]
    out = fn(*ts)
    out.backward(torch.ones_like(out))
    return out.tolist(), [t.grad.tolist() for t in ts]


# run(torch, fn, xs) for every case, with PyTorch 2.13
PYTORCH = {
    'max()': (nan, [[0.0, 0.5, 0.0, 0.5]]),
    'max() tie': (3.0, [[0.0, 0.5, 0.5]]),
    'max() nan+tie': (nan, [[0.0, 1.0, 0.0]]),
    'max() all nan': (nan, [[0.5, 0.5]]),
    'max() 0-d nan': (nan, [1.0]),
    'max() inf tie': (inf, [[0.0, 0.5, 0.5]]),
    'max() -inf': (-inf, [[0.5, 0.5]]),
    'min()': (nan, [[0.0, 0.5, 0.0, 0.5]]),
    'min() tie': (1.0, [[0.5, 0.5, 0.0]]),
    'max(0)': (nan, [[0.0, 1.0, 0.0, 0.0]]),
    'max(0) tie': (3.0, [[1.0, 0.0, 0.0]]),
    'max(0) -inf': (-inf, [[1.0, 0.0]]),
    'max(1) 2d': ([nan, 2.0], [[[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]]),
    'max(0) 2d keepdim': ([[2.0, nan, 3.0]], [[[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]]]),
    'max(1) keepdim': ([[nan], [1.0]], [[[1.0, 0.0], [1.0, 0.0]]]),
    'max(-1) 3d':
        ([[1.0, nan], [3.0, 3.0]], [[[[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [1.0, 0.0]]]]),
    'min(0)': (nan, [[0.0, 1.0, 0.0, 0.0]]),
    'min(1) 2d': ([nan, 1.0], [[[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]]),
    'amax': (nan, [[nan, nan, nan, nan]]),
    'amax tie': (3.0, [[0.0, 0.5, 0.5]]),
    'amax(1)': ([nan, 2.0], [[[nan, nan, nan], [0.5, 0.5, 0.0]]]),
    'amax -inf': (-inf, [[0.5, 0.5]]),
    'amin': (nan, [[nan, nan, nan, nan]]),
    'amin(1)': ([nan, 1.0], [[[nan, nan, nan], [0.0, 0.0, 1.0]]]),
    'maximum':
        ([nan, nan, nan, 2.0, inf, -inf, 3.0],
         [[1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 1.0], [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.0]]),
    'minimum':
        ([nan, nan, nan, 2.0, inf, -inf, 1.0],
         [[1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.0], [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 1.0]]),
    'max(other)': ([nan, nan, 2.0], [[1.0, 1.0, 0.5], [1.0, 1.0, 0.5]]),
    'clamp(0, 1)':
        ([nan, 0.0, 0.0, 0.5, 1.0, 1.0, 1.0, 0.0], [[0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]]),
    'clamp(min=0)':
        ([nan, 0.0, 0.0, 0.5, 1.0, 2.0, inf, 0.0], [[0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0]]),
    'clamp(max=1)':
        ([nan, -1.0, 0.0, 0.5, 1.0, 1.0, 1.0, -inf], [[0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0]]),
    'clamp(min=nan)': ([nan, nan], [[0.0, 0.0]]),
    'clamp(0, nan)': ([nan, nan], [[0.0, 0.0]]),
    'clamp(t, t)':
        ([nan, nan, nan, 1.0, 4.0, 2.0, 3.0, 0.0, 0.0, inf, 2.0, 1.0],
         [[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0],
          [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0],
          [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]]),
    'clamp(min=t)':
        ([nan, nan, 2.0, 1.0, 5.0, 4.0, 3.0, 1.0, 0.0, inf, 2.0, 3.0],
         [[0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0],
          [0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0]]),
    'clamp(max=t)':
        ([nan, 1.0, nan, 0.0, 4.0, 2.0, 3.0, 0.0, -inf, inf, 2.0, 1.0],
         [[0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0],
          [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]]),
    'relu': ([nan, 0.0, 0.0, 0.5, 1.0, 2.0, inf, 0.0], [[1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0]]),
    'x ** 0': ([1.0, 1.0, 1.0, 1.0], [[0.0, 0.0, 0.0, 0.0]]),
    'polynomial': ([1.0, 3.0], [[1.0, 3.0]]),
    'x ** y':
        ([1.0, inf, nan, 1.0, 0.0, 1.0, -inf, 0.0],
         [[0.0, -inf, nan, 0.0, 0.0, 0.0, -inf, nan],
          [0.0, -inf, nan, nan, 0.0, 0.6931471824645996, inf, 0.0]]),
}


def _same(a, b) -> bool:
    return np.array_equal(np.asarray(a, dtype=float), np.asarray(b, dtype=float), equal_nan=True)


def _check(got, want) -> None:
    assert _same(got[0], want[0]), f"value {got[0]} != {want[0]}"
    assert len(got[1]) == len(want[1])
    for g, w in zip(got[1], want[1]):
        assert _same(g, w), f"gradient {g} != {w}"


@pytest.mark.parametrize("name", list(PYTORCH))
def test_gradient_matches_pytorch(name):
    fn, xs = cases(eager)[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # numpy's inf * 0 warning
        _check(run(eager, fn, xs), PYTORCH[name])


def test_the_table_covers_every_case():
    assert sorted(PYTORCH) == sorted(cases(eager))


def test_gradients_match_live_pytorch():
    torch = pytest.importorskip("torch", reason="PyTorch is not a dependency; this compares "
                                                "live only where it happens to be installed")
    for name, (fn, xs) in cases(torch).items():
        _check(run(eager, cases(eager)[name][0], xs), run(torch, fn, xs))


def test_grad_fn_names_are_pytorchs():
    x = eager.tensor([1.0, 3.0, 2.0], requires_grad=True)
    assert type(x.max().grad_fn).__name__ == "MaxBackward1"
    assert type(x.min().grad_fn).__name__ == "MinBackward1"
    assert type(x.max(0).values.grad_fn).__name__ == "MaxBackward0"
    assert type(x.min(0).values.grad_fn).__name__ == "MinBackward0"
    assert type(x.amax().grad_fn).__name__ == "AmaxBackward0"
    assert x.max(0).indices.item() == 1 and x.max(0).values.item() == 3.0


def test_max_dim_values_and_indices_without_grad():
    x = eager.tensor([[1.0, nan, 3.0], [2.0, 2.0, -inf]])
    r = x.max(1)
    assert _same(r.values.tolist(), [nan, 2.0]) and r.indices.tolist() == [1, 0]
    r = x.min(0, keepdim=True)
    assert _same(r.values.tolist(), [[1.0, nan, -inf]]) and r.indices.tolist() == [[0, 0, 1]]
    assert _same(x.max().item(), nan)
    assert eager.tensor([[4, 7], [7, 1]]).max(1).values.tolist() == [7, 7]
    with pytest.raises(IndexError, match="Expected reduction dim 1 to have non-zero size"):
        eager.zeros(2, 0).max(1)


def test_second_order_through_max_keeps_the_routing():
    x = eager.tensor([1.0, 3.0, 3.0], requires_grad=True)
    (g,) = eager.autograd.grad(x.max(0).values * x.max(0).values, x, create_graph=True)
    assert g.tolist() == [0.0, 6.0, 0.0]
    (h,) = eager.autograd.grad(g.sum(), x)
    assert h.tolist() == [0.0, 2.0, 0.0]


@pytest.mark.parametrize("opts", [{"opt_level": 0}, {"opt_level": 2},
                                  {"backend": "interpreter"}], ids=str)
def test_compiled_gradients_equal_eager(opts):
    """graphc differentiates the graph with the same rules: the same numbers, NaN included."""
    bad = []
    for name, (fn, xs) in cases(eager).items():
        want = PYTORCH[name][1]

        def loss(*args, fn=fn):
            return fn(*args).sum()

        arrays = [np.array(x, dtype=np.float32) for x in xs]
        nums = tuple(range(len(xs)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            got = graphc.compile(graphc.grad(loss, argnums=nums), **opts)(*arrays)
            vg = graphc.compile(graphc.value_and_grad(loss, argnums=nums), **opts)
            _, got_vg = vg(*arrays)
        for g, vg, w in zip(got, got_vg, want):
            if not (_same(g, w) and _same(vg, w)):
                bad.append(f"{name}: compiled {np.asarray(g).tolist()}, "
                           f"value_and_grad {np.asarray(vg).tolist()}, PyTorch {w}")
    assert not bad, "\n".join(bad)
