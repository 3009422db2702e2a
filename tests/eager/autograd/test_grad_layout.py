"""A leaf's first ``.grad`` obeys PyTorch's layout contract (AccumulateGrad): the leaf's
own strides when the leaf is dense (C order for every contiguous parameter), else C
order, whatever layout the backward value had (a transposed product, a broadcast).  So
``p.grad.view(-1)`` works for every contiguous ``p``, as in PyTorch."""

import numpy as np
import pytest

import eager


def _leaf(T, kind):
    a = np.arange(12.0).reshape(3, 4) / 7
    if kind == "c":
        return T.tensor(a, requires_grad=True)
    if kind == "f":  # dense, permuted: the grad takes its strides
        return T.tensor(a.T.copy()).t().detach().requires_grad_()
    if kind == "strided":  # not dense: the grad is C order
        return T.tensor(np.arange(24.0).reshape(3, 8) / 7)[:, ::2].detach().requires_grad_()
    raise AssertionError(kind)


LOSSES = {
    "transposed_mul": lambda T, p: (p.t() * T.ones(4, 3, dtype=T.float64)).sum(),
    "transposed_mm": lambda T, p: (p.t() @ T.ones(3, 5, dtype=T.float64)).sum(),
    "mm": lambda T, p: (T.ones(2, 3, dtype=T.float64) @ p).sum(),
    "broadcast": lambda T, p: (p * T.ones(4, dtype=T.float64)).sum(),
    "expand_sum": lambda T, p: p.sum() * 2,
    "twice_transposed": lambda T, p: (p.t() * 2).sum() + (p * p).t().sum(),
    "hooked": lambda T, p: (p.t() * 3).sum(),
}


def _grad_of(T, kind, loss):
    p = _leaf(T, kind)
    if loss == "hooked":
        p.register_hook(lambda g: g * 1)
    LOSSES[loss](T, p).backward()
    g = p.grad
    return g.numpy().copy(), tuple(g.stride()), g.is_contiguous()


@pytest.mark.parametrize("kind", ["c", "f", "strided"])
@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_first_grad_layout(kind, loss):
    v, stride, contig = _grad_of(eager, kind, loss)
    p = _leaf(eager, kind)
    if kind == "f":
        assert stride == p.stride() and not contig
    else:
        assert contig and stride == (4, 1)
    if kind != "f":
        p.grad = None
        LOSSES[loss](eager, p).backward()
        p.grad.view(-1)[0] = 9.0  # a view of the grad itself
        assert p.grad[0, 0].item() == 9.0


@pytest.mark.parametrize("kind", ["c", "f", "strided"])
@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_first_grad_layout_against_torch(kind, loss):
    torch = pytest.importorskip("torch")
    ev, es, ec = _grad_of(eager, kind, loss)
    tv, ts, tc = _grad_of(torch, kind, loss)
    assert (es, ec) == (ts, tc)
    np.testing.assert_array_equal(ev, tv)


def test_accumulation_keeps_the_layout():
    p = _leaf(eager, "c")
    (p.t() * 2).sum().backward()
    g = p.grad
    (p.t() * 3).sum().backward()  # added in place: the same tensor, C order
    assert p.grad is g and g.is_contiguous()
    np.testing.assert_array_equal(g.numpy(), np.full((3, 4), 5.0))
