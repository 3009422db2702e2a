"""Lowering entries: statistics beyond the basic reductions (prod, cumsum...).

See table.py for the entry each family needs.
"""

from __future__ import annotations
