"""Single ONNX operators for the primitive regions graphc records for softmax,
log-softmax, layer norm and GELU.

graphc has no fused softmax op: ``F.softmax`` records ``max, sub, exp, sum, div``, and
passes may rewrite any of those nodes.  The exporter therefore does not trust where a
region came from; it *recognizes* a region by its exact structure in the graph it
exports (the optimized one), every time:

* ``Softmax``: ``e = exp(x - max(x, a, keepdim)); e / sum(e, a, keepdim)``;
* ``LogSoftmax``: ``d = x - max(x, a, keepdim); d - log(sum(exp(d), a, keepdim))``;
* ``LayerNormalization``: ``c = x - mean(x, A, keepdim); c * (1 / sqrt(mean(c * c, A,
  keepdim) + eps))`` over the trailing axes ``A``, then optionally ``* w`` and ``+ b``
  with ``w``/``b`` of the normalized shape, and ``eps`` exactly a float32 (the type of
  ONNX's ``epsilon`` attribute: a float64 graph's ``1e-5`` is not, and stays primitive);
* ``Gelu`` (opset 20 and later): ``(x * 0.5) * (erf(x * 0.70710677) + 1)``.

A region is replaced only when every interior value (``max``, ``exp``...) has no user
outside the region and is not a graph output, all values share one floating dtype and
no dimension is 0; otherwise the primitives are exported (always correct).  Matching
the structure is what makes the rewrite sound: whatever computes exactly these
primitives computes the operator, whoever wrote it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Set, Tuple

import numpy as np

from ..ir import Graph

#: the operators :func:`single_operators` can produce, with the opset each needs
SINGLE_OPERATORS = {"Softmax": 13, "LogSoftmax": 13, "LayerNormalization": 17, "Gelu": 20}


class Region:
    """One recognized region: ``op_type`` with ``inputs`` (graph node ids, in the
    operator's operand order; ``-1`` where ``const_inputs`` holds the operand's array),
    ``attrs`` and the ids of the nodes it replaces (``interior``)."""

    __slots__ = ("op_type", "inputs", "attrs", "interior", "const_inputs")

    def __init__(
        self, op_type: str, inputs: list, attrs: dict, interior: set, const_inputs: dict
    ) -> None:
        self.op_type = op_type
        self.inputs = inputs
        self.attrs = attrs
        self.interior = interior
        # operand position -> array, for operands that are not graph values (a scale of ones)
        self.const_inputs = const_inputs


def _users(g: Graph) -> Dict[int, List[int]]:
    uses: Dict[int, List[int]] = {n: [] for n in g.nx.nodes}
    for n, d in g.nx.nodes(data=True):
        for o in d.get("operands", ()):
            uses[o].append(n)
    return uses


class _M:
    """Pattern helpers over one graph."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.uses = _users(g)
        self.outputs = set(g.outputs)

    def node(self, nid: int, op: str) -> Optional[dict]:
        d = self.g.nx.nodes[nid]
        return d if d["op"] == op else None

    def const(self, nid: int) -> Optional[np.ndarray]:
        d = self.g.nx.nodes[nid]
        if d["op"] != "const":
            return None
        return np.asarray(d["attrs"]["value"])

    def is_scalar(self, nid: int, value: float, dtype: Any) -> bool:
        v = self.const(nid)
        if v is None or v.size != 1:
            return False
        return bool(np.asarray(v, dtype=dtype).reshape(()) == np.asarray(value, dtype=dtype))

    def reduce(self, nid: int, op: str) -> Optional[Tuple[int, tuple]]:
        d = self.node(nid, op)
        if d is None or not d["attrs"].get("keepdim"):
            return None
        axes = d["attrs"].get("axis")
        if axes is None:
            return None
        nd = len(self.g.nx.nodes[d["operands"][0]]["shape"])
        if nd == 0:  # a reduction of a 0-d value: no axis to normalize over
            return None
        axes = tuple(sorted(int(a) % nd for a in (axes if isinstance(axes, tuple) else (axes,))))
        return d["operands"][0], axes

    def private(self, interior: Set[int], result: int) -> bool:
        """Every interior value used only inside the region (and not an output)."""
        inside = interior | {result}
        for n in interior:
            if n in self.outputs or any(u not in inside for u in self.uses[n]):
                return False
        return True

    def uniform(self, nids: list) -> Optional[np.dtype]:
        """The one floating dtype of these values (no size-0 dimension), or None."""
        dts = {np.dtype(self.g.nx.nodes[n]["dtype"]) for n in nids}
        if len(dts) != 1:
            return None
        (dt,) = dts
        if dt not in (np.float32, np.float64):
            return None
        if any(0 in tuple(self.g.nx.nodes[n]["shape"]) for n in nids):
            return None
        return dt


def _softmax(m: _M, y: int, d: dict) -> Optional[Region]:
    e, s = d["operands"]
    if m.node(e, "exp") is None:
        return None
    r = m.reduce(s, "sum")
    if r is None or r[0] != e or len(r[1]) != 1:
        return None
    sub = m.node(m.g.nx.nodes[e]["operands"][0], "sub")
    if sub is None:
        return None
    dn = m.g.nx.nodes[e]["operands"][0]
    x, mx = sub["operands"]
    rm = m.reduce(mx, "max")
    if rm is None or rm[0] != x or rm[1] != r[1]:
        return None
    interior = {mx, dn, e, s}
    if not m.private(interior, y) or m.uniform([x, mx, dn, e, s, y]) is None:
        return None
    if tuple(m.g.nx.nodes[x]["shape"]) != tuple(d["shape"]):
        return None
    return Region("Softmax", [x], {"axis": r[1][0]}, interior, {})


def _log_softmax(m: _M, y: int, d: dict) -> Optional[Region]:
    dn, ln = d["operands"]
    sub = m.node(dn, "sub")
    lg = m.node(ln, "log")
    if sub is None or lg is None:
        return None
    x, mx = sub["operands"]
    rm = m.reduce(mx, "max")
    s = lg["operands"][0]
    rs = m.reduce(s, "sum")
    if rm is None or rs is None or rm[0] != x or len(rm[1]) != 1 or rs[1] != rm[1]:
        return None
    e = rs[0]
    de = m.node(e, "exp")
    if de is None or de["operands"][0] != dn:
        return None
    interior = {mx, dn, e, s, ln}
    if not m.private(interior, y) or m.uniform([x, mx, dn, e, s, ln, y]) is None:
        return None
    if tuple(m.g.nx.nodes[x]["shape"]) != tuple(d["shape"]):
        return None
    return Region("LogSoftmax", [x], {"axis": rm[1][0]}, interior, {})


def _normalized(m: _M, n: int) -> Optional[Tuple[int, tuple, float, set]]:
    """``n = c * (1 / sqrt(mean(c*c) + eps))`` with ``c = x - mean(x)``: (x, axes, eps,
    interior ids)."""
    dn = m.node(n, "mul")
    if dn is None:
        return None
    c, inv = dn["operands"]
    di = m.node(inv, "div")
    if di is None or m.node(c, "sub") is None:
        return None
    x, mu = m.g.nx.nodes[c]["operands"]
    rmu = m.reduce(mu, "mean")
    if rmu is None or rmu[0] != x:
        return None
    one, r = di["operands"]
    dt = np.dtype(m.g.nx.nodes[x]["dtype"])
    if not m.is_scalar(one, 1.0, dt) or m.node(r, "sqrt") is None:
        return None
    ve = m.g.nx.nodes[r]["operands"][0]
    da = m.node(ve, "add")
    if da is None:
        return None
    v, eps_n = da["operands"]
    if m.const(v) is not None:
        v, eps_n = eps_n, v
    ev = m.const(eps_n)
    if ev is None or ev.size != 1:
        return None
    rv = m.reduce(v, "mean")
    if rv is None or rv[1] != rmu[1]:
        return None
    sq = m.node(rv[0], "mul")
    if sq is None or list(sq["operands"]) != [c, c]:
        return None
    nd = len(m.g.nx.nodes[x]["shape"])
    axes = rmu[1]
    if not axes or axes != tuple(range(nd - len(axes), nd)):
        return None
    eps = float(np.asarray(ev, dtype=dt).reshape(()))
    if float(np.float32(eps)) != eps:  # ONNX's epsilon attribute is a float32
        return None
    return x, axes, eps, {mu, c, rv[0], v, ve, r, inv}


def _layer_norm(m: _M, y: int, d: dict) -> Optional[Region]:
    """The largest of ``n``, ``n * w``, ``n * w + b`` ending at ``y``."""
    cands = []
    if d["op"] == "add":  # n * w + b
        for t, b in (d["operands"], d["operands"][::-1]):
            dm = m.node(t, "mul")
            if dm is None:
                continue
            for n, w in (dm["operands"], dm["operands"][::-1]):
                cands.append((n, w, b, {n, t}))
    elif d["op"] == "mul":
        cands.append((y, None, None, set()))  # y itself is n
        for n, w in (d["operands"], d["operands"][::-1]):
            cands.append((n, w, None, {n}))
    for n, w, b, extra in cands:
        found = _normalized(m, n)
        if found is None:
            continue
        x, axes, eps, interior = found
        interior = (interior | extra) - {y}
        xshape = tuple(m.g.nx.nodes[x]["shape"])
        norm = xshape[len(xshape) - len(axes) :]
        vals = [x, y] + sorted(interior)
        params = [p for p in (w, b) if p is not None]
        if any(tuple(m.g.nx.nodes[p]["shape"]) != norm for p in params):
            continue
        if params and any(p in interior or p == y for p in params):
            continue
        if not m.private(interior, y) or m.uniform(vals + params) is None:
            continue
        if tuple(d["shape"]) != xshape:
            continue
        dt = np.dtype(m.g.nx.nodes[x]["dtype"])
        consts = {} if w is not None else {1: np.ones(norm, dt)}  # Scale is required
        ins = [x, w if w is not None else -1] + ([b] if b is not None else [])
        attrs = {"axis": len(xshape) - len(axes), "epsilon": eps}
        return Region("LayerNormalization", ins, attrs, interior, consts)
    return None


def _gelu(m: _M, y: int, d: dict) -> Optional[Region]:
    for h, p in (d["operands"], d["operands"][::-1]):
        dh, dp = m.node(h, "mul"), m.node(p, "add")
        if dh is None or dp is None:
            continue
        x = next((o for o in dh["operands"] if m.const(o) is None), None)
        if x is None:
            continue
        dt = np.dtype(m.g.nx.nodes[x]["dtype"])
        half = [o for o in dh["operands"] if o != x]
        if len(half) != 1 or not m.is_scalar(half[0], 0.5, dt):
            continue
        er = next((o for o in dp["operands"] if m.node(o, "erf") is not None), None)
        one = [o for o in dp["operands"] if o != er]
        if er is None or len(one) != 1 or not m.is_scalar(one[0], 1.0, dt):
            continue
        sc = m.g.nx.nodes[er]["operands"][0]
        ds = m.node(sc, "mul")
        if ds is None or x not in ds["operands"]:
            continue
        k = [o for o in ds["operands"] if o != x]
        if len(k) != 1 or not m.is_scalar(k[0], 1 / np.sqrt(2.0), dt):
            continue
        interior = {h, p, er, sc}
        if not m.private(interior, y) or m.uniform([x, h, p, er, sc, y]) is None:
            continue
        if tuple(m.g.nx.nodes[x]["shape"]) != tuple(d["shape"]):
            continue
        return Region("Gelu", [x], {"approximate": "none"}, interior, {})
    return None


def single_operators(g: Graph, opset: int) -> Tuple[Dict[int, Region], Set[int]]:
    """The regions of ``g`` that export as one ONNX operator: (result node id -> Region,
    the ids of every replaced interior node).  Deterministic; regions never overlap (a
    node claimed by one region is not matched again)."""
    m = _M(g)
    regions: Dict[int, Region] = {}
    claimed: Set[int] = set()
    for y in sorted(g.nx.nodes, reverse=True):  # results before their interiors
        if y in claimed:
            continue
        d = g.nx.nodes[y]
        r: Optional[Region] = None
        if d["op"] == "div":
            r = _softmax(m, y, d)
        elif d["op"] == "sub":
            r = _log_softmax(m, y, d)
        if r is None and d["op"] in ("add", "mul") and opset >= 17:
            r = _layer_norm(m, y, d)
        if r is None and d["op"] == "mul" and opset >= 20:
            r = _gelu(m, y, d)
        if r is None or r.interior & claimed or y in claimed:
            continue
        if any(i in r.interior for i in r.inputs):
            continue
        regions[y] = r
        claimed |= r.interior | {y}
    skip = claimed - set(regions)
    # constants only the replaced nodes read (eps, 0.5...) are not exported either
    needed = {i for r in regions.values() for i in r.inputs}
    for n, d in g.nx.nodes(data=True):
        if d["op"] == "const" and n not in m.outputs and n not in needed:
            if m.uses[n] and all(u in skip for u in m.uses[n]):
                skip.add(n)
    return regions, skip
