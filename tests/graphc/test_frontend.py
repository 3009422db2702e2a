"""graphc's front end: tracing, the text/DOT forms, the verifier, the static
semantics (what a trace refuses to do and how it says so), graphc.where and
graphc.cond, constants captured at trace time, and the per-signature cache.
"""
from __future__ import annotations

import functools
import inspect
import re
import sys
import warnings

import numpy as np
import pytest

import eager
import graphc
from graphc.interpreter import interpret

HERE = "test_frontend.py"
RNG = np.random.default_rng(1234)


def _line(fn, offset: int) -> int:
    """Line number of the ``offset``-th line after ``def fn`` in this file."""
    return inspect.getsourcelines(fn)[1] + offset


def _strip_comments(text: str) -> str:
    return "\n".join(re.sub(r"\s+# .*$", "", ln) for ln in text.splitlines())


# ---------------------------------------------------------------------------
# the seeds, traced and printed


def L3(a, w1, w2, w3, w4):
    b = w1 * a
    c = w2 * a
    d = w3 * b + w4 * c
    return (10 - d).sum()


def mlp_step(x, y, w1, w2):
    y_pred = x.mm(w1).clamp(min=0).mm(w2)
    loss = (y_pred - y).pow(2).sum()
    return loss


def l3_args(dtype=np.float32):
    return [RNG.standard_normal((3, 3)).astype(dtype) for _ in range(5)]


def mlp_args(dtype=np.float32):
    return [RNG.standard_normal(s).astype(dtype)
            for s in [(64, 1000), (64, 10), (1000, 100), (100, 10)]]


L3_GOLDEN = """\
graph L3(a: f32[3,3], w1: f32[3,3], w2: f32[3,3], w3: f32[3,3], w4: f32[3,3]) {
  %5 = mul(w1, a) : f32[3,3]                          # test_frontend.py:@B
  %6 = mul(w2, a) : f32[3,3]                          # test_frontend.py:@C
  %7 = mul(w3, %5) : f32[3,3]                         # test_frontend.py:@D
  %8 = mul(w4, %6) : f32[3,3]                         # test_frontend.py:@D
  %9 = add(%7, %8) : f32[3,3]                         # test_frontend.py:@D
  %11 = sub(10.0, %9) : f32[3,3]                      # test_frontend.py:@R
  %12 = sum(%11, axis=(0, 1), keepdim=False) : f32[]  # test_frontend.py:@R
  return (%12)
}"""

MLP_GOLDEN = """\
graph mlp_step(x: f32[64,1000], y: f32[64,10], w1: f32[1000,100], w2: f32[100,10]) {
  %4 = matmul(x, w1) : f32[64,100]                    # test_frontend.py:@P
  %5 = clamp(%4, max=None, min=0.0) : f32[64,100]     # test_frontend.py:@P
  %6 = matmul(%5, w2) : f32[64,10]                    # test_frontend.py:@P
  %7 = sub(%6, y) : f32[64,10]                        # test_frontend.py:@L
  %9 = pow(%7, 2.0) : f32[64,10]                      # test_frontend.py:@L
  %10 = sum(%9, axis=(0, 1), keepdim=False) : f32[]   # test_frontend.py:@L
  return (%10)
}"""


def _fill(golden: str, **lines: int) -> str:
    for k, v in lines.items():
        golden = golden.replace(f"@{k}", str(v))
    assert "@" not in golden
    return golden


def test_golden_l3():
    g = graphc.trace(L3, *l3_args())
    want = _fill(L3_GOLDEN, B=_line(L3, 1), C=_line(L3, 2), D=_line(L3, 3), R=_line(L3, 4))
    assert str(g) == want


def test_golden_mlp_step():
    g = graphc.trace(mlp_step, *mlp_args())
    want = _fill(MLP_GOLDEN, P=_line(mlp_step, 1), L=_line(mlp_step, 2))
    assert str(g) == want


def test_golden_without_comments_and_float64():
    g = graphc.trace(L3, *l3_args(np.float64))
    assert _strip_comments(str(g)) == _strip_comments(
        L3_GOLDEN.replace("f32", "f64"))
    g = graphc.trace(mlp_step, *mlp_args(np.float64))
    assert _strip_comments(str(g)) == _strip_comments(MLP_GOLDEN.replace("f32", "f64"))


def test_comment_format_is_source_provenance():
    g = graphc.trace(L3, *l3_args())
    lines = str(g).splitlines()
    body = [ln for ln in lines if ln.startswith("  %")]
    assert len(body) == 7
    for ln in body:
        m = re.fullmatch(r"(  %\d+ = \S.*?) +# (\S+):(\d+)", ln)
        assert m, ln
        assert m.group(2) == HERE
        # the comment starts in a fixed column unless the instruction is longer
        assert ln.index("#") == max(54, len(m.group(1)) + 2)
    # the provenance is also on the nodes, with the role and the creating transform
    for nid in g.node_ids():
        d = g[nid]
        if d["op"] == "input":
            assert d["src"] == ""
            continue
        assert d["src"].startswith(HERE + ":") and d["role"] == "forward" and d["by"] == "trace"


def test_seeds_interpret_like_eager():
    args = l3_args(np.float64)
    (got,) = interpret(graphc.trace(L3, *args), *args)
    want = L3(*[eager.from_numpy(a) for a in args])
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-14)
    args = mlp_args(np.float64)
    (got,) = interpret(graphc.trace(mlp_step, *args), *args)
    x, y, w1, w2 = args
    np.testing.assert_allclose(got, ((np.maximum(x @ w1, 0) @ w2 - y) ** 2).sum(), rtol=1e-12)


def test_text_dot_json_are_deterministic():
    args = l3_args()
    g1, g2 = graphc.trace(L3, *args), graphc.trace(L3, *l3_args())
    assert str(g1) == str(g2)
    assert g1.to_dot() == g2.to_dot()
    assert g1.to_json() == graphc.trace(L3, *args).to_json()
    cf = graphc.compile(L3)
    assert cf.ir(*args) == str(g1) == cf.ir(*args, stage="traced")
    assert str(cf.graph(*args)) == str(g1)


def test_header_names_and_kinds_of_values():
    def f(x, params, n):
        return x * params["w"] + params["b"][0] * n

    x = np.ones(3, np.float32)
    g = graphc.trace(f, x, {"w": x, "b": [np.float32(2.0)]}, 4)
    head = str(g).splitlines()[0]
    assert head == "graph f(x: f32[3], params_b_0: f32[], params_w: f32[3]) {"
    assert g.input_names == ["x", "params_b_0", "params_w"]
    # the Python scalar 4 is static: baked in as a literal, not an input
    assert "4.0" in str(g)


def test_text_forms_of_consts_and_attrs():
    c = np.arange(6, dtype=np.float64).reshape(2, 3)

    def f(x, i):
        return (x + c).sum(1, keepdim=True), x[i, ::2], x.to(np.float32), x > np.inf

    g = graphc.trace(f, np.ones((2, 3)), np.array([1, 0]))
    text = str(g)
    assert re.search(r"%\d+ = const <f64\[2,3\]> : f64\[2,3\]", text)
    assert "sum(%3, axis=(1,), keepdim=True) : f64[2,1]" in text
    assert "getitem(x, i, index=((t, 0), (s, None, None, 2))) : f64[2,2]" in text
    assert "cast(x, dtype=float32) : f32[2,3]" in text
    assert "gt(x, inf) : bool[2,3]" in text
    assert re.search(r"return \(%\d+, %\d+, %\d+, %\d+\)", text)


# ---------------------------------------------------------------------------
# DOT


def _parse_dot(dot: str):
    lines = dot.splitlines()
    assert re.fullmatch(r'digraph "[^"]*" \{', lines[0])
    assert lines[-1] == "}"
    nodes, edges, outs = {}, [], []
    for ln in lines[1:-1]:
        s = ln.strip()
        assert s.endswith(";"), ln
        # every quoted string is closed and uses only DOT escapes
        for q in re.findall(r'"((?:[^"\\]|\\.)*)"', s):
            assert not re.search(r"\\[^n\"\\]", q), q
        assert s.count('"') % 2 == 0 or '\\"' in s, ln
        if m := re.fullmatch(r'n(\d+) \[label="((?:[^"\\]|\\.)*)", (.*)\];', s):
            nodes[int(m.group(1))] = m.group(2)
        elif m := re.fullmatch(r'n(\d+) -> n(\d+) \[label="(\d+)", fontsize=8\];', s):
            edges.append((int(m.group(1)), int(m.group(2)), int(m.group(3))))
        elif m := re.fullmatch(r"n(\d+) -> out(\d+);", s):
            outs.append((int(m.group(1)), int(m.group(2))))
        else:
            assert re.fullmatch(r'(rankdir=TB|node \[.*\]|out\d+ \[label="out\[\d+\]", '
                                r'shape=plaintext\]);', s), ln
    return nodes, edges, outs


def test_dot_has_every_node_and_edge():
    for g in (graphc.trace(L3, *l3_args()), graphc.trace(mlp_step, *mlp_args()),
              graphc.trace(lambda x: (x * x, x), np.ones(2))):
        dot = g.to_dot()
        nodes, edges, outs = _parse_dot(dot)
        assert sorted(nodes) == g.node_ids()
        want = sorted((o, n, pos) for n in g.node_ids()
                      for pos, o in enumerate(g[n]["operands"]))
        assert sorted(edges) == want
        assert outs == [(o, i) for i, o in enumerate(g.outputs)]
        for nid, label in nodes.items():
            d = g[nid]
            ty = graphc.ir.type_str(d["shape"], d["dtype"])
            # a real DOT line break (\n), not an escaped backslash
            assert label.endswith("\\n" + ty) and "\\\\" not in label, label
            if d["op"] == "input":
                assert label.startswith(d["attrs"]["name"])
            elif d["op"] not in ("const",):
                assert label.startswith(f"%{nid} {d['op']}")


def test_dot_multi_edge_and_styles():
    g = graphc.trace(lambda x: x * x, np.ones(2))
    nodes, edges, _ = _parse_dot(g.to_dot())
    mul = next(n for n in g.node_ids() if g[n]["op"] == "mul")
    assert sorted(e for e in edges if e[1] == mul) == [(0, mul, 0), (0, mul, 1)]
    dot = g.to_dot()
    assert re.search(r"n0 \[label=.*shape=ellipse", dot)
    assert re.search(rf"n{mul} \[label=.*penwidth=2\];", dot)


def test_dot_escapes_names():
    g = graphc.trace(lambda x: x + 1, np.ones(2))
    g.name = 'we"ird\\name'
    g.nx.nodes[0]["attrs"]["name"] = 'a"b'
    dot = g.to_dot()
    assert dot.splitlines()[0] == 'digraph "we\\"ird\\\\name" {'
    assert 'label="a\\"b\\nf64[2]"' in dot


# ---------------------------------------------------------------------------
# the verifier


def _tampered(fn):
    g = graphc.trace(lambda x, y: (x * y).sum(0), np.ones((2, 3)), np.ones(3))
    mul = next(n for n in g.node_ids() if g[n]["op"] == "mul")
    fn(g, mul)
    return g


@pytest.mark.parametrize("what, tamper, pattern", [
    ("shape", lambda g, n: g.nx.nodes[n].update(shape=(2, 4)),
     r"recorded type f64\[2,4\] but the shape rule derives f64\[2,3\]"),
    ("dtype", lambda g, n: g.nx.nodes[n].update(dtype="float32"),
     r"recorded type f32\[2,3\] but the shape rule derives f64\[2,3\]"),
    ("arity", lambda g, n: g.set_operands(n, [0]), r"mul takes 2 operands, got 1"),
    ("attrs", lambda g, n: g.nx.nodes[n]["attrs"].update(axis=0), r"mul expects attrs \[\]"),
    ("unknown op", lambda g, n: g.nx.nodes[n].update(op="frobnicate"), r"unknown op 'frobnicate'"),
    ("edges", lambda g, n: g.nx.add_edge(1, n, key=2), r"edges .* do not match the operand list"),
    ("cycle", lambda g, n: g.set_operands(n, [n + 1, 1]), r"the graph has a cycle"),
    ("output", lambda g, n: g.outputs.append(99), r"output %99 does not exist"),
    ("const", lambda g, n: g.nx.nodes[n].update(op="const", attrs={"value": np.ones(2)}),
     r"const value does not match"),
])
def test_verifier_names_node_and_pass(what, tamper, pattern):
    g = _tampered(tamper)
    with pytest.raises(graphc.GraphVerificationError, match=pattern) as ei:
        graphc.verify(g, "my_pass")
    msg = str(ei.value)
    assert "after pass 'my_pass'" in msg
    if what not in ("cycle", "output"):
        assert re.search(r"at %2 = \w+\(", msg), msg


def test_verifier_accepts_traced_graphs():
    for g in (graphc.trace(L3, *l3_args()), graphc.trace(mlp_step, *mlp_args())):
        assert g.verify("again") is g


# ---------------------------------------------------------------------------
# static semantics: what tracing refuses, and how it says so

X = np.linspace(-1, 1, 6).astype(np.float32).reshape(2, 3)


def branchy(x, y):
    if x.sum() > 0:
        return x * y
    return x - y


def test_if_on_traced_value():
    with pytest.raises(graphc.TracerBoolConversionError) as ei:
        graphc.compile(branchy)(X, X)
    err = ei.value
    assert isinstance(err, TypeError) and isinstance(err, graphc.TracerError)
    msg = str(err)
    assert f"{HERE}:{_line(branchy, 1)}" in msg
    assert "argument x," in msg and "argument y" not in msg and "arguments" not in msg
    assert "graphc.where" in msg and "graphc.cond" in msg
    assert "static_argnums" in msg and "eagerly" in msg and "__wrapped__" in msg
    # the same function runs eagerly
    eager_out = graphc.compile(branchy).__wrapped__(eager.from_numpy(X), eager.from_numpy(X))
    np.testing.assert_array_equal(eager_out.numpy(), X - X if X.sum() <= 0 else X * X)


def test_bool_error_names_every_argument_it_depends_on():
    def f(x, params):
        while (x * params["w"]).max() > 0:
            x = x - 1
        return x

    with pytest.raises(graphc.TracerBoolConversionError,
                       match=r"depends on arguments params\['w'\], x,"):
        graphc.trace(f, X, {"w": X})


def test_short_circuit_on_traced_value():
    with pytest.raises(graphc.TracerBoolConversionError):
        graphc.trace(lambda x: (x > 0).any() and x, X)
    with pytest.raises(graphc.TracerBoolConversionError):
        graphc.trace(lambda x: x if x.max() > 0 else -x, X)


@pytest.mark.parametrize("what, fn, cls", [
    ("bool()", lambda x: bool(x.sum()), graphc.TracerBoolConversionError),
    ("int()", lambda x: int(x.sum()), graphc.ConcretizationTypeError),
    ("float()", lambda x: float(x.sum()), graphc.ConcretizationTypeError),
    ("complex()", lambda x: complex(x.sum()), graphc.ConcretizationTypeError),
    (".item()", lambda x: x.sum().item(), graphc.ConcretizationTypeError),
    (".tolist()", lambda x: x.tolist(), graphc.ConcretizationTypeError),
    (".numpy()", lambda x: x.numpy(), graphc.ConcretizationTypeError),
    ("as an index", lambda x: list(range(10))[x.sum().long()], graphc.ConcretizationTypeError),
    ("as an index", lambda x: range(x.sum().long()), graphc.ConcretizationTypeError),
    ("formatting", lambda x: f"{x.sum():.3f}", graphc.ConcretizationTypeError),
])
def test_concretization_errors(what, fn, cls):
    with pytest.raises(cls) as ei:
        graphc.compile(fn)(X)
    assert isinstance(ei.value, TypeError) and isinstance(ei.value, graphc.TracerError)
    msg = str(ei.value)
    assert what in msg and "needs a concrete value" in msg
    assert "argument x" in msg and f"{HERE}:" in msg and "graphc.where" in msg


@pytest.mark.parametrize("what, fn", [
    ("np.exp", lambda x: np.exp(x)),
    ("np.asarray", lambda x: np.asarray(x)),
    ("np.array", lambda x: np.array(x)),
    ("np.sum", lambda x: np.sum(x)),
    ("np.add tracer first", lambda x: np.add(x, 1.0)),
    ("np.maximum", lambda x: np.maximum(x, 0)),
    ("np.where", lambda x: np.where(x > 0, x, 0)),
    ("np.concatenate", lambda x: np.concatenate([x, x])),
    ("x.__array__", lambda x: x.__array__()),
])
def test_numpy_on_a_tracer_is_an_error(what, fn):
    with pytest.raises(graphc.TracerArrayConversionError) as ei:
        graphc.trace(fn, X)
    msg = str(ei.value)
    assert "argument x" in msg and f"{HERE}:" in msg and "numpy" in msg
    assert isinstance(ei.value, TypeError)


def test_ndarray_on_the_left_of_an_operator_is_traced():
    """``W + x`` with a numpy W: numpy hands the op to the tracer; W becomes a const."""
    W = np.arange(6, dtype=np.float32).reshape(2, 3)
    M = np.ones((4, 2), np.float32)

    def f(x):
        return W + x, W - x, W * x, W / (x + 2), W ** x.abs(), W < x, W == x, M @ x, \
            np.float32(3) * x

    cf = graphc.compile(f)
    for x in (X, X * 3):
        # eager is the reference: there numpy defers to the tensor's reflected operator
        for got, want in zip(cf(x), f(eager.from_numpy(x))):
            assert got.dtype == want.numpy().dtype
            # native pow is within 1 ULP of numpy's (docs/backend-accuracy.md)
            np.testing.assert_allclose(got, want.numpy(), rtol=3e-7)
        np.testing.assert_array_equal(cf(x)[0], W + x)
        np.testing.assert_array_equal(cf(x)[7], M @ x)
    g = cf.graph(X)
    assert g.op_counts()["input"] == 1 and "const" in g.op_counts()
    assert all(g[o]["op"] != "const" for o in g.outputs)


def test_leaked_tracer():
    leaked = []

    def f(x):
        leaked.append(x * 2)
        return x

    graphc.compile(f)(X)
    (t,) = leaked
    assert "leaked" in repr(t)
    for use in (lambda: t + 1, lambda: t.exp(), lambda: bool(t), lambda: np.asarray(t),
                lambda: t.sum()):
        with pytest.raises(graphc.LeakedTracerError) as ei:
            use()
        msg = str(ei.value)
        assert isinstance(ei.value, RuntimeError)
        assert "trace of f" in msg and "after that trace ended" in msg and f"{HERE}:" in msg
        assert "return it from the function" in msg
    # a leaked tracer used inside another trace
    with pytest.raises(graphc.LeakedTracerError):
        graphc.compile(lambda y: y + t)(X)


def test_wrong_number_of_arguments_names_the_argument():
    cf = graphc.compile(lambda x, y: x + y)
    with pytest.raises(graphc.SignatureError, match=r"missing a required argument: 'y'") as ei:
        cf(X)
    assert isinstance(ei.value, TypeError)
    with pytest.raises(graphc.SignatureError, match="too many positional arguments"):
        cf(X, X, X)
    np.testing.assert_array_equal(cf(X, y=X), X + X)       # bound by the signature
    np.testing.assert_array_equal(cf(y=X, x=X), X + X)
    assert cf.cache_info().traces == 1
    with pytest.raises(graphc.SignatureError, match="multiple values for argument 'x'"):
        cf(X, x=X)
    with pytest.raises(TypeError, match="keyword-only arguments"):
        graphc.compile(lambda x, *, k=1: x * k)(X, k=2)

    def with_default(x, scale=3.0):
        return x * scale

    np.testing.assert_array_equal(graphc.compile(with_default)(X), X * 3.0)
    np.testing.assert_array_equal(graphc.compile(lambda *xs: xs[0] + xs[-1])(X, X, X), X + X)


@pytest.mark.parametrize("arg, path, typ", [
    ("hello", "y", "str"),
    (object(), "y", "object"),
    ({1, 2}, "y", "set"),
    ({"a": [X, "s"]}, r"y\['a'\]\[1\]", "str"),
    ((X, (X, b"raw")), r"y\[1\]\[1\]", "bytes"),
])
def test_unsupported_argument_types_name_the_argument(arg, path, typ):
    with pytest.raises(graphc.SignatureError, match=rf"argument {path} has unsupported type {typ}"):
        graphc.compile(lambda x, y: x)(X, arg)


def test_unsupported_dtype_names_the_argument():
    with pytest.raises(graphc.SignatureError, match=r"argument z: numpy dtype complex128"):
        graphc.compile(lambda x, z: x)(X, np.ones(2, complex))


def test_boolean_mask_indexing_points_to_where():
    with pytest.raises(TypeError) as ei:
        graphc.compile(lambda x: x[x > 0].sum())(X)
    msg = str(ei.value)
    assert "boolean-mask" in msg and "graphc.where" in msg and f"{HERE}:" in msg


def test_masked_assignment_is_functionalized_into_where():
    def relu_by_mask(x):
        y = x * 1
        y[y < 0] = 0
        return y

    cf = graphc.compile(relu_by_mask)
    np.testing.assert_array_equal(cf(X), np.maximum(X, 0))
    assert "where" in cf.graph(X).op_counts()
    np.testing.assert_array_equal(relu_by_mask(eager.from_numpy(X.copy())).numpy(),
                                  np.maximum(X, 0))


def test_an_assigned_value_that_does_not_broadcast_is_a_runtime_error_both_ways():
    """PyTorch's type, as eager raises it; tracing raised ValueError (found by the fuzzer)."""
    def assign(x, v):
        y = x * 1
        y[0:2] = v
        return y

    x, v = np.zeros((2, 2)), np.zeros((3, 2, 2))
    with pytest.raises(RuntimeError, match="broadcast"):
        assign(eager.from_numpy(x), eager.from_numpy(v))
    with pytest.raises(RuntimeError, match=r"setitem: shape mismatch.*\[while tracing"):
        graphc.compile(assign)(x, v)


def test_tracer_metadata_is_static():
    seen = {}

    def f(x):
        seen.update(shape=x.shape, dtype=x.dtype, ndim=x.ndim, len=len(x),
                    rg=x.requires_grad, float=x.is_floating_point())
        if x.shape[0] == 2:                      # control flow on shapes is fine
            return x.reshape(-1)
        return x

    out = graphc.compile(f)(X)
    assert out.shape == (6,)
    assert seen == dict(shape=(2, 3), dtype=eager.float32, ndim=2, len=2, rg=False, float=True)


# ---------------------------------------------------------------------------
# graphc.where and graphc.cond


def test_where_is_one_node_and_computes_both_sides():
    def f(x):
        return graphc.where(x > 0, x.log(), 0.0)

    cf = graphc.compile(f)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = np.where(X > 0, np.log(X), 0.0).astype(np.float32)
    np.testing.assert_array_equal(cf(X), want)
    ops = cf.graph(X).op_counts()
    assert ops["where"] == 1 and ops["log"] == 1 and ops["gt"] == 1
    # outside a trace it is eager.where
    got = graphc.where(eager.from_numpy(X) > 0, eager.from_numpy(X), 0.0)
    assert isinstance(got, eager.Tensor)
    np.testing.assert_array_equal(got.numpy(), np.where(X > 0, X, 0))


def test_cond_traces_both_branches_and_selects():
    calls = {"t": 0, "f": 0}

    def true_fn(a, b):
        calls["t"] += 1
        return {"v": a.exp() * b, "n": (a.sum(),)}

    def false_fn(a, b):
        calls["f"] += 1
        return {"v": a.sin() - b, "n": (a.mean(),)}

    def f(x, y):
        return graphc.cond(x.sum() > 0, true_fn, false_fn, x, y)

    cf = graphc.compile(f)
    pos, neg = np.abs(X) + 0.1, -np.abs(X) - 0.1
    for x in (pos, neg, pos):
        out = cf(x, X)
        ex, eX = eager.from_numpy(x), eager.from_numpy(X)
        want = true_fn(ex, eX) if x.sum() > 0 else false_fn(ex, eX)
        np.testing.assert_allclose(out["v"], want["v"].numpy(), rtol=1e-6)
        np.testing.assert_allclose(out["n"][0], want["n"][0].numpy(), rtol=1e-6)
        assert isinstance(out["n"], tuple)
    assert cf.cache_info().traces == 1
    g = cf.graph(pos, X)
    ops = g.op_counts()
    assert ops["exp"] == 1 and ops["sin"] == 1 and ops["where"] == 2
    # traced once each, then called once each by the eager reference above
    assert calls == {"t": 1 + 2, "f": 1 + 1}


def test_cond_with_concrete_predicate_runs_one_branch():
    calls = []

    def f(x, flag):
        return graphc.cond(flag, lambda a: calls.append("t") or a.exp(),
                           lambda a: calls.append("f") or a.sin(), x)

    cf = graphc.compile(f, static_argnums=(1,))
    np.testing.assert_allclose(cf(X, True), np.exp(X), rtol=1e-6)
    assert calls == ["t"]
    ops = cf.graph(X, True).op_counts()
    assert "sin" not in ops and "where" not in ops
    np.testing.assert_allclose(cf(X, False), np.sin(X), rtol=1e-6)
    assert calls == ["t", "f"]
    # outside a trace: numpy / eager scalar predicates, one branch only
    assert graphc.cond(np.array(True), lambda: 1, lambda: 1 / 0) == 1
    assert graphc.cond(eager.tensor(0.0), lambda: 1 / 0, lambda: 2) == 2
    with pytest.raises(ValueError, match="pred must be a scalar"):
        graphc.cond(np.array([True, False]), lambda: 1, lambda: 2)


def test_cond_predicate_forms_inside_a_trace():
    # a float 0-d predicate means "nonzero"; a one-element predicate is fine
    cf = graphc.compile(lambda x: graphc.cond(x.sum(), lambda a: a + 1, lambda a: a - 1, x))
    np.testing.assert_array_equal(cf(X), X + 1 if X.sum() != 0 else X - 1)
    np.testing.assert_array_equal(cf(np.zeros_like(X)), np.zeros_like(X) - 1)
    cf = graphc.compile(lambda x: graphc.cond(x[:1, 0] > 0, lambda a: a, lambda a: -a, x))
    np.testing.assert_array_equal(cf(X), X if X[0, 0] > 0 else -X)
    with pytest.raises(ValueError, match=r"pred must be a scalar, got shape \[2, 3\]"):
        graphc.compile(lambda x: graphc.cond(x > 0, lambda a: a, lambda a: a, x))(X)


@pytest.mark.parametrize("t_fn, f_fn, pattern", [
    (lambda a: (a, a), lambda a: a,
     r"true_fn returned structure \(\*, \*\) but false_fn returned \*"),
    (lambda a: [a], lambda a: (a,), r"structure"),
    (lambda a: a, lambda a: a.sum(), r"output leaf 0 has shape \[2, 3\] in true_fn but \[\]"),
    (lambda a: a, lambda a: a.double(), r"output leaf 0 has dtype float32 in true_fn but float64"),
    (lambda a: {"p": a}, lambda a: {"q": a}, r"structure"),
])
def test_cond_branch_mismatch(t_fn, f_fn, pattern):
    with pytest.raises(TypeError, match=pattern):
        graphc.compile(lambda x: graphc.cond(x.sum() > 0, t_fn, f_fn, x))(X)


# ---------------------------------------------------------------------------
# closed-over values are constants captured at trace time


def test_closed_over_array_is_captured_at_trace_time():
    W = np.ones(3, np.float32)
    cf = graphc.compile(lambda x: x * W)
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(cf(x), x)
    W[:] = 5.0                                  # documented: the trace keeps its copy
    np.testing.assert_array_equal(cf(x), x)
    const = next(n for n in cf.graph(x).node_ids() if cf.graph(x)[n]["op"] == "const")
    v = cf.graph(x)[const]["attrs"]["value"]
    np.testing.assert_array_equal(v, np.ones(3))
    assert not v.flags.writeable
    # a new signature re-traces and sees the new value
    x2 = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(cf(x2), x2 * 5.0)
    np.testing.assert_array_equal(cf(x), x)      # the old entry still holds the old copy
    assert cf.cache_info().traces == 2


def test_closed_over_tensors_are_live_inputs():
    """An eager tensor the function reads by name is a graph input read at every call:
    updates in place and rebinding are seen without re-tracing (graphc.capture)."""
    state = {"W": eager.tensor([1.0, 2.0, 3.0])}
    cf = graphc.compile(lambda x: x + state["W"])
    x = np.zeros(3, np.float32)
    np.testing.assert_array_equal(cf(x), [1, 2, 3])
    state["W"] = eager.tensor([10.0, 20.0, 30.0])
    np.testing.assert_array_equal(cf(x), [10, 20, 30])
    state["W"].mul_(2)
    np.testing.assert_array_equal(cf(x), [20, 40, 60])
    assert cf.cache_info().traces == 1
    assert "state_W: f32[3]" in str(cf.graph(x))      # a graph input, named by its path
    state["W"] = eager.tensor([1.0, 2.0])            # a new shape re-traces, with the reason
    with pytest.raises(RuntimeError, match="must match|broadcast"):
        cf(x)
    assert "state['W']" in cf.recompile_reasons[-1]


def test_same_closed_over_array_is_one_const():
    W = np.ones((2, 3), np.float32)
    g = graphc.trace(lambda x: x * W + W - W.sum(), X)
    consts = [n for n in g.node_ids() if g[n]["op"] == "const" and g[n]["shape"] == (2, 3)]
    assert len(consts) == 1


# ---------------------------------------------------------------------------
# the cache


def test_repeated_signature_runs_no_python():
    calls = []

    @graphc.compile
    def f(x, y):
        calls.append(1)
        return x * y + 1

    a, b = np.ones(3, np.float32), np.full(3, 2.0, np.float32)
    for _ in range(5):
        np.testing.assert_array_equal(f(a, b), a * b + 1)
    assert len(calls) == 1
    assert f.cache_info() == graphc.CacheInfo(hits=4, misses=1, traces=1, entries=1)
    f(a * 3, b)                                  # new values, same signature
    assert len(calls) == 1 and f.cache_info().hits == 5
    f.graph(a, b), f.ir(a, b)                    # inspection does not re-trace
    assert len(calls) == 1
    assert f.recompile_reasons == []


def test_recompile_reasons_name_argument_and_field():
    cf = graphc.compile(lambda x, y, n: x * y * n)
    x, y = np.ones(3, np.float32), np.ones(3, np.float32)
    cf(x, y, 2)
    cf(np.ones(4, np.float32), y[:1], 2)
    cf(x, y.astype(np.float64), 2)
    cf(x, y, 3)
    cf(x, y, 3.0)
    r = cf.recompile_reasons
    assert len(r) == 4 and cf.cache_info().traces == 5
    assert "argument x: shape [3] -> [4]" in r[0] and "argument y: shape [3] -> [1]" in r[0]
    assert r[1].endswith("argument y: dtype float32 -> float64")
    assert r[2].endswith("argument n: static value 2 -> static value 3")
    assert re.search(r"argument n: static value [23] -> static value 3\.0$", r[3])
    assert all(s.startswith("re-traced <lambda>: ") for s in r)
    text = cf.explain()
    assert "5 cached signature(s)" in text and all(s in text for s in r)


def test_recompile_reason_for_structure_and_tensors():
    cf = graphc.compile(lambda p: p["w"] * 2)
    cf({"w": X})
    cf({"w": X, "b": X})
    assert "argument p: structure" in cf.recompile_reasons[-1]
    cf2 = graphc.compile(lambda t: t * 2)
    cf2(eager.from_numpy(X))
    cf2(eager.from_numpy(X.astype(np.float64)))
    assert cf2.recompile_reasons[-1].endswith("argument t: dtype float32 -> float64")


def test_static_argnums_values_are_in_the_key():
    calls = []

    def f(x, n, mode):
        calls.append((n, mode))
        return x * n if mode == "mul" else x + n

    cf = graphc.compile(f, static_argnums=(1, 2))
    xi = np.arange(3)
    np.testing.assert_array_equal(cf(xi, 2, "mul"), xi * 2)
    np.testing.assert_array_equal(cf(xi, 2, "add"), xi + 2)
    np.testing.assert_array_equal(cf(xi, 2, "mul"), xi * 2)
    # 2 and 2.0 are equal and hash alike, but trace differently (int vs float result)
    out = cf(xi, 2.0, "mul")
    assert out.dtype == np.float32 and cf(xi, 2, "mul").dtype == xi.dtype
    assert calls == [(2, "mul"), (2, "add"), (2.0, "mul")]
    assert "argument mode: static argument value 'mul' -> static argument value 'add'" in \
        cf.recompile_reasons[0]
    # a single int is accepted, and a static arg is not a graph input
    cf1 = graphc.compile(f, static_argnums=2)
    assert cf1.graph(xi, 5, "mul").input_names == ["x"]


def test_unhashable_static_argument():
    cf = graphc.compile(lambda x, cfg: x * len(cfg), static_argnums=(1,))
    with pytest.raises(graphc.SignatureError, match=r"static argument cfg \(position 1\) must be "
                                                    r"hashable, got list"):
        cf(X, [1, 2])
    np.testing.assert_array_equal(cf(X, (1, 2)), X * 2)


def test_recompile_limit_warns_once():
    cf = graphc.compile(lambda x: x + 1, recompile_limit=3)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in range(1, 8):
            cf(np.ones(n, np.float32))
    runtime = [x for x in w if issubclass(x.category, RuntimeWarning)]
    assert len(runtime) == 1
    msg = str(runtime[0].message)
    assert "traced 4 times (limit 3)" in msg and "recompile_limit" in msg
    assert "argument x: shape" in msg
    assert cf.cache_info().entries == 7
    assert runtime[0].filename.endswith(HERE)   # points at the user's call


def test_numpy_in_numpy_out_tensors_in_tensors_out():
    cf = graphc.compile(lambda x, y: (x * y, x.sum()))
    a, b = np.ones((2, 2), np.float32), np.full((2, 2), 3.0, np.float32)
    out = cf(a, b)
    assert all(type(o) is np.ndarray for o in out)
    assert out[1].shape == () and out[0].dtype == np.float32
    out = cf(eager.from_numpy(a), eager.from_numpy(b))
    assert all(type(o) is eager.Tensor for o in out)
    assert out[0].dtype == eager.float32 and not out[0].requires_grad
    np.testing.assert_array_equal(out[0].numpy(), a * b)
    mixed = cf(a, eager.from_numpy(b))
    assert all(type(o) is eager.Tensor for o in mixed)


def test_nested_arguments_and_outputs():
    def f(params, batch, n):
        h = batch["x"] @ params[0]["w"] + params[0]["b"]
        return {"h": h, "aux": [h.sum(), None, n, (h.max(1).values,)]}, params[1]

    w, b = RNG.standard_normal((3, 2)), RNG.standard_normal(2)
    x = RNG.standard_normal((4, 3))
    cf = graphc.compile(f)
    out, passthrough = cf([{"w": w, "b": b}, 7.5], {"x": x}, 3)
    assert passthrough == 7.5
    assert set(out) == {"h", "aux"} and isinstance(out["aux"], list)
    h = x @ w + b
    np.testing.assert_allclose(out["h"], h, rtol=1e-14)
    assert out["aux"][1] is None and out["aux"][2] == 3
    np.testing.assert_allclose(out["aux"][0], h.sum(), rtol=1e-14)
    assert isinstance(out["aux"][3], tuple)
    np.testing.assert_allclose(out["aux"][3][0], h.max(1))
    g = cf.graph([{"w": w, "b": b}, 7.5], {"x": x}, 3)
    assert g.input_names == ["params_0_b", "params_0_w", "batch_x"]
    # namedtuples (e.g. max(dim)) keep their type
    res = graphc.compile(lambda x: x.max(1))(x)
    assert type(res).__name__ == "MaxResult"
    np.testing.assert_array_equal(res.indices, x.argmax(1))


def test_compile_api_surface():
    def f(x):
        """doc"""
        return x * 2

    cf = graphc.compile(f)
    assert cf.__wrapped__ is f and cf.__name__ == "f" and cf.__doc__ == "doc"
    assert repr(cf) == "<graphc.CompiledFunction f (0 signatures)>"
    with pytest.raises(ValueError, match="unknown stage 'nope'; available: traced"):
        cf.ir(X, stage="nope")
    assert "mul(x, 2.0)" in cf.ir(X, stage="optimized")
    assert isinstance(cf.graph(X), graphc.Graph)
    assert graphc.compile(static_argnums=(1,))(lambda x, n: x * n)(X, 2).dtype == np.float32
    with pytest.raises(TypeError, match="expects a callable"):
        graphc.compile(3)
    # callable objects and partials have no __name__ of their own
    part = graphc.compile(functools.partial(lambda x, k: x * k, k=2.0))
    np.testing.assert_array_equal(part(X), X * 2)
    assert part.__name__ == "partial"

    class Model:
        def __init__(self):
            self.w = np.full(3, 2.0, np.float32)

        @graphc.compile(static_argnums=0)     # self is static: its arrays become consts
        def forward(self, x):
            return x * self.w

    np.testing.assert_array_equal(Model().forward(np.ones(3, np.float32)), [2, 2, 2])


# ---------------------------------------------------------------------------
# long chains: every walk is iterative


def test_ten_thousand_node_chain_without_recursion():
    def chain(x):                  # 5,000 ops and 5,000 scalar consts
        for i in range(5000):
            x = x * 1.0001 if i % 2 else x + 0.5
        return x

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(500)     # far below the chain's length: proves the walks iterate
    try:
        x = np.zeros(2, np.float64)
        g = graphc.trace(chain, x)
        assert len(g) >= 10_000
        graphc.verify(g, "chain")
        assert g.op_counts() == {"add": 2500, "const": 5000, "input": 1, "mul": 2500}
        text = str(g)
        assert len([ln for ln in text.splitlines() if ln.startswith("  %")]) == 5000
        assert g.to_dot().count(" -> ") == 2 * 5000 + 1
        g2 = graphc.Graph.from_json(g.to_json())
        assert str(g2) == text
        (got,) = interpret(g2, x)
        want = x.copy()
        for i in range(5000):
            want = want * 1.0001 if i % 2 else want + 0.5
        np.testing.assert_allclose(got, want, rtol=1e-12)
        assert sys.getrecursionlimit() == 500
    finally:
        sys.setrecursionlimit(old)


# ---------------------------------------------------------------------------
# the text grammar (docs/ir.md) holds for every op's graph

_TYPE = r"(?:f16|f32|f64|i8|i16|i32|i64|u8|bool)\[(?:\d+(?:,\d+)*)?\]"
_ARGS = r"(?:[^()]|\([^()]*(?:\([^()]*\)[^()]*)*\))*"      # attrs nest tuples two deep
_INSTR = re.compile(rf"  %\d+ = (?:const <{_TYPE}>|[a-z_][a-z0-9_]*\({_ARGS}\)) : {_TYPE}(?: +# [^ ].*)?")
_HEAD = re.compile(rf"graph [A-Za-z_]\w*\((?:\w+: {_TYPE}(?:, \w+: {_TYPE})*)?\) \{{")


def test_text_grammar_for_every_op_sample():
    from eager.surface import _dispatch
    from eager.ops import OPS
    for name, op in sorted(OPS.items()):
        for inputs, attrs in op.samples():
            arrays = [np.asarray(a) for a in inputs]
            text = str(graphc.trace(lambda *xs: _dispatch(name, "X", xs, dict(attrs)), *arrays))
            lines = text.splitlines()
            assert _HEAD.fullmatch(lines[0]), lines[0]
            assert re.fullmatch(r"  return \((?:[^()]+)?\)", lines[-2]) and lines[-1] == "}"
            for ln in lines[1:-2]:
                assert _INSTR.fullmatch(ln), (name, ln)
                assert f"{name}(" in ln or ln.split(" = ")[1].startswith("const")


def test_inplace_update_of_an_argument_is_written_back():
    def step(w, g):
        w.sub_(g * 0.5)
        return (w * w).sum()

    w, g = np.ones(3), np.full(3, 2.0)
    cf = graphc.compile(step)
    assert cf(w, g) == 0.0
    np.testing.assert_array_equal(w, [0.0, 0.0, 0.0])
    assert cf(w, g) == 3.0
    np.testing.assert_array_equal(w, [-1.0, -1.0, -1.0])
    assert cf.cache_info().traces == 1
