"""The state a compiled training step reads and writes by name: tied parameters (one
Parameter shared by two modules), an all-or-nothing write-back (a step that cannot
write every parameter, .grad and optimizer state refuses before writing any), and
concurrent calls from several threads.  Compared with eager for several steps."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import eager
import graphc
from graphc.errors import SignatureError

nn = eager.nn
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_OPTS = {
    "sgd_momentum": lambda ps: eager.optim.SGD(ps, lr=0.1, momentum=0.9),
    "sgd_nesterov_wd": lambda ps: eager.optim.SGD(
        ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01
    ),
    "adam": lambda ps: eager.optim.Adam(ps, lr=0.01),
    "adamw": lambda ps: eager.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
}


def _state(m, o):
    """Copies of every parameter, .grad and optimizer state value, in parameters() order."""
    out = []
    for p in m.parameters():
        st = o.state.get(p, {})
        out.append(
            (
                p.detach().numpy().copy(),
                None if p.grad is None else p.grad.numpy().copy(),
                {k: np.array(v.numpy() if hasattr(v, "numpy") else v) for k, v in st.items()},
            )
        )
    return out


def _assert_state(a, b, exact=False):
    assert len(a) == len(b)
    for (pa, ga, sa), (pb, gb, sb) in zip(a, b):
        if exact:
            np.testing.assert_array_equal(pa, pb)
        else:
            np.testing.assert_allclose(pa, pb, rtol=1e-5, atol=1e-6)
        assert (ga is None) == (gb is None)
        if ga is not None:
            assert ga.shape == gb.shape and ga.dtype == gb.dtype
            if exact:
                np.testing.assert_array_equal(ga, gb)
            else:
                np.testing.assert_allclose(ga, gb, rtol=1e-5, atol=1e-6)
        assert set(sa) == set(sb)
        for k in sa:
            if exact:
                np.testing.assert_array_equal(sa[k], sb[k])
            else:
                np.testing.assert_allclose(sa[k], sb[k], rtol=1e-5, atol=1e-6)


# --- tied weights ----------------------------------------------------------------------


class _TiedLM(nn.Module):
    """A language model's shape: the output projection reuses the embedding weight."""

    def __init__(self, vocab=7, dim=5):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, tokens):
        return self.head(self.mix(self.emb(tokens)).tanh())


def _tied_setup(opt, kind):
    eager.manual_seed(0)
    if kind == "lm":
        m = _TiedLM()
    else:
        m = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4))
        m[2].weight = m[0].weight
    o = _OPTS[opt](m.parameters())

    def step(x, y):
        o.zero_grad()
        out = m(x)
        loss = (
            eager.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
            if kind == "lm"
            else ((out - y) ** 2).mean()
        )
        loss.backward()
        o.step()
        return loss

    return m, o, step


def _tied_data(kind):
    rng = np.random.default_rng(1)
    if kind == "lm":
        return (eager.tensor(rng.integers(0, 7, size=(3, 4))), eager.tensor(rng.integers(0, 7, size=(3, 4))))
    return (
        eager.tensor(rng.standard_normal((3, 4)).astype(np.float32)),
        eager.tensor(rng.standard_normal((3, 4)).astype(np.float32)),
    )


@pytest.mark.parametrize("kind", ["mlp", "lm"])
@pytest.mark.parametrize("opt", sorted(_OPTS))
def test_tied_weights_step_matches_eager(opt, kind):
    """A Parameter shared by two modules is one lifted input: its gradient sums both
    uses, the optimizer updates it once, and the modules still share it afterwards."""
    me, oe, estep = _tied_setup(opt, kind)
    mc, oc, cstep = _tied_setup(opt, kind)
    n_params = len(list(mc.parameters()))
    cstep = graphc.compile(cstep)
    x, y = _tied_data(kind)
    for _ in range(5):
        le, lc = estep(x, y), cstep(x, y)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-5)
        _assert_state(_state(mc, oc), _state(me, oe))
    tied = (mc.head.weight, mc.emb.weight) if kind == "lm" else (mc[2].weight, mc[0].weight)
    assert tied[0] is tied[1]
    assert len(list(mc.parameters())) == n_params
    assert len(oc.state) == n_params  # one state per distinct parameter
    assert cstep.cache_info().traces <= 2  # the first step (state created), then warm


def test_untying_after_warm_calls_retraces_and_matches_eager():
    """``m[2].weight = nn.Parameter(...)`` after warm calls: the trace that read one
    tensor at both places is not used again (a re-trace, with the reason recorded)."""
    me, oe, estep = _tied_setup("sgd_momentum", "mlp")
    mc, oc, cstep = _tied_setup("sgd_momentum", "mlp")
    cstep = graphc.compile(cstep)
    x, y = _tied_data("mlp")
    for _ in range(3):
        estep(x, y), cstep(x, y)
    for m, o in ((me, oe), (mc, oc)):
        m[2].weight = nn.Parameter(m[0].weight.detach().clone() * 0.5)
        o.add_param_group({"params": [m[2].weight]})
    for _ in range(3):
        le, lc = estep(x, y), cstep(x, y)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-5)
        _assert_state(_state(mc, oc), _state(me, oe))
    assert mc[2].weight is not mc[0].weight


def test_untying_without_optimizer_is_noticed():
    """A tied forward compiled alone (no optimizer guard): rebinding one side is seen."""
    eager.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3))
    m[2].weight = m[0].weight
    f = graphc.compile(m)
    x = eager.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 6)
    with eager.no_grad():
        np.testing.assert_allclose(f(x).numpy(), m(x).numpy(), rtol=1e-5, atol=1e-6)
        m[2].weight = nn.Parameter(m[0].weight.detach() * -2.0)
        np.testing.assert_allclose(f(x).numpy(), m(x).numpy(), rtol=1e-5, atol=1e-6)
    assert any("tied" in r for r in f.recompile_reasons), f.recompile_reasons


def test_tied_weights_backward_through_compiled_forward():
    """graphc.compile(model) then eager backward: the tied .grad sums both uses."""
    def build():
        eager.manual_seed(0)
        m = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3))
        m[2].weight = m[0].weight
        return m

    me, mc = build(), build()
    f = graphc.compile(mc)
    x = eager.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 6)
    (me(x) ** 2).sum().backward()
    (f(x) ** 2).sum().backward()
    for pe, pc in zip(me.parameters(), mc.parameters()):
        np.testing.assert_allclose(pc.grad.numpy(), pe.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_parameters_sharing_memory_are_refused_before_any_write():
    """Two Parameters that are views of one buffer (``b = Parameter(a.detach()[0])``):
    eager's sequential in-place updates cannot be reproduced, so the compiled step
    refuses, naming both, with params, .grad and optimizer state unchanged."""

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Parameter(eager.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 10))
            self.b = nn.Parameter(eager.tensor(np.ones(3, np.float32)))

        def forward(self, x):
            return ((x @ self.a.t()) ** 2).sum() + (self.b * x).sum()

    m = M()
    o = eager.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

    def step(x):
        o.zero_grad()
        loss = m(x)
        loss.backward()
        o.step()
        return loss

    cstep = graphc.compile(step)
    x = eager.tensor(np.ones((4, 3), np.float32))
    for _ in range(2):
        cstep(x)
    m.b = nn.Parameter(m.a.detach()[0])  # now a view of a's first row
    o.param_groups[0]["params"][1] = m.b
    before = _state(m, o)
    with pytest.raises(SignatureError, match=r"m\.a .*shares memory with m\.b|m\.b .*shares memory with m\.a"):
        cstep(x)
    _assert_state(_state(m, o), before, exact=True)


# --- an all-or-nothing write-back ---------------------------------------------------------


def _step_setup(opt):
    eager.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    o = _OPTS[opt](m.parameters())

    def step(x):
        o.zero_grad()
        loss = (m(x) ** 2).sum()
        loss.backward()
        o.step()
        return loss

    return m, o, step


def _ro(a):
    a.flags.writeable = False


def _state_key(o, p):
    st = o.state[p]
    return "momentum_buffer" if "momentum_buffer" in st else "exp_avg_sq"


_REFUSED = {  # eager raises too (half way through its optimizer loop)
    "read-only first weight": lambda m, o: _ro(m[0].weight.detach().numpy()),
    "read-only last bias": lambda m, o: _ro(m[2].bias.detach().numpy()),
    "read-only optimizer state": lambda m, o: _ro(o.state[m[2].bias][_state_key(o, m[2].bias)].numpy()),
}

_LIKE_EAGER = {  # eager succeeds: its zero_grad() drops the .grad array
    "read-only .grad": lambda m, o: _ro(m[0].weight.grad.numpy()),
    "read-only last .grad": lambda m, o: _ro(m[2].bias.grad.numpy()),
    ".grad data of another shape": lambda m, o: setattr(m[0].weight.grad, "data", eager.zeros(2, 2)),
    ".grad data of another dtype": lambda m, o: setattr(
        m[0].weight.grad, "data", eager.zeros(4, 3, dtype=eager.float64)
    ),
    "Fortran-ordered parameter": lambda m, o: setattr(
        m[0].weight, "data", eager.tensor(np.asfortranarray(m[0].weight.detach().numpy()))
    ),
    "transposed-view parameter": lambda m, o: setattr(
        m[0].weight, "data", eager.tensor(np.ascontiguousarray(m[0].weight.detach().numpy().T)).t()
    ),
}


@pytest.mark.parametrize("backend", ["native", "interpreter"])
@pytest.mark.parametrize("opt", ["sgd_momentum", "adam"])
@pytest.mark.parametrize("edit", sorted(_REFUSED))
def test_unwritable_state_refuses_before_any_write(opt, edit, backend):
    m, o, step = _step_setup(opt)
    cstep = graphc.compile(step, backend=backend)
    x = eager.tensor(np.arange(12, dtype=np.float32).reshape(4, 3) / 10)
    for _ in range(3):
        cstep(x)
    _REFUSED[edit](m, o)
    before = _state(m, o)
    for _ in range(2):  # and again: the refusal does not depend on a first check
        with pytest.raises(RuntimeError, match="read-only.*nothing was written"):
            cstep(x)
        _assert_state(_state(m, o), before, exact=True)


@pytest.mark.parametrize("backend", ["native", "interpreter"])
@pytest.mark.parametrize("opt", ["sgd_momentum", "adam"])
@pytest.mark.parametrize("edit", sorted(_LIKE_EAGER))
def test_state_edited_between_calls_matches_eager(opt, edit, backend):
    me, oe, estep = _step_setup(opt)
    mc, oc, cstep = _step_setup(opt)
    cstep = graphc.compile(cstep, backend=backend)
    x = eager.tensor(np.arange(12, dtype=np.float32).reshape(4, 3) / 10)
    for _ in range(3):
        estep(x), cstep(x)
    _LIKE_EAGER[edit](me, oe)
    _LIKE_EAGER[edit](mc, oc)
    for _ in range(3):
        le, lc = estep(x), cstep(x)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-5)
        _assert_state(_state(mc, oc), _state(me, oe))
        for p in mc.parameters():
            assert p.grad.numpy().flags.writeable


def test_accumulating_step_with_a_reshaped_grad_is_refused_before_any_write():
    """A step without zero_grad() reads the .grad it accumulates into: a .grad whose data
    was replaced by another shape cannot be read as the trace's, so it is refused (after
    nothing was written); a read-only one gets a new array with the sum, as in eager."""

    def build():
        eager.manual_seed(0)
        m = nn.Linear(3, 2)
        o = eager.optim.SGD(m.parameters(), lr=0.1)

        def step(x):
            (m(x) ** 2).sum().backward()
            o.step()

        return m, o, step

    x = eager.tensor(np.arange(12, dtype=np.float32).reshape(4, 3) / 10)
    me, oe, estep = build()
    mc, oc, cstep = build()
    cstep = graphc.compile(cstep)
    for _ in range(2):
        estep(x), cstep(x)
    _ro(me.weight.grad.numpy())
    _ro(mc.weight.grad.numpy())
    for _ in range(2):
        estep(x), cstep(x)
        _assert_state(_state(mc, oc), _state(me, oe))
    mc.weight.grad.data = eager.zeros(2, 2)
    before = _state(mc, oc)
    with pytest.raises(RuntimeError, match=r"weight\.grad has shape \[2, 2\].*nothing was written"):
        cstep(x)
    _assert_state(_state(mc, oc), before, exact=True)


# --- threads -------------------------------------------------------------------------------


_THREADS = textwrap.dedent(
    """
    import threading, numpy as np, eager, graphc
    nn = eager.nn
    for rep in range(REPS):
        eager.manual_seed(rep)
        m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        o = OPT(m.parameters())
        def step(x):
            o.zero_grad()
            loss = (m(x) ** 2).mean()
            loss.backward()
            o.step()
            return loss
        c = graphc.compile(step)
        fwd = graphc.compile(m)
        x = eager.tensor(np.random.default_rng(rep).standard_normal((5, 8)).astype(np.float32))
        errs = []
        bar = threading.Barrier(4)
        def worker():
            try:
                bar.wait()
                for _ in range(4):
                    c(x)
            except BaseException as e:
                errs.append(repr(e))
        def reader():  # an inference function on the same model, re-traced meanwhile
            try:
                bar.wait()
                for n in (5, 6, 5, 7):
                    with eager.no_grad():
                        out = fwd(eager.tensor(np.ones((n, 8), np.float32)))
                    assert out.shape == (n, 4)
            except BaseException as e:
                errs.append(repr(e))
        ts = [threading.Thread(target=worker) for _ in range(3)] + [threading.Thread(target=reader)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        assert not errs, errs
        for p in m.parameters():
            assert type(p) is eager.Tensor, type(p)  # not a tracer
            assert np.isfinite(p.detach().numpy()).all()
            assert p.grad is not None and type(p.grad) is eager.Tensor
        for st in o.state.values():
            for v in st.values():
                assert not hasattr(v, "_ctx"), type(v)  # no tracer left behind
        # graphc's caches are sound: the next calls (one thread) equal eager's
        import copy
        me = copy.deepcopy(m)
        oe = OPT(me.parameters())
        oe.load_state_dict(o.state_dict())
        def estep(x):
            oe.zero_grad()
            loss = (me(x) ** 2).mean()
            loss.backward()
            oe.step()
            return loss
        for _ in range(2):
            le, lc = estep(x), c(x)
            assert np.allclose(le.item(), lc.item(), rtol=1e-5), (le.item(), lc.item())
        for pe, pc in zip(me.parameters(), m.parameters()):
            assert np.allclose(pe.detach().numpy(), pc.detach().numpy(), rtol=1e-5, atol=1e-6)
    print("ok")
    """
)


@pytest.mark.parametrize(
    "opt",
    [
        "eager.optim.Adam",
        "(lambda ps: eager.optim.SGD(ps, lr=0.1, momentum=0.9))",
    ],
)
def test_concurrent_first_calls_of_a_training_step(opt):
    """Three threads call one compiled training step at once (its first call traces,
    its second re-traces for the optimizer state the first created) while a fourth calls
    a compiled forward of the same model on new shapes (re-traces): no error, no tracer
    left in the model or the optimizer, and graphc's caches then give eager's numbers.
    6 repetitions in a subprocess (20 with ``GRAPHC_FUZZ_LONG=1``; each is a new model,
    optimizer and pair of compiled functions, so every repetition races first calls
    again), with a timeout (a deadlock fails the test)."""
    reps = "20" if os.environ.get("GRAPHC_FUZZ_LONG") else "6"
    code = _THREADS.replace("REPS", reps).replace("OPT", opt)
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=600,
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (r.stdout[-1000:], r.stderr[-3000:])


def test_tied_weights_step_matches_pytorch():
    """The tied LM's compiled AdamW step against PyTorch's (same weights, same data)."""
    torch = pytest.importorskip("torch")
    mc, oc, cstep = _tied_setup("adamw", "lm")
    cstep = graphc.compile(cstep)

    class TorchLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(7, 5)
            self.mix = torch.nn.Linear(5, 5)
            self.head = torch.nn.Linear(5, 7, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, tokens):
            return self.head(self.mix(self.emb(tokens)).tanh())

    tm = TorchLM()
    with torch.no_grad():
        tm.emb.weight.copy_(torch.tensor(mc.emb.weight.detach().numpy()))
        tm.mix.weight.copy_(torch.tensor(mc.mix.weight.detach().numpy()))
        tm.mix.bias.copy_(torch.tensor(mc.mix.bias.detach().numpy()))
    to = torch.optim.AdamW(tm.parameters(), lr=0.01, weight_decay=0.1)
    x, y = _tied_data("lm")
    tx, ty = torch.tensor(x.numpy()), torch.tensor(y.numpy())
    for _ in range(4):
        to.zero_grad()
        out = tm(tx)
        tl = torch.nn.functional.cross_entropy(out.reshape(-1, 7), ty.reshape(-1))
        tl.backward()
        to.step()
        lc = cstep(x, y)
        np.testing.assert_allclose(lc.item(), tl.item(), rtol=1e-5)
        for pc, pt in zip(mc.parameters(), tm.parameters()):
            np.testing.assert_allclose(pc.detach().numpy(), pt.detach().numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(pc.grad.numpy(), pt.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert len(list(tm.parameters())) == len(list(mc.parameters())) == 3  # the tied one once


@pytest.mark.parametrize("opt", ["sgd_momentum", "adam"])
def test_a_step_that_takes_no_arguments_matches_eager(opt):
    # model, data and optimizer all read by name: the prepared warm call binds no
    # arguments (it generated an empty unpacking line and raised IndentationError)
    def make():
        eager.manual_seed(0)
        m = nn.Linear(3, 2)
        return m, _OPTS[opt](m.parameters())

    x = eager.tensor(np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(2, 3))
    runs = []
    for compiled in (False, True):
        m, o = make()

        def body(m=m, o=o):
            o.zero_grad()
            loss = m(x).square().sum()
            loss.backward()
            o.step()
            return loss

        step = graphc.compile(body) if compiled else body
        losses = [float(step()) for _ in range(5)]
        runs.append((losses, _state(m, o)))
    (le, se), (lc, sc) = runs
    np.testing.assert_allclose(lc, le, rtol=1e-6)
    for (pe, ge, ste), (pc, gc, stc) in zip(se, sc):
        np.testing.assert_allclose(pc, pe, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(gc, ge, rtol=1e-6, atol=1e-7)
        assert sorted(ste) == sorted(stc)
