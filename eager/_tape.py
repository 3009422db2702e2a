"""Recording tape nodes: the backward node an op leaves on its output.

Three recorders, from general to fast, fill in what a node needs -- which operands need
a gradient, the edges to their nodes, what the VJP rules keep -- and all build the node
with the one constructor, :func:`eager.autograd.function.new_op_node`:

* :func:`record`, any op (``Tensor._apply``);
* :func:`record1`, a unary op whose operand requires grad;
* :func:`record2`, a binary op without attrs of one float dtype, with a recipe per
  (op, node name, which operand requires grad) made on first use.

:func:`binop`, :func:`rbinop` and :func:`mm2d` make ``Tensor``'s operator methods
(``a * b``, ``2 * a``, ``a @ b``): the hottest path of the tape, one Python frame per
call for the common cases.  This module sits below eager/tensor.py
(docs/eager-layers.md) and receives ``Tensor`` through :func:`bind`.
"""

from __future__ import annotations

import builtins

import eager.autograd.function as _function_mod
from .autograd.function import _edge
from .autograd.grad_mode import STATE as _STATE
from .ops.registry import OPS
from .surface import TensorOps

# eager.tensor's Tensor class and its _make, handed down once through bind()
# (eager/factories.py's wiring block); read at the same cost as any global.
Tensor = None
_make = None


def bind(tensor_class) -> None:
    """Receive eager.tensor.Tensor (called once, by the wiring block of eager.factories)."""
    global Tensor, _make
    Tensor, _make = tensor_class, tensor_class._make


_NO_EDGE = (None, 0)
_RAW = {name: getattr(op.forward, "raw", op.forward) for name, op in OPS.items()}
_NODE_CLASSES = _function_mod._node_classes
_new_op_node = _function_mod.new_op_node  # the one constructor of tape nodes
_node_class = _function_mod.node_class
_KEEP = _function_mod._KEEP
_keep_mask = _function_mod.keep_mask
_NO_ATTRS: dict = {}  # the attrs of every binary node (never mutated)


def record(out: Tensor, opdef, gname: str, operands: tuple, attrs: dict) -> None:
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
        else:  # a constant operand (numpy scalar or array)
            data = o
            saved.append(o if k else None)
            versions.append(None)
        shapes.append((data.shape, data.dtype))
    out.grad_fn = _new_op_node(
        _NODE_CLASSES.get(gname) or _node_class(gname),
        opdef,
        attrs,
        needs,
        tuple(edges),
        tuple(saved),
        tuple(versions),
        tuple(shapes),
        out,
        any_keep,
    )
    out._rg = True


def record1(out: Tensor, opdef, gname: str, x: Tensor, attrs: dict) -> None:
    """:func:`record` for a unary op on ``x``, which requires grad."""
    out_data = out._data
    if out_data.dtype.kind != "f" or not opdef.vjp or opdef.vjp[0] is None:
        return
    edge = _edge(x)
    km = _KEEP.get((opdef.name, _NEED1))
    if km is None:
        km = _keep_mask(opdef, _NEED1, 1)
    keep = km[1]
    dx = x._data
    out.grad_fn = _new_op_node(
        _NODE_CLASSES.get(gname) or _node_class(gname),
        opdef,
        attrs,
        _NEED1,
        (edge,),
        (x if keep else None,),
        (x._version[0] if keep else None,),
        ((dx.shape, dx.dtype),),
        out,
        keep,
    )
    out._rg = True


_NEED1 = (True,)


def record2(out: Tensor, recipes: list, x, y, dt) -> None:
    """:func:`record` for a binary op without attrs (``x`` or ``y`` may be a numpy constant).

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
    # a saved tensor's version is its version now (constants have none)
    out.grad_fn = _new_op_node(
        cls,
        opdef,
        _NO_ATTRS,
        needs,
        (ex, ey),
        (x if kx else None, y if ky else None),
        (x._version[0] if kx and xt else None, y._version[0] if ky and yt else None),
        ((dx.shape, dt), (dy.shape, dt)),
        out,
        keeps,
    )
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
        r = (_NODE_CLASSES.get(gname) or _node_class(gname), opdef, needs, kx, ky, keeps)
    recipes[i] = r
    return r


# --- binary operators ------------------------------------------------------------
# ``a * b`` is the hottest path of the tape.  Each operator is one closure made here
# (op, node name and numpy function bound), so a call is one Python frame: the fast
# path covers tensor (op) tensor of one dtype and tensor (op) Python number; anything
# else (promotion, arrays, lists...) goes through TensorOps' general coercion.

BINOPS: dict = {}
RBINOPS: dict = {}


def make_binop(op: str, gname: str):
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
        elif oc is dt.type:  # a numpy scalar of our dtype (VJP rules make these)
            b = other
            rg = self._rg
        else:
            return general(self, op, other, gname)
        try:
            out = _make(raw(a, b))
        except ValueError:
            forward(a, b)  # raises the error naming the op and both shapes
            raise
        except TypeError:  # numpy refuses (bool - bool): PyTorch's error
            return general(self, op, other, gname)
        if rg and recorded and state.enabled and dt.kind == "f":
            record2(out, recipes, self, other, dt)
        return out

    binop.__name__ = binop.__qualname__ = f"{op}_{gname or 'nograd'}"
    BINOPS[(op, gname)] = binop
    return binop


def make_rbinop(op: str, gname: str):
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
                record2(out, recipes, b, self, dt)
            return out
        return general(self, op, other, gname)

    rbinop.__name__ = rbinop.__qualname__ = f"r{op}_{gname}"
    RBINOPS[(op, gname)] = rbinop
    return rbinop


def make_mm2d(method: str):
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
            if (
                a.ndim == 2
                and b.ndim == 2
                and a.shape[1] == b.shape[0]
                and (dt is b.dtype or dt == b.dtype)
            ):
                out = _make(raw(a, b))
                if (self._rg or other._rg) and state.enabled and dt.kind == "f":
                    record2(out, recipes, self, other, dt)
                return out
        return general(self, other)

    mm.__name__ = mm.__qualname__ = method
    return mm
