"""A custom autograd op: ``eager.autograd.Function`` with its own forward and backward.

``ClippedExp`` computes ``exp(min(x, limit))``: the exponential, capped so it
cannot overflow.  ``forward`` runs on the tensors' values with recording off and
saves what ``backward`` needs with ``ctx.save_for_backward``; ``backward``
receives the gradient of the output and returns one gradient per input (None for
the non-tensor ``limit``).  The output's ``grad_fn`` is a
``ClippedExpBackward`` node, and ``eager.autograd.gradcheck`` compares the
hand-written backward against central finite differences.  A deliberately
wrong backward shows what a gradcheck failure looks like.

Run:  python examples/custom_function.py
"""
import numpy as np

import eager
from eager.autograd import Function, GradcheckError, gradcheck


class ClippedExp(Function):
    """y = exp(min(x, limit)); dy/dx = y where x < limit, else 0."""

    @staticmethod
    def forward(ctx, x, limit=10.0):
        y = x.clamp(max=limit).exp()          # runs with grad recording off
        ctx.save_for_backward(x, y)           # the input and the output, for backward
        ctx.limit = limit                     # non-tensor state can live on ctx
        return y

    @staticmethod
    def backward(ctx, grad_out):
        x, y = ctx.saved_tensors
        grad_x = grad_out * y * (x < ctx.limit).double()
        return grad_x, None                   # one gradient per forward input


class WrongExp(Function):
    """The same forward with a bug in backward (forgets the chain rule's factor y)."""

    @staticmethod
    def forward(ctx, x, limit=10.0):
        ctx.save_for_backward(x)
        ctx.limit = limit
        return x.clamp(max=limit).exp()

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        return grad_out * (x < ctx.limit).double(), None


x = eager.tensor([-1.0, 0.0, 2.0, 50.0], dtype=eager.float64, requires_grad=True)
y = ClippedExp.apply(x, 3.0)
print("x =", x)
print("y = ClippedExp.apply(x, 3.0) =", y)
print("y.grad_fn:", type(y.grad_fn).__name__,
      "-> next_functions:", [type(n).__name__ for n, _ in y.grad_fn.next_functions if n])

y.sum().backward()
print("x.grad =", x.grad, " (exp(x) below the limit, 0 where clipped)")
assert np.allclose(x.grad.numpy(), [np.exp(-1), 1.0, np.exp(2), 0.0])

# composes with built-in ops on the tape, both before and after it
w = eager.tensor([0.5, -0.25, 1.5], dtype=eager.float64, requires_grad=True)
loss = (ClippedExp.apply(w * 2, 2.5) * w).sum()
loss.backward()
print("loss =", round(loss.item(), 6), " d loss / d w =", w.grad)

print()
inp = eager.randn(6, dtype=eager.float64) * 2
inp.requires_grad_(True)
print("gradcheck(ClippedExp):", gradcheck(lambda t: ClippedExp.apply(t, 1.0), (inp,)))
try:
    gradcheck(lambda t: WrongExp.apply(t, 1.0), (inp,))
except GradcheckError as e:
    print("gradcheck(WrongExp) fails as it should:")
    print("  " + str(e).splitlines()[0])
