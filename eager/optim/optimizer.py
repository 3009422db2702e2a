"""The optimizers: ``SGD``, ``Adam``, ``AdamW``, ``RMSprop``, ``Adagrad`` with PyTorch's
update formulas.

Updates run in place on each parameter's numpy buffer (bumping its version
counter, as PyTorch's in-place ops do), never on the tape.  The arithmetic
follows PyTorch's single-tensor ("for-loop") implementations step by step, in
the parameter's dtype; PyTorch's vectorized CPU kernels may fuse a
multiply-add, so results agree to rounding rather than bit for bit.
"""

from __future__ import annotations

import copy
import math
import warnings
from typing import Any, Callable, Iterable, Optional

import numpy as np

from ..autograd.grad_mode import enable_grad, no_grad
from ..nn.module import _typename, _zero_grad
from ..factories import TRACING, zeros, zeros_like
from ..surface import TensorOps
from ..tensor import Tensor


class Optimizer:
    """Base class: holds ``param_groups`` (dicts with ``'params'`` and hyper-parameters) and
    per-parameter ``state``; subclasses implement ``step``."""

    def __init__(self, params: Any, defaults: dict) -> None:
        self.defaults = defaults
        self.state: dict = {}
        self.param_groups: list = []
        if isinstance(params, Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of "
                f"Tensors or dicts, but got {_typename(params)}"
            )
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, param_group: dict) -> None:
        """Add a group of parameters, filling unspecified hyper-parameters from ``defaults``."""
        if self.__dict__.get("_traced_by") is not None:
            raise RuntimeError(
                f"{type(self).__name__}.add_param_group() was called inside a function being "
                "compiled; add param groups outside it (the next call traces again)"
            )
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, (set, frozenset)):
            raise TypeError(
                "optimizer parameters need to be organized in ordered collections, "
                "but the ordering of tensors in sets will change between runs. "
                "Please use a list instead."
            )
        else:
            params = list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(
                    f"optimizer can only optimize Tensors, but one of the params is {_typename(p)}"
                )
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        group = dict(param_group)
        group["params"] = params
        for name, default in self.defaults.items():
            group.setdefault(name, default)
        if len({id(p) for p in params}) != len(params):
            warnings.warn(
                "optimizer contains a parameter group with duplicate parameters; in "
                "future, this will cause an error; see "
                "github.com/pytorch/pytorch/issues/40967 for more information",
                stacklevel=3,
            )
        existing = {id(p) for g in self.param_groups for p in g["params"]}
        if existing & {id(p) for p in params}:
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the ``.grad`` of every parameter (to ``None``, or zeros in place)."""
        self._ops("zero_grad")
        for group in self.param_groups:
            for p in group["params"]:
                _zero_grad(p, set_to_none)

    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """One update of every parameter that has a gradient; ``closure`` (re-evaluating
        the loss) is called first, with grad mode on, and its result returned."""
        ops = self._ops("step")
        if ops.traced:
            _check_traceable(self, closure)
        loss = self._closure(closure)
        self._opt_called = True  # read by the lr schedulers' "step order" warning
        if ops.traced:  # tensor ops on leaves that require grad: in place, off the tape
            with no_grad():
                for group in self.param_groups:
                    self._update(group, ops)
        else:
            for group in self.param_groups:
                self._update(group, ops)
        return loss

    def _update(self, group: dict, ops: Any) -> None:
        raise NotImplementedError

    def _ops(self, what: str) -> Any:
        """The primitives the update runs on: numpy buffers in eager; the tensors
        themselves (tracers) when a compiler traces a function that reaches this optimizer
        by name and has put its tracers in ``param_groups``/``state`` (``_traced_by``)."""
        tr = TRACING.tracer
        if tr is None:
            return _ArrayOps
        if self.__dict__.get("_traced_by") is not tr:
            _not_while_traced(self, what)
        return _TensorOps

    def _closure(self, closure: Optional[Callable[[], Any]]) -> Any:
        if closure is None:
            return None
        with enable_grad():
            return closure()

    # --- serialization ----------------------------------------------------------------
    def state_dict(self) -> dict:
        """``{'state': {index: {...}}, 'param_groups': [{..., 'params': [indices]}]}``."""
        index: dict = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            for p in group["params"]:
                index.setdefault(id(p), len(index))
            packed["params"] = [index[id(p)] for p in group["params"]]
            groups.append(packed)
        state = {index[id(p)]: s for p, s in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore hyper-parameters and per-parameter state saved by ``state_dict()``."""
        state_dict = copy.deepcopy(state_dict)
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for mine, saved in zip(self.param_groups, saved_groups):
            if len(mine["params"]) != len(saved["params"]):
                raise ValueError(
                    "loaded state dict contains a parameter group that doesn't "
                    "match the size of optimizer's group"
                )
        by_index: dict = {}
        for mine, saved in zip(self.param_groups, saved_groups):
            by_index.update(zip(saved["params"], mine["params"]))
        self.state = {}
        for idx, s in state_dict["state"].items():
            p = by_index.get(idx)
            if p is None:
                continue
            self.state[p] = {k: _cast_state(k, v, p) for k, v in s.items()}
        for mine, saved in zip(self.param_groups, saved_groups):
            for k, v in saved.items():
                if k != "params":
                    mine[k] = v

    def __repr__(self) -> str:
        s = type(self).__name__ + " ("
        for i, group in enumerate(self.param_groups):
            s += f"\nParameter Group {i}\n"
            for key in sorted(group):
                if key != "params":
                    s += f"    {key}: {group[key]}\n"
        return s + ")"

    def _grads(self, group: dict, ops: Any):
        """(param, param values, grad values) for every parameter of the group that has a
        grad: numpy arrays in eager, the tensors themselves when traced."""
        traced = ops.traced
        for p in group["params"]:
            # traced: the property, which tells the tracer the step reads .grad (a .grad
            # set before the call is then an input of the graph, not dropped as unread)
            g = p.grad if traced else p._grad
            if g is None:
                continue
            if traced:
                yield p, p, g
            else:
                yield p, p._data, g._data


_IMPL_FLAGS = ("foreach", "fused", "capturable", "differentiable")


def _check_traceable(opt: Optimizer, closure: Any) -> None:
    """What a compiled step cannot reproduce exactly: refused, named."""
    name = type(opt).__name__
    if closure is not None:
        raise RuntimeError(
            f"{name}.step(closure) inside a compiled function is not supported: call "
            "the loss computation and backward() in the function itself, then step()"
        )
    for i, group in enumerate(opt.param_groups):
        for flag in _IMPL_FLAGS:
            if group.get(flag):
                raise RuntimeError(
                    f"{name}.step() inside a compiled function: param_groups[{i}] has "
                    f"{flag}={group[flag]!r}; only the single-tensor implementation "
                    f"({flag}=None/False) is compiled"
                )


class _ArrayOps:
    """The update's primitives in eager: parameters, grads and state are the tensors'
    numpy buffers, updated in place (the fast path; no tape, no dispatch)."""

    traced = False
    sqrt = staticmethod(np.sqrt)
    scalar_sqrt = staticmethod(math.sqrt)
    zeros_like = staticmethod(np.zeros_like)
    wrap = staticmethod(Tensor._make)

    @staticmethod
    def data(t: Tensor) -> Any:
        return t._data

    @staticmethod
    def clone(a: Any) -> Any:
        return np.array(a, copy=True)

    @staticmethod
    def step_tensor() -> Tensor:
        return Tensor._make(np.array(0.0, dtype=np.float32))

    @staticmethod
    def scalar(step_t: Any) -> Any:
        return float(step_t)

    @staticmethod
    def maximum_(a: Any, b: Any) -> None:
        np.maximum(a, b, out=a)

    @staticmethod
    def assign_(a: Any, b: Any) -> None:
        a[...] = b

    @staticmethod
    def full_like(a: Any, value: float) -> Any:
        return np.full_like(a, value)

    @staticmethod
    def num(v: Any) -> Any:
        """A scalar coefficient as the Python float PyTorch passes to ``add_(alpha=)`` /
        ``addcdiv_(value=)`` (a Tensor lr's arithmetic is done in its dtype first)."""
        return float(v)


class _TensorOps:
    """The same primitives on tensors (a compiler's tracers, under no_grad): the same
    arithmetic in the same order and dtypes; Python scalars derived from the step count
    are 0-d float64 tensors (as exact as Python's floats)."""

    traced = True

    @staticmethod
    def data(t: Any) -> Any:
        return t

    @staticmethod
    def wrap(a: Any) -> Any:
        return a

    @staticmethod
    def sqrt(a: Any) -> Any:
        return a.sqrt()

    scalar_sqrt = sqrt

    @staticmethod
    def zeros_like(a: Any) -> Any:
        return zeros_like(a)

    @staticmethod
    def clone(a: Any) -> Any:
        return a.clone()

    @staticmethod
    def step_tensor() -> Any:
        return zeros((), dtype=np.float32)

    @staticmethod
    def scalar(step_t: Any) -> Any:
        return step_t.double()

    @staticmethod
    def maximum_(a: Any, b: Any) -> None:
        a.copy_(a.maximum(b))

    @staticmethod
    def assign_(a: Any, b: Any) -> None:
        a.copy_(b)

    @staticmethod
    def full_like(a: Any, value: float) -> Any:
        return zeros_like(a) + value

    @staticmethod
    def num(v: Any) -> Any:
        return v


def _not_while_traced(opt: Optimizer, what: str) -> None:
    """An optimizer updates the buffers of the eager tensors it holds.  Inside a function
    a compiler is tracing (``TRACING.tracer`` is set on this thread) that did not lift
    this optimizer (it reaches it only through an object the compiler does not walk),
    that update would happen once, while tracing, and never be part of the compiled code:
    refuse it."""
    raise RuntimeError(
        f"{type(opt).__name__}.{what}() was called inside a function being compiled, "
        "but the compiler did not find the optimizer among what the function reads by "
        "name (a global, a closure variable, a default argument, or a list/dict of those), "
        "so its update would not be part of the compiled code. Make the optimizer a "
        "global or closure variable of the compiled function, or call optimizer.zero_grad() "
        "and optimizer.step() outside it."
    )


def _cast_state(key: str, value: Any, p: Tensor) -> Any:
    # PyTorch keeps 'step' as is and casts the other state tensors to the parameter's dtype.
    if isinstance(value, Tensor) and key != "step" and value._data.dtype != p._data.dtype:
        return Tensor._make(value._data.astype(p._data.dtype))
    return value


def _impl_flags(names: tuple, values: dict) -> dict:
    """PyTorch's implementation switches, kept in the param groups (as PyTorch does) so
    state_dicts have the same keys; only their defaults are supported."""
    out = {}
    for name in names:
        v = values.get(name)
        if name in ("differentiable", "capturable"):
            v = bool(v)
            if v:
                raise NotImplementedError(f"eager.optim: {name}=True is not supported")
        elif name == "fused" and v:
            raise NotImplementedError("eager.optim: fused=True is not supported")
        out[name] = v
    return out


def _written(p: Tensor) -> None:
    p._version[0] += 1  # type: ignore[attr-defined]


def _check_lr(lr: Any, foreach_refused: bool = False) -> None:
    """PyTorch's checks of ``lr`` (a number, or a 1-element Tensor), same messages."""
    if isinstance(lr, Tensor):
        if foreach_refused:
            raise ValueError(
                "lr as a Tensor is not supported for capturable=False and foreach=True"
            )
        if lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
    if lr < 0.0:
        # PyTorch formats a 0-d tensor as its Python number
        shown = lr.item() if isinstance(lr, Tensor) and lr.dim() == 0 else lr
        raise ValueError(f"Invalid learning rate: {shown}")


def _lr_value(lr: Any, ops: Any) -> Any:
    """A group's lr as the update computes with it.  A number stays a number.  A Tensor
    lr (PyTorch's ``_to_scalar``: squeezed to 0-d) is read at this step, so an in-place
    change (``lr.fill_(...)``, a scheduler) is seen: in eager as a numpy scalar of its
    dtype (integer -> float32), so ``lr / bias_correction`` rounds in that dtype as
    PyTorch's 0-d tensor arithmetic does; traced, as the tensor (a graph input)."""
    if not isinstance(lr, TensorOps):  # (traced, a Tensor lr is a compiler's tracer)
        return lr
    if ops.traced:
        if lr.dim() != 0:
            lr = lr.reshape(())
        if not lr.is_floating_point():
            lr = lr.float()
        return lr
    a = lr._data.reshape(())
    if a.dtype.kind != "f":
        a = a.astype(np.float32)
    return a[()]


def _lr_div(lr: Any, d: Any) -> Any:
    """``lr / d`` in the lr's dtype: traced, the step-derived ``d`` is a float64 tensor
    (as exact as a Python float) and is cast to the lr's dtype first, as a Python float
    would be by a 0-d float32 tensor lr in PyTorch."""
    if isinstance(lr, TensorOps) and isinstance(d, TensorOps) and d.dtype != lr.dtype:
        d = d.to(lr.dtype)
    return lr / d


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, Nesterov and weight decay::

    g = grad + weight_decay * p
    buf = g                                   (first step)
    buf = momentum * buf + (1 - dampening) * g
    g = g + momentum * buf   if nesterov   else   g = buf
    p = p - lr * g
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        foreach: Optional[bool] = None,
        differentiable: bool = False,
        fused: Optional[bool] = None,
    ) -> None:
        _check_lr(lr)
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            maximize=maximize,
            **_impl_flags(
                ("foreach", "differentiable", "fused"),
                dict(foreach=foreach, differentiable=differentiable, fused=fused),
            ),
        )
        super().__init__(params, defaults)

    def _update(self, group: dict, ops: Any) -> None:
        lr, momentum = _lr_value(group["lr"], ops), group["momentum"]
        neg_lr = ops.num(-lr)
        dampening, wd = group["dampening"], group["weight_decay"]
        nesterov, maximize = group["nesterov"], group["maximize"]
        for p, x, g in self._grads(group, ops):
            if maximize:
                g = -g
            if wd != 0:
                g = g + wd * x
            if momentum != 0:
                state = self.state.setdefault(p, {})
                buf = state.get("momentum_buffer")
                if buf is None:
                    buf = ops.wrap(ops.clone(g))
                    state["momentum_buffer"] = buf
                else:
                    b = ops.data(buf)
                    b *= momentum
                    b += (1 - dampening) * g
                g = g + momentum * ops.data(buf) if nesterov else ops.data(buf)
            x += neg_lr * g
            if not ops.traced:
                _written(p)


class Adam(Optimizer):
    """Adam (and AMSGrad) exactly as PyTorch computes it::

    g = grad + weight_decay * p
    m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
    v_hat = max(v_hat, v)                                       (amsgrad)
    denom = sqrt(v or v_hat) / sqrt(1 - beta2**t) + eps
    p = p - lr / (1 - beta1**t) * m / denom
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
        *,
        foreach: Optional[bool] = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: Optional[bool] = None,
        decoupled_weight_decay: bool = False,
    ) -> None:
        _check_lr(lr, foreach_refused=bool(foreach) and not capturable)
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            maximize=maximize,
            **_impl_flags(
                ("foreach", "capturable", "differentiable", "fused"),
                dict(
                    foreach=foreach,
                    capturable=capturable,
                    differentiable=differentiable,
                    fused=fused,
                ),
            ),
            decoupled_weight_decay=decoupled_weight_decay,
        )
        super().__init__(params, defaults)

    def _update(self, group: dict, ops: Any) -> None:
        lr, (beta1, beta2), eps = _lr_value(group["lr"], ops), group["betas"], group["eps"]
        wd, amsgrad, maximize = group["weight_decay"], group["amsgrad"], group["maximize"]
        decoupled = group.get("decoupled_weight_decay", False)
        for p, x, g in self._grads(group, ops):
            state = self.state.setdefault(p, {})
            if not state:
                state["step"] = ops.step_tensor()
                state["exp_avg"] = ops.wrap(ops.zeros_like(x))
                state["exp_avg_sq"] = ops.wrap(ops.zeros_like(x))
                if amsgrad:
                    state["max_exp_avg_sq"] = ops.wrap(ops.zeros_like(x))
            if maximize:
                g = -g
            step_t = ops.data(state["step"])
            step_t += 1
            if wd != 0:
                if decoupled:
                    x *= ops.num(1 - lr * wd)
                else:
                    g = g + wd * x
            m, v = ops.data(state["exp_avg"]), ops.data(state["exp_avg_sq"])
            _lerp_(m, g, 1 - beta1, ops)
            v *= beta2
            v += (1 - beta2) * g * g
            step = ops.scalar(step_t)
            bias_correction1 = 1 - beta1**step
            bias_correction2_sqrt = ops.scalar_sqrt(1 - beta2**step)
            step_size = ops.num(_lr_div(lr, bias_correction1))
            if amsgrad:
                vmax = ops.data(state["max_exp_avg_sq"])
                ops.maximum_(vmax, v)
                denom = ops.sqrt(vmax) / bias_correction2_sqrt + eps
            else:
                denom = ops.sqrt(v) / bias_correction2_sqrt + eps
            x += (-step_size) * (m / denom)
            if not ops.traced:
                _written(p)


def _lerp_(start: Any, end: Any, weight: float, ops: Any = None) -> None:
    """``start += weight * (end - start)`` the way PyTorch's CPU lerp rounds it."""
    if weight < 0.5:
        start += weight * (end - start)
    else:
        (ops or _ArrayOps).assign_(start, end - (end - start) * (1 - weight))


class AdamW(Adam):
    """Adam with decoupled weight decay (``p *= 1 - lr * weight_decay`` before the step)."""

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: Optional[bool] = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: Optional[bool] = None,
    ) -> None:
        super().__init__(
            params,
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            foreach=foreach,
            maximize=maximize,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
            decoupled_weight_decay=True,
        )


class RMSprop(Optimizer):
    """RMSprop as PyTorch computes it::

    g = grad + weight_decay * p
    v = alpha * v + (1 - alpha) * g * g
    avg = sqrt(v - mean_g**2) + eps  (centered: mean_g = lerp(mean_g, g, 1 - alpha))
    buf = momentum * buf + g / avg;  p -= lr * buf      (momentum > 0)
    p -= lr * g / avg                                    (otherwise)
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum: float = 0,
        centered: bool = False,
        capturable: bool = False,
        foreach: Optional[bool] = None,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        _check_lr(lr)
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= alpha:
            raise ValueError(f"Invalid alpha value: {alpha}")
        defaults = dict(
            lr=lr,
            momentum=momentum,
            alpha=alpha,
            eps=eps,
            centered=centered,
            weight_decay=weight_decay,
            **_impl_flags(("capturable", "foreach"), dict(capturable=capturable, foreach=foreach)),
            maximize=maximize,
            **_impl_flags(("differentiable",), dict(differentiable=differentiable)),
        )
        super().__init__(params, defaults)

    def _update(self, group: dict, ops: Any) -> None:
        lr, alpha, eps = _lr_value(group["lr"], ops), group["alpha"], group["eps"]
        neg_lr = ops.num(-lr)
        wd, momentum = group["weight_decay"], group["momentum"]
        centered, maximize = group["centered"], group["maximize"]
        for p, x, g in self._grads(group, ops):
            state = self.state.setdefault(p, {})
            if not state:
                state["step"] = ops.step_tensor()
                state["square_avg"] = ops.wrap(ops.zeros_like(x))
                if momentum > 0:
                    state["momentum_buffer"] = ops.wrap(ops.zeros_like(x))
                if centered:
                    state["grad_avg"] = ops.wrap(ops.zeros_like(x))
            if maximize:
                g = -g
            step_t = ops.data(state["step"])
            step_t += 1
            if wd != 0:
                g = g + wd * x
            sq = ops.data(state["square_avg"])
            sq *= alpha
            sq += (1 - alpha) * g * g
            if centered:
                ga = ops.data(state["grad_avg"])
                _lerp_(ga, g, 1 - alpha, ops)
                avg = ops.sqrt(sq + (-1) * ga * ga)
            else:
                avg = ops.sqrt(sq)
            avg += eps
            if momentum > 0:
                buf = ops.data(state["momentum_buffer"])
                buf *= momentum
                buf += g / avg
                x += neg_lr * buf
            else:
                x += neg_lr * g / avg
            if not ops.traced:
                _written(p)


class Adagrad(Optimizer):
    """Adagrad as PyTorch computes it::

    g = grad + weight_decay * p;  clr = lr / (1 + (step - 1) * lr_decay)
    sum += g * g;  p -= clr * g / (sqrt(sum) + eps)
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-2,
        lr_decay: float = 0,
        weight_decay: float = 0,
        initial_accumulator_value: float = 0,
        eps: float = 1e-10,
        foreach: Optional[bool] = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        fused: Optional[bool] = None,
    ) -> None:
        _check_lr(lr)
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= initial_accumulator_value:
            raise ValueError(
                f"Invalid initial_accumulator_value value: {initial_accumulator_value}"
            )
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        defaults = dict(
            lr=lr,
            lr_decay=lr_decay,
            eps=eps,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            foreach=foreach,
            maximize=maximize,
            **_impl_flags(
                ("differentiable", "fused"), dict(differentiable=differentiable, fused=fused)
            ),
        )
        super().__init__(params, defaults)
        # PyTorch creates Adagrad's state up front (state_dict() shows it before any step)
        for group in self.param_groups:
            for p in group["params"]:
                self._init_state(p, group)

    def _init_state(self, p: Tensor, group: dict, ops: Any = None) -> dict:
        ops = ops or _ArrayOps
        state = self.state.setdefault(p, {})
        if not state:
            init = group["initial_accumulator_value"]
            state["step"] = ops.step_tensor()
            state["sum"] = ops.wrap(ops.full_like(ops.data(p), init))
        return state

    def _update(self, group: dict, ops: Any) -> None:
        lr, lr_decay, eps = _lr_value(group["lr"], ops), group["lr_decay"], group["eps"]
        wd, maximize = group["weight_decay"], group["maximize"]
        for p, x, g in self._grads(group, ops):
            state = self._init_state(p, group, ops)
            step_t = ops.data(state["step"])
            step_t += 1
            step = ops.scalar(step_t)
            if maximize:
                g = -g
            if wd != 0:
                g = g + wd * x
            clr = ops.num(_lr_div(lr, 1 + (step - 1) * lr_decay))
            s = ops.data(state["sum"])
            s += g * g
            std = ops.sqrt(s)
            std += eps
            x += (-clr) * g / std
            if not ops.traced:
                _written(p)
