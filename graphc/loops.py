"""``graphc.scan``, ``graphc.fori_loop`` and ``graphc.while_loop``: loops as single nodes.

They are JAX's ``lax.scan`` / ``fori_loop`` / ``while_loop`` (same names, argument order
and semantics).  Inside a trace the body is traced ONCE into a graph of its own
(graphc.tracer.body) and the loop becomes one ``scan``/``while`` node (graphc.ir.loops),
so compile time does not grow with the trip count; the backend runs the body's code in
a native loop.  Called with eager tensors or numpy arrays outside a trace, each runs as
a plain Python loop (eager's tape records it as usual), so the same function runs both
ways and ``graphc.compare`` can put them side by side.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

import eager
from eager.interop import TRACING, Tensor, data_of, default_float_dtype, requires_grad_of
from eager.interop import GRAD_MODE, set_requires_grad_flag

from .ir.text import type_str
from .pytree import flatten, leaf_paths, unflatten
from .tracer import TraceContext, Tracer
from .tracer.body import trace_body
from .layout import c_layout

__all__ = ["scan", "fori_loop", "while_loop"]


# ---------------------------------------------------------------------------
# helpers shared by the three loops


def _innermost(leaves: list) -> Optional[TraceContext]:
    """The trace the loop is recorded in: the deepest trace among the tracer leaves, else
    the trace running on this thread (a body that only closes over traced values)."""
    best = None
    for x in leaves:
        if isinstance(x, Tracer) and (best is None or x._ctx.depth > best.depth):
            best = x._ctx
    if best is None and isinstance(TRACING.tracer, TraceContext):
        best = TRACING.tracer
    if best is not None:
        while best.inner is not None:  # a loop traced inside a body being traced
            best = best.inner
    return best


def _as_array(x: Any, what: str, dtype: Any = None) -> Any:
    """A leaf as a tracer or numpy array; Python scalars take ``dtype`` or the defaults
    (bool, int64, the default float dtype)."""
    if isinstance(x, Tracer):
        return x
    if isinstance(x, Tensor):
        return data_of(x)
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, np.generic):  # a numpy scalar keeps its own dtype (np.int64(0) is no float)
        return np.asarray(x)
    if isinstance(x, (bool, int, float)):
        if dtype is None:
            dtype = (
                np.bool_
                if isinstance(x, bool)
                else np.int64
                if isinstance(x, int)
                else default_float_dtype()
            )
        return np.asarray(x, dtype=dtype)
    raise TypeError(
        f"{what} is a {type(x).__name__}; loop carries, xs and results must be arrays, "
        "tensors or Python numbers (in tuples, lists or dicts)"
    )


def _meta(x: Any) -> tuple:
    if isinstance(x, Tracer):
        return tuple(x._meta_shape), np.dtype(x._meta_dtype)
    return tuple(x.shape), np.dtype(x.dtype)


def _node_in(ctx: TraceContext, x: Any, src: str) -> int:
    """The node of ``ctx`` holding leaf ``x`` (captured if it is an enclosing trace's)."""
    if isinstance(x, Tracer):
        return x.node if x._ctx is ctx else ctx.capture(x, src)
    return ctx.const(np.asarray(x), src)


def _check_carry(fname: str, init_tree, init_metas: list, out: Any, paths: list) -> list:
    """The body's new carry as leaves of the init's structure and types."""
    leaves, tree = flatten(out)
    if tree != init_tree:
        raise TypeError(
            f"{fname}: the body function's carry output must have the same pytree structure as "
            f"the carry input, but the input is {init_tree!r} and the output is {tree!r}"
        )
    res = []
    for k, (leaf, (shape, dtype)) in enumerate(zip(leaves, init_metas)):
        leaf = _as_array(leaf, f"{fname}: carry output {paths[k]}", dtype)
        s, d = _meta(leaf)
        if (s, d) != (shape, dtype):
            raise TypeError(
                f"{fname}: the body function returns {paths[k]} as {type_str(s, d)} but the "
                f"carry input is {type_str(shape, dtype)}; a carry keeps its shape and dtype "
                "across iterations (cast it, e.g. .to(dtype), or change the initial value)"
            )
        res.append(leaf)
    return res


def _results(ctx: TraceContext, loop: int, metas: list, rg: bool) -> list:
    """A tracer per result of loop node ``loop`` (its ``loop_out`` nodes)."""
    out = []
    for j, (shape, dtype) in enumerate(metas):
        nid = ctx.graph.add_node(
            "loop_out",
            (loop,),
            {"index": j},
            shape=shape,
            dtype=dtype,
            src=ctx.graph.nx.nodes[loop]["src"],
            role=ctx.role,
            by=ctx.by,
        )
        t = Tracer(ctx, nid, shape, dtype, c_layout(shape))
        if rg and np.dtype(dtype).kind == "f":
            set_requires_grad_flag(t, True)
        out.append(t)
    return out


def _any_rg(leaves: list) -> bool:
    return GRAD_MODE.enabled and any(
        isinstance(x, (Tracer, Tensor)) and requires_grad_of(x) for x in leaves
    )


def _rg(x: Any) -> bool:
    return bool(GRAD_MODE.enabled and isinstance(x, Tracer) and requires_grad_of(x))


def _src() -> str:
    from .tracer import user_src

    return user_src(3)


# ---------------------------------------------------------------------------
# scan


def scan(
    f: Callable,
    init: Any,
    xs: Any = None,
    length: Optional[int] = None,
    reverse: bool = False,
    unroll: int = 1,
) -> tuple:
    """Loop ``f(carry, x) -> (carry, y)`` over the leading axis of ``xs``; returns
    ``(final carry, stacked ys)``, as ``jax.lax.scan``.

    ``init``, ``xs`` and the ys are pytrees of arrays; the carry keeps its structure,
    shapes and dtypes.  With ``xs=None`` give ``length``.  ``reverse=True`` runs from the
    last slice to the first (ys keep their positions).  ``unroll`` is accepted for JAX's
    signature and does not change results.  Traced, the loop is one node whose body is
    compiled once; eagerly it is a Python loop."""
    fname = "scan"
    x_leaves, x_tree = flatten(xs)
    c_leaves, c_tree = flatten(init)
    n = _scan_length(x_leaves, leaf_paths(x_tree, "xs"), length)
    if isinstance(unroll, bool) or not isinstance(unroll, int) or unroll < 1:
        if unroll is not True:
            raise ValueError(f"scan: unroll must be an int >= 1 or True, got {unroll!r}")
    ctx = _innermost(c_leaves + x_leaves)
    if ctx is None:
        return _scan_eager(f, init, xs, x_leaves, x_tree, n, reverse)
    src = _src()
    c_paths = leaf_paths(c_tree, "carry")
    x_paths = leaf_paths(x_tree, "xs")
    c_vals = [_as_array(x, f"scan: init {p}") for x, p in zip(c_leaves, c_paths)]
    x_vals = [_as_array(x, f"scan: xs {p}") for x, p in zip(x_leaves, x_paths)]
    c_metas = [_meta(x) for x in c_vals]
    x_metas = [_meta(x) for x in x_vals]
    # a carry (x slice) requires grad where its initial value (xs) does, as eagerly
    specs = [(p, s, d, _rg(x)) for p, (s, d), x in zip(c_paths, c_metas, c_vals)]
    specs += [(p + "[i]", s[1:], d, _rg(x)) for p, (s, d), x in zip(x_paths, x_metas, x_vals)]
    k = len(c_vals)
    y_info: dict = {}

    def body(ins: list):
        carry = unflatten(c_tree, ins[:k])
        x = unflatten(x_tree, ins[k:])
        res = f(carry, x)
        if not (isinstance(res, (tuple, list)) and len(res) == 2):
            raise TypeError(
                f"scan: the body function must return a pair (carry, y), got {type(res).__name__}"
            )
        return res

    def leaves_of(res) -> list:
        new_c = _check_carry(fname, c_tree, c_metas, res[0], c_paths)
        y_leaves, y_tree = flatten(res[1])
        ys = [_as_array(y, f"scan: y {p}") for y, p in zip(y_leaves, leaf_paths(y_tree, "y"))]
        y_info["tree"], y_info["metas"] = y_tree, [_meta(y) for y in ys]
        return new_c + ys

    g, captured, _ = trace_body(ctx, _body_name(f, "scan"), body, specs, leaves_of)
    operands = [t.node for t in captured]
    operands += [_node_in(ctx, x, src) for x in c_vals + x_vals]
    loop = ctx.graph.add_node(
        "scan",
        operands,
        {
            "body": g,
            "length": n,
            "reverse": bool(reverse),
            "num_consts": len(captured),
            "num_carry": k,
        },
        src=src,
        role=ctx.role,
        by=ctx.by,
    )
    metas = c_metas + [((n,) + s, d) for s, d in y_info["metas"]]
    outs = _results(ctx, loop, metas, _any_rg(captured + c_vals + x_vals))
    return unflatten(c_tree, outs[:k]), unflatten(y_info["tree"], outs[k:])


def _body_name(f: Callable, kind: str) -> str:
    name = getattr(f, "__name__", "body")
    name = "".join(c if c.isalnum() else "_" for c in name).strip("_") or "body"
    return f"{kind}_{name}" if name != "<lambda>" else f"{kind}_body"


def _scan_length(x_leaves: list, paths: list, length: Optional[int]) -> int:
    sizes = []
    for x, p in zip(x_leaves, paths):
        shape = tuple(x.shape) if hasattr(x, "shape") else np.shape(x)
        if len(shape) == 0:
            raise ValueError(f"scan: xs leaf {p} is 0-d; scan maps over the leading axis of xs")
        sizes.append((int(shape[0]), p))
    if length is not None:
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
            raise ValueError(f"scan: length must be an int >= 0, got {length!r}")
        length = int(length)
    found = {s for s, _ in sizes}
    if len(found) > 1 or (length is not None and found and found != {length}):
        desc = ", ".join(f"{p} has {s}" for s, p in sizes)
        extra = f" and length={length}" if length is not None else ""
        raise ValueError(
            f"scan got values with different leading axis sizes: {desc}{extra}; every xs "
            "leaf must have the same leading size"
        )
    if found:
        return found.pop()
    if length is None:
        raise ValueError("scan: with no xs to scan over, give length")
    return length


def _scan_eager(f, init, xs, x_leaves, x_tree, n, reverse):
    """The Python loop: the same semantics on eager tensors or numpy arrays."""
    carry = init
    ys_list: list = [None] * n
    order = range(n - 1, -1, -1) if reverse else range(n)
    for i in order:
        x = unflatten(x_tree, [leaf[i] for leaf in x_leaves])
        res = f(carry, x)
        if not (isinstance(res, (tuple, list)) and len(res) == 2):
            raise TypeError(
                f"scan: the body function must return a pair (carry, y), got {type(res).__name__}"
            )
        carry, ys_list[i] = res
    if n == 0:  # the ys' structure and types: one call on zero slices, its results dropped
        x = unflatten(x_tree, [_zeros_like_slice(leaf) for leaf in x_leaves])
        with eager.no_grad():
            _, y0 = f(carry, x)
        y_leaves, y_tree = flatten(y0)
        return carry, unflatten(y_tree, [_empty_stack(y) for y in y_leaves])
    per = [flatten(y) for y in ys_list]
    y_tree = per[0][1]
    stacked = []
    for j in range(len(per[0][0])):
        col = [p[0][j] for p in per]
        stacked.append(_stack(col))
    return carry, unflatten(y_tree, stacked)


def _stack(col: list):
    if any(isinstance(c, Tensor) for c in col):
        return eager.stack([c if isinstance(c, Tensor) else eager.as_tensor(c) for c in col])
    return np.stack([np.asarray(c) for c in col])


def _zeros_like_slice(leaf):
    if isinstance(leaf, Tensor):
        return eager.zeros(tuple(leaf.shape[1:]), dtype=leaf.dtype)
    a = np.asarray(leaf)
    return np.zeros(a.shape[1:], a.dtype)


def _empty_stack(y):
    if isinstance(y, Tensor):
        return eager.zeros((0,) + tuple(y.shape), dtype=y.dtype)
    a = np.asarray(y)
    return np.zeros((0,) + a.shape, a.dtype)


# ---------------------------------------------------------------------------
# fori_loop


def fori_loop(lower: Any, upper: Any, body_fun: Callable, init_val: Any) -> Any:
    """``for i in range(lower, upper): val = body_fun(i, val)``; returns ``val``, as
    ``jax.lax.fori_loop``.

    With Python int bounds the trip count is static and the loop is a ``scan`` (so it is
    differentiable in reverse mode); with traced bounds it is a ``while_loop`` (forward
    only).  Eagerly ``i`` is a Python int; traced it is an int64 0-d value."""
    static = all(
        isinstance(b, (int, np.integer)) and not isinstance(b, bool) for b in (lower, upper)
    )
    if static:
        lo, hi = int(lower), int(upper)
        leaves, _ = flatten(init_val)
        ctx = _innermost(leaves)
        if ctx is None:
            val = init_val
            for i in range(lo, hi):
                val = body_fun(i, val)
            return val

        def step(carry, _):
            i, v = carry
            return (i + 1, body_fun(i, v)), None

        (_, val), _ = scan(step, (np.asarray(lo, np.int64), init_val), None, length=max(hi - lo, 0))
        return val
    for name, b in (("lower", lower), ("upper", upper)):
        if isinstance(b, bool) or not isinstance(b, (int, np.integer, Tracer, Tensor, np.ndarray)):
            raise TypeError(f"fori_loop: {name} must be an int or an integer scalar, got {b!r}")
        if isinstance(b, (Tracer, Tensor, np.ndarray)):
            dt = (
                b._meta_dtype
                if isinstance(b, Tracer)
                else np.dtype(b.dtype if isinstance(b, np.ndarray) else data_of(b).dtype)
            )
            shp = tuple(b.shape)
            if dt.kind not in "iu" or shp != ():
                raise TypeError(
                    f"fori_loop: {name} must be an integer scalar, got {type_str(shp, dt)}"
                )

    def cond(c):
        return c[0] < c[1]

    def body(c):
        i, u, v = c
        return (i + 1, u, body_fun(i, v))

    lo_v: Any = lower if isinstance(lower, (Tracer, Tensor)) else np.asarray(lower, np.int64)
    hi_v: Any = upper if isinstance(upper, (Tracer, Tensor)) else np.asarray(upper, np.int64)
    return while_loop(cond, body, (lo_v, hi_v, init_val))[2]


# ---------------------------------------------------------------------------
# while_loop


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """``val = init_val; while cond_fun(val): val = body_fun(val)``; returns ``val``, as
    ``jax.lax.while_loop``.  ``cond_fun`` returns a boolean scalar.  Traced, the trip
    count is decided at run time; reverse-mode gradients through it raise (as in JAX):
    use ``fori_loop`` with static bounds or ``scan``."""
    c_leaves, c_tree = flatten(init_val)
    ctx = _innermost(c_leaves)
    if ctx is None:
        val = init_val
        while bool(cond_fun(val)):
            val = body_fun(val)
        return val
    src = _src()
    c_paths = leaf_paths(c_tree, "val")
    c_vals = [_as_array(x, f"while_loop: init_val {p}") for x, p in zip(c_leaves, c_paths)]
    c_metas = [_meta(x) for x in c_vals]
    specs = [(p, s, d, False) for p, (s, d) in zip(c_paths, c_metas)]

    def cond_leaves(res) -> list:
        r = _as_array(res, "while_loop: cond_fun's result", np.bool_)
        s, d = _meta(r)
        if s != () or d != np.dtype(bool):
            raise TypeError(
                f"while_loop: cond_fun must return a boolean scalar, but got {type_str(s, d)}"
            )
        return [r]

    cg, c_caps, _ = trace_body(
        ctx,
        _body_name(cond_fun, "cond"),
        lambda ins: cond_fun(unflatten(c_tree, ins)),
        specs,
        cond_leaves,
    )
    bg, b_caps, _ = trace_body(
        ctx,
        _body_name(body_fun, "while"),
        lambda ins: body_fun(unflatten(c_tree, ins)),
        specs,
        lambda res: _check_carry("while_loop", c_tree, c_metas, res, c_paths),
    )
    operands = [t.node for t in c_caps] + [t.node for t in b_caps]
    operands += [_node_in(ctx, x, src) for x in c_vals]
    loop = ctx.graph.add_node(
        "while",
        operands,
        {
            "cond": cg,
            "body": bg,
            "num_cond_consts": len(c_caps),
            "num_body_consts": len(b_caps),
            "num_carry": len(c_vals),
        },
        src=src,
        role=ctx.role,
        by=ctx.by,
    )
    outs = _results(ctx, loop, c_metas, _any_rg(b_caps + c_vals))
    return unflatten(c_tree, outs)
