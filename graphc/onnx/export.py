"""ONNX export: the optimized graph of a compiled function as an ``onnx.ModelProto``.

The exporter walks the graph graphc compiles for the example arguments (the
``optimized`` stage, after every pass) in its deterministic topological order and asks
each node's op record how it exports (its ``onnx`` field, see
:mod:`eager.ops.onnx_rules`); there is no second table of ops here.  Only this module
imports ``onnx``, and only when an export runs: ``import graphc`` does not.
"""

from __future__ import annotations

import re
from typing import Any, Callable, NoReturn, Optional

import numpy as np

import eager
from eager.interop import OPS, Meta, data_of

from ..errors import UnsupportedOpError
from ..ir import Graph
from ..ir.loops import LOOP_OPS

#: the ONNX opset exported when ``opset`` is not given (ONNX Runtime 1.14 and later run it)
DEFAULT_OPSET = 18
MIN_OPSET = 18

_EXTRA_HINT = (
    "ONNX export needs the optional 'onnx' extra: pip install 'eager-graphc[onnx]' "
    "(or pip install onnx onnxruntime)"
)


def _onnx() -> Any:
    """The ``onnx`` package, or an ImportError naming the extra."""
    try:
        import onnx
    except ImportError as e:
        raise ImportError(_EXTRA_HINT) from e
    return onnx


def _utf8(s: Any) -> str:
    """``s`` as a string protobuf accepts (lone surrogates replaced)."""
    return str(s).encode("utf-8", "replace").decode("utf-8")


_BAD = re.compile(r"[^A-Za-z0-9_.]")


def _sanitize(name: str) -> str:
    s = _BAD.sub("_", _utf8(name)) or "_"
    return s if not s[0].isdigit() else "_" + s


class _Builder:
    """What an op's export rule sees (duck-typed; eager never imports this class): ``op``,
    ``const``, ``cast`` and ``fail``.  It collects ONNX nodes and initializers."""

    def __init__(
        self,
        onnx: Any,
        used: set,
        where: str = "",
        sub: bool = False,
        opset: int = 18,
        single_ops: bool = True,
    ) -> None:
        self.onnx = onnx
        self.opset = opset  # the model's opset (which single operators exist)
        self.single_ops = single_ops  # write recognized regions as one operator
        self.sub = sub  # a loop body: constants are Constant nodes (no initializers)
        self.nodes: list = []
        self.inits: list = []
        self.used = used  # every value name in the model (one namespace for subgraphs)
        self.where = where  # a body graph's position ("scan body of v12"), for errors
        self.base = "v"
        self.src = ""
        self.opname = ""

    def fresh(self, base: str) -> str:
        name = _sanitize(base)
        if name not in self.used:
            self.used.add(name)
            return name
        k = 1
        while f"{name}_{k}" in self.used:
            k += 1
        self.used.add(f"{name}_{k}")
        return f"{name}_{k}"

    def op(self, op_type: str, inputs: list, outputs: int = 1, **attrs: Any) -> Any:
        """Add one ONNX node; its result name (a list of ``outputs`` names when > 1)."""
        outs = [self.fresh(f"{self.base}_{op_type}") for _ in range(outputs)]
        node = self.onnx.helper.make_node(
            op_type,
            list(inputs),
            outs,
            name=self.fresh(f"{self.base}_{op_type}_node"),
            doc_string=self.src,
            **attrs,
        )
        self.nodes.append(node)
        return outs[0] if outputs == 1 else outs

    def const(self, value: Any) -> str:
        """A constant (an initializer) holding ``value``."""
        name = self.fresh(f"{self.base}_const")
        self.store(np.array(value, order="C"), name)
        return name

    def store(self, arr: np.ndarray, name: str) -> None:
        """``arr`` as the value ``name``: an initializer, or a Constant node in a body."""
        tensor = self.onnx.numpy_helper.from_array(np.array(arr, order="C"), name)
        if self.sub:
            self.nodes.append(
                self.onnx.helper.make_node(
                    "Constant", [], [name], name=self.fresh(f"{name}_node"), value=tensor
                )
            )
        else:
            self.inits.append(tensor)

    def cast(self, name: str, from_dtype: Any, to_dtype: Any) -> str:
        """``name`` cast from ``from_dtype`` to ``to_dtype`` (itself when they agree)."""
        if np.dtype(from_dtype) == np.dtype(to_dtype):
            return name
        return self.op("Cast", [name], to=_tensor_type(self.onnx, to_dtype))

    def scan(self, init: list, xs: list, step: Callable, reverse: bool = False) -> list:
        """An ONNX Scan along axis 0 of ``xs``: ``init`` and ``xs`` are (name, Meta) pairs;
        ``step(sub_builder, states, slices)`` returns (new states, ys) as (name, Meta)
        pairs.  Its results: the final states, then each ys stacked."""
        onnx = self.onnx
        sub = _Builder(
            onnx,
            self.used,
            where=self.where,
            sub=True,
            opset=self.opset,
            single_ops=self.single_ops,
        )
        sub.src, sub.opname, sub.base = self.src, self.opname, self.base
        ins, states, slices = [], [], []
        for _, m in init:
            n = sub.fresh(f"{self.base}_state")
            ins.append(_value_info(onnx, n, m.shape, m.dtype))
            states.append(n)
        for _, m in xs:
            n = sub.fresh(f"{self.base}_slice")
            ins.append(_value_info(onnx, n, m.shape[1:], m.dtype))
            slices.append(n)
        new, ys = step(sub, states, slices)
        outs = []
        for nm, m in list(new) + list(ys):
            o = sub.fresh(f"{self.base}_body_out")
            sub.nodes.append(
                onnx.helper.make_node("Identity", [nm], [o], name=sub.fresh(f"{o}_node"))
            )
            outs.append(_value_info(onnx, o, m.shape, m.dtype))
        body = onnx.helper.make_graph(sub.nodes, f"{self.base}_scan_body", ins, outs)
        kw: dict = {}
        if reverse:
            kw["scan_input_directions"] = [1] * len(xs)
            if ys:
                kw["scan_output_directions"] = [1] * len(ys)
        res = self.op(
            "Scan",
            [n for n, _ in init] + [n for n, _ in xs],
            outputs=len(outs),
            body=body,
            num_scan_inputs=len(xs),
            **kw,
        )
        return res if isinstance(res, list) else [res]

    def fail(self, message: str) -> NoReturn:
        """Refuse the node being exported, naming its op and source line."""
        raise UnsupportedOpError(
            f"export_onnx: cannot export op {self.opname!r}{self.where} at "
            f"{self.src or '<unknown source line>'}: {message}"
        )


def _tensor_type(onnx: Any, dtype: Any) -> int:
    dt = np.dtype(dtype)
    try:
        return int(onnx.helper.np_dtype_to_tensor_dtype(dt))
    except (KeyError, TypeError, ValueError):
        raise UnsupportedOpError(f"export_onnx: dtype {dt.name} has no ONNX type") from None


def _value_info(onnx: Any, name: str, shape: tuple, dtype: Any, doc: str = "") -> Any:
    vi = onnx.helper.make_tensor_value_info(name, _tensor_type(onnx, dtype), list(shape))
    if doc:
        vi.doc_string = _utf8(doc)
    return vi


def _rename_result(b: _Builder, start: int, result: str, want: str) -> str:
    """Give the last value a rule made the node's own name ``want``."""
    for node in b.nodes[start:]:
        if result in node.output:
            for n in b.nodes[start:]:
                for i, x in enumerate(n.input):
                    if x == result:
                        n.input[i] = want
                for i, x in enumerate(n.output):
                    if x == result:
                        n.output[i] = want
            b.used.add(want)
            return want
    # the rule returned an existing value (an operand, a constant): name it with Identity
    b.nodes.append(
        b.onnx.helper.make_node(
            "Identity", [result], [want], name=b.fresh(f"{want}_node"), doc_string=b.src
        )
    )
    b.used.add(want)
    return want


def _export_node(b: _Builder, g: Graph, nid: int, names: dict, sub: Callable) -> None:
    d = g.nx.nodes[nid]
    op = d["op"]
    b.src = _utf8(d.get("src") or "")
    b.opname = op
    want = b.fresh(f"v{nid}")
    b.base = want
    start = len(b.nodes)
    if op == "const":
        b.store(np.asarray(d["attrs"]["value"]), want)
        names[nid] = want
        return
    if op in LOOP_OPS:
        names[nid] = sub(b, g, nid, names, want)  # the loop's results, a list
        return
    if op == "loop_out":
        names[nid] = _rename_result(b, start, sub(b, g, nid, names, want), want)
        return
    rec = OPS.get(op)
    if rec is None:
        b.fail("not an op of the registry")
    rule = rec.onnx
    if rule is None:
        b.fail("its op record has no ONNX export rule")
    if type(rule).__name__ == "NoOnnx":
        b.fail(rule.reason)
    xs = [names[o] for o in d["operands"]]
    ms = [g.meta_of(o) for o in d["operands"]]
    out = Meta(d["shape"], d["dtype"])
    if isinstance(rule, str):
        ins = [b.cast(x, m.dtype, out.dtype) for x, m in zip(xs, ms)]
        result = b.op(rule, ins)
    else:
        result = rule(b, xs, ms, out, **d["attrs"])
    names[nid] = _rename_result(b, start, result, want)


def _walk(b: _Builder, g: Graph, names: dict, sub: Callable) -> None:
    """Every non-input node in deterministic topological order (no recursion: loop
    bodies are exported by ``sub`` with a builder of their own).  Regions recognized as
    one ONNX operator (softmax, layer norm... see :mod:`graphc.onnx.fuse`) are written as
    that operator at their result's place; their interior nodes are skipped."""
    regions: dict = {}
    skip: set = set()
    if b.single_ops:
        from .fuse import single_operators

        regions, skip = single_operators(g, b.opset)
    for nid in g.topo_order():
        if g.nx.nodes[nid]["op"] == "input" or nid in skip:
            continue
        if nid in regions:
            _export_region(b, g, nid, regions[nid], names)
            continue
        _export_node(b, g, nid, names, sub)


def _export_region(b: _Builder, g: Graph, nid: int, r: Any, names: dict) -> None:
    """One recognized region as its single ONNX operator, named as its result node."""
    d = g.nx.nodes[nid]
    b.src = _utf8(d.get("src") or "")
    b.opname = d["op"]
    want = b.fresh(f"v{nid}")
    b.base = want
    start = len(b.nodes)
    ins = [names[i] if i >= 0 else b.const(r.const_inputs[k]) for k, i in enumerate(r.inputs)]
    names[nid] = _rename_result(b, start, b.op(r.op_type, ins, **r.attrs), want)


def _body(
    b: _Builder, body: Graph, outer: dict, want: str, what: str, lead: list, tail: Any = None
) -> Any:
    """A loop body as an ONNX subgraph: ``lead`` are (name, shape, dtype) inputs before the
    body's own; ``outer`` maps body input positions to outer values (consts, read from
    the enclosing scope); ``tail(sub, bnames, outs)`` may add outputs in front."""
    onnx = b.onnx
    sub = _Builder(
        onnx,
        b.used,
        where=f" in the {what} of {want}",
        sub=True,
        opset=b.opset,
        single_ops=b.single_ops,
    )
    ins = [_value_info(onnx, n, s_, dt) for n, s_, dt in lead]
    bnames: dict = {}
    for i, nid in enumerate(body.inputs):
        if i in outer:
            bnames[nid] = outer[i]
            continue
        d = body.nx.nodes[nid]
        nm = sub.fresh(f"{want}_{body.input_names[i]}")
        bnames[nid] = nm
        ins.append(_value_info(onnx, nm, d["shape"], d["dtype"]))
    _walk(sub, body, bnames, _loop)
    outs_names = [bnames[o] for o in body.outputs]
    lead_outs = tail(sub, bnames, outs_names) if tail is not None else []
    outs = []
    for nm_in, (shape, dtype) in lead_outs + [
        (bnames[o], (body.nx.nodes[o]["shape"], body.nx.nodes[o]["dtype"])) for o in body.outputs
    ]:
        nm = sub.fresh(f"{want}_{what.split()[0]}_out")
        sub.nodes.append(
            onnx.helper.make_node("Identity", [nm_in], [nm], name=sub.fresh(f"{nm}_node"))
        )
        outs.append(_value_info(onnx, nm, shape, dtype))
    return onnx.helper.make_graph(sub.nodes, f"{want}_{what.split()[0]}", ins, outs)


def _inline(b: _Builder, g: Graph, inputs: list) -> list:
    """Export graph ``g`` into ``b`` with its inputs bound to ``inputs``; its outputs."""
    names = dict(zip(g.inputs, inputs))
    _walk(b, g, names, _loop)
    return [names[o] for o in g.outputs]


def _loop(b: _Builder, g: Graph, nid: int, names: dict, want: str) -> Any:
    """A ``scan``/``while`` node as ONNX Scan/Loop (its results: a list of names), or a
    ``loop_out`` as an Identity of the loop's result."""
    from ..ir.loops import result_metas

    d = g.nx.nodes[nid]
    if d["op"] == "loop_out":
        return b.op("Identity", [names[d["operands"][0]][d["attrs"]["index"]]])
    a = d["attrs"]
    ops = d["operands"]
    metas = result_metas(d)
    if d["op"] == "scan":
        C, K = a["num_consts"], a["num_carry"]
        consts = {i: names[o] for i, o in enumerate(ops[:C])}
        carries = [names[o] for o in ops[C : C + K]]
        xs = [names[o] for o in ops[C + K :]]
        n_ys = len(metas) - K
        if a["length"] == 0:  # no trips (ONNX Runtime refuses a Scan of length 0)
            return [b.op("Identity", [c]) for c in carries] + [
                b.const(np.zeros(m.shape, m.dtype)) for m in metas[K:]
            ]
        if xs:
            body = _body(b, a["body"], consts, want, "scan body", [])
            kw: dict = {}
            if a["reverse"]:
                kw["scan_input_directions"] = [1] * len(xs)
                if n_ys:
                    kw["scan_output_directions"] = [1] * n_ys
            res = b.op(
                "Scan", carries + xs, outputs=len(metas), body=body, num_scan_inputs=len(xs), **kw
            )
            return res if isinstance(res, list) else [res]
        # no xs (fori_loop): a Loop of ``length`` trips, its scan outputs stacked
        it = b.fresh(f"{want}_iter")
        cin = b.fresh(f"{want}_cond_in")

        def keep_going(sub, bnames, outs):
            return [(cin, ((), "bool"))]

        body = _body(
            b,
            a["body"],
            consts,
            want,
            "loop body",
            [(it, (), "int64"), (cin, (), "bool")],
            keep_going,
        )
        trips = b.const(np.array(a["length"], np.int64))
        true = b.const(np.array(True))
        res = b.op("Loop", [trips, true] + carries, outputs=len(metas), body=body)
        res = res if isinstance(res, list) else [res]
        if a["reverse"] and n_ys:
            for k in range(K, len(res)):  # ys in the order of the xs they belong to
                res[k] = b.op(
                    "Slice",
                    [
                        res[k],
                        b.const(np.array([-1], np.int64)),
                        b.const(np.array([np.iinfo(np.int64).min], np.int64)),
                        b.const(np.array([0], np.int64)),
                        b.const(np.array([-1], np.int64)),
                    ],
                )
        return res
    # while: the condition once outside (on the initial carries), then after each body
    Cc, Cb, K = a["num_cond_consts"], a["num_body_consts"], a["num_carry"]
    cconsts = [names[o] for o in ops[:Cc]]
    bconsts = {i: names[o] for i, o in enumerate(ops[Cc : Cc + Cb])}
    carries = [names[o] for o in ops[Cc + Cb :]]
    first = _inline(b, a["cond"], cconsts + carries)[0]
    it = b.fresh(f"{want}_iter")
    cin = b.fresh(f"{want}_cond_in")

    def again(sub, bnames, outs):
        return [(_inline(sub, a["cond"], cconsts + outs)[0], ((), "bool"))]

    body = _body(
        b, a["body"], bconsts, want, "while body", [(it, (), "int64"), (cin, (), "bool")], again
    )
    res = b.op("Loop", ["", first] + carries, outputs=K, body=body)
    return res if isinstance(res, list) else [res]


def graph_to_model(
    g: Graph,
    *,
    input_names: list,
    output_names: list,
    defaults: Optional[dict] = None,
    constants: Optional[dict] = None,
    name: str = "graphc",
    opset: Optional[int] = None,
    doc: str = "",
    single_operators: bool = True,
) -> Any:
    """An ``onnx.ModelProto`` computing graph ``g``: graph input ``k`` named
    ``input_names[k]``, output ``k`` ``output_names[k]``; ``defaults`` maps input
    positions to arrays stored as initializers of those inputs (overridable defaults, as
    ONNX allows), ``constants`` input positions to arrays that become initializers and
    are not graph inputs.  ``single_operators`` writes the regions
    :mod:`graphc.onnx.fuse` recognizes (softmax, log-softmax, layer norm, GELU) as one ONNX
    operator each; ``False`` keeps every primitive."""
    onnx = _onnx()
    latest = int(onnx.defs.onnx_opset_version())
    opset = DEFAULT_OPSET if opset is None else opset
    if type(opset) is not int or not MIN_OPSET <= opset <= latest:
        raise ValueError(
            f"export_onnx: opset must be an int from {MIN_OPSET} to {latest} (the installed "
            f"onnx's newest), got {opset!r}"
        )
    used: set = set()
    b = _Builder(onnx, used, opset=opset, single_ops=single_operators)
    names: dict = {}
    inputs = []
    for k, nid in enumerate(g.inputs):
        nm = b.fresh(input_names[k])
        names[nid] = nm
        d = g.nx.nodes[nid]
        if constants and k in constants:
            arr = np.array(constants[k], dtype=d["dtype"], order="C")
            b.inits.append(onnx.numpy_helper.from_array(arr, nm))
            continue
        inputs.append(_value_info(onnx, nm, d["shape"], d["dtype"], d.get("src") or ""))
        if defaults and k in defaults:
            arr = np.array(defaults[k], dtype=d["dtype"], order="C")
            b.inits.append(onnx.numpy_helper.from_array(arr, nm))
    _walk(b, g, names, _loop)
    outputs = []
    for k, nid in enumerate(g.outputs):
        d = g.nx.nodes[nid]
        nm = b.fresh(output_names[k])
        b.src = _utf8(d.get("src") or "")
        b.nodes.append(
            onnx.helper.make_node("Identity", [names[nid]], [nm], name=b.fresh(f"{nm}_node"))
        )
        outputs.append(_value_info(onnx, nm, d["shape"], d["dtype"]))
    graph = onnx.helper.make_graph(
        b.nodes, _sanitize(name), inputs, outputs, initializer=b.inits, doc_string=_utf8(doc)
    )
    opsets = [onnx.helper.make_opsetid("", opset)]
    ir = onnx.helper.find_min_ir_version_for(opsets, True)
    model = onnx.helper.make_model(
        graph, opset_imports=opsets, producer_name="graphc", ir_version=max(ir, 8)
    )
    from .._version import __version__

    model.producer_version = __version__
    onnx.checker.check_model(model, full_check=True)
    return model


def _graph_pos(tr: Any) -> list:
    """Graph input position of each dynamic leaf (a leaf whose .grad is traced is followed
    by a second graph input, that .grad)."""
    pos, k = [], 0
    for spec in tr.in_specs:
        pos.append(k)
        k += 2 if spec.has_grad else 1
    return pos


def _optimizer_inputs(tr: Any) -> set:
    """Positions (in ``tr.captured``) of the optimizer state tensors and learning rates the
    trace lifted; refuses a step that creates optimizer state (an optimizer's first step)."""
    from ..capture import LrCaptured, LrTensorCaptured

    opts = [getattr(guard, "__self__", None) for guard in tr.opt_guards]
    if tr.state_writes or tr.state_sets:
        fresh = [
            oc.name
            for oc in opts
            if oc is not None and any(not oc.opt.state.get(cap.tensor) for _, _, cap in oc.params)
        ]
        names = ", ".join(fresh) or "an optimizer"
        raise ValueError(
            f"export_onnx: this call is the first step of {names}: it creates the optimizer's "
            "state (exp_avg, momentum_buffer, step...), so the model would have other inputs "
            "than every later step. Run one step first (eagerly or compiled), then export: "
            "the state tensors become graph inputs and '<name>_updated' outputs"
        )
    state_ids: set = set()
    for oc in opts:
        if oc is not None:
            for st in oc.opt.state.values():
                state_ids.update(id(v) for v in st.values() if isinstance(v, eager.Tensor))
    return {
        k
        for k, cap in enumerate(tr.captured)
        if isinstance(cap, (LrCaptured, LrTensorCaptured)) or id(cap.tensor) in state_ids
    }


def _output_names(tr: Any, in_names: list) -> list:
    """ONNX output names: the user outputs (``output`` or ``output_k``), then each
    argument written in place (``<input>_updated``) and each ``.grad`` set
    (``<input>_grad``), as the trace lists them."""
    n_out = len(tr.graph.outputs)
    names = [""] * n_out
    special = {}
    gpos = _graph_pos(tr)
    for idx, pos in tr.mutated_inputs:
        special[pos] = f"{in_names[gpos[idx]]}_updated"
    for idx, pos in tr.grad_writes:  # '<x>_grad_updated' when the old .grad is input '<x>_grad'
        nm = f"{in_names[gpos[idx]]}_grad"
        special[pos] = f"{nm}_updated" if nm in in_names else nm
    user = [p for p in range(n_out) if p not in special]
    for k, p in enumerate(user):
        names[p] = "output" if len(user) == 1 else f"output_{k}"
    for p, nm in special.items():
        names[p] = nm
    return names


def export_onnx(
    fn: Callable,
    *example_args: Any,
    path: Any = None,
    opset: Optional[int] = None,
    keep_initializers_as_inputs: bool = False,
    single_operators: bool = True,
) -> Any:
    """Export what ``graphc.compile(fn)`` runs for ``example_args`` as an ONNX model.

    Returns an ``onnx.ModelProto`` (and writes it to ``path`` when given).  The model is
    the optimized graph graphc compiles for the example arguments' shapes and dtypes:
    graph inputs are the arrays of the arguments (pytrees flattened, named by their paths:
    ``x``, ``params_w``...).  The tensors the function reads by name (module parameters,
    buffers) become initializers holding their current values, as ``torch.onnx.export``
    stores parameters; one the function writes in place (a training step's weights), or
    every one with ``keep_initializers_as_inputs=True``, is also a graph input (the
    initializer is its overridable default).  Outputs are the
    function's arrays (``output`` or ``output_0``, ``output_1``...), then each argument it
    updates in place (``<name>_updated``: a training step's new parameters) and each
    ``.grad`` it sets (``<name>_grad``).  Node values keep graphc's value names (``v12``
    is ``%12`` in ``cf.ir(..., stage="optimized")``), nodes carry their source line as
    ``doc_string``.  ``fn`` may be a plain function, a module, a
    :class:`graphc.CompiledFunction` (its ``static_argnums`` and ``opt_level`` are used)
    or a transform such as ``graphc.grad(f)``.  ``opset`` defaults to 18.
    ``single_operators`` (default True) writes the primitives graphc records for
    softmax, log-softmax and layer norm (and GELU from opset 20) as ONNX's single
    ``Softmax``, ``LogSoftmax``, ``LayerNormalization`` (``Gelu``) operator when the region
    is intact in the optimized graph (its intermediate values used nowhere else);
    ``False`` exports every primitive.

    Raises :class:`graphc.UnsupportedOpError` naming the op and its source line when an op
    has no ONNX form (random draws, advanced indexing), and ImportError naming the
    ``onnx`` extra when onnx is not installed.

    Example::

        model = graphc.export_onnx(lambda x, w: (x @ w).relu(), x, w, path="mlp.onnx")
    """
    _onnx()
    from ..api import CompiledFunction

    if isinstance(fn, CompiledFunction):
        cf = CompiledFunction(
            fn.__wrapped__,
            static_argnums=fn.static_argnums,
            opt_level=fn.opt_level,
            backend="interpreter",
            disable_passes=fn.disable_passes,
        )
    else:
        cf = CompiledFunction(fn, backend="interpreter")
    entry = cf._entry_for(example_args)
    tr = entry.trace
    g = entry.stages["optimized"]
    if not g.outputs:
        raise ValueError(
            f"export_onnx: {getattr(cf, '__name__', 'the function')} returns no arrays and "
            "updates none in place: an ONNX model needs at least one output"
        )
    in_names = list(g.input_names)
    defaults: dict = {}
    constants: dict = {}
    written = {i for i, _ in tr.mutated_inputs} | {i for i, _ in tr.grad_writes}
    opt_inputs = _optimizer_inputs(tr)
    gpos = _graph_pos(tr)
    for k, cap in enumerate(tr.captured):
        t = cap.current(example_args)
        idx = tr.n_args + k
        pos = gpos[idx]
        if isinstance(t, eager.Tensor):
            keep = keep_initializers_as_inputs or idx in written or k in opt_inputs
            (defaults if keep else constants)[pos] = np.array(data_of(t))
            if tr.in_specs[idx].has_grad:  # its .grad, as it is now: an input too
                g_now = t.grad
                defaults[pos + 1] = (
                    np.array(data_of(g_now)) if g_now is not None else np.zeros(tuple(t.shape))
                )
    model = graph_to_model(
        g,
        input_names=in_names,
        output_names=_output_names(tr, in_names),
        defaults=defaults,
        constants=constants,
        name=getattr(cf, "__name__", "graphc"),
        opset=opset,
        single_operators=single_operators,
        doc=f"graphc.export_onnx of {getattr(cf, '__name__', '?')}",
    )
    if path is not None:
        _onnx().save_model(model, path)
    return model


def _install() -> None:
    from ..inspection import Inspection

    Inspection._export_onnx = staticmethod(export_onnx)


_install()
