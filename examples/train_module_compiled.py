"""Train an nn.Module eagerly and compiled, side by side, with the same optimizer.

graphc.compile(model) reads the model's parameters at every call (they are graph
inputs, not constants), so the eager optimizer's steps reach the compiled model and
loss.backward() reaches its parameters through eager autograd.  Both runs start from
the same weights and print their losses step by step; they agree to float32 rounding.
"""
import time

import numpy as np

import eager
import graphc
from eager import nn


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def make() -> MLP:
    eager.manual_seed(0)
    return MLP()


rng = np.random.default_rng(0)
x = eager.tensor(rng.standard_normal((256, 64)).astype(np.float32))
y = eager.tensor(rng.standard_normal((256, 10)).astype(np.float32))
crit = nn.MSELoss()

runs = {}
for name in ("eager", "compiled"):
    model = make()
    step_model = graphc.compile(model) if name == "compiled" else model
    opt = eager.optim.Adam(model.parameters(), lr=3e-4)
    losses, times = [], []
    for step in range(60):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = crit(step_model(x), y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    runs[name] = (losses, times, step_model)

print("step   eager loss   compiled loss")
for step in (0, 1, 2, 10, 30, 59):
    print(f"{step:>4}   {runs['eager'][0][step]:.6f}     {runs['compiled'][0][step]:.6f}")
le, lc = np.array(runs["eager"][0]), np.array(runs["compiled"][0])
assert np.allclose(lc, le, rtol=1e-4), np.abs(lc - le).max()
assert lc[-1] < lc[0]
cm = runs["compiled"][2]
print(f"losses agree to {np.max(np.abs(lc - le) / le):.1e} (relative); traces: "
      f"{cm.cache_info().traces}, recompiles: {len(cm.recompile_reasons)}")
g = cm.graph(x)
print("graph inputs:", ", ".join(g[i]["attrs"]["name"] for i in g.inputs))
print(f"per step (after the first): eager {np.median(runs['eager'][1][1:]) * 1e6:.0f} us, "
      f"compiled {np.median(runs['compiled'][1][1:]) * 1e6:.0f} us")
