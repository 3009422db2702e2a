"""Op records: elementwise math and activations (erf, log1p, floor, remainder, isnan...).

See docs/adding-an-op.md for what a record holds and the tests that check it.
"""

from __future__ import annotations
