"""All-integer indexing and iteration give views, as in PyTorch.

numpy returns a scalar copy for ``a[1]``, so ``a[1].add_(5)`` used to change nothing.
Now it is a 0-d view linked to its base like any basic-index view: it writes through,
shares the base's version counter, gives the base a CopySlices history when recorded,
and is refused in-place when its base is a leaf that requires grad.  The reference for
each in-place method is the same write through a one-element slice (``b[1:2, 2:3]``),
a path that always was a view.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import eager as torch

METHODS = {
    "add_": lambda v: v.add_(2), "sub_": lambda v: v.sub_(2), "mul_": lambda v: v.mul_(3),
    "div_": lambda v: v.div_(2), "pow_": lambda v: v.pow_(2), "neg_": lambda v: v.neg_(),
    "clamp_": lambda v: v.clamp_(0, 1.5), "relu_": lambda v: v.relu_(),
    "exp_": lambda v: v.exp_(), "fill_": lambda v: v.fill_(7), "zero_": lambda v: v.zero_(),
    "copy_": lambda v: v.copy_(torch.tensor(3.0)), "setitem": lambda v: v.__setitem__(..., 4.0),
    "iadd": lambda v: v.__iadd__(2), "imul_tensor": lambda v: v.__imul__(torch.tensor(2.0)),
    "add_tensor": lambda v: v.add_(torch.tensor(2.0)),
}
# (index producing a 0-d view, the same element as a one-element slice view)
INDEXES = {
    "b[1, 2]": (lambda b: b[1, 2], lambda b: b[1:2, 2:3]),
    "b[1][2]": (lambda b: b[1][2], lambda b: b[1:2, 2:3]),
    "b[-1, -1]": (lambda b: b[-1, -1], lambda b: b[2:3, 3:4]),
    "b[1, ..., 2]": (lambda b: b[1, ..., 2], lambda b: b[1:2, 2:3]),
    "b[..., 1][0]": (lambda b: b[..., 1][0], lambda b: b[0:1, 1:2]),
    "b[1, None][0, 2]": (lambda b: b[1, None][0, 2], lambda b: b[1:2, 2:3]),
    "b.t()[2, 1]": (lambda b: b.t()[2, 1], lambda b: b[1:2, 2:3]),
    "b.reshape(-1)[6]": (lambda b: b.reshape(-1)[6], lambda b: b[1:2, 2:3]),
}
VIEW_OF_LEAF = re.escape("a view of a leaf Variable that requires grad is being used in an "
                         "in-place operation.")


def _base():
    return torch.arange(12.0).reshape(3, 4) * 1     # its own buffer (not a view of arange)


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("index", list(INDEXES))
def test_inplace_writes_through_an_int_index(method, index):
    pick, pick_slice = INDEXES[index]
    b, ref = _base(), _base()
    v = pick(b)
    assert v.shape == () and v._version is b._version
    METHODS[method](v)
    METHODS[method](pick_slice(ref))
    np.testing.assert_array_equal(b.numpy(), ref.numpy())
    assert b._version[0] >= 1 and v.item() == pick(ref).item()


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("index", ["b[1, 2]", "b[1][2]", "b.t()[2, 1]"])
def test_recorded_inplace_on_int_view_rebases_the_base(method, index):
    pick, pick_slice = INDEXES[index]
    weights = torch.arange(1.0, 13.0).reshape(3, 4)
    grads = []
    for via in (pick, pick_slice):
        leaf = torch.arange(12.0).reshape(3, 4) * 1
        leaf.requires_grad_()
        b = leaf * 1
        METHODS[method](via(b))
        assert type(b.grad_fn).__name__ == "CopySlices"
        (b * weights).sum().backward()
        grads.append((b.detach().numpy().copy(), leaf.grad.numpy().copy()))
    np.testing.assert_allclose(grads[0][0], grads[1][0], rtol=1e-6)
    np.testing.assert_allclose(grads[0][1], grads[1][1], rtol=1e-6)


@pytest.mark.parametrize("method", list(METHODS))
def test_int_view_of_a_leaf_that_requires_grad_is_refused(method):
    leaf = torch.arange(12.0).reshape(3, 4) * 1
    leaf.requires_grad_()
    for pick in (lambda t: t[1, 2], lambda t: t[1][2], lambda t: t[None, 1, 2]):
        with pytest.raises(RuntimeError, match=VIEW_OF_LEAF):
            METHODS[method](pick(leaf))
    assert leaf.grad_fn is None and leaf.tolist()[1][2] == 6.0
    with torch.no_grad():                       # an optimizer's update: allowed, writes through
        METHODS[method](leaf[1, 2])
    assert leaf.grad_fn is None and leaf._version[0] == 1


def test_a_view_made_to_require_grad_counts_as_a_view_of_a_leaf():
    x = torch.arange(12.0).reshape(3, 4).requires_grad_()   # a reshape view of arange
    with pytest.raises(RuntimeError, match=VIEW_OF_LEAF):
        x[1, 2].add_(1)


def test_plain_base_gets_history_from_a_recorded_operand():
    w = torch.tensor(2.0, requires_grad=True)
    b = torch.arange(4.0)
    b[1].mul_(w)
    assert type(b.grad_fn).__name__ == "CopySlices" and b.tolist() == [0.0, 2.0, 2.0, 3.0]
    (b * 2).sum().backward()
    assert w.grad.item() == 2.0


def test_augmented_assignment_through_int_index_values_from_pytorch():
    leaf = torch.arange(12.0).reshape(3, 4).requires_grad_()
    w = torch.tensor(3.0, requires_grad=True)
    b = leaf * 1
    b[1, 2] *= w
    b[0, 1] += 2
    b[2][3] -= w * w
    (b * torch.arange(1.0, 13.0).reshape(3, 4)).sum().backward()
    # PyTorch 2.13 gives these
    assert b.tolist() == [[0.0, 3.0, 2.0, 3.0], [4.0, 5.0, 18.0, 7.0], [8.0, 9.0, 10.0, 2.0]]
    assert leaf.grad.tolist() == [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 21.0, 8.0],
                                  [9.0, 10.0, 11.0, 12.0]]
    assert w.grad.item() == -30.0


def test_int_view_shares_the_version_counter():
    leaf = torch.arange(4.0).requires_grad_()
    b = leaf * 1
    v = b[2]
    y = v * v                                   # saves the view
    b.add_(1)                                   # the base changes: so did the view
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    b = leaf * 1
    total = b.sum() * 2                         # saves nothing of b
    b[2].add_(1)
    total.backward()
    assert b._version[0] == 1 and leaf.grad.tolist() == [2.0] * 4


def test_int_view_reads_like_a_number():
    a = torch.arange(4.0)
    v = a[2]
    assert (v.item(), float(v), int(v), v.tolist(), bool(v)) == (2.0, 2.0, 2, 2.0, True)
    assert repr(v) == "tensor(2.)" and f"{v:.1f}" == "2.0"
    assert (v == 2).item() and (v > 1).item() and v.dim() == 0 and v.numel() == 1
    a[2] = 5.0                                  # a view, not a snapshot (as in PyTorch)
    assert v.item() == 5.0
    v.numpy()[()] = 7.0                         # .numpy() shares memory, as in PyTorch
    assert a.tolist() == [0.0, 1.0, 7.0, 3.0]
    i = torch.tensor([3, 1])
    assert torch.arange(5.0)[i[0]].item() == 3.0   # a 0-d view still indexes


def test_iteration_and_unbind_give_views():
    x = torch.arange(6.0).reshape(2, 3)
    for row in x:
        row.add_(1)
    for col in x.unbind(1):
        col.mul_(2)
    assert x.tolist() == [[2.0, 4.0, 6.0], [8.0, 10.0, 12.0]]
    leaf = torch.arange(6.0).reshape(2, 3).requires_grad_()
    with torch.no_grad():
        for row in leaf:
            row[1] = 9.0
    assert leaf.tolist() == [[0.0, 9.0, 2.0], [3.0, 9.0, 5.0]] and leaf.grad_fn is None
    y = leaf * 2
    rows = torch.unbind(y)
    assert type(rows[1].grad_fn).__name__ == "UnbindBackward0"
    sum((r * r).sum() for r in y).backward()
    np.testing.assert_allclose(leaf.grad.numpy(), 8 * leaf.detach().numpy())


def test_recorded_inplace_on_an_unbind_output_is_refused():
    leaf = torch.arange(6.0).reshape(2, 3).requires_grad_()
    y = leaf * 2
    msg = "Output 1 of UnbindBackward0 is a view and is being modified inplace"
    with pytest.raises(RuntimeError, match=msg):
        list(y)[1].add_(1)
    with pytest.raises(RuntimeError, match=msg):
        list(y)[1][2].add_(1)                  # a view of that view, likewise
    with pytest.raises(RuntimeError, match="Output 0 of UnbindBackward0"):
        torch.zeros(2, 3).unbind(0)[0].mul_(leaf[0])
    assert y.tolist() == [[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]]


def test_recorded_inplace_on_a_view_made_without_grad_is_refused():
    leaf = torch.arange(4.0).requires_grad_()
    y = leaf * 2
    with torch.no_grad():
        v = y[1]
        s = y[1:]
    w = torch.tensor(3.0, requires_grad=True)
    for view in (v, s, s[0]):
        with pytest.raises(RuntimeError, match="A view was created in no_grad mode"):
            view.mul_(w)
    assert y.tolist() == [0.0, 2.0, 4.0, 6.0] and type(y.grad_fn).__name__ == "MulBackward0"
