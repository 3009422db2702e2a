"""Whole programs exported with graphc.export_onnx and run by ONNX Runtime (CPU): the
classifier, CNN and attention models and their losses, the seeds' MLP training step
(updated parameters as outputs), graphc.grad/value_and_grad, pytrees, names and doc
strings, hostile names, error paths."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import eager  # noqa: E402
import graphc  # noqa: E402
from graphc.tools import models  # noqa: E402
from graphc.tools.workloads import seed_functions  # noqa: E402

F32 = dict(rtol=2e-4, atol=2e-5)
F64 = dict(rtol=1e-9, atol=1e-10)


def _session(model):
    onnx.checker.check_model(model, full_check=True)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _run(model, *arrays, **by_name):
    sess = _session(model)
    names = [i.name for i in sess.get_inputs()]
    feeds = dict(zip(names, arrays))
    feeds.update(by_name)
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _np(t):
    return t.detach().numpy() if isinstance(t, eager.Tensor) else np.asarray(t)


def test_plain_function_float64_and_names():
    x = np.random.default_rng(0).standard_normal((4, 3))
    w = np.random.default_rng(1).standard_normal((3, 2))

    f = lambda x, w: ((x @ w).tanh().sum(0), (x * 2.0).max())
    xt, wt = eager.tensor(x), eager.tensor(w)
    model = graphc.export_onnx(f, xt, wt)
    assert [i.name for i in model.graph.input] == ["x", "w"]
    assert [o.name for o in model.graph.output] == ["output_0", "output_1"]
    assert all(n.doc_string for n in model.graph.node if n.op_type != "Identity")
    assert any("test_export_models.py" in n.doc_string for n in model.graph.node)
    got = _run(model, x, w)
    want = f(xt, wt)
    np.testing.assert_allclose(got["output_0"], _np(want[0]), **F64)
    np.testing.assert_allclose(got["output_1"], _np(want[1]), **F64)


def test_export_is_deterministic_and_writes_path(tmp_path):
    f = lambda x: (x.exp() + 1).log().mean()
    x = eager.randn(3, 5)
    a = graphc.export_onnx(f, x, path=tmp_path / "m.onnx")
    b = graphc.export_onnx(f, x)
    assert a.SerializeToString() == b.SerializeToString()
    assert onnx.load(str(tmp_path / "m.onnx")).SerializeToString() == a.SerializeToString()


def test_compiled_function_to_onnx_and_pytrees():
    @graphc.compile
    def f(p, x):
        return {"y": x @ p["w"] + p["b"], "n": (x * x).sum()}

    p = {"w": eager.randn(3, 2), "b": eager.randn(2)}
    x = eager.randn(4, 3)
    model = f.to_onnx(p, x)
    feeds = {"p_w": _np(p["w"]), "p_b": _np(p["b"]), "x": _np(x)}
    assert sorted(i.name for i in model.graph.input) == sorted(feeds)
    got = _run(model, **feeds)
    want = f(p, x)
    # outputs in the pytree's leaf order (dict keys sorted, as JAX's)
    np.testing.assert_allclose(got["output_0"], _np(want["n"]), **F32)
    np.testing.assert_allclose(got["output_1"], _np(want["y"]), **F32)


def test_grad_and_value_and_grad_export():
    def loss(w, x):
        return ((x @ w).sigmoid() ** 2).sum()

    w = eager.randn(3, 2, dtype=eager.float64)
    x = eager.randn(5, 3, dtype=eager.float64)
    m = graphc.export_onnx(graphc.value_and_grad(loss), w, x)
    got = list(_run(m, _np(w), _np(x)).values())
    v, g = graphc.value_and_grad(loss)(w, x)
    np.testing.assert_allclose(got[0], _np(v), **F64)
    np.testing.assert_allclose(got[1], _np(g), **F64)
    m = graphc.export_onnx(graphc.grad(loss, argnums=(0, 1)), w, x)
    got = list(_run(m, _np(w), _np(x)).values())
    gw, gx = graphc.grad(loss, argnums=(0, 1))(w, x)
    np.testing.assert_allclose(got[0], _np(gw), **F64)
    np.testing.assert_allclose(got[1], _np(gx), **F64)


def test_seed_training_step_updates_parameters():
    step, _ = seed_functions()
    eager.manual_seed(0)
    x, y = eager.randn(16, 20), eager.randn(16, 4)
    w1 = eager.randn(20, 8, requires_grad=True)
    w2 = eager.randn(8, 4, requires_grad=True)
    model = graphc.export_onnx(step, x, y, w1, w2)
    outs = [o.name for o in model.graph.output]
    assert outs[:3] == ["output", "w1_updated", "w2_updated"]
    feeds = [_np(t).copy() for t in (x, y, w1, w2)]
    got = _run(model, *feeds)
    # the export did not run the step: the weights are untouched
    np.testing.assert_array_equal(_np(w1), feeds[2])
    loss = step(x, y, w1, w2)
    np.testing.assert_allclose(got["output"], _np(loss), **F32)
    np.testing.assert_allclose(got["w1_updated"], _np(w1), **F32)
    np.testing.assert_allclose(got["w2_updated"], _np(w2), **F32)


def _model_cases():
    M = models.build()
    eager.manual_seed(0)
    clf = M.Classifier()
    x = eager.randn(8, 64)
    lab = eager.randint(0, 10, (8,))
    cnn = M.LeNet()
    img = eager.randn(2, 1, 28, 28)
    att = M.AttentionBlock()
    tok = eager.randint(0, 128, (2, 64))
    return {
        "classifier": (clf, (x,)),
        "classifier_loss": (lambda x, lab: M.class_loss(clf, x, lab), (x, lab)),
        "cnn": (cnn, (img,)),
        "cnn_loss": (lambda x, lab: M.class_loss(cnn, x, lab), (img, lab[:2])),
        "attention": (att, (tok,)),
        "attention_loss": (lambda t, g: M.token_loss(att, t, g), (tok, tok)),
    }


@pytest.mark.parametrize("name", list(_model_cases()))
def test_models_match_eager(name):
    fn, args = _model_cases()[name]
    model = graphc.export_onnx(fn, *args)
    # the parameters are initializers: the arguments are the only inputs
    got = _run(model, *[_np(a) for a in args])["output"]
    with eager.no_grad():
        want = fn(*args)
    np.testing.assert_allclose(got, _np(want), **F32)


def test_classifier_training_step():
    M = models.build()
    eager.manual_seed(1)
    clf = M.Classifier(d_in=6, hidden=5, classes=3)
    x, lab = eager.randn(4, 6), eager.randint(0, 3, (4,))

    def train_step(x, lab):
        loss = M.class_loss(clf, x, lab)
        loss.backward()
        with eager.no_grad():
            for p in clf.parameters():
                p -= 0.1 * p.grad
                p.grad = None
        return loss

    before = [p.detach().numpy().copy() for p in clf.parameters()]
    try:
        model = graphc.export_onnx(train_step, x, lab)
    except graphc.UnsupportedOpError as e:
        pytest.fail(str(e))
    got = _run(model, _np(x), _np(lab))
    for p, b in zip(clf.parameters(), before):
        np.testing.assert_array_equal(p.detach().numpy(), b)  # export does not step
    loss = train_step(x, lab)
    np.testing.assert_allclose(got["output"], _np(loss), **F32)
    updated = [v for k, v in got.items() if k.endswith("_updated")]
    assert len(updated) == len(before)
    for u, p in zip(updated, clf.parameters()):
        np.testing.assert_allclose(u, p.detach().numpy(), **F32)


def test_hostile_names_and_source_lines():
    ns = {"eager": eager}
    src = "def f(x\u00e9, y):\n    return (x\u00e9 * y).sum()  # \u2603 \\udcff \"'<>\n"
    exec(compile(src, "we\u00efrd \"file\".py", "exec"), ns)
    m = graphc.export_onnx(ns["f"], eager.randn(3), eager.randn(3))
    names = [i.name for i in m.graph.input]
    assert len(set(names)) == 2
    assert all(n.isascii() for n in names)
    m.SerializeToString()
    _run(m, np.ones(3, np.float32), np.ones(3, np.float32))


def test_random_ops_are_refused_with_op_and_line():
    def f(x):
        return x + eager.randn(3)

    with pytest.raises(graphc.UnsupportedOpError, match=r"'philox'.*test_export_models.py:\d+.*Philox"):
        graphc.export_onnx(f, eager.randn(3))


def test_bad_opset():
    with pytest.raises(ValueError, match="opset must be an int from 18"):
        graphc.export_onnx(lambda x: x + 1, eager.randn(2), opset=11)
    m = graphc.export_onnx(lambda x: x + 1, eager.randn(2), opset=20)
    assert m.opset_import[0].version == 20


def test_import_graphc_does_not_import_onnx():
    import subprocess
    import sys
    code = "import sys, graphc; print('onnx' in sys.modules, 'onnxruntime' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_missing_extra_names_it(monkeypatch):
    import builtins
    real = builtins.__import__

    def fake(name, *a, **k):
        if name == "onnx" or name.startswith("onnx."):
            raise ImportError("No module named 'onnx'")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(ImportError, match=r"eager-graphc\[onnx\]"):
        graphc.export_onnx(lambda x: x + 1, eager.randn(2))


def test_parameters_are_initializers_unless_kept_as_inputs():
    M = models.build()
    eager.manual_seed(2)
    clf = M.Classifier(d_in=4, hidden=3, classes=2)
    x = eager.randn(2, 4)
    m = graphc.export_onnx(clf, x)
    assert [i.name for i in m.graph.input] == ["x"]
    inits = {t.name for t in m.graph.initializer}
    assert {"self_net_1_weight", "self_net_1_bias"} <= inits
    m = graphc.export_onnx(clf, x, keep_initializers_as_inputs=True)
    names = [i.name for i in m.graph.input]
    assert names[0] == "x" and "self_net_1_weight" in names
    w = np.zeros((3, 4), np.float32)  # an input overrides its initializer
    got = _run(m, _np(x), self_net_1_weight=w)["output"]
    with eager.no_grad():
        clf.net[1].weight.zero_()
        np.testing.assert_allclose(got, _np(clf(x)), **F32)


@pytest.mark.parametrize("case", ["rows", "cols", "int_then_tensor", "set_rows", "set_mask",
                                  "grad_rows", "two_tensors"])
def test_tensor_indexing(case):
    x = eager.randn(5, 4, dtype=eager.float64)
    idx = eager.tensor([3, 0, -1, 3])
    fns = {
        "rows": lambda x, i: x[i] * 2,
        "cols": lambda x, i: x[:, i[:2]].sum(0),
        "int_then_tensor": lambda x, i: x[1, i[:2]],
        "set_rows": lambda x, i: _set(x, i[:2], 7.0),
        "set_mask": lambda x, i: _set(x, x > 0, -1.0),
        "grad_rows": graphc.grad(lambda x, i: (x[i] ** 2).sum()),
        "two_tensors": lambda x, i: x[i, i],
    }
    fn = fns[case]
    if case == "two_tensors":
        with pytest.raises(graphc.UnsupportedOpError, match="getitem.*tensor index"):
            graphc.export_onnx(fn, x, idx)
        return
    got = list(_run(graphc.export_onnx(fn, x, idx), _np(x), _np(idx)).values())[0]
    np.testing.assert_allclose(got, _np(fn(x, idx)), **F64)


def _set(x, i, v):
    y = x * 1
    y[i] = v
    return y
