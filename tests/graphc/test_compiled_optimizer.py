"""A whole training step compiled, optimizer included (eager.optim under graphc.compile).

Every test runs the same step eagerly and compiled, on two copies of one model, and
compares losses, parameters and optimizer state after several steps (float32 rounding:
the native code may round a multiply-add differently from numpy)."""

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
import graphc
from graphc.errors import TracerError

RTOL, ATOL = 2e-5, 1e-6
# LLVM's optimizer takes seconds per training step on this machine: most tests compile at
# opt_level=0 (the same graph and native code, unoptimized); test_default_opt_level does not
FAST = 0


def compile_fast(fn):
    return graphc.compile(fn, opt_level=FAST)


def _model(seed=0, dtype=None):
    eager.manual_seed(seed)
    m = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    if dtype is not None:
        m = m.to(dtype)
    return m


def _data(seed=0, n=6, dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = eager.tensor(rng.standard_normal((n, 5)).astype(dtype))
    y = eager.tensor(rng.integers(0, 3, size=n))
    return x, y


def _pair(opt_cls, kw, dtype=None, opt_level=FAST):
    """(eager model, its optimizer, eager step), (compiled step, its model, optimizer)."""
    me, mc = _model(dtype=dtype), _model(dtype=dtype)
    oe, oc = opt_cls(me.parameters(), **kw), opt_cls(mc.parameters(), **kw)

    def estep(x, y):
        oe.zero_grad()
        loss = F.cross_entropy(me(x), y)
        loss.backward()
        oe.step()
        return loss

    def cstep(x, y):
        oc.zero_grad()
        loss = F.cross_entropy(mc(x), y)
        loss.backward()
        oc.step()
        return loss

    return (me, oe, estep), (mc, oc, graphc.compile(cstep, opt_level=opt_level))


def _same_state(me, oe, mc, oc):
    for p, q in zip(me.parameters(), mc.parameters()):
        np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=RTOL, atol=ATOL)
        se, sc = oe.state.get(p, {}), oc.state.get(q, {})
        assert list(se) == list(sc)
        for k in se:
            a, b = se[k], sc[k]
            assert type(b) is type(a) and b.dtype == a.dtype and b.shape == a.shape, k
            if k == "step":
                assert float(a) == float(b)
            else:
                np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=RTOL, atol=ATOL, err_msg=k)


CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.3, weight_decay=0.05)),
    ("SGD", dict(lr=0.1, momentum=0.8, nesterov=True, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.5, maximize=True)),
    ("Adam", dict(lr=1e-2)),
    ("Adam", dict(lr=1e-2, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1)),
    ("Adam", dict(lr=1e-2, amsgrad=True, maximize=True)),
    ("AdamW", dict(lr=1e-2)),
    ("AdamW", dict(lr=1e-2, amsgrad=True, weight_decay=0.3)),
    ("RMSprop", dict(lr=1e-2)),
    ("RMSprop", dict(lr=1e-2, centered=True, momentum=0.5, weight_decay=0.01)),
    ("RMSprop", dict(lr=1e-2, alpha=0.9, maximize=True)),
    ("Adagrad", dict(lr=1e-1, lr_decay=0.01, weight_decay=0.02)),
]


@pytest.mark.parametrize("name,kw", CASES[::2] + CASES[1::6], ids=lambda v: str(v))
def test_step_alone_on_grads_made_outside_matches_eager(name, kw):
    """A compiled function that only calls ``opt.step()`` (the gradients come from an
    eager backward() before it, and change between calls) reads each .grad as an input.
    It failed with an invalid graph: eager's optimizers read ``p._grad``, which did not
    tell the tracer the .grad was read, so the .grad input was dropped as unread."""
    (me, oe, estep), (mc, oc, _) = _pair(getattr(eager.optim, name), kw)
    x, y = _data()
    for m in (me, mc):
        F.cross_entropy(m(x), y).backward()
    cstep = graphc.compile(oc.step, opt_level=FAST)
    for i in range(3):
        oe.step()
        cstep()
        for m in (me, mc):  # new gradients between steps, made in place
            for p in m.parameters():
                p.grad.mul_(0.5).add_(0.01 * (i + 1))
    _same_state(me, oe, mc, oc)


@pytest.mark.parametrize("name,kw", CASES, ids=[f"{n}-{sorted(k)}" for n, k in CASES])
def test_steps_match_eager(name, kw):
    (me, oe, estep), (mc, oc, cstep) = _pair(getattr(eager.optim, name), kw)
    x, y = _data()
    for _ in range(5):
        le, lc = estep(x, y), cstep(x, y)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=RTOL)
    _same_state(me, oe, mc, oc)
    info = cstep.cache_info()
    # state made lazily by the first step: the second call traces again, then never
    assert info.traces <= 2 and info.entries == 1
    if oe.state and name != "Adagrad":
        assert info.traces == 2
        assert "now has state" in cstep.recompile_reasons[0]


@pytest.mark.parametrize("name,kw", [CASES[3], CASES[7], CASES[9], CASES[11]])
def test_default_opt_level(name, kw):
    (me, oe, estep), (mc, oc, cstep) = _pair(getattr(eager.optim, name), kw, opt_level=2)
    x, y = _data()
    for _ in range(3):
        le, lc = estep(x, y), cstep(x, y)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=RTOL)
    _same_state(me, oe, mc, oc)


def test_float64_model_and_returned_loss():
    (me, oe, estep), (mc, oc, cstep) = _pair(eager.optim.Adam, dict(lr=1e-2), dtype=eager.float64)
    x, y = _data(dtype=np.float64)
    for _ in range(4):
        le, lc = estep(x, y), cstep(x, y)
        assert lc.dtype == eager.float64 and not lc.requires_grad
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-12)
    for p, q in zip(me.parameters(), mc.parameters()):
        np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=1e-12, atol=1e-14)


def test_first_step_retrace_then_hits():
    (_, _, estep), (_, _, cstep) = _pair(eager.optim.Adam, dict(lr=1e-3))
    x, y = _data()
    cstep(x, y)
    assert cstep.cache_info().traces == 1
    cstep(x, y)
    assert cstep.cache_info().traces == 2
    for _ in range(3):
        cstep(x, y)
    info = cstep.cache_info()
    assert info.traces == 2 and info.entries == 1 and info.hits >= 3


def test_lr_is_read_at_every_call_no_retrace():
    (me, oe, estep), (mc, oc, cstep) = _pair(eager.optim.SGD, dict(lr=0.1, momentum=0.9))
    se = eager.optim.lr_scheduler.StepLR(oe, step_size=1, gamma=0.5)
    sc = eager.optim.lr_scheduler.StepLR(oc, step_size=1, gamma=0.5)
    x, y = _data()
    for i in range(5):
        np.testing.assert_allclose(cstep(x, y).item(), estep(x, y).item(), rtol=RTOL)
        se.step()
        sc.step()
        if i == 3:  # set by hand, an int too
            oe.param_groups[0]["lr"] = oc.param_groups[0]["lr"] = 1
    _same_state(me, oe, mc, oc)
    assert cstep.cache_info().traces == 2  # the first step's state only


def test_adam_lr_change_matches():
    (me, oe, estep), (mc, oc, cstep) = _pair(eager.optim.Adam, dict(lr=1e-2, amsgrad=True))
    x, y = _data()
    for lr in (1e-2, 3e-3, 0.0, 5e-2):
        oe.param_groups[0]["lr"] = oc.param_groups[0]["lr"] = lr
        estep(x, y)
        cstep(x, y)
    _same_state(me, oe, mc, oc)
    assert cstep.cache_info().traces == 2


def test_other_hyperparameter_change_retraces_with_reason():
    (me, oe, estep), (mc, oc, cstep) = _pair(eager.optim.SGD, dict(lr=0.1, momentum=0.9))
    x, y = _data()
    for _ in range(2):
        estep(x, y), cstep(x, y)
    traces = cstep.cache_info().traces
    oe.param_groups[0]["momentum"] = oc.param_groups[0]["momentum"] = 0.5
    for _ in range(2):
        estep(x, y), cstep(x, y)
    assert cstep.cache_info().traces == traces + 1
    assert "oc.param_groups[0]['momentum']: 0.9 -> 0.5" in cstep.recompile_reasons[-1]
    _same_state(me, oe, mc, oc)


def test_state_dict_roundtrip_after_compiled_steps():
    (me, oe, estep), (mc, oc, cstep) = _pair(eager.optim.Adam, dict(lr=1e-2))
    x, y = _data()
    for _ in range(3):
        estep(x, y), cstep(x, y)
    sde, sdc = oe.state_dict(), oc.state_dict()
    assert sde["param_groups"] == sdc["param_groups"]
    for i in sde["state"]:
        for k in sde["state"][i]:
            np.testing.assert_allclose(
                sdc["state"][i][k].numpy(), sde["state"][i][k].numpy(), rtol=RTOL, atol=ATOL
            )
    # load the eager optimizer's state (and lr) into the compiled one: it continues from it
    sde["param_groups"][0]["lr"] = 5e-3
    oe.load_state_dict(sde)
    oc.load_state_dict(sde)
    for p, q in zip(me.parameters(), mc.parameters()):
        with eager.no_grad():
            q.copy_(p)
    for _ in range(3):
        np.testing.assert_allclose(cstep(x, y).item(), estep(x, y).item(), rtol=RTOL)
    _same_state(me, oe, mc, oc)
    # a reset optimizer (no state) re-traces and starts again, like eager
    empty = {"state": {}, "param_groups": oe.state_dict()["param_groups"]}
    oe.load_state_dict(empty)
    oc.load_state_dict(empty)
    for _ in range(2):
        estep(x, y), cstep(x, y)
    _same_state(me, oe, mc, oc)


def test_two_optimizers_and_a_parameter_in_neither():
    def build():
        eager.manual_seed(3)
        m = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
        a = eager.optim.SGD(m[0].parameters(), lr=0.1, momentum=0.9)
        b = eager.optim.Adam([m[2].weight], lr=1e-2)  # m[2].bias: in no optimizer
        return m, a, b

    me, ae, be = build()
    mc, ac, bc = build()

    def step_e(x, y):
        ae.zero_grad()
        be.zero_grad()
        loss = F.cross_entropy(me(x), y)
        loss.backward()
        ae.step()
        be.step()
        return loss

    @compile_fast
    def step_c(x, y):
        ac.zero_grad()
        bc.zero_grad()
        loss = F.cross_entropy(mc(x), y)
        loss.backward()
        ac.step()
        bc.step()
        return loss

    x, y = _data()
    bias0 = mc[2].bias.detach().numpy().copy()
    for _ in range(4):
        np.testing.assert_allclose(step_c(x, y).item(), step_e(x, y).item(), rtol=RTOL)
    _same_state(me, ae, mc, ac)
    _same_state(me, be, mc, bc)
    np.testing.assert_array_equal(mc[2].bias.detach().numpy(), bias0)  # never updated
    np.testing.assert_allclose(mc[2].bias.grad.numpy(), me[2].bias.grad.numpy(), rtol=RTOL)


def test_parameter_without_grad_is_skipped_as_in_eager():
    def build():
        eager.manual_seed(1)
        m = nn.Linear(5, 3)
        extra = nn.Parameter(eager.ones(4))  # in the optimizer, never used: grad stays None
        scalar = nn.Parameter(eager.tensor(0.5))  # 0-d
        return m, extra, scalar, eager.optim.AdamW([m.weight, m.bias, extra, scalar], lr=1e-2)

    me, ee, se, oe = build()
    mc, ec, sc, oc = build()

    def step_e(x):
        oe.zero_grad()
        loss = (me(x) * se).pow(2).mean()
        loss.backward()
        oe.step()
        return loss

    @compile_fast
    def step_c(x):
        oc.zero_grad()
        loss = (mc(x) * sc).pow(2).mean()
        loss.backward()
        oc.step()
        return loss

    x, _ = _data()
    for _ in range(3):
        np.testing.assert_allclose(step_c(x).item(), step_e(x).item(), rtol=RTOL)
    assert ec not in oc.state and ee not in oe.state and ec.grad is None
    np.testing.assert_array_equal(ec.detach().numpy(), np.ones(4, np.float32))
    np.testing.assert_allclose(sc.item(), se.item(), rtol=RTOL)
    for k in oe.state[se]:
        np.testing.assert_allclose(oc.state[sc][k].numpy(), oe.state[se][k].numpy(), rtol=RTOL)


def test_optimizer_found_before_the_module():
    """The optimizer's name sorts before the model's: the module is still traced."""
    eager.manual_seed(0)
    net = nn.Linear(5, 3)
    a_opt = eager.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    w0 = net.weight.detach().numpy().copy()

    def step(x):
        a_opt.zero_grad()
        loss = net(x).pow(2).sum()
        loss.backward()
        a_opt.step()
        return loss

    cstep = compile_fast(step)
    x, _ = _data()
    l1 = cstep(x).item()
    l2 = cstep(x).item()
    assert l2 < l1
    assert not np.array_equal(net.weight.detach().numpy(), w0)
    # rebinding the module's parameter away from the optimizer's re-traces (eager would
    # no longer update what the model reads)
    net.weight = nn.Parameter(net.weight.detach().clone())
    cstep(x)
    assert "no longer" in cstep.recompile_reasons[-1]


def test_training_loop_converges_and_matches_over_many_steps():
    (me, oe, estep), (mc, oc, cstep) = _pair(eager.optim.Adam, dict(lr=5e-2))
    x, y = _data(n=16)
    for _ in range(30):
        le, lc = estep(x, y), cstep(x, y)
    assert lc.item() < 0.5
    np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-4)


# --- refusals ----------------------------------------------------------------------------


def _simple(opt_kw=None, opt_cls=None):
    eager.manual_seed(0)
    m = nn.Linear(5, 3)
    opt = (opt_cls or eager.optim.SGD)(m.parameters(), **(opt_kw or dict(lr=0.1)))
    return m, opt


def test_closure_is_refused():
    m, opt = _simple()

    @compile_fast
    def step(x):
        def closure():
            opt.zero_grad()
            loss = m(x).sum()
            loss.backward()
            return loss

        return opt.step(closure)

    x, _ = _data()
    w0 = m.weight.detach().numpy().copy()
    with pytest.raises(RuntimeError, match=r"SGD.step\(closure\) inside a compiled function"):
        step(x)
    np.testing.assert_array_equal(m.weight.detach().numpy(), w0)


@pytest.mark.parametrize("flag", ["foreach", "differentiable", "fused", "capturable"])
def test_implementation_flags_are_refused(flag):
    m, opt = _simple(dict(lr=1e-2), eager.optim.Adam)
    opt.param_groups[0][flag] = True  # foreach=True is accepted by the constructor

    @compile_fast
    def step(x):
        opt.zero_grad()
        m(x).sum().backward()
        opt.step()

    x, _ = _data()
    with pytest.raises(RuntimeError, match=rf"param_groups\[0\] has {flag}=True"):
        step(x)
    assert not opt.state


def test_add_param_group_inside_is_refused():
    m, opt = _simple()
    extra = nn.Parameter(eager.ones(2))

    @compile_fast
    def step(x):
        opt.add_param_group({"params": [extra]})
        return m(x).sum()

    x, _ = _data()
    with pytest.raises(RuntimeError, match=r"SGD.add_param_group\(\) was called inside"):
        step(x)
    assert len(opt.param_groups) == 1


def test_add_param_group_between_calls_retraces():
    (me, oe, estep), (mc, oc, cstep) = _pair(eager.optim.SGD, dict(lr=0.1, momentum=0.9))
    x, y = _data()
    estep(x, y), cstep(x, y)
    ee, ec = nn.Parameter(eager.ones(3)), nn.Parameter(eager.ones(3))
    oe.add_param_group({"params": [ee], "lr": 0.5})
    oc.add_param_group({"params": [ec], "lr": 0.5})
    for _ in range(2):
        estep(x, y), cstep(x, y)
    assert "param groups" in " ".join(cstep.recompile_reasons)
    _same_state(me, oe, mc, oc)


def test_lr_set_inside_is_refused():
    m, opt = _simple()

    @compile_fast
    def step(x):
        opt.param_groups[0]["lr"] = 0.5
        return m(x).sum()

    x, _ = _data()
    with pytest.raises(TracerError, match=r"opt.param_groups\[0\]\['lr'\] was set inside"):
        step(x)
    assert opt.param_groups[0]["lr"] == 0.1


def test_lr_must_be_a_number():
    m, opt = _simple()
    opt.param_groups[0]["lr"] = "0.1"

    @compile_fast
    def step(x):
        opt.zero_grad()
        return m(x).sum()

    x, _ = _data()
    with pytest.raises(TypeError, match=r"opt.param_groups\[0\]\['lr'\] is a str"):
        step(x)


def test_optimizer_out_of_reach_is_refused():
    m, opt = _simple()

    class Trainer:
        pass

    tr = Trainer()
    tr.opt = opt  # an attribute of an arbitrary object: not walked

    @compile_fast
    def step(x):
        tr.opt.zero_grad()
        m(x).sum().backward()
        tr.opt.step()

    x, _ = _data()
    with pytest.raises(RuntimeError, match=r"SGD.zero_grad\(\) was called inside a function "
                                           r"being compiled, but the compiler did not find"):
        step(x)


def test_parameter_passed_as_argument_is_refused():
    m, opt = _simple()

    @compile_fast
    def step(x, w):
        opt.zero_grad()
        (x.mm(w.t())).sum().backward()
        opt.step()

    x, _ = _data()
    with pytest.raises(TypeError, match=r"argument w is passed as an argument and is also"):
        step(x, m.weight)


def test_eager_step_outside_still_works_with_compiled_loss():
    """The previous pattern: compiled loss, eager optimizer."""
    m, opt = _simple(dict(lr=0.1, momentum=0.9))
    loss_fn = compile_fast(lambda x: m(x).pow(2).mean())
    x, _ = _data()
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = loss_fn(x)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[2] < losses[0]


def test_against_pytorch():
    torch = pytest.importorskip("torch")
    (me, oe, estep), (mc, oc, cstep) = _pair(eager.optim.AdamW, dict(lr=1e-2, amsgrad=True))
    tm = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    with torch.no_grad():
        for tp, p in zip(tm.parameters(), mc.parameters()):
            tp.copy_(torch.from_numpy(p.detach().numpy().copy()))
    topt = torch.optim.AdamW(tm.parameters(), lr=1e-2, amsgrad=True, foreach=False)
    x, y = _data()
    tx, ty = torch.from_numpy(x.numpy()), torch.from_numpy(y.numpy())
    for _ in range(4):
        topt.zero_grad()
        tl = torch.nn.functional.cross_entropy(tm(tx), ty)
        tl.backward()
        topt.step()
        lc = cstep(x, y)
        np.testing.assert_allclose(lc.item(), tl.item(), rtol=1e-5)
    for tp, p in zip(tm.parameters(), mc.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)
        for k, v in topt.state[tp].items():
            np.testing.assert_allclose(oc.state[p][k].numpy(), v.numpy(), rtol=1e-5, atol=1e-6)
