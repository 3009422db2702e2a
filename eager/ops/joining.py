"""Op records: joining and splitting (cat/concat, stack...).

See docs/adding-an-op.md for what a record holds and the tests that check it.
"""

from __future__ import annotations
