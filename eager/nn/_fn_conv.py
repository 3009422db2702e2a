"""nn.functional: convolution and pooling (re-exported by eager/nn/functional.py).

The primitives are in eager/ops/conv.py (conv2d and its two adjoints, max pooling); the
1-d forms run the 2-d ones over a unit height, avg_pool2d is a depthwise conv2d with a
ones kernel divided by PyTorch's divisor, adaptive_avg_pool2d is ``P_h @ x @ P_w^T`` with
constant pooling matrices.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

import eager.ops.conv as _C
from eager.ops.registry import Meta
from ..surface import TensorOps, _const_like
from ._fused import fused_conv2d, fused_max_pool2d

__all__: list = [
    "conv1d",
    "conv2d",
    "conv_transpose1d",
    "conv_transpose2d",
    "max_pool1d",
    "max_pool2d",
    "avg_pool1d",
    "avg_pool2d",
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
]

_BWD = "ConvolutionBackward0"


def _ntuple(v: Any, n: int, name: str) -> tuple:
    """An int or a sequence of 1 or n ints as an n-tuple (PyTorch's expand_param_if_needed)."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v),) * n
    try:
        t = tuple(int(a) for a in v)
    except TypeError:
        raise TypeError(
            f"{name} must be an int or a tuple of ints, not {type(v).__name__}"
        ) from None
    if len(t) == 1:
        return t * n
    if len(t) != n:
        raise RuntimeError(
            f"expected {name} to be a single integer value or a list of {n} values to match "
            f"the convolution dimensions, but got {name}={list(t)}"
        )
    return t


def _check_nonneg(stride, padding, dilation) -> None:
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError(f"dilation should be greater than zero, but got {list(dilation)}")


def _padding4(padding: Any, ksize: tuple, stride: tuple, dilation: tuple) -> tuple:
    """(top, bottom, left, right) of a conv's padding argument ('valid', 'same', int, tuple)."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0, 0, 0)
        if padding == "same":
            if any(s != 1 for s in stride):
                raise RuntimeError("padding='same' is not supported for strided convolutions")
            out: list = []
            for d, k in zip(dilation, ksize):
                total = d * (k - 1)
                out += [total // 2, total - total // 2]  # an even kernel pads one more after
            return tuple(out)
        raise RuntimeError(f"Invalid padding string: {padding!r}")
    p = _ntuple(padding, 2, "padding")
    return (p[0], p[0], p[1], p[1])


def _add_bias(out: TensorOps, bias: Optional[TensorOps], weight_shape: tuple, o: int, nd: int):
    if bias is None:
        return out
    if bias.ndim != 1 or bias.shape[0] != o:
        raise RuntimeError(
            f"Given weight of size {list(weight_shape)}, expected bias to be 1-dimensional "
            f"with {o} elements, but got bias of size {list(bias.shape)} instead"
        )
    return out + bias.reshape((1, o) + (1,) * nd)


def conv2d(
    input: TensorOps,
    weight: TensorOps,
    bias: Optional[TensorOps] = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> TensorOps:
    """2-D cross-correlation of a (N, C, H, W) or unbatched (C, H, W) input, as PyTorch."""
    if input.ndim not in (3, 4):
        raise RuntimeError(
            f"Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: "
            f"{list(input.shape)}"
        )
    if weight.ndim != 4:
        raise RuntimeError(
            f"conv2d: expected weight to be 4-dimensional, but got weight of size "
            f"{list(weight.shape)}"
        )
    stride = _ntuple(stride, 2, "stride")
    dilation = _ntuple(dilation, 2, "dilation")
    pad = _padding4(padding, tuple(weight.shape[2:]), stride, dilation)
    _check_nonneg(stride, pad, dilation)
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    out = fused_conv2d(x, weight, bias, stride, pad, dilation, int(groups))
    if out is None:  # (else one node, the bias inside: eager/nn/_fused.py)
        out = x._op(
            "conv2d",
            _BWD,
            weight,
            stride=stride,
            padding=pad,
            dilation=dilation,
            groups=int(groups),
        )
        out = _add_bias(out, bias, tuple(weight.shape), int(weight.shape[0]), 2)
    return out.squeeze(0) if unbatched else out


def conv1d(
    input: TensorOps,
    weight: TensorOps,
    bias: Optional[TensorOps] = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> TensorOps:
    """1-D cross-correlation of a (N, C, L) or unbatched (C, L) input (conv2d over a unit
    height)."""
    if input.ndim not in (2, 3):
        raise RuntimeError(
            f"Expected 2D (unbatched) or 3D (batched) input to conv1d, but got input of size: "
            f"{list(input.shape)}"
        )
    if weight.ndim != 3:
        raise RuntimeError(
            f"conv1d: expected weight to be 3-dimensional, but got weight of size "
            f"{list(weight.shape)}"
        )
    (s,) = _ntuple(stride, 1, "stride")
    (d,) = _ntuple(dilation, 1, "dilation")
    if isinstance(padding, str):
        pad = _padding4(padding, (1, int(weight.shape[2])), (1, s), (1, d))[2:]
    else:
        (p,) = _ntuple(padding, 1, "padding")
        pad = (p, p)
    _check_nonneg((s,), pad, (d,))
    unbatched = input.ndim == 2
    x = input.unsqueeze(0) if unbatched else input
    Co, Cg, k = (int(v) for v in weight.shape)
    if groups > 0 and Co % groups == 0 and Co and x.shape[1] != Cg * groups:
        raise RuntimeError(
            f"Given groups={groups}, weight of size {list(weight.shape)}, expected "
            f"input{list(x.shape)} to have {Cg * groups} channels, but got {x.shape[1]} "
            "channels instead"
        )
    L = int(x.shape[2]) + pad[0] + pad[1]
    if L < d * (k - 1) + 1:
        raise RuntimeError(
            f"Calculated padded input size per channel: ({L}). Kernel size: ({d * (k - 1) + 1}"
            "). Kernel size can't be greater than actual input size"
        )
    out = x.unsqueeze(2)._op(
        "conv2d",
        _BWD,
        weight.unsqueeze(2),
        stride=(1, s),
        padding=(0, 0) + tuple(pad),
        dilation=(1, d),
        groups=int(groups),
    )
    out = _add_bias(out.squeeze(2), bias, tuple(weight.shape), Co, 1)
    return out.squeeze(0) if unbatched else out


def _transpose_sizes(H: tuple, k: tuple, s: tuple, p: tuple, op_: tuple, d: tuple) -> tuple:
    return tuple(
        (h - 1) * st - 2 * pp + dd * (kk - 1) + o + 1
        for h, kk, st, pp, o, dd in zip(H, k, s, p, op_, d)
    )


def conv_transpose2d(
    input: TensorOps,
    weight: TensorOps,
    bias: Optional[TensorOps] = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> TensorOps:
    """2-D transposed convolution (the gradient of conv2d in its input), as PyTorch;
    weight is (C_in, C_out / groups, kh, kw)."""
    if input.ndim not in (3, 4):
        raise RuntimeError(
            f"Expected 3D (unbatched) or 4D (batched) input to conv_transpose2d, but got "
            f"input of size: {list(input.shape)}"
        )
    if weight.ndim != 4:
        raise RuntimeError(
            f"conv_transpose2d: expected weight to be 4-dimensional, but got weight of size "
            f"{list(weight.shape)}"
        )
    if isinstance(padding, str):
        raise RuntimeError("conv_transpose2d: padding must be an int or a tuple of ints")
    stride = _ntuple(stride, 2, "stride")
    dilation = _ntuple(dilation, 2, "dilation")
    pad = _ntuple(padding, 2, "padding")
    opad = _ntuple(output_padding, 2, "output_padding")
    _check_nonneg(stride, pad, dilation)
    if any(o >= s and o >= d for o, s, d in zip(opad, stride, dilation)) or any(
        o < 0 for o in opad
    ):
        raise RuntimeError(
            "output padding must be smaller than either stride or dilation, but got "
            f"output_padding_height: {opad[0]} output_padding_width: {opad[1]} stride_height: "
            f"{stride[0]} stride_width: {stride[1]} dilation_height: {dilation[0]} "
            f"dilation_width: {dilation[1]}"
        )
    if any(o >= s for o, s in zip(opad, stride)):
        raise NotImplementedError(
            "conv_transpose2d: output_padding >= stride (allowed by PyTorch when smaller than "
            "dilation) is not supported"
        )
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    if x.shape[1] != weight.shape[0]:
        raise RuntimeError(
            f"Given transposed=1, weight of size {list(weight.shape)}, expected "
            f"input{list(x.shape)} to have {weight.shape[0]} channels, but got {x.shape[1]} "
            "channels instead"
        )
    size = _transpose_sizes(
        tuple(int(v) for v in x.shape[2:]),
        tuple(int(v) for v in weight.shape[2:]),
        stride,
        pad,
        opad,
        dilation,
    )
    if any(v < 1 for v in size):
        raise RuntimeError(
            f"Given input size per channel: ({x.shape[2]} x {x.shape[3]}). Calculated output "
            f"size per channel: ({size[0]} x {size[1]}). Output size is too small"
        )
    out = x._op(
        "conv2d_input_grad",
        _BWD,
        weight,
        stride=stride,
        padding=(pad[0], pad[0], pad[1], pad[1]),
        dilation=dilation,
        groups=int(groups),
        input_size=size,
    )
    out = _add_bias(out, bias, tuple(weight.shape), int(out.shape[1]), 2)
    return out.squeeze(0) if unbatched else out


def conv_transpose1d(
    input: TensorOps,
    weight: TensorOps,
    bias: Optional[TensorOps] = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
) -> TensorOps:
    """1-D transposed convolution (conv_transpose2d over a unit height)."""
    if input.ndim not in (2, 3) or weight.ndim != 3:
        raise RuntimeError(
            f"Expected 2D (unbatched) or 3D (batched) input and a 3-D weight to "
            f"conv_transpose1d, but got input of size: {list(input.shape)} and weight of size "
            f"{list(weight.shape)}"
        )
    (s,) = _ntuple(stride, 1, "stride")
    (p,) = _ntuple(padding, 1, "padding")
    (o,) = _ntuple(output_padding, 1, "output_padding")
    (d,) = _ntuple(dilation, 1, "dilation")
    return conv_transpose2d(
        input.unsqueeze(-2), weight.unsqueeze(2), bias, (1, s), (0, p), (0, o), groups, (1, d)
    ).squeeze(-2)


# ---------------------------------------------------------------------------
# pooling


def _pool_args(kernel_size, stride, padding, dilation, n: int = 2) -> tuple:
    k = _ntuple(kernel_size, n, "kernel_size")
    s = (
        k
        if stride is None or (not isinstance(stride, int) and len(stride) == 0)
        else _ntuple(stride, n, "stride")
    )
    return k, s, _ntuple(padding, n, "padding"), _ntuple(dilation, n, "dilation")


def _batched(input: TensorOps, nd: int) -> tuple:
    if input.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(
            f"non-empty {nd + 1}D or {nd + 2}D (batch mode) tensor expected for input"
        )
    unbatched = input.ndim == nd + 1
    return (input.unsqueeze(0) if unbatched else input), unbatched


def max_pool2d(
    input: TensorOps,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """2-D max pooling (PyTorch's tie rule: one element per window gets the gradient)."""
    k, s, p, d = _pool_args(kernel_size, stride, padding, dilation)
    x, unbatched = _batched(input, 2)
    attrs = dict(kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=bool(ceil_mode))
    out = None if return_indices else fused_max_pool2d(x, k, s, p, d, bool(ceil_mode))
    if out is None:  # (else one node that keeps the maxima: eager/nn/_fused.py)
        out = x._op("max_pool2d", "MaxPool2DWithIndicesBackward0", **attrs)
    if unbatched:
        out = out.squeeze(0)
    if not return_indices:
        return out
    idx = x._op("max_pool2d_indices", "MaxPool2DWithIndicesBackward0", **attrs)
    return out, (idx.squeeze(0) if unbatched else idx)


def max_pool1d(
    input: TensorOps,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """1-D max pooling (max_pool2d over a unit height)."""
    k, s, p, d = _pool_args(kernel_size, stride, padding, dilation, 1)
    if input.ndim not in (2, 3):
        raise RuntimeError(
            f"max_pool1d() Expected 2D or 3D input tensor, but got {list(input.shape)}"
        )
    r = max_pool2d(
        input.unsqueeze(-2), (1,) + k, (1,) + s, (0,) + p, (1,) + d, ceil_mode, return_indices
    )
    if return_indices:
        return r[0].squeeze(-2), r[1].squeeze(-2)
    return r.squeeze(-2)


def _avg_divisor(H, W, k, s, p, Ho, Wo, count_include_pad, divisor_override) -> np.ndarray:
    """PyTorch's avg_pool2d divide factor of every output position (1 for an empty window,
    whose sum is 0)."""
    out = np.empty((Ho, Wo))
    for i in range(Ho):
        hs = i * s[0] - p[0]
        he = min(hs + k[0], H + p[0])
        for j in range(Wo):
            ws = j * s[1] - p[1]
            we = min(ws + k[1], W + p[1])
            size = (he - hs) * (we - ws)
            h0, w0, h1, w1 = max(hs, 0), max(ws, 0), min(he, H), min(we, W)
            if h0 >= h1 or w0 >= w1:
                out[i, j] = 1
            elif divisor_override:
                out[i, j] = divisor_override
            elif count_include_pad:
                out[i, j] = size
            else:
                out[i, j] = (h1 - h0) * (w1 - w0)
    return out


def avg_pool2d(
    input: TensorOps,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: Optional[int] = None,
) -> TensorOps:
    """2-D average pooling (a depthwise conv2d with a ones kernel / PyTorch's divisor)."""
    k, s, p, _ = _pool_args(kernel_size, stride, padding, 1)
    if divisor_override is not None and int(divisor_override) == 0:
        raise RuntimeError("divisor must be not zero")
    x, unbatched = _batched(input, 2)
    N, C, H, W = (int(v) for v in x.shape)
    _, _, Ho, Wo = _C._pool_shape_of(
        "avg_pool2d",
        Meta(x.shape, x._npdtype),
        kernel_size=k,
        stride=s,
        padding=p,
        dilation=(1, 1),
        ceil_mode=bool(ceil_mode),
    )
    # ceil_mode windows may reach beyond the right padding: pad the sum's input further
    eh = max(0, (Ho - 1) * s[0] + k[0] - (H + 2 * p[0]))
    ew = max(0, (Wo - 1) * s[1] + k[1] - (W + 2 * p[1]))
    ones = _const_like(x, np.ones((1, 1) + k, x._npdtype))
    sums = x.reshape(N * C, 1, H, W)._op(
        "conv2d",
        _BWD,
        ones,
        stride=s,
        padding=(p[0], p[0] + eh, p[1], p[1] + ew),
        dilation=(1, 1),
        groups=1,
    )
    div = _avg_divisor(H, W, k, s, p, Ho, Wo, count_include_pad, divisor_override)
    out = (sums / _const_like(x, div.astype(x._npdtype))).reshape(N, C, Ho, Wo)
    return out.squeeze(0) if unbatched else out


def avg_pool1d(
    input: TensorOps,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> TensorOps:
    """1-D average pooling (avg_pool2d over a unit height)."""
    k, s, p, _ = _pool_args(kernel_size, stride, padding, 1, 1)
    if input.ndim not in (2, 3):
        raise RuntimeError(
            f"avg_pool1d() Expected 2D or 3D input tensor, but got {list(input.shape)}"
        )
    return avg_pool2d(
        input.unsqueeze(-2), (1,) + k, (1,) + s, (0,) + p, ceil_mode, count_include_pad
    ).squeeze(-2)


def _adaptive_matrix(size: int, out: int, dtype: np.dtype) -> np.ndarray:
    """(out, size): row i averages PyTorch's window [floor(i*size/out), ceil((i+1)*size/out))."""
    m = np.zeros((out, size), dtype)
    for i in range(out):
        a = (i * size) // out
        b = -((-(i + 1) * size) // out)
        m[i, a:b] = 1.0 / (b - a)
    return m


def adaptive_avg_pool2d(input: TensorOps, output_size: Any) -> TensorOps:
    """2-D adaptive average pooling: ``P_h @ x @ P_w^T`` with constant pooling matrices."""
    if input.ndim not in (3, 4):
        raise RuntimeError(
            f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got {list(input.shape)}"
        )
    for i in range(1, input.ndim):
        if input.shape[i] == 0:
            raise RuntimeError(
                "adaptive_avg_pool2d(): Expected input to have non-zero size for non-batch "
                f"dimensions, but input has sizes {list(input.shape)} with dimension {i} being "
                "empty"
            )
    if isinstance(output_size, (int, np.integer)):
        output_size = (int(output_size), int(output_size))
    H, W = (int(v) for v in input.shape[-2:])
    oh, ow = ((H, W)[j] if o is None else int(o) for j, o in enumerate(tuple(output_size)))
    if oh < 0 or ow < 0:
        raise RuntimeError(
            f"adaptive_avg_pool2d: elements of output_size must be greater "
            f"than or equal to 0 but received {[oh, ow]}"
        )
    dt = input._npdtype
    if dt.kind != "f":
        raise RuntimeError(f"adaptive_avg_pool2d: inputs of dtype {dt.name} are not supported")
    ph = _const_like(input, _adaptive_matrix(H, oh, dt))
    pw = _const_like(input, np.ascontiguousarray(_adaptive_matrix(W, ow, dt).T))
    return (ph @ input) @ pw


def adaptive_avg_pool1d(input: TensorOps, output_size: Any) -> TensorOps:
    """1-D adaptive average pooling: ``x @ P^T`` with a constant pooling matrix."""
    if input.ndim not in (2, 3):
        raise RuntimeError(
            f"adaptive_avg_pool1d(): Expected 2D or 3D tensor, but got {list(input.shape)}"
        )
    if isinstance(output_size, (tuple, list)):
        (output_size,) = output_size
    L = int(input.shape[-1])
    if L == 0:
        raise RuntimeError(
            "adaptive_avg_pool1d(): Expected input to have non-zero size for "
            f"non-batch dimensions, but input has sizes {list(input.shape)}"
        )
    p = _const_like(
        input, np.ascontiguousarray(_adaptive_matrix(L, int(output_size), input._npdtype).T)
    )
    return input @ p
