"""The bridge between a compiled function and eager autograd.

Called with eager tensors that require grad, a compiled function's outputs get one
``CompiledFunctionBackward`` node (an ``eager.autograd.Function``) whose backward runs the
compiled gradient graph, so eager's ``backward()`` flows through compiled regions.  Also
here: the graph input arrays of a call, writing in-place results back to the caller's
tensors, and the hint eager's ``backward()`` adds when an output has no gradient history.

``graphc.api.CompiledFunction`` calls into this module; the gradient function it builds
is a CompiledFunction too, made as ``type(cf)(...)`` so this module does not import the
api above it.
"""

from __future__ import annotations

import weakref
from typing import Any, Optional

import numpy as np

import eager
from eager.interop import (
    NO_GRAD_HINTS,
    Tensor,
    data_of,
    grad_of,
    requires_grad_of,
    tensor_from_array,
    version_of,
)

from .errors import GraphcError
from .pytree import flatten
from .tracer import _graph_input_pos


def _arrays(dyn, specs) -> list:
    """Graph input arrays for the dynamic leaves (an argument's .grad follows it when the
    trace made it an input: ``specs[i].has_grad``)."""
    arrays = []
    for a, spec in zip(dyn, specs):
        if a.__class__ is Tensor:
            arrays.append(data_of(a))
            if spec.has_grad:
                arrays.append(data_of(grad_of(a)))
        else:
            arrays.append(np.asarray(a))
    return arrays


def _graph_inputs(tr, primals) -> list:
    """Tracers for every graph input: the primals, plus their .grad where one was traced."""
    out = []
    for p, spec in zip(primals, tr.in_specs):
        out.append(p)
        if spec.has_grad:
            out.append(p.zeros_like_())
    return out


def _write_back(tr, dyn: list, outs: tuple) -> None:
    """Arguments and lifted tensors the function wrote in place get their new values
    (unless the backend already wrote them into the caller's buffer)."""
    for idx, out_pos in tr.mutated_inputs:
        target = dyn[idx]
        data = data_of(target) if isinstance(target, Tensor) else target
        if outs[out_pos] is not data:  # not already written in place
            np.copyto(data, outs[out_pos], casting="same_kind")
        if isinstance(target, Tensor):
            version_of(target)[0] += 1


# The last compiled call that returned tensors without a gradient history: (function,
# trace, grad mode then, weak references to those outputs), for the hint below.
_NO_GRAD_NOTE: list = [None]


def _note_no_grad(cf, tr, res: Any) -> None:
    leaves = (res,) if res.__class__ is Tensor else flatten(res)[0]
    outs = [
        weakref.ref(t)
        for t in leaves
        if t.__class__ is Tensor and not requires_grad_of(t) and data_of(t).dtype.kind == "f"
    ]
    if outs:
        _NO_GRAD_NOTE[0] = (cf, tr, eager.is_grad_enabled(), outs)


def _why_no_grad(t: Tensor) -> Optional[str]:
    """Why an output of a compiled call has no gradient history (eager's backward() adds
    this to its refusal): called under no_grad(), nothing it read requires grad (the
    parameters are frozen), or the output does not depend on what does."""
    note = _NO_GRAD_NOTE[0]
    if note is None:
        return None
    cf, tr, grad_on, outs = note
    mine = any(r() is t for r in outs)
    name = cf.__name__
    if not grad_on:
        why = f"compiled {name} was called under no_grad()"
    else:
        rg = [n for n, spec in zip(_input_names(tr), tr.in_specs) if spec.requires_grad]
        if rg:
            why = (
                f"that output of compiled {name} does not depend on what requires grad "
                f"({', '.join(rg[:6])}) through differentiable ops (it was computed under "
                "no_grad(), through .detach(), or is a comparison or integer result)"
            )
        else:
            frozen = [c.name for c in tr.captured][:6]
            why = (
                f"nothing compiled {name} read requires grad: "
                + (
                    f"the parameters it reads ({', '.join(frozen)}) have requires_grad=False and "
                    if frozen
                    else ""
                )
                + "its tensor arguments do not require grad; set requires_grad=True on what "
                "you want gradients for (e.g. p.requires_grad_() for p in "
                "model.parameters())"
            )
    if mine:
        return f"(it is an output of compiled {name}: {why})."
    return (
        f"(if it was computed from the last outputs of compiled {name} without a "
        f"gradient history: {why})."
    )


def _input_names(tr) -> list:
    """Readable names of a trace's dynamic leaves, in order: arguments, then lifted tensors."""
    names = [tr.graph.input_names[_graph_input_pos(tr.in_specs, i)] for i in range(tr.n_args)]
    return names + [c.name for c in tr.captured]


NO_GRAD_HINTS.append(_why_no_grad)


def _run_differentiable(cf, entry, dyn: list) -> Any:
    """Call with eager tensors that require grad: outputs get a CompiledFunctionBackward
    node whose backward runs the compiled gradient graph (eager autograd flows through).
    Tensors the function updates in place (a buffer's running statistics, an argument)
    get their new values; the backward differentiates the function at the values it was
    called with."""
    tr = entry.trace
    for idx, _ in tr.mutated_inputs:
        if dyn[idx].__class__ is Tensor and requires_grad_of(dyn[idx]):
            name = _input_names(tr)[idx]
            name = name if idx >= tr.n_args else f"argument {name}"
            raise GraphcError(
                f"{cf.__name__}: it updates {name}, which requires grad, in place (under "
                "no_grad()) and its outputs need gradients: eager differentiates with "
                "respect to the tensor after the update, which the compiled graph cannot "
                "express. Update it outside the compiled function (e.g. with an optimizer "
                "step), or call the function under eager.no_grad()."
            )
    outs = _CompiledAutograd.apply(cf, entry, *dyn)
    if not isinstance(outs, tuple):
        outs = (outs,)
    it = iter(outs)
    res = cf._wrap_outputs(entry.trace, list(outs), make=lambda v: next(it))
    if not (cf._outputs_differentiable or entry.trace.all_out_rg):
        _note_no_grad(cf, entry.trace, res)
    return res


def _grad_positions(tr) -> list:
    """The inputs the gradient function differentiates: float leaves that required grad
    when the call was traced (the cache key holds requires_grad, so this is fixed per
    signature).  Eager drops a gradient returned for an input that does not require it,
    so computing one (a data batch's, through the first layer) only cost time and
    arena memory."""
    return [
        i
        for i, spec in enumerate(tr.in_specs)
        if spec.requires_grad and spec.dtype is not None and np.dtype(spec.dtype).kind == "f"
    ]


def _vjp_function(cf, entry):
    """Compiled (primals..., cotangents...) -> gradients for the primals that require
    grad (:func:`_grad_positions`)."""
    vjp_cf = entry.stages.get("_vjp_fn")
    if vjp_cf is not None:
        return vjp_cf
    from .autodiff import backprop

    tr = entry.trace
    n_in = len(tr.in_specs)

    def vjp_body(*flat):
        primals, cts = flat[:n_in], flat[n_in:]
        ctx = primals[0]._ctx
        # rebuild the user's arguments around the traced primals and re-run the function
        res_graph = tr.graph
        from .autodiff import replay

        outs = replay(res_graph, ctx, _graph_inputs(tr, primals))
        want = [primals[i] for i in _grad_positions(tr)]
        acc = {}
        for o, c in zip(outs, cts):
            if o._npdtype.kind != "f":
                continue
            for p, gr in zip(want, backprop(ctx, o, want, c)):
                if gr is not None:
                    acc[id(p)] = gr if id(p) not in acc else acc[id(p)] + gr
        with eager.no_grad():
            return tuple(acc[id(p)] if id(p) in acc else p.zeros_like_() for p in want)

    vjp_body.__name__ = f"{cf.__name__}_vjp"
    with cf._lock:  # threads running backward at once share one gradient function
        vjp_cf = entry.stages.get("_vjp_fn")
        if vjp_cf is None:
            vjp_cf = type(cf)(
                vjp_body, opt_level=cf.opt_level, backend=cf.backend, disk_cache=cf.disk_cache
            )
            # gradients are differentiable functions of the primals (double backward),
            # although graph autodiff, not the traced Python, made them
            vjp_cf._outputs_differentiable = True
            entry.stages["_vjp_fn"] = vjp_cf
    return vjp_cf


def _make_autograd_function():
    def forward(ctx, cf, entry, *tensors):
        tr = entry.trace
        saved = tensors
        if tr.mutated_inputs:
            saved = list(tensors)
            for idx, _ in tr.mutated_inputs:  # the values the call reads, before its writes
                t = tensors[idx]
                saved[idx] = tensor_from_array(np.array(data_of(t) if t.__class__ is Tensor else t))
        outs = entry.run(_arrays(tensors, tr.in_specs))
        if tr.mutated_inputs:
            _write_back(tr, tensors, outs)
        ctx.cf, ctx.entry = cf, entry
        # numpy arguments beside requires-grad tensors (or captured parameters) are saved as tensors
        ctx.save_for_backward(
            *[t if isinstance(t, Tensor) else tensor_from_array(np.asarray(t)) for t in saved]
        )
        n_user = len(outs) - len(tr.mutated_inputs)
        res = tuple(tensor_from_array(o) for o in outs[:n_user])
        # an output eager gives no gradient history to has none here either
        if not (cf._outputs_differentiable or tr.all_out_rg):
            ctx.mark_non_differentiable(*[o for o, rg in zip(res, tr.out_rg) if not rg])
        return res

    def backward(ctx, *gouts):
        tensors = ctx.saved_tensors
        vjp_cf = _vjp_function(ctx.cf, ctx.entry)
        res = vjp_cf(*tensors, *gouts)
        grads = [None] * len(tensors)
        for k, i in enumerate(_grad_positions(ctx.entry.trace)):
            grads[i] = res[k]
        return (None, None, *grads)

    return type(eager.autograd.Function)(
        "CompiledFunction",
        (eager.autograd.Function,),
        {
            "forward": staticmethod(forward),
            "backward": staticmethod(backward),
            "__doc__": "Autograd bridge: eager backward through a compiled region.",
        },
    )


_CompiledAutograd = _make_autograd_function()
