"""``fold``: constant folding with the ops' own numpy forwards."""

from __future__ import annotations

import numpy as np

from eager.interop import OPS

from ..ir import Graph
from ..ir.loops import STRUCT_OPS
from .context import current
from .registry import register_pass

MAX_FOLD_ELEMENTS = 1 << 16


@register_pass("fold", order=20, may=("rewrite nodes",))
def fold(g: Graph) -> bool:
    """Evaluate nodes whose operands are all constants with the op's numpy forward."""
    ctx = current()
    changed = False
    for n in g.topo_order():
        ctx.node = n
        d = g.nx.nodes[n]
        op = d["op"]
        if op in ("input", "const") + STRUCT_OPS or not d["operands"]:
            continue
        if not all(g.nx.nodes[o]["op"] == "const" for o in d["operands"]):
            continue
        n_out = int(np.prod(d["shape"], dtype=np.int64))
        if n_out > MAX_FOLD_ELEMENTS:
            continue
        # never materialize a broadcast: expand(const) stays a stride-0 view of the scalar
        if n_out > max(
            [1] + [int(np.prod(g.nx.nodes[o]["shape"], dtype=np.int64)) for o in d["operands"]]
        ):
            continue
        vals = [g.nx.nodes[o]["attrs"]["value"] for o in d["operands"]]
        try:
            with np.errstate(all="ignore"):
                v = np.asarray(OPS[op].forward(*vals, **d["attrs"]))
        except Exception:
            continue  # leave it to run time (where the error belongs)
        v = np.array(v, dtype=d["dtype"], order="C")
        if v.shape != tuple(d["shape"]):
            continue
        v.setflags(write=False)
        d["op"] = "const"
        d["attrs"] = {"value": v}
        g.set_operands(n, ())
        d["by"] = "fold"
        changed = True
    ctx.node = None
    return changed
