"""Per-kernel time of native code, opt-in with ``GRAPHC_PROFILE=1``.

With the variable set when a function is compiled, every native executable built
(a forward, a gradient function, ...) times each of its kernel calls with
``clock_gettime`` around the call, into counters it owns; the code is never
stored to or loaded from the disk cache.  Timing costs about 50 ns per kernel
call, so keep it off when measuring whole calls.  Example::

    GRAPHC_PROFILE=1 python -c "
    import numpy as np, graphc
    from graphc.tools.kernel_profile import reset, report
    f = graphc.compile(lambda a, b: (a @ b).tanh().sum())
    a = np.ones((256, 256), np.float32)
    f(a, a); reset()
    for _ in range(10):
        f(a, a)
    print(report())"
"""

from __future__ import annotations

from typing import Optional

from ..runtime.native import profiled_executables


def rows(executables: Optional[list] = None) -> list:
    """Every timed kernel of ``executables`` (default: all live profiled ones), as dicts
    (``executable``, ``index``, ``kind``, ``nodes``, ``calls``, ``seconds``), slowest first."""
    out = []
    for exe in profiled_executables() if executables is None else executables:
        for r in exe.kernel_profile():
            out.append(dict(r, executable=exe.name))
    out.sort(key=lambda r: (-r["seconds"], r["executable"], r["index"]))
    return out


def reset(executables: Optional[list] = None) -> None:
    """Zero the counters of ``executables`` (default: all live profiled ones)."""
    for exe in profiled_executables() if executables is None else executables:
        exe.reset_profile()


def report(executables: Optional[list] = None, top: int = 25, per_call: int = 1) -> str:
    """A text table of the ``top`` slowest kernels: total time, share of all kernels'
    time, calls, and time per call divided by ``per_call`` (e.g. the number of steps)."""
    rs = rows(executables)
    total = sum(r["seconds"] for r in rs) or 1e-30
    lines = [f"{'time/step':>10} {'share':>6} {'calls':>6}  kernel"]
    for r in rs[:top]:
        lines.append(
            f"{r['seconds'] / per_call * 1e6:8.1f}us {100 * r['seconds'] / total:5.1f}% "
            f"{r['calls']:6d}  {r['executable']}:k{r['index']} {r['kind']:<8} {r['nodes']}"
        )
    lines.append(f"{total / per_call * 1e6:8.1f}us total over {len(rs)} kernels")
    return "\n".join(lines)
