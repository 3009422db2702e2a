"""Backward code generation ("VJP plans"): the registry's rules compiled to numpy code.

Each op's VJP rules are written once, with the public tensor methods (see
``eager.ops.registry``).  Run on eager tensors they pay Python's price per
*tensor op*: every ``g * y`` inside a rule goes through the operator surface,
dtype promotion, a new Tensor object and the no-grad checks.  For a 64x100
matrix that overhead is larger than the arithmetic.

A plan removes it without a second definition of any rule.  The first time a
backward node of a given signature runs -- (op, which inputs need a gradient,
the input shapes and dtypes, the incoming gradient's shape and dtype, the op's
attrs) -- its rules are run once on :class:`RuleTracer` values, which record
every op a rule calls (and the ``sum_to``/dtype cast that ``OpNode.apply``
adds).  The recording becomes a small Python function of numpy arrays, e.g.
for ``MulBackward0`` with both inputs needing a gradient::

    def plan(node, G):
        g = G._data
        S = node._saved
        V = node._versions
        x0 = S[0]
        if x0.__class__ is T:
            if x0._version[0] != V[0]:
                node._version_error(x0, V[0])
            x0 = x0._data
        else:
            x0 = asarray(x0)
        x1 = ...                        # likewise
        t0 = f_mul(g, x1)
        t1 = f_mul(g, x0)
        return [make(t0), make(t1)]

Later nodes with the same signature call it directly.  It calls the same numpy
forwards, in the same order and dtypes, as the rules do on tensors, so results
are bit-identical (tests/eager/autograd/test_backward_codegen.py checks every op sample).

Plans are used only when backward does not record (``create_graph=False``);
with ``create_graph=True`` the rules run on tensors and record the graph of the
gradient.  A rule that needs a concrete value, a signature that cannot be
hashed (e.g. an index array in ``getitem``'s attrs) or any other failure while
recording marks that signature "not plannable" and the rules run on tensors as
before.  ``enabled = False`` (this module) switches plans off, for debugging.
"""

from __future__ import annotations

import builtins
import itertools

import numpy as np

import eager._dtype as D
from ..surface import Size, TensorOps, sum_to
from ..ops.registry import OPS, Meta

enabled = True  # set to False to run every VJP rule on tensors (debugging aid)
MAX_CACHED = 4096  # the cache is cleared when it reaches this many signatures

_CACHE: dict = {}  # signature -> plan function, or False (not plannable)
_Tensor = None  # eager.tensor.Tensor, received through bind()
_ids = itertools.count()


def bind(tensor_class) -> None:
    """Receive eager.tensor.Tensor (called once, by eager.factories' wiring block): the compiled
    code checks saved operands against it and wraps results with its ``_make``."""
    global _Tensor
    _Tensor = tensor_class


class NotCompilable(Exception):
    """Raised while recording a rule that a plan cannot express."""


def lookup(node, g):
    """The plan for backward node ``node`` receiving gradient ``g``, or None."""
    attrs = node._attrs
    d = g._data
    try:
        key = (
            node._op.name,
            node._needs,
            node._shapes,
            d.shape,
            d.dtype,
            attrs_key(attrs) if attrs else (),
        )
        plan = _CACHE.get(key)
    except TypeError:  # an unhashable attr (an index array, a list...)
        return None
    if plan is None:
        try:
            plan = _build(node, d.shape, d.dtype)
        except Exception:  # noqa: BLE001 -- any failure: the rules run on tensors
            plan = False
        if len(_CACHE) >= MAX_CACHED:
            _CACHE.clear()
        _CACHE[key] = plan
    return plan or None


def attrs_key(attrs: dict) -> tuple:
    """The attrs part of a signature: names, value types and values (``1`` and ``1.0``
    are different signatures; a NaN matches a NaN).  Raises TypeError for an
    unhashable value."""
    return tuple(
        [
            (k, v.__class__, "nan" if v.__class__ is float and v != v else v)
            for k, v in attrs.items()
        ]
    )


def clear() -> None:
    """Forget every compiled plan (they are rebuilt on demand)."""
    _CACHE.clear()


def cache_size() -> int:
    return len(_CACHE)


# ---------------------------------------------------------------------------
# recording


class _Step:
    __slots__ = ("name", "fname", "args", "kwargs", "meta", "ufunc")

    def __init__(self, name, fname, args, kwargs, meta, ufunc) -> None:
        self.name, self.fname, self.args, self.kwargs = name, fname, args, kwargs
        self.meta, self.ufunc = meta, ufunc


class _Recorder:
    def __init__(self) -> None:
        self.steps: list = []
        self.env: dict = {}
        self.inputs: dict = {}  # name of g, out, x<i> -> shape

    def const(self, value) -> str:
        name = f"c{len(self.env)}"
        if isinstance(value, np.ndarray):
            value = value.copy()
            value.flags.writeable = False
        self.env[name] = value
        return name

    def emit(self, op: str, names: list, attrs: dict, meta: Meta) -> "RuleTracer":
        opdef = OPS[op]
        fname = f"f_{op}"
        fn = getattr(opdef.forward, "raw", opdef.forward)
        self.env.setdefault(fname, fn)
        kwargs = []
        for k, v in attrs.items():
            if not k.isidentifier():
                raise NotCompilable(f"attr name {k!r}")
            kwargs.append(f"{k}={self.const(v)}")
        # a plain numpy ufunc of all its operands can write into a dead temporary (below)
        ufunc = isinstance(fn, np.ufunc) and not attrs and fn.nin == len(names) and fn.nout == 1
        name = f"t{len(self.steps)}"
        self.steps.append(_Step(name, fname, list(names), kwargs, meta, ufunc))
        return RuleTracer(self, name, meta.shape, meta.dtype)

    def shape_of(self, name: str) -> tuple:
        if name[0] == "t":
            return self.steps[int(name[1:])].meta.shape
        if name[0] == "c":
            return np.shape(self.env[name])
        return self.inputs[name]

    def lines(self, results: list) -> list:
        """The steps as source lines.  An elementwise ufunc whose operand is a temporary
        of the output's shape and dtype, fresh (a ufunc result, not a view) and used for
        the last time, writes its result into that operand's buffer (``out=``): what
        numpy's own temporary elision does for ``a * b + c``; one 8 MB allocation less
        per reuse for W2's chain rule.  The values are the same either way, and so is
        the result's memory layout (which decides the order of a later sum), because
        the reuse happens only when every other full-size operand has the temporary's
        strides (checked when the plan runs); other operands must be 0-d."""
        last = {}
        for k, st in enumerate(self.steps):
            for a in st.args:
                last[a] = k
        for r in results:
            if r is not None:
                last[r] = len(self.steps)  # returned: alive to the end
        fresh = set()  # temporaries that own their buffer
        out = []
        for k, st in enumerate(self.steps):
            call_args = list(st.args)
            target = None
            if st.ufunc and st.meta.shape != ():
                for a in st.args:
                    if a in fresh and last.get(a) == k:
                        m = self.meta_of(a)
                        if m.shape == st.meta.shape and m.dtype == st.meta.dtype:
                            target = a
                            break
            guard = []
            if target is not None:
                for a in st.args:
                    if a == target:
                        continue
                    shp = self.shape_of(a)
                    if shp == st.meta.shape:
                        guard.append(f"{a}.strides == {target}.strides")
                    elif shp != ():
                        target = None  # a broadcast operand: leave the layout to numpy
                        break
            if not st.ufunc:  # a reshape/expand/index may return a view of its input:
                fresh.difference_update(st.args)  # that buffer is no longer ours alone
            call = f"{st.fname}({', '.join(call_args + st.kwargs)})"
            if target is not None:
                fresh.discard(target)
                reuse = f"{st.fname}({', '.join(call_args + [f'out={target}'] + st.kwargs)})"
                call = f"{reuse} if {' and '.join(guard)} else {call}" if guard else reuse
            if st.meta.shape == ():  # numpy returns scalars for 0-d results
                call = f"asarray({call})"
            elif st.ufunc:
                fresh.add(st.name)
            out.append(f"    {st.name} = {call}")
        return out

    def meta_of(self, name: str) -> Meta:
        return self.steps[int(name[1:])].meta


class RuleTracer(TensorOps):
    """A symbolic value while a VJP rule is recorded into a plan."""

    __slots__ = ("_rec", "_name", "_shape", "_dtype")
    _priority = 3

    def __init__(self, rec: _Recorder, name: str, shape: tuple, dtype: np.dtype) -> None:
        self._rec = rec
        self._name = name
        self._shape = tuple(shape)
        self._dtype = np.dtype(dtype)
        if name[0] not in "tc":
            rec.inputs[name] = self._shape

    def _apply(self, op: str, gname: str, operands: tuple, attrs: dict) -> "RuleTracer":
        rec = self._rec
        names = []
        metas = []
        for o in operands:
            if o.__class__ is RuleTracer:
                if o._rec is not rec:
                    raise NotCompilable("a value of another recording")
                names.append(o._name)
                metas.append(Meta(o._shape, o._dtype))
            elif isinstance(o, (np.ndarray, np.generic)):
                a = np.asarray(o)
                names.append(rec.const(a))
                metas.append(Meta(a.shape, a.dtype))
            else:  # an eager tensor or anything else: keep the rule on tensors
                raise NotCompilable(f"operand of type {type(o).__name__}")
        meta = OPS[op].shape(*metas, **attrs)
        return rec.emit(op, names, attrs, meta)

    def _wrap_const(self, arr: np.ndarray) -> "RuleTracer":
        arr = np.asarray(arr)
        return RuleTracer(self._rec, self._rec.const(arr), arr.shape, arr.dtype)

    @property
    def _npdtype(self) -> np.dtype:
        return self._dtype

    @property
    def shape(self) -> Size:
        return Size(self._shape)

    def size(self, dim=None):
        return Size(self._shape) if dim is None else self._shape[dim]

    @property
    def dtype(self):
        return D.FROM_NP[self._dtype]

    @property
    def ndim(self) -> int:
        return len(self._shape)

    def dim(self) -> int:
        return len(self._shape)

    def numel(self) -> int:
        return int(np.prod(self._shape, dtype=np.int64))

    @property
    def requires_grad(self) -> bool:
        return False

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def _concrete(self, *args, **kwargs):
        raise NotCompilable("the rule needs a concrete value")

    __bool__ = __float__ = __int__ = __index__ = __complex__ = _concrete
    item = tolist = numpy = __array__ = __iter__ = _concrete


# ---------------------------------------------------------------------------
# building


def _build(node, gshape: tuple, gdtype: np.dtype):
    op = node._op
    rec = _Recorder()
    g = RuleTracer(rec, "g", gshape, gdtype)
    out = None
    if node._out is not None:
        out = RuleTracer(rec, "out", node._out.shape, node._out.dtype)
    ins = []
    loaded = []
    for i, (o, (shape, dtype)) in enumerate(zip(node._saved, node._shapes)):
        if o is None:
            ins.append(Meta(shape, dtype))
        else:
            ins.append(RuleTracer(rec, f"x{i}", shape, dtype))
            loaded.append(i)
    rules = op.vjp
    attrs = node._attrs
    results = []
    for i, need in enumerate(node._needs):
        if not need:
            results.append(None)
            continue
        r = rules[i](g, out, *ins, **attrs) if attrs else rules[i](g, out, *ins)
        if r.__class__ is not RuleTracer or r._rec is not rec:
            raise NotCompilable(f"rule {i} of {op.name} returned {type(r).__name__}")
        shape, dtype = node._shapes[i]
        if r._shape != tuple(shape):
            r = sum_to(r, shape)
        if r._dtype != dtype:
            r = r.to(dtype)
        results.append(r._name)
    lines = ["def plan(node, G):", "    g = G._data"]
    if loaded:
        lines += ["    S = node._saved", "    V = node._versions"]
    for i in loaded:  # a saved tensor modified in place since: the error, as on tensors
        lines += [
            f"    x{i} = S[{i}]",
            f"    if x{i}.__class__ is T:",
            f"        if x{i}._version[0] != V[{i}]:",
            f"            node._version_error(x{i}, V[{i}])",
            f"        x{i} = x{i}._data",
            "    else:",
            f"        x{i} = asarray(x{i})",
        ]
    if out is not None:
        lines += [
            "    if node._outv[0] != 0:",
            "        node._output(T)",  # raises the in-place modification error
            "    out = node._out",
        ]
    lines.extend(rec.lines(results))
    ret = []
    for name in results:
        if name is None:
            ret.append("None")
        elif name == "g":
            ret.append("G")  # the incoming gradient itself: the engine sees it is shared
        elif name[0] in "xc" or name == "out":
            ret.append(f"make({name}.copy())")  # never hand out a saved buffer or a constant
        else:
            ret.append(f"make({name})")
    lines.append(f"    return [{', '.join(ret)}]")
    src = "\n".join(lines) + "\n"
    env = dict(rec.env)
    env.update(T=_Tensor, make=_Tensor._make, asarray=np.asarray)
    code = builtins.compile(src, f"<vjp plan {next(_ids)}: {op.name}>", "exec")
    exec(code, env)  # noqa: S102 -- our own generated source, from the registry's rules
    plan = env["plan"]
    plan.source = src
    return plan


def source(node, g) -> str:
    """The generated source of ``node``'s plan for gradient ``g`` (for docs and debugging)."""
    plan = lookup(node, g)
    if plan is None:
        raise ValueError(
            f"{type(node).__name__} has no plan for this signature (its rules run on tensors)"
        )
    return plan.source
