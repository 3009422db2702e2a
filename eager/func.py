"""``torch.func`` for eager: ``grad``, ``grad_and_value``, ``vjp``, ``jvp``, ``jacrev``,
``jacfwd``, ``hessian``, ``vmap`` and ``functional_call``.

How eager does it (PyTorch uses functorch's levels and batching rules):

* The differentiating transforms run ``func`` on new tensor objects for the
  differentiated inputs (an alias ``x.view_as(x)`` when ``x`` already requires grad
  and grad mode is on, so the result stays differentiable by the caller, else a fresh
  leaf) under ``enable_grad``, and differentiate with :func:`eager.autograd.grad` and
  ``create_graph=True``: the transforms compose (``grad(grad(f))``, ``jacfwd(jacrev(f))``,
  ``vmap(grad(f))``), never write any ``.grad``, and work under ``eager.no_grad()``
  (whose results then carry no history, as in PyTorch).  A result keeps its history
  only when it depends on a tensor from outside the transform that requires grad (an
  input, or a tensor ``func`` closes over); otherwise it is returned detached.
* Forward mode (``jvp``, ``jacfwd``) uses the double-backward trick: the VJP is linear
  in its cotangent ``u``, so differentiating it with respect to ``u`` gives the JVP.
  Values equal true forward mode; the cost is a backward pass per JVP.
* ``vmap`` is a loop: it calls ``func`` once per example (slices along ``in_dims``) and
  stacks the results along ``out_dims``.  No batching rules: what ``func`` does with
  Python values (``.item()``, data-dependent control flow) works per example, where
  PyTorch's vmap refuses.  ``chunk_size`` is validated and ignored.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any, Callable, Optional

import numpy as np

import eager.factories as _F
from eager.autograd.engine import grad as _engine_grad
from eager.autograd.function import AccumulateGrad as _AccumulateGrad
from eager.autograd.grad_mode import enable_grad as _enable_grad
from eager.autograd.grad_mode import is_grad_enabled as _is_grad_enabled
from eager.methods.shape import stack as _stack
from eager.tensor import Tensor

__all__ = [
    "grad",
    "grad_and_value",
    "vjp",
    "jvp",
    "jacrev",
    "jacfwd",
    "hessian",
    "vmap",
    "functional_call",
]


# --- pytrees: tuples, lists, dicts, namedtuples; None is an empty node -------------------


class _Leaf:
    __slots__ = ()

    def __repr__(self) -> str:
        return "*"


_LEAF = _Leaf()


class TreeSpec:
    """The structure of a pytree (PyTorch's ``TreeSpec``: type, context, children)."""

    __slots__ = ("type", "context", "children")

    def __init__(self, type_: Any, context: Any, children: list) -> None:
        self.type = type_
        self.context = context
        self.children = children

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TreeSpec)
            and self.type is other.type
            and self.context == other.context
            and self.children == other.children
        )

    def __hash__(self) -> int:
        return hash((id(self.type), len(self.children)))

    def __repr__(self) -> str:
        name = getattr(self.type, "__name__", str(self.type))
        kids = ", ".join(repr(c) for c in self.children)
        return f"TreeSpec({name}, {self.context!r}, [{kids}])"


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def tree_flatten(tree: Any) -> tuple:
    """``(leaves, spec)`` of a pytree (tuples, lists, dicts, namedtuples; other values,
    tensors included, are leaves; None is a node without children).  Iterative."""
    leaves: list = []
    root: list = []
    stack: list = [(tree, root)]
    while stack:
        node, out = stack.pop()
        if node is None:
            out.append(TreeSpec(type(None), None, []))
            continue
        if isinstance(node, dict):
            keys = list(node)
            ctx: Any = keys
            kids = [node[k] for k in keys]
        elif _is_namedtuple(node):
            ctx, kids = None, list(node)
        elif isinstance(node, (tuple, list)):
            ctx, kids = None, list(node)
        else:
            leaves.append(node)
            out.append(_LEAF)
            continue
        spec = TreeSpec(type(node), ctx, [])
        out.append(spec)
        # children pushed in reverse so the leaves come out in order
        slots: list = [[] for _ in kids]
        spec.children = slots  # filled below, then flattened
        for kid, slot in reversed(list(zip(kids, slots))):
            stack.append((kid, slot))
    _collapse(root[0])
    return leaves, root[0]


def _collapse(spec: Any) -> None:
    """Replace the one-element lists tree_flatten uses as slots by their content."""
    todo = [spec]
    while todo:
        s = todo.pop()
        if isinstance(s, TreeSpec):
            s.children = [c[0] if isinstance(c, list) else c for c in s.children]
            todo.extend(s.children)


def tree_unflatten(leaves: list, spec: Any) -> Any:
    """Rebuild a pytree of the structure ``spec`` from its leaves, in order."""
    it = iter(leaves)

    def build(s: Any) -> Any:
        if s is _LEAF:
            return next(it)
        kids = [build(c) for c in s.children]
        if s.type is type(None):
            return None
        if s.type is dict or issubclass(s.type, dict):
            d = s.type() if s.type is not dict else {}
            for k, v in zip(s.context, kids):
                d[k] = v
            return d
        if issubclass(s.type, tuple) and hasattr(s.type, "_fields"):
            return s.type(*kids)
        return s.type(kids)

    return build(spec)


def tree_map(fn: Callable, tree: Any) -> Any:
    """``tree`` with ``fn`` applied to every leaf."""
    leaves, spec = tree_flatten(tree)
    return tree_unflatten([fn(x) for x in leaves], spec)


def _broadcast_prefix(prefix: Any, tree: Any, is_leaf_prefix: Callable) -> Optional[list]:
    """One entry of ``prefix`` per leaf of ``tree`` (a prefix leaf covers a whole subtree);
    None when the structures do not match."""
    out: list = []
    stack = [(prefix, tree)]
    while stack:
        p, t = stack.pop()
        if is_leaf_prefix(p):
            out.extend([p] * len(tree_flatten(t)[0]))
            continue
        if isinstance(p, dict):
            if not isinstance(t, dict) or list(p) != list(t):
                return None
            pairs = [(p[k], t[k]) for k in p]
        elif isinstance(p, (tuple, list)):
            if type(p) is not type(t) or len(p) != len(t):
                return None
            pairs = list(zip(p, t))
        else:
            return None
        stack.extend(reversed(pairs))
    return out


# --- helpers shared by the differentiating transforms -------------------------------------


def _check_argnums(argnums: Any, nargs: int) -> tuple:
    """The normalized argnums (a tuple) and whether argnums was an int."""
    if isinstance(argnums, bool) or not isinstance(argnums, (int, tuple)):
        raise RuntimeError(f"argnums must be int or Tuple[int, ...], got: {type(argnums)}")
    if isinstance(argnums, tuple):
        if len(argnums) == 0:
            raise RuntimeError("argnums must be non-empty")
        for a in argnums:
            if isinstance(a, bool) or not isinstance(a, int):
                raise RuntimeError(
                    f"argnums must be int or Tuple[int, ...], got: Tuple[{type(a)}, ...]"
                )
    nums = argnums if isinstance(argnums, tuple) else (argnums,)
    norm = []
    for a in nums:
        if not -nargs <= a < nargs:
            raise RuntimeError(f"Got argnum={a}, but only {nargs} positional inputs")
        norm.append(a % nargs)
    if len(set(norm)) != len(norm):
        raise RuntimeError(f"argnums elements must be unique, got {argnums}")
    return tuple(norm), isinstance(argnums, int)


def _wrap_input(x: Any, outer: bool) -> Tensor:
    """The tensor ``func`` sees for a differentiated input."""
    if not isinstance(x, Tensor):
        raise ValueError(f"Thing passed to transform API must be Tensor, got {type(x)}")
    if outer and x.requires_grad:
        return x.view_as(x)
    return x.detach().requires_grad_(True)


class _Inside:
    """The tensors a transform created (wrapped inputs, cotangent seeds): a result whose
    history reaches only them is returned detached."""

    def __init__(self, outer: bool) -> None:
        self.outer = outer
        self.ids: set = set()

    def add(self, t: Tensor) -> Tensor:
        self.ids.add(id(t))
        return t

    def reaches_outside(self, t: Tensor, safe: Optional[set] = None) -> bool:
        """Whether ``t``'s history reaches a leaf requiring grad that this transform did
        not create.  ``safe``: ids of nodes already known not to (shared by the calls of
        one :meth:`finish`, so a pytree of results walks each node once)."""
        if not self.outer or not t.requires_grad:
            return False
        if t.grad_fn is None:
            return id(t) not in self.ids
        if safe is None:
            safe = set()
        seen: set = set()
        todo = [t.grad_fn]
        while todo:
            node = todo.pop()
            if node is None or id(node) in seen or id(node) in safe:
                continue
            seen.add(id(node))
            if isinstance(node, _AccumulateGrad):
                var = node.variable
                if var is not None and id(var) not in self.ids:
                    return True
                continue
            for nxt, _ in node.next_functions:
                todo.append(nxt)
        safe |= seen  # the whole walk finished without reaching the outside
        return False

    def finish(self, tree: Any) -> Any:
        """``tree`` with every tensor that does not depend on the outside detached."""
        safe: set = set()

        def fix(x: Any) -> Any:
            if isinstance(x, Tensor) and x.requires_grad and not self.reaches_outside(x, safe):
                return x.detach()
            return x

        return tree_map(fix, tree)


def _prepare_args(args: tuple, argnums: tuple, inside: _Inside) -> tuple:
    """``args`` with the differentiated ones wrapped; and the wrapped leaves per argnum."""
    new_args = list(args)
    per_arg = []
    for a in argnums:
        leaves, spec = tree_flatten(args[a])
        wrapped = [inside.add(_wrap_input(x, inside.outer)) for x in leaves]
        new_args[a] = tree_unflatten(wrapped, spec)
        per_arg.append((wrapped, spec))
    return tuple(new_args), per_arg


def _grads(
    outputs: list, inputs: list, grad_outputs: Optional[list] = None, retain_graph: bool = True
) -> list:
    """d(outputs)/d(inputs) with create_graph (None for an unused input); outputs that
    do not require grad are skipped."""
    if grad_outputs is None:
        grad_outputs = [None] * len(outputs)
    keep = [(o, g) for o, g in zip(outputs, grad_outputs) if o is not None and o.requires_grad]
    if not keep or not inputs:
        return [None] * len(inputs)
    return list(
        _engine_grad(
            [o for o, _ in keep],
            inputs,
            [g for _, g in keep],
            retain_graph=retain_graph,
            create_graph=True,
            allow_unused=True,
        )
    )


def _split_aux(out: Any, has_aux: bool, api: str) -> tuple:
    if not has_aux:
        return out, None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise RuntimeError(
            f"{api}: output of function f should be a tuple: (output, aux) if has_aux is True"
        )
    return out[0], out[1]


# --- grad, grad_and_value ---------------------------------------------------------------


def grad_and_value(func: Callable, argnums: Any = 0, has_aux: bool = False) -> Callable:
    """``torch.func.grad_and_value``: a function returning ``(gradient, value)`` (with
    ``has_aux``, ``(gradient, (value, aux))``).  ``func`` must return a 0-d Tensor; the
    gradient has the structure of ``args[argnums]`` (a tuple of those when ``argnums``
    is a tuple).  Example::

        g, v = eager.func.grad_and_value(lambda x: (x ** 2).sum())(x)
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nums, single = _check_argnums(argnums, len(args))
        inside = _Inside(_is_grad_enabled())
        with _enable_grad():
            new_args, per_arg = _prepare_args(args, nums, inside)
            out = func(*new_args, **kwargs)
            output, aux = _split_aux(out, has_aux, "grad_and_value(f)(*args)")
            if not isinstance(output, Tensor):
                raise RuntimeError(
                    "grad_and_value(f)(*args): Expected f(*args) to return a Tensor, "
                    f"got {type(output)}"
                )
            if output.dim() != 0:
                raise RuntimeError(
                    "grad_and_value(f)(*args): Expected f(*args) to return a scalar Tensor, "
                    f"got tensor with {output.dim()} dims. Maybe you wanted to use the vjp or "
                    "jacrev APIs instead?"
                )
            flat_in = [x for wrapped, _ in per_arg for x in wrapped]
            gs = _grads([output], flat_in)
        gs = [_F.zeros_like(x) if g is None else g for g, x in zip(gs, flat_in)]
        trees, k = [], 0
        for wrapped, spec in per_arg:
            trees.append(tree_unflatten(gs[k : k + len(wrapped)], spec))
            k += len(wrapped)
        g_tree = trees[0] if single else tuple(trees)
        result = inside.finish((g_tree, output, aux))
        if has_aux:
            return result[0], (result[1], result[2])
        return result[0], result[1]

    return wrapper


def grad(func: Callable, argnums: Any = 0, has_aux: bool = False) -> Callable:
    """``torch.func.grad``: the gradient of a function returning a 0-d Tensor, with
    respect to ``args[argnums]`` (pytrees of Tensors; a tuple of them for a tuple of
    argnums).  With ``has_aux``, ``func`` returns ``(output, aux)`` and the transform
    ``(gradient, aux)``.  Composes: ``grad(grad(f))``, ``vmap(grad(f))``.  Example::

        eager.func.grad(lambda x: x.sin().sum())(x)   # == x.cos()
    """
    gv = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        g, value = gv(*args, **kwargs)
        if has_aux:
            return g, value[1]
        return g

    return wrapper


# --- vjp, jvp -----------------------------------------------------------------------------


def _check_tensor_outputs(leaves: list, api: str) -> None:
    for x in leaves:
        if not isinstance(x, Tensor):
            raise RuntimeError(
                f"{api}: expected f(*primals) to return only tensors, got unsupported type "
                f"{type(x)}"
            )


def vjp(func: Callable, *primals: Any, has_aux: bool = False) -> tuple:
    """``torch.func.vjp``: ``(output, vjp_fn)`` (``(output, vjp_fn, aux)`` with
    ``has_aux``); ``vjp_fn(cotangents)`` (the structure of ``output``) returns a tuple
    with one entry per primal (each of that primal's structure) and may be called many
    times.  Example::

        out, vjp_fn = eager.func.vjp(eager.sin, x)
        (gx,) = vjp_fn(eager.ones_like(out))        # == x.cos()
    """
    inside = _Inside(_is_grad_enabled())
    with _enable_grad():
        new_args, per_arg = _prepare_args(primals, tuple(range(len(primals))), inside)
        out = func(*new_args)
        output, aux = _split_aux(out, has_aux, "vjp(f, *primals)")
        out_leaves, out_spec = tree_flatten(output)
        _check_tensor_outputs(out_leaves, "vjp(f, *primals)")
    flat_in = [x for wrapped, _ in per_arg for x in wrapped]

    def vjp_fn(cotangents: Any, retain_graph: bool = True, create_graph: Optional[bool] = None):
        ct_leaves, ct_spec = tree_flatten(cotangents)
        if ct_spec != out_spec:
            raise RuntimeError(
                "Expected pytree structure of cotangents to be the same as pytree structure "
                f"of outputs to the function. cotangents: {ct_spec}, primal output: {out_spec}"
            )
        fn_inside = _Inside(_is_grad_enabled())
        fn_inside.ids |= inside.ids
        for i, (o, c) in enumerate(zip(out_leaves, ct_leaves)):
            if not isinstance(c, Tensor):
                raise ValueError(f"Thing passed to transform API must be Tensor, got {type(c)}")
            if tuple(c.shape) != tuple(o.shape):
                raise RuntimeError(
                    f"Mismatch in shape: grad_output[{i}] has a shape of {c.shape} and "
                    f"output[{i}] has a shape of {o.shape}."
                )
        with _enable_grad():
            gs = _grads(out_leaves, flat_in, ct_leaves)
        gs = [_F.zeros_like(x) if g is None else g for g, x in zip(gs, flat_in)]
        trees, k = [], 0
        for wrapped, spec in per_arg:
            trees.append(tree_unflatten(gs[k : k + len(wrapped)], spec))
            k += len(wrapped)
        return fn_inside.finish(tuple(trees))

    result = inside.finish((output, aux))
    if has_aux:
        return result[0], vjp_fn, result[1]
    return result[0], vjp_fn


def _jvp_core(func: Callable, primals: tuple, api: str, has_aux: bool, inside: _Inside):
    """Run ``func`` on wrapped primals; return what the double-backward trick needs."""
    new_args, per_arg = _prepare_args(primals, tuple(range(len(primals))), inside)
    out = func(*new_args)
    output, aux = _split_aux(out, has_aux, api)
    out_leaves, out_spec = tree_flatten(output)
    _check_tensor_outputs(out_leaves, api)
    flat_in = [x for wrapped, _ in per_arg for x in wrapped]
    seeds = [inside.add(_F.zeros_like(o, requires_grad=o.is_floating_point())) for o in out_leaves]
    # the VJP at zero cotangents, kept as a graph linear in the seeds
    gin = _grads(out_leaves, flat_in, seeds)
    return output, aux, out_leaves, out_spec, flat_in, seeds, gin


def _jvp_apply(gin: list, seeds: list, out_leaves: list, tangents: list) -> list:
    """J t for tangents ``tangents`` (one per input), by differentiating the VJP ``gin``
    with respect to the seeds."""
    pairs = [(g, t) for g, t in zip(gin, tangents) if g is not None and g.requires_grad]
    live = [s for s in seeds if s.requires_grad]
    if pairs and live:
        res = _grads([g for g, _ in pairs], live, [t.to(g.dtype) for g, t in pairs])
    else:
        res = [None] * len(live)
    it = iter(res)
    out = []
    for s, o in zip(seeds, out_leaves):
        r = next(it) if s.requires_grad else None
        out.append(_F.zeros_like(o) if r is None else r)
    return out


def jvp(
    func: Callable, primals: Any, tangents: Any, *, strict: bool = False, has_aux: bool = False
) -> tuple:
    """``torch.func.jvp``: ``(output, jvp_out)`` (``(output, jvp_out, aux)`` with
    ``has_aux``) for tuples ``primals`` and ``tangents`` of the same structure.  Computed
    with the double-backward trick (values equal forward mode).  Example::

        out, t = eager.func.jvp(eager.sin, (x,), (eager.ones_like(x),))   # t == x.cos()
    """
    api = "jvp(f, primals, tangents)"
    if not isinstance(primals, tuple):
        raise RuntimeError(
            f"{api}: Expected primals to be a tuple. E.g. it should be valid to call f(*primals)."
        )
    p_leaves, p_spec = tree_flatten(primals)
    t_leaves, t_spec = tree_flatten(tangents)
    if p_spec != t_spec:
        raise RuntimeError(
            f"{api}: Expected primals and tangents to have the same python structure. For "
            "example, if primals is a tuple of 3 tensors, tangents also must be. Got primals "
            f"with structure {p_spec} and tangents with structure {t_spec}"
        )
    for p, t in zip(p_leaves, t_leaves):
        for x in (p, t):
            if not isinstance(x, Tensor):
                raise ValueError(f"Thing passed to transform API must be Tensor, got {type(x)}")
        if tuple(p.shape) != tuple(t.shape):
            raise RuntimeError(
                "Trying to set a forward gradient that has a different size than that of the "
                "original Tensor, this is not supported. Tensor is of size "
                f"{list(p.shape)} while the given forward gradient is of size {list(t.shape)}."
            )
    inside = _Inside(_is_grad_enabled())
    with _enable_grad():
        output, aux, out_leaves, out_spec, flat_in, seeds, gin = _jvp_core(
            func, primals, api, has_aux, inside
        )
        jv = _jvp_apply(gin, seeds, out_leaves, t_leaves)
    result = inside.finish((output, tree_unflatten(jv, out_spec), aux))
    if has_aux:
        return result
    return result[0], result[1]


# --- jacrev, jacfwd, hessian --------------------------------------------------------------


def _assemble_jac(
    out_leaves: list, out_spec: Any, per_arg: list, single: bool, blocks: dict
) -> Any:
    """The Jacobian pytree: the output's structure, each output leaf holding the
    structure of ``args[argnums]`` whose leaves are ``blocks[(o, i)]``."""
    per_out = []
    for o in range(len(out_leaves)):
        trees, k = [], 0
        for wrapped, spec in per_arg:
            trees.append(tree_unflatten([blocks[(o, k + j)] for j in range(len(wrapped))], spec))
            k += len(wrapped)
        per_out.append(trees[0] if single else tuple(trees))
    return tree_unflatten(per_out, out_spec)


def jacrev(
    func: Callable,
    argnums: Any = 0,
    *,
    has_aux: bool = False,
    chunk_size: Optional[int] = None,
    _preallocate_and_copy: bool = False,
) -> Callable:
    """``torch.func.jacrev``: the Jacobian by reverse mode, one backward pass per output
    element.  For each output leaf of shape ``S_o`` and differentiated input leaf of
    shape ``S_i`` the block has shape ``S_o + S_i``; the result has the output's
    structure, each leaf holding the structure of ``args[argnums]``.  ``chunk_size`` is
    accepted and ignored.  Example::

        eager.func.jacrev(eager.sin)(x)      # == eager.diag(x.cos())
    """
    if not (chunk_size is None or chunk_size > 0):
        raise ValueError("jacrev: `chunk_size` should be greater than 0.")

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nums, single = _check_argnums(argnums, len(args))
        inside = _Inside(_is_grad_enabled())
        with _enable_grad():
            new_args, per_arg = _prepare_args(args, nums, inside)
            out = func(*new_args, **kwargs)
            output, aux = _split_aux(out, has_aux, "jacrev(f)(*args)")
            out_leaves, out_spec = tree_flatten(output)
            _check_tensor_outputs(out_leaves, "vjp(f, *primals)")
            flat_in = [x for wrapped, _ in per_arg for x in wrapped]
            rows: dict = {(o, i): [] for o in range(len(out_leaves)) for i in range(len(flat_in))}
            for o, y in enumerate(out_leaves):
                flat = y.reshape(-1)
                for j in range(y.nelement()):
                    gs = _grads([flat[j]], flat_in)
                    for i, (g, x) in enumerate(zip(gs, flat_in)):
                        rows[(o, i)].append(_F.zeros_like(x) if g is None else g)
            blocks = {}
            for (o, i), r in rows.items():
                y, x = out_leaves[o], flat_in[i]
                if r:
                    b = _stack(r, 0)
                else:
                    b = _F.zeros(0, *x.shape, dtype=x.dtype)
                blocks[(o, i)] = b.reshape(*y.shape, *x.shape)
        jac = _assemble_jac(out_leaves, out_spec, per_arg, single, blocks)
        result = inside.finish((jac, aux))
        return (result[0], result[1]) if has_aux else result[0]

    return wrapper


def jacfwd(
    func: Callable, argnums: Any = 0, has_aux: bool = False, *, randomness: str = "error"
) -> Callable:
    """``torch.func.jacfwd``: the Jacobian column by column, one JVP per input element
    (by the double-backward trick; same values as forward mode).  Same result structure
    as :func:`jacrev`.  ``randomness`` is validated; each JVP reuses one run of ``func``,
    so every column sees the same random draws.  Example::

        eager.func.jacfwd(eager.sin)(x)      # == eager.diag(x.cos())
    """
    _check_randomness(randomness)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nums, single = _check_argnums(argnums, len(args))
        inside = _Inside(_is_grad_enabled())
        with _enable_grad():
            new_args, per_arg = _prepare_args(args, nums, inside)
            out = func(*new_args, **kwargs)
            output, aux = _split_aux(out, has_aux, "jacfwd(f)(*args)")
            out_leaves, out_spec = tree_flatten(output)
            _check_tensor_outputs(out_leaves, "jvp(f, primals, tangents)")
            flat_in = [x for wrapped, _ in per_arg for x in wrapped]
            seeds = [
                inside.add(_F.zeros_like(o, requires_grad=o.is_floating_point()))
                for o in out_leaves
            ]
            gin = _grads(out_leaves, flat_in, seeds)
            blocks = {}
            for i, x in enumerate(flat_in):
                cols: list = [[] for _ in out_leaves]
                zero = [_F.zeros_like(z) for z in flat_in]
                for k in range(x.nelement()):
                    e = _F.zeros(x.nelement(), dtype=x.dtype)
                    e[k] = 1
                    tangents = list(zero)
                    tangents[i] = e.reshape(x.shape)
                    jv = _jvp_apply(gin, seeds, out_leaves, tangents)
                    for o, c in enumerate(jv):
                        cols[o].append(c)
                for o, y in enumerate(out_leaves):
                    if cols[o]:
                        b = _stack(cols[o], -1)
                    else:
                        b = _F.zeros(*y.shape, 0, dtype=y.dtype)
                    blocks[(o, i)] = b.reshape(*y.shape, *x.shape)
        jac = _assemble_jac(out_leaves, out_spec, per_arg, single, blocks)
        result = inside.finish((jac, aux))
        return (result[0], result[1]) if has_aux else result[0]

    return wrapper


def hessian(func: Callable, argnums: Any = 0) -> Callable:
    """``torch.func.hessian``: ``jacfwd(jacrev(func, argnums), argnums)``.  Example::

    eager.func.hessian(lambda x: (x ** 3).sum())(x)   # == eager.diag(6 * x)
    """
    return jacfwd(jacrev(func, argnums), argnums)


# --- vmap ---------------------------------------------------------------------------------


def _check_randomness(randomness: Any) -> None:
    if randomness not in ("error", "different", "same"):
        raise RuntimeError(
            "Only allowed values for randomness are 'error', 'different', or 'same'. "
            f"Got {randomness}"
        )


def _fname(func: Any) -> str:
    return getattr(func, "__name__", repr(func))


def _rng_state() -> tuple:
    gen = _F._gen
    return gen, gen.bit_generator.state


def _set_rng_state(state: tuple) -> None:
    gen, st = state
    _F._gen = gen
    gen.bit_generator.state = st


def _is_dim(d: Any) -> bool:
    return d is None or (isinstance(d, int) and not isinstance(d, bool))


def vmap(
    func: Callable,
    in_dims: Any = 0,
    out_dims: Any = 0,
    randomness: str = "error",
    *,
    chunk_size: Optional[int] = None,
) -> Callable:
    """``torch.func.vmap``, as a loop: ``func`` runs once per example (each batched
    input sliced along its ``in_dims`` entry) and the results are stacked along
    ``out_dims``.  ``in_dims`` is an int, or a (nested) tuple matching the positional
    arguments, with None for an unbatched input; ``out_dims`` an int, None or a
    structure matching the outputs; negative dims count from the end.  Keyword
    arguments are passed unbatched.  ``randomness="error"`` raises when ``func`` draws
    from eager's global generator; ``"same"`` replays the same draws for every example;
    ``"different"`` lets each example draw anew.  A size-0 batch runs ``func`` once on a
    zero example to learn the output shapes.  Example::

        eager.func.vmap(eager.dot)(a, b)      # a, b of shape [B, N] -> [B]
    """
    _check_randomness(randomness)
    if not (chunk_size is None or chunk_size > 0):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got {chunk_size})")
    name = _fname(func)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        head = f"vmap({name}, in_dims={in_dims}, ...)(<inputs>)"
        if not args:
            raise ValueError(
                f"vmap({name})(<inputs>): got no inputs. Maybe you forgot to add inputs, or "
                "you are trying to vmap over a function with no inputs. The latter is "
                "unsupported."
            )
        if not (isinstance(in_dims, int) and not isinstance(in_dims, bool)) and not isinstance(
            in_dims, tuple
        ):
            raise ValueError(
                f"{head}: expected `in_dims` to be int or a (potentially nested) tuple matching "
                f"the structure of inputs, got: {type(in_dims)}."
            )
        leaves, spec = tree_flatten(args)
        dims = _broadcast_prefix(in_dims, args, _is_dim)
        if dims is None:
            _, dspec = tree_flatten(in_dims)
            raise ValueError(
                f"{head}: in_dims is not compatible with the structure of `inputs`. in_dims has "
                f"structure {dspec} but inputs has structure {spec}."
            )
        norm: list = []
        sizes: list = []
        for x, d in zip(leaves, dims):
            if d is None:
                norm.append(None)
                continue
            if not isinstance(d, int) or isinstance(d, bool):
                raise ValueError(
                    f"{head}: in_dims must be int or None, got {type(d)}"
                )  # unreachable through _is_dim, kept for clarity
            if not isinstance(x, Tensor):
                raise ValueError(
                    f"{head}: Got in_dim={d} for an input but the input is of type {type(x)}. "
                    "We cannot vmap over non-Tensor arguments, please use None as the "
                    "respective in_dim"
                )
            nd = x.dim()
            if not -nd <= d < nd:
                raise ValueError(
                    f"{head}: Got in_dim={d} for some input, but that input is a Tensor of "
                    f"dimensionality {nd} so expected in_dim to satisfy -{nd} <= in_dim < {nd}."
                )
            d = d % nd
            norm.append(d)
            sizes.append(x.shape[d])
        if not sizes:
            raise ValueError("vmap: Expected at least one Tensor to vmap over")
        if any(s != sizes[0] for s in sizes):
            raise ValueError(
                "vmap: Expected all tensors to have the same size in the mapped dimension, "
                f"got sizes {sizes} for the mapped dimension"
            )
        batch = sizes[0]

        def example(i: Optional[int]) -> tuple:
            sliced = []
            for x, d in zip(leaves, norm):
                if d is None:
                    sliced.append(x)
                elif i is None:  # a zero example of a size-0 batch
                    shape = list(x.shape)
                    del shape[d]
                    sliced.append(_F.zeros(*shape, dtype=x.dtype))
                else:
                    sliced.append(x.select(d, i))
            return tree_unflatten(sliced, spec)

        start = _rng_state()
        results = []
        for i in range(batch) if batch else [None]:
            if randomness == "same" or (i is None):
                _set_rng_state((start[0], dict(start[1])))
            before = _rng_state()
            results.append(func(*example(i), **kwargs))
            after = _rng_state()
            if randomness == "error" and (after[0] is not before[0] or after[1] != before[1]):
                _set_rng_state((start[0], dict(start[1])))
                raise RuntimeError(
                    "vmap: called random operation while in randomness error mode. Please "
                    "either use the 'same' or 'different' randomness flags on vmap or perform "
                    "the randomness operation out of vmap"
                )
        if batch == 0:
            _set_rng_state((start[0], dict(start[1])))
        return _stack_outputs(results, batch, out_dims, name)

    return wrapper


def _same_values(a: Tensor, b: Tensor) -> bool:
    """Equal shapes, dtypes and values (NaN equal to NaN)."""
    x, y = a.detach().numpy(), b.detach().numpy()
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    return bool(np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"))


def _stack_outputs(results: list, batch: int, out_dims: Any, name: str) -> Any:
    out_leaves, out_spec = tree_flatten(results[0])
    if not (_is_dim(out_dims) or isinstance(out_dims, (tuple, list))):
        raise ValueError(
            f"vmap({name}, ..., out_dims={out_dims}): `out_dims` must be an int, None or a "
            "python collection of ints representing where in the outputs the vmapped "
            "dimension should appear."
        )
    dims = _broadcast_prefix(out_dims, results[0], _is_dim)
    if dims is None:
        _, dspec = tree_flatten(out_dims)
        raise ValueError(
            f"vmap({name}, ..., out_dims={out_dims})(<inputs>): out_dims is not compatible with "
            f"the structure of `outputs`. out_dims has structure {dspec} but outputs has "
            f"structure {out_spec}."
        )
    per_example = []
    for r in results:
        lv, sp = tree_flatten(r)
        if sp != out_spec:
            raise ValueError(
                f"vmap({name}, ...): `{name}` must return outputs of the same structure for "
                "every example (eager's vmap runs it once per example)"
            )
        per_example.append(lv)
    stacked = []
    for k, d in enumerate(dims):
        vals = [lv[k] for lv in per_example]
        if d is None:
            first = vals[0]
            for v in vals[1:]:
                same = (
                    isinstance(v, Tensor) and isinstance(first, Tensor) and _same_values(v, first)
                ) or (not isinstance(v, Tensor) and v == first)
                if not same:
                    raise ValueError(
                        f"vmap({name}, ...): `{name}` can not return a BatchedTensor when "
                        "out_dim is None"
                    )
            stacked.append(first)
            continue
        for v in vals:
            if not isinstance(v, Tensor):
                raise ValueError(
                    f"vmap({name}, ...): `{name}` must only return Tensors, got type {type(v)}. "
                    "Did you mean to set out_dims= to None for output?"
                )
        nd = vals[0].dim() + 1
        if not -nd <= d < nd:
            raise IndexError(
                f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but "
                f"got {d})"
            )
        if batch == 0:
            shape = list(vals[0].shape)
            shape.insert(d % nd, 0)
            stacked.append(_F.zeros(*shape, dtype=vals[0].dtype))
        else:
            stacked.append(_stack(vals, d % nd))
    return tree_unflatten(stacked, out_spec)


# --- functional_call ----------------------------------------------------------------------


def _resolve(module: Any, name: str) -> tuple:
    """The sub-module owning dotted ``name`` and the last component."""
    *path, last = name.split(".")
    mod = module
    for p in path:
        mod = getattr(mod, p)
    return mod, last


def functional_call(
    module: Any,
    parameter_and_buffer_dicts: Any,
    args: Any = None,
    kwargs: Optional[dict] = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
) -> Any:
    """``torch.func.functional_call``: run ``module(*args, **kwargs)`` with its parameters
    and buffers replaced by the tensors of ``parameter_and_buffer_dicts`` (a dict of
    dotted names, or a sequence of dicts with distinct keys).  The originals are put
    back afterwards, also when the call raises.  ``args`` that is not a tuple is one
    positional argument.  ``tie_weights``: a tensor given for one name of a tied
    parameter replaces all of its names.  ``strict``: every parameter and buffer must be
    given and no other name.  Example::

        params = dict(model.named_parameters())
        g = eager.func.grad(lambda p, x: functional_call(model, p, (x,)).sum())(params, x)
    """
    if isinstance(parameter_and_buffer_dicts, dict):
        values = dict(parameter_and_buffer_dicts)
    elif isinstance(parameter_and_buffer_dicts, (list, tuple)):
        if not all(isinstance(d, dict) for d in parameter_and_buffer_dicts):
            raise ValueError(
                "Expected all elements of parameter_and_buffer_dicts to be dictionaries"
            )
        seen: dict = {}
        for d in parameter_and_buffer_dicts:
            for k in d:
                seen[k] = seen.get(k, 0) + 1
        repeated = [k for k, n in seen.items() if n > 1]
        if repeated:
            raise ValueError(
                f"{repeated} appeared in multiple dictionaries; behavior of functional call is "
                "ambiguous"
            )
        values = {k: v for d in parameter_and_buffer_dicts for k, v in d.items()}
    else:
        raise ValueError(
            "Expected parameter_and_buffer_dicts to be a dict, or a list/tuple of dicts, but "
            f"got {type(parameter_and_buffer_dicts)}"
        )
    if kwargs is None:
        kwargs = {}
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)

    # every name of every parameter and buffer, tied ones included
    all_names: "OrderedDict[str, Any]" = OrderedDict()
    for mod_name, mod in module.named_modules(remove_duplicate=False):
        prefix = mod_name + "." if mod_name else ""
        for n, t in mod._parameters.items():
            if t is not None:
                all_names[prefix + n] = t
        for n, t in mod._buffers.items():
            if t is not None:
                all_names[prefix + n] = t
    if tie_weights:
        by_id: dict = {}
        for n, t in all_names.items():
            by_id.setdefault(id(t), []).append(n)
        for names in by_id.values():
            if len(names) < 2:
                continue
            given = [n for n in names if n in values]
            if not given:
                continue
            if any(values[n] is not values[given[0]] for n in given[1:]):
                raise ValueError(
                    f"functional_call got multiple values for keys {given}, which are tied. "
                    "Consider using tie_weights=False"
                )
            for n in names:
                values.setdefault(n, values[given[0]])
    if strict:
        missing = [n for n in all_names if n not in values]
        unexpected = [n for n in values if n not in all_names]
        msgs = []
        if unexpected:
            msgs.append("Unexpected key(s): " + ", ".join(repr(k) for k in unexpected) + ".")
        if missing:
            msgs.append("Missing key(s): " + ", ".join(repr(k) for k in sorted(missing)) + ".")
        if msgs:
            raise RuntimeError(
                f"Error(s) in reparametrizing for {type(module).__name__}:\n\t" + "\n\t".join(msgs)
            )

    _MISSING = object()
    saved = []  # (owner, registry or None, key, old value or _MISSING)
    try:
        for name, value in values.items():
            owner, key = _resolve(module, name)
            if key in owner._parameters:
                saved.append((owner, owner._parameters, key, owner._parameters[key]))
                owner._parameters[key] = value
            elif key in owner._buffers:
                saved.append((owner, owner._buffers, key, owner._buffers[key]))
                owner._buffers[key] = value
            else:
                old = owner.__dict__.get(key, _MISSING)
                saved.append((owner, None, key, old))
                object.__setattr__(owner, key, value)
        return module(*args, **kwargs)
    finally:
        for owner, registry, key, old in reversed(saved):
            if registry is not None:
                registry[key] = old
            elif old is _MISSING:
                owner.__dict__.pop(key, None)
            else:
                object.__setattr__(owner, key, old)
