"""A compiled function inside an eager model: eager autograd flows straight through it.

The model is eager (``eager.nn.Linear`` layers, an eager loss), except for one
block in the middle, a SiLU-gated residual written as a plain function and
compiled with ``graphc.compile``.  Called with tensors that require grad, the
compiled block returns a tensor whose ``grad_fn`` is a
``CompiledFunctionBackward`` node: its backward runs a second compiled
function, the VJP of the traced graph.  So ``loss.backward()`` fills the
gradients of every eager parameter *and* of the block's own parameter ``alpha``,
and they equal the gradients of the same model run entirely eagerly.

Run:  python examples/compiled_in_eager.py
"""
import numpy as np

import eager
import graphc
from eager import nn

eager.manual_seed(0)


def gated_residual(h, alpha):
    """h + alpha * silu(h): elementwise, so graphc fuses it into one native loop."""
    return h + alpha * (h * h.sigmoid())


compiled_block = graphc.compile(gated_residual)


class Model(nn.Module):
    def __init__(self, block):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.fc2 = nn.Linear(32, 4)
        self.alpha = nn.Parameter(eager.tensor([0.5]))
        self.block = block

    def forward(self, x):
        return self.fc2(self.block(self.fc1(x), self.alpha))


x = eager.randn(16, 20)
target = eager.randn(16, 4)
model_c = Model(compiled_block)       # the compiled block in the middle
model_e = Model(gated_residual)       # the same block, eager
model_e.load_state_dict(model_c.state_dict())

loss_fn = nn.MSELoss()
h = model_c.fc1(x)
out = compiled_block(h, model_c.alpha)
print("compiled block output grad_fn:", type(out.grad_fn).__name__)
print("its next_functions:", [type(n).__name__ for n, _ in out.grad_fn.next_functions if n])
print("eager block output grad_fn:   ", type(gated_residual(h, model_c.alpha).grad_fn).__name__)

loss_c = loss_fn(model_c(x), target)
loss_e = loss_fn(model_e(x), target)
print(f"\nloss: with the compiled block {loss_c.item():.7f}, all eager {loss_e.item():.7f}")
print("loss grad_fn:", type(loss_c.grad_fn).__name__)
loss_c.backward()
loss_e.backward()

print(f"\n{'parameter':<12} {'shape':<10} {'max |grad compiled - grad eager|':>34}")
for (name, pc), (_, pe) in zip(model_c.named_parameters(), model_e.named_parameters()):
    err = np.max(np.abs(pc.grad.numpy() - pe.grad.numpy()))
    print(f"{name:<12} {str(list(pc.shape)):<10} {err:>34.2e}")
    assert np.allclose(pc.grad.numpy(), pe.grad.numpy(), rtol=1e-5, atol=1e-6), name
print("gradients through the compiled block equal the eager ones")

# a few SGD steps: both models stay together
opt_c = eager.optim.SGD(model_c.parameters(), lr=0.1)
opt_e = eager.optim.SGD(model_e.parameters(), lr=0.1)
for step in range(5):
    for model, opt in ((model_c, opt_c), (model_e, opt_e)):
        opt.zero_grad()
        loss = loss_fn(model(x), target)
        loss.backward()
        opt.step()
    print(f"step {step}: loss compiled-block {loss_fn(model_c(x), target).item():.7f}  "
          f"eager {loss_fn(model_e(x), target).item():.7f}")
info = compiled_block.cache_info()
print(f"compiled block: {info.traces} traces, {info.hits} cache hits")
# alpha requires grad, so whether its .grad is set is part of the signature
# (see docs/limitations.md): the second trace came after the first backward()
print("why it re-traced:", "; ".join(compiled_block.recompile_reasons))
