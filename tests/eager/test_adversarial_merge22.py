"""Adversarial regression tests for round 22's merged eager changes: the layout contract
of a leaf's first ``.grad`` (eager.autograd.engine._obeys) and the ``view`` that
``p.grad.view(-1)`` relies on.

Found: ``Tensor.view`` was ``reshape``, so on a layout no view can give (a transposed
``.grad`` of a transposed leaf, flattened) it silently returned a COPY and a write through
it was lost; PyTorch raises.  Fixed (eager.tensor._viewable).  Attacks that found nothing
stay as regression tests."""

import numpy as np
import pytest

import eager

VIEW_MSG = "view size is not compatible with input tensor's size and stride"


def _layouts(m):
    b = np.arange(24.0)
    yield "c", m.tensor(b.reshape(2, 3, 4))
    yield "t", m.tensor(b.reshape(6, 4)).t()
    yield "perm", m.tensor(b.reshape(2, 3, 4)).permute(1, 0, 2)
    yield "step_slice", m.tensor(b.reshape(4, 6))[:, ::2]
    yield "row_slice", m.tensor(b.reshape(4, 6))[1:3]
    yield "col_slice", m.tensor(b.reshape(4, 6))[:, 1:3]
    yield "expand", m.tensor(b[:4]).expand(3, 4)
    yield "unit_t", m.tensor(b[:4].reshape(4, 1)).t()
    yield "size0_t", m.tensor(np.zeros((3, 0))).t()
    yield "0d", m.tensor(3.0)
    yield "transpose02", m.tensor(b.reshape(2, 3, 4)).transpose(0, 2)


SHAPES = [(-1,), (2, -1), (-1, 2), (1, -1, 1), (3, 2, -1), (0, -1), (1,), (4, 3, 1), (24,), (5, 5)]


def _outcome(t, s, view=lambda t, s: t.view(*s)):
    try:
        v = view(t, s)
    except Exception as e:  # noqa: BLE001 - compared with PyTorch's
        return "err", type(e).__name__
    return "ok", tuple(v.shape)


def test_view_refuses_where_pytorch_refuses_and_works_where_it_works():
    torch = pytest.importorskip("torch")
    diffs = []
    for (name, tt), (_, et) in zip(_layouts(torch), _layouts(eager)):
        for s in SHAPES:
            want, got = _outcome(tt, s), _outcome(et, s)
            if want != got:
                diffs.append((name, s, want, got))
    assert not diffs


def test_view_as_refuses_where_view_does_as_pytorch():
    # was: view_as was reshape_as, a silent copy on a layout no view can give
    torch = pytest.importorskip("torch")
    diffs = []
    for (name, tt), (_, et) in zip(_layouts(torch), _layouts(eager)):
        n = tt.numel()
        for s in [(n,), (1, n), (n, 1)] + ([(2, n // 2)] if n % 2 == 0 and n else []):
            want = _outcome(tt, s, lambda t, s: t.view_as(torch.zeros(*s)))
            got = _outcome(et, s, lambda t, s: t.view_as(eager.zeros(*s)))
            if want != got:
                diffs.append((name, s, want, got))
    assert not diffs


def test_view_as_of_a_transposed_tensor_refuses_and_view_without_a_size_raises():
    x = eager.tensor(np.arange(6.0).reshape(2, 3)).t()
    with pytest.raises(RuntimeError, match=VIEW_MSG):
        x.view_as(eager.zeros(6))
    assert x.view_as(eager.zeros(3, 2)).shape == (3, 2)
    y = eager.tensor(np.arange(6.0).reshape(2, 3))
    v = y.view_as(eager.zeros(6))
    v[0] = 9.0  # a view: the write reaches y
    assert y[0, 0].item() == 9.0
    for t in (x, eager.ones(1), eager.tensor(2.0)):
        with pytest.raises(TypeError, match=r"view\(\) received an invalid combination"):
            t.view()


def test_view_of_a_transposed_grad_refuses_instead_of_losing_the_write():
    """Was: ``a.grad.view(-1)[1] = 9`` on a transposed leaf's ``.grad`` (which has the
    leaf's strides, PyTorch's layout contract) wrote into a copy; the .grad kept its
    values silently.  PyTorch 2.13 raises RuntimeError (checked in torchenv)."""
    base = np.arange(12.0).reshape(4, 3) / 5 - 1
    a = eager.tensor(base).t().detach().requires_grad_(True)
    x = eager.tensor(np.linspace(-1, 1, 12).reshape(3, 4))
    (a * a * x).sum().backward()
    assert a.grad.stride() == a.stride() == (1, 3)
    before = a.grad.numpy().copy()
    with pytest.raises(RuntimeError, match=VIEW_MSG):
        a.grad.view(-1)[1] = 9.0
    np.testing.assert_array_equal(a.grad.numpy(), before)
    r = a.grad.reshape(-1)  # reshape still copies, as PyTorch's does here
    assert r.shape == (12,)
    v = a.grad.t().view(-1)  # a view PyTorch allows: writes reach the .grad
    v[0] = 7.0
    assert a.grad[0, 0].item() == 7.0


def test_view_of_a_view_writes_through_and_keeps_versions():
    t = eager.tensor(np.arange(24.0).reshape(4, 6))[:, 1:3]
    v = t.view(2, 2, 2)
    v[0, 0, 0] = -1.0
    assert t[0, 0].item() == -1.0
    u = eager.tensor(np.arange(6.0)).expand(2, 6).view(2, 1, 6)
    assert u.shape == (2, 1, 6)
    with pytest.raises(RuntimeError, match=VIEW_MSG):
        eager.tensor(np.arange(6.0)).expand(2, 6).view(12)


def test_view_with_requires_grad_refuses_too_and_differentiates_when_allowed():
    a = eager.tensor(np.arange(12.0).reshape(3, 4), requires_grad=True)
    with pytest.raises(RuntimeError, match=VIEW_MSG):
        a.t().view(-1)
    (a.t().contiguous().view(-1) * eager.arange(12.0)).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.arange(12.0).reshape(4, 3).T)


def _grad_case(m, name):
    b = np.arange(12.0).reshape(3, 4) / 7
    leaf = {
        "t": lambda: m.tensor(b).t(),
        "perm3": lambda: m.tensor(b.reshape(2, 3, 2)).permute(2, 0, 1),
        "step_slice": lambda: m.tensor(b)[:, ::2],
        "expand": lambda: m.tensor(b[:1]).expand(3, 4),
        "size0_t": lambda: m.tensor(np.zeros((0, 3))).t(),
        "0d": lambda: m.tensor(2.0),
        "neg_free": lambda: m.tensor(b.reshape(2, 6)).transpose(0, 1)[1:],
        "unit_t": lambda: m.tensor(b.reshape(12, 1)).t(),
    }[name]()
    return leaf.detach().requires_grad_(True)


def _nonunit(strides, shape):
    return tuple(s for s, n in zip(strides, shape) if n != 1)


@pytest.mark.parametrize(
    "name,loss",
    [
        (n, loss)
        for n in ["t", "perm3", "step_slice", "expand", "size0_t", "0d", "neg_free", "unit_t"]
        for loss in ["mul", "tmm", "bcast"]
        if not (loss == "tmm" and n in ("perm3", "0d"))  # (tmm: a product needs a matrix)
    ],
)
def test_first_grad_layout_matches_pytorch(name, loss):
    """Values bitwise and strides (of the dims of size > 1: PyTorch's own contract check
    ignores the others, and eager keeps numpy's C strides for them: ``unit_t`` has
    PyTorch strides (1, 1) and eager's (12, 1), a documented difference)."""
    torch = pytest.importorskip("torch")
    got = []
    for m in (torch, eager):
        leaf = _grad_case(m, name)
        if loss == "mul":
            (leaf * leaf).sum().backward()
        elif loss == "tmm":
            (leaf.t() @ m.ones(leaf.shape[0], 2, dtype=leaf.dtype)).sum().backward()
        else:
            (leaf + m.zeros(tuple(leaf.shape), dtype=leaf.dtype)).sum().backward()
        g = leaf.grad
        got.append((g.numpy().copy(), _nonunit(g.stride(), tuple(g.shape))))
    (tv, ts), (ev, es) = got
    np.testing.assert_array_equal(ev, tv)
    assert es == ts


@pytest.mark.parametrize("rg", [False, True])
def test_contiguous_gives_c_order_so_a_view_of_it_works(rg):
    """Found with the view fix: ``contiguous()`` was ``clone()``, whose copy keeps a
    permuted layout (numpy's order K), so ``x.t().contiguous()`` was not contiguous
    (``is_contiguous()`` False, strides (1, 4)) and its ``view(-1)`` only worked because
    view copied.  PyTorch: C order, CloneBackward0."""
    a = eager.tensor(np.arange(12.0).reshape(3, 4), requires_grad=rg)
    c = a.t().contiguous()
    assert c.is_contiguous() and c.stride() == (3, 1)
    np.testing.assert_array_equal(c.detach().numpy(), np.arange(12.0).reshape(3, 4).T)
    if rg:
        assert type(c.grad_fn).__name__ == "CloneBackward0"
        (c.view(-1) * eager.arange(12.0)).sum().backward()
        np.testing.assert_array_equal(a.grad.numpy(), np.arange(12.0).reshape(4, 3).T)
    d = eager.tensor(np.arange(12.0).reshape(3, 4))
    assert d.contiguous() is d


@pytest.mark.parametrize("make", ["t", "perm", "expand"])
def test_retained_grad_of_a_non_leaf_is_c_order_as_pytorch(make):
    """Found with the view fix: ``retain_grad()``'s .grad kept the gradient's layout
    (numpy's order K copy: strides (1, 4) for ``y = x.t() * 1``), PyTorch clones it in C
    order (strides (3, 1)), so ``y.grad.view(-1)`` worked in PyTorch and raised eagerly."""
    torch = pytest.importorskip("torch")
    got = []
    for m in (torch, eager):
        x = m.tensor(np.arange(12.0).reshape(3, 4) / 7, requires_grad=True)
        if make == "t":
            y = x.t() * 1
        elif make == "perm":
            y = x.reshape(3, 2, 2).permute(2, 0, 1) * 1
        else:
            y = x[:1].expand(3, 4) * 1
        y.retain_grad()
        (y * y).sum().backward()
        got.append((y.grad.numpy().copy(), tuple(y.grad.stride()), y.grad.view(-1).shape))
    (tv, ts, tshape), (ev, es, eshape) = got
    np.testing.assert_array_equal(ev, tv)
    assert es == ts and eshape == tshape
