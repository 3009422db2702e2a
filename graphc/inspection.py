"""What a compiled function tells about itself: the graph of each stage (``graph``,
``ir``), the native code (``llvm_ir``, ``asm``, ``plan``), ``stats`` and ``explain``.
``CompiledFunction`` (graphc.api) has these methods from ``Inspection``; they find the
entry of a signature with its ``_entry_for`` and compile it if needed."""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import GraphcError
from .ir import Graph


class Inspection:
    """The inspection methods of ``CompiledFunction``."""

    __slots__ = ()

    # graphc.onnx installs its exporter here when it is imported (graphc's package import
    # always does): the api sits below graphc.onnx and never imports it
    _export_onnx: Any = None

    def to_onnx(self, *args: Any, path: Any = None, opset: Any = None) -> Any:
        """The ONNX model of what this function compiles for ``args`` (an
        ``onnx.ModelProto``, written to ``path`` when given): ``graphc.export_onnx(self,
        *args, path=path, opset=opset)``; see docs/onnx.md."""
        if Inspection._export_onnx is None:
            raise RuntimeError("to_onnx needs graphc.onnx: import graphc first")
        return Inspection._export_onnx(self, *args, path=path, opset=opset)

    def graph(self, *args: Any) -> Graph:
        """The traced graph for these arguments (traces if needed)."""
        return self._entry_for(args).stages["traced"]

    def ir(self, *args: Any, stage: str = "traced", after_each_pass: bool = False) -> str:
        """Text IR of a stage: ``traced``, ``grad`` (forward + backward nodes, marked) or
        ``optimized``; ``after_each_pass=True`` (optimized only) gives the IR after every
        pass run, round by round, as the pass manager produced it."""
        stages = self._entry_for(args).stages
        if after_each_pass:
            if stage != "optimized":
                raise ValueError("after_each_pass=True needs stage='optimized'")
            from .passes import PassManager

            pm = PassManager(self.opt_level, disable=self.disable_passes, snapshot_each=True)
            pm.run(stages["traced"].copy())
            return "\n".join(
                [f"// traced\n{stages['traced']}"] + [text for _, text in pm.snapshots]
            )
        if stage == "grad" and "grad" not in stages:
            stages["grad"] = _grad_stage(stages["traced"], self.__name__)
        if stage not in stages or stage.startswith("_"):
            avail = dict.fromkeys([s for s in stages if not s.startswith("_")] + ["grad"])
            raise ValueError(f"unknown stage {stage!r}; available: {', '.join(avail)}")
        return str(stages[stage])

    def llvm_ir(self, *args: Any, optimized: bool = False) -> str:
        """LLVM IR of the compiled entry point (before or after LLVM's optimizer)."""
        return self._native(args).llvm_ir(optimized=optimized)

    def asm(self, *args: Any) -> str:
        """Host assembly of the compiled function."""
        return self._native(args).asm()

    def plan(self, *args: Any) -> str:
        """The native schedule: kernels (fused loops, BLAS calls) and arena size."""
        return self._native(args).plan.describe()

    def memory(self, *args: Any, top: int = 8) -> str:
        """Where the arena's bytes go for these arguments: its size, the kernel at which
        the live intermediates peak, and the ``top`` largest buffers live there (node,
        bytes, arena offset, first-last kernel, and the operand whose slot a value was
        stored over).  Native backend only; see docs/backend.md "Memory plan"."""
        return self._native(args).plan.describe_peak(top)

    def stats(self, *args: Any) -> dict:
        """Node counts per stage, fused kernels, planned arena bytes and compile time."""
        st = self._entry_for(args).stages
        out = {
            "traced_nodes": len(st["traced"]),
            "optimized_nodes": len(st["optimized"]),
            "compile_seconds": st["_compile_seconds"],
        }
        n_bwd = sum(1 for _, d in st["traced"].nx.nodes(data=True) if d.get("role") == "backward")
        if n_bwd or "grad" in st:  # the function ran backward(), or ir(stage='grad') ran
            out["grad_nodes"] = len(st["traced"]) if n_bwd else len(st["grad"])
        log = st["_passes"].log
        out.update(
            pass_runs=len(log),
            pass_rounds=max((r.round for r in log), default=0),
            pass_seconds=sum(r.seconds for r in log),
        )
        exe = st["_executable"]
        if self.backend == "native" and self._entry_for(args).provisional is not None:
            # an optimizer's first step, run on the interpreter (graphc.api _make_native)
            out["native_code"] = "interpreted"
        elif self.backend == "native":
            out.update(exe.plan.summary())
            out["native_code"] = exe.cache_status  # compiled / disk-stored / disk-hit
        return out

    def _native(self, args: tuple):
        if self.backend != "native":
            raise GraphcError("llvm_ir/asm/plan need backend='native'")
        entry = self._entry_for(args)
        if entry.provisional is not None:
            # an optimizer's first step ran on the interpreter: its native code is built
            # now, for inspection (and runs if the signature is used again)
            self._build_native_for_inspection(entry)
        return entry.stages["_executable"]

    def explain(self) -> str:
        lines = [
            f"{self.__name__}: {len(self._cache)} cached signature(s), "
            f"{self._hits} hits, {self._misses} misses"
        ]
        lines += [f"  {r}" for r in self.recompile_reasons]
        n = getattr(self, "interpreted_calls", 0)
        if n:
            lines.append(
                f"  {n} call{'s' if n != 1 else ''} interpreted, not compiled: an optimizer's "
                "first step (its trace created the optimizer's state, so its signature does "
                "not recur; native code is built only if it is used again; "
                "graphc.compile(..., interpret_first_step=False) compiles it)"
            )
        for entry in list(self._cache.values())[-1:]:  # the latest signature's inputs
            tr = entry.trace
            if tr.captured:
                lines.append(
                    "  tensors read by name (graph inputs, read at every call): "
                    + ", ".join(c.name for c in tr.captured)
                )
            if tr.randoms:
                lines.append(
                    f"  random draws per call: {len(tr.randoms)} "
                    f"({tr.rng_count} numbers, generated natively by Philox 4x32-10)"
                )
            consts = [
                n
                for n in tr.graph.node_ids()
                if tr.graph[n]["op"] == "const" and tr.graph[n]["attrs"]["value"].size > 1
            ]
            if consts:
                lines.append(
                    f"  constants captured at trace time: {len(consts)} array(s) "
                    "(numpy arrays and tensors reached other than by name)"
                )
        return "\n".join(lines)


def _grad_stage(graph: Graph, name: str) -> Graph:
    """The traced graph with its gradient: itself if the function ran backward(), else
    ``graph.grad()`` (d output 0 / d every float input)."""
    if any(d.get("role") == "backward" for _, d in graph.nx.nodes(data=True)):
        return graph
    if not graph.outputs:
        raise GraphcError(f"ir(stage='grad'): {name} returns no arrays to differentiate")
    d = graph.nx.nodes[graph.outputs[0]]
    if np.dtype(d["dtype"]).kind != "f" or int(np.prod(d["shape"], dtype=np.int64)) != 1:
        raise TypeError(
            f"ir(stage='grad'): {name} must return a floating-point scalar as its "
            f"first output, got {np.dtype(d['dtype']).name}{list(d['shape'])}; use "
            "graphc.vjp with a cotangent for other outputs"
        )
    return graph.grad()
