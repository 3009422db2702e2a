"""Kept only so that shapes pickled by earlier versions load: they name the class
``eager._surface.Size`` (the op surface is :mod:`eager.surface` now, and ``eager.Size``
pickles as itself).  Nothing imports this module."""

from __future__ import annotations

from ._operands import Size

__all__ = ["Size"]
