"""Training steps: the seeds' ``loss.backward()`` step compiled as written, and eager
autograd flowing through compiled regions (``CompiledFunctionBackward``).

A compiled step that calls ``backward()`` must leave every tensor argument exactly as
eager would: the weights updated in place, ``.grad`` created on the first call (when it
is None) and accumulated or zeroed in place afterwards.  The two states of ``.grad``
(None, set) are two input signatures, so a long run traces twice and hits the cache
on every later call.
"""
from __future__ import annotations

import numpy as np
import pytest

import eager
import graphc
from eager.tensor import Tensor

F32 = dict(rtol=1e-4, atol=1e-5)     # float32 agreement between two evaluation orders


def _clone(t: Tensor) -> Tensor:
    return t.detach().clone().requires_grad_(t.requires_grad)


def _np(t):
    return None if t is None else t.detach().numpy()


def assert_close(actual, expected, what: str) -> None:
    if not np.array_equal(actual, expected):        # fast path: the interpreter is exact
        np.testing.assert_allclose(actual, expected, err_msg=what, **F32)


def assert_same_state(eager_ws, compiled_ws, when: str) -> None:
    """Data and .grad of every weight agree (including both being None)."""
    for k, (a, b) in enumerate(zip(eager_ws, compiled_ws)):
        assert_close(_np(b), _np(a), f"{when}: weight {k}")
        assert (a.grad is None) == (b.grad is None), f"{when}: .grad of weight {k}"
        if a.grad is not None:
            assert b.grad.dtype == a.grad.dtype and b.grad.shape == a.grad.shape
            assert_close(_np(b.grad), _np(a.grad), f"{when}: .grad of weight {k}")
            assert not b.grad.requires_grad


def _seed_data(n=64, d_in=1000, h=100, d_out=10, seed=0):
    eager.manual_seed(seed)
    x = eager.randn(n, d_in)
    y = eager.randn(n, d_out)
    w1 = eager.randn(d_in, h, requires_grad=True)
    w2 = eager.randn(h, d_out, requires_grad=True)
    return x, y, w1, w2


# ---------------------------------------------------------------------------
# the seed's step, compiled as written

# seed tutorial 003, "Two-Layer Network (MLP) using (built-in) torch.autograd", as written
from graphc.tools.workloads import LEARNING_RATE as learning_rate  # noqa: E402
from graphc.tools.workloads import seed_step  # noqa: E402


@pytest.fixture
def threads():
    """graphc.set_num_threads for the test; the count is restored after."""
    from graphc.runtime import parallel
    before = parallel.get_num_threads()
    yield parallel.set_num_threads
    parallel.set_num_threads(before)


@pytest.fixture
def one_thread(threads):
    """graphc's products on one thread, blocked as numpy's one-thread BLAS blocks eager's:
    a 500-step float32 run that converges from a loss of 1e6 to 1e-4 amplifies any
    rounding difference (products shared out by rows round differently, as numpy's own
    threaded BLAS does: its 2-thread run differs from its 1-thread run as much)."""
    threads(1)


@pytest.mark.slow
def test_seed_step_500_steps_compiled_equals_eager(one_thread):
    x, y, w1, w2 = _seed_data()
    c1, c2 = _clone(w1), _clone(w2)
    x0, y0 = x.numpy().copy(), y.numpy().copy()
    step = graphc.compile(seed_step)
    losses = []
    for t in range(500):
        le = seed_step(x, y, w1, w2)
        lc = step(x, y, c1, c2)
        assert isinstance(lc, Tensor) and lc.shape == () and lc.dtype == eager.float32
        assert float(lc) == pytest.approx(float(le), rel=1e-4, abs=1e-5), f"step {t}"
        assert_same_state([w1, w2], [c1, c2], f"after step {t}")
        losses.append(float(lc))
    assert losses[0] > 1e6 and losses[-1] < 1e-2         # the seed's run converges
    np.testing.assert_allclose(_np(c1), _np(w1), **F32)
    np.testing.assert_allclose(_np(c2), _np(w2), **F32)
    np.testing.assert_array_equal(x.numpy(), x0)           # inputs are not written
    np.testing.assert_array_equal(y.numpy(), y0)
    info = step.cache_info()
    assert (info.hits, info.misses, info.traces, info.entries) == (498, 2, 2, 2)
    assert step.recompile_reasons == [
        "re-traced seed_step: argument w1: .grad None -> set; argument w2: .grad None -> set"]


def test_seed_step_with_products_shared_by_two_threads_follows_eager(threads):
    """Two threads: the products are shared out by rows and the SGD update runs inside
    each share (backend/lower.py: epilogues); 50 steps agree with eager to float32."""
    threads(2)
    _compiled_follows_eager(seed_step, _seed_data(), steps=50)


def _compiled_follows_eager(step, data, steps: int) -> None:
    """Run ``step`` eagerly and compiled from the same weights: same loss and state
    (weights and .grad) after every step."""
    x, y, w1, w2 = data
    c1, c2 = _clone(w1), _clone(w2)
    cstep = graphc.compile(step)
    for t in range(steps):
        le = step(x, y, w1, w2)
        lc = cstep(x, y, c1, c2)
        assert float(lc) == pytest.approx(float(le), rel=1e-4), f"step {t}"
        assert_same_state([w1, w2], [c1, c2], f"after step {t}")


def test_seed_step_graph_contents():
    x, y, w1, w2 = _seed_data(n=4, d_in=6, h=5, d_out=3)
    step = graphc.compile(seed_step)
    first = step.ir(x, y, w1, w2)
    assert first.startswith("graph seed_step(x: f32[4,6], y: f32[4,3], w1: f32[6,5], "
                            "w2: f32[5,3])")
    step(x, y, w1, w2)                      # creates .grad: the next signature has it
    later = step.ir(x, y, w1, w2)
    assert "w1_grad: f32[6,5]" in later and "w2_grad: f32[5,3]" in later
    for text in (first, later):
        assert "backward" in text
        assert step.ir(x, y, w1, w2, stage="grad") == later   # backward already in the trace
        ret = [ln for ln in text.splitlines() if ln.strip().startswith("return")][0]
        assert ret.count("%") == 5          # loss, new w1, new w2, zeroed w1.grad, w2.grad
    assert "add(w1_grad" in later           # accumulation into the existing .grad


def test_accumulating_step_without_zero_grad():
    """No ``zero_()``: .grad accumulates across calls, in place, exactly as eager."""
    def step(x, y, w1, w2):
        loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).mean()
        loss.backward()
        with eager.no_grad():
            w1 -= 1e-3 * w1.grad
            w2 -= 1e-3 * w2.grad
        return loss

    x, y, w1, w2 = _seed_data(n=16, d_in=20, h=8, d_out=4, seed=1)
    c1, c2 = _clone(w1), _clone(w2)
    cstep = graphc.compile(step)
    grad_objects = None
    for t in range(40):
        le = step(x, y, w1, w2)
        lc = cstep(x, y, c1, c2)
        assert float(lc) == pytest.approx(float(le), rel=1e-4, abs=1e-6), f"step {t}"
        assert_same_state([w1, w2], [c1, c2], f"after step {t}")
        if grad_objects is None:
            grad_objects = (c1.grad, c2.grad)
        else:                               # later calls write into the same .grad tensors
            assert c1.grad is grad_objects[0] and c2.grad is grad_objects[1]
    assert cstep.cache_info().traces == 2 and cstep.cache_info().hits == 38


def test_step_returning_the_gradients():
    def step(x, y, w1, w2):
        loss = (x.mm(w1).tanh().mm(w2) - y).pow(2).sum()
        loss.backward()
        with eager.no_grad():
            w1 -= 1e-3 * w1.grad
            w2 -= 1e-3 * w2.grad
        return loss, w1.grad, w2.grad

    x, y, w1, w2 = _seed_data(n=8, d_in=5, h=6, d_out=2, seed=2)
    c1, c2 = _clone(w1), _clone(w2)
    cstep = graphc.compile(step)
    for t in range(10):
        le, ge1, ge2 = step(x, y, w1, w2)
        lc, gc1, gc2 = cstep(x, y, c1, c2)
        assert float(lc) == pytest.approx(float(le), rel=1e-4), f"step {t}"
        np.testing.assert_allclose(_np(gc1), _np(ge1), **F32)
        np.testing.assert_allclose(_np(gc2), _np(ge2), **F32)
        # the returned gradients are the values of .grad after the call
        np.testing.assert_array_equal(_np(gc1), _np(c1.grad))
        assert_same_state([w1, w2], [c1, c2], f"after step {t}")


def test_step_that_sets_grad_to_none_first():
    """``w.grad = None`` (zero_grad(set_to_none=True)) before backward: fresh gradients."""
    def step(x, y, w1, w2):
        w1.grad = None
        w2.grad = None
        loss = (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()
        loss.backward()
        with eager.no_grad():
            w1 -= 1e-3 * w1.grad
            w2 -= 1e-3 * w2.grad
        return loss

    _compiled_follows_eager(step, _seed_data(n=8, d_in=5, h=6, d_out=2, seed=3), steps=10)


def test_functional_step_with_graphc_grad_matches_the_seed():
    """The same training run written functionally: params in, new params out."""
    def loss_fn(params, x, y):
        return (x.mm(params["w1"]).clamp(min=0).mm(params["w2"]) - y).pow(2).sum()

    @graphc.compile
    def step(params, x, y):
        loss, g = graphc.value_and_grad(loss_fn)(params, x, y)
        return loss, {k: params[k] - learning_rate * g[k] for k in params}

    x, y, w1, w2 = _seed_data(n=16, d_in=50, h=10, d_out=3, seed=4)
    params = {"w1": w1.detach().numpy().copy(), "w2": w2.detach().numpy().copy()}
    xs, ys = x.numpy(), y.numpy()
    for t in range(100):
        le = seed_step(x, y, w1, w2)
        loss, params = step(params, xs, ys)
        assert float(loss) == pytest.approx(float(le), rel=1e-4), f"step {t}"
    np.testing.assert_allclose(params["w1"], _np(w1), **F32)
    np.testing.assert_allclose(params["w2"], _np(w2), **F32)
    assert step.cache_info().traces == 1


def test_backward_inside_trace_errors_match_eager():
    w = eager.randn(3, requires_grad=True)

    @graphc.compile
    def non_scalar(w):
        (w * 2).backward()
        return w.grad

    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar "
                                           "outputs"):
        non_scalar(w)

    @graphc.compile
    def with_gradient(w):
        (w * 2).backward(eager.ones(3) * 3)
        return w.grad

    np.testing.assert_array_equal(with_gradient(w).numpy(), [6.0, 6.0, 6.0])

    @graphc.compile
    def no_grad_needed(x):
        x.sum().backward()

    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        no_grad_needed(eager.randn(3))

    @graphc.compile
    def leaf_in_place(w):
        w -= 1.0

    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in "
                                           "an in-place operation"):
        leaf_in_place(w)


def test_optimizer_holding_the_eager_tensors_is_a_clear_error():
    """An optimizer built on the eager tensors updates them, not the traced arguments."""
    x, y, w1, w2 = _seed_data(n=4, d_in=3, h=2, d_out=1, seed=5)
    opt = eager.optim.SGD([w1, w2], lr=1e-3)

    @graphc.compile
    def step(x, y, w1, w2):
        opt.zero_grad()
        loss = (x.mm(w1).mm(w2) - y).pow(2).sum()
        loss.backward()
        opt.step()
        return loss

    before = w1.detach().numpy().copy()
    with pytest.raises(TypeError, match=r"argument w1 is passed as an argument and is also a "
                                        r"parameter opt updates"):
        step(x, y, w1, w2)                  # the first call already: nothing is half done
    np.testing.assert_array_equal(w1.detach().numpy(), before)


# ---------------------------------------------------------------------------
# eager autograd through compiled regions


def _pair(*shapes, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-1, 1, size=s).astype(dtype) for s in shapes]
    a = [Tensor._make(v.copy()).requires_grad_(True) for v in arrays]
    b = [Tensor._make(v.copy()).requires_grad_(True) for v in arrays]
    return a, b


def test_compiled_outputs_have_compiled_function_backward():
    @graphc.compile
    def f(a, b):
        return (a * b).tanh()

    (a, b), _ = _pair((3, 4), (4,))
    out = f(a, b)
    assert out.requires_grad and type(out.grad_fn).__name__ == "CompiledFunctionBackward"
    assert repr(out).endswith("grad_fn=<CompiledFunctionBackward>)")
    assert not out.is_leaf
    with eager.no_grad():
        assert f(a, b).grad_fn is None
    assert f(a.detach(), b.detach()).grad_fn is None


def test_backward_through_one_region_with_broadcasting_and_unused_output():
    def body(a, b, c):
        h = a * b + c                     # (3,4) * (4,) + ()
        return h.tanh(), (h * a).sum(0), h.exp().mean()

    f = graphc.compile(body)
    (a, b, c), (ea, eb, ec) = _pair((3, 4), (4,), (), seed=1)
    o1, o2, unused = f(a, b, c)
    assert all(type(o.grad_fn).__name__ == "CompiledFunctionBackward" for o in (o1, o2, unused))
    (o1.pow(2).sum() + (o2 * eb.detach()).sum()).backward()
    p1, p2, _ = body(ea, eb, ec)
    (p1.pow(2).sum() + (p2 * eb.detach()).sum()).backward()
    for got, want in [(a, ea), (b, eb), (c, ec)]:
        assert got.grad.shape == want.grad.shape
        np.testing.assert_allclose(_np(got.grad), _np(want.grad), rtol=1e-12, atol=1e-14)


def test_backward_through_two_regions_and_eager_code_between():
    @graphc.compile
    def layer(x, w, b):
        return (x @ w + b).sigmoid()

    @graphc.compile
    def head(h, v, idx):
        return (h @ v)[idx].pow(2).sum()

    (x, w1, b1, w2, b2, v), (ex, ew1, eb1, ew2, eb2, ev) = _pair(
        (5, 3), (3, 4), (4,), (4, 4), (1, 4), (4, 2), seed=2)
    idx = eager.tensor([0, 4, 4, 1])

    def model(layer, head, x, w1, b1, w2, b2, v):
        h = layer(x * 2.0, w1, b1)        # a non-leaf input
        h = layer(h, w2, b2) + h          # the same region twice (another signature)
        return head(h.relu(), v, idx) + 0.1 * w1.pow(2).sum()

    loss = model(layer, head, x, w1, b1, w2, b2, v)
    ref = model(layer.__wrapped__, head.__wrapped__, ex, ew1, eb1, ew2, eb2, ev)
    assert float(loss) == pytest.approx(float(ref), rel=1e-12)
    loss.backward()
    ref.backward()
    for got, want in zip((x, w1, b1, w2, b2, v), (ex, ew1, eb1, ew2, eb2, ev)):
        np.testing.assert_allclose(_np(got.grad), _np(want.grad), rtol=1e-12, atol=1e-14)
    assert layer.cache_info().traces == 2 and head.cache_info().traces == 1


def test_backward_twice_accumulates_and_gradients_flow_only_to_float_inputs():
    @graphc.compile
    def f(a, idx, s):
        return a[idx] * s, idx * 2

    (a, s), (ea, es) = _pair((4,), (), seed=3)
    idx = eager.tensor([1, 1, 3])
    out, doubled = f(a, idx, s)
    assert doubled.dtype == eager.int64 and not doubled.requires_grad
    loss = out.sum()
    loss.backward(retain_graph=True)
    loss.backward()
    (ea[idx] * es).sum().backward(retain_graph=True)
    (ea[idx] * es).sum().backward()
    np.testing.assert_allclose(_np(a.grad), _np(ea.grad), rtol=1e-12)
    np.testing.assert_allclose(_np(s.grad), _np(es.grad), rtol=1e-12)
    np.testing.assert_allclose(_np(a.grad), [0.0, 4.0, 0.0, 2.0] * _np(s), rtol=1e-12)


def test_second_order_through_a_compiled_region():
    @graphc.compile
    def f(a, b):
        return (a * b).tanh().sum()

    (a, b), (ea, eb) = _pair((3, 4), (4,), seed=4)
    (ga,) = eager.autograd.grad(f(a, b), a, create_graph=True)
    assert type(ga.grad_fn).__name__ == "CompiledFunctionBackward"
    (gga, ggb) = eager.autograd.grad((ga * ga).sum(), (a, b))
    (ega,) = eager.autograd.grad((ea * eb).tanh().sum(), ea, create_graph=True)
    (egga, eggb) = eager.autograd.grad((ega * ega).sum(), (ea, eb))
    np.testing.assert_allclose(_np(gga), _np(egga), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(_np(ggb), _np(eggb), rtol=1e-10, atol=1e-14)


def test_compiled_forward_eager_backward_training_loop():
    """Compile the forward only; eager's backward runs the compiled gradient graph."""
    @graphc.compile
    def forward(x, y, w1, w2):
        return (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()

    x, y, w1, w2 = _seed_data(n=32, d_in=100, h=20, d_out=5, seed=6)
    c1, c2 = _clone(w1), _clone(w2)
    for t in range(50):
        le = forward.__wrapped__(x, y, w1, w2)
        lc = forward(x, y, c1, c2)
        le.backward()
        lc.backward()
        assert float(lc) == pytest.approx(float(le), rel=1e-4), f"step {t}"
        assert_same_state([w1, w2], [c1, c2], f"after backward {t}")
        with eager.no_grad():
            for w in (w1, w2, c1, c2):
                w -= 1e-4 * w.grad
                w.grad.zero_()
    # .grad None -> set is part of the signature even when the function never reads .grad
    assert forward.cache_info().traces == 2
    vjp_fn = forward._entry_for((x, y, c1, c2)).stages["_vjp_fn"]
    assert vjp_fn.cache_info().traces == 1 and vjp_fn.cache_info().hits == 48


def test_backward_through_closed_over_parameters_fills_their_grad():
    """A module closed over has its parameters lifted: backward() inside fills .grad as
    eager does. A tensor held by an object graphc does not look into stays a constant, and
    backward() through it is a clear error."""
    model = eager.nn.Sequential(eager.nn.Linear(3, 4), eager.nn.ReLU(), eager.nn.Linear(4, 1))

    @graphc.compile
    def step(x, y):
        loss = (model(x) - y).pow(2).mean()
        loss.backward()
        return loss

    x, y = eager.randn(5, 3), eager.randn(5, 1)
    step(x, y)
    got = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    (model(x) - y).pow(2).mean().backward()
    for g, p in zip(got, model.parameters()):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-5, atol=1e-7)

    class Holder:                      # not an nn.Module: not walked
        w = eager.ones(3, 1, requires_grad=True)

    h = Holder()

    @graphc.compile
    def through_object(x):
        loss = (x @ h.w).sum()
        loss.backward()
        return loss

    with pytest.raises(graphc.TracerError, match=r"could not make inputs of the function.*"
                                                 r"Pass them as arguments"):
        through_object(x)
    assert h.w.grad is None

    # differentiating with respect to the input only is fine: the parameters are constants
    x = eager.randn(5, 3)
    gx = graphc.grad(lambda x: model(x).sum())(x)
    xe = x.detach().clone().requires_grad_(True)
    model(xe).sum().backward()
    np.testing.assert_allclose(gx.numpy(), xe.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_an_in_place_write_to_a_non_leaf_argument_is_refused_by_its_name():
    """eager extends the written tensor's history; a compiled call cannot hand that back."""
    w = eager.tensor([1.0, 2.0, 3.0], requires_grad=True)

    def f(h, w):
        h.add_(1)
        return (h * w).sum()

    h = w * 1
    f(h, w).backward()                               # fine in eager
    with pytest.raises(graphc.TracerError, match="to argument h, which requires grad and has "
                                                 "a grad_fn.*clone"):
        graphc.compile(f)(w * 1, w)


@pytest.mark.parametrize("x_rg", [False, True])
def test_backward_differentiates_only_inputs_that_require_grad(x_rg):
    """The gradient function behind CompiledFunctionBackward computes no gradient for a
    float input that does not require grad (a data batch): eager would drop it."""
    rng = np.random.default_rng(5)
    xa, wa = rng.standard_normal((6, 4)), rng.standard_normal((4, 3))

    def loss(x, w):
        return ((x @ w).tanh() * x.sum(1, keepdim=True)).sum()

    f = graphc.compile(loss, disk_cache=False)
    res = {}
    for name, fn in (("eager", loss), ("compiled", f)):
        x = eager.tensor(xa, requires_grad=x_rg)
        w = eager.tensor(wa, requires_grad=True)
        out = fn(x, w)
        out.backward()
        res[name] = (out.item(), _np(x.grad), _np(w.grad))
    assert_close(res["compiled"][0], res["eager"][0], "loss")
    assert_close(res["compiled"][2], res["eager"][2], "w.grad")
    if x_rg:
        assert_close(res["compiled"][1], res["eager"][1], "x.grad")
    else:
        assert res["compiled"][1] is None
    (entry,) = f._cache.values()
    vjp = entry.stages["_vjp_fn"]
    (ventry,) = vjp._cache.values()
    assert len(ventry.trace.out_rg) == (2 if x_rg else 1)  # one gradient per such input
