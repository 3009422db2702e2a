"""JSON form of a Graph with strict, pickle-free, eval-free loading.

Loading validates the whole document against a fixed schema: known top-level
keys, known ops only, operands that refer to earlier nodes (so the graph is
acyclic by construction), the op's exact attribute names with typed values,
and every shape re-derived by the op's shape rule.  Sizes are bounded so a
hostile file cannot exhaust memory (nor the C stack: nesting is measured
before ``json.loads`` recurses), and every string is free of control
characters, because names and source lines end up in LLVM IR comments where a
``\r`` would end the comment.  Whatever the document holds, loading returns a
Graph or raises GraphFormatError.

This module sits below ``graphc.ir.graph`` and does not import it: ``Graph.to_json``
and ``Graph.from_json`` call down into it, the latter passing the class to build.
"""

from __future__ import annotations

import base64
import json
import math
import re
import sys
from typing import Any

import numpy as np

from eager.interop import FROM_NP
from eager.interop import ATTR_TYPES, OPS

from ..errors import GraphFormatError, GraphVerificationError
from .loops import GRAPH_ATTRS, STRUCT_OPS, check_node
from .verify import verify

FORMAT = "graphc-ir"
VERSION = 1
MAX_TEXT = 64 * 1024 * 1024
MAX_NODES = 1_000_000
MAX_CONST_ELEMENTS = 10_000_000
MAX_RANK = 32
MAX_DIM = 2**31 - 1
MAX_DEPTH = 100  # [ and { nesting; a valid graph document needs at most 41
MAX_STR = 256  # name, input names, attribute strings
MAX_PROVENANCE = 1024  # src, role, by
INT64 = (-(2**63), 2**63 - 1)  # integer attributes become i64 constants
_DTYPES = {d.name for d in FROM_NP}
# C0, DEL, C1 (NEL \x85 included), the Unicode line and paragraph separators, and lone
# surrogates (not encodable as UTF-8): anything that could end a line (an LLVM comment)
# or fail to print
_BAD_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def _enc(v: Any) -> Any:
    if hasattr(v, "nx") and hasattr(v, "outputs"):  # a loop's body: a nested document
        return {"$graph": _doc(v)}
    if isinstance(v, np.ndarray):
        data = np.ascontiguousarray(v).astype(v.dtype.newbyteorder("<"), copy=False)
        return {
            "$array": {
                "dtype": v.dtype.name,
                "shape": list(v.shape),
                "data": base64.b64encode(data.tobytes()).decode("ascii"),
            }
        }
    if isinstance(v, tuple):
        return {"$tuple": [_enc(x) for x in v]}
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, float) and not np.isfinite(v):
        return {"$float": repr(v)}
    return v


def to_json(g) -> str:
    return json.dumps(_doc(g), indent=1, allow_nan=False)


def _doc(g) -> dict:
    nodes = []
    for nid in g.topo_order():
        d = g.nx.nodes[nid]
        nodes.append(
            {
                "id": nid,
                "op": d["op"],
                "operands": list(d["operands"]),
                "attrs": {k: _enc(v) for k, v in sorted(d["attrs"].items())},
                "shape": list(d["shape"]),
                "dtype": d["dtype"],
                "src": d.get("src", ""),
                "role": d.get("role", "forward"),
                "by": d.get("by", "trace"),
            }
        )
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "name": g.name,
        "inputs": list(g.inputs),
        "outputs": list(g.outputs),
        "nodes": nodes,
    }
    return doc


def _fail(msg: str, where: str = "") -> None:
    raise GraphFormatError(f"invalid graph JSON{(' at ' + where) if where else ''}: {msg}")


def _show(v: Any, limit: int = 60) -> str:
    """repr of a document value for a message: escaped, and short whatever it holds."""
    if isinstance(v, (list, dict)) and len(v) > 8:
        return f"a JSON {'array' if isinstance(v, list) else 'object'} of {len(v)} entries"
    r = repr(v)
    return r if len(r) <= limit else r[:limit] + "..."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int(v: Any, where: str, lo: int = 0, hi: int = MAX_DIM) -> int:
    if not _is_int(v) or not lo <= v <= hi:
        _fail(f"expected an integer in [{lo}, {hi}], got {_show(v)}", where)
    return v


def _str(v: Any, where: str, what: str, limit: int = MAX_STR) -> str:
    """A string field: at most ``limit`` characters, none of them a control character."""
    if not isinstance(v, str) or len(v) > limit:
        _fail(f"{what} must be a short string (at most {limit} characters), got {_show(v)}", where)
    bad = _BAD_CHARS.search(v)
    if bad is not None:
        _fail(
            f"{what} {_show(v)} contains the control character {bad.group()!r} at position "
            f"{bad.start()}",
            where,
        )
    return v


def _dtype(v: Any, where: str, what: str = "dtype") -> str:
    if not isinstance(v, str) or v not in _DTYPES:
        _fail(f"unsupported {what} {_show(v)}", where)
    return v


def _shape(v: Any, where: str, dtype: str) -> tuple:
    """A declared shape whose array numpy could allocate (at most sys.maxsize bytes of
    ``dtype``); checked with Python ints, without allocating anything."""
    if not isinstance(v, list) or len(v) > MAX_RANK:
        _fail(f"expected a shape (list of at most {MAX_RANK} ints), got {_show(v)}", where)
    shape = tuple(_int(x, where) for x in v)
    if math.prod(shape) * np.dtype(dtype).itemsize > sys.maxsize:
        _fail(f"{dtype}{list(shape)} is larger than any array can be ({sys.maxsize} bytes)", where)
    return shape


def _nesting(text: str) -> int:
    """Deepest ``[``/``{`` nesting outside strings, measured without recursion (the C
    JSON decoder recurses once per level, and a raised recursion limit would let a deep
    document overflow the C stack).  Only counted when there are enough brackets."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return 0
    raw = _JSON_STRING.sub("", text).encode("utf-8", "surrogatepass")
    depth = peak = 0
    chunk = 1 << 20
    for start in range(0, len(raw), chunk):
        a = np.frombuffer(raw, np.uint8, count=min(chunk, len(raw) - start), offset=start)
        step = (a == 0x5B).astype(np.int64) + (a == 0x7B) - (a == 0x5D) - (a == 0x7D)
        run = np.cumsum(step) + depth
        peak = max(peak, int(run.max()))
        depth = int(run[-1])
    return peak


def _dec_array(spec: Any, where: str) -> np.ndarray:
    if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data"}:
        _fail("array must have exactly dtype, shape and data", where)
    shape = _shape(spec["shape"], where, _dtype(spec["dtype"], where, "array dtype"))
    n = math.prod(shape)
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
    """An attribute value (recursion bounded by the depth limit)."""
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
        _fail(f"unexpected attribute object with keys {_show(sorted(v))}", where)
    if isinstance(v, str):
        return _str(v, where, "attribute string")
    if _is_int(v) and not INT64[0] <= v <= INT64[1]:
        _fail(f"integer attribute {_show(v)} does not fit in 64 bits", where)
    if isinstance(v, (bool, int, float)) or v is None:
        return v
    _fail(f"unexpected attribute value {_show(v)}", where)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# one check per attribute type of the op records (eager.ops.registry.ATTR_TYPES): an op's
# record declares each attribute's type, so a new op's attributes are checked here with no
# new line (tests/graphc/ir/test_ir_json.py fails when a type has no check)
TYPE_CHECKS = {
    "axes": lambda v: (
        v is None or _is_int(v) or (isinstance(v, tuple) and all(_is_int(x) for x in v))
    ),
    "bool": lambda v: isinstance(v, bool),
    "int": lambda v: _is_int(v),
    "count": lambda v: _is_int(v) and v >= 0,
    "float": _number,
    "number?": lambda v: v is None or _number(v),
    "scalar": lambda v: isinstance(v, (int, float, bool)) or isinstance(v, np.ndarray),
    "shape": lambda v: (
        isinstance(v, tuple)
        and len(v) <= MAX_RANK
        and all(_is_int(x) and 0 <= x <= MAX_DIM for x in v)
        and math.prod(v) <= sys.maxsize
    ),
    "perm": lambda v: isinstance(v, tuple) and all(_is_int(x) for x in v),
    "dtype": lambda v: isinstance(v, str) and v in _DTYPES,
    "str": lambda v: isinstance(v, str),
    "index": lambda v: isinstance(v, tuple) and all(_index_item_ok(x) for x in v),
}


def _index_item_ok(x: Any) -> bool:
    if not isinstance(x, tuple) or not x or x[0] not in ("i", "s", "n", "e", "t"):
        return False
    tag = x[0]
    if tag == "i":
        return len(x) == 2 and _is_int(x[1])
    if tag == "s":
        return len(x) == 4 and all(p is None or _is_int(p) for p in x[1:])
    if tag == "t":
        return len(x) == 2 and _is_int(x[1]) and x[1] >= 0
    return len(x) == 1


def from_json(text: str, graph_type: type):
    """Parse and validate a graph into a new ``graph_type`` (``graphc.ir.Graph``); raises
    GraphFormatError naming the offending node."""
    doc = _parse(text)
    g = _build(doc, graph_type, "")
    try:
        verify(g, "from_json")
    except GraphVerificationError as e:
        _fail(str(e))
    return g


def _build(doc: dict, graph_type: type, where: str):
    """The graph of a (top-level or nested) document, each node checked as it is read."""
    g = graph_type(_str(doc["name"], where, "name"))
    idmap: dict = {}
    for k, n in enumerate(doc["nodes"]):
        _read_node(g, k, n, idmap, where)
    g._next_id = max(idmap, default=-1) + 1
    _read_inputs_outputs(g, doc, idmap)
    return g


def _check_doc(doc: Any, where: str) -> dict:
    """A document (top level or a loop body): an object with exactly the format's keys."""
    if not isinstance(doc, dict):
        _fail("a graph document must be an object", where)
    expected = {"format", "version", "name", "inputs", "outputs", "nodes"}
    if set(doc) != expected:
        what = "graph keys" if where else "top-level keys"
        _fail(f"{what} must be {sorted(expected)}, got {_show(sorted(doc))}", where)
    if doc["format"] != FORMAT or not _is_int(doc["version"]) or doc["version"] != VERSION:
        _fail(f"unsupported format {_show(doc['format'])} version {_show(doc['version'])}", where)
    nodes = doc["nodes"]
    if not isinstance(nodes, list) or len(nodes) > MAX_NODES:
        _fail(f"nodes must be a list of at most {MAX_NODES} entries", where)
    return doc


def _parse(text: str) -> dict:
    """The JSON document, within the size limits, with the top-level keys of the format."""
    if not isinstance(text, str):
        _fail(f"expected a str, got {type(text).__name__}")
    if len(text) > MAX_TEXT:
        _fail(f"document of {len(text)} characters exceeds the limit of {MAX_TEXT}")
    depth = _nesting(text)
    if depth > MAX_DEPTH:
        _fail(f"arrays and objects nested {depth} deep exceed the limit of {MAX_DEPTH}")
    try:
        doc = json.loads(text, parse_constant=lambda c: _fail(f"non-standard constant {c}"))
    except GraphFormatError:
        raise
    except (ValueError, RecursionError) as e:  # ValueError: also ints of > 4300 digits
        _fail(f"not valid JSON: {e}")
    if not isinstance(doc, dict):
        _fail("top level must be an object")
    return _check_doc(doc, "")


_NODE_KEYS = {"id", "op", "operands", "attrs", "shape", "dtype", "src", "role", "by"}


def _read_node(g, k: int, n: Any, idmap: dict, outer: str = "") -> None:
    """Check node ``k`` of the document and add it to ``g`` under its own id; ``idmap``
    maps the document's ids to the graph's (``outer``: where a loop body sits)."""
    where = f"{outer}nodes[{k}]"
    if not isinstance(n, dict) or set(n) != _NODE_KEYS:
        _fail(f"each node needs exactly the keys {sorted(_NODE_KEYS)}", where)
    nid = _int(n["id"], where, 0, 2**62)
    if nid in idmap:
        _fail(f"duplicate node id {nid}", where)
    op = n["op"]
    shown = (
        op
        if isinstance(op, str) and op.isascii() and op.isprintable() and len(op) <= 60
        else _show(op)
    )
    where = f"{outer}nodes[{k}] (%{nid} = {shown})"
    if not isinstance(op, str) or (op not in OPS and op not in ("input", "const") + STRUCT_OPS):
        _fail(f"unknown op {_show(op)}", where)
    if not isinstance(n["operands"], list):
        _fail("operands must be a list", where)
    operands = []
    for o in n["operands"]:
        o = _int(o, where, 0, 2**62)
        if o not in idmap:
            _fail(f"operand %{o} is not defined before its use", where)
        operands.append(idmap[o])
    if not isinstance(n["attrs"], dict):
        _fail("attrs must be an object", where)
    graph_keys = GRAPH_ATTRS.get(op, ())
    attrs = {
        key: _dec_graph(v, type(g), f"{where}.{key}.") if key in graph_keys else _dec(v, where)
        for key, v in n["attrs"].items()
    }
    shape = _shape(n["shape"], where, _dtype(n["dtype"], where))
    for key in ("src", "role", "by"):
        _str(n[key], where, key, MAX_PROVENANCE)
    if n["role"] not in ("forward", "backward"):
        _fail(f"role must be forward or backward, got {_show(n['role'])}", where)
    g._next_id = nid  # keep the document's ids: the text form survives a round trip
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
        new = g.add_node(
            "const",
            (),
            attrs,
            shape=shape,
            dtype=n["dtype"],
            src=n["src"],
            role=n["role"],
            by=n["by"],
        )
    elif op in STRUCT_OPS:
        new = _read_struct(g, op, operands, attrs, shape, n, where)
    else:
        _check_op(g, op, operands, attrs, shape, n["dtype"], where)
        new = g.add_node(
            op,
            operands,
            attrs,
            shape=shape,
            dtype=n["dtype"],
            src=n["src"],
            role=n["role"],
            by=n["by"],
        )
    idmap[nid] = new


def _dec_graph(v: Any, graph_type: type, where: str):
    """A loop body: ``{"$graph": document}``, read and verified like a top-level one."""
    if not isinstance(v, dict) or set(v) != {"$graph"}:
        _fail("a loop body must be an object {'$graph': document}", where)
    g = _build(_check_doc(v["$graph"], where), graph_type, where)
    try:
        verify(g, "from_json")
    except GraphVerificationError as e:
        _fail(str(e), where)
    return g


def _read_struct(g, op: str, operands: list, attrs: dict, shape: tuple, n: dict, where: str):
    """A loop or loop_out node: checked (graphc.ir.loops.check_node) as soon as it is read,
    so a later loop_out reads only well-formed loops."""
    if op == "loop_out":
        if len(operands) != 1 or g.nx.nodes[operands[0]]["op"] not in ("scan", "while"):
            _fail("loop_out takes one operand, a scan or while node", where)
        if set(attrs) != {"index"} or not _is_int(attrs["index"]):
            _fail("loop_out takes one int attr 'index'", where)
    new = g.add_node(
        op,
        operands,
        attrs,
        shape=shape,
        dtype=n["dtype"],
        src=n["src"],
        role=n["role"],
        by=n["by"],
    )

    def fail(msg: str, nid=None) -> None:
        _fail(msg, where)

    check_node(g, new, fail, lambda sub, w: None)  # bodies were verified as they were read
    return new


def _check_op(
    g, op: str, operands: list, attrs: dict, shape: tuple, dtype: str, where: str
) -> None:
    """An op node as its record declares it: arity, attribute names and types, and the
    shape and dtype its shape rule derives."""
    opdef = OPS[op]
    if opdef.arity is not None and len(operands) != opdef.arity:
        _fail(f"{op} takes {opdef.arity} operands, got {len(operands)}", where)
    if opdef.arity is None and not operands:
        _fail(f"{op} needs at least one operand", where)
    if set(attrs) != set(opdef.attrs):
        _fail(f"{op} takes attrs {sorted(opdef.attrs)}, got {sorted(attrs)}", where)
    for key, v in attrs.items():
        kind = opdef.attr_types[key]
        if not TYPE_CHECKS[kind](v):
            _fail(
                f"attr {key}={_show(v)} has the wrong type for {op} (expected {ATTR_TYPES[kind]})",
                where,
            )
    try:
        m = g.infer(op, operands, attrs)
    except Exception as e:  # the shape rule rejected the operands/attrs
        _fail(f"shape rule rejected the node: {e}", where)
    if tuple(m.shape) != shape or m.dtype.name != dtype:
        _fail(
            f"declared {dtype}{list(shape)} but the shape rule derives "
            f"{m.dtype.name}{list(m.shape)}",
            where,
        )


def _read_inputs_outputs(g, doc: dict, idmap: dict) -> None:
    """``g.inputs`` (every input node once, renumbered in that order) and ``g.outputs``."""
    for key in ("inputs", "outputs"):
        if not isinstance(doc[key], list):
            _fail(f"{key} must be a list")
    for i in doc["inputs"]:
        if not _is_int(i) or i not in idmap or g.nx.nodes[idmap[i]]["op"] != "input":
            _fail(f"input {_show(i)} is not an input node")
    if sorted(idmap[i] for i in doc["inputs"]) != sorted(
        n for n, d in g.nx.nodes(data=True) if d["op"] == "input"
    ):
        _fail("graph.inputs must list every input node exactly once")
    g.inputs = [idmap[i] for i in doc["inputs"]]
    for pos, nid in enumerate(g.inputs):
        g.nx.nodes[nid]["attrs"]["index"] = pos
    g.input_names = [g.nx.nodes[i]["attrs"]["name"] for i in g.inputs]
    for o in doc["outputs"]:
        if not _is_int(o) or o not in idmap:
            _fail(f"output {_show(o)} is not a node")
    g.outputs = [idmap[o] for o in doc["outputs"]]
