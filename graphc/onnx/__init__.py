"""ONNX interchange: :func:`export_onnx` writes what graphc compiles as an ONNX model
(docs/onnx.md).  The ``onnx`` package is imported only when an export runs (it is the
optional ``onnx`` extra)."""

from __future__ import annotations

from .export import export_onnx

__all__ = ["export_onnx"]
