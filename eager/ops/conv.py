"""Op records: convolution and pooling.

See docs/adding-an-op.md for what a record holds and the tests that check it.

Convolution is three primitives that are each other's adjoints, so every derivative of
every order is again one of them:

* ``conv2d(x, w)``: the forward, im2col + one matrix product per group;
* ``conv2d_input_grad(g, w)``: its adjoint in ``x`` (``conv_transpose2d`` is this op);
* ``conv2d_weight_grad(x, g)``: its adjoint in ``w``.

``padding`` is (top, bottom, left, right): PyTorch's ``padding='same'`` pads an even
kernel asymmetrically.  Max pooling is ``max_pool2d`` (values), ``max_pool2d_grad``
(the gradient goes to one element per window: the first maximum in row-major window
order, the last NaN when there is one, as PyTorch's CPU kernel), ``max_pool2d_select``
(the adjoint of that scatter: the element of ``u`` at each window's argmax of ``x``) and
``max_pool2d_indices`` (``return_indices=True``).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .registry import Meta, check_size, defop
import eager.ops.onnx_rules as R

_TYPE_NAMES = {
    "float32": "Float",
    "float64": "Double",
    "float16": "Half",
    "int64": "Long",
    "int32": "Int",
    "bool": "Bool",
    "int16": "Short",
    "int8": "Char",
    "uint8": "Byte",
}


def _tname(dt: np.dtype) -> str:
    return _TYPE_NAMES.get(np.dtype(dt).name, np.dtype(dt).name)


def _rng():
    return np.random.default_rng(1515)


# ---------------------------------------------------------------------------
# sizes and checks shared by the convolution records


def conv_out_size(size: int, k: int, s: int, p0: int, p1: int, d: int) -> int:
    """Output length of a convolution along one dimension (may be <= 0: caller checks)."""
    return (size + p0 + p1 - d * (k - 1) - 1) // s + 1


def _check_params(op: str, stride, padding, dilation, groups=1) -> None:
    if len(stride) != 2 or len(dilation) != 2 or len(padding) != 4:
        raise RuntimeError(
            f"{op}: expected stride and dilation of 2 values and padding of 4 values, "
            f"but got stride={list(stride)}, padding={list(padding)}, dilation={list(dilation)}"
        )
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError(f"dilation should be greater than zero, but got {list(dilation)}")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")


def _check_float(op: str, a: Meta, b: Meta) -> np.dtype:
    if a.dtype != b.dtype:
        raise RuntimeError(f"expected scalar type {_tname(a.dtype)} but found {_tname(b.dtype)}")
    if a.dtype.kind != "f":
        raise RuntimeError(
            f"{op}: inputs of dtype {a.dtype.name} are not supported (PyTorch supports "
            "integer convolution on CPU); convert them with .float() or .double()"
        )
    return a.dtype


def _check_weight(op: str, w: Meta, groups: int) -> None:
    if len(w.shape) != 4:
        raise RuntimeError(
            f"{op}: expected weight to be 4-dimensional, but got weight of size {list(w.shape)}"
        )
    if w.shape[0] == 0:
        raise RuntimeError(
            f"Given groups={groups}, expected weight to be at least 1 at dimension 0, but got "
            f"weight of size {list(w.shape)} instead"
        )
    if w.shape[0] % groups:
        raise RuntimeError(
            f"Given groups={groups}, expected weight to be divisible by {groups} at dimension "
            f"0, but got weight of size [{list(w.shape)}] instead"
        )


def _spatial_out(op, H, W, kh, kw, stride, padding, dilation) -> tuple:
    ekh, ekw = dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1
    ph, pw = H + padding[0] + padding[1], W + padding[2] + padding[3]
    if ph < ekh or pw < ekw:
        raise RuntimeError(
            f"Calculated padded input size per channel: ({ph} x {pw}). Kernel size: "
            f"({ekh} x {ekw}). Kernel size can't be greater than actual input size"
        )
    return (
        conv_out_size(H, kh, stride[0], padding[0], padding[1], dilation[0]),
        conv_out_size(W, kw, stride[1], padding[2], padding[3], dilation[1]),
    )


def _conv2d_shape(x: Meta, w: Meta, stride, padding, dilation, groups) -> Meta:
    dt = _check_float("conv2d", x, w)
    _check_params("conv2d", stride, padding, dilation, groups)
    if len(x.shape) != 4:
        raise RuntimeError(
            f"Expected 4D (batched) input to conv2d, but got input of size: {list(x.shape)}"
        )
    _check_weight("conv2d", w, groups)
    Co, Cg, kh, kw = w.shape
    N, C, H, W = x.shape
    if C != Cg * groups:
        raise RuntimeError(
            f"Given groups={groups}, weight of size {list(w.shape)}, expected "
            f"input{list(x.shape)} to have {Cg * groups} channels, but got {C} channels instead"
        )
    if C == 0:
        raise RuntimeError(
            "conv2d: an input with 0 channels is not supported (PyTorch returns an empty "
            "result with 0 channels)"
        )
    Ho, Wo = _spatial_out("conv2d", H, W, kh, kw, stride, padding, dilation)
    check_size((N, Co, Ho, Wo), dt, "conv2d")
    check_size((N, C, Ho, Wo, kh, kw), dt, "conv2d")  # the im2col buffer
    return Meta((N, Co, Ho, Wo), dt)


def _conv2d_input_grad_shape(g: Meta, w: Meta, stride, padding, dilation, groups, input_size):
    dt = _check_float("conv2d_input_grad", g, w)
    _check_params("conv2d_input_grad", stride, padding, dilation, groups)
    _check_weight("conv2d_input_grad", w, groups)
    Co, Cg, kh, kw = w.shape
    if len(g.shape) != 4 or g.shape[1] != Co:
        raise RuntimeError(
            f"Given transposed=1, weight of size {list(w.shape)}, expected input"
            f"{list(g.shape)} to have {Co} channels, but got "
            f"{g.shape[1] if len(g.shape) > 1 else 0} channels instead"
        )
    if len(input_size) != 2:
        raise RuntimeError(f"conv2d_input_grad: input_size {input_size} must have 2 values")
    H, W = input_size
    Ho, Wo = _spatial_out("conv2d_input_grad", H, W, kh, kw, stride, padding, dilation)
    if (Ho, Wo) != tuple(g.shape[2:]):
        raise RuntimeError(
            f"conv2d_input_grad: an input of size {list(input_size)} gives an output of size "
            f"{[Ho, Wo]}, not the gradient's {list(g.shape[2:])}"
        )
    N = g.shape[0]
    check_size((N, Cg * groups, H + padding[0] + padding[1], W + padding[2] + padding[3]), dt)
    check_size((N, Ho, Wo, Cg, kh, kw), dt, "conv2d_input_grad")
    return Meta((N, Cg * groups, H, W), dt)


def _conv2d_weight_grad_shape(x: Meta, g: Meta, stride, padding, dilation, groups, kernel_size):
    dt = _check_float("conv2d_weight_grad", x, g)
    _check_params("conv2d_weight_grad", stride, padding, dilation, groups)
    if len(x.shape) != 4 or len(g.shape) != 4 or len(kernel_size) != 2:
        raise RuntimeError(
            f"conv2d_weight_grad: expected 4-D input and gradient and 2 kernel sizes, got "
            f"{list(x.shape)}, {list(g.shape)}, {list(kernel_size)}"
        )
    N, C, H, W = x.shape
    Co = g.shape[1]
    if g.shape[0] != N or C % groups or Co % groups or Co == 0:
        raise RuntimeError(
            f"conv2d_weight_grad: input {list(x.shape)} and gradient {list(g.shape)} do not "
            f"match groups={groups}"
        )
    kh, kw = kernel_size
    Ho, Wo = _spatial_out("conv2d_weight_grad", H, W, kh, kw, stride, padding, dilation)
    if (Ho, Wo) != tuple(g.shape[2:]):
        raise RuntimeError(
            f"conv2d_weight_grad: an input of size {[H, W]} gives an output of size "
            f"{[Ho, Wo]}, not the gradient's {list(g.shape[2:])}"
        )
    check_size((N, C, Ho, Wo, kh, kw), dt, "conv2d_weight_grad")
    return Meta((Co, C // groups, kh, kw), dt)


# ---------------------------------------------------------------------------
# numpy forwards: im2col through a strided view + one tensordot (BLAS) per group


def _pad(x: np.ndarray, padding) -> np.ndarray:
    pt, pb, pl, pr = padding
    if not any(padding):
        return x
    out = np.zeros(x.shape[:2] + (x.shape[2] + pt + pb, x.shape[3] + pl + pr), x.dtype)
    out[:, :, pt : pt + x.shape[2], pl : pl + x.shape[3]] = x
    return out


def _windows(xp: np.ndarray, kh, kw, Ho, Wo, stride, dilation) -> np.ndarray:
    """Read-only view (N, C, Ho, Wo, kh, kw) of the windows of a padded input."""
    sN, sC, sH, sW = xp.strides
    N, C = xp.shape[:2]

    def step(byte_stride, n, size):  # a step along a dim of size <= 1 is never taken: 0
        return byte_stride * n if size > 1 else 0  # (a huge stride would overflow C long)

    return as_strided(
        xp,
        (N, C, Ho, Wo, kh, kw),
        (
            sN,
            sC,
            step(sH, stride[0], Ho),
            step(sW, stride[1], Wo),
            step(sH, dilation[0], kh),
            step(sW, dilation[1], kw),
        ),
        writeable=False,
    )


def _one_product(out_channels: int, taps: int) -> bool:
    """Whether a convolution's products run as one BLAS product per group over the whole
    batch (both matrix sides at least 32 wide), else one small product per batch item."""
    return out_channels >= 32 and taps >= 32


def _im2col(x, kh, kw, Ho, Wo, stride, padding, dilation, groups) -> np.ndarray:
    """The windows of the padded input as a C-ordered (groups, C/groups*kh*kw, N*Ho*Wo)
    array: one copy, channel-major, so that a whole convolution is one BLAS product per
    group over the batch (numpy's batched matmul calls the BLAS once per batch item on
    small matrices, and the col2im of the input gradient adds contiguous blocks)."""
    N, C = x.shape[:2]
    win = _windows(_pad(x, padding), kh, kw, Ho, Wo, stride, dilation)
    cols = np.ascontiguousarray(win.transpose(1, 4, 5, 0, 2, 3))  # (C, kh, kw, N, Ho, Wo)
    return cols.reshape(groups, (C // groups) * kh * kw, N * Ho * Wo)


def _conv2d(x, w, stride, padding, dilation, groups):
    _conv2d_shape(Meta(x.shape, x.dtype), Meta(w.shape, w.dtype), stride, padding, dilation, groups)
    N, C, H, W = x.shape
    Co, Cg, kh, kw = w.shape
    Ho, Wo = _spatial_out("conv2d", H, W, kh, kw, stride, padding, dilation)
    if not _one_product(Co // groups, Cg * kh * kw):
        return _conv2d_per_item(x, w, stride, padding, dilation, groups)
    if not (N and Ho and Wo):
        return np.zeros((N, Co, Ho, Wo), x.dtype)
    cols = _im2col(x, kh, kw, Ho, Wo, stride, padding, dilation, groups)
    wm = w.reshape(groups, Co // groups, Cg * kh * kw)
    out = np.matmul(wm, cols)  # (groups, Og, N*Ho*Wo): one product per group
    return np.ascontiguousarray(out.reshape(Co, N, Ho, Wo).transpose(1, 0, 2, 3))


def _channel_major(g, groups):
    """g (N, Co, Ho, Wo) as a C-ordered (groups, Co/groups, N*Ho*Wo) array."""
    N, Co, Ho, Wo = g.shape
    gt = np.ascontiguousarray(g.transpose(1, 0, 2, 3))
    return gt.reshape(groups, Co // groups, N * Ho * Wo)


def _conv2d_input_grad(g, w, stride, padding, dilation, groups, input_size):
    _conv2d_input_grad_shape(
        Meta(g.shape, g.dtype),
        Meta(w.shape, w.dtype),
        stride,
        padding,
        dilation,
        groups,
        input_size,
    )
    N, Co, Ho, Wo = g.shape
    _, Cg, kh, kw = w.shape
    H, W = input_size
    pt, pb, pl, pr = padding
    if not _one_product(Co // groups, Cg * kh * kw):
        return _conv2d_input_grad_per_item(g, w, stride, padding, dilation, groups, input_size)
    if not (Ho and Wo and N):
        return np.zeros((N, Cg * groups, H, W), g.dtype)
    if stride == (1, 1) or tuple(stride) == (1, 1):
        if np.isfinite(w).all():  # (the shifted sums below add 0 * w: w must be finite)
            return _input_grad_shifted(g, w, padding, dilation, groups, input_size)
    # channel-major: xp is (C, N, H, W) padded, the products' columns (N, Ho, Wo)
    xp = np.zeros((groups, Cg, N, H + pt + pb, W + pl + pr), g.dtype)
    sh, sw = stride
    Og = Co // groups
    wt = w.reshape(groups, Og, Cg, kh, kw).transpose(0, 3, 4, 2, 1)
    wt = wt.reshape(groups, kh * kw * Cg, Og)
    cols = np.matmul(wt, _channel_major(g, groups))  # (groups, kh*kw*Cg, N*Ho*Wo)
    cols = cols.reshape(groups, kh, kw, Cg, N, Ho, Wo)
    for a in range(kh):  # col2im: kh*kw strided adds of contiguous blocks
        h0 = a * dilation[0]
        for b in range(kw):
            w0 = b * dilation[1]
            dst = xp[..., h0 : h0 + sh * (Ho - 1) + 1 : sh, w0 : w0 + sw * (Wo - 1) + 1 : sw]
            np.add(dst, cols[:, a, b], out=dst)
    xp = xp.reshape(groups * Cg, N, H + pt + pb, W + pl + pr)
    return np.ascontiguousarray(xp[:, :, pt : pt + H, pl : pl + W].transpose(1, 0, 2, 3))


def _input_grad_shifted(g, w, padding, dilation, groups, input_size):
    """conv2d_input_grad for stride 1 (and finite w): the gradient's rows padded with zeros
    to the padded input's width Wp, so that each kernel tap's block of the product is
    added to the flat padded input at one offset (a * dilation_h * Wp + b * dilation_w):
    kh * kw contiguous adds instead of kh * kw strided ones over rows of Wo elements.  The
    pad columns of the product are exact zeros (0 * finite w), which land in pad columns
    or in the slack at the end of each row of the flat buffer."""
    N, Co, Ho, Wo = g.shape
    _, Cg, kh, kw = w.shape
    H, W = input_size
    pt, pb, pl, pr = padding
    Hp, Wp = H + pt + pb, W + pl + pr
    Og = Co // groups
    gp = np.zeros((Co, N, Ho, Wp), g.dtype)
    gp[..., :Wo] = g.transpose(1, 0, 2, 3)
    wt = w.reshape(groups, Og, Cg, kh, kw).transpose(0, 3, 4, 2, 1)
    wt = wt.reshape(groups, kh * kw * Cg, Og)
    cols = np.matmul(wt, gp.reshape(groups, Og, N * Ho * Wp))  # (groups, kh*kw*Cg, N*Ho*Wp)
    cols = cols.reshape(groups, kh, kw, Cg, N, Ho * Wp)
    span = Ho * Wp
    flat = np.zeros((groups, Cg, N, Hp * Wp + dilation[1] * (kw - 1)), g.dtype)
    for a in range(kh):
        for b in range(kw):
            off = a * dilation[0] * Wp + b * dilation[1]
            dst = flat[..., off : off + span]
            np.add(dst, cols[:, a, b], out=dst)
    xp = flat[..., : Hp * Wp].reshape(groups * Cg, N, Hp, Wp)
    return np.ascontiguousarray(xp[:, :, pt : pt + H, pl : pl + W].transpose(1, 0, 2, 3))


def _conv2d_weight_grad(x, g, stride, padding, dilation, groups, kernel_size):
    _conv2d_weight_grad_shape(
        Meta(x.shape, x.dtype),
        Meta(g.shape, g.dtype),
        stride,
        padding,
        dilation,
        groups,
        kernel_size,
    )
    N, C, H, W = x.shape
    Co, Ho, Wo = g.shape[1:]
    kh, kw = kernel_size
    Cg = C // groups
    if not _one_product(Co // groups, Cg * kh * kw):
        return _conv2d_weight_grad_per_item(x, g, stride, padding, dilation, groups, kernel_size)
    if not (N and Ho and Wo):
        return np.zeros((Co, Cg, kh, kw), x.dtype)
    cols = _im2col(x, kh, kw, Ho, Wo, stride, padding, dilation, groups)
    # (groups, Og, N*P) @ (groups, N*P, K): the batch summed inside one product per group
    out = np.matmul(_channel_major(g, groups), cols.transpose(0, 2, 1))
    return out.reshape(Co, Cg, kh, kw)


def conv2d_keep_cols(x, w, stride, padding, dilation, groups) -> tuple:
    """(conv2d(x, w), the im2col columns it multiplied, or None for an empty output):
    eager's fused ConvolutionBackward0 keeps the columns for the weight gradient
    (:func:`conv2d_weight_grad_cols`) instead of rebuilding them from x."""
    _conv2d_shape(Meta(x.shape, x.dtype), Meta(w.shape, w.dtype), stride, padding, dilation, groups)
    N, C, H, W = x.shape
    Co, Cg, kh, kw = w.shape
    Ho, Wo = _spatial_out("conv2d", H, W, kh, kw, stride, padding, dilation)
    if not (N and Ho and Wo):
        return np.zeros((N, Co, Ho, Wo), x.dtype), None
    if not _one_product(Co // groups, Cg * kh * kw):
        cols = _im2col_per_item(x, kh, kw, Ho, Wo, stride, padding, dilation, groups)
        return _per_item_product(cols, w, N, Ho, Wo, groups), cols
    cols = _im2col(x, kh, kw, Ho, Wo, stride, padding, dilation, groups)
    out = np.matmul(w.reshape(groups, Co // groups, Cg * kh * kw), cols)
    return np.ascontiguousarray(out.reshape(Co, N, Ho, Wo).transpose(1, 0, 2, 3)), cols


def conv2d_weight_grad_cols(cols, g, groups: int, weight_shape: tuple) -> np.ndarray:
    """conv2d_weight_grad from the columns :func:`conv2d_keep_cols` returned with the
    forward (the same products as :func:`_conv2d_weight_grad`)."""
    Co, Cg, kh, kw = weight_shape
    if cols is None:
        return np.zeros(weight_shape, g.dtype)
    Og = Co // groups
    if cols.ndim == 3:  # (groups, K, N*Ho*Wo): one product per group, the batch inside
        out = np.matmul(_channel_major(g, groups), cols.transpose(0, 2, 1))
        return out.reshape(weight_shape)
    N, _, K, P = cols.shape  # (N, groups, K, Ho*Wo): per batch item, then summed
    res = np.zeros((groups, Og, K), g.dtype)
    gm = g.reshape(N, groups, Og, P)
    for k in range(groups):
        np.sum(np.matmul(gm[:, k], cols[:, k].transpose(0, 2, 1)), axis=0, out=res[k])
    return res.reshape(weight_shape)


def _per_item_product(cols, w, N, Ho, Wo, groups) -> np.ndarray:
    Co, Cg, kh, kw = w.shape
    Og = Co // groups
    wm = w.reshape(groups, Og, Cg * kh * kw)
    out = np.empty((N, groups, Og, Ho * Wo), cols.dtype)
    for k in range(groups):  # (Og, K) @ (N, K, P): one BLAS product per batch item
        np.matmul(wm[k], cols[:, k], out=out[:, k])
    return out.reshape(N, Co, Ho, Wo)


# The per-batch-item products (numpy's batched matmul: one small BLAS call per item), for
# thin matrices, where one large product would run on the BLAS thread pool for little work
# (on a loaded 2-core machine that is 2-10x slower).


def _im2col_per_item(x, kh, kw, Ho, Wo, stride, padding, dilation, groups) -> np.ndarray:
    """The windows of the padded input as a C-ordered (N, groups, C/groups*kh*kw, Ho*Wo)
    array: one copy, whose rows are contiguous runs of the input."""
    N, C = x.shape[:2]
    win = _windows(_pad(x, padding), kh, kw, Ho, Wo, stride, dilation)
    cols = np.ascontiguousarray(win.transpose(0, 1, 4, 5, 2, 3))  # (N, C, kh, kw, Ho, Wo)
    return cols.reshape(N, groups, (C // groups) * kh * kw, Ho * Wo)


def _conv2d_per_item(x, w, stride, padding, dilation, groups):
    N, C, H, W = x.shape
    Co, Cg, kh, kw = w.shape
    Ho, Wo = _spatial_out("conv2d", H, W, kh, kw, stride, padding, dilation)
    cols = _im2col_per_item(x, kh, kw, Ho, Wo, stride, padding, dilation, groups)
    return _per_item_product(cols, w, N, Ho, Wo, groups)


def _conv2d_input_grad_per_item(g, w, stride, padding, dilation, groups, input_size):
    N, Co, Ho, Wo = g.shape
    _, Cg, kh, kw = w.shape
    H, W = input_size
    pt, pb, pl, pr = padding
    xp = np.zeros((N, Cg * groups, H + pt + pb, W + pl + pr), g.dtype)
    Og = Co // groups
    if Ho and Wo and N:
        sh, sw = stride
        wm = w.reshape(groups, Og, Cg * kh * kw)
        gm = g.reshape(N, groups, Og, Ho * Wo)
        for k in range(groups):
            cols = np.matmul(wm[k].T, gm[:, k]).reshape(N, Cg, kh, kw, Ho, Wo)
            dst = xp[:, k * Cg : (k + 1) * Cg]
            for a in range(kh):  # col2im: kh*kw strided adds
                h0 = a * dilation[0]
                for b in range(kw):
                    w0 = b * dilation[1]
                    dst[
                        :, :, h0 : h0 + sh * (Ho - 1) + 1 : sh, w0 : w0 + sw * (Wo - 1) + 1 : sw
                    ] += cols[:, :, a, b]
    return np.ascontiguousarray(xp[:, :, pt : pt + H, pl : pl + W])


def _conv2d_weight_grad_per_item(x, g, stride, padding, dilation, groups, kernel_size):
    N, C, H, W = x.shape
    Co, Ho, Wo = g.shape[1:]
    kh, kw = kernel_size
    Cg, Og = C // groups, Co // groups
    out = np.zeros((groups, Og, Cg * kh * kw), x.dtype)
    if N and Ho and Wo:
        cols = _im2col_per_item(x, kh, kw, Ho, Wo, stride, padding, dilation, groups)
        gm = g.reshape(N, groups, Og, Ho * Wo)
        for k in range(groups):  # sum over the batch of (Og, P) @ (P, K)
            np.sum(np.matmul(gm[:, k], cols[:, k].transpose(0, 2, 1)), axis=0, out=out[k])
    return out.reshape(Co, Cg, kh, kw)


# ---------------------------------------------------------------------------
# VJP rules: the three ops are each other's adjoints


def _p(attrs: dict) -> dict:
    return {k: attrs[k] for k in ("stride", "padding", "dilation", "groups")}


_BWD = "ConvolutionBackward0"
_BWD2 = "ConvolutionBackwardBackward0"


def _hw(t) -> tuple:
    return tuple(int(d) for d in t.shape[2:])


def _kwh(t) -> tuple:
    return tuple(int(d) for d in t.shape[2:])


def _conv_vjp_x(g, out, x, w, **a):
    return g._op("conv2d_input_grad", _BWD2, w, input_size=_hw(x), **_p(a))


def _conv_vjp_w(g, out, x, w, **a):
    return x._op("conv2d_weight_grad", _BWD2, g, kernel_size=_kwh(w), **_p(a))


def _igrad_vjp_g(u, out, g, w, **a):  # <u, B(g, w)> = <A(u, w), g>
    return u._op("conv2d", _BWD, w, **_p(a))


def _igrad_vjp_w(u, out, g, w, **a):  # <A(u, w), g> as a function of w
    return u._op("conv2d_weight_grad", _BWD2, g, kernel_size=_kwh(w), **_p(a))


def _wgrad_vjp_x(v, out, x, g, **a):  # <v, C(x, g)> = <A(x, v), g> = <x, B(g, v)>
    return g._op("conv2d_input_grad", _BWD2, v, input_size=_hw(x), **_p(a))


def _wgrad_vjp_g(v, out, x, g, **a):
    return x._op("conv2d", _BWD, v, **_p(a))


_CONV_ATTRS = {"stride": "shape", "padding": "shape", "dilation": "shape", "groups": "int"}


def _conv_cases():
    """(x shape, w shape, attrs) covering stride, asymmetric padding, dilation, groups,
    a size-1 spatial output, and empty batches/outputs."""
    P = lambda s=(1, 1), p=(0, 0, 0, 0), d=(1, 1), g=1: dict(  # noqa: E731
        stride=s, padding=p, dilation=d, groups=g
    )
    return [
        ((2, 3, 5, 6), (4, 3, 3, 2), P()),
        ((1, 4, 6, 5), (6, 2, 2, 3), P(s=(2, 1), p=(1, 0, 2, 1), g=2)),
        ((2, 2, 7, 7), (3, 2, 3, 3), P(s=(2, 3), p=(1, 1, 1, 1), d=(2, 1))),
        ((1, 1, 3, 3), (1, 1, 3, 3), P()),  # 1x1 output
        ((0, 2, 4, 4), (3, 2, 2, 2), P()),  # empty batch
        ((1, 3, 4, 4), (3, 1, 2, 2), P(p=(0, 1, 1, 0), g=3)),  # depthwise, 'same'-style
    ]


def _conv2d_samples():
    r = _rng()
    return [([r.uniform(-1, 1, xs), r.uniform(-1, 1, ws)], a) for xs, ws, a in _conv_cases()]


def _igrad_samples():
    r = _rng()
    out = []
    for xs, ws, a in _conv_cases():
        o = _conv2d_shape(Meta(xs, np.float64), Meta(ws, np.float64), **a).shape
        out.append(([r.uniform(-1, 1, o), r.uniform(-1, 1, ws)], dict(a, input_size=xs[2:])))
    return out


def _wgrad_samples():
    r = _rng()
    out = []
    for xs, ws, a in _conv_cases():
        o = _conv2d_shape(Meta(xs, np.float64), Meta(ws, np.float64), **a).shape
        out.append(([r.uniform(-1, 1, xs), r.uniform(-1, 1, o)], dict(a, kernel_size=ws[2:])))
    return out


defop(
    "conv2d",
    onnx=R.conv2d,
    forward=_conv2d,
    shape=_conv2d_shape,
    arity=2,
    family="index",
    attrs=_CONV_ATTRS,
    vjp=(_conv_vjp_x, _conv_vjp_w),
    reads=((1,), (0,)),
    samples=_conv2d_samples,
    doc="2-D cross-correlation of a batched (N, C, H, W) input with (Co, C/groups, kh, kw) "
    "weights; padding is (top, bottom, left, right)",
)

defop(
    "conv2d_input_grad",
    onnx=R.conv2d_input_grad,
    forward=_conv2d_input_grad,
    shape=_conv2d_input_grad_shape,
    arity=2,
    family="index",
    attrs=dict(_CONV_ATTRS, input_size="shape"),
    vjp=(_igrad_vjp_g, _igrad_vjp_w),
    reads=((1,), (0,)),
    samples=_igrad_samples,
    doc="the adjoint of conv2d in its input (a transposed convolution): an input of "
    "spatial size input_size",
)

defop(
    "conv2d_weight_grad",
    onnx=R.conv2d_weight_grad,
    forward=_conv2d_weight_grad,
    shape=_conv2d_weight_grad_shape,
    arity=2,
    family="index",
    attrs=dict(_CONV_ATTRS, kernel_size="shape"),
    vjp=(_wgrad_vjp_x, _wgrad_vjp_g),
    reads=((1,), (0,)),
    samples=_wgrad_samples,
    doc="the adjoint of conv2d in its weight: weights of spatial size kernel_size",
)


# ---------------------------------------------------------------------------
# max pooling


def pool_out_size(size: int, k: int, p: int, s: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooling_output_shape: the last window must start inside the input or its
    left padding."""
    num = size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = num // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


_POOL_ATTRS = {
    "kernel_size": "shape",
    "stride": "shape",
    "padding": "shape",
    "dilation": "shape",
    "ceil_mode": "bool",
}


def _pool_shape_of(op, x: Meta, kernel_size, stride, padding, dilation, ceil_mode) -> tuple:
    if x.dtype.kind != "f":
        raise RuntimeError(
            f"{op}: inputs of dtype {x.dtype.name} are not supported (PyTorch supports "
            "integer max pooling on CPU); convert them with .float() or .double()"
        )
    if len(x.shape) != 4:
        raise RuntimeError(
            f"Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for "
            f"input, but got:{list(x.shape)}"
        )
    if any(len(t) != 2 for t in (kernel_size, stride, padding, dilation)):
        raise RuntimeError(f"{op}: kernel_size, stride, padding and dilation need 2 values each")
    if any(k <= 0 for k in kernel_size):
        raise RuntimeError(
            f"kernel_size must be greater than zero, but got kH: {kernel_size[0]} "
            f"kW: {kernel_size[1]}"
        )
    if any(s <= 0 for s in stride):
        raise RuntimeError(
            f"stride should be greater than zero, but got dH: {stride[0]} dW: {stride[1]}"
        )
    if any(d <= 0 for d in dilation):
        raise RuntimeError(
            f"dilation should be greater than zero, but got dilationH: "
            f"{dilation[0]} dilationW: {dilation[1]}"
        )
    for k, p, d in zip(kernel_size, padding, dilation):
        if p > (d * (k - 1) + 1) // 2:
            raise RuntimeError(
                f"pad should be at most half of effective kernel size, but got pad={p}, "
                f"kernel_size={k} and dilation={d}"
            )
    N, C, H, W = x.shape
    if C == 0 or H == 0 or W == 0:
        raise RuntimeError(
            f"Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for "
            f"input, but got:{list(x.shape)}"
        )
    Ho, Wo = (
        pool_out_size(s, k, p, st, d, ceil_mode)
        for s, k, p, st, d in zip((H, W), kernel_size, padding, stride, dilation)
    )
    if Ho < 1 or Wo < 1:
        raise RuntimeError(
            f"Given input size: ({C}x{H}x{W}). Calculated output size: ({C}x{Ho}x{Wo}). "
            "Output size is too small"
        )
    check_size((N, C, Ho, Wo, kernel_size[0], kernel_size[1]), x.dtype, op)
    return N, C, Ho, Wo


def _max_pool2d_shape(x: Meta, **a) -> Meta:
    return Meta(_pool_shape_of("max_pool2d", x, **a), x.dtype)


def _max_pool2d_indices_shape(x: Meta, **a) -> Meta:
    return Meta(_pool_shape_of("max_pool2d", x, **a), np.dtype(np.int64))


def _pool_pair_shape(op):
    def rule(x: Meta, y: Meta, **a) -> Meta:
        out = _pool_shape_of(op, x, **a)
        want = out if op == "max_pool2d_grad" else x.shape
        if y.dtype != x.dtype or tuple(y.shape) != tuple(want):
            raise RuntimeError(
                f"{op}: expected a {x.dtype.name} operand of shape {list(want)}, got "
                f"{y.dtype.name} {list(y.shape)}"
            )
        return Meta(x.shape if op == "max_pool2d_grad" else out, x.dtype)

    return rule


def _tiles(x, kernel_size, stride, padding, dilation, ceil_mode):
    """The input's windows as a (N, C, Ho, kh, Wo, kw) view when they tile it (stride ==
    kernel, no padding or dilation; a remainder at the bottom/right is dropped, as PyTorch
    drops it), else None."""
    if tuple(stride) != tuple(kernel_size) or any(padding) or tuple(dilation) != (1, 1):
        return None
    N, C, H, W = x.shape
    kh, kw = kernel_size
    Ho = pool_out_size(H, kh, 0, kh, 1, ceil_mode)
    Wo = pool_out_size(W, kw, 0, kw, 1, ceil_mode)
    if Ho * kh > H or Wo * kw > W or not x.size:
        return None
    return x[:, :, : Ho * kh, : Wo * kw].reshape(N, C, Ho, kh, Wo, kw)  # a view


def _tiled_max(xr):
    """Per tiling window, (the maximum, the tap index (int8, row-major) of its first
    occurrence): one pass of a few strided elementwise ops per tap (numpy's reductions
    over a short last axis cost ~100x more).  NaNs propagate to the maximum; the taps are
    then meaningless (the caller checks)."""
    kh, kw = xr.shape[3], xr.shape[5]
    best = xr[:, :, :, 0, :, 0].copy()
    t = np.zeros(best.shape, np.int8)
    d = np.empty(best.shape, np.int8)
    for k in range(1, kh * kw):
        v = xr[:, :, :, k // kw, :, k % kw]
        upd = np.greater(v, best)
        np.maximum(v, best, out=best)  # numpy keeps its second operand on ties (+-0.0)
        np.subtract(np.int8(k), t, out=d)
        np.multiply(d, upd, out=d)
        np.add(t, d, out=t)
    return best, t


def _tiled_values(xr):
    """Per tiling window, its maximum (the first of tied +-0.0, NaN if it holds one)."""
    kh, kw = xr.shape[3], xr.shape[5]
    best = xr[:, :, :, 0, :, 0].copy()
    for k in range(1, kh * kw):
        np.maximum(xr[:, :, :, k // kw, :, k % kw], best, out=best)  # ties keep ``best``
    return best


def _pool_argmax(x, kernel_size, stride, padding, dilation, ceil_mode):
    """Per window, the flat index (in H*W) PyTorch's CPU kernel picks: the first maximum in
    row-major window order, or the last NaN; windows never hold only padding."""
    N, C, H, W = x.shape
    kh, kw = kernel_size
    if kh * kw < 128:
        xr = _tiles(x, kernel_size, stride, padding, dilation, ceil_mode)
        if xr is not None:
            best, t = _tiled_max(xr)
            if not np.isnan(best).any():
                Ho, Wo = best.shape[2:]
                a, b = np.divmod(t.astype(np.int64), kw)
                base = (np.arange(Ho) * (kh * W))[:, None] + (np.arange(Wo) * kw)[None, :]
                return base + a * W + b, best.shape, best
    Ho, Wo = (
        pool_out_size(s, k, p, st, d, ceil_mode)
        for s, k, p, st, d in zip((H, W), kernel_size, padding, stride, dilation)
    )
    ph, pw = padding
    # padded so every window (ceil_mode ones too) stays inside the array
    Hp = max(H + 2 * ph, (Ho - 1) * stride[0] + dilation[0] * (kh - 1) + 1)
    Wp = max(W + 2 * pw, (Wo - 1) * stride[1] + dilation[1] * (kw - 1) + 1)
    xp = np.full((N, C, Hp, Wp), -np.inf, x.dtype)
    xp[:, :, ph : ph + H, pw : pw + W] = x
    win = _windows(xp, kh, kw, Ho, Wo, stride, dilation)  # (N, C, Ho, Wo, kh, kw) view
    ih = (np.arange(Ho) * stride[0] - ph)[:, None] + (np.arange(kh) * dilation[0])[None, :]
    iw = (np.arange(Wo) * stride[1] - pw)[:, None] + (np.arange(kw) * dilation[1])[None, :]
    vh, vw = (ih >= 0) & (ih < H), (iw >= 0) & (iw < W)
    valid = (vh[:, None, :, None] & vw[None, :, None, :]).reshape(Ho, Wo, kh * kw)
    # the flat input index (ih * W + iw) of every window's taps, (Ho, Wo, kh * kw)
    taps = (ih[:, None, :, None] * W + iw[None, :, None, :]).reshape(Ho, Wo, kh * kw)
    # PyTorch's loop, one kernel tap at a time over every window at once: the index starts
    # at the first valid tap, and moves to a valid tap greater than the maximum or NaN
    first = np.take_along_axis(taps, np.argmax(valid, axis=-1)[..., None], axis=-1)[..., 0]
    flat = np.empty((N, C, Ho, Wo), np.int64)
    flat[...] = first
    best = np.full((N, C, Ho, Wo), -np.inf, x.dtype)
    has_nan = bool(np.isnan(x).any())
    for t in range(kh * kw):
        v = win[..., t // kw, t % kw]
        upd = v > best
        if has_nan:
            upd |= np.isnan(v)
        if not valid[..., t].all():
            upd &= valid[..., t]
        np.copyto(best, v, where=upd)
        np.copyto(flat, taps[..., t], where=upd)
    return flat, (N, C, Ho, Wo), best


def _take(src, flat):
    N, C, H, W = src.shape
    Ho, Wo = flat.shape[2:]
    got = np.take_along_axis(src.reshape(N, C, H * W), flat.reshape(N, C, Ho * Wo), axis=2)
    return got.reshape(flat.shape)


def _max_pool2d(x, **a):
    _max_pool2d_shape(Meta(x.shape, x.dtype), **a)
    xr = _tiles(x, **a)
    if xr is not None and a["kernel_size"][0] * a["kernel_size"][1] < 128:
        return _tiled_values(xr)  # NaN-propagating: a window with a NaN gives NaN
    return _pool_argmax(x, **a)[2]  # the maxima found on the way: x at the indices


def _max_pool2d_indices(x, **a):
    _max_pool2d_shape(Meta(x.shape, x.dtype), **a)
    return _pool_argmax(x, **a)[0]


def _max_pool2d_select(x, u, **a):
    _pool_pair_shape("max_pool2d_select")(Meta(x.shape, x.dtype), Meta(u.shape, u.dtype), **a)
    return _take(u, _pool_argmax(x, **a)[0])


def _max_pool2d_grad(x, g, **a):
    _pool_pair_shape("max_pool2d_grad")(Meta(x.shape, x.dtype), Meta(g.shape, g.dtype), **a)
    xr = _tiles(x, **a)
    if xr is not None and a["kernel_size"][0] * a["kernel_size"][1] < 128:
        got = _tiled_grad(x, xr, g)
        if got is not None:
            return got
    flat, (N, C, Ho, Wo), _ = _pool_argmax(x, **a)
    H, W = x.shape[2:]
    # each window's gradient added to its argmax, in row-major window order (bincount
    # accumulates in float64: float32 sums of overlapping windows are rounded once)
    key = (np.arange(N * C) * (H * W))[:, None] + flat.reshape(N * C, Ho * Wo)
    out = np.bincount(key.reshape(-1), weights=g.reshape(-1), minlength=N * C * H * W)
    return out.astype(x.dtype, copy=False).reshape(x.shape)


def _tiled_grad(x, xr, g):
    """max_pool2d_grad for tiling windows (no window overlaps another, so nothing is
    summed), or None for a NaN in x or a non-finite g (the general scatter handles those).
    Each tap's slots get ``g * (tap is the argmax)``; adding the zeros PyTorch's kernel
    starts from then makes the -0.0 that ``-g * 0`` gives +0.0, as there."""
    best = _tiled_values(xr)
    if np.isnan(best).any() or not np.isfinite(g).all():
        return None
    kh, kw = xr.shape[3], xr.shape[5]
    out = np.zeros(x.shape, x.dtype)
    dst = _tiles(out, (kh, kw), (kh, kw), (0, 0), (1, 1), False)
    free = np.ones(best.shape, bool)  # windows whose argmax is not found yet
    hit = np.empty(best.shape, bool)
    for k in range(kh * kw):  # the first tap equal to the maximum is the argmax
        np.equal(xr[:, :, :, k // kw, :, k % kw], best, out=hit)
        np.logical_and(hit, free, out=hit)
        np.multiply(g, hit, out=dst[:, :, :, k // kw, :, k % kw])
        if k + 1 < kh * kw:
            np.not_equal(free, hit, out=free)
    np.add(dst, x.dtype.type(0), out=dst)
    return out


_MP_BWD = "MaxPool2DWithIndicesBackward0"
_MP_BWD2 = "MaxPool2DWithIndicesBackwardBackward0"


def _pool_cases():
    P = lambda k=(2, 2), s=(2, 2), p=(0, 0), d=(1, 1), c=False: dict(  # noqa: E731
        kernel_size=k, stride=s, padding=p, dilation=d, ceil_mode=c
    )
    return [
        ((2, 3, 6, 5), P()),
        ((1, 2, 7, 6), P(k=(3, 2), s=(2, 1), p=(1, 1))),
        ((1, 2, 7, 7), P(k=(2, 3), s=(2, 2), d=(2, 1), c=True)),
        ((1, 1, 5, 5), P(k=(3, 3), s=(2, 2), p=(1, 1), c=True)),
        ((0, 2, 4, 4), P()),  # empty batch
        ((2, 1, 1, 1), P(k=(1, 1), s=(1, 1))),
    ]


def _pool_x(r, shape):
    """Distinct random values: the registry's finite-difference gradchecks must not cross a
    tie (tests/eager/ops/test_conv.py checks ties and NaN against PyTorch)."""
    return r.uniform(-1, 1, shape)


def _pool_samples(second: str = ""):
    def samples():
        r = _rng()
        out = []
        for shape, a in _pool_cases():
            x = _pool_x(r, shape)
            if second == "g":
                o = _pool_shape_of("max_pool2d", Meta(shape, x.dtype), **a)
                out.append(([x, r.uniform(-1, 1, o)], a))
            elif second == "u":
                out.append(([x, r.uniform(-1, 1, shape)], a))
            else:
                out.append(([x], a))
        return out

    return samples


def _zeros(g, out, x, *rest, **a):
    """max pooling's argmax is piecewise constant in x: its derivative is zero."""
    return x.zeros_like_()


def _mp_vjp(g, out, x, **a):
    return x._op("max_pool2d_grad", _MP_BWD, g, **a)


def _mp_grad_vjp_g(u, out, x, g, **a):
    return x._op("max_pool2d_select", _MP_BWD2, u, **a)


def _mp_select_vjp_u(g, out, x, u, **a):
    return x._op("max_pool2d_grad", _MP_BWD, g, **a)


defop(
    "max_pool2d",
    onnx=R.max_pool2d,
    forward=_max_pool2d,
    shape=_max_pool2d_shape,
    arity=1,
    family="index",
    attrs=_POOL_ATTRS,
    vjp=(_mp_vjp,),
    saves=(0,),
    samples=_pool_samples(),
    doc="2-D max pooling of a batched (N, C, H, W) input (padding is -inf)",
)

defop(
    "max_pool2d_grad",
    onnx=R.max_pool2d_grad,
    forward=_max_pool2d_grad,
    shape=_pool_pair_shape("max_pool2d_grad"),
    arity=2,
    family="index",
    attrs=_POOL_ATTRS,
    vjp=(_zeros, _mp_grad_vjp_g),
    saves=(0,),
    samples=_pool_samples("g"),
    doc="the gradient of max_pool2d: g scattered (added) to each window's argmax of x",
)

defop(
    "max_pool2d_select",
    onnx=R.max_pool2d_select,
    forward=_max_pool2d_select,
    shape=_pool_pair_shape("max_pool2d_select"),
    arity=2,
    family="index",
    attrs=_POOL_ATTRS,
    vjp=(_zeros, _mp_select_vjp_u),
    saves=(0,),
    samples=_pool_samples("u"),
    doc="the element of u at each max_pool2d window's argmax of x (max_pool2d_grad's adjoint)",
)

defop(
    "max_pool2d_indices",
    onnx=R.max_pool2d_indices,
    forward=_max_pool2d_indices,
    shape=_max_pool2d_indices_shape,
    arity=1,
    family="index",
    attrs=_POOL_ATTRS,
    vjp=None,
    samples=_pool_samples(),
    doc="the flat index (in H*W) of each max_pool2d window's maximum (return_indices=True)",
)
