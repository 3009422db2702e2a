"""Bring your own model: modules and closures compiled with live parameters.

Parameters and buffers a compiled function reads by name are graph inputs read at every
call (graphc.capture): optimizer steps and rebinding are seen, gradients reach them
through eager autograd, and training eagerly or compiled gives the same numbers.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

import eager
import graphc
from eager import nn


class SeedMLP(nn.Module):
    """The seed tutorials' two-layer network, written as a module."""

    def __init__(self, d_in: int, h: int, d_out: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, h)
        self.fc2 = nn.Linear(h, d_out)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def _models(kind: str, seed: int):
    """Two identical models (eager's and the one to compile)."""
    pair = []
    for _ in range(2):
        eager.manual_seed(seed)
        if kind == "seed_mlp":
            pair.append(SeedMLP(16, 32, 4))
        else:
            pair.append(nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32),
                                      nn.ReLU(), nn.Linear(32, 4)))
    return pair


@pytest.mark.parametrize("kind", ["seed_mlp", "sequential"])
@pytest.mark.parametrize("optim", ["SGD", "Adam"])
def test_training_a_compiled_module_matches_eager(kind, optim):
    """200 steps of an eager optimizer on graphc.compile(model): the same loss and the
    same parameters as the eager model after every step, and one trace for the run.
    After each comparison the compiled model's parameters and optimizer state are set to
    the eager model's, so every step starts from the same values: otherwise float32
    rounding differences (which depend on the CPU's vector width: AVX512 numpy and BLAS
    part the two runs at step ~126 with Adam) grow until a ReLU input crosses zero in
    one run and not the other, and the trajectories part for good."""
    rng = np.random.default_rng(0)
    x = eager.tensor(rng.standard_normal((64, 16)).astype(np.float32))
    y = eager.tensor(rng.standard_normal((64, 4)).astype(np.float32))
    m_eager, m_comp = _models(kind, 1)
    make = {"SGD": lambda p: eager.optim.SGD(p, lr=5e-3, momentum=0.9),
            "Adam": lambda p: eager.optim.Adam(p, lr=5e-4)}[optim]
    cm = graphc.compile(m_comp)
    crit = nn.MSELoss()
    opt_e, opt_c = make(m_eager.parameters()), make(m_comp.parameters())
    first = last = None
    for step in range(200):
        losses = []
        for model, opt in ((m_eager, opt_e), (cm, opt_c)):
            opt.zero_grad()
            loss = crit(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5, err_msg=f"step {step}")
        for (n, pe), (_, pc) in zip(m_eager.named_parameters(), m_comp.named_parameters()):
            np.testing.assert_allclose(pc.detach().numpy(), pe.detach().numpy(), rtol=1e-5,
                                       atol=1e-6, err_msg=f"{n} after step {step}")
            with eager.no_grad():  # the next step starts from eager's values
                pc.copy_(pe)
                for key, val in opt_e.state[pe].items():
                    if isinstance(val, eager.Tensor):
                        opt_c.state[pc][key].copy_(val)
        first = losses[0] if first is None else first
        last = losses[0]
    assert last < 0.9 * first                       # it trained
    assert cm.cache_info().traces == 1 and cm.recompile_reasons == []


def test_the_issue_example_parameters_are_live():
    eager.manual_seed(0)
    m = nn.Linear(3, 1)
    x = eager.tensor(np.ones((2, 3), np.float32))
    cm = graphc.compile(m)
    np.testing.assert_allclose(cm(x).detach().numpy(), m(x).detach().numpy())
    with eager.no_grad():
        m.weight.mul_(0)
    np.testing.assert_allclose(cm(x).detach().numpy(), m(x).detach().numpy())
    out = graphc.compile(m.forward)(x)
    assert out.grad_fn is not None
    out.sum().backward()
    np.testing.assert_allclose(m.weight.grad.numpy(), [[2.0, 2.0, 2.0]])
    np.testing.assert_allclose(m.bias.grad.numpy(), [2.0])
    m.weight = nn.Parameter(eager.ones(1, 3))          # rebinding: seen, no re-trace
    np.testing.assert_allclose(cm(x).detach().numpy(), m(x).detach().numpy())
    assert cm.cache_info().traces == 1
    m.weight = nn.Parameter(eager.ones(2, 3))          # a new shape: re-traced, with a reason
    np.testing.assert_allclose(cm(x).detach().numpy(), m(x).detach().numpy())
    assert cm.cache_info().traces == 2
    assert "self.weight" in cm.recompile_reasons[-1] and "[2, 3]" in cm.recompile_reasons[-1]


def test_closures_globals_and_defaults_are_live():
    w = eager.tensor([1.0, 2.0])

    def closure(x):
        return x * w

    def default(x, b=eager.tensor([5.0, 5.0])):
        return x + b

    x = np.ones(2, np.float32)
    cc, cd = graphc.compile(closure), graphc.compile(default)
    np.testing.assert_array_equal(cc(x), [1, 2])
    w.mul_(3)
    np.testing.assert_array_equal(cc(x), [3, 6])
    np.testing.assert_array_equal(cd(x), [6, 6])
    default.__defaults__[0].add_(1)
    np.testing.assert_array_equal(cd(x), [7, 7])
    g = np.ones(2, np.float32)
    np.testing.assert_array_equal(graphc.compile(_uses_global)(g), [2, 3])
    GLOBAL_W.add_(1)
    np.testing.assert_array_equal(graphc.compile(_uses_global)(g), [3, 4])


GLOBAL_W = eager.tensor([1.0, 2.0])


def _uses_global(x):
    return x + GLOBAL_W


def test_unused_parameters_are_not_inputs():
    m = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    cf = graphc.compile(lambda x: m[0](x))
    x = eager.tensor(np.ones((1, 3), np.float32))
    g = cf.graph(x)
    names = [g[i]["attrs"]["name"] for i in g.inputs]
    assert names == ["x", "m_0_weight", "m_0_bias"], names


class Scaled(nn.Module):
    """A module whose forward branches on self.training and counts its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.register_buffer("calls", eager.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        y = self.fc(x)
        return y * 2.0 if self.training else y


def test_train_and_eval_are_part_of_the_signature():
    m = Scaled()
    cm = graphc.compile(m)
    x = eager.tensor(np.ones((4, 3), np.float32))
    with eager.no_grad():
        want_train = m.fc(x) * 2.0
        np.testing.assert_allclose(cm(x).numpy(), want_train.numpy())
        cm.eval()
        assert not m.training and not m.fc.training
        np.testing.assert_allclose(cm(x).numpy(), m.fc(x).numpy())
        cm.train()
        np.testing.assert_allclose(cm(x).numpy(), want_train.numpy())
    assert cm.cache_info().traces == 2
    assert "train()/eval()" in cm.recompile_reasons[0]
    assert m.calls.item() == 3.0                    # the buffer update is written back


class RunningMean(nn.Module):
    """Updates a running statistic in place and reads it after the update."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.register_buffer("mean", eager.zeros(2))

    def forward(self, x):
        h = self.fc(x)
        m = h.mean(0)
        with eager.no_grad():
            self.mean.mul_(0.9).add_(0.1 * m)
        return ((h - m) * (h - self.mean)).sum()


def test_a_buffer_update_with_gradients_is_written_back_and_differentiated():
    eager.manual_seed(0)
    a = RunningMean()
    b = copy.deepcopy(a)
    cb = graphc.compile(b)
    oa = eager.optim.SGD(a.parameters(), lr=0.1)
    ob = eager.optim.SGD(b.parameters(), lr=0.1)
    x = eager.randn(5, 3)
    for _ in range(5):
        for fn, opt in ((a, oa), (cb, ob)):
            opt.zero_grad()
            loss = fn(x)
            loss.backward()
            opt.step()
        np.testing.assert_allclose(b.mean.numpy(), a.mean.numpy(), rtol=1e-6, atol=1e-7)
        for p, q in zip(a.parameters(), b.parameters()):
            np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=1e-5,
                                       atol=1e-7)
    assert cb.cache_info().traces == 1


def test_an_argument_written_in_place_keeps_the_outputs_gradient():
    def f(x, w):
        y = x.clone() * w
        x.add_(1)
        return (y + x * w).sum()

    grads = []
    for g in (f, graphc.compile(f)):
        x = eager.ones(3)
        w = eager.tensor([1.0, 2.0, 3.0], requires_grad=True)
        out = g(x, w)
        out.backward()
        assert x.tolist() == [2.0, 2.0, 2.0] and x._version[0] == 1
        grads.append(w.grad.tolist())
    assert grads[0] == grads[1] == [3.0, 3.0, 3.0]


def test_updating_a_parameter_in_place_with_gradients_on_is_refused():
    lin = nn.Linear(3, 2)

    def f(x):
        with eager.no_grad():
            lin.weight.mul_(0.5)
        return lin(x).sum()

    with pytest.raises(graphc.GraphcError, match="lin.weight, which requires grad"):
        graphc.compile(f)(eager.ones(4, 3))
    with eager.no_grad():                            # no gradient wanted: it runs
        before = lin.weight.detach().numpy().copy()
        graphc.compile(f)(eager.ones(4, 3))
    np.testing.assert_allclose(lin.weight.detach().numpy(), before * 0.5)


def test_the_compiled_module_answers_as_the_module():
    m = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
    cm = graphc.compile(m)
    assert [n for n, _ in cm.named_parameters()] == ["0.weight", "0.bias"]
    assert list(cm.state_dict()) == ["0.weight", "0.bias"]
    assert cm.forward is cm and cm.training
    x = eager.tensor(np.ones((1, 3), np.float32))
    np.testing.assert_allclose(cm(x).detach().numpy(), m(x).detach().numpy())


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)

    @graphc.compile
    def forward(self, x):
        return self.fc(x).tanh()


def test_a_compiled_method_reads_each_instances_parameters():
    eager.manual_seed(3)
    a, b = Net(), Net()
    x = eager.tensor(np.ones((2, 3), np.float32))
    for net in (a, b, a):
        want = net.fc(x).tanh()
        np.testing.assert_allclose(net(x).detach().numpy(), want.detach().numpy(), rtol=1e-6)
    net_out = a(x)
    net_out.sum().backward()
    assert a.fc.weight.grad is not None and b.fc.weight.grad is None


def test_keyword_arguments_and_nested_compiles():
    inner = graphc.compile(lambda x, scale=1.0: (x * scale).exp())

    @graphc.compile
    def outer(x, shift=0.0):
        return inner(x, scale=2.0) + shift

    x = np.zeros(3)
    np.testing.assert_array_equal(outer(x, shift=1.0), np.full(3, 2.0))
    np.testing.assert_array_equal(outer(shift=1.0, x=x), np.full(3, 2.0))
    assert [outer.graph(x, 1.0)[n]["op"] for n in outer.graph(x, 1.0).node_ids()
            if outer.graph(x, 1.0)[n]["op"] not in ("input", "const")] == ["mul", "exp", "add"]


def test_explain_says_what_is_an_input_and_what_a_constant():
    table = np.arange(6.0).reshape(2, 3)
    m = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.2))
    cm = graphc.compile(lambda x: m(x) + eager.from_numpy(table))
    with eager.no_grad():
        cm(eager.tensor(np.ones((2, 3))))
    text = cm.explain()
    assert "tensors read by name (graph inputs, read at every call): m.0.weight, m.0.bias" \
        in text, text
    assert "random draws per call: 1" in text
    assert "constants captured at trace time: 1 array(s)" in text


class _Branchy(nn.Module):
    def forward(self, x):
        if x.sum() > 0:                 # Python control flow on a traced value
            return x
        return -x


def test_an_uncompilable_submodule_is_named_by_its_path():
    model = nn.Sequential(nn.Linear(3, 3), nn.Sequential(nn.ReLU(), _Branchy()))
    x = eager.ones(2, 3)
    with pytest.raises(graphc.TracerBoolConversionError,
                       match=r"test_models\.py:\d+.*\[in module self\.1\.1 \(_Branchy\)\]"):
        graphc.compile(model)(x)

    def step(x):
        return model(x).sum()
    with pytest.raises(graphc.TracerBoolConversionError, match=r"in module model\.1\.1"):
        graphc.compile(step)(x)
    assert model(x).shape == (2, 3)     # eagerly it runs


def test_a_trace_made_under_no_grad_is_not_reused_for_gradients():
    def f(x, w):
        with eager.no_grad():
            s = (x * w).sum()
        return x * w * s

    x = eager.ones(3)
    cf = graphc.compile(f)
    w = eager.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with eager.no_grad():                           # first traced with grad mode off
        assert not cf(x, w).requires_grad
    cf(x, w).sum().backward()
    ew = eager.tensor([1.0, 2.0, 3.0], requires_grad=True)
    f(x, ew).sum().backward()
    assert w.grad.tolist() == ew.grad.tolist() == [6.0, 6.0, 6.0]
    assert "grad mode on" in cf.recompile_reasons[-1]
    w.grad = None                                   # the signature of the first calls
    with eager.no_grad():                           # both traces are kept
        cf(x, w)
    cf(x, w)
    assert cf.cache_info().traces == 2


def test_outputs_have_a_gradient_history_exactly_where_eager_gives_one():
    lin = nn.Linear(3, 1)

    def f(x):
        y = lin(x)
        return y.detach() * 2, y, (y > 0), y.sum()

    x = eager.ones(2, 3)
    got = graphc.compile(f)(x)
    want = f(x)
    assert [t.requires_grad for t in got] == [t.requires_grad for t in want] == \
        [False, True, False, True]
    assert [t.grad_fn is None for t in got] == [True, False, True, False]


def test_backward_on_an_output_without_history_says_why():
    frozen = nn.Linear(3, 1)
    for p in frozen.parameters():
        p.requires_grad_(False)
    cm = graphc.compile(frozen)
    with pytest.raises(RuntimeError, match=r"does not have a grad_fn .*self.weight, "
                       r"self.bias\) have requires_grad=False"):
        cm(eager.ones(2, 3)).sum().backward()

    live = graphc.compile(nn.Linear(3, 1))
    with eager.no_grad():
        y = live(eager.ones(2, 3))
    with pytest.raises(RuntimeError, match=r"it is an output of compiled Linear: compiled "
                       r"Linear was called under no_grad\(\)"):
        y.backward(eager.ones(2, 1))

    lin = nn.Linear(3, 1)

    def f(x):
        return lin(x).detach()

    with pytest.raises(RuntimeError, match=r"does not depend on what requires grad "
                       r"\(lin.weight, lin.bias\)"):
        graphc.compile(f)(eager.ones(2, 3)).sum().backward()


def _train_step(model, zero: bool = True):
    def step(x, y):
        if zero:
            model.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        with eager.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
        return loss
    return step


def test_backward_inside_a_compiled_step_fills_the_grad_of_lifted_parameters():
    eager.manual_seed(0)
    a = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    b = copy.deepcopy(a)
    x, y = eager.randn(8, 3), eager.randn(8, 1)
    sa, sb = _train_step(a), graphc.compile(_train_step(b))
    for _ in range(5):
        la, lb = sa(x, y), sb(x, y)
        np.testing.assert_allclose(lb.item(), la.item(), rtol=1e-6)
        for p, q in zip(a.parameters(), b.parameters()):
            np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), atol=1e-6)
            np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), atol=1e-6)
    # the first call found no .grad, the next ones one to zero: two traces, then none
    assert sb.cache_info().traces == 2
    assert sb.recompile_reasons == ["re-traced step: model.0.weight.grad is now set"]


def test_backward_inside_accumulates_into_grad_and_zero_grad_inside_clears_it():
    eager.manual_seed(1)
    a = nn.Linear(3, 2)
    b = copy.deepcopy(a)
    x = eager.randn(4, 3)

    def acc(model):
        def f(x):
            model(x).sum().backward()
        return f

    fa, fb = acc(a), graphc.compile(acc(b))
    for _ in range(3):
        fa(x)
        fb(x)
    np.testing.assert_allclose(b.weight.grad.numpy(), a.weight.grad.numpy(), rtol=1e-6)

    def clear(model):
        def f(x):
            out = model(x).sum()
            model.zero_grad()
            return out
        return f

    clear(a)(x)
    graphc.compile(clear(b))(x)
    assert a.weight.grad is None and b.weight.grad is None and b.bias.grad is None


@pytest.mark.parametrize("where", ["zero_grad", "step"])
def test_an_eager_optimizer_inside_a_compiled_function_steps_as_eagerly(where):
    """An optimizer the function reads by name (here a closure cell) is lifted: its
    step() and zero_grad() run in the compiled code and leave eager's values."""
    def make():
        w = eager.ones(3, 1, requires_grad=True)
        opt = eager.optim.SGD([w], lr=0.1, momentum=0.9)
        x = eager.ones(4, 3)

        def step(x):
            if where == "zero_grad":
                opt.zero_grad()
            (x @ w).sum().backward()
            opt.step()

        return w, step, x

    we, se, xe = make()
    wc, sc, xc = make()
    sc = graphc.compile(sc)
    for _ in range(3):
        se(xe)
        sc(xc)
        np.testing.assert_allclose(wc.detach().numpy(), we.detach().numpy(), rtol=1e-6)
