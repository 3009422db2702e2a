"""Matrix products (numpy's matmul semantics: 1-D, 2-D and batched)."""

from __future__ import annotations

import math

import numpy as np

from .registry import Meta, broadcast_shapes, defop
import eager.ops.onnx_rules as R


def _rng():
    return np.random.default_rng(7)


def _matmul_shape(a: Meta, b: Meta) -> Meta:
    if not a.shape or not b.shape:
        raise RuntimeError("matmul: both arguments need at least 1 dimension")
    ka = a.shape[-1]
    kb = b.shape[0] if len(b.shape) == 1 else b.shape[-2]
    if ka != kb:
        raise RuntimeError(
            f"matmul: shapes {list(a.shape)} and {list(b.shape)} cannot be "
            f"multiplied ({ka} != {kb})"
        )
    dt = np.result_type(a.dtype, b.dtype)
    if len(a.shape) == 1 and len(b.shape) == 1:
        return Meta((), dt)
    if len(b.shape) == 1:
        return Meta(a.shape[:-1], dt)
    if len(a.shape) == 1:
        return Meta(b.shape[:-2] + b.shape[-1:], dt)
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], op="matmul")
    return Meta(batch + (a.shape[-2], b.shape[-1]), dt)


def _mT(t):
    return t.transpose(-2, -1)


def _vjp_a(g, out, a, b):
    if a.ndim == 1 and b.ndim == 1:
        return g * b
    if b.ndim == 1:  # (..., m, n) @ (n,) -> (..., m)
        return g.unsqueeze(-1) * b
    if a.ndim == 1:  # (n,) @ (..., n, p) -> (..., p)
        return (b @ g.unsqueeze(-1)).squeeze(-1)
    return g @ _mT(b)


def _vjp_b(g, out, a, b):
    if a.ndim == 1 and b.ndim == 1:
        return g * a
    if b.ndim == 1:  # grad (n,) = sum over batch/m of a^T g
        return (_mT(a) @ g.unsqueeze(-1)).squeeze(-1)
    if a.ndim == 1:
        return a.unsqueeze(-1) * g.unsqueeze(-2)
    if b.ndim == 2 and a.ndim > 2:
        # the sum over the batch of a_i^T g_i is one product of the stacked rows (what
        # PyTorch's folded mm computes): (k, rows) @ (rows, n), not a batch of products
        # summed afterwards
        # (rows counted, not -1: a size-0 k or n leaves -1 undetermined)
        k, n = b.shape[-2], b.shape[-1]
        rows = math.prod(a.shape[:-1])
        return _mT(a.reshape(rows, k)) @ g.reshape(rows, n)
    return _mT(a) @ g


def _samples():
    r = _rng()
    shapes = [
        ((3, 4), (4, 2)),
        ((4,), (4,)),
        ((3, 4), (4,)),
        ((4,), (4, 2)),
        ((2, 3, 4), (4, 5)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((0, 4), (4, 3)),
        ((3, 0), (0, 2)),
    ]
    return [([r.uniform(-1, 1, size=a), r.uniform(-1, 1, size=b)], {}) for a, b in shapes]


def _matmul(a, b):
    if a.ndim > 2 and b.ndim == 2 and a.size and b.size:
        # (..., m, k) @ (k, n): one gemm over the stacked rows (numpy's matmul would run
        # one gemm per leading index); the reshape copies a non-contiguous a once
        out = np.matmul(a.reshape(-1, a.shape[-1]), b)
        return out.reshape(a.shape[:-1] + (b.shape[-1],))
    return np.matmul(a, b)


defop(
    "matmul",
    onnx=R.matmul,
    forward=_matmul,
    shape=_matmul_shape,
    arity=2,
    family="matmul",
    vjp=(_vjp_a, _vjp_b),
    reads=((1,), (0,)),
    samples=_samples,
    doc="matrix product with numpy's 1-D, 2-D and batched (broadcast) rules",
)


# --- addmm / baddbmm: beta * input + alpha * (mat1 @ mat2) --------------------------------
# One primitive each (PyTorch's AddmmBackward0 / BaddbmmBackward0, what nn.Linear records),
# lowered natively to one BLAS gemm per product whose C starts as beta * input.

_TORCH_DTYPE = {
    "float16": "Half",
    "float32": "Float",
    "float64": "Double",
    "int8": "Char",
    "uint8": "Byte",
    "int16": "Short",
    "int32": "Int",
    "int64": "Long",
    "bool": "Bool",
}


def _tname(dt) -> str:
    return _TORCH_DTYPE.get(np.dtype(dt).name, np.dtype(dt).name)


def _expand_check(inp: tuple, target: tuple) -> None:
    """PyTorch's expand rule for the added input (no new dims on the right, sizes 1 or equal)."""
    if len(inp) > len(target):
        raise RuntimeError(
            f"expand(torch.FloatTensor{{{list(inp)}}}, size={list(target)}): the number of "
            f"sizes provided ({len(target)}) must be greater or equal to the number of "
            f"dimensions in the tensor ({len(inp)})"
        )
    off = len(target) - len(inp)
    for i, d in enumerate(inp):
        if d != 1 and d != target[off + i]:
            raise RuntimeError(
                f"The expanded size of the tensor ({target[off + i]}) must match the existing "
                f"size ({d}) at non-singleton dimension {off + i}.  Target sizes: "
                f"{list(target)}.  Tensor sizes: {list(inp)}"
            )


def _addmm_shape(inp: Meta, m1: Meta, m2: Meta, beta=1.0, alpha=1.0) -> Meta:
    for what, m in (("mat1", m1), ("mat2", m2)):
        if m.ndim != 2:
            raise RuntimeError(f"{what} must be a matrix, got {m.ndim}-D tensor")
    if m1.shape[1] != m2.shape[0]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({m1.shape[0]}x{m1.shape[1]} and "
            f"{m2.shape[0]}x{m2.shape[1]})"
        )
    if inp.dtype != m2.dtype:
        raise RuntimeError(
            f"self and mat2 must have the same dtype, but got {_tname(inp.dtype)} and "
            f"{_tname(m2.dtype)}"
        )
    if m1.dtype != m2.dtype:
        raise RuntimeError(
            f"mat1 and mat2 must have the same dtype, but got {_tname(m1.dtype)} and "
            f"{_tname(m2.dtype)}"
        )
    if m1.dtype.kind == "b":
        raise NotImplementedError("\"addmm_impl_cpu_\" not implemented for 'Bool'")
    out = (m1.shape[0], m2.shape[1])
    _expand_check(inp.shape, out)
    return Meta(out, m1.dtype)


def _baddbmm_shape(inp: Meta, b1: Meta, b2: Meta, beta=1.0, alpha=1.0) -> Meta:
    for what, m in (("batch1", b1), ("batch2", b2)):
        if m.ndim != 3:
            raise RuntimeError(f"{what} must be a 3D tensor")
    if b2.shape[:2] != (b1.shape[0], b1.shape[2]):
        raise RuntimeError(
            f"Expected size for first two dimensions of batch2 tensor to be: "
            f"[{b1.shape[0]}, {b1.shape[2]}] but got: [{b2.shape[0]}, {b2.shape[1]}]."
        )
    for m in (b2, inp):
        if m.dtype != b1.dtype:
            raise RuntimeError(
                f"expected scalar type {_tname(b1.dtype)} but found {_tname(m.dtype)}"
            )
    if b1.dtype.kind == "b":
        raise NotImplementedError("\"baddbmm_cpu\" not implemented for 'Bool'")
    out = (b1.shape[0], b1.shape[1], b2.shape[2])
    _expand_check(inp.shape, out)
    return Meta(out, b1.dtype)


def _addmm_forward(inp, m1, m2, beta=1.0, alpha=1.0):
    dt = m1.dtype
    if alpha == 0:  # PyTorch's gemm (and graphc's) then ignores the product: NaN/inf in the
        # matrices do not propagate (PyTorch's small-batch baddbmm path is the exception)
        batch = np.broadcast_shapes(m1.shape[:-2], m2.shape[:-2])
        prod = np.zeros(batch + (m1.shape[-2], m2.shape[-1]), dt)
    else:
        prod = np.matmul(m1, m2)
    if alpha not in (0, 1):
        prod = prod * dt.type(alpha)
    if beta == 0:  # PyTorch ignores input then (NaN and inf in it do not propagate)
        return np.ascontiguousarray(prod, dtype=dt)
    add = inp if beta == 1 else inp * dt.type(beta)
    return np.ascontiguousarray(add + prod, dtype=dt)


def _checked(shape):
    """The forward, after the shape rule (eager runs none before a forward): PyTorch's errors."""

    nd = 2 if shape is _addmm_shape else 3

    def forward(inp, m1, m2, beta=1.0, alpha=1.0):
        dt = m1.dtype
        s1, s2, si = m1.shape, m2.shape, inp.shape
        if not (  # the common case (nn.Linear's) without building Metas
            len(s1) == nd
            and len(s2) == nd
            and s1[-1] == s2[-2]
            and s1[:-2] == s2[:-2]
            and m2.dtype == dt
            and inp.dtype == dt
            and dt.kind != "b"
            and (si == s2[-1:] or si == s1[:-1] + s2[-1:])
        ):
            shape(*(Meta(a.shape, a.dtype) for a in (inp, m1, m2)))
        return _addmm_forward(inp, m1, m2, beta, alpha)

    return forward


def _scaled(t, s):
    return t if s == 1 else t * s


def _addmm_vjp_input(g, out, inp, m1, m2, beta=1.0, alpha=1.0):
    return _scaled(g, beta)


def _addmm_vjp_m1(g, out, inp, m1, m2, beta=1.0, alpha=1.0):
    return _scaled(g @ _mT(m2), alpha)


def _addmm_vjp_m2(g, out, inp, m1, m2, beta=1.0, alpha=1.0):
    return _scaled(_mT(m1) @ g, alpha)


def _addmm_samples():
    r = _rng()
    u = lambda *s: r.uniform(-1, 1, size=s)  # noqa: E731
    one = {"beta": 1.0, "alpha": 1.0}
    return [
        ([u(4), u(3, 5), u(5, 4)], one),
        ([u(3, 4), u(3, 5), u(5, 4)], {"beta": 0.5, "alpha": 2.0}),
        ([u(), u(2, 3), u(3, 2)], {"beta": -1.5, "alpha": 1.0}),
        ([u(3, 1), u(3, 2), u(2, 4)], {"beta": 1.0, "alpha": -0.5}),
        ([u(1, 4), u(1, 1), u(1, 4)], one),
        ([u(4), u(3, 5), u(5, 4)], {"beta": 0.0, "alpha": 1.0}),
        ([u(4), u(0, 5), u(5, 4)], one),
        ([u(2), u(3, 0), u(0, 2)], {"beta": 2.0, "alpha": 3.0}),
    ]


def _baddbmm_samples():
    r = _rng()
    u = lambda *s: r.uniform(-1, 1, size=s)  # noqa: E731
    one = {"beta": 1.0, "alpha": 1.0}
    return [
        ([u(2, 3, 4), u(2, 3, 5), u(2, 5, 4)], one),
        ([u(4), u(2, 3, 5), u(2, 5, 4)], {"beta": 0.5, "alpha": 2.0}),
        ([u(), u(1, 2, 3), u(1, 3, 2)], {"beta": -1.5, "alpha": 1.0}),
        ([u(3, 1), u(2, 3, 2), u(2, 2, 4)], {"beta": 0.0, "alpha": -0.5}),
        ([u(2, 1, 4), u(2, 1, 1), u(2, 1, 4)], one),
        ([u(1), u(0, 3, 2), u(0, 2, 4)], one),
        ([u(2, 3, 2), u(2, 3, 0), u(2, 0, 2)], {"beta": 2.0, "alpha": 3.0}),
    ]


for _name, _shape, _samples_fn, _doc in (
    ("addmm", _addmm_shape, _addmm_samples, "beta * input + alpha * (mat1 @ mat2), 2-D"),
    (
        "baddbmm",
        _baddbmm_shape,
        _baddbmm_samples,
        "beta * input + alpha * (batch1 @ batch2), batched 3-D",
    ),
):
    defop(
        _name,
        forward=_checked(_shape),
        shape=_shape,
        arity=3,
        attrs={"beta": "float", "alpha": "float"},
        family="matmul",
        vjp=(_addmm_vjp_input, _addmm_vjp_m1, _addmm_vjp_m2),
        saves=(1, 2),
        reads=((), (2,), (1,)),
        samples=_samples_fn,
        doc=_doc,
        onnx=R.addmm if _name == "addmm" else R.baddbmm,
    )
