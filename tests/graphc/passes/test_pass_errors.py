"""Errors inside optimizer passes name the pass, the rule, the node, its op and the
user's source line; passes registered with ``@register_pass`` keep their promises.

Each test registers its own pass (or simplify rule) through the same decorator the
real passes use and removes it afterwards.
"""
from __future__ import annotations

import importlib
import re

import numpy as np
import pytest

import graphc
import graphc.passes as P
from graphc.errors import GraphcError, GraphVerificationError
from graphc.ir import Graph, verify

# the package exports the pass functions under their module names (graphc.passes.simplify
# is the function), so the module itself comes from the import system
S = importlib.import_module("graphc.passes.simplify")


def model(x):
    return (x * 2.0).exp() * x           # the line the failing node comes from


MODEL_LINE = model.__code__.co_firstlineno + 1
SRC = f"test_pass_errors.py:{MODEL_LINE}"


@pytest.fixture
def registered():
    """register_pass(...) for the test; every pass registered here is removed after."""
    names = []

    def reg(name, **kw):
        deco = P.register_pass(name, **kw)

        def wrap(fn):
            names.append(name)
            return deco(fn)
        return wrap

    before = (dict(P.PASSES), dict(P.PIPELINES))
    yield reg
    for name in names:
        P.unregister_pass(name)
    assert (dict(P.PASSES), dict(P.PIPELINES)) == before


def test_registration_orders_the_pipeline_and_is_undone(registered):
    @registered("noop", order=15, min_level=3)
    def noop(g):
        """does nothing"""
        return False

    assert P.PIPELINES[3] == ("simplify", "noop", "fold", "cse", "dce", "loops")
    assert P.PIPELINES[2] == ("simplify", "fold", "cse", "dce", "loops")
    assert P.REGISTRY["noop"].doc == "does nothing"
    assert P.PassManager(3).pipeline == ["simplify", "noop", "fold", "cse", "dce", "loops"]
    with pytest.raises(ValueError, match="already registered"):
        P.register_pass("noop", order=1)(noop)
    with pytest.raises(ValueError, match="unknown changes"):
        P.register_pass("bad", order=1, may=("change everything",))
    assert {p.name: sorted(p.may) for p in P.REGISTRY.values() if p.name != "noop"} == {
        "simplify": ["add nodes", "redirect uses", "remove nodes", "rewrite nodes"],
        "fold": ["rewrite nodes"], "cse": ["redirect uses", "remove nodes"],
        "dce": ["remove nodes"], "loops": ["add nodes", "remove nodes", "rewrite nodes"]}


def test_a_failing_pass_names_pass_node_op_and_source_line(registered):
    @registered("divide_muls", order=15)
    def divide_muls(g):
        """A broken pass: fails on the first multiplication of two non-constants."""
        ctx = P.current()
        for n in g.topo_order():
            ctx.node = n
            d = g.nx.nodes[n]
            if d["op"] == "mul" and all(g.nx.nodes[o]["op"] != "const" for o in d["operands"]):
                return 1 / 0
        return False

    cf = graphc.compile(model, backend="interpreter")
    with pytest.raises(GraphcError) as info:
        cf(np.ones(3))
    err = info.value
    msg = str(err)
    assert msg.startswith("graphc: pass 'divide_muls' failed at %")
    m = re.search(r"at %(\d+) = mul\(%(\d+), %0\) : f64\[3\] \(from (.*?)\): "
                  r"ZeroDivisionError: division by zero$", msg)
    assert m, msg
    assert m.group(3) == SRC
    assert isinstance(err, P.PassError) and isinstance(err, ZeroDivisionError)
    assert isinstance(err.__cause__, ZeroDivisionError) and err.original is err.__cause__
    assert err.pass_name == "divide_muls" and err.node == int(m.group(1)) and err.rule is None
    with pytest.raises(ZeroDivisionError):          # still catchable as the original type
        graphc.compile(model, backend="interpreter")(np.ones(3))


def test_a_failing_pass_without_a_node_names_the_pass(registered):
    @registered("crash", order=50, min_level=1)
    def crash(g):
        raise KeyError("missing")

    g = graphc.trace(model, np.ones(3))
    with pytest.raises(KeyError) as info:
        P.optimize(g, 1)
    assert str(info.value) == "graphc: pass 'crash' failed: KeyError: 'missing'"
    assert isinstance(info.value, GraphcError)


def test_a_failing_simplify_rule_names_the_rule():
    def guard(g, n, d):
        return n if d["operands"][1] in g.inputs else None

    def rewrite(g, n, d, match):
        raise ValueError(f"cannot rewrite %{match}")

    S.add_rule(S.Rule("broken x*y", ("mul",), guard, rewrite), before="x*1")
    try:
        assert S.rule_names()[0] == "broken x*y"
        with pytest.raises(ValueError) as info:
            graphc.compile(model, backend="interpreter")(np.ones(3))
    finally:
        S.remove_rule("broken x*y")
    assert "broken x*y" not in S.rule_names()
    msg = str(info.value)
    assert re.fullmatch(rf"graphc: pass 'simplify' \(rule 'broken x\*y'\) failed at %(\d+) = "
                        rf"mul\(%\d+, %0\) : f64\[3\] \(from {re.escape(SRC)}\): "
                        rf"ValueError: cannot rewrite %\1", msg), msg
    assert info.value.rule == "broken x*y"
    graphc.compile(model, backend="interpreter")(np.ones(3))    # the table is back


def test_simplify_counts_the_rules_that_fired():
    g = graphc.trace(lambda x: (-(-x)) * 1.0 + x ** 2, np.ones(3))
    _, pm = P.optimize(g, 2)
    assert pm.log[0].stats == {"neg(neg x)": 1, "x*1": 1, "x**2 -> x*x": 1}
    assert pm.stats() == {"simplify": {"neg(neg x)": 1, "x**2 -> x*x": 1, "x*1": 1}}
    assert "neg(neg x) x1" in repr(pm.log[0])
    assert "    neg(neg x) x1, x**2 -> x*x x1, x*1 x1" in pm.report(rules=True).splitlines()
    assert pm.report().count("\n") == len(pm.log) + 1        # the default has no rule lines


def _graph() -> Graph:
    g = Graph("g")
    x = g.add_input("x", (3,), "float64")
    y = g.add_input("y", (2,), "float64")
    e = g.add_node("exp", (x,))
    g.add_node("sin", (x,))                       # dead
    g.outputs = [g.add_node("neg", (e,)), y]
    verify(g)
    return g


def test_verify_each_checks_what_a_pass_declared(registered):
    @registered("sneaky_dce", order=15, may=("rewrite nodes",))
    def sneaky_dce(g):
        """Declares it only rewrites nodes, but removes the dead sin."""
        return P.dce(g)

    g = _graph()
    with pytest.raises(GraphVerificationError,
                       match=r"after pass 'sneaky_dce': it removed nodes \['%3'\] \(the pass "
                             r"declares it may change: rewrite nodes\)"):
        P.optimize(g, 2, verify_each=True)
    out, _ = P.optimize(g, 2)                     # unchecked, it goes through
    assert len(out) == len(g) - 1


def test_verify_each_checks_output_types_whatever_a_pass_declared(registered):
    @registered("swap_outputs", order=15,
                may=("add nodes", "remove nodes", "rewrite nodes", "redirect uses"))
    def swap_outputs(g):
        if g.outputs[1] == g.inputs[1]:
            g.outputs[1] = g.inputs[0]        # a valid graph, but output 1 is now f64[3]
            return True
        return False

    with pytest.raises(GraphVerificationError, match=r"after pass 'swap_outputs' at %0 = "
                                                     r"input\(\) : f64\[3\]: output 1 changed type"):
        P.optimize(_graph(), 2, verify_each=True)


@pytest.mark.parametrize("may, error", [
    (("redirect uses",), r"it added nodes \['%5'\]"),
    (("add nodes",), r"output 0 was redirected from %4 to %5"),
])
def test_verify_each_catches_undeclared_new_nodes_and_redirects(registered, may, error):
    @registered("copy_output", order=15, may=may)
    def copy_output(g):
        n = g.outputs[0]
        if g.nx.nodes[n]["op"] != "neg":
            return False
        g.outputs[0] = g.add_node("copy", (n,))
        return True

    with pytest.raises(GraphVerificationError, match=r"after pass 'copy_output'.*" + error):
        P.optimize(_graph(), 2, verify_each=True)


def test_the_real_passes_keep_their_promises_on_a_gradient_graph():
    g = graphc.trace(lambda x, w: ((x * w).tanh() ** 2 * 1.0).sum(), np.ones(4),
                     np.array(0.5)).grad()
    for level in (1, 2, 3):
        out, pm = P.optimize(g, level, verify_each=True)
        assert pm.log and (len(out) < len(g) if level >= 2 else len(out) == len(g))
