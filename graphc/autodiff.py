"""Symbolic reverse mode: graph in, gradient graph out.

``backprop`` walks the traced graph backwards from an output and applies each
op's VJP rule -- the same rule eager's tape runs -- to Tracers, so the
gradient is emitted as ordinary graph nodes (role ``backward``) that later
stages optimize and compile like any other.  Because gradients are graphs,
differentiating them again (``grad(grad(f))``) is the same walk.

On top of it:

* what ``grad``, ``value_and_grad`` and ``vjp`` do inside a trace (the transforms
  themselves, which compile outside one, are ``graphc.transforms``, a layer up);
* ``Tracer.backward()``: the seeds' ``loss.backward()`` inside a traced
  function, accumulating into ``.grad`` of traced leaves;
* ``grad_graph``: ``Graph.grad(wrt=...)`` on an existing graph.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

import eager
from eager.interop import (
    data_of,
    grad_of,
    requires_grad_of,
    set_grad,
    set_requires_grad_flag,
    sum_to,
)
from eager.interop import OPS

from .pytree import flatten, leaf_paths, unflatten
from .tracer import TraceContext, Tracer, _check_live, arg_names
from .tracer.body import trace_body
from .ir.loops import LOOP_OPS, STRUCT_OPS, operand_groups
from .errors import GraphcError, TracerError
from .layout import c_layout
from .ir import Graph, verify


def _tracer_for(ctx: TraceContext, nid: int) -> Tracer:
    d = ctx.graph.nx.nodes[nid]
    return Tracer(ctx, nid, d["shape"], d["dtype"])


def backprop(
    ctx: TraceContext, out: Tracer, wrt: Sequence[Tracer], cotangent: Optional[Tracer] = None
) -> list:
    """Gradients of ``out`` (times ``cotangent``) w.r.t. each tracer in ``wrt``.

    Returns a list with a Tracer, or None where ``out`` does not depend on it.
    """
    if cotangent is None:
        cotangent = out._wrap_const(np.ones(out._meta_shape, dtype=out._meta_dtype))
    return backprop_many(ctx, [(out, cotangent)], wrt)


def backprop_many(
    ctx: TraceContext, pairs: Sequence[tuple], wrt: Sequence[Tracer], by: str = "grad"
) -> list:
    """``backprop`` of several outputs at once: the gradient of ``sum((out * ct).sum())``
    over the ``(out, ct)`` pairs w.r.t. each tracer in ``wrt`` (None where no ``out``
    depends on it).  An output may appear more than once (its cotangents add up) and may
    itself be in ``wrt``.  Forward mode (graphc.forward) and the reverse loop of a
    ``scan`` (``_scan_vjp``) use it.

    Node ids of a traced graph increase along every edge, so descending ids is a
    reverse topological order; the walk is iterative.  A loop's results reach it through
    its ``loop_out`` nodes; its own rule (``_loop_vjp``) then emits a loop of its own.
    """
    g = ctx.graph.nx
    wrt_nodes = {w.node for w in wrt}
    # nodes between the wrt set and the outputs: ancestors of the outputs that descend
    # from wrt
    anc = {out.node for out, _ in pairs}
    stack = list(anc)
    while stack:
        n = stack.pop()
        for p in g.predecessors(n):
            if p not in anc:
                anc.add(p)
                stack.append(p)
    relevant = set()
    stack = [w for w in wrt_nodes if w in anc]
    relevant.update(stack)
    while stack:
        n = stack.pop()
        for s in g.successors(n):
            if s in anc and s not in relevant:
                relevant.add(s)
                stack.append(s)
    ct: dict = {}
    results: dict = {}
    loop_cts: dict = {}  # loop node -> {result index: cotangent}
    prev_role, prev_src, prev_by = ctx.role, ctx.src, ctx.by
    ctx.role, ctx.by = "backward", by
    try:
        with eager.no_grad():
            for out, cotangent in pairs:
                n = out.node
                if n in relevant:
                    ct[n] = cotangent if n not in ct else ct[n] + cotangent
            for nid in sorted(relevant, reverse=True):
                gout = ct.pop(nid, None)
                if gout is None:
                    continue
                if nid in wrt_nodes:
                    results[nid] = gout
                d = g.nodes[nid]
                op = d["op"]
                if op in ("input", "const"):
                    continue
                ctx.src = d.get("src", "")
                if op == "loop_out":
                    loop = d["operands"][0]
                    per = loop_cts.setdefault(loop, {})
                    j = d["attrs"]["index"]
                    per[j] = gout if j not in per else per[j] + gout
                    ct[loop] = True  # the loop's turn comes when the walk reaches it
                    continue
                if op in LOOP_OPS:
                    need = [o in relevant for o in d["operands"]]
                    grads = _loop_vjp(ctx, nid, loop_cts.pop(nid, {}), need)
                    for o, r in zip(d["operands"], grads):
                        if r is not None:
                            ct[o] = r if o not in ct else ct[o] + r
                    continue
                opdef = OPS[op]
                if opdef.vjp is None:
                    continue
                operands = [_tracer_for(ctx, o) for o in d["operands"]]
                out_t = _tracer_for(ctx, nid)
                for i, o in enumerate(d["operands"]):
                    if o not in relevant or i >= len(opdef.vjp) or opdef.vjp[i] is None:
                        continue
                    if np.dtype(g.nodes[o]["dtype"]).kind != "f":
                        continue
                    r = opdef.vjp[i](gout, out_t, *operands, **d["attrs"])
                    oshape = tuple(g.nodes[o]["shape"])
                    if tuple(r.shape) != oshape:
                        r = sum_to(r, oshape)
                    if r._npdtype != np.dtype(g.nodes[o]["dtype"]):
                        r = r.to(np.dtype(g.nodes[o]["dtype"]))
                    ct[o] = r if o not in ct else ct[o] + r
    finally:
        ctx.role, ctx.src, ctx.by = prev_role, prev_src, prev_by
    return [results.get(w.node) for w in wrt]


# ---------------------------------------------------------------------------
# reverse mode through loops


def _is_float(g, nid: int) -> bool:
    return np.dtype(g.nodes[nid]["dtype"]).kind == "f"


def _loop_vjp(ctx: TraceContext, nid: int, cts: dict, need: list) -> list:
    """Cotangents of a loop node's operands, given its results' (``cts``: index ->
    cotangent).  A ``scan`` gets a reverse ``scan`` (below); a ``while_loop`` has no
    reverse mode (its trip count is not known when the graph is built), as in JAX."""
    g = ctx.graph.nx
    d = g.nodes[nid]
    if d["op"] == "while":
        raise GraphcError(
            f"reverse-mode differentiation does not work for graphc.while_loop (at "
            f"{d.get('src') or 'an unknown line'}): its trip count is only known at run time. "
            "Use graphc.fori_loop with static (Python int) bounds or graphc.scan, whose "
            "trip count is static (as JAX requires)."
        )
    return _scan_vjp(ctx, nid, cts, need)


def _saved_carries(ctx: TraceContext, nid: int) -> list:
    """The carry each iteration of scan ``nid`` starts from, stacked (one tracer per
    carry, shape ``(length, *carry.shape)``): the forward loop outputs them as extra ys,
    so the backward loop reads them instead of running the forward again first.
    Returns (those tracers, the number of body outputs before them)."""
    memo = ctx.scan_saved
    if nid in memo:
        return memo[nid]
    g = ctx.graph
    d = g.nx.nodes[nid]
    a = d["attrs"]
    c, k = a["num_consts"], a["num_carry"]
    body = a["body"].copy()
    first = len(body.outputs)
    body.outputs = list(body.outputs) + body.inputs[c : c + k]
    a["body"] = body
    saved = []
    for j in range(k):
        m = body.nx.nodes[body.inputs[c + j]]
        shape, dtype = (a["length"],) + tuple(m["shape"]), m["dtype"]
        out = g.add_node(
            "loop_out",
            (nid,),
            {"index": first + j},
            shape=shape,
            dtype=dtype,
            src=d.get("src", ""),
            role="forward",
            by="grad",
        )
        saved.append(Tracer(ctx, out, shape, dtype))
    memo[nid] = (saved, first)
    return memo[nid]


def _scan_vjp(ctx: TraceContext, nid: int, cts: dict, need: list) -> list:
    """The reverse scan of scan ``nid``: iteration i (in the opposite order) recomputes the
    body from the saved carry i, pulls the carry's and y's cotangents back through it,
    passes the carry's on to iteration i - 1, stacks the xs' and sums the consts'."""
    g = ctx.graph.nx
    d = g.nodes[nid]
    a = d["attrs"]
    body = a["body"]
    c, k = a["num_consts"], a["num_carry"]
    groups = operand_groups(d)
    ops = list(d["operands"])
    saved, _ = _saved_carries(ctx, nid)
    # every y, the saved carries included (a second derivative sends cotangents to them)
    p = len(a["body"].outputs) - k
    consts = [_tracer_for(ctx, ops[i]) for i in groups["consts"]]
    inits = [_tracer_for(ctx, ops[i]) for i in groups["carries"]]
    xs = [_tracer_for(ctx, ops[i]) for i in groups["xs"]]
    fc = [j for j in range(k) if _is_float(g, ops[c + j])]  # carries with a cotangent
    nc = [i for i in range(c) if need[i] and _is_float(g, ops[i])]  # consts to differentiate
    nx_ = [m for m in range(len(xs)) if need[c + k + m] and _is_float(g, ops[c + k + m])]
    py = [q for q in range(p) if (k + q) in cts]  # ys with a cotangent
    body = a["body"]  # (now with the saved carries as extra outputs)
    ct_final = [cts[j] if j in cts else inits[j].zeros_like_() for j in fc]
    acc0 = [consts[i].zeros_like_() for i in nc]
    bx = saved + xs + [cts[k + q] for q in py]  # the backward loop's xs

    def bwd(ins: list):
        bctx = ins[0]._ctx if ins else None
        ct_c = ins[: len(fc)]
        acc = ins[len(fc) : len(fc) + len(nc)]
        rest = ins[len(fc) + len(nc) :]
        carry_in, x_in, ct_y = rest[:k], rest[k : k + len(xs)], rest[k + len(xs) :]
        local = [_tracer_for(bctx, bctx.capture(t, "")) for t in consts]
        outs = replay(body, bctx, local + list(carry_in) + list(x_in))
        seeds = [(outs[j], ct_c[i]) for i, j in enumerate(fc)]
        seeds += [(outs[k + q], ct_y[i]) for i, q in enumerate(py)]
        wrt = [carry_in[j] for j in fc] + [local[i] for i in nc] + [x_in[m] for m in nx_]
        grads = backprop_many(bctx, seeds, wrt)
        grads = [gr if gr is not None else w.zeros_like_() for gr, w in zip(grads, wrt)]
        new_c = grads[: len(fc)]
        new_acc = [s + gr for s, gr in zip(acc, grads[len(fc) : len(fc) + len(nc)])]
        return new_c + new_acc + grads[len(fc) + len(nc) :]

    specs = [
        (f"ct_carry{j}", tuple(t._meta_shape), t._meta_dtype, False) for j, t in zip(fc, ct_final)
    ]
    specs += [
        (f"ct_const{i}", tuple(t._meta_shape), t._meta_dtype, False) for i, t in zip(nc, acc0)
    ]
    specs += [
        (f"carry{j}", tuple(t._meta_shape[1:]), t._meta_dtype, False) for j, t in enumerate(saved)
    ]
    specs += [(f"x{m}", tuple(t._meta_shape[1:]), t._meta_dtype, False) for m, t in enumerate(xs)]
    specs += [
        (f"ct_y{q}", tuple(cts[k + q]._meta_shape[1:]), cts[k + q]._meta_dtype, False) for q in py
    ]
    ncarry = len(fc) + len(nc)
    bg, captured, _ = trace_body(
        ctx, f"{body.name}_vjp", bwd, specs, lambda r: list(r), role="backward"
    )
    operands = [t.node for t in captured] + [t.node for t in ct_final + acc0 + bx]
    loop = ctx.graph.add_node(
        "scan",
        operands,
        {
            "body": bg,
            "length": a["length"],
            "reverse": not a["reverse"],
            "num_consts": len(captured),
            "num_carry": ncarry,
        },
        src=d.get("src", ""),
        role="backward",
        by="grad",
    )
    res = []
    metas = [(tuple(t._meta_shape), t._meta_dtype) for t in ct_final + acc0]
    metas += [((a["length"],) + tuple(xs[m]._meta_shape[1:]), xs[m]._meta_dtype) for m in nx_]
    for j, (shape, dtype) in enumerate(metas):
        o = ctx.graph.add_node(
            "loop_out",
            (loop,),
            {"index": j},
            shape=shape,
            dtype=dtype,
            src=d.get("src", ""),
            role="backward",
            by="grad",
        )
        res.append(Tracer(ctx, o, shape, dtype))
    grads: list = [None] * len(ops)
    for i, j in enumerate(fc):
        if need[c + j]:
            grads[c + j] = res[i]
    for i, ci in enumerate(nc):
        grads[ci] = res[len(fc) + i]
    for i, m in enumerate(nx_):
        grads[c + k + m] = res[ncarry + i]
    return grads


# ---------------------------------------------------------------------------
# loss.backward() inside a trace


def traced_backward(loss: Tracer, gradient: Any = None, create_graph: bool = False) -> None:
    """``loss.backward()`` on a traced value: accumulate into ``.grad`` of traced leaves.

    As eager (and PyTorch's AccumulateGrad) does: a leaf's first gradient becomes a
    buffer of its own; a later one is added into the existing ``.grad`` in place, so
    every reference to that ``.grad`` (``g = p.grad`` before a second backward, a view
    of it) sees the sum; with ``create_graph`` the sum is a new tensor."""
    ctx = loss._ctx
    _check_live(loss, "backward")
    if ctx.parent is not None:
        raise TracerError(
            f"backward() inside {getattr(ctx, 'what', 'a nested trace')} {ctx.fn_name}: "
            "it runs once per iteration (or example) eagerly, accumulating into .grad each "
            "time, which the traced body cannot do. Return the loss from the loop (as a y "
            "or in the carry) and call backward() on its total outside, or use "
            "graphc.grad / eager.autograd.grad inside the body."
        )
    ctx.grads_used = True
    if gradient is None:
        if loss.numel() != 1:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        ct = None
    else:
        ct = (
            gradient
            if isinstance(gradient, Tracer)
            else loss._wrap_const(
                np.asarray(
                    data_of(gradient) if isinstance(gradient, eager.Tensor) else gradient,
                    dtype=loss._meta_dtype,
                )
            )
        )
    if ctx.closed_rg:
        import networkx as nx

        used = nx.ancestors(ctx.graph.nx, loss.node) & ctx.closed_rg.keys()
        if used:
            srcs = ", ".join(sorted({ctx.closed_rg[n] for n in used}))
            raise TracerError(
                f"backward() while tracing {ctx.fn_name}: the loss depends on tensors that require "
                f"grad which graphc could not make inputs of the function (used at {srcs}): "
                "they are reached through an object graphc does not look into (only arguments, "
                "nn.Modules, closures, globals, defaults and lists/dicts of those are), so they "
                "were read as constants and their .grad cannot be filled. Pass them as arguments "
                "(a list or dict of tensors works) or keep them in an nn.Module."
            )
    if not requires_grad_of(loss):
        raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
    leaves = [t for t in ctx.leaves if requires_grad_of(t)]
    grads = backprop(ctx, loss, leaves, ct)
    with eager.no_grad():
        for t, gr in zip(leaves, grads):
            if gr is None:
                continue
            cur = grad_of(t)
            if cur is None:
                set_grad(t, _own_buffer(gr, t))
            elif create_graph or not isinstance(cur, Tracer) or cur._meta_shape != gr._meta_shape:
                set_grad(t, cur + gr)  # (eager: a new tensor, the old .grad kept as it was)
            else:
                cur.add_(gr)  # in place: who holds this .grad sees the sum, as eagerly


def _own_buffer(gr: Tracer, leaf: Tracer) -> Tracer:
    """A leaf's new ``.grad`` as eager makes it: a buffer of its own (eager's engine stores
    a fresh array), so a Tracer of its own on the same node.  An in-place write to it
    (``clip_grad_norm_``'s ``g.mul_``) then rebinds only this leaf's grad: not another
    leaf's grad that backprop gave the same value (``a + b``), and not refused as a
    possible alias of a backward intermediate (a reshape of a transposed product).

    Its layout is the one eager's engine gives it, PyTorch's layout contract
    (eager.autograd.engine._obeys): the leaf's own strides when the leaf is dense (C order
    for every contiguous parameter), else C order; whatever layout the backward value had
    (a broadcast, a transposed product).  So ``p.grad.view(-1)[i] = v`` writes the grad.
    Only a leaf whose layout the tracer does not follow leaves it unknown."""
    shape = leaf._meta_shape
    lay = leaf._lay
    if lay is not None:
        strides = lay[1]
        expect, dense = 1, True  # PyTorch's is_non_overlapping_and_dense, in elements
        for st, n in sorted((st, n) for st, n in zip(strides, shape) if n != 1):
            dense = dense and st == expect
            expect *= n
        if not dense or gr.numel() == 0 or strides == c_layout(shape)[1]:
            lay = c_layout(shape)
        else:  # a permuted dense leaf: its strides, in a buffer of the grad's own
            lay = (0, tuple(strides))
    own = Tracer(gr._ctx, gr.node, gr._meta_shape, gr._meta_dtype, lay)
    own._ng = gr._ng
    return own


def traced_grad(outs: tuple, ins: tuple, grad_outputs: tuple, allow_unused, materialize):
    """``eager.autograd.grad(outputs, inputs, ...)`` on traced values: the gradients as
    graph nodes (differentiable again, so ``create_graph`` is always in effect)."""
    for t in outs + ins:
        if not isinstance(t, Tracer):
            raise TypeError(
                "autograd.grad inside a traced function: outputs and inputs must all be "
                f"values of the trace, got {type(t).__name__}"
            )
    ctx = max((t._ctx for t in outs + ins), key=lambda c: c.depth)  # the innermost trace
    for t in ins:
        if not requires_grad_of(t):
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    # values of an enclosing trace (a weight a loop body reads) enter as the body's inputs
    outs = tuple(t if t._ctx is ctx else _tracer_for(ctx, ctx.capture(t, "")) for t in outs)
    ins = tuple(t if t._ctx is ctx else _tracer_for(ctx, ctx.capture(t, "")) for t in ins)
    pairs = []
    for i, out in enumerate(outs):
        g = grad_outputs[i] if i < len(grad_outputs) else None
        if g is None:
            if out.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            g = out._wrap_const(np.ones(out._meta_shape, dtype=out._meta_dtype))
        elif not isinstance(g, Tracer):
            arr = np.asarray(data_of(g) if isinstance(g, eager.Tensor) else g)
            g = out._wrap_const(arr.astype(out._meta_dtype))
        pairs.append((out, g))
    grads = backprop_many(ctx, pairs, list(ins))
    res = []
    for t, g in zip(ins, grads):
        if g is None:
            if materialize:
                with eager.no_grad():
                    g = t.zeros_like_()
            elif not allow_unused:
                raise RuntimeError(
                    "One of the differentiated Tensors appears to not have been used in the "
                    "graph. Set allow_unused=True if this is the desired behavior."
                )
        res.append(g)
    return tuple(res)


# ---------------------------------------------------------------------------
# what grad / value_and_grad / vjp (graphc.transforms) do inside a trace


def _find_ctx(args: tuple) -> Optional[TraceContext]:
    leaves, _ = flatten(args)
    for x in leaves:
        if isinstance(x, Tracer):
            return x._ctx
    return None


def _diff_leaves(ctx, args: tuple, nums: tuple, fname: str, fn: Callable) -> tuple:
    """Turn differentiated arguments into tracers of ``ctx``; return (args, [(i, td, leaves)])."""
    names = arg_names(fn, len(args))
    args = list(args)
    info = []
    for i in nums:
        leaves, td = flatten(args[i])
        paths = leaf_paths(td, names[i])
        new = []
        for k, x in enumerate(leaves):
            if not isinstance(x, Tracer):
                if isinstance(x, (int, float)) and not isinstance(x, bool):
                    raise TypeError(
                        f"{fname}: argument {i} ({paths[k]}) is a Python number, "
                        "which graphc treats as static; pass a float array to "
                        "differentiate it"
                    )
                arr = np.asarray(data_of(x) if isinstance(x, eager.Tensor) else x)
                nid = ctx.const(arr)
                x = Tracer(ctx, nid, arr.shape, arr.dtype)
            if x._npdtype.kind != "f":
                raise TypeError(
                    f"{fname}: argument {i} ({paths[k]}) has dtype "
                    f"{x._npdtype.name}; only floating-point inputs can be "
                    "differentiated -- convert it with .float()/.double() or leave it "
                    "out of argnums"
                )
            new.append(x)
        args[i] = unflatten(td, new)
        info.append((i, td, new))
    leaves = [x for _, _, new in info for x in new]
    if len({x.node for x in leaves}) < len(leaves) or any(
        ctx.graph[x.node]["op"] not in ("input", "const") for x in leaves
    ):
        # each differentiated leaf must be a root of its own: the same value passed twice,
        # or one computed from another (grad of f(x, 2 * x) inside a trace), would share
        # gradients (totals instead of partials); a copy of each is a fresh root
        info = [(i, td, [x.clone() for x in new]) for i, td, new in info]
        for i, td, new in info:
            args[i] = unflatten(td, new)
    return tuple(args), info


def call_with_leaves(fn: Callable, args: tuple, leaves: list, has_aux: bool, fname: str):
    """Run ``fn`` with the differentiated leaves requiring grad (eager's refusals of
    in-place writes to leaves apply); return (result, aux)."""
    marked = [x for x in leaves if not requires_grad_of(x)]
    for x in marked:
        set_requires_grad_flag(x, True)
    try:
        res = fn(*args)
    finally:
        for x in marked:
            set_requires_grad_flag(x, False)
    aux = None
    if has_aux:
        if not (isinstance(res, tuple) and len(res) == 2):
            raise TypeError(f"{fname}: has_aux=True requires fn to return (value, aux)")
        res, aux = res
    return res, aux


def _value_and_grad_traced(fn, args, nums, has_aux, fname, single):
    ctx = _find_ctx(args)
    args, info = _diff_leaves(ctx, args, nums, fname, fn)
    # the differentiated arguments require grad while fn runs, as eager's leaves would:
    # eager's refusals (in-place on a leaf, writes through .detach() or to unbind's
    # outputs, writes under no_grad) apply, instead of a gradient eager would not give
    res, aux = call_with_leaves(
        fn, args, [x for _, _, leaves in info for x in leaves], has_aux, fname
    )
    if not isinstance(res, Tracer):
        raise TypeError(f"{fname}: fn must return a traced scalar array, got {type(res).__name__}")
    if res.numel() != 1:
        raise TypeError(
            f"{fname}: fn must return a scalar (0-d or one element), got shape "
            f"{list(res.shape)}; for non-scalar outputs use graphc.vjp with a "
            "cotangent"
        )
    if res._npdtype.kind != "f":
        raise TypeError(f"{fname}: fn must return a floating-point scalar, got {res._npdtype.name}")
    flat = [x for _, _, leaves in info for x in leaves]
    grads = backprop(ctx, res, flat)
    out = []
    k = 0
    for i, td, leaves in info:
        gl = []
        for x in leaves:
            gr = grads[k]
            k += 1
            gl.append(gr if gr is not None else x.zeros_like_())
        out.append(unflatten(td, gl))
    return res, (out[0] if single else tuple(out)), aux


# ---------------------------------------------------------------------------
# Graph.grad


def replay(graph: Graph, ctx: TraceContext, inputs: Sequence[Tracer]) -> list:
    """Re-emit ``graph``'s nodes into the trace ``ctx`` with ``inputs``; return output tracers."""
    env = dict(zip(graph.inputs, inputs))
    prev_src, prev_role = ctx.src, ctx.role
    try:
        for nid in graph.topo_order():
            d = graph.nx.nodes[nid]
            if d["op"] == "input":
                continue
            if d["op"] == "const":
                v = d["attrs"]["value"]
                env[nid] = Tracer(ctx, ctx.const(v, d.get("src", "")), v.shape, v.dtype)
                continue
            ctx.src = d.get("src", "")
            ctx.role = d.get("role", "forward")
            ops = [env[o] for o in d["operands"]]
            if d["op"] in STRUCT_OPS:  # a loop (its body graph is shared, never mutated)
                ids = [t.node if t._ctx is ctx else ctx.capture(t, ctx.src) for t in ops]
                new = ctx.graph.add_node(
                    d["op"],
                    ids,
                    dict(d["attrs"]),
                    shape=d["shape"],
                    dtype=d["dtype"],
                    src=ctx.src,
                    role=ctx.role,
                    by=ctx.by,
                )
                env[nid] = Tracer(ctx, new, d["shape"], d["dtype"])
                continue
            env[nid] = ops[0]._apply(d["op"], "", tuple(ops), dict(d["attrs"]))
    finally:
        ctx.src, ctx.role = prev_src, prev_role
    return [env[o] for o in graph.outputs]


def grad_graph(graph: Graph, wrt: Optional[Sequence[int]] = None, output: int = 0) -> Graph:
    """A new graph computing (output value, d output / d each wrt input)."""
    if wrt is None:
        wrt = [i for i in graph.inputs if np.dtype(graph.nx.nodes[i]["dtype"]).kind == "f"]
    wrt = list(wrt)
    for w in wrt:
        if w not in graph.inputs:
            raise GraphcError(f"grad: wrt node %{w} is not an input of graph {graph.name!r}")
        if np.dtype(graph.nx.nodes[w]["dtype"]).kind != "f":
            raise TypeError(
                f"grad: input {graph.nx.nodes[w]['attrs']['name']!r} is not "
                "floating point and cannot be differentiated"
            )
    if not graph.outputs:
        raise GraphcError("grad: the graph has no outputs")
    new = Graph(f"{graph.name}_grad")
    ctx = TraceContext(new, new.name)
    ins = []
    for i in graph.inputs:
        d = graph.nx.nodes[i]
        nid = new.add_input(d["attrs"]["name"], d["shape"], d["dtype"])
        ins.append(Tracer(ctx, nid, d["shape"], d["dtype"]))
    outs = replay(graph, ctx, ins)
    out = outs[output]
    if out.numel() != 1:
        raise TypeError(
            f"grad: output {output} has shape {list(out.shape)}; differentiate a "
            "scalar output or use graphc.vjp with a cotangent"
        )
    pos = {nid: k for k, nid in enumerate(graph.inputs)}
    grads = backprop(ctx, out, [ins[pos[w]] for w in wrt])
    with eager.no_grad():
        grads = [gr if gr is not None else ins[pos[w]].zeros_like_() for gr, w in zip(grads, wrt)]
    new.outputs = [out.node] + [gr.node for gr in grads]
    new.meta["grad_of"] = graph.name
    ctx.active = False
    verify(new, "grad")
    return new


# ``Graph.grad`` and a traced ``loss.backward()`` are these functions: the IR and the
# tracer sit below autodiff and cannot import it
Graph._grad_graph = staticmethod(grad_graph)
Tracer._traced_backward = staticmethod(traced_backward)
Tracer._traced_grad = staticmethod(traced_grad)
