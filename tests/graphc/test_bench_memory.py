"""The memory rows of W6-W8 (graphc bench): eager's tracemalloc peak of one step against
the compiled step's planned arenas, printed in W5's format with the workload's target."""

import numpy as np

import eager
import graphc
from graphc.tools.bench import format_tables
from graphc.tools.bench_models import step_memory


def test_step_memory_reports_both_arenas_and_the_larger_one():
    rng = np.random.default_rng(0)
    w = eager.tensor(rng.standard_normal((16, 32)).astype(np.float32), requires_grad=True)
    x = eager.tensor(rng.standard_normal((64, 16)).astype(np.float32))

    def loss(x):
        return ((x @ w).tanh() * 2.0 + 1.0).sum()

    c_loss = graphc.compile(loss, disk_cache=False)
    opt = eager.optim.SGD([w], lr=0.1)

    def step(fn):
        opt.zero_grad()
        out = fn(x)
        out.backward()
        opt.step()
        return out

    step(c_loss)  # compiles the forward and, at backward(), the gradient function
    by = step_memory(lambda: step(loss), c_loss, (x,))
    assert by["eager (tracemalloc peak)"] > 0
    assert by["  forward arena"] >= 0 and by["  backward arena"] > 0
    assert by["compiled (planned arena)"] == max(by["  forward arena"], by["  backward arena"])


def test_bytes_rows_use_the_workloads_target():
    by = {"eager (tracemalloc peak)": 1000, "compiled (planned arena)": 400}
    res = {
        "environment": {},
        "workloads": [
            {"id": "W5", "what": "w5", "bytes": dict(by)},
            {"id": "W8", "what": "w8", "bytes": dict(by), "bytes_target": 0.5},
        ],
    }
    text = format_tables(res)
    assert "compiled/eager = 0.400  (target <= 0.25: MISSED)" in text
    assert "compiled/eager = 0.400  (target <= 0.5: met)" in text
