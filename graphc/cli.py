"""Kept so that a ``graphc`` console script installed by an earlier version (it calls
``graphc.cli:main``) keeps working until the project is reinstalled; the CLI is
:mod:`graphc.tools.cli`."""

from __future__ import annotations

from .tools.cli import main

__all__ = ["main"]
