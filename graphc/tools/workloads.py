"""The seeds' two-layer MLP training step (seed tutorial 003, "Two-Layer Network (MLP)
using (built-in) torch.autograd"), defined once for the demo, the benchmarks, the
examples and the tests.

The code is kept as source text and compiled under its own file name, ``demo_step.py``:
graphc attributes every traced node to the first frame outside eager/ and graphc/, so
the IR's source comments (``# demo_step.py:2``) point at the numbered listing the demo
prints, not into graphc.  ``seed_functions(torch)`` builds the same functions against
another module with the torch API (the benchmarks' PyTorch row).
"""

from __future__ import annotations

from types import ModuleType
from typing import Optional

import eager

N, D_IN, H, D_OUT = 64, 1000, 100, 10
LEARNING_RATE = 1e-6

SEED_FILE = "demo_step.py"
SEED_SOURCE = """\
def seed_step(x, y, w1, w2):
    y_pred = x.mm(w1).clamp(min=0).mm(w2)
    loss = (y_pred - y).pow(2).sum()
    loss.backward()
    with torch.no_grad():
        w1 -= learning_rate * w1.grad
        w2 -= learning_rate * w2.grad
        w1.grad.zero_()
        w2.grad.zero_()
    return loss


def seed_loss(x, y, w1, w2):
    return (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
"""


def seed_functions(torch: Optional[ModuleType] = None) -> tuple:
    """(seed_step, seed_loss) written against ``torch`` (default: eager, i.e. the seed's
    ``import eager as torch``), with the seed's learning rate."""
    ns: dict = {"torch": eager if torch is None else torch, "learning_rate": LEARNING_RATE}
    exec(compile(SEED_SOURCE, SEED_FILE, "exec"), ns)
    return ns["seed_step"], ns["seed_loss"]


# the training step (updates w1, w2 in place, zeroes their .grad, returns the loss) and
# its loss alone, on eager
seed_step, seed_loss = seed_functions()
