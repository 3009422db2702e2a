"""The pass manager: runs the registry's pipeline for an ``opt_level`` to a fixed point.

It times every pass run, can print or keep the IR after chosen passes, calls an
``after_pass`` hook (used by ``graphc.bisect_passes``), and with
``verify_each=True`` runs the verifier after every pass and checks that the pass
kept the promise it registered (:func:`check_promise`).  An exception escaping a
pass is re-raised as a :class:`~graphc.passes.context.PassError` naming the pass,
rule and node the pass had reached.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Optional

from ..errors import GraphVerificationError
from ..ir import Graph, describe, verify
from ..ir.loops import sub_graphs
from .context import PassError, enter, leave, pass_error
from .registry import CHANGES, PASSES, PIPELINES, REGISTRY, PassInfo


class PassResult:
    __slots__ = ("name", "changed", "seconds", "nodes_after", "round", "stats")

    def __init__(
        self,
        name: str,
        changed: bool,
        seconds: float,
        nodes_after: int,
        round: int = 1,
        stats: Optional[dict] = None,
    ) -> None:
        self.name = name
        self.changed = changed
        self.seconds = seconds
        self.nodes_after = nodes_after
        self.round = round  # 1-based round of the fixed-point loop
        self.stats = stats or {}  # the pass's counters, e.g. simplify: rule name -> hits

    def __repr__(self) -> str:
        extra = "".join(f", {k} x{v}" for k, v in sorted(self.stats.items()))
        return (
            f"{self.name} (round {self.round}): {'changed' if self.changed else 'no change'}, "
            f"{self.seconds * 1e3:.2f} ms, {self.nodes_after} nodes{extra}"
        )


# ---------------------------------------------------------------------------
# promises: what a pass declared it may change, checked under verify_each


def snapshot(g: Graph) -> tuple:
    """What :func:`check_promise` compares: per node (op, operands, attrs), the inputs,
    and the outputs with their types."""
    nodes = {
        n: (d["op"], d["operands"], tuple(d["attrs"].items())) for n, d in g.nx.nodes(data=True)
    }
    outs = [
        (o, tuple(g.nx.nodes[o]["shape"]), g.nx.nodes[o]["dtype"]) if o in g.nx else (o, None, None)
        for o in g.outputs
    ]
    return nodes, list(g.inputs), outs


def _same_attrs(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(ka == kb and va is vb for (ka, va), (kb, vb) in zip(a, b))


def check_promise(info: PassInfo, before: tuple, g: Graph) -> None:
    """Raise GraphVerificationError if the pass ``info`` changed ``g`` (compared with
    ``before``, a :func:`snapshot`) in a way it did not declare, or broke an invariant
    of every pass: inputs untouched, as many outputs, each of the same shape and dtype."""
    nodes, inputs, outs = before
    may = info.may

    def fail(msg: str, nid: Optional[int] = None) -> None:
        at = (
            f" at {describe(g, nid)}"
            if nid is not None and nid in g.nx
            else (f" at %{nid}" if nid is not None else "")
        )
        declared = ", ".join(sorted(may)) or "nothing"
        raise GraphVerificationError(
            f"invalid graph {g.name!r} after pass {info.name!r}{at}: "
            f"{msg} (the pass declares it may change: {declared})"
        )

    if list(g.inputs) != inputs:
        fail(f"the inputs changed from {inputs} to {list(g.inputs)}")
    for n in inputs:
        if (
            n not in g.nx
            or g.nx.nodes[n]["op"] != "input"
            or not _same_attrs(tuple(g.nx.nodes[n]["attrs"].items()), nodes[n][2])
        ):
            fail("an input node was changed", n)
    if len(g.outputs) != len(outs):
        fail(f"the graph had {len(outs)} outputs and now has {len(g.outputs)}")
    for k, (o, (old, shape, dtype)) in enumerate(zip(g.outputs, outs)):
        if o not in g.nx:
            fail(f"output {k} (%{o}) no longer exists")
        d = g.nx.nodes[o]
        if shape is not None and (tuple(d["shape"]) != shape or d["dtype"] != dtype):
            fail(f"output {k} changed type", o)
        if o != old and "redirect uses" not in may:
            fail(f"output {k} was redirected from %{old} to %{o}", o)
    if "add nodes" not in may:
        added = sorted(n for n in g.nx.nodes if n not in nodes)
        if added:
            fail(f"it added nodes {['%' + str(n) for n in added]}", added[0])
    if "remove nodes" not in may:
        removed = sorted(n for n in nodes if n not in g.nx)
        if removed:
            fail(f"it removed nodes {['%' + str(n) for n in removed]}")
    for n, d in g.nx.nodes(data=True):
        old = nodes.get(n)
        if old is None:
            continue
        if (
            d["op"] != old[0] or not _same_attrs(tuple(d["attrs"].items()), old[2])
        ) and "rewrite nodes" not in may:
            fail(f"it rewrote the node (was {old[0]}({', '.join(f'%{o}' for o in old[1])}))", n)
        if d["operands"] != old[1] and not may & {"rewrite nodes", "redirect uses"}:
            fail(f"it changed the operands from {list(old[1])}", n)


# ---------------------------------------------------------------------------


class PassManager:
    """Runs a pipeline to a fixed point; records per-pass timing and change flags."""

    def __init__(
        self,
        opt_level: int = 2,
        disable: Iterable[str] = (),
        print_after: Iterable[str] = (),
        verify_each: bool = False,
        max_rounds: int = 6,
        on_print: Optional[Callable[[str], None]] = None,
        snapshot_each: bool = False,
        after_pass: Optional[Callable[[str, int, Graph, bool], None]] = None,
    ) -> None:
        if opt_level not in PIPELINES:
            raise ValueError(f"opt_level must be 0, 1, 2 or 3, got {opt_level!r}")
        disable = set(disable)
        unknown = disable - set(PASSES)
        if unknown:
            raise ValueError(f"unknown pass(es) {sorted(unknown)}; passes are {', '.join(PASSES)}")
        unknown = set(print_after) - set(PASSES)
        if unknown:
            raise ValueError(f"print_after names unknown pass(es) {sorted(unknown)}")
        self.pipeline = [p for p in PIPELINES[opt_level] if p not in disable]
        self.print_after = set(print_after)
        self.verify_each = verify_each
        self.max_rounds = max_rounds
        self.on_print = on_print or print
        self.snapshot_each = snapshot_each
        self.after_pass = after_pass  # hook(name, round, graph, changed), e.g. bisect_passes
        self.log: list = []
        self.snapshots: list = []  # (pass name, IR text): print_after passes, or every pass

    def run(self, g: Graph) -> Graph:
        """Optimize ``g`` in place: its loops' bodies (each a copy, with the same pipeline),
        then ``g`` to a fixed point, then the bodies again (the ``loops`` pass may have
        moved code out of them)."""
        self._run_bodies(g)
        self._run_one(g)
        self._run_bodies(g)
        return g

    def _run_bodies(self, g: Graph) -> None:
        for nid in g.topo_order():
            d = g.nx.nodes[nid]
            for key, sub in sub_graphs(d):
                new = sub.copy()
                self._run_one(new)
                self._run_bodies(new)
                d["attrs"][key] = new

    def _run_one(self, g: Graph) -> Graph:
        for rnd in range(1, self.max_rounds + 1):
            any_change = False
            for name in self.pipeline:
                fn = PASSES[name]
                promise = None
                if self.verify_each:
                    info = REGISTRY.get(name)
                    if info is not None and info.fn is fn:  # not a test's stand-in
                        promise, before = info, snapshot(g)
                ctx, prev = enter(name)
                try:
                    t0 = time.perf_counter()
                    changed = fn(g)
                    dt = time.perf_counter() - t0
                except PassError:
                    raise  # already names its pass (a nested run)
                except Exception as e:
                    raise pass_error(ctx, g, e) from e
                finally:
                    leave(prev)
                self.log.append(PassResult(name, changed, dt, len(g), rnd, ctx.stats))
                if self.verify_each:
                    verify(g, name)
                    if promise is not None:
                        check_promise(promise, before, g)
                if name in self.print_after or self.snapshot_each:
                    text = (
                        f"// IR after {name} (round {rnd}, "
                        f"{'changed' if changed else 'no change'})\n{g}"
                    )
                    self.snapshots.append((name, text))
                    if name in self.print_after:
                        self.on_print(text)
                if self.after_pass is not None:
                    self.after_pass(name, rnd, g, changed)
                any_change = any_change or changed
            if not any_change:
                break
        return g

    def stats(self) -> dict:
        """Counters summed over all runs, per pass: ``{"simplify": {"x*1": 2, ...}}``."""
        out: dict = {}
        for r in self.log:
            if r.stats:
                acc = out.setdefault(r.name, {})
                for k, v in r.stats.items():
                    acc[k] = acc.get(k, 0) + v
        return {name: dict(sorted(c.items())) for name, c in out.items()}

    def report(self, rules: bool = False) -> str:
        """One row per pass run; ``rules=True`` adds the rules that fired under each row."""
        lines = ["pass        round  changed   time(ms)  nodes"]
        for r in self.log:
            lines.append(
                f"{r.name:<11} {r.round:<6} {str(r.changed):<9} "
                f"{r.seconds * 1e3:8.3f}  {r.nodes_after}"
            )
            if rules and r.stats:
                lines.append("    " + ", ".join(f"{k} x{v}" for k, v in sorted(r.stats.items())))
        total = sum(r.seconds for r in self.log)
        lines.append(f"total       {len(self.log)} pass runs, {total * 1e3:.3f} ms")
        return "\n".join(lines)


def optimize(g: Graph, opt_level: int = 2, **kwargs) -> tuple:
    """Optimize a copy of ``g``; returns (graph, PassManager)."""
    out = g.copy()
    pm = PassManager(opt_level, **kwargs)
    pm.run(out)
    return out, pm


__all__ = ["CHANGES", "PassManager", "PassResult", "check_promise", "optimize", "snapshot"]
