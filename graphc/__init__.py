"""graphc: define-then-run.  Trace a function written against the eager API into a
graph IR, verify it, interpret or compile it, and cache it per input signature.
"""

from __future__ import annotations

from .api import CacheInfo, CompiledFunction, compile
from .cond import cond, where
from .loops import fori_loop, scan, while_loop
from .transforms import grad, value_and_grad, vjp, vmap
from .forward import hessian, jacfwd, jacobian, jacrev, jvp, linearize
from .errors import (
    ConcretizationTypeError,
    GraphcError,
    GraphFormatError,
    GraphVerificationError,
    LeakedTracerError,
    SignatureError,
    TracerArrayConversionError,
    TracerBoolConversionError,
    TracerError,
    UnsupportedOpError,
)
from .interpreter import interpret, interpret_all
from .runtime.parallel import get_num_threads, set_num_threads
from .ir import Graph, verify
from .tracer import Tracer, trace
from .onnx import export_onnx
from .tools.bisect import bisect_passes
from .onnx import import_onnx
from .tools.compare import compare
from .tools.report import ComparisonReport
from ._version import __version__

__all__ = [
    "set_num_threads",
    "get_num_threads",
    "grad",
    "value_and_grad",
    "vjp",
    "vmap",
    "jvp",
    "linearize",
    "jacfwd",
    "jacrev",
    "jacobian",
    "hessian",
    "compile",
    "export_onnx",
    "compare",
    "import_onnx",
    "ComparisonReport",
    "CompiledFunction",
    "CacheInfo",
    "trace",
    "interpret",
    "interpret_all",
    "Graph",
    "verify",
    "where",
    "cond",
    "scan",
    "fori_loop",
    "while_loop",
    "Tracer",
    "GraphcError",
    "TracerError",
    "TracerBoolConversionError",
    "ConcretizationTypeError",
    "TracerArrayConversionError",
    "LeakedTracerError",
    "GraphVerificationError",
    "GraphFormatError",
    "SignatureError",
    "UnsupportedOpError",
]
