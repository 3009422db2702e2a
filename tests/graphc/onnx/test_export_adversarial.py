"""The exporter under attack: compositions of transforms, 0-d / size-0 / size-1 and
non-contiguous inputs, int and bool inputs, outputs that are inputs or repeated,
static arguments, non-array outputs."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import eager  # noqa: E402
import graphc  # noqa: E402

F64 = dict(rtol=1e-9, atol=1e-11)


def _run(model, arrays):
    onnx.checker.check_model(model, full_check=True)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: np.array(a, order="C") for i, a in zip(sess.get_inputs(), arrays)}
    return sess.run(None, feeds)


def _leaves(out):
    from graphc.pytree import flatten

    return [o.detach().numpy() for o in flatten(out)[0] if isinstance(o, eager.Tensor)]


def _check(fn, *args, export=None):
    model = (export or graphc.export_onnx)(fn, *args)
    got = _run(model, [a.detach().numpy() for a in args])
    want = _leaves(fn(*args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, **F64)


def loss(w, x):
    return ((x @ w).tanh() ** 2).sum()


def _wx():
    return eager.randn(3, 2, dtype=eager.float64), eager.randn(4, 3, dtype=eager.float64)


def test_compile_of_grad():
    _check(graphc.compile(graphc.grad(loss)), *_wx())


def test_grad_of_grad_vector_product():
    def hvp(w, x):
        return graphc.grad(lambda w: (graphc.grad(loss)(w, x) * w).sum())(w)

    _check(hvp, *_wx())


def test_vmap_of_grad_per_example():
    w, x = _wx()
    per = graphc.vmap(graphc.grad(lambda w, xi: loss(w, xi[None])), in_axes=(None, 0))
    _check(per, w, x)


def test_to_onnx_of_compiled_transform():
    cf = graphc.compile(graphc.value_and_grad(loss, argnums=(0, 1)))
    w, x = _wx()
    _check(cf, w, x, export=lambda f, *a: f.to_onnx(*a))


@pytest.mark.parametrize("shape", [(), (0,), (1,), (0, 3), (1, 1)])
def test_edge_shapes(shape):
    x = eager.randn(*shape, dtype=eager.float64)
    _check(lambda x: ((x * 2).exp().sum(), x.reshape(-1) + 1, x.mean()), x)


def test_non_contiguous_example_input():
    x = eager.randn(4, 3, dtype=eager.float64).t()
    assert not x.is_contiguous()
    _check(lambda x: x @ x.t() + x.sum(1), x)


def test_int_and_bool_inputs():
    a = eager.tensor([[1, -2, 3], [4, 5, -6]])
    m = eager.tensor([[True, False, True], [False, False, True]])
    _check(lambda a, m: (eager.where(m, a, a * 2).sum(1), (a > 0) & m, a // 4, a % 3), a, m)


def test_outputs_that_are_inputs_or_repeated():
    x = eager.randn(3, dtype=eager.float64)
    model = graphc.export_onnx(lambda x: (x, x * 2, x * 2), x)
    names = [o.name for o in model.graph.output]
    assert len(set(names)) == 3
    got = _run(model, [x.numpy()])
    np.testing.assert_array_equal(got[0], x.numpy())
    np.testing.assert_array_equal(got[1], got[2])


def test_static_argnums_and_scalar_outputs():
    cf = graphc.compile(lambda x, n: (x * n, n + 1), static_argnums=(1,))
    x = eager.randn(3, dtype=eager.float64)
    model = cf.to_onnx(x, 3)
    assert [o.name for o in model.graph.output] == ["output"]  # n + 1 is a Python int
    np.testing.assert_allclose(_run(model, [x.numpy()])[0], x.numpy() * 3, **F64)


def test_numpy_arguments():
    x = np.arange(6.0).reshape(2, 3)
    model = graphc.export_onnx(lambda x: x.sum(0), x)
    np.testing.assert_allclose(_run(model, [x])[0], x.sum(0))


def test_float32_training_step_dtypes():
    w = eager.randn(3, 2, requires_grad=True)
    x = eager.randn(4, 3)

    def step(w, x):
        loss = (x @ w).sigmoid().sum()
        loss.backward()
        with eager.no_grad():
            w -= 0.5 * w.grad
            w.grad.zero_()
        return loss

    model = graphc.export_onnx(step, w, x)
    got = dict(zip([o.name for o in model.graph.output],
                   _run(model, [w.detach().numpy(), x.numpy()])))
    loss_ = step(w, x)
    assert got["output"].dtype == np.float32
    np.testing.assert_allclose(got["output"], loss_.detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(got["w_updated"], w.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_no_outputs_is_an_error():
    with pytest.raises(ValueError, match="returns no arrays"):
        graphc.export_onnx(lambda x: 3, eager.randn(2))
