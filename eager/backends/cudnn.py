"""eager.backends.cudnn: the flags scripts set (``deterministic``, ``benchmark``); they
are kept as plain module attributes and change nothing (eager has no cuDNN)."""

from __future__ import annotations

enabled = True
deterministic = False
benchmark = False
allow_tf32 = True


def is_available() -> bool:
    """False: eager has no cuDNN."""
    return False


def version() -> None:
    """None: no cuDNN library is loaded."""
    return None
