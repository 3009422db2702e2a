"""Parallel loops: big fused loops split across threads, deterministically."""
from __future__ import annotations

import numpy as np
import pytest

import graphc
from graphc.backend import lower
from graphc.runtime import parallel

N = 1 << 19          # above lower.PARALLEL_MIN, so the loops below are split


def w2(x, w, b):
    return (x * w + b).tanh().pow(2).sum()


@pytest.fixture
def threads():
    """set_num_threads for the test; restores the loop and the BLAS thread counts after
    (set_num_threads sets both, and other tests rely on the BLAS count, e.g. bit-for-bit
    eager/compiled agreement, which needs both BLAS pools alike)."""
    from graphc.backend import blas
    before, blas_before = parallel.get_num_threads(), blas.get_num_threads()
    yield parallel.set_num_threads
    parallel.set_num_threads(before)
    blas.set_num_threads(blas_before)


def _inputs():
    rng = np.random.default_rng(0)
    return rng.standard_normal(N), np.array(0.7), np.array(-0.3)


def test_big_reduction_loop_is_parallel_and_agrees_with_the_interpreter(threads):
    x, w, b = _inputs()
    vg = graphc.compile(graphc.value_and_grad(w2, argnums=(1, 2)))
    threads(2)
    v, (gw, gb) = vg(x, w, b)
    ir = vg.llvm_ir(x, w, b)
    assert "pthread_create" in ir and "k0_thread" in ir
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
    monkeypatch.setattr(lower, "PARALLEL_MIN", 1 << 62)       # no split: the serial kernel
    serial_fn = graphc.compile(w2)
    serial = serial_fn(x, w, b)
    assert "pthread_create" not in serial_fn.llvm_ir(x, w, b)
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
