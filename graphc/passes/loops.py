"""``loops``: structured loops (graphc.ir.loops) cleaned up from the outside.

* results nobody reads are dropped from a ``scan`` (its body stops computing ys that
  no ``loop_out`` reads; the ``loop_out`` indices are renumbered);
* body inputs nothing reads (a const or an xs the body ignores) are dropped with their
  operand;
* loop-invariant code moves out: body nodes computed only from the loop's consts are
  computed once before the loop and passed in as new consts.  Ops that can fail at run
  time (the ``index`` family: an out-of-range index) stay inside, so a loop that runs
  zero times never raises what eager would not.

The other passes see inside bodies too: the pass manager optimizes every body graph
with the same pipeline (graphc.passes.manager).
"""

from __future__ import annotations

from eager.interop import OPS

from ..ir import Graph
from ..ir.loops import LOOP_OPS, STRUCT_OPS, operand_groups
from .context import current
from .dce import dce as _dce
from .registry import register_pass

# families whose nodes may move out of a loop (they cannot fail at run time)
_HOISTABLE = ("elementwise", "reduce", "argreduce", "view", "matmul", "scan")


@register_pass("loops", order=45, min_level=1, may=("add nodes", "remove nodes", "rewrite nodes"))
def loops(g: Graph) -> bool:
    """Drop unread scan results and unread body inputs; hoist loop-invariant code."""
    ctx = current()
    changed = False
    for n in g.topo_order():
        if n not in g.nx or g.nx.nodes[n]["op"] not in LOOP_OPS:
            continue
        ctx.node = n
        if g.nx.nodes[n]["op"] == "scan":
            changed |= _drop_unread_ys(g, n)
            changed |= _hoist(g, n)
            changed |= _drop_unread_inputs(g, n)
    ctx.node = None
    return changed


def _outs(g: Graph, n: int) -> list:
    return [u for u in g.users(n) if g.nx.nodes[u]["op"] == "loop_out"]


def _drop_unread_ys(g: Graph, n: int) -> bool:
    d = g.nx.nodes[n]
    a = d["attrs"]
    body, k = a["body"], a["num_carry"]
    read = {g.nx.nodes[u]["attrs"]["index"] for u in _outs(g, n)}
    keep = list(range(k)) + [j for j in range(k, len(body.outputs)) if j in read]
    if len(keep) == len(body.outputs):
        return False
    new = body.copy()
    new.outputs = [body.outputs[j] for j in keep]
    _dce(new)
    a["body"] = new
    pos = {j: i for i, j in enumerate(keep)}
    for u in _outs(g, n):
        ua = g.nx.nodes[u]["attrs"]
        ua["index"] = pos[ua["index"]]
    return True


def _drop_unread_inputs(g: Graph, n: int) -> bool:
    d = g.nx.nodes[n]
    a = d["attrs"]
    body = a["body"]
    groups = operand_groups(d)
    outs = set(body.outputs)
    drop = [
        p
        for p in list(groups["consts"]) + list(groups["xs"])
        if not body.users(body.inputs[p]) and body.inputs[p] not in outs
    ]
    if not drop:
        return False
    new = body.copy()
    gone = {new.inputs[p] for p in drop}
    new.inputs = [i for i in new.inputs if i not in gone]
    new.input_names = [new.nx.nodes[i]["attrs"]["name"] for i in new.inputs]
    for i in gone:
        new.nx.remove_node(i)
    for pos, i in enumerate(new.inputs):
        new.nx.nodes[i]["attrs"]["index"] = pos
    a["body"] = new
    a["num_consts"] -= sum(1 for p in drop if p in groups["consts"])
    g.set_operands(n, [o for p, o in enumerate(d["operands"]) if p not in set(drop)])
    return True


def _hoist(g: Graph, n: int) -> bool:
    """Move the body's loop-invariant nodes (computed from consts only) before the loop."""
    d = g.nx.nodes[n]
    a = d["attrs"]
    body = a["body"]
    c = a["num_consts"]
    const_in = set(body.inputs[:c])
    inv: set = set()
    for b in body.topo_order():
        bd = body.nx.nodes[b]
        op = bd["op"]
        if b in const_in or op == "const":
            inv.add(b)
        elif (
            op not in STRUCT_OPS
            and op != "input"
            and OPS[op].family in _HOISTABLE
            and bd["operands"]
            and all(o in inv for o in bd["operands"])
        ):
            inv.add(b)
    outs = set(body.outputs)
    frontier = sorted(
        b
        for b in inv
        if b not in const_in
        and body.nx.nodes[b]["op"] != "const"
        and (b in outs or any(u not in inv for u in body.users(b)))
    )
    if not frontier:
        return False
    # emit the invariant nodes the frontier needs into the outer graph
    env = {body.inputs[p]: d["operands"][p] for p in range(c)}
    need: set = set()
    stack = list(frontier)
    while stack:
        b = stack.pop()
        if b in need or b in env:
            continue
        need.add(b)
        stack.extend(body.nx.nodes[b]["operands"])
    for b in body.topo_order():
        if b not in need:
            continue
        bd = body.nx.nodes[b]
        if bd["op"] == "const":
            env[b] = g.add_const(bd["attrs"]["value"], src=bd["src"], role=bd["role"], by="loops")
        else:
            env[b] = g.add_node(
                bd["op"],
                [env[o] for o in bd["operands"]],
                dict(bd["attrs"]),
                shape=bd["shape"],
                dtype=bd["dtype"],
                src=bd["src"],
                role=bd["role"],
                by="loops",
            )
    # the body reads each frontier value as a new const input
    new = body.copy()
    added = []
    for b in frontier:
        bd = new.nx.nodes[b]
        i = new.add_input(f"hoisted{b}", bd["shape"], bd["dtype"])
        new.replace_uses(b, i)
        added.append(i)
    rest = [i for i in new.inputs if i not in set(added)]
    new.inputs = rest[:c] + added + rest[c:]
    new.input_names = [new.nx.nodes[i]["attrs"]["name"] for i in new.inputs]
    for pos, i in enumerate(new.inputs):
        new.nx.nodes[i]["attrs"]["index"] = pos
    _dce(new)
    a["body"] = new
    a["num_consts"] = c + len(added)
    ops = list(d["operands"])
    g.set_operands(n, ops[:c] + [env[b] for b in frontier] + ops[c:])
    return True
