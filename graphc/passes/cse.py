"""``cse``: common subexpression elimination."""

from __future__ import annotations

import numpy as np

from ..ir import Graph
from .context import current
from .registry import register_pass


def _attr_key(v):
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, float) and v != v:
        return ("nan",)
    if isinstance(v, float) and v == 0.0:
        return ("zero", np.signbit(v))  # 0.0 and -0.0 are different attrs
    if isinstance(v, tuple):
        return tuple(_attr_key(x) for x in v)
    return (type(v).__name__, v)


@register_pass("cse", order=30, may=("remove nodes", "redirect uses"))
def cse(g: Graph) -> bool:
    """Merge nodes with the same op, attrs, dtype, shape and operands (constants by value)."""
    ctx = current()
    seen: dict = {}
    changed = False
    for n in g.topo_order():
        ctx.node = n
        d = g.nx.nodes[n]
        if d["op"] == "input":
            continue
        key = (
            d["op"],
            d["dtype"],
            tuple(d["shape"]),
            d["operands"],
            tuple(sorted((k, _attr_key(v)) for k, v in d["attrs"].items())),
        )
        other = seen.get(key)
        if other is None:
            seen[key] = n
            continue
        g.replace_uses(n, other)
        g.nx.remove_node(n)
        changed = True
    ctx.node = None
    return changed
