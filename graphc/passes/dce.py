"""``dce``: dead code elimination."""

from __future__ import annotations

from ..ir import Graph
from .registry import register_pass


@register_pass("dce", order=40, min_level=1, may=("remove nodes",))
def dce(g: Graph) -> bool:
    """Remove nodes no output depends on (inputs always stay)."""
    live = set(g.inputs)
    stack = list(g.outputs)
    while stack:
        n = stack.pop()
        if n in live and n not in g.inputs:
            continue
        live.add(n)
        for o in g.nx.nodes[n]["operands"]:
            if o not in live:
                stack.append(o)
    dead = [n for n in g.nx.nodes if n not in live]
    for n in dead:
        g.nx.remove_node(n)
    return bool(dead)
