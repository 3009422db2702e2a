"""``simplify``: algebraic simplification by a table of named rules.

Every rule is a :class:`Rule` ``(name, pattern, guard, rewrite)``:

* ``pattern``: the ops the rule looks at;
* ``guard(g, n, d) -> match or None``: whether the rule applies to node ``n``
  (``d`` is its data) and what it found;
* ``rewrite(g, n, d, match) -> node or None``: a node id whose value replaces
  ``n`` (every use of ``n`` is redirected to it), or None after rewriting ``n``
  in place.

For each node the rules of its op are tried in table order and the first one
whose guard matches is applied.  Every guard checks that the result has exactly
the node's shape and dtype, so no rule hides a broadcast or a type promotion,
and every rule is exact for all floats (NaN, Inf and signed zeros included; see
docs/passes.md for the one rule that rounds differently and the rewrites that
are deliberately absent).  The pass counts how often each rule fired in the
running pass's statistics (``PassResult.stats``).
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from ..ir import Graph
from .context import current
from .dce import dce
from .registry import register_pass


class Rule:
    """One entry of the rule table."""

    __slots__ = ("name", "pattern", "guard", "rewrite")

    def __init__(self, name: str, pattern: tuple, guard: Callable, rewrite: Callable) -> None:
        self.name = name
        self.pattern = tuple(pattern)
        self.guard = guard
        self.rewrite = rewrite

    def __repr__(self) -> str:
        return f"<simplify rule {self.name!r} on {', '.join(self.pattern)}>"


# ---------------------------------------------------------------------------
# helpers for guards and rewrites


def _const_value(g: Graph, n: int):
    d = g.nx.nodes[n]
    if d["op"] != "const":
        return None
    v = d["attrs"]["value"]
    if v.size == 0:
        return None
    first = v.reshape(-1)[0]
    if not np.all(v == first) and not (np.isnan(first) and np.all(np.isnan(v))):
        return None
    return first


def _is(g, n, value) -> bool:
    """Is node ``n`` a constant whose every element is ``value`` (-0.0 only matches -0.0)?"""
    c = _const_value(g, n)
    if c is None:
        return False
    if isinstance(value, float) and value == 0.0:
        return c == 0 and bool(np.signbit(c)) == bool(np.signbit(value))
    return c == value


def _same_type(g, a: int, b: int) -> bool:
    da, db = g.nx.nodes[a], g.nx.nodes[b]
    return tuple(da["shape"]) == tuple(db["shape"]) and da["dtype"] == db["dtype"]


def _kind(d: dict) -> str:
    return np.dtype(d["dtype"]).kind


def _replace_op(g: Graph, n: int, op: str, operands: tuple, attrs: dict) -> None:
    d = g.nx.nodes[n]
    d["op"] = op
    d["attrs"] = attrs
    g.set_operands(n, operands)
    d["by"] = "simplify"
    m = g.infer(op, operands, attrs)
    d["shape"], d["dtype"] = tuple(m.shape), m.dtype.name


def _same(g: Graph, n: int, cand: Optional[int]) -> Optional[int]:
    """``cand`` when it has the node's shape and dtype, else None (the rule does not apply)."""
    return cand if cand is not None and _same_type(g, cand, n) else None


# ---------------------------------------------------------------------------
# guards of the identity rules: the node's value is one of its operands (or theirs).
# The guards of one op exclude each other the way the rules are ordered: when the
# first rule's constant is there but its result has another type, the later rules of
# that op do not get a second look (e.g. 1*x is not tried when x*1's 1 broadcasts).


def _x_op_c(value) -> Callable:
    """``x <op> value`` -> x"""
    return lambda g, n, d: (
        _same(g, n, d["operands"][0]) if _is(g, d["operands"][1], value) else None
    )


def _c_op_x(value) -> Callable:
    """``value <op> x`` -> x, when ``x <op> value`` did not match"""

    def guard(g, n, d):
        a, b = d["operands"]
        if _is(g, b, value) or not _is(g, a, value):
            return None
        return _same(g, n, b)

    return guard


def _int_add_zero(first: bool) -> Callable:
    """integer ``x + 0`` / ``0 + x`` -> x, when neither -0.0 rule matched"""

    def guard(g, n, d):
        if _kind(d) not in "iub":
            return None
        a, b = d["operands"]
        if _is(g, b, -0.0) or _is(g, a, -0.0):
            return None
        if first:
            return _same(g, n, a) if _is(g, b, 0) else None
        return _same(g, n, b) if not _is(g, b, 0) and _is(g, a, 0) else None

    return guard


def _int_sub_zero(g, n, d):
    a, b = d["operands"]
    if _kind(d) not in "iu" or _is(g, b, 0.0) or not _is(g, b, 0):
        return None
    return _same(g, n, a)


def _neg_neg(g, n, d):
    src = g.nx.nodes[d["operands"][0]]
    return _same(g, n, src["operands"][0]) if src["op"] == "neg" else None


def _operand(g, n, d):
    return _same(g, n, d["operands"][0])


def _to_same_shape(g, n, d):
    x = d["operands"][0]
    return _same(g, n, x) if tuple(d["attrs"]["shape"]) == tuple(g.nx.nodes[x]["shape"]) else None


def _identity_perm(g, n, d):
    perm = d["attrs"]["perm"]
    return _same(g, n, d["operands"][0]) if tuple(perm) == tuple(range(len(perm))) else None


def _cast_same_dtype(g, n, d):
    x = d["operands"][0]
    return _same(g, n, x) if g.nx.nodes[x]["dtype"] == d["dtype"] else None


def _where_same(g, n, d):
    _, a, b = d["operands"]
    return _same(g, n, a) if a == b else None


def _where_const(g, n, d):
    """``where(c, x, y)`` with every element of the constant ``c`` alike: the chosen branch,
    when it already has the result's shape and dtype (a branch that broadcasts or promotes
    does not match)."""
    cond, a, b = d["operands"]
    c = _const_value(g, cond)
    if c is None:
        return None
    return _same(g, n, a if bool(c) else b)


def _use(g, n, d, match) -> int:
    """Rewrite of the identity rules: the node's uses go to ``match``."""
    return match


# ---------------------------------------------------------------------------
# rewrite rules: the node becomes cheaper ops (same value, bit for bit)


def _square(g, n, d):
    x, c = d["operands"]
    return x if _is(g, c, 2) and _same_type(g, x, n) else None


def _to_mul_self(g, n, d, x) -> None:
    _replace_op(g, n, "mul", (x, x), {})  # x**2 -> x*x (exact)


def _times_minus_one(first: bool) -> Callable:
    def guard(g, n, d):
        if _kind(d) != "f":
            return None
        x, c = d["operands"] if first else reversed(d["operands"])
        return x if _is(g, c, -1) and _same_type(g, x, n) else None

    return guard


def _to_neg(g, n, d, x) -> None:
    _replace_op(g, n, "neg", (x,), {})  # x*(-1) -> -x (exact)


def _of_same_op(g, n, d):
    """``op(op(x))`` for a movement op: the inner node."""
    src = g.nx.nodes[d["operands"][0]]
    return src if src["op"] == d["op"] else None


def _compose_transposes(g, n, d, src) -> None:
    inner = src["attrs"]["perm"]
    perm = tuple(inner[p] for p in d["attrs"]["perm"])
    _replace_op(g, n, "transpose", (src["operands"][0],), {"perm": perm})


def _skip_inner(g, n, d, src) -> None:
    _replace_op(g, n, d["op"], (src["operands"][0],), dict(d["attrs"]))


_COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")


def _mask_of_pool_grad_guard(g, n, d):
    """``where(cmp(y, c), 0, max_pool2d_grad(y, G))`` (or the branches swapped) with
    windows that tile ``y`` exactly and the forward ``p = max_pool2d(y)`` in the graph:
    (the mask's node, the branch index of the gradient, p, the gradient node)."""
    cond, a, b = d["operands"]
    for i, (pg, z) in enumerate(((b, a), (a, b))):
        pd = g.nx.nodes[pg]
        if pd["op"] != "max_pool2d_grad" or not _is(g, z, 0.0) or _kind(pd) != "f":
            continue
        if tuple(g.nx.nodes[z]["shape"]) != () or not _same_type(g, pg, n):
            continue
        if g.users(pg) != [n] or pg in g.outputs:
            continue
        y, grad = pd["operands"]
        at = pd["attrs"]
        kh, kw = at["kernel_size"]
        shp = tuple(pd["shape"])
        Ho, Wo = tuple(g.nx.nodes[grad]["shape"])[2:]
        if (
            tuple(at["stride"]) != (kh, kw)
            or tuple(at["padding"]) != (0, 0)
            or tuple(at["dilation"]) != (1, 1)
            or len(shp) != 4
            or Ho * kh != shp[2]
            or Wo * kw != shp[3]
        ):
            continue
        cd = g.nx.nodes[cond]
        if cd["op"] not in _COMPARE or tuple(cd["shape"]) != shp:
            continue
        x0, x1 = cd["operands"]
        other = x1 if x0 == y else x0 if x1 == y else None
        if other is None or other == y or _const_value(g, other) is None:
            continue
        if tuple(g.nx.nodes[other]["shape"]) != ():
            continue
        for p in g.users(y):
            q = g.nx.nodes[p]
            if q["op"] == "max_pool2d" and list(q["operands"]) == [y] and q["attrs"] == at:
                return cond, i, p, grad
    return None


def _mask_on_pooled_side(g, n, d, match) -> None:
    """The mask moves before the pooling gradient, onto the pooled values: each window's
    gradient lands on its argmax, whose input value *is* the window's pooled value, so
    comparing it there gives the same mask on the element that is not 0 (and 0 stays 0
    elsewhere; the windows do not overlap, so no two gradients are summed).  Exact, and
    the input of the pooling is then read only by the gradient, which the native
    backend writes over it (a ReLU before a 2x2 pooling: W7's 2.8 MB activation)."""
    cond, i, p, grad = match
    cd = g.nx.nodes[cond]
    src, role = d.get("src", ""), d["role"]
    y = g.nx.nodes[d["operands"][2 - i]]["operands"][0]
    ops = tuple(p if o == y else o for o in cd["operands"])
    c2 = g.add_node(cd["op"], ops, dict(cd["attrs"]), src=src, role=role, by="simplify")
    zero = d["operands"][1 + i]
    branches = (zero, grad) if i == 0 else (grad, zero)
    w2 = g.add_node("where", (c2,) + branches, {}, src=src, role=role, by="simplify")
    pg = d["operands"][2 - i]
    _replace_op(g, n, "max_pool2d_grad", (y, w2), dict(g.nx.nodes[pg]["attrs"]))


def _sum_of_broadcast_guard(g, n, d):
    """sum(expand(x)) over broadcast dims only, of floats, not empty: (x, shapes...)."""
    e = d["operands"][0]
    if g.nx.nodes[e]["op"] != "expand" or _kind(d) != "f":
        return None
    x = g.nx.nodes[e]["operands"][0]
    xs, es = tuple(g.nx.nodes[x]["shape"]), tuple(g.nx.nodes[e]["shape"])
    lead = len(es) - len(xs)
    axes = d["attrs"]["axis"]
    padded = (1,) * lead + xs
    if not all(padded[a] == 1 for a in axes):
        return None
    count = 1
    for a in axes:
        count *= es[a]
    if count == 0:
        return None  # an empty sum is 0, but inf * 0 or nan * 0 is nan
    return x, xs, es, padded, axes, count


def _sum_of_broadcast(g, n, d, match) -> None:
    """sum(expand(x)) over only broadcast dims -> reshape(x) * count + 0.0 (one rounding,
    no loop; the only rule that rounds differently: n equal addends become one product)."""
    x, xs, es, padded, axes, count = match
    src = d.get("src", "")
    keep = tuple(padded[i] if i in axes else es[i] for i in range(len(es)))
    if not d["attrs"]["keepdim"]:
        keep = tuple(s for i, s in enumerate(keep) if i not in axes)
    r = x
    if keep != xs:
        if int(np.prod(keep)) == int(np.prod(xs)):
            r = g.add_node("reshape", (x,), {"shape": keep}, src=src, role=d["role"], by="simplify")
        else:
            r = g.add_node(
                "expand",
                (
                    g.add_node(
                        "reshape", (x,), {"shape": padded}, src=src, role=d["role"], by="simplify"
                    ),
                ),
                {"shape": tuple(padded[i] if i in axes else es[i] for i in range(len(es)))},
                src=src,
                role=d["role"],
                by="simplify",
            )
            if not d["attrs"]["keepdim"]:
                r = g.add_node(
                    "reshape", (r,), {"shape": keep}, src=src, role=d["role"], by="simplify"
                )
    c = g.add_const(np.asarray(count, dtype=d["dtype"]), src=src, role=d["role"], by="simplify")
    m = g.add_node("mul", (r, c), {}, src=src, role=d["role"], by="simplify")
    # numpy's sum starts from +0.0, so a sum of -0.0 is +0.0: "+ 0.0" keeps that (and is
    # the identity for every other value)
    z = g.add_const(np.asarray(0.0, dtype=d["dtype"]), src=src, role=d["role"], by="simplify")
    _replace_op(g, n, "add", (m, z), {})


# ---------------------------------------------------------------------------
# the table: identity rules first, then rewrites; per op, the first matching rule wins

RULES: list = [
    # identities: x op c -> x
    Rule("x*1", ("mul",), _x_op_c(1), _use),
    Rule("1*x", ("mul",), _c_op_x(1), _use),
    Rule("x/1", ("div",), _x_op_c(1), _use),
    Rule("x+(-0.0)", ("add",), _x_op_c(-0.0), _use),
    Rule("(-0.0)+x", ("add",), _c_op_x(-0.0), _use),
    Rule("int x+0", ("add",), _int_add_zero(True), _use),
    Rule("int 0+x", ("add",), _int_add_zero(False), _use),
    Rule("x-0.0", ("sub",), _x_op_c(0.0), _use),
    Rule("int x-0", ("sub",), _int_sub_zero, _use),
    Rule("x**1", ("pow",), _x_op_c(1), _use),
    Rule("neg(neg x)", ("neg",), _neg_neg, _use),
    Rule("copy", ("copy",), _operand, _use),
    Rule("detach", ("detach",), _operand, _use),  # values only: gradients were taken
    Rule("reshape to the same shape", ("reshape",), _to_same_shape, _use),
    Rule("expand to the same shape", ("expand",), _to_same_shape, _use),
    Rule("identity transpose", ("transpose",), _identity_perm, _use),
    Rule("cast to the same dtype", ("cast",), _cast_same_dtype, _use),
    Rule("where(c, x, x)", ("where",), _where_same, _use),
    Rule("where(constant c, x, y)", ("where",), _where_const, _use),
    # rewrites into cheaper ops
    Rule("x**2 -> x*x", ("pow",), _square, _to_mul_self),
    Rule("x*(-1) -> neg", ("mul",), _times_minus_one(True), _to_neg),
    Rule("(-1)*x -> neg", ("mul",), _times_minus_one(False), _to_neg),
    Rule("transpose(transpose x)", ("transpose",), _of_same_op, _compose_transposes),
    Rule("reshape(reshape x)", ("reshape",), _of_same_op, _skip_inner),
    Rule("expand(expand x)", ("expand",), _of_same_op, _skip_inner),
    Rule("sum of broadcast", ("sum",), _sum_of_broadcast_guard, _sum_of_broadcast),
    Rule(
        "mask of a pooling gradient",
        ("where",),
        _mask_of_pool_grad_guard,
        _mask_on_pooled_side,
    ),
]

_by_op: dict = {}


def _index() -> None:
    _by_op.clear()
    for r in RULES:
        for op in r.pattern:
            _by_op.setdefault(op, []).append(r)


def add_rule(rule: Rule, before: Optional[str] = None) -> Rule:
    """Add ``rule`` to the table (at the end, or before the rule named ``before``)."""
    if any(r.name == rule.name for r in RULES):
        raise ValueError(f"a simplify rule named {rule.name!r} already exists")
    at = len(RULES) if before is None else [r.name for r in RULES].index(before)
    RULES.insert(at, rule)
    _index()
    return rule


def remove_rule(name: str) -> None:
    RULES[:] = [r for r in RULES if r.name != name]
    _index()


_index()


@register_pass(
    "simplify", order=10, may=("add nodes", "remove nodes", "rewrite nodes", "redirect uses")
)
def simplify(g: Graph) -> bool:
    """Algebraic simplification by a rule table; every rule is exact for all floats."""
    ctx = current()
    stats = ctx.stats
    nodes = g.nx.nodes
    changed = False
    for n in g.topo_order():
        if n not in g.nx:
            continue
        d = nodes[n]
        rules = _by_op.get(d["op"])
        if rules is None:
            continue
        ctx.node = n
        for rule in rules:
            ctx.rule = rule.name
            match = rule.guard(g, n, d)
            if match is None:
                continue
            repl = rule.rewrite(g, n, d, match)
            if repl is not None:
                g.replace_uses(n, repl)
            stats[rule.name] = stats.get(rule.name, 0) + 1
            changed = True
            break
        ctx.rule = None
    ctx.node = None
    if changed:
        dce(g)
    return changed


def rule_names() -> list:
    """The names of the rules, in table order."""
    return [r.name for r in RULES]
