"""Lowering entries: gathering, scattering and sorting.

See table.py for the entry each family needs.
"""

from __future__ import annotations
