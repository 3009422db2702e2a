"""Compile time vs graph size: a Python-loop RNN, unrolled by tracing (docs/benchmarks.md).

The workload is a tanh RNN written as a plain Python loop over time steps::

    h = zeros(batch, hidden)
    for t in range(steps):
        h = tanh(xs[t] @ wx + h @ wh + b)
    loss = mean(h * h)              # the last hidden state only

(batch 8, input 16, hidden 32, float32), compiled as
``graphc.compile(graphc.value_and_grad(rnn_loss, argnums=(1, 2, 3)))``.  Tracing
unrolls the loop, so the graph grows linearly with ``steps``; so should the
compile time.  :func:`measure` times the first call of a fresh compiled function
(no disk cache) and splits it into stages: trace (without autodiff), autodiff,
verify, each optimizer pass, schedule, LLVM IR build (llvmlite objects and their
text), LLVM parse, LLVM optimize, LLVM codegen, load (the slim engine's reload
of the object code) and the rest.

    python -m graphc.tools.compile_scaling            # 30, 100, 300 steps
    python -m graphc.tools.compile_scaling 30 100 300 1000
    python -m graphc bench --only COMPILE             # the same table, in the bench CLI
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np

BATCH, D_IN, HIDDEN = 8, 16, 32
DEFAULT_STEPS = (30, 100, 300)


def rnn_loss(xs, wx, wh, b):
    """mean(h_T ** 2) of a tanh RNN run over ``xs`` (steps, batch, input) from h = 0."""
    h = (xs[0] @ wx) * 0.0  # zeros of (batch, hidden), in the inputs' dtype
    for t in range(xs.shape[0]):
        h = (xs[t] @ wx + h @ wh + b).tanh()
    return (h * h).mean()


def rnn_inputs(steps: int, seed: int = 0) -> tuple:
    """(xs, wx, wh, b) float32 arrays for ``steps`` time steps."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    return (
        rng.standard_normal((steps, BATCH, D_IN)).astype(f32),
        (rng.standard_normal((D_IN, HIDDEN)) / np.sqrt(D_IN)).astype(f32),
        (rng.standard_normal((HIDDEN, HIDDEN)) / np.sqrt(HIDDEN)).astype(f32),
        np.zeros(HIDDEN, f32),
    )


class _Clock:
    """Seconds per stage, summed over every timed call."""

    def __init__(self) -> None:
        self.seconds: dict = {}

    def add(self, stage: str, dt: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + dt

    def wrap(self, stage: str, fn: Callable) -> Callable:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(stage, time.thread_time() - t0)

        return timed


@contextlib.contextmanager
def _patched(clock: _Clock) -> Iterator[None]:
    """Time the stages by wrapping the functions each stage calls (restored after)."""
    import graphc.api as api
    import graphc.autodiff as autodiff
    from ..backend import lower
    from ..passes import PASSES
    from ..runtime import native

    patches = [
        (api, "trace_flat", "trace"),
        (autodiff, "backprop", "autodiff"),
        (api, "verify", "verify"),
        (native, "verify", "verify"),
        (native, "Schedule", "schedule"),
        (lower, "lower", "llvm ir build"),
    ]
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in patches]
    saved_passes = dict(PASSES)
    try:
        for mod, name, stage in patches:
            setattr(mod, name, clock.wrap(stage, getattr(mod, name)))
        for name, fn in saved_passes.items():
            PASSES[name] = clock.wrap(f"pass {name}", fn)
        yield
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)
        PASSES.update(saved_passes)


def measure(steps: int, opt_level: int = 2) -> dict:
    """First call of ``compile(value_and_grad(rnn_loss))`` at ``steps`` time steps.

    Returns ``{"steps", "nodes" (traced), "nodes_optimized", "kernels",
    "kernel_functions" (distinct kernel bodies), "total", "wall", "stages": {stage:
    seconds}, "passes": {pass: seconds}, "pass_runs"}``.  Times are CPU seconds of the
    compiling thread (``time.thread_time``: the machines here are shared, and wall time
    moves with the load), except ``wall``; the stages add up to ``total`` ("other" is
    the rest: signature, entry setup).  The LLVM stages are the JIT module's own
    ``stage_seconds`` (wall time, CPU seconds of the compiling thread too).
    """
    from ..api import compile as graphc_compile
    from ..backend import dedup
    from ..transforms import value_and_grad

    args = rnn_inputs(steps)
    clock = _Clock()
    f = graphc_compile(value_and_grad(rnn_loss, argnums=(1, 2, 3)), disk_cache=False)
    with _patched(clock):
        t0, c0 = time.perf_counter(), time.thread_time()
        f(*args)
        wall, total = time.perf_counter() - t0, time.thread_time() - c0
    (entry,) = f._cache.values()
    st = entry.stages
    stages = dict(clock.seconds)
    stages["trace"] = stages.get("trace", 0.0) - stages.get("autodiff", 0.0)
    pm = st["_passes"]
    passes = {k[5:]: stages.pop(k) for k in sorted(stages) if k.startswith("pass ")}
    stages["passes"] = sum(passes.values())
    exe = st["_executable"]
    jit = getattr(exe, "jit", None)
    for k, v in getattr(jit, "stage_seconds", {}).items():
        stages[k] = stages.get(k, 0.0) + v
    # the llvmlite module's text is built inside compile_module: part of the IR build
    stages["llvm ir build"] = stages.get("llvm ir build", 0.0) + stages.pop("ir text", 0.0)
    stages["other"] = total - sum(stages.values())
    return {
        "steps": steps,
        "nodes": len(st["traced"]),
        "nodes_optimized": len(st["optimized"]),
        "kernels": len(exe.plan.kernels) if hasattr(exe, "plan") else 0,
        "kernel_functions": dedup.last_stats.get("distinct", 0),
        "total": total,
        "wall": wall,
        "stages": stages,
        "passes": passes,
        "pass_runs": len(pm.log),
    }


STAGE_ORDER = (
    "trace",
    "autodiff",
    "verify",
    "passes",
    "schedule",
    "llvm ir build",
    "llvm parse",
    "llvm optimize",
    "llvm codegen",
    "load",
    "other",
)


def run(steps: Sequence[int] = DEFAULT_STEPS, opt_level: int = 2) -> list:
    """:func:`measure` for each step count, in a fresh compiled function each, after
    one small compile that pays the process's one-time costs."""
    measure(2, opt_level)  # one-time costs (imports, LLVM initialization) not in the rows
    return [measure(s, opt_level) for s in steps]


def format_table(rows: list) -> str:
    """Nodes vs seconds per stage, one column per step count."""
    if not rows:
        return ""
    head = f"{'steps':<16}" + "".join(f"{r['steps']:>10}" for r in rows)
    lines = [head]

    def row(label: str, vals: list, fmt: str = "{:>10.3f}") -> None:
        lines.append(f"{label:<16}" + "".join(fmt.format(v) for v in vals))

    row("nodes traced", [r["nodes"] for r in rows], "{:>10d}")
    row("nodes optimized", [r["nodes_optimized"] for r in rows], "{:>10d}")
    row("kernels", [r["kernels"] for r in rows], "{:>10d}")
    row("kernel fns", [r.get("kernel_functions", 0) for r in rows], "{:>10d}")
    for s in STAGE_ORDER:
        row(s, [r["stages"].get(s, 0.0) for r in rows])
    names = sorted({p for r in rows for p in r["passes"]})
    for p in names:
        row(f"  pass {p}", [r["passes"].get(p, 0.0) for r in rows])
    row("total (cpu s)", [r["total"] for r in rows])
    row("wall (s)", [r["wall"] for r in rows])
    row("us per node", [1e6 * r["total"] / max(r["nodes"], 1) for r in rows], "{:>10.1f}")
    return "\n".join(lines)


def workload(quick: bool) -> dict:
    """The ``COMPILE`` entry of ``graphc bench`` (opt-in: ``--only COMPILE``)."""
    rows = run((30, 100) if quick else DEFAULT_STEPS)
    return {
        "id": "COMPILE",
        "what": "compile time vs graph size: tanh RNN unrolled by tracing, value_and_grad",
        "compile_scaling": rows,
    }


def main(argv: Optional[list] = None) -> int:
    """``python -m graphc.tools.compile_scaling [STEPS ...]``."""
    argv = sys.argv[1:] if argv is None else argv
    steps = [int(a) for a in argv] or list(DEFAULT_STEPS)
    print(format_table(run(steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
