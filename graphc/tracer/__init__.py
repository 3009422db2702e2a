"""Tracing: run the user's function once on Tracers and record a Graph.

The package is split by job, each module importing only the ones above it here:

* ``source.py``: ``user_src``, the user's source line that nodes and errors carry.
* ``views.py``: eager's buffers followed symbolically (which values are views of
  which, their element layouts, re-deriving a view after a write through an alias).
* ``tensor.py``: the ``Tracer``, a symbolic tensor with eager's op surface; in-place
  ops rebind its node.
* ``context.py``: the ``TraceContext``, everything one trace records.
* ``arguments.py``: argument names, a ``LeafSpec`` per flattened argument leaf and
  the cache-key items of static values.
* ``driver.py``: ``trace_flat`` and ``trace``, which run a function on Tracers and
  return the graph with how to map Python values in and out.

Other modules import these names from ``graphc.tracer``.
"""

from .source import user_src
from .views import _VIEW_OPS  # noqa: F401  (the tests read it)
from .tensor import Tracer, _check_live  # noqa: F401  (graphc.autodiff uses it)
from .context import TraceContext
from .arguments import LeafSpec, arg_names, classify_leaf, static_key
from .driver import TraceResult, _graph_input_pos, trace, trace_flat  # noqa: F401

__all__ = [
    "LeafSpec",
    "TraceContext",
    "TraceResult",
    "Tracer",
    "arg_names",
    "classify_leaf",
    "static_key",
    "trace",
    "trace_flat",
    "user_src",
]
