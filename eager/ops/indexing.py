"""Op records: gathering, scattering and sorting (gather, scatter_add, index_select, sort, topk...).

See docs/adding-an-op.md for what a record holds and the tests that check it.
"""

from __future__ import annotations
