"""eager.backends: ``mps`` and ``cudnn``, the accelerator switches scripts check (none is
available: eager runs on the CPU)."""

from __future__ import annotations

import eager.backends.cudnn as cudnn
import eager.backends.mps as mps

__all__ = ["cudnn", "mps"]
