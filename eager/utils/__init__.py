"""``torch.utils``: the data-loading helpers (``eager.utils.data``)."""

from __future__ import annotations

from . import data  # noqa: F401
