"""eager.optim: the optimizers step by step against PyTorch, param groups, state dicts,
and optim.lr_scheduler."""

import pickle
import warnings

import numpy as np
import pytest

import eager
from eager import nn, optim
from eager.optim import lr_scheduler


def test_package_keeps_the_old_names():
    from eager.optim import SGD, Adam  # noqa: F401

    assert optim.SGD.__module__ == "eager.optim"
    assert pickle.loads(pickle.dumps(optim.Adam)) is optim.Adam
    assert eager.optim.lr_scheduler is lr_scheduler


def _setup(mod, dtype, n_groups=1):
    rng = np.random.default_rng(0)
    shapes = [(3, 4), (5,), (2, 2, 2)]
    arrs = [rng.standard_normal(s).astype(dtype) for s in shapes]
    params = [mod.nn.Parameter(mod.tensor(a.copy())) for a in arrs]
    return params


def _grads(step, params_np, dtype):
    rng = np.random.default_rng(100 + step)
    return [(np.sin(p * (step + 1)) + rng.standard_normal(p.shape)).astype(dtype)
            for p in params_np]


def _groups(params, extra):
    if extra is None:
        return params
    return [{"params": params[:2]}, {"params": params[2:], **extra}]


CASES = [
    ("SGD", dict(lr=0.1), None),
    ("SGD", dict(lr=0.1, momentum=0.9), None),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01), None),
    ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True, maximize=True), {"lr": 0.2}),
    ("Adam", dict(lr=0.01), None),
    ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1), None),
    ("Adam", dict(lr=0.02, betas=(0.8, 0.9), maximize=True), {"lr": 0.001}),
    ("Adam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True), None),
    ("AdamW", dict(lr=0.01), None),
    ("AdamW", dict(lr=0.01, weight_decay=0.3, amsgrad=True), {"weight_decay": 0.0}),
    ("RMSprop", dict(lr=0.01), None),
    ("RMSprop", dict(lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.05), None),
    ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True), None),
    ("RMSprop", dict(lr=0.01, centered=True, maximize=True), {"momentum": 0.5}),
    ("Adagrad", dict(lr=0.1), None),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.1,
                     initial_accumulator_value=0.5), None),
    ("Adagrad", dict(lr=0.1, eps=1e-3, maximize=True), {"lr_decay": 0.1}),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name,kwargs,group2", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_optimizer_matches_torch_step_by_step(name, kwargs, group2, dtype):
    torch = pytest.importorskip("torch")
    ep = _setup(eager, dtype)
    tp = _setup(torch, dtype)
    eo = getattr(optim, name)(_groups(ep, group2), **kwargs)
    to = getattr(torch.optim, name)(_groups(tp, group2), **kwargs)
    rtol = 1e-12 if dtype == np.float64 else 2e-5
    for step in range(6):
        gs = _grads(step, [p.detach().numpy() for p in ep], dtype)
        for p, q, g in zip(ep, tp, gs):
            p.grad = eager.tensor(g)
            q.grad = torch.tensor(g)
        eo.step()
        to.step()
        for p, q in zip(ep, tp):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(),
                                       rtol=rtol, atol=rtol * 1e-2)
    esd, tsd = eo.state_dict(), to.state_dict()
    assert esd["param_groups"] == tsd["param_groups"]
    assert sorted(esd["state"]) == sorted(tsd["state"])
    for k in tsd["state"]:
        assert sorted(esd["state"][k]) == sorted(tsd["state"][k])
        for sk, tv in tsd["state"][k].items():
            np.testing.assert_allclose(np.asarray(esd["state"][k][sk].numpy()),
                                       tv.numpy(), rtol=rtol * 10, atol=1e-30)
    assert repr(eo) == repr(to)


def test_state_dict_round_trip_continues_identically():
    def make():
        eager.manual_seed(0)
        m = nn.Linear(3, 2)
        return m, optim.RMSprop(m.parameters(), lr=0.01, momentum=0.9, centered=True)

    def train(m, o, steps):
        for _ in range(steps):
            o.zero_grad()
            (m(eager.ones(4, 3)) ** 2).sum().backward()
            o.step()

    m1, o1 = make()
    train(m1, o1, 3)
    m2, o2 = make()
    m2.load_state_dict(m1.state_dict())
    o2.load_state_dict(o1.state_dict())
    train(m1, o1, 2)
    train(m2, o2, 2)
    assert np.array_equal(m1.weight.detach().numpy(), m2.weight.detach().numpy())


def test_add_param_group_and_errors():
    a, b = nn.Parameter(eager.ones(2)), nn.Parameter(eager.ones(3))
    o = optim.AdamW([a], lr=0.1)
    o.add_param_group({"params": b, "weight_decay": 0.0})
    assert o.param_groups[1]["lr"] == 0.1 and o.param_groups[1]["weight_decay"] == 0.0
    assert o.param_groups[1]["decoupled_weight_decay"] is True
    with pytest.raises(ValueError, match="Invalid alpha value: -1"):
        optim.RMSprop([a], alpha=-1)
    with pytest.raises(ValueError, match="Invalid lr_decay value: -1"):
        optim.Adagrad([a], lr_decay=-1)
    with pytest.raises(NotImplementedError, match="fused=True"):
        optim.Adam([a], fused=True)
    a.grad = eager.ones(2)
    o.zero_grad()
    assert a.grad is None
    a.grad = eager.ones(2)
    o.zero_grad(set_to_none=False)
    assert a.grad.tolist() == [0.0, 0.0]


# --- schedulers ---------------------------------------------------------------------

SCHEDS = [
    ("StepLR", dict(step_size=3, gamma=0.5)),
    ("MultiStepLR", dict(milestones=[2, 5, 5, 8], gamma=0.3)),
    ("ExponentialLR", dict(gamma=0.9)),
    ("CosineAnnealingLR", dict(T_max=4, eta_min=0.001)),
    ("LambdaLR", dict(lr_lambda=lambda e: 1.0 / (e + 1))),
]


@pytest.mark.parametrize("name,kwargs", SCHEDS, ids=[s[0] for s in SCHEDS])
def test_scheduler_matches_torch(name, kwargs):
    torch = pytest.importorskip("torch")
    runs = []
    for mod in (eager, torch):
        a, b = mod.nn.Parameter(mod.ones(2)), mod.nn.Parameter(mod.ones(1))
        o = mod.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
        s = getattr(mod.optim.lr_scheduler, name)(o, **kwargs)
        lrs = [s.get_last_lr()]
        for _ in range(12):
            o.step()
            s.step()
            lrs.append(s.get_last_lr())
        sd = s.state_dict()
        runs.append((lrs, sorted(sd), sd["last_epoch"], [g["lr"] for g in o.param_groups]))
    assert runs[0] == runs[1]


def test_reduce_lr_on_plateau_matches_torch():
    torch = pytest.importorskip("torch")
    metrics = [1.0, 0.9, 0.95, 0.95, 0.95, 0.95, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.79999, 0.7]
    for kwargs in [dict(patience=2), dict(mode="max", factor=0.5, patience=1, cooldown=2),
                   dict(patience=0, threshold=0.1, threshold_mode="abs", min_lr=0.02)]:
        runs = []
        for mod in (eager, torch):
            o = mod.optim.SGD([mod.nn.Parameter(mod.ones(2))], lr=0.1)
            s = mod.optim.lr_scheduler.ReduceLROnPlateau(o, **kwargs)
            lrs = []
            for m in metrics:
                s.step(m)
                lrs.append(s.get_last_lr())
            runs.append((lrs, s.num_bad_epochs, s.best, sorted(s.state_dict())))
        assert runs[0] == runs[1], kwargs
    o = optim.SGD([nn.Parameter(eager.ones(1))], lr=0.1)
    with pytest.raises(ValueError, match="Factor should be < 1.0."):
        lr_scheduler.ReduceLROnPlateau(o, factor=1.0)
    with pytest.raises(ValueError, match="mode avg is unknown!"):
        lr_scheduler.ReduceLROnPlateau(o, mode="avg")


def test_scheduler_warnings_and_state_dict():
    p = nn.Parameter(eager.ones(1))
    o = optim.SGD([p], lr=1.0)
    s = lr_scheduler.StepLR(o, step_size=1, gamma=0.5)
    with pytest.warns(UserWarning, match="Detected call of `lr_scheduler.step\\(\\)` before"):
        s.step()
    o2 = optim.SGD([p], lr=1.0)
    s2 = lr_scheduler.ExponentialLR(o2, gamma=0.5)
    p.grad = eager.ones(1)
    o2.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s2.step()
    with pytest.warns(UserWarning, match="please use `get_last_lr\\(\\)`"):
        s2.get_lr()
    s3 = lr_scheduler.ExponentialLR(optim.SGD([p], lr=1.0), gamma=0.5)
    s3.load_state_dict(s2.state_dict())
    assert s3.last_epoch == 1 and s3.get_last_lr() == [0.5]
    with pytest.raises(KeyError, match="param 'initial_lr' is not specified"):
        lr_scheduler.StepLR(optim.SGD([p], lr=1.0), 2, last_epoch=3)
    with pytest.raises(TypeError, match="list is not an Optimizer"):
        lr_scheduler.StepLR([], 2)
