"""eager.backends.mps: Apple's GPU backend, never available in eager."""

from __future__ import annotations


def is_available() -> bool:
    """False: eager runs on the CPU."""
    return False


def is_built() -> bool:
    """False: eager has no MPS backend."""
    return False
