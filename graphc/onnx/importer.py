"""``graphc.import_onnx``: an ONNX model as a Python function over eager's public ops.

The model is validated once (``onnx.checker``, opset, every operator known, every
name defined, initializer sizes), then :func:`import_onnx` returns a function
``f(*inputs)`` that walks the graph's nodes in order and evaluates each with eager's
public ops (``eager.matmul``, ``eager.nn.functional.conv2d``...).  The same function
runs eagerly on Tensors or numpy arrays and under ``graphc.compile`` (which traces
it), so an imported model is compiled like any other eager code.

Values whose inputs are all static (initializers, ``Constant``, ``Shape`` of an
input, and what is computed from those) are computed with numpy-backed eager
tensors and kept as numpy arrays, so shape subgraphs such as
``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` fold to constants, and
operators that need a static operand (``Reshape``'s shape, ``Slice``'s starts...)
get one or refuse with an error naming the node.

ONNX semantics are followed where they differ from PyTorch's: integer ``Div``
truncates, ``Mod`` follows its ``fmod`` flag, ``Gemm``'s ``C`` broadcasts one way,
``AveragePool`` excludes padding by default, ``Reshape`` copies a 0 dimension.

``onnx`` is an optional dependency (``pip install .[onnx]``); ``import graphc``
does not import it, :func:`import_onnx` does.
"""

from __future__ import annotations

import inspect
import keyword
import math
import re
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

import eager
from eager.interop import NN_FUNCTIONAL as F

from ..errors import GraphcError, UnsupportedOpError

MIN_OPSET = 7
MAX_OPSET = 21
# the largest tensor (elements) a static operator (ConstantOfShape, Expand, Range,
# Tile of constants) may create: a hostile model must not exhaust memory
MAX_STATIC_ELEMENTS = 1 << 26
# the largest initializer (elements) accepted
MAX_INITIALIZER_ELEMENTS = 1 << 30

EXTRA_HINT = "install the optional extra: pip install .[onnx] (onnx and onnxruntime)"


class OnnxImportError(GraphcError, ValueError):
    """A model :func:`import_onnx` cannot import or run: an invalid model, a dynamic
    shape it cannot fix, an unsupported dtype or attribute, an input of the wrong
    shape or dtype.  The message names the node, input or operator."""


class UnsupportedOnnxOperatorError(OnnxImportError, UnsupportedOpError):
    """The model uses operators :func:`import_onnx` does not map; ``operators`` lists
    (op_type, node name) of every one, all reported in one error."""

    def __init__(self, message: str, operators: List[Tuple[str, str]]) -> None:
        super().__init__(message)
        self.operators = operators


def require_onnx() -> Any:
    """The ``onnx`` module, or an ImportError naming the optional extra to install."""
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"graphc's ONNX support needs the onnx package: {EXTRA_HINT}") from exc
    return onnx


# ---------------------------------------------------------------------------
# dtypes

# ONNX TensorProto element type -> numpy dtype eager supports
_DTYPES = {
    1: np.float32,
    2: np.uint8,
    3: np.int8,
    5: np.int16,
    6: np.int32,
    7: np.int64,
    9: np.bool_,
    10: np.float16,
    11: np.float64,
}
_DTYPE_NAMES = {
    0: "UNDEFINED",
    4: "UINT16",
    8: "STRING",
    12: "UINT32",
    13: "UINT64",
    14: "COMPLEX64",
    15: "COMPLEX128",
    16: "BFLOAT16",
}


def _np_dtype(elem_type: int, what: str) -> Any:
    if elem_type not in _DTYPES:
        name = _DTYPE_NAMES.get(elem_type, f"elem_type {elem_type}")
        raise OnnxImportError(
            f"import_onnx: {what} has dtype {name}, which graphc does not support "
            f"(supported: float16, float32, float64, int8, uint8, int16, int32, int64, bool)"
        )
    return np.dtype(_DTYPES[elem_type])


def _eager_dtype(npdt: Any) -> Any:
    return getattr(eager, np.dtype(npdt).name if np.dtype(npdt) != np.bool_ else "bool")


# ---------------------------------------------------------------------------
# values: numpy arrays are static, anything else is an eager Tensor (or a Tracer)


def _static(v: Any) -> bool:
    return isinstance(v, np.ndarray)


def _t(v: Any) -> Any:
    """An eager tensor for a value (numpy arrays become constant tensors)."""
    if isinstance(v, np.ndarray):  # private arrays (copied at import), no op writes them
        return eager.from_numpy(v if v.flags.writeable and v.flags.c_contiguous else np.array(v))
    return v


def _shape(v: Any) -> Tuple[int, ...]:
    return tuple(int(d) for d in v.shape)


def _dtype_of(v: Any) -> np.dtype:
    if isinstance(v, np.ndarray):
        return v.dtype
    return np.dtype(str(v.dtype).replace("torch.", "").replace("eager.", ""))


def _ints(v: Any, node: Any, what: str) -> List[int]:
    """A static integer operand as a list, or an error naming the node."""
    if v is None:
        return []
    if not _static(v):
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} ({node.op_type}): its {what} is computed from "
            "the inputs' values, not only from their shapes; graphc needs it static"
        )
    return [int(i) for i in np.asarray(v).reshape(-1)]


def _nname(node: Any) -> str:
    return repr(node.name) if node.name else f"<unnamed {node.op_type}>"


def _axis(a: int, rank: int, node: Any) -> int:
    if not -rank <= a < max(rank, 1) and not (rank == 0 and a in (0, -1)):
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} ({node.op_type}): axis {a} is out of range "
            f"for a tensor of rank {rank}"
        )
    return a % rank if rank else 0


def _check_size(shape: Any, node: Any) -> None:
    n = 1
    for d in shape:
        if d < 0:
            raise OnnxImportError(
                f"import_onnx: node {_nname(node)} ({node.op_type}): negative dimension in "
                f"shape {list(shape)}"
            )
        n *= d
    if n > MAX_STATIC_ELEMENTS:
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} ({node.op_type}): shape {list(shape)} has {n} "
            f"elements, more than the {MAX_STATIC_ELEMENTS} a model may create"
        )


# ---------------------------------------------------------------------------
# the operators: fn(node, attrs, inputs, opset) -> list of outputs

_OPS: Dict[str, Callable] = {}


def _op(*names: str) -> Callable:
    def deco(fn: Callable) -> Callable:
        for n in names:
            _OPS[n] = fn
        return fn

    return deco


def _unary(fn: Callable) -> Callable:
    return lambda node, at, xs, opset: [fn(_t(xs[0]))]


for _name, _fn in {
    "Neg": eager.neg,
    "Abs": eager.abs,
    "Exp": eager.exp,
    "Log": eager.log,
    "Sqrt": eager.sqrt,
    "Tanh": eager.tanh,
    "Sigmoid": eager.sigmoid,
    "Relu": eager.relu,
    "Erf": eager.erf,
    "Reciprocal": eager.reciprocal,
    "Floor": eager.floor,
    "Ceil": eager.ceil,
    "Sin": eager.sin,
    "Cos": eager.cos,
    "Sign": eager.sign,
    "Round": eager.round,
    "Not": eager.logical_not,
    "Softplus": F.softplus,
    "Tan": eager.tan,
    "Asin": eager.asin,
    "Acos": eager.acos,
    "Atan": eager.atan,
    "Sinh": eager.sinh,
    "Cosh": eager.cosh,
    "Asinh": eager.asinh,
    "Acosh": eager.acosh,
    "Atanh": eager.atanh,
    "IsNaN": eager.isnan,
}.items():
    _OPS[_name] = _unary(_fn)


@_op("Identity")
def _identity(node, at, xs, opset):
    return [xs[0]]


@_op("Dropout")
def _dropout(node, at, xs, opset):
    # inference: identity (training_mode, an optional third input, must be false)
    if len(xs) > 2 and xs[2] is not None:
        if not _static(xs[2]) or bool(np.asarray(xs[2])):
            raise OnnxImportError(
                f"import_onnx: node {_nname(node)} (Dropout): training_mode must be a "
                "static false; graphc imports models for inference"
            )
    x = xs[0]
    return [x, np.ones(_shape(x), np.bool_)]


def _binary(fn: Callable) -> Callable:
    return lambda node, at, xs, opset: [fn(_t(xs[0]), _t(xs[1]))]


_OPS["Add"] = _binary(eager.add)
_OPS["Sub"] = _binary(eager.sub)
_OPS["Mul"] = _binary(eager.mul)
_OPS["Equal"] = _binary(eager.eq)
_OPS["Less"] = _binary(eager.lt)
_OPS["Greater"] = _binary(eager.gt)
_OPS["LessOrEqual"] = _binary(eager.le)
_OPS["GreaterOrEqual"] = _binary(eager.ge)
_OPS["And"] = _binary(eager.logical_and)
_OPS["Or"] = _binary(eager.logical_or)
_OPS["Xor"] = _binary(eager.ne)  # on booleans


def _int_divisor(a: Any, b: Any) -> Any:
    """A static integer divisor holding one value as a Python int (graphc compiles integer
    division by a constant scalar), else the divisor as a tensor."""
    if _static(b) and b.size and b.dtype.kind in "iu" and np.all(b == b.reshape(-1)[0]):
        if b.ndim <= len(_shape(a)):  # the result's shape is a's
            return int(b.reshape(-1)[0])
    return _t(b)


@_op("Div")
def _div(node, at, xs, opset):
    a = _t(xs[0])
    if a.is_floating_point():
        return [eager.div(a, _t(xs[1]))]
    b = _int_divisor(a, xs[1])
    # C integer division: the floor quotient, one more where a remainder has the
    # dividend's sign opposite the divisor's
    q = eager.floor_divide(a, b)
    # (no factory here: a factory's tensor is a traced value even for constant inputs)
    opposite = ((a > 0) if b < 0 else (a < 0)) if isinstance(b, int) else ((a < 0) != (b < 0))
    fix = (a - q * b != 0) & opposite
    return [q + fix.to(q.dtype)]


@_op("Mod")
def _mod(node, at, xs, opset):
    a = _t(xs[0])
    b = _t(xs[1]) if a.is_floating_point() else _int_divisor(a, xs[1])
    fmod = int(at.get("fmod", 0))
    if a.is_floating_point() and not fmod:
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (Mod): fmod=0 on floating-point inputs is "
            "invalid ONNX (the spec requires fmod=1)"
        )
    out = eager.fmod(a, b) if fmod else eager.remainder(a, b)
    return [out.to(a.dtype) if out.dtype != a.dtype else out]


@_op("Pow")
def _pow(node, at, xs, opset):
    a, b = _t(xs[0]), _t(xs[1])
    out = eager.pow(a, b)
    return [out.to(a.dtype) if out.dtype != a.dtype else out]  # result has X's type


def _variadic(fn: Callable) -> Callable:
    def run(node, at, xs, opset):
        out = _t(xs[0])
        for x in xs[1:]:
            out = fn(out, _t(x))
        if node.op_type == "Mean":
            out = out / len(xs)
        return [out]

    return run


_OPS["Sum"] = _variadic(eager.add)
_OPS["Mean"] = _variadic(eager.add)
_OPS["Max"] = _variadic(eager.maximum)
_OPS["Min"] = _variadic(eager.minimum)


@_op("Where")
def _where(node, at, xs, opset):
    return [eager.where(_t(xs[0]), _t(xs[1]), _t(xs[2]))]


@_op("LeakyRelu")
def _leaky(node, at, xs, opset):
    return [F.leaky_relu(_t(xs[0]), float(at.get("alpha", 0.01)))]


@_op("Elu")
def _elu(node, at, xs, opset):
    return [F.elu(_t(xs[0]), float(at.get("alpha", 1.0)))]


@_op("HardSigmoid")
def _hardsigmoid(node, at, xs, opset):
    a, b = float(at.get("alpha", 0.2)), float(at.get("beta", 0.5))
    return [eager.clamp(_t(xs[0]) * a + b, 0.0, 1.0)]


@_op("PRelu")
def _prelu(node, at, xs, opset):
    x, s = _t(xs[0]), _t(xs[1])
    return [eager.where(x < 0, x * s, x)]


@_op("Gelu")
def _gelu(node, at, xs, opset):
    approx = at.get("approximate", "none")
    if approx not in ("none", "tanh"):
        raise OnnxImportError(f"import_onnx: node {_nname(node)} (Gelu): approximate={approx!r}")
    return [F.gelu(_t(xs[0]), approximate=approx)]


def _softmax_like(fn: Callable) -> Callable:
    def run(node, at, xs, opset):
        x = _t(xs[0])
        shape = _shape(x)
        if opset >= 13:
            return [fn(x, dim=_axis(int(at.get("axis", -1)), len(shape), node))]
        # before opset 13: the input is coerced to 2-D at ``axis``
        ax = _axis(int(at.get("axis", 1)), len(shape), node)
        lead = int(np.prod(shape[:ax], dtype=np.int64))
        x2 = x.reshape(lead, -1) if shape else x.reshape(1, 1)
        return [fn(x2, dim=1).reshape(shape)]

    return run


_OPS["Softmax"] = _softmax_like(F.softmax)
_OPS["LogSoftmax"] = _softmax_like(F.log_softmax)


@_op("Gemm")
def _gemm(node, at, xs, opset):
    a, b = _t(xs[0]), _t(xs[1])
    if int(at.get("transA", 0)):
        a = a.t()
    if int(at.get("transB", 0)):
        b = b.t()
    alpha, beta = float(at.get("alpha", 1.0)), float(at.get("beta", 1.0))
    y = eager.matmul(a, b)
    if alpha != 1.0:
        y = y * alpha
    if len(xs) > 2 and xs[2] is not None:
        c = _t(xs[2])
        # C broadcasts to (M, N) one way only
        try:
            np.broadcast_shapes(_shape(c), _shape(y))
            ok = np.broadcast_shapes(_shape(c), _shape(y)) == _shape(y)
        except ValueError:
            ok = False
        if not ok:
            raise OnnxImportError(
                f"import_onnx: node {_nname(node)} (Gemm): C of shape {list(_shape(c))} does "
                f"not broadcast to the result's shape {list(_shape(y))}"
            )
        y = y + (c * beta if beta != 1.0 else c)
    return [y]


@_op("MatMul")
def _matmul(node, at, xs, opset):
    return [eager.matmul(_t(xs[0]), _t(xs[1]))]


@_op("Einsum")
def _einsum(node, at, xs, opset):
    return [eager.einsum(at["equation"], *[_t(x) for x in xs])]


def _spatial_pads(
    node: Any, at: dict, nsp: int, in_sp: list, kernel: list, strides: list, dil: list
) -> list:
    """ONNX pads ([begin..., end...]) after resolving auto_pad."""
    auto = at.get("auto_pad", "NOTSET")
    if isinstance(auto, bytes):
        auto = auto.decode()
    if auto in ("NOTSET", ""):
        pads = list(at.get("pads", [0] * (2 * nsp)))
    elif auto == "VALID":
        pads = [0] * (2 * nsp)
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * nsp)
        for i in range(nsp):
            out = -(-in_sp[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - in_sp[i])
            small, big = total // 2, total - total // 2
            pads[i], pads[i + nsp] = (small, big) if auto == "SAME_UPPER" else (big, small)
    else:
        raise OnnxImportError(f"import_onnx: node {_nname(node)}: auto_pad={auto!r}")
    if len(pads) != 2 * nsp:
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} ({node.op_type}): pads {pads} should have "
            f"{2 * nsp} entries"
        )
    return pads


def _pad_explicit(x: Any, pads: list, nsp: int, value: float) -> Any:
    """F.pad with ONNX spatial pads [begin..., end...] (last dimension first for F.pad)."""
    fp: list = []
    for i in reversed(range(nsp)):
        fp += [pads[i], pads[i + nsp]]
    return F.pad(x, fp, value=value)


@_op("Conv")
def _conv(node, at, xs, opset):
    x, w = _t(xs[0]), _t(xs[1])
    b = _t(xs[2]) if len(xs) > 2 and xs[2] is not None else None
    nsp = len(_shape(x)) - 2
    if nsp not in (1, 2):
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (Conv): only 1-D and 2-D convolutions are "
            f"supported, got input of shape {list(_shape(x))}"
        )
    kernel = list(_shape(w)[2:])
    strides = list(at.get("strides", [1] * nsp))
    dil = list(at.get("dilations", [1] * nsp))
    pads = _spatial_pads(node, at, nsp, list(_shape(x)[2:]), kernel, strides, dil)
    group = int(at.get("group", 1))
    if pads[:nsp] == pads[nsp:]:
        padding = pads[:nsp]
    else:
        x, padding = _pad_explicit(x, pads, nsp, 0.0), [0] * nsp
    conv = F.conv2d if nsp == 2 else F.conv1d
    return [conv(x, w, b, stride=strides, padding=padding, dilation=dil, groups=group)]


def _pool_common(node, at, x):
    nsp = len(_shape(x)) - 2
    if nsp not in (1, 2):
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} ({node.op_type}): only 1-D and 2-D pooling is "
            f"supported, got input of shape {list(_shape(x))}"
        )
    kernel = list(at["kernel_shape"])
    strides = list(at.get("strides", [1] * nsp))
    dil = list(at.get("dilations", [1] * nsp))
    pads = _spatial_pads(node, at, nsp, list(_shape(x)[2:]), kernel, strides, dil)
    return nsp, kernel, strides, dil, pads, bool(int(at.get("ceil_mode", 0)))


@_op("MaxPool")
def _maxpool(node, at, xs, opset):
    x = _t(xs[0])
    want_indices = len(node.output) > 1 and bool(node.output[1])
    if int(at.get("storage_order", 0)):
        raise OnnxImportError(f"import_onnx: node {_nname(node)} (MaxPool): storage_order=1")
    nsp, kernel, strides, dil, pads, ceil = _pool_common(node, at, x)
    symmetric = pads[:nsp] == pads[nsp:] and all(2 * p <= k for p, k in zip(pads[:nsp], kernel))
    if want_indices and (nsp != 2 or not symmetric):
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (MaxPool): the Indices output is supported for "
            f"2-D pooling with symmetric pads only (got {nsp}-D, pads {pads})"
        )
    if symmetric:
        padding = pads[:nsp]
    else:
        x, padding = _pad_explicit(x, pads, nsp, -math.inf), [0] * nsp
    pool = F.max_pool2d if nsp == 2 else F.max_pool1d
    if not want_indices:
        return [pool(x, kernel, strides, padding, dil, ceil_mode=ceil)]
    y, idx = F.max_pool2d(x, kernel, strides, padding, dil, ceil_mode=ceil, return_indices=True)
    # PyTorch's indices count within each (n, c) plane; ONNX's within the whole tensor
    n, c, h, w = _shape(x)
    base = (np.arange(n * c, dtype=np.int64) * (h * w)).reshape(n, c, 1, 1)
    return [y, idx + eager.from_numpy(base)]


@_op("AveragePool")
def _avgpool(node, at, xs, opset):
    x = _t(xs[0])
    nsp, kernel, strides, dil, pads, ceil = _pool_common(node, at, x)
    if any(d != 1 for d in dil):
        raise OnnxImportError(f"import_onnx: node {_nname(node)} (AveragePool): dilations {dil}")
    include = bool(int(at.get("count_include_pad", 0)))
    if ceil and any(pads):
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (AveragePool): ceil_mode with padding is not "
            "supported"
        )
    if pads[:nsp] == pads[nsp:] and all(2 * p <= k for p, k in zip(pads[:nsp], kernel)):
        pool = F.avg_pool2d if nsp == 2 else F.avg_pool1d
        return [pool(x, kernel, strides, pads[:nsp], ceil_mode=ceil, count_include_pad=include)]
    if not include:
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (AveragePool): asymmetric pads {pads} with "
            "count_include_pad=0 are not supported"
        )
    x = _pad_explicit(x, pads, nsp, 0.0)
    pool = F.avg_pool2d if nsp == 2 else F.avg_pool1d
    return [pool(x, kernel, strides, 0, ceil_mode=ceil)]


@_op("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(node, at, xs, opset):
    x = _t(xs[0])
    dims = tuple(range(2, len(_shape(x))))
    if node.op_type == "GlobalAveragePool":
        return [x.mean(dim=dims, keepdim=True)]
    return [eager.amax(x, dim=dims, keepdim=True)]


@_op("BatchNormalization")
def _batchnorm(node, at, xs, opset):
    if int(at.get("training_mode", 0)) or (len(node.output) > 1 and any(node.output[1:])):
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (BatchNormalization): training mode is not "
            "supported (graphc imports models for inference)"
        )
    x = _t(xs[0])
    scale, bias, mean, var = (_t(v) for v in xs[1:5])
    eps = float(at.get("epsilon", 1e-5))
    shape = [1, -1] + [1] * (len(_shape(x)) - 2)
    inv = eager.rsqrt(var + eps) * scale
    return [(x - mean.reshape(shape)) * inv.reshape(shape) + bias.reshape(shape)]


@_op("LayerNormalization")
def _layernorm(node, at, xs, opset):
    if len(node.output) > 1 and any(node.output[1:]):
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (LayerNormalization): the Mean and "
            "InvStdDev outputs are not supported"
        )
    x = _t(xs[0])
    rank = len(_shape(x))
    ax = _axis(int(at.get("axis", -1)), rank, node)
    eps = float(at.get("epsilon", 1e-5))
    dims = tuple(range(ax, rank))
    mean = x.mean(dim=dims, keepdim=True)
    d = x - mean
    var = (d * d).mean(dim=dims, keepdim=True)
    y = d * eager.rsqrt(var + eps) * _t(xs[1])
    if len(xs) > 2 and xs[2] is not None:
        y = y + _t(xs[2])
    return [y]


@_op("Flatten")
def _flatten(node, at, xs, opset):
    x = xs[0]
    shape = _shape(x)
    ax = int(at.get("axis", 1))
    if not -len(shape) <= ax <= len(shape):
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (Flatten): axis {ax} out of range for rank "
            f"{len(shape)}"
        )
    ax = ax % (len(shape) + 1) if ax < 0 else ax
    new = (int(np.prod(shape[:ax], dtype=np.int64)), int(np.prod(shape[ax:], dtype=np.int64)))
    return [x.reshape(new)]


@_op("Reshape")
def _reshape(node, at, xs, opset):
    x = xs[0]
    shape = _ints(xs[1], node, "shape") if opset >= 5 else list(at["shape"])
    allowzero = int(at.get("allowzero", 0))
    ins = _shape(x)
    new = []
    for i, d in enumerate(shape):
        if d == 0 and not allowzero:
            if i >= len(ins):
                raise OnnxImportError(
                    f"import_onnx: node {_nname(node)} (Reshape): 0 at position {i} copies "
                    f"an input dimension, but the input has rank {len(ins)}"
                )
            d = ins[i]
        new.append(d)
    if new.count(-1) > 1:
        raise OnnxImportError(f"import_onnx: node {_nname(node)} (Reshape): shape {shape}")
    known = int(np.prod([d for d in new if d != -1], dtype=np.int64))
    total = int(np.prod(ins, dtype=np.int64))
    if -1 in new:
        if known == 0 or total % known:
            raise OnnxImportError(
                f"import_onnx: node {_nname(node)} (Reshape): cannot reshape {list(ins)} to {shape}"
            )
        new[new.index(-1)] = total // known
    if int(np.prod(new, dtype=np.int64)) != total or any(d < 0 for d in new):
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (Reshape): cannot reshape {list(ins)} to {shape}"
        )
    return [x.reshape(tuple(new))]


@_op("Transpose")
def _transpose(node, at, xs, opset):
    x = xs[0]
    perm = list(at.get("perm", list(reversed(range(len(_shape(x)))))))
    if sorted(perm) != list(range(len(_shape(x)))):
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (Transpose): perm {perm} for rank {len(_shape(x))}"
        )
    if _static(x):
        return [np.transpose(x, perm)]
    return [x.permute(*perm)]


@_op("Concat")
def _concat(node, at, xs, opset):
    vals = [x for x in xs if x is not None]
    rank = len(_shape(vals[0]))
    ax = _axis(int(at["axis"]), rank, node)
    if all(_static(v) for v in vals):
        return [np.concatenate(vals, axis=ax)]
    return [eager.cat([_t(v) for v in vals], dim=ax)]


@_op("Split")
def _split(node, at, xs, opset):
    x = _t(xs[0])
    shape = _shape(x)
    ax = _axis(int(at.get("axis", 0)), len(shape), node)
    n = len(node.output)
    if len(xs) > 1 and xs[1] is not None:
        sizes = _ints(xs[1], node, "split")
    elif "split" in at:
        sizes = list(at["split"])
    else:
        k = int(at.get("num_outputs", n))
        step = -(-shape[ax] // k)
        sizes = [min(step, shape[ax] - i * step) for i in range(k)]
    if sum(sizes) != shape[ax] or len(sizes) != n or any(s < 0 for s in sizes):
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (Split): sizes {sizes} do not split dimension "
            f"{ax} of size {shape[ax]} into {n} outputs"
        )
    return list(eager.split(x, sizes, dim=ax))


def _index(x: Any, ax: int, idx: np.ndarray) -> Any:
    """x[..., idx, ...] along ``ax`` for a static 1-D index array."""
    if _static(x):
        return np.take(x, idx, axis=ax)
    n = len(idx)
    if n and np.all(np.diff(idx) == 1):
        sl = [slice(None)] * ax + [slice(int(idx[0]), int(idx[-1]) + 1)]
        return x[tuple(sl)]
    if n == 0:
        sl = [slice(None)] * ax + [slice(0, 0)]
        return x[tuple(sl)]
    return eager.index_select(x, ax, eager.from_numpy(idx.astype(np.int64)))


@_op("Slice")
def _slice(node, at, xs, opset):
    x = xs[0]
    shape = _shape(x)
    if opset >= 10:
        starts = _ints(xs[1], node, "starts")
        ends = _ints(xs[2], node, "ends")
        axes = _ints(xs[3], node, "axes") if len(xs) > 3 and xs[3] is not None else None
        steps = _ints(xs[4], node, "steps") if len(xs) > 4 and xs[4] is not None else None
    else:
        starts, ends = list(at["starts"]), list(at["ends"])
        axes, steps = (list(at["axes"]) if "axes" in at else None), None
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise OnnxImportError(f"import_onnx: node {_nname(node)} (Slice): operand lengths differ")
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = _axis(a, len(shape), node)
        dim = shape[a]
        if st == 0:
            raise OnnxImportError(f"import_onnx: node {_nname(node)} (Slice): step 0")
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
        else:
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
        x = _index(x, a, np.arange(s, e, st, dtype=np.int64))
    return [x]


@_op("Gather")
def _gather(node, at, xs, opset):
    x, idx = xs[0], xs[1]
    shape = _shape(x)
    ax = _axis(int(at.get("axis", 0)), len(shape), node)
    dim = shape[ax]
    if _static(idx):
        i = np.asarray(idx).astype(np.int64)
        if np.any((i < -dim) | (i >= dim)):
            raise OnnxImportError(
                f"import_onnx: node {_nname(node)} (Gather): indices {i.tolist()} out of range "
                f"for dimension {ax} of size {dim}"
            )
        i = np.where(i < 0, i + dim, i)
        if _static(x):
            return [np.take(x, i, axis=ax)]
        flat = eager.index_select(_t(x), ax, eager.from_numpy(i.reshape(-1)))
        return [flat.reshape(shape[:ax] + i.shape + shape[ax + 1 :])]
    it = _t(idx)
    it = eager.where(it < 0, it + dim, it).to(eager.int64)
    ishape = _shape(it)
    flat = eager.index_select(_t(x), ax, it.reshape(-1))
    return [flat.reshape(shape[:ax] + ishape + shape[ax + 1 :])]


def _axes_operand(node, at, xs, opset, since: int) -> Optional[List[int]]:
    if opset >= since:
        return _ints(xs[1], node, "axes") if len(xs) > 1 and xs[1] is not None else None
    return list(at["axes"]) if "axes" in at else None


@_op("Squeeze")
def _squeeze(node, at, xs, opset):
    x = xs[0]
    shape = _shape(x)
    axes = _axes_operand(node, at, xs, opset, 13)
    if axes is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    axes = sorted({_axis(a, len(shape), node) for a in axes})
    for a in axes:
        if shape[a] != 1:
            raise OnnxImportError(
                f"import_onnx: node {_nname(node)} (Squeeze): dimension {a} of shape "
                f"{list(shape)} is not 1"
            )
    return [x.reshape(tuple(d for i, d in enumerate(shape) if i not in axes))]


@_op("Unsqueeze")
def _unsqueeze(node, at, xs, opset):
    x = xs[0]
    shape = list(_shape(x))
    axes = _axes_operand(node, at, xs, opset, 13) or []
    rank = len(shape) + len(axes)
    axes = sorted(_axis(a, rank, node) for a in axes)
    if len(set(axes)) != len(axes):
        raise OnnxImportError(f"import_onnx: node {_nname(node)} (Unsqueeze): repeated axes")
    for a in axes:
        shape.insert(a, 1)
    return [x.reshape(tuple(shape))]


_REDUCE_AXES_INPUT = {"ReduceSum": 13}


def _reduce(kind: str) -> Callable:
    def run(node, at, xs, opset):
        x = _t(xs[0])
        rank = len(_shape(x))
        axes = _axes_operand(node, at, xs, opset, _REDUCE_AXES_INPUT.get(node.op_type, 18))
        keep = bool(int(at.get("keepdims", 1)))
        if not axes:
            if int(at.get("noop_with_empty_axes", 0)):
                return [x]
            axes = list(range(rank))
        dims = tuple(sorted({_axis(a, rank, node) for a in axes}))
        if not dims:  # a 0-d input
            return [x]
        if kind == "sum":
            return [x.sum(dim=dims, keepdim=keep)]
        if kind == "mean":
            return [x.mean(dim=dims, keepdim=keep)]
        if kind == "max":
            return [eager.amax(x, dim=dims, keepdim=keep)]
        if kind == "min":
            return [eager.amin(x, dim=dims, keepdim=keep)]
        out = x
        for d in reversed(dims):
            out = eager.prod(out, dim=d, keepdim=keep)
        return [out]

    return run


for _name, _kind in (
    ("ReduceSum", "sum"),
    ("ReduceMean", "mean"),
    ("ReduceMax", "max"),
    ("ReduceMin", "min"),
    ("ReduceProd", "prod"),
):
    _OPS[_name] = _reduce(_kind)


@_op("ArgMax", "ArgMin")
def _argmax(node, at, xs, opset):
    if int(at.get("select_last_index", 0)):
        raise OnnxImportError(f"import_onnx: node {_nname(node)}: select_last_index=1")
    x = _t(xs[0])
    ax = _axis(int(at.get("axis", 0)), len(_shape(x)), node)
    keep = bool(int(at.get("keepdims", 1)))
    fn = eager.argmax if node.op_type == "ArgMax" else eager.argmin
    return [fn(x, dim=ax, keepdim=keep)]


@_op("Cast")
def _cast(node, at, xs, opset):
    dt = _np_dtype(int(at["to"]), f"node {_nname(node)} (Cast) target")
    x = xs[0]
    if _static(x):
        return [x.astype(dt)]
    return [x.to(_eager_dtype(dt))]


@_op("CastLike")
def _castlike(node, at, xs, opset):
    dt = _dtype_of(xs[1])
    x = xs[0]
    return [x.astype(dt) if _static(x) else x.to(_eager_dtype(dt))]


@_op("Constant")
def _constant(node, at, xs, opset):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in at:
            v = at[key]
            if key == "value":
                return [v]
            dt = np.float32 if "float" in key else np.int64
            return [np.array(v, dtype=dt)]
    raise OnnxImportError(
        f"import_onnx: node {_nname(node)} (Constant): only value, value_float(s) and "
        "value_int(s) are supported"
    )


@_op("ConstantOfShape")
def _constant_of_shape(node, at, xs, opset):
    shape = _ints(xs[0], node, "shape")
    _check_size(shape, node)
    v = at.get("value", np.zeros((1,), np.float32))
    return [np.full(shape, v.reshape(-1)[0], dtype=v.dtype)]


@_op("Shape")
def _shape_op(node, at, xs, opset):
    shape = np.array(_shape(xs[0]), dtype=np.int64)
    n = len(shape)
    start = int(at.get("start", 0))
    end = int(at.get("end", n))
    start = min(max(start + n if start < 0 else start, 0), n)
    end = min(max(end + n if end < 0 else end, 0), n)
    return [shape[start:end]]


@_op("Size")
def _size_op(node, at, xs, opset):
    return [np.array(int(np.prod(_shape(xs[0]), dtype=np.int64)), dtype=np.int64)]


@_op("Range")
def _range(node, at, xs, opset):
    for v, what in zip(xs, ("start", "limit", "delta")):
        if not _static(v):
            _ints(v, node, what)
    start, limit, delta = (np.asarray(v).reshape(()) for v in xs)
    if delta == 0:
        raise OnnxImportError(f"import_onnx: node {_nname(node)} (Range): delta 0")
    n = max(int(np.ceil((limit - start) / delta)), 0)
    _check_size([n], node)
    return [(start + np.arange(n) * delta).astype(start.dtype)]


@_op("Expand")
def _expand(node, at, xs, opset):
    x = xs[0]
    shape = _ints(xs[1], node, "shape")
    try:
        out = np.broadcast_shapes(_shape(x), tuple(shape))
    except ValueError:
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (Expand): shape {list(_shape(x))} does not "
            f"broadcast with {shape}"
        ) from None
    _check_size(out, node)
    if _static(x):
        return [np.array(np.broadcast_to(x, out))]
    return [x.expand(*out).contiguous() if _shape(x) != out else x]


@_op("Tile")
def _tile(node, at, xs, opset):
    reps = _ints(xs[1], node, "repeats")
    x = xs[0]
    if len(reps) != len(_shape(x)) or any(r < 0 for r in reps):
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (Tile): repeats {reps} for shape {list(_shape(x))}"
        )
    _check_size([a * b for a, b in zip(_shape(x), reps)], node)
    return [_t(x).repeat(*reps)]


@_op("Clip")
def _clip(node, at, xs, opset):
    x = _t(xs[0])
    if opset < 11:
        lo, hi = at.get("min"), at.get("max")
        return [eager.clamp(x, lo, hi)]
    lo = xs[1] if len(xs) > 1 else None
    hi = xs[2] if len(xs) > 2 else None
    if lo is not None:
        x = eager.maximum(x, _t(lo).to(x.dtype))
    if hi is not None:
        x = eager.minimum(x, _t(hi).to(x.dtype))
    return [x]


@_op("Pad")
def _pad(node, at, xs, opset):
    x = _t(xs[0])
    rank = len(_shape(x))
    mode = at.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        raise OnnxImportError(f"import_onnx: node {_nname(node)} (Pad): mode {mode!r}")
    if opset >= 11:
        pads = _ints(xs[1], node, "pads")
        value = xs[2] if len(xs) > 2 and xs[2] is not None else None
        axes = _ints(xs[3], node, "axes") if len(xs) > 3 and xs[3] is not None else None
        if value is not None and not _static(value):
            _ints(value, node, "constant_value")
        value = float(np.asarray(value).reshape(())) if value is not None else 0.0
    else:
        pads, value, axes = list(at["pads"]), float(at.get("value", 0.0)), None
    axes = [_axis(a, rank, node) for a in axes] if axes else list(range(rank))
    k = len(axes)
    if len(pads) != 2 * k:
        raise OnnxImportError(f"import_onnx: node {_nname(node)} (Pad): pads {pads}")
    full = [0] * (2 * rank)
    for j, a in enumerate(axes):
        full[a], full[a + rank] = pads[j], pads[j + k]
    shape = _shape(x)
    _check_size([max(0, shape[a] + full[a] + full[a + rank]) for a in range(rank)], node)
    if mode != "constant":  # edge / reflect on any axes: gather the padded indices
        out = x
        for a in range(rank):
            pb, pe = full[a], full[a + rank]
            if not pb and not pe:
                continue
            n = _shape(out)[a]
            idx = np.arange(-pb, n + pe, dtype=np.int64)
            if mode == "edge":
                if n == 0:
                    raise OnnxImportError(
                        f"import_onnx: node {_nname(node)} (Pad): edge padding of an empty axis"
                    )
                idx = np.clip(idx, 0, n - 1)
            else:
                if n < 2 or max(pb, pe) > n - 1:
                    raise OnnxImportError(
                        f"import_onnx: node {_nname(node)} (Pad): reflect padding {pb, pe} of "
                        f"an axis of size {n} (needs pads smaller than the size)"
                    )
                m = 2 * (n - 1)
                idx = np.mod(idx, m)
                idx = np.where(idx >= n, m - idx, idx)
            out = _index(out, a, idx)
        return [out]
    fp: list = []
    lead = min([a for a in range(rank) if full[a] or full[a + rank]], default=rank)
    for a in reversed(range(lead, rank)):
        fp += [full[a], full[a + rank]]
    if not fp:
        return [x]
    return [F.pad(x, fp, mode="constant", value=value)]


# --- operators graphc.export_onnx emits (so that import(export(f)) reads back) -----------


@_op("IsInf")
def _isinf(node, at, xs, opset):
    x = _t(xs[0])
    pos, neg = int(at.get("detect_positive", 1)), int(at.get("detect_negative", 1))
    r = eager.isinf(x)
    if pos and not neg:
        r = eager.logical_and(r, x > 0)
    elif neg and not pos:
        r = eager.logical_and(r, x < 0)
    elif not pos and not neg:
        r = eager.zeros(_shape(x), dtype=eager.bool)
    return [r]


def _int_indices(idx: Any, dim: int, node: Any) -> Any:
    """Integer indices with negative ones counted from the end (ONNX allows -dim..dim-1);
    static out-of-range indices are refused naming the node."""
    if _static(idx):
        i = np.asarray(idx).astype(np.int64)
        if i.size and np.any((i < -dim) | (i >= dim)):
            raise OnnxImportError(
                f"import_onnx: node {_nname(node)} ({node.op_type}): indices out of range for "
                f"an axis of size {dim}"
            )
        return eager.from_numpy(np.where(i < 0, i + dim, i))
    it = _t(idx).to(eager.int64)
    return eager.where(it < 0, it + dim, it)


@_op("GatherElements")
def _gather_elements(node, at, xs, opset):
    x = _t(xs[0])
    shape = _shape(x)
    ax = _axis(int(at.get("axis", 0)), len(shape), node)
    return [eager.gather(x, ax, _int_indices(xs[1], shape[ax] if shape else 1, node))]


@_op("ScatterElements")
def _scatter_elements(node, at, xs, opset):
    x, upd = _t(xs[0]), _t(xs[2])
    shape = _shape(x)
    ax = _axis(int(at.get("axis", 0)), len(shape), node)
    idx = _int_indices(xs[1], shape[ax] if shape else 1, node)
    red = at.get("reduction", "none")
    if red == "none":
        return [eager.scatter(x, ax, idx, upd)]
    if red == "add":
        return [eager.scatter_add(x, ax, idx, upd)]
    raise OnnxImportError(
        f"import_onnx: node {_nname(node)} (ScatterElements): reduction {red!r} is not "
        "supported (none and add are)"
    )


@_op("ScatterND")
def _scatter_nd(node, at, xs, opset):
    x, upd = _t(xs[0]), _t(xs[2])
    shape = _shape(x)
    ishape = _shape(xs[1])
    if not shape or not ishape or ishape[-1] != 1:
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (ScatterND): only indices whose last dimension "
            f"is 1 (whole rows of the first axis) are supported, got indices of shape "
            f"{list(ishape)} for data of shape {list(shape)}"
        )
    rows = _int_indices(xs[1], shape[0], node).reshape(-1)
    n = int(np.prod(ishape[:-1], dtype=np.int64))
    vals = upd.reshape((n,) + shape[1:])
    red = at.get("reduction", "none")
    if red == "add":
        return [eager.index_add(x, 0, rows, vals)]
    if red != "none":
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (ScatterND): reduction {red!r} is not "
            "supported (none and add are)"
        )
    out = x.clone()
    out[rows] = vals
    return [out]


@_op("TopK")
def _topk(node, at, xs, opset):
    x = _t(xs[0])
    shape = _shape(x)
    ax = _axis(int(at.get("axis", -1)), len(shape), node)
    (k,) = _ints(xs[1], node, "k")
    if not 0 <= k <= (shape[ax] if shape else 1):
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (TopK): k={k} for an axis of size {shape[ax]}"
        )
    largest = bool(int(at.get("largest", 1)))
    # eager's topk is stable (equal values in index order), as ONNX specifies; sorted=0
    # leaves the order unspecified, so the sorted order is a valid answer
    r = eager.topk(x, k, dim=ax, largest=largest, sorted=True)
    return [r.values, r.indices]


@_op("CumSum")
def _cumsum(node, at, xs, opset):
    x = _t(xs[0])
    shape = _shape(x)
    (a,) = _ints(xs[1], node, "axis")
    if not shape:
        return [x]
    ax = _axis(a, len(shape), node)
    rev = bool(int(at.get("reverse", 0)))
    if rev:
        x = x.flip(ax)
    c = eager.cumsum(x, ax)
    if int(at.get("exclusive", 0)) and shape[ax]:  # shift by one: 0, x0, x0+x1...
        zero = eager.zeros(shape[:ax] + (1,) + shape[ax + 1 :], dtype=c.dtype)
        c = eager.cat([zero, c.narrow(ax, 0, shape[ax] - 1)], ax)
    return [c.flip(ax) if rev else c]


@_op("ConvTranspose")
def _conv_transpose(node, at, xs, opset):
    x, w = _t(xs[0]), _t(xs[1])
    b = _t(xs[2]) if len(xs) > 2 and xs[2] is not None else None
    nsp = len(_shape(x)) - 2
    if nsp != 2 or _shape(w)[2:] != tuple(at.get("kernel_shape", _shape(w)[2:])):
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (ConvTranspose): only 2-D transposed "
            f"convolutions are supported, got input of shape {list(_shape(x))}"
        )
    if at.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET") or "output_shape" in at:
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (ConvTranspose): auto_pad and output_shape "
            "are not supported; give pads and output_padding"
        )
    strides = list(at.get("strides", [1, 1]))
    dil = list(at.get("dilations", [1, 1]))
    pads = list(at.get("pads", [0, 0, 0, 0]))
    opad = list(at.get("output_padding", [0, 0]))
    group = int(at.get("group", 1))
    # the full transposed convolution, then crop pads (begin/end) and extend by
    # output_padding (zeros before the bias), as ONNX defines the output
    y = F.conv_transpose2d(x, w, None, stride=strides, dilation=dil, groups=group)
    for a in range(2):
        ax = 2 + a
        full = _shape(y)[ax]
        begin, end = pads[a], pads[a + 2]
        size = full + opad[a] - begin - end
        if size < 0:
            raise OnnxImportError(
                f"import_onnx: node {_nname(node)} (ConvTranspose): pads {pads} leave no output"
            )
        extra = max(0, begin + size - full)
        if extra:
            fp = [0, extra] if a == 1 else [0, 0, 0, extra]
            y = F.pad(y, fp)
        y = y.narrow(ax, begin, size)
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return [y]


# ---------------------------------------------------------------------------
# control flow: Scan and Loop (their body subgraph runs with this module's evaluator)

# how deeply Scan/Loop bodies may nest (a body inside a body inside ...)
MAX_BODY_NESTING = 32


class _Body:
    """A Scan/Loop ``body`` subgraph, parsed once: its input and output names, its
    initializers (numpy), its nodes with their attributes, and ``outer``: the names it
    (or a body nested in it) reads from the enclosing scopes, in first-read order."""

    def __init__(self, graph: Any, owner: Any, depth: int) -> None:
        if depth > MAX_BODY_NESTING:
            raise OnnxImportError(
                f"import_onnx: node {_nname(owner)} ({owner.op_type}): subgraphs nest more "
                f"than {MAX_BODY_NESTING} deep"
            )
        self.name = graph.name or "body"
        self.inputs = [i.name for i in graph.input]
        self.outputs = [o.name for o in graph.output]
        self.inits = {
            t.name: _tensor_array(t, f"initializer {t.name!r} of the body of {_nname(owner)}")
            for t in graph.initializer
        }
        self.nodes = [(n, _attrs(n, depth + 1)) for n in graph.node]
        defined = set(self.inputs) | set(self.inits) | {""}
        outer: List[str] = []
        for node, at in self.nodes:
            for name in _reads(node, at):
                if name not in defined and name not in outer:
                    outer.append(name)
            defined.update(node.output)
        for name in self.outputs:
            if name not in defined and name not in outer:
                outer.append(name)
        self.outer = outer

    def run(self, values: list, outer: dict, opset: int) -> list:
        """The body's outputs for input ``values`` (the enclosing scope's values in
        ``outer``)."""
        env: Dict[str, Any] = dict(outer)
        env.update(self.inits)
        for name, v in zip(self.inputs, values):
            env[name] = np.asarray(v) if isinstance(v, np.generic) else v
        _run_nodes(self.nodes, env, opset)
        return [env[n] for n in self.outputs]


def _reads(node: Any, at: dict) -> List[str]:
    """The names a node reads: its inputs, then what its body reads from outside."""
    body = at.get("body")
    extra = body.outer if isinstance(body, _Body) else []
    return list(node.input) + [n for n in extra if n not in node.input]


def _outer_env(node: Any, at: dict, xs: list) -> dict:
    body = at.get("body")
    if not isinstance(body, _Body):
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} ({node.op_type}) has no body subgraph"
        )
    vals = dict(zip(node.input, xs))
    vals.update(zip([n for n in body.outer if n not in node.input], xs[len(node.input) :]))
    return {n: vals[n] for n in body.outer}


def _move_axis(v: Any, src: int, dst: int) -> Any:
    if src == dst:
        return v
    if _static(v):
        return np.ascontiguousarray(np.moveaxis(v, src, dst))
    return eager.movedim(v, src, dst)


def _flip0(v: Any) -> Any:
    if _static(v):
        return np.ascontiguousarray(v[::-1])
    return eager.flip(v, [0])


def _scan_attr(at: dict, key: str, n: int, node: Any, allowed: tuple) -> List[int]:
    vals = [int(v) for v in at.get(key, [0] * n)]
    if len(vals) != n:
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (Scan): {key} has {len(vals)} entries for {n} values"
        )
    for v in vals:
        if v not in allowed:
            raise OnnxImportError(
                f"import_onnx: node {_nname(node)} (Scan): {key} value {v} is not "
                f"supported (only {', '.join(map(str, allowed))})"
            )
    return vals


@_op("Scan")
def _scan_node(node, at, xs, opset):
    from ..loops import scan

    if opset < 9:
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (Scan): Scan before opset 9 (with a batch axis "
            "and sequence_lens) is not supported"
        )
    body: _Body = at["body"]
    outer = _outer_env(node, at, xs)
    ins = xs[: len(node.input)]
    m = int(at["num_scan_inputs"])
    k = len(ins) - m
    if m < 1 or k < 0:
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (Scan): num_scan_inputs={m} with {len(ins)} inputs"
        )
    if any(v is None for v in ins):
        raise OnnxImportError(f"import_onnx: node {_nname(node)} (Scan): an input is empty")
    if len(body.inputs) != k + m or len(body.outputs) < k:
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (Scan): the body takes {len(body.inputs)} "
            f"inputs and returns {len(body.outputs)} outputs, but the node has {k} states "
            f"and {m} scan inputs"
        )
    n_ys = len(body.outputs) - k
    if len(node.output) > k + n_ys:
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (Scan): {len(node.output)} outputs but the "
            f"body returns {k + n_ys}"
        )
    in_dirs = _scan_attr(at, "scan_input_directions", m, node, (0, 1))
    out_dirs = _scan_attr(at, "scan_output_directions", n_ys, node, (0, 1))
    # axes: any in range (moved to the front before, and back after, the loop)
    in_axes = [int(a) for a in at.get("scan_input_axes", [0] * m)]
    out_axes = [int(a) for a in at.get("scan_output_axes", [0] * n_ys)]
    if len(in_axes) != m or len(out_axes) != n_ys:
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (Scan): scan_input_axes/scan_output_axes "
            "must have one entry per scan input/output"
        )
    seqs = []
    for j, (x, a) in enumerate(zip(ins[k:], in_axes)):
        r = len(_shape(x))
        if not -r <= a < r:
            raise OnnxImportError(
                f"import_onnx: node {_nname(node)} (Scan): scan_input_axes[{j}]={a} is out "
                f"of range for scan input {node.input[k + j]!r} of rank {r}"
            )
        seqs.append(_move_axis(x, a % r, 0))
    # the exporter's reverse scan (every direction 1) is graphc's reverse=True; other mixes
    # run forward over flipped inputs and flip the outputs written in reverse
    reverse = all(d == 1 for d in in_dirs) and all(d == 1 for d in out_dirs)
    if not reverse:
        seqs = [_flip0(s) if d == 1 else s for s, d in zip(seqs, in_dirs)]

    def step(carry, x):
        outs = body.run(list(carry) + list(x), outer, opset)
        return tuple(outs[:k]), tuple(outs[k:])

    step.__name__ = re.sub(r"\W", "_", body.name)
    final, ys = scan(step, tuple(ins[:k]), tuple(seqs), reverse=reverse)
    ys = list(ys)
    res = list(final)
    for j, (y, a) in enumerate(zip(ys, out_axes)):
        if not reverse and out_dirs[j] == 1:
            y = _flip0(y)
        r = len(_shape(y))
        if not -r <= a < r:
            raise OnnxImportError(
                f"import_onnx: node {_nname(node)} (Scan): scan_output_axes[{j}]={a} is out "
                f"of range for scan output {j} of rank {r}"
            )
        res.append(_move_axis(y, 0, a % r))
    return res


def _tv(v: Any) -> Any:
    """An eager tensor for a numpy array or scalar (tensors and tracers as they are)."""
    return _t(np.array(v)) if isinstance(v, (np.ndarray, np.generic)) else v


def _static_scalar(v: Any, node: Any, what: str) -> Any:
    """A static size-1 value as a Python scalar, or None for a value known at run time."""
    if v is None or not _static(v):
        return None
    if v.size != 1:
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (Loop): {what} must be a scalar, got shape "
            f"{list(v.shape)}"
        )
    return v.reshape(()).item()


def _always_true(body: _Body) -> bool:
    """Whether the body's condition output is its condition input passed through or a
    constant true (then the loop runs its trip count)."""
    cin, cout = body.inputs[1], body.outputs[0]
    for _ in range(len(body.nodes) + 1):
        if cout == cin:
            return True
        if cout in body.inits:
            v = body.inits[cout]
            return v.size == 1 and bool(v.reshape(-1)[0])
        prod = next(((n, at) for n, at in body.nodes if cout in n.output), None)
        if prod is None:
            return False
        n, at = prod
        if n.op_type == "Identity":
            cout = n.input[0]
            continue
        if n.op_type == "Constant" and isinstance(at.get("value"), np.ndarray):
            v = at["value"]
            return v.size == 1 and bool(v.reshape(-1)[0])
        return False
    return False


@_op("Loop")
def _loop_node(node, at, xs, opset):
    from ..loops import scan, while_loop

    body: _Body = at["body"]
    outer = _outer_env(node, at, xs)
    ins = xs[: len(node.input)] + [None] * max(0, 2 - len(node.input))
    trips, cond0, carried = ins[0], ins[1], ins[2:]
    n = len(carried)
    if any(v is None for v in carried):
        raise OnnxImportError(f"import_onnx: node {_nname(node)} (Loop): a carried input is empty")
    if len(body.inputs) != 2 + n or len(body.outputs) < 1 + n:
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (Loop): the body takes {len(body.inputs)} "
            f"inputs and returns {len(body.outputs)} outputs for {n} loop-carried values "
            "(it must take iteration number, condition and the carried values, and return "
            "the condition, the carried values and the scan outputs)"
        )
    n_ys = len(body.outputs) - 1 - n
    m = _static_scalar(trips, node, "the trip count M")
    c0 = _static_scalar(cond0, node, "the condition")
    name = re.sub(r"\W", "_", body.name)
    if (cond0 is None or c0 is True) and _always_true(body):
        if trips is None:
            raise OnnxImportError(
                f"import_onnx: node {_nname(node)} (Loop): no trip count and a condition that "
                "is always true: the loop never ends"
            )
        if m is not None:  # a static trip count: a scan over the iteration numbers
            true = np.array(True)

            def step(carry, i):
                outs = body.run([i, true] + list(carry), outer, opset)
                return tuple(outs[1 : 1 + n]), tuple(outs[1 + n :])

            step.__name__ = name
            its = np.arange(max(int(m), 0), dtype=np.int64)
            final, ys = scan(step, tuple(carried), its)
            return list(final) + list(ys)
    elif c0 is False and _always_true(body):
        m = 0
    if n_ys:
        why = (
            "its initial condition is false (the scan outputs' shapes are unknown)"
            if c0 is False
            else "its trip count is known only at run time"
            if m is None and _always_true(body)
            else "its condition is computed"
        )
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} (Loop): a Loop with scan outputs is imported "
            f"only with a static trip count and a condition that stays true, but {why}"
        )
    if m == 0:  # a loop that never runs
        return list(carried)
    # a computed condition (or a trip count known at run time): a while loop
    if trips is not None and not _static(trips) and len(_shape(trips)) != 0:
        trips = trips.reshape(())
    if cond0 is None:
        cond0 = np.array(True)
    elif not _static(cond0) and len(_shape(cond0)) != 0:
        cond0 = cond0.reshape(())
    elif _static(cond0):
        cond0 = cond0.reshape(())
    limit = None if trips is None else (np.asarray(m, np.int64) if m is not None else trips)

    def cond(c):
        if limit is None:
            return c[1]
        return eager.logical_and(_tv(c[1]), _tv(c[0]) < _tv(limit))

    def step(c):
        outs = body.run([c[0], c[1]] + list(c[2]), outer, opset)
        new_cond = outs[0]
        if len(_shape(new_cond)) != 0:
            new_cond = new_cond.reshape(())
        return (c[0] + 1, new_cond, tuple(outs[1 : 1 + n]))

    cond.__name__ = step.__name__ = name
    final = while_loop(cond, step, (np.array(0, np.int64), cond0, tuple(carried)))
    return list(final[2])


SUPPORTED_OPERATORS = tuple(sorted(_OPS))


# ---------------------------------------------------------------------------
# validation


def _load(model_or_path: Any) -> Any:
    onnx = require_onnx()
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path
    if isinstance(model_or_path, (bytes, bytearray)):
        try:
            return onnx.load_from_string(bytes(model_or_path))
        except Exception as exc:
            raise OnnxImportError(f"import_onnx: not a serialized ONNX model: {exc}") from exc
    if isinstance(model_or_path, (str,)) or hasattr(model_or_path, "__fspath__"):
        try:
            return onnx.load(model_or_path)
        except FileNotFoundError:
            raise
        except Exception as exc:
            raise OnnxImportError(
                f"import_onnx: {str(model_or_path)!r} is not a readable ONNX model: {exc}"
            ) from exc
    raise TypeError(
        "import_onnx expects an onnx.ModelProto, a path or serialized bytes, got "
        f"{type(model_or_path).__name__}"
    )


def _opset(model: Any) -> int:
    opset = None
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            opset = int(imp.version)
    if opset is None:
        raise OnnxImportError("import_onnx: the model imports no opset of the default domain")
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise OnnxImportError(
            f"import_onnx: opset {opset} is outside the supported range {MIN_OPSET}..{MAX_OPSET}"
        )
    return opset


def _attrs(node: Any, depth: int = 0) -> dict:
    from onnx import helper, numpy_helper

    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if a.type == a.TENSOR:
            v = _tensor_array(v, f"attribute {a.name!r} of node {_nname(node)}")
        elif isinstance(v, bytes):
            v = v.decode()
        elif a.type == a.GRAPH and a.name == "body" and node.op_type in ("Scan", "Loop"):
            v = _Body(v, node, depth)
        elif a.type in (a.GRAPH, a.GRAPHS, a.SPARSE_TENSOR):
            raise OnnxImportError(
                f"import_onnx: node {_nname(node)} ({node.op_type}): attribute {a.name!r} "
                "holds a subgraph or sparse tensor, which graphc does not support"
            )
        out[a.name] = v
    del numpy_helper
    return out


def _tensor_array(t: Any, what: str) -> np.ndarray:
    from onnx import numpy_helper

    dt = _np_dtype(int(t.data_type), what)
    n = 1
    for d in t.dims:
        if d < 0:
            raise OnnxImportError(f"import_onnx: {what} has a negative dimension {list(t.dims)}")
        n *= int(d)
    if n > MAX_INITIALIZER_ELEMENTS:
        raise OnnxImportError(
            f"import_onnx: {what} declares shape {list(t.dims)} ({n} elements), more than the "
            f"{MAX_INITIALIZER_ELEMENTS} graphc accepts"
        )
    if t.data_location == t.EXTERNAL:
        raise OnnxImportError(
            f"import_onnx: {what} is stored in an external file; load the model with "
            "onnx.load(path) (which reads external data) and pass the ModelProto"
        )
    try:
        arr = numpy_helper.to_array(t)
    except Exception as exc:
        raise OnnxImportError(
            f"import_onnx: {what} (shape {list(t.dims)}) cannot be read: {exc}"
        ) from exc
    if arr.size != n:
        raise OnnxImportError(
            f"import_onnx: {what} declares shape {list(t.dims)} but holds {arr.size} values"
        )
    return np.array(arr, dtype=dt, copy=True).reshape(tuple(int(d) for d in t.dims))


def _order_nodes(model: Any) -> Any:
    """``model`` with its nodes in topological order (ONNX requires it; ONNX Runtime sorts
    them itself): a sorted copy when they are out of order, the model itself otherwise.
    Checked whatever ``check`` says: every value is defined once (single assignment: no
    node output named as a graph input, initializer or another node's output), every
    initializer's data is loaded (not in an external file), and there is no cycle."""
    import heapq

    onnx = require_onnx()
    g = model.graph
    for t in g.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            where = next((e.value for e in t.external_data if e.key == "location"), "?")
            raise OnnxImportError(
                f"import_onnx: initializer {t.name!r} keeps its data in the external file "
                f"{where!r}, which was not loaded: pass the path of the .onnx file (with its "
                "data file next to it) or onnx.load(path)"
            )
    given = {i.name for i in g.input} | {t.name for t in g.initializer}
    producer: Dict[str, int] = {}
    for k, node in enumerate(g.node):
        for o in node.output:
            if not o:
                continue
            if o in given or o in producer:
                first = (
                    "a graph input or initializer"
                    if o in given
                    else f"node {_nname(g.node[producer[o]])}"
                )
                raise OnnxImportError(
                    f"import_onnx: value {o!r} is defined twice, by {first} and by node "
                    f"{_nname(node)} ({node.op_type}); ONNX graphs assign each name once"
                )
            producer[o] = k
    deps = [sorted({producer[i] for i in node.input if i in producer}) for node in g.node]
    if all(d < k for k, ds in enumerate(deps) for d in ds):
        return model
    users: List[List[int]] = [[] for _ in g.node]
    waiting = [len(ds) for ds in deps]
    for k, ds in enumerate(deps):
        for d in ds:
            users[d].append(k)
    ready = [k for k, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:  # Kahn's algorithm, the earliest node first (deterministic)
        k = heapq.heappop(ready)
        order.append(k)
        for u in users[k]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(g.node):
        stuck = [_nname(g.node[k]) for k in range(len(g.node)) if waiting[k]]
        raise OnnxImportError(
            f"import_onnx: the graph has a cycle: nodes {', '.join(stuck[:10])}"
            f"{' ...' if len(stuck) > 10 else ''} depend on each other's outputs"
        )
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend([g.node[k] for k in order])
    return out


def _validate(model: Any, check: bool) -> int:
    onnx = require_onnx()
    if check:
        try:
            onnx.checker.check_model(model)
        except Exception as exc:
            raise OnnxImportError(f"import_onnx: the model is not valid ONNX: {exc}") from exc
    opset = _opset(model)
    g = model.graph
    bad = []
    for node in _all_nodes(g):
        if node.domain not in ("", "ai.onnx") or node.op_type not in _OPS:
            dom = f"{node.domain}." if node.domain not in ("", "ai.onnx") else ""
            bad.append((dom + node.op_type, node.name or "<unnamed>"))
    if bad:
        types = sorted({t for t, _ in bad})
        listing = "; ".join(f"{t} (node {n})" for t, n in bad)
        raise UnsupportedOnnxOperatorError(
            f"import_onnx: the model uses {len(types)} operator type(s) graphc does not "
            f"support: {', '.join(types)}. Nodes: {listing}. Supported operators: "
            f"{', '.join(SUPPORTED_OPERATORS)}",
            bad,
        )
    known = {i.name for i in g.input} | {t.name for t in g.initializer} | {""}
    for node in g.node:
        for name in node.input:
            if name not in known:
                raise OnnxImportError(
                    f"import_onnx: node {_nname(node)} ({node.op_type}) reads {name!r}, which no "
                    "graph input, initializer or earlier node defines (a missing initializer?)"
                )
        known.update(node.output)
    for o in g.output:
        if o.name not in known:
            raise OnnxImportError(f"import_onnx: graph output {o.name!r} is never computed")
    return opset


def _all_nodes(g: Any) -> list:
    """Every node of graph ``g`` and of the subgraphs in its nodes' attributes, in a
    deterministic order (an iterative walk)."""
    out = []
    stack = [iter(g.node)]
    while stack:
        node = next(stack[-1], None)
        if node is None:
            stack.pop()
            continue
        out.append(node)
        for a in node.attribute:
            subs = [a.g] if a.type == a.GRAPH else list(a.graphs) if a.type == a.GRAPHS else []
            stack.extend(iter(sub.node) for sub in reversed(subs))
    return out


def _check_outer_reads(nodes: list, known: set) -> None:
    """Every name a Scan/Loop body reads from outside is defined before its node."""
    known = set(known) | {""}
    for node, at in nodes:
        for name in _reads(node, at):
            if name not in known:
                raise OnnxImportError(
                    f"import_onnx: node {_nname(node)} ({node.op_type}) reads {name!r} (in its "
                    "body), which no graph input, initializer or earlier node defines"
                )
        known.update(node.output)


# ---------------------------------------------------------------------------
# the function


class _InputSpec:
    def __init__(self, vi: Any) -> None:
        self.name = vi.name
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise OnnxImportError(
                f"import_onnx: graph input {vi.name!r} is not a tensor (sequences, maps and "
                "optionals are not supported)"
            )
        self.dtype = _np_dtype(int(tt.elem_type), f"graph input {vi.name!r}")
        self.dims: Optional[List[Any]] = None
        if tt.HasField("shape"):
            self.dims = [
                int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None)
                for d in tt.shape.dim
            ]

    def describe(self) -> str:
        if self.dims is None:
            return f"{self.name}: {self.dtype.name}[?]"
        dims = ", ".join("?" if d is None else str(d) for d in self.dims)
        return f"{self.name}: {self.dtype.name}[{dims}]"

    def check(self, x: Any) -> None:
        shape = _shape(x)
        dt = _dtype_of(x)
        if dt != self.dtype:
            raise OnnxImportError(
                f"import_onnx: input {self.name!r} must have dtype {self.dtype.name} (the "
                f"model declares it), got {dt.name}"
            )
        if self.dims is None:
            return
        ok = len(shape) == len(self.dims) and all(
            not isinstance(d, int) or d == s for d, s in zip(self.dims, shape)
        )
        if not ok:
            raise OnnxImportError(
                f"import_onnx: input {self.name!r} must have shape {self.describe()}, got "
                f"{list(shape)}"
            )


def _py_names(names: List[str]) -> List[str]:
    out: List[str] = []
    for n in names:
        p = re.sub(r"\W", "_", n) or "input"
        if p[0].isdigit() or keyword.iskeyword(p):
            p = "_" + p
        base, k = p, 1
        while p in out:
            p, k = f"{base}_{k}", k + 1
        out.append(p)
    return out


def import_onnx(model_or_path: Any, *, trainable: bool = False, check: bool = True) -> Callable:
    """Import an ONNX model as a function ``f(*inputs)`` over eager's public ops.

    ``model_or_path`` is an ``onnx.ModelProto``, a path to a ``.onnx`` file or the
    serialized bytes.  The model is validated first (``onnx.checker`` unless
    ``check=False``, default-domain opset 7..21, every operator supported -- else ONE
    :class:`UnsupportedOnnxOperatorError` lists every unsupported operator type with its
    node names --, every name defined, initializer sizes and dtypes).

    The returned function takes the graph's inputs positionally (initializers listed
    as inputs are not parameters), as eager Tensors or numpy arrays of the declared
    dtype and shape, and returns one Tensor for a one-output model or a tuple.  It
    runs eagerly and under ``graphc.compile`` (and graphc's transforms).  It carries
    ``input_names``, ``output_names``, ``opset``, ``parameters`` (name -> Tensor) and
    ``model`` (the ModelProto).  With ``trainable=True`` every floating-point
    initializer becomes a leaf Tensor with ``requires_grad=True`` in ``parameters``
    (for training the imported model); otherwise initializers are constants.
    """
    model = _order_nodes(_load(model_or_path))
    opset = _validate(model, check)
    g = model.graph
    inits = {t.name: _tensor_array(t, f"initializer {t.name!r}") for t in g.initializer}
    specs = [_InputSpec(vi) for vi in g.input if vi.name not in inits]
    in_names = [s.name for s in specs]
    out_names = [o.name for o in g.output]
    params: Dict[str, Any] = {}
    consts: Dict[str, Any] = {}
    for name, arr in inits.items():
        if trainable and arr.dtype.kind == "f":
            params[name] = eager.from_numpy(arr).requires_grad_(True)
        else:
            consts[name] = arr
    nodes = [(n, _attrs(n)) for n in g.node]
    _check_outer_reads(nodes, {i.name for i in g.input} | set(inits))
    # fold the nodes that depend on constants only, once
    nodes, folded = _fold_constants(nodes, consts, opset)
    consts.update(folded)

    def run(*inputs: Any) -> Any:
        if len(inputs) != len(specs):
            raise TypeError(
                f"{fname}() takes {len(specs)} positional argument(s) "
                f"({', '.join(in_names)}) but {len(inputs)} were given"
            )
        env: Dict[str, Any] = dict(consts)
        env.update(params)
        for spec, x in zip(specs, inputs):
            if isinstance(x, (np.ndarray, np.generic, int, float, bool)):
                x = eager.from_numpy(np.array(x))
            spec.check(x)
            env[spec.name] = x
        _run_nodes(nodes, env, opset)
        outs = [_t(np.array(v)) if _static(v) else v for v in (env[n] for n in out_names)]
        return outs[0] if len(outs) == 1 else tuple(outs)

    fname = _py_names([g.name or "onnx_model"])[0]
    params_py = _py_names(in_names)
    run.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in params_py]
    )
    run.__name__ = run.__qualname__ = fname
    run.__doc__ = (
        f"ONNX model {g.name or '(unnamed)'} imported by graphc.import_onnx (opset {opset}).\n\n"
        "Inputs: " + ", ".join(s.describe() for s in specs) + "\n"
        "Outputs: " + ", ".join(out_names) + "\n"
    )
    run.input_names = in_names  # type: ignore[attr-defined]
    run.output_names = out_names  # type: ignore[attr-defined]
    run.opset = opset  # type: ignore[attr-defined]
    run.parameters = params  # type: ignore[attr-defined]
    run.model = model  # type: ignore[attr-defined]
    run.graphc_onnx_import = True  # type: ignore[attr-defined]  # graphc.compare's ORT column
    return run


def _run_nodes(nodes: list, env: dict, opset: int) -> None:
    for node, at in nodes:
        xs = [env[i] if i else None for i in _reads(node, at)]
        outs = _eval(node, at, xs, opset)
        for name, v in zip(node.output, outs):
            if name:
                env[name] = v


def _eval(node: Any, at: dict, xs: list, opset: int) -> list:
    """One node: all-static inputs give numpy results (constant folding)."""
    static = all(x is None or _static(x) for x in xs)
    try:
        outs = _OPS[node.op_type](node, at, xs, opset)
    except (GraphcError, TypeError) as exc:
        if isinstance(exc, GraphcError) and "import_onnx" in str(exc):
            raise
        raise type(exc)(f"node {_nname(node)} ({node.op_type}): {exc}") from exc
    except (ValueError, RuntimeError, IndexError) as exc:
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} ({node.op_type}) failed on inputs of shapes "
            f"{[None if x is None else list(_shape(x)) for x in xs]}: {exc}"
        ) from exc
    outs = [np.asarray(o) if isinstance(o, np.generic) else o for o in outs]
    if static:
        outs = [_concrete(o) for o in outs]
    if len(outs) < len([o for o in node.output if o]):
        raise OnnxImportError(
            f"import_onnx: node {_nname(node)} ({node.op_type}): {len(node.output)} outputs "
            "requested, graphc computes only the first"
        )
    return outs


def _concrete(v: Any) -> Any:
    """A static node's result as numpy; a value only a trace knows (an eager op made a
    traced value from constants) stays as it is: operators needing it static refuse."""
    if v is None or _static(v):
        return v
    try:
        return np.array(v.detach().numpy())
    except GraphcError:
        return v


def _fold_constants(nodes: list, consts: dict, opset: int) -> tuple:
    """(the nodes left to run per call, values of the nodes computed from constants only)."""
    env = dict(consts)
    rest = []
    folded: Dict[str, Any] = {}
    for node, at in nodes:
        reads = _reads(node, at)
        if all(not i or i in env for i in reads):
            outs = _eval(node, at, [env[i] if i else None for i in reads], opset)
            if all(o is None or _static(o) for o in outs):
                for name, v in zip(node.output, outs):
                    if name:
                        env[name] = folded[name] = v
                continue
        rest.append((node, at))
    return rest, folded


__all__ = [
    "import_onnx",
    "OnnxImportError",
    "UnsupportedOnnxOperatorError",
    "SUPPORTED_OPERATORS",
    "require_onnx",
]
