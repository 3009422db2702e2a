"""The two-layer MLP from the autograd tutorial (seed 003), run on eager.

Part 1 is the tutorial's code with ``import eager as torch``: random data,
``y_pred = x.mm(w1).clamp(min=0).mm(w2)``, the sum-of-squares loss,
``loss.backward()`` and a manual gradient step under ``no_grad``.
Part 2 trains the same network written with ``eager.nn`` and ``eager.optim``.

Run:  python examples/eager_mlp.py
"""
import os
import time

# The matrices here are small (64x1000 @ 1000x100): one BLAS thread is as fast as
# several, and avoids threads spin-waiting for a core when the machine is busy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import eager as torch  # noqa: E402  (after the BLAS setting above)

torch.manual_seed(0)
dtype = torch.float
device = torch.device("cpu")

# N is batch size; D_in is input dimension;
# H is hidden dimension; D_out is output dimension.
N, D_in, H, D_out = 64, 1000, 100, 10

# Create random Tensors to hold inputs and outputs.
x = torch.randn(N, D_in, device=device, dtype=dtype)
y = torch.randn(N, D_out, device=device, dtype=dtype)

# Random weights; requires_grad=True records every op on them for backward.
w1 = torch.randn(D_in, H, device=device, dtype=dtype, requires_grad=True)
w2 = torch.randn(H, D_out, device=device, dtype=dtype, requires_grad=True)

print("== autograd + manual SGD (seed 003) ==")
learning_rate = 1e-6
steps = 500
start = time.perf_counter()
for t in range(steps):
    # Forward pass: the same ops as the numpy version, recorded on the tape.
    y_pred = x.mm(w1).clamp(min=0).mm(w2)

    # Sum-of-squares loss, a 0-d tensor.
    loss = (y_pred - y).pow(2).sum()
    if t % 50 == 0:
        print(t, loss.item())

    # Backward pass: fills w1.grad and w2.grad.
    loss.backward()

    # Update the weights without recording the update, then reset the gradients.
    with torch.no_grad():
        w1 -= learning_rate * w1.grad
        w2 -= learning_rate * w2.grad
        w1.grad.zero_()
        w2.grad.zero_()
elapsed = time.perf_counter() - start
print("Final Loss: ", loss.item())
print(f"{elapsed / steps * 1e3:.3f} ms per step ({steps} steps in {elapsed:.2f} s)")

print()
print("== nn.Sequential + optim.Adam ==")
model = torch.nn.Sequential(
    torch.nn.Linear(D_in, H),
    torch.nn.ReLU(),
    torch.nn.Linear(H, D_out),
)
print(model)
loss_fn = torch.nn.MSELoss(reduction="sum")
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
start = time.perf_counter()
for t in range(steps):
    loss = loss_fn(model(x), y)
    if t % 50 == 0:
        print(t, loss.item())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
elapsed = time.perf_counter() - start
print("Final Loss: ", loss.item())
print(f"{elapsed / steps * 1e3:.3f} ms per step ({steps} steps in {elapsed:.2f} s)")
