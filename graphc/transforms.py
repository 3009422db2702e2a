"""JAX-style transforms: ``grad``, ``value_and_grad`` and ``vjp``.

Each composes with ``graphc.compile`` and with itself: inside a trace it differentiates
symbolically (graphc.autodiff); called on concrete values it compiles the
differentiated function once per input signature (graphc.api).  This module is the API
layer's, above both.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

import eager
from eager.interop import data_of

from .api import compile as _compile
from .autodiff import _diff_leaves, _find_ctx, _value_and_grad_traced, backprop
from .pytree import unflatten
from .tracer import Tracer


def _argnums(argnums, n: int) -> tuple:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for a in nums:
        if not -n <= a < n:
            raise ValueError(f"argnums {a} is out of range for {n} positional arguments")
    return tuple(a % n for a in nums)


def value_and_grad(fn: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """``f -> (x -> (f(x), df/dx))``; composes with compile and with itself."""
    single = isinstance(argnums, int)
    fname = f"value_and_grad({getattr(fn, '__name__', 'fn')})"

    def traced(*args):
        nums = _argnums(argnums, len(args))
        value, g, aux = _value_and_grad_traced(fn, args, nums, has_aux, fname, single)
        return ((value, aux), g) if has_aux else (value, g)

    return _dual(traced, fname)


def grad(fn: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """``f -> df/dx`` for scalar-valued ``f`` (zeros for unused inputs, as in JAX)."""
    single = isinstance(argnums, int)
    fname = f"grad({getattr(fn, '__name__', 'fn')})"

    def traced(*args):
        nums = _argnums(argnums, len(args))
        value, g, aux = _value_and_grad_traced(fn, args, nums, has_aux, fname, single)
        return (g, aux) if has_aux else g

    return _dual(traced, fname)


def _dual(traced: Callable, fname: str) -> Callable:
    """Inside a trace call ``traced`` directly; outside, compile it per signature."""
    compiled = [None]

    def wrapper(*args):
        if _find_ctx(args) is not None:
            return traced(*args)
        if compiled[0] is None:
            compiled[0] = _compile(traced)
            compiled[0].__name__ = _ident(fname)
        return compiled[0](*args)

    wrapper.__name__ = _ident(fname)
    wrapper.__qualname__ = wrapper.__name__
    wrapper._graphc_traced = traced
    wrapper._graphc_compiled = compiled  # [CompiledFunction or None] (graphc.forward)
    return wrapper


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).strip("_")


def vjp(fn: Callable, *primals: Any) -> tuple:
    """``(fn(*primals), vjp_fn)`` where ``vjp_fn(cotangent)`` returns one gradient per primal."""
    fname = f"vjp({getattr(fn, '__name__', 'fn')})"
    n = len(primals)

    def traced_vjp(*args):
        ps, ct = args[:n], args[n]
        ctx = _find_ctx(args)
        ps, info = _diff_leaves(ctx, ps, tuple(range(n)), fname, fn)
        out = fn(*ps)
        if not isinstance(out, Tracer):
            raise TypeError(f"{fname}: fn must return a single array")
        if not isinstance(ct, Tracer):
            ct = out._wrap_const(
                np.asarray(
                    data_of(ct) if isinstance(ct, eager.Tensor) else ct, dtype=out._meta_dtype
                )
            )
        if tuple(ct.shape) != tuple(out.shape):
            raise ValueError(
                f"{fname}: cotangent shape {list(ct.shape)} does not match the "
                f"output shape {list(out.shape)}"
            )
        flat = [x for _, _, leaves in info for x in leaves]
        grads = backprop(ctx, out, flat, ct)
        res, k = [], 0
        for i, td, leaves in info:
            gl = []
            for x in leaves:
                gl.append(grads[k] if grads[k] is not None else x.zeros_like_())
                k += 1
            res.append(unflatten(td, gl))
        return tuple(res)

    if _find_ctx(primals) is not None:
        out = fn(*primals)
        return out, (lambda ct: traced_vjp(*primals, ct))
    fwd = _dual(lambda *a: fn(*a), f"{fname}_fwd")
    bwd = _dual(traced_vjp, fname)
    out = fwd(*primals)
    return out, (lambda ct: bwd(*primals, ct))
