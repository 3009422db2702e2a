"""Lowering entries: elementwise math and activations.

See table.py for the entry each family needs.
"""

from __future__ import annotations
