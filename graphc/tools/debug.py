"""Debugging helpers: find the first node where native code and the interpreter disagree."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ..interpreter import interpret_all
from ..ir import Graph, describe


def first_divergence(
    graph: Graph, arrays: Sequence, opt_level: int = 2, rtol: float = 1e-6, atol: float = 1e-9
) -> Optional[str]:
    """Compile each node of ``graph`` as the sole output (in topological order) and
    compare with the interpreter; describe the first node that differs, or None."""
    from ..runtime.native import NativeExecutable

    ref = interpret_all(graph, *arrays)
    for n in graph.topo_order():
        if graph.nx.nodes[n]["op"] in ("input", "const"):
            continue
        sub = graph.copy()
        sub.outputs = [n]
        from ..passes import dce

        dce(sub)
        got = NativeExecutable(sub, opt_level).run(list(arrays))[0]
        want = ref[n]
        if got.shape != want.shape or not np.allclose(
            got, want, rtol=rtol, atol=atol, equal_nan=True
        ):
            err = np.max(np.abs(got.astype(float) - want.astype(float))) if got.size else 0
            return f"{describe(graph, n)}: native differs from the interpreter (max abs {err:.3g})"
    return None
