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

An ``eager.optim`` optimizer reached the same way is lifted too (a compiled training
step, optimizer included): its parameters (the same Captured as the module's when
both are reached), its state tensors (``exp_avg``, ``momentum_buffer``, ``step``...)
at ``opt.state[param][key]``, and each param group's ``lr`` as a 0-d float64 input
(so an lr scheduler's new value is read by the next call, not re-traced).  The other
hyper-parameters, the groups' parameters and the state's keys are the
:class:`OptCaptured`'s *structure*: a call that finds them changed re-traces.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

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


class _Slots:
    """The attributes of an object with ``__slots__`` (no ``__dict__`` or not only one) as
    a holder: item access reads and sets the attribute; iterating gives the names set."""

    __slots__ = ("obj", "names")

    def __init__(self, obj: Any, names: list) -> None:
        self.obj = obj
        self.names = names

    def __getitem__(self, key: str) -> Any:
        try:
            return getattr(self.obj, key)
        except AttributeError:
            raise KeyError(key) from None

    def __setitem__(self, key: str, value: Any) -> None:
        setattr(self.obj, key, value)

    def __iter__(self) -> Any:
        return iter(self.names)

    def items(self) -> list:
        """(name, value) of every attribute set, as ``dict.items``."""
        return [(k, self[k]) for k in self.names]


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

    __slots__ = ("name", "place", "tensor", "also")

    def __init__(self, name: str, place: Optional[Place], tensor: Tensor) -> None:
        self.name = name
        self.place = place  # None: reached some other way, lifted by identity
        self.tensor = tensor
        self.also: list = []  # other places the same tensor was found at (swapped too)

    def current(self, args: tuple) -> Any:
        """The tensor at this place now (None if the place is gone, or if a tensor found
        at several places (a tied weight) is no longer the one at all of them: a trace
        that reads it once must not serve modules that now hold different tensors)."""
        if self.place is None:
            return self.tensor
        try:
            holder, key = self.place(args)
            t = holder[key]
            for place in self.also:
                holder, key = place(args)
                if holder[key] is not t:
                    return None
            return t
        except (LookupError, AttributeError, TypeError, ValueError):
            return None

    def swap(self, args: tuple, value: Any) -> Any:
        """Put ``value`` at this place; returns what was there."""
        holder, key = self.place(args)
        old = holder[key]
        holder[key] = value
        return old


class OptParamCaptured(Captured):
    """An optimizer's parameter found through the optimizer first: the module holding it,
    found later, is one more place to swap (``also``)."""

    __slots__ = ()

    def current(self, args: tuple) -> Any:
        """The tensor at the optimizer's slot now (None if gone).  The other places are
        not looked at here: the optimizer's guard (:meth:`OptCaptured.guard`), run by
        every call before this, checks each of them holds it."""
        try:
            holder, key = self.place(args)  # type: ignore[misc]
            return holder[key]
        except (LookupError, AttributeError, TypeError, ValueError):
            return None


class LrTensorCaptured(Captured):
    """A param group's Tensor lr (``SGD(params, lr=torch.tensor(0.01))``): lifted like any
    tensor, so each call reads its value then (``lr.fill_(...)`` or an lr scheduler
    between calls is seen, no re-trace); found by name elsewhere too, that place is
    swapped as well (``also``)."""

    __slots__ = ()


class LrCaptured(Captured):
    """A param group's learning rate: a graph input read at every call as a 0-d float64
    tensor (``tensor`` is the one made when found)."""

    __slots__ = ("last",)

    def __init__(self, name: str, place: Optional[Place], tensor: Tensor) -> None:
        super().__init__(name, place, tensor)
        # (value, tensor) of the last call: the same lr gives the same (read-only) tensor,
        # so the call's memory check sees the arrays it passed last time (entry.mem_ok)
        # instead of a new lr array at every step (which made it compare all byte ranges)
        self.last: Optional[tuple] = None

    def current(self, args: tuple) -> Any:
        """A 0-d float64 tensor of the lr at this place now (None if gone): the previous
        call's tensor when the value is the same object, or an equal nonzero number of
        the same type (an lr scheduler's new value gets a new tensor)."""
        try:
            holder, key = self.place(args)  # type: ignore[misc]
            value = holder[key]
        except (LookupError, AttributeError, TypeError, ValueError):
            return None
        last = self.last
        if last is not None:
            v0 = last[0]
            if value is v0 or (type(value) is type(v0) and value == v0 and value != 0):
                return last[1]
        try:
            t = lr_tensor(value, self.name)
        except (TypeError, ValueError):
            return None
        self.last = (value, t)
        return t


def lr_tensor(value: Any, name: str) -> Tensor:
    """``value`` (a Python or numpy real number) as a 0-d float64 tensor."""
    import numpy as np
    from eager.interop import tensor_from_array

    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(
            f"{name} is a {type(value).__name__}; a compiled optimizer step reads the "
            "learning rate as a Python float or a 1-element Tensor"
        )
    a = np.array(float(value), dtype=np.float64)
    a.flags.writeable = False  # shared by the calls that read the same lr
    return tensor_from_array(a)


class OptCaptured:
    """An optimizer a traced function reaches by name: where it is, the Captured of its
    parameters (``params``: (group, index, Captured)) and its structure when found."""

    __slots__ = ("name", "place", "opt", "params", "structure")

    def __init__(self, name: str, place: Place, opt: Any) -> None:
        self.name = name
        self.place = place
        self.opt = opt
        self.params: list = []
        self.structure = opt_structure(opt)

    def current(self, args: tuple) -> Any:
        """The optimizer at this place now."""
        holder, key = self.place(args)
        return holder[key]

    def param_name(self, gi: int, pi: int) -> str:
        """The readable name of parameter ``pi`` of group ``gi``."""
        for g, i, cap in self.params:
            if (g, i) == (gi, pi):
                return cap.name
        return f"{self.name}.param_groups[{gi}]['params'][{pi}]"

    def guard(self, args: tuple) -> Optional[str]:
        """Why the trace made for this optimizer no longer fits (None: it does)."""
        try:
            opt = self.current(args)
        except (LookupError, AttributeError, TypeError, ValueError):
            return f"{self.name} is gone"
        if opt is not self.opt:
            return f"{self.name} is another optimizer"
        now = opt_structure(opt)
        if now != self.structure:
            return describe_change(self, self.structure, now)
        groups = opt.param_groups
        for gi, pi, cap in self.params:
            p = groups[gi]["params"][pi]
            if cap.current(args) is not p:
                return f"{cap.name} is no longer the tensor {self.name} updates"
            for place in cap.also:
                try:
                    holder, key = place(args)
                    same = holder[key] is p
                except (LookupError, AttributeError, TypeError, ValueError):
                    same = False
                if not same:
                    return f"a module no longer holds {cap.name}, the tensor {self.name} updates"
        return None


def opt_structure(opt: Any) -> tuple:
    """What a compiled step bakes in: the optimizer's type; per group its parameters,
    hyper-parameters but ``lr`` (an input) and whether ``lr`` is a Tensor; per parameter
    the keys of its state, with the value of the keys that do not hold tensors."""
    groups, states = [], []
    state = opt.state
    for g in opt.param_groups:
        params = g["params"]
        groups.append(
            (
                tuple([id(p) for p in params]),
                tuple([(k, v) for k, v in g.items() if k != "params" and k != "lr"]),
                isinstance(g.get("lr"), Tensor),  # a number lr and a Tensor lr: two traces
            )
        )
        for p in params:
            st = state.get(p)
            states.append(
                None
                if st is None
                else tuple([(k, None if isinstance(v, Tensor) else v) for k, v in st.items()])
            )
    return type(opt), tuple(groups), tuple(states)


def describe_change(oc: OptCaptured, old: tuple, new: tuple) -> str:
    """The first difference between two structures, in words."""
    if old[0] is not new[0]:
        return f"{oc.name} is now a {new[0].__name__}"
    if len(old[1]) != len(new[1]):
        return f"{oc.name} has {len(new[1])} param groups (was {len(old[1])})"
    for gi, ((ids0, hp0, t0), (ids1, hp1, t1)) in enumerate(zip(old[1], new[1])):
        if ids0 != ids1:
            return f"{oc.name}.param_groups[{gi}]['params'] changed"
        if t0 != t1:
            return f"{oc.name}.param_groups[{gi}]['lr'] is now a " + ("Tensor" if t1 else "number")
        if hp0 != hp1:
            d0, d1 = dict(hp0), dict(hp1)
            for k in list(d0) + [k for k in d1 if k not in d0]:
                if d0.get(k, "<unset>") != d1.get(k, "<unset>"):
                    return (
                        f"{oc.name}.param_groups[{gi}][{k!r}]: {d0.get(k, '<unset>')!r} -> "
                        f"{d1.get(k, '<unset>')!r}"
                    )
    flat = [(gi, pi) for gi, (ids, _, _) in enumerate(old[1]) for pi in range(len(ids))]
    for (gi, pi), s0, s1 in zip(flat, old[2], new[2]):
        if s0 != s1:
            keys = "no state" if s1 is None else "state " + str([k for k, _ in s1])
            return f"{oc.name}.state[{oc.param_name(gi, pi)}] now has {keys}"
    return f"{oc.name} changed"


def _is_optimizer(obj: Any) -> bool:
    from eager.interop import Optimizer

    return isinstance(obj, Optimizer)


def _group_place(root: Place, gi: int) -> Place:
    def place(args: tuple) -> tuple:
        holder, key = root(args)
        return holder[key].param_groups, gi

    return place


def _param_place(root: Place, gi: int, pi: int) -> Place:
    def place(args: tuple) -> tuple:
        holder, key = root(args)
        return holder[key].param_groups[gi]["params"], pi

    return place


def _state_place(root: Place, p: Tensor, k: str) -> Place:
    # keyed by the parameter itself: the optimizer's guard checks it still holds it
    def place(args: tuple) -> tuple:
        holder, key = root(args)
        return holder[key].state[p], k

    return place


def _walk_optimizer(opt: Any, name: str, place: Place, found: dict) -> None:
    """Lift an optimizer: its parameters, its state tensors and every group's lr."""
    if ("optimizer", id(opt)) in found:
        return
    oc = OptCaptured(name, place, opt)
    found[("optimizer", id(opt))] = oc
    for gi, group in enumerate(opt.param_groups):
        for pi, p in enumerate(group["params"]):
            if id(p) not in found:
                found[id(p)] = OptParamCaptured(
                    f"{name}.param_groups[{gi}]['params'][{pi}]", _param_place(place, gi, pi), p
                )
            oc.params.append((gi, pi, found[id(p)]))
        lr_name = f"{name}.param_groups[{gi}]['lr']"
        lr = group["lr"]
        lr_place = _item_place(_group_place(place, gi), "lr")
        if isinstance(lr, Tensor):  # a Tensor lr: lifted like any tensor, read at each call
            if id(lr) not in found:  # (so lr.fill_() or a scheduler between calls is seen)
                found[id(lr)] = LrTensorCaptured(lr_name, lr_place, lr)
            else:
                found[id(lr)].also.append(lr_place)
            continue
        found[("lr", id(opt), gi)] = LrCaptured(lr_name, lr_place, lr_tensor(lr, lr_name))
    for gi, pi, pcap in oc.params:
        st = opt.state.get(pcap.tensor)
        for k, v in (st or {}).items():
            if isinstance(v, Tensor) and id(v) not in found:
                found[id(v)] = Captured(
                    f"{name}.state[{pcap.name}][{k!r}]", _state_place(place, pcap.tensor, k), v
                )


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


def _found_at(found: dict, t: Tensor, name: str, place: Place) -> None:
    """Record tensor ``t`` found at ``place``.  A tensor found again at another place (a
    parameter tied between two modules, ``head.weight = emb.weight``; a module's
    parameter an optimizer updates; a tensor named by two globals) stays one lifted
    input, like ``module.parameters()`` lists a shared parameter once: the place is one
    more where the trace puts its tracer (``also``), so both uses are traced and their
    gradients accumulate into the one ``.grad``; each call checks that every place still
    holds it (:meth:`Captured.current`)."""
    cap = found.get(id(t))
    if cap is None:
        found[id(t)] = Captured(name, place, t)
    elif cap.place is not None and not any(p is place for p in [cap.place] + cap.also):
        cap.also.append(place)


def _walk(holder: Any, key: Any, name: str, place: Place, found: dict) -> None:
    obj = holder[key]
    if isinstance(obj, Tensor):
        _found_at(found, obj, name, place)
    elif _is_module(obj):
        for mprefix, mod in obj.named_modules():
            chain = tuple(mprefix.split(".")) if mprefix else ()
            for registry in ("_parameters", "_buffers"):
                for pname, t in getattr(mod, registry).items():
                    if t is None:
                        continue
                    mplace = _member_place(place, chain, registry, pname)
                    _found_at(found, t, ".".join((name,) + chain + (pname,)), mplace)
    elif _is_optimizer(obj):
        _walk_optimizer(obj, name, place, found)
    elif isinstance(obj, (list, dict)) and len(obj) <= 256:
        items = enumerate(obj) if isinstance(obj, list) else obj.items()
        for k, item in items:
            if isinstance(item, Tensor) or _is_module(item) or _is_optimizer(item):
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


def _plain_self(fn: Any) -> Any:
    """The attribute dict of the object a Python method ``fn`` is bound to, when that
    object is neither a module nor an optimizer (a user's ``Trainer``: its ``self.model``,
    ``self.opt`` are read by name, as a global is), else None.  An object with
    ``__slots__`` gives a :class:`_Slots` holder of its slots (and ``__dict__`` entries)."""
    import types

    if not isinstance(fn, types.MethodType):
        return None
    obj = fn.__self__
    if isinstance(obj, type) or _is_module(obj) or _is_optimizer(obj):
        return None
    return _attrs_of(obj)


def _attrs_of(obj: Any) -> Any:
    """``obj``'s attributes as a holder: its ``__dict__``, or a :class:`_Slots` when its
    class has ``__slots__``; None when it has neither."""
    attrs = getattr(obj, "__dict__", None)
    slots = []
    for klass in type(obj).__mro__:
        names = klass.__dict__.get("__slots__", ())
        for k in (names,) if isinstance(names, str) else names:
            if k not in ("__dict__", "__weakref__") and k not in slots and hasattr(obj, k):
                slots.append(k)
    if slots:
        return _Slots(obj, list(attrs or ()) + slots)
    return attrs if isinstance(attrs, dict) else None


#: How deep :func:`_walk_plain` follows plain objects from a method's ``self``
#: (``self.inner.model``: depth 1).
_PLAIN_DEPTH = 3


def _is_plain_object(obj: Any) -> bool:
    """An instance of a user's class (not a tensor, module, optimizer, container,
    function, class, nor a library's object): its attributes are walked."""
    import types

    if isinstance(
        obj, (Tensor, list, dict, tuple, set, str, bytes, int, float, complex, type, np.ndarray)
    ) or isinstance(obj, (types.FunctionType, types.MethodType, types.ModuleType)):
        return False
    if _is_module(obj) or _is_optimizer(obj):
        return False
    owner = str(getattr(type(obj), "__module__", "") or "")
    return not owner.startswith(_LIBRARY + ("graphc", "functools", "builtins"))


def _attr_place(root: Any, path: tuple) -> Place:
    """The place of attribute ``path[-1]`` of the object at ``root.path[0]. ...``, the
    chain read again at every call (an intermediate object rebound is seen)."""

    def place(args: tuple) -> tuple:
        obj = root
        for part in path[:-1]:
            obj = getattr(obj, part)
        holder = _attrs_of(obj)
        if holder is None:
            raise LookupError(".".join(path))
        return holder, path[-1]

    return place


def _walk_plain(obj: Any, attrs: Any, path: tuple, found: dict, seen: set) -> None:
    """Lift what the plain object ``obj`` (``self`` of a compiled method) holds, and
    what the plain objects it holds hold, down to :data:`_PLAIN_DEPTH` (iterative)."""
    stack = [(obj, attrs, path)]
    while stack:
        holder_obj, holder, pre = stack.pop()
        for attr in list(holder):
            chain = pre + (attr,)
            name = "self." + ".".join(chain)
            if not pre:
                place = lambda a, d=holder, k=attr: (d, k)  # noqa: E731
            else:
                place = _attr_place(obj, chain)
            _walk(holder, attr, name, place, found)
            try:
                v = holder[attr]
            except LookupError:
                continue
            if len(chain) <= _PLAIN_DEPTH and _is_plain_object(v) and id(v) not in seen:
                seen.add(id(v))
                sub = _attrs_of(v)
                if sub is not None:
                    stack.append((v, sub, chain))


def _call_method(fn: Any) -> Any:
    """``fn.__call__`` (a bound method) when ``fn`` is an instance of a user's class with
    a Python ``__call__`` (``graphc.compile(trainer)`` reads what ``trainer`` holds, as
    ``graphc.compile(trainer.__call__)`` does), else ``fn`` itself (functions, methods,
    classes, modules, optimizers, and library objects: graphc's, eager's, functools')."""
    import types

    if isinstance(fn, (types.FunctionType, types.MethodType, type)):
        return fn
    if _is_module(fn) or _is_optimizer(fn):
        return fn
    owner = str(getattr(type(fn), "__module__", "") or "")
    if owner.startswith(_LIBRARY + ("graphc", "functools", "builtins")):
        return fn
    call = getattr(fn, "__call__", None)
    return call if isinstance(call, types.MethodType) else fn


def module_path(fn: Callable, args: tuple, target: Any) -> Optional[str]:
    """The path of module ``target`` from the modules ``fn`` reaches (``self.layers.2``)."""
    fn = _call_method(fn)
    roots = []
    if _is_module(fn):
        roots.append(("self", fn))
    elif _is_module(getattr(fn, "__self__", None)):
        roots.append(("self", fn.__self__))
    elif _plain_self(fn) is not None:
        roots += [(f"self.{k}", v) for k, v in _plain_self(fn).items() if _is_module(v)]
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
    """``id(tensor) -> Captured`` for every eager tensor ``fn`` can reach by name; an
    optimizer it reaches adds ``("optimizer", id) -> OptCaptured`` and its groups' learning
    rates ``("lr", id, group) -> LrCaptured``."""
    found: dict = {}
    fn = _call_method(fn)
    target = fn
    if _is_module(fn):  # graphc.compile(model)
        box = {"self": fn}
        _walk(box, "self", "self", lambda a, b=box: (b, "self"), found)
        target = type(fn).forward
    else:
        self_obj = getattr(fn, "__self__", None)
        if self_obj is not None and (_is_module(self_obj) or _is_optimizer(self_obj)):
            box = {"self": self_obj}  # model.forward, optimizer.step
            _walk(box, "self", "self", lambda a, b=box: (b, "self"), found)
            target = getattr(fn, "__func__", fn)
        elif _plain_self(fn) is not None:  # trainer.train_step: what self holds
            obj = fn.__self__
            _walk_plain(obj, _plain_self(fn), (), found, {id(obj)})
            target = fn.__func__
    for i, a in enumerate(args):  # modules passed as arguments (self of a method)
        if _is_module(a):
            _walk(args, i, "self" if i == 0 else f"args[{i}]", lambda a, i=i: (a, i), found)
    _walk_functions(target, found)
    return found


#: Packages whose functions are library code: their globals hold no user state to lift
#: (eager's own module state, numpy's), so :func:`_walk_functions` does not enter them.
_LIBRARY = ("eager", "numpy", "networkx", "llvmlite", "onnx", "scipy", "threadpoolctl")
#: At most this many functions are walked per compiled function (a bound on the work).
_MAX_FUNCTIONS = 256


def _walk_functions(target: Any, found: dict) -> None:
    """Lift what ``target`` reads by name (closure cells, the globals its code names,
    defaults), and likewise for every Python function it reaches that way: a helper
    ``loss(x) -> helper(x) -> model(x)``, or the user function a transform such as
    ``graphc.value_and_grad(f)`` wraps, reads ``model``'s parameters as live inputs too
    (otherwise they would be constants of the trace: stale after an update).  Breadth
    first, each function once; names of what a called function reads are prefixed with
    the function's name (``helper.model.weight``)."""
    import types

    queue: list = [(target, "")]
    seen: set = set()
    while queue and len(seen) < _MAX_FUNCTIONS:
        fn, prefix = queue.pop(0)
        code = getattr(fn, "__code__", None)
        if code is None or id(fn) in seen:
            continue
        seen.add(id(fn))

        def follow(obj: Any, name: str) -> None:
            if (
                isinstance(obj, types.FunctionType)
                and id(obj) not in seen
                and not str(getattr(obj, "__module__", "") or "").startswith(_LIBRARY)
            ):
                queue.append((obj, f"{name}."))

        for var, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
            try:
                contents = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            holder = _Cell(cell)
            _walk(holder, 0, prefix + var, lambda a, h=holder: (h, 0), found)
            follow(contents, prefix + var)
        glob = getattr(fn, "__globals__", None)
        if glob is not None:
            for var in sorted(_code_names(code)):
                if var in glob:
                    _walk(glob, var, prefix + var, lambda a, g=glob, v=var: (g, v), found)
                    follow(glob[var], prefix + var)
        if getattr(fn, "__defaults__", None):
            holder = _Defaults(fn)
            for i in range(len(fn.__defaults__)):
                name = f"{prefix}default[{i}]"
                _walk(holder, i, name, lambda a, h=holder, i=i: (h, i), found)
                follow(fn.__defaults__[i], name)
        kwdefaults = getattr(fn, "__kwdefaults__", None)  # def f(*xs, model=model)
        if kwdefaults:  # the function's own dict: a write through it is what the call reads
            for var in sorted(kwdefaults):
                _walk(kwdefaults, var, prefix + var, lambda a, d=kwdefaults, v=var: (d, v), found)
                follow(kwdefaults[var], prefix + var)
