"""nn.Module, nn.Parameter and the Sequential container.

A :class:`Module` registers the Parameters and sub-Modules assigned to its
attributes, in assignment order, which is the order ``parameters()``,
``state_dict()`` and ``repr()`` report them in (as in PyTorch).

Parameters
----------
``eager.Tensor`` uses ``__slots__`` and its fast paths test ``x.__class__ is
Tensor``, so a ``Parameter`` *subclass* would fall off every fast path.  Instead
``nn.Parameter(t)`` returns a plain leaf Tensor that shares ``t``'s storage,
requires grad and is recorded in a weak registry.  ``isinstance(p,
nn.Parameter)`` consults that registry, so the PyTorch idioms keep working;
the only visible difference is that a parameter prints as a plain tensor
(``tensor(..., requires_grad=True)`` rather than ``Parameter containing: ...``).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any, Callable, Iterator, NamedTuple, Optional

import numpy as np

import eager._dtype as D  # by full name ("from .. import" is an edge to the package eager)
from ..autograd.grad_mode import no_grad
from ..factories import empty
from ..surface import TensorOps
from ..tensor import Tensor

# id(tensor) -> tensor for every live Parameter.  Keyed by id because Tensor.__eq__ is
# elementwise, which rules out WeakSet/WeakKeyDictionary (they compare keys with ==).
_PARAMS: "weakref.WeakValueDictionary[int, Tensor]" = weakref.WeakValueDictionary()


def _register_param(t: Tensor) -> Tensor:
    _PARAMS[id(t)] = t
    return t


def is_parameter(obj: Any) -> bool:
    """True if ``obj`` is a tensor created by (or registered as) ``nn.Parameter``."""
    return obj.__class__ is Tensor and _PARAMS.get(id(obj)) is obj


class _ParameterMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return is_parameter(obj)


class Parameter(metaclass=_ParameterMeta):
    """``Parameter(data, requires_grad=True)``: a leaf Tensor sharing ``data``'s storage.

    Returns an ``eager.Tensor`` (see the module docstring for why not a subclass).
    """

    def __new__(cls, data: Optional[Tensor] = None, requires_grad: bool = True) -> Tensor:
        if data is None:
            data = empty(0)
        if not isinstance(data, Tensor):
            if isinstance(data, TensorOps):  # a traced value: made while compiling
                raise TypeError(
                    "Parameter(): a parameter (or a module) cannot be created inside a "
                    "function a compiler is tracing: its data is a traced value. Create the "
                    "module outside the compiled function (e.g. in __init__) and call it "
                    "inside."
                )
            raise TypeError(f"Parameter(): expected a Tensor as data, got {type(data).__name__}")
        t = data.detach()
        t.requires_grad_(requires_grad)
        return _register_param(t)


class _IncompatibleKeys(NamedTuple):
    missing_keys: list
    unexpected_keys: list

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return (
            f"_IncompatibleKeys(missing_keys={self.missing_keys}, "
            f"unexpected_keys={self.unexpected_keys})"
        )

    __str__ = __repr__


def _typename(obj: Any) -> str:
    if isinstance(obj, Tensor):
        kind = {
            "float32": "FloatTensor",
            "float64": "DoubleTensor",
            "int64": "LongTensor",
            "int32": "IntTensor",
            "bool": "BoolTensor",
        }.get(obj._data.dtype.name, "Tensor")
        return f"eager.{kind}"
    return type(obj).__name__


def _addindent(s: str, num_spaces: int) -> str:
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    return lines[0] + "\n" + "\n".join(" " * num_spaces + line for line in lines[1:])


class _Calls(threading.local):
    """While a compiler traces on this thread (``tracing`` is a list), the innermost
    module an exception passed through is recorded there, so the error can name it."""

    tracing: Optional[list] = None


CALLS = _Calls()


class Module:
    """Base class of every layer: holds parameters, buffers and sub-modules by name."""

    training: bool

    def __init__(self) -> None:
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_modules", OrderedDict())

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The computation; every subclass overrides it."""
        raise NotImplementedError(
            f'Module [{type(self).__name__}] is missing the required "forward" function'
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if CALLS.tracing is None:
            return self.forward(*args, **kwargs)
        try:
            return self.forward(*args, **kwargs)
        except BaseException:
            if CALLS.tracing == []:  # the innermost module the error came through
                CALLS.tracing.append(self)
            raise

    # --- registration ----------------------------------------------------------------
    def _check_init(self, what: str) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"cannot assign {what} before Module.__init__() call")

    def register_parameter(self, name: str, param: Optional[Tensor]) -> None:
        """Add a parameter (or None) under ``name``."""
        self._check_init("parameter")
        _check_name(name, "parameter")
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is not None and not is_parameter(param):
            raise TypeError(
                f"cannot assign '{_typename(param)}' object to parameter '{name}' "
                "(eager.nn.Parameter or None required)"
            )
        if param is not None and param.grad_fn is not None:
            raise ValueError(
                f"Cannot assign non-leaf Tensor to parameter '{name}'. Model "
                "parameters must be created explicitly. To express '"
                f"{name}' as a function of another Tensor, compute the value in "
                "the forward() method."
            )
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Optional[Tensor], persistent: bool = True) -> None:
        """Add a buffer (or None) under ``name``; ``persistent=False``: not in state_dict."""
        self._check_init("buffer")
        _check_name(name, "buffer")
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(
                f"cannot assign '{_typename(tensor)}' object to buffer '{name}' "
                "(eager.Tensor or None required)"
            )
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers.discard(name)
        else:
            self._non_persistent_buffers.add(name)

    def add_module(self, name: str, module: Optional["Module"]) -> None:
        """Add a child module (or None) under ``name``."""
        if not isinstance(module, Module) and module is not None:
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        _check_name(name, "module")
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        self._modules[name] = module

    register_module = add_module

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        params = d.get("_parameters")
        if is_parameter(value):
            self._check_init("parameters")
            _remove_from(name, d, self._buffers, self._modules, self._non_persistent_buffers)
            self.register_parameter(name, value)
            return
        if params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{_typename(value)}' as parameter '{name}' "
                    "(eager.nn.Parameter or None expected)"
                )
            self.register_parameter(name, value)
            return
        modules = d.get("_modules")
        if isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            _remove_from(name, d, self._parameters, self._buffers, self._non_persistent_buffers)
            modules[name] = value
            return
        if modules is not None and name in modules:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{_typename(value)}' as child module '{name}' "
                    "(eager.nn.Module or None expected)"
                )
            modules[name] = value
            return
        buffers = d.get("_buffers")
        if buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(
                    f"cannot assign '{_typename(value)}' as buffer '{name}' "
                    "(eager.Tensor or None expected)"
                )
            buffers[name] = value
            return
        object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: look in the registries.
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            reg = d.get(registry)
            if reg is not None and name in reg:
                return reg[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for registry in (self._parameters, self._buffers, self._modules):
            if name in registry:
                del registry[name]
                self._non_persistent_buffers.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self) -> list:
        keys = (
            list(super().__dir__())
            + list(self._parameters)
            + list(self._buffers)
            + list(self._modules)
        )
        return sorted(k for k in set(keys) if not k[0].isdigit())

    def __setstate__(self, state: dict) -> None:
        # pickle/deepcopy make new tensors: mark the copies as Parameters again.
        self.__dict__.update(state)
        for p in self._parameters.values():
            if p is not None:
                _register_param(p)

    # --- traversal (iterative, definition order) ---------------------------------
    def named_modules(
        self, memo: Optional[set] = None, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple]:
        """Pre-order walk: ``(qualified_name, module)`` for self and every descendant."""
        if memo is None:
            memo = set()
        stack = [(prefix, self)]
        while stack:
            name, mod = stack.pop()
            if remove_duplicate:
                if id(mod) in memo:
                    continue
                memo.add(id(mod))
            yield name, mod
            kids = [
                (f"{name}.{k}" if name else k, m) for k, m in mod._modules.items() if m is not None
            ]
            stack.extend(reversed(kids))

    def modules(self) -> Iterator["Module"]:
        """Every module of the tree (self first), each once."""
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple]:
        """``(name, child)`` for the immediate children, each once."""
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator["Module"]:
        """The immediate children, each once."""
        for _, m in self.named_children():
            yield m

    def _named_members(
        self, registry: str, prefix: str, recurse: bool, remove_duplicate: bool
    ) -> Iterator[tuple]:
        mods = (
            self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
            if recurse
            else [(prefix, self)]
        )
        seen = set()
        for mprefix, mod in mods:
            for name, t in getattr(mod, registry).items():
                if t is None:
                    continue
                if remove_duplicate:
                    if id(t) in seen:
                        continue
                    seen.add(id(t))
                yield (f"{mprefix}.{name}" if mprefix else name), t

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple]:
        """``(qualified_name, parameter)`` pairs; a shared parameter is reported once."""
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Tensor]:
        """The parameters (of the whole tree unless ``recurse=False``), each once."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple]:
        """``(qualified_name, buffer)`` pairs, each buffer once."""
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """The buffers (of the whole tree unless ``recurse=False``), each once."""
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_submodule(self, target: str) -> "Module":
        """The sub-module at the dotted path ``target`` (``''`` is self)."""
        mod = self
        for item in target.split(".") if target else ():
            if not hasattr(mod, item):
                raise AttributeError(mod._get_name() + " has no attribute `" + item + "`")
            sub = getattr(mod, item)
            if not isinstance(sub, Module):
                raise AttributeError("`" + item + "` is not an nn.Module")
            mod = sub
        return mod

    def get_parameter(self, target: str) -> Tensor:
        """The parameter at the dotted path ``target``."""
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not hasattr(mod, name):
            raise AttributeError(mod._get_name() + " has no attribute `" + name + "`")
        param = getattr(mod, name)
        if not is_parameter(param):
            raise AttributeError("`" + name + "` is not an nn.Parameter")
        return param

    def get_buffer(self, target: str) -> Tensor:
        """The buffer at the dotted path ``target``."""
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not hasattr(mod, name):
            raise AttributeError(mod._get_name() + " has no attribute `" + name + "`")
        if name not in mod._buffers:
            raise AttributeError("`" + name + "` is not a buffer")
        return mod._buffers[name]

    def apply(self, fn: Callable[["Module"], None]) -> "Module":
        """Call ``fn`` on every sub-module (children before parents), then on self."""
        # Iterative post-order, children in definition order (PyTorch recurses through
        # children(): a child shared by two parents is visited once per parent).
        stack: list = [(self, False)]
        while stack:
            mod, expanded = stack.pop()
            if expanded:
                fn(mod)
                continue
            stack.append((mod, True))
            stack.extend((m, False) for m in reversed(list(mod.children())))
        return self

    # --- modes and gradients ---------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        """Set training mode on self and every sub-module; returns self."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> "Module":
        """``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        """Set ``requires_grad`` on every parameter; returns self."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's ``.grad`` (to None by default, as PyTorch 2 does)."""
        for p in self.parameters():
            _zero_grad(p, set_to_none)

    # --- dtype / device -------------------------------------------------------------
    def _cast(self, npd: np.dtype) -> "Module":
        # Change storage in place so references held elsewhere (optimizers) stay valid.
        for t in list(self.parameters()) + list(self.buffers()):
            if t._data.dtype.kind == "f" and t._data.dtype != npd:
                t._data = t._data.astype(npd)
                t._version[0] += 1
                if t._grad is not None:
                    t._grad = Tensor._make(t._grad._data.astype(npd))
        return self

    def to(self, *args: Any, **kwargs: Any) -> "Module":
        """``to(dtype)`` / ``to('cpu')``: casts floating parameters and buffers in place."""
        from ..tensor import check_device as _device

        dtype = kwargs.pop("dtype", None)
        dev = kwargs.pop("device", None)
        kwargs.pop("non_blocking", None)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, (D.dtype, np.dtype, type)):
                dtype = a
            elif isinstance(a, Tensor):
                dtype = a.dtype
            else:
                dev = a
        if dev is not None:
            _device(dev)
        if dtype is None:
            return self
        npd = D.to_np(dtype)
        if npd.kind != "f":
            raise TypeError(
                f"nn.Module.to only accepts floating point dtypes, but got desired "
                f"dtype={D.from_np(npd)}"
            )
        return self._cast(npd)

    def float(self) -> "Module":
        """Cast floating parameters and buffers to float32 in place."""
        return self._cast(np.dtype(np.float32))

    def double(self) -> "Module":
        """Cast floating parameters and buffers to float64 in place."""
        return self._cast(np.dtype(np.float64))

    def half(self) -> "Module":
        """Cast floating parameters and buffers to float16 in place."""
        return self._cast(np.dtype(np.float16))

    def bfloat16(self) -> "Module":
        """Refused: numpy has no bfloat16."""
        raise TypeError("eager has no bfloat16 dtype (numpy has none): use float32 or float16")

    def cpu(self) -> "Module":
        """No-op: eager's tensors live on the CPU."""
        return self

    def cuda(self, device: Any = None) -> "Module":
        """Refused: eager runs on the CPU."""
        raise RuntimeError("no GPU: eager runs on the CPU only (Module.cuda() is not available)")

    # --- state dict -----------------------------------------------------------------
    def state_dict(
        self, *, destination: Optional[dict] = None, prefix: str = "", keep_vars: bool = False
    ) -> "OrderedDict[str, Tensor]":
        """Parameters and persistent buffers by qualified name (detached unless keep_vars)."""
        out = OrderedDict() if destination is None else destination
        for mprefix, mod in self.named_modules(prefix=prefix.rstrip("."), remove_duplicate=False):
            base = f"{mprefix}." if mprefix else ""
            for name, p in mod._parameters.items():
                if p is not None:
                    out[base + name] = p if keep_vars else p.detach()
            for name, b in mod._buffers.items():
                if b is not None and name not in mod._non_persistent_buffers:
                    out[base + name] = b if keep_vars else b.detach()
        return out

    def load_state_dict(
        self, state_dict: dict, strict: bool = True, assign: bool = False
    ) -> _IncompatibleKeys:
        """Copy tensors from ``state_dict`` into this module's parameters and buffers.

        Shapes must match.  With ``assign=True`` the loaded tensors replace the
        parameters instead of being copied into them.
        """
        if not isinstance(state_dict, dict):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing, errors = [], []
        expected = set()
        for mprefix, mod in self.named_modules(remove_duplicate=False):
            base = f"{mprefix}." if mprefix else ""
            local = [(n, t, "_parameters") for n, t in mod._parameters.items()] + [
                (n, t, "_buffers")
                for n, t in mod._buffers.items()
                if n not in mod._non_persistent_buffers
            ]
            for name, cur, registry in local:
                if cur is None:
                    continue
                key = base + name
                expected.add(key)
                if key not in state_dict:
                    missing.append(key)
                    continue
                src = state_dict[key]
                if not isinstance(src, Tensor):
                    errors.append(
                        f'While copying the parameter named "{key}", expected '
                        f"eager.Tensor or Tensor-like object from checkpoint but "
                        f"received {type(src)}"
                    )
                    continue
                if tuple(src.shape) != tuple(cur.shape):
                    errors.append(
                        f"size mismatch for {key}: copying a param with shape "
                        f"{src.shape} from checkpoint, the shape in current model is "
                        f"{cur.shape}."
                    )
                    continue
                if assign:
                    new = src.detach()
                    if registry == "_parameters":
                        new.requires_grad_(cur.requires_grad)
                        _register_param(new)
                    getattr(mod, registry)[name] = new
                else:
                    with no_grad():
                        cur.copy_(src)
        unexpected = [k for k in state_dict if k not in expected]
        if strict:
            if unexpected:
                errors.insert(
                    0,
                    "Unexpected key(s) in state_dict: {}. ".format(
                        ", ".join(f'"{k}"' for k in unexpected)
                    ),
                )
            if missing:
                errors.insert(
                    0,
                    "Missing key(s) in state_dict: {}. ".format(
                        ", ".join(f'"{k}"' for k in missing)
                    ),
                )
        if errors:
            raise RuntimeError(
                "Error(s) in loading state_dict for {}:\n\t{}".format(
                    type(self).__name__, "\n\t".join(errors)
                )
            )
        return _IncompatibleKeys(missing, unexpected)

    # --- printing -------------------------------------------------------------------
    def extra_repr(self) -> str:
        """The text inside ``Name(...)``; layers override it (``in_features=3, ...``)."""
        return ""

    def _child_repr_lines(self, children: list) -> list:
        """The repr lines of the children, from ``(key, child_repr)`` pairs (containers
        override it: ``ModuleList`` compresses repeated children)."""
        return [f"({key}): " + _addindent(text, 2) for key, text in children]

    def _get_name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        # Built bottom-up over the module tree (no recursion), exactly as PyTorch lays it out.
        order = [m for _, m in self.named_modules(remove_duplicate=False)]
        text: dict = {}
        for mod in reversed(order):
            extra = mod.extra_repr()
            extra_lines = extra.split("\n") if extra else []
            child_lines = mod._child_repr_lines(
                [(key, "None" if m is None else text[id(m)]) for key, m in mod._modules.items()]
            )
            lines = extra_lines + child_lines
            s = mod._get_name() + "("
            if lines:
                if len(extra_lines) == 1 and not child_lines:
                    s += extra_lines[0]
                else:
                    s += "\n  " + "\n  ".join(lines) + "\n"
            text[id(mod)] = s + ")"
        return text[id(self)]


def _check_name(name: Any, what: str) -> None:
    if not isinstance(name, str):
        raise TypeError(f"{what} name should be a string. Got {type(name).__name__}")
    if "." in name:
        raise KeyError(f'{what} name can\'t contain "."')
    if name == "":
        raise KeyError(f'{what} name can\'t be empty string ""')


def _remove_from(name: str, *containers: Any) -> None:
    for c in containers:
        if name in c:
            if isinstance(c, set):
                c.discard(name)
            else:
                del c[name]


def _zero_grad(p: Tensor, set_to_none: bool) -> None:
    """Shared by Module.zero_grad and Optimizer.zero_grad (through ``.grad``: a compiler
    tracing a model sees the access)."""
    g = p.grad
    if g is None:
        return
    if set_to_none:
        p.grad = None
        return
    # (a compiler's traced .grad may have no grad_fn: it is no autograd graph's output)
    if getattr(g, "grad_fn", None) is not None:
        g.detach_()
    else:
        g.requires_grad_(False)
    g.zero_()


class Sequential(Module):
    """Apply modules in order; ``Sequential(*mods)`` or ``Sequential(OrderedDict(...))``."""

    def __init__(self, *args: Any) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for idx, module in enumerate(args):
                self.add_module(str(idx), module)

    def _index(self, idx: int) -> int:
        n = len(self._modules)
        if not -n <= idx < n:
            raise IndexError(f"index {idx} is out of range")
        return idx % n

    def __getitem__(self, idx: Any) -> Module:
        if isinstance(idx, slice):
            return Sequential(OrderedDict(list(self._modules.items())[idx]))
        return list(self._modules.values())[self._index(idx)]

    def __setitem__(self, idx: int, module: Module) -> None:
        key = list(self._modules.keys())[self._index(idx)]
        self.add_module(key, module)

    def __delitem__(self, idx: Any) -> None:
        keys = list(self._modules.keys())
        doomed = keys[idx] if isinstance(idx, slice) else [keys[self._index(idx)]]
        for key in doomed:
            del self._modules[key]
        # keep the numbering contiguous, as PyTorch does
        items = list(self._modules.values())
        self._modules.clear()
        for i, m in enumerate(items):
            self._modules[str(i)] = m

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> "Sequential":
        self.add_module(str(len(self)), module)
        return self

    def forward(self, input: Any) -> Any:
        """The computation; every subclass overrides it."""
        for module in self._modules.values():
            input = module(input)
        return input
