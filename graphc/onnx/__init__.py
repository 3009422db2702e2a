"""ONNX interchange: :func:`import_onnx` (``graphc.onnx.importer``).

``onnx`` and ``onnxruntime`` are an optional extra (``pip install .[onnx]``):
importing this package does not import them.
"""

from __future__ import annotations

from .importer import OnnxImportError, UnsupportedOnnxOperatorError, import_onnx

__all__ = ["import_onnx", "OnnxImportError", "UnsupportedOnnxOperatorError"]
