"""A digit classifier and a small CNN written as PyTorch code, trained eagerly and compiled.

The models come from graphc/tools/models.py (plain ``nn.Module`` code), the data from
graphc/tools/datasets.py (8x8 digits generated on the spot). Each model is trained twice
from the same initial weights: once eagerly, once with the loss function compiled by
``graphc.compile`` (forward and backward run as native code; ``loss.backward()`` and the
Adam step stay ordinary eager calls). The losses agree step by step and both runs learn.

Run: python examples/classifier_both_ways.py
"""

from __future__ import annotations

import time

import numpy as np

import eager
import eager.nn as nn
import graphc
from graphc.tools.datasets import train_test
from graphc.tools.models import build

M = build()  # the models, written against ``import eager as torch``
x_train, y_train, x_test, y_test = train_test()


def train(model, compiled: bool, epochs: int = 3, batch: int = 50):
    crit = nn.CrossEntropyLoss()
    opt = eager.optim.Adam(model.parameters(), lr=1e-2)

    def loss_fn(x, y):
        return crit(model(x), y)

    step = graphc.compile(loss_fn) if compiled else loss_fn
    rng = np.random.default_rng(0)
    losses, times = [], []
    for _ in range(epochs):
        order = rng.permutation(len(x_train))
        for i in range(0, len(order) - batch + 1, batch):
            idx = order[i : i + batch]
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = step(eager.tensor(x_train[idx]), eager.tensor(y_train[idx]))
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t0)
            losses.append(loss.item())
    model.eval()
    with eager.no_grad():
        acc = (model(eager.tensor(x_test)).argmax(1).numpy() == y_test).mean()
    return np.array(losses), acc, (times[0], float(np.median(times[1:])))


for name, make in [("MLP 64-64-10", lambda: M.Classifier(64, 64, 10)),
                   ("CNN (LeNet-style)", lambda: M.LeNet(side=8, c1=8, c2=16, padding=1))]:
    eager.manual_seed(0)
    m_eager = make()
    eager.manual_seed(0)
    m_comp = make()
    l_e, acc_e, t_e = train(m_eager, compiled=False)
    l_c, acc_c, t_c = train(m_comp, compiled=True)
    first = min(8, len(l_e))
    assert np.allclose(l_c[:first], l_e[:first], rtol=1e-4, atol=1e-5), (l_c[:first], l_e[:first])
    assert acc_e >= 0.95 and acc_c >= 0.95, (acc_e, acc_c)
    print(f"{name}: {len(l_e)} Adam steps on {len(x_train)} digits")
    print(f"  losses, first {first} steps, eager:    {np.round(l_e[:first], 4).tolist()}")
    print(f"  losses, first {first} steps, compiled: {np.round(l_c[:first], 4).tolist()}")
    print(f"  test accuracy: eager {acc_e:.1%}, compiled {acc_c:.1%}")
    print(f"  first step: eager {t_e[0] * 1e3:.0f} ms, compiled {t_c[0] * 1e3:.0f} ms "
          "(tracing, differentiating and compiling to native code)")
    print(f"  later steps (median): eager {t_e[1] * 1e3:.2f} ms, compiled {t_c[1] * 1e3:.2f} ms"
          f" ({t_e[1] / t_c[1]:.1f}x)")
print("eager and compiled agree step by step, and both learn")
