"""``torch.autograd.functional`` for eager: ``vjp``, ``jvp``, ``jacobian``, ``hessian``,
``vhp`` and ``hvp`` built on :func:`eager.autograd.grad` (reverse mode with
``create_graph``), with PyTorch's argument names, return structures and error messages.

* ``jvp`` and ``hvp`` use the double-backward trick, as PyTorch's do: the VJP of the
  function is linear in its cotangent ``u``, so differentiating it with respect to ``u``
  gives the JVP.
* ``vectorize=True`` is accepted and computes the same values with the same loop (one
  backward pass per output element): eager has no batched gradients.  Its rules still
  apply (``strict=True`` with ``vectorize=True`` is refused, as in PyTorch).
* ``strategy="forward-mode"`` (and ``outer_jacobian_strategy="forward-mode"``) needs
  ``vectorize=True``, as in PyTorch; eager then computes each column of the Jacobian
  with the double-backward trick (one JVP per input element).
"""

from __future__ import annotations

from typing import Callable

from .engine import grad as _engine_grad
from .grad_mode import enable_grad, is_grad_enabled, set_grad_enabled

__all__ = ["vjp", "jvp", "jacobian", "hessian", "hvp", "vhp"]


def _tensor_class():
    from ..tensor import Tensor

    return Tensor


def _zeros_like(t, requires_grad: bool = False):
    from ..factories import zeros_like

    return zeros_like(t, requires_grad=requires_grad)


def _stack(ts, dim: int = 0):
    from ..methods.shape import stack

    return stack(ts, dim)


# --- helpers (PyTorch's, same names) ------------------------------------------------------


def _as_tuple_nocheck(x) -> tuple:
    if isinstance(x, tuple):
        return x
    if isinstance(x, list):
        return tuple(x)
    return (x,)


def _as_tuple(inp, arg_name=None, fn_name=None):
    """``(was_tuple, tuple_of_tensors)``; the TypeError of PyTorch for a non-Tensor."""
    if arg_name is None and fn_name is None:
        return _as_tuple_nocheck(inp)
    Tensor = _tensor_class()
    is_inp_tuple = True
    if not isinstance(inp, tuple):
        inp = (inp,)
        is_inp_tuple = False
    for i, el in enumerate(inp):
        if not isinstance(el, Tensor):
            if is_inp_tuple:
                raise TypeError(
                    f"The {arg_name} given to {fn_name} must be either a Tensor or a tuple of "
                    f"Tensors but the value at index {i} has type {type(el)}."
                )
            raise TypeError(
                f"The {arg_name} given to {fn_name} must be either a Tensor or a tuple of "
                f"Tensors but the given {arg_name} has type {type(el)}."
            )
    return is_inp_tuple, inp


def _tuple_postprocess(res, to_unpack):
    if isinstance(to_unpack, tuple):
        if not to_unpack[1]:
            res = tuple(el[0] for el in res)
        if not to_unpack[0]:
            res = res[0]
    elif not to_unpack:
        res = res[0]
    return res


def _grad_preprocess(inputs: tuple, create_graph: bool, need_graph: bool) -> tuple:
    """New tensor objects for the inputs: a differentiable alias when the caller wants
    gradients to flow back to them (``create_graph`` and they require grad), else a
    detached copy that requires grad iff ``need_graph``."""
    res = []
    for inp in inputs:
        if create_graph and inp.requires_grad:
            res.append(inp.view_as(inp))
        else:
            res.append(inp.detach().requires_grad_(need_graph))
    return tuple(res)


def _grad_postprocess(inputs, create_graph: bool):
    Tensor = _tensor_class()
    if isinstance(inputs[0], Tensor):
        if not create_graph:
            return tuple(inp.detach() for inp in inputs)
        return inputs
    return tuple(_grad_postprocess(inp, create_graph) for inp in inputs)


def _validate_v(v: tuple, other: tuple, is_other_tuple: bool) -> None:
    if len(other) != len(v):
        if is_other_tuple:
            raise RuntimeError(
                f"v is a tuple of invalid length: should be {len(other)} but got {len(v)}."
            )
        raise RuntimeError("The given v should contain a single Tensor.")
    for idx, (el_v, el_other) in enumerate(zip(v, other)):
        if el_v.size() != el_other.size():
            prepend = f"Entry {idx} in " if is_other_tuple else ""
            raise RuntimeError(
                f"{prepend}v has invalid size: should be {el_other.size()} but got {el_v.size()}."
            )


def _check_requires_grad(inputs, input_type: str, strict: bool) -> None:
    if not strict:
        return
    for i, inp in enumerate(inputs):
        if inp is None:
            raise RuntimeError(
                f"The output of the user-provided function is independent of input {i}."
                " This is not allowed in strict mode."
            )
        if not inp.requires_grad:
            if input_type == "hessian":
                raise RuntimeError(
                    f"The hessian of the user-provided function with respect to input {i}"
                    " is independent of the input. This is not allowed in strict mode."
                    " You should ensure that your function is thrice differentiable and that"
                    " the hessian depends on the inputs."
                )
            if input_type == "jacobian":
                raise RuntimeError(
                    "While computing the hessian, found that the jacobian of the user-provided"
                    f" function with respect to input {i} is independent of the input. This is"
                    " not allowed in strict mode. You should ensure that your function is twice"
                    " differentiable and that the jacobian depends on the inputs (this would be"
                    " violated by a linear function for example)."
                )
            if input_type == "grad_inputs":
                raise RuntimeError(
                    f"The gradient with respect to input {i} is independent of the inputs of the"
                    " user-provided function. This is not allowed in strict mode."
                )
            raise RuntimeError(
                f"Output {i} of the user-provided function does not require gradients."
                " The outputs must be computed in a differentiable manner from the input"
                " when running in strict mode."
            )


def _autograd_grad(
    outputs: tuple, inputs: tuple, grad_outputs=None, create_graph=False, retain_graph=None
) -> tuple:
    """``autograd.grad`` that skips outputs which are None or do not require grad (None
    for every input when none is left) and allows unused inputs."""
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    new_outputs: tuple = ()
    new_grad_outputs: tuple = ()
    for out, grad_out in zip(outputs, grad_outputs):
        if out is not None and out.requires_grad:
            new_outputs += (out,)
            new_grad_outputs += (grad_out,)
    if not new_outputs:
        return (None,) * len(inputs)
    return _engine_grad(
        new_outputs,
        inputs,
        new_grad_outputs,
        allow_unused=True,
        create_graph=create_graph,
        retain_graph=retain_graph,
    )


_STAGE_MSGS = {
    "back": "The output of the user-provided function is independent of input {i}. This is "
    "not allowed in strict mode.",
    "back_trick": "The gradient with respect to the input is independent of entry {i} in the "
    "grad_outputs when using the double backward trick to compute forward mode gradients. "
    "This is not allowed in strict mode.",
    "double_back": "The jacobian of the user-provided function is independent of input {i}. "
    "This is not allowed in strict mode.",
    "double_back_trick": "The hessian of the user-provided function is independent of entry "
    "{i} in the grad_jacobian. This is not allowed in strict mode as it prevents from using "
    "the double backward trick to replace forward mode AD.",
}


def _fill_in_zeros(grads, refs, strict: bool, create_graph: bool, stage: str) -> tuple:
    res: tuple = ()
    for i, grads_i in enumerate(grads):
        if grads_i is None:
            if strict:
                raise RuntimeError(_STAGE_MSGS[stage].format(i=i))
            grads_i = _zeros_like(refs[i])
        elif strict and create_graph and not grads_i.requires_grad:
            what = "hessian" if "double" in stage else "jacobian"
            raise RuntimeError(
                f"The {what} of the user-provided function is independent of input {i}. "
                "This is not allowed in strict mode when create_graph=True."
            )
        res += (grads_i,)
    return res


# --- public API ---------------------------------------------------------------------------


def vjp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """Vector-Jacobian product ``v^T J`` of ``func`` at ``inputs``.

    Returns ``(func_output, vjp)``: ``func_output`` keeps the structure ``func`` returned
    (a Tensor or a tuple), ``vjp`` the structure of ``inputs``.  ``v`` may be omitted only
    when ``func`` returns a single one-element Tensor.  ``create_graph=True`` makes both
    results differentiable; ``strict=True`` raises when an output does not depend on an
    input (else the VJP for it is zeros).  Example::

        out, g = eager.autograd.functional.vjp(lambda x: x.exp().sum(1), x, eager.ones(4))
    """
    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "vjp")
        inputs = _grad_preprocess(inputs, create_graph=create_graph, need_graph=True)
        outputs = func(*inputs)
        is_outputs_tuple, outputs = _as_tuple(
            outputs, "outputs of the user-provided function", "vjp"
        )
        _check_requires_grad(outputs, "outputs", strict=strict)
        if v is not None:
            _, v = _as_tuple(v, "v", "vjp")
            v = _grad_preprocess(v, create_graph=create_graph, need_graph=False)
            _validate_v(v, outputs, is_outputs_tuple)
        elif len(outputs) != 1 or outputs[0].nelement() != 1:
            raise RuntimeError(
                "The vector v can only be None if the user-provided function returns "
                "a single Tensor with a single element."
            )
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        grad_res = _autograd_grad(outputs, inputs, v, create_graph=create_graph)
        result = _fill_in_zeros(grad_res, inputs, strict, create_graph, "back")
    outputs = _grad_postprocess(outputs, create_graph)
    result = _grad_postprocess(result, create_graph)
    return _tuple_postprocess(outputs, is_outputs_tuple), _tuple_postprocess(
        result, is_inputs_tuple
    )


def jvp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """Jacobian-vector product ``J v`` of ``func`` at ``inputs``, by the double-backward
    trick (as PyTorch's ``autograd.functional.jvp``).

    Returns ``(func_output, jvp)``, ``jvp`` with the structure of the outputs.  ``v`` may
    be omitted only when ``inputs`` is a single one-element Tensor.  Example::

        out, t = eager.autograd.functional.jvp(lambda x: x ** 2, x, eager.ones_like(x))
    """
    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jvp")
        inputs = _grad_preprocess(inputs, create_graph=create_graph, need_graph=True)
        if v is not None:
            _, v = _as_tuple(v, "v", "jvp")
            v = _grad_preprocess(v, create_graph=create_graph, need_graph=False)
            _validate_v(v, inputs, is_inputs_tuple)
        elif len(inputs) != 1 or inputs[0].nelement() != 1:
            raise RuntimeError(
                "The vector v can only be None if the input to the user-provided function "
                "is a single Tensor with a single element."
            )
        outputs = func(*inputs)
        is_outputs_tuple, outputs = _as_tuple(
            outputs, "outputs of the user-provided function", "jvp"
        )
        _check_requires_grad(outputs, "outputs", strict=strict)
        # The VJP is linear in grad_outputs, so their value (zeros) never matters.
        grad_outputs = tuple(_zeros_like(out, requires_grad=True) for out in outputs)
        grad_inputs = _autograd_grad(outputs, inputs, grad_outputs, create_graph=True)
        _check_requires_grad(grad_inputs, "grad_inputs", strict=strict)
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        grad_res = _autograd_grad(grad_inputs, grad_outputs, v, create_graph=create_graph)
        result = _fill_in_zeros(grad_res, outputs, strict, create_graph, "back_trick")
    outputs = _grad_postprocess(outputs, create_graph)
    result = _grad_postprocess(result, create_graph)
    return _tuple_postprocess(outputs, is_outputs_tuple), _tuple_postprocess(
        result, is_outputs_tuple
    )


def _jacfwd(func: Callable, inputs, strict: bool, vectorize: bool):
    """Forward-mode Jacobian: one JVP (double-backward trick) per input element."""
    if strict:
        raise RuntimeError(
            "torch.autograd.functional.jacobian: `strict=True` "
            'and `strategy="forward-mode"` are not supported together (yet). '
            "Please either set `strict=False` or "
            '`strategy="reverse-mode"`.'
        )
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
    if not vectorize:
        raise NotImplementedError(
            "Computing Jacobian using forward-AD or forward-over-reverse Hessian is"
            "only implemented for `vectorize=True`."
        )
    with enable_grad():
        inputs = tuple(inp.detach().requires_grad_(True) for inp in inputs)
        is_outputs_tuple, outputs = _as_tuple(func(*inputs), "outputs")
        outputs = tuple(outputs)
        us = tuple(_zeros_like(out, requires_grad=True) for out in outputs)
        gin = _autograd_grad(outputs, inputs, us, create_graph=True)
        live = [k for k, g in enumerate(gin) if g is not None and g.requires_grad]
        cols: list = [[[] for _ in inputs] for _ in outputs]  # cols[o][i]: list of columns
        for i, inp in enumerate(inputs):
            for k in range(inp.nelement()):
                if live:
                    e = _zeros_like(inp).reshape(-1)
                    e[k] = 1
                    e = e.reshape(inp.shape)
                    # only input i's tangent is nonzero: differentiate its VJP entry alone
                    col = (
                        _autograd_grad((gin[i],), us, (e,), retain_graph=True)
                        if i in live
                        else (None,) * len(us)
                    )
                else:
                    col = (None,) * len(us)
                for o, out in enumerate(outputs):
                    c = col[o]
                    cols[o][i].append(_zeros_like(out) if c is None else c.detach())
    # lists, as PyTorch's forward-mode path returns them
    jac: list = []
    for o, out in enumerate(outputs):
        row = []
        for i, inp in enumerate(inputs):
            if cols[o][i]:
                j = _stack(cols[o][i], -1)
            else:
                j = _zeros_like(out).reshape(*out.shape, 0)
            row.append(j.reshape(*out.shape, *inp.shape).detach())
        jac.append(row)
    return _tuple_postprocess(jac, (is_outputs_tuple, is_inputs_tuple))


def jacobian(
    func: Callable,
    inputs,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    strategy: str = "reverse-mode",
):
    """Jacobian of ``func`` at ``inputs``: ``J[i][j]`` has shape
    ``outputs[i].shape + inputs[j].shape`` (a single Tensor when neither is a tuple, a
    tuple when one is, a tuple of tuples when both are).

    One backward pass per output element.  ``vectorize=True`` is accepted and runs the
    same loop (eager has no batched gradients).  ``strategy="forward-mode"`` requires
    ``vectorize=True`` (as in PyTorch) and computes one JVP per input element with the
    double-backward trick.  Example::

        J = eager.autograd.functional.jacobian(lambda x: x.exp().sum(1), eager.rand(2, 2))
    """
    if strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError(
            'Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your '
            'function has more outputs than inputs, "forward-mode" tends to be more performant. '
            'Otherwise, prefer to use "reverse-mode".'
        )
    if strategy == "forward-mode":
        if create_graph:
            raise NotImplementedError(
                "torch.autograd.functional.jacobian: `create_graph=True` "
                'and `strategy="forward-mode"` are not supported together (yet). '
                "Please either set `create_graph=False` or "
                '`strategy="reverse-mode"`.'
            )
        return _jacfwd(func, inputs, strict, vectorize)

    with enable_grad():
        is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        inputs = _grad_preprocess(inputs, create_graph=create_graph, need_graph=True)
        outputs = func(*inputs)
        is_outputs_tuple, outputs = _as_tuple(
            outputs, "outputs of the user-provided function", "jacobian"
        )
        _check_requires_grad(outputs, "outputs", strict=strict)
        if vectorize and strict:
            raise RuntimeError(
                "torch.autograd.functional.jacobian: `strict=True` "
                "and `vectorized=True` are not supported together. "
                "Please either set `strict=False` or "
                "`vectorize=False`."
            )
        jac: tuple = ()
        for i, out in enumerate(outputs):
            jac_i: tuple = tuple([] for _ in range(len(inputs)))
            flat = out.reshape(-1)
            for j in range(out.nelement()):
                vj = _autograd_grad(
                    (flat[j],), inputs, retain_graph=True, create_graph=create_graph
                )
                for el_idx, (jac_i_el, vj_el, inp_el) in enumerate(zip(jac_i, vj, inputs)):
                    if vj_el is not None:
                        if strict and create_graph and not vj_el.requires_grad:
                            raise RuntimeError(
                                "The jacobian of the user-provided function is "
                                f"independent of input {i}. This is not allowed in "
                                "strict mode when create_graph=True."
                            )
                        jac_i_el.append(vj_el)
                    else:
                        if strict:
                            raise RuntimeError(
                                f"Output {i} of the user-provided function is "
                                f"independent of input {el_idx}. This is not allowed in "
                                "strict mode."
                            )
                        jac_i_el.append(_zeros_like(inp_el))
            jac += (
                tuple(
                    (
                        _stack(jac_i_el, 0)
                        if jac_i_el
                        else _zeros_like(inputs[el_idx]).reshape(0, *inputs[el_idx].shape)
                    ).reshape(*out.shape, *inputs[el_idx].shape)
                    for el_idx, jac_i_el in enumerate(jac_i)
                ),
            )
        jac = _grad_postprocess(jac, create_graph)
        return _tuple_postprocess(jac, (is_outputs_tuple, is_inputs_tuple))


def hessian(
    func: Callable,
    inputs,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    outer_jacobian_strategy: str = "reverse-mode",
):
    """Hessian of a scalar function: the Jacobian of its (reverse-mode) Jacobian.

    A single Tensor of shape ``inputs.shape * 2`` for one input, else a tuple of tuples
    (``H[i][j]`` of shape ``inputs[i].shape + inputs[j].shape``).  ``func`` must return a
    single one-element Tensor.  ``outer_jacobian_strategy="forward-mode"`` requires
    ``vectorize=True`` (as in PyTorch).  Example::

        H = eager.autograd.functional.hessian(lambda x: x.pow(3).sum(), eager.rand(2, 2))
    """
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError('Expected strategy to be either "forward-mode" or "reverse-mode".')
    Tensor = _tensor_class()

    def ensure_single_output_function(*inp):
        out = func(*inp)
        is_out_tuple, t_out = _as_tuple(out, "outputs of the user-provided function", "hessian")
        _check_requires_grad(t_out, "outputs", strict=strict)
        if is_out_tuple or not isinstance(out, Tensor):
            raise RuntimeError("The function given to hessian should return a single Tensor")
        if out.nelement() != 1:
            raise RuntimeError(
                "The Tensor returned by the function given to hessian should contain a single "
                "element"
            )
        return out.squeeze()

    def jac_func(*inp):
        if outer_jacobian_strategy == "forward-mode":
            inp = tuple(t.requires_grad_(True) for t in inp)
        jac = jacobian(ensure_single_output_function, inp, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict=strict)
        return jac

    res = jacobian(
        jac_func,
        inputs,
        create_graph=create_graph,
        strict=strict,
        vectorize=vectorize,
        strategy=outer_jacobian_strategy,
    )
    return _tuple_postprocess(res, (is_inputs_tuple, is_inputs_tuple))


def _scalar_func_outputs(func, inputs, strict: bool, name: str):
    Tensor = _tensor_class()
    outputs = func(*inputs)
    is_outputs_tuple, outputs = _as_tuple(outputs, "outputs of the user-provided function", name)
    _check_requires_grad(outputs, "outputs", strict=strict)
    if is_outputs_tuple or not isinstance(outputs[0], Tensor):
        raise RuntimeError(f"The function given to {name} should return a single Tensor")
    if outputs[0].nelement() != 1:
        raise RuntimeError(
            f"The Tensor returned by the function given to {name} should contain a single element"
        )
    return is_outputs_tuple, outputs


def _hv_prologue(inputs, v, create_graph: bool, name: str):
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", name)
    inputs = _grad_preprocess(inputs, create_graph=create_graph, need_graph=True)
    if v is not None:
        _, v = _as_tuple(v, "v", name)
        v = _grad_preprocess(v, create_graph=create_graph, need_graph=False)
        _validate_v(v, inputs, is_inputs_tuple)
    elif len(inputs) != 1 or inputs[0].nelement() != 1:
        raise RuntimeError(
            "The vector v can only be None if the input to the user-provided function "
            "is a single Tensor with a single element."
        )
    return is_inputs_tuple, inputs, v


def vhp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """Vector-Hessian product ``v^T H`` of a scalar function at ``inputs``.

    Returns ``(func_output, vhp)``, ``vhp`` with the structure of ``inputs``.  Example::

        out, r = eager.autograd.functional.vhp(lambda x: x.pow(3).sum(), x, eager.ones_like(x))
    """
    with enable_grad():
        is_inputs_tuple, inputs, v = _hv_prologue(inputs, v, create_graph, "vhp")
        is_outputs_tuple, outputs = _scalar_func_outputs(func, inputs, strict, "vhp")
        jac = _autograd_grad(outputs, inputs, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict=strict)
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        grad_res = _autograd_grad(jac, inputs, v, create_graph=create_graph)
        result = _fill_in_zeros(grad_res, inputs, strict, create_graph, "double_back")
    outputs = _grad_postprocess(outputs, create_graph)
    result = _grad_postprocess(result, create_graph)
    return _tuple_postprocess(outputs, is_outputs_tuple), _tuple_postprocess(
        result, is_inputs_tuple
    )


def hvp(func: Callable, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """Hessian-vector product ``H v`` of a scalar function at ``inputs`` (double-backward
    trick over the gradient, as PyTorch).  For a twice continuously differentiable
    function ``hvp`` equals ``vhp``, which is cheaper.  Example::

        out, r = eager.autograd.functional.hvp(lambda x: x.pow(3).sum(), x, eager.ones_like(x))
    """
    with enable_grad():
        is_inputs_tuple, inputs, v = _hv_prologue(inputs, v, create_graph, "hvp")
        is_outputs_tuple, outputs = _scalar_func_outputs(func, inputs, strict, "hvp")
        jac = _autograd_grad(outputs, inputs, create_graph=True)
        _check_requires_grad(jac, "jacobian", strict=strict)
        grad_jac = tuple(_zeros_like(inp, requires_grad=True) for inp in inputs)
        double_back = _autograd_grad(jac, inputs, grad_jac, create_graph=True)
        _check_requires_grad(jac, "hessian", strict=strict)
    with set_grad_enabled(True if create_graph else is_grad_enabled()):
        grad_res = _autograd_grad(double_back, grad_jac, v, create_graph=create_graph)
        result = _fill_in_zeros(grad_res, inputs, strict, create_graph, "double_back_trick")
    outputs = _grad_postprocess(outputs, create_graph)
    result = _grad_postprocess(result, create_graph)
    return _tuple_postprocess(outputs, is_outputs_tuple), _tuple_postprocess(
        result, is_inputs_tuple
    )
