"""nn containers: ``ModuleList``, ``ModuleDict``, ``ParameterList``, ``ParameterDict``.

They register what they hold (sub-modules, parameters) under string keys, so every
``Module`` method (``parameters()``, ``state_dict()``, ``to()``, ``apply()``...) sees
their contents, exactly as PyTorch's containers do.
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from itertools import chain
from typing import Any, Iterable, Iterator, Optional

from ..tensor import Tensor
from .module import Module, Parameter, _addindent, is_parameter

__all__ = ["ModuleList", "ModuleDict", "ParameterList", "ParameterDict"]


def _abs_index(idx: Any, n: int) -> str:
    idx = operator.index(idx)
    if not (-n <= idx < n):
        raise IndexError(f"index {idx} is out of range")
    return str(idx + n if idx < 0 else idx)


class ModuleList(Module):
    """Holds sub-modules in a list; indexable like a list, registered like attributes."""

    def __init__(self, modules: Optional[Iterable[Module]] = None) -> None:
        super().__init__()
        if modules is not None:
            self += modules

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, slice):
            return self.__class__(list(self._modules.values())[idx])
        return self._modules[_abs_index(idx, len(self))]

    def __setitem__(self, idx: int, module: Module) -> None:
        setattr(self, _abs_index(idx, len(self)), module)

    def __delitem__(self, idx: Any) -> None:
        if isinstance(idx, slice):
            for k in range(len(self._modules))[idx]:
                delattr(self, str(k))
        else:
            delattr(self, _abs_index(idx, len(self)))
        values = list(self._modules.values())
        object.__setattr__(self, "_modules", OrderedDict((str(i), m) for i, m in enumerate(values)))

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __iadd__(self, modules: Iterable[Module]) -> "ModuleList":
        return self.extend(modules)

    def __add__(self, other: Iterable[Module]) -> "ModuleList":
        combined = ModuleList()
        for i, module in enumerate(chain(self, other)):
            combined.add_module(str(i), module)
        return combined

    def __dir__(self) -> list:
        return [k for k in super().__dir__() if not k.isdigit()]

    def insert(self, index: int, module: Module) -> None:
        """Insert ``module`` before position ``index``."""
        for i in range(len(self._modules), index, -1):
            self._modules[str(i)] = self._modules[str(i - 1)]
        self._modules[str(index)] = module

    def append(self, module: Module) -> "ModuleList":
        """Append ``module`` at the end."""
        self.add_module(str(len(self)), module)
        return self

    def pop(self, key: Any) -> Module:
        """Remove and return the module at ``key``."""
        v = self[key]
        del self[key]
        return v

    def extend(self, modules: Iterable[Module]) -> "ModuleList":
        """Append every module of an iterable."""
        if not isinstance(modules, _Iterable):
            raise TypeError(
                "ModuleList.extend should be called with an iterable, but got "
                + type(modules).__name__
            )
        offset = len(self)
        for i, module in enumerate(modules):
            self.add_module(str(offset + i), module)
        return self

    def _child_repr_lines(self, children: list) -> list:
        # PyTorch compresses runs of identical reprs: "(0-2): 3 x Linear(...)".
        runs: list = []
        for key, text in children:
            if runs and runs[-1][2] == text:
                runs[-1][1] = key
            else:
                runs.append([key, key, text])
        lines = []
        for start, end, text in runs:
            if start == end:
                lines.append(_addindent(f"({start}): {text}", 2))
            else:
                n = int(end) - int(start) + 1
                lines.append(_addindent(f"({start}-{end}): {n} x {text}", 2))
        return lines


class ModuleDict(Module):
    """Holds sub-modules in an ordered dict keyed by strings."""

    def __init__(self, modules: Optional[Any] = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def clear(self) -> None:
        """Remove every module."""
        self._modules.clear()

    def pop(self, key: str) -> Module:
        """Remove and return the module at ``key``."""
        v = self[key]
        del self[key]
        return v

    def keys(self) -> Any:
        """The keys, in insertion order."""
        return self._modules.keys()

    def items(self) -> Any:
        """``(key, module)`` pairs, in insertion order."""
        return self._modules.items()

    def values(self) -> Any:
        """The modules, in insertion order."""
        return self._modules.values()

    def update(self, modules: Any) -> None:
        """Add the modules of a mapping or of an iterable of ``(key, module)`` pairs."""
        if not isinstance(modules, _Iterable):
            raise TypeError(
                "ModuleDict.update should be called with an iterable of key/value pairs, "
                "but got " + type(modules).__name__
            )
        if isinstance(modules, (OrderedDict, ModuleDict, _Mapping)):
            for key, module in modules.items():
                self[key] = module
        else:
            for j, m in enumerate(modules):
                m = list(m) if isinstance(m, _Iterable) else m
                if not isinstance(m, list):
                    raise TypeError(
                        "ModuleDict update sequence element #"
                        + str(j)
                        + " should be Iterable; is"
                        + type(m).__name__
                    )
                if not len(m) == 2:
                    raise ValueError(
                        "ModuleDict update sequence element #"
                        + str(j)
                        + " has length "
                        + str(len(m))
                        + "; 2 is required"
                    )
                self[m[0]] = m[1]


def _param_line(key: Any, p: Any) -> str:
    if isinstance(p, Tensor):
        size = "x".join(str(s) for s in p.size())
        kind = "Parameter" if is_parameter(p) else "Tensor"
        return f"  ({key}): {kind} containing: [{p.dtype} of size {size}]"
    return f"  ({key}): Object of type: {type(p).__name__}"


class ParameterList(Module):
    """Holds parameters in a list; a plain tensor appended becomes a Parameter."""

    def __init__(self, values: Optional[Iterable[Any]] = None) -> None:
        super().__init__()
        object.__setattr__(self, "_size", 0)
        if values is not None:
            self += values

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, slice):
            start, stop, step = idx.indices(len(self))
            out = self.__class__()
            for i in range(start, stop, step):
                out.append(self[i])
            return out
        return getattr(self, _abs_index(idx, len(self)))

    def __setitem__(self, idx: int, param: Any) -> None:
        key = _abs_index(idx, len(self))
        if isinstance(param, Tensor) and not is_parameter(param):
            param = Parameter(param)
        setattr(self, key, param)

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        return iter([self[i] for i in range(len(self))])

    def __iadd__(self, parameters: Iterable[Any]) -> "ParameterList":
        return self.extend(parameters)

    def __dir__(self) -> list:
        return [k for k in super().__dir__() if not k.isdigit()]

    def append(self, value: Any) -> "ParameterList":
        """Append a value (a tensor becomes a Parameter)."""
        new_idx = len(self)
        object.__setattr__(self, "_size", self._size + 1)
        self[new_idx] = value
        return self

    def extend(self, values: Iterable[Any]) -> "ParameterList":
        """Append every value of an iterable."""
        if not isinstance(values, _Iterable) or isinstance(values, Tensor):
            raise TypeError(
                "ParameterList.extend should be called with an iterable, but got "
                + type(values).__name__
            )
        for value in values:
            self.append(value)
        return self

    def extra_repr(self) -> str:
        """One line per entry: kind, type and size."""
        return "\n".join(_param_line(k, p) for k, p in enumerate(self))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("ParameterList should not be called.")


class ParameterDict(Module):
    """Holds parameters in an ordered dict keyed by strings."""

    def __init__(self, parameters: Any = None) -> None:
        super().__init__()
        object.__setattr__(self, "_keys", {})
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        self._keys[key] = None
        if isinstance(value, Tensor) and not is_parameter(value):
            value = Parameter(value)
        setattr(self, key, value)

    def __delitem__(self, key: str) -> None:
        del self._keys[key]
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._keys))

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def keys(self) -> Any:
        """The keys, in insertion order."""
        return self._keys.keys()

    def items(self) -> Any:
        """``(key, parameter)`` pairs, in insertion order."""
        return ((k, self[k]) for k in self._keys)

    def values(self) -> Any:
        """The parameters, in insertion order."""
        return (self[k] for k in self._keys)

    def get(self, key: str, default: Any = None) -> Any:
        """The parameter at ``key`` or ``default``."""
        return self[key] if key in self else default

    def pop(self, key: str) -> Any:
        """Remove and return the parameter at ``key``."""
        v = self[key]
        del self[key]
        return v

    def clear(self) -> None:
        """Remove every parameter."""
        for k in list(self._keys):
            del self[k]

    def update(self, parameters: Any) -> None:
        """Add the entries of a mapping or of an iterable of ``(key, value)`` pairs."""
        if not isinstance(parameters, _Iterable):
            raise TypeError(
                "ParametersDict.update should be called with an iterable of key/value "
                "pairs, but got " + type(parameters).__name__
            )
        if isinstance(parameters, (OrderedDict, ParameterDict)):
            pairs = list(parameters.items())
        elif isinstance(parameters, _Mapping):
            pairs = sorted(parameters.items())
        else:
            pairs = list(parameters)
        for key, value in pairs:
            self[key] = value

    def extra_repr(self) -> str:
        """One line per entry: kind, type and size."""
        return "\n".join(_param_line(k, p) for k, p in self.items())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("ParameterDict should not be called.")
