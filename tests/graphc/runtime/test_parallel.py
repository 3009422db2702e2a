"""Parallel loops: big fused loops split across threads, deterministically."""
from __future__ import annotations

import numpy as np
import pytest

import graphc
from graphc.backend import parallel_policy
from graphc.runtime import parallel

N = 1 << 19          # above abi.PARALLEL_MIN, so the loops below are split


def w2(x, w, b):
    return (x * w + b).tanh().pow(2).sum()


@pytest.fixture
def threads():
    """set_num_threads for the test; restores graphc's thread count after."""
    before = parallel.get_num_threads()
    yield parallel.set_num_threads
    parallel.set_num_threads(before)


def _inputs():
    rng = np.random.default_rng(0)
    return rng.standard_normal(N), np.array(0.7), np.array(-0.3)


def test_big_reduction_loop_is_parallel_and_agrees_with_the_interpreter(threads):
    x, w, b = _inputs()
    vg = graphc.compile(graphc.value_and_grad(w2, argnums=(1, 2)))
    threads(2)
    v, (gw, gb) = vg(x, w, b)
    ir = vg.llvm_ir(x, w, b)
    assert "graphc_pool_run" in ir and "k0_chunk" in ir
    t = np.tanh(x * w + b)
    np.testing.assert_allclose(v, (t * t).sum(), rtol=1e-12)
    np.testing.assert_allclose(gw, (2 * t * (1 - t * t) * x).sum(), rtol=1e-11)
    np.testing.assert_allclose(gb, (2 * t * (1 - t * t)).sum(), rtol=1e-11)


def test_results_are_deterministic_for_a_thread_count(threads):
    x, w, b = _inputs()
    vg = graphc.compile(graphc.value_and_grad(w2, argnums=(1, 2)))
    for n in (1, 2, 3):
        threads(n)
        first = vg(x, w, b)
        for _ in range(3):
            again = vg(x, w, b)
            assert float(again[0]) == float(first[0])
            assert float(again[1][0]) == float(first[1][0])


def test_one_thread_is_bit_identical_to_the_serial_kernel(threads, monkeypatch):
    x, w, b = _inputs()
    threads(1)
    par = graphc.compile(w2)(x, w, b)
    monkeypatch.setattr(parallel_policy, "PARALLEL_MIN", 1 << 62)       # no split: the serial kernel
    serial_fn = graphc.compile(w2)
    serial = serial_fn(x, w, b)
    assert "graphc_pool_run" not in serial_fn.llvm_ir(x, w, b)
    assert par.tobytes() == serial.tobytes()


def test_elementwise_outputs_are_exact_with_any_thread_count(threads):
    x = np.random.default_rng(1).standard_normal((N // 4, 4)).astype(np.float32)
    f = graphc.compile(lambda x: (x * 2.0 + 1.0).tanh())
    outs = []
    for n in (1, 2, 4):
        threads(n)
        outs.append(f(x))
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


def test_thread_count_setting_is_validated(threads):
    with pytest.raises(ValueError, match="positive int"):
        parallel.set_num_threads(0)
    with pytest.raises(ValueError, match="positive int"):
        parallel.set_num_threads(1.5)
    threads(3)
    assert graphc.get_num_threads() == 3
    assert parallel.NATIVE.value == 3           # what generated code reads


# --- the persistent worker pool (graphc/runtime/pool.py) ---------------------------------

def _vg():
    return graphc.compile(graphc.value_and_grad(w2, argnums=(1, 2)))


def _flat(res):
    v, (gw, gb) = res
    return (float(v), float(gw), float(gb))


def test_repeated_calls_reuse_the_pool_workers(threads):
    from graphc.runtime import pool
    x, w, b = _inputs()
    vg = _vg()
    threads(2)
    first = _flat(vg(x, w, b))
    started = pool.workers_started()
    assert 1 <= started <= parallel.MAX_THREADS - 1
    for _ in range(200):
        assert _flat(vg(x, w, b)) == first
    assert pool.workers_started() == started          # no thread per call any more


def test_changing_thread_counts_between_calls(threads):
    from graphc.runtime import pool
    x, w, b = _inputs()
    vg = _vg()
    ref = {}
    for n in (1, 2, 3, 4):
        threads(n)
        ref[n] = _flat(vg(x, w, b))
    for n in (4, 1, 3, 2, 2, 1, 4, 3):
        threads(n)
        assert _flat(vg(x, w, b)) == ref[n]
    assert pool.workers_started() <= 3                  # at most max(n) - 1 workers
    for n in (2, 3, 4):                                  # and close to the 1-thread result
        np.testing.assert_allclose(ref[n], ref[1], rtol=1e-12)


def test_calls_from_several_python_threads_at_once(threads):
    import threading
    x, w, b = _inputs()
    vg = _vg()
    xs = np.random.default_rng(2).standard_normal((N // 2, 2)).astype(np.float32)
    ew = graphc.compile(lambda x: (x * 2.0 + 1.0).tanh())
    threads(2)
    ref_vg, ref_ew = _flat(vg(x, w, b)), ew(xs)
    errors = []
    start = threading.Barrier(4)

    def work(k):
        try:
            start.wait()
            for _ in range(25):
                if k % 2:
                    assert _flat(vg(x, w, b)) == ref_vg
                else:
                    assert np.array_equal(ew(xs), ref_ew)
        except BaseException as e:           # reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]


def test_no_worker_thread_means_the_caller_runs_every_chunk(threads):
    """What happens when pthread_create fails: the chunks run on the calling thread, with
    the same results."""
    from graphc.runtime import pool
    x, w, b = _inputs()
    vg = _vg()
    threads(2)
    ref = _flat(vg(x, w, b))
    old = pool.set_worker_limit(0)
    try:
        assert _flat(vg(x, w, b)) == ref
    finally:
        pool.set_worker_limit(old)
    assert _flat(vg(x, w, b)) == ref


def test_idle_pool_does_not_burn_cpu(threads):
    import time
    x, w, b = _inputs()
    vg = _vg()
    threads(2)
    for _ in range(5):
        vg(x, w, b)
    time.sleep(0.05)                       # workers stop spinning within SPIN_NS
    c0, t0 = time.process_time(), time.perf_counter()
    time.sleep(0.3)
    busy = time.process_time() - c0
    assert busy < 0.1 * (time.perf_counter() - t0), busy


_CHILD = r"""
import os, sys, threading
import numpy as np
import graphc
from graphc.runtime import pool
graphc.set_num_threads(2)
def w2(x, w, b):
    return (x * w + b).tanh().pow(2).sum()
vg = graphc.compile(graphc.value_and_grad(w2, argnums=(1, 2)))
x = np.random.default_rng(0).standard_normal(1 << 19)
w, b = np.array(0.7), np.array(-0.3)
ref = float(vg(x, w, b)[0])
assert pool.workers_started() >= 1
if hasattr(os, "fork"):            # a forked child has no workers: the pool starts anew
    r, wfd = os.pipe()
    import warnings
    with warnings.catch_warnings():     # 3.12+: "fork() in a multi-threaded process" (meant)
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        ok = all(float(vg(x, w, b)[0]) == ref for _ in range(20))
        os.write(wfd, b"1" if ok and pool.workers_started() >= 1 else b"0")
        os._exit(0)
    os.close(wfd)
    assert os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
# exit while the workers sleep in the pool, and a Python thread has just used it
t = threading.Thread(target=lambda: vg(x, w, b))
t.start(); t.join()
print("done", flush=True)
"""


def test_process_using_the_pool_exits_cleanly():
    import os
    import subprocess
    import sys
    env = dict(os.environ, GRAPHC_NUM_THREADS="2")
    p = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "done"
    assert p.stderr == ""
