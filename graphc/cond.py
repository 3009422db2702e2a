"""``graphc.cond`` and ``graphc.where``: a data-dependent choice that a trace can record.

Python's ``if`` on a traced value cannot be traced (the value is not known); these two
trace both sides and select, elementwise, so the choice happens at run time.  They need
only the tracer: the API re-exports them (``graphc.api.cond``) and ``graphc`` exports them.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

import eager
from eager.interop import TensorOps

from .pytree import flatten, unflatten
from .tracer import Tracer


def where(condition: Any, x: Any, y: Any):
    """Elementwise select, traced as one node (both sides are computed)."""
    return eager.where(condition, x, y)


def cond(pred: Any, true_fn: Callable, false_fn: Callable, *operands: Any):
    """Data-dependent choice: both branches are traced and run; the result is selected.

    With a concrete predicate (a Python bool, or eager/numpy values outside a
    trace) only the chosen branch runs.  Inside a trace both branches are
    computed and ``where(pred, true, false)`` picks each output leaf, so the
    branches must return the same structure, shapes and dtypes.  Gradients
    flow only through the selected branch.
    """
    if not isinstance(pred, Tracer):
        p = pred
        if isinstance(p, (TensorOps, np.ndarray)):
            if (p.numel() if isinstance(p, TensorOps) else p.size) != 1:
                raise ValueError("cond: pred must be a scalar (0-d or one element)")
            p = bool(p)
        return true_fn(*operands) if p else false_fn(*operands)
    if pred.numel() != 1:
        raise ValueError(f"cond: pred must be a scalar, got shape {list(pred.shape)}")
    if pred._npdtype.kind != "b":
        pred = pred != 0
    t_out = true_fn(*operands)
    f_out = false_fn(*operands)
    t_leaves, t_tree = flatten(t_out)
    f_leaves, f_tree = flatten(f_out)
    if t_tree != f_tree:
        raise TypeError(
            f"cond: true_fn returned structure {t_tree!r} but false_fn returned "
            f"{f_tree!r}; both branches must return the same structure"
        )
    out = []
    p = pred.reshape(())
    for k, (a, b) in enumerate(zip(t_leaves, f_leaves)):
        sa = tuple(a.shape) if hasattr(a, "shape") else np.shape(a)
        sb = tuple(b.shape) if hasattr(b, "shape") else np.shape(b)
        if sa != sb:
            raise TypeError(
                f"cond: output leaf {k} has shape {list(sa)} in true_fn but "
                f"{list(sb)} in false_fn; both branches must agree"
            )
        if isinstance(a, TensorOps) and isinstance(b, TensorOps) and a._npdtype != b._npdtype:
            raise TypeError(
                f"cond: output leaf {k} has dtype {a._npdtype} in true_fn but "
                f"{b._npdtype} in false_fn; both branches must agree"
            )
        out.append(eager.where(p, a, b))
    return unflatten(t_tree, out)
