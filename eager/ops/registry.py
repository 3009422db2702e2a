"""The op registry: every primitive is defined exactly once, here.

An op record holds the numpy forward, the shape/dtype rule and the VJP rules.
VJP rules are written with the *public* tensor methods (``g * out``,
``x.sin()``, ``g.reshape(shape)``...), never with raw numpy, so the same rule
computes numbers on the eager tape, records a new tape under
``create_graph=True`` (higher order for free) and emits graph nodes when graphc
differentiates a traced graph.

Conventions shared by eager's engine and graphc's autodiff:

* ``vjp`` is a tuple with one rule per differentiable input (``None`` for
  inputs that have no gradient, e.g. the condition of ``where``).  A rule is
  called as ``rule(g, out, *inputs, **attrs)`` and returns the gradient for its
  input *in the broadcast output shape*; the caller then sums it back to the
  input's shape (``sum_to``) and casts it to the input's dtype.  Rules only run
  for inputs that need a gradient.
* ``saves`` lists which inputs a rule reads (eager keeps only those alive on
  the tape; the others are passed as :class:`Meta` holding shape and dtype).
  ``saves_out`` says whether the rules read ``out``.
* The shape rule gets one :class:`Meta` per input plus the attrs and returns
  the output :class:`Meta`.  graphc's verifier re-derives every node with it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np


class Meta:
    """Shape and dtype of a value whose data is not needed (an abstract value)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple, dtype: np.dtype) -> None:
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Meta) and self.shape == other.shape and self.dtype == other.dtype

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype))

    def __repr__(self) -> str:
        return f"Meta({self.shape}, {self.dtype})"


@dataclass(frozen=True)
class OpDef:
    """One primitive: its numpy forward, shape rule, VJP rules and metadata."""

    name: str
    forward: Callable[..., np.ndarray]
    shape: Callable[..., Meta]
    vjp: Optional[tuple]
    arity: Optional[int]
    attrs: tuple = ()
    saves: Optional[tuple] = None
    saves_out: bool = False
    # Optional, per input: the input positions its VJP rule reads.  eager then keeps only
    # what the rules of the inputs that need a gradient read (as PyTorch does for x * c).
    reads: Optional[tuple] = None
    family: str = "elementwise"  # one of FAMILIES: how every layer treats the op
    # the static attributes' types, by name (keys of ATTR_TYPES); ``attrs`` is their names
    attr_types: dict = field(default_factory=dict, compare=False)
    # numpy's forward may return a view of operand 0 (eager links it to its base, graphc's
    # tracer follows the layout it shares)
    view: bool = False
    doc: str = ""
    samples: Callable[[], list] = field(default=lambda: [], compare=False)
    # how the op exports to ONNX (eager.ops.onnx_rules): an ONNX op type, a rule
    # ``rule(builder, names, metas, out_meta, **attrs) -> name`` or a NoOnnx refusal
    onnx: Any = field(default=None, compare=False)

    @property
    def differentiable(self) -> bool:
        return self.vjp is not None and any(r is not None for r in self.vjp)


OPS: dict[str, OpDef] = {}

#: How each layer treats an op of a family.  eager: ``view`` and ``index`` results may share
#: their operand's memory (eager links views to their base).  graphc's backend:
#: ``elementwise`` ops are fused into loops (one scalar lowering each), ``reduce`` ops
#: accumulate in loops, ``view`` ops only change strides (no code), the others get a
#: kernel of their own.
FAMILIES = {
    "elementwise": "one output element from the same-index elements of the (broadcast) operands",
    "reduce": "combines elements along axes (sum, max, all...)",
    "argreduce": "the index of the extreme element along an axis",
    "view": "rearranges elements without computing any (reshape, transpose, expand)",
    "index": "reads or writes elements selected by an index (getitem, setitem)",
    "matmul": "matrix products",
    "random": "random numbers from a generator state",
    "scan": "running combination along one axis (cumsum, cumprod)",
}

#: The types a static attribute may have; an op declares each attribute's type, and the
#: JSON reader (graphc.ir.serialize) checks a loaded attribute against it.
ATTR_TYPES = {
    "axes": "None, an int or a tuple of ints: dimensions",
    "bool": "True or False",
    "int": "an int",
    "count": "an int >= 0",
    "float": "an int or a float (not a bool)",
    "number?": "None, an int or a float (not a bool)",
    "scalar": "an int, a float, a bool or a 0-d numpy array",
    "shape": "a tuple of ints >= 0",
    "perm": "a tuple of ints: a permutation of the dimensions",
    "dtype": "the name of a numpy dtype eager supports",
    "str": "a short string",
    "index": "an encoded index: a tuple of ('i', k), ('s', start, stop, step), ('n',), "
    "('e',) or ('t', operand) items",
}


def defop(
    name: str,
    *,
    forward,
    shape,
    vjp,
    arity: Optional[int],
    attrs: Optional[dict] = None,
    saves: Optional[Sequence[int]] = None,
    saves_out: bool = False,
    family: str = "elementwise",
    view: bool = False,
    doc: str = "",
    samples=None,
    reads=None,
    onnx=None,
) -> OpDef:
    """Register a primitive.  Names are unique: a second definition is a bug.

    ``attrs`` maps each static attribute's name to its type (a key of :data:`ATTR_TYPES`),
    ``family`` is a key of :data:`FAMILIES`; ``onnx`` says how the op exports to ONNX (see
    :mod:`eager.ops.onnx_rules`)."""
    if name in OPS:
        raise ValueError(f"op {name!r} is defined twice")
    if family not in FAMILIES:
        raise ValueError(f"op {name!r}: unknown family {family!r}; one of {sorted(FAMILIES)}")
    attrs = dict(attrs or {})
    for a, t in attrs.items():
        if t not in ATTR_TYPES:
            raise ValueError(
                f"op {name!r}: attribute {a!r} has unknown type {t!r}; one of {sorted(ATTR_TYPES)}"
            )
    op = OpDef(
        name=name,
        forward=forward,
        shape=shape,
        vjp=None if vjp is None else tuple(vjp),
        arity=arity,
        attrs=tuple(attrs),
        saves=None if saves is None else tuple(saves),
        saves_out=saves_out,
        reads=reads,
        family=family,
        attr_types=attrs,
        view=view,
        doc=doc,
        samples=samples if samples is not None else (lambda: []),
        onnx=onnx,
    )
    OPS[name] = op
    return op


def ops_of(*families: str) -> frozenset:
    """Names of the registered ops of these families."""
    for f in families:
        if f not in FAMILIES:
            raise ValueError(f"unknown family {f!r}")
    return frozenset(n for n, op in OPS.items() if op.family in families)


def get(name: str) -> OpDef:
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}; known ops: {', '.join(sorted(OPS))}") from None


# ---------------------------------------------------------------------------
# shape-rule helpers shared by the op families


# The most bytes one array may span: numpy refuses ("array is too big") any array, view or
# not, whose element count times item size exceeds its index type, np.intp.
MAX_BYTES = sys.maxsize


def check_size(
    shape: Sequence[int], dtype: Any = None, op: str = "op", error: type = RuntimeError
) -> None:
    """Refuse a shape numpy cannot address, before anything is allocated or compiled.

    RuntimeError (or the subclass ``error``), as PyTorch raises for a size whose
    computation overflows; ``dtype`` None checks the element count alone (numpy's
    broadcasting limit).
    """
    n = 1
    for d in shape:
        n *= int(d)
    itemsize = 1 if dtype is None else np.dtype(dtype).itemsize
    if n * itemsize > MAX_BYTES:
        what = (
            "elements"
            if dtype is None
            else f"elements of {np.dtype(dtype).name} ({n * itemsize} bytes)"
        )
        raise error(
            f"{op}: a tensor of shape {list(shape)} is too big: {n} {what} exceed the "
            f"{MAX_BYTES} bytes an array can address; use smaller sizes"
        )


def broadcast_shapes(*shapes: tuple, op: str = "op") -> tuple:
    """numpy broadcasting with PyTorch's error wording, naming the op and shapes."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        out: list = []
        for i in range(1, max(len(s) for s in shapes) + 1):
            sizes = {s[-i] for s in shapes if i <= len(s)} - {1}
            if len(sizes) > 1:
                a, b = shapes[0], shapes[-1]
                da = a[-i] if i <= len(a) else 1
                db = b[-i] if i <= len(b) else 1
                if da == db or da == 1 or db == 1:  # the clash is with a middle operand
                    raise RuntimeError(
                        f"{op}: shapes {[list(s) for s in shapes]} cannot be broadcast"
                    ) from None
                raise RuntimeError(
                    f"{op}: the size of tensor a ({da}) must match the size of tensor b ({db}) "
                    f"at non-singleton dimension {max(len(a), len(b)) - i}; shapes are "
                    f"{list(a)} and {list(b)}"
                ) from None
            out.insert(0, sizes.pop() if sizes else 1)
        check_size(out, None, op)  # broadcastable: numpy refused the size
        raise RuntimeError(
            f"{op}: shapes {[list(s) for s in shapes]} cannot be broadcast"
        ) from None


def norm_axes(axis: Any, ndim: int, op: str = "op") -> tuple:
    """Normalize an int/tuple/None axis spec to a sorted tuple of non-negative ints."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (int(axis),)
    out = []
    for a in axis:
        a = int(a)
        lim = max(ndim, 1)
        if not -lim <= a < lim:
            raise IndexError(
                f"{op}: dimension out of range (expected to be in range of "
                f"[{-lim}, {lim - 1}], but got {a})"
            )
        out.append(a % lim if ndim else 0)
    if len(set(out)) != len(out):
        raise RuntimeError(f"{op}: dim {tuple(axis)} appears multiple times in the list of dims")
    return tuple(sorted(out))


def reduced_shape(shape: tuple, axes: tuple, keepdim: bool) -> tuple:
    if keepdim:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def op_table() -> str:
    """The registry as a markdown table (docs/ir.md embeds it; tests/test_docs.py checks it
    is current, ``python3 dev.py docs`` rewrites it): one row per op, by family."""
    rows = ["| family | op | operands | attrs (type) | differentiable |", "|---|---|---|---|---|"]
    for fam in FAMILIES:
        for name in sorted(n for n, op in OPS.items() if op.family == fam):
            op = OPS[name]
            operands = "variadic" if op.arity is None else str(op.arity)
            attrs = ", ".join(f"`{a}` ({t})" for a, t in op.attr_types.items()) or "none"
            rows.append(
                f"| {fam} | `{name}` | {operands} | {attrs} | "
                f"{'yes' if op.differentiable else 'no'} |"
            )
    types = ["", "| attribute type | values |", "|---|---|"]
    types += [f"| {t} | {what} |" for t, what in ATTR_TYPES.items()]
    fams = ["", "| family | what its ops do |", "|---|---|"]
    fams += [f"| {f} | {what} |" for f, what in FAMILIES.items()]
    return "\n".join(rows + types + fams) + "\n"
