"""ONNX interchange (docs/onnx.md): :func:`export_onnx` writes what graphc compiles as an
ONNX model, :func:`import_onnx` turns an ONNX model into a function that runs eagerly and
compiles.  ``onnx`` and ``onnxruntime`` are the optional ``onnx`` extra
(``pip install .[onnx]``): importing this package does not import them; they are imported
when an export or import runs."""

from __future__ import annotations

from .export import export_onnx
from .importer import OnnxImportError, UnsupportedOnnxOperatorError, import_onnx

__all__ = ["export_onnx", "import_onnx", "OnnxImportError", "UnsupportedOnnxOperatorError"]
