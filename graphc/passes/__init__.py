"""The optimizer: a pass manager of small named graph passes.

Each pass takes a Graph, rewrites it in place and returns whether it changed
anything.  The manager runs a pipeline (per ``opt_level``) to a fixed point,
times every pass, can print the IR after chosen passes, and in checking mode
runs the verifier after every pass so a broken rewrite is caught at the pass
that made it.  Fusion and memory planning happen at lowering time
(graphc.backend.plan) because they decide loop structure, not graph structure.
"""
from __future__ import annotations

import time
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

from eager.interop import OPS

from ..ir import Graph, verify

MAX_FOLD_ELEMENTS = 1 << 16


class PassResult:
    __slots__ = ("name", "changed", "seconds", "nodes_after", "round")

    def __init__(self, name: str, changed: bool, seconds: float, nodes_after: int,
                 round: int = 1) -> None:
        self.name = name
        self.changed = changed
        self.seconds = seconds
        self.nodes_after = nodes_after
        self.round = round          # 1-based round of the fixed-point loop

    def __repr__(self) -> str:
        return (f"{self.name} (round {self.round}): {'changed' if self.changed else 'no change'}, "
                f"{self.seconds * 1e3:.2f} ms, {self.nodes_after} nodes")


# ---------------------------------------------------------------------------
# passes


def dce(g: Graph) -> bool:
    """Remove nodes no output depends on (inputs always stay)."""
    live = set(g.inputs)
    stack = list(g.outputs)
    while stack:
        n = stack.pop()
        if n in live and n not in g.inputs:
            continue
        live.add(n)
        for o in g.nx.nodes[n]["operands"]:
            if o not in live:
                stack.append(o)
    dead = [n for n in g.nx.nodes if n not in live]
    for n in dead:
        g.nx.remove_node(n)
    return bool(dead)


def _attr_key(v):
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, float) and v != v:
        return ("nan",)
    if isinstance(v, float) and v == 0.0:
        return ("zero", np.signbit(v))      # 0.0 and -0.0 are different attrs
    if isinstance(v, tuple):
        return tuple(_attr_key(x) for x in v)
    return (type(v).__name__, v)


def cse(g: Graph) -> bool:
    """Merge nodes with the same op, attrs, dtype, shape and operands (constants by value)."""
    seen: dict = {}
    changed = False
    for n in g.topo_order():
        d = g.nx.nodes[n]
        if d["op"] == "input":
            continue
        key = (d["op"], d["dtype"], tuple(d["shape"]), d["operands"],
               tuple(sorted((k, _attr_key(v)) for k, v in d["attrs"].items())))
        other = seen.get(key)
        if other is None:
            seen[key] = n
            continue
        g.replace_uses(n, other)
        g.nx.remove_node(n)
        changed = True
    return changed


def fold(g: Graph) -> bool:
    """Evaluate nodes whose operands are all constants with the op's numpy forward."""
    changed = False
    for n in g.topo_order():
        d = g.nx.nodes[n]
        op = d["op"]
        if op in ("input", "const") or not d["operands"]:
            continue
        if not all(g.nx.nodes[o]["op"] == "const" for o in d["operands"]):
            continue
        n_out = int(np.prod(d["shape"], dtype=np.int64))
        if n_out > MAX_FOLD_ELEMENTS:
            continue
        # never materialize a broadcast: expand(const) stays a stride-0 view of the scalar
        if n_out > max([1] + [int(np.prod(g.nx.nodes[o]["shape"], dtype=np.int64))
                              for o in d["operands"]]):
            continue
        vals = [g.nx.nodes[o]["attrs"]["value"] for o in d["operands"]]
        try:
            with np.errstate(all="ignore"):
                v = np.asarray(OPS[op].forward(*vals, **d["attrs"]))
        except Exception:
            continue            # leave it to run time (where the error belongs)
        v = np.array(v, dtype=d["dtype"], order="C")
        if v.shape != tuple(d["shape"]):
            continue
        v.setflags(write=False)
        d["op"] = "const"
        d["attrs"] = {"value": v}
        g.set_operands(n, ())
        d["by"] = "fold"
        changed = True
    return changed


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
    c = _const_value(g, n)
    if c is None:
        return False
    if isinstance(value, float) and value == 0.0:
        return c == 0 and bool(np.signbit(c)) == bool(np.signbit(value))
    return c == value


def _same_type(g, a: int, b: int) -> bool:
    da, db = g.nx.nodes[a], g.nx.nodes[b]
    return tuple(da["shape"]) == tuple(db["shape"]) and da["dtype"] == db["dtype"]


def _rule_identity(g: Graph, n: int) -> Optional[int]:
    """x*1, 1*x, x/1, x+(-0.0), x-0.0, x**1, neg(neg x), copy(x), no-op movement/cast."""
    d = g.nx.nodes[n]
    op, ops, a = d["op"], d["operands"], d["attrs"]
    cand = None
    if op == "mul":
        cand = ops[0] if _is(g, ops[1], 1) else ops[1] if _is(g, ops[0], 1) else None
    elif op == "div" and _is(g, ops[1], 1):
        cand = ops[0]
    elif op == "add":
        cand = ops[0] if _is(g, ops[1], -0.0) else ops[1] if _is(g, ops[0], -0.0) else None
        if cand is None and np.dtype(d["dtype"]).kind in "iub":
            cand = ops[0] if _is(g, ops[1], 0) else ops[1] if _is(g, ops[0], 0) else None
    elif op == "sub" and (_is(g, ops[1], 0.0) or (np.dtype(d["dtype"]).kind in "iu" and
                                                  _is(g, ops[1], 0))):
        cand = ops[0]
    elif op == "pow" and _is(g, ops[1], 1):
        cand = ops[0]
    elif op == "neg" and g.nx.nodes[ops[0]]["op"] == "neg":
        cand = g.nx.nodes[ops[0]]["operands"][0]
    elif op in ("copy", "detach"):        # values only: gradients were taken already
        cand = ops[0]
    elif op in ("reshape", "expand") and tuple(a["shape"]) == tuple(g.nx.nodes[ops[0]]["shape"]):
        cand = ops[0]
    elif op == "transpose" and tuple(a["perm"]) == tuple(range(len(a["perm"]))):
        cand = ops[0]
    elif op == "cast" and g.nx.nodes[ops[0]]["dtype"] == d["dtype"]:
        cand = ops[0]
    elif op == "where" and ops[1] == ops[2]:
        cand = ops[1]
    if cand is not None and _same_type(g, cand, n):
        return cand
    return None


def _rule_rewrite(g: Graph, n: int) -> bool:
    """Rewrites that replace a node by cheaper ops (same value, bit for bit)."""
    d = g.nx.nodes[n]
    op, ops = d["op"], d["operands"]
    if op == "pow" and _is(g, ops[1], 2) and _same_type(g, ops[0], n):
        _replace_op(g, n, "mul", (ops[0], ops[0]), {})          # x**2 -> x*x (exact)
        return True
    if op == "mul" and np.dtype(d["dtype"]).kind == "f":
        for x, c in ((ops[0], ops[1]), (ops[1], ops[0])):
            if _is(g, c, -1) and _same_type(g, x, n):
                _replace_op(g, n, "neg", (x,), {})                  # x*(-1) -> -x (exact)
                return True
    src = g.nx.nodes[ops[0]] if ops else None
    if op == "transpose" and src is not None and src["op"] == "transpose":
        inner = src["attrs"]["perm"]
        perm = tuple(inner[p] for p in d["attrs"]["perm"])
        _replace_op(g, n, "transpose", (src["operands"][0],), {"perm": perm})
        return True
    if op == "reshape" and src is not None and src["op"] == "reshape":
        _replace_op(g, n, "reshape", (src["operands"][0],), dict(d["attrs"]))
        return True
    if op == "expand" and src is not None and src["op"] == "expand":
        _replace_op(g, n, "expand", (src["operands"][0],), dict(d["attrs"]))
        return True
    if op == "sum" and src is not None and src["op"] == "expand" and \
            np.dtype(d["dtype"]).kind == "f":
        return _sum_of_broadcast(g, n)
    return False


def _sum_of_broadcast(g: Graph, n: int) -> bool:
    """sum(expand(x)) over only broadcast dims -> reshape(x) * count + 0.0 (one rounding,
    no loop; the only rule that rounds differently: n equal addends become one product)."""
    d = g.nx.nodes[n]
    e = d["operands"][0]
    x = g.nx.nodes[e]["operands"][0]
    xs, es = tuple(g.nx.nodes[x]["shape"]), tuple(g.nx.nodes[e]["shape"])
    lead = len(es) - len(xs)
    axes = d["attrs"]["axis"]
    padded = (1,) * lead + xs
    if not all(padded[a] == 1 for a in axes):
        return False
    count = 1
    for a in axes:
        count *= es[a]
    if count == 0:
        return False        # an empty sum is 0, but inf * 0 or nan * 0 is nan
    src = d.get("src", "")
    keep = tuple(padded[i] if i in axes else es[i] for i in range(len(es)))
    if not d["attrs"]["keepdim"]:
        keep = tuple(s for i, s in enumerate(keep) if i not in axes)
    r = x
    if keep != xs:
        if int(np.prod(keep)) == int(np.prod(xs)):
            r = g.add_node("reshape", (x,), {"shape": keep}, src=src, role=d["role"],
                           by="simplify")
        else:
            r = g.add_node("expand", (g.add_node("reshape", (x,), {"shape": padded}, src=src,
                                                 role=d["role"], by="simplify"),),
                           {"shape": tuple(padded[i] if i in axes else es[i]
                                           for i in range(len(es)))}, src=src, role=d["role"],
                           by="simplify")
            if not d["attrs"]["keepdim"]:
                r = g.add_node("reshape", (r,), {"shape": keep}, src=src, role=d["role"],
                               by="simplify")
    c = g.add_const(np.asarray(count, dtype=d["dtype"]), src=src, role=d["role"], by="simplify")
    m = g.add_node("mul", (r, c), {}, src=src, role=d["role"], by="simplify")
    # numpy's sum starts from +0.0, so a sum of -0.0 is +0.0: "+ 0.0" keeps that (and is
    # the identity for every other value)
    z = g.add_const(np.asarray(0.0, dtype=d["dtype"]), src=src, role=d["role"], by="simplify")
    _replace_op(g, n, "add", (m, z), {})
    return True


def _replace_op(g: Graph, n: int, op: str, operands: tuple, attrs: dict) -> None:
    d = g.nx.nodes[n]
    d["op"] = op
    d["attrs"] = attrs
    g.set_operands(n, operands)
    d["by"] = "simplify"
    m = g.infer(op, operands, attrs)
    d["shape"], d["dtype"] = tuple(m.shape), m.dtype.name


def simplify(g: Graph) -> bool:
    """Algebraic simplification by a rule table; every rule is exact for all floats."""
    changed = False
    for n in g.topo_order():
        if n not in g.nx:
            continue
        d = g.nx.nodes[n]
        if d["op"] in ("input", "const"):
            continue
        repl = _rule_identity(g, n)
        if repl is not None:
            g.replace_uses(n, repl)
            changed = True
            continue
        if _rule_rewrite(g, n):
            changed = True
    if changed:
        dce(g)
    return changed


PASSES: dict[str, Callable[[Graph], bool]] = {
    "simplify": simplify, "fold": fold, "cse": cse, "dce": dce,
}
PIPELINES = {0: (), 1: ("dce",), 2: ("simplify", "fold", "cse", "dce"),
             3: ("simplify", "fold", "cse", "dce")}


class PassManager:
    """Runs a pipeline to a fixed point; records per-pass timing and change flags."""

    def __init__(self, opt_level: int = 2, disable: Iterable[str] = (),
                 print_after: Iterable[str] = (), verify_each: bool = False,
                 max_rounds: int = 6, on_print: Optional[Callable[[str], None]] = None,
                 snapshot_each: bool = False,
                 after_pass: Optional[Callable[[str, int, Graph, bool], None]] = None) -> None:
        if opt_level not in PIPELINES:
            raise ValueError(f"opt_level must be 0, 1, 2 or 3, got {opt_level!r}")
        disable = set(disable)
        unknown = disable - set(PASSES)
        if unknown:
            raise ValueError(f"unknown pass(es) {sorted(unknown)}; passes are "
                             f"{', '.join(PASSES)}")
        unknown = set(print_after) - set(PASSES)
        if unknown:
            raise ValueError(f"print_after names unknown pass(es) {sorted(unknown)}")
        self.pipeline = [p for p in PIPELINES[opt_level] if p not in disable]
        self.print_after = set(print_after)
        self.verify_each = verify_each
        self.max_rounds = max_rounds
        self.on_print = on_print or print
        self.snapshot_each = snapshot_each
        self.after_pass = after_pass     # hook(name, round, graph, changed), e.g. bisect_passes
        self.log: list = []
        self.snapshots: list = []      # (pass name, IR text): print_after passes, or every pass

    def run(self, g: Graph) -> Graph:
        for rnd in range(1, self.max_rounds + 1):
            any_change = False
            for name in self.pipeline:
                t0 = time.perf_counter()
                changed = PASSES[name](g)
                dt = time.perf_counter() - t0
                self.log.append(PassResult(name, changed, dt, len(g), rnd))
                if self.verify_each:
                    verify(g, name)
                if name in self.print_after or self.snapshot_each:
                    text = (f"// IR after {name} (round {rnd}, "
                            f"{'changed' if changed else 'no change'})\n{g}")
                    self.snapshots.append((name, text))
                    if name in self.print_after:
                        self.on_print(text)
                if self.after_pass is not None:
                    self.after_pass(name, rnd, g, changed)
                any_change = any_change or changed
            if not any_change:
                break
        return g

    def report(self) -> str:
        lines = ["pass        round  changed   time(ms)  nodes"]
        for r in self.log:
            lines.append(f"{r.name:<11} {r.round:<6} {str(r.changed):<9} "
                         f"{r.seconds * 1e3:8.3f}  {r.nodes_after}")
        total = sum(r.seconds for r in self.log)
        lines.append(f"total       {len(self.log)} pass runs, {total * 1e3:.3f} ms")
        return "\n".join(lines)


def optimize(g: Graph, opt_level: int = 2, **kwargs) -> tuple:
    """Optimize a copy of ``g``; returns (graph, PassManager)."""
    out = g.copy()
    pm = PassManager(opt_level, **kwargs)
    pm.run(out)
    return out, pm
