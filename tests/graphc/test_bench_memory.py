"""The memory rows of W6-W8 (graphc bench): eager's tracemalloc peak of one step minus
what the step keeps (its new .grad arrays, the loss) against the compiled step's planned
arena plus the host blocks its call allocates and frees, printed in W5's format with the
workload's target."""

import numpy as np

import eager
import graphc
from graphc.tools.bench import format_tables
from graphc.tools.bench_models import COMPILED_KEY, EAGER_KEY, step_memory


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
    assert by["  eager tracemalloc peak"] > by[EAGER_KEY] > 0
    # the step leaves a new .grad behind (zero_grad set it to None): kept, not counted
    assert by["  eager kept after the step"] >= w.numel() * 4
    assert by[EAGER_KEY] == by["  eager tracemalloc peak"] - by["  eager kept after the step"]
    assert by["  forward arena"] >= 0 and by["  backward arena"] > 0
    assert by[COMPILED_KEY] == max(by["  forward arena"], by["  backward arena"])


def test_step_memory_reads_the_whole_steps_running_executable():
    rng = np.random.default_rng(1)
    w = eager.tensor(rng.standard_normal((16, 32)).astype(np.float32), requires_grad=True)
    x = eager.tensor(rng.standard_normal((64, 16)).astype(np.float32))
    opt = eager.optim.Adam([w], lr=0.1)

    def loss(x):
        return ((x @ w).relu() * 2.0).sum()

    def step(x):
        opt.zero_grad()
        out = loss(x)
        out.backward()
        opt.step()
        return out

    c_step = graphc.compile(step, disk_cache=False)
    c_loss = graphc.compile(loss, disk_cache=False)
    c_loss(x)
    for _ in range(3):  # the first call traces without Adam's state, the second with it
        c_step(x)
    assert c_step.cache_info().traces == 2
    by = step_memory(lambda: step(x), c_loss, (x,), c_step)
    arena = list(c_step._cache.values())[-1].stages["_executable"].plan.arena_bytes
    assert by["  compiled step arena"] == arena > 0
    assert by[COMPILED_KEY] == arena + by["  compiled host peak - kept"]
    assert by["  compiled host peak - kept"] >= 0
    assert by[EAGER_KEY] > 0


def test_bytes_rows_use_the_workloads_target():
    by = {"eager (tracemalloc peak)": 1000, "compiled (planned arena)": 400}
    res = {
        "environment": {},
        "workloads": [
            {"id": "W5", "what": "w5", "bytes": dict(by)},
            {"id": "W8", "what": "w8", "bytes": dict(by), "bytes_target": 0.5},
            {"id": "W7", "what": "w7", "bytes": {"e": 1000, "c": 600}, "bytes_target": 0.5,
             "bytes_keys": ("e", "c")},
        ],
    }
    text = format_tables(res)
    assert "compiled/eager = 0.400  (target <= 0.25: MISSED)" in text
    assert "compiled/eager = 0.400  (target <= 0.5: met)" in text
    assert "compiled/eager = 0.600  (target <= 0.5: MISSED)" in text
