"""graphc's tools: what is built on the public API (``graphc.compile``) rather than
inside it.

- ``compare.py`` / ``report.py``: ``graphc.compare``, eager and compiled side by side,
  and its printable, JSON-serializable report.
- ``bench.py``: the benchmark workloads W0-W5 (docs/benchmarks.md).
- ``bisect.py``: ``graphc.bisect_passes``, which pass broke a function.
- ``debug.py``: ``first_divergence``, which node native code gets wrong.
- ``workloads.py``: the seeds' MLP training step, defined once.
- ``cli/``: the ``graphc`` command (``python -m graphc``).

This ``__init__`` imports nothing, so importing one tool does not load the others.
"""
