"""JAX-style transforms: ``grad``, ``value_and_grad``, ``vjp`` and ``vmap``.

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

from eager.interop import TRACING

from .batching import batch_replay, moveaxis, to_batched
from .api import compile as _compile
from .autodiff import _diff_leaves, _find_ctx, _value_and_grad_traced, backprop
from .ir import Graph
from .pytree import TreeDef, flatten, leaf_paths, unflatten
from .errors import TracerError
from .tracer import TraceContext, Tracer, arg_names
from .tracer.body import BodyContext, _tracer_of


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


# ---------------------------------------------------------------------------
# vmap


def _prefix_axes(spec: Any, td: TreeDef, what: str, full: Any) -> list:
    """One axis (int or None) per leaf of ``td``: ``spec`` is a tree prefix of it."""
    if spec is None or (isinstance(spec, int) and not isinstance(spec, bool)):
        return [spec] * td.num_leaves
    kinds = {tuple: ("tuple", "namedtuple"), list: ("list",), dict: ("dict",)}
    ok = type(spec) in kinds and td.kind in kinds[type(spec)]
    if ok and td.kind == "dict":
        ok = set(spec) == set(td.aux)
        spec = [spec[k] for k in td.aux] if ok else spec
    elif ok:
        ok = len(spec) == len(td.children)
    if not ok:
        if type(spec) not in kinds:
            raise ValueError(
                f"vmap {what} must be an int, None, or (nested) container with those types "
                f"as leaves, but got {full!r}."
            )
        raise ValueError(
            f"vmap {what} specification must be a tree prefix of the corresponding value, "
            f"got specification {full!r} for value tree {td!r}."
        )
    out: list = []
    for s, c in zip(spec, td.children):
        out.extend(_prefix_axes(s, c, what, full))
    return out


def _type_str(x: Any) -> str:
    shape = tuple(x.shape) if hasattr(x, "shape") else np.shape(x)
    dt = x._npdtype if isinstance(x, Tracer) else np.asarray(x).dtype
    if isinstance(x, eager.Tensor):
        dt = data_of(x).dtype
    return f"{np.dtype(dt).name}[{','.join(str(d) for d in shape)}]"


def _is_array(x: Any) -> bool:
    return isinstance(x, (Tracer, eager.Tensor, np.ndarray, np.generic))


def _current_ctx(args: tuple):
    """The innermost trace in progress: the arguments' or, inside a vmapped function,
    the per-example trace (whose function may be handed values of enclosing traces)."""
    ctx = _find_ctx(args)
    cur = TRACING.tracer
    if isinstance(cur, TraceContext) and cur.active:
        if ctx is None or cur is ctx or cur.nested_in(ctx):  # the innermost trace
            return cur
    return ctx


def _vmap_traced(fn, args, in_axes, out_axes, axis_size, fname):
    ctx = _current_ctx(args)
    n = len(args)
    names = arg_names(fn, n)
    if isinstance(in_axes, list):  # a top-level list is taken as the tuple (as JAX does)
        in_axes = tuple(in_axes)
    if isinstance(in_axes, tuple) and len(in_axes) != n:
        raise ValueError(
            "vmap in_axes must be an int, None, or a tuple of entries corresponding to the "
            f"positional arguments passed to the function, but got len(in_axes)={len(in_axes)}, "
            f"len(args)={n}"
        )
    specs = in_axes if isinstance(in_axes, tuple) else (in_axes,) * n
    leaves, paths, axes, tds = [], [], [], []
    for i, a in enumerate(args):
        lv, td = flatten(a)
        ax = _prefix_axes(specs[i], td, "in_axes", in_axes)
        leaves.extend(lv)
        paths.extend(leaf_paths(td, names[i]))
        axes.extend(ax)
        tds.append(td)
    # the mapped axes: normalized, checked, one size
    sizes = []
    for k, (x, ax) in enumerate(zip(leaves, axes)):
        if ax is None:
            continue
        nd = len(x.shape) if hasattr(x, "shape") else np.ndim(x)
        if not _is_array(x) or nd == 0 or not -nd <= ax < nd:
            shape = tuple(x.shape) if hasattr(x, "shape") else tuple(np.shape(x))
            raise ValueError(
                f"vmap was requested to map its argument along axis {ax}, which implies that "
                f"its rank should be at least {ax + 1 if ax >= 0 else -ax}, but is only {nd} "
                f"(its shape is {shape}); argument {paths[k]}"
            )
        axes[k] = ax % nd
        sizes.append((int(x.shape[axes[k]]), k))
    if not sizes and axis_size is None:
        raise ValueError("vmap must have at least one non-None value in in_axes")
    got = {s for s, _ in sizes}
    if axis_size is not None:
        got.add(int(axis_size))
    if len(got) > 1:
        lines = [
            f"  * one axis had size {s}: axis {axes[k]} of argument {paths[k]} of type "
            f"{_type_str(leaves[k])}"
            for s, k in sizes
        ]
        if axis_size is not None:
            lines.insert(0, f"  * the axis_size argument was {axis_size}")
        raise ValueError(
            "vmap got inconsistent sizes for array axes to be mapped:\n" + ";\n".join(lines)
        )
    B = got.pop()
    # the per-example function, traced into a graph of its own
    inner = Graph(_ident(fname) or "vmap")
    # values of enclosing traces the function reads are captured as unbatched inputs
    # (graphc.tracer.body, as loop bodies capture theirs)
    ictx = BodyContext(inner, inner.name, ctx, what="the function vmap maps")
    outer_in, batched, call_leaves = [], [], []
    for k, (x, ax) in enumerate(zip(leaves, axes)):
        if not _is_array(x):
            call_leaves.append(x)  # static: Python numbers and other objects pass through
            continue
        if not isinstance(x, Tracer):
            arr = np.asarray(data_of(x) if isinstance(x, eager.Tensor) else x)
            x = Tracer(ctx, ctx.const(arr), arr.shape, arr.dtype)
        elif x._ctx is not ctx:  # a value of an enclosing trace, passed in
            x = _tracer_of(ctx, ctx.capture(x, fname))
        if ax is not None:
            x = moveaxis(x, ax, 0)
        shape = tuple(x.shape[1:]) if ax is not None else tuple(x.shape)
        nid = inner.add_input(_ident(paths[k]) or f"in{k}", shape, x._npdtype)
        ictx.input_paths[nid] = paths[k]
        t = Tracer(ictx, nid, shape, x._npdtype)
        outer_in.append(x)
        batched.append(ax is not None)
        call_leaves.append(t)
    call_args, pos = [], 0
    for td in tds:
        call_args.append(unflatten(td, call_leaves[pos : pos + td.num_leaves]))
        pos += td.num_leaves
    in_tracers = [t for t in call_leaves if isinstance(t, Tracer)]
    before = [t.node for t in in_tracers]
    prev, prev_inner = TRACING.tracer, ctx.inner
    try:
        TRACING.tracer = ictx  # eager's factories (eager.zeros & co.) give values of it
        ctx.inner = ictx  # the enclosing trace's values are read-only meanwhile
        out = fn(*call_args)
    except BaseException:
        ictx.active = False
        raise
    finally:
        TRACING.tracer = prev
        ctx.inner = prev_inner
    for t, b, p in zip(
        in_tracers, before, [p for p, x in zip(paths, call_leaves) if isinstance(x, Tracer)]
    ):
        if t.node != b:
            ictx.active = False
            raise NotImplementedError(
                f"{fname}: the function wrote in place into its argument {p}; vmap does not "
                "support in-place writes to arguments (return the new value instead)"
            )
    out_leaves, out_td = flatten(out)
    out_ids = []
    for k, leaf in enumerate(out_leaves):
        if isinstance(leaf, Tracer):
            try:  # a closed-over value returned as it is: an unbatched output
                out_ids.append(ictx.capture(leaf, f"{fname} output {k}"))
            except TracerError:
                ictx.active = False
                raise
        elif _is_array(leaf) or isinstance(leaf, (int, float, bool)):
            arr = np.asarray(data_of(leaf) if isinstance(leaf, eager.Tensor) else leaf)
            out_ids.append(ictx.const(arr))
        else:
            ictx.active = False
            raise TypeError(
                f"{fname}: output {k} has type {type(leaf).__name__}, which is not an array"
            )
    inner.outputs = out_ids
    ictx.active = False
    outer_in += ictx.captured  # captured inputs follow the arguments' in inner.inputs
    batched += [False] * len(ictx.captured)
    res = batch_replay(inner, ctx, outer_in, batched, B)
    oaxes = _prefix_axes(out_axes, out_td, "out_axes", out_axes)
    final = []
    for k, ((t, b), oa) in enumerate(zip(res, oaxes)):
        if oa is None:
            if b:
                raise ValueError(f"vmap has mapped output (output {k}) but out_axes is None")
            final.append(t)
            continue
        if not b:
            t = to_batched(t, B)
        nd = t.ndim
        if not -nd <= oa < nd:
            raise ValueError(
                f"vmap out_axes {oa} is out of bounds for output {k} of rank {nd - 1} "
                f"(batched rank {nd})"
            )
        final.append(moveaxis(t, 0, oa % nd))
    return unflatten(out_td, final)


def vmap(fn: Callable, in_axes=0, out_axes=0, axis_size=None) -> Callable:
    """Vectorizing map, as ``jax.vmap``: ``vmap(f)(xs)`` is ``f`` applied to each slice of
    ``xs`` along the mapped axis, results stacked along ``out_axes``.

    ``in_axes``: an int, None (not mapped) or a tuple with one entry per positional
    argument, each a pytree prefix of its argument (negative axes count from the end);
    ``out_axes`` likewise for the output pytree; ``axis_size`` gives the size when no
    argument is mapped.  The per-example function is traced once into a graph of its own
    and re-emitted with a batch axis (graphc.batching), so it composes with ``grad``,
    ``compile`` and itself.  Outside a trace, the batched function is compiled once per
    input signature.  See docs/vmap.md.
    """
    fname = f"vmap({getattr(fn, '__name__', 'fn')})"
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)

    def traced(*args):
        return _vmap_traced(fn, args, in_axes, out_axes, axis_size, fname)

    wrapper = _dual(traced, fname)
    compiled = wrapper

    def vmapped(*args):
        if _current_ctx(args) is not None:
            return traced(*args)
        return compiled(*args)  # compiled once per input signature

    vmapped.__name__ = vmapped.__qualname__ = wrapper.__name__
    vmapped.__doc__ = getattr(fn, "__doc__", None)
    vmapped._graphc_traced = traced  # type: ignore[attr-defined]
    return vmapped
