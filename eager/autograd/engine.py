"""The backward engine: an iterative walk of the tape in reverse topological order.

Every node is newer (has a higher ``_seq``) than the nodes its edges point to, so
running the pending node with the highest sequence number first runs it after all of
its consumers have delivered; ``backward()`` needs nothing more (``_run_simple``),
``inputs=``/``autograd.grad`` also count dependencies to prune the walk (``_run``).
The walk is iterative, so a 100,000-op chain needs no recursion.  After a node runs
without ``retain_graph`` its saved buffers are freed.
"""

from __future__ import annotations

import heapq
from weakref import ref as _ref
from typing import Optional

import numpy as np

from .function import AccumulateGrad, Node, _edge
from .grad_mode import STATE as _STATE


def _ones(shape: tuple, dtype) -> np.ndarray:
    """np.ones without its Python wrapper (the implicit gradient of a scalar output)."""
    out = np.empty(shape, dtype)
    out.fill(1)
    return out


# eager.tensor's Tensor class and eager.factories' ``tensor``/``zeros_like``: the wiring
# block of eager.factories (a layer above) hands them down once, through bind().
_Tensor = None
_tensor = None
_zeros_like = None


def bind(tensor_class, tensor, zeros_like) -> None:
    """Receive Tensor, tensor and zeros_like (called once, by eager.factories' wiring block)."""
    global _Tensor, _tensor, _zeros_like
    _Tensor, _tensor, _zeros_like = tensor_class, tensor, zeros_like


def _as_tuple(x) -> tuple:
    if x is None:
        return ()
    if isinstance(x, (tuple, list)):
        return tuple(x)
    return (x,)


def _make_grads(outputs: tuple, grad_outputs: tuple, create_graph: bool) -> tuple:
    """Root gradients, and for each whether the engine owns its buffer."""
    Tensor, tensor = _Tensor, _tensor
    grads = []
    owned = []
    for i, out in enumerate(outputs):
        g = grad_outputs[i] if i < len(grad_outputs) else None
        if g is None:
            if out._data.size != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            if out._data.dtype.kind != "f":
                raise RuntimeError(
                    "grad can be implicitly created only for real scalar outputs "
                    f"but got {out.dtype}"
                )
            g = Tensor._make(np.ones(out._data.shape, out._data.dtype))
            owned.append(True)
        else:
            owned.append(False)
            if not isinstance(g, Tensor):
                g = tensor(g, dtype=out.dtype)
            if tuple(g.shape) != tuple(out.shape):
                raise RuntimeError(
                    f"Mismatch in shape: grad_output[{i}] has a shape of "
                    f"{g.shape} and output[{i}] has a shape of {out.shape}."
                )
            if g._data.dtype != out._data.dtype:
                g = g.to(out.dtype)
            if not create_graph:
                g = g.detach()
        grads.append(g)
    return grads, owned


# Explanations of why a tensor has no gradient history, from the code that made it
# (graphc adds one for the outputs of compiled calls): each is called with the tensor
# when backward() refuses it and returns a sentence or None.
NO_GRAD_HINTS: list = []


def _no_grad_hint(t) -> str:
    for hint in NO_GRAD_HINTS:
        said = hint(t)
        if said:
            return " " + said
    return ""


def _roots(outputs: tuple) -> list:
    roots = []
    for i, out in enumerate(outputs):
        if not out._rg:
            raise RuntimeError(
                f"element {i} of tensors does not require grad and does not have "
                "a grad_fn" + _no_grad_hint(out)
            )
        roots.append(_edge(out))
    return roots


def backward(
    tensors,
    grad_tensors=None,
    retain_graph: Optional[bool] = None,
    create_graph: bool = False,
    inputs=None,
) -> None:
    """Accumulate gradients of ``tensors`` into the ``.grad`` of the graph's leaves."""
    outputs = _as_tuple(tensors)
    grads = _make_grads(outputs, _as_tuple(grad_tensors), create_graph)
    if retain_graph is None:
        retain_graph = create_graph
    targets = None
    if inputs is not None:
        ins = _as_tuple(inputs)
        if not ins:
            raise RuntimeError("'inputs' argument to backward() cannot be empty.")
        targets = [_input_edge(t) for t in ins]
        _run(_roots(outputs), grads, retain_graph, create_graph, targets, capture=False)
    else:
        _run_simple(_roots(outputs), grads, retain_graph, create_graph)


def backward_scalar(out) -> None:
    """``out.backward()`` with no arguments: :func:`backward` for one implicit root."""
    data = out._data
    if data.size != 1 or data.dtype.kind != "f" or not out._rg:
        backward(out)  # the precise error
        return
    g = _Tensor._make(_ones(data.shape, data.dtype))
    _run_simple([_edge(out)], ([g], [True]), False, False)


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph: Optional[bool] = None,
    create_graph: bool = False,
    allow_unused: Optional[bool] = None,
    materialize_grads: bool = False,
) -> tuple:
    """Return d(outputs)/d(inputs) without touching any ``.grad``."""
    zeros_like = _zeros_like
    outs = _as_tuple(outputs)
    ins = _as_tuple(inputs)
    if allow_unused is None:
        allow_unused = materialize_grads
    for t in outs + ins:  # a compiler's symbolic tensors: its own implementation, if any
        if _Tensor is not None and not isinstance(t, _Tensor):
            traced = getattr(type(t), "_traced_grad", None)
            if traced is None:
                raise TypeError(f"autograd.grad: expected Tensors, got {type(t).__name__}")
            return traced(outs, ins, _as_tuple(grad_outputs), allow_unused, materialize_grads)
    for t in ins:
        if not t._rg:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    grads = _make_grads(outs, _as_tuple(grad_outputs), create_graph)
    if retain_graph is None:
        retain_graph = create_graph
    targets = [_input_edge(t) for t in ins]
    captured = _run(_roots(outs), grads, retain_graph, create_graph, targets, capture=True)
    result = []
    for t, e in zip(ins, targets):
        g = captured.get(e)
        if g is None:
            if materialize_grads:
                g = zeros_like(t)
            elif not allow_unused:
                raise RuntimeError(
                    "One of the differentiated Tensors appears to not have been used "
                    "in the graph. Set allow_unused=True if this is the desired "
                    "behavior."
                )
        result.append(g)
    return tuple(result)


def _input_edge(t) -> tuple:
    if t.grad_fn is not None:
        return (t.grad_fn, t._output_nr)
    if not t._rg:
        raise RuntimeError("One of the differentiated Tensors does not require grad")
    return (t._grad_accumulator(), 0)


# Long on purpose: the per-node loop of every loss.backward() stays in one frame.
def _run_simple(roots: list, grads: tuple, retain_graph: bool, create_graph: bool) -> None:
    """``backward()`` without ``inputs=``: the common case, kept lean.

    Same semantics as :func:`_run` (shared-buffer tracking, hooks, retain_grad, freeing
    saved buffers) without its discovery pass: every node is newer (a higher ``_seq``)
    than the nodes its edges point to, so running the pending node with the highest
    ``_seq`` first means all of its consumers have delivered (a consumer not run yet
    would be reachable through a pending node newer than it).
    """
    buffers: dict = {}
    shared: dict = {}
    grads, owned = grads
    for (node, nr), g, own in zip(roots, grads, owned):
        if not own:
            shared[id(g)] = _ref(g)
        _accumulate_into(buffers, node, nr, g)
    heap = [(-n._seq, n) for n in buffers]
    heapq.heapify(heap)
    pop, push = heapq.heappop, heapq.heappush
    state = _STATE
    prev = state.enabled
    state.enabled = create_graph
    Acc = AccumulateGrad
    make = _Tensor._make
    try:
        while heap:
            node = pop(heap)[1]
            node_grads = buffers.pop(node)
            if node._hooks or node._retained:
                node_grads = _pre_hooks(node, node_grads, create_graph, shared)
            if node.__class__ is Acc:
                g = node_grads[0]
                if g is not None:
                    _leaf_grad(node.variable, g, create_graph, _is_shared(shared, g), make)
                continue
            if len(node_grads) == 1:
                g0 = node_grads[0]
                if g0 is None:
                    continue  # no gradient reached this node: nor does it flow on
            elif any(g is not None for g in node_grads):
                g0 = None
            else:
                continue
            out_grads = node.apply(node_grads)
            fresh_node = node._fresh_outputs
            if not retain_graph:
                if fresh_node:  # OpNode.release, inline
                    if node._freed is False:
                        node._freed = True
                        node._saved = None
                        node._out = None
                else:
                    node.release()
            # a gradient is "fresh" (a buffer no one else holds) unless the node passed an
            # incoming gradient through, it is a view, or the node is a user Function
            for (nxt, nr), g in zip(node.next_functions, out_grads):  # one per edge
                if nxt is None or g is None:
                    continue
                buf = buffers.get(nxt)
                if buf is None:
                    if (
                        not fresh_node
                        or g is g0
                        or g._data.base is not None
                        or (g0 is None and any(g is x for x in node_grads))
                    ):
                        shared[id(g)] = _ref(g)
                    if nxt.num_outputs == 1:
                        buffers[nxt] = [g]
                    else:
                        buf = buffers[nxt] = [None] * nxt.num_outputs
                        buf[nr] = g
                    push(heap, (-nxt._seq, nxt))
                else:
                    old = buf[nr]
                    if old is None:
                        if (
                            not fresh_node
                            or g is g0
                            or g._data.base is not None
                            or (g0 is None and any(g is x for x in node_grads))
                        ):
                            shared[id(g)] = _ref(g)
                        buf[nr] = g
                    else:
                        buf[nr] = old + g  # a new buffer
    finally:
        state.enabled = prev


def _leaf_grad(var, g, create_graph: bool, is_shared: bool, make) -> None:
    """Deliver gradient ``g`` to leaf ``var``: :func:`_accumulate_leaf`, with its common
    case inline (the first gradient of a leaf without hooks: a fresh gradient tensor
    becomes ``.grad`` itself, anything else is copied)."""
    if var is None:  # the leaf is gone: nobody can read its gradient
        return
    if var._grad is None and var._hooks is None and not create_graph:
        data = g._data
        vdata = var._data
        if data.shape == vdata.shape:
            if (
                is_shared
                or data.base is not None
                or not data.flags.writeable
                or not (
                    data.flags.c_contiguous if vdata.flags.c_contiguous else _obeys(data, vdata)
                )
            ):
                var._grad = make(_clone_obeying(data, vdata))
            elif g.grad_fn is None and not g._rg and g._version[0] == 0:
                var._grad = g
            else:
                var._grad = make(data)
            return
    _accumulate_leaf(var, g, create_graph, is_shared)


def _discover(roots: list, track_parents: bool) -> tuple:
    """Walk the backward graph from ``roots`` (iteratively): (dependency count of each
    node, its parents when ``track_parents`` else {}, every node seen)."""
    deps: dict = {}
    parents: dict = {}
    seen = set()
    stack = []
    for node, _ in roots:
        if node is not None and node not in seen:
            seen.add(node)
            stack.append(node)
    while stack:
        node = stack.pop()
        for nxt, _ in node.next_functions:
            if nxt is None:
                continue
            if nxt in deps:
                deps[nxt] += 1
            else:
                deps[nxt] = 1
            if track_parents:
                parents.setdefault(nxt, []).append(node)
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return deps, parents, seen


def _needed_nodes(targets: list, parents: dict, seen: set) -> tuple:
    """With explicit inputs, run only nodes that lead to one of them: (the set of such
    nodes, target node -> its output numbers asked for)."""
    target_nodes: dict = {}
    for node, nr in targets:
        target_nodes.setdefault(node, []).append(nr)
    needed = set()
    stack = [n for n in target_nodes if n in seen]
    needed.update(stack)
    while stack:
        node = stack.pop()
        for p in parents.get(node, ()):
            if p not in needed:
                needed.add(p)
                stack.append(p)
    return needed, target_nodes


def _seed(roots: list, grads: tuple, deps: dict) -> tuple:
    """The input buffers seeded with the root gradients, the ``shared`` ids and the heap
    of nodes ready to run.  ``shared`` holds the ids of gradients whose buffer someone
    else may also hold (user-given roots, identity VJPs such as add's, views; as id ->
    weakref); a leaf stores a copy of those, never the buffer."""
    buffers: dict = {}
    shared: dict = {}
    grads, owned = grads
    for (node, nr), g, own in zip(roots, grads, owned):
        if not own:
            shared[id(g)] = _ref(g)
        _accumulate_into(buffers, node, nr, g)
    heap = []
    for node in buffers:
        if deps.get(node, 0) == 0:
            heapq.heappush(heap, (-node._seq, node))
    return buffers, shared, heap


def _run(
    roots: list,
    grads: tuple,
    retain_graph: bool,
    create_graph: bool,
    targets: Optional[list],
    capture: bool,
) -> dict:
    """Execute the backward graph; return captured gradients when ``capture``.

    ``grads`` is (root gradients, whether each is owned).  The loop below is the
    backward hot loop, kept in one frame (a helper per node would cost a call each)."""
    deps, parents, seen = _discover(roots, targets is not None)
    needed = None
    target_nodes: dict = {}
    if targets is not None:
        needed, target_nodes = _needed_nodes(targets, parents, seen)
    buffers, shared, heap = _seed(roots, grads, deps)

    captured: dict = {}
    state = _STATE
    prev = state.enabled
    state.enabled = create_graph
    pop, push = heapq.heappop, heapq.heappush
    try:
        while heap:
            node = pop(heap)[1]
            node_grads = buffers.pop(node, None)
            if needed is not None and node not in needed:
                continue
            if node_grads is None:  # no gradient reached this node: nor does it flow on
                _release_deps(node, deps, buffers, heap)
                continue
            if node._hooks or node._retained:
                node_grads = _pre_hooks(node, node_grads, create_graph, shared)
            if target_nodes and node in target_nodes:
                for nr in target_nodes[node]:
                    if node_grads[nr] is not None:
                        captured[(node, nr)] = node_grads[nr]
                if capture and (
                    node.__class__ is AccumulateGrad or not _leads_further(node, needed)
                ):
                    continue
            if node.__class__ is AccumulateGrad:
                g = node_grads[0]
                var = node.variable
                if not capture and g is not None and var is not None:
                    _accumulate_leaf(var, g, create_graph, _is_shared(shared, g))
                continue
            if len(node_grads) == 1:
                g0 = node_grads[0]
                if g0 is None:
                    _release_deps(node, deps, buffers, heap)
                    continue
            elif all(g is None for g in node_grads):
                _release_deps(node, deps, buffers, heap)
                continue
            else:
                g0 = None
            out_grads = node.apply(node_grads)
            if not retain_graph:
                node.release()
            for (nxt, nr), g in zip(node.next_functions, out_grads):
                if nxt is None:
                    continue
                if g is not None:
                    if (
                        not node._fresh_outputs
                        or g is g0
                        or g._data.base is not None
                        or (g0 is None and any(g is x for x in node_grads))
                    ):
                        shared[id(g)] = _ref(g)  # as in _run_simple: never handed over
                    buf = buffers.get(nxt)
                    if buf is None:
                        buf = buffers[nxt] = [None] * nxt.num_outputs
                    if buf[nr] is None:
                        buf[nr] = g
                    else:
                        buf[nr] = buf[nr] + g
                d = deps[nxt] - 1
                deps[nxt] = d
                if d == 0:
                    if nxt not in buffers:
                        buffers[nxt] = None
                    push(heap, (-nxt._seq, nxt))
    finally:
        state.enabled = prev
    return captured


def _leads_further(node: Node, needed) -> bool:
    return any(n is not None and n in needed for n, _ in node.next_functions)


def _release_deps(node: Node, deps: dict, buffers: dict, heap: list) -> None:
    for nxt, _ in node.next_functions:
        if nxt is None:
            continue
        deps[nxt] -= 1
        if deps[nxt] == 0:
            buffers.setdefault(nxt, None)
            heapq.heappush(heap, (-nxt._seq, nxt))


def _accumulate_into(buffers: dict, node: Node, nr: int, g) -> None:
    buf = buffers.get(node)
    if buf is None:
        buf = buffers[node] = [None] * node.num_outputs
    if buf[nr] is None:
        buf[nr] = g
    else:
        buf[nr] = buf[nr] + g


def _pre_hooks(node: Node, grads: list, create_graph: bool, shared: dict) -> list:
    """Tensor hooks registered on non-leaf outputs, then retain_grad."""
    if node._hooks:
        grads = list(grads)
        for nr, hooks in node._hooks.items():
            for hook in list(hooks):
                if grads[nr] is None:
                    continue
                r = hook(grads[nr])
                if r is not None:
                    grads[nr] = r
                    shared[id(r)] = _ref(r)
    if node._retained:
        for nr, ref in node._retained.items():
            t = ref()
            g = grads[nr]
            if t is None or g is None or t.grad_fn is not node:
                continue
            if t._grad is None:  # PyTorch: a C-ordered clone (retain_grad's hook)
                t._grad = g if create_graph else _Tensor._make(np.array(g._data, order="C"))
                shared[id(g)] = _ref(g)
            else:
                t._grad = t._grad + g
    return grads


def _is_shared(shared: dict, g) -> bool:
    """Whether someone else may hold ``g``'s buffer.  ``shared`` maps id -> weakref, so
    a new gradient that reuses the id of a dead shared one is not mistaken for it."""
    r = shared.get(id(g))
    return r is not None and r() is g


def _owned(g, is_shared: bool, var=None):
    """A detached gradient with a buffer of its own (we accumulate into it in place).

    A buffer no one else holds and that is not a view (numpy results of VJP rules)
    is taken as is; anything else is copied.  Given the leaf ``var``, the buffer also
    obeys PyTorch's layout contract (:func:`_obeys`), copied into that layout if not."""
    data = g._data
    if var is not None and data.shape == var._data.shape:
        if is_shared or data.base is not None or not data.flags.writeable:
            data = _clone_obeying(data, var._data)
        elif not _obeys(data, var._data):
            data = _clone_obeying(data, var._data)
    elif is_shared or data.base is not None or not data.flags.writeable:
        data = np.array(data)
    return _Tensor._make(data)


def _dense(a: np.ndarray) -> bool:
    """PyTorch's is_non_overlapping_and_dense for a numpy array: its elements fill a
    block of memory without gaps or overlaps in some order of the dims."""
    expect = a.itemsize
    for st, n in sorted((st, n) for st, n in zip(a.strides, a.shape) if n != 1):
        if st != expect:
            return False
        expect *= n
    return True


def _obeys(data: np.ndarray, vdata: np.ndarray) -> bool:
    """PyTorch's layout contract for a leaf's new ``.grad`` (AccumulateGrad's
    obeys_layout_contract): the strides of the leaf itself when the leaf is
    non-overlapping and dense (a contiguous or a permuted parameter), else C order.
    So ``p.grad.view(-1)`` works for every contiguous ``p``, whatever the backward
    computed (a transposed product, a broadcast)."""
    if vdata.flags.c_contiguous or data.size == 0 or not _dense(vdata):
        return data.flags.c_contiguous
    return all(a == b for a, b, n in zip(data.strides, vdata.strides, data.shape) if n != 1)


def _clone_obeying(data: np.ndarray, vdata: np.ndarray) -> np.ndarray:
    """A copy of ``data`` in the layout :func:`_obeys` asks for (clone_obey_contract)."""
    if vdata.flags.c_contiguous or data.size == 0 or not _dense(vdata):
        return np.array(data, order="C")
    out = np.empty_like(vdata, dtype=data.dtype)  # (order K: vdata's strides, it is dense)
    np.copyto(out, data)
    return out


def _accumulate_leaf(var, g, create_graph: bool, is_shared: bool) -> None:
    Tensor = _Tensor
    if var._hooks:
        for hook in list(var._hooks):
            r = hook(g)
            if r is not None:
                g = r
                is_shared = True  # the hook may keep what it returned
    if g._data.shape != var._data.shape:
        g = g.expand(var.shape) if g._data.size == 1 else g
    if var._grad is None:
        if create_graph:
            var._grad = g
        else:
            var._grad = _owned(g, is_shared, var)
        return
    cur = var._grad
    if create_graph or _STATE.enabled:
        var._grad = cur + g
        return
    dst = cur._data
    if dst.flags.writeable and dst.shape == g._data.shape:
        np.add(dst, g._data, out=dst, casting="same_kind")
        cur._version[0] += 1
    else:
        var._grad = Tensor._make(dst + g._data)
