"""Tape nodes (``grad_fn`` objects) and user-defined ``autograd.Function``.

Each node class carries PyTorch's name (``AddBackward0``...): ``type(node).__name__``
and ``repr(node)`` look exactly like PyTorch's.  A node keeps only what its VJP
rules read (``OpDef.saves``); everything else is a :class:`Meta` (shape, dtype).
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any, Callable

import numpy as np

# by full name: "from . import backward_codegen" would import the package eager.autograd
import eager.autograd.backward_codegen as _codegen
from ..ops.registry import Meta
from ..surface import TensorOps, sum_to as _sum_to
from .grad_mode import STATE as _STATE, no_grad as _no_grad

_seq = itertools.count()
_node_classes: dict[str, type] = {}

FREED_MSG = (
    "Trying to backward through the graph a second time (or directly access saved "
    "tensors after they have already been freed). Saved intermediate values of the graph "
    "are freed when you call .backward() or autograd.grad(). Specify retain_graph=True if "
    "you need to backward through the graph a second time or if you need to access saved "
    "tensors after calling backward."
)


class Node:
    """A node of the backward graph; ``next_functions`` point towards the leaves."""

    __slots__ = ("next_functions", "_seq", "_hooks", "_retained", "_metadata", "__weakref__")
    num_outputs = 1
    _fresh_outputs = False  # apply() returns new buffers (except pass-throughs): OpNode

    def __init__(self) -> None:
        self._seq = next(_seq)
        self._hooks = None  # {output_nr: [hook]} for tensor.register_hook on non-leaves
        self._retained = None  # {output_nr: weakref(tensor)} for retain_grad()
        self._metadata = None

    @property
    def metadata(self) -> dict:
        """Free-form per-node dict (created on first use, as most nodes never need one)."""
        if self._metadata is None:
            self._metadata = {}
        return self._metadata

    def name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        return f"<{type(self).__name__} object at {hex(id(self))}>"

    def apply(self, grads: list) -> list:
        raise NotImplementedError

    def release(self) -> None:
        """Free saved buffers (called after backward unless retain_graph)."""

    def __call__(self, *grads):
        return self.apply(list(grads))


class AccumulateGrad(Node):
    """The sink of a leaf tensor: adds incoming gradients into ``variable.grad``.

    A leaf keeps its accumulator for its whole life (every graph that uses the leaf
    points at the same node); the accumulator refers to the leaf weakly, so graphs
    do not keep leaves alive (``variable`` is None once the leaf is gone)."""

    __slots__ = ("_var",)

    def __init__(self, variable) -> None:
        self._seq = next(_seq)  # Node.__init__, inlined
        self._hooks = None
        self._retained = None
        self._metadata = None
        self._var = weakref.ref(variable)
        self.next_functions = ()

    @property
    def variable(self):
        return self._var()


def node_class(name: str) -> type:
    """The (cached) OpNode subclass carrying PyTorch's grad_fn class name."""
    cls = _node_classes.get(name)
    if cls is None:
        cls = type(name, (OpNode,), {"__slots__": ()})
        cls.__module__ = "eager.autograd.graph"
        _node_classes[name] = cls
    return cls


_new = object.__new__
_CACHE = _codegen._CACHE
# eager.tensor's Tensor class and eager.factories' ``zeros``: the wiring block of
# eager.factories (a layer above) hands them down once, through bind(); nodes use them
# only when backward runs.
_Tensor = None
_zeros = None


def bind(tensor_class, zeros) -> None:
    """Receive Tensor and zeros (called once, by eager.factories' wiring block)."""
    global _Tensor, _zeros
    _Tensor, _zeros = tensor_class, zeros


def new_op_node(
    cls: type,
    op,
    attrs: dict,
    needs: tuple,
    edges: tuple,
    saved: tuple,
    versions: tuple,
    shapes: tuple,
    out,
    keeps: bool,
):
    """The backward node of one recorded op: an instance of ``cls`` (an OpNode subclass
    from :func:`node_class`); ``keeps``: some operand was saved.

    The one constructor of OpNodes, for every recorder (eager._tape): slots are set
    directly rather than through ``__init__`` because this runs once per recorded op."""
    node = _new(cls)
    node._seq = next(_seq)
    node._hooks = None
    node._retained = None
    node._metadata = None
    node._op = op
    node._attrs = attrs
    node._needs = needs
    node.next_functions = edges
    node._saved = saved
    node._versions = versions
    node._shapes = shapes
    if op.saves_out:
        node._out = out._data
        node._outv = out._version  # in-place writes to out must fail backward, not corrupt it
        node._freed = False
    else:
        node._out = None
        node._outv = None
        node._freed = False if keeps else None
    return node


class OpNode(Node):
    """Backward node of a registered primitive: runs its VJP rules.

    ``_saved[i]`` is operand ``i`` when a needed rule reads it, else None (the rule
    then gets a :class:`Meta` built from ``_shapes[i]``); ``_versions[i]`` is the
    version a saved tensor had when recorded.  ``_freed`` is False while saved
    values are held, True once released, and None for a node that saved nothing
    (such a node can run again after backward, as in PyTorch).
    Built by :func:`new_op_node` (eager._tape's recorders call it on the hot path).
    """

    __slots__ = (
        "_op",
        "_attrs",
        "_saved",
        "_versions",
        "_out",
        "_needs",
        "_shapes",
        "_freed",
        "_outv",
    )
    _fresh_outputs = True

    def release(self) -> None:
        if self._freed is False:
            self._freed = True
            self._saved = None
            self._out = None

    def _output(self, Tensor):
        """The saved output as a tensor for the rules (after checking its version)."""
        if self._outv is not None and self._outv[0] != 0:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{_type_str(Tensor._make(self._out))} "
                f"{list(self._out.shape)}], which is output 0 of {self.name()}, is at version "
                f"{self._outv[0]}; expected version 0 instead. Hint: avoid modifying it in "
                "place, or clone() it first."
            )
        out = Tensor._make(self._out)
        if _STATE.enabled:  # create_graph: out is differentiable through self
            out._rg = True
            out.grad_fn = self
        return out

    def _version_error(self, o, v) -> None:
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: [{_type_str(o)} {list(o.shape)}], which is "
            f"{'output 0 of ' + o.grad_fn.name() if o.grad_fn is not None else 'a leaf'}"
            f", is at version {o._version[0]}; expected version {v} instead. Hint: the "
            f"operation that saved it is {self.name()}; avoid modifying it in place, or "
            "clone() it first."
        )

    def apply(self, grads: list) -> list:
        if self._freed:
            raise RuntimeError(FREED_MSG)
        g = grads[0]
        Tensor = _Tensor
        if g is not None and not _STATE.enabled and _codegen.enabled:
            attrs = self._attrs
            d = g._data
            try:
                plan = _CACHE.get(
                    (
                        self._op.name,
                        self._needs,
                        self._shapes,
                        d.shape,
                        d.dtype,
                        _codegen.attrs_key(attrs) if attrs else (),
                    )
                )
            except TypeError:  # an unhashable attr: the rules run on tensors
                plan = False
            if plan is None:
                plan = _codegen.lookup(self, g)
            if plan:  # the rules, compiled for this signature (backward_codegen)
                return plan(self, g)  # also checks the versions of the saved tensors
        shapes = self._shapes
        ins = list(self._saved)  # the rules' inputs: saved operands, or Metas
        i = 0
        for o in ins:
            if o is None:  # not kept: the rule sees only shape and dtype
                m = _new(Meta)
                m.shape, m.dtype = shapes[i]
                ins[i] = m
            elif o.__class__ is Tensor:
                if o._version[0] != self._versions[i]:
                    self._version_error(o, self._versions[i])
            elif isinstance(o, (np.ndarray, np.generic)):
                ins[i] = Tensor._make(np.asarray(o))
            i += 1
        out = None if self._out is None else self._output(Tensor)
        rules = self._op.vjp
        attrs = self._attrs
        res = []
        i = 0
        for need in self._needs:
            if need:
                r = rules[i](g, out, *ins, **attrs) if attrs else rules[i](g, out, *ins)
                shape, dtype = shapes[i]
                d = r._data
                if d.shape != shape:
                    r = _sum_to(r, shape)
                    d = r._data
                if d.dtype is not dtype and d.dtype != dtype:
                    r = r.to(dtype)
                res.append(r)
            else:
                res.append(None)
            i += 1
        return res


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


def keep_mask(op, needs: tuple, n: int) -> tuple:
    """(which operands to keep, whether any is kept) for ``op`` when ``needs`` hold."""
    key = (op.name, needs)
    km = _KEEP.get(key)
    if km is None:
        if op.reads is not None:  # keep only what the rules that will run read
            saves = frozenset(j for i, r in enumerate(op.reads) if needs[i] for j in r)
        else:
            saves = op.saves
        keep = tuple(saves is None or i in saves for i in range(n))
        km = _KEEP[key] = (keep, any(keep))
    return km


_KEEP: dict = {}  # (op name, needs) -> (keep mask, any kept); len(needs) is the operand count


def _type_str(t) -> str:
    kind = {
        "float32": "FloatTensor",
        "float64": "DoubleTensor",
        "int64": "LongTensor",
        "int32": "IntTensor",
        "bool": "BoolTensor",
    }.get(t._data.dtype.name, "Tensor")
    return f"eager.{kind}"


# ---------------------------------------------------------------------------
# user-defined functions


class FunctionCtx:
    """The ``ctx`` handed to ``forward``/``backward`` of an autograd.Function."""

    def __init__(self) -> None:
        self._to_save: tuple = ()
        self._versions: tuple = ()
        self.needs_input_grad: tuple = ()
        self._non_diff: set = set()
        self.materialize_grads = True
        self._freed = False

    def save_for_backward(self, *tensors) -> None:
        self._to_save = tensors
        self._versions = tuple(t._version[0] if t is not None else None for t in tensors)

    @property
    def saved_tensors(self) -> tuple:
        if self._freed:
            raise RuntimeError(FREED_MSG)
        for t, v in zip(self._to_save, self._versions):
            if t is not None and t._version[0] != v:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified by an "
                    f"inplace operation: [{_type_str(t)} {list(t.shape)}] is at version "
                    f"{t._version[0]}; expected version {v} instead."
                )
        return self._to_save

    def mark_non_differentiable(self, *tensors) -> None:
        """Outputs listed here get no gradient history (``requires_grad=False``)."""
        self._non_diff.update(id(t) for t in tensors)

    def set_materialize_grads(self, value: bool) -> None:
        """``False``: backward receives None (not zeros) for outputs that got no gradient."""
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors) -> None:
        """Inputs that ``forward`` modified in place (and returns): they keep their
        identity and their history continues through this function, as in PyTorch."""
        self._dirty = {id(t) for t in tensors}


class _FunctionNode(Node):
    """Backward node of a user-defined Function (name: ``<ClassName>Backward``)."""

    __slots__ = ("_fn", "_ctx", "num_outputs", "_out_meta")

    def apply(self, grads: list) -> list:
        Tensor, zeros = _Tensor, _zeros
        if self._ctx._freed:
            raise RuntimeError(FREED_MSG)
        if self._ctx.materialize_grads:
            grads = [
                g if g is not None else zeros(m.shape, dtype=m.dtype)
                for g, m in zip(grads, self._out_meta)
            ]
        res = self._fn.backward(self._ctx, *grads)
        if not isinstance(res, tuple):
            res = (res,)
        n_in = len(self.next_functions)
        if len(res) < n_in:
            raise RuntimeError(
                f"function {self.name()} returned an incorrect number of gradients "
                f"(expected {n_in}, got {len(res)})"
            )
        out = []
        for r in res[:n_in]:
            if r is not None and not isinstance(r, Tensor):
                raise TypeError(
                    f"{self.name()}.backward must return tensors or None, got {type(r).__name__}"
                )
            out.append(r)
        return out

    def release(self) -> None:
        self._ctx._freed = True
        self._ctx._to_save = ()


class FunctionMeta(type):
    def __init__(cls, name, bases, ns):
        super().__init__(name, bases, ns)
        cls._backward_cls = type(f"{name}Backward", (_FunctionNode,), {"__slots__": ()})
        cls._backward_cls.__module__ = "eager.autograd.graph"


class Function(metaclass=FunctionMeta):
    """Custom op: subclass with static ``forward(ctx, ...)`` and ``backward(ctx, *grads)``.

    ``forward`` runs with grad recording off; if any tensor input requires grad
    the outputs get a ``<Name>Backward`` grad_fn that calls ``backward``.
    """

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("subclasses of eager.autograd.Function must define forward")

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("subclasses of eager.autograd.Function must define backward")

    @classmethod
    def apply(cls, *args: Any):
        Tensor = _Tensor
        if any(isinstance(a, TensorOps) and not isinstance(a, Tensor) for a in args):
            raise TypeError(
                f"{cls.__name__}.apply got a traced value (inside graphc.compile/grad): a custom "
                "autograd.Function's backward is Python code run on concrete tensors, so it "
                "cannot be traced. Write the op with tensor methods (graphc differentiates "
                "them), add it as a primitive (docs/adding-an-op.md), or call it outside the "
                "compiled function."
            )
        ctx = FunctionCtx()
        tensors = [a for a in args if isinstance(a, Tensor)]
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        with _no_grad():
            if cls.setup_context is not Function.setup_context:
                # PyTorch 2 style: forward(*args) without ctx, then setup_context(ctx, ...)
                out = cls.forward(*args)
                cls.setup_context(ctx, args, out)
            else:
                out = cls.forward(ctx, *args)
        single = not isinstance(out, tuple)
        outs = (out,) if single else out
        record = _STATE.enabled and any(t.requires_grad for t in tensors)
        dirty = getattr(ctx, "_dirty", None)
        if dirty:
            _check_dirty(cls, args, outs, dirty, record)
        if record:
            # edges first: a leaf's AccumulateGrad made here must be older (a lower _seq)
            # than this node, as the engine runs nodes newest first
            edges = tuple(_edge(a) if isinstance(a, Tensor) else (None, 0) for a in args)
            node = cls._backward_cls.__new__(cls._backward_cls)
            Node.__init__(node)
            node._fn = cls
            node._ctx = ctx
            node.next_functions = edges
            node.num_outputs = len(outs)
            node._out_meta = [
                Meta(o.shape, o._data.dtype) if isinstance(o, Tensor) else None for o in outs
            ]
            new_outs = []
            for i, o in enumerate(outs):
                if isinstance(o, Tensor):
                    non_diff = id(o) in ctx._non_diff
                    if dirty and id(o) in dirty:
                        pass  # modified in place: same tensor, its history continues here
                    elif any(o is a for a in args):
                        o = Tensor._make(o._data)  # an input returned as-is gets a new identity
                    if o._data.dtype.kind == "f" and not non_diff:
                        o._rg = True
                        o.grad_fn = node
                        o._output_nr = i
                new_outs.append(o)
            outs = tuple(new_outs)
        return outs[0] if single else outs

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Any) -> Any:
        """PyTorch 2 style: override it (and write ``forward(*args)`` without ctx) to
        save what backward needs from ``inputs`` and ``output``."""
        raise NotImplementedError("setup_context is not implemented.")


def _check_dirty(cls, args: tuple, outs: tuple, dirty: set, record: bool) -> None:
    """mark_dirty's rules: a dirty tensor is an input, returned, not a leaf needing grad."""
    by_id = {id(a): a for a in args}
    for i in dirty:
        t = by_id.get(i)
        if t is None:
            raise RuntimeError(
                f"{cls.__name__}: mark_dirty() was given a tensor that is not an input"
            )
        if not any(o is t for o in outs):
            raise RuntimeError(
                f"{cls.__name__}: a tensor marked dirty must be returned by forward "
                "(eager does not rewrite the history of an input modified in place that is "
                "not an output)"
            )
        if record and t._rg and t.grad_fn is None:
            raise RuntimeError(
                "a leaf Variable that requires grad is being used in an in-place operation."
            )
        if record and getattr(t, "_view", None) is not None:
            raise NotImplementedError(
                f"{cls.__name__}: mark_dirty() on a view is not supported by eager"
            )


_ONCE_MSG = "trying to differentiate twice a function that was marked with @once_differentiable"


def once_differentiable(fn: Callable) -> Callable:
    """Decorate a Function's ``backward``: it runs without recording, and differentiating
    its result again (``create_graph=True``) raises PyTorch's error."""
    import functools

    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with _no_grad():
            outputs = fn(ctx, *args)
        if not _STATE.enabled:
            return outputs
        requires_grad = any(isinstance(a, TensorOps) and a.requires_grad for a in args)
        if not requires_grad:
            return outputs
        single = not isinstance(outputs, tuple)
        outs = (outputs,) if single else outputs
        inputs = [a for a in args if isinstance(a, _Tensor) and a.requires_grad]
        wrapped = tuple(
            _DelayedError.apply(o, *inputs) if isinstance(o, _Tensor) else o for o in outs
        )
        return wrapped[0] if single else wrapped

    return wrapper


def _edge(t) -> tuple:
    """(node, output_nr) that a gradient for tensor ``t`` should flow into."""
    if t.grad_fn is not None:
        return (t.grad_fn, t._output_nr)
    if t._rg:
        return t._acc or t._leaf_edge()  # (its AccumulateGrad, 0), made once per leaf
    return (None, 0)


class DelayedError(Function):
    """A gradient that must not be differentiated: its backward raises."""

    @staticmethod
    def forward(ctx, value, *inputs):
        """Pass ``value`` through (a new tensor) with ``inputs`` as its history."""
        return _Tensor._make(value._data)

    @staticmethod
    def backward(ctx, *grads):
        """Raise: the function was marked ``@once_differentiable``."""
        raise RuntimeError(_ONCE_MSG)


_DelayedError = DelayedError
