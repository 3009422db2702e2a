"""Lowering entries: joining and splitting (cat; stack, split, flip, roll... are composites
of views, copies and cat).

See table.py for the entry each family needs.
"""

from __future__ import annotations

import numpy as np

from ..strided import cstrides
from .table import kernel


@kernel("cat")
def cat_kernel(kb, n: int) -> None:
    """Copy each operand (any strides) into its slice of the C-ordered result, converting
    it to the result's dtype.  A 0-d operand is one element; a skipped (0,) operand
    (PyTorch's legacy rule) has nothing to copy."""
    d = kb.g.nx.nodes[n]
    dt = np.dtype(d["dtype"])
    shape = tuple(d["shape"])
    dim = d["attrs"]["dim"]
    oc = cstrides(shape)
    start = 0
    for k, x in enumerate(d["operands"]):
        xs = tuple(kb.g.nx.nodes[x]["shape"])
        if xs == (0,):  # eager.ops.joining.cat_skipped
            continue
        xv = kb.plan.views[x]
        xdt = np.dtype(kb.g.nx.nodes[x]["dtype"])
        eff = xs if xs else (1,)
        st = tuple(xv.strides) if xs else (0,)
        base = start * oc[dim]
        start += eff[dim]

        def body(idx, xv=xv, xdt=xdt, st=st, base=base):
            v = kb.convert(kb.load(xv.buf, xdt, kb.offset(xv.offset, st, idx)), xdt, dt)
            kb.store(n, dt, kb.offset(base, oc, idx), v)

        kb.loop(list(eff), body, name=f"cat{k}", unroll=False)
