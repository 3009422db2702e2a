"""The seeds' two-layer MLP trained twice from the same weights: eager, then compiled.

The training step is seed 003's code, unchanged:

    y_pred = x.mm(w1).clamp(min=0).mm(w2)
    loss = (y_pred - y).pow(2).sum()
    loss.backward()
    with torch.no_grad():
        w1 -= learning_rate * w1.grad ...; w1.grad.zero_() ...

Eagerly, every step records a tape, walks it backward and frees it.  Wrapped in
``graphc.compile``, the same function is traced once (twice, really: the first
call has ``w.grad is None``, the second has a ``.grad`` to accumulate into),
its ``backward()`` becomes gradient nodes in the graph, the in-place updates
are written back into the caller's tensors, and every later step is one call
of native code.  The losses agree to float32 rounding; the script prints them
side by side and the time per step of each.

Run:  python examples/mlp_both_ways.py
"""
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # small matrices: one BLAS thread is best

import eager as torch  # noqa: E402
import graphc  # noqa: E402
# seed 003's step, verbatim (the listing above); graphc.tools.workloads defines it once
# for the demo, the benchmarks, the examples and the tests
from graphc.tools.workloads import seed_step as step  # noqa: E402

torch.manual_seed(0)
N, D_in, H, D_out = 64, 1000, 100, 10
STEPS = 500

x = torch.randn(N, D_in)
y = torch.randn(N, D_out)
w1_init = torch.randn(D_in, H)
w2_init = torch.randn(H, D_out)


def train(fn, label):
    w1 = w1_init.clone().requires_grad_(True)      # both runs start from the same weights
    w2 = w2_init.clone().requires_grad_(True)
    losses = []
    t0 = time.perf_counter()
    first = None
    for t in range(STEPS):
        losses.append(fn(x, y, w1, w2).item())
        if t == 1:
            first = time.perf_counter() - t0       # includes tracing + compiling for graphc
            t1 = time.perf_counter()
    per_step = (time.perf_counter() - t1) / (STEPS - 2)
    print(f"{label:>9}: first two steps {first * 1e3:7.1f} ms, then {per_step * 1e6:7.0f} us/step")
    return losses, per_step, (w1, w2)


compiled_step = graphc.compile(step)
eager_losses, eager_t, (w1_eager, _) = train(step, "eager")
comp_losses, comp_t, (w1_comp, w2_comp) = train(compiled_step, "compiled")

print()
print(f"{'step':>5} {'eager loss':>16} {'compiled loss':>16}")
for t in range(0, STEPS, 50):
    print(f"{t:5d} {eager_losses[t]:16.6g} {comp_losses[t]:16.6g}")
print(f"{STEPS - 1:5d} {eager_losses[-1]:16.6g} {comp_losses[-1]:16.6g}")

# float32 sums are reassociated (and accumulated in float64) by the native backend,
# so the two trajectories agree to rounding, not bit for bit.
for t in range(0, 300, 50):
    assert abs(eager_losses[t] - comp_losses[t]) <= 1e-3 * abs(eager_losses[t]) + 1e-3, t
rel = (w1_eager - w1_comp).abs().max().item() / w1_eager.abs().max().item()
print(f"\nmax |w1 eager - w1 compiled| / max |w1| after {STEPS} steps: {rel:.1e}")

# The step is matmul-bound: its five matrix products (2 forward, 3 backward), done by
# numpy's BLAS alone, are the floor for both.
xn, hn, w1n, w2n, gn = (x.numpy(), torch.randn(N, H).numpy(), w1_init.numpy(),
                        w2_init.numpy(), torch.randn(N, D_out).numpy())
t0 = time.perf_counter()
for _ in range(200):
    xn @ w1n, hn @ w2n, hn.T @ gn, gn @ w2n.T, xn.T @ hn
mm_t = (time.perf_counter() - t0) / 200
print(f"per step: eager {eager_t * 1e6:.0f} us, compiled {comp_t * 1e6:.0f} us, "
      f"the five matrix products alone (numpy) {mm_t * 1e6:.0f} us")
info = compiled_step.cache_info()
print(f"compiled cache: {info.traces} traces, {info.hits} hits "
      f"({'; '.join(compiled_step.recompile_reasons)})")
st = compiled_step.stats(x, y, w1_comp, w2_comp)     # the cached signature (.grad set)
print(f"compiled graph: {st['traced_nodes']} traced nodes -> {st['optimized_nodes']} after the "
      f"passes, {st['kernels']} native kernels, arena {st['arena_bytes']} bytes")
