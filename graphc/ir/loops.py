"""Structured loops in the IR: the ``scan`` and ``while`` nodes and their ``loop_out``
projections.

A loop node holds its body as a graph of its own (an attribute), so a loop of any trip
count is one node whose body is traced, differentiated, optimized and compiled once.
The node itself is a token (type ``bool[]``); each of its results is read through a
``loop_out`` node (attr ``index``), so every other node keeps one value of one type.

``scan`` (as ``jax.lax.scan``): operands are C consts, K initial carries, M xs (stacked
along axis 0, ``length`` long); attrs ``body``, ``length``, ``reverse``, ``num_consts``
(C), ``num_carry`` (K).  The body takes (consts, carries, one slice of each xs) and
returns (new carries, ys slices); results are the K final carries, then each ys stacked
to ``(length, *y.shape)``.

``while`` (as ``jax.lax.while_loop``): operands are Cc consts of the condition, Cb consts
of the body, K initial carries; attrs ``cond`` (consts, carries -> ``bool[]``), ``body``
(consts, carries -> carries), ``num_cond_consts``, ``num_body_consts``, ``num_carry``.
Results are the K final carries.

This module says what the nodes mean (their attributes, result types and invariants);
every layer (verifier, printer, JSON, interpreter, autodiff, passes, backend) reads it.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from eager.interop import Meta

LOOP_OPS = ("scan", "while")
STRUCT_OPS = LOOP_OPS + ("loop_out",)  # IR-only ops besides input and const

#: the attributes of each loop op, and which of them hold graphs
LOOP_ATTRS = {
    "scan": ("body", "length", "reverse", "num_consts", "num_carry"),
    "while": ("cond", "body", "num_cond_consts", "num_body_consts", "num_carry"),
    "loop_out": ("index",),
}
GRAPH_ATTRS = {"scan": ("body",), "while": ("cond", "body")}

TOKEN_SHAPE: tuple = ()
TOKEN_DTYPE = "bool"


def sub_graphs(d: dict) -> list:
    """The (attribute name, graph) pairs a node holds, in a fixed order."""
    return [(k, d["attrs"][k]) for k in GRAPH_ATTRS.get(d["op"], ())]


def _meta(g, nid: int) -> Meta:
    d = g.nx.nodes[nid]
    return Meta(d["shape"], d["dtype"])


def result_metas(d: dict) -> list:
    """The types of a loop node's results, from its body's outputs."""
    a = d["attrs"]
    body = a["body"]
    k = a["num_carry"]
    outs = [_meta(body, o) for o in body.outputs]
    if d["op"] == "while":
        return outs[:k]
    return outs[:k] + [Meta((a["length"],) + m.shape, m.dtype) for m in outs[k:]]


def loop_out_meta(g, operands, attrs: dict) -> Meta:
    """The type of ``loop_out(loop, index=j)``."""
    if len(operands) != 1:
        raise ValueError(f"loop_out takes one operand (a loop node), got {len(operands)}")
    d = g.nx.nodes[operands[0]]
    if d["op"] not in LOOP_OPS:
        raise ValueError(f"loop_out reads a scan or while node, not {d['op']}")
    metas = result_metas(d)
    j = attrs.get("index")
    if type(j) is not int or not 0 <= j < len(metas):
        raise ValueError(f"loop_out index {j!r} out of range for {len(metas)} results")
    return metas[j]


def operand_groups(d: dict) -> dict:
    """The operand positions of each group: consts/carries/xs (scan) or
    cond_consts/body_consts/carries (while)."""
    a = d["attrs"]
    n = len(d["operands"])
    if d["op"] == "scan":
        c, k = a["num_consts"], a["num_carry"]
        return {
            "consts": range(0, c),
            "carries": range(c, c + k),
            "xs": range(c + k, n),
        }
    cc, cb, k = a["num_cond_consts"], a["num_body_consts"], a["num_carry"]
    return {
        "cond_consts": range(0, cc),
        "body_consts": range(cc, cc + cb),
        "carries": range(cc + cb, cc + cb + k),
    }


def check_node(g, nid: int, fail: Callable[[str, Optional[int]], None], verify_sub) -> None:
    """The invariants of a loop node (``fail(msg, nid)`` raises); ``verify_sub(graph,
    where)`` verifies a body graph."""
    d = g.nx.nodes[nid]
    op, a, operands = d["op"], d["attrs"], d["operands"]
    if set(a) != set(LOOP_ATTRS[op]):
        fail(f"{op} expects attrs {sorted(LOOP_ATTRS[op])}, got {sorted(a)}", nid)
    if op == "loop_out":
        try:
            m = loop_out_meta(g, operands, a)
        except ValueError as e:
            fail(str(e), nid)
        if m.shape != tuple(d["shape"]) or m.dtype.name != d["dtype"]:
            fail(f"recorded type {d['dtype']}{list(d['shape'])} but the loop gives {m!r}", nid)
        return
    if tuple(d["shape"]) != TOKEN_SHAPE or d["dtype"] != TOKEN_DTYPE:
        fail(f"a {op} node is a token of type bool[]; read its results with loop_out", nid)
    for name in GRAPH_ATTRS[op]:
        if not hasattr(a[name], "nx") or not hasattr(a[name], "outputs"):
            fail(f"attr {name!r} must be a graph", nid)
    for name in LOOP_ATTRS[op]:
        if name not in GRAPH_ATTRS[op] and name != "reverse":
            v = a[name]
            if type(v) is not int or v < 0:
                fail(f"attr {name}={v!r} must be an int >= 0", nid)
    if op == "scan" and type(a["reverse"]) is not bool:
        fail(f"attr reverse={a['reverse']!r} must be a bool", nid)
    groups = operand_groups(d)
    if max((r.stop for r in groups.values()), default=0) > len(operands) or (
        op == "while" and groups["carries"].stop != len(operands)
    ):
        fail(f"{len(operands)} operands do not fit the attributes {_counts(a)}", nid)
    for name, sub in sub_graphs(d):
        verify_sub(sub, f"{name} of %{nid}")
    k = a["num_carry"]
    carries = [_meta(g, operands[i]) for i in groups["carries"]]

    def expect(sub, name: str, want: list, what: Callable[[int], str]) -> None:
        got = [_meta(sub, i) for i in sub.inputs]
        if len(got) != len(want):
            fail(f"the {name} takes {len(got)} inputs but the loop passes {len(want)}", nid)
        for j, (x, y) in enumerate(zip(got, want)):
            if x != y:
                fail(f"{name} input {j} ({what(j)}) is {_t(x)} but the loop passes {_t(y)}", nid)

    body = a["body"]
    if op == "scan":
        consts = [_meta(g, operands[i]) for i in groups["consts"]]
        xs = [_meta(g, operands[i]) for i in groups["xs"]]
        for j, x in enumerate(xs):
            if x.ndim == 0 or x.shape[0] != a["length"]:
                fail(
                    f"xs {j} has type {_t(x)}; its leading dimension must be length={a['length']}",
                    nid,
                )
        slices = [Meta(x.shape[1:], x.dtype) for x in xs]
        c = len(consts)
        expect(
            body,
            "body",
            consts + carries + slices,
            lambda j: "const" if j < c else "carry" if j < c + k else "x slice",
        )
    else:
        cc = len(groups["cond_consts"])
        cond_in = [_meta(g, operands[i]) for i in groups["cond_consts"]] + carries
        expect(a["cond"], "cond", cond_in, lambda j: "const" if j < cc else "carry")
        outs = [_meta(a["cond"], o) for o in a["cond"].outputs]
        if len(outs) != 1 or outs[0] != Meta((), np.dtype(bool)):
            fail(f"cond must return one bool[] value, got {[_t(m) for m in outs]}", nid)
        cb = len(groups["body_consts"])
        body_in = [_meta(g, operands[i]) for i in groups["body_consts"]] + carries
        expect(body, "body", body_in, lambda j: "const" if j < cb else "carry")
        if len(body.outputs) != k:
            fail(f"the body returns {len(body.outputs)} values for {k} carries", nid)
    outs = [_meta(body, o) for o in body.outputs]
    if len(outs) < k:
        fail(f"the body returns {len(outs)} values for {k} carries", nid)
    for j in range(k):
        if outs[j] != carries[j]:
            fail(
                f"carry {j}: the body returns {_t(outs[j])} but the carry is {_t(carries[j])}; "
                "a carry keeps its shape and dtype across iterations",
                nid,
            )


def _t(m: Meta) -> str:
    from .text import type_str

    return type_str(m.shape, m.dtype)


def _counts(a: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(a.items()) if isinstance(v, int))


def walk_graphs(g) -> list:
    """``g`` and every body graph nested in it (iteratively), outermost first."""
    out, stack = [], [g]
    while stack:
        cur = stack.pop()
        out.append(cur)
        subs: list = []
        for nid in cur.node_ids():
            d = cur.nx.nodes[nid]
            subs.extend(s for _, s in sub_graphs(d))
        stack.extend(reversed(subs))
    return out


def attr_key(v: Any) -> Any:
    """A hashable stand-in for a graph-valued attribute (CSE compares loops by body
    identity: two loops are the same only if they hold the same body object)."""
    return ("graph", id(v)) if hasattr(v, "nx") else v
