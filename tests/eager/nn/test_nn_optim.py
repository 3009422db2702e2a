"""eager.nn and eager.optim against numpy.

Layers are checked against the numpy expression they stand for; SGD and Adam
against a hand-written numpy transcription of PyTorch's update formulas, step
by step, in float64 (so agreement is to ~1e-12, far below any formula slip).
"""
from __future__ import annotations

import copy
import pickle
from collections import OrderedDict

import numpy as np
import pytest

import eager
import eager as torch
from eager import nn
from eager.nn import functional as F


def A(t) -> np.ndarray:
    return np.asarray(t.detach()._data)


@pytest.fixture(autouse=True)
def _seed():
    eager.manual_seed(1234)


# ---------------------------------------------------------------------------
# Parameter


def test_parameter_is_a_registered_leaf_sharing_storage():
    t = torch.ones(2, 3)
    p = nn.Parameter(t)
    assert type(p) is eager.Tensor
    assert isinstance(p, nn.Parameter) and nn.is_parameter(p)
    assert not isinstance(t, nn.Parameter)
    assert p.requires_grad and p.is_leaf and p.grad_fn is None
    t.fill_(5.0)
    assert A(p).tolist() == [[5.0] * 3] * 2
    q = nn.Parameter(t, requires_grad=False)
    assert isinstance(q, nn.Parameter) and not q.requires_grad
    assert nn.Parameter().shape == (0,)
    assert not isinstance(3.0, nn.Parameter)


def test_parameter_of_a_non_leaf_is_detached():
    x = torch.ones(3, requires_grad=True)
    p = nn.Parameter(x * 2)
    assert p.is_leaf and p.requires_grad


def test_parameter_rejects_non_tensors():
    with pytest.raises(TypeError, match="expected a Tensor"):
        nn.Parameter([1.0, 2.0])


# ---------------------------------------------------------------------------
# Module registration


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc2 = nn.Linear(4, 3)
        self.scale = nn.Parameter(torch.ones(1))
        self.act = nn.Tanh()
        self.fc1 = nn.Linear(3, 4, bias=False)
        self.plain = torch.zeros(2, requires_grad=True)   # a plain tensor: not a parameter
        self.register_buffer("running", torch.zeros(3))
        self.register_buffer("scratch", torch.zeros(1), persistent=False)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))) * self.scale


def test_registration_follows_assignment_order():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == ["scale", "fc2.weight", "fc2.bias",
                                                      "fc1.weight"]
    assert [n for n, _ in net.named_children()] == ["fc2", "act", "fc1"]
    assert [type(m).__name__ for m in net.modules()] == ["Net", "Linear", "Tanh", "Linear"]
    assert [n for n, _ in net.named_modules()] == ["", "fc2", "act", "fc1"]
    assert [n for n, _ in net.named_buffers()] == ["running", "scratch"]
    assert [id(p) for p in net.parameters(recurse=False)] == [id(net.scale)]
    assert net.fc1.bias is None
    assert "plain" not in dict(net.named_parameters())


def test_parameters_are_the_attribute_tensors():
    net = Net()
    ps = list(net.parameters())
    assert [id(p) for p in ps] == [id(net.scale), id(net.fc2.weight), id(net.fc2.bias),
                                   id(net.fc1.weight)]
    assert all(isinstance(p, nn.Parameter) for p in ps)


def test_shared_parameters_and_modules_are_reported_once():
    lin = nn.Linear(2, 2)
    seq = nn.Sequential(lin, nn.ReLU(), lin)
    assert [n for n, _ in seq.named_parameters()] == ["0.weight", "0.bias"]
    assert len(list(seq.modules())) == 3
    assert list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_setattr_rules():
    net = Net()
    with pytest.raises(TypeError, match="cannot assign 'eager.FloatTensor' as parameter 'scale'"):
        net.scale = torch.ones(1)
    net.scale = None
    assert "scale" not in dict(net.named_parameters())
    with pytest.raises(TypeError, match="as child module 'fc1'"):
        net.fc1 = 3
    net.act = nn.Sigmoid()
    assert [n for n, _ in net.named_children()] == ["fc2", "act", "fc1"]
    net.running = torch.ones(3)
    assert A(net.state_dict()["running"]).tolist() == [1.0, 1.0, 1.0]
    # replacing a plain attribute by a parameter moves it to the registry
    net.other = 1
    net.other = nn.Parameter(torch.ones(1))
    assert "other" in dict(net.named_parameters())
    del net.other
    assert "other" not in dict(net.named_parameters())
    with pytest.raises(AttributeError, match="'Net' object has no attribute 'nope'"):
        net.nope


def test_assigning_before_init_is_an_error():
    class Bad(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(torch.ones(1))

    with pytest.raises(AttributeError, match=r"before Module.__init__\(\) call"):
        Bad()


def test_missing_forward():
    with pytest.raises(NotImplementedError, match='missing the required "forward" function'):
        nn.Module()(1)


def test_train_eval_propagate():
    net = Net()
    assert net.training and net.fc1.training
    assert net.eval() is net
    assert not net.training and not net.fc1.training and not net.act.training
    net.train()
    assert all(m.training for m in net.modules())
    with pytest.raises(ValueError, match="training mode is expected to be boolean"):
        net.train("yes")


def test_apply_visits_children_first():
    seen = []
    nn.Sequential(nn.Linear(1, 1), nn.Sequential(nn.ReLU())).apply(
        lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear", "ReLU", "Sequential", "Sequential"]  # as PyTorch


# ---------------------------------------------------------------------------
# layers vs numpy


def test_linear_init_bounds_and_shapes():
    lin = nn.Linear(1000, 100)
    w, b = A(lin.weight), A(lin.bias)
    assert w.shape == (100, 1000) and b.shape == (100,)
    assert w.dtype == np.float32
    bound = 1 / np.sqrt(1000)
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    # uniform: the spread fills the interval
    assert w.min() < -0.9 * bound and w.max() > 0.9 * bound
    assert abs(w.mean()) < 0.01 * bound * 10


def test_linear_init_is_reproducible_with_manual_seed():
    eager.manual_seed(7)
    a = A(nn.Linear(5, 3).weight).copy()
    eager.manual_seed(7)
    b = A(nn.Linear(5, 3).weight)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("shape", [(5,), (4, 5), (2, 3, 5)])
def test_linear_forward_matches_numpy(shape):
    lin = nn.Linear(5, 3)
    x = eager.randn(*shape)
    y = lin(x)
    ref = A(x) @ A(lin.weight).T + A(lin.bias)
    assert tuple(y.shape) == shape[:-1] + (3,)
    np.testing.assert_allclose(A(y), ref, rtol=1e-5, atol=1e-6)
    assert y.grad_fn is not None


def test_linear_without_bias():
    lin = nn.Linear(5, 3, bias=False)
    x = eager.randn(4, 5)
    np.testing.assert_allclose(A(lin(x)), A(x) @ A(lin.weight).T, rtol=1e-5, atol=1e-6)
    assert repr(lin) == "Linear(in_features=5, out_features=3, bias=False)"


def test_linear_backward_matches_numpy():
    lin = nn.Linear(5, 3, dtype=torch.float64)
    x = eager.randn(4, 5, dtype=torch.float64)
    g = np.random.default_rng(0).standard_normal((4, 3))
    lin(x).backward(eager.tensor(g))
    np.testing.assert_allclose(A(lin.weight.grad), g.T @ A(x), rtol=1e-12)
    np.testing.assert_allclose(A(lin.bias.grad), g.sum(0), rtol=1e-12)


def test_linear_shape_error():
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied "
                                           r"\(4x6 and 5x3\)"):
        nn.Linear(5, 3)(eager.randn(4, 6))


@pytest.mark.parametrize("mod,fn,ref", [
    (nn.ReLU(), F.relu, lambda a: np.maximum(a, 0)),
    (nn.Tanh(), F.tanh, np.tanh),
    (nn.Sigmoid(), F.sigmoid, lambda a: 1 / (1 + np.exp(-a))),
])
def test_activations_match_numpy(mod, fn, ref):
    x = eager.randn(3, 4)
    np.testing.assert_allclose(A(mod(x)), ref(A(x)), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(A(fn(x)), ref(A(x)), rtol=1e-6, atol=1e-7)


def test_relu_inplace():
    x = eager.tensor([-1.0, 2.0])
    assert nn.ReLU(inplace=True)(x) is x
    assert A(x).tolist() == [0.0, 2.0]
    assert repr(nn.ReLU(inplace=True)) == "ReLU(inplace=True)"


def test_functional_linear():
    x, w, b = eager.randn(2, 3), eager.randn(4, 3), eager.randn(4)
    np.testing.assert_allclose(A(F.linear(x, w, b)), A(x) @ A(w).T + A(b), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(A(F.linear(x, w)), A(x) @ A(w).T, rtol=1e-5, atol=1e-6)


def test_sequential_forward_indexing_and_repr():
    model = nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 2))
    x = eager.randn(3, 6)
    h = np.maximum(A(x) @ A(model[0].weight).T + A(model[0].bias), 0)
    ref = h @ A(model[2].weight).T + A(model[2].bias)
    np.testing.assert_allclose(A(model(x)), ref, rtol=1e-5, atol=1e-6)
    assert len(model) == 3 and model[-1] is model[2]
    assert [type(m).__name__ for m in model] == ["Linear", "ReLU", "Linear"]
    sub = model[1:]
    assert isinstance(sub, nn.Sequential) and list(sub._modules) == ["1", "2"]
    with pytest.raises(IndexError, match="index 3 is out of range"):
        model[3]
    assert repr(model) == (
        "Sequential(\n"
        "  (0): Linear(in_features=6, out_features=4, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Linear(in_features=4, out_features=2, bias=True)\n"
        ")")


def test_nested_repr_matches_pytorch_layout():
    model = nn.Sequential(OrderedDict([
        ("block", nn.Sequential(nn.Linear(2, 3), nn.Tanh())),
        ("head", nn.Linear(3, 1)),
        ("out", nn.Sigmoid()),
    ]))
    assert repr(model) == (
        "Sequential(\n"
        "  (block): Sequential(\n"
        "    (0): Linear(in_features=2, out_features=3, bias=True)\n"
        "    (1): Tanh()\n"
        "  )\n"
        "  (head): Linear(in_features=3, out_features=1, bias=True)\n"
        "  (out): Sigmoid()\n"
        ")")
    assert repr(nn.MSELoss()) == "MSELoss()"
    assert repr(nn.Sequential()) == "Sequential()"
    assert repr(Net()) == (
        "Net(\n"
        "  (fc2): Linear(in_features=4, out_features=3, bias=True)\n"
        "  (act): Tanh()\n"
        "  (fc1): Linear(in_features=3, out_features=4, bias=False)\n"
        ")")


def test_sequential_append_setitem_delitem():
    model = nn.Sequential(nn.ReLU())
    model.append(nn.Tanh()).append(nn.Sigmoid())
    assert [type(m).__name__ for m in model] == ["ReLU", "Tanh", "Sigmoid"]
    model[0] = nn.Linear(1, 1)
    assert isinstance(model[0], nn.Linear)
    del model[1]
    assert list(model._modules) == ["0", "1"]
    assert isinstance(model[1], nn.Sigmoid)


# ---------------------------------------------------------------------------
# MSELoss


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss_matches_numpy(reduction):
    x = eager.randn(4, 3, dtype=torch.float64, requires_grad=True)
    y = eager.randn(4, 3, dtype=torch.float64)
    loss = nn.MSELoss(reduction=reduction)(x, y)
    err = (A(x) - A(y)) ** 2
    ref = {"mean": err.mean(), "sum": err.sum(), "none": err}[reduction]
    np.testing.assert_allclose(A(loss), ref, rtol=1e-12)
    if reduction == "none":
        loss = loss.sum()
    loss.backward()
    scale = 1 / err.size if reduction == "mean" else 1.0
    np.testing.assert_allclose(A(x.grad), 2 * (A(x) - A(y)) * scale, rtol=1e-12)


def test_mse_loss_errors_and_legacy_flags():
    with pytest.raises(ValueError, match="elementwise is not a valid value for reduction"):
        nn.MSELoss(reduction="elementwise")
    with pytest.warns(UserWarning, match="please use reduction='sum' instead"):
        loss_fn = nn.MSELoss(size_average=False)
    assert loss_fn.reduction == "sum"
    with pytest.warns(UserWarning, match="different to the input size"):
        F.mse_loss(eager.randn(3, 1), eager.randn(3))


# ---------------------------------------------------------------------------
# zero_grad, state_dict


def test_module_zero_grad():
    model = nn.Sequential(nn.Linear(3, 2))
    model(eager.randn(4, 3)).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad(set_to_none=False)
    assert all(A(p.grad).sum() == 0 and p.grad.shape == p.shape for p in model.parameters())
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_state_dict_round_trip():
    src = Net()
    sd = src.state_dict()
    assert list(sd) == ["scale", "running", "fc2.weight", "fc2.bias", "fc1.weight"]
    assert all(not v.requires_grad for v in sd.values())
    assert np.shares_memory(A(sd["fc2.weight"]), A(src.fc2.weight))   # detached, not copied
    assert all(v.requires_grad for v in src.state_dict(keep_vars=True).values()
               if v is not src.running)
    dst = Net()
    x = eager.randn(2, 3)
    assert not np.allclose(A(src(x)), A(dst(x)))
    res = dst.load_state_dict(sd)
    assert repr(res) == "<All keys matched successfully>"
    assert res.missing_keys == [] and res.unexpected_keys == []
    np.testing.assert_array_equal(A(src(x)), A(dst(x)))
    assert not np.shares_memory(A(dst.fc2.weight), A(src.fc2.weight))   # copied into place
    assert isinstance(dst.fc2.weight, nn.Parameter) and dst.fc2.weight.requires_grad


def test_load_state_dict_errors():
    model = nn.Linear(3, 2)
    sd = model.state_dict()
    with pytest.raises(RuntimeError) as e:
        model.load_state_dict({"weight": sd["weight"], "extra": sd["bias"]})
    assert str(e.value) == ('Error(s) in loading state_dict for Linear:\n\t'
                            'Missing key(s) in state_dict: "bias". \n\t'
                            'Unexpected key(s) in state_dict: "extra". ')
    res = model.load_state_dict({"weight": sd["weight"], "extra": sd["bias"]}, strict=False)
    assert res.missing_keys == ["bias"] and res.unexpected_keys == ["extra"]
    with pytest.raises(RuntimeError, match=r"size mismatch for weight: copying a param with "
                                           r"shape eager.Size\(\[2, 4\]\) from checkpoint, the "
                                           r"shape in current model is eager.Size\(\[2, 3\]\)"):
        model.load_state_dict({"weight": eager.zeros(2, 4), "bias": sd["bias"]})


def test_load_state_dict_assign():
    model = nn.Linear(3, 2)
    new = {"weight": eager.ones(2, 3), "bias": eager.zeros(2)}
    model.load_state_dict(new, assign=True)
    assert isinstance(model.weight, nn.Parameter) and model.weight.requires_grad
    assert np.shares_memory(A(model.weight), A(new["weight"]))


def test_deepcopy_and_pickle_keep_parameters():
    net = Net()
    for clone in (copy.deepcopy(net), pickle.loads(pickle.dumps(net))):
        assert [n for n, _ in clone.named_parameters()] == \
            [n for n, _ in net.named_parameters()]
        assert all(isinstance(p, nn.Parameter) for p in clone.parameters())
        assert clone.fc2.weight is not net.fc2.weight
        np.testing.assert_array_equal(A(clone.fc2.weight), A(net.fc2.weight))


def test_module_double_casts_in_place():
    model = nn.Linear(3, 2)
    w = model.weight
    assert model.double() is model
    assert model.weight is w and model.weight.dtype == torch.float64
    assert model(eager.randn(1, 3, dtype=torch.float64)).dtype == torch.float64
    model.to(torch.float32)
    assert w.dtype == torch.float32


# ---------------------------------------------------------------------------
# numpy transcriptions of PyTorch's single-tensor optimizers (torch/optim/sgd.py, adam.py)


def sgd_ref(p, g, buf, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
            maximize=False):
    g = -g if maximize else g
    if weight_decay != 0:
        g = g + weight_decay * p
    if momentum != 0:
        if buf is None:
            buf = g.copy()
        else:
            buf = momentum * buf + (1 - dampening) * g
        g = g + momentum * buf if nesterov else buf
    return p - lr * g, buf


def adam_ref(p, g, st, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
             amsgrad=False, maximize=False):
    b1, b2 = betas
    g = -g if maximize else g
    st["t"] += 1
    t = st["t"]
    if weight_decay != 0:
        g = g + weight_decay * p
    st["m"] = b1 * st["m"] + (1 - b1) * g
    st["v"] = b2 * st["v"] + (1 - b2) * g * g
    if amsgrad:
        st["vmax"] = np.maximum(st["vmax"], st["v"])
        v = st["vmax"]
    else:
        v = st["v"]
    denom = np.sqrt(v) / np.sqrt(1 - b2 ** t) + eps
    return p - lr / (1 - b1 ** t) * st["m"] / denom


def _grad(k, p):
    """A gradient that depends on the step and on the current parameter values."""
    rng = np.random.default_rng(100 + k)
    return rng.standard_normal(p.shape) + 0.5 * p + np.sin(3 * p)


def _run(opt_cls, kwargs, ref_step, steps=6):
    rng = np.random.default_rng(0)
    init = [rng.standard_normal((3, 4)), rng.standard_normal(4)]
    params = [eager.tensor(a, dtype=torch.float64, requires_grad=True) for a in init]
    opt = opt_cls(params, **kwargs)
    refs = [a.copy() for a in init]
    ref_state = [None, None]
    for k in range(steps):
        for i, p in enumerate(params):
            p.grad = eager.tensor(_grad(k, A(p)), dtype=torch.float64)
        opt.step()
        for i in range(2):
            refs[i], ref_state[i] = ref_step(refs[i], _grad(k, refs[i]), ref_state[i])
        for p, r in zip(params, refs):
            np.testing.assert_allclose(A(p), r, rtol=1e-11, atol=1e-12,
                                       err_msg=f"step {k}")
    return params, opt


SGD_CASES = [
    dict(lr=0.1),
    dict(lr=0.05, momentum=0.9),
    dict(lr=0.05, momentum=0.9, dampening=0.3),
    dict(lr=0.05, momentum=0.9, nesterov=True),
    dict(lr=0.05, weight_decay=0.01),
    dict(lr=0.05, momentum=0.5, weight_decay=0.1, nesterov=True),
    dict(lr=0.05, momentum=0.9, maximize=True),
]


@pytest.mark.parametrize("kwargs", SGD_CASES, ids=lambda k: ",".join(f"{a}={b}" for a, b in
                                                                    k.items()))
def test_sgd_matches_pytorch_formulas(kwargs):
    def ref(p, g, buf):
        return sgd_ref(p, g, buf, **kwargs)
    params, opt = _run(eager.optim.SGD, kwargs, ref)
    if kwargs.get("momentum"):
        assert all("momentum_buffer" in opt.state[p] for p in params)


ADAM_CASES = [
    dict(),
    dict(lr=0.01),
    dict(lr=0.01, amsgrad=True),
    dict(lr=0.01, weight_decay=0.1),
    dict(lr=0.02, betas=(0.5, 0.9), eps=1e-6, amsgrad=True, weight_decay=0.05),
    dict(lr=0.01, maximize=True),
]


@pytest.mark.parametrize("kwargs", ADAM_CASES, ids=lambda k: ",".join(f"{a}={b}" for a, b in
                                                                     k.items()) or "defaults")
def test_adam_matches_pytorch_formulas(kwargs):
    def ref(p, g, st):
        if st is None:
            st = {"t": 0, "m": np.zeros_like(p), "v": np.zeros_like(p), "vmax": np.zeros_like(p)}
        return adam_ref(p, g, st, **kwargs), st
    params, opt = _run(eager.optim.Adam, kwargs, ref)
    st = opt.state[params[0]]
    assert st["step"].item() == 6.0 and st["step"].dtype == torch.float32
    assert sorted(st) == sorted(["step", "exp_avg", "exp_avg_sq"] +
                                (["max_exp_avg_sq"] if kwargs.get("amsgrad") else []))


def test_adam_float32_matches_reference():
    rng = np.random.default_rng(3)
    init = rng.standard_normal(50).astype(np.float32)
    p = eager.tensor(init, requires_grad=True)
    opt = eager.optim.Adam([p], lr=0.01)
    ref, st = init.astype(np.float64), {"t": 0, "m": 0.0, "v": 0.0}
    for k in range(20):
        g = rng.standard_normal(50).astype(np.float32)
        p.grad = eager.tensor(g)
        opt.step()
        ref = adam_ref(ref, g.astype(np.float64), st, lr=0.01)
    assert p.dtype == torch.float32
    np.testing.assert_allclose(A(p), ref, rtol=1e-5, atol=1e-6)


def test_optimizer_updates_in_place_and_bumps_version():
    p = eager.ones(3, requires_grad=True)
    buf = p._data
    v0 = p._version[0]
    p.grad = eager.ones(3)
    eager.optim.SGD([p], lr=0.5).step()
    assert p._data is buf and A(p).tolist() == [0.5] * 3
    assert p._version[0] == v0 + 1
    assert p.grad_fn is None and p.is_leaf


def test_params_without_grad_are_skipped():
    a = eager.ones(2, requires_grad=True)
    b = eager.ones(2, requires_grad=True)
    a.grad = eager.ones(2)
    opt = eager.optim.Adam([a, b], lr=0.1)
    opt.step()
    assert A(b).tolist() == [1.0, 1.0] and b not in opt.state
    assert a in opt.state


@pytest.mark.parametrize("make,msg", [
    (lambda p: eager.optim.SGD(p, lr=-1), "Invalid learning rate: -1"),
    (lambda p: eager.optim.SGD(p, lr=0.1, momentum=-0.5), "Invalid momentum value: -0.5"),
    (lambda p: eager.optim.SGD(p, lr=0.1, weight_decay=-1e-4),
     "Invalid weight_decay value: -0.0001"),
    (lambda p: eager.optim.SGD(p, lr=0.1, nesterov=True),
     "Nesterov momentum requires a momentum and zero dampening"),
    (lambda p: eager.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, nesterov=True),
     "Nesterov momentum requires a momentum and zero dampening"),
    (lambda p: eager.optim.Adam(p, lr=-0.01), "Invalid learning rate: -0.01"),
    (lambda p: eager.optim.Adam(p, eps=-1.0), "Invalid epsilon value: -1.0"),
    (lambda p: eager.optim.Adam(p, betas=(1.0, 0.999)), "Invalid beta parameter at index 0: 1.0"),
    (lambda p: eager.optim.Adam(p, betas=(0.9, -0.1)), "Invalid beta parameter at index 1: -0.1"),
    (lambda p: eager.optim.Adam(p, weight_decay=-1), "Invalid weight_decay value: -1"),
])
def test_argument_validation_messages(make, msg):
    with pytest.raises(ValueError) as e:
        make([eager.ones(1, requires_grad=True)])
    assert str(e.value) == msg


def test_param_list_validation():
    with pytest.raises(ValueError, match="optimizer got an empty parameter list"):
        eager.optim.SGD([], lr=0.1)
    with pytest.raises(TypeError, match="should be an iterable of Tensors or dicts, but got "
                                        "eager.FloatTensor"):
        eager.optim.SGD(eager.ones(1, requires_grad=True), lr=0.1)
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
        eager.optim.SGD([eager.ones(1, requires_grad=True) * 2], lr=0.1)
    with pytest.raises(TypeError, match="optimizer can only optimize Tensors, but one of the "
                                        "params is int"):
        eager.optim.SGD([1], lr=0.1)
    p = eager.ones(1, requires_grad=True)
    with pytest.raises(ValueError, match="some parameters appear in more than one parameter "
                                         "group"):
        eager.optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1)
    with pytest.raises(TypeError, match="organized in ordered collections"):
        eager.optim.SGD([{"params": {p}}], lr=0.1)
    with pytest.warns(UserWarning, match="duplicate parameters"):
        eager.optim.SGD([p, p], lr=0.1)


def test_param_groups_and_defaults():
    a = eager.ones(2, requires_grad=True)
    b = eager.ones(2, requires_grad=True)
    opt = eager.optim.SGD([{"params": [a]}, {"params": b, "lr": 0.5}], lr=0.1, momentum=0.0)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    assert opt.param_groups[1]["params"][0] is b
    a.grad, b.grad = eager.ones(2), eager.ones(2)
    opt.step()
    np.testing.assert_allclose(A(a), [0.9, 0.9])
    np.testing.assert_allclose(A(b), [0.5, 0.5])
    c = eager.ones(1, requires_grad=True)
    opt.add_param_group({"params": [c], "momentum": 0.9})
    assert opt.param_groups[2]["lr"] == 0.1 and opt.param_groups[2]["momentum"] == 0.9
    assert repr(opt).startswith("SGD (\nParameter Group 0\n    dampening: 0\n")


def test_optimizer_zero_grad():
    p = eager.ones(2, requires_grad=True)
    opt = eager.optim.SGD([p], lr=0.1)
    (p * 3).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert A(p.grad).tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert p.grad is None


def test_step_with_closure():
    p = eager.tensor([2.0], requires_grad=True)
    opt = eager.optim.SGD([p], lr=0.25)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    with eager.no_grad():
        loss = opt.step(closure)    # the closure still records (enable_grad inside step)
    assert loss.item() == 4.0
    assert A(p).tolist() == [1.0]


def test_optimizer_state_dict_round_trip():
    def make():
        eager.manual_seed(5)
        model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
        return model, eager.optim.Adam(model.parameters(), lr=0.01, amsgrad=True)

    x, y = eager.randn(8, 3), eager.randn(8, 1)
    loss_fn = nn.MSELoss()

    def train(model, opt, n):
        for _ in range(n):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()

    m1, o1 = make()
    train(m1, o1, 3)
    sd = o1.state_dict()
    assert sorted(sd) == ["param_groups", "state"]
    assert sd["param_groups"][0]["params"] == [0, 1, 2, 3]
    assert sd["param_groups"][0]["lr"] == 0.01 and sd["param_groups"][0]["amsgrad"] is True
    assert sorted(sd["state"]) == [0, 1, 2, 3]
    assert sd["state"][0]["step"].item() == 3.0

    m2, o2 = make()
    m2.load_state_dict(m1.state_dict())
    o2.load_state_dict(copy.deepcopy(sd))
    train(m1, o1, 3)
    train(m2, o2, 3)
    for p1, p2 in zip(m1.parameters(), m2.parameters()):
        np.testing.assert_array_equal(A(p1), A(p2))
    with pytest.raises(ValueError, match="different number of parameter groups"):
        o2.load_state_dict({"state": {}, "param_groups": []})


# ---------------------------------------------------------------------------
# training the seed MLP


def _seed_data(N=64, D_in=1000, H=100, D_out=10):
    return eager.randn(N, D_in), eager.randn(N, D_out), (D_in, H, D_out)


def test_seed_mlp_with_nn_and_manual_update():
    x, y, (D_in, H, D_out) = _seed_data()
    model = torch.nn.Sequential(torch.nn.Linear(D_in, H), torch.nn.ReLU(),
                                torch.nn.Linear(H, D_out))
    loss_fn = torch.nn.MSELoss(reduction="sum")
    learning_rate = 1e-4
    losses = []
    for t in range(100):
        y_pred = model(x)
        loss = loss_fn(y_pred, y)
        losses.append(loss.item())
        model.zero_grad()
        loss.backward()
        with torch.no_grad():
            for param in model.parameters():
                param -= learning_rate * param.grad
    assert all(p.is_leaf and isinstance(p, nn.Parameter) for p in model.parameters())
    assert losses[-1] < 0.05 * losses[0]


@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.SGD(ps, lr=1e-4),
    lambda ps: torch.optim.SGD(ps, lr=1e-5, momentum=0.9, nesterov=True),
    lambda ps: torch.optim.Adam(ps, lr=1e-4),
    lambda ps: torch.optim.Adam(ps, lr=1e-4, amsgrad=True),
], ids=["sgd", "sgd-nesterov", "adam", "adam-amsgrad"])
def test_seed_mlp_with_optim_reduces_loss(make_opt):
    x, y, (D_in, H, D_out) = _seed_data()
    model = torch.nn.Sequential(torch.nn.Linear(D_in, H), torch.nn.ReLU(),
                                torch.nn.Linear(H, D_out))
    loss_fn = torch.nn.MSELoss(reduction="sum")
    optimizer = make_opt(model.parameters())
    losses = []
    for t in range(100):
        loss = loss_fn(model(x), y)
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert losses[-1] < 0.1 * losses[0]
    assert np.all(np.isfinite(losses))


def test_seed_autograd_mlp_converges():
    """Seed 003's autograd MLP (raw tensors, manual no_grad update) drives the loss to ~0."""
    x, y, (D_in, H, D_out) = _seed_data()
    w1 = torch.randn(D_in, H, requires_grad=True)
    w2 = torch.randn(H, D_out, requires_grad=True)
    first = None
    for t in range(300):
        loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
        first = loss.item() if first is None else first
        loss.backward()
        with torch.no_grad():
            w1 -= 1e-6 * w1.grad
            w2 -= 1e-6 * w2.grad
            w1.grad.zero_()
            w2.grad.zero_()
    assert loss.item() < 1e-3 * first
