"""The Tracer: a symbolic tensor, one node of the graph being traced.

A Tracer shares eager's whole op surface (``eager.surface.TensorOps``), so the
same code runs eagerly on Tensors and symbolically here.  Shapes and dtypes
are known while tracing; values are not, and every attempt to look at one
(``bool``, ``float``, ``.item()``, numpy functions) raises an error that names
the argument the value depends on and the source line.  In-place ops become
rebinding of nodes, following eager's buffers (graphc.tracer.views).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

import eager
from eager.interop import FROM_NP, GRAD_MODE, check_inplace_result
from eager.interop import Size, TensorOps
from eager.interop import data_of, requires_grad_of
from eager.interop import Tensor, set_requires_grad_flag

from ..errors import (
    ConcretizationTypeError,
    LeakedTracerError,
    TracerArrayConversionError,
    TracerBoolConversionError,
    TracerError,
)
from ..ir import type_str
from ..layout import Layout, c_layout, c_strides
from .source import user_src
from .views import _Storage, _check_view_write, _place, _sync, _unview


class Tracer(TensorOps):
    """A symbolic tensor: a node of the graph being traced."""

    __slots__ = (
        "_ctx",
        "_node",
        "_meta_shape",
        "_meta_dtype",
        "_rg",
        "_grad",
        "_ng",
        "_view",
        "_stor",
        "_gen",
        "_lay",
        "__weakref__",
    )
    _priority = 2
    # ``loss.backward()`` while tracing is reverse mode, which graphc.autodiff (the layer
    # above) provides: it installs its ``traced_backward`` here when it is imported, as
    # graphc's package import always does
    _traced_backward: Optional[Callable] = None
    # ``eager.autograd.grad`` on traced values: graphc.autodiff installs it too
    _traced_grad: Optional[Callable] = None

    def __init__(
        self, ctx, node: int, shape: tuple, dtype: np.dtype, lay: Optional[Layout] = None
    ) -> None:
        self._ctx = ctx
        self._node = node
        self._meta_shape = tuple(shape)
        self._meta_dtype = np.dtype(dtype)
        self._rg = False
        self._grad = None
        self._ng = None  # made under no_grad: True, or (node, its detach node) once used
        # eager's memory model, followed symbolically (see "views" below): the buffer this
        # value lives in, the buffer's write count when ``_node`` was last brought up to
        # date, this value's element layout in the buffer (None: unknown), and for a view
        # (parent tracer, op, attrs, how it was made)
        self._stor = _Storage()
        self._gen = 0
        self._lay = lay
        self._view = None

    @property
    def node(self) -> int:
        """The graph node holding this value now: a view whose buffer was written through
        another alias since is brought up to date first (re-derived from its base)."""
        if self._view is not None and self._gen != self._stor.gen:
            _sync(self)
        return self._node

    @node.setter
    def node(self, nid: int) -> None:
        self._node = nid

    # --- the op surface hook ---------------------------------------------------------
    def _apply(self, op: str, gname: str, operands: tuple, attrs: dict) -> "Tracer":
        ctx = self._ctx
        _check_live(self, op)
        for o in operands:  # record in the innermost trace: a loop body's, when one is read
            if o.__class__ is Tracer and o._ctx.depth > ctx.depth:
                ctx = o._ctx
        ids = []
        src = ctx.src if ctx.src is not None else user_src(2)
        for o in operands:
            if o.__class__ is Tracer:
                if o._ctx is not ctx:
                    _check_live(o, op)
                    try:
                        ids.append(ctx.capture(o, src))
                    except TracerError as e:
                        raise TracerError(f"{op} {e}") from None
                    continue
                if o._ng is not None and _GRAD.enabled and ctx.role == "forward":
                    ids.append(_stop_gradient(o, src))
                else:
                    ids.append(o.node)
            elif isinstance(o, Tensor):
                ids.append(ctx.const(data_of(o), src))
                if requires_grad_of(o):
                    ctx.closed_rg.setdefault(ids[-1], src)
            elif isinstance(o, (np.ndarray, np.generic)):
                ids.append(ctx.const(np.asarray(o), src))
            else:
                raise TracerError(f"{op} at {src}: unsupported operand {type(o).__name__}")
        try:
            meta = ctx.graph.infer(op, ids, attrs)
        except (RuntimeError, ValueError, IndexError, TypeError) as e:
            raise type(e)(f"{e}  [while tracing {ctx.fn_name} at {src}]") from None
        nid = ctx.graph.add_node(
            op, ids, attrs, shape=meta.shape, dtype=meta.dtype, src=src, role=ctx.role, by=ctx.by
        )
        out = Tracer(ctx, nid, meta.shape, meta.dtype)
        _place(out, op, operands, attrs, src)
        if (
            ctx.role == "forward"
            and op in _DIFF_OPS
            and _GRAD.enabled
            and any(o.__class__ is Tracer and requires_grad_of(o) for o in operands)
        ):
            set_requires_grad_flag(out, True)
        elif (
            not _GRAD.enabled
            and ctx.grad_on
            and ctx.role == "forward"
            and ctx.src is None
            and op in _DIFF_OPS
        ):
            out._ng = True  # a later grad-mode use reads it through a detach node
        return out

    def _wrap_const(self, arr: np.ndarray) -> "Tracer":
        arr = np.asarray(arr)
        nid = self._ctx.const(arr, user_src(2))
        return Tracer(self._ctx, nid, arr.shape, arr.dtype, c_layout(arr.shape))

    # --- static metadata ------------------------------------------------------------------
    @property
    def _npdtype(self) -> np.dtype:
        return self._meta_dtype

    @property
    def shape(self) -> Size:
        return Size(self._meta_shape)

    @property
    def dtype(self) -> eager.dtype:
        return FROM_NP[self._meta_dtype]

    @property
    def ndim(self) -> int:
        return len(self._meta_shape)

    @property
    def device(self):
        return eager.device("cpu")

    @property
    def requires_grad(self) -> bool:
        return self._rg

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.requires_grad_(value)

    def requires_grad_(self, value: bool = True) -> "Tracer":
        if value and not any(t is self for t in self._ctx.leaves):
            self._ctx.leaves.append(self)  # a new leaf: backward() fills its .grad
        self._rg = bool(value)
        return self

    def _multi_output_views(self, views: tuple) -> tuple:
        """unbind's views, as eager marks them: written through, but an in-place op on one
        of them cannot be recorded."""
        for i, v in enumerate(views):
            if v.__class__ is Tracer and v._view is not None and v._view[3] is None:
                v._view = v._view[:3] + (("multi", i),) + v._view[4:]
        return views

    @property
    def data(self) -> "Tracer":
        """As eager's: the same values, detached (a view: a write through it is one)."""
        return self.detach()

    @data.setter
    def data(self, value: Any) -> None:
        raise RuntimeError(
            f"cannot replace .data of a traced value (at {user_src(2)}): the compiled code "
            f"of {self._ctx.fn_name} reads its buffer as traced. Replace it before or after "
            "the call, not inside."
        )

    def is_contiguous(self) -> bool:
        """From the layout the tracer follows; unknown layouts (an op on a transposed value)
        answer False, and contiguous() then copies and refuses later writes (see _place)."""
        lay = self._lay
        return lay is not None and all(
            st == c
            for st, c, d in zip(lay[1], c_strides(self._meta_shape), self._meta_shape)
            if d > 1
        )

    def contiguous(self) -> "Tracer":
        if self.is_contiguous():
            return self
        out = self.clone()
        if self._lay is None:  # eager might return self here: writes are refused
            msg = (
                f"in-place write at {{write}} to a tensor that may share memory with the "
                f"contiguous() at {user_src(2)} of a value whose memory layout graphc does "
                "not follow; eager returns the tensor itself or a copy depending on that "
                "layout. Call .clone() instead of .contiguous() before writing in place."
            )
            self._stor.ambiguous = out._stor.ambiguous = msg
        return out

    def detach(self) -> "Tracer":
        # a node of its own, so graphc.autodiff stops there (sharing the node would not)
        return self._op("detach", "")

    def __len__(self) -> int:
        if not self._meta_shape:
            raise TypeError("len() of a 0-d tensor")
        return self._meta_shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        state = "" if self._ctx.active else ", leaked"
        return (
            f"Tracer<{type_str(self._meta_shape, self._meta_dtype)}, %{self.node} in "
            f"{self._ctx.fn_name}{state}>"
        )

    # --- everything that needs a concrete value ---------------------------------------------
    def _concrete_error(self, what: str, cls: type) -> TracerError:
        _check_live(self, what)
        args = self._ctx.depends_on(self.node)
        dep = (
            f"it depends on argument{'s' if len(args) > 1 else ''} {', '.join(args)}, which "
            "graphc traces symbolically"
            if args
            else "it is a traced value"
        )
        return cls(
            f"{what} at {user_src(3)} needs a concrete value, but {dep} (only shapes and dtypes "
            "are known while tracing). Instead: use graphc.where(cond, a, b) or "
            "graphc.cond(pred, true_fn, false_fn, *operands) for a data-dependent choice; mark the "
            "argument static with static_argnums=(...) if it is a configuration value; or run the "
            "function eagerly (call fn.__wrapped__)."
        )

    def __bool__(self):
        raise self._concrete_error(
            "bool() (Python control flow such as `if`/`while`/`and`) of a traced value",
            TracerBoolConversionError,
        )

    def __float__(self):
        raise self._concrete_error("float() of a traced value", ConcretizationTypeError)

    def __int__(self):
        raise self._concrete_error("int() of a traced value", ConcretizationTypeError)

    def __index__(self):
        raise self._concrete_error("using a traced value as an index", ConcretizationTypeError)

    def __complex__(self):
        raise self._concrete_error("complex() of a traced value", ConcretizationTypeError)

    def item(self):
        raise self._concrete_error(".item() of a traced value", ConcretizationTypeError)

    def tolist(self):
        raise self._concrete_error(".tolist() of a traced value", ConcretizationTypeError)

    def __format__(self, spec: str) -> str:
        if not spec:
            return repr(self)
        raise self._concrete_error(
            f"formatting a traced value with {spec!r}", ConcretizationTypeError
        )

    def numpy(self, **kwargs):
        raise self._concrete_error(".numpy() of a traced value", ConcretizationTypeError)

    def __array__(self, *args, **kwargs):
        raise self._concrete_error(
            "converting a traced value to a numpy array", TracerArrayConversionError
        )

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        # `ndarray <op> tracer` (e.g. a closed-over bias on the left): numpy calls the ufunc
        # here instead of deferring to the reflected operator as it does for eager.Tensor
        # (whose __array_ufunc__ is None), so trace that operator: the array becomes a const.
        refl = _REFLECTED.get(ufunc)
        if (
            refl is not None
            and method == "__call__"
            and not kwargs
            and len(inputs) == 2
            and inputs[1] is self
            and not isinstance(inputs[0], TensorOps)
        ):
            return getattr(self, refl)(inputs[0])
        raise self._concrete_error(
            f"numpy.{ufunc.__name__} on a traced value (use the eager "
            f"equivalent, e.g. eager.{ufunc.__name__} or the tensor "
            "method)",
            TracerArrayConversionError,
        )

    def __array_function__(self, func, types, args, kwargs):
        raise self._concrete_error(
            f"numpy.{func.__name__} on a traced value (use the eager "
            "equivalent or a tensor method)",
            TracerArrayConversionError,
        )

    # --- autograd inside a trace: see graphc.autodiff (issue: compiled training step) -----------
    @property
    def grad(self):
        self._ctx.grads_used = True
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        # eager's checks (eager.Tensor.grad): a .grad moved from a parameter of another
        # shape or dtype was set silently while traced
        if value is not None:
            if not isinstance(value, (Tracer, Tensor)):
                raise TypeError(
                    f"assigned grad expected to be a Tensor or None but got {type(value).__name__}"
                )
            if tuple(value.shape) != tuple(self.shape):
                raise RuntimeError(
                    f"assigned grad has data of a different size: "
                    f"{list(value.shape)} vs the tensor's {list(self.shape)}"
                )
            if value.dtype != self.dtype:
                raise RuntimeError(
                    f"assigned grad has data of a different type ({value.dtype} vs {self.dtype})"
                )
        self._ctx.grads_used = True
        self._grad = value

    @property
    def is_leaf(self) -> bool:
        # an input that requires grad stays a leaf after in-place writes under no_grad()
        # (an optimizer's update writes a parameter several times), as in eager
        if self.node in self._ctx.input_paths or not self._rg:
            return True
        return any(t is self for t in self._ctx.leaves)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        Tracer._traced_backward(self, gradient, bool(create_graph))

    # --- in-place ops become rebinding (functionalization) ----------------------------------
    def _rebind(self, new: "Tracer") -> "Tracer":
        """``self`` now holds ``new``'s value, as eager's in-place write into its buffer: a
        write through a view becomes an update of its base (setitem, or the inverse reshape
        or transpose) up to the buffer's owner; every other alias of the buffer re-derives
        its value from the owner when next read; a written argument is written back."""
        src = user_src(3)
        recording = (
            self._ctx.role == "forward"
            and eager.is_grad_enabled()
            and (self._rg or getattr(new, "_rg", False))
        )
        if self._ctx.role == "forward" and not eager.is_grad_enabled():
            root = self
            while root._view is not None:
                root = root._view[0]
            if (self._rg or requires_grad_of(root)) and not (
                requires_grad_of(root) and root.is_leaf
            ):
                raise TracerError(
                    f"in-place write at {src} under no_grad() to a value that requires grad: "
                    "eager changes its values but keeps its gradient history, which a "
                    "compiled graph cannot express (it would differentiate through the "
                    "write). Write to a .clone() or .detach() copy, or write outside "
                    "no_grad()."
                )
        if self._view is None:
            if self._rg and self.is_leaf and recording:
                if self._node in self._ctx.nonleaf_args:
                    raise TracerError(
                        f"in-place write at {src} to argument "
                        f"{self._ctx.input_paths[self._node]}, which requires grad and has a "
                        "grad_fn: eager would add the write to that tensor's history, which a "
                        "compiled function cannot give back to the caller's tensor. Write to "
                        "a .clone() of it, or return the new value."
                    )
                raise RuntimeError(
                    "a leaf Variable that requires grad is being used in an "
                    f"in-place operation. (traced at {src})"
                )
        else:
            _check_view_write(self, recording, src)
        if new._meta_shape != self._meta_shape:
            raise RuntimeError(
                f"in-place op: result shape {list(new._meta_shape)} does not match "
                f"the tensor's shape {list(self._meta_shape)} (traced at {src})"
            )
        if new._meta_dtype != self._meta_dtype:
            try:
                check_inplace_result(new._meta_dtype, self._meta_dtype)
            except RuntimeError as e:
                raise RuntimeError(f"{e} (traced at {src})") from None
            new = new.to(self._meta_dtype)
        stor = self._stor
        if stor.ambiguous is not None:
            raise TracerError(stor.ambiguous.format(write=src))
        ctx = self._ctx
        root = self
        while root._view is not None:
            root = root._view[0]
        if id(root) in getattr(ctx, "declared", ()):
            raise TracerError(
                f"in-place write at {src} to a carry or x slice of {ctx.what} {ctx.fn_name}: "
                "eagerly it would write into the caller's tensor (the initial carry, or xs), "
                "which the traced loop cannot do. Use an out-of-place op (c = c + x) or "
                "write into a clone (c = c.clone(); c.add_(x))."
            )
        if ctx.inner is not None or (new.__class__ is Tracer and new._ctx is not ctx):
            raise TracerError(
                f"in-place write at {src} to a value from outside the loop body being traced "
                f"({ctx.inner.fn_name if ctx.inner is not None else ctx.fn_name}): a loop body "
                "cannot mutate captured state (it runs once per iteration in the compiled "
                "loop). Return the new value as part of the carry instead."
            )
        value = new.node
        t, v = self, value
        while t._view is not None:  # the new value of each base, up to the owner
            parent, op, attrs, _, extra = t._view
            v = _unview(parent, op, attrs, extra, v, src)
            t = parent
        t._node = v
        stor.gen += 1
        t._gen = stor.gen
        self._node = value
        self._gen = stor.gen
        if recording and requires_grad_of(new):
            u = self
            while u is not None:
                set_requires_grad_flag(u, True)
                u = u._view[0] if u._view is not None else None
        idx = _input_index(ctx, t)
        if idx is not None:
            ctx.mutations[idx] = t
        return self

    def add_(self, other, *, alpha=1):
        return self._rebind(self.add(other, alpha=alpha))

    def sub_(self, other, *, alpha=1):
        return self._rebind(self.sub(other, alpha=alpha))

    def mul_(self, other):
        return self._rebind(self * other)

    def div_(self, other):
        return self._rebind(self / other)

    def clamp_(self, min=None, max=None):
        return self._rebind(self.clamp(min, max))

    def pow_(self, exponent):
        return self._rebind(self.pow(exponent))

    def neg_(self):
        return self._rebind(-self)

    def relu_(self):
        return self._rebind(self.relu())

    def exp_(self):
        return self._rebind(self.exp())

    def zero_(self):
        return self._rebind(self.zeros_like_())

    def fill_(self, value):
        return self._rebind(
            self._op(
                "fill",
                "FillBackward0",
                value=float(value) if self._meta_dtype.kind == "f" else value,
            )
        )

    def copy_(self, src):
        if not isinstance(src, TensorOps):
            src = self._wrap_const(np.asarray(src, dtype=self._meta_dtype))
        return self._rebind(
            src.to(self._meta_dtype).expand(self._meta_shape) + 0
            if src.shape != self.shape
            else src.to(self._meta_dtype) + 0
        )

    __iadd__ = add_
    __isub__ = sub_
    __imul__ = mul_
    __itruediv__ = div_
    __ipow__ = pow_
    clip_ = clamp_

    def __setitem__(self, key, value) -> None:
        from eager.interop import encode_index

        spec, arrays, _ = encode_index(key, self)
        if not isinstance(value, TensorOps):
            value = self._wrap_const(np.asarray(value, dtype=self._meta_dtype))
        elif value._npdtype != self._meta_dtype:
            value = value.to(self._meta_dtype)
        from eager.interop import assigned_shape
        from eager.interop import Meta

        want = assigned_shape(
            tuple(value.shape),
            Meta(self._meta_shape, self._meta_dtype),
            tuple(Meta(tuple(a.shape), a._npdtype) for a in arrays),
            spec,
        )
        if want != tuple(value.shape):
            value = value.reshape(want)  # leading size-1 dims dropped, as numpy does
        if spec == (("t", 0),) and arrays[0]._npdtype.kind == "b":
            out = _masked_assignment(self, arrays[0], value)
            if out is not None:
                self._rebind(out)
                return
        self._rebind(self._op("setitem", "CopySlices", value, *arrays, index=spec))


def _masked_assignment(x: "Tracer", mask: "Tracer", value: "Tracer") -> Optional["Tracer"]:
    """``x[mask] = value`` as ``where``, when that is exact; None when it is not.

    The mask (0-d included: all or nothing) covers x's leading dims and selects a
    data-dependent number k of sub-arrays of shape ``rest``.  ``value`` broadcasts to
    ``(k, *rest)`` for every k only if it has no k-sized dim; one value per selected
    element is scattered in order, which ``where`` cannot do (left to the setitem node,
    which the native backend refuses and the interpreter runs)."""
    m, shape = tuple(mask.shape), tuple(x.shape)
    if shape[: len(m)] != m:
        raise IndexError(
            f"The shape of the mask {list(m)} does not match the shape of the "
            f"indexed tensor {list(shape)}"
        )
    rest, vs = shape[len(m) :], tuple(value.shape)
    if len(vs) == len(rest) + 1 and vs[0] == 1:
        value, vs = value.reshape(vs[1:]), vs[1:]
    try:
        if len(vs) > len(rest) or np.broadcast_shapes(vs, rest) != rest:
            return None
    except ValueError:
        return None
    return eager.where(mask.reshape(m + (1,) * len(rest)), value, x)


_GRAD = GRAD_MODE
_DIFF_OPS = None  # set below: names of differentiable ops
_REFLECTED = {
    np.add: "__radd__",
    np.subtract: "__rsub__",
    np.multiply: "__rmul__",
    np.true_divide: "__rtruediv__",
    np.power: "__rpow__",
    np.matmul: "__rmatmul__",
    np.less: "__gt__",
    np.less_equal: "__ge__",
    np.greater: "__lt__",
    np.greater_equal: "__le__",
    np.equal: "__eq__",
    np.not_equal: "__ne__",
}


def _set_diff_ops():
    global _DIFF_OPS
    from eager.interop import OPS

    _DIFF_OPS = frozenset(n for n, o in OPS.items() if o.differentiable)


_set_diff_ops()


def _stop_gradient(t: Tracer, src: str) -> int:
    """Node id of ``detach(t)`` for a value computed under no_grad (one per value)."""
    if isinstance(t._ng, tuple) and t._ng[0] == t.node:
        return t._ng[1]
    did = t._ctx.graph.add_node(
        "detach",
        (t.node,),
        {},
        shape=t._meta_shape,
        dtype=t._meta_dtype,
        src=src,
        role="forward",
        by="trace",
    )
    t._ng = (t.node, did)
    return did


def _input_index(ctx, t: Tracer) -> Optional[int]:
    return ctx._input_of.get(id(t))


def _check_live(t: Tracer, what: str) -> None:
    if not t._ctx.active:
        raise LeakedTracerError(
            f"{what}: a tracer from the trace of {t._ctx.fn_name} (started at {t._ctx.where}) was "
            f"used after that trace ended (at {user_src(3)}). A traced value escaped the function, "
            "e.g. by being stored in a global or an outer list; return it from the function "
            "instead."
        )
