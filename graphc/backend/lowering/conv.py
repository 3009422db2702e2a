"""Lowering entries: convolution and pooling.

See table.py for the entry each family needs.
"""

from __future__ import annotations
