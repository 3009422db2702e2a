"""The folded (..., m, k) @ (k, n) product and its weight gradient on edge shapes:
size-0 k, n, batch and rows, non-contiguous and broadcast inputs, integer dtypes
(eager/ops/linalg.py _matmul / _vjp_b)."""

from __future__ import annotations

import numpy as np
import pytest

import eager

SHAPES = [
    ((2, 3, 0), (0, 4)),
    ((2, 3, 4), (4, 0)),
    ((2, 3, 0), (0, 0)),
    ((0, 3, 4), (4, 5)),
    ((2, 0, 4), (4, 5)),
    ((1, 1, 1), (1, 1)),
    ((2, 1, 3, 4), (4, 2)),
]


@pytest.mark.parametrize("ash,bsh", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_folded_matmul_and_grads(ash, bsh, dtype):
    rng = np.random.default_rng(0)
    an, bn = rng.standard_normal(ash).astype(dtype), rng.standard_normal(bsh).astype(dtype)
    a = eager.tensor(an, requires_grad=True)
    b = eager.tensor(bn, requires_grad=True)
    out = a @ b
    assert out.shape == np.matmul(an, bn).shape
    np.testing.assert_allclose(out.detach().numpy(), np.matmul(an, bn), rtol=1e-5, atol=1e-5)
    g = rng.standard_normal(out.shape).astype(dtype)
    out.backward(eager.tensor(g))
    assert a.grad.shape == ash and b.grad.shape == bsh
    k, n = bsh
    want_b = an.reshape(-1, k).T @ g.reshape(-1, n) if an.size and g.size else np.zeros(bsh)
    np.testing.assert_allclose(b.grad.numpy(), want_b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(a.grad.numpy(), g @ bn.T, rtol=1e-4, atol=1e-4)


def test_folded_matmul_non_contiguous_and_int():
    rng = np.random.default_rng(1)
    an = rng.standard_normal((4, 5, 3))
    a = eager.tensor(an).transpose(0, 1)  # (5, 4, 3), not contiguous
    b = eager.tensor(rng.standard_normal((6, 3))).t()  # (3, 6), not contiguous
    np.testing.assert_allclose((a @ b).numpy(), np.matmul(an.transpose(1, 0, 2), b.numpy()))
    ai = eager.tensor(rng.integers(-5, 5, (2, 3, 4)))
    bi = eager.tensor(rng.integers(-5, 5, (4, 2)))
    r = ai @ bi
    assert r.dtype == eager.int64
    np.testing.assert_array_equal(r.numpy(), np.matmul(ai.numpy(), bi.numpy()))


@pytest.mark.parametrize("ash,bsh", SHAPES)
def test_against_pytorch(ash, bsh):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    an, bn = rng.standard_normal(ash), rng.standard_normal(bsh)
    ta = torch.tensor(an, requires_grad=True)
    tb = torch.tensor(bn, requires_grad=True)
    (ta @ tb).sum().backward()
    a = eager.tensor(an, requires_grad=True)
    b = eager.tensor(bn, requires_grad=True)
    (a @ b).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_graphc_grad_through_folded_product_size0():
    graphc = pytest.importorskip("graphc")

    def f(a, b):
        return (a @ b).sum()

    for ash, bsh in SHAPES[:3]:
        a = eager.tensor(np.ones(ash))
        b = eager.tensor(np.ones(bsh))
        ga, gb = graphc.grad(f, argnums=(0, 1))(a, b)
        assert tuple(ga.shape) == ash and tuple(gb.shape) == bsh
