"""Batching: re-emit a per-example graph into a trace with a batch axis (``graphc.vmap``).

``batch_replay`` walks a traced per-example graph in topological order (iteratively, as
``graphc.autodiff.replay`` does unbatched) and keeps, for each value, a tracer of the
enclosing trace and whether it is *batched*.  A batched value always has the batch axis
at position 0.  A node none of whose operands is batched is replayed unchanged (work
that does not depend on the batch is done once); a node with a batched operand goes
through its op's **batching rule**, which emits ordinary ops on tracers.

The rules live in ONE table, :data:`BATCHING`, keyed by op name (like the backend's
lowering table).  Entries are derived from the op record's family where the family
allows it (elementwise, reduce, argreduce, scan) and written where it does not (views,
matmul, indexing, conv/pool, joining); an op with no vectorized rule either runs a
*loop* over the batch (one per-example op per example, stacked; correct but O(batch)
nodes) or is *refused* with a reason.  ``tests/graphc/test_vmap.py`` checks every
registered op has an entry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from eager.interop import OPS, Meta, norm_axes

from .errors import GraphcError
from .ir import Graph
from .tracer import TraceContext, Tracer


@dataclass(frozen=True)
class BatchRule:
    """How one op is batched.  ``kind``: ``derived`` (from the op's family), ``written``
    (by hand), ``loop`` (a loop over the batch: ``reason`` says why there is no
    vectorized rule) or ``refused`` (``reason`` is the error's text).  ``fn(B, xs, bs,
    attrs, out)`` gets the batch size, the operand tracers, whether each is batched, the
    node's attrs and its per-example :class:`Meta`; it returns ``(tracer, batched)``."""

    op: str
    kind: str
    fn: Optional[Callable] = None
    reason: str = ""
    error: type = NotImplementedError


BATCHING: dict[str, BatchRule] = {}

#: IR-only ops that vmap does not batch yet (graphc.ir.graph.IR_OPS beyond input/const)
IR_REFUSED = {
    "while": "vmap of a graph holding a while loop is not supported yet (each example "
    "could need its own trip count); use graphc.fori_loop with static bounds or scan",
}
#: IR-only ops batch_replay batches itself (a scan becomes a scan of the batched body)
IR_WRITTEN = ("scan", "loop_out")


def _register(op: str, kind: str, fn: Optional[Callable] = None, reason: str = "", **kw) -> None:
    if op in BATCHING:
        raise ValueError(f"op {op!r} has two batching rules")
    BATCHING[op] = BatchRule(op, kind, fn, reason, **kw)


# ---------------------------------------------------------------------------
# emitting helpers (ordinary ops on tracers of the enclosing trace)


def _op(op: str, *xs: Tracer, **attrs) -> Tracer:
    return xs[0]._apply(op, "", tuple(xs), attrs)


def _const(like: Tracer, value) -> Tracer:
    arr = np.asarray(value)
    ctx = like._ctx
    return Tracer(ctx, ctx.const(arr, ctx.src or ""), arr.shape, arr.dtype)


def _reshape(x: Tracer, shape: tuple) -> Tracer:
    shape = tuple(int(s) for s in shape)
    return x if tuple(x.shape) == shape else _op("reshape", x, shape=shape)


def to_batched(x: Tracer, B: int) -> Tracer:
    """An unbatched value broadcast along a new leading batch axis of size ``B``."""
    s = tuple(x.shape)
    return _op("expand", _reshape(x, (1,) + s), shape=(B,) + s)


def _pad(x: Tracer, nd: int) -> Tracer:
    """A batched ``(B, *s)`` reshaped to ``(B, 1, ..., 1, *s)`` with ``nd`` per-example dims."""
    s = tuple(x.shape)
    return _reshape(x, (s[0],) + (1,) * (nd - (len(s) - 1)) + s[1:])


def moveaxis(x: Tracer, src: int, dst: int) -> Tracer:
    """``x`` with its axis ``src`` moved to ``dst`` (non-negative), as one transpose."""
    if src == dst:
        return x
    perm = [i for i in range(x.ndim) if i != src]
    perm.insert(dst, src)
    return _op("transpose", x, perm=tuple(perm))


def _all_batched(B: int, xs, bs) -> list:
    return [x if b else to_batched(x, B) for x, b in zip(xs, bs)]


# ---------------------------------------------------------------------------
# derived rules: one per family


def _elementwise(op: str) -> Callable:
    def rule(B, xs, bs, attrs, out):
        # per-example ranks align right; a batched operand gets 1s between its batch axis
        # and its dims so that the batch axis sits left of every unbatched operand's dims
        nd = max(x.ndim - b for x, b in zip(xs, bs))
        ys = [_pad(x, nd) if b else x for x, b in zip(xs, bs)]
        return _op(op, *ys, **attrs), True

    return rule


def _per_example_0d(op: str, x: Tracer, B: int, attrs: dict, key: str, value) -> Tracer:
    """An axis op on a 0-d per-example value: run it on ``(B, 1)`` along axis 1."""
    r = _op(op, _reshape(x, (B, 1)), **{**attrs, key: value})
    return _reshape(r, (B,))


def _reduce(op: str) -> Callable:
    def rule(B, xs, bs, attrs, out):
        (x,) = xs
        n = x.ndim - 1
        if n == 0:
            r = _op(op, _reshape(x, (B, 1)), **{**attrs, "axis": (1,), "keepdim": False})
            return _reshape(r, (B,)), True
        axes = norm_axes(attrs["axis"], n, op)
        return _op(op, x, **{**attrs, "axis": tuple(a + 1 for a in axes)}), True

    return rule


def _argreduce(op: str) -> Callable:
    def rule(B, xs, bs, attrs, out):
        (x,) = xs
        n = x.ndim - 1
        axis = attrs["axis"]
        if n == 0 or axis is None:
            # the index into the flattened example
            flat = _reshape(x, (B, math.prod(x.shape[1:])))
            r = _op(op, flat, **{**attrs, "axis": 1, "keepdim": False})
            return _reshape(r, (B,) + tuple(out.shape)), True
        axes = norm_axes(axis, n, op)
        if len(axes) != 1:
            return None
        a = axes[0] + 1
        return _op(op, x, **{**attrs, "axis": a if isinstance(axis, int) else (a,)}), True

    return rule


def _scan(op: str) -> Callable:
    def rule(B, xs, bs, attrs, out):
        ys = _all_batched(B, xs, bs)
        n = ys[0].ndim - 1
        if n == 0:
            r = _op(op, *[_reshape(y, (B, 1)) for y in ys], **{**attrs, "dim": 1})
            return _reshape(r, (B,)), True
        return _op(op, *ys, **{**attrs, "dim": attrs["dim"] % n + 1}), True

    return rule


_DERIVED = {"elementwise": _elementwise, "reduce": _reduce, "argreduce": _argreduce}
_DERIVED["scan"] = _scan


# ---------------------------------------------------------------------------
# written rules


def _reshape_rule(B, xs, bs, attrs, out):
    return _op("reshape", xs[0], shape=(B,) + tuple(attrs["shape"])), True


def _transpose_rule(B, xs, bs, attrs, out):
    perm = (0,) + tuple(p + 1 for p in attrs["perm"])
    return _op("transpose", xs[0], perm=perm), True


def _expand_rule(B, xs, bs, attrs, out):
    shape = tuple(attrs["shape"])
    return _op("expand", _pad(xs[0], len(shape)), shape=(B,) + shape), True


def _matmul_core(B, a, ba, b, bb, out_shape):
    """Batched ``a @ b`` (numpy's matmul semantics per example, 1-D operands included)."""
    ra, rb = a.ndim - ba, b.ndim - bb
    if ra == 1:  # (k,) -> (1, k); the 1 is dropped by the final reshape
        a = _reshape(a, tuple(a.shape[:-1]) + (1, a.shape[-1]))
        ra = 2
    if rb == 1:  # (k,) -> (k, 1)
        b = _reshape(b, tuple(b.shape) + (1,))
        rb = 2
    nd = max(ra, rb)
    if ba:
        a = _pad(a, nd)
    if bb:
        b = _pad(b, nd)
    if ba and not bb and rb == 2 and ra == 2 and a.ndim == 3:
        # (B, m, k) @ (k, n): one 2-D product of (B*m, k) by (k, n)
        m, k = a.shape[1], a.shape[2]
        r = _op("matmul", _reshape(a, (B * m, k)), b)
        return _reshape(r, (B,) + tuple(out_shape))
    if a.shape[-1] == 1 and a._npdtype == b._npdtype and a._npdtype.kind == "f":
        # a contraction over one element (per-example outer products, as the gradient of
        # x @ w for a single row x): an elementwise product, fused, instead of B products
        r = _op("mul", a, b)
    else:
        r = _op("matmul", a, b)
    return _reshape(r, (B,) + tuple(out_shape))


def _matmul_rule(B, xs, bs, attrs, out):
    return _matmul_core(B, xs[0], bs[0], xs[1], bs[1], out.shape), True


def _scaled_sum_rule(B, xs, bs, attrs, out):
    """addmm / baddbmm: ``beta * input + alpha * (m1 @ m2)``, as their forward computes it
    (alpha 0 ignores the product, beta 0 the input)."""
    inp, m1, m2 = xs
    bi, b1, b2 = bs
    beta, alpha = attrs["beta"], attrs["alpha"]
    dt = np.dtype(out.dtype)
    if alpha == 0:  # the product is ignored: zeros (NaN/inf in the matrices do not propagate)
        prod, bp = _const(m1, np.zeros(tuple(out.shape), dt)), False
    elif b1 or b2:
        prod, bp = _matmul_core(B, m1, b1, m2, b2, out.shape), True
    else:
        prod, bp = _op("matmul", m1, m2), False
    if alpha not in (0, 1):
        prod = _op("mul", prod, _const(prod, dt.type(alpha)))
    if beta == 0:  # the input is ignored
        return prod, bp
    add = inp if beta == 1 else _op("mul", inp, _const(inp, dt.type(beta)))
    if not (bi or bp):
        return _op("add", add, prod), False
    return _elementwise("add")(B, [add, prod], [bi, bp], {}, out)


def _cat_skipped(shape: tuple) -> bool:
    """PyTorch's legacy rule (eager.ops.joining.cat_skipped): cat skips 1-D empty operands."""
    return tuple(shape) == (0,)


def _cat_rule(B, xs, bs, attrs, out):
    shapes = [tuple(x.shape[1:]) if b else tuple(x.shape) for x, b in zip(xs, bs)]
    if any(_cat_skipped(s) or not s for s in shapes):
        return None  # PyTorch's legacy skip of 1-D empty operands, 0-d operands: loop
    return _op("cat", *_all_batched(B, xs, bs), dim=attrs["dim"] + 1), True


def _has_tensor_index(index) -> bool:
    return any(it[0] == "t" for it in index)


_FULL = ("s", None, None, None)


def _getitem_rule(B, xs, bs, attrs, out):
    index = attrs["index"]
    if _has_tensor_index(index) or any(bs[1:]):
        return None
    return _op("getitem", xs[0], index=(_FULL,) + tuple(index)), True


def _getitem_grad_rule(B, xs, bs, attrs, out):
    index = attrs["index"]
    if _has_tensor_index(index) or any(bs[1:]):
        return None
    return _op(
        "getitem_grad", xs[0], index=(_FULL,) + tuple(index), shape=(B,) + tuple(attrs["shape"])
    ), True


def _setitem_rule(B, xs, bs, attrs, out):
    index = attrs["index"]
    x, v = xs[0], xs[1]
    bx, bv = bs[0], bs[1]
    if len(index) == 1 and index[0][0] == "t":
        m = xs[2 + index[0][1]]
        bm = bs[2 + index[0][1]]
        if m._npdtype.kind == "b" and math.prod(v.shape[1:] if bv else v.shape) == 1:
            # x[mask] = scalar is where(mask, scalar, x) (the mask covers leading dims)
            nx_ = len(out.shape)
            mb = _pad(m, len(m.shape) - bm) if bm else m
            mb = _reshape(mb, tuple(mb.shape) + (1,) * (nx_ - (mb.ndim - bm)))
            vv = _reshape(v, (B,) + (1,) * nx_) if bv else _reshape(v, ())
            xb = x if bx else to_batched(x, B)
            return _op("where", mb, vv, xb), True
        return None
    if _has_tensor_index(index) or any(bs[2:]):
        return None
    xb = x if bx else to_batched(x, B)
    if bv:
        sel = OPS["getitem"].shape(Meta(out.shape, out.dtype), index=index).shape
        vs = tuple(v.shape[1:])
        while len(vs) > len(sel) and vs[0] == 1:  # numpy drops leading 1s of the value
            vs = vs[1:]
        v = _pad(_reshape(v, (B,) + vs), len(sel))
    return _op("setitem", xb, v, index=(_FULL,) + tuple(index)), True


def _gather_like(op: str, nin: int) -> Callable:
    def rule(B, xs, bs, attrs, out):
        if any((x.ndim - b) == 0 for x, b in zip(xs, bs)):
            return None  # 0-d operands count as 1-d: loop
        return _op(op, *_all_batched(B, xs, bs), **{**attrs, "dim": attrs["dim"] + 1}), True

    return rule


def _argsort_rule(B, xs, bs, attrs, out):
    (x,) = xs
    if x.ndim == 1:
        return _per_example_0d("argsort", x, B, attrs, "dim", 1), True
    return _op("argsort", x, **{**attrs, "dim": attrs["dim"] + 1}), True


def _fold_n(op: str, nbatched: int) -> Callable:
    """Ops over (N, C, H, W) / (C, H, W) images whose first ``nbatched`` operands carry the
    images and the others are shared (conv2d's weight): fold the batch into N."""

    def rule(B, xs, bs, attrs, out):
        if any(bs[nbatched:]):
            return None
        imgs = _all_batched(B, xs[:nbatched], bs[:nbatched])
        nd = imgs[0].ndim - 1
        if nd == 3:  # (C, H, W) per example: (B, C, H, W) is a batch of N = B images
            r = _op(op, *imgs, *xs[nbatched:], **attrs)
        elif nd == 4:
            folded = [_reshape(t, (B * t.shape[1],) + tuple(t.shape[2:])) for t in imgs]
            r = _op(op, *folded, *xs[nbatched:], **attrs)
        else:
            return None
        return _reshape(r, (B,) + tuple(out.shape)), True

    return rule


def _conv_input_grad_rule(B, xs, bs, attrs, out):
    g, w = xs
    if bs[1]:
        return None
    size = tuple(attrs["input_size"])
    if len(size) == 3:
        gs, size = g, (B,) + size
    elif len(size) == 4:
        gs, size = _reshape(g, (B * g.shape[1],) + tuple(g.shape[2:])), (B * size[0],) + size[1:]
    else:
        return None
    r = _op("conv2d_input_grad", gs, w, **{**attrs, "input_size": size})
    return _reshape(r, (B,) + tuple(out.shape)), True


_WRITTEN = {
    "reshape": _reshape_rule,
    "transpose": _transpose_rule,
    "expand": _expand_rule,
    "matmul": _matmul_rule,
    "addmm": _scaled_sum_rule,
    "baddbmm": _scaled_sum_rule,
    "cat": _cat_rule,
    "getitem": _getitem_rule,
    "getitem_grad": _getitem_grad_rule,
    "setitem": _setitem_rule,
    "gather": _gather_like("gather", 2),
    "scatter": _gather_like("scatter", 3),
    "scatter_add": _gather_like("scatter_add", 3),
    "argsort": _argsort_rule,
    "conv2d": _fold_n("conv2d", 1),
    "conv2d_input_grad": _conv_input_grad_rule,
    "max_pool2d": _fold_n("max_pool2d", 1),
    "max_pool2d_indices": _fold_n("max_pool2d_indices", 1),
    "max_pool2d_grad": _fold_n("max_pool2d_grad", 2),
    "max_pool2d_select": _fold_n("max_pool2d_select", 2),
}

#: ops with no vectorized rule at all: the loop over the batch, and why
_LOOPED = {
    "conv2d_weight_grad": "per-example weight gradients of a convolution (a grouped "
    "convolution would vectorize it); graphc loops over the batch",
}

_REFUSED = {
    "random": (
        "random numbers inside vmap: graphc's random ops draw from one implicit stream, and "
        "JAX's vmap needs explicit keys to say whether examples share draws; draw the "
        "numbers outside vmap (with the batch dimension) and pass them in",
        NotImplementedError,
    ),
}


def _build() -> None:
    for name in sorted(OPS):
        rec = OPS[name]
        if name in _WRITTEN:
            _register(name, "written", _WRITTEN[name])
        elif name in _LOOPED:
            _register(name, "loop", None, _LOOPED[name])
        elif rec.family in _DERIVED:
            _register(name, "derived", _DERIVED[rec.family](name))
        elif rec.family in _REFUSED:
            reason, err = _REFUSED[rec.family]
            _register(name, "refused", None, reason, error=err)
    for name, reason in IR_REFUSED.items():
        _register(name, "refused", None, reason)
    for name in IR_WRITTEN:  # batch_replay handles them: see _batch_scan
        _register(name, "written", None)


_build()


# ---------------------------------------------------------------------------
# the loop fallback


def _loop(op: str, B: int, xs, bs, attrs, out) -> Tracer:
    """``op`` once per example, stacked: the rule of ops no vectorized rule covers."""
    if B == 0:
        z = _const(xs[0], np.zeros((0,) + tuple(out.shape), out.dtype))
        return z
    parts = []
    for i in range(B):
        ys = [_op("getitem", x, index=(("i", i),)) if b else x for x, b in zip(xs, bs)]
        r = _op(op, *ys, **attrs)
        parts.append(_reshape(r, (1,) + tuple(out.shape)))
    return parts[0] if B == 1 else _op("cat", *parts, dim=0)


# ---------------------------------------------------------------------------
# the walk


def apply_rule(op: str, B: int, xs: list, bs: list, attrs: dict, out: Meta, src: str) -> Tracer:
    """Batch one node: its rule's result, batched (batch axis 0), checked against ``out``."""
    rule = BATCHING.get(op)
    if rule is None:
        raise NotImplementedError(
            f"vmap: op {op!r} (at {src or 'unknown source'}) has no batching rule; add one "
            "to graphc.batching.BATCHING"
        )
    if rule.kind == "refused":
        raise rule.error(f"vmap: op {op!r} at {src or 'unknown source'}: {rule.reason}")
    res = None
    if rule.fn is not None:
        res = rule.fn(B, xs, bs, attrs, out)
    if res is None:  # no rule, or the rule does not cover this case: a loop
        r = _loop(op, B, xs, bs, attrs, out)
    else:
        r, batched = res
        if not batched:
            r = to_batched(r, B)
    want = (B,) + tuple(out.shape)
    if tuple(r.shape) != want or r._npdtype != np.dtype(out.dtype):
        raise GraphcError(
            f"vmap: the batching rule of {op!r} (at {src}) gave {r._npdtype.name}{list(r.shape)}, "
            f"expected {np.dtype(out.dtype).name}{list(want)} (a bug in graphc.batching)"
        )
    return r


def _needed(graph: Graph) -> set:
    """The nodes the graph's outputs depend on (an iterative walk)."""
    g = graph.nx
    seen = set(graph.outputs)
    stack = list(seen)
    while stack:
        n = stack.pop()
        for p in g.nodes[n]["operands"]:
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return seen


def batch_replay(
    graph: Graph, ctx: TraceContext, inputs: Sequence[Tracer], batched: Sequence[bool], B: int
) -> list:
    """Re-emit ``graph`` into ``ctx`` with a batch axis of size ``B``.

    ``inputs`` are tracers of ``ctx`` for ``graph.inputs``; those flagged in ``batched``
    carry the batch axis at position 0.  Returns ``(tracer, batched)`` per output.
    """
    env: dict = {nid: (t, bool(b)) for nid, t, b in zip(graph.inputs, inputs, batched)}
    need = _needed(graph)
    order = [nid for nid in graph.topo_order() if nid in need and nid not in env]
    for nid in order:  # refusals first, before anything is emitted
        d = graph.nx.nodes[nid]
        rule = BATCHING.get(d["op"])
        if rule is not None and rule.kind == "refused":
            where = d.get("src", "") or "unknown source"
            raise rule.error(f"vmap: op {d['op']!r} at {where}: {rule.reason}")
    prev_src, prev_role = ctx.src, ctx.role
    try:
        for nid in order:
            d = graph.nx.nodes[nid]
            op = d["op"]
            src = d.get("src", "")
            if op == "const":
                v = d["attrs"]["value"]
                env[nid] = (Tracer(ctx, ctx.const(v, src), v.shape, v.dtype), False)
                continue
            if op == "input":
                raise GraphcError(f"vmap: input %{nid} of {graph.name!r} was given no value")
            ctx.src = src
            ctx.role = d.get("role", "forward")
            xs = [env[o][0] for o in d["operands"]]
            bs = [env[o][1] for o in d["operands"]]
            attrs = dict(d["attrs"])
            if op == "loop_out":  # one result of a loop batched just before
                env[nid] = env[d["operands"][0]][0][attrs["index"]]
                continue
            if op == "scan":
                env[nid] = (_batch_scan(ctx, d, xs, bs, B), any(bs))
                continue
            if not any(bs):
                env[nid] = (xs[0]._apply(op, "", tuple(xs), attrs), False)
            else:
                out = Meta(d["shape"], d["dtype"])
                env[nid] = (apply_rule(op, B, xs, bs, attrs, out, src), True)
    finally:
        ctx.src, ctx.role = prev_src, prev_role
    return [env[o] for o in graph.outputs]


# ---------------------------------------------------------------------------
# loops: a scan of the batched body


def _batched_flags(body: Graph, flags: list) -> list:
    """Which outputs of ``body`` depend on a batched input (an iterative walk; a loop
    nested in the body counts as batched when any operand is)."""
    env = dict(zip(body.inputs, flags))
    for nid in body.topo_order():
        if nid not in env:
            env[nid] = any(env[o] for o in body.nx.nodes[nid]["operands"])
    return [env[o] for o in body.outputs]


def _batch_scan(ctx: TraceContext, d: dict, xs: list, bs: list, B: int) -> list:
    """A scan with batched operands: the same loop over the body batched with the same
    rules (batch axis 0 of every batched carry and slice; batched xs/ys keep their
    time axis first inside the loop).  Carries become batched when the body makes them
    so (a fixed point).  Returns ``(tracer, batched)`` per result."""
    from .tracer.body import trace_body
    from .ir.loops import operand_groups

    a = d["attrs"]
    body, k = a["body"], a["num_carry"]
    groups = operand_groups(d)
    ci, ki, xi = list(groups["consts"]), list(groups["carries"]), list(groups["xs"])
    cflags = [bs[i] for i in ki]
    while True:  # carries a batched body output flows into are batched
        out = _batched_flags(body, [bs[i] for i in ci] + cflags + [bs[i] for i in xi])
        new = [c or o for c, o in zip(cflags, out[:k])]
        if new == cflags:
            break
        cflags = new
    carries = [to_batched(xs[i], B) if f and not bs[i] else xs[i] for i, f in zip(ki, cflags)]
    seqs = [moveaxis(xs[i], 0, 1) if bs[i] else xs[i] for i in xi]  # time axis first
    consts = [xs[i] for i in ci]
    specs = [(f"carry{j}", tuple(c.shape), c._npdtype, False) for j, c in enumerate(carries)]
    specs += [(f"x{m}", tuple(x.shape[1:]), x._npdtype, False) for m, x in enumerate(seqs)]
    y_flags: list = []
    src = d.get("src", "")

    def fn(ins: list):
        from eager.interop import TRACING

        bctx: Any = TRACING.tracer  # the body's trace (trace_body sets it)
        local = [_tracer_in(bctx, t, src) for t in consts]
        flags = [bs[i] for i in ci] + cflags + [bs[i] for i in xi]
        res = batch_replay(body, bctx, local + list(ins), flags, B)
        outs = []
        for j, (t, b) in enumerate(res):
            if j < k:
                outs.append(to_batched(t, B) if cflags[j] and not b else t)
            else:
                y_flags.append(b)
                outs.append(t)
        return outs

    g, captured, _ = trace_body(ctx, f"{body.name}_vmap", fn, specs, list, role=d["role"])
    loop = ctx.graph.add_node(
        "scan",
        [t.node for t in captured] + [t.node for t in carries + seqs],
        {
            "body": g,
            "length": a["length"],
            "reverse": a["reverse"],
            "num_consts": len(captured),
            "num_carry": k,
        },
        src=src,
        role=d["role"],
        by="vmap",
    )
    results = []
    for j, o in enumerate(g.outputs):
        m = g.nx.nodes[o]
        shape = tuple(m["shape"]) if j < k else (a["length"],) + tuple(m["shape"])
        nid = ctx.graph.add_node(
            "loop_out",
            (loop,),
            {"index": j},
            shape=shape,
            dtype=m["dtype"],
            src=src,
            role=d["role"],
            by="vmap",
        )
        t = Tracer(ctx, nid, shape, m["dtype"])
        if j < k:
            results.append((t, cflags[j]))
        elif y_flags[j - k]:
            results.append((moveaxis(t, 1, 0), True))  # (length, B, ...) -> (B, length, ...)
        else:
            results.append((t, False))
    return results


def _tracer_in(ctx: TraceContext, t: Tracer, src: str) -> Tracer:
    nid = t.node if t._ctx is ctx else ctx.capture(t, src)
    d = ctx.graph.nx.nodes[nid]
    return Tracer(ctx, nid, d["shape"], d["dtype"])
