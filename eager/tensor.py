"""eager.Tensor: a numpy array plus the autograd state PyTorch attaches to it."""
from __future__ import annotations

import builtins
import threading
import os
import sys
import warnings
import weakref
from typing import Any, Callable, Optional

import numpy as np

# Layers below this module only (see docs/eager-layers.md).  Modules by full name: a
# "from . import x" would also be an import of the package eager itself.
import eager._dtype as D
import eager.autograd.backward_codegen as _codegen_mod
import eager.autograd.engine as _engine_mod
import eager.autograd.function as _function_mod
import eager.surface as _surface_mod
from ._format import format_tensor
from .surface import Size as _Size
from .surface import TensorOps, decode_index, encode_index
from .autograd.function import AccumulateGrad, OpNode, _edge, node_class
from .autograd.grad_mode import STATE as _STATE, no_grad as _no_grad
from .ops.movement import broadcast_view as _broadcast_view
from .ops.registry import OPS, Meta, ops_of

_ndarray = np.ndarray

NONLEAF_GRAD_WARNING = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
    "attribute won't be populated during autograd.backward(). If you indeed want the .grad field "
    "to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor. If you "
    "access the non-leaf Tensor by mistake, make sure you access the leaf Tensor instead.")
LEAF_INPLACE = "a leaf Variable that requires grad is being used in an in-place operation."
# Tensors whose storage must not be replaced right now: id -> (tensor, description).  A
# tracing compiler (graphc) pins the tensors it was called with while it traces them.
PINNED: dict = {}


class device:
    """Only ``cpu`` exists; anything else is a clear error rather than a silent fallback."""

    __slots__ = ("type", "index")

    def __init__(self, spec: Any = "cpu", index: Optional[int] = None) -> None:
        if isinstance(spec, device):
            self.type, self.index = spec.type, spec.index
            return
        if not isinstance(spec, str) or spec.split(":")[0] != "cpu":
            raise RuntimeError(f"eager runs on the CPU only; device {spec!r} is not available "
                               "(use device='cpu' or leave it out)")
        self.type = "cpu"
        self.index = index

    def __repr__(self) -> str:
        return "device(type='cpu')"

    def __eq__(self, other: object) -> bool:
        try:
            return device(other).type == self.type
        except RuntimeError:
            return False

    def __hash__(self) -> int:
        return hash("cpu")


_CPU = device("cpu")


class Tensor(TensorOps):
    """A multi-dimensional array with optional gradient tracking (PyTorch semantics)."""

    # ``_view`` is set only on views (see _link_view), never in _make: read it with getattr.
    __slots__ = ("_data", "_rg", "grad_fn", "_grad", "_version", "_acc", "_hooks",
                 "_output_nr", "_retains", "_view", "__weakref__")
    _priority = 1

    # --- construction -------------------------------------------------------------
    def __init__(self, *args: Any, dtype=None, device=None, requires_grad: bool = False) -> None:
        """``Tensor(3, 5)`` is uninitialized float32 of that shape; ``Tensor(data)`` copies."""
        if device is not None:
            _check_device(device)
        npd = D.to_np(dtype) if dtype is not None else D.DEFAULT_FLOAT
        if len(args) == 1 and not isinstance(args[0], (builtins.int, np.integer)):
            data = args[0]
            if isinstance(data, Tensor):
                data = data._data
            arr = np.array(data, dtype=npd)
        else:
            # Tensor() is an empty 1-D tensor, as in PyTorch
            shape = args[0] if len(args) == 1 and isinstance(args[0], tuple) else (args or (0,))
            try:
                arr = np.empty(tuple(builtins.int(s) for s in shape), dtype=npd)
            except (TypeError, ValueError):
                raise TypeError(f"Tensor(): expected a shape of ints or data, got {args!r}") from None
        _init(self, arr)
        if requires_grad:
            self.requires_grad_(True)

    @staticmethod
    def _make(data: np.ndarray) -> "Tensor":
        t = _new(Tensor)
        if data.__class__ is not _ndarray:
            data = np.asarray(data)
        t._data = data
        t._rg = False
        t.grad_fn = None
        t._grad = None
        t._version = [0]
        t._acc = None
        t._hooks = None
        t._output_nr = 0
        t._retains = False
        return t

    def _wrap_const(self, arr: np.ndarray) -> "Tensor":
        return Tensor._make(np.asarray(arr))

    # --- the op dispatch ------------------------------------------------------------
    def _apply(self, op: str, gname: str, operands: tuple, attrs: dict) -> "Tensor":
        opdef = OPS[op]
        if len(operands) == 1:
            x = operands[0]
            out = _make(opdef.forward(x._data, **attrs))
            if op in _LINKS_VIEWS:
                _link_view(out, operands, op, attrs)
            if x._rg and _STATE.enabled and opdef.vjp is not None:
                _record1(out, opdef, gname, x, attrs)
            return out
        arrays = [o._data if o.__class__ is Tensor else o for o in operands]
        out = _make(opdef.forward(*arrays, **attrs))
        if op in _LINKS_VIEWS:
            _link_view(out, operands, op, attrs)
        if _STATE.enabled and opdef.vjp is not None:
            _record(out, opdef, gname, operands, attrs)
        return out

    def _op(self, op: str, gname: str, *operands: Any, **attrs: Any) -> "Tensor":
        if not operands:                # a unary op: self is the only operand, skip _dispatch
            return self._apply(op, gname, (self,), attrs)
        return TensorOps._op(self, op, gname, *operands, **attrs)

    def _binary(self, op: str, other: Any, gname: str) -> "Tensor":
        f = _BINOPS.get((op, gname))
        if f is None:
            f = _binop(op, gname)
        return f(self, other)

    def reshape(self, *shape, _gname: str = "ViewBackward0") -> "Tensor":
        if self._rg and _STATE.enabled:
            return TensorOps.reshape(self, *shape, _gname=_gname)
        shp = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        try:                                    # untracked: numpy's C reshape, no checks
            data = self._data.reshape(shp)
        except (ValueError, TypeError):
            return TensorOps.reshape(self, *shape, _gname=_gname)   # the precise error
        out = _make(data)
        owner = data.base               # _link_view, inlined
        if owner is not None:
            src = self._data
            if owner is src or owner is src.base or np.may_share_memory(data, src):
                out._version = self._version
                if data.flags.writeable:
                    out._view = (self, "reshape", {"shape": data.shape}, (),
                                 _creation(self) if _STATE.enabled else NO_GRAD_VIEW)
        return out

    def view(self, *shape) -> "Tensor":
        return self.reshape(*shape)

    def expand(self, *shape) -> "Tensor":
        shp = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        if (self._rg and _STATE.enabled) or -1 in shp:
            return TensorOps.expand(self, *shape)
        src = self._data
        if src.flags.c_contiguous and src.size and len(shp) >= src.ndim:
            data = _broadcast_view(src, shp)
            if data is not None:        # a view of src: shares its version counter
                out = _make(data)
                out._version = self._version
                return out
        try:
            data = np.broadcast_to(src, shp)
        except (ValueError, TypeError):
            return TensorOps.expand(self, *shape)
        out = _make(data)
        _link_view(out, (self,), "expand", {"shape": data.shape})
        return out

    def _rbinary(self, op: str, other: Any, gname: str) -> "Tensor":
        f = _RBINOPS.get((op, gname))
        if f is None:
            f = _rbinop(op, gname)
        return f(self, other)

    # --- basic properties -------------------------------------------------------------
    @property
    def _npdtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def shape(self):
        return _Size(self._data.shape)

    @property
    def dtype(self) -> D.dtype:
        return D.FROM_NP[self._data.dtype]

    @property
    def device(self) -> device:
        return _CPU

    @property
    def is_cuda(self) -> bool:
        return False

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def dim(self) -> int:
        return self._data.ndim

    def numel(self) -> int:
        return self._data.size

    nelement = numel

    def element_size(self) -> int:
        return self._data.itemsize

    @property
    def itemsize(self) -> int:
        return self._data.itemsize

    @property
    def nbytes(self) -> int:
        return self._data.nbytes

    def stride(self, dim: Optional[int] = None):
        st = tuple(s // self._data.itemsize for s in self._data.strides)
        return st if dim is None else st[dim]

    def is_contiguous(self) -> bool:
        return self._data.flags.c_contiguous

    def data_ptr(self) -> int:
        return self._data.__array_interface__["data"][0]

    # --- autograd state ------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._rg

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if self.grad_fn is not None:
            if value:
                return
            raise RuntimeError("you can only change requires_grad flags of leaf variables. If you "
                               "want to use a computed variable in a subgraph that doesn't require "
                               "differentiation use var_no_grad = var.detach().")
        if value and self._data.dtype.kind != "f":
            raise RuntimeError("only Tensors of floating point dtype can require gradients "
                               f"(this tensor is {self.dtype}); convert it with .float() first")
        self._rg = builtins.bool(value)

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        self.requires_grad = requires_grad
        return self

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def grad(self) -> Optional["Tensor"]:
        if self.grad_fn is not None and not self._retains:
            warnings.warn(NONLEAF_GRAD_WARNING, UserWarning, stacklevel=2)
        return self._grad

    @grad.setter
    def grad(self, value: Optional["Tensor"]) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got "
                                f"{type(value).__name__}")
            if value.shape != self.shape:
                raise RuntimeError(f"assigned grad has data of a different size: "
                                   f"{list(value.shape)} vs the tensor's {list(self.shape)}")
            if value._data.dtype != self._data.dtype:
                raise RuntimeError(f"assigned grad has data of a different type "
                                   f"({value.dtype} vs {self.dtype})")
        self._grad = value

    @property
    def data(self) -> "Tensor":
        """A tensor sharing storage, detached from the graph (and from version tracking)."""
        return Tensor._make(self._data)

    @data.setter
    def data(self, value: "Tensor") -> None:
        pinned = PINNED.get(id(self))
        if pinned is not None and pinned[0] is self:
            f = sys._getframe(1)
            raise RuntimeError(f"cannot replace .data of {pinned[1]} (at "
                               f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}): the "
                               "compiled code being built would then be handed a different "
                               "buffer than it was traced for. Replace it before or after the "
                               "call, not inside.")
        self._data = value._data if isinstance(value, Tensor) else np.asarray(value)

    def retain_grad(self) -> None:
        if not self._rg:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.grad_fn is None or self._retains:
            return
        self._retains = True
        node = self.grad_fn
        if node._retained is None:
            node._retained = {}
        node._retained[self._output_nr] = weakref.ref(self)

    @property
    def retains_grad(self) -> bool:
        return self._retains

    def register_hook(self, hook: Callable) -> "RemovableHandle":
        """Call ``hook(grad)`` when this tensor's gradient is computed; it may return a new grad."""
        if not self._rg:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is None:
            if self._hooks is None:
                self._hooks = []
            hooks = self._hooks
        else:
            node = self.grad_fn
            if node._hooks is None:
                node._hooks = {}
            hooks = node._hooks.setdefault(self._output_nr, [])
        hooks.append(hook)
        return RemovableHandle(hooks, hook)

    def detach(self) -> "Tensor":
        """Same storage and version counter, no history, requires_grad=False."""
        t = Tensor._make(self._data)
        t._version = self._version
        return t

    def detach_(self) -> "Tensor":
        self.grad_fn = None
        self._rg = False
        return self

    def _grad_accumulator(self) -> AccumulateGrad:
        return (self._acc or self._leaf_edge())[0]

    def _leaf_edge(self) -> tuple:
        """Make this leaf's AccumulateGrad (once: it refers to us weakly) and keep the
        edge ``(node, 0)`` that graphs point at in ``_acc``."""
        acc = _new(AccumulateGrad)      # AccumulateGrad(self), without an __init__ frame
        acc._seq = _next(_SEQ)
        acc._hooks = None
        acc._retained = None
        acc._metadata = None
        acc._var = _weakref(self)
        acc.next_functions = ()
        edge = self._acc = (acc, 0)
        return edge

    def backward(self, gradient=None, retain_graph=None, create_graph: bool = False,
                 inputs=None) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad`` (see eager.autograd.backward)."""
        if gradient is None and inputs is None and not create_graph and not retain_graph:
            _engine_mod.backward_scalar(self)       # the common loss.backward()
        else:
            _engine_mod.backward(self, gradient, retain_graph=retain_graph,
                                 create_graph=create_graph, inputs=inputs)

    # --- conversions ------------------------------------------------------------------
    def item(self):
        if self._data.size != 1:
            raise RuntimeError(f"a Tensor with {self._data.size} elements cannot be converted to "
                               "Scalar")
        return self._data.reshape(()).item()

    def tolist(self):
        return self._data.tolist()

    def numpy(self, *, force: bool = False) -> np.ndarray:
        if self._rg and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use "
                               "tensor.detach().numpy() instead.")
        return self._data

    def __array__(self, dtype=None, copy=None):
        arr = self._data
        if dtype is not None and arr.dtype != dtype:
            return arr.astype(dtype)
        return arr.copy() if copy else arr

    def __bool__(self) -> builtins.bool:
        if self._data.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return builtins.bool(self._data.reshape(()))

    def __float__(self) -> builtins.float:
        return builtins.float(self.item())

    def __int__(self) -> builtins.int:
        return builtins.int(self.item())

    def __index__(self) -> builtins.int:
        if self._data.dtype.kind not in "iub" or self._data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return builtins.int(self.item())

    def __len__(self) -> builtins.int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return iter(self.unbind(0))         # views, as in PyTorch

    def _differentiable(self) -> bool:
        return self._rg and _STATE.enabled

    def _multi_output_views(self, views: tuple) -> tuple:
        """Mark the views returned together by ``unbind`` (PyTorch's MULTI_OUTPUT_NODE):
        they write through, but an in-place op on one of them cannot be recorded."""
        for i, v in enumerate(views):
            view = getattr(v, "_view", None)
            if view is not None and view[4] is not NO_GRAD_VIEW:
                v._view = view[:4] + (("multi", i),)
        return views

    def __repr__(self) -> str:
        suffixes = []
        if self.grad_fn is not None:
            suffixes.append(f"grad_fn=<{self.grad_fn.name()}>")
        elif self._rg:
            suffixes.append("requires_grad=True")
        return format_tensor(self._data, suffixes)

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        if self._data.ndim == 0 and spec:
            return format(self.item(), spec)
        return repr(self)

    def __reduce_ex__(self, protocol):
        return (_rebuild, (self._data.copy(), self._rg))

    def __deepcopy__(self, memo):
        if self.grad_fn is not None:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support "
                               "the deepcopy protocol at the moment")
        t = Tensor._make(self._data.copy())
        t._rg = self._rg
        if self._grad is not None:
            t._grad = Tensor._make(self._grad._data.copy())
        memo[id(self)] = t
        return t

    # --- in-place ops -----------------------------------------------------------------------
    def _inplace(self, method: str, *args, gname: Optional[str] = None, **kwargs) -> "Tensor":
        """Run ``method`` out of place, then write the result into self's buffer.

        With grad recording on, self takes over the new node as its grad_fn (PyTorch's
        rebase); without it this is a plain numpy in-place write.
        """
        recording = _STATE.enabled and (self._rg or builtins.any(
            isinstance(a, Tensor) and a._rg for a in args))
        if recording:
            _check_view_of_leaf(self)
            if self.grad_fn is None and self._rg:
                raise RuntimeError(LEAF_INPLACE)
            snap = Tensor._make(self._data.copy())
            snap._rg, snap.grad_fn, snap._output_nr = self._rg, self.grad_fn, self._output_nr
            res = getattr(snap, method)(*args, **kwargs)
            self._write(res._data, method)
            if res.grad_fn is not None:
                node = res.grad_fn
                if gname is not None and isinstance(node, OpNode):
                    node.__class__ = node_class(gname)
                self.grad_fn = node
                self._output_nr = res._output_nr
                self._rg = True
                _rebase_bases(self)
        else:
            if self.grad_fn is None and self._rg and _STATE.enabled:
                raise RuntimeError(LEAF_INPLACE)
            with _no_grad():
                res = getattr(self, method)(*args, **kwargs)
            self._write(res._data, method)
        return self

    def _write(self, value: np.ndarray, op: str) -> None:
        dst = self._data
        if value.shape != dst.shape:
            raise RuntimeError(f"{op}_: output with shape {list(dst.shape)} doesn't match the "
                               f"broadcast shape {list(value.shape)}")
        if value.dtype != dst.dtype:
            D.check_inplace_result(value.dtype, dst.dtype)
        if not dst.flags.writeable:
            raise RuntimeError(f"{op}_: this tensor is a broadcast (expanded) view or read-only "
                               "buffer and cannot be written in place; clone() it first")
        np.copyto(dst, value, casting="unsafe")     # PyTorch's rule was checked above
        self._version[0] += 1

    def _fast_inplace(self, ufunc, other) -> Optional["Tensor"]:
        """numpy ``out=`` path for the common no-recording update ``w -= lr * g``."""
        if _STATE.enabled and (self._rg or (other.__class__ is Tensor and other._rg)):
            return None
        b = other._data if other.__class__ is Tensor else other
        if isinstance(b, (TensorOps,)) or not isinstance(b, (np.ndarray, builtins.int,
                                                              builtins.float, np.number)):
            return None
        dst = self._data
        try:
            # numpy refuses a cast outside its kind (UFuncTypeError, a TypeError); what numpy
            # accepts here PyTorch accepts too (int -> float, float64 -> float32...)
            ufunc(dst, b, out=dst, casting="same_kind")
        except (ValueError, TypeError, OverflowError):
            return None   # the general path applies PyTorch's rule or gives the precise error
        self._version[0] += 1
        return self

    def add_(self, other, *, alpha=1):
        if alpha == 1 and self._fast_inplace(np.add, other) is not None:
            return self
        return self._inplace("add", other, alpha=alpha)

    def sub_(self, other, *, alpha=1):
        oc = other.__class__
        if (self._data.dtype.kind == "b" or oc is builtins.bool or oc is np.bool_
                or (oc is Tensor and other._data.dtype.kind == "b")):
            _surface_mod._check_bool_sub(self, other)   # numpy would subtract a bool
        if alpha == 1 and self._fast_inplace(np.subtract, other) is not None:
            return self
        return self._inplace("sub", other, alpha=alpha)

    def mul_(self, other):
        if self._fast_inplace(np.multiply, other) is not None:
            return self
        return self._inplace("mul", other)

    def div_(self, other):
        if self._data.dtype.kind == "f":
            with np.errstate(divide="ignore", invalid="ignore"):    # x / 0 is inf or nan
                if self._fast_inplace(np.true_divide, other) is not None:
                    return self
        return self._inplace("div", other)

    def pow_(self, exponent):
        return self._inplace("pow", exponent)

    def neg_(self):
        return self._inplace("neg")

    def clamp_(self, min=None, max=None):
        return self._inplace("clamp", min, max)

    clip_ = clamp_

    def relu_(self):
        return self._inplace("relu")

    def exp_(self):
        return self._inplace("exp")

    def fill_(self, value):
        if isinstance(value, Tensor):
            value = value.item()
        if not (_STATE.enabled and self._rg):
            if not self._data.flags.writeable:
                raise RuntimeError("fill_: this tensor is a read-only (expanded) view; clone() it")
            self._data.fill(value)
            self._version[0] += 1
            return self
        return self._inplace("_filled", value, gname="FillBackward0")

    def zero_(self):
        if not (_STATE.enabled and self._rg):
            return self.fill_(0)
        return self._inplace("_filled", 0, gname="ZeroBackward0")

    def _filled(self, value):
        return self._op("fill", "FillBackward0", value=builtins.float(value) if
                        self._data.dtype.kind == "f" else value)

    def copy_(self, src) -> "Tensor":
        if not isinstance(src, Tensor):
            src = tensor(src, dtype=self.dtype)
        return self._setitem_impl(Ellipsis, src, gname="CopyBackwards")

    def __iadd__(self, other):
        return self.add_(other)

    def __isub__(self, other):
        return self.sub_(other)

    def __imul__(self, other):
        return self.mul_(other)

    def __itruediv__(self, other):
        return self.div_(other)

    def __ipow__(self, other):
        return self.pow_(other)

    def __setitem__(self, key, value) -> None:
        self._setitem_impl(key, value, gname="CopySlices")

    def _setitem_impl(self, key, value, gname: str) -> "Tensor":
        spec, arrays, _ = encode_index(key, self)
        if isinstance(value, Tensor):
            v = value
            if v._data.dtype != self._data.dtype:
                v = v.to(self.dtype)
        else:
            v = Tensor._make(np.asarray(value, dtype=self._data.dtype))
        recording = _STATE.enabled and (self._rg or v._rg)
        if not recording:
            if not self._data.flags.writeable:
                raise RuntimeError("cannot assign into a read-only (expanded) view; clone() it")
            try:
                self._data[decode_index(spec, [a._data for a in arrays])] = v._data
            except (ValueError, IndexError) as e:
                # PyTorch's types: IndexError for the index, RuntimeError for the value
                raise (IndexError if isinstance(e, IndexError) else RuntimeError)(
                    f"index assignment: {e} (tensor shape {list(self.shape)}, value shape "
                    f"{list(v.shape)})") from None
            self._version[0] += 1
            return self
        _check_view_of_leaf(self)
        if self.grad_fn is None and self._rg:
            raise RuntimeError(LEAF_INPLACE)
        from .ops.movement import assigned_shape
        want = assigned_shape(v._data.shape, Meta(self._data.shape, self._data.dtype),
                              tuple(Meta(a._data.shape, a._data.dtype) for a in arrays), spec)
        if want != v._data.shape:
            v = v.reshape(want)                  # leading size-1 dims dropped, as numpy does
        snap = Tensor._make(self._data)
        snap._rg, snap.grad_fn, snap._output_nr = self._rg, self.grad_fn, self._output_nr
        res = snap._op("setitem", gname, v, *arrays, index=spec)
        self._write(res._data, "setitem")
        self.grad_fn = res.grad_fn
        self._output_nr = 0
        self._rg = True
        _rebase_bases(self)
        return self


class RemovableHandle:
    """Returned by ``register_hook``; ``remove()`` unregisters the hook."""

    def __init__(self, hooks: list, hook: Callable) -> None:
        self._hooks = hooks
        self._hook = hook

    def remove(self) -> None:
        try:
            self._hooks.remove(self._hook)
        except ValueError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


_new = object.__new__


def _init(t: Tensor, arr: np.ndarray) -> None:
    t._data = arr
    t._rg = False
    t.grad_fn = None
    t._grad = None
    t._version = [0]
    t._acc = None
    t._hooks = None
    t._output_nr = 0
    t._retains = False


_make = Tensor._make

# --- views -----------------------------------------------------------------------
# numpy reshape/transpose/basic indexing return views of the input's buffer.  As in
# PyTorch, such a view shares its base's version counter (so an in-place write through
# either invalidates tensors the graph saved), and an in-place op recorded on a view
# gives its base a new history (CopySlices) instead of silently bypassing it.
# the ops whose numpy forward may return a view (declared by their records), and the ops
# whose result may share memory with an operand (the view and index families)
_VIEW_OPS = frozenset(name for name, op in OPS.items() if op.view)
_LINKS_VIEWS = ops_of("view", "index")
VIEW_OF_LEAF_INPLACE = ("a view of a leaf Variable that requires grad is being used in an "
                        "in-place operation.")
# How a view was made (``_view[4]``, PyTorch's CreationMeta): None for an ordinary view,
# NO_GRAD_VIEW when made with grad recording off, ("multi", i) for output i of unbind.
# An in-place op that must be recorded is refused on the last two, as in PyTorch.
NO_GRAD_VIEW = "no_grad"
NO_GRAD_VIEW_INPLACE = (
    "A view was created in no_grad mode and is being modified inplace with grad mode enabled. "
    "Given that this use case is ambiguous and error-prone, it is forbidden. You can clarify "
    "your code by moving both the view and the inplace either both inside the no_grad block "
    "(if you don't want the inplace to be tracked) or both outside (if you want the inplace "
    "to be tracked).")
MULTI_OUTPUT_VIEW_INPLACE = (
    "Output {} of UnbindBackward0 is a view and is being modified inplace. This view is the "
    "output of a function that returns multiple views. Such functions do not allow the output "
    "views to be modified inplace. You should replace the inplace operation by an out-of-place "
    "one.")


def _creation(base: Tensor):
    """The creation kind a view of ``base`` inherits (a view of an unbind output is one)."""
    view = getattr(base, "_view", None)
    return None if view is None else view[4]


def _link_view(out: Tensor, operands: tuple, op: str, attrs: dict) -> None:
    base = operands[0]
    dst = out._data
    owner = dst.base
    if owner is None or base.__class__ is not Tensor:
        return
    src = base._data
    # numpy points a view's .base at the array owning the memory: compare owners first,
    # and only ask numpy's (slower) overlap test when that is inconclusive
    if owner is not src and owner is not src.base and not np.may_share_memory(dst, src):
        return
    out._version = base._version
    if op in _VIEW_OPS and dst.flags.writeable:
        out._view = (base, op, attrs, operands[1:],
                     _creation(base) if _STATE.enabled else NO_GRAD_VIEW)


def _check_view_of_leaf(t: Tensor) -> None:
    """Before a recorded in-place op on ``t``: refuse it if ``t`` is a view made without
    grad recording or by unbind, or a view whose root base is a leaf while the view or the
    leaf requires grad (PyTorch's check_inplace: ``leaf.reshape(...).requires_grad_()[1]``
    counts too).  Recording the write would otherwise give the leaf a history."""
    view = getattr(t, "_view", None)
    if view is None:
        return
    creation = view[4]
    if creation is NO_GRAD_VIEW:
        raise RuntimeError(NO_GRAD_VIEW_INPLACE)
    if creation is not None:
        raise RuntimeError(MULTI_OUTPUT_VIEW_INPLACE.format(creation[1]))
    rg = t._rg
    while view is not None:
        t = view[0]
        view = getattr(t, "_view", None)
    if t.grad_fn is None and (rg or t._rg):
        raise RuntimeError(VIEW_OF_LEAF_INPLACE)


def _rebase_bases(t: Tensor) -> None:
    """After an in-place op on view ``t`` (buffer already written), re-record its bases."""
    view = getattr(t, "_view", None)
    while view is not None:
        base, op, attrs, extra = view[:4]
        if op == "getitem":
            snap = Tensor._make(base._data)
            snap._rg, snap.grad_fn, snap._output_nr = base._rg, base.grad_fn, base._output_nr
            new = snap._op("setitem", "CopySlices", t, *extra, index=attrs["index"])
        elif op == "reshape":
            new = t._op("reshape", "CopySlices", shape=base._data.shape)
        else:
            perm = attrs["perm"]
            inv = tuple(sorted(range(len(perm)), key=perm.__getitem__))
            new = t._op("transpose", "CopySlices", perm=inv)
        if new.grad_fn is not None:
            base.grad_fn = new.grad_fn
            base._output_nr = 0
            base._rg = True
        t = base
        view = getattr(t, "_view", None)


def _rebuild(data, rg):
    t = Tensor._make(data)
    t._rg = rg
    return t


_NO_EDGE = (None, 0)
_RAW = {name: getattr(op.forward, "raw", op.forward) for name, op in OPS.items()}
_NODE_CLASSES = _function_mod._node_classes


def _record(out: Tensor, opdef, gname: str, operands: tuple, attrs: dict) -> None:
    """Attach a backward node to ``out`` if any differentiable operand requires grad."""
    out_data = out._data
    if out_data.dtype.kind != "f":
        return
    vjp = opdef.vjp
    nv = len(vjp)
    needs = []
    edges = []
    anyneed = False
    i = 0
    for o in operands:
        if o.__class__ is Tensor and o._rg and i < nv and vjp[i] is not None:
            needs.append(True)
            anyneed = True
            edges.append(_edge(o))
        else:
            needs.append(False)
            edges.append(_NO_EDGE)
        i += 1
    if not anyneed:
        return
    needs = tuple(needs)
    km = _KEEP.get((opdef.name, needs))
    if km is None:
        km = _keep_mask(opdef, needs, len(operands))
    keep, any_keep = km
    # OpNode.__init__, inlined: the tape's hot path
    saved = []
    versions = []
    shapes = []
    for o, k in zip(operands, keep):
        if o.__class__ is Tensor:
            data = o._data
            if k:
                saved.append(o)
                versions.append(o._version[0])
            else:
                saved.append(None)
                versions.append(None)
        else:                       # a constant operand (numpy scalar or array)
            data = o
            saved.append(o if k else None)
            versions.append(None)
        shapes.append((data.shape, data.dtype))
    out.grad_fn = _new_op_node(gname, opdef, attrs, needs, tuple(edges), tuple(saved),
                               tuple(versions), tuple(shapes), out, any_keep)
    out._rg = True


_weakref = weakref.ref
_new_op_node = _function_mod.new_op_node
_KEEP = _function_mod._KEEP
_keep_mask = _function_mod.keep_mask
_SEQ = _function_mod._seq
_next = next
_NO_ATTRS: dict = {}    # the attrs of every binary node (never mutated)


def _record1(out: Tensor, opdef, gname: str, x: Tensor, attrs: dict) -> None:
    """:func:`_record` for a unary op on ``x``, which requires grad."""
    out_data = out._data
    if out_data.dtype.kind != "f" or not opdef.vjp or opdef.vjp[0] is None:
        return
    edge = _edge(x)
    km = _KEEP.get((opdef.name, _NEED1))
    if km is None:
        km = _keep_mask(opdef, _NEED1, 1)
    keep = km[1]
    dx = x._data
    out.grad_fn = _new_op_node(gname, opdef, attrs, _NEED1, (edge,),
                               (x if keep else None,), (x._version[0] if keep else None,),
                               ((dx.shape, dx.dtype),), out, keep)
    out._rg = True


_NEED1 = (True,)


def _record2(out: Tensor, recipes: list, x, y, dt) -> None:
    """:func:`_record` for a binary op without attrs (``x`` or ``y`` may be a numpy constant).

    Called by the operator closures below for operands of one float dtype ``dt`` (the
    output's too). ``recipes`` belongs to one (op, node name): entry ``2*x_rg + y_rg``
    says what such a node needs and keeps (see :func:`_recipe2`)."""
    xt = x.__class__ is Tensor
    yt = y.__class__ is Tensor
    i = (2 if xt and x._rg else 0) + (1 if yt and y._rg else 0)
    r = recipes[i]
    if r is None:
        r = _recipe2(recipes, i)
    if r is False:
        return
    cls, opdef, needs, kx, ky, keeps = r
    # the edges (function._edge, inlined; a leaf keeps its edge in _acc)
    if needs[0]:
        fn = x.grad_fn
        ex = (fn, x._output_nr) if fn is not None else (x._acc or x._leaf_edge())
    else:
        ex = _NO_EDGE
    if needs[1]:
        fn = y.grad_fn
        ey = (fn, y._output_nr) if fn is not None else (y._acc or y._leaf_edge())
    else:
        ey = _NO_EDGE
    dx = x._data if xt else x
    dy = y._data if yt else y
    # new_op_node, inlined for a binary node without attrs
    node = _new(cls)
    node._seq = _next(_SEQ)
    node._hooks = None
    node._retained = None
    node._metadata = None
    node._op = opdef
    node._attrs = _NO_ATTRS
    node._needs = needs
    node.next_functions = (ex, ey)
    # a saved tensor's version now (constants have none)
    node._saved = (x if kx else None, y if ky else None)
    node._versions = (x._version[0] if kx and xt else None, y._version[0] if ky and yt else None)
    node._shapes = ((dx.shape, dt), (dy.shape, dt))
    if opdef.saves_out:
        node._out = out._data
        node._outv = out._version
        node._freed = False
    else:
        node._out = None
        node._outv = None
        node._freed = False if keeps else None
    out.grad_fn = node
    out._rg = True


def _new_recipes(opdef, gname: str) -> list:
    """The four recipe slots of one (op, node name), filled on first use."""
    return [None, None, None, None, opdef, gname]


def _recipe2(recipes: list, i: int):
    """Fill recipe slot ``i`` (bit 1: x requires grad, bit 0: y does): (node class, op,
    needs, keep x, keep y, keeps anything), or False when no input needs a gradient."""
    opdef, gname = recipes[4], recipes[5]
    vjp = opdef.vjp
    nx = bool(i & 2) and vjp[0] is not None
    ny = bool(i & 1) and len(vjp) > 1 and vjp[1] is not None
    if not (nx or ny):
        r = False
    else:
        needs = (nx, ny)
        (kx, ky), keeps = _keep_mask(opdef, needs, 2)
        r = (_NODE_CLASSES.get(gname) or _function_mod.node_class(gname), opdef, needs, kx, ky,
             keeps)
    recipes[i] = r
    return r


# --- binary operators ------------------------------------------------------------
# ``a * b`` is the hottest path of the tape.  Each operator is one closure made here
# (op, node name and numpy function bound), so a call is one Python frame: the fast
# path covers tensor (op) tensor of one dtype and tensor (op) Python number; anything
# else (promotion, arrays, lists...) goes through TensorOps' general coercion.

_BINOPS: dict = {}
_RBINOPS: dict = {}


def _binop(op: str, gname: str):
    """``self (op) other`` for Tensor ``self``."""
    raw = _RAW[op]
    opdef = OPS[op]
    forward = opdef.forward
    recorded = opdef.vjp is not None
    recipes = _new_recipes(opdef, gname)
    general = TensorOps._binary
    state = _STATE
    Float, Int = builtins.float, builtins.int

    def binop(self, other):
        a = self._data
        dt = a.dtype
        oc = other.__class__
        if oc is Tensor:
            b = other._data
            if dt is not b.dtype and dt != b.dtype:
                return general(self, op, other, gname)
            rg = self._rg or other._rg
        elif oc is Float or oc is Int:
            if dt.kind == "b" or (dt.kind != "f" and oc is Float):
                return general(self, op, other, gname)
            b = dt.type(other)
            other = b
            rg = self._rg
        elif oc is dt.type:             # a numpy scalar of our dtype (VJP rules make these)
            b = other
            rg = self._rg
        else:
            return general(self, op, other, gname)
        try:
            out = _make(raw(a, b))
        except ValueError:
            forward(a, b)               # raises the error naming the op and both shapes
            raise
        except TypeError:               # numpy refuses (bool - bool): PyTorch's error
            return general(self, op, other, gname)
        if rg and recorded and state.enabled and dt.kind == "f":
            _record2(out, recipes, self, other, dt)
        return out

    binop.__name__ = binop.__qualname__ = f"{op}_{gname or 'nograd'}"
    _BINOPS[(op, gname)] = binop
    return binop


def _rbinop(op: str, gname: str):
    """``other (op) self`` for Tensor ``self`` and a Python number ``other``."""
    raw = _RAW[op]
    opdef = OPS[op]
    recorded = opdef.vjp is not None
    recipes = _new_recipes(opdef, gname)
    general = TensorOps._rbinary
    state = _STATE
    Float, Int = builtins.float, builtins.int

    def rbinop(self, other):
        oc = other.__class__
        a = self._data
        dt = a.dtype
        kind = dt.kind
        if (oc is Float and kind == "f") or (oc is Int and kind != "b"):
            b = dt.type(other)
            out = _make(raw(b, a))
            if self._rg and recorded and state.enabled and kind == "f":
                _record2(out, recipes, b, self, dt)
            return out
        return general(self, op, other, gname)

    rbinop.__name__ = rbinop.__qualname__ = f"r{op}_{gname}"
    _RBINOPS[(op, gname)] = rbinop
    return rbinop


def _mm2d(method: str):
    """``self @ other`` for two 2-D tensors of one dtype (the MLP's products): the op
    record's numpy forward and a binary node, without the general matmul dispatch
    (``TensorOps.<method>``), which handles every other case and every error."""
    raw = _RAW["matmul"]
    recipes = _new_recipes(OPS["matmul"], "MmBackward0")
    general = getattr(TensorOps, method)
    state = _STATE

    def mm(self, other):
        if other.__class__ is Tensor:
            a = self._data
            b = other._data
            dt = a.dtype
            if (a.ndim == 2 and b.ndim == 2 and a.shape[1] == b.shape[0]
                    and (dt is b.dtype or dt == b.dtype)):
                out = _make(raw(a, b))
                if (self._rg or other._rg) and state.enabled and dt.kind == "f":
                    _record2(out, recipes, self, other, dt)
                return out
        return general(self, other)

    mm.__name__ = mm.__qualname__ = method
    return mm


for _name in ("mm", "matmul", "__matmul__"):
    setattr(Tensor, _name, _mm2d(_name))

for _name, _op_name, _gname in (("__add__", "add", "AddBackward0"),
                                ("__sub__", "sub", "SubBackward0"),
                                ("__mul__", "mul", "MulBackward0"),
                                ("__truediv__", "div", "DivBackward0")):
    setattr(Tensor, _name, _binop(_op_name, _gname))
for _name, _op_name, _gname in (("__radd__", "add", "AddBackward0"),
                                ("__rsub__", "sub", "RsubBackward1"),
                                ("__rmul__", "mul", "MulBackward0"),
                                ("__rtruediv__", "div", "DivBackward0")):
    setattr(Tensor, _name, _rbinop(_op_name, _gname))


def _check_device(dev) -> None:
    device(dev)


# ---------------------------------------------------------------------------
# creation functions


def _finish(arr: np.ndarray, requires_grad: bool, device_=None) -> Tensor:
    if device_ is not None:
        _check_device(device_)
    t = Tensor._make(arr)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _shape(size) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    try:
        return tuple(builtins.int(s) for s in size)
    except (TypeError, ValueError):
        raise TypeError(f"size must be a sequence of ints, got {size!r}") from None


def _dt(dtype, default=None) -> np.dtype:
    if dtype is None:
        return default if default is not None else D.DEFAULT_FLOAT
    return D.to_np(dtype)


def tensor(data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Copy ``data`` (nested lists, numbers, arrays, tensors) into a new leaf tensor."""
    if isinstance(data, Tensor):
        arr = data._data.copy() if dtype is None else data._data.astype(D.to_np(dtype))
        return _finish(arr, requires_grad, device)
    if isinstance(data, (list, tuple)) and data and builtins.any(
            isinstance(d, Tensor) for d in _flat(data)):
        data = _tensors_to_lists(data)
    npd = D.to_np(dtype) if dtype is not None else D.infer_np_dtype(data)
    try:
        arr = np.array(data, dtype=npd)
    except (ValueError, TypeError) as e:
        raise ValueError(f"tensor(): could not convert data to a {D.from_np(npd)} tensor: {e}") \
            from None
    return _finish(arr, requires_grad, device)


def _flat(seq):
    stack = [seq]
    while stack:
        s = stack.pop()
        if isinstance(s, (list, tuple)):
            stack.extend(s)
        else:
            yield s


def _tensors_to_lists(data):
    if isinstance(data, Tensor):
        return data._data.tolist()
    if isinstance(data, (list, tuple)):
        return [_tensors_to_lists(d) for d in data]
    return data



def as_tensor(data, dtype=None, device=None) -> Tensor:
    if isinstance(data, Tensor) and (dtype is None or D.to_np(dtype) == data._data.dtype):
        return data
    if isinstance(data, np.ndarray) and (dtype is None or D.to_np(dtype) == data.dtype):
        return _finish(data, False, device)
    return tensor(data, dtype=dtype, device=device)


def from_numpy(arr: np.ndarray) -> Tensor:
    """Share memory with a numpy array (writes show in both)."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"from_numpy expects a numpy.ndarray, got {type(arr).__name__}")
    if arr.dtype not in D.FROM_NP:
        raise TypeError(f"can't convert np.ndarray of type {arr.dtype}; supported: float64, "
                        "float32, float16, int64, int32, int16, int8, uint8 and bool")
    return Tensor._make(arr)


_gen = np.random.default_rng()
# (seed, how many times manual_seed was called): compiled code seeds its own stream from it
SEED = [None, 0]


class _Tracing(threading.local):
    """What a tracing compiler (graphc) asks of eager while it traces on this thread
    (``tracer`` is None otherwise): random draws (``randn`` & co.) and the tensors the
    factories make (``zeros``, ``ones``, ``full``, ``empty``, ``arange``, ``linspace``,
    ``eye`` and the ``_like`` forms) come from ``tracer.random(kind, shape, dtype,
    params)`` and ``tracer.factory(array, requires_grad)`` as traced values, so fresh
    draws are made at every call and writing traced values into a factory's tensor in
    place (``out = zeros(T, H); out[t] = h``) is traced too; code that must not run
    while tracing (an optimizer's step) checks it."""
    tracer = None


TRACING = _Tracing()


def _factory(arr: np.ndarray, requires_grad: bool, device_=None):
    tracer = TRACING.tracer
    if tracer is not None:
        if device_ is not None:
            _check_device(device_)
        return tracer.factory(arr, requires_grad)
    return _finish(arr, requires_grad, device_)


def manual_seed(seed: int):
    """Seed eager's generator and compiled code's (numbers differ from PyTorch's, and
    eager's from compiled code's; each sequence is reproducible)."""
    global _gen
    _gen = np.random.default_rng(builtins.int(seed))
    SEED[0], SEED[1] = builtins.int(seed), SEED[1] + 1
    return _gen


def seed() -> int:
    s = builtins.int(np.random.SeedSequence().entropy % (2 ** 63))
    manual_seed(s)
    return s


def randn(*size, dtype=None, device=None, requires_grad: bool = False, generator=None) -> Tensor:
    g = generator if generator is not None else _gen
    npd = _dt(dtype)
    if npd.kind != "f":
        raise RuntimeError(f"randn: expected a floating point dtype, got {D.from_np(npd)}")
    if TRACING.tracer is not None and generator is None:
        return TRACING.tracer.random("normal", _shape(size), npd, {})
    arr = g.standard_normal(_shape(size), dtype=npd if npd != np.float16 else np.float32)
    return _finish(arr.astype(npd, copy=False), requires_grad, device)


def rand(*size, dtype=None, device=None, requires_grad: bool = False, generator=None) -> Tensor:
    g = generator if generator is not None else _gen
    npd = _dt(dtype)
    if TRACING.tracer is not None and generator is None:
        return TRACING.tracer.random("uniform", _shape(size), npd, {})
    arr = g.random(_shape(size), dtype=npd if npd in (np.float32, np.float64) else np.float64)
    return _finish(arr.astype(npd, copy=False), requires_grad, device)


def randint(low, high=None, size=(), dtype=None, device=None, requires_grad=False) -> Tensor:
    if isinstance(high, (tuple, list)):          # randint(high, size), as PyTorch allows
        low, high, size = 0, low, high
    elif high is None:
        low, high = 0, low
    if TRACING.tracer is not None:
        return TRACING.tracer.random("integers", tuple(size), _dt(dtype, np.dtype(np.int64)),
                           {"low": builtins.int(low), "high": builtins.int(high)})
    arr = _gen.integers(low, high, size=tuple(size)).astype(_dt(dtype, np.dtype(np.int64)))
    return _finish(arr, requires_grad, device)


def randn_like(t: Tensor, dtype=None, requires_grad=False) -> Tensor:
    return randn(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def rand_like(t: Tensor, dtype=None, requires_grad=False) -> Tensor:
    return rand(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def bernoulli(input: Tensor, p: Optional[float] = None, generator=None) -> Tensor:
    """1 with probability ``input`` (or ``p``), else 0, in input's shape and dtype."""
    prob = input if p is None else p
    u = rand(input.shape, dtype=input.dtype, generator=generator)
    return (u < prob).to(input.dtype)


def zeros(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _factory(np.zeros(_shape(size), dtype=_dt(dtype)), requires_grad, device)


def ones(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _factory(np.ones(_shape(size), dtype=_dt(dtype)), requires_grad, device)


def empty(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return _factory(np.empty(_shape(size), dtype=_dt(dtype)), requires_grad, device)


def full(size, fill_value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    if dtype is None:
        dtype = D.infer_np_dtype(fill_value) if not isinstance(fill_value, builtins.float) \
            else D.DEFAULT_FLOAT
    return _factory(np.full(_shape((size,)), fill_value, dtype=_dt(dtype)), requires_grad, device)


def zeros_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return zeros(t.shape, dtype=dtype or t.dtype, device=device, requires_grad=requires_grad)


def ones_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return ones(t.shape, dtype=dtype or t.dtype, device=device, requires_grad=requires_grad)


def empty_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return empty(t.shape, dtype=dtype or t.dtype, device=device, requires_grad=requires_grad)


def full_like(t: Tensor, fill_value, dtype=None, device=None, requires_grad=False) -> Tensor:
    return full(t.shape, fill_value, dtype=dtype or t.dtype, device=device,
                requires_grad=requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False) -> Tensor:
    if end is None:
        start, end = 0, start
    if dtype is None:
        isfloat = builtins.any(isinstance(v, builtins.float) for v in (start, end, step))
        npd = D.DEFAULT_FLOAT if isfloat else np.dtype(np.int64)
    else:
        npd = D.to_np(dtype)
    if step == 0:
        raise RuntimeError("arange: step must be nonzero")
    return _factory(np.arange(start, end, step).astype(npd), requires_grad, device)


def linspace(start, end, steps: int, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _factory(np.linspace(start, end, steps).astype(_dt(dtype)), requires_grad, device)


def eye(n: int, m: Optional[int] = None, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _factory(np.eye(n, m, dtype=_dt(dtype)), requires_grad, device)


def _typed_ctor(npd):
    def ctor(*args, requires_grad: bool = False):
        return Tensor(*args, dtype=npd, requires_grad=requires_grad)
    return ctor


FloatTensor = _typed_ctor(np.float32)
DoubleTensor = _typed_ctor(np.float64)
LongTensor = _typed_ctor(np.int64)
IntTensor = _typed_ctor(np.int32)
BoolTensor = _typed_ctor(np.bool_)


# --- wiring: the one place where the layers below receive Tensor and its factories --------
# surface, autograd.function, autograd.engine and autograd.backward_codegen sit below this
# module and never import it; each exposes a bind() that stores what it needs in module
# globals (read at the same cost as before).  eager/__init__ imports this module before
# anything can run an op, so the wiring is complete before the first tensor exists.
_surface_mod.bind(tensor=tensor, device=device, rand=rand, randn=randn, bernoulli=bernoulli)
_function_mod.bind(Tensor, zeros)
_engine_mod.bind(Tensor, tensor, zeros_like)
_codegen_mod.bind(Tensor)
