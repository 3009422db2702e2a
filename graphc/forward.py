"""Forward mode and Jacobians: ``jvp``, ``linearize``, ``jacfwd``, ``jacrev``,
``jacobian`` and ``hessian`` (JAX's API and semantics).

There is no JVP rule per op: an op record's VJP is its only derivative rule
(eager/ops/registry.py).  Forward mode is *derived* from it by the double-VJP trick:
for ``y = f(x)`` the pullback ``g(u) = u^T J`` (the gradients ``backprop`` emits for
a cotangent ``u``) is linear in ``u``, so its own VJP at any ``u`` is ``t -> J t``,
the JVP.  Inside a trace that is two ``backprop`` walks: the first from the outputs
with a placeholder cotangent ``u`` (a fresh zeros node), the second from the first
one's gradients, seeded with the tangents, back to ``u``.  Nodes of the first
backward that the tangents do not need (everything that reads ``u``) are dead and
removed by DCE; what stays is the transpose of the backward, a forward-mode pass
over values the forward already computes (CSE shares them).

Jacobians stack one pullback per output element (``jacrev``) or one pushforward per
input element (``jacfwd``); each is a single per-basis function (``_pullback`` /
``_pushforward``) so that a vmap can later batch it.

Each transform inlines into an enclosing trace (another transform, a compiled
function) and, called on concrete values, compiles itself once per input signature
(graphc.transforms._dual), so they compose with each other, with ``grad`` /
``value_and_grad`` / ``vjp`` and with ``graphc.compile``.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Optional

import numpy as np

import eager
from eager.interop import data_of

from .autodiff import _diff_leaves, _find_ctx, backprop_many, call_with_leaves
from .errors import GraphcError
from .layout import c_layout
from .pytree import flatten, leaf_paths, unflatten
from .tracer import TraceContext, Tracer, arg_names
from .transforms import _argnums, _dual, _ident

__all__ = ["jvp", "linearize", "jacfwd", "jacrev", "jacobian", "hessian"]


def _name(kind: str, fn: Callable) -> str:
    return f"{kind}({getattr(fn, '__name__', 'fn')})"


# ---------------------------------------------------------------------------
# the core: a pullback and its transpose, the pushforward


def _const(ctx: TraceContext, arr: np.ndarray, by: str = "jvp") -> Tracer:
    """A new const node (never shared with another const of the same value)."""
    arr = np.asarray(arr)
    nid = ctx.graph.add_const(arr, src=ctx.src or "", role="backward", by=by)
    return Tracer(ctx, nid, arr.shape, arr.dtype, c_layout(arr.shape))


def _zeros(ctx: TraceContext, shape: tuple, dtype: np.dtype) -> Tracer:
    z = _const(ctx, np.zeros((), dtype))
    with eager.no_grad():
        return z.expand(shape) if shape else z


def _pullback(ctx: TraceContext, outs: list, ins: list) -> Callable:
    """``cts -> grads``: one reverse pass; ``cts`` aligned with ``outs`` (None: zero),
    the gradients aligned with ``ins`` (None where no output depends on the input)."""

    def pull(cts: list) -> list:
        pairs = [(o, c) for o, c in zip(outs, cts) if c is not None]
        if not pairs:
            return [None] * len(ins)
        return backprop_many(ctx, pairs, ins, by="jacrev")

    return pull


def _pushforward(ctx: TraceContext, outs: list, ins: list, fname: str) -> Callable:
    """``tangents -> output tangents`` by transposing the pullback (the double-VJP trick).

    The first reverse pass runs once, here, with a fresh placeholder cotangent per output;
    each call of the returned function is one more reverse pass, from the gradients to the
    placeholders.  ``tangents`` aligned with ``ins`` (None: zero); the result aligned with
    ``outs`` (zeros where an output does not depend on the inputs)."""
    us = [_zeros(ctx, o._meta_shape, o._meta_dtype) for o in outs]
    grads = backprop_many(ctx, list(zip(outs, us)), ins, by="jvp")
    u_nodes = {u.node for u in us}
    _check_transposable(ctx, u_nodes, [g for g in grads if g is not None], fname)

    def push(tangents: list) -> list:
        pairs = [(g, t) for g, t in zip(grads, tangents) if g is not None and t is not None]
        res = backprop_many(ctx, pairs, us, by="jvp") if pairs else [None] * len(us)
        found = [r for r in res if r is not None]
        if found and _reaches(ctx, [r.node for r in found], u_nodes):
            raise GraphcError(
                f"{fname}: the forward-mode derivative still depends on the reverse pass's "
                "placeholder cotangent, so some op's VJP rule is not linear in its cotangent; "
                "graphc derives forward mode from the VJP rules and cannot use it here (use "
                "graphc.vjp / jacrev instead)"
            )
        with eager.no_grad():
            return [
                r if r is not None else _zeros(ctx, o._meta_shape, o._meta_dtype)
                for r, o in zip(res, outs)
            ]

    return push


def _reaches(ctx: TraceContext, starts: list, targets: set) -> bool:
    """Does any node in ``starts`` depend on a node of ``targets``? (iterative walk)

    The walk does not enter a ``scan``: transposing a reverse loop makes a loop whose
    operands include the first pass's carries (values that depend on the placeholder, but
    that a linear transpose multiplies by nothing), so the dependency is structural only.
    Through a loop the check trusts the body's VJP rules, which the registry's tests
    check to second order."""
    g = ctx.graph.nx
    seen, stack = set(starts), list(starts)
    while stack:
        n = stack.pop()
        if n in targets:
            return True
        if g.nodes[n]["op"] == "scan":
            continue
        for p in g.predecessors(n):
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return False


def _check_transposable(ctx: TraceContext, u_nodes: set, grads: list, fname: str) -> None:
    """Every node of the first reverse pass between the placeholders and the gradients
    must have a VJP rule for each of its operands on that path, and carry floats: else
    the second pass would stop there and a tangent would be silently missing."""
    if not grads:
        return
    g = ctx.graph.nx
    anc = {x.node for x in grads}
    stack = list(anc)
    while stack:
        n = stack.pop()
        for p in g.predecessors(n):
            if p not in anc:
                anc.add(p)
                stack.append(p)
    from eager.interop import OPS

    # the first pass's nodes that read a placeholder: descendants of u among the
    # gradients' ancestors
    path = {u for u in u_nodes if u in anc}
    stack = list(path)
    while stack:
        n = stack.pop()
        for s in g.successors(n):
            if s in anc and s not in path:
                path.add(s)
                stack.append(s)
    for s in sorted(path - u_nodes):
        d = g.nodes[s]
        if d["op"] in ("scan", "loop_out"):  # reverse mode through a scan is a scan
            ok = d["op"] == "scan" or np.dtype(d["dtype"]).kind == "f"
            if not ok or any(
                np.dtype(g.nodes[o]["dtype"]).kind != "f"
                for o in d["operands"]
                if o in path and d["op"] == "scan"
            ):
                raise GraphcError(
                    f"{fname}: forward mode through the loop at {d.get('src') or '?'} needs "
                    "floating-point values on the differentiated path"
                )
            continue
        if d["op"] == "while":
            raise GraphcError(
                f"{fname}: forward mode is derived from reverse mode, which graphc.while_loop "
                f"(at {d.get('src') or '?'}) does not have; use graphc.fori_loop with static "
                "bounds or graphc.scan"
            )
        op = OPS[d["op"]]
        for i, o in enumerate(d["operands"]):
            if o not in path:
                continue
            ok = (
                op.vjp is not None
                and i < len(op.vjp)
                and op.vjp[i] is not None
                and np.dtype(g.nodes[o]["dtype"]).kind == "f"
                and np.dtype(d["dtype"]).kind == "f"
            )
            if not ok:
                raise GraphcError(
                    f"{fname}: forward mode is derived from the VJP rules, but the VJP of "
                    f"an op at {d.get('src') or '?'} applies {d['op']!r} to its cotangent, "
                    "which cannot be differentiated again; use graphc.vjp / jacrev instead"
                )


# ---------------------------------------------------------------------------
# tracing fn with differentiated leaves


_call = call_with_leaves  # the same call grad makes (graphc.autodiff)


def _outputs(ctx: TraceContext, res: Any, fname: str, name: str = "output") -> tuple:
    """Float tracers for the leaves of ``fn``'s result, its structure and leaf paths."""
    leaves, td = flatten(res)
    paths = leaf_paths(td, name)
    outs = []
    for x, path in zip(leaves, paths):
        if isinstance(x, Tracer):
            if x._ctx is not ctx:
                raise GraphcError(f"{fname}: {path} is a value of another trace")
        elif isinstance(x, (eager.Tensor, np.ndarray, np.generic, float, int)) and not isinstance(
            x, bool
        ):
            x = _const(ctx, np.asarray(data_of(x) if isinstance(x, eager.Tensor) else x))
        else:
            raise TypeError(
                f"{fname}: fn must return arrays (or a pytree of arrays); {path} is "
                f"{type(x).__name__}"
            )
        if x._npdtype.kind != "f":
            raise TypeError(
                f"{fname}: {path} has dtype {x._npdtype.name}; only floating-point outputs "
                "can be differentiated (its JAX tangent would be a float0 array, which graphc "
                "does not support): return it as aux with has_aux=True, or convert it with "
                ".float()/.double()"
            )
        outs.append(x)
    return outs, td


def _prepare(fn: Callable, args: tuple, nums: tuple, fname: str) -> tuple:
    ctx = _find_ctx(args)
    assert ctx is not None
    args, info = _diff_leaves(ctx, args, nums, fname, fn)
    ins = [x for _, _, leaves in info for x in leaves]
    return ctx, args, info, ins


# ---------------------------------------------------------------------------
# jvp and linearize


def _leaf_meta(x: Any) -> Optional[tuple]:
    """(shape, dtype) of an array-like leaf; None for a Python number."""
    if isinstance(x, Tracer):
        return x._meta_shape, x._npdtype
    if isinstance(x, (bool, int, float, complex)):
        return None
    a = np.asarray(data_of(x) if isinstance(x, eager.Tensor) else x)
    return a.shape, a.dtype


def _check_primals(fn: Callable, primals: tuple, fname: str) -> list:
    """Per primal argument, (treedef, leaf paths, name); refuses integer primals."""
    names = arg_names(fn, len(primals))
    out = []
    for i, p in enumerate(primals):
        leaves, td = flatten(p)
        paths = leaf_paths(td, names[i])
        for x, path in zip(leaves, paths):
            m = _leaf_meta(x)
            if m is None:
                raise TypeError(
                    f"{fname}: argument {i} ({path}) is a Python number, which graphc treats "
                    "as static; pass a float array to differentiate it"
                )
            if m[1].kind != "f":
                raise TypeError(
                    f"{fname}: primal argument {i} ({path}) has dtype {m[1].name}; graphc "
                    "differentiates only floating-point inputs (JAX would need a float0 "
                    "tangent for it, which graphc does not support): close over it "
                    "(functools.partial) or convert it with .float()/.double()"
                )
        out.append((td, paths, names[i]))
    return out


def _tangent_leaves(ctx, primals_info: list, ins: list, tangents: tuple, fname: str) -> list:
    """Tracers for the tangents, checked against the primals' structure, shapes, dtypes."""
    res = []
    k = 0
    for i, ((td, paths, name), t) in enumerate(zip(primals_info, tangents)):
        tl, ttd = flatten(t)
        if ttd != td:
            raise TypeError(
                f"{fname}: primal and tangent arguments must have the same tree structure; "
                f"argument {i} ({name}): the primal has structure {td} whereas the tangent "
                f"has structure {ttd}"
            )
        for x, path in zip(tl, paths):
            p = ins[k]
            k += 1
            shape, dtype = p._meta_shape, p._npdtype
            m = _leaf_meta(x)
            if m is None:  # a Python number: weakly typed, as in JAX
                m = (np.shape(x), dtype)
                x = np.asarray(x, dtype)
            if tuple(m[0]) != shape:
                raise ValueError(
                    f"{fname}: different primal and tangent shapes for argument {i} "
                    f"({path}): primal shape {list(shape)}, tangent shape {list(m[0])}"
                )
            if m[1] != dtype:
                raise TypeError(
                    f"{fname}: primal and tangent dtypes differ for argument {i} ({path}): "
                    f"primal {dtype.name}, tangent {m[1].name}; they must be equal"
                )
            if not isinstance(x, Tracer):
                x = _const(ctx, np.asarray(data_of(x) if isinstance(x, eager.Tensor) else x))
            elif x._ctx is not ctx:
                raise GraphcError(f"{fname}: the tangent of {path} is a value of another trace")
            res.append(x)
    return res


def _check_pair(primals: Any, tangents: Any, fname: str) -> None:
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError(
            f"{fname}: primal and tangent arguments must be tuples or lists; found "
            f"{type(primals).__name__} and {type(tangents).__name__}"
        )
    if len(primals) != len(tangents):
        raise TypeError(
            f"{fname}: primal and tangent arguments must have the same tree structure; "
            f"{len(primals)} primal argument(s) but {len(tangents)} tangent(s)"
        )


def _linearize_traced(fn: Callable, primals: tuple, has_aux: bool, fname: str) -> tuple:
    """Inside a trace: (out, push(tangents) -> tangent out, aux)."""
    info_p = _check_primals(fn, primals, fname)
    ctx, ps, _, ins = _prepare(fn, primals, tuple(range(len(primals))), fname)
    res, aux = _call(fn, ps, ins, has_aux, fname)
    outs, otd = _outputs(ctx, res, fname)
    push = _pushforward(ctx, outs, ins, fname)

    def f_jvp(tangents: tuple) -> Any:
        _check_pair(primals, tangents, fname)
        tans = _tangent_leaves(ctx, info_p, ins, tuple(tangents), fname)
        return unflatten(otd, push(tans))

    return unflatten(otd, outs), f_jvp, aux


def _jvp_traced(fn: Callable, primals: tuple, tangents: tuple, has_aux: bool, fname: str) -> tuple:
    _check_pair(primals, tangents, fname)
    primals, tangents = tuple(primals), tuple(tangents)
    ctx = _find_ctx((primals, tangents))
    assert ctx is not None
    if _find_ctx(primals) is None:  # only the tangents are traced: primals become consts
        primals = tuple(_as_consts(ctx, p) for p in primals)
    info_p = _check_primals(fn, primals, fname)
    ctx, ps, _, ins = _prepare(fn, primals, tuple(range(len(primals))), fname)
    tans = _tangent_leaves(ctx, info_p, ins, tangents, fname)
    res, aux = _call(fn, ps, ins, has_aux, fname)
    outs, otd = _outputs(ctx, res, fname)
    touts = _pushforward(ctx, outs, ins, fname)(tans)
    out = (unflatten(otd, outs), unflatten(otd, touts))
    return out + (aux,) if has_aux else out


def _as_consts(ctx: TraceContext, p: Any) -> Any:
    leaves, td = flatten(p)
    new = []
    for x in leaves:
        if isinstance(x, (eager.Tensor, np.ndarray, np.generic)):
            a = np.asarray(data_of(x) if isinstance(x, eager.Tensor) else x)
            x = Tracer(ctx, ctx.const(a), a.shape, a.dtype)
        new.append(x)
    return unflatten(td, new)


# compiled jvp / linearize per function (and has_aux): a later call with the same
# function and input signature runs the cached compiled code.  The function is held
# weakly (the cache entry goes with it).
_JVP_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _cached(fn: Callable, kind: str, has_aux: bool, make: Callable) -> Callable:
    try:
        per_fn = _JVP_CACHE.setdefault(fn, {})
    except TypeError:  # not weakly referenceable: compile afresh
        return make(lambda: fn)
    key = (kind, has_aux)
    if key not in per_fn:
        ref = weakref.ref(fn)
        per_fn[key] = make(ref)
    return per_fn[key]


def jvp(fn: Callable, primals: Any, tangents: Any, has_aux: bool = False) -> tuple:
    """Forward mode: ``(fn(*primals), J(primals) @ tangents)``, as ``jax.jvp``.

    ``primals`` and ``tangents`` are tuples (or lists) with one entry per positional
    argument of ``fn``; each entry is an array or a pytree of arrays, and each tangent
    must have its primal's structure, shape and dtype (errors name the argument).  Only
    floating-point primals and outputs are supported (JAX's float0 tangents are not).
    Returns ``(primals_out, tangents_out)`` with ``fn``'s output structure, or
    ``(primals_out, tangents_out, aux)`` with ``has_aux=True`` (``fn`` returns
    ``(out, aux)``).  Computed from the VJP rules by the double-VJP trick (one forward,
    no per-op JVP rule); inside a trace it emits graph nodes, outside it compiles once
    per input signature.
    """
    fname = _name("jvp", fn)
    _check_pair(primals, tangents, fname)
    _check_primals(fn, tuple(primals), fname)
    if _find_ctx((tuple(primals), tuple(tangents))) is not None:
        return _jvp_traced(fn, tuple(primals), tuple(tangents), has_aux, fname)

    def make(ref):
        def traced(ps, ts):
            return _jvp_traced(ref(), ps, ts, has_aux, fname)

        return _dual(traced, fname)

    return _cached(fn, "jvp", has_aux, make)(tuple(primals), tuple(tangents))


def linearize(fn: Callable, *primals: Any, has_aux: bool = False) -> tuple:
    """``(fn(*primals), f_jvp)`` where ``f_jvp(*tangents)`` is the JVP at ``primals``,
    as ``jax.linearize`` (``(out, f_jvp, aux)`` with ``has_aux=True``).

    Inside a trace ``fn`` is traced and reverse-differentiated once and each ``f_jvp``
    call adds only the tangent's nodes.  Outside, ``out`` comes from a compiled forward
    and each ``f_jvp`` call runs a compiled JVP of ``fn`` at ``primals`` (cached per
    signature): it recomputes the forward values the tangent needs.  A function that
    draws random numbers is refused outside a trace (each call would draw anew, so
    ``f_jvp`` would not linearize at the returned ``out``).
    """
    fname = _name("linearize", fn)
    _check_primals(fn, primals, fname)
    if _find_ctx(primals) is not None:
        out, push, aux = _linearize_traced(fn, primals, has_aux, fname)

        def f_jvp(*tangents):
            return push(tangents)

        return (out, f_jvp, aux) if has_aux else (out, f_jvp)

    def make_fwd(ref):
        return _dual(lambda *a: ref()(*a), f"{fname}_fwd")

    fwd = _cached(fn, "fwd", has_aux, make_fwd)
    res = fwd(*primals)
    compiled = getattr(fwd, "_graphc_compiled", None)
    if compiled is not None and compiled[0] is not None:
        entry = compiled[0]._entry_for(primals)
        if entry.trace.randoms:
            raise GraphcError(
                f"{fname}: fn draws random numbers, so every compiled call draws new ones "
                "and f_jvp would not linearize fn at the returned output; use graphc.jvp "
                "(one draw for the output and its tangent), call linearize inside "
                "graphc.compile, or pass the random values as arguments"
            )
    out, aux = res if has_aux else (res, None)

    def compiled_jvp(*tangents):
        return jvp(fn, primals, tangents, has_aux=has_aux)[1]

    compiled_jvp.__name__ = _ident(f"{fname}_jvp")
    return (out, compiled_jvp, aux) if has_aux else (out, compiled_jvp)


# ---------------------------------------------------------------------------
# Jacobians


def _onehot(ctx: TraceContext, shape: tuple, dtype: np.dtype, k: int, by: str) -> Tracer:
    """The k-th basis array of ``shape`` (the one place a vmap would batch over)."""
    a = np.zeros(shape, dtype)
    a.reshape(-1)[k] = 1
    return _const(ctx, a, by)


def _assemble(jac: dict, outs: list, otd: Any, info: list, single: bool) -> Any:
    """JAX's structure: the output pytree of (per argnum) input pytrees of arrays."""
    per_out = []
    k_in = 0
    for j in range(len(outs)):
        per_arg = []
        k_in = 0
        for _, td, leaves in info:
            per_arg.append(unflatten(td, [jac[j, k_in + m] for m in range(len(leaves))]))
            k_in += len(leaves)
        per_out.append(per_arg[0] if single else tuple(per_arg))
    return unflatten(otd, per_out)


def _stack(rows: list, lead: tuple, tail: tuple, dtype: np.dtype, ctx) -> Tracer:
    """rows: n tracers of shape ``tail``; result of shape ``lead + tail`` (n = prod(lead))."""
    with eager.no_grad():
        if not rows:
            return _zeros(ctx, lead + tail, dtype)
        st = eager.stack(rows) if len(rows) > 1 else rows[0].reshape((1,) + tail)
        return st.reshape(lead + tail)


def _jacrev_traced(
    fn: Callable, args: tuple, nums: tuple, has_aux: bool, single: bool, fname: str
) -> tuple:
    ctx, args, info, ins = _prepare(fn, args, nums, fname)
    res, aux = _call(fn, args, ins, has_aux, fname)
    outs, otd = _outputs(ctx, res, fname)
    pull = _pullback(ctx, outs, ins)
    jac = {}
    for j, o in enumerate(outs):
        rows: list = [[] for _ in ins]
        for e in range(o.numel()):
            cts: list = [None] * len(outs)
            cts[j] = _onehot(ctx, o._meta_shape, o._meta_dtype, e, "jacrev")
            grads = pull(cts)
            with eager.no_grad():
                for i, (x, gr) in enumerate(zip(ins, grads)):
                    rows[i].append(gr if gr is not None else _zeros(ctx, x._meta_shape, x._npdtype))
        for i, x in enumerate(ins):
            jac[j, i] = _stack(rows[i], o._meta_shape, x._meta_shape, x._npdtype, ctx)
    return _assemble(jac, outs, otd, info, single), aux


def _jacfwd_traced(
    fn: Callable, args: tuple, nums: tuple, has_aux: bool, single: bool, fname: str
) -> tuple:
    ctx, args, info, ins = _prepare(fn, args, nums, fname)
    res, aux = _call(fn, args, ins, has_aux, fname)
    outs, otd = _outputs(ctx, res, fname)
    push = _pushforward(ctx, outs, ins, fname)
    jac = {}
    for i, x in enumerate(ins):
        cols: list = [[] for _ in outs]
        for e in range(x.numel()):
            tans: list = [None] * len(ins)
            tans[i] = _onehot(ctx, x._meta_shape, x._npdtype, e, "jacfwd")
            for j, t in enumerate(push(tans)):
                cols[j].append(t)
        for j, o in enumerate(outs):
            # (n_in, *out.shape) -> (*out.shape, *in.shape)
            st = _stack(cols[j], x._meta_shape, o._meta_shape, o._meta_dtype, ctx)
            nin, nout = x.ndim, o.ndim
            with eager.no_grad():
                jac[j, i] = st.permute(*range(nin, nin + nout), *range(nin)) if nin and nout else st
    return _assemble(jac, outs, otd, info, single), aux


def _jacobian_transform(kind: str, fn: Callable, argnums, has_aux: bool) -> Callable:
    single = isinstance(argnums, int)
    fname = _name(kind, fn)
    impl = _jacrev_traced if kind == "jacrev" else _jacfwd_traced

    def traced(*args):
        nums = _argnums(argnums, len(args))
        jac, aux = impl(fn, args, nums, has_aux, single, fname)
        return (jac, aux) if has_aux else jac

    return _dual(traced, fname)


def jacrev(fn: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """The Jacobian of ``fn`` by reverse mode, as ``jax.jacrev``: one pullback per output
    element, stacked.

    ``argnums`` an int or a tuple (negative counts from the end); arguments and outputs
    may be pytrees.  The result has JAX's structure: ``fn``'s output pytree whose leaves
    are, per output leaf ``o``, the differentiated argument's pytree (a tuple of them for
    tuple ``argnums``) of arrays of shape ``o.shape + x.shape`` with the input's dtype.
    ``has_aux=True``: ``fn`` returns ``(out, aux)`` and the result is ``(jac, aux)``.
    Inputs and outputs must be floating point.  Efficient when outputs are fewer than
    inputs; the graph grows with the number of output elements.
    """
    return _jacobian_transform("jacrev", fn, argnums, has_aux)


def jacfwd(fn: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """The Jacobian of ``fn`` by forward mode, as ``jax.jacfwd``: one pushforward per input
    element (derived from the VJP rules, see ``jvp``), stacked.

    Same arguments and result structure as ``jacrev`` (arrays have the output's dtype).
    Efficient when inputs are fewer than outputs; the graph grows with the number of input
    elements.
    """
    return _jacobian_transform("jacfwd", fn, argnums, has_aux)


def jacobian(fn: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """Alias of ``jacrev`` (as ``jax.jacobian``)."""
    return jacrev(fn, argnums=argnums, has_aux=has_aux)


def hessian(fn: Callable, argnums=0, has_aux: bool = False) -> Callable:
    """The Hessian of ``fn``, ``jacfwd(jacrev(fn, argnums, has_aux), argnums, has_aux)``,
    as ``jax.hessian``: for an output leaf ``o`` and inputs ``x``, ``y`` (tuple argnums)
    the block ``[x][y]`` has shape ``o.shape + x.shape + y.shape``."""
    return jacfwd(jacrev(fn, argnums, has_aux), argnums, has_aux)
