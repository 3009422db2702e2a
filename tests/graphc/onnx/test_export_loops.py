"""Structured loops export as ONNX Scan (scan with xs) and Loop (fori_loop, while_loop,
scan without xs), nested loops included; ONNX Runtime gives eager's numbers."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import eager  # noqa: E402
import graphc  # noqa: E402


def _check(fn, *args, rtol=1e-5, atol=1e-6):
    model = graphc.export_onnx(fn, *args)
    onnx.checker.check_model(model, full_check=True)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args)}
    got = sess.run(None, feeds)
    want = fn(*args)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=rtol, atol=atol)
    return model


def _ops(model):
    return {n.op_type for n in model.graph.node}


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_with_xs_is_onnx_scan(reverse):
    def f(c0, xs, w):
        return graphc.scan(lambda c, x: ((c + x) @ w, c * x), c0, xs, reverse=reverse)

    m = _check(f, eager.randn(3), eager.randn(5, 3), eager.randn(3, 3))
    assert "Scan" in _ops(m)


def test_fori_loop_is_onnx_loop():
    f = lambda x: graphc.fori_loop(0, 4, lambda i, c: c * 0.5 + i, x)
    m = _check(f, eager.randn(3, 2))
    assert "Loop" in _ops(m)


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_without_xs_stacks_ys(reverse):
    def f(x):
        return graphc.scan(lambda c, _: (c * 2.0, c.sum()), x, None, length=3, reverse=reverse)

    _check(f, eager.randn(2))


def test_while_loop_is_onnx_loop():
    f = lambda x, lim: graphc.while_loop(lambda c: c.sum() < lim, lambda c: c * 2.0 + 0.1, x)
    m = _check(f, eager.rand(3) + 0.1, eager.tensor(50.0))
    assert "Loop" in _ops(m)


def test_while_zero_trips():
    f = lambda x: graphc.while_loop(lambda c: c.sum() < -1.0, lambda c: c * 2.0, x)
    _check(f, eager.rand(3))


def test_nested_loops():
    def f(x, xs):
        def outer(c, row):
            inner = graphc.fori_loop(0, 2, lambda i, d: d + row * i, c)
            return inner, inner.sum()

        return graphc.scan(outer, x, xs)

    _check(f, eager.randn(3), eager.randn(4, 3))


def test_grad_through_scan():
    def loss(w, xs):
        c, _ = graphc.scan(lambda c, x: ((c * x).tanh() + w, None), eager.zeros(3), xs)
        return c.sum()

    _check(graphc.grad(loss), eager.randn(3), eager.randn(4, 3), rtol=1e-4, atol=1e-5)


def test_scan_of_length_zero():
    def f(c0, xs):
        return graphc.scan(lambda c, x: (c + x, c * x), c0, xs)

    _check(f, eager.randn(3), eager.randn(0, 3))
