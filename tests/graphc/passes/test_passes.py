"""The optimizer (graphc.passes): every rewrite rule, its exactness, the pass manager and
``graphc.bisect_passes``.

* Rule tests show the IR before and after one pass, for every pass and every
  simplify rule, and run both graphs through the interpreter on NaN, +-Inf, +-0.0,
  subnormal and huge inputs: a rule may not change a single bit of any result
  (NaN payloads aside).  Negative tests pin the rules that must NOT exist
  (x + 0.0, x * 0, x - x, ...).
* Constant folding computes in the node's dtype (float32 stays float32).
* CSE never merges nodes whose attributes differ (axis, keepdim, clamp bounds,
  0.0 vs -0.0, NaN payloads, dtypes); DCE keeps every kind of output.
* Seeded random multi-output programs give the interpreter's results when compiled
  with every pass, with each pass disabled and at every opt_level, with the verifier
  running between passes; and the optimized graph is bit-exact on special values.
* ``bisect_passes`` finds a deliberately broken pass registered by a test.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import eager
import graphc
import graphc.passes as P
from graphc.errors import GraphVerificationError
from graphc.ir import Graph, verify
from graphc.tools.bisect import BisectReport

F64, F32 = "float64", "float32"

# ---------------------------------------------------------------------------
# helpers


def build(inputs, body, name: str = "g") -> Graph:
    """A graph from (name, shape, dtype) inputs and ``body(g, *input_ids) -> output(s)``."""
    g = Graph(name)
    xs = [g.add_input(n, s, d) for n, s, d in inputs]
    outs = body(g, *xs)
    g.outputs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    verify(g)
    return g


def c(g: Graph, v, dtype=F64) -> int:
    return g.add_const(np.array(v, dtype=dtype))


def op(g: Graph, name: str, *operands, **attrs) -> int:
    return g.add_node(name, operands, attrs)


def text(sig: str, lines, ret: str) -> str:
    """IR text as the printer writes it; ``"code  # note"`` lines get the note column."""
    out = [f"graph g({sig}) {{"]
    for ln in lines:
        code, sep, note = ln.partition("  # ")
        code = "  " + code
        out.append(f"{code:<52}  # {note}" if sep else code)
    out += [f"  return ({ret})", "}"]
    return "\n".join(out)


def signature(g: Graph) -> str:
    return str(g).splitlines()[0][len("graph g("):-len(") {")]


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -3.0, 5e-324, 1e308,
                    -1e308, 2.5e-310])


def special_inputs(g: Graph, seed: int = 0) -> list:
    """Inputs drawn from NaN, +-Inf, +-0, +-1, subnormals and huge values (every special
    value appears in every float input of 13 or more elements)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in g.inputs:
        d = g.nx.nodes[i]
        shape, dt = tuple(d["shape"]), np.dtype(d["dtype"])
        n = int(np.prod(shape, dtype=np.int64))
        if dt.kind == "f":
            with np.errstate(over="ignore"):
                vals = np.resize(rng.permutation(SPECIAL), n).astype(dt)
        elif dt.kind == "b":
            vals = rng.random(n) < 0.5
        else:
            vals = rng.integers(-5, 6, size=n).astype(dt)
        out.append(vals.reshape(shape))
    return out


def assert_bits_equal(a, b, what: str = "") -> None:
    """Same dtype, shape, NaN positions, and identical bits elsewhere (signed zeros too)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, \
        f"{what}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    if a.dtype.kind != "f":
        assert np.array_equal(a, b), what
        return
    na, nb = np.isnan(a), np.isnan(b)
    assert np.array_equal(na, nb), f"{what}: NaN positions differ\n{a}\n{b}"
    ia = a[~na].view(f"u{a.itemsize}")
    ib = b[~nb].view(f"u{b.itemsize}")
    assert np.array_equal(ia, ib), f"{what}: bits differ\n{a[~na]}\n{b[~nb]}"


def run_pass(name: str, g: Graph):
    """(changed, graph after) for one pass run on a copy; the result must verify."""
    after = g.copy()
    changed = P.PASSES[name](after)
    verify(after, name)
    return changed, after


# ---------------------------------------------------------------------------
# simplify: every rule, IR before and after

X = [("x", (3,), F64)]
XM = [("x", (2, 3), F64)]

SIMPLIFY_RULES = {
    # name: (inputs, body, before lines, before ret, after lines, after ret)
    "x*1": (X, lambda g, x: op(g, "mul", x, c(g, 1.0)),
            ["%2 = mul(x, 1.0) : f64[3]"], "%2", [], "x"),
    "1*x": (X, lambda g, x: op(g, "mul", c(g, 1.0), x),
            ["%2 = mul(1.0, x) : f64[3]"], "%2", [], "x"),
    "x/1": (X, lambda g, x: op(g, "div", x, c(g, 1.0)),
            ["%2 = div(x, 1.0) : f64[3]"], "%2", [], "x"),
    "x+(-0.0)": (X, lambda g, x: op(g, "add", x, c(g, -0.0)),
                 ["%2 = add(x, -0.0) : f64[3]"], "%2", [], "x"),
    "(-0.0)+x": (X, lambda g, x: op(g, "add", c(g, -0.0), x),
                 ["%2 = add(-0.0, x) : f64[3]"], "%2", [], "x"),
    "x-0.0": (X, lambda g, x: op(g, "sub", x, c(g, 0.0)),
              ["%2 = sub(x, 0.0) : f64[3]"], "%2", [], "x"),
    "x**1": (X, lambda g, x: op(g, "pow", x, c(g, 1.0)),
             ["%2 = pow(x, 1.0) : f64[3]"], "%2", [], "x"),
    "x**2 -> x*x": (X, lambda g, x: op(g, "pow", x, c(g, 2.0)),
                    ["%2 = pow(x, 2.0) : f64[3]"], "%2",
                    ["%2 = mul(x, x) : f64[3]  # by simplify"], "%2"),
    "x*(-1) -> neg": (X, lambda g, x: op(g, "mul", x, c(g, -1.0)),
                      ["%2 = mul(x, -1.0) : f64[3]"], "%2",
                      ["%2 = neg(x) : f64[3]  # by simplify"], "%2"),
    "(-1)*x -> neg": (X, lambda g, x: op(g, "mul", c(g, -1.0), x),
                      ["%2 = mul(-1.0, x) : f64[3]"], "%2",
                      ["%2 = neg(x) : f64[3]  # by simplify"], "%2"),
    "neg(neg x)": (X, lambda g, x: op(g, "neg", op(g, "neg", x)),
                   ["%1 = neg(x) : f64[3]", "%2 = neg(%1) : f64[3]"], "%2", [], "x"),
    "transpose(transpose x)": (
        [("x", (2, 3, 4), F64)],
        lambda g, x: op(g, "transpose", op(g, "transpose", x, perm=(1, 2, 0)), perm=(0, 2, 1)),
        ["%1 = transpose(x, perm=(1, 2, 0)) : f64[3,4,2]",
         "%2 = transpose(%1, perm=(0, 2, 1)) : f64[3,2,4]"], "%2",
        ["%2 = transpose(x, perm=(1, 0, 2)) : f64[3,2,4]  # by simplify"], "%2"),
    "transpose(transpose x) composing to the identity": (
        XM, lambda g, x: op(g, "transpose", op(g, "transpose", x, perm=(1, 0)), perm=(1, 0)),
        ["%1 = transpose(x, perm=(1, 0)) : f64[3,2]",
         "%2 = transpose(%1, perm=(1, 0)) : f64[2,3]"], "%2",
        ["%2 = transpose(x, perm=(0, 1)) : f64[2,3]  # by simplify"], "%2"),
    "reshape(reshape x)": (
        XM, lambda g, x: op(g, "reshape", op(g, "reshape", x, shape=(6,)), shape=(3, 2)),
        ["%1 = reshape(x, shape=(6,)) : f64[6]", "%2 = reshape(%1, shape=(3, 2)) : f64[3,2]"],
        "%2", ["%2 = reshape(x, shape=(3, 2)) : f64[3,2]  # by simplify"], "%2"),
    "expand(expand x)": (
        [("x", (3, 1), F64)],
        lambda g, x: op(g, "expand", op(g, "expand", x, shape=(3, 4)), shape=(2, 3, 4)),
        ["%1 = expand(x, shape=(3, 4)) : f64[3,4]",
         "%2 = expand(%1, shape=(2, 3, 4)) : f64[2,3,4]"], "%2",
        ["%2 = expand(x, shape=(2, 3, 4)) : f64[2,3,4]  # by simplify"], "%2"),
    "reshape to the same shape": (XM, lambda g, x: op(g, "reshape", x, shape=(2, 3)),
                                  ["%1 = reshape(x, shape=(2, 3)) : f64[2,3]"], "%1", [], "x"),
    "expand to the same shape": (XM, lambda g, x: op(g, "expand", x, shape=(2, 3)),
                                 ["%1 = expand(x, shape=(2, 3)) : f64[2,3]"], "%1", [], "x"),
    "identity transpose": (XM, lambda g, x: op(g, "transpose", x, perm=(0, 1)),
                           ["%1 = transpose(x, perm=(0, 1)) : f64[2,3]"], "%1", [], "x"),
    "cast to the same dtype": (X, lambda g, x: op(g, "cast", x, dtype="float64"),
                               ["%1 = cast(x, dtype=float64) : f64[3]"], "%1", [], "x"),
    "copy": (X, lambda g, x: op(g, "copy", x), ["%1 = copy(x) : f64[3]"], "%1", [], "x"),
    "detach": (X, lambda g, x: op(g, "detach", x), ["%1 = detach(x) : f64[3]"], "%1", [], "x"),
    "sum of broadcast": (
        X, lambda g, x: op(g, "sum", op(g, "expand", x, shape=(4, 3)), axis=(0,),
                           keepdim=False),
        ["%1 = expand(x, shape=(4, 3)) : f64[4,3]",
         "%2 = sum(%1, axis=(0,), keepdim=False) : f64[3]"], "%2",
        ["%4 = mul(x, 4.0) : f64[3]  # by simplify",
         "%2 = add(%4, 0.0) : f64[3]  # by simplify"], "%2"),
    "sum of broadcast, keepdim": (
        [("x", (3, 1), F64)],
        lambda g, x: op(g, "sum", op(g, "expand", x, shape=(3, 4)), axis=(1,), keepdim=True),
        ["%1 = expand(x, shape=(3, 4)) : f64[3,4]",
         "%2 = sum(%1, axis=(1,), keepdim=True) : f64[3,1]"], "%2",
        ["%4 = mul(x, 4.0) : f64[3,1]  # by simplify",
         "%2 = add(%4, 0.0) : f64[3,1]  # by simplify"], "%2"),
    "sum of broadcast over some broadcast dims": (
        [("x", (1, 3), F64)],
        lambda g, x: op(g, "sum", op(g, "expand", x, shape=(2, 4, 3)), axis=(0,),
                        keepdim=False),
        ["%1 = expand(x, shape=(2, 4, 3)) : f64[2,4,3]",
         "%2 = sum(%1, axis=(0,), keepdim=False) : f64[4,3]"], "%2",
        ["%3 = reshape(x, shape=(1, 1, 3)) : f64[1,1,3]  # by simplify",
         "%4 = expand(%3, shape=(1, 4, 3)) : f64[1,4,3]  # by simplify",
         "%5 = reshape(%4, shape=(4, 3)) : f64[4,3]  # by simplify",
         "%7 = mul(%5, 2.0) : f64[4,3]  # by simplify",
         "%2 = add(%7, 0.0) : f64[4,3]  # by simplify"], "%2"),
    "where(c, x, x)": ([("c", (3,), "bool"), ("x", (3,), F64)],
                       lambda g, cc, x: op(g, "where", cc, x, x),
                       ["%2 = where(c, x, x) : f64[3]"], "%2", [], "x"),
    "where(constant c, x, y)": (
        [("x", (3,), F64), ("y", (3,), F64)],
        lambda g, x, y: op(g, "where", c(g, np.zeros(3, bool), "bool"), x, y),
        ["%2 = const <bool[3]> : bool[3]", "%3 = where(%2, x, y) : f64[3]"], "%3", [], "y"),
    "where(constant True, x, y)": (
        [("x", (3,), F64), ("y", (3,), F64)],
        lambda g, x, y: op(g, "where", c(g, True, "bool"), x, y),
        ["%3 = where(True, x, y) : f64[3]"], "%3", [], "x"),
    "int x+0": ([("i", (3,), "int64")], lambda g, i: op(g, "add", i, c(g, 0, "int64")),
                ["%2 = add(i, 0) : i64[3]"], "%2", [], "i"),
    "int x-0": ([("i", (3,), "int64")], lambda g, i: op(g, "sub", i, c(g, 0, "int64")),
                ["%2 = sub(i, 0) : i64[3]"], "%2", [], "i"),
}


@pytest.mark.parametrize("name", list(SIMPLIFY_RULES))
def test_simplify_rule_ir_before_and_after(name):
    inputs, body, before, bret, after, aret = SIMPLIFY_RULES[name]
    g = build(inputs, body)
    sig = signature(g)
    assert str(g) == text(sig, before, bret)
    changed, out = run_pass("simplify", g)
    assert changed
    assert str(out) == text(sig, after, aret)


@pytest.mark.parametrize("name", list(SIMPLIFY_RULES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_simplify_rule_is_exact_on_nan_inf_and_signed_zeros(name, seed):
    inputs, body = SIMPLIFY_RULES[name][:2]
    g = build(inputs, body)
    out = P.optimize(g, 3, verify_each=True)[0]          # to the fixed point
    xs = special_inputs(g, seed)
    for k, (a, b) in enumerate(zip(graphc.interpret(out, *xs), graphc.interpret(g, *xs))):
        assert_bits_equal(a, b, f"{name}, output {k}, inputs {xs}")


def test_simplify_rules_cover_the_issue_list():
    want = ["x*1", "1*x", "x/1", "x+(-0.0)", "x-0.0", "x**1", "x**2 -> x*x", "x*(-1) -> neg",
            "neg(neg x)", "transpose(transpose x)", "reshape(reshape x)", "expand(expand x)",
            "reshape to the same shape", "expand to the same shape", "cast to the same dtype",
            "copy", "detach", "sum of broadcast", "where(c, x, x)"]
    assert set(want) <= set(SIMPLIFY_RULES)


def test_transposes_composing_to_the_identity_vanish_at_the_fixed_point():
    g = build(XM, SIMPLIFY_RULES["transpose(transpose x) composing to the identity"][1])
    out, pm = P.optimize(g, 2)
    assert str(out) == text(signature(g), [], "x")
    assert [(r.name, r.round, r.changed) for r in pm.log][:6] == [
        ("simplify", 1, True), ("fold", 1, False), ("cse", 1, False), ("dce", 1, False),
        ("loops", 1, False), ("simplify", 2, True)]


def test_a_sum_of_broadcast_of_minus_zero_is_plus_zero_like_numpy():
    # numpy's sum starts from +0.0: the rewrite must not return x * n (which keeps -0.0)
    g = build(X, SIMPLIFY_RULES["sum of broadcast"][1])
    out = P.optimize(g, 2)[0]
    x = np.array([-0.0, -0.0, 1.5])
    (r,) = graphc.interpret(out, x)
    assert not np.signbit(r[0]) and not np.signbit(r[1]) and r[2] == 6.0
    assert_bits_equal(r, graphc.interpret(g, x)[0])


# --- rules that must not exist ------------------------------------------------------

SIMPLIFY_NEGATIVE = {
    # -0.0 + 0.0 is +0.0, so x + 0.0 is not x
    "x+0.0": (X, lambda g, x: op(g, "add", x, c(g, 0.0))),
    "0.0+x": (X, lambda g, x: op(g, "add", c(g, 0.0), x)),
    # -0.0 - -0.0 is +0.0
    "x-(-0.0)": (X, lambda g, x: op(g, "sub", x, c(g, -0.0))),
    # nan * 0 and inf * 0 are nan
    "x*0": (X, lambda g, x: op(g, "mul", x, c(g, 0.0))),
    "0*x": (X, lambda g, x: op(g, "mul", c(g, 0.0), x)),
    # inf - inf is nan
    "x-x": (X, lambda g, x: op(g, "sub", x, x)),
    "x/x": (X, lambda g, x: op(g, "div", x, x)),
    "x*1 where the 1 broadcasts x to a bigger shape": (
        X, lambda g, x: op(g, "mul", x, c(g, np.ones((2, 3))))),
    "f32 x * f64 1 (promotes to f64)": (
        [("x", (3,), F32)], lambda g, x: op(g, "mul", x, c(g, 1.0))),
    "f32 x ** f64 2 (promotes to f64)": (
        [("x", (3,), F32)], lambda g, x: op(g, "pow", x, c(g, 2.0))),
    "bool x * int 1 (promotes to int)": ([("b", (3,), "bool")],
                                         lambda g, b: op(g, "mul", b, c(g, 1, "int64"))),
    "cast to another dtype": (X, lambda g, x: op(g, "cast", x, dtype="float32")),
    "where(c, x, y)": ([("c", (3,), "bool"), ("x", (3,), F64), ("y", (3,), F64)],
                       lambda g, cc, x, y: op(g, "where", cc, x, y)),
    "where(c, x, x) where c broadcasts x": ([("c", (2, 3), "bool"), ("x", (3,), F64)],
                                            lambda g, cc, x: op(g, "where", cc, x, x)),
    "where(constant c, x, y) with c mixed": (
        [("x", (3,), F64), ("y", (3,), F64)],
        lambda g, x, y: op(g, "where", c(g, np.array([True, False, True]), "bool"), x, y)),
    "where(constant c, x, y) where the chosen branch broadcasts": (
        [("x", (3,), F64), ("y", (1,), F64)],
        lambda g, x, y: op(g, "where", c(g, False, "bool"), x, y)),
    "where(constant c, x, y) where the chosen branch is promoted": (
        [("x", (3,), F64), ("y", (3,), F32)],
        lambda g, x, y: op(g, "where", c(g, False, "bool"), x, y)),
    "sum of an empty broadcast (inf * 0 would be nan)": (
        [("x", (1,), F64)], lambda g, x: op(g, "sum", op(g, "expand", x, shape=(0,)),
                                            axis=(0,), keepdim=False)),
    "sum of a broadcast over a real dim": (
        [("x", (1, 3), F64)], lambda g, x: op(g, "sum", op(g, "expand", x, shape=(2, 3)),
                                              axis=(0, 1), keepdim=False)),
    "mean of a broadcast": (X, lambda g, x: op(g, "mean", op(g, "expand", x, shape=(4, 3)),
                                               axis=(0,), keepdim=False)),
    "a single neg": (X, lambda g, x: op(g, "neg", x)),
    "x*2": (X, lambda g, x: op(g, "mul", x, c(g, 2.0))),
    "x**0.5": (X, lambda g, x: op(g, "pow", x, c(g, 0.5))),
}


@pytest.mark.parametrize("name", list(SIMPLIFY_NEGATIVE))
def test_simplify_leaves_inexact_rewrites_alone(name):
    inputs, body = SIMPLIFY_NEGATIVE[name]
    g = build(inputs, body)
    before = str(g)
    changed, out = run_pass("simplify", g)
    assert not changed and str(out) == before
    full = P.optimize(g, 3, verify_each=True)[0]     # nor does any other pass, to the end
    assert str(full) == before
    xs = special_inputs(g)
    for a, b in zip(graphc.interpret(full, *xs), graphc.interpret(g, *xs)):
        assert_bits_equal(a, b, name)


def test_the_rejected_rules_would_really_change_results():
    """The reasons above are real: each naive rewrite differs on a special value."""
    with np.errstate(all="ignore"):
        x = np.array([-0.0, np.nan, np.inf, -np.inf])
        assert np.signbit(x[0]) and not np.signbit(x[0] + 0.0)          # x + 0.0 != x
        assert not np.signbit(x[0] - (-0.0))                             # x - (-0.0) != x
        assert np.isnan(x[1:] * 0.0).all()                               # x * 0 != 0
        assert np.isnan(x[2:] - x[2:]).all()                             # x - x != 0


def test_compiled_functions_keep_the_rejected_rewrites():
    def f(x):
        return x + 0.0, x * 0.0, x - x

    x = np.array([-0.0, np.nan, np.inf, -np.inf, 2.0])
    cf = graphc.compile(f, opt_level=3)
    got = cf(x)
    ops = cf._entry_for((x,)).stages["optimized"].op_counts()
    opt_text = cf.ir(x, stage="optimized")
    assert "add(x, 0.0)" in opt_text and "mul(x, 0.0)" in opt_text and "sub(x, x)" in opt_text
    assert ops["add"] == ops["mul"] == ops["sub"] == 1
    with np.errstate(all="ignore"):
        for a, b in zip(got, (x + 0.0, x * 0.0, x - x)):
            assert_bits_equal(a, b, "native")


# ---------------------------------------------------------------------------
# constant folding


def test_fold_ir_before_and_after():
    g = build(X, lambda g, x: op(g, "add", x, op(g, "mul", c(g, 2.0), c(g, 3.0))))
    sig = signature(g)
    assert str(g) == text(sig, ["%3 = mul(2.0, 3.0) : f64[]", "%4 = add(x, %3) : f64[3]"], "%4")
    changed, out = run_pass("fold", g)
    assert changed
    assert str(out) == text(sig, ["%4 = add(x, 6.0) : f64[3]"], "%4")
    assert out.nx.nodes[3]["by"] == "fold"
    changed, out2 = run_pass("fold", out)
    assert not changed                     # nothing left to fold


def test_fold_computes_in_the_nodes_float32_dtype():
    tenth = np.float32(0.1)
    g = build(X, lambda g, x: [op(g, "mul", c(g, tenth, F32), c(g, 3.0, F32)),
                               op(g, "div", c(g, 1.0, F32), c(g, 3.0, F32)),
                               op(g, "exp", c(g, np.float32(0.7), F32)),
                               op(g, "tanh", c(g, np.float32(0.3), F32)),
                               op(g, "sum", c(g, np.full(1000, tenth), F32), axis=(0,),
                                  keepdim=False)])
    want = graphc.interpret(g, np.zeros(3))
    changed, out = run_pass("fold", g)
    assert changed
    got = [out.nx.nodes[o]["attrs"]["value"] for o in out.outputs]
    assert all(out.nx.nodes[o]["op"] == "const" for o in out.outputs)
    for v, w in zip(got, want):
        assert v.dtype == np.float32
        assert_bits_equal(v, w, "fold vs interpreter")
    assert got[0] == tenth * np.float32(3)                       # float32 arithmetic
    assert got[2] == np.exp(np.float32(0.7))
    f32_sum = np.sum(np.full(1000, tenth, np.float32))
    f64_sum = np.float32(np.sum(np.full(1000, tenth, np.float32).astype(np.float64)))
    assert f32_sum != f64_sum                          # the test can tell the two apart
    assert got[4] == f32_sum


def test_fold_keeps_special_results_and_int_wraparound():
    big = np.iinfo(np.int32).max
    g = build(X, lambda g, x: [op(g, "div", c(g, 0.0), c(g, 0.0)),
                               op(g, "div", c(g, -1.0), c(g, 0.0)),
                               op(g, "mul", c(g, -0.0), c(g, 5.0)),
                               op(g, "add", c(g, big, "int32"), c(g, 1, "int32"))])
    want = graphc.interpret(g, np.zeros(3))
    with np.errstate(all="raise"):            # folding must not warn or raise
        changed, out = run_pass("fold", g)
    assert changed
    got = [out.nx.nodes[o]["attrs"]["value"] for o in out.outputs]
    for v, w in zip(got, want):
        assert_bits_equal(v, w, "fold")
    assert np.isnan(got[0]) and got[1] == -np.inf and np.signbit(got[2])
    assert got[3] == np.iinfo(np.int32).min and got[3].dtype == np.int32


def test_fold_skips_large_results_and_non_constant_operands():
    n = P.MAX_FOLD_ELEMENTS + 1
    g = build(X, lambda g, x: [op(g, "expand", c(g, 1.0), shape=(n,)),
                               op(g, "mul", x, c(g, 2.0))])
    changed, out = run_pass("fold", g)
    assert not changed and str(out) == str(g)


# ---------------------------------------------------------------------------
# CSE


def test_cse_ir_before_and_after():
    g = build(XM, lambda g, x: [op(g, "add", op(g, "tanh", x), op(g, "tanh", x)),
                                op(g, "sum", x, axis=(0,), keepdim=False),
                                op(g, "sum", x, axis=(0,), keepdim=False),
                                op(g, "sum", x, axis=(1,), keepdim=False)])
    sig = signature(g)
    assert str(g) == text(sig, [
        "%1 = tanh(x) : f64[2,3]", "%2 = tanh(x) : f64[2,3]", "%3 = add(%1, %2) : f64[2,3]",
        "%4 = sum(x, axis=(0,), keepdim=False) : f64[3]",
        "%5 = sum(x, axis=(0,), keepdim=False) : f64[3]",
        "%6 = sum(x, axis=(1,), keepdim=False) : f64[2]"], "%3, %4, %5, %6")
    changed, out = run_pass("cse", g)
    assert changed
    assert str(out) == text(sig, [
        "%1 = tanh(x) : f64[2,3]", "%3 = add(%1, %1) : f64[2,3]",
        "%4 = sum(x, axis=(0,), keepdim=False) : f64[3]",
        "%6 = sum(x, axis=(1,), keepdim=False) : f64[2]"], "%3, %4, %4, %6")


def _nan(bits: int, dtype=F64):
    return np.array(bits, dtype="u8" if dtype == F64 else "u4").view(dtype)


CSE_DIFFERENT = {
    "sum over axis 0 vs 1": (XM, lambda g, x: (op(g, "sum", x, axis=(0,), keepdim=True),
                                               op(g, "sum", x, axis=(1,), keepdim=True))),
    "keepdim True vs False": (XM, lambda g, x: (op(g, "sum", x, axis=(0,), keepdim=True),
                                                op(g, "sum", x, axis=(0,), keepdim=False))),
    "max vs min": (XM, lambda g, x: (op(g, "max", x, axis=(0,), keepdim=False),
                                     op(g, "min", x, axis=(0,), keepdim=False))),
    "clamp min 0.1 vs 0.2": (X, lambda g, x: (op(g, "clamp", x, min=0.1, max=None),
                                              op(g, "clamp", x, min=0.2, max=None))),
    "clamp min 0.0 vs -0.0": (X, lambda g, x: (op(g, "clamp", x, min=0.0, max=None),
                                               op(g, "clamp", x, min=-0.0, max=None))),
    "clamp min vs max": (X, lambda g, x: (op(g, "clamp", x, min=0.5, max=None),
                                          op(g, "clamp", x, min=None, max=0.5))),
    "const 0.0 vs -0.0": (X, lambda g, x: (c(g, 0.0), c(g, -0.0))),
    "const NaN payloads": (X, lambda g, x: (g.add_const(_nan(0x7FF8000000000001)),
                                            g.add_const(_nan(0x7FF8000000000002)))),
    "const NaN sign": (X, lambda g, x: (g.add_const(_nan(0x7FF8000000000000)),
                                        g.add_const(_nan(0xFFF8000000000000)))),
    "const 1 (int64) vs 1.0 (float64)": (X, lambda g, x: (c(g, 1, "int64"), c(g, 1.0))),
    "const 1.0 float32 vs float64": (X, lambda g, x: (c(g, 1.0, F32), c(g, 1.0))),
    "const True vs 1": (X, lambda g, x: (c(g, True, "bool"), c(g, 1, "int64"))),
    "const arrays of different shapes": (X, lambda g, x: (c(g, np.ones(2)), c(g, np.ones((2, 1))))),
    "cast to float32 vs int64": (X, lambda g, x: (op(g, "cast", x, dtype="float32"),
                                                  op(g, "cast", x, dtype="int64"))),
    "reshape (6,) vs (6, 1)": (XM, lambda g, x: (op(g, "reshape", x, shape=(6,)),
                                                 op(g, "reshape", x, shape=(6, 1)))),
    "transpose perms": ([("x", (2, 2, 2), F64)],
                        lambda g, x: (op(g, "transpose", x, perm=(1, 0, 2)),
                                      op(g, "transpose", x, perm=(0, 2, 1)))),
    "operand order of sub": ([("x", (3,), F64), ("y", (3,), F64)],
                             lambda g, x, y: (op(g, "sub", x, y), op(g, "sub", y, x))),
    "same op on different inputs": ([("x", (3,), F64), ("y", (3,), F64)],
                                    lambda g, x, y: (op(g, "exp", x), op(g, "exp", y))),
    "getitem of different rows": (XM, lambda g, x: (
        op(g, "getitem", x, index=(("i", 0),)), op(g, "getitem", x, index=(("i", 1),)))),
}


@pytest.mark.parametrize("name", list(CSE_DIFFERENT))
def test_cse_never_merges_nodes_with_different_attrs(name):
    inputs, body = CSE_DIFFERENT[name]
    g = build(inputs, body)
    changed, out = run_pass("cse", g)
    assert not changed and len(out) == len(g) and out.outputs == g.outputs
    assert out.outputs[0] != out.outputs[1]
    xs = special_inputs(g)
    for a, b in zip(graphc.interpret(out, *xs), graphc.interpret(g, *xs)):
        assert_bits_equal(a, b, name)


CSE_SAME = {
    "sum over the same axis": (XM, lambda g, x: (op(g, "sum", x, axis=(1,), keepdim=True),
                                                 op(g, "sum", x, axis=(1,), keepdim=True))),
    "clamp with the same bounds": (X, lambda g, x: (op(g, "clamp", x, min=-0.0, max=0.5),
                                                    op(g, "clamp", x, min=-0.0, max=0.5))),
    "const -0.0 twice": (X, lambda g, x: (c(g, -0.0), c(g, -0.0))),
    "the same NaN payload": (X, lambda g, x: (g.add_const(_nan(0x7FF8000000000003)),
                                              g.add_const(_nan(0x7FF8000000000003)))),
    "equal const arrays": (X, lambda g, x: (c(g, [1.0, np.nan]), c(g, [1.0, np.nan]))),
    "cast to float32 twice": (X, lambda g, x: (op(g, "cast", x, dtype="float32"),
                                               op(g, "cast", x, dtype="float32"))),
    "x*y twice": ([("x", (3,), F64), ("y", (3,), F64)],
                  lambda g, x, y: (op(g, "mul", x, y), op(g, "mul", x, y))),
}


@pytest.mark.parametrize("name", list(CSE_SAME))
def test_cse_merges_identical_nodes(name):
    inputs, body = CSE_SAME[name]
    g = build(inputs, body)
    changed, out = run_pass("cse", g)
    assert changed and len(out) == len(g) - 1
    assert out.outputs[0] == out.outputs[1]
    xs = special_inputs(g)
    for a, b in zip(graphc.interpret(out, *xs), graphc.interpret(g, *xs)):
        assert_bits_equal(a, b, name)


def test_cse_merges_whole_chains_in_one_run():
    def body(g, x):
        a = op(g, "exp", op(g, "mul", x, c(g, 2.0)))
        b = op(g, "exp", op(g, "mul", x, c(g, 2.0)))
        return op(g, "sub", a, b)

    g = build(X, body)
    changed, out = run_pass("cse", g)
    assert changed
    assert str(out) == text(signature(g), ["%2 = mul(x, 2.0) : f64[3]", "%3 = exp(%2) : f64[3]",
                                           "%7 = sub(%3, %3) : f64[3]"], "%7")


# ---------------------------------------------------------------------------
# DCE


def _dce_graph():
    def body(g, x, unused):
        n = op(g, "neg", x)
        op(g, "exp", x)                                                   # dead
        op(g, "sum", op(g, "sin", x), axis=(0,), keepdim=False)           # dead reduction
        return [n, x, n, c(g, 2.0), c(g, [1.0, 2.0]), x]
    return build(X + [("unused", (2,), F64)], body)


def test_dce_ir_before_and_after():
    g = _dce_graph()
    sig = signature(g)
    assert str(g) == text(sig, [
        "%2 = neg(x) : f64[3]", "%3 = exp(x) : f64[3]", "%4 = sin(x) : f64[3]",
        "%5 = sum(%4, axis=(0,), keepdim=False) : f64[]", "%7 = const <f64[2]> : f64[2]"],
        "%2, x, %2, 2.0, %7, x")
    changed, out = run_pass("dce", g)
    assert changed
    assert str(out) == text(sig, ["%2 = neg(x) : f64[3]", "%7 = const <f64[2]> : f64[2]"],
                            "%2, x, %2, 2.0, %7, x")
    assert out.inputs == g.inputs and len(out) == 5            # unused input kept
    changed, again = run_pass("dce", out)
    assert not changed


@pytest.mark.parametrize("opt_level", [0, 2])
def test_dce_keeps_every_kind_of_output_natively(opt_level):
    g = _dce_graph()
    out = P.optimize(g, opt_level, verify_each=True)[0]
    from graphc.runtime.native import NativeExecutable
    x, u = np.array([1.0, -2.0, 0.5]), np.zeros(2)
    got = NativeExecutable(out, opt_level).run([x, u])
    want = [-x, x, -x, np.array(2.0), np.array([1.0, 2.0]), x]
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert_bits_equal(a, b, "dce output")
    assert got[1] is not x and not np.shares_memory(got[1], x)      # outputs are new arrays
    assert not np.shares_memory(got[0], got[2])


def test_dce_removes_dead_code_in_compiled_functions():
    def f(x):
        (x * 3).exp().sum()          # dead, reduction included
        return x.tanh()

    cf = graphc.compile(f)
    x = np.linspace(-1, 1, 5)
    np.testing.assert_allclose(cf(x), np.tanh(x), rtol=1e-14)
    assert cf.ir(x, stage="optimized").count(" = ") == 1
    assert "sum" in cf.ir(x) and "sum" not in cf.ir(x, stage="optimized")


# ---------------------------------------------------------------------------
# the pass manager


def test_pipelines_per_opt_level():
    assert P.PIPELINES[0] == ()
    assert P.PIPELINES[1] == ("dce", "loops")
    assert P.PIPELINES[2] == P.PIPELINES[3] == ("simplify", "fold", "cse", "dce", "loops")
    assert set(P.PASSES) == {"simplify", "fold", "cse", "dce", "loops"}
    g = build(X, SIMPLIFY_RULES["x*1"][1])
    assert str(P.optimize(g, 0)[0]) == str(g)
    assert str(P.optimize(g, 1)[0]) == str(g)
    assert str(P.optimize(g, 2)[0]) == text("x: f64[3]", [], "x")


def test_disable_removes_a_pass_and_unknown_names_raise():
    pm = P.PassManager(2, disable=["cse"])
    assert pm.pipeline == ["simplify", "fold", "dce", "loops"]
    with pytest.raises(ValueError, match=r"unknown pass.*'nope'.*simplify, fold, cse, dce, loops"):
        P.PassManager(2, disable=["nope"])
    with pytest.raises(ValueError, match="print_after names unknown pass"):
        P.PassManager(2, print_after=["nope"])
    with pytest.raises(ValueError, match="opt_level must be 0, 1, 2 or 3"):
        P.PassManager(7)
    with pytest.raises(ValueError, match=r"unknown pass 'nope'; passes are simplify"):
        graphc.compile(lambda x: x, disable_passes=["nope"])
    with pytest.raises(ValueError, match=r"unknown pass 'cfold'"):
        graphc.compile(lambda x: x, print_after=["cfold"])


def test_print_after_prints_the_ir_after_the_chosen_passes(capsys):
    def f(x):
        return (x * 1.0).tanh() + (x * 1.0).tanh()

    cf = graphc.compile(f, print_after=["simplify", "cse"])
    x = np.array([0.5, -0.25])
    np.testing.assert_allclose(cf(x), 2 * np.tanh(x), rtol=1e-14)
    out = capsys.readouterr().out
    heads = re.findall(r"// IR after (\w+) \(round (\d), (changed|no change)\)", out)
    assert heads[:2] == [("simplify", "1", "changed"), ("cse", "1", "changed")]
    assert {h[0] for h in heads} == {"simplify", "cse"}
    after_cse = out.split("// IR after cse (round 1, changed)")[1].split("// IR after")[0]
    assert after_cse.count("tanh(") == 1 and "mul(" not in after_cse
    after_simplify = out.split("// IR after cse")[0]
    assert after_simplify.count("tanh(") == 2          # cse has not run yet
    cf(x)
    assert capsys.readouterr().out == ""              # cached: nothing is re-optimized


def test_report_has_per_pass_rounds_timings_and_changes():
    g = build(X, SIMPLIFY_RULES["neg(neg x)"][1])
    _, pm = P.optimize(g, 2)
    rep = pm.report()
    lines = rep.splitlines()
    assert lines[0].split() == ["pass", "round", "changed", "time(ms)", "nodes"]
    rows = [ln.split() for ln in lines[1:-1]]
    assert [r[0] for r in rows] == ["simplify", "fold", "cse", "dce", "loops"] * 2
    assert [r[1] for r in rows] == ["1"] * 5 + ["2"] * 5
    assert rows[0][2] == "True" and all(r[2] == "False" for r in rows[1:])
    assert all(float(r[3]) >= 0 for r in rows)
    assert re.match(r"total +10 pass runs, \d+\.\d{3} ms", lines[-1])
    assert all(r.seconds >= 0 for r in pm.log) and pm.log[0].nodes_after == 1
    assert "simplify (round 1): changed" in repr(pm.log[0])


def test_verify_each_names_a_pass_that_breaks_the_graph(monkeypatch):
    def wrong_shape(g):
        for n in g.topo_order():
            if g.nx.nodes[n]["op"] == "neg":
                g.nx.nodes[n]["shape"] = (7,)
                return True
        return False

    monkeypatch.setitem(P.PASSES, "wrong_shape", wrong_shape)
    monkeypatch.setitem(P.PIPELINES, 2, ("simplify", "wrong_shape", "dce"))
    g = build(X, lambda g, x: op(g, "neg", op(g, "exp", x)))
    with pytest.raises(GraphVerificationError, match="after pass 'wrong_shape'.*neg"):
        P.optimize(g, 2, verify_each=True)
    P.optimize(g, 2)             # without checking, the broken graph goes unnoticed here


def test_after_pass_hook_sees_every_pass_in_order():
    seen = []
    g = build(X, SIMPLIFY_RULES["x**2 -> x*x"][1])
    pm = P.PassManager(2, after_pass=lambda name, rnd, gg, ch: seen.append((name, rnd, ch)))
    pm.run(g.copy())
    assert seen == [(r.name, r.round, r.changed) for r in pm.log]
    assert seen[0] == ("simplify", 1, True)


def test_ir_after_each_pass_and_stage_summary():
    def f(x, w):
        return ((x * w).tanh() ** 2).sum()

    cf = graphc.compile(graphc.value_and_grad(f, argnums=1))
    x, w = np.linspace(-1, 1, 64), np.array(0.7)
    cf(x, w)
    text_all = cf.ir(x, w, stage="optimized", after_each_pass=True)
    sections = re.findall(r"// IR after (\w+) \(round (\d+), (changed|no change)\)", text_all)
    pm = cf._entry_for((x, w)).stages["_passes"]
    assert [(s[0], int(s[1]), s[2] == "changed") for s in sections] == \
        [(r.name, r.round, r.changed) for r in pm.log]
    assert text_all.startswith("// traced\n" + cf.ir(x, w))
    assert text_all.rstrip().endswith(cf.ir(x, w, stage="optimized"))
    assert "pow(" in text_all and "pow(" not in cf.ir(x, w, stage="optimized")
    with pytest.raises(ValueError, match="after_each_pass=True needs stage='optimized'"):
        cf.ir(x, w, after_each_pass=True)
    st = cf.stats(x, w)
    assert st["traced_nodes"] == len(cf.graph(x, w))
    assert st["grad_nodes"] == st["traced_nodes"]          # value_and_grad traces backward
    assert st["optimized_nodes"] < st["traced_nodes"]
    assert st["kernels"] == st["loop_kernels"] == 1
    assert st["pass_runs"] == len(pm.log) and st["pass_rounds"] == pm.log[-1].round
    assert st["pass_seconds"] >= 0
    plain = graphc.compile(lambda x: x.exp().sum())
    plain(x)
    assert "grad_nodes" not in plain.stats(x)
    plain.ir(x, stage="grad")
    assert plain.stats(x)["grad_nodes"] > plain.stats(x)["traced_nodes"]


# ---------------------------------------------------------------------------
# random composite programs: passes preserve semantics


class RandomProgram:
    """A seeded random multi-output program over the eager Tensor API.

    Steps mix elementwise math, broadcasting binaries, reductions with axes and keepdim,
    movement (permute, expand, reshape), matmul, slicing, where, the rewrites the
    simplifier knows (x*1, x+(-0.0), x**2, x.T.T, ...), the ones it must not make
    (x+0.0, x*0+x, x-x+x), repeated subexpressions (CSE) and dead values (DCE).
    Outputs: the last value, two random earlier ones (inputs included), sometimes one twice.
    """

    SHAPES = [(), (1,), (4,), (3, 4), (1, 4), (3, 1), (2, 3, 4), (2, 1, 4)]

    def __init__(self, seed: int, dtype=np.float64, length: int = 10) -> None:
        self.seed = seed
        self.rng = rng = np.random.default_rng(seed)
        self.dtype = np.dtype(dtype)
        self.inputs: list = []
        self.shapes: list = []
        self.steps: list = []
        self.desc: list = []
        for _ in range(2):
            self._input(self.SHAPES[rng.integers(len(self.SHAPES))])
        for _ in range(length):
            self._step()
        n = len(self.shapes)
        outs = [n - 1] + [int(k) for k in rng.choice(n, size=2, replace=False)]
        if rng.random() < 0.3:
            outs.append(outs[0])
        self.outputs = outs

    def _input(self, shape) -> int:
        k = len(self.shapes)
        self.inputs.append(self.rng.uniform(-1.5, 1.5, size=shape).astype(self.dtype))
        i = len(self.inputs) - 1
        self.steps.append(lambda v, xs, i=i: xs[i])
        self.shapes.append(tuple(shape))
        self.desc.append(f"v{k} = input{i}{list(shape)}")
        return k

    def _add(self, desc: str, fn, shape) -> None:
        self.desc.append(f"v{len(self.shapes)} = {desc}")
        self.steps.append(fn)
        self.shapes.append(tuple(shape))

    def _partner(self, shape) -> int:
        rng = self.rng
        ok = [k for k, s in enumerate(self.shapes[:-1]) if _broadcasts(s, shape)]
        if ok and rng.random() < 0.5:
            return int(ok[rng.integers(len(ok))])
        choice = rng.integers(3)
        if choice == 0:
            new = shape
        elif choice == 1:
            new = tuple(1 if rng.random() < 0.5 else d for d in shape)
        else:
            new = shape[rng.integers(len(shape) + 1):]
        return self._input(new)

    def _step(self) -> None:
        rng = self.rng
        a = len(self.shapes) - 1 if rng.random() < 0.7 else int(rng.integers(len(self.shapes)))
        s = self.shapes[a]
        kind = rng.choice(["unary", "unary", "ident", "binary", "binary", "reduce", "move",
                           "matmul", "index", "where", "dup"])
        if kind == "matmul" and not s:
            kind = "unary"
        if kind == "index" and (not s or s[0] < 2):
            kind = "binary"
        if kind == "unary":
            name = sorted(UNARY)[rng.integers(len(UNARY))]
            self._add(f"{name}(v{a})", lambda v, xs, f=UNARY[name], a=a: f(v[a]), s)
        elif kind == "ident":
            name = sorted(IDENT)[rng.integers(len(IDENT))]
            self._add(f"{name}(v{a})", lambda v, xs, f=IDENT[name], a=a: f(v[a]), s)
        elif kind in ("binary", "where"):
            b = self._partner(s)
            shape = np.broadcast_shapes(s, self.shapes[b])
            if kind == "where":
                self._add(f"where(v{a} > v{b}, v{a}, v{b} * 2)",
                          lambda v, xs, a=a, b=b: eager.where(v[a] > v[b], v[a], v[b] * 2.0),
                          shape)
            else:
                name = sorted(BINARY)[rng.integers(len(BINARY))]
                self._add(f"{name}(v{a}, v{b})",
                          lambda v, xs, f=BINARY[name], a=a, b=b: f(v[a], v[b]), shape)
        elif kind == "reduce":
            red = ["sum", "mean", "max"][rng.integers(3)]
            keep = bool(rng.random() < 0.5)
            if s and rng.random() < 0.7:
                ax = int(rng.integers(len(s)))
                shape = tuple(1 if i == ax else d for i, d in enumerate(s)) if keep else \
                    tuple(d for i, d in enumerate(s) if i != ax)
                if red == "max":
                    fn = lambda v, xs, a=a, ax=ax, k=keep: v[a].max(dim=ax, keepdim=k).values
                else:
                    fn = lambda v, xs, a=a, ax=ax, k=keep, r=red: getattr(v[a], r)(dim=ax,
                                                                                   keepdim=k)
                self._add(f"{red}(v{a}, dim={ax}, keepdim={keep})", fn, shape)
            else:
                self._add(f"{red}(v{a})", lambda v, xs, a=a, r=red: getattr(v[a], r)(), ())
        elif kind == "move":
            choice = rng.integers(3)
            if choice == 0 and len(s) >= 2:
                perm = tuple(int(p) for p in rng.permutation(len(s)))
                self._add(f"v{a}.permute{perm}", lambda v, xs, a=a, p=perm: v[a].permute(*p),
                          tuple(s[p] for p in perm))
            elif choice == 1:
                new = (2,) + s
                self._add(f"v{a}.expand{new}", lambda v, xs, a=a, t=new: v[a].expand(*t), new)
            else:
                n = int(np.prod(s, dtype=np.int64))
                options = [(n,), tuple(reversed(s)) or (1,), (1,) + s]
                new = options[rng.integers(len(options))]
                self._add(f"v{a}.reshape{new}", lambda v, xs, a=a, t=new: v[a].reshape(t), new)
        elif kind == "matmul":
            k = int(rng.integers(1, 4))
            b = self._input((s[-1], k))
            self._add(f"v{a} @ v{b}", lambda v, xs, a=a, b=b: v[a] @ v[b], s[:-1] + (k,))
        elif kind == "index":
            if rng.random() < 0.5:
                self._add(f"v{a}[1:]", lambda v, xs, a=a: v[a][1:], (s[0] - 1,) + s[1:])
            else:
                self._add(f"v{a}[-1]", lambda v, xs, a=a: v[a][-1], s[1:])
        else:        # the same expression twice (CSE) next to a dead one (DCE)
            name = sorted(UNARY)[rng.integers(len(UNARY))]
            self._add(f"{name}(v{a}) + {name}(v{a})  [dead: exp(v{a})]",
                      lambda v, xs, f=UNARY[name], a=a: (v[a].exp(), f(v[a]) + f(v[a]))[1], s)

    def __call__(self, *xs):
        vals: list = []
        for fn in self.steps:
            vals.append(fn(vals, xs))
        return tuple(vals[k] for k in self.outputs)

    def __str__(self) -> str:
        return "\n".join(self.desc) + f"\nreturn {', '.join(f'v{k}' for k in self.outputs)}"


def _broadcasts(a, b) -> bool:
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


UNARY = {
    "tanh": lambda a: a.tanh(), "sin": lambda a: a.sin(), "exp": lambda a: (a * 0.5).exp(),
    "sigmoid": lambda a: a.sigmoid(), "relu": lambda a: a.relu(), "abs": lambda a: a.abs(),
    "clamp": lambda a: a.clamp(-0.5, 0.5), "softlog": lambda a: (a * a + 1).log(),
    "softsqrt": lambda a: (a * a + 0.25).sqrt(), "neg": lambda a: -a,
    "square": lambda a: a ** 2, "affine": lambda a: a * 0.5 + 1.5,
}
IDENT = {
    "mul1": lambda a: a * 1.0, "rmul1": lambda a: 1.0 * a, "div1": lambda a: a / 1.0,
    "add_neg_zero": lambda a: a + (-0.0), "sub_zero": lambda a: a - 0.0,
    "pow1": lambda a: a ** 1, "mul_neg1": lambda a: a * -1.0, "negneg": lambda a: -(-a),
    "TT": lambda a: a.T.T, "reshape_twice": lambda a: a.reshape(-1).reshape(a.shape),
    "detach": lambda a: a.detach(), "add_zero": lambda a: a + 0.0,
    "mul_zero": lambda a: a * 0.0 + a, "sub_self": lambda a: (a - a) + a,
}
BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (b * b + 1), "maximum": lambda a, b: eager.maximum(a, b),
    "pow": lambda a, b: (a * a + 0.5) ** b.tanh(),
}


def assert_results_close(got, want, dtype, what: str) -> None:
    rtol = 2e-5 if np.dtype(dtype) == np.float32 else 1e-10
    assert len(got) == len(want), what
    for k, (a, b) in enumerate(zip(got, want)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, f"{what}, output {k}"
        scale = float(np.max(np.abs(b))) if b.size else 0.0
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale,
                                   err_msg=f"{what}, output {k}")


def test_random_programs_cover_the_rules():
    progs = "\n".join(str(RandomProgram(s, length=8 + s % 7)) for s in range(60))
    for word in ["@", "permute", "expand", "reshape", "[1:]", "[-1]", "where", "keepdim=True",
                 "max(", "mean(", "dead", "mul1", "add_zero", "sub_self", "TT", "pow1",
                 "mul_neg1", "input0[]"]:
        assert word in progs, word


CONFIGS = [dict(), dict(opt_level=0), dict(opt_level=1), dict(opt_level=3)] + \
    [dict(disable_passes=[p]) for p in ("simplify", "fold", "cse", "dce", "loops")]


@pytest.mark.parametrize("seed", range(12))
def test_random_program_same_results_at_every_opt_level_and_with_each_pass_disabled(seed):
    dtype = np.float32 if seed % 4 == 3 else np.float64
    prog = RandomProgram(seed, dtype, length=8 + seed % 7)
    xs = prog.inputs
    want = graphc.interpret(graphc.trace(prog, *xs), *xs)
    for cfg in CONFIGS:
        cf = graphc.compile(prog, verify_passes=True, **cfg)
        got = cf(*xs)
        assert_results_close(got, want, dtype, f"{cfg}, program {seed}:\n{prog}")
    optimized = graphc.compile(prog, backend="interpreter", verify_passes=True)
    for a, b in zip(optimized(*xs), want):            # the optimized graph, interpreted
        np.testing.assert_allclose(a, b, rtol=1e-13 if dtype == np.float64 else 1e-6)


@pytest.mark.parametrize("grad", [False, True], ids=["program", "gradient"])
def test_random_programs_optimized_are_bit_exact_on_special_values(grad):
    """Passes only make exact rewrites: interpreting the optimized graph on NaN, Inf and
    signed zeros gives the traced graph's bits (the interpreter is the oracle)."""
    for seed in range(40):
        dtype = np.float32 if seed % 4 == 3 else np.float64
        prog = RandomProgram(seed, dtype, length=8 + seed % 7)
        if grad:
            g = graphc.trace(lambda *xs: sum(((o * o).sum() for o in prog(*xs)), 0.0),
                             *prog.inputs).grad()
        else:
            g = graphc.trace(prog, *prog.inputs)
        xs = special_inputs(g, seed)
        want = graphc.interpret(g, *xs)
        for level in (1, 2):
            out, _ = P.optimize(g, level, verify_each=True)
            for k, (a, b) in enumerate(zip(graphc.interpret(out, *xs), want)):
                assert_bits_equal(a, b, f"level {level}, program {seed}, output {k}:\n{prog}")


# ---------------------------------------------------------------------------
# bisect_passes


def test_bisect_reports_that_all_passes_preserve_results():
    def f(x, w, b):
        return ((x * w + b).tanh() ** 2).sum()

    x = np.linspace(-2, 2, 257)
    rep = graphc.bisect_passes(graphc.value_and_grad(f, argnums=(1, 2)), x, np.array(0.5),
                               np.array(0.1))
    assert isinstance(rep, BisectReport) and rep.ok and rep.culprit is None
    assert rep.baseline is None
    s = str(rep)
    assert s.endswith("all passes preserve results")
    assert "native code matches the interpreter" in s
    assert [st.label for st in rep.steps[:4]] == [
        "simplify (round 1)", "fold (round 1)", "cse (round 1)", "dce (round 1)"]
    assert any(st.changed for st in rep.steps) and not any(st.changed for st in rep.steps[-4:])
    assert rep.diff == ""


def _x_minus_x_is_zero(g):
    """A broken rule: x - x -> 0 (wrong for Inf and NaN)."""
    changed = False
    for n in g.topo_order():
        d = g.nx.nodes[n]
        if d["op"] == "sub" and d["operands"][0] == d["operands"][1]:
            z = g.add_const(np.zeros(d["shape"], dtype=d["dtype"]), by="x_minus_x")
            g.replace_uses(n, z)
            g.nx.remove_node(n)
            changed = True
    return changed


@pytest.fixture
def broken_pipeline(monkeypatch):
    def install(name, fn, pipeline):
        monkeypatch.setitem(P.PASSES, name, fn)
        monkeypatch.setitem(P.PIPELINES, 2, pipeline)
    return install


def test_bisect_finds_a_broken_pass(broken_pipeline):
    broken_pipeline("x_minus_x", _x_minus_x_is_zero,
                    ("simplify", "fold", "x_minus_x", "cse", "dce"))

    def f(x):
        return (x - x) * 2.0 + x.exp()

    x = np.array([1.0, np.inf, -2.0])
    rep = graphc.bisect_passes(f, x)
    assert not rep.ok
    assert rep.culprit.name == "x_minus_x" and rep.culprit.round == 1
    assert "interpreter" in str(rep) and "NaN/Inf pattern differs" in rep.culprit.interpreter
    assert [s.name for s in rep.steps] == ["simplify", "fold", "x_minus_x"]   # stops there
    assert "sub(x, x)" in rep.before and "sub(x, x)" not in rep.after
    assert "-  %1 = sub(x, x) : f64[3]" in rep.diff
    assert "--- before x_minus_x (round 1)" in rep.diff
    s = str(rep)
    assert "first bad pass: x_minus_x (round 1): interpreter output 0" in s
    assert rep.diff.rstrip() in s
    # the same pipeline without the broken pass is fine, and finite inputs hide the bug
    assert graphc.bisect_passes(f, x, disable_passes=["x_minus_x"]).ok
    assert graphc.bisect_passes(f, np.array([1.0, 2.0])).ok


def test_bisect_names_the_round_a_late_firing_bug_appears_in(broken_pipeline):
    def square_is_double(g):        # x*x -> x+x: fires only once simplify made x**2 into x*x
        changed = False
        for n in g.topo_order():
            d = g.nx.nodes[n]
            if d["op"] == "mul" and d["operands"][0] == d["operands"][1]:
                d["op"] = "add"
                changed = True
        return changed

    broken_pipeline("square_is_double", square_is_double,
                    ("square_is_double", "simplify", "fold", "cse", "dce"))
    rep = graphc.bisect_passes(lambda x: x ** 2, np.array([3.0, 0.5]))
    assert rep.culprit.label == "square_is_double (round 2)"
    assert rep.steps[0].label == "square_is_double (round 1)" and not rep.steps[0].changed
    assert rep.steps[1].label == "simplify (round 1)" and rep.steps[1].ok
    assert "mul(x, x)" in rep.before and "add(x, x)" in rep.after


def test_bisect_reports_a_crashing_pass_and_a_graph_the_verifier_rejects(broken_pipeline):
    def crash(g):
        raise RuntimeError("boom")

    broken_pipeline("crash", crash, ("simplify", "fold", "cse", "dce", "crash"))
    rep = graphc.bisect_passes(lambda x: x.exp() * 1.0, np.ones(3))
    assert rep.culprit.label == "crash (round 1)"
    # the pass manager names the crashing pass; the original error follows
    assert "the pass raised PassError: graphc: pass 'crash' failed: RuntimeError: boom" in \
        str(rep)

    def bad_dtype(g):
        for n in g.topo_order():
            if g.nx.nodes[n]["op"] == "exp":
                g.nx.nodes[n]["dtype"] = "float32"
                return True
        return False

    broken_pipeline("bad_dtype", bad_dtype, ("simplify", "bad_dtype", "cse", "dce"))
    rep = graphc.bisect_passes(lambda x: x.exp() * 1.0, np.ones(3))
    assert rep.culprit.label == "bad_dtype (round 1)"
    assert "the verifier failed" in rep.culprit.error and "recorded type f32[3]" in str(rep)


def test_bisect_blames_the_pass_whose_output_native_code_gets_wrong(monkeypatch):
    """A backend bug on ``neg`` shows only after simplify turned x*(-1) into neg(x): the
    interpreter still agrees, native code does not, and the report says which."""
    from graphc.backend import kernel_builder as L
    emit = L.KernelBuilder.emit_op

    def broken_neg(self, n, vals, in_dtypes):
        if self.g.nx.nodes[n]["op"] == "neg":
            return vals[0]
        return emit(self, n, vals, in_dtypes)

    monkeypatch.setattr(L.KernelBuilder, "emit_op", broken_neg)
    rep = graphc.bisect_passes(lambda x: (x * -1.0).exp(), np.array([0.5, 1.0, 2.0]))
    assert rep.baseline is None
    assert rep.culprit.label == "simplify (round 1)"
    assert rep.culprit.interpreter is None and "elements differ" in rep.culprit.native
    assert "native MISMATCH" in str(rep) and "neg(x)" in rep.after


def test_bisect_separates_backend_bugs_from_pass_bugs(monkeypatch):
    from graphc.runtime.native import NativeExecutable
    run = NativeExecutable.run
    monkeypatch.setattr(NativeExecutable, "run", lambda self, a: [o + 1 for o in run(self, a)])
    rep = graphc.bisect_passes(lambda x: x.tanh() * 1.0, np.array([0.5, 1.0]))
    assert rep.ok and rep.baseline is not None and not rep.native_checked
    assert "a backend bug, not a pass bug" in str(rep)


def test_bisect_takes_a_graph_and_its_inputs():
    g = build(X, lambda g, x: op(g, "add", op(g, "mul", x, c(g, 1.0)), c(g, 0.0)))
    rep = graphc.bisect_passes(g, np.array([-0.0, 1.0, np.nan]), native=False)
    assert rep.ok and not rep.native_checked
    assert rep.steps[0].label == "simplify (round 1)" and rep.steps[0].changed
    assert "native" not in str(rep).split("\n", 2)[2]
