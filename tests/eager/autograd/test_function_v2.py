"""autograd.Function in PyTorch 2 style (forward without ctx + setup_context), and ctx's
mark_non_differentiable / set_materialize_grads / needs_input_grad / mark_dirty, and
once_differentiable."""

import numpy as np
import pytest

import eager
from eager.autograd import Function
from eager.autograd.function import once_differentiable


class Cube(Function):
    @staticmethod
    def forward(x, k):
        return x ** 3 * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, k = inputs
        ctx.save_for_backward(x)
        ctx.k = k
        ctx.seen_needs = ctx.needs_input_grad

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x ** 2 * ctx.k, None


def test_setup_context_style():
    x = eager.tensor([1.0, 2.0], requires_grad=True)
    y = Cube.apply(x, 2.0)
    assert y.tolist() == [2.0, 16.0] and type(y.grad_fn).__name__ == "CubeBackward"
    y.sum().backward()
    assert x.grad.tolist() == [6.0, 24.0]
    with eager.no_grad():
        assert Cube.apply(x, 1.0).grad_fn is None


def test_setup_context_sees_outputs_and_needs_input_grad():
    class Exp(Function):
        @staticmethod
        def forward(x, y):
            return x.exp(), y * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(output[0])
            ctx.needs = ctx.needs_input_grad
            ctx.mark_non_differentiable(output[1])

        @staticmethod
        def backward(ctx, g, g2):
            (e,) = ctx.saved_tensors
            assert g2 is not None and float(g2.abs().sum()) == 0
            return g * e, None

    x = eager.tensor([0.0, 1.0], requires_grad=True)
    y = eager.tensor([1.0])
    e, d = Exp.apply(x, y)
    assert not d.requires_grad and e.requires_grad
    e.sum().backward()
    assert np.allclose(x.grad.numpy(), np.exp([0.0, 1.0]))
    assert e.grad_fn._ctx.needs == (True, False)


def test_set_materialize_grads_false_passes_none():
    got = []

    class Two(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 1, x * 2

        @staticmethod
        def backward(ctx, g1, g2):
            got.append((g1 is None, g2 is None))
            return g1 if g1 is not None else g2 * 2

    x = eager.ones(2, requires_grad=True)
    a, b = Two.apply(x)
    b.sum().backward()
    assert got == [(True, False)] and x.grad.tolist() == [2.0, 2.0]


def test_once_differentiable():
    class Sq(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            assert not eager.is_grad_enabled()
            return 2 * x * g

    x = eager.tensor([3.0], requires_grad=True)
    (gx,) = eager.autograd.grad(Sq.apply(x).sum(), x, create_graph=True)
    assert gx.tolist() == [6.0] and not gx.requires_grad  # the incoming grad is a constant
    (gx,) = eager.autograd.grad((Sq.apply(x) * x).sum(), x, create_graph=True)
    assert gx.tolist() == [27.0] and gx.requires_grad
    with pytest.raises(RuntimeError, match="trying to differentiate twice a function that "
                                           "was marked with @once_differentiable"):
        gx.sum().backward()
    x.grad = None
    Sq.apply(x).sum().backward()
    assert x.grad.tolist() == [6.0]


class AddOne_(Function):
    @staticmethod
    def forward(ctx, x):
        x.add_(1)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g


def test_mark_dirty_keeps_identity_and_history():
    a = eager.tensor([1.0, 2.0], requires_grad=True)
    b = a * 2
    c = AddOne_.apply(b)
    assert c is b and type(b.grad_fn).__name__ == "AddOne_Backward"
    assert b.tolist() == [3.0, 5.0]
    (c * c).sum().backward()
    assert a.grad.tolist() == [12.0, 20.0]
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used "
                                           "in an in-place operation."):
        AddOne_.apply(eager.ones(1, requires_grad=True))


def test_against_torch():
    torch = pytest.importorskip("torch")

    class TCube(torch.autograd.Function):
        @staticmethod
        def forward(x, k):
            return x ** 3 * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])
            ctx.k = inputs[1]

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x ** 2 * ctx.k, None

    xs = np.array([0.5, -1.5, 2.0])
    tx = torch.tensor(xs, requires_grad=True)
    ex = eager.tensor(xs, requires_grad=True)
    TCube.apply(tx, 1.5).sum().backward()
    Cube.apply(ex, 1.5).sum().backward()
    assert np.allclose(tx.grad.numpy(), ex.grad.numpy())
    ta = torch.tensor([1.0, 2.0], requires_grad=True)

    class TAdd(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.add_(1)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g

    tb = ta * 2
    tc = TAdd.apply(tb)
    assert tc is tb
    (tc * tc).sum().backward()
    assert ta.grad.tolist() == [12.0, 20.0]
