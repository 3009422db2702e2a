"""Gradient checks: the analytical Jacobian (the tape) against finite differences.

``gradcheck`` builds the analytical Jacobian one row per output element, by
running ``eager.autograd.grad`` with a one-hot ``grad_outputs``, and the
numerical Jacobian one column per input element, by central differences
``(f(x + eps) - f(x - eps)) / (2 eps)``.  Both are compared elementwise with
``|a - n| <= atol + rtol * |n|``, as PyTorch does.  Two cheaper checks ride
along: every gradient must have its input's shape and dtype, and a backward
with a random ``grad_output`` must equal the matching combination of rows
(a rule must be linear in ``g``) and must give the same numbers when run
twice (``nondet_tol``: backward is reentrant).

``gradgradcheck`` applies ``gradcheck`` to the function
``(inputs, grad_outputs) -> grad(func(inputs), inputs, grad_outputs,
create_graph=True)``, so the tape recorded *while* differentiating is itself
checked: that is what makes second derivatives (and graphc's VJP-of-VJP) right.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .grad_mode import STATE as _STATE
from .engine import grad as _grad

__all__ = ["GradcheckError", "gradcheck", "gradgradcheck"]

_SHOW_LIMIT = 64  # show both Jacobians in the error when they have at most this many entries


class GradcheckError(RuntimeError):
    """The analytical gradient of a function disagrees with its finite differences."""


def _tensor_cls():
    from ..tensor import Tensor

    return Tensor


def _as_tuple(x) -> tuple:
    if isinstance(x, tuple):
        return x
    if isinstance(x, list):
        return tuple(x)
    return (x,)


def _float_outputs(outputs: tuple) -> list:
    """Indices of the outputs that can carry a gradient (floating-point tensors)."""
    Tensor = _tensor_cls()
    return [k for k, o in enumerate(outputs) if isinstance(o, Tensor) and o._data.dtype.kind == "f"]


def _fail(msg: str, raise_exception: bool) -> bool:
    if raise_exception:
        raise GradcheckError(msg)
    return False


def _show(a: np.ndarray) -> str:
    return np.array2string(a, precision=6, suppress_small=False, max_line_width=120)


def _numerical(
    func: Callable, inputs: tuple, diff: list, outs_idx: list, out_sizes: list, eps: float
) -> dict:
    """{(out k, input i): numerical Jacobian of shape (out numel, input numel)}."""
    Tensor = _tensor_cls()
    jac = {}
    for i in diff:
        x = inputs[i]
        base = np.array(x._data, copy=True)
        n = base.size
        cols = {k: np.zeros((out_sizes[k], n), dtype=np.float64) for k in outs_idx}
        for e in range(n):
            vals = []
            for sign in (1.0, -1.0):
                pert = base.copy()
                flat = pert.reshape(-1)
                flat[e] = flat[e] + sign * eps
                t = Tensor._make(pert)
                t._rg = x._rg
                args = list(inputs)
                args[i] = t
                outs = _as_tuple(func(*args))
                vals.append(
                    {k: np.asarray(outs[k]._data, dtype=np.float64).reshape(-1) for k in outs_idx}
                )
            for k in outs_idx:
                cols[k][:, e] = (vals[0][k] - vals[1][k]) / (2.0 * eps)
        for k in outs_idx:
            jac[(k, i)] = cols[k]
    return jac


def _backward(out, diff_inputs: list, g: np.ndarray) -> list:
    """d(out)/d(inputs) contracted with ``g``: one tensor per input (None where unused)."""
    Tensor = _tensor_cls()
    if not out._rg:
        return [None] * len(diff_inputs)
    grads = _grad(
        (out,), tuple(diff_inputs), (Tensor._make(g),), retain_graph=True, allow_unused=True
    )
    return list(grads)


def gradcheck(
    func: Callable[..., Any],
    inputs: Any,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
) -> bool:
    """Check ``func``'s gradients w.r.t. the inputs that require grad against finite differences.

    ``inputs`` is a tensor or a tuple; entries that are not tensors requiring
    grad are passed through unchanged.  Use float64 inputs: with float32 the
    finite differences are too noisy for the default tolerances (a UserWarning
    says so).  Returns True, or raises :class:`GradcheckError` (False with
    ``raise_exception=False``) naming the input, the output and the max error.
    """
    Tensor = _tensor_cls()
    inputs = _as_tuple(inputs)
    diff = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x._rg]
    if not diff:
        raise ValueError(
            "gradcheck expects at least one input tensor to require gradient, but "
            "none of them have requires_grad=True."
        )
    for i in diff:
        if inputs[i]._data.dtype != np.float64:
            warnings.warn(
                f"Input #{i} requires gradient and is not a double precision floating "
                f"point tensor (it is {inputs[i].dtype}). This check will likely fail "
                "unless all inputs are float64.",
                UserWarning,
                stacklevel=2,
            )
    if not _STATE.enabled:
        raise RuntimeError("gradcheck needs grad mode: call it outside of eager.no_grad()")

    outputs = _as_tuple(func(*inputs))
    outs_idx = _float_outputs(outputs)
    out_sizes = {k: outputs[k]._data.size for k in outs_idx}
    diff_inputs = [inputs[i] for i in diff]
    rng = np.random.default_rng(0)

    analytical = {}
    for k in outs_idx:
        out = outputs[k]
        rows, msg = _analytical_rows(out, k, inputs, diff, diff_inputs)
        if msg is not None:
            return _fail(msg, raise_exception)
        for i in diff:
            analytical[(k, i)] = rows[i]
        if out._rg and out_sizes[k]:
            msg = _linear_and_reentrant(
                out, k, inputs, diff, diff_inputs, analytical, rng, nondet_tol, rtol, atol
            )
            if msg is not None:
                return _fail(msg, raise_exception)

    numerical = _numerical(func, inputs, diff, outs_idx, out_sizes, eps)
    msg = _jacobian_mismatch(analytical, numerical, outs_idx, diff, eps, atol, rtol)
    if msg is not None:
        return _fail(msg, raise_exception)
    return True


def _analytical_rows(out, k: int, inputs: tuple, diff: list, diff_inputs: list) -> tuple:
    """The analytical Jacobian of output ``k``, one row per output element (input index
    -> rows), checking each gradient's shape and dtype on the way: (rows, None), or
    (None, what is wrong)."""
    rows = {i: np.zeros((out._data.size, inputs[i]._data.size)) for i in diff}
    probes = [np.zeros(out.shape, dtype=out._data.dtype)]  # also covers size-0 outputs
    for r in range(out._data.size):
        onehot = np.zeros(out._data.size, dtype=out._data.dtype)
        onehot[r] = 1
        probes.append(onehot.reshape(out.shape))
    for r, g in enumerate(probes):
        grads = _backward(out, diff_inputs, g)
        for i, gi in zip(diff, grads):
            if gi is None:
                continue
            x = inputs[i]
            if tuple(gi.shape) != tuple(x.shape):
                return None, (
                    f"Gradient for input {i} (w.r.t. output {k}) has shape "
                    f"{list(gi.shape)}, but the input has shape {list(x.shape)}"
                )
            if gi._data.dtype != x._data.dtype:
                return None, (
                    f"Gradient for input {i} (w.r.t. output {k}) has dtype "
                    f"{gi.dtype}, but the input has dtype {x.dtype}"
                )
            if r:
                rows[i][r - 1] = gi._data.reshape(-1)
    return rows, None


def _linear_and_reentrant(
    out,
    k: int,
    inputs: tuple,
    diff: list,
    diff_inputs: list,
    analytical: dict,
    rng,
    nondet_tol: float,
    rtol: float,
    atol: float,
) -> Optional[str]:
    """Backward of output ``k`` is linear in grad_output and reentrant (a random
    grad_output gives the same numbers twice, and the matching sum of the one-hot rows):
    None, or what is wrong."""
    v = rng.uniform(-1, 1, size=out.shape).astype(out._data.dtype)
    first = _backward(out, diff_inputs, v)
    second = _backward(out, diff_inputs, v)
    for i, g1, g2 in zip(diff, first, second):
        a1 = np.zeros(inputs[i]._data.size) if g1 is None else g1._data.reshape(-1)
        a2 = np.zeros(inputs[i]._data.size) if g2 is None else g2._data.reshape(-1)
        if a1.size and np.max(np.abs(a1 - a2)) > nondet_tol:
            return (
                f"Backward is not reentrant for output {k} w.r.t. input {i}: "
                "running backward with the same input and grad_output twice "
                f"gave values that differ by {np.max(np.abs(a1 - a2)):.3g} "
                f"(nondet_tol={nondet_tol})"
            )
        combo = v.reshape(-1).astype(np.float64) @ analytical[(k, i)]
        if a1.size and not np.allclose(a1, combo, rtol=rtol, atol=atol):
            return (
                f"Backward is not linear in grad_output for output {k} w.r.t. "
                f"input {i}: a random grad_output gives {_show(a1)}, the sum of "
                f"the one-hot rows gives {_show(combo)}"
            )
    return None


def _jacobian_mismatch(
    analytical: dict,
    numerical: dict,
    outs_idx: list,
    diff: list,
    eps: float,
    atol: float,
    rtol: float,
) -> Optional[str]:
    """Compare the analytical and numerical Jacobians: None, or the first mismatch
    (its largest error, where, and both Jacobians when they are small)."""
    for k in outs_idx:
        for i in diff:
            a = analytical[(k, i)]
            n = numerical[(k, i)]
            if not a.size:
                continue
            bad = ~(np.abs(a - n) <= atol + rtol * np.abs(n))
            if bad.any():
                err = np.abs(a - n)
                err = np.where(np.isnan(err), np.inf, err)
                r, c = np.unravel_index(int(np.argmax(err)), err.shape)
                msg = (
                    f"Jacobian mismatch for output {k} with respect to input {i}: max error "
                    f"{err[r, c]:.6g} at output element {r}, input element {c} (analytical "
                    f"{a[r, c]:.8g}, numerical {n[r, c]:.8g}; atol={atol}, rtol={rtol}, "
                    f"eps={eps}); {int(bad.sum())} of {bad.size} entries differ"
                )
                if a.size <= _SHOW_LIMIT:
                    msg += f",\nnumerical:\n{_show(n)}\nanalytical:\n{_show(a)}"
                return msg
    return None


def gradgradcheck(
    func: Callable[..., Any],
    inputs: Any,
    grad_outputs: Optional[Sequence] = None,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
) -> bool:
    """Check second derivatives: gradcheck of ``grad(func(inputs), inputs, grad_outputs,
    create_graph=True)`` w.r.t. the inputs and the grad_outputs.

    Without ``grad_outputs``, random float64 ones (fixed seed) that require grad
    are made for every floating-point output.
    """
    Tensor = _tensor_cls()
    inputs = _as_tuple(inputs)
    diff = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x._rg]
    if not diff:
        raise ValueError(
            "gradgradcheck expects at least one input tensor to require gradient, but "
            "none of them have requires_grad=True."
        )
    outputs = _as_tuple(func(*inputs))
    outs_idx = [k for k in _float_outputs(outputs) if outputs[k]._rg]
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        grad_outputs = []
        for k in outs_idx:
            o = outputs[k]
            t = Tensor._make(rng.uniform(-1, 1, size=o.shape).astype(o._data.dtype))
            t._rg = True
            grad_outputs.append(t)
    grad_outputs = tuple(_as_tuple(grad_outputs))
    if len(grad_outputs) != len(outs_idx):
        raise ValueError(
            f"gradgradcheck: got {len(grad_outputs)} grad_outputs for {len(outs_idx)} "
            "differentiable outputs"
        )
    n_in = len(inputs)

    def first_derivative(*args):
        ins, gouts = args[:n_in], args[n_in:]
        outs = _as_tuple(func(*ins))
        keep = [k for k in _float_outputs(outs) if outs[k]._rg]
        wrt = tuple(ins[i] for i in diff)
        if not keep:
            return ()
        grads = _grad(
            tuple(outs[k] for k in keep),
            wrt,
            gouts[: len(keep)],
            create_graph=True,
            allow_unused=True,
        )
        return tuple(g for g in grads if g is not None)

    return gradcheck(
        first_derivative,
        inputs + grad_outputs,
        eps=eps,
        atol=atol,
        rtol=rtol,
        raise_exception=raise_exception,
        nondet_tol=nondet_tol,
    )
