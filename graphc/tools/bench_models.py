"""Benchmarks W6-W8 (docs/benchmarks.md): real models' training steps, written once as
PyTorch code (:mod:`.models`), run eagerly, compiled, and on PyTorch and JAX (jit; the same steps
written in :mod:`.bench_jax`) when importable.

A step is what a training loop runs: ``opt.zero_grad()``, the loss, ``loss.backward()``
and ``opt.step()``.  The compiled row compiles that whole step with ``graphc.compile``
(forward, backward and the optimizer's update in one native call, as JAX's jitted step
includes the update); the "compiled loss" row compiles only the loss function (forward
and gradient function in native code) and runs the optimizer eagerly.  Every
implementation starts from the same weights, and before anything is timed their losses
over three steps must agree (eager vs compiled to float32 rounding; PyTorch and JAX,
whose initial weights are copied in, likewise).  A compiled step's first call traces
without optimizer state and its second traces again with it (state is made lazily by
the first update): "compiled first call" is those two calls together.

First calls are timed like JAX's: without the backend's one-time start-up.  JAX
makes its XLA client when the first array is made, before its first-call timer;
graphc's first compile in a process would load llvmlite, initialize LLVM and
compile its worker pool inside the timer.  So the first workload of a run starts
both backends before its first calls and reports the start-up in rows of their own
("compiled backend start-up", "jax backend start-up"); the start-up is also in the
fresh-process cold start (W4 and docs/benchmarks.md, "Cold start").
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from typing import Any, Callable

import numpy as np

import eager

from ..api import compile as graphc_compile
from .models import build

F32 = np.float32


def _copy_weights(src, dst, torch) -> None:
    """Copy an eager model's parameters and buffers into the same PyTorch model."""
    with torch.no_grad():
        for (name, p), (tname, q) in zip(src.state_dict().items(), dst.state_dict().items()):
            if name != tname:
                raise AssertionError(f"models differ: {name} vs {tname}")
            q.copy_(torch.from_numpy(np.array(p.numpy())))


def _step_fn(loss_fn: Callable, opt: Any, batch: tuple) -> Callable:
    def step():
        opt.zero_grad()
        loss = loss_fn(*batch)
        loss.backward()
        opt.step()
        return loss

    return step


def _first_call(fn: Callable) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


_JAX_STARTED: list = []


def _backend_startup():
    """Seconds of graphc's native backend start-up (loading llvmlite, LLVM's target,
    the worker pool, BLAS symbols) if this call did it, else None (already done)."""
    t0 = time.perf_counter()
    from ..runtime import native

    if not native.start_backend():
        return None
    return time.perf_counter() - t0


def _jax_startup(jax):
    """Seconds of JAX's backend start-up (the XLA client and its devices, which JAX
    makes at the first array) if this call did it, else None (already done)."""
    if _JAX_STARTED:
        return None
    t0 = time.perf_counter()
    jax.block_until_ready(jax.numpy.zeros(()))
    _JAX_STARTED.append(True)
    return time.perf_counter() - t0


def _workload(
    wid: str,
    what: str,
    make,
    make_opt,
    loss: str,
    batch_np: tuple,
    quick: bool,
    median_time: Callable,
    optional: Callable,
) -> dict:
    """``make(M)`` builds the model from a models namespace M (eager's or PyTorch's),
    ``make_opt(torch_like, model)`` its optimizer, ``loss`` names M's loss function."""
    M = build()
    eager.manual_seed(0)
    m_eager = make(M)
    eager.manual_seed(0)
    m_comp = make(M)
    eager.manual_seed(0)
    m_full = make(M)
    loss_fn = getattr(M, loss)
    batch = tuple(eager.tensor(a) for a in batch_np)
    c_loss = graphc_compile(lambda *b: loss_fn(m_comp, *b))
    e_step = _step_fn(lambda *b: loss_fn(m_eager, *b), make_opt(eager, m_eager), batch)
    cl_step = _step_fn(c_loss, make_opt(eager, m_comp), batch)
    opt_full = make_opt(eager, m_full)

    def full_step(a, b):  # the training step as written for PyTorch, compiled whole
        opt_full.zero_grad()
        loss = loss_fn(m_full, a, b)
        loss.backward()
        opt_full.step()
        return loss

    c_full = graphc_compile(full_step)

    def c_step():
        return c_full(*batch)

    first = {}
    startup = _backend_startup()
    if startup is not None:
        first["compiled backend start-up"] = startup
    first.update(
        {
            "compiled first call": _first_call(c_step) + _first_call(c_step),
            "compiled loss first call": _first_call(cl_step),
            "eager first call": _first_call(e_step),
        }
    )
    e_step(), cl_step()  # as many steps as the compiled step's two first calls
    for _ in range(2):
        le, lc, lf = e_step().item(), cl_step().item(), c_step().item()
        for name, got in (("compiled loss", lc), ("compiled step", lf)):
            if not np.isclose(le, got, rtol=1e-4, atol=1e-5):
                raise AssertionError(f"{wid}: eager loss {le} != {name} loss {got}")
    if c_full.cache_info().traces != 2:
        raise AssertionError(f"{wid}: the compiled step traced {c_full.cache_info().traces} times")
    rows = {
        "eager": median_time(e_step, quick),
        "compiled": median_time(c_step, quick),
        "compiled loss": median_time(cl_step, quick),
    }
    nbytes = step_memory(e_step, c_loss, batch, c_full)
    torch = optional("torch")
    if torch is not None:
        Mt = build(torch)
        m_torch = make(Mt)
        eager.manual_seed(0)
        ref = make(M)
        _copy_weights(ref, m_torch, torch)
        tbatch = tuple(torch.from_numpy(a) for a in batch_np)
        t_loss = getattr(Mt, loss)
        t_step = _step_fn(lambda *b: t_loss(m_torch, *b), make_opt(torch, m_torch), tbatch)
        r_step = _step_fn(lambda *b: loss_fn(ref, *b), make_opt(eager, ref), batch)
        first["torch eager first call"] = _first_call(t_step)
        r_step()
        for _ in range(2):
            lt, lr = t_step().item(), r_step().item()
            if not np.isclose(lt, lr, rtol=1e-3, atol=1e-4):
                raise AssertionError(f"{wid}: PyTorch loss {lt} != eager loss {lr}")
        rows["torch eager"] = median_time(t_step, quick)
    jax = optional("jax")
    if jax is not None:
        eager.manual_seed(0)
        jref = make(M)
        j_start = _jax_startup(jax)
        j_rows, j_first = _jax_rows(wid, jax, jref, make_opt(eager, jref), loss_fn, batch_np)
        rows["jax jit"] = median_time(j_rows, quick)
        if j_start is not None:
            first["jax backend start-up"] = j_start
        first["jax first call"] = j_first
    rows.update(first)
    return {
        "id": wid,
        "what": what,
        "times": rows,
        "targets": {
            "eager": ("<=t", 1.5),
            "compiled": [(">=t", 2.0), ("<=j", JAX_TARGETS[wid])],
            "compiled first call": ("<=jfirst", 1.0),
        },
        "bytes": nbytes,
        "bytes_keys": (EAGER_KEY, COMPILED_KEY),
        "bytes_target": 0.5,
    }


def _traced(fn: Callable) -> tuple:
    """(peak, kept) bytes tracemalloc sees during one ``fn()`` call: the highest total of
    blocks allocated since the call began and still alive, and the total still alive
    after it returned (what the call leaves behind: new ``.grad`` arrays, the loss)."""
    gc.collect()
    tracemalloc.start()
    try:
        out = fn()
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del out
    return peak, kept


EAGER_KEY = "eager (peak - kept)"
COMPILED_KEY = "compiled (arena + host)"


def step_memory(e_step: Callable, c_loss: Any, batch: tuple, c_step: Any = None) -> dict:
    """Peak bytes of one training step's intermediates, eagerly and compiled, counted the
    same way on both sides (docs/benchmarks.md, "Peak memory of intermediates").

    Eager: tracemalloc's peak during one whole step (zero_grad, loss, backward,
    optimizer) minus what the step leaves allocated (its new ``.grad`` arrays, the loss:
    outputs, not intermediates).  tracemalloc sees numpy's buffers and Python objects.
    Compiled (``c_step``, the whole step compiled as one native call): the planned arena
    of the executable the call runs (the step's second trace, with optimizer state),
    plus the host-side blocks the call allocates and frees (tracemalloc, as eager:
    outputs copied into ``.grad`` and the wrapper's objects; the arena is ``malloc``-ed
    by native code, which tracemalloc does not see).  Adding the two over-counts the
    compiled side when they do not coexist, and subtracting everything kept under-counts
    eager's when a kept array was not yet allocated at the peak: both err against the
    compiled figure.  The compiled loss's arenas (its forward and gradient function)
    follow.  Without ``c_step`` the compiled figure is the larger of those two arenas."""
    eager_peak, eager_kept = _traced(e_step)
    fwd = c_loss.stats(*batch).get("arena_bytes", 0)
    bwd = 0
    for entry in list(c_loss._cache.values()):
        vjp = entry.stages.get("_vjp_fn")
        for ventry in list(getattr(vjp, "_cache", {}).values()):
            plan = getattr(ventry.stages.get("_executable"), "plan", None)
            bwd = max(bwd, getattr(plan, "arena_bytes", 0))
    eager_rows = {
        EAGER_KEY: eager_peak - eager_kept,
        "  eager tracemalloc peak": eager_peak,
        "  eager kept after the step": eager_kept,
    }
    if c_step is None:
        return {
            **eager_rows,
            COMPILED_KEY: max(fwd, bwd),
            "  forward arena": fwd,
            "  backward arena": bwd,
        }
    c_peak, c_kept = _traced(lambda: c_step(*batch))
    arena = c_step.stats(*batch).get("arena_bytes", 0)
    return {
        **eager_rows,
        COMPILED_KEY: arena + c_peak - c_kept,
        "  compiled step arena": arena,
        "  compiled host peak - kept": c_peak - c_kept,
        "compiled loss (arenas)": max(fwd, bwd),
        "  forward arena": fwd,
        "  backward arena": bwd,
    }


# the targets: the compiled warm step against JAX jit's warm step
JAX_TARGETS = {"W6": 1.0, "W7": 1.3, "W8": 1.0, "W9": 1.0}


def _jax_rows(wid: str, jax, ref, ref_opt, loss_fn: Callable, batch_np: tuple) -> tuple:
    """(warm step callable, first-call seconds) of JAX's jitted step of ``wid``, which
    starts from the eager model ``ref``'s weights; its first three losses must equal
    those of ``ref`` trained eagerly with ``ref_opt`` before anything is timed."""
    from . import bench_jax

    step, params, opt_state = bench_jax.build_step(jax, wid, bench_jax.params_from(ref))
    jbatch = tuple(jax.numpy.asarray(a) for a in batch_np)
    ebatch = tuple(eager.tensor(a) for a in batch_np)
    r_step = _step_fn(lambda *b: loss_fn(ref, *b), ref_opt, ebatch)
    state = [params, opt_state, None]

    def j_step():
        state[:] = jax.block_until_ready(step(state[0], state[1], jbatch))
        return state[2]

    first = _first_call(j_step)
    losses = [float(state[2])] + [float(j_step()) for _ in range(2)]
    bench_jax.check_losses(wid, losses, [r_step().item() for _ in range(3)])
    return j_step, first


def w6(quick: bool, median_time: Callable, optional: Callable) -> dict:
    rng = np.random.default_rng(6)
    x = rng.random((256, 1, 8, 8), dtype=F32)
    y = rng.integers(0, 10, size=256)
    return _workload(
        "W6",
        "classifier step: batch 256, MLP 64-128-10 ReLU, cross-entropy, Adam",
        lambda M: M.Classifier(64, 128, 10),
        lambda torch, m: torch.optim.Adam(m.parameters(), lr=1e-3),
        "class_loss",
        (x, y),
        quick,
        median_time,
        optional,
    )


def w7(quick: bool, median_time: Callable, optional: Callable) -> dict:
    rng = np.random.default_rng(7)
    x = rng.random((64, 1, 28, 28), dtype=F32)
    y = rng.integers(0, 10, size=64)
    return _workload(
        "W7",
        "CNN step: batch 64, 1x28x28, conv16-pool-conv32-pool-linear, cross-entropy, SGD+momentum",
        lambda M: M.LeNet(),
        lambda torch, m: torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9),
        "class_loss",
        (x, y),
        quick,
        median_time,
        optional,
    )


def w8(quick: bool, median_time: Callable, optional: Callable) -> dict:
    rng = np.random.default_rng(8)
    tokens = rng.integers(0, 128, size=(8, 65))
    x, y = tokens[:, :-1].copy(), tokens[:, 1:].copy()
    return _workload(
        "W8",
        "attention block fwd+bwd+Adam: batch 8, seq 64, width 64, 4 heads, GELU MLP 256",
        lambda M: M.AttentionBlock(),
        lambda torch, m: torch.optim.Adam(m.parameters(), lr=1e-3),
        "token_loss",
        (x, y),
        quick,
        median_time,
        optional,
    )


# ---------------------------------------------------------------------------
# W9: a recurrent network written with graphc.scan

RNN_BATCH, RNN_IN, RNN_HIDDEN, RNN_STEPS = 8, 16, 32, 300


def rnn_loss(Wx, Wh, b, xs, h0):
    """W9's loss: a tanh RNN over ``xs`` (steps, batch, input) with ``graphc.scan``; the
    mean square of every hidden state.  Eagerly the scan is a Python loop."""
    from ..loops import scan

    def step(h, x):
        h = (x @ Wx + h @ Wh + b).tanh()
        return h, h

    _, hs = scan(step, h0, xs)
    return (hs * hs).mean()


def rnn_loss_loop(Wx, Wh, b, xs, h0):
    """The same loss as a Python loop (what PyTorch eager runs, and what a trace unrolls)."""
    h, total = h0, 0.0
    for t in range(xs.shape[0]):
        h = (xs[t] @ Wx + h @ Wh + b).tanh()
        total = total + (h * h).sum()
    return total / (xs.shape[0] * h0.shape[0] * h0.shape[1])


def rnn_args(steps: int = RNN_STEPS, seed: int = 9) -> tuple:
    """(Wx, Wh, b, xs, h0) as float32 numpy arrays."""
    rng = np.random.default_rng(seed)
    return (
        (rng.standard_normal((RNN_IN, RNN_HIDDEN)) / np.sqrt(RNN_IN)).astype(F32),
        (rng.standard_normal((RNN_HIDDEN, RNN_HIDDEN)) / np.sqrt(RNN_HIDDEN)).astype(F32),
        np.zeros(RNN_HIDDEN, F32),
        rng.standard_normal((steps, RNN_BATCH, RNN_IN)).astype(F32),
        np.zeros((RNN_BATCH, RNN_HIDDEN), F32),
    )


def w9(quick: bool, median_time: Callable, optional: Callable) -> dict:
    from ..transforms import value_and_grad

    args = rnn_args()
    first = {}
    startup = _backend_startup()
    if startup is not None:
        first["compiled backend start-up"] = startup
    for steps in (30, RNN_STEPS):  # a fresh compiled function each: trace + grad + LLVM
        a = rnn_args(steps)
        vg = value_and_grad(rnn_loss, argnums=(0, 1, 2))
        first[f"first call, {steps} steps"] = _first_call(lambda: vg(*a))
    vg = value_and_grad(rnn_loss, argnums=(0, 1, 2))
    cv, cg = vg(*args)
    params = [eager.tensor(a, requires_grad=True) for a in args[:3]]
    data = [eager.tensor(a) for a in args[3:]]

    def e_step():
        for p in params:
            p.grad = None
        loss = rnn_loss(*params, *data)
        loss.backward()
        return loss

    ev = e_step().item()
    if not np.isclose(float(cv), ev, rtol=1e-4):
        raise AssertionError(f"W9: eager loss {ev} != compiled loss {float(cv)}")
    for p, g in zip(params, cg):
        if p.grad is None or not np.allclose(p.grad.numpy(), g, rtol=1e-3, atol=1e-5):
            raise AssertionError("W9: eager and compiled gradients differ")
    rows = {"eager": median_time(e_step, quick), "compiled": median_time(lambda: vg(*args), quick)}
    torch = optional("torch")
    if torch is not None:
        tp = [torch.tensor(a, requires_grad=True) for a in args[:3]]
        td = [torch.tensor(a) for a in args[3:]]

        def t_step():
            for p in tp:
                p.grad = None
            loss = rnn_loss_loop(*tp, *td)
            loss.backward()
            return loss

        if not np.isclose(t_step().item(), ev, rtol=1e-4):
            raise AssertionError("W9: PyTorch loss differs from eager's")
        rows["torch eager"] = median_time(t_step, quick)
    jax = optional("jax")
    if jax is not None:
        from . import bench_jax

        j_start = _jax_startup(jax)
        if j_start is not None:
            first["jax backend start-up"] = j_start
        jvg = jax.jit(jax.value_and_grad(bench_jax.rnn_loss(jax), argnums=(0, 1, 2)))
        jargs = [jax.numpy.asarray(a) for a in args]
        out: list = [None]

        def j_step():
            out[0] = jax.block_until_ready(jvg(*jargs))
            return out[0]

        first["jax first call"] = _first_call(j_step)
        jv, jg = out[0]
        bench_jax.check_losses("W9", [float(jv)], [ev])
        for g, c in zip(jg, cg):
            if not np.allclose(np.asarray(g), c, rtol=1e-3, atol=1e-5):
                raise AssertionError("W9: JAX and compiled gradients differ")
        rows["jax jit"] = median_time(j_step, quick)
    rows.update(first)
    return {
        "id": "W9",
        "what": f"tanh RNN value+grad with graphc.scan: {RNN_STEPS} steps, batch {RNN_BATCH}, "
        f"input {RNN_IN}, hidden {RNN_HIDDEN}",
        "times": rows,
        "targets": {
            "compiled": [(">=t", 2.0), ("<=j", JAX_TARGETS["W9"])],
            f"first call, {RNN_STEPS} steps": ("<=first30", 1.2),
        },
    }
