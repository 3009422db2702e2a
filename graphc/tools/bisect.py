"""``bisect_passes``: which optimizer pass made a program compute something else?

The optimizer's passes run one at a time, in exactly the order the PassManager
runs them (its ``after_pass`` hook; repeated rounds included).  After every pass
that changed the graph, the graph is verified, run by the interpreter and
compiled and run natively, and both results are compared with the interpreter's
result on the *traced* graph (the oracle).  The first pass (and round) after
which a result stops matching is reported with the IR before and after it.

The traced graph itself is compiled first: if native code already disagrees
with the interpreter before any pass ran, the bug is in the backend, not in a
pass (``graphc.tools.debug.first_divergence`` finds the node), and later native
comparisons are skipped so they do not all blame innocent passes.
"""

from __future__ import annotations

import difflib
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from ..errors import GraphcError
from ..interpreter import interpret
from ..ir import Graph, verify


class PassStep:
    """One pass run: what it did to the graph and whether results still match."""

    __slots__ = ("name", "round", "changed", "nodes", "interpreter", "native", "error")

    def __init__(self, name: str, round: int, changed: bool, nodes: int) -> None:
        self.name = name
        self.round = round
        self.changed = changed
        self.nodes = nodes
        self.interpreter: Optional[str] = None  # None = matches; else what differs
        self.native: Optional[str] = None  # None = matches (or not checked)
        self.error: Optional[str] = None  # the pass raised, or the verifier failed

    @property
    def ok(self) -> bool:
        return self.interpreter is None and self.native is None and self.error is None

    @property
    def label(self) -> str:
        return f"{self.name} (round {self.round})"

    def __repr__(self) -> str:
        return f"<PassStep {self.label}: {'ok' if self.ok else 'BAD'}>"


class BisectReport:
    """The result of :func:`bisect_passes`; ``print()`` it.

    ``culprit`` is the first bad :class:`PassStep` (None when every pass
    preserves results), ``before``/``after`` the IR text around it and ``diff``
    their unified diff.  ``baseline`` says whether native code matched the
    interpreter on the traced graph (None if it did).
    """

    def __init__(self, name: str, opt_level: int, pipeline: Sequence[str]) -> None:
        self.name = name
        self.opt_level = opt_level
        self.pipeline = list(pipeline)
        self.steps: list = []
        self.culprit: Optional[PassStep] = None
        self.before: str = ""
        self.after: str = ""
        self.baseline: Optional[str] = None
        self.native_checked = True

    @property
    def ok(self) -> bool:
        return self.culprit is None

    @property
    def diff(self) -> str:
        if self.culprit is None:
            return ""
        lab = self.culprit.label
        return "".join(
            difflib.unified_diff(
                self.before.splitlines(True),
                self.after.splitlines(True),
                fromfile=f"before {lab}",
                tofile=f"after {lab}",
            )
        )

    def __str__(self) -> str:
        lines = [
            f"bisect_passes({self.name}): opt_level {self.opt_level}, pipeline "
            f"{', '.join(self.pipeline) or '(empty)'}"
        ]
        if self.baseline is None:
            lines.append("  traced graph: native code matches the interpreter")
        else:
            lines.append(
                f"  traced graph: {self.baseline} -- a backend bug, not a pass bug "
                "(graphc.tools.debug.first_divergence names the node); native checks "
                "after passes are skipped"
            )
        for s in self.steps:
            if s.error is not None:
                status = f"ERROR: {s.error}"
            elif not s.changed:
                status = "no change"
            else:
                parts = [
                    "interpreter "
                    + ("ok" if s.interpreter is None else f"MISMATCH ({s.interpreter})")
                ]
                if self.native_checked:
                    parts.append(
                        "native " + ("ok" if s.native is None else f"MISMATCH ({s.native})")
                    )
                status = ", ".join(parts)
            lines.append(f"  round {s.round}  {s.name:<9} {s.nodes:>5} nodes  {status}")
        if self.culprit is None:
            lines.append("all passes preserve results")
        else:
            c = self.culprit
            why = c.error or "; ".join(
                f"{k} {v}"
                for k, v in (("interpreter", c.interpreter), ("native", c.native))
                if v is not None
            )
            lines.append(f"first bad pass: {c.label}: {why}")
            lines.append(self.diff.rstrip("\n") or "(the IR text did not change)")
        return "\n".join(lines)

    __repr__ = __str__


class _Stop(Exception):
    pass


def _default_tol(dtype: np.dtype) -> float:
    return 1e-4 if dtype == np.float32 or dtype.itemsize < 8 else 1e-7


def _mismatch(got: list, want: list, rtol: Optional[float], atol: Optional[float]) -> Optional[str]:
    """None if every output matches, else a short description of the first that does not.

    Floats: |got - want| <= atol + rtol * |want| with NaN matching NaN; by default
    rtol is 1e-4 (float32) or 1e-7 (float64) and atol is rtol times the output's
    largest finite magnitude (so cancellation near zero is not a false alarm).
    Integers and bools must be equal.
    """
    if len(got) != len(want):
        return f"{len(got)} outputs where {len(want)} were expected"
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {k} is {g.dtype}{list(g.shape)}, expected {w.dtype}{list(w.shape)}"
        if w.dtype.kind != "f":
            if not np.array_equal(g, w):
                return f"output {k}: {int(np.sum(g != w))} elements differ"
            continue
        rt = _default_tol(w.dtype) if rtol is None else rtol
        finite = np.abs(w[np.isfinite(w)])
        at = atol if atol is not None else rt * (float(finite.max()) if finite.size else 0.0)
        if not np.allclose(g, w, rtol=rt, atol=at, equal_nan=True):
            with np.errstate(all="ignore"):
                err = np.abs(g.astype(np.float64) - w.astype(np.float64))
            bad = ~np.isclose(g, w, rtol=rt, atol=at, equal_nan=True)
            e = err[bad]
            e = e[np.isfinite(e)]
            worst = f"max abs err {e.max():.3g}" if e.size else "NaN/Inf pattern differs"
            return f"output {k}: {int(bad.sum())} of {w.size} elements differ, {worst}"
    return None


def _text(g: Graph) -> str:
    try:
        return str(g)
    except Exception as e:  # a broken pass can leave a graph the printer rejects
        return f"<the IR cannot be printed: {type(e).__name__}: {e}>"


def _native_run(g: Graph, arrays: list, opt_level: int) -> list:
    from ..runtime.native import NativeExecutable

    return NativeExecutable(g.copy(), opt_level, name=g.name).run(arrays)


def _graph_and_arrays(fn, args: tuple, static_argnums) -> tuple:
    if isinstance(fn, Graph):
        return fn, [np.asarray(a) for a in args]
    from ..api import CompiledFunction, _arrays

    cf = CompiledFunction(fn, static_argnums=static_argnums, opt_level=0, backend="interpreter")
    _, dyn = cf._signature(args)
    entry = cf._entry_for(args)
    if entry.trace.captured or entry.trace.randoms:  # tensors read by name, random draws
        entry, dyn = cf._with_captured(entry, args, dyn)
    return entry.stages["traced"], _arrays(dyn, entry.trace.in_specs)


def bisect_passes(
    fn: Union[Callable, Graph],
    *args: Any,
    rtol: Optional[float] = None,
    atol: Optional[float] = None,
    opt_level: int = 2,
    disable_passes: Sequence[str] = (),
    static_argnums: Sequence[int] = (),
    native: bool = True,
    max_rounds: int = 6,
) -> BisectReport:
    """Trace ``fn(*args)`` and find the first optimizer pass after which the results of
    the graph (interpreted, and natively compiled when ``native``) stop matching the
    interpreter's results on the traced graph.

    ``fn`` may also be a :class:`graphc.Graph`, with ``args`` its input arrays.
    Returns a :class:`BisectReport` (print it); ``report.ok`` is True when all passes
    preserve results.
    """
    from ..passes import PassManager

    graph, arrays = _graph_and_arrays(fn, args, static_argnums)
    verify(graph, "trace")
    want = interpret(graph, *arrays)
    pm = PassManager(opt_level, disable=disable_passes, max_rounds=max_rounds)
    report = BisectReport(graph.name, opt_level, pm.pipeline)
    report.native_checked = native
    if native:
        try:
            report.baseline = _mismatch(_native_run(graph, arrays, opt_level), want, rtol, atol)
        except GraphcError as e:
            report.baseline = f"native compilation failed ({e})"
        if report.baseline is not None:
            report.native_checked = False
    g = graph.copy()
    state = {"text": str(g)}

    def fail(step: PassStep) -> None:
        report.culprit = step
        report.before = state["text"]
        report.after = _text(g)
        raise _Stop

    def after_pass(name: str, rnd: int, gg: Graph, changed: bool) -> None:
        step = PassStep(name, rnd, changed, len(gg))
        report.steps.append(step)
        if not changed:
            return
        try:
            verify(gg, name)
        except GraphcError as e:
            step.error = f"the verifier failed: {e}"
            fail(step)
        try:
            step.interpreter = _mismatch(interpret(gg, *arrays), want, rtol, atol)
        except GraphcError as e:
            step.interpreter = f"interpreting failed: {e}"
        if report.native_checked:
            try:
                step.native = _mismatch(_native_run(gg, arrays, opt_level), want, rtol, atol)
            except GraphcError as e:
                step.native = f"native compilation failed: {e}"
        if not step.ok:
            fail(step)
        state["text"] = _text(gg)

    pm.after_pass = after_pass
    try:
        pm.run(g)
    except _Stop:
        pass
    except Exception as e:  # the pass itself crashed: name it by its position
        k = len(pm.log)
        n = len(pm.pipeline)
        step = PassStep(pm.pipeline[k % n], k // n + 1, True, len(g))
        step.error = f"the pass raised {type(e).__name__}: {e}"
        report.steps.append(step)
        report.culprit = step
        report.before = state["text"]
        report.after = _text(g)
    return report
