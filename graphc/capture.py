"""Eager tensors a traced function reads without receiving them: found, lifted, re-read.

A model's parameters reach its forward through ``self``, a closure, a global or a
default argument, not through the arguments.  Freezing them into the graph as
constants would make every later optimizer step invisible to the compiled code.
Instead each one becomes a graph input of its own (PyTorch's parameter lifting), read
fresh at every call.  Before tracing, :func:`find` walks what the function can reach
-- a module being compiled, the ``self`` of a bound method, the modules among the
arguments, closure cells, the globals its code names, its defaults, and lists and
dicts of those -- and records for every tensor there a readable name
(``self.fc1.weight``) and its *place*: the dict, cell or list slot holding it, found
again from the call's arguments at each call, so a parameter rebound since
(``m.weight = nn.Parameter(...)``) is seen too.  While tracing, each place holds the
tensor's tracer instead (restored afterwards), so ``self.weight.t()`` is traced, not
computed once.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from eager.interop import Tensor

# place(args) -> (holder, key): ``holder[key]`` is the tensor, ``holder[key] = v`` sets it
Place = Callable[[tuple], tuple]


class _Cell:
    """A closure cell as a one-slot holder."""

    __slots__ = ("cell",)

    def __init__(self, cell: Any) -> None:
        self.cell = cell

    def __getitem__(self, key: Any) -> Any:
        return self.cell.cell_contents

    def __setitem__(self, key: Any, value: Any) -> None:
        self.cell.cell_contents = value


class _Defaults:
    """A function's ``__defaults__`` tuple as a holder (setting rebuilds the tuple)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __getitem__(self, i: int) -> Any:
        return self.fn.__defaults__[i]

    def __setitem__(self, i: int, value: Any) -> None:
        d = list(self.fn.__defaults__)
        d[i] = value
        self.fn.__defaults__ = tuple(d)


class Captured:
    """One lifted tensor: its name, its place, and the tensor seen while tracing."""

    __slots__ = ("name", "place", "tensor")

    def __init__(self, name: str, place: Optional[Place], tensor: Tensor) -> None:
        self.name = name
        self.place = place  # None: reached some other way, lifted by identity
        self.tensor = tensor

    def current(self, args: tuple) -> Any:
        """The tensor at this place now (None if the place is gone)."""
        if self.place is None:
            return self.tensor
        try:
            holder, key = self.place(args)
            return holder[key]
        except (LookupError, AttributeError, TypeError, ValueError):
            return None

    def swap(self, args: tuple, value: Any) -> Any:
        """Put ``value`` at this place; returns what was there."""
        holder, key = self.place(args)
        old = holder[key]
        holder[key] = value
        return old


def _is_module(obj: Any) -> bool:
    from eager.interop import Module

    return isinstance(obj, Module)


def _member_place(root: Place, chain: tuple, registry: str, pname: str) -> Place:
    def place(args: tuple) -> tuple:
        holder, key = root(args)
        m = holder[key]
        for part in chain:
            m = m._modules[part]
        return getattr(m, registry), pname

    return place


def _walk(holder: Any, key: Any, name: str, place: Place, found: dict) -> None:
    obj = holder[key]
    if isinstance(obj, Tensor):
        if id(obj) not in found:
            found[id(obj)] = Captured(name, place, obj)
    elif _is_module(obj):
        for mprefix, mod in obj.named_modules():
            chain = tuple(mprefix.split(".")) if mprefix else ()
            for registry in ("_parameters", "_buffers"):
                for pname, t in getattr(mod, registry).items():
                    if t is not None and id(t) not in found:
                        found[id(t)] = Captured(
                            ".".join((name,) + chain + (pname,)),
                            _member_place(place, chain, registry, pname),
                            t,
                        )
    elif isinstance(obj, (list, dict)) and len(obj) <= 256:
        items = enumerate(obj) if isinstance(obj, list) else obj.items()
        for k, item in items:
            if isinstance(item, Tensor) or _is_module(item):
                _walk(obj, k, f"{name}[{k!r}]", _item_place(place, k), found)


def _item_place(place: Place, k: Any) -> Place:
    def item(args: tuple) -> tuple:
        holder, key = place(args)
        return holder[key], k

    return item


def _code_names(code: Any) -> set:
    """Global names a code object (and the functions and lambdas nested in it) reads."""
    names, stack = set(), [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    return names


def module_path(fn: Callable, args: tuple, target: Any) -> Optional[str]:
    """The path of module ``target`` from the modules ``fn`` reaches (``self.layers.2``)."""
    roots = []
    if _is_module(fn):
        roots.append(("self", fn))
    elif _is_module(getattr(fn, "__self__", None)):
        roots.append(("self", fn.__self__))
    roots += [("self" if i == 0 else f"args[{i}]", a) for i, a in enumerate(args) if _is_module(a)]
    code_fn = getattr(fn, "__func__", fn)
    code = getattr(code_fn, "__code__", None)
    if code is not None:
        for var, cell in zip(code.co_freevars, getattr(code_fn, "__closure__", None) or ()):
            try:
                if _is_module(cell.cell_contents):
                    roots.append((var, cell.cell_contents))
            except ValueError:
                continue
        glob = getattr(code_fn, "__globals__", {})
        roots += [
            (v, glob[v]) for v in sorted(_code_names(code)) if v in glob and _is_module(glob[v])
        ]
    for name, root in roots:
        for sub, m in root.named_modules():
            if m is target:
                return f"{name}.{sub}" if sub else name
    return None


def find(fn: Callable, args: tuple) -> dict:
    """``id(tensor) -> Captured`` for every eager tensor ``fn`` can reach by name."""
    found: dict = {}
    target = fn
    if _is_module(fn):  # graphc.compile(model)
        box = {"self": fn}
        _walk(box, "self", "self", lambda a, b=box: (b, "self"), found)
        target = type(fn).forward
    else:
        self_obj = getattr(fn, "__self__", None)
        if self_obj is not None and _is_module(self_obj):  # model.forward
            box = {"self": self_obj}
            _walk(box, "self", "self", lambda a, b=box: (b, "self"), found)
            target = getattr(fn, "__func__", fn)
    for i, a in enumerate(args):  # modules passed as arguments (self of a method)
        if _is_module(a):
            _walk(args, i, "self" if i == 0 else f"args[{i}]", lambda a, i=i: (a, i), found)
    code = getattr(target, "__code__", None)
    if code is None:
        return found
    for var, cell in zip(code.co_freevars, getattr(target, "__closure__", None) or ()):
        try:
            cell.cell_contents
        except ValueError:  # an empty cell
            continue
        holder = _Cell(cell)
        _walk(holder, 0, var, lambda a, h=holder: (h, 0), found)
    glob = getattr(target, "__globals__", None)
    if glob is not None:
        for var in sorted(_code_names(code)):
            if var in glob:
                _walk(glob, var, var, lambda a, g=glob, v=var: (g, v), found)
    if getattr(target, "__defaults__", None):
        holder = _Defaults(target)
        for i in range(len(target.__defaults__)):
            _walk(holder, i, f"default[{i}]", lambda a, h=holder, i=i: (h, i), found)
    kwdefaults = getattr(target, "__kwdefaults__", None)  # def f(*xs, model=model)
    if kwdefaults:  # the function's own dict: a write through it is what the call reads
        for var in sorted(kwdefaults):
            _walk(kwdefaults, var, var, lambda a, d=kwdefaults, v=var: (d, v), found)
    return found
