"""eager.Tensor: a numpy array plus the autograd state PyTorch attaches to it."""

from __future__ import annotations

import builtins
import os
import sys
import warnings
import weakref
from typing import Any, Callable, Optional

import numpy as np

# Layers below this module only (see docs/eager-layers.md).  Modules by full name: a
# "from . import x" would also be an import of the package eager itself.
import eager._dtype as D
import eager._tape as _tape
import eager._views as _views
import eager.autograd.engine as _engine_mod
import eager.surface as _surface_mod
from ._format import format_tensor
from ._tape import BINOPS as _BINOPS, RBINOPS as _RBINOPS
from ._views import LINKS_VIEWS as _LINKS_VIEWS, NO_GRAD_VIEW, creation as _creation
from ._views import link_view as _link_view
from .surface import Size as _Size
from .surface import TensorOps
from .autograd.function import AccumulateGrad, RemovableHandle
from .autograd.grad_mode import STATE as _STATE
from .ops.movement import broadcast_view as _broadcast_view
from .ops.registry import OPS

_ndarray = np.ndarray

NONLEAF_GRAD_WARNING = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
    "attribute won't be populated during autograd.backward(). If you indeed want the .grad field "
    "to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor. If you "
    "access the non-leaf Tensor by mistake, make sure you access the leaf Tensor instead."
)
# Tensors whose storage must not be replaced right now: id -> (tensor, description).  A
# tracing compiler (graphc) pins the tensors it was called with while it traces them.
PINNED: dict = {}


_DEVICE_TYPES = (
    "cpu, cuda, ipu, xpu, mkldnn, opengl, opencl, ideep, hip, ve, fpga, maia, xla, lazy, "
    "vulkan, mps, meta, hpu, mtia, privateuseone"
)


class device:
    """A device name as PyTorch spells it (``cpu``, ``cuda:0``, ``mps``...).

    Any of PyTorch's device types can be named, but only ``cpu`` holds tensors: putting a
    tensor or a module on another device is a clear error (:func:`check_device`)."""

    __slots__ = ("type", "index")

    def __init__(self, type: Any = "cpu", index: Optional[int] = None) -> None:
        spec = type
        if isinstance(spec, device):
            self.type, self.index = spec.type, spec.index
            return
        if isinstance(spec, builtins.int) and not isinstance(spec, builtins.bool):
            spec, index = "cuda", spec  # torch.device(0) is cuda:0
        if not isinstance(spec, str):
            raise TypeError(f"device(): argument 'type' must be str, not {spec.__class__.__name__}")
        kind, _, idx = spec.partition(":")
        if kind not in _DEVICE_TYPES.split(", "):
            raise RuntimeError(
                f"Expected one of {_DEVICE_TYPES} device type at start of device string: {spec}"
            )
        if idx:
            if index is not None:
                raise RuntimeError(
                    "type (string) must not include an index because index was passed "
                    "explicitly: " + spec
                )
            if not idx.isdigit():
                raise RuntimeError(f"Invalid device string: '{spec}'")
            index = builtins.int(idx)
        if index is not None and index < 0:
            raise RuntimeError(f"Device index must not be negative, got {index}")
        self.type = kind
        self.index = index

    def __repr__(self) -> str:
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                other = device(other)
            except RuntimeError:
                return False
        if not isinstance(other, device):
            return NotImplemented
        return (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __reduce__(self):
        return (device, (self.type, self.index))


NO_GPU = "no GPU: eager runs on the CPU only"


_CPU = device("cpu")


def _viewable(src: np.ndarray, shape: tuple) -> bool:
    """Can ``src`` take ``shape`` (``view``'s arguments) without a copy?  Shapes reshape
    refuses anyway (a wrong size, a dtype) count as viewable: reshape raises its own error."""
    shp = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    try:
        np.reshape(src, shp, copy=False)
    except ValueError:
        try:
            np.reshape(src, shp)
        except (ValueError, TypeError):
            return True  # not a valid shape at all: reshape's precise error
        return False
    except TypeError:
        return True
    return True


class Tensor(TensorOps):
    """A multi-dimensional array with optional gradient tracking (PyTorch semantics)."""

    # ``_view`` is set only on views (see _link_view), never in _make: read it with getattr.
    __slots__ = (
        "_data",
        "_rg",
        "grad_fn",
        "_grad",
        "_version",
        "_acc",
        "_hooks",
        "_output_nr",
        "_retains",
        "_view",
        "__weakref__",
    )
    _priority = 1

    # --- construction -------------------------------------------------------------
    def __init__(self, *args: Any, dtype=None, device=None, requires_grad: bool = False) -> None:
        """``Tensor(3, 5)`` is uninitialized float32 of that shape; ``Tensor(data)`` copies."""
        if device is not None:
            check_device(device)
        npd = D.to_np(dtype) if dtype is not None else D.DEFAULT_FLOAT
        if len(args) == 1 and not isinstance(args[0], (builtins.int, np.integer)):
            data = args[0]
            if isinstance(data, Tensor):
                data = data._data
            D.check_no_np_bool(data, npd)
            arr = np.array(data, dtype=npd)
        else:
            # Tensor() is an empty 1-D tensor, as in PyTorch
            shape = args[0] if len(args) == 1 and isinstance(args[0], tuple) else (args or (0,))
            try:
                arr = np.empty(tuple(builtins.int(s) for s in shape), dtype=npd)
            except (TypeError, ValueError):
                raise TypeError(
                    f"Tensor(): expected a shape of ints or data, got {args!r}"
                ) from None
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
                _tape.record1(out, opdef, gname, x, attrs)
            return out
        arrays = [o._data if o.__class__ is Tensor else o for o in operands]
        out = _make(opdef.forward(*arrays, **attrs))
        if op in _LINKS_VIEWS:
            _link_view(out, operands, op, attrs)
        if _STATE.enabled and opdef.vjp is not None:
            _tape.record(out, opdef, gname, operands, attrs)
        return out

    def _op(self, op: str, gname: str, *operands: Any, **attrs: Any) -> "Tensor":
        if not operands:  # a unary op: self is the only operand, skip _dispatch
            return self._apply(op, gname, (self,), attrs)
        return TensorOps._op(self, op, gname, *operands, **attrs)

    def _binary(self, op: str, other: Any, gname: str) -> "Tensor":
        f = _BINOPS.get((op, gname))
        if f is None:
            f = _tape.make_binop(op, gname)
        return f(self, other)

    def reshape(self, *shape, _gname: str = "ViewBackward0") -> "Tensor":
        if self._rg and _STATE.enabled:
            return TensorOps.reshape(self, *shape, _gname=_gname)
        shp = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        try:  # untracked: numpy's C reshape, no checks
            data = self._data.reshape(shp)
        except (ValueError, TypeError):
            return TensorOps.reshape(self, *shape, _gname=_gname)  # the precise error
        out = _make(data)
        owner = data.base  # _link_view, inlined
        if owner is not None:
            src = self._data
            if owner is src or owner is src.base or np.may_share_memory(data, src):
                out._version = self._version
                if data.flags.writeable:
                    out._view = (
                        self,
                        "reshape",
                        {"shape": data.shape},
                        (),
                        _creation(self) if _STATE.enabled else NO_GRAD_VIEW,
                    )
        return out

    def contiguous(self) -> "Tensor":
        """Self when its elements are laid out in C order, else a C-ordered copy (its
        history is ``CloneBackward0``, as PyTorch's).  The copy op keeps a permuted
        layout (``clone`` preserves it, as in PyTorch), so the new buffer is put in C order
        here: ``x.t().contiguous().view(-1)`` must work."""
        out = TensorOps.contiguous(self)
        if out is not self and not out._data.flags.c_contiguous:
            out._data = np.ascontiguousarray(out._data)  # a fresh copy: no one else holds it
        return out

    def view(self, *shape) -> "Tensor":
        """The same elements in a new shape, always a view of this tensor's memory: a
        layout no view can give (a transposed tensor flattened) raises PyTorch's
        RuntimeError instead of copying, which would silently lose writes through it."""
        _surface_mod.check_view_args(shape)
        if not self._data.flags.c_contiguous and not _viewable(self._data, shape):
            raise RuntimeError(
                "view size is not compatible with input tensor's size and stride (at least "
                "one dimension spans across two contiguous subspaces). Use .reshape(...) "
                "instead."
            )
        return self.reshape(*shape)

    def expand(self, *shape) -> "Tensor":
        shp = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        if (self._rg and _STATE.enabled) or -1 in shp:
            return TensorOps.expand(self, *shape)
        src = self._data
        if src.flags.c_contiguous and src.size and len(shp) >= src.ndim:
            data = _broadcast_view(src, shp)
            if data is not None:  # a view of src: shares its version counter
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
            f = _tape.make_rbinop(op, gname)
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
            raise RuntimeError(
                "you can only change requires_grad flags of leaf variables. If you "
                "want to use a computed variable in a subgraph that doesn't require "
                "differentiation use var_no_grad = var.detach()."
            )
        if value and self._data.dtype.kind != "f":
            raise RuntimeError(
                "only Tensors of floating point dtype can require gradients "
                f"(this tensor is {self.dtype}); convert it with .float() first"
            )
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
                raise TypeError(
                    f"assigned grad expected to be a Tensor or None but got {type(value).__name__}"
                )
            if value.shape != self.shape:
                raise RuntimeError(
                    f"assigned grad has data of a different size: "
                    f"{list(value.shape)} vs the tensor's {list(self.shape)}"
                )
            if value._data.dtype != self._data.dtype:
                raise RuntimeError(
                    f"assigned grad has data of a different type ({value.dtype} vs {self.dtype})"
                )
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
            raise RuntimeError(
                f"cannot replace .data of {pinned[1]} (at "
                f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}): the "
                "compiled code being built would then be handed a different "
                "buffer than it was traced for. Replace it before or after the "
                "call, not inside."
            )
        if isinstance(value, Tensor):
            self._data = value._data
            return
        arr = np.asarray(value)
        D.native_order(arr)  # PyTorch's ValueError, not a buffer no eager dtype names
        self._data = arr

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

    def register_hook(self, hook: Callable) -> RemovableHandle:
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
        edge = self._acc = (AccumulateGrad(self), 0)
        return edge

    def backward(
        self, gradient=None, retain_graph=None, create_graph: bool = False, inputs=None
    ) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad`` (see eager.autograd.backward)."""
        if gradient is None and inputs is None and not create_graph and not retain_graph:
            _engine_mod.backward_scalar(self)  # the common loss.backward()
        else:
            _engine_mod.backward(
                self, gradient, retain_graph=retain_graph, create_graph=create_graph, inputs=inputs
            )

    # --- conversions ------------------------------------------------------------------
    def item(self):
        if self._data.size != 1:
            raise RuntimeError(
                f"a Tensor with {self._data.size} elements cannot be converted to Scalar"
            )
        return self._data.reshape(()).item()

    def tolist(self):
        return self._data.tolist()

    def numpy(self, *, force: bool = False) -> np.ndarray:
        if self._rg and not force:
            raise RuntimeError(
                "Can't call numpy() on Tensor that requires grad. Use "
                "tensor.detach().numpy() instead."
            )
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
        return iter(self.unbind(0))  # views, as in PyTorch

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
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support "
                "the deepcopy protocol at the moment"
            )
        t = Tensor._make(self._data.copy())
        t._rg = self._rg
        if self._grad is not None:
            t._grad = Tensor._make(self._grad._data.copy())
        memo[id(self)] = t
        return t

    # --- in-place ops -----------------------------------------------------------------------
    # the in-place paths and index assignment live in eager._views (with the view
    # bookkeeping they need), bound here as methods
    _inplace = _views.inplace
    _write = _views.write
    _setitem_impl = _views.setitem
    _fast_inplace = _views.fast_inplace

    def add_(self, other, *, alpha=1):
        if alpha == 1 and self._fast_inplace(np.add, other) is not None:
            return self
        return self._inplace("add", other, alpha=alpha)

    def sub_(self, other, *, alpha=1):
        oc = other.__class__
        if (
            self._data.dtype.kind == "b"
            or oc is builtins.bool
            or oc is np.bool_
            or (oc is Tensor and other._data.dtype.kind == "b")
        ):
            _surface_mod._check_bool_sub(self, other)  # numpy would subtract a bool
        if alpha == 1 and self._fast_inplace(np.subtract, other) is not None:
            return self
        return self._inplace("sub", other, alpha=alpha)

    def mul_(self, other):
        if self._fast_inplace(np.multiply, other) is not None:
            return self
        return self._inplace("mul", other)

    def div_(self, other):
        if self._data.dtype.kind == "f":
            with np.errstate(divide="ignore", invalid="ignore"):  # x / 0 is inf or nan
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
        return self._op(
            "fill",
            "FillBackward0",
            value=builtins.float(value) if self._data.dtype.kind == "f" else value,
        )

    def copy_(self, src) -> "Tensor":
        if not isinstance(src, Tensor):
            src = _tensor(src, dtype=self.dtype)
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

    # --- device / type boilerplate ----------------------------------------------------
    def cpu(self, memory_format: Any = None) -> "Tensor":
        """Self: eager's tensors live on the CPU."""
        return self

    def cuda(self, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> "Tensor":
        """Refused: eager has no GPU."""
        raise RuntimeError(f"{NO_GPU}: Tensor.cuda() is not available (use .cpu() or .to('cpu'))")

    def get_device(self) -> builtins.int:
        """-1: the device index of a CPU tensor."""
        return -1

    @property
    def is_cpu(self) -> builtins.bool:
        """True: eager's tensors live on the CPU."""
        return True

    def bfloat16(self, memory_format: Any = None) -> "Tensor":
        """Refused: numpy (so eager) has no bfloat16."""
        raise TypeError(
            "eager has no bfloat16 dtype (numpy has none): use .float() or .half() instead"
        )

    def type(self, dtype: Any = None, non_blocking: builtins.bool = False, **kwargs: Any):
        """``type()``: the type name (``'eager.FloatTensor'``); ``type(dtype or name)``:
        the tensor converted (``'torch.DoubleTensor'``/``'eager.DoubleTensor'`` accepted)."""
        if dtype is None:
            return "eager." + _TYPE_NAMES[self._data.dtype.name]
        if isinstance(dtype, str):
            prefix, _, name = dtype.rpartition(".")
            npd = _TYPE_DTYPES.get(name) if prefix in ("torch", "eager") else None
            if npd is None:
                raise ValueError(f"invalid type: {dtype!r}")
            dtype = npd
        return self.to(dtype)


_TYPE_NAMES = {
    "float32": "FloatTensor",
    "float64": "DoubleTensor",
    "float16": "HalfTensor",
    "int64": "LongTensor",
    "int32": "IntTensor",
    "int16": "ShortTensor",
    "int8": "CharTensor",
    "uint8": "ByteTensor",
    "bool": "BoolTensor",
}
_TYPE_DTYPES = {v: np.dtype(k) for k, v in _TYPE_NAMES.items()}


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


def _rebuild(data, rg):
    """Unpickle a tensor (``__reduce_ex__``)."""
    t = Tensor._make(data)
    t._rg = rg
    return t


# --- the operator fast paths (eager._tape): a * b, 2 * a, a @ b... ------------------------
for _name in ("mm", "matmul", "__matmul__"):
    setattr(Tensor, _name, _tape.make_mm2d(_name))

for _name, _op_name, _gname in (
    ("__add__", "add", "AddBackward0"),
    ("__sub__", "sub", "SubBackward0"),
    ("__mul__", "mul", "MulBackward0"),
    ("__truediv__", "div", "DivBackward0"),
):
    setattr(Tensor, _name, _tape.make_binop(_op_name, _gname))
for _name, _op_name, _gname in (
    ("__radd__", "add", "AddBackward0"),
    ("__rsub__", "sub", "RsubBackward1"),
    ("__rmul__", "mul", "MulBackward0"),
    ("__rtruediv__", "div", "DivBackward0"),
):
    setattr(Tensor, _name, _tape.make_rbinop(_op_name, _gname))


def check_device(dev) -> None:
    """Refuse any device but the CPU (a tensor cannot be created on or moved to it)."""
    d = device(dev)
    if d.type != "cpu":
        raise RuntimeError(
            f"{NO_GPU}; device {str(d)!r} is not available (use device='cpu' or leave it out)"
        )


# --- wiring: ``tensor`` (eager.factories, a layer above) for copy_, received once ---------
_tensor = None


def bind(*, tensor) -> None:
    """Receive eager.factories.tensor (called once, by eager.factories' wiring block)."""
    global _tensor
    _tensor = tensor
