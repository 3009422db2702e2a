"""A failure while generating native code names the node, its op and the user's source
line (and keeps the original exception as its cause and type)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import graphc
from graphc.backend.lowering import LOWERINGS
from graphc.errors import GraphcError, LoweringError


def _broken(kind):
    def fail(*args):
        raise ZeroDivisionError("a bug in a lowering")
    return fail


@pytest.mark.parametrize("op, field, fn", [
    ("mul", "scalar", lambda x, y: (x * y).sum()),          # a scalar lowering in a loop
    ("matmul", "kernel", lambda x, y: x @ y.T),             # a kernel of its own
])
def test_a_failing_lowering_names_node_op_and_source_line(monkeypatch, op, field, fn):
    monkeypatch.setitem(LOWERINGS, op, dataclasses.replace(LOWERINGS[op],
                                                           **{field: _broken(field)}))
    x, y = np.ones((3, 4)), np.ones((3, 4))
    with pytest.raises(LoweringError) as ei:
        graphc.compile(fn)(x, y)
    msg = str(ei.value)
    assert f"= {op}(" in msg, msg
    assert "test_lowering_errors.py:" in msg, msg                   # the user's line
    assert "ZeroDivisionError: a bug in a lowering" in msg, msg
    assert isinstance(ei.value, ZeroDivisionError) and isinstance(ei.value, GraphcError)
    assert isinstance(ei.value.__cause__, ZeroDivisionError)
    assert ei.value.node is not None


def test_graphc_errors_from_the_backend_pass_through_unchanged(monkeypatch):
    from graphc.errors import UnsupportedOpError

    def refuse(kb, e):
        raise UnsupportedOpError("refused by name")
    monkeypatch.setitem(LOWERINGS, "neg", dataclasses.replace(LOWERINGS["neg"], scalar=refuse))
    with pytest.raises(UnsupportedOpError, match="^refused by name$"):
        graphc.compile(lambda x: -x)(np.ones(3))
