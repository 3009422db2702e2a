"""nn containers (ModuleList/ModuleDict/ParameterList/ParameterDict), Module methods,
nn.init and nn.utils (clip_grad_norm_, clip_grad_value_, parameters <-> vector)."""

import math
import warnings

import numpy as np
import pytest

import eager
from eager import nn


def _names(it):
    return [n for n, _ in it]


# --- ModuleList ------------------------------------------------------------------------

def test_modulelist_registers_and_indexes():
    ml = nn.ModuleList([nn.Linear(2, 2), nn.ReLU()])
    ml.append(nn.Tanh())
    ml.extend([nn.Sigmoid()])
    ml.insert(1, nn.Linear(2, 3))
    assert len(ml) == 5
    assert [type(m).__name__ for m in ml] == ["Linear", "Linear", "ReLU", "Tanh", "Sigmoid"]
    assert isinstance(ml[-1], nn.Sigmoid)
    assert isinstance(ml[1:3], nn.ModuleList) and len(ml[1:3]) == 2
    assert _names(ml.named_parameters()) == ["0.weight", "0.bias", "1.weight", "1.bias"]
    del ml[0]
    assert list(ml._modules) == ["0", "1", "2", "3"]
    assert isinstance(ml.pop(0), nn.Linear) and len(ml) == 3
    ml[0] = nn.Linear(1, 1)
    assert isinstance(ml[0], nn.Linear)
    with pytest.raises(IndexError, match="index 7 is out of range"):
        ml[7]
    with pytest.raises(TypeError, match="ModuleList.extend should be called with an iterable"):
        ml.extend(3)
    both = ml + nn.ModuleList([nn.ReLU()])
    assert len(both) == 4


def test_modulelist_repr_compresses_repeats():
    ml = nn.ModuleList([nn.Linear(2, 3) for _ in range(3)] + [nn.ReLU(), nn.ReLU()])
    assert repr(ml) == (
        "ModuleList(\n"
        "  (0-2): 3 x Linear(in_features=2, out_features=3, bias=True)\n"
        "  (3-4): 2 x ReLU()\n"
        ")"
    )
    assert repr(nn.ModuleList()) == "ModuleList()"


def test_moduledict():
    md = nn.ModuleDict({"b": nn.Linear(1, 1), "a": nn.ReLU()})
    assert list(md.keys()) == ["b", "a"]
    md["c"] = nn.Tanh()
    md.update([("d", nn.Sigmoid())])
    assert "c" in md and len(md) == 4 and list(md) == ["b", "a", "c", "d"]
    assert isinstance(md.pop("a"), nn.ReLU)
    assert _names(md.named_parameters()) == ["b.weight", "b.bias"]
    with pytest.raises(ValueError, match="has length 1; 2 is required"):
        md.update([("x",)])


def test_parameterlist_and_dict():
    pl = nn.ParameterList([eager.zeros(2, 3), nn.Parameter(eager.ones(3))])
    assert all(isinstance(p, nn.Parameter) for p in pl)
    assert len(list(pl.parameters())) == 2
    assert pl[0].requires_grad
    with pytest.raises(RuntimeError, match="ParameterList should not be called"):
        pl()
    pd = nn.ParameterDict({"w": eager.zeros(2)})
    pd["v"] = eager.ones(1)
    assert list(pd.keys()) == ["w", "v"] and isinstance(pd["v"], nn.Parameter)
    assert _names(pd.named_parameters()) == ["w", "v"]


# --- Module methods ------------------------------------------------------------------

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(2, 3)
        self.blocks = nn.ModuleList([nn.Linear(3, 3), nn.ReLU()])
        self.register_buffer("running", eager.zeros(3))
        self.register_buffer("scratch", eager.zeros(1), persistent=False)

    def forward(self, x):
        x = self.a(x)
        for b in self.blocks:
            x = b(x)
        return x + self.running


def test_module_traversal_and_state_dict():
    net = Net()
    assert _names(net.named_modules()) == ["", "a", "blocks", "blocks.0", "blocks.1"]
    assert _names(net.named_children()) == ["a", "blocks"]
    assert _names(net.named_parameters(prefix="m")) == [
        "m.a.weight", "m.a.bias", "m.blocks.0.weight", "m.blocks.0.bias"]
    assert _names(net.named_parameters(recurse=False)) == []
    assert list(net.state_dict()) == [
        "running", "a.weight", "a.bias", "blocks.0.weight", "blocks.0.bias"]
    assert net.get_submodule("blocks.0") is net.blocks[0]
    with pytest.raises(AttributeError, match="ModuleList has no attribute `7`"):
        net.get_submodule("blocks.7")
    assert net.get_parameter("a.bias") is net.a.bias
    assert net.get_buffer("running") is net.running
    order = []
    net.apply(lambda m: order.append(type(m).__name__))
    assert order == ["Linear", "Linear", "ReLU", "ModuleList", "Net"]


def test_load_state_dict_strict_and_not():
    net = Net()
    sd = net.state_dict()
    del sd["a.bias"]
    sd["extra"] = eager.zeros(1)
    with pytest.raises(RuntimeError) as e:
        net.load_state_dict(sd)
    assert str(e.value) == (
        "Error(s) in loading state_dict for Net:\n\tMissing key(s) in state_dict: "
        '"a.bias". \n\tUnexpected key(s) in state_dict: "extra". ')
    res = net.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["a.bias"] and res.unexpected_keys == ["extra"]


def test_module_cast_keeps_parameter_identity():
    net = Net()
    w = net.a.weight
    assert net.double() is net
    assert net.a.weight is w and w.dtype == eager.float64 and net.running.dtype == eager.float64
    net.to(eager.float32)
    assert w.dtype == eager.float32 and isinstance(w, nn.Parameter)
    net.half()
    assert w.dtype == eager.float16
    with pytest.raises(RuntimeError, match="no GPU"):
        net.cuda()


def test_module_modes_and_grads():
    net = Net()
    net.eval()
    assert not net.blocks[1].training
    net.train()
    assert net.blocks[1].training
    net(eager.ones(1, 2)).sum().backward()
    assert net.a.weight.grad is not None
    net.zero_grad()
    assert net.a.weight.grad is None
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


# --- nn.init ---------------------------------------------------------------------------

def test_init_fill_and_bounds():
    eager.manual_seed(0)
    w = eager.empty(30, 40, requires_grad=True)
    assert nn.init.zeros_(w) is w and float(w.abs().sum()) == 0
    assert not w.requires_grad or w.grad_fn is None
    nn.init.ones_(w)
    assert float(w.sum()) == 1200
    nn.init.constant_(w, 0.5)
    assert float(w.mean()) == 0.5
    nn.init.xavier_uniform_(w)
    a = math.sqrt(6 / 70)
    assert float(w.abs().max()) <= a and float(w.abs().max()) > 0.9 * a
    nn.init.kaiming_uniform_(w, a=math.sqrt(5))
    bound = math.sqrt(6 / ((1 + 5) * 40))
    assert float(w.abs().max()) <= bound
    nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    assert abs(float(w.detach().numpy().std()) - math.sqrt(2 / 30)) < 0.03
    nn.init.xavier_normal_(w, gain=2.0)
    assert abs(float(w.detach().numpy().std()) - 2 * math.sqrt(2 / 70)) < 0.03
    nn.init.trunc_normal_(w, std=1.0, a=-0.5, b=0.5)
    assert float(w.abs().max()) <= 0.5
    nn.init.uniform_(w, -1, 1)
    nn.init.normal_(w, 3.0, 0.01)
    assert abs(float(w.mean()) - 3) < 0.01
    nn.init.eye_(w)
    assert np.array_equal(w.detach().numpy(), np.eye(30, 40, dtype=np.float32))
    nn.init.orthogonal_(w)
    wt = w.detach().numpy().astype(np.float64)
    assert np.allclose(wt @ wt.T, np.eye(30), atol=1e-5)
    assert w.grad_fn is None and w.requires_grad


def test_init_errors():
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        nn.init.xavier_uniform_(eager.empty(3))
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        nn.init.kaiming_uniform_(eager.empty(3, 3), mode="fan_avg")
    with pytest.raises(ValueError, match="Unsupported nonlinearity gelu"):
        nn.init.calculate_gain("gelu")
    with pytest.raises(ValueError, match="negative_slope True not a valid number"):
        nn.init.calculate_gain("leaky_relu", True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        nn.init.kaiming_uniform_(eager.empty(0, 3))
    assert "zero-element" in str(w[0].message)


# --- nn.utils ---------------------------------------------------------------------------

def _params_with_grads(seed=0):
    rng = np.random.default_rng(seed)
    ps = []
    for shape in [(3, 4), (4,), (2, 2)]:
        p = nn.Parameter(eager.tensor(rng.standard_normal(shape).astype(np.float32)))
        p.grad = eager.tensor(rng.standard_normal(shape).astype(np.float32) * 3)
        ps.append(p)
    return ps


def test_clip_grad_norm_and_value():
    ps = _params_with_grads()
    grads = [p.grad.numpy().copy() for p in ps]
    total = nn.utils.clip_grad_norm_(ps, 1.0)
    ref = math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads))
    assert abs(float(total) - ref) < 1e-4
    new = math.sqrt(sum(float((p.grad.numpy().astype(np.float64) ** 2).sum()) for p in ps))
    assert abs(new - 1.0) < 1e-4
    nn.utils.clip_grad_value_(ps, 0.1)
    assert all(float(p.grad.abs().max()) <= np.float32(0.1) for p in ps)
    ps[0].grad = eager.tensor([float("inf")] * 12).reshape(3, 4)
    with pytest.raises(RuntimeError, match="The total norm of order 2.0 for gradients"):
        nn.utils.clip_grad_norm_(ps, 1.0, error_if_nonfinite=True)
    assert float(nn.utils.clip_grad_norm_([], 1.0)) == 0.0


def test_parameters_vector_roundtrip():
    net = nn.Linear(3, 2)
    v = nn.utils.parameters_to_vector(net.parameters())
    assert tuple(v.shape) == (8,)
    v.sum().backward()
    assert np.array_equal(net.weight.grad.numpy(), np.ones((2, 3), np.float32))
    nn.utils.vector_to_parameters(eager.arange(8.0), net.parameters())
    assert net.bias.tolist() == [6.0, 7.0]
    with pytest.raises(TypeError, match="expected torch.Tensor"):
        nn.utils.vector_to_parameters([1.0], net.parameters())


# --- against PyTorch --------------------------------------------------------------------

def test_against_torch():
    torch = pytest.importorskip("torch")
    tnn = torch.nn
    for nl in ["linear", "conv1d", "conv_transpose3d", "sigmoid", "tanh", "relu", "selu"]:
        assert nn.init.calculate_gain(nl) == tnn.init.calculate_gain(nl)
    for slope in [None, 0.2, 1]:
        assert nn.init.calculate_gain("leaky_relu", slope) == tnn.init.calculate_gain(
            "leaky_relu", slope)
    for shape in [(3, 4), (5, 2, 3, 3), (2, 7, 1)]:
        assert nn.init._calculate_fan_in_and_fan_out(eager.empty(shape)) == \
            tnn.init._calculate_fan_in_and_fan_out(torch.empty(shape))
    # containers' reprs
    tml = tnn.ModuleList([tnn.Linear(2, 3) for _ in range(3)] + [tnn.ReLU()])
    eml = nn.ModuleList([nn.Linear(2, 3) for _ in range(3)] + [nn.ReLU()])
    assert repr(eml) == repr(tml)
    tpl = tnn.ParameterList([torch.zeros(2, 3), torch.zeros(1)])
    epl = nn.ParameterList([eager.zeros(2, 3), eager.zeros(1)])
    assert repr(epl) == repr(tpl).replace("torch.", "eager.")
    tpd = tnn.ParameterDict({"b": torch.zeros(2), "a": torch.zeros(1)})
    epd = nn.ParameterDict({"b": eager.zeros(2), "a": eager.zeros(1)})
    assert list(tpd.keys()) == list(epd.keys())
    # dirac_
    for shape, groups in [((4, 2, 3), 1), ((4, 2, 3, 3), 2)]:
        a, b = torch.empty(shape), eager.empty(shape)
        tnn.init.dirac_(a, groups)
        nn.init.dirac_(b, groups)
        assert np.array_equal(a.numpy(), b.numpy())
    # clip_grad_norm_ for several norm types
    for norm_type in [2.0, 1.0, 3.0, float("inf"), 0.5]:
        ps = _params_with_grads(1)
        tps = []
        for p in ps:
            t = torch.tensor(p.detach().numpy(), requires_grad=True)
            t.grad = torch.tensor(p.grad.numpy())
            tps.append(t)
        e = nn.utils.clip_grad_norm_(ps, 0.7, norm_type)
        t = tnn.utils.clip_grad_norm_(tps, 0.7, norm_type)
        assert np.allclose(float(e), float(t), rtol=1e-5)
        for p, q in zip(ps, tps):
            assert np.allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_module_methods_against_torch():
    torch = pytest.importorskip("torch")

    def build(mod):
        class TNet(mod.nn.Module):
            def __init__(self):
                super().__init__()
                shared = mod.nn.Linear(2, 2)
                self.a = shared
                self.blocks = mod.nn.ModuleList([mod.nn.Linear(2, 3), shared, mod.nn.ReLU()])
                self.d = mod.nn.ModuleDict({"x": mod.nn.Tanh(), "y": mod.nn.Linear(3, 1)})
                self.register_buffer("buf", mod.zeros(2))
                self.register_buffer("tmp", mod.zeros(1), persistent=False)
        return TNet()

    e, t = build(eager), build(torch)
    assert repr(e) == repr(t)
    assert _names(e.named_modules()) == _names(t.named_modules())
    assert _names(e.named_modules(remove_duplicate=False)) == _names(
        t.named_modules(remove_duplicate=False))
    assert _names(e.named_parameters()) == _names(t.named_parameters())
    assert _names(e.named_parameters(remove_duplicate=False)) == _names(
        t.named_parameters(remove_duplicate=False))
    assert list(e.state_dict()) == list(t.state_dict())
    assert _names(e.named_buffers()) == _names(t.named_buffers())
    order_e, order_t = [], []
    e.apply(lambda m: order_e.append(type(m).__name__))
    t.apply(lambda m: order_t.append(type(m).__name__))
    assert order_e == order_t
    sd_e, sd_t = e.state_dict(), t.state_dict()
    for sd in (sd_e, sd_t):
        del sd["d.y.bias"]
        sd["zzz"] = sd["buf"]
    with pytest.raises(RuntimeError) as ee:
        e.load_state_dict(sd_e)
    with pytest.raises(RuntimeError) as te:
        t.load_state_dict(sd_t)
    assert str(ee.value) == str(te.value).replace("TNet", "TNet")
    re, rt = e.load_state_dict(sd_e, strict=False), t.load_state_dict(sd_t, strict=False)
    assert (re.missing_keys, re.unexpected_keys) == (rt.missing_keys, rt.unexpected_keys)
    assert repr(re) == repr(rt)
