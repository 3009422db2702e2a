"""The optimizer: a pass manager of small named graph passes.

Each pass takes a Graph, rewrites it in place and returns whether it changed
anything.  Every pass lives in its own module and registers itself with
``@register_pass(name, order=..., min_level=..., may=...)`` (registry.py), which
also states what it may change; the manager (manager.py) builds the pipeline
of an ``opt_level`` from the registry, runs it to a fixed point, times every
pass, can print the IR after chosen passes, and in checking mode runs the
verifier after every pass and checks the pass kept its promise, so a broken
rewrite is caught at the pass that made it.  An exception inside a pass comes
out as a PassError naming the pass, the node and its source line (context.py).

Fusion and memory planning happen at lowering time (graphc.backend.plan)
because they decide loop structure, not graph structure.
"""

from __future__ import annotations

from .context import PassContext, PassError, current
from .registry import CHANGES, PASSES, PIPELINES, REGISTRY, PassInfo, register_pass, unregister_pass

# the passes register themselves on import; the pipeline order comes from their
# ``order``, not from the order of these imports
from .simplify import simplify  # noqa: E402
from .fold import MAX_FOLD_ELEMENTS, fold  # noqa: E402
from .cse import cse  # noqa: E402
from .dce import dce  # noqa: E402
from .loops import loops  # noqa: E402
from .manager import PassManager, PassResult, optimize  # noqa: E402

__all__ = [
    "CHANGES",
    "MAX_FOLD_ELEMENTS",
    "PASSES",
    "PIPELINES",
    "REGISTRY",
    "PassContext",
    "PassError",
    "PassInfo",
    "PassManager",
    "PassResult",
    "cse",
    "current",
    "dce",
    "fold",
    "optimize",
    "register_pass",
    "simplify",
    "unregister_pass",
]
