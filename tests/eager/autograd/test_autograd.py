"""Autograd semantics of eager, checked against PyTorch's documented behaviour.

Gradients are compared with independent references: closed-form derivatives
computed in numpy, or central finite differences in float64.
"""
from __future__ import annotations

import gc
import re
import weakref
import zlib

import numpy as np
import pytest

import eager
import eager as torch
from eager.autograd import AccumulateGrad, Function


def np_(t) -> np.ndarray:
    return np.asarray(t.detach()._data)


def gname(t) -> str:
    return type(t.grad_fn).__name__


def leaf(*shape, seed=0, dtype=torch.float64, low=-2.0, high=2.0):
    rng = np.random.default_rng(seed)
    return torch.tensor(rng.uniform(low, high, size=shape), dtype=dtype, requires_grad=True)


def numgrad(f, x: np.ndarray, eps=1e-6) -> np.ndarray:
    """Central finite differences of scalar f at float64 x."""
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


# ---------------------------------------------------------------------------
# grad_fn names

X = lambda: leaf(3, 4, seed=1)          # noqa: E731
W = lambda: leaf(4, 2, seed=2)          # noqa: E731

NAMES = [
    ("AddBackward0", lambda x: x + 2),
    ("AddBackward0", lambda x: 2 + x),
    ("AddBackward0", lambda x: x + x),
    ("SubBackward0", lambda x: x - 1),
    ("SubBackward0", lambda x: x - x * 2),
    ("RsubBackward1", lambda x: 10 - x),
    ("MulBackward0", lambda x: x * 3),
    ("MulBackward0", lambda x: 3 * x),
    ("MulBackward0", lambda x: x * x),
    ("DivBackward0", lambda x: x / 2),
    ("DivBackward0", lambda x: x / (x + 5)),
    ("NegBackward0", lambda x: -x),
    ("PowBackward0", lambda x: x ** 2),
    ("PowBackward0", lambda x: x.pow(3)),
    ("PowBackward1", lambda x: x.abs() ** x),
    ("MeanBackward0", lambda x: x.mean()),
    ("MeanBackward1", lambda x: x.mean(0)),
    ("MeanBackward1", lambda x: x.mean(dim=1, keepdim=True)),
    ("SumBackward0", lambda x: x.sum()),
    ("SumBackward1", lambda x: x.sum(1)),
    ("SumBackward1", lambda x: x.sum((0, 1))),
    ("MmBackward0", lambda x: x.mm(W())),
    ("MmBackward0", lambda x: x @ W()),
    ("ClampMinBackward0", lambda x: x.clamp(min=0)),
    ("ClampMaxBackward0", lambda x: x.clamp(max=0)),
    ("ClampBackward1", lambda x: x.clamp(-1, 1)),
    ("ClampBackward1", lambda x: x.clamp(min=-1, max=1)),
    ("ExpBackward0", lambda x: x.exp()),
    ("LogBackward0", lambda x: (x * x + 1).log()),
    ("TanhBackward0", lambda x: x.tanh()),
    ("SigmoidBackward0", lambda x: x.sigmoid()),
    ("ReluBackward0", lambda x: x.relu()),
    ("ReluBackward0", lambda x: torch.relu(x)),
    ("AbsBackward0", lambda x: x.abs()),
    ("SinBackward0", lambda x: x.sin()),
    ("CosBackward0", lambda x: x.cos()),
    ("ViewBackward0", lambda x: x.view(12)),
    ("ViewBackward0", lambda x: x.view(2, 6)),
    ("ViewBackward0", lambda x: x.reshape(-1)),
    ("TBackward0", lambda x: x.t()),
    ("TransposeBackward0", lambda x: x.transpose(0, 1)),
    ("PermuteBackward0", lambda x: x.permute(1, 0)),
    ("UnsqueezeBackward0", lambda x: x.unsqueeze(0)),
    ("ExpandBackward0", lambda x: x.unsqueeze(0).expand(2, 3, 4)),
    ("CloneBackward0", lambda x: x.clone()),
    ("WhereBackward0", lambda x: torch.where(x > 0, x, torch.zeros(3, 4, dtype=torch.float64))),
    ("MaximumBackward0", lambda x: torch.maximum(x, x * 0.5)),
    ("MinimumBackward0", lambda x: torch.minimum(x, x * 0.5)),
    ("MaxBackward1", lambda x: x.max()),
    ("SelectBackward0", lambda x: x[0]),
    ("SliceBackward0", lambda x: x[:, 1:]),
    ("IndexBackward0", lambda x: x[torch.tensor([0, 2])]),
    ("ToCopyBackward0", lambda x: x.float()),
]


@pytest.mark.parametrize("expected,fn", NAMES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(NAMES)])
def test_grad_fn_names(expected, fn):
    out = fn(X())
    assert out.requires_grad
    assert gname(out) == expected
    assert repr(out.grad_fn).startswith(f"<{expected} object at 0x")
    assert out.grad_fn.name() == expected
    assert f"grad_fn=<{expected}>" in repr(out)


def test_grad_fn_of_nondifferentiable_results():
    x = X()
    for r in (x > 0, x.argmax(), x.eq(x), (x > 0).all()):
        assert r.grad_fn is None and not r.requires_grad
    assert x.grad_fn is None


# ---------------------------------------------------------------------------
# graph structure


def test_next_functions_and_accumulate_grad():
    x = leaf(2, 2, seed=3)
    w = leaf(2, 2, seed=4)
    y = x * w
    (a, na), (b, nb) = y.grad_fn.next_functions
    assert isinstance(a, AccumulateGrad) and type(a).__name__ == "AccumulateGrad"
    assert a.variable is x and b.variable is w and na == nb == 0
    assert a.next_functions == ()
    z = y + x                                # x used twice: the same AccumulateGrad node
    assert z.grad_fn.next_functions[0][0] is y.grad_fn
    assert z.grad_fn.next_functions[1][0] is a
    c = torch.ones(2, 2, dtype=torch.float64)     # no grad: no edge
    u = x * c
    assert u.grad_fn.next_functions[0][0] is a
    assert u.grad_fn.next_functions[1] == (None, 0)
    # the chain is walkable from the output down to the leaves
    s = z.sum()
    seen, stack = [], [s.grad_fn]
    while stack:
        n = stack.pop()
        seen.append(type(n).__name__)
        stack.extend(m for m, _ in n.next_functions if m is not None)
    assert seen.count("AccumulateGrad") == 3 and "MulBackward0" in seen


def test_is_leaf_rules():
    a = torch.randn(2, 2)
    assert a.is_leaf and not a.requires_grad
    b = a * 2                                # ops on tensors not requiring grad -> leaf
    assert b.is_leaf and b.grad_fn is None
    x = torch.randn(2, 2, requires_grad=True)
    assert x.is_leaf
    y = x * 2
    assert not y.is_leaf
    assert y.detach().is_leaf
    with torch.no_grad():
        assert (x * 2).is_leaf


# ---------------------------------------------------------------------------
# backward basics


def test_gradients_accumulate_across_backward_calls():
    x = leaf(3, seed=5)
    (x * x).sum().backward()
    g1 = np_(x.grad).copy()
    np.testing.assert_allclose(g1, 2 * np_(x))
    grad_obj = x.grad
    (x * 3).sum().backward()
    np.testing.assert_allclose(np_(x.grad), 2 * np_(x) + 3)
    assert x.grad is grad_obj                 # accumulated in place (PyTorch does too)
    x.grad = None
    (x * 3).sum().backward()
    np.testing.assert_allclose(np_(x.grad), np.full(3, 3.0))


def test_grad_buffer_is_not_aliased_with_user_gradient():
    x = leaf(3, seed=6)
    g = torch.ones(3, dtype=torch.float64)
    (x * 1).backward(g)
    (x * 1).backward(g)
    np.testing.assert_array_equal(np_(g), np.ones(3))        # user's tensor untouched
    np.testing.assert_array_equal(np_(x.grad), np.full(3, 2.0))
    y = leaf(3, seed=7)
    y.backward(g)                               # the leaf itself as output
    y.backward(g)
    np.testing.assert_array_equal(np_(g), np.ones(3))
    np.testing.assert_array_equal(np_(y.grad), np.full(3, 2.0))


def test_nonleaf_grad_is_none_unless_retained():
    x = leaf(3, seed=8)
    y = x * 2
    z = y * y
    z.sum().backward()
    with pytest.warns(UserWarning, match="not a leaf Tensor"):
        assert y.grad is None
    x.grad = None
    y = x * 2
    y.retain_grad()
    y.retain_grad()                             # idempotent
    (y * y).sum().backward()
    np.testing.assert_allclose(np_(y.grad), 2 * np_(y))
    np.testing.assert_allclose(np_(x.grad), 8 * np_(x))
    assert y.retains_grad and not x.retains_grad
    x.retain_grad()                             # no-op on a leaf
    with pytest.raises(RuntimeError, match="requires_grad=False"):
        torch.ones(2).retain_grad()


def test_backward_gradient_shape_mismatch():
    x = leaf(3, seed=9)
    y = x * 2
    with pytest.raises(RuntimeError, match=r"Mismatch in shape: grad_output\[0\] has a shape of"):
        y.backward(torch.ones(2, dtype=torch.float64))
    y.backward(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    np.testing.assert_allclose(np_(x.grad), [2.0, 4.0, 6.0])


def test_backward_requires_scalar_or_gradient():
    x = leaf(3, seed=10)
    with pytest.raises(RuntimeError,
                       match="^grad can be implicitly created only for scalar outputs"):
        (x * 2).backward()
    (x * 2)[1].backward()                      # a one-element result is fine
    np.testing.assert_allclose(np_(x.grad), [0.0, 2.0, 0.0])


def test_backward_on_tensor_without_grad():
    with pytest.raises(RuntimeError,
                       match="^element 0 of tensors does not require grad and does not have a "
                             "grad_fn"):
        torch.ones(2).sum().backward()
    x = leaf(2, seed=11)
    with torch.no_grad():
        y = (x * 2).sum()
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad"):
        y.backward()


def test_retain_graph_allows_second_backward():
    x = leaf(3, seed=12)
    y = (x.exp() * x).sum()
    y.backward(retain_graph=True)
    g = np_(x.grad).copy()
    y.backward()
    np.testing.assert_allclose(np_(x.grad), 2 * g)
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.backward()


def test_backward_through_shared_subgraph_and_diamond():
    x = leaf(4, seed=13)
    a = x.sin()
    b = a * 2
    c = a * a
    out = (b + c).sum()
    out.backward()
    X_ = np_(x)
    np.testing.assert_allclose(np_(x.grad), np.cos(X_) * (2 + 2 * np.sin(X_)), rtol=1e-10)


def test_backward_inputs_argument():
    x, w = leaf(3, seed=14), leaf(3, seed=15)
    (x * w).sum().backward(inputs=[x])
    np.testing.assert_allclose(np_(x.grad), np_(w))
    assert w.grad is None


def test_autograd_backward_function_multiple_roots():
    x = leaf(3, seed=16)
    a, b = (x * 2).sum(), (x * x).sum()
    torch.autograd.backward([a, b])
    np.testing.assert_allclose(np_(x.grad), 2 + 2 * np_(x))


# ---------------------------------------------------------------------------
# in-place safety


def test_leaf_inplace_error():
    msg = re.escape("a leaf Variable that requires grad is being used in an in-place operation.")
    x = torch.ones(3, requires_grad=True)
    for op in (lambda: x.add_(1), lambda: x.mul_(2), lambda: x.zero_(), lambda: x.fill_(2),
               lambda: x.clamp_(min=0), lambda: x.sub_(1), lambda: x.div_(2),
               lambda: x.copy_(torch.zeros(3))):
        with pytest.raises(RuntimeError, match=msg):
            op()
    with pytest.raises(RuntimeError, match=msg):
        x += 1
    with pytest.raises(RuntimeError, match=msg):
        x[0] = 5.0
    np.testing.assert_array_equal(np_(x), np.ones(3, np.float32))     # untouched
    with torch.no_grad():                          # allowed without recording
        x.add_(1)
        x[0] = 5.0
    np.testing.assert_array_equal(np_(x), [5.0, 2.0, 2.0])
    assert x.is_leaf and x.requires_grad


def test_version_counter_error_on_saved_input():
    x = leaf(3, seed=17)
    y = x * 2
    z = y * y                                  # MulBackward0 saves y
    y.add_(1)
    with pytest.raises(RuntimeError, match="one of the variables needed for gradient computation "
                                           "has been modified by an inplace operation"):
        z.sum().backward()


def test_version_counter_error_on_saved_output():
    x = leaf(3, seed=18)
    y = x.exp()                                # ExpBackward0 saves its output
    y.mul_(2)
    with pytest.raises(RuntimeError, match="one of the variables needed for gradient computation "
                                           "has been modified by an inplace operation"):
        y.sum().backward()
    x2 = leaf(3, seed=19)
    s = x2.sigmoid()
    t = s * 1                                  # s is saved by SigmoidBackward0 only
    s.zero_()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        t.sum().backward()


def test_version_counter_shared_with_detach():
    x = leaf(3, seed=20)
    y = x.sin()
    y.detach().add_(1)                         # modifies y's storage: y's version bumps
    z = x * 1
    w = z * z
    z.detach().zero_()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        w.sum().backward()


def test_data_is_not_version_tracked():
    x = leaf(3, seed=21)
    y = x * 2
    z = y * y
    y.data.add_(1)                             # .data escapes tracking (PyTorch semantics)
    z.sum().backward()                         # no error; uses the modified values
    np.testing.assert_allclose(np_(x.grad), 2 * 2 * (2 * np_(x) + 1))


def test_inplace_on_nonleaf_is_recorded():
    x = leaf(3, seed=22)
    y = x * 1
    y.mul_(3)
    assert gname(y) == "MulBackward0"
    y.add_(x)
    assert gname(y) == "AddBackward0"
    y += 1
    y -= x
    y *= x
    assert gname(y) == "MulBackward0"
    y /= 2
    assert gname(y) == "DivBackward0"
    y.sum().backward()
    X_ = np_(x)
    # y = ((3x + x + 1 - x) * x) / 2 = (3x^2 + x) / 2  -> dy/dx = 3x + 1/2
    np.testing.assert_allclose(np_(x.grad), 3 * X_ + 0.5, rtol=1e-10)


@pytest.mark.parametrize("op,expect", [
    (lambda t: t.add_(2), lambda a: a + 2),
    (lambda t: t.add_(torch.ones(3, dtype=torch.float64), alpha=3), lambda a: a + 3),
    (lambda t: t.sub_(2), lambda a: a - 2),
    (lambda t: t.mul_(2), lambda a: a * 2),
    (lambda t: t.div_(4), lambda a: a / 4),
    (lambda t: t.zero_(), lambda a: a * 0),
    (lambda t: t.fill_(7), lambda a: np.full_like(a, 7)),
    (lambda t: t.clamp_(-0.5, 0.5), lambda a: np.clip(a, -0.5, 0.5)),
    (lambda t: t.clamp_(min=0), lambda a: np.maximum(a, 0)),
    (lambda t: t.copy_(torch.full((3,), 4.0, dtype=torch.float64)), lambda a: np.full_like(a, 4)),
])
def test_inplace_ops_values_and_return_self(op, expect):
    t = torch.tensor([-1.0, 0.25, 2.0], dtype=torch.float64)
    before = np_(t).copy()
    buf = t._data
    v0 = t._version[0]
    assert op(t) is t
    np.testing.assert_allclose(np_(t), expect(before))
    assert t._data is buf or np.shares_memory(t._data, buf)        # really in place
    assert t._version[0] > v0


def test_augmented_assignment_operators_in_place():
    t = torch.tensor([1.0, 2.0, 4.0])
    alias = t
    t += 1
    t -= 0.5
    t *= 2
    t /= 3
    assert t is alias
    np.testing.assert_allclose(np_(t), (np.array([1.0, 2.0, 4.0]) + 0.5) * 2 / 3, rtol=1e-6)
    i = torch.tensor([1, 2, 3])
    i += 1
    i *= 2
    np.testing.assert_array_equal(np_(i), [4, 6, 8])
    assert i.dtype == torch.int64


@pytest.mark.parametrize("op", [
    lambda t: t.add_(1), lambda t: t.sub_(1), lambda t: t.mul_(2), lambda t: t.div_(2),
    lambda t: t.zero_(), lambda t: t.fill_(1.5), lambda t: t.clamp_(min=0),
])
def test_inplace_ops_gradients(op):
    x = leaf(4, seed=23)
    y = x * 1
    op(y)
    (y * torch.arange(4, dtype=torch.float64)).sum().backward()
    X_ = np_(x)
    eps = 1e-6

    def f(a):
        t = torch.tensor(a, dtype=torch.float64)
        op(t)
        return float((t._data * np.arange(4)).sum())
    np.testing.assert_allclose(np_(x.grad), numgrad(f, X_.copy(), eps), atol=1e-6)


def test_saved_operands_only_what_the_needed_rule_reads():
    # x * c with c constant keeps c, not x: modifying x in place afterwards is fine
    x = leaf(3, seed=60)
    y = x * 1
    z = y * 10
    y.add_(1)
    z.sum().backward()
    np.testing.assert_allclose(np_(x.grad), np.full(3, 10.0))
    # but when both sides need a gradient each is saved for the other's rule
    w = leaf(3, seed=61)
    y = x * 1
    z = y * w
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_weight_updated_in_place_after_forward_of_constant_input():
    eager.manual_seed(0)
    xin = torch.randn(3, 4)
    w = torch.randn(4, 2, requires_grad=True)
    loss = xin.mm(w).sum()                      # MmBackward0 needs xin for w's grad, not w
    with torch.no_grad():
        w -= 1.0
    loss.backward()
    np.testing.assert_allclose(np_(w.grad), np.repeat(np_(xin).sum(0)[:, None], 2, 1),
                               rtol=1e-6)


def test_inplace_on_view_of_leaf_errors():
    msg = re.escape("a view of a leaf Variable that requires grad is being used in an "
                    "in-place operation.")
    x = torch.ones(4, requires_grad=True)
    for op in (lambda: x.view(2, 2).add_(1), lambda: x[1:].mul_(2), lambda: x.t().zero_(),
               lambda: x.view(2, 2)[0].fill_(3)):
        with pytest.raises(RuntimeError, match=msg):
            op()
    with pytest.raises(RuntimeError, match=msg):
        x.view(2, 2)[0] = 5.0
    np.testing.assert_array_equal(np_(x), np.ones(4))
    with torch.no_grad():
        x[1:].mul_(2)                            # fine without recording
    np.testing.assert_array_equal(np_(x), [1, 2, 2, 2])


@pytest.mark.parametrize("case", ["slice", "view", "view-select", "view-t-select"])
def test_inplace_through_view_rebases_base(case):
    X = np.array([1.0, 2.0, 3.0, 4.0])
    Wt = np.array([1.0, 10.0, 100.0, 1000.0])

    def through_view(x):
        y = x * 1
        if case == "slice":
            y[1:].mul_(10)
        elif case == "view":
            y.view(2, 2).mul_(x.view(2, 2))
        elif case == "view-select":
            y.view(2, 2)[0].mul_(3)
        else:
            y.view(2, 2).t()[1].add_(x[:2] * x[2:])     # column 1 of y.view(2,2): y[1], y[3]
        return y

    def reference(a):                           # numpy, same math, no views
        y = a.copy()
        if case == "slice":
            y[1:] *= 10
        elif case == "view":
            y = y * a
        elif case == "view-select":
            y[:2] *= 3
        else:
            y[[1, 3]] += a[:2] * a[2:]
        return y

    x = torch.tensor(X, requires_grad=True)
    y = through_view(x)
    assert gname(y) == "CopySlices"             # the base got a new history, as in PyTorch
    np.testing.assert_allclose(np_(y), reference(X))
    (y * torch.tensor(Wt)).sum().backward()
    np.testing.assert_allclose(np_(x.grad), numgrad(lambda a: (reference(a) * Wt).sum(), X),
                               rtol=1e-6, atol=1e-6)


def test_augmented_assignment_on_slice():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1
    y[1:] *= 10                                  # __getitem__, __imul__ on the view, __setitem__
    y.sum().backward()
    np.testing.assert_array_equal(np_(y), [1.0, 20.0, 30.0])
    np.testing.assert_array_equal(np_(x.grad), [1.0, 10.0, 10.0])
    x.grad = None
    y = x * 1
    y[1:] = y[1:] * 10                           # a saved view of y, then y changes: fine
    y.sum().backward()
    np.testing.assert_array_equal(np_(x.grad), [1.0, 10.0, 10.0])


def test_views_share_the_version_counter():
    x = leaf(4, seed=62)
    y = x * 2
    z = y * y                                    # saves y
    y[1:].mul_(10)                               # writes y's buffer through a view
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()
    y = x * 2
    v = y.view(2, 2)
    s = v.sigmoid() * v                          # saves v (and sigmoid's output)
    with torch.no_grad():
        y.add_(1)                                # the base changes: the view's saved data did
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        s.sum().backward()
    d = x.detach().view(4)
    assert d._version is x._version              # detach shares the counter, view keeps it


def test_inplace_into_plain_buffer_through_view_records_copyslices():
    buf = torch.zeros(2, 4, dtype=torch.float64)
    x = leaf(4, seed=63)
    buf[1].copy_(x * 3)
    assert buf.requires_grad and gname(buf) == "CopySlices"
    (buf * buf).sum().backward()
    np.testing.assert_allclose(np_(x.grad), 2 * 9 * np_(x))


def test_setitem_without_grad():
    t = torch.zeros(3, 4)
    t[0] = 1.0
    t[1, 2] = 5.0
    t[:, 3] = torch.tensor([7.0, 8.0, 9.0])
    t[t > 8] = -1.0
    expect = np.zeros((3, 4), np.float32)
    expect[0] = 1
    expect[1, 2] = 5
    expect[:, 3] = [7, 8, 9]
    expect[expect > 8] = -1
    np.testing.assert_array_equal(np_(t), expect)


def test_setitem_with_grad_recording():
    x = leaf(3, 2, seed=24)
    y = x * 1
    y[0] = 0
    assert gname(y) == "CopySlices"
    assert repr(y).endswith("grad_fn=<CopySlices>)")
    np.testing.assert_array_equal(np_(y)[0], [0, 0])
    y.sum().backward()
    np.testing.assert_array_equal(np_(x.grad), [[0, 0], [1, 1], [1, 1]])


def test_setitem_value_gets_gradient():
    x = leaf(3, 2, seed=25)
    v = leaf(2, seed=26)
    y = x * 1
    y[1] = v * 3
    (y * y).sum().backward()
    X_, V = np_(x), np_(v)
    gx = 2 * X_
    gx[1] = 0
    np.testing.assert_allclose(np_(x.grad), gx)
    np.testing.assert_allclose(np_(v.grad), 2 * (3 * V) * 3)


def test_setitem_into_plain_tensor_from_grad_value():
    buf = torch.zeros(2, 3, dtype=torch.float64)
    v = leaf(3, seed=27)
    buf[0] = v * 2
    assert buf.requires_grad and gname(buf) == "CopySlices"
    buf.sum().backward()
    np.testing.assert_allclose(np_(v.grad), np.full(3, 2.0))


# ---------------------------------------------------------------------------
# eager.autograd.grad


def test_autograd_grad_basic_and_does_not_touch_grad():
    x = leaf(3, seed=28)
    y = (x ** 3).sum()
    (g,) = torch.autograd.grad(y, x)
    np.testing.assert_allclose(np_(g), 3 * np_(x) ** 2)
    assert x.grad is None
    assert not g.requires_grad


def test_autograd_grad_multiple_inputs_and_grad_outputs():
    x, w = leaf(3, seed=29), leaf(3, seed=30)
    y = x * w
    gx, gw = torch.autograd.grad(y, [x, w], grad_outputs=torch.ones(3, dtype=torch.float64))
    np.testing.assert_allclose(np_(gx), np_(w))
    np.testing.assert_allclose(np_(gw), np_(x))


def test_autograd_grad_wrt_intermediate():
    x = leaf(3, seed=31)
    h = x * 2
    y = (h * h).sum()
    (gh,) = torch.autograd.grad(y, h)
    np.testing.assert_allclose(np_(gh), 2 * np_(h))
    assert x.grad is None


def test_autograd_grad_allow_unused():
    x, u = leaf(3, seed=32), leaf(3, seed=33)
    y = (x * 2).sum()
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        torch.autograd.grad(y, [x, u], retain_graph=True)
    gx, gu = torch.autograd.grad(y, [x, u], allow_unused=True)
    np.testing.assert_allclose(np_(gx), np.full(3, 2.0))
    assert gu is None
    y = (x * 2).sum()
    gx, gu = torch.autograd.grad(y, [x, u], materialize_grads=True)
    np.testing.assert_array_equal(np_(gu), np.zeros(3))


def test_autograd_grad_input_must_require_grad():
    x = leaf(3, seed=34)
    c = torch.ones(3)
    with pytest.raises(RuntimeError, match="does not require grad"):
        torch.autograd.grad((x * 2).sum(), c)


def test_higher_order_derivatives_of_x4():
    x = torch.tensor([0.5, -1.5, 2.0], dtype=torch.float64, requires_grad=True)
    y = (x ** 4).sum()
    (g1,) = torch.autograd.grad(y, x, create_graph=True)
    assert g1.requires_grad and g1.grad_fn is not None
    np.testing.assert_allclose(np_(g1), 4 * np_(x) ** 3)
    (g2,) = torch.autograd.grad(g1.sum(), x, create_graph=True)
    np.testing.assert_allclose(np_(g2), 12 * np_(x) ** 2)
    (g3,) = torch.autograd.grad(g2.sum(), x, create_graph=True)
    np.testing.assert_allclose(np_(g3), 24 * np_(x))
    (g4,) = torch.autograd.grad(g3.sum(), x)
    np.testing.assert_allclose(np_(g4), np.full(3, 24.0))


@pytest.mark.parametrize("f,d1,d2", [
    (lambda x: x.exp(), np.exp, np.exp),
    (lambda x: x.sin(), np.cos, lambda a: -np.sin(a)),
    (lambda x: x.tanh(), lambda a: 1 - np.tanh(a) ** 2,
     lambda a: -2 * np.tanh(a) * (1 - np.tanh(a) ** 2)),
    (lambda x: x.sigmoid(), lambda a: (s := 1 / (1 + np.exp(-a))) * (1 - s),
     lambda a: (s := 1 / (1 + np.exp(-a))) * (1 - s) * (1 - 2 * s)),
    (lambda x: (x * x + 1).log(), lambda a: 2 * a / (a * a + 1),
     lambda a: (2 - 2 * a * a) / (a * a + 1) ** 2),
    (lambda x: 1 / x, lambda a: -1 / a ** 2, lambda a: 2 / a ** 3),
])
def test_second_derivatives(f, d1, d2):
    x = torch.tensor([0.3, -0.7, 1.2], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(f(x).sum(), x, create_graph=True)
    np.testing.assert_allclose(np_(g), d1(np_(x)), rtol=1e-10)
    (gg,) = torch.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(np_(gg), d2(np_(x)), rtol=1e-9)


def test_backward_create_graph_then_backward_through_grad():
    x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    y = (x ** 3).sum()
    y.backward(create_graph=True)
    g = x.grad                                  # 3x^2, differentiable
    assert g.requires_grad
    x.grad = None
    g.sum().backward()
    np.testing.assert_allclose(np_(x.grad), 6 * np_(x))


def test_mixed_partials():
    x = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    y = torch.tensor(-0.5, dtype=torch.float64, requires_grad=True)
    f = x * x * y + y.exp() * x
    gx, gy = torch.autograd.grad(f, (x, y), create_graph=True)
    (gxy,) = torch.autograd.grad(gx, y, retain_graph=True)
    (gyx,) = torch.autograd.grad(gy, x)
    expect = 2 * 1.5 + np.exp(-0.5)
    assert gxy.item() == pytest.approx(expect) and gyx.item() == pytest.approx(expect)


# ---------------------------------------------------------------------------
# hooks


def test_register_hook_on_leaf_modifies_grad_and_remove():
    x = leaf(3, seed=35)
    seen = []

    def hook(g):
        seen.append(np_(g).copy())
        return g * 10

    h = x.register_hook(hook)
    (x * 2).sum().backward()
    np.testing.assert_array_equal(seen[0], np.full(3, 2.0))
    np.testing.assert_allclose(np_(x.grad), np.full(3, 20.0))
    h.remove()
    x.grad = None
    (x * 2).sum().backward()
    np.testing.assert_allclose(np_(x.grad), np.full(3, 2.0))
    assert len(seen) == 1


def test_register_hook_on_nonleaf():
    x = leaf(3, seed=36)
    y = x * 3
    seen = []
    y.register_hook(lambda g: seen.append(np_(g).copy()))          # observe only (returns None)
    h2 = y.register_hook(lambda g: g * 0.5)                           # modify
    (y * y).sum().backward()
    np.testing.assert_allclose(seen[0], 2 * np_(y))
    np.testing.assert_allclose(np_(x.grad), 2 * np_(y) * 0.5 * 3)
    h2.remove()


def test_hooks_run_in_registration_order_and_on_requires_grad_only():
    x = leaf(2, seed=37)
    order = []
    x.register_hook(lambda g: order.append(1) or g + 1)
    x.register_hook(lambda g: order.append(2) or g * 2)
    (x * 1).sum().backward()
    assert order == [1, 2]
    np.testing.assert_allclose(np_(x.grad), np.full(2, 4.0))
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        torch.ones(2).register_hook(lambda g: g)


def test_hook_with_retain_grad_sees_modified_grad():
    x = leaf(2, seed=38)
    y = x * 1
    y.retain_grad()
    y.register_hook(lambda g: g * 3)
    y.sum().backward()
    np.testing.assert_allclose(np_(x.grad), np.full(2, 3.0))


# ---------------------------------------------------------------------------
# grad modes


def test_set_grad_enabled_forms():
    x = leaf(2, seed=39)
    assert torch.is_grad_enabled()
    with torch.set_grad_enabled(False):
        assert not torch.is_grad_enabled()
        assert not (x * 2).requires_grad
    assert torch.is_grad_enabled()
    torch.set_grad_enabled(False)               # as a plain call
    try:
        assert not torch.is_grad_enabled()
        assert (x * 2).grad_fn is None
    finally:
        torch.set_grad_enabled(True)
    assert torch.is_grad_enabled()

    @torch.set_grad_enabled(False)
    def f(t):
        return t * 2

    assert torch.is_grad_enabled()             # decorating did not change the mode
    assert not f(x).requires_grad
    assert torch.is_grad_enabled()


def test_enable_grad_inside_no_grad():
    x = leaf(2, seed=40)
    with torch.no_grad():
        assert not torch.is_grad_enabled()
        with torch.enable_grad():
            assert torch.is_grad_enabled()
            y = x * 2
        z = x * 2
        assert not torch.is_grad_enabled()
    assert y.requires_grad and gname(y) == "MulBackward0"
    assert not z.requires_grad

    @torch.enable_grad()
    def g(t):
        return t * 3

    with torch.no_grad():
        assert g(x).requires_grad


def test_no_grad_restores_state_on_exception():
    with pytest.raises(ValueError):
        with torch.no_grad():
            raise ValueError
    assert torch.is_grad_enabled()
    assert torch.autograd.grad_mode.is_grad_enabled()


def test_no_grad_update_keeps_leaf():
    w = leaf(3, seed=41)
    (w * w).sum().backward()
    with torch.no_grad():
        w -= 0.1 * w.grad
        w.grad.zero_()
    assert w.is_leaf and w.requires_grad and w.grad_fn is None
    np.testing.assert_array_equal(np_(w.grad), np.zeros(3))


# ---------------------------------------------------------------------------
# detach, .data, requires_grad


def test_detach_and_detach_():
    x = leaf(3, seed=42)
    y = x * 2
    d = y.detach()
    assert not d.requires_grad and d.grad_fn is None and d.is_leaf
    assert np.shares_memory(d._data, y._data)
    assert y.grad_fn is not None                 # the original is unchanged
    r = y.detach_()
    assert r is y and y.grad_fn is None and not y.requires_grad and y.is_leaf
    out = (x * y).sum()                          # y is now a constant
    out.backward()
    np.testing.assert_allclose(np_(x.grad), np_(y))


def test_data_get_and_set():
    x = leaf(3, seed=43)
    d = x.data
    assert not d.requires_grad and d.grad_fn is None
    assert np.shares_memory(d._data, x._data)
    d.zero_()                                    # in place through .data: visible in x
    np.testing.assert_array_equal(np_(x), np.zeros(3))
    x.data = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    np.testing.assert_array_equal(np_(x), [1.0, 2.0, 3.0])
    assert x.requires_grad and x.is_leaf
    (x * x).sum().backward()
    np.testing.assert_allclose(np_(x.grad), [2.0, 4.0, 6.0])


def test_requires_grad_on_integer_tensor_errors():
    with pytest.raises(RuntimeError, match="floating point"):
        torch.tensor([1, 2, 3], requires_grad=True)
    i = torch.tensor([1, 2, 3])
    with pytest.raises(RuntimeError, match="floating point"):
        i.requires_grad_()
    with pytest.raises(RuntimeError, match="floating point"):
        i.requires_grad = True
    assert not i.requires_grad
    f = i.float().requires_grad_()
    assert f.requires_grad and f.is_leaf


def test_requires_grad_false_on_nonleaf_errors():
    x = leaf(2, seed=44)
    y = x * 2
    y.requires_grad = True                       # setting True on a non-leaf is a no-op
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf variables"):
        y.requires_grad = False


def test_integer_results_do_not_require_grad():
    x = leaf(3, seed=45)
    assert not x.argmax().requires_grad
    assert not (x > 0).requires_grad
    assert not x.long().requires_grad


# ---------------------------------------------------------------------------
# custom autograd.Function


class MyExp(Function):
    @staticmethod
    def forward(ctx, i):
        assert not torch.is_grad_enabled()      # forward runs without recording
        result = i.exp()
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        (result,) = ctx.saved_tensors
        return grad_output * result


class ScaledMul(Function):
    @staticmethod
    def forward(ctx, a, b, scale):
        ctx.save_for_backward(a, b)
        ctx.scale = scale
        ctx.flags = ctx.needs_input_grad
        return a * b * scale

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga = g * b * ctx.scale if ctx.needs_input_grad[0] else None
        gb = g * a * ctx.scale if ctx.needs_input_grad[1] else None
        return ga, gb, None


class Cube(Function):
    """backward written with tensor ops, so it is itself differentiable."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x ** 2


def test_custom_function_forward_backward():
    x = leaf(3, seed=46)
    y = MyExp.apply(x)
    assert gname(y) == "MyExpBackward"
    assert repr(y).endswith("grad_fn=<MyExpBackward>)")
    assert re.fullmatch(r"<MyExpBackward object at 0x[0-9a-f]+>", repr(y.grad_fn))
    np.testing.assert_allclose(np_(y), np.exp(np_(x)))
    assert y.grad_fn.next_functions[0][0].variable is x
    (y * 2).sum().backward()
    np.testing.assert_allclose(np_(x.grad), 2 * np.exp(np_(x)))


def test_custom_function_needs_input_grad_and_non_tensor_args():
    a, b = leaf(3, seed=47), torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    out = ScaledMul.apply(a, b, 2.0)
    assert gname(out) == "ScaledMulBackward"
    out.sum().backward()
    np.testing.assert_allclose(np_(a.grad), 2 * np_(b))
    assert b.grad is None
    # needs_input_grad is one flag per forward argument
    ctx_flags = out.grad_fn._ctx.flags
    assert tuple(ctx_flags) == (True, False, False)


def test_custom_function_without_grad_inputs_records_nothing():
    y = MyExp.apply(torch.ones(2))
    assert y.grad_fn is None and not y.requires_grad
    with torch.no_grad():
        assert MyExp.apply(leaf(2, seed=48)).grad_fn is None


def test_custom_function_double_backward():
    x = torch.tensor([0.5, -2.0, 1.5], dtype=torch.float64, requires_grad=True)
    y = Cube.apply(x).sum()
    (g,) = torch.autograd.grad(y, x, create_graph=True)
    np.testing.assert_allclose(np_(g), 3 * np_(x) ** 2)
    assert g.requires_grad
    (gg,) = torch.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(np_(gg), 6 * np_(x))


def test_custom_function_saved_tensors_freed_and_version_checked():
    x = leaf(3, seed=49)
    y = MyExp.apply(x)
    s = y.sum()
    s.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        s.backward()
    x2 = leaf(3, seed=50)
    h = x2 * 1
    out = Cube.apply(h)
    h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_custom_function_in_larger_graph_matches_builtin():
    x = leaf(2, 3, seed=51)
    a = (MyExp.apply(x * 2) * x).sum()
    (ga,) = torch.autograd.grad(a, x)
    b = ((x * 2).exp() * x).sum()
    (gb,) = torch.autograd.grad(b, x)
    np.testing.assert_allclose(np_(ga), np_(gb), rtol=1e-12)


# ---------------------------------------------------------------------------
# broadcasting: gradients are summed back to each input's shape

BCAST = [((3, 4), (4,)), ((3, 4), (1, 4)), ((3, 1), (1, 4)), ((2, 3, 4), (3, 1)),
         ((3, 4), ()), ((), (2, 3)), ((1,), (3,)), ((1, 1), (2, 2)), ((5,), (1,))]


@pytest.mark.parametrize("sa,sb", BCAST)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum"])
def test_broadcast_gradients(op, sa, sb):
    rng = np.random.default_rng(zlib.crc32(repr((op, sa, sb)).encode()))
    A = np.asarray(rng.uniform(0.5, 2.0, size=sa))
    B = np.asarray(rng.uniform(0.5, 2.0, size=sb) * rng.choice([-1, 1], size=sb))
    fns = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "div": lambda a, b: a / b, "maximum": lambda a, b: torch.maximum(a, b)}
    npf = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
           "maximum": np.maximum}[op]
    a = torch.tensor(A, dtype=torch.float64, requires_grad=True)
    b = torch.tensor(B, dtype=torch.float64, requires_grad=True)
    out = fns[op](a, b)
    wshape = np.broadcast_shapes(sa, sb)
    Wt = rng.standard_normal(wshape)
    (out * torch.tensor(Wt)).sum().backward()
    assert tuple(a.grad.shape) == sa and tuple(b.grad.shape) == sb
    np.testing.assert_allclose(np_(a.grad), numgrad(lambda v: (npf(v, B) * Wt).sum(), A.copy()),
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np_(b.grad), numgrad(lambda v: (npf(A, v) * Wt).sum(), B.copy()),
                               rtol=1e-6, atol=1e-6)


def test_broadcast_scalar_tensor_grad_is_0d():
    s = torch.tensor(2.0, requires_grad=True)
    x = torch.ones(3, 4, requires_grad=True)
    (x * s).sum().backward()
    assert s.grad.shape == () and s.grad.item() == 12.0
    assert repr(s.grad) == "tensor(12.)"
    assert tuple(x.grad.shape) == (3, 4)


def test_grad_dtype_matches_input_dtype():
    a = torch.ones(3, requires_grad=True)                    # float32
    b = torch.ones(3, dtype=torch.float64, requires_grad=True)
    (a * b).sum().backward()
    assert a.grad.dtype == torch.float32 and b.grad.dtype == torch.float64


# ---------------------------------------------------------------------------
# composite expressions against finite differences


COMPOSITES = [
    lambda x: (x.tanh() * x.sigmoid()).sum(),
    lambda x: ((x * 2).exp() / (1 + x * x)).mean(),
    lambda x: (x.mm(x.t()) ** 2).sum(),
    lambda x: x.clamp(-0.5, 0.5).sum() + (x.relu() * x).sum(),
    lambda x: torch.where(x > 0, x * x, -x).sum(),
    lambda x: (x.sum(0) * x.mean(1, keepdim=True)).sum(),
    lambda x: x.view(-1)[torch.tensor([0, 3, 3, 5])].sum() * x[1, 2],
    lambda x: x.max() + x.abs().sum(),
    lambda x: (x.t().reshape(2, 6).unsqueeze(0).expand(3, 2, 6) * 2).sum(),
]


@pytest.mark.parametrize("i", range(len(COMPOSITES)))
def test_composite_gradients_match_finite_differences(i):
    f = COMPOSITES[i]
    X0 = np.random.default_rng(i).uniform(-1.5, 1.5, size=(3, 4))
    x = torch.tensor(X0, requires_grad=True)
    f(x).backward()

    def fnum(a):
        return f(torch.tensor(a)).item()
    np.testing.assert_allclose(np_(x.grad), numgrad(fnum, X0.copy()), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------
# scale and memory


def test_long_chain_no_recursion_error():
    x = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    y = x
    for _ in range(100_000):
        y = y * 1.0000001
    y.backward()
    assert x.grad.item() == pytest.approx(1.0000001 ** 100_000, rel=1e-9)


def test_long_additive_chain_no_recursion_error():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x
    for _ in range(100_000):
        y = y + x
    y.sum().backward()
    np.testing.assert_array_equal(np_(x.grad), [100_001.0, 100_001.0])
    del y                                        # dropping a deep graph does not overflow either
    gc.collect()


def test_long_chain_create_graph_then_free():
    x = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    y = x
    for _ in range(20_000):
        y = y.sin() * 0.5 + y * 0.5
    (g,) = torch.autograd.grad(y, x)
    ref = 1.0
    v = 0.5
    for _ in range(20_000):
        ref *= 0.5 * np.cos(v) + 0.5
        v = 0.5 * np.sin(v) + 0.5 * v
    assert g.item() == pytest.approx(ref, rel=1e-8)


def test_saved_intermediate_freed_after_backward():
    x = leaf(1000, seed=52)
    y = x.exp()                                 # ExpBackward0 saves its output buffer
    buf = weakref.ref(y._data)                  # the numpy storage of that intermediate
    out = y.sum()
    del y
    gc.collect()
    assert buf() is not None                    # only the graph keeps it alive now
    out.backward()
    gc.collect()
    assert buf() is None                        # ExpBackward0 released it
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        out.backward()


def test_saved_input_tensor_freed_after_backward():
    x = leaf(1000, seed=53)
    h = x.exp()                                  # h is saved by the MulBackward0 below
    out = (h * x).sum()
    ref = weakref.ref(h)
    del h
    gc.collect()
    assert ref() is not None                     # alive: the graph holds it
    out.backward()
    gc.collect()
    assert ref() is None                         # freed by backward
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        out.backward()


def test_saved_tensor_kept_with_retain_graph():
    x = leaf(10, seed=54)
    h = x.exp()
    out = (h * x).sum()
    ref = weakref.ref(h)
    del h
    out.backward(retain_graph=True)
    gc.collect()
    assert ref() is not None
    out.backward()
    gc.collect()
    assert ref() is None


def test_graph_collected_when_output_dropped():
    x = leaf(100, seed=55)
    y = (x * 2).exp()
    node_ref = weakref.ref(y.grad_fn)
    del y
    gc.collect()
    assert node_ref() is None


@pytest.mark.slow
def test_training_loop_does_not_leak_objects():
    eager.manual_seed(0)
    xs = torch.randn(16, 8)
    ys = torch.randn(16, 1)
    w1 = torch.randn(8, 16, requires_grad=True)
    b1 = torch.zeros(16, requires_grad=True)
    w2 = torch.randn(16, 1, requires_grad=True)
    lr = 1e-3

    def step():
        h = (xs.mm(w1) + b1).clamp(min=0)
        pred = h.mm(w2).sigmoid()
        loss = ((pred - ys) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            for p in (w1, b1, w2):
                p -= lr * p.grad
                p.grad.zero_()
        return loss.item()

    for _ in range(200):                          # warm caches (node classes, etc.)
        step()
    gc.collect()
    before = len(gc.get_objects())
    first = None
    for i in range(10_000):
        loss = step()
        if i == 0:
            first = loss
    gc.collect()
    after = len(gc.get_objects())
    assert after - before < 200, (before, after)
    assert loss < first
