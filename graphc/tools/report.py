"""The report of ``graphc.compare``: a :class:`ComparisonReport` prints as a table
and round-trips through JSON.  Measuring is in ``graphc.tools.compare``."""

from __future__ import annotations

import json
import math
import textwrap
from typing import Any, Optional

import numpy as np


class ComparisonReport:
    """Eager vs compiled on one set of inputs.  ``str()`` is a table; see ``to_dict``."""

    FIELDS = (
        "function",
        "signature",
        "mode",
        "grads",
        "eager",
        "compiled",
        "compiled_error",
        "speedup",
        "break_even_calls",
        "agreement",
        "all_agree",
        "divergence",
        "onnxruntime",
        "onnxruntime_error",
        "timing",
        "notes",
    )

    def __init__(self, **fields: Any) -> None:
        for k in self.FIELDS:
            setattr(self, k, fields.get(k))

    # --- serialization ----------------------------------------------------------------
    def to_dict(self) -> dict:
        return {k: _plain(getattr(self, k)) for k in self.FIELDS}

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, d: dict) -> "ComparisonReport":
        return cls(**{k: d.get(k) for k in cls.FIELDS})

    @classmethod
    def from_json(cls, text: str) -> "ComparisonReport":
        return cls.from_dict(json.loads(text))

    @property
    def compiled_possible(self) -> bool:
        return self.compiled_error is None

    def __repr__(self) -> str:
        return f"<graphc.ComparisonReport {self.function}: {self._headline()}>"

    def _headline(self) -> str:
        if not self.compiled_possible:
            return "compiled: not possible"
        return (
            f"eager {_fmt_time(self.eager['time_per_call_s'])}, compiled "
            f"{_fmt_time(self.compiled['time_per_call_s'])}"
        )

    # --- the table --------------------------------------------------------------------
    def __str__(self) -> str:
        lines = [f"graphc.compare: {self.signature}  [{self.mode}]", ""]
        lines.append(f"  {'':<{_W}} {'eager':>14} {'compiled':>14}")
        if self.compiled is None:
            lines += self._not_compiled_rows()
        else:
            lines += self._compiled_rows()
        lines.append("")
        lines += self._numerics_rows()
        lines.append("")
        if self.onnxruntime is not None or self.onnxruntime_error:
            lines += self._onnxruntime_rows()
            lines.append("")
        lines += self._timing_rows()
        return "\n".join(ln.rstrip() for ln in lines)

    def _not_compiled_rows(self) -> list:
        """The eager column alone, and why the function could not be compiled."""
        e = self.eager
        lines = [
            _row("time per call", _fmt_time(e["time_per_call_s"]), "-"),
            _row("peak memory", _fmt_bytes(e["peak_bytes"]), "-"),
            _row("graph nodes", f"{e['tape_nodes']} on tape", "-"),
            "",
        ]
        err = self.compiled_error
        lines.append(f"  compiled: not possible -- {err['type']}")
        if err.get("argument"):
            lines.append(f"    argument: {err['argument']}")
        if err.get("line"):
            lines.append(f"    line:     {err['line']}")
        if err.get("source"):
            lines.append(f"              {err['source']}")
        if err.get("fix"):
            lines.extend(
                textwrap.wrap(
                    err["fix"],
                    96,
                    initial_indent="    instead:  ",
                    subsequent_indent="              ",
                )
            )
        msg = err["message"].split(" Instead: ")[0] if err.get("fix") else err["message"]
        lines.extend(
            textwrap.wrap(
                msg, 96, initial_indent="    message:  ", subsequent_indent="              "
            )
        )
        return lines

    def _compiled_rows(self) -> list:
        """Time, compile time, break-even, memory and graph sizes, side by side."""
        e, c = self.eager, self.compiled
        sp = self.speedup
        note = (
            (f"compiled is {sp:.2f}x faster" if sp >= 1 else f"compiled is {1 / sp:.2f}x slower")
            if sp
            else ""
        )
        lines = [
            _row(
                "time per call (median)",
                _fmt_time(e["time_per_call_s"]),
                _fmt_time(c["time_per_call_s"]),
                note,
            )
        ]
        n = c.get("cold_calls", 1)
        lines.append(
            _row(
                "first call (cold)" if n == 1 else f"first {n} calls (cold)",
                _fmt_time(e["first_call_s"]),
                _fmt_time(c["first_call_s"]),
                "" if n == 1 else f"{n} input signatures traced (.grad None, then set)",
            )
        )
        lines.append(
            _row(
                "compile time",
                "-",
                _fmt_time(c["compile_s"]),
                "cold call" + ("s" if n > 1 else "") + " minus warm call" + ("s" if n > 1 else ""),
            )
        )
        be = self.break_even_calls
        lines.append(
            _row(
                "break-even",
                "",
                "never" if be == "never" else f"{be:,} calls",
                "calls after which compiling has paid for itself"
                if be != "never"
                else "compiled is not faster per call",
            )
        )
        lines.append(
            _row(
                "peak memory",
                _fmt_bytes(e["peak_bytes"]),
                _fmt_bytes(c["peak_bytes"]),
                f"arena {_fmt_bytes(c['arena_bytes'])} + outputs {_fmt_bytes(c['output_bytes'])}",
            )
        )
        lines.append(
            _row(
                "tape / traced nodes",
                str(e["tape_nodes"]),
                str(c["traced_nodes"]),
                f"{c['gradient_nodes']} of the traced nodes compute gradients",
            )
        )
        lines.append(_row("optimized nodes", "-", str(c["optimized_nodes"])))
        lines.append(
            _row(
                "native kernels",
                "-",
                str(c["kernels"]),
                f"{c['fused_nodes']} nodes fused into {c['loop_kernels']} loop kernel(s)",
            )
        )
        return lines

    def _numerics_rows(self) -> list:
        """Errors of each value against the float64 run, and whether compiled agrees."""
        lines = [
            "  numerics: max abs / max rel error against a float64 eager run "
            "(rel = max|x-ref| / max|ref|)",
            f"  {'value':<22} {'type':<14} {'eager abs':>10} {'rel':>9}   "
            f"{'compiled abs':>12} {'rel':>9}",
        ]
        for a in self.agreement or []:
            ca = "-" if a["compiled_abs"] is None else f"{a['compiled_abs']:.2e}"
            cr = "-" if a["compiled_rel"] is None else f"{a['compiled_rel']:.2e}"
            ok = "" if a["compiled_abs"] is None else ("ok" if a["ok"] else "DIFFERS")
            lines.append(
                f"  {a['name']:<22} {a['type']:<14} {a['eager_abs']:>10.2e} "
                f"{a['eager_rel']:>9.2e}   {ca:>12} {cr:>9}  {ok}"
            )
        if self.compiled is not None:
            if self.all_agree:
                lines.append(
                    "  all values agree within tolerance "
                    "(float32 1e-4, float64 1e-9, or as close as eager)"
                )
            else:
                lines.append("  compiled values DIFFER from the reference")
                if self.divergence:
                    lines.append(f"  first diverging node: {self.divergence}")
        return lines

    def _onnxruntime_rows(self) -> list:
        """The third engine: ONNX Runtime's time per forward call and its agreement."""
        o = self.onnxruntime
        if o is None:
            return textwrap.wrap(
                f"ONNX Runtime: not run -- {self.onnxruntime_error}",
                96,
                initial_indent="  ",
                subsequent_indent="    ",
            )
        t = o["time_per_call_s"]
        rel = []
        for label, col in (("eager", self.eager), ("compiled", self.compiled)):
            if col and t > 0:
                rel.append(f"{label} / ORT = {col['time_per_call_s'] / t:.2f}x")
        lines = [
            f"  ONNX Runtime (CPU provider, model: {o['source']})",
            _row("time per call (median)", _fmt_time(t), "", ", ".join(rel)),
            _row("first call (session)", _fmt_time(o["first_call_s"]), ""),
        ]
        if self.grads:
            lines.append(
                "    (ORT runs the forward only; eager and compiled times include gradients)"
            )
        for a in o["agreement"]:
            lines.append(
                f"  {a['name']:<22} abs {a['abs']:.2e}  rel {a['rel']:.2e}  "
                + ("ok" if a["ok"] else "DIFFERS")
            )
        lines.append(
            "  ONNX Runtime agrees within tolerance"
            if o["all_agree"]
            else "  ONNX Runtime values DIFFER from the reference"
        )
        return lines

    def _timing_rows(self) -> list:
        """How the times were measured, and the notes."""
        t = self.timing or {}
        per = f"{t.get('eager_number')} (eager)"
        if t.get("compiled_number"):
            per += f" / {t.get('compiled_number')} (compiled)"
        lines = [
            f"  timing: median of {t.get('repeat')} repeats x {per} calls, after "
            f"{t.get('warmup')} warm-up calls"
        ]
        for n in self.notes or []:
            lines.extend(
                textwrap.wrap(n, 96, initial_indent="  note: ", subsequent_indent="        ")
            )
        return lines


_W = 26  # width of the table's label column


def _row(label: str, ev: str, cv: str, note: str = "") -> str:
    """One line of the table: a label, the eager and compiled values, a note."""
    return f"  {label:<{_W}} {ev:>14} {cv:>14}" + (f"   {note}" if note else "")


# ---------------------------------------------------------------------------
# formatting helpers


def _plain(v: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python, tuples to lists, inf/nan to strings."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def _fmt_time(s: Optional[float]) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def _fmt_bytes(n: Optional[int]) -> str:
    if n is None:
        return "-"
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
