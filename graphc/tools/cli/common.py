"""What every ``graphc`` command shares: exit statuses, the two kinds of one-line
errors and the progress printer."""

from __future__ import annotations

import sys
from typing import Callable

EXIT_USAGE = 2
EXIT_FAILED = 1


class UsageError(Exception):
    """A problem with what the user typed: one line on stderr, exit status 2."""


class CompileFailed(Exception):
    """The function could not be traced or compiled: one line on stderr, exit status 1."""


def _progress(enabled: bool) -> Callable[[str], None]:
    """A progress printer: stderr on a terminal, silent when piped."""
    if enabled and sys.stderr.isatty():
        return lambda msg: print(f"[graphc] {msg}", file=sys.stderr, flush=True)
    return lambda msg: None
