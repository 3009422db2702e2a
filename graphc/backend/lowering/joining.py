"""Lowering entries: joining and splitting (cat, stack...).

See table.py for the entry each family needs.
"""

from __future__ import annotations
