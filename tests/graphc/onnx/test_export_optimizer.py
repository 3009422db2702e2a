"""A compiled training step with an ``eager.optim`` optimizer, exported to ONNX: the
parameters, their .grad, the optimizer's state tensors and each group's lr are graph
inputs; the new parameters and state are '<name>_updated' outputs.  Checked against eager
over three steps in ONNX Runtime; an optimizer's first step (it creates the state) is
refused."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import eager  # noqa: E402
import graphc  # noqa: E402
from tests.graphc._steps import make_optimizer, snapshot, train_step  # noqa: E402


def _setup(kind):
    eager.manual_seed(0)
    m = eager.nn.Sequential(eager.nn.Linear(3, 4), eager.nn.Tanh(), eager.nn.Linear(4, 2))
    opt = make_optimizer(kind, m.parameters())
    rs = np.random.RandomState(0)
    x = eager.tensor(rs.randn(5, 3).astype(np.float32))
    y = eager.tensor(rs.randn(5, 2).astype(np.float32))
    return m, opt, x, y, train_step(m, opt)


def _session(model):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _feeds(model):
    names = {i.name for i in model.graph.input}
    return {
        i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer if i.name in names
    }


def _by_name(m, opt, outs):
    """The ONNX outputs keyed like snapshot(m, opt, grads=False)."""
    res = {}
    for name, p in m.named_parameters():
        base = "m_" + name.replace(".", "_")
        res[name] = outs[f"{base}_updated"]
        for k in opt.state[p]:
            res[f"{name}.{k}"] = outs[f"opt_state_{base}_{k}_updated"]
    return res


@pytest.mark.parametrize("kind", ["adam", "adamw", "sgd"])
@pytest.mark.parametrize("warm", ["eager", "compiled"])
def test_three_steps_match_eager(kind, warm):
    m, opt, x, y, step = _setup(kind)
    if warm == "eager":
        step(x, y)
        model = graphc.export_onnx(step, x, y)
    else:
        cf = graphc.compile(step)
        cf(x, y)
        model = graphc.export_onnx(cf, x, y)
    in_names = [i.name for i in model.graph.input]
    out_names = [o.name for o in model.graph.output]
    assert "opt_param_groups_0_lr" in in_names
    assert any(n.startswith("opt_state_") for n in in_names)
    for n in in_names[2:]:
        if not n.endswith("_grad"):
            assert f"{n}_updated" in out_names or n == "opt_param_groups_0_lr", n
    sess = _session(model)
    feeds = _feeds(model)
    feeds["x"], feeds["y"] = x.numpy(), y.numpy()
    for _ in range(3):
        outs = dict(zip(out_names, sess.run(None, feeds)))
        loss = step(x, y)  # eager
        np.testing.assert_allclose(outs["output"], loss.item(), rtol=1e-5, atol=1e-6)
        want = snapshot(m, opt, grads=False)
        got = _by_name(m, opt, outs)
        assert sorted(got) == sorted(want)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=2e-5, atol=1e-6, err_msg=k)
        for n, v in outs.items():
            if n.endswith("_updated") and n[: -len("_updated")] in feeds:
                feeds[n[: -len("_updated")]] = v


def test_lr_is_an_input():
    m, opt, x, y, step = _setup("sgd")
    step(x, y)
    model = graphc.export_onnx(step, x, y)
    sess = _session(model)
    feeds = _feeds(model)
    feeds["x"], feeds["y"] = x.numpy(), y.numpy()
    feeds["opt_param_groups_0_lr"] = np.array(0.05)
    outs = dict(zip([o.name for o in model.graph.output], sess.run(None, feeds)))
    opt.param_groups[0]["lr"] = 0.05
    step(x, y)
    np.testing.assert_allclose(outs["m_0_weight_updated"], m[0].weight.detach().numpy(), 1e-5, 1e-6)


@pytest.mark.parametrize("kind", ["adam", "sgd"])
def test_first_step_refused(kind):
    m, opt, x, y, step = _setup(kind)
    before = [p.detach().numpy().copy() for p in m.parameters()]
    with pytest.raises(ValueError, match=r"first step of opt: .*Run one step first"):
        graphc.export_onnx(step, x, y)
    with pytest.raises(ValueError, match="first step of opt"):
        graphc.compile(step).to_onnx(x, y) if hasattr(graphc.CompiledFunction, "to_onnx") else (
            graphc.export_onnx(graphc.compile(step), x, y)
        )
    # exporting neither stepped the model nor created state
    assert all(not opt.state.get(p) for p in m.parameters())
    for b, p in zip(before, m.parameters()):
        np.testing.assert_array_equal(b, p.detach().numpy())


def test_stateless_sgd_exports_on_first_call():
    """SGD without momentum has no state: nothing to create, the first call exports."""
    eager.manual_seed(0)
    m = eager.nn.Linear(3, 2)
    opt = eager.optim.SGD(m.parameters(), lr=0.1)
    x = eager.tensor(np.ones((4, 3), np.float32))

    def step(x):
        opt.zero_grad()
        loss = m(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss

    model = graphc.export_onnx(step, x)
    outs = dict(
        zip([o.name for o in model.graph.output], _session(model).run(None, {"x": x.numpy()}))
    )
    step(x)
    np.testing.assert_allclose(outs["m_weight_updated"], m.weight.detach().numpy(), 1e-5, 1e-6)


def test_existing_grad_inputs_keep_their_positions():
    """A lifted parameter whose .grad exists takes two graph inputs; the initializers and
    output names must follow (it used to shift them: a rank error from onnx's checker)."""
    eager.manual_seed(0)
    m = eager.nn.Linear(3, 2)
    x = eager.tensor(np.ones((4, 3), np.float32))
    m(x).sum().backward()

    def f(x):
        loss = m(x).pow(2).sum()
        loss.backward()
        return loss

    model = graphc.export_onnx(f, x)
    names = [i.name for i in model.graph.input]
    assert names == ["x", "m_weight", "m_weight_grad", "m_bias", "m_bias_grad"]
    g0 = m.weight.grad.numpy().copy()
    outs = dict(
        zip([o.name for o in model.graph.output], _session(model).run(None, {"x": x.numpy()}))
    )
    f(x)
    assert "m_weight_grad_updated" in outs
    np.testing.assert_allclose(outs["m_weight_grad_updated"], m.weight.grad.numpy(), 1e-5, 1e-5)
    assert not np.allclose(g0, m.weight.grad.numpy())
