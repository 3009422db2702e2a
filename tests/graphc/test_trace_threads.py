"""Two threads trace and compile at the same time.

Everything one trace records (its graph, whether new nodes are forward or gradient
nodes, the source line they are attributed to) lives in its own ``TraceContext``, so a
thread differentiating (``backward()`` inside a trace, ``value_and_grad``) never
changes what another thread's trace records.  Each thread compiles new functions many
times (every round traces again), one thread's trace sometimes fails half way, and
every result must equal eager's.
"""
from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import eager
import graphc

ROUNDS = 20
F32 = dict(rtol=1e-4, atol=1e-5)     # float32 agreement between two evaluation orders


def _np(v) -> np.ndarray:
    return v.detach().numpy() if isinstance(v, eager.Tensor) else np.asarray(v)


def loss_fn(x, w):
    return (x.mm(w).tanh() * 2.0).pow(2).sum()


def train_step(x, w):
    loss = (x.mm(w).clamp(min=0) - 1.0).pow(2).sum()
    loss.backward()
    with eager.no_grad():
        w -= 1e-3 * w.grad
        w.grad.zero_()
    return loss


def branches_on_a_value(x):
    if (x * 3.0).sum() > 0:             # a Python branch on a traced value: fails mid-trace
        return x * 2.0
    return x


def _grads_thread(seed: int, barrier: threading.Barrier) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(ROUNDS):
        x = rng.standard_normal((4, 5)).astype(np.float32)
        w = rng.standard_normal((5, 3)).astype(np.float32)
        barrier.wait(timeout=120)
        value, grad = graphc.value_and_grad(loss_fn, argnums=1)(x, w)   # traces anew
        ew = eager.tensor(w, requires_grad=True)
        want = loss_fn(eager.from_numpy(x), ew)
        want.backward()
        np.testing.assert_allclose(_np(value), want.item(), **F32)
        np.testing.assert_allclose(_np(grad), ew.grad.numpy(), **F32)


def _steps_thread(seed: int, barrier: threading.Barrier) -> None:
    rng = np.random.default_rng(seed)
    for k in range(ROUNDS):
        x = rng.standard_normal((6, 4)).astype(np.float32)
        w = rng.standard_normal((4, 2)).astype(np.float32)
        barrier.wait(timeout=120)
        if k % 3 == 1:
            with pytest.raises(graphc.TracerBoolConversionError):
                graphc.compile(branches_on_a_value)(eager.from_numpy(x))
        cw = eager.tensor(w, requires_grad=True)
        cw.grad = eager.zeros(4, 2)
        got = graphc.compile(train_step)(eager.from_numpy(x), cw)          # traces anew
        ew = eager.tensor(w, requires_grad=True)
        ew.grad = eager.zeros(4, 2)
        want = train_step(eager.from_numpy(x), ew)
        np.testing.assert_allclose(_np(got), want.item(), **F32)
        np.testing.assert_allclose(_np(cw), _np(ew), **F32)
        np.testing.assert_array_equal(_np(cw.grad), np.zeros((4, 2), np.float32))


def test_two_threads_trace_and_compile_at_once_and_each_equals_eager():
    barrier = threading.Barrier(2)
    errors: list = []

    def run(target, seed):
        try:
            target(seed, barrier)
        except BaseException as e:      # report it in the main thread, release the other
            errors.append(e)
            barrier.abort()

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)         # switch threads often: traces interleave finely
    try:
        threads = [threading.Thread(target=run, args=(_grads_thread, 1)),
                   threading.Thread(target=run, args=(_steps_thread, 2))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
    finally:
        sys.setswitchinterval(before)
    assert not any(t.is_alive() for t in threads)
    real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
    if real or errors:
        raise (real or errors)[0]


def test_a_trace_records_its_own_node_roles():
    """A trace records forward nodes; the gradient nodes differentiation adds to a trace
    of its own are marked backward, and the trace is back to forward afterwards."""
    x = np.ones((3, 3), np.float32)
    g = graphc.trace(lambda a: (a * 2.0).sum(), x)
    assert {d["role"] for _, d in g.nx.nodes(data=True)} == {"forward"}
    gg = g.grad()
    assert "backward" in {d["role"] for _, d in gg.nx.nodes(data=True)}
    g2 = graphc.trace(lambda a: (a * 2.0).sum(), x)
    assert {d["role"] for _, d in g2.nx.nodes(data=True)} == {"forward"}
