"""graphc.vmap: every op's batching rule against a Python loop of the op, the API's
in_axes/out_axes/axis_size semantics (JAX's), composition with grad and compile, and
the error messages."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import eager
import graphc
from eager.interop import OPS
from graphc.batching import BATCHING, IR_REFUSED, IR_WRITTEN
from graphc.ir.graph import IR_OPS

B = 3


def _variants(a: np.ndarray, rng) -> list:
    """B different examples with the sample's shape, dtype and value set (shuffles keep
    indices in range and inputs in the op's domain)."""
    out = [a]
    for _ in range(B - 1):
        v = a.copy().reshape(-1)
        rng.shuffle(v)
        out.append(v.reshape(a.shape))
    return out


def _run(fn, args):
    """Trace ``fn`` and run the graph with the interpreter (numpy forwards: no compile)."""
    g = graphc.trace(fn, *args)
    flat = [np.asarray(a) for a in args if isinstance(a, np.ndarray)]
    return graphc.interpret(g, *flat)


def _op_fn(op, attrs):
    def f(*xs):
        return xs[0]._apply(op, "", tuple(xs), dict(attrs))

    return f


def _cases():
    for name in sorted(OPS):
        if OPS[name].family == "random":
            continue
        for k, (arrays, attrs) in enumerate(OPS[name].samples()):
            yield pytest.param(name, k, id=f"{name}-{k}")


def _f64(a):
    a = np.asarray(a)
    return a.astype(np.float64) if a.dtype == np.float32 else a


@pytest.mark.parametrize("name,k", list(_cases()))
def test_op_rule_matches_a_loop(name, k):
    arrays, attrs = OPS[name].samples()[k]
    arrays = [_f64(a) for a in arrays]
    rng = np.random.default_rng(k)
    fwd = OPS[name].forward
    n = len(arrays)
    try:
        fwd(*arrays, **attrs)
    except Exception:
        pytest.skip("the sample is an error case")
    # every single argument mapped, then all of them, then the first along its last axis
    plans = [tuple(0 if i == j else None for i in range(n)) for j in range(n)]
    if n > 1:
        plans.append((0,) * n)
    if arrays[0].ndim >= 1:
        plans.append((-1,) + (None,) * (n - 1))
    for plan in plans:
        per = [_variants(a, rng) if ax is not None else None for a, ax in zip(arrays, plan)]
        try:
            want = np.stack(
                [
                    fwd(*[p[i] if p is not None else a for a, p in zip(arrays, per)], **attrs)
                    for i in range(B)
                ]
            )
        except Exception:
            continue  # a shuffle made an invalid example (e.g. a broken max_pool2d_select)
        args = [
            np.moveaxis(np.stack(p), 0, ax) if p is not None else a
            for a, p, ax in zip(arrays, per, plan)
        ]
        (got,) = _run(graphc.vmap(_op_fn(name, attrs), in_axes=plan), args)
        assert got.shape == want.shape, (plan, got.shape, want.shape)
        assert got.dtype == want.dtype, (plan, got.dtype, want.dtype)
        np.testing.assert_allclose(
            got, want, rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=str(plan)
        )


def test_every_op_has_a_rule_or_a_reason():
    missing = [n for n in OPS if n not in BATCHING]
    assert not missing, f"ops without a batching rule or refusal: {missing}"
    for n, r in BATCHING.items():
        assert r.kind in ("derived", "written", "loop", "refused"), n
        if r.kind in ("loop", "refused"):
            assert len(r.reason) > 20, n
        else:  # the loop ops are batched by batch_replay itself (a scan of the batched body)
            assert r.fn is not None or n in IR_WRITTEN, n
    for op in set(IR_OPS) - {"input", "const"}:
        assert op in BATCHING and BATCHING[op].kind in ("refused", "written")
    for op in IR_REFUSED:
        assert BATCHING[op].error is NotImplementedError


def test_random_is_refused_with_the_source_line():
    def f(x):
        return x + eager.randn(3)

    # refused while the per-example function is traced (as in a loop body): one trace
    # cannot give each example draws of its own
    with pytest.raises(graphc.TracerError, match=r"random draw.*vmap maps.*test_vmap.py:\d+"):
        graphc.vmap(f)(np.ones((2, 3)))


# ---------------------------------------------------------------------------
# the API


def test_in_axes_none_and_tuple_and_out_axes():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(4, 3)), rng.normal(size=(3, 5))
    r = graphc.vmap(lambda a, b: a @ b, in_axes=(0, None))(x, y)
    np.testing.assert_allclose(np.asarray(r), x @ y)
    r = graphc.vmap(lambda a, b: a @ b, in_axes=(0, None), out_axes=1)(x, y)
    np.testing.assert_allclose(np.asarray(r), (x @ y).T)
    r = graphc.vmap(lambda a, b: a @ b, in_axes=(1, None), out_axes=-1)(x.T.copy(), y)
    np.testing.assert_allclose(np.asarray(r), (x @ y).T)


def test_pytree_prefix_in_axes_and_outputs():
    rng = np.random.default_rng(1)
    p = {"w": rng.normal(size=(3,)), "b": rng.normal(size=())}
    xs = rng.normal(size=(5, 3))

    def f(params, x):
        return {"y": (params["w"] * x).sum() + params["b"], "t": (x, params["b"])}

    r = graphc.vmap(f, in_axes=({"w": None, "b": None}, 0), out_axes={"y": 0, "t": (1, None)})(
        p, xs
    )
    np.testing.assert_allclose(np.asarray(r["y"]), xs @ p["w"] + p["b"])
    np.testing.assert_allclose(np.asarray(r["t"][0]), xs.T)
    np.testing.assert_allclose(np.asarray(r["t"][1]), p["b"])


def test_unbatched_output_is_broadcast_and_axis_size():
    r = graphc.vmap(lambda x, c: c * 2.0, in_axes=(0, None))(np.ones((4, 2)), np.arange(3.0))
    np.testing.assert_allclose(np.asarray(r), np.tile(np.arange(3.0) * 2, (4, 1)))
    r = graphc.vmap(lambda c: c + 1.0, in_axes=None, axis_size=2)(np.arange(3.0))
    np.testing.assert_allclose(np.asarray(r), np.tile(np.arange(3.0) + 1, (2, 1)))


def test_size_zero_and_one_batches_and_0d_examples():
    f = graphc.vmap(lambda x: (x * x).sum())
    np.testing.assert_allclose(np.asarray(f(np.arange(6.0).reshape(3, 2))), [1.0, 13.0, 41.0])
    assert tuple(f(np.zeros((0, 2))).shape) == (0,)
    np.testing.assert_allclose(np.asarray(f(np.ones((1, 2)))), [2.0])
    g = graphc.vmap(lambda s: s * 3.0 + s.exp())  # 0-d examples
    v = np.array([0.5, -1.0])
    np.testing.assert_allclose(np.asarray(g(v)), v * 3 + np.exp(v))


def test_non_contiguous_input():
    x = np.arange(24.0).reshape(4, 6)[:, ::2]
    r = graphc.vmap(lambda a: a.cumsum(0))(x.T)  # maps a transposed, strided view
    np.testing.assert_allclose(np.asarray(r), np.cumsum(x.T, axis=1))


def test_nested_vmap_is_an_outer_product():
    a, b = np.arange(3.0), np.arange(4.0) + 1
    r = graphc.vmap(graphc.vmap(lambda x, y: x * y, in_axes=(None, 0)), in_axes=(0, None))(a, b)
    np.testing.assert_allclose(np.asarray(r), np.outer(a, b))
    x = np.random.default_rng(2).normal(size=(2, 3, 4))
    r = graphc.vmap(graphc.vmap(lambda v: v.softmax(0)))(x)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(np.asarray(r), e / e.sum(-1, keepdims=True), rtol=1e-12)


def _mlp_loss(w1, w2, x, y):
    return (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()


def _mlp_data(n=4):
    rng = np.random.default_rng(3)
    return (
        rng.normal(size=(5, 6)),
        rng.normal(size=(6, 2)),
        rng.normal(size=(n, 1, 5)),
        rng.normal(size=(n, 1, 2)),
    )


def _eager_per_example(w1, w2, x, y):
    out = []
    for i in range(x.shape[0]):
        a = eager.tensor(w1, requires_grad=True)
        b = eager.tensor(w2, requires_grad=True)
        _mlp_loss(a, b, eager.tensor(x[i]), eager.tensor(y[i])).backward()
        out.append((a.grad.numpy(), b.grad.numpy()))
    return [np.stack([o[k] for o in out]) for k in range(2)]


def test_vmap_of_grad_is_per_example_gradients():
    w1, w2, x, y = _mlp_data()
    g = graphc.vmap(graphc.grad(_mlp_loss, argnums=(0, 1)), in_axes=(None, None, 0, 0))
    got = g(w1, w2, x, y)
    want = _eager_per_example(w1, w2, x, y)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-10)


def test_compile_of_vmap_and_vmap_under_compile():
    w1, w2, x, y = _mlp_data()
    pe = graphc.vmap(graphc.grad(_mlp_loss, argnums=(0, 1)), in_axes=(None, None, 0, 0))
    want = _eager_per_example(w1, w2, x, y)
    cf = graphc.compile(pe)
    for a, b in zip(cf(w1, w2, x, y), want):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-10)

    @graphc.compile
    def step(w1, w2, x, y):
        g1, g2 = pe(w1, w2, x, y)
        return (g1 * g1).sum((1, 2)) + (g2 * g2).sum((1, 2))

    want_n = (want[0] ** 2).sum((1, 2)) + (want[1] ** 2).sum((1, 2))
    np.testing.assert_allclose(np.asarray(step(w1, w2, x, y)), want_n, rtol=1e-10)


def test_grad_of_vmap_matches_finite_differences():
    rng = np.random.default_rng(4)
    w, xs = rng.normal(size=(3, 2)), rng.normal(size=(5, 3))

    def total(w, xs):
        per = graphc.vmap(lambda x, w: (x @ w).tanh().sum(), in_axes=(0, None))(xs, w)
        return (per * per).sum()

    g = np.asarray(graphc.grad(total)(w, xs))

    def val(w):
        return float(((np.tanh(xs @ w).sum(1)) ** 2).sum())

    fd = np.zeros_like(w)
    for idx in np.ndindex(*w.shape):
        e = np.zeros_like(w)
        e[idx] = 1e-6
        fd[idx] = (val(w + e) - val(w - e)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_work_independent_of_the_batch_is_done_once():
    w = np.random.default_rng(5).normal(size=(3, 3))

    def f(x, w):
        return x @ (w @ w).exp()

    g = graphc.trace(graphc.vmap(f, in_axes=(0, None))._graphc_traced, np.ones((4, 3)), w)
    exps = [n for n, d in g.nx.nodes(data=True) if d["op"] == "exp"]
    assert len(exps) == 1 and g.nx.nodes[exps[0]]["shape"] == (3, 3)


# ---------------------------------------------------------------------------
# errors


def test_inconsistent_sizes_name_the_arguments():
    def f(x, y):
        return x + y

    with pytest.raises(ValueError, match="inconsistent sizes for array axes to be mapped") as e:
        graphc.vmap(f)(np.ones((3,)), np.ones((4,)))
    assert "argument x of type float64[3]" in str(e.value)
    assert "argument y of type float64[4]" in str(e.value)
    with pytest.raises(ValueError, match="axis_size argument was 5"):
        graphc.vmap(f, axis_size=5)(np.ones((3,)), np.ones((3,)))


def test_in_axes_errors():
    f = lambda x, y: x  # noqa: E731
    with pytest.raises(ValueError, match="at least one non-None value in in_axes"):
        graphc.vmap(f, in_axes=None)(np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="rank should be at least 1, but is only 0"):
        graphc.vmap(f)(np.ones(()), np.ones(()))
    with pytest.raises(ValueError, match="rank should be at least 3"):
        graphc.vmap(f, in_axes=(2, None))(np.ones((2, 2)), np.ones(2))
    with pytest.raises(ValueError, match="tuple of entries corresponding to the positional"):
        graphc.vmap(f, in_axes=(0,))(np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="tree prefix"):
        graphc.vmap(lambda p: p[0], in_axes=((0, 0, 0),))((np.ones(2), np.ones(2)))
    with pytest.raises(ValueError, match="mapped output .* but out_axes is None"):
        graphc.vmap(lambda x: x, out_axes=None)(np.ones(2))


def test_loops_are_refused_naming_the_op():
    from graphc.batching import apply_rule
    from eager.interop import Meta

    # scan and loop_out are batched (tests/graphc/test_loops.py); a while loop is refused
    with pytest.raises(NotImplementedError, match="'while'.*not supported yet"):
        apply_rule("while", 2, [], [], {}, Meta((), "bool"), "f.py:1")


def test_a_missing_rule_names_the_op():
    from graphc.batching import apply_rule
    from eager.interop import Meta

    with pytest.raises(NotImplementedError, match="'nosuch' \\(at f.py:3\\) has no batching rule"):
        apply_rule("nosuch", 2, [], [], {}, Meta((), "bool"), "f.py:3")


def test_in_place_write_to_an_argument_is_refused():
    def f(x):
        x.add_(1.0)
        return x

    with pytest.raises(NotImplementedError, match="in place into its argument x"):
        graphc.vmap(f)(np.ones((2, 3)))


# ---------------------------------------------------------------------------
# against torch.func.vmap


def test_differential_vs_torch_func_vmap():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    x, w = rng.normal(size=(4, 3, 5)), rng.normal(size=(5, 2))
    cases = [
        (lambda a, b: (a @ b).relu().sum(0), (0, None), (x, w)),
        (lambda a, b: a.transpose(0, 1) @ (a @ b), (1, None), (x, w)),
        (lambda a, b: a.softmax(-1).cumsum(0), (2, None), (x, w)),
        (lambda a, b: a[1:, ::2].amax(-1) * b[0], (0, 1), (x, rng.normal(size=(2, 4)))),
    ]
    for f, axes, args in cases:
        got = np.asarray(graphc.vmap(f, in_axes=axes)(*args))
        targs = [torch.tensor(a) for a in args]
        want = torch.func.vmap(f, in_dims=axes)(*targs).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_per_example_grads_vs_torch_func():
    torch = pytest.importorskip("torch")
    w1, w2, x, y = _mlp_data()
    got = graphc.vmap(graphc.grad(_mlp_loss, argnums=(0, 1)), in_axes=(None, None, 0, 0))(
        w1, w2, x, y
    )
    tw = [torch.tensor(a) for a in (w1, w2, x, y)]
    want = torch.func.vmap(torch.func.grad(_mlp_loss, argnums=(0, 1)), in_dims=(None, None, 0, 0))(
        *tw
    )
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), b.numpy(), rtol=1e-10)


def test_public_functions_have_docstrings():
    import graphc.batching as gb

    assert inspect.getdoc(graphc.vmap)
    for name in ("batch_replay", "apply_rule", "to_batched", "moveaxis"):
        assert inspect.getdoc(getattr(gb, name)), name


def test_closing_over_values_of_enclosing_traces():
    rng = np.random.default_rng(7)
    W, X = rng.normal(size=(3, 4)), rng.normal(size=(5, 3))

    @graphc.compile
    def f(W, X):
        return graphc.vmap(lambda x: (W.t() @ x).tanh() * W.sum())(X)

    np.testing.assert_allclose(np.asarray(f(W, X)), np.tanh(X @ W) * W.sum(), rtol=1e-12)

    @graphc.compile
    def g(Wt, X):  # the inner vmap closes over the outer one's example
        return graphc.vmap(lambda x: graphc.vmap(lambda w: (w * x).sum())(Wt))(X)

    np.testing.assert_allclose(np.asarray(g(W.T.copy(), X)), X @ W, rtol=1e-12)

    def loss(W, X):  # grad through a closed-over differentiated argument
        return graphc.vmap(lambda x: (x @ W).sin().sum())(X).sum()

    np.testing.assert_allclose(np.asarray(graphc.grad(loss)(W, X)), X.T @ np.cos(X @ W), rtol=1e-12)


def test_modules_and_closed_over_eager_tensors():
    eager.manual_seed(0)
    m = eager.nn.Sequential(eager.nn.Linear(3, 4), eager.nn.Tanh(), eager.nn.Linear(4, 2))
    m = m.double()
    X = eager.tensor(np.random.default_rng(8).normal(size=(5, 3)))
    want = m(X).detach().numpy()
    np.testing.assert_allclose(np.asarray(graphc.vmap(m)(X).detach()), want, rtol=1e-12)
    c = eager.tensor([1.0, 2.0, 3.0], dtype=eager.float64)
    np.testing.assert_allclose(
        np.asarray(graphc.vmap(lambda x: x * c)(X)), X.numpy() * [1, 2, 3], rtol=1e-12
    )


def test_compiled_rules_match_the_interpreter():
    """The ops the rules emit (transposes, padded reshapes, prepended slices, shifted
    axes, the loop's cat) through the native backend."""
    rng = np.random.default_rng(9)
    x, idx = rng.normal(size=(4, 3, 5)), np.array([2, 0, 1])

    def f(a, i):
        h = a[1:, ::2].cumsum(1) + a.amax(0)[::2]
        h = eager.cat([h, a[:1, ::2]], 0)
        m = a.clone()
        m[a < 0] = 0.0
        return h.argmax(1), a[:, i].sum(), m.softmax(-1), a.gather(1, i.reshape(1, 3).expand(3, 3))

    vf = graphc.vmap(f, in_axes=(2, None))
    want = _run(vf._graphc_traced, [x, idx])
    got = graphc.compile(vf)(x, idx)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-12, atol=1e-12)
