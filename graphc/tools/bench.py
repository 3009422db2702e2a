"""Benchmarks W0-W9 (docs/benchmarks.md): numpy hand-written vs eager vs compiled.

Every ratio is measured in the same process run (machines here are noisy);
times are medians.  PyTorch and JAX rows appear only when they happen to be
importable -- they are never dependencies.

    graphc bench            # full run (about a minute)
    graphc bench --quick    # fewer repeats
    graphc bench --json
    graphc bench --only COMPILE   # compile time vs graph size (minutes; not in the full run)
"""

from __future__ import annotations

import gc
import json
import os
import platform
import statistics
import sys
import time
import tracemalloc
from typing import Callable, Optional

import numpy as np

import eager

from ..api import compile as graphc_compile
from ..transforms import value_and_grad
from . import bench_models
from .workloads import D_IN, D_OUT, H, LEARNING_RATE as LR, N, seed_functions, seed_step

mlp_step = seed_step  # the seeds' training step (graphc.tools.workloads)


# Each implementation runs this long before it is timed, so it is timed in its own
# steady state: numpy's OpenBLAS keeps its worker threads spinning for about 0.1 s after
# its last product, and an implementation timed right after a numpy one would share
# the cores with them (the compiled W1 step on two threads: ~265 us instead of ~148 us
# for the first 0.1 s; see docs/backend.md "Threads").
WARMUP_SECONDS = 0.15


ROUNDS = 4  # rounds of an interleaved timing (2 with --quick), SAMPLES_PER_ROUND samples each
SAMPLES_PER_ROUND = 3


class _Timing:
    """A timing asked for while a workload runs (:func:`_median_time`): measured after the
    workload returns, interleaved with the workload's other timings (:func:`_interleaved`)."""

    __slots__ = ("fn", "min_time", "seconds")

    def __init__(self, fn: Callable, min_time: float) -> None:
        self.fn = fn
        self.min_time = min_time
        self.seconds: Optional[float] = None


# the timings the running workload asked for (None: outside run(), time at once)
_PENDING: Optional[list] = None


def _median_time(fn: Callable, quick: bool, min_time: float = 0.02) -> object:
    """Median seconds per call: calls are batched so one sample lasts >= min_time.

    Inside :func:`run` this returns a placeholder that ``run`` replaces by the median once
    the workload has returned: all timings of one workload are taken together, in rounds
    (:func:`_interleaved`), so a slow phase of the host lands on every row alike."""
    t = _Timing(fn, min_time)
    if _PENDING is not None:
        _PENDING.append(t)
        return t
    _interleaved([t], quick)
    return t.seconds


def _interleaved(timings: list, quick: bool) -> None:
    """Time several implementations in rounds: in each round every implementation gets its
    warm-up (WARMUP_SECONDS, as its own steady state) and then its samples, starting with
    a different implementation each round; each one's result is the median over all of
    its samples from all rounds (sets ``.seconds``)."""
    rounds = 2 if quick else ROUNDS
    numbers: list = [0] * len(timings)
    samples: list = [[] for _ in timings]
    for r in range(rounds):
        for j in range(len(timings)):
            k = (j + r) % len(timings)
            fn = timings[k].fn
            fn()
            end = time.perf_counter() + WARMUP_SECONDS
            while time.perf_counter() < end:
                fn()
            if not numbers[k]:
                t0 = time.perf_counter()
                fn()
                one = max(time.perf_counter() - t0, 1e-7)
                numbers[k] = max(1, int(timings[k].min_time / one))
            number = numbers[k]
            for _ in range(SAMPLES_PER_ROUND):
                t0 = time.perf_counter()
                for _ in range(number):
                    fn()
                samples[k].append((time.perf_counter() - t0) / number)
    for t, s in zip(timings, samples):
        t.seconds = statistics.median(s)


def _run_workload(fn: Callable, quick: bool) -> dict:
    """One workload, its timings taken together after it returns (interleaved)."""
    global _PENDING
    _PENDING = []
    try:
        res = fn(quick)
        pending = _PENDING
    finally:
        _PENDING = None
    if pending:
        _interleaved(pending, quick)
        res["times"] = {
            k: (v.seconds if isinstance(v, _Timing) else v) for k, v in res["times"].items()
        }
    return res


def _optional(name: str):
    try:
        mod = __import__(name)
    except Exception:
        return None
    if name == "torch" and os.environ.get("OPENBLAS_NUM_THREADS"):
        # PyTorch's own thread pool runs its matrix products: pinned as numpy's is, when
        # the run pins it (--blas-threads); else PyTorch's default, as a user has it
        try:
            mod.set_num_threads(int(os.environ["OPENBLAS_NUM_THREADS"]))
        except Exception:
            pass
    return mod


# ---------------------------------------------------------------------------
# workloads


def w0(quick: bool) -> dict:
    a_np = np.random.default_rng(0).standard_normal((3, 3)).astype(np.float32)
    a = eager.from_numpy(a_np.copy())
    f = graphc_compile(lambda a: a + a)
    rows = {
        "numpy": _median_time(lambda: a_np + a_np, quick),
        "eager": _median_time(lambda: a + a, quick),
        "compiled": _median_time(lambda: f(a_np), quick),
    }
    torch = _optional("torch")
    if torch is not None:
        t = torch.from_numpy(a_np.copy())
        rows["torch eager"] = _median_time(lambda: t + t, quick)
    return {
        "id": "W0",
        "what": "a + a, 3x3 f32, one call",
        "times": rows,
        "targets": {"eager": ("<=", 8.0)},
    }


def _mlp_data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, D_IN)).astype(np.float32)
    y = rng.standard_normal((N, D_OUT)).astype(np.float32)
    w1 = rng.standard_normal((D_IN, H)).astype(np.float32)
    w2 = rng.standard_normal((H, D_OUT)).astype(np.float32)
    return x, y, w1, w2


def w1(quick: bool) -> dict:
    x, y, w1_, w2_ = _mlp_data()

    # numpy, hand-written (seed 003)
    nw1, nw2 = w1_.copy(), w2_.copy()

    def numpy_step():
        h = x.dot(nw1)
        h_relu = np.maximum(h, 0)
        y_pred = h_relu.dot(nw2)
        loss = np.square(y_pred - y).sum()
        grad_y_pred = 2.0 * (y_pred - y)
        grad_w2 = h_relu.T.dot(grad_y_pred)
        grad_h_relu = grad_y_pred.dot(nw2.T)
        grad_h = grad_h_relu.copy()
        grad_h[h < 0] = 0
        grad_w1 = x.T.dot(grad_h)
        np.subtract(nw1, LR * grad_w1, out=nw1)
        np.subtract(nw2, LR * grad_w2, out=nw2)
        return loss

    # the step's matrix products alone (the physical limit)
    h0 = x @ w1_
    g0 = np.ones((N, D_OUT), np.float32)
    gh = np.ones((N, H), np.float32)

    def matmuls_only():
        x @ w1_
        h0 @ w2_
        h0.T @ g0
        g0 @ w2_.T
        x.T @ gh

    tx, ty = eager.from_numpy(x), eager.from_numpy(y)
    ew1 = eager.tensor(w1_, requires_grad=True)
    ew2 = eager.tensor(w2_, requires_grad=True)
    cw1 = eager.tensor(w1_, requires_grad=True)
    cw2 = eager.tensor(w2_, requires_grad=True)
    cstep = graphc_compile(mlp_step)
    rows = {
        "numpy": _median_time(numpy_step, quick),
        "matmuls only": _median_time(matmuls_only, quick),
        "eager": _median_time(lambda: mlp_step(tx, ty, ew1, ew2), quick),
        "compiled": _median_time(lambda: cstep(tx, ty, cw1, cw2), quick),
    }
    torch = _optional("torch")
    if torch is not None:
        tw1 = torch.tensor(w1_, requires_grad=True)
        tw2 = torch.tensor(w2_, requires_grad=True)
        txx, tyy = torch.from_numpy(x), torch.from_numpy(y)
        torch_step = seed_functions(torch)[0]
        rows["torch eager"] = _median_time(lambda: torch_step(txx, tyy, tw1, tw2), quick)
    return {
        "id": "W1",
        "what": "seed MLP training step f32 (fwd+bwd+SGD)",
        "times": rows,
        # eager: PyTorch's own eager is the reference (its C++ engine measures 1.4x
        # numpy here; the step's arithmetic under PyTorch's semantics alone is 1.14x)
        "targets": {"eager": ("<=t", 1.0), "compiled": ("<=m", 1.3)},
    }


def w2_fn(x, w, b):
    return (x * w + b).tanh().pow(2).sum()


def w2(quick: bool) -> dict:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(1_000_000)
    w, b = np.array(0.7), np.array(-0.3)

    def numpy_vg():
        t = np.tanh(x * w + b)
        v = (t * t).sum()
        gp = 2.0 * t * (1.0 - t * t)
        return v, (gp * x).sum(), gp.sum()

    def numpy_fwd():
        return (np.tanh(x * w + b) ** 2).sum()

    tx = eager.from_numpy(x)
    tw = eager.tensor(w, requires_grad=True)
    tb = eager.tensor(b, requires_grad=True)

    def eager_vg():
        tw.grad = None
        tb.grad = None
        v = w2_fn(tx, tw, tb)
        v.backward()
        return v, tw.grad, tb.grad

    vg = graphc_compile(value_and_grad(w2_fn, argnums=(1, 2)))
    fwd = graphc_compile(w2_fn)
    rows = {
        "numpy": _median_time(numpy_vg, quick),
        "eager": _median_time(eager_vg, quick),
        "compiled": _median_time(lambda: vg(x, w, b), quick),
        "numpy fwd": _median_time(numpy_fwd, quick),
        "compiled fwd": _median_time(lambda: fwd(x, w, b), quick),
    }
    jax = _optional("jax")
    if jax is not None:
        import jax.numpy as jnp

        jvg = jax.jit(
            jax.value_and_grad(lambda x, w, b: jnp.sum(jnp.tanh(x * w + b) ** 2), argnums=(1, 2))
        )
        jx = jnp.asarray(x)
        rows["jax jit"] = _median_time(lambda: jax.block_until_ready(jvg(jx, w, b)), quick)
    return {
        "id": "W2",
        "what": "sum(tanh(x*w+b)**2), 1e6 f64: value + 2 grads (and fwd)",
        "times": rows,
        "targets": {"eager": ("<=", 1.2), "compiled": (">=x", 10.0), "compiled fwd": (">=xf", 5.0)},
    }


def seed_graph(a, w1, w2, w3, w4):
    """The seeds' 3x3 graph."""
    b = w1 * a
    c = w2 * a
    d = w3 * b + w4 * c
    return (10 - d).sum()


def w3(quick: bool) -> dict:
    rng = np.random.default_rng(2)
    arrs = [rng.standard_normal((3, 3)) for _ in range(5)]

    def numpy_vg(a, w1, w2, w3, w4):
        b = w1 * a
        c = w2 * a
        d = w3 * b + w4 * c
        L = (10 - d).sum()
        gd = -np.ones_like(d)
        gb, gc = gd * w3, gd * w4
        return L, gb * w1 + gc * w2, gb * a, gc * a, gd * b, gd * c

    ts = [eager.tensor(a, requires_grad=True) for a in arrs]

    def eager_vg():
        for t in ts:
            t.grad = None
        L = seed_graph(*ts)
        L.backward()
        return L

    vg = graphc_compile(value_and_grad(seed_graph, argnums=(0, 1, 2, 3, 4)))
    rows = {
        "numpy": _median_time(lambda: numpy_vg(*arrs), quick),
        "eager": _median_time(eager_vg, quick),
        "compiled": _median_time(lambda: vg(*arrs), quick),
    }
    torch = _optional("torch")
    if torch is not None:
        tt = [torch.tensor(a, requires_grad=True) for a in arrs]

        def torch_vg():
            for t in tt:
                t.grad = None
            L = seed_graph(*tt)
            L.backward()

        rows["torch eager"] = _median_time(torch_vg, quick)
    return {
        "id": "W3",
        "what": "seeds' 3x3 graph f64: value + 5 grads",
        "times": rows,
        "targets": {"eager": ("<=t", 1.0), "compiled": (">=x", 2.0)},
    }


def w4(quick: bool) -> dict:
    x, y, w1_, w2_ = _mlp_data()
    tx, ty = eager.from_numpy(x), eager.from_numpy(y)
    rng = np.random.default_rng(1)
    xx = rng.standard_normal(1_000_000)
    w, b = np.array(0.7), np.array(-0.3)
    reps = 3 if quick else 7
    mlp, vg = [], []
    recompiles = 0
    for _ in range(reps):
        cw1 = eager.tensor(w1_, requires_grad=True)
        cw2 = eager.tensor(w2_, requires_grad=True)
        f = graphc_compile(mlp_step)
        t0 = time.perf_counter()
        f(tx, ty, cw1, cw2)
        mlp.append(time.perf_counter() - t0)
        before = f.cache_info().traces
        f(tx, ty, cw1, cw2)
        f(tx, ty, cw1, cw2)
        recompiles += f.cache_info().traces - before - 1  # the 2nd call has .grad set: 1 trace
        g = graphc_compile(value_and_grad(w2_fn, argnums=(1, 2)))
        t0 = time.perf_counter()
        g(xx, w, b)
        vg.append(time.perf_counter() - t0)
        before = g.cache_info().traces
        g(xx, w, b)
        recompiles += g.cache_info().traces - before
    return {
        "id": "W4",
        "what": "cold compile (trace+grad+optimize+LLVM+load), first call",
        "times": {"W1 step": statistics.median(mlp), "W2 value+grad": statistics.median(vg)},
        "recompiles_on_repeated_signature": max(recompiles, 0),
        "targets": {"W1 step": ("<=s", 0.100)},
    }


def w5(quick: bool) -> dict:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(1_000_000)
    w, b = np.array(0.7), np.array(-0.3)
    tx = eager.from_numpy(x)
    tw = eager.tensor(w, requires_grad=True)
    tb = eager.tensor(b, requires_grad=True)
    gc.collect()
    tracemalloc.start()
    v = w2_fn(tx, tw, tb)
    v.backward()
    _, eager_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del v
    vg = graphc_compile(value_and_grad(w2_fn, argnums=(1, 2)))
    vg(x, w, b)
    st = vg.stats(x, w, b)
    return {
        "id": "W5",
        "what": "peak intermediate bytes of W2 value+grad",
        "bytes": {
            "eager (tracemalloc peak)": eager_peak,
            "compiled (planned arena)": st.get("arena_bytes", 0),
        },
        "targets": {"compiled": ("<=frac", 0.25)},
    }


def _model_workload(fn: Callable) -> Callable:
    """W6-W8 (graphc/tools/bench_models.py) with this module's timer."""
    return lambda quick: fn(quick, _median_time, _optional)


WORKLOADS = {
    "W0": w0,
    "W1": w1,
    "W2": w2,
    "W3": w3,
    "W4": w4,
    "W5": w5,
    "W6": _model_workload(bench_models.w6),
    "W7": _model_workload(bench_models.w7),
    "W8": _model_workload(bench_models.w8),
    "W9": _model_workload(bench_models.w9),
}

# run only when asked for by name (``--only COMPILE``): they take minutes
OPT_IN = {"COMPILE": lambda quick: _compile_scaling(quick)}


def _compile_scaling(quick: bool) -> dict:
    from . import compile_scaling

    return compile_scaling.workload(quick)


def environment() -> dict:
    from ..backend import blas

    info = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }
    from ..runtime import parallel

    info["graphc threads"] = (
        f"{parallel.get_num_threads()} (loops and matrix products; "
        "its BLAS single-threaded in each share)"
    )
    if not blas.available():
        info["graphc BLAS"] = f"n/a ({blas.unavailable_reason()})"
    info["numpy BLAS threads"] = _numpy_blas_threads()
    try:
        cfg = np.show_config(mode="dicts")
        info["numpy BLAS"] = cfg.get("Build Dependencies", {}).get("blas", {}).get("name", "?")
    except Exception:
        pass
    for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_CORETYPE"):
        if os.environ.get(k):
            info[k] = os.environ[k]
    return info


def _numpy_blas_threads() -> str:
    """numpy's BLAS pool as this process has it (threadpoolctl when installed)."""
    try:
        import threadpoolctl
    except ImportError:
        env = os.environ.get("OPENBLAS_NUM_THREADS")
        return env if env else f"default (OpenBLAS: {os.cpu_count()} cores)"
    for pool in threadpoolctl.threadpool_info():
        if pool.get("user_api") == "blas" and "numpy" in pool.get("filepath", ""):
            return str(pool.get("num_threads"))
    return "?"


def run(
    quick: bool = False,
    only: Optional[list] = None,
    progress: Optional[Callable[[str], None]] = None,
) -> dict:
    results = {"environment": environment(), "workloads": []}
    for wid, fn in list(WORKLOADS.items()) + list(OPT_IN.items()):
        if (only and wid not in only) or (not only and wid in OPT_IN):
            continue
        if progress:
            progress(f"running {wid}...")
        results["workloads"].append(_run_workload(fn, quick))
    return results


def _fmt_time(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:8.1f} us"
    if s < 1:
        return f"{s * 1e3:8.2f} ms"
    return f"{s:8.2f} s "


def _verdict(kind: str, bound: float, times: dict, name: str) -> str:
    t = times.get(name)
    if t is None:
        return ""
    if kind == "<=":
        r = t / times["numpy"]
        return f"target <= {bound}x numpy: {'met' if r <= bound else 'MISSED'}"
    if kind == "<=t":
        ref = times.get("torch eager")
        if ref is None:
            return f"target <= {bound}x torch eager (PyTorch not importable: not measured)"
        r = t / ref
        return f"target <= {bound}x torch eager ({r:.2f}x): {'met' if r <= bound else 'MISSED'}"
    if kind == ">=t":
        ref = times.get("torch eager")
        if ref is None:
            return f"target >= {bound}x faster than torch eager (PyTorch not importable)"
        r = ref / t
        return (
            f"target >= {bound}x faster than torch eager ({r:.1f}x): "
            f"{'met' if r >= bound else 'MISSED'}"
        )
    if kind in ("<=j", "<=jfirst"):
        ref_name = "jax jit" if kind == "<=j" else "jax first call"
        ref = times.get(ref_name)
        if ref is None:
            return f"target <= {bound}x {ref_name} (JAX not importable: not measured)"
        r = t / ref
        return f"target <= {bound}x {ref_name} ({r:.2f}x): {'met' if r <= bound else 'MISSED'}"
    if kind == "<=m":
        r = t / times["matmuls only"]
        return f"target <= {bound}x matmuls only ({r:.2f}x): {'met' if r <= bound else 'MISSED'}"
    if kind == ">=x":
        r = times["numpy"] / t
        return f"target >= {bound}x faster: {'met' if r >= bound else 'MISSED'}"
    if kind == ">=xf":
        r = times["numpy fwd"] / t
        return (
            f"target >= {bound}x faster than numpy fwd ({r:.1f}x): "
            f"{'met' if r >= bound else 'MISSED'}"
        )
    if kind == "<=first30":
        ref = times.get("first call, 30 steps")
        r = t / ref if ref else float("inf")
        verdict = "met" if r <= bound else "MISSED"
        return f"target <= {bound}x the 30-step first call ({r:.2f}x): {verdict}"
    if kind == "<=s":
        return f"target <= {bound * 1e3:.0f} ms: {'met' if t <= bound else 'MISSED'}"
    return ""


def _targets(spec) -> list:
    """A row's targets: one ``(kind, bound)`` or a list of them (none: ``[]``)."""
    if not spec:
        return []
    if isinstance(spec[0], str):  # one target (a list after a JSON round trip)
        return [tuple(spec)]
    return [tuple(t) for t in spec]


def format_tables(results: dict) -> str:
    lines = ["environment: " + ", ".join(f"{k}={v}" for k, v in results["environment"].items()), ""]
    for w in results["workloads"]:
        lines.append(f"{w['id']}  {w['what']}")
        if "times" in w:
            times = w["times"]
            base = times.get("numpy")
            wn = max([16] + [len(n) for n in times])
            lines.append(f"  {'implementation':<{wn}} {'median':>11}  {'vs numpy':>9}  note")
            for name, t in times.items():
                ref = times.get("numpy fwd") if name.endswith("fwd") else base
                ratio = f"{t / ref:8.2f}x" if ref else "         "
                note = "; ".join(
                    v
                    for kind, bound in _targets(w.get("targets", {}).get(name))
                    if (v := _verdict(kind, bound, times, name))
                )
                lines.append(f"  {name:<{wn}} {_fmt_time(t)}  {ratio}  {note}")
            if "recompiles_on_repeated_signature" in w:
                lines.append(
                    f"  recompiles on a repeated signature: {w['recompiles_on_repeated_signature']}"
                )
        if "compile_scaling" in w:
            from .compile_scaling import format_table as _scaling_table

            lines += ["  " + line for line in _scaling_table(w["compile_scaling"]).splitlines()]
        if "bytes" in w:
            by = w["bytes"]
            ek, ck = w.get("bytes_keys", ("eager (tracemalloc peak)", "compiled (planned arena)"))
            e, c = by[ek], by[ck]
            frac = w.get("bytes_target", 0.25)
            for k, v in by.items():
                lines.append(f"  {k:<28} {v:>12,d} bytes")
            lines.append(
                f"  compiled/eager = {c / e if e else 0:.3f}  (target <= {frac}: "
                f"{'met' if e and c / e <= frac else 'MISSED'})"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: Optional[list] = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="graphc bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--only", nargs="*", help="workload ids, e.g. W1 W3")
    a = p.parse_args(argv)
    prog = (lambda m: print(m, file=sys.stderr, flush=True)) if sys.stderr.isatty() else None
    res = run(quick=a.quick, only=a.only, progress=prog)
    print(json.dumps(res, indent=1, default=str) if a.json else format_tables(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
