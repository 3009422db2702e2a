"""A Tensor learning rate (``SGD(params, lr=torch.tensor(0.01))``): accepted where
PyTorch accepts it, refused with PyTorch's errors elsewhere, read at every step, and
updated in place by the lr schedulers; differential against PyTorch when installed."""

import numpy as np
import pytest

import eager

OPTS = [
    ("SGD", dict(momentum=0.9, weight_decay=0.01)),
    ("SGD", dict(momentum=0.5, nesterov=True)),
    ("Adam", dict()),
    ("Adam", dict(amsgrad=True, weight_decay=0.1)),
    ("AdamW", dict(weight_decay=0.3)),
    ("RMSprop", dict(momentum=0.5, centered=True)),
    ("Adagrad", dict(lr_decay=0.01)),
]


def _run(lib, name, kw, lr, steps=4, dtype="float32", sched=None):
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((3, 4)).astype(dtype)
    gs = [rng.standard_normal((3, 4)).astype(dtype) for _ in range(steps)]
    p = lib.nn.Parameter(lib.tensor(w0))
    opt = getattr(lib.optim, name)([p], lr=lr, **kw)
    s = sched(lib, opt) if sched else None
    lrs = []
    for g in gs:
        p.grad = lib.tensor(g)
        opt.step()
        if s is not None:
            s.step()
        lrs.append(float(opt.param_groups[0]["lr"]))
    return p.detach().numpy().copy(), lrs, opt


@pytest.mark.parametrize("name,kw", OPTS)
def test_tensor_lr_equals_float_lr(name, kw):
    # a float32 lr tensor holding a float64-exact value: same update as the float
    lr = 0.0625
    a, _, _ = _run(eager, name, kw, lr, dtype="float64")
    b, _, opt = _run(eager, name, kw, eager.tensor(lr, dtype=eager.float64), dtype="float64")
    np.testing.assert_array_equal(a, b)
    assert isinstance(opt.param_groups[0]["lr"], eager.Tensor)


def test_tensor_lr_read_at_every_step():
    p = eager.nn.Parameter(eager.ones(3))
    lr = eager.tensor(0.5)
    opt = eager.optim.SGD([p], lr=lr)
    p.grad = eager.ones(3)
    opt.step()
    lr.fill_(0.25)
    opt.step()
    np.testing.assert_array_equal(p.detach().numpy(), np.full(3, 0.25, np.float32))


def test_errors():
    p = eager.nn.Parameter(eager.ones(3))
    with pytest.raises(ValueError, match="^Tensor lr must be 1-element$"):
        eager.optim.SGD([p], lr=eager.tensor([0.1, 0.2]))
    with pytest.raises(
        ValueError, match="^lr as a Tensor is not supported for capturable=False and foreach=True$"
    ):
        eager.optim.Adam([p], lr=eager.tensor(0.1), foreach=True)
    with pytest.raises(ValueError, match="^Invalid learning rate: -0.25$"):
        eager.optim.Adagrad([p], lr=eager.tensor(-0.25))
    eager.optim.SGD([p], lr=eager.tensor([0.1]), foreach=True)  # SGD accepts it
    eager.optim.RMSprop([p], lr=eager.tensor(0.1, requires_grad=True))


def test_scheduler_updates_in_place():
    p = eager.nn.Parameter(eager.ones(3))
    lr = eager.tensor(0.5)
    opt = eager.optim.SGD([p], lr=lr)
    s = eager.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    assert opt.param_groups[0]["initial_lr"] is not lr
    opt.step()
    s.step()
    assert opt.param_groups[0]["lr"] is lr and float(lr) == 0.25
    last = s.get_last_lr()[0]
    assert isinstance(last, eager.Tensor) and last is not lr and float(last) == 0.25
    assert s.base_lrs[0] is not opt.param_groups[0]["initial_lr"]


SCHEDS = [
    lambda lib, o: lib.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.3),
    lambda lib, o: lib.optim.lr_scheduler.MultiStepLR(o, milestones=[1, 3], gamma=0.5),
    lambda lib, o: lib.optim.lr_scheduler.ExponentialLR(o, gamma=0.9),
    lambda lib, o: lib.optim.lr_scheduler.CosineAnnealingLR(o, T_max=3, eta_min=0.001),
    lambda lib, o: lib.optim.lr_scheduler.LambdaLR(o, lambda e: 1.0 / (e + 1)),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("lr_shape", [(), (1,)])
@pytest.mark.parametrize("name,kw", OPTS)
def test_against_torch(name, kw, dtype, lr_shape):
    torch = pytest.importorskip("torch")
    for lr_dtype in ("float32", "float64"):
        lr_np = np.full(lr_shape, 0.01, dtype=lr_dtype)
        a, la, _ = _run(eager, name, kw, eager.tensor(lr_np), dtype=dtype)
        b, lb, _ = _run(torch, name, kw, torch.tensor(lr_np), dtype=dtype)
        tol = dict(rtol=1e-6, atol=1e-7) if dtype == "float32" else dict(rtol=1e-13, atol=0)
        np.testing.assert_allclose(a, b, **tol)
        assert la == lb


@pytest.mark.parametrize("k", range(len(SCHEDS)))
@pytest.mark.parametrize("lr_dtype", ["float32", "float64"])
def test_schedulers_against_torch(k, lr_dtype):
    torch = pytest.importorskip("torch")
    lr_np = np.array(0.05, dtype=lr_dtype)
    a, la, oa = _run(eager, "SGD", dict(momentum=0.9), eager.tensor(lr_np), 6, sched=SCHEDS[k])
    b, lb, ob = _run(torch, "SGD", dict(momentum=0.9), torch.tensor(lr_np), 6, sched=SCHEDS[k])
    assert la == lb  # the same float recurrences, in the lr's dtype
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert str(oa.param_groups[0]["lr"].dtype).split(".")[-1] == lr_dtype


def test_reduce_on_plateau_tensor_lr():
    p = eager.nn.Parameter(eager.ones(3))
    lr = eager.tensor(1.0)
    opt = eager.optim.SGD([p], lr=lr)
    s = eager.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
    s.step(1.0)
    s.step(2.0)
    assert opt.param_groups[0]["lr"] is lr and float(lr) == 0.5
