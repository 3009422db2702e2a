"""``graphc demo``: the seeds' two-layer MLP (graphc.tools.workloads) trained eagerly and
compiled from the same weights, side by side."""

from __future__ import annotations

import argparse
import time

import numpy as np

import eager

from ...api import compile as graphc_compile
from ..compare import compare
from ..workloads import (
    D_IN,
    D_OUT,
    H,
    LEARNING_RATE,
    N,
    SEED_FILE,
    SEED_SOURCE,
    seed_loss,
    seed_step,
)
from .common import UsageError, _progress


def cmd_demo(ns: argparse.Namespace) -> int:
    if ns.steps < 1:
        raise UsageError(f"--steps must be at least 1, got {ns.steps}")
    prog = _progress(True)
    out = (lambda *a, **k: None) if ns.quiet else print
    eager.manual_seed(0)
    x = eager.randn(N, D_IN)
    y = eager.randn(N, D_OUT)
    w1 = eager.randn(D_IN, H, requires_grad=True)
    w2 = eager.randn(H, D_OUT, requires_grad=True)
    init = [t.detach().numpy().copy() for t in (w1, w2)]
    c1 = eager.from_numpy(init[0].copy()).requires_grad_()
    c2 = eager.from_numpy(init[1].copy()).requires_grad_()
    every = 50 if ns.steps >= 100 else max(1, ns.steps // 10)

    _print_intro(out, ns.steps)
    prog(f"training eagerly ({ns.steps} steps)...")
    e_losses, eager_total = _train_eager(x, y, w1, w2, ns.steps, every)
    step, c_losses, warm_from, first_calls, warm_total = _train_compiled(
        prog, x, y, c1, c2, ns.steps, every
    )

    out(f"  {'step':>5}  {'eager loss':>16}  {'compiled loss':>16}")
    for t in sorted(e_losses):
        out(f"  {t:>5}  {e_losses[t]:>16.6g}  {c_losses[t]:>16.6g}")
    out("")
    _print_weights((("w1", w1, c1), ("w2", w2, c2)))
    print(f"final loss: eager {e_losses[ns.steps - 1]:.6g}, compiled {c_losses[ns.steps - 1]:.6g}")
    _print_times(eager_total / ns.steps, ns.steps - warm_from, warm_from, first_calls, warm_total)
    info = step.cache_info()
    print(
        f"compiled cache: {info.traces} traces, {info.hits} hits "
        f"(.grad None -> set is a new input signature)"
    )
    if ns.quiet:
        return 0

    prog("comparing the step's loss (graphc.compare)...")
    print("")
    xs, ys = x.numpy(), y.numpy()
    report = compare(seed_loss, xs, ys, init[0], init[1], argnums=(2, 3))
    print(report)
    print("")
    print("optimized IR of the compiled training step:")
    print(step.ir(x, y, c1, c2, stage="optimized"))
    return 0


def _print_intro(out, steps: int) -> None:
    """What is trained, and the first lines of the step's source."""
    out(
        f"graphc demo: the seeds' two-layer MLP (N={N}, D_in={D_IN}, H={H}, D_out={D_OUT}, "
        f"float32, lr={LEARNING_RATE:g}),"
    )
    out(
        f"trained {steps} steps eagerly and compiled (graphc.compile(seed_step)) from the "
        "same initial weights:"
    )
    out("")
    for k, line in enumerate(SEED_SOURCE.splitlines()[:10], 1):
        out(f"  {SEED_FILE}:{k:<3} {line}")
    out("")


def _train_eager(x, y, w1, w2, steps: int, every: int) -> tuple:
    """({step: loss} every ``every`` steps and at the last, seconds in all)."""
    e_losses = {}
    t0 = time.perf_counter()
    for t in range(steps):
        loss = seed_step(x, y, w1, w2)
        if t % every == 0 or t == steps - 1:
            e_losses[t] = float(loss)
    return e_losses, time.perf_counter() - t0


def _train_compiled(prog, x, y, c1, c2, steps: int, every: int) -> tuple:
    """The compiled step trained as eagerly: (the compiled step, {step: loss}, calls that
    trace, their seconds, seconds of the warm calls after them)."""
    prog("compiling the step (trace, differentiate, optimize, LLVM)...")
    step = graphc_compile(seed_step)
    c_losses = {}
    warm_from = min(2, steps)  # the first two calls trace (.grad None, then set)
    t0 = time.perf_counter()
    for t in range(warm_from):
        loss = step(x, y, c1, c2)
        if t % every == 0 or t == steps - 1:
            c_losses[t] = float(loss)
    first_calls = time.perf_counter() - t0
    prog(f"training compiled ({steps} steps)...")
    t0 = time.perf_counter()
    for t in range(warm_from, steps):
        loss = step(x, y, c1, c2)
        if t % every == 0 or t == steps - 1:
            c_losses[t] = float(loss)
    return step, c_losses, warm_from, first_calls, time.perf_counter() - t0


def _print_weights(pairs: tuple) -> None:
    """How far each compiled weight ended from the eager one."""
    print("final weights, compiled vs eager:")
    for nm, a, b in pairs:
        ea, cb = a.detach().numpy(), b.detach().numpy()
        diff = float(np.max(np.abs(ea - cb)))
        scale = float(np.max(np.abs(ea))) or 1.0
        ok = np.allclose(cb, ea, rtol=1e-4, atol=1e-5)
        print(
            f"  {nm}: max abs difference {diff:.3g} (relative {diff / scale:.3g})  "
            f"{'agree' if ok else 'DIFFER'}"
        )


def _print_times(
    e_step: float, n_warm: int, warm_from: int, first_calls: float, warm_total: float
) -> None:
    """Time per step of both, the compiled one over its warm calls only."""
    if n_warm:
        c_step = warm_total / n_warm
        print(
            f"time per step: eager {_ms(e_step)}, compiled {_ms(c_step)} -> speedup "
            f"{e_step / c_step:.2f}x (compiled's first {warm_from} calls, which trace and "
            f"compile, took {first_calls * 1e3:.0f} ms and are not counted)"
        )
    else:
        print(
            f"time per step: eager {_ms(e_step)}; compiled: every step traced and compiled "
            f"({first_calls * 1e3:.0f} ms in all), run 3 or more steps to time it"
        )


def _ms(s: float) -> str:
    return f"{s * 1e6:.1f} us" if s < 1e-3 else f"{s * 1e3:.3f} ms"
