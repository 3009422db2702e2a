"""Tracing: run the user's function once on Tracers and record a Graph.

A Tracer shares eager's whole op surface (``eager.surface.TensorOps``), so the
same code runs eagerly on Tensors and symbolically here.  Shapes and dtypes
are known while tracing; values are not, and every attempt to look at one
(``bool``, ``float``, ``.item()``, numpy functions) raises an error that names
the argument the value depends on and the source line.
"""
from __future__ import annotations

import inspect
import math
import os
import re
import sys
from typing import Any, Callable, Optional, Sequence

import numpy as np

import eager
from eager.interop import FROM_NP, GRAD_MODE, check_inplace_result
from eager.interop import Size, TensorOps, decode_index
from eager.interop import OPS, check_size, data_of, grad_of, requires_grad_of, version_of
from eager.interop import PINNED, TRACING, Tensor, set_grad, set_requires_grad_flag

from .pytree import flatten, leaf_paths, unflatten
from .errors import (ConcretizationTypeError, LeakedTracerError, SignatureError,
                     TooBigError, TracerArrayConversionError, TracerBoolConversionError,
                     TracerError)
from .ir import Graph, type_str
from .layout import (Layout, c_layout, c_strides, expand_layout, index_layout, makes_c_output,
                     reshape_layout, transpose_layout)

_PKG_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                  for m in (eager, sys.modules[__name__.rsplit(".", 1)[0]]))
_SUPPORTED = set(FROM_NP)


def user_src(skip: int = 1) -> str:
    """``file.py:line`` of the innermost frame outside eager/ and graphc/."""
    f = sys._getframe(skip)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_PKG_DIRS) and not fn.startswith("<frozen"):
            return f"{os.path.basename(fn)}:{f.f_lineno}"
        f = f.f_back
    return ""


class TraceContext:
    """One trace in progress: its graph and whether tracers may still be used."""

    def __init__(self, graph: Graph, fn_name: str) -> None:
        self.graph = graph
        self.fn_name = fn_name
        self.active = True
        self.input_paths: dict = {}      # input node id -> readable argument path
        self._consts: dict = {}          # id(array) -> (array, node) to dedupe closed-over arrays
        self.mutations: dict = {}        # input index -> tracer holding its final value
        self._input_of: dict = {}        # id(input tracer) -> flattened input index
        self.leaves: list = []           # input tracers of tensors that require grad
        self.closed_rg: dict = {}        # const node -> src: closed-over tensors requiring grad
        self.layout_uses: list = []      # reshapes of argument buffers: see _note_layout_use
        self.lifted_nodes: dict = {}     # id(lifted tracer) -> its input node
        self.randoms: list = []          # (kind, shape, dtype, params) of each random draw
        self.rng_state = None            # tracer of the generator-state input, once drawn
        self.rng_count = 0               # counters (elements) the draws take per call
        # did the function read or write a .grad, or call backward()?  If not, whether a
        # lifted parameter has a .grad does not matter to the trace
        self.grads_used = False
        self.nonleaf_args: set = set()   # input nodes of arguments that have a grad_fn
        self.where = user_src(3)
        # ops traced under eager.no_grad() inside a function traced with grad enabled give
        # values autodiff must not look through (as eager records no tape for them)
        self.grad_on = _GRAD.enabled
        # how new nodes are attributed, per trace (so threads tracing at once never see
        # each other's): ``role`` "backward" and ``by`` "grad" while graphc.autodiff emits
        # gradient nodes; ``src`` the source line to give them while it replays or
        # differentiates (None: the user's line, found on the stack)
        self.role = "forward"
        self.src: Optional[str] = None
        self.by = "trace"

    def random(self, kind: str, shape: tuple, dtype: Any, params: dict) -> "Tracer":
        """A random draw inside the trace: a ``philox`` node (eager/ops/random.py) of the
        call's generator state, an input the call fills from graphc's stream
        (graphc.runtime.rng) with a fresh counter, so each call draws fresh numbers.
        Each draw takes its own range of counters: ``offset`` is the elements drawn
        before it in the same call."""
        dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in shape)
        check_size(shape, dtype, kind, TooBigError)
        if self.rng_state is None:
            nid = self.graph.add_input("rng_state", (2,), np.dtype(np.int64))
            self.input_paths[nid] = "graphc's random stream (key, counter)"
            self.rng_state = Tracer(self, nid, (2,), np.dtype(np.int64), c_layout((2,)))
        if kind == "integers":
            draw = dtype if dtype in (np.int64, np.int32) else np.dtype(np.int64)
            low, high = int(params["low"]), int(params["high"])
            if not low < high:
                raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got "
                                   f"from={low} >= to={high}")
        else:
            draw = dtype if dtype in (np.float32, np.float64) else np.dtype(np.float64)
            low, high = 0, 1
        n = math.prod(shape)
        out = self.rng_state._op("philox", None, dist=kind, shape=shape, dtype=draw.name,
                                 low=low, high=high, offset=self.rng_count)
        self.rng_count += n
        self.randoms.append((kind, shape, dtype.name, dict(params)))
        return out if draw == dtype else out.to(dtype)

    def factory(self, arr: np.ndarray, requires_grad: bool) -> "Tracer":
        """A tensor made by an eager factory while tracing (``eager.zeros`` & co.): a
        constant of the graph, traced so that in-place writes into it are traced."""
        arr = np.asarray(arr)
        nid = self.graph.add_const(arr, src=user_src(3))
        t = Tracer(self, nid, arr.shape, arr.dtype, c_layout(arr.shape))
        if requires_grad:
            t.requires_grad_(True)
        return t

    def const(self, value: Any, src: str = "") -> int:
        if isinstance(value, np.ndarray):
            hit = self._consts.get(id(value))
            if hit is not None and hit[0] is value:
                return hit[1]
            nid = self.graph.add_const(value.copy(), src=src)
            self._consts[id(value)] = (value, nid)
            return nid
        return self.graph.add_const(np.asarray(value), src=src)

    def depends_on(self, nid: int) -> list:
        """Readable paths of the inputs that node ``nid`` depends on (iterative walk)."""
        g = self.graph.nx
        seen, stack, found = {nid}, [nid], []
        while stack:
            n = stack.pop()
            if n in self.input_paths:
                found.append(self.input_paths[n])
            for p in g.predecessors(n):
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
        return sorted(found)


class Tracer(TensorOps):
    """A symbolic tensor: a node of the graph being traced."""

    __slots__ = ("_ctx", "_node", "_meta_shape", "_meta_dtype", "_rg", "_grad", "_ng",
                 "_view", "_stor", "_gen", "_lay", "__weakref__")
    _priority = 2
    # ``loss.backward()`` while tracing is reverse mode, which graphc.autodiff (the layer
    # above) provides: it installs its ``traced_backward`` here when it is imported, as
    # graphc's package import always does
    _traced_backward: Optional[Callable] = None

    def __init__(self, ctx: TraceContext, node: int, shape: tuple, dtype: np.dtype,
                 lay: Optional[Layout] = None) -> None:
        self._ctx = ctx
        self._node = node
        self._meta_shape = tuple(shape)
        self._meta_dtype = np.dtype(dtype)
        self._rg = False
        self._grad = None
        self._ng = None       # made under no_grad: True, or (node, its detach node) once used
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
        ids = []
        src = ctx.src if ctx.src is not None else user_src(2)
        for o in operands:
            if o.__class__ is Tracer:
                if o._ctx is not ctx:
                    _check_live(o, op)
                    raise TracerError(
                        f"{op} at {src}: a value traced by another (outer) trace was used inside "
                        f"this trace of {ctx.fn_name}; pass it as an argument instead of closing "
                        "over it")
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
        nid = ctx.graph.add_node(op, ids, attrs, shape=meta.shape, dtype=meta.dtype, src=src,
                                 role=ctx.role, by=ctx.by)
        out = Tracer(ctx, nid, meta.shape, meta.dtype)
        _place(out, op, operands, attrs, src)
        if ctx.role == "forward" and op in _DIFF_OPS and _GRAD.enabled and any(
                o.__class__ is Tracer and requires_grad_of(o) for o in operands):
            set_requires_grad_flag(out, True)
        elif (not _GRAD.enabled and ctx.grad_on and ctx.role == "forward" and ctx.src is None
              and op in _DIFF_OPS):
            out._ng = True    # a later grad-mode use reads it through a detach node
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
            self._ctx.leaves.append(self)     # a new leaf: backward() fills its .grad
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
            "the call, not inside.")

    def is_contiguous(self) -> bool:
        """From the layout the tracer follows; unknown layouts (an op on a transposed value)
        answer False, and contiguous() then copies and refuses later writes (see _place)."""
        lay = self._lay
        return lay is not None and all(st == c for st, c, d in zip(
            lay[1], c_strides(self._meta_shape), self._meta_shape) if d > 1)

    def contiguous(self) -> "Tracer":
        if self.is_contiguous():
            return self
        out = self.clone()
        if self._lay is None:          # eager might return self here: writes are refused
            msg = (f"in-place write at {{write}} to a tensor that may share memory with the "
                   f"contiguous() at {user_src(2)} of a value whose memory layout graphc does "
                   "not follow; eager returns the tensor itself or a copy depending on that "
                   "layout. Call .clone() instead of .contiguous() before writing in place.")
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
        return (f"Tracer<{type_str(self._meta_shape, self._meta_dtype)}, %{self.node} in "
                f"{self._ctx.fn_name}{state}>")

    # --- everything that needs a concrete value ---------------------------------------------
    def _concrete_error(self, what: str, cls: type) -> TracerError:
        _check_live(self, what)
        args = self._ctx.depends_on(self.node)
        dep = (f"it depends on argument{'s' if len(args) > 1 else ''} {', '.join(args)}, which "
               "graphc traces symbolically" if args else "it is a traced value")
        return cls(
            f"{what} at {user_src(3)} needs a concrete value, but {dep} (only shapes and dtypes "
            "are known while tracing). Instead: use graphc.where(cond, a, b) or "
            "graphc.cond(pred, true_fn, false_fn, *operands) for a data-dependent choice; mark the "
            "argument static with static_argnums=(...) if it is a configuration value; or run the "
            "function eagerly (call fn.__wrapped__).")

    def __bool__(self):
        raise self._concrete_error("bool() (Python control flow such as `if`/`while`/`and`) "
                                   "of a traced value", TracerBoolConversionError)

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
        raise self._concrete_error(f"formatting a traced value with {spec!r}",
                                   ConcretizationTypeError)

    def numpy(self, **kwargs):
        raise self._concrete_error(".numpy() of a traced value", ConcretizationTypeError)

    def __array__(self, *args, **kwargs):
        raise self._concrete_error("converting a traced value to a numpy array",
                                   TracerArrayConversionError)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        # `ndarray <op> tracer` (e.g. a closed-over bias on the left): numpy calls the ufunc
        # here instead of deferring to the reflected operator as it does for eager.Tensor
        # (whose __array_ufunc__ is None), so trace that operator: the array becomes a const.
        refl = _REFLECTED.get(ufunc)
        if (refl is not None and method == "__call__" and not kwargs and len(inputs) == 2
                and inputs[1] is self and not isinstance(inputs[0], TensorOps)):
            return getattr(self, refl)(inputs[0])
        raise self._concrete_error(f"numpy.{ufunc.__name__} on a traced value (use the eager "
                                   f"equivalent, e.g. eager.{ufunc.__name__} or the tensor "
                                   "method)", TracerArrayConversionError)

    def __array_function__(self, func, types, args, kwargs):
        raise self._concrete_error(f"numpy.{func.__name__} on a traced value (use the eager "
                                   "equivalent or a tensor method)", TracerArrayConversionError)

    # --- autograd inside a trace: see graphc.autodiff (issue: compiled training step) -----------
    @property
    def grad(self):
        self._ctx.grads_used = True
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        self._ctx.grads_used = True
        self._grad = value

    @property
    def is_leaf(self) -> bool:
        return self.node in self._ctx.input_paths or not self._rg

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        Tracer._traced_backward(self, gradient)

    # --- in-place ops become rebinding (functionalization) ----------------------------------
    def _rebind(self, new: "Tracer") -> "Tracer":
        """``self`` now holds ``new``'s value, as eager's in-place write into its buffer: a
        write through a view becomes an update of its base (setitem, or the inverse reshape
        or transpose) up to the buffer's owner; every other alias of the buffer re-derives
        its value from the owner when next read; a written argument is written back."""
        src = user_src(3)
        recording = (self._ctx.role == "forward" and eager.is_grad_enabled() and
                     (self._rg or getattr(new, "_rg", False)))
        if self._ctx.role == "forward" and not eager.is_grad_enabled():
            root = self
            while root._view is not None:
                root = root._view[0]
            if (self._rg or requires_grad_of(root)) and \
                    not (requires_grad_of(root) and root.is_leaf):
                raise TracerError(
                    f"in-place write at {src} under no_grad() to a value that requires grad: "
                    "eager changes its values but keeps its gradient history, which a "
                    "compiled graph cannot express (it would differentiate through the "
                    "write). Write to a .clone() or .detach() copy, or write outside "
                    "no_grad().")
        if self._view is None:
            if self._rg and self.is_leaf and recording:
                if self._node in self._ctx.nonleaf_args:
                    raise TracerError(
                        f"in-place write at {src} to argument "
                        f"{self._ctx.input_paths[self._node]}, which requires grad and has a "
                        "grad_fn: eager would add the write to that tensor's history, which a "
                        "compiled function cannot give back to the caller's tensor. Write to "
                        "a .clone() of it, or return the new value.")
                raise RuntimeError("a leaf Variable that requires grad is being used in an "
                                   f"in-place operation. (traced at {src})")
        else:
            _check_view_write(self, recording, src)
        if new._meta_shape != self._meta_shape:
            raise RuntimeError(f"in-place op: result shape {list(new._meta_shape)} does not match "
                               f"the tensor's shape {list(self._meta_shape)} (traced at {src})")
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
        value = new.node
        t, v = self, value
        while t._view is not None:            # the new value of each base, up to the owner
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
        return self._rebind(self._op("fill", "FillBackward0", value=float(value)
                                     if self._meta_dtype.kind == "f" else value))

    def copy_(self, src):
        if not isinstance(src, TensorOps):
            src = self._wrap_const(np.asarray(src, dtype=self._meta_dtype))
        return self._rebind(src.to(self._meta_dtype).expand(self._meta_shape) + 0
                            if src.shape != self.shape else src.to(self._meta_dtype) + 0)

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
        want = assigned_shape(tuple(value.shape), Meta(self._meta_shape, self._meta_dtype),
                              tuple(Meta(tuple(a.shape), a._npdtype) for a in arrays), spec)
        if want != tuple(value.shape):
            value = value.reshape(want)       # leading size-1 dims dropped, as numpy does
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
    if shape[:len(m)] != m:
        raise IndexError(f"The shape of the mask {list(m)} does not match the shape of the "
                         f"indexed tensor {list(shape)}")
    rest, vs = shape[len(m):], tuple(value.shape)
    if len(vs) == len(rest) + 1 and vs[0] == 1:
        value, vs = value.reshape(vs[1:]), vs[1:]
    try:
        if len(vs) > len(rest) or np.broadcast_shapes(vs, rest) != rest:
            return None
    except ValueError:
        return None
    return eager.where(mask.reshape(m + (1,) * len(rest)), value, x)


_GRAD = GRAD_MODE
_DIFF_OPS = None        # set below: names of differentiable ops
_REFLECTED = {np.add: "__radd__", np.subtract: "__rsub__", np.multiply: "__rmul__",
              np.true_divide: "__rtruediv__", np.power: "__rpow__", np.matmul: "__rmatmul__",
              np.less: "__gt__", np.less_equal: "__ge__", np.greater: "__lt__",
              np.greater_equal: "__le__", np.equal: "__eq__", np.not_equal: "__ne__"}


def _set_diff_ops():
    global _DIFF_OPS
    from eager.interop import OPS
    _DIFF_OPS = frozenset(n for n, o in OPS.items() if o.differentiable)


_set_diff_ops()


def _stop_gradient(t: Tracer, src: str) -> int:
    """Node id of ``detach(t)`` for a value computed under no_grad (one per value)."""
    if isinstance(t._ng, tuple) and t._ng[0] == t.node:
        return t._ng[1]
    did = t._ctx.graph.add_node("detach", (t.node,), {}, shape=t._meta_shape,
                                dtype=t._meta_dtype, src=src, role="forward", by="trace")
    t._ng = (t.node, did)
    return did


def _input_index(ctx: TraceContext, t: Tracer) -> Optional[int]:
    return ctx._input_of.get(id(t))


def _check_live(t: Tracer, what: str) -> None:
    if not t._ctx.active:
        raise LeakedTracerError(
            f"{what}: a tracer from the trace of {t._ctx.fn_name} (started at {t._ctx.where}) was "
            f"used after that trace ended (at {user_src(3)}). A traced value escaped the function, "
            "e.g. by being stored in a global or an outer list; return it from the function "
            "instead.")


# ---------------------------------------------------------------------------
# views: eager's aliasing, followed symbolically
#
# Eager runs on numpy, so whether two tensors share memory is numpy's decision: basic
# indexing, transpose and expand (read-only) always give views; reshape gives one when the
# strides allow it, else a copy; every other op writes a fresh C-ordered buffer when its
# operands are C-ordered.  The tracer makes the same decisions from the element layout it
# follows for each value.  A value whose layout it cannot follow (an op on a transposed
# operand) still computes correctly; only a reshape of it that is later written, or whose
# base is, is refused, since view or copy would then change the result.

# the ops the records declare as views, and detach (the op record copies, but eager's
# Tensor.detach() shares its tensor's memory)
_VIEW_OPS = frozenset(name for name, op in OPS.items() if op.view) | {"detach"}


class _Storage:
    """One eager buffer: how often it has been written (views re-derive their value from
    the owner when this moved on) and, once aliasing became undecidable, why writes are
    refused."""

    __slots__ = ("gen", "ambiguous")

    def __init__(self) -> None:
        self.gen = 0
        self.ambiguous: Optional[str] = None


def _place(out: Tracer, op: str, operands: tuple, attrs: dict, src: str) -> None:
    """Give a new op result its buffer and layout: a view of ``operands[0]`` for the ops
    numpy makes views with, else a fresh buffer (C-ordered when numpy's would be)."""
    x = operands[0] if operands else None
    if op in _VIEW_OPS and x.__class__ is Tracer:
        lay = x._lay
        if op == "getitem":
            if any(item[0] == "t" for item in attrs["index"]):
                out._lay = c_layout(out._meta_shape) if _c_operands(operands) else None
                return                        # advanced indexing: numpy copies
            if lay is not None:
                lay = index_layout(x._meta_shape, lay, decode_index(attrs["index"], ()))
        elif op == "reshape":
            if lay is None:
                # view or copy depends on a layout not followed here: the result is fine to
                # read, but a write to either side afterwards could not be reproduced
                msg = ("in-place write at {write} to a tensor that may share memory with the "
                       f"reshape at {src} of a value whose memory layout graphc does not follow "
                       "(the result of an op on a transposed or otherwise permuted tensor); "
                       "eager would write through it or not depending on that layout. Call "
                       ".clone() on the reshape's input or result before writing in place.")
                x._stor.ambiguous = out._stor.ambiguous = msg
                return
            lay = reshape_layout(x._meta_shape, lay, out._meta_shape)
            if lay is None:                   # numpy copies: a fresh C-ordered buffer
                out._lay = c_layout(out._meta_shape)
                _note_layout_use(x, out)
                return
        elif op == "transpose":
            lay = None if lay is None else transpose_layout(lay, attrs["perm"])
        elif op == "expand":
            lay = None if lay is None else expand_layout(x._meta_shape, lay, out._meta_shape)
        out._lay = lay
        out._stor = x._stor
        out._gen = x._stor.gen
        # how the view was made: a view of an unbind output, or of a view made under
        # no_grad(), is one too (eager's _creation, PyTorch's propagated creation_meta)
        creation = "no_grad" if not _GRAD.enabled else (
            x._view[3] if x._view is not None else None)
        out._view = (x, op, attrs, creation, ())
        if op == "detach":
            set_requires_grad_flag(out, False)
        elif op == "reshape":
            _note_layout_use(x, out)
        return
    if op == "matmul" or _c_operands(operands):
        out._lay = c_layout(out._meta_shape)


def _c_operands(operands: tuple) -> bool:
    for o in operands:
        if o.__class__ is Tracer:
            if not makes_c_output(o._meta_shape, o._lay):
                return False
        elif isinstance(o, np.ndarray) and not o.flags.c_contiguous:
            return False
    return True


def _note_layout_use(x: Tracer, out: Tracer) -> None:
    """A reshape decided view-or-copy from layouts that rest on the arguments being
    C-contiguous (an argument's own, or an op result's, which follows its operands'):
    remember it, to check every argument at the call when a write makes it matter."""
    x._ctx.layout_uses.append((None, x._stor, x._stor.gen, out._stor, out._stor.gen))


def _sync(t: Tracer) -> None:
    """Re-derive a stale view from its nearest up-to-date base (iteratively)."""
    chain = []
    u = t
    while u._view is not None and u._gen != u._stor.gen:
        chain.append(u)
        u = u._view[0]
    ctx = t._ctx
    graph = ctx.graph
    gen = t._stor.gen
    for v in reversed(chain):
        parent, op, attrs, _, extra = v._view
        v._node = graph.add_node(op, (parent._node,) + extra, attrs, shape=v._meta_shape,
                                 dtype=v._meta_dtype, src=user_src(3), role=ctx.role, by=ctx.by)
        v._gen = gen
        if requires_grad_of(parent) and op != "detach" and v._view[3] is None:
            set_requires_grad_flag(v, True)   # the base's new history reaches its views


def _unview(parent: Tracer, op: str, attrs: dict, extra: tuple, value: int, src: str) -> int:
    """The node of ``parent``'s value after ``value`` was written into its view (``extra``:
    the index operands of a gather view)."""
    ctx = parent._ctx
    g = ctx.graph
    shape, dtype = parent._meta_shape, parent._meta_dtype
    if op == "getitem":
        return g.add_node("setitem", (parent.node, value) + extra, {"index": attrs["index"]},
                          shape=shape, dtype=dtype, src=src, role=ctx.role, by=ctx.by)
    if op == "reshape":
        return g.add_node("reshape", (value,), {"shape": shape}, shape=shape, dtype=dtype,
                          src=src, role=ctx.role, by=ctx.by)
    if op == "transpose":
        perm = attrs["perm"]
        inv = tuple(sorted(range(len(perm)), key=perm.__getitem__))
        return g.add_node("transpose", (value,), {"perm": inv}, shape=shape, dtype=dtype,
                          src=src, role=ctx.role, by=ctx.by)
    return value                              # detach: the same buffer, no history


def _check_view_write(t: Tracer, recording: bool, src: str) -> None:
    """Eager's (PyTorch's) refusals for an in-place write through view ``t``."""
    from eager.interop import (MULTI_OUTPUT_VIEW_INPLACE, NO_GRAD_VIEW_INPLACE,
                              VIEW_OF_LEAF_INPLACE)
    u = t
    while u._view is not None:
        parent, op, _, creation, _ = u._view
        if op == "expand":
            raise RuntimeError("in-place op on a broadcast (expanded) view: eager cannot write "
                               "it in place (several elements share one memory location); "
                               f"clone() it first (traced at {src})")
        if op == "detach" and (requires_grad_of(parent) or recording):
            raise TracerError(
                f"in-place write at {src} through .detach() of a tensor that requires grad: "
                "eager changes its data but not its gradient history, which a compiled graph "
                "cannot express. Update the tensor itself under eager.no_grad() instead.")
        u = parent
    creation = t._view[3]
    if not recording:
        if creation == "no_grad" and requires_grad_of(u) and t._ctx.role == "forward" and \
                eager.is_grad_enabled():
            # PyTorch refuses this; eager's no_grad views do not require grad, so eager
            # writes without recording and its gradient ignores the write, which a graph
            # cannot reproduce (it would drop the gradient through the whole view)
            raise RuntimeError(f"{NO_GRAD_VIEW_INPLACE} (traced at {src})")
        return
    if creation == "no_grad":
        raise RuntimeError(f"{NO_GRAD_VIEW_INPLACE} (traced at {src})")
    if creation is not None:
        raise RuntimeError(f"{MULTI_OUTPUT_VIEW_INPLACE.format(creation[1])} (traced at {src})")
    if u.is_leaf and (requires_grad_of(t) or requires_grad_of(u)):
        raise RuntimeError(f"{VIEW_OF_LEAF_INPLACE} (traced at {src})")


# ---------------------------------------------------------------------------
# tracing a Python function


def _sanitize(path: str) -> str:
    s = re.sub(r"\W+", "_", path).strip("_")     # an identifier: `<lambda>`, `p['w 1']`
    s = re.sub(r"_+", "_", s)
    return s or "arg"


def arg_names(fn: Callable, n: int) -> list:
    from .capture import _is_module
    if _is_module(fn):                    # a compiled model: its forward's parameter names
        fn = fn.forward
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for i in range(n):
        if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY,
                                                   params[i].POSITIONAL_OR_KEYWORD):
            names.append(params[i].name)
        elif params and params[-1].kind == params[-1].VAR_POSITIONAL and i >= len(params) - 1:
            names.append(f"{params[-1].name}[{i - len(params) + 1}]")
        else:
            names.append(f"args[{i}]")
    return names


class LeafSpec:
    """How one flattened argument leaf enters the trace (and the cache key)."""

    __slots__ = ("kind", "shape", "dtype", "value", "requires_grad", "has_grad", "grad_node")

    def __init__(self, kind, shape=None, dtype=None, value=None, requires_grad=False,
                 has_grad=False):
        self.kind = kind                  # "array" | "tensor" | "static"
        self.shape = shape
        self.dtype = dtype
        self.value = value
        self.requires_grad = requires_grad
        self.has_grad = has_grad          # a requires_grad tensor whose .grad is set
        self.grad_node = None             # graph input node holding that .grad


_NAN = float("nan")      # one NaN object: tuples compare it equal to itself (identity)


def static_key(v: Any) -> tuple:
    """(value, sign bit) of a static value in a cache key.  ``-0.0 == 0.0`` would reuse a
    trace with the wrong sign baked in (``x / -0.0`` is -inf), and a fresh NaN is unequal
    to every other, which would re-trace on every call."""
    if isinstance(v, (float, np.floating)):
        return (_NAN, False) if v != v else (v, bool(np.signbit(v)))
    return v, False


def classify_leaf(x: Any, path: str) -> tuple:
    """(cache-key item, LeafSpec) for one argument leaf; SignatureError for bad types.
    Types are the real ones (``type(x)``): an object faking ``__class__`` (a mock) is not
    an array, and an ndarray subclass is used as its base array (a masked array is refused)."""
    t = type(x)
    if issubclass(t, Tensor):
        arr, rg = data_of(x), requires_grad_of(x)
        d = arr.dtype
        if d not in _SUPPORTED:
            raise SignatureError(f"argument {path}: dtype {d} is not supported")
        hg = rg and grad_of(x) is not None
        return ("T", arr.shape, d, rg, hg), LeafSpec("tensor", arr.shape, d,
                                                     requires_grad=rg, has_grad=hg)
    if issubclass(t, np.ma.MaskedArray):
        raise SignatureError(f"argument {path} is a masked array; masks are not supported: pass "
                             "x.filled(value) or np.ma.getdata(x)")
    if issubclass(t, np.ndarray) and t is not np.ndarray:
        return classify_leaf(np.asarray(x), path)   # the base array's real shape and dtype
    if t is np.ndarray:
        d = x.dtype
        if d not in _SUPPORTED:
            if d.kind in "fiub" and d.newbyteorder("=") in _SUPPORTED:
                d = d.newbyteorder("=")
            else:
                raise SignatureError(
                    f"argument {path}: numpy dtype {x.dtype} is not supported; use float32, "
                    "float64, int32, int64 or bool")
        # the key keeps the byte order (the call converts '>f8' input); the graph is native
        return ("A", x.shape, x.dtype), LeafSpec("array", x.shape, d)
    if issubclass(t, np.generic):
        arr = np.asarray(x)
        return classify_leaf(arr, path)
    if issubclass(t, (bool, int, float)) or x is None:
        return ("S", type(x).__name__, *static_key(x)), LeafSpec("static", value=x)
    from .capture import _is_module
    if _is_module(x):                     # the self of a compiled method, or a model passed
        modes = tuple([m.training for m in x.modules()])    # in: by identity and modes;
        return ("Mod", id(x), t, modes), LeafSpec("static", value=x)   # params are lifted
    if isinstance(x, Tracer):
        raise SignatureError(f"argument {path}: a tracer of another trace was passed to a compiled "
                             "function; call the uncompiled function inside traced code")
    raise SignatureError(
        f"argument {path} has unsupported type {type(x).__name__}; compiled functions take numpy "
        "arrays, eager Tensors, Python scalars and nested tuples/lists/dicts of them. Pass "
        "anything else through static_argnums=(...).")


class TraceResult:
    """What tracing produced: the graph plus how to map Python values in and out."""

    def __init__(self, graph, in_specs, out_tree, out_static, mutated_inputs, tensor_io,
                 grad_writes=(), layout_inputs=(), captured=(), randoms=()):
        self.graph = graph
        self.in_specs = in_specs          # LeafSpec per flattened dynamic leaf
        self.out_tree = out_tree
        self.out_static = out_static      # {leaf index: python value} for non-array outputs
        self.mutated_inputs = mutated_inputs  # [(input index, graph output index)]
        self.tensor_io = tensor_io
        self.grad_writes = list(grad_writes)  # [(input index, graph output index)] for .grad
        self.layout_inputs = list(layout_inputs)  # input indices that must be C-contiguous
        # eager tensors the function reads by name (graphc.capture): graph inputs after the
        # arguments' (their LeafSpecs end in_specs), read again at every call
        self.captured = list(captured)
        # random draws (graphc.runtime.rng): one last input, the generator state, filled
        # by each call with a fresh counter range of rng_count elements
        self.randoms = list(randoms)
        self.rng_count = 0
        self.n_args = len(in_specs) - len(self.captured) - (1 if self.randoms else 0)
        # dynamic leaves written in place (their memory is compared with the others')
        self.written = tuple(i for i, _ in self.mutated_inputs)
        # grad mode while tracing (it decides which values have a gradient history: a call
        # in the other mode needs a trace of its own), and per user output whether it has one
        self.grad_on = True
        self.grad_clears: list = []           # input indices whose .grad it set to None
        self.grads_used = False               # lifted tensors' .grad (set or not) matters
        self.out_rg: list = []
        self.all_out_rg = True


def _graph_input_pos(specs: list, idx: int) -> int:
    """Graph input position of dynamic leaf ``idx`` (a leaf with .grad takes two inputs)."""
    return idx + sum(1 for s in specs[:idx] if s.has_grad)


def _lift(ctx: TraceContext, fn: Callable, args: tuple, specs: list, inputs: list,
          watched: list, used_names: set) -> list:
    """A graph input and tracer for every eager tensor ``fn`` reaches by name (see
    graphc.capture), after the arguments' inputs: [(Captured, Tracer)]."""
    from .capture import find as find_captured
    out = []
    for cap in find_captured(fn, args).values():
        t = cap.tensor
        d = data_of(t).dtype
        if d not in _SUPPORTED:
            continue                          # stays a constant if it is used at all
        nm = base = _sanitize(cap.name)
        k = 1
        while nm in used_names:
            k += 1
            nm = f"{base}_{k}"
        used_names.add(nm)
        shape = data_of(t).shape
        nid = ctx.graph.add_input(nm, shape, d)
        ctx.input_paths[nid] = cap.name
        tr = Tracer(ctx, nid, shape, d, c_layout(shape) if data_of(t).flags.c_contiguous else None)
        set_requires_grad_flag(tr, requires_grad_of(t))
        spec = LeafSpec("tensor", shape, d, requires_grad=requires_grad_of(t),
                        has_grad=requires_grad_of(t) and grad_of(t) is not None)
        if requires_grad_of(t):                             # backward() inside fills its .grad
            ctx.leaves.append(tr)
            if spec.has_grad:                 # accumulating into the .grad it has now
                gid = ctx.graph.add_input(f"{nm}_grad", shape, d)
                ctx.input_paths[gid] = f"{cap.name}.grad"
                set_grad(tr, Tracer(ctx, gid, shape, d, c_layout(shape)))
                spec.grad_node = gid
        ctx._input_of[id(tr)] = len(specs)
        specs.append(spec)
        inputs.append(tr)
        watched.append((t, cap.name, version_of(t)[0], grad_of(t), requires_grad_of(t)))
        ctx.lifted_nodes[id(tr)] = nid
        out.append((cap, tr))
    return out


def _prune_lifted(ctx: TraceContext, lifted: list, n_args: int, specs: list) -> list:
    """Drop the lifted inputs the trace never read nor wrote; renumber the rest.
    Returns the Captured of the kept ones, in input order."""
    g = ctx.graph
    keep, kept_caps = [], []
    for i, (cap, t) in enumerate(lifted):
        nid = ctx.lifted_nodes[id(t)]
        idx = n_args + i
        grad_node = specs[idx].grad_node
        grad_changed = (grad_of(t) is not None) != (grad_node is not None) or (
            grad_node is not None and (not isinstance(grad_of(t), Tracer) or
                                       grad_of(t).node != grad_node))
        if g.nx.out_degree(nid) or nid in g.outputs or idx in ctx.mutations or grad_changed:
            keep.append((i, nid, t))
            kept_caps.append(cap)
    drop = []
    kept = {k for k, _, _ in keep}
    for i, (_, t) in enumerate(lifted):
        spec = specs[n_args + i]
        if i not in kept:
            drop.append(ctx.lifted_nodes[id(t)])
        if spec.grad_node is not None and (i not in kept or not ctx.grads_used):
            drop.append(spec.grad_node)       # a .grad the function never looked at
            spec.has_grad, spec.grad_node = False, None
            set_grad(t, None)
    for nid in drop:
        g.nx.remove_node(nid)
        g.inputs.remove(nid)
        ctx.input_paths.pop(nid, None)
        ctx.closed_rg.pop(nid, None)
    remap = {n_args + i: n_args + j for j, (i, _, _) in enumerate(keep)}
    kept_specs = [specs[n_args + i] for i, _, _ in keep]
    del specs[n_args:]
    specs.extend(kept_specs)
    for _, t in lifted:
        old = ctx._input_of.pop(id(t), None)
        if old in remap:
            ctx._input_of[id(t)] = remap[old]
    ctx.mutations = {remap.get(k, k): v for k, v in ctx.mutations.items() if k < n_args or
                     k in remap}
    return kept_caps


def _name_the_module(e: Exception, fn: Callable, args: tuple) -> None:
    """Add the module the error came through (``in module self.layers.2 (Linear)``) to
    its message, for a model the user compiles."""
    from eager.interop import CALLS
    from .capture import module_path
    if not CALLS.tracing or not e.args or not isinstance(e.args[0], str):
        return
    mod = CALLS.tracing[0]
    path = module_path(fn, args, mod)
    if path is not None and "[in module " not in e.args[0]:
        e.args = (f"{e.args[0]}  [in module {path} ({type(mod).__name__})]",) + e.args[1:]


def _global_random_states() -> tuple:
    import random
    return random.getstate(), np.random.get_state(legacy=False)


def _warn_if_global_random_used(fname: str, py_state: Any, np_state: Any) -> None:
    """Python's ``random`` and numpy's global ``np.random`` run while tracing: their
    numbers are frozen into the graph as constants, the same at every call."""
    import random
    import warnings
    now_py, now_np = _global_random_states()
    moved = []
    if now_py != py_state:
        moved.append("Python's random module")
    a, b = now_np["state"], np_state["state"]
    if a["pos"] != b["pos"] or not np.array_equal(a["key"], b["key"]) or \
            now_np["has_gauss"] != np_state["has_gauss"]:
        moved.append("numpy's np.random")
    if moved:
        warnings.warn(
            f"graphc: {fname} drew numbers from {' and '.join(moved)} while it was traced; "
            "those values are constants of the compiled code, the same at every call. Use "
            "eager.randn / eager.rand / eager.randint (drawn at every call) instead.",
            RuntimeWarning, stacklevel=4)


def _check_arguments_unchanged(fname: str, arg_leaves: list) -> None:
    """The graph is built for each argument's shape, dtype and buffer as they were when
    tracing started; a function that changed one of them behind the trace (numpy's
    ``a.shape = ...``, ``a.resize(...)``, a swapped ``.data``) would give native code a
    buffer it was not compiled for."""
    for leaf, path, spec in arg_leaves:
        arr = data_of(leaf) if isinstance(leaf, Tensor) else leaf
        if type(arr) is not np.ndarray:
            arr = np.asarray(arr)
        if arr.shape != spec.shape or arr.dtype.newbyteorder("=") != spec.dtype:
            raise TracerError(
                f"{fname}: argument {path} changed from {type_str(spec.shape, spec.dtype)} to "
                f"{type_str(arr.shape, arr.dtype.newbyteorder('='))} while it was being traced "
                "(its shape, dtype or buffer was replaced). Change arguments outside the "
                "compiled function.")


def _check_untouched(fname: str, watched: list) -> None:
    """Tracing sees tracers, never the eager tensors passed in: an object that holds those
    tensors itself (an optimizer, a module) and updates them while tracing would update them
    once, outside the graph, and never again."""
    for t, path, version, grad, rg in watched:
        if requires_grad_of(t) != rg:
            raise TracerError(
                f"{fname}: {path} had requires_grad changed while tracing, on the eager "
                "Tensor rather than on the traced argument; the compiled graph was traced for "
                f"requires_grad={rg}. Set it before calling the compiled function.")
        if version_of(t)[0] != version or grad_of(t) is not grad:
            what = "its data" if version_of(t)[0] != version else "its .grad"
            raise TracerError(
                f"{fname}: {path} had {what} changed directly while tracing, on the "
                "eager Tensor rather than on the traced argument (e.g. by an optimizer or module "
                "that holds the eager tensor). The compiled graph would not contain that update. "
                "Update the argument the function receives (`w -= lr * w.grad` under "
                "eager.no_grad()), or call the optimizer outside the compiled function.")


def _alias_inputs(ctx: TraceContext, groups: tuple, by_idx: list) -> list:
    """Make the input tracers of arguments that share memory views of one buffer tracer.

    The buffer starts as the members scattered into it (they agree where they overlap, being
    the same memory); each member is a gather of it, so writes through any member update the
    buffer and every other member re-reads it.  Returns [(leaf index, tracer)]."""
    g = ctx.graph
    out = []
    for n, dtype, members in groups:
        dtype = np.dtype(dtype)
        zero = g.add_const(np.zeros((), dtype))
        node = g.add_node("expand", (zero,), {"shape": (n,)}, shape=(n,), dtype=dtype)
        root = Tracer(ctx, node, (n,), dtype, c_layout((n,)))
        gathers = []
        for idx, off, strides in members:
            t = by_idx[idx]
            flat = np.full(t._meta_shape, off, dtype=np.int64)
            for d, (size, st) in enumerate(zip(t._meta_shape, strides)):
                shape = [1] * len(t._meta_shape)
                shape[d] = size
                flat = flat + (np.arange(size, dtype=np.int64) * st).reshape(shape)
            ix = g.add_const(flat)
            gathers.append(ix)
            spec = (("t", 0),)
            node = g.add_node("setitem", (node, t._node, ix), {"index": spec}, shape=(n,),
                              dtype=dtype)
        root._node = node
        for (idx, off, strides), ix in zip(members, gathers):
            t = by_idx[idx]
            t._view = (root, "getitem", {"index": (("t", 0),)}, None, (ix,))
            t._stor = root._stor
            t._lay = (off, tuple(strides))
            out.append((idx, t))
    return out


def trace_flat(fn: Callable, args: tuple, static_argnums: Sequence[int] = (),
               name: Optional[str] = None, aliases: tuple = ()) -> TraceResult:
    """Trace ``fn(*args)``; dynamic leaves become graph inputs in flattened order.

    ``aliases``: arguments that share memory, as groups ``(n, dtype, ((leaf index, offset,
    strides), ...))`` in elements of one buffer of ``n`` elements (see ``alias_groups``):
    their tracers become views of that buffer, so a write through one is seen by all."""
    fname = name or getattr(fn, "__name__", "fn")
    fname = _sanitize(fname) if not fname.isidentifier() else fname
    g = Graph(fname)
    ctx = TraceContext(g, fname)
    names = arg_names(fn, len(args))
    call_args = []
    specs = []
    used_names: set = set()
    tensor_io = False
    watched: list = []      # (eager Tensor argument, path, version, .grad) before tracing
    inputs: list = []       # the input tracer of each dynamic leaf
    arg_leaves: list = []   # (argument leaf, path, LeafSpec): re-checked after tracing
    for i, a in enumerate(args):
        if i in static_argnums:
            call_args.append(a)
            continue
        leaves, td = flatten(a)
        paths = leaf_paths(td, names[i])
        new_leaves = []
        for leaf, path in zip(leaves, paths):
            _, spec = classify_leaf(leaf, path)
            if spec.kind == "static":
                new_leaves.append(leaf)
                continue
            tensor_io = tensor_io or spec.kind == "tensor"
            nm = _sanitize(path)
            base, k = nm, 1
            while nm in used_names:
                k += 1
                nm = f"{base}_{k}"
            used_names.add(nm)
            nid = g.add_input(nm, spec.shape, spec.dtype)
            ctx.input_paths[nid] = path
            t = Tracer(ctx, nid, spec.shape, spec.dtype, c_layout(spec.shape))
            set_requires_grad_flag(t, spec.requires_grad)
            ctx._input_of[id(t)] = len(specs)
            if spec.requires_grad:
                ctx.leaves.append(t)
                if spec.has_grad:     # the tensor's current .grad is an input too
                    gid = g.add_input(f"{nm}_grad", spec.shape, spec.dtype)
                    ctx.input_paths[gid] = f"{path}.grad"
                    set_grad(t, Tracer(ctx, gid, spec.shape, spec.dtype, c_layout(spec.shape)))
                    spec.grad_node = gid
            specs.append(spec)
            inputs.append(t)
            new_leaves.append(t)
            if spec.kind == "tensor":
                watched.append((leaf, f"argument {path}", version_of(leaf)[0], grad_of(leaf),
                                requires_grad_of(leaf)))
                if leaf.grad_fn is not None:
                    ctx.nonleaf_args.add(nid)
            arg_leaves.append((leaf, path, spec))
        call_args.append(unflatten(td, new_leaves))
    members = _alias_inputs(ctx, aliases, inputs)
    n_args = len(specs)
    lifted = _lift(ctx, fn, args, specs, inputs, watched, used_names)
    pinned = [w[0] for w in watched if id(w[0]) not in PINNED]
    for t, path, *_ in watched:
        PINNED.setdefault(id(t), (t, f"{path} while graphc traces {fname}"))
    swapped = []
    from eager.interop import CALLS
    outer_tracer, outer_calls = TRACING.tracer, CALLS.tracing
    py_state, np_state = _global_random_states()
    try:
        try:
            for cap, t in lifted:         # the function reads the tracer where it reads the
                if cap.place is not None:     # tensor: self.weight.t() is traced
                    swapped.append((cap, cap.swap(args, t)))
            TRACING.tracer = ctx          # eager.randn, eager.zeros & co. give traced values
            CALLS.tracing = []            # which module an error came through
            out = fn(*call_args)
        except Exception as e:
            _name_the_module(e, fn, args)
            raise
        finally:
            CALLS.tracing = outer_calls
            TRACING.tracer = outer_tracer
            for cap, old in reversed(swapped):
                cap.swap(args, old)
            for t in pinned:
                PINNED.pop(id(t), None)
        _check_untouched(fname, watched)
        _check_arguments_unchanged(fname, arg_leaves)
        _warn_if_global_random_used(fname, py_state, np_state)
        out_leaves, out_tree = flatten(out)
        out_static = {}
        out_rg = []                           # does eager give each output a grad_fn?
        for k, leaf in enumerate(out_leaves):
            if isinstance(leaf, Tracer):
                if leaf._ctx is not ctx:
                    _check_live(leaf, "returning a value")
                    raise TracerError(f"{fname} returned a tracer of another trace")
                g.outputs.append(leaf.node)
                out_rg.append(bool(requires_grad_of(leaf)))
            elif isinstance(leaf, Tensor):
                g.outputs.append(ctx.const(data_of(leaf)))
                out_rg.append(False)
            elif isinstance(leaf, (np.ndarray, np.generic)):
                g.outputs.append(ctx.const(np.asarray(leaf)))
                out_rg.append(False)
            elif isinstance(leaf, (bool, int, float)) or leaf is None:
                out_static[k] = leaf
            else:
                raise SignatureError(f"{fname} returned an unsupported value of type "
                                     f"{type(leaf).__name__} (output leaf {k})")
        for cap, t in lifted:
            if requires_grad_of(t) != requires_grad_of(cap.tensor):
                raise TracerError(
                    f"{fname}: requires_grad of {cap.name} changed while tracing (the "
                    "function set it, or wrote a value that requires grad into it); graphc "
                    "does not write that back to the eager tensor. Set requires_grad before "
                    "calling the compiled function.")
        captured = _prune_lifted(ctx, lifted, n_args, specs)
        if ctx.rng_state is not None:             # the generator state: the last input
            specs.append(LeafSpec("array", (2,), np.dtype(np.int64)))
        for idx, t in members:                # written through another argument's memory
            if t._gen != 0 or t._stor.gen != 0:
                ctx.mutations[idx] = t
        mutated = []
        for idx, t in sorted(ctx.mutations.items()):
            if t.node != g.inputs[_graph_input_pos(specs, idx)]:
                mutated.append((idx, len(g.outputs)))
                g.outputs.append(t.node)
        grad_writes, grad_clears = [], []
        for t in ctx.leaves:
            idx = ctx._input_of.get(id(t))
            gr = grad_of(t)
            if idx is None or not specs[idx].requires_grad:
                continue      # .grad of a leaf made inside the function stays inside it
            if gr is None:
                if specs[idx].has_grad:       # set to None (zero_grad()): so is the tensor's
                    grad_clears.append(idx)
                continue
            if not isinstance(gr, Tracer) or gr._ctx is not ctx:
                raise TracerError(f"{fname}: .grad of argument {ctx.input_paths[t.node]} was set "
                                  "to something that is not a traced value")
            initial = specs[idx].grad_node
            if gr.node != initial:
                grad_writes.append((idx, len(g.outputs)))
                g.outputs.append(gr.node)
        # arguments whose C layout decided a reshape's view-or-copy that a write then made
        # observable: the call checks them (eager would decide differently on others)
        layout_inputs = (list(range(len(specs) - (ctx.rng_state is not None)))
                         if any(s1.gen > g1 or s2.gen > g2
                                for _, s1, g1, s2, g2 in ctx.layout_uses) else [])
    finally:
        ctx.active = False
    res = TraceResult(g, specs, out_tree, out_static, mutated, tensor_io or bool(captured),
                      grad_writes, layout_inputs, captured, ctx.randoms)
    res.grad_on = ctx.grad_on
    res.rng_count = ctx.rng_count
    res.grad_clears = grad_clears
    res.grads_used = ctx.grads_used
    res.out_rg = out_rg
    res.all_out_rg = all(out_rg)
    return res


def trace(fn: Callable, *example_args: Any, static_argnums: Sequence[int] = ()) -> Graph:
    """Trace ``fn`` on example arguments and return the verified Graph."""
    from .ir import verify
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    res = trace_flat(fn, example_args, tuple(static_argnums))
    verify(res.graph, "trace")
    return res.graph
