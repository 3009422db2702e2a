"""The JSON form of the IR: lossless round trips and strict, pickle-free loading.

Round trip: ``Graph.from_json(g.to_json())`` prints the same text, keeps every
node attribute (provenance included) and interprets to the same numbers, for
the seeds, for one graph per op sample and for graphs after a rewrite.

Rejection: every malformed document raises ``graphc.GraphFormatError`` (a
``ValueError``); errors about one node name it as ``nodes[k] (%id = op)``.
"""
from __future__ import annotations

import builtins
import copy
import json
import pickle

import numpy as np
import pytest

import graphc
from graphc.tools.workloads import seed_loss  # the seed MLP's loss, defined once
from eager.surface import _dispatch
from eager.ops import OPS
from graphc.ir import serialize
from graphc.interpreter import interpret

RNG = np.random.default_rng(0)


def L3(a, w1, w2, w3, w4):
    b = w1 * a
    c = w2 * a
    d = w3 * b + w4 * c
    return (10 - d).sum()


def _seed_graphs():
    l3_args = [RNG.standard_normal((3, 3)).astype(np.float32) for _ in range(5)]
    mlp_args = [RNG.standard_normal(s).astype(np.float32)
                for s in [(64, 1000), (64, 10), (1000, 100), (100, 10)]]
    return [(graphc.trace(L3, *l3_args), l3_args), (graphc.trace(seed_loss, *mlp_args), mlp_args)]


def _node_attrs_equal(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for k in a:
        if k == "attrs":
            assert set(a[k]) == set(b[k])
            for name, v in a[k].items():
                w = b[k][name]
                if isinstance(v, np.ndarray):
                    assert isinstance(w, np.ndarray) and v.dtype == w.dtype and v.shape == w.shape
                    np.testing.assert_array_equal(v, w)
                else:
                    assert type(v) is type(w) and (v == w or (v != v and w != w)), (name, v, w)
        else:
            assert a[k] == b[k], (k, a[k], b[k])


def _assert_round_trip(g: graphc.Graph, args) -> graphc.Graph:
    text = g.to_json()
    g2 = graphc.Graph.from_json(text)
    assert str(g2) == str(g)
    assert g2.to_json() == text                      # a fixed point
    assert g2.name == g.name and g2.input_names == g.input_names
    assert g2.inputs == g.inputs and g2.outputs == g.outputs
    assert g2.node_ids() == g.node_ids()
    for n in g.node_ids():
        _node_attrs_equal(g[n], g2[n])
    for a, b in zip(interpret(g, *args), interpret(g2, *args)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    return g2


# ---------------------------------------------------------------------------
# round trips


def test_round_trip_seeds():
    for g, args in _seed_graphs():
        _assert_round_trip(g, args)


def test_json_document_shape():
    g, _ = _seed_graphs()[0]
    doc = json.loads(g.to_json())
    assert set(doc) == {"format", "version", "name", "inputs", "outputs", "nodes"}
    assert doc["format"] == "graphc-ir" and doc["version"] == 1 and doc["name"] == "L3"
    assert [n["id"] for n in doc["nodes"]] == g.topo_order()
    for n in doc["nodes"]:
        assert set(n) == {"id", "op", "operands", "attrs", "shape", "dtype", "src", "role", "by"}
    const = next(n for n in doc["nodes"] if n["op"] == "const")
    assert set(const["attrs"]["value"]) == {"$array"}
    assert set(const["attrs"]["value"]["$array"]) == {"dtype", "shape", "data"}
    mul = next(n for n in doc["nodes"] if n["op"] == "mul")
    assert mul["src"].startswith("test_ir_json.py:") and mul["role"] == "forward"


def _op_cases():
    return [pytest.param(name, k, id=f"{name}-{k}")
            for name in sorted(OPS) for k, _ in enumerate(OPS[name].samples())]


@pytest.mark.parametrize("name, k", _op_cases())
def test_round_trip_every_op_sample(name, k):
    """Every attribute kind (axes, index specs with None, dtypes, shapes...) survives."""
    inputs, attrs = OPS[name].samples()[k]
    arrays = [np.asarray(a) for a in inputs]
    g = graphc.trace(lambda *xs: _dispatch(name, "X", xs, dict(attrs)), *arrays)
    _assert_round_trip(g, arrays)


def test_round_trip_special_floats_and_all_dtypes():
    c = np.array([np.nan, np.inf, -np.inf, -0.0, 1e-310], dtype=np.float64)

    def f(x, i, b):
        y = x.clamp(min=float("-inf"), max=float("inf")) + c
        z = _dispatch("fill", "X", (x,), {"value": float("nan")})
        k = (i * 3 + np.array([1, 2, 3, 4, 5], dtype=np.int32)).sum()
        return y, z, k, b & np.array([True, False, True, False, True]), x.to(np.float32)

    args = [np.linspace(-1, 1, 5), np.arange(5, dtype=np.int32), np.ones(5, dtype=bool)]
    g = graphc.trace(f, *args)
    g2 = _assert_round_trip(g, args)
    out = interpret(g2, *args)
    assert np.isnan(out[1]).all() and out[2].dtype == np.int64 and out[4].dtype == np.float32
    doc = json.loads(g.to_json())
    clamp = next(n for n in doc["nodes"] if n["op"] == "clamp")
    assert clamp["attrs"] == {"min": {"$float": "-inf"}, "max": {"$float": "inf"}}
    fill = next(n for n in doc["nodes"] if n["op"] == "fill")
    assert fill["attrs"] == {"value": {"$float": "nan"}}
    assert "NaN" not in g.to_json() and "Infinity" not in g.to_json()   # strict JSON


def test_round_trip_keeps_ids_after_a_rewrite():
    """After a rewrite the ids are no longer in topological order; the text still survives."""
    x = np.linspace(-1, 1, 4).astype(np.float32)
    g = graphc.trace(lambda x: (x.exp() + 1).sin(), x)
    exp = next(n for n in g.node_ids() if g[n]["op"] == "exp")
    new = g.add_node("cos", [g.inputs[0]], by="test_rewrite")
    g.replace_uses(exp, new)
    g.remove_node(exp)
    g.verify("test_rewrite")
    g2 = _assert_round_trip(g, [x])
    assert "# by test_rewrite" in str(g2)
    assert g2.add_node("neg", [new]) == new + 1      # fresh ids continue after the largest one


def test_round_trip_backward_role_and_names():
    g = graphc.trace(lambda x: x * 2, np.ones(3))
    mul = next(n for n in g.node_ids() if g[n]["op"] == "mul")
    g.nx.nodes[mul]["role"] = "backward"
    g2 = _assert_round_trip(g, [np.ones(3)])
    assert g2[mul]["role"] == "backward" and "backward" in str(g2)


# ---------------------------------------------------------------------------
# rejection of malformed documents

W = np.arange(12, dtype=np.float32).reshape(3, 4)


def _base():
    """x:f32[3,4]; %1 = const W; %2 = mul(x, %1); %3 = sum(%2, axis=1); %4 = clamp(%2)."""
    def base(x):
        y = x * W
        return y.sum(1, keepdim=True), y.clamp(min=0.0)

    g = graphc.trace(base, np.ones((3, 4), np.float32))
    return json.loads(g.to_json())


def _node(doc: dict, op: str) -> dict:
    return next(n for n in doc["nodes"] if n["op"] == op)


def _load(doc) -> None:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    graphc.Graph.from_json(text)


def test_base_document_loads():
    doc = _base()
    assert [n["op"] for n in doc["nodes"]] == ["input", "const", "mul", "sum", "clamp"]
    _load(doc)


def _mutate(fn):
    doc = _base()
    fn(doc)
    return doc


NODE_ERRORS = {
    "unknown op": (lambda d: _node(d, "mul").update(op="os.system"),
                   r"nodes\[2\] \(%2 = os\.system\): unknown op 'os\.system'"),
    "wrong arity": (lambda d: _node(d, "mul").update(operands=[0]),
                    r"nodes\[2\] \(%2 = mul\): mul takes 2 operands, got 1"),
    "wrong attr names": (lambda d: _node(d, "sum")["attrs"].update(
        axes=_node(d, "sum")["attrs"].pop("axis")),
        r"nodes\[3\] \(%3 = sum\): sum takes attrs \['axis', 'keepdim'\], "
        r"got \['axes', 'keepdim'\]"),
    "extra attr": (lambda d: _node(d, "mul")["attrs"].update(evil=1),
                   r"\(%2 = mul\): mul takes attrs \[\], got \['evil'\]"),
    "bad attr type (keepdim str)": (lambda d: _node(d, "sum")["attrs"].update(keepdim="yes"),
                                    r"\(%3 = sum\): attr keepdim='yes' has the wrong type for sum"),
    "bad attr type (axis str)": (lambda d: _node(d, "sum")["attrs"].update(axis="1"),
                                 r"\(%3 = sum\): attr axis='1' has the wrong type"),
    "bad attr type (min bool)": (lambda d: _node(d, "clamp")["attrs"].update(min=True),
                                 r"\(%4 = clamp\): attr min=True has the wrong type"),
    "bad attr object": (lambda d: _node(d, "clamp")["attrs"].update(min={"$eval": "1"}),
                        r"\(%4 = clamp\): unexpected attribute object with keys \['\$eval'\]"),
    "operand defined later (cycle attempt)": (
        lambda d: _node(d, "mul").update(operands=[0, 3]),
        r"\(%2 = mul\): operand %3 is not defined before its use"),
    "self-referencing operand": (lambda d: _node(d, "mul").update(operands=[2, 1]),
                                 r"\(%2 = mul\): operand %2 is not defined before its use"),
    "nonexistent operand": (lambda d: _node(d, "mul").update(operands=[0, 999]),
                            r"\(%2 = mul\): operand %999 is not defined before its use"),
    "negative operand": (lambda d: _node(d, "mul").update(operands=[0, -1]),
                         r"\(%2 = mul\): expected an integer"),
    "declared shape differs from the shape rule": (
        lambda d: _node(d, "mul").update(shape=[3, 5]),
        r"\(%2 = mul\): declared float32\[3, 5\] but the shape rule derives float32\[3, 4\]"),
    "declared dtype differs from the shape rule": (
        lambda d: _node(d, "sum").update(dtype="float64"),
        r"\(%3 = sum\): declared float64\[3, 1\] but the shape rule derives float32\[3, 1\]"),
    "shape rule rejects the operands": (
        lambda d: d["nodes"][0].update(shape=[5]),
        r"\(%2 = mul\): shape rule rejected the node: .*size of tensor a \(5\)"),
    "axis out of range": (lambda d: _node(d, "sum")["attrs"].update(axis={"$tuple": [7]}),
                          r"\(%3 = sum\): shape rule rejected the node: .*dimension out of range"),
    "unsupported dtype": (lambda d: _node(d, "mul").update(dtype="object"),
                          r"\(%2 = mul\): unsupported dtype 'object'"),
    "unknown role": (lambda d: _node(d, "mul").update(role="sideways"),
                     r"\(%2 = mul\): role must be forward or backward"),
    "missing node key": (lambda d: _node(d, "mul").pop("src"),
                         r"nodes\[2\]: each node needs exactly the keys"),
    "duplicate id": (lambda d: _node(d, "sum").update(id=2),
                     r"nodes\[3\]: duplicate node id 2"),
    "oversized const": (lambda d: _node(d, "const")["attrs"]["value"]["$array"].update(
        shape=[100_000, 1000]),
        r"\(%1 = const\): constant of 100000000 elements exceeds the limit of 10000000"),
    "bad base64": (lambda d: _node(d, "const")["attrs"]["value"]["$array"].update(data="@@@@!!"),
                   r"\(%1 = const\): array data is not valid base64"),
    "const data length": (lambda d: _node(d, "const")["attrs"]["value"]["$array"].update(
        data="AAAA"), r"\(%1 = const\): array data has 3 bytes, expected 48"),
    "const pickled object dtype": (
        lambda d: _node(d, "const")["attrs"]["value"]["$array"].update(dtype="object"),
        r"\(%1 = const\): unsupported array dtype 'object'"),
    "const value vs node type": (lambda d: _node(d, "const").update(shape=[4, 3]),
                                 r"\(%1 = const\): const value does not match"),
    "huge dimension": (lambda d: d["nodes"][0].update(shape=[2 ** 40]),
                       r"\(%0 = input\): expected an integer in \[0, 2147483647\]"),
    "rank too large": (lambda d: d["nodes"][0].update(shape=[1] * 40),
                       r"\(%0 = input\): expected a shape"),
    "input without a name": (lambda d: d["nodes"][0][
        "attrs"].pop("name"), r"\(%0 = input\): input nodes take no operands and attrs"),
}


@pytest.mark.parametrize("case", sorted(NODE_ERRORS))
def test_malformed_node_is_rejected_naming_the_node(case):
    mutate, pattern = NODE_ERRORS[case]
    doc = _mutate(mutate)
    with pytest.raises(graphc.GraphFormatError, match=pattern) as ei:
        _load(doc)
    assert isinstance(ei.value, ValueError) and isinstance(ei.value, graphc.GraphcError)
    assert str(ei.value).startswith("invalid graph JSON at nodes[")


def _set_top(key, value):
    return lambda d: d.__setitem__(key, value)


DOC_ERRORS = {
    "extra top-level key": (_set_top("evil", 1), r"top-level keys must be"),
    "missing top-level key": (lambda d: d.pop("nodes"), r"top-level keys must be"),
    "wrong format": (_set_top("format", "onnx"), r"unsupported format 'onnx'"),
    "wrong version": (_set_top("version", 99), r"version 99"),
    "name not a string": (_set_top("name", ["x"]), r"name must be a short string"),
    "nodes not a list": (_set_top("nodes", {}), r"nodes must be a list"),
    "output not a node": (_set_top("outputs", [3, 42]), r"output 42 is not a node"),
    "output is a bool": (_set_top("outputs", [True]), r"output True is not a node"),
    "inputs unhashable": (_set_top("inputs", [[0]]), r"input \[0\] is not an input node"),
    "input not an input node": (_set_top("inputs", [2]), r"input 2 is not an input node"),
    "input listed twice": (_set_top("inputs", [0, 0]), r"every input node exactly once"),
    "input not listed": (_set_top("inputs", []), r"every input node exactly once"),
    "inputs not a list": (_set_top("inputs", 0), r"inputs must be a list"),
}


@pytest.mark.parametrize("case", sorted(DOC_ERRORS))
def test_malformed_document_is_rejected(case):
    mutate, pattern = DOC_ERRORS[case]
    with pytest.raises(graphc.GraphFormatError, match=pattern):
        _load(_mutate(mutate))


@pytest.mark.parametrize("text, pattern", [
    ("{not json", r"not valid JSON"),
    ("", r"not valid JSON"),
    ("[1, 2]", r"top level must be an object"),
    ("null", r"top level must be an object"),
])
def test_not_json(text, pattern):
    with pytest.raises(graphc.GraphFormatError, match=pattern):
        graphc.Graph.from_json(text)


def test_bytes_are_not_a_document():
    with pytest.raises(graphc.GraphFormatError, match="expected a str, got bytes"):
        graphc.Graph.from_json(json.dumps(_base()).encode())


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_literal_is_rejected(literal):
    text = json.dumps(_base())
    assert '"min": 0.0' in text
    bad = text.replace('"min": 0.0', f'"min": {literal}')
    with pytest.raises(graphc.GraphFormatError, match=f"non-standard constant {literal}"):
        graphc.Graph.from_json(bad)


def test_document_size_limit(monkeypatch):
    text = json.dumps(_base())
    monkeypatch.setattr(serialize, "MAX_TEXT", len(text) - 1)
    with pytest.raises(graphc.GraphFormatError, match="exceeds the limit"):
        graphc.Graph.from_json(text)


def test_node_count_limit(monkeypatch):
    monkeypatch.setattr(serialize, "MAX_NODES", 4)
    with pytest.raises(graphc.GraphFormatError, match="nodes must be a list of at most 4"):
        _load(_base())


def test_deeply_nested_attribute_is_rejected():
    v = 0
    for _ in range(40):
        v = {"$tuple": [v]}
    doc = _mutate(lambda d: _node(d, "sum")["attrs"].update(axis=v))
    with pytest.raises(graphc.GraphFormatError, match=r"\(%3 = sum\): attribute nesting too deep"):
        _load(doc)


def test_rejection_does_not_mutate_and_errors_are_catchable_as_value_error():
    doc = _base()
    before = copy.deepcopy(doc)
    mul = _node(doc, "mul")
    mul["op"] = "nope"
    with pytest.raises(ValueError):
        _load(doc)
    mul["op"] = "mul"
    assert doc == before
    _load(doc)


def test_loading_never_unpickles_or_evaluates(monkeypatch):
    def forbidden(*a, **k):
        raise AssertionError("graph loading must not unpickle or evaluate code")

    texts = [g.to_json() for g, _ in _seed_graphs()]
    texts += [graphc.trace(lambda *xs: _dispatch(name, "X", xs, dict(attrs)),
                           *[np.asarray(a) for a in inputs]).to_json()
              for name in ("getitem", "setitem", "cast", "fill", "sum", "transpose")
              for inputs, attrs in OPS[name].samples()]
    for mod, attr in [(pickle, "loads"), (pickle, "load"), (pickle, "Unpickler"),
                      (builtins, "eval"), (builtins, "exec"), (np, "load")]:
        monkeypatch.setattr(mod, attr, forbidden)
    for text in texts:
        g = graphc.Graph.from_json(text)
        assert g.to_json() == text
    # a const array is rebuilt from raw bytes, never from a pickle stream
    monkeypatch.undo()
    for text in texts:
        doc = json.loads(text)
        for n in doc["nodes"]:
            if n["op"] == "const":
                assert n["attrs"]["value"]["$array"]["dtype"] in serialize._DTYPES


def test_every_attribute_type_has_a_json_check():
    """The JSON reader checks an op's attributes by the types its record declares: every
    type of the registry has a check, and a value of the wrong type is refused, naming the
    attribute and the type expected."""
    from eager.ops.registry import ATTR_TYPES, OPS
    from graphc.ir.serialize import TYPE_CHECKS
    assert set(TYPE_CHECKS) == set(ATTR_TYPES)
    for name, op in OPS.items():
        assert set(op.attr_types) == set(op.attrs), name
        assert set(op.attr_types.values()) <= set(TYPE_CHECKS), name


def test_attribute_of_the_wrong_type_is_refused():
    import json as _json
    g = graphc.trace(lambda x: x.sum(0, keepdim=True), np.ones((2, 3)))
    doc = _json.loads(g.to_json())
    for n in doc["nodes"]:
        if n["op"] == "sum":
            n["attrs"]["keepdim"] = 1
    with pytest.raises(graphc.GraphFormatError, match=r"keepdim=1 .*True or False"):
        graphc.Graph.from_json(_json.dumps(doc))
