"""JSON form of a Graph with strict, pickle-free, eval-free loading.

Loading validates the whole document against a fixed schema: known top-level
keys, known ops only, operands that refer to earlier nodes (so the graph is
acyclic by construction), the op's exact attribute names with typed values,
and every shape re-derived by the op's shape rule.  Sizes are bounded so a
hostile file cannot exhaust memory.
"""
from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np

from eager._dtype import FROM_NP
from eager.ops.registry import OPS

from .errors import GraphFormatError
from .ir import Graph, verify

FORMAT = "graphc-ir"
VERSION = 1
MAX_TEXT = 64 * 1024 * 1024
MAX_NODES = 1_000_000
MAX_CONST_ELEMENTS = 10_000_000
MAX_RANK = 32
MAX_DIM = 2 ** 31 - 1
_DTYPES = {d.name for d in FROM_NP}


def _enc(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        data = np.ascontiguousarray(v).astype(v.dtype.newbyteorder("<"), copy=False)
        return {"$array": {"dtype": v.dtype.name, "shape": list(v.shape),
                           "data": base64.b64encode(data.tobytes()).decode("ascii")}}
    if isinstance(v, tuple):
        return {"$tuple": [_enc(x) for x in v]}
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, float) and not np.isfinite(v):
        return {"$float": repr(v)}
    return v


def to_json(g: Graph) -> str:
    nodes = []
    for nid in g.topo_order():
        d = g.nx.nodes[nid]
        nodes.append({"id": nid, "op": d["op"], "operands": list(d["operands"]),
                      "attrs": {k: _enc(v) for k, v in sorted(d["attrs"].items())},
                      "shape": list(d["shape"]), "dtype": d["dtype"], "src": d.get("src", ""),
                      "role": d.get("role", "forward"), "by": d.get("by", "trace")})
    doc = {"format": FORMAT, "version": VERSION, "name": g.name, "inputs": list(g.inputs),
           "outputs": list(g.outputs), "nodes": nodes}
    return json.dumps(doc, indent=1, allow_nan=False)


def _fail(msg: str, where: str = "") -> None:
    raise GraphFormatError(f"invalid graph JSON{(' at ' + where) if where else ''}: {msg}")


def _int(v: Any, where: str, lo: int = 0, hi: int = MAX_DIM) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        _fail(f"expected an integer in [{lo}, {hi}], got {v!r}", where)
    return v


def _shape(v: Any, where: str) -> tuple:
    if not isinstance(v, list) or len(v) > MAX_RANK:
        _fail(f"expected a shape (list of at most {MAX_RANK} ints), got {v!r}", where)
    return tuple(_int(x, where) for x in v)


def _dec_array(spec: Any, where: str) -> np.ndarray:
    if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data"}:
        _fail("array must have exactly dtype, shape and data", where)
    if spec["dtype"] not in _DTYPES:
        _fail(f"unsupported array dtype {spec['dtype']!r}", where)
    shape = _shape(spec["shape"], where)
    n = int(np.prod(shape, dtype=np.int64))
    if n > MAX_CONST_ELEMENTS:
        _fail(f"constant of {n} elements exceeds the limit of {MAX_CONST_ELEMENTS}", where)
    dt = np.dtype(spec["dtype"]).newbyteorder("<")
    if not isinstance(spec["data"], str):
        _fail("array data must be a base64 string", where)
    try:
        raw = base64.b64decode(spec["data"], validate=True)
    except (ValueError, TypeError):
        _fail("array data is not valid base64", where)
    if len(raw) != n * dt.itemsize:
        _fail(f"array data has {len(raw)} bytes, expected {n * dt.itemsize}", where)
    arr = np.frombuffer(raw, dtype=dt).astype(dt.newbyteorder("="), copy=True).reshape(shape)
    arr.setflags(write=False)
    return arr


def _dec(v: Any, where: str, depth: int = 0) -> Any:
    if depth > 16:
        _fail("attribute nesting too deep", where)
    if isinstance(v, dict):
        if set(v) == {"$array"}:
            return _dec_array(v["$array"], where)
        if set(v) == {"$tuple"} and isinstance(v["$tuple"], list):
            if len(v["$tuple"]) > 4096:
                _fail("attribute tuple too long", where)
            return tuple(_dec(x, where, depth + 1) for x in v["$tuple"])
        if set(v) == {"$float"} and v["$float"] in ("inf", "-inf", "nan"):
            return float(v["$float"])
        _fail(f"unexpected attribute object with keys {sorted(v)}", where)
    if isinstance(v, (bool, int, float, str)) or v is None:
        if isinstance(v, str) and len(v) > 256:
            _fail("attribute string too long", where)
        return v
    _fail(f"unexpected attribute value {v!r}", where)


_ATTR_CHECKS = {
    "axis": lambda v: v is None or isinstance(v, int) or (
        isinstance(v, tuple) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)),
    "keepdim": lambda v: isinstance(v, bool),
    "shape": lambda v: isinstance(v, tuple) and all(
        isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_DIM for x in v),
    "perm": lambda v: isinstance(v, tuple) and all(isinstance(x, int) for x in v),
    "dtype": lambda v: isinstance(v, str) and v in _DTYPES,
    "value": lambda v: isinstance(v, (int, float, bool)) or isinstance(v, np.ndarray),
    "min": lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)),
    "max": lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)),
    "index": lambda v: isinstance(v, tuple) and all(_index_item_ok(x) for x in v),
    "name": lambda v: isinstance(v, str),
}


def _index_item_ok(x: Any) -> bool:
    if not isinstance(x, tuple) or not x or x[0] not in ("i", "s", "n", "e", "t"):
        return False
    tag = x[0]
    if tag == "i":
        return len(x) == 2 and isinstance(x[1], int) and not isinstance(x[1], bool)
    if tag == "s":
        return len(x) == 4 and all(p is None or (isinstance(p, int) and not isinstance(p, bool))
                                   for p in x[1:])
    if tag == "t":
        return len(x) == 2 and isinstance(x[1], int) and x[1] >= 0
    return len(x) == 1


def from_json(text: str) -> Graph:
    """Parse and validate a graph; raises GraphFormatError naming the offending node."""
    if not isinstance(text, str):
        _fail(f"expected a str, got {type(text).__name__}")
    if len(text) > MAX_TEXT:
        _fail(f"document of {len(text)} characters exceeds the limit of {MAX_TEXT}")
    try:
        doc = json.loads(text, parse_constant=lambda c: _fail(f"non-standard constant {c}"))
    except json.JSONDecodeError as e:
        _fail(f"not valid JSON: {e}")
    if not isinstance(doc, dict):
        _fail("top level must be an object")
    expected = {"format", "version", "name", "inputs", "outputs", "nodes"}
    if set(doc) != expected:
        _fail(f"top-level keys must be {sorted(expected)}, got {sorted(doc)}")
    if doc["format"] != FORMAT or doc["version"] != VERSION:
        _fail(f"unsupported format {doc['format']!r} version {doc['version']!r}")
    if not isinstance(doc["name"], str) or len(doc["name"]) > 256:
        _fail("name must be a short string")
    nodes = doc["nodes"]
    if not isinstance(nodes, list) or len(nodes) > MAX_NODES:
        _fail(f"nodes must be a list of at most {MAX_NODES} entries")
    g = Graph(doc["name"])
    idmap: dict = {}
    node_keys = {"id", "op", "operands", "attrs", "shape", "dtype", "src", "role", "by"}
    for k, n in enumerate(nodes):
        where = f"nodes[{k}]"
        if not isinstance(n, dict) or set(n) != node_keys:
            _fail(f"each node needs exactly the keys {sorted(node_keys)}", where)
        nid = _int(n["id"], where, 0, 2 ** 62)
        if nid in idmap:
            _fail(f"duplicate node id {nid}", where)
        op = n["op"]
        where = f"nodes[{k}] (%{nid} = {op})"
        if not isinstance(op, str) or (op not in OPS and op not in ("input", "const")):
            _fail(f"unknown op {op!r}", where)
        if not isinstance(n["operands"], list):
            _fail("operands must be a list", where)
        operands = []
        for o in n["operands"]:
            o = _int(o, where, 0, 2 ** 62)
            if o not in idmap:
                _fail(f"operand %{o} is not defined before its use", where)
            operands.append(idmap[o])
        if not isinstance(n["attrs"], dict):
            _fail("attrs must be an object", where)
        attrs = {key: _dec(v, where) for key, v in n["attrs"].items()}
        shape = _shape(n["shape"], where)
        if n["dtype"] not in _DTYPES:
            _fail(f"unsupported dtype {n['dtype']!r}", where)
        for key in ("src", "role", "by"):
            if not isinstance(n[key], str) or len(n[key]) > 1024:
                _fail(f"{key} must be a short string", where)
        if n["role"] not in ("forward", "backward"):
            _fail(f"role must be forward or backward, got {n['role']!r}", where)
        g._next_id = nid        # keep the document's ids: the text form survives a round trip
        if op == "input":
            if operands or set(attrs) != {"name", "index"} or not isinstance(attrs["name"], str):
                _fail("input nodes take no operands and attrs {name, index}", where)
            new = g.add_node("input", (), attrs, shape=shape, dtype=n["dtype"], by=n["by"])
        elif op == "const":
            if operands or set(attrs) != {"value"} or not isinstance(attrs["value"], np.ndarray):
                _fail("const nodes take no operands and an array attr 'value'", where)
            v = attrs["value"]
            if v.shape != shape or v.dtype.name != n["dtype"]:
                _fail("const value does not match the node's shape/dtype", where)
            new = g.add_node("const", (), attrs, shape=shape, dtype=n["dtype"], src=n["src"],
                             role=n["role"], by=n["by"])
        else:
            opdef = OPS[op]
            if opdef.arity is not None and len(operands) != opdef.arity:
                _fail(f"{op} takes {opdef.arity} operands, got {len(operands)}", where)
            if opdef.arity is None and not operands:
                _fail(f"{op} needs at least one operand", where)
            if set(attrs) != set(opdef.attrs):
                _fail(f"{op} takes attrs {sorted(opdef.attrs)}, got {sorted(attrs)}", where)
            for key, v in attrs.items():
                check = _ATTR_CHECKS.get(key)
                if check is None or not check(v):
                    _fail(f"attr {key}={v!r} has the wrong type for {op}", where)
            try:
                m = g.infer(op, operands, attrs)
            except Exception as e:  # the shape rule rejected the operands/attrs
                _fail(f"shape rule rejected the node: {e}", where)
            if tuple(m.shape) != shape or m.dtype.name != n["dtype"]:
                _fail(f"declared {n['dtype']}{list(shape)} but the shape rule derives "
                      f"{m.dtype.name}{list(m.shape)}", where)
            new = g.add_node(op, operands, attrs, shape=shape, dtype=n["dtype"], src=n["src"],
                             role=n["role"], by=n["by"])
        idmap[nid] = new
    g._next_id = max(idmap, default=-1) + 1
    for key in ("inputs", "outputs"):
        if not isinstance(doc[key], list):
            _fail(f"{key} must be a list")
    for i in doc["inputs"]:
        if not isinstance(i, int) or isinstance(i, bool) or i not in idmap or \
                g.nx.nodes[idmap[i]]["op"] != "input":
            _fail(f"input {i!r} is not an input node")
    if sorted(idmap[i] for i in doc["inputs"]) != sorted(
            n for n, d in g.nx.nodes(data=True) if d["op"] == "input"):
        _fail("graph.inputs must list every input node exactly once")
    g.inputs = [idmap[i] for i in doc["inputs"]]
    for pos, nid in enumerate(g.inputs):
        g.nx.nodes[nid]["attrs"]["index"] = pos
    g.input_names = [g.nx.nodes[i]["attrs"]["name"] for i in g.inputs]
    for o in doc["outputs"]:
        if not isinstance(o, int) or isinstance(o, bool) or o not in idmap:
            _fail(f"output {o!r} is not a node")
    g.outputs = [idmap[o] for o in doc["outputs"]]
    verify(g, "from_json")
    return g
