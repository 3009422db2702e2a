"""Sizes numpy cannot address are refused before anything is allocated or compiled.

numpy refuses any array (a broadcast view too) whose element count times item
size exceeds ``sys.maxsize``; eager raises RuntimeError there, as PyTorch does
for a size whose computation overflows, and graphc refuses such a node when it
enters a graph (``Graph.add_node``: tracer, autodiff, passes, JSON loader) with
``TooBigError`` (a RuntimeError), and such an arena when it plans memory.  No
size of the generated code can wrap around: its integer constants are checked.
Calls that used to crash run in a subprocess, which must exit cleanly.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import eager
import graphc
from graphc.backend import abi as L
from graphc.backend.schedule import Schedule
from graphc.errors import TooBigError
from graphc.ir import Graph

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))  # repository root


def _run(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("expr, opt", [
    ("x.expand(1048576, 304384145, 14449).exp()", 2),          # 2**62 elements: bytes wrap
    ("x.expand(1048576, 304384145, 14449).exp().sum()", 0),    # the same as an intermediate
    ("x.expand(2**30, 2**30, 16).exp().sum()", 0),             # 2**64 elements wrap to 0
    ("x.expand(2**30, 2**30, 16).exp().sum()", 2),
])
def test_huge_expand_is_refused_in_a_clean_process(expr, opt):
    r = _run("import numpy as np, graphc\n"
             "from graphc.errors import TooBigError\n"
             f"f = graphc.compile(lambda x: {expr}, opt_level={opt})\n"
             "try:\n"
             "    f(np.ones(1))\n"
             "except TooBigError as e:\n"
             "    assert isinstance(e, RuntimeError) and 'too big' in str(e), e\n"
             "    print('refused')\n")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "refused"


def test_the_error_names_op_shape_and_line():
    f = graphc.compile(lambda x: x.expand(2**31, 2**31, 4) * 1.0)
    with pytest.raises(TooBigError, match=r"expand at .*test_size_limits.py:\d+: a tensor of "
                                          r"shape \[2147483648, 2147483648, 4\] is too big"):
        f(np.ones(1))


def test_broadcasting_two_views_to_a_size_too_big_says_so():
    """Each view is fine; their broadcast is not: "too big", not "cannot be broadcast"."""
    def f(x):
        return x.expand(2**32, 1) * x.expand(1, 2**32)

    with pytest.raises(RuntimeError, match=r"mul: a tensor of shape \[4294967296, 4294967296\] "
                                           "is too big"):
        graphc.compile(f)(np.ones(1))
    with pytest.raises(RuntimeError, match="is too big"):
        f(eager.ones(1))


@pytest.mark.parametrize("shape", [(2**31, 2**31, 4), (1048576, 304384145, 14449)])
def test_eager_refuses_the_same_sizes_with_runtime_error(shape):
    x = eager.ones(1)
    with pytest.raises(RuntimeError, match=r"expand: a tensor of shape .* is too big"):
        x.expand(*shape) * 1.0
    with pytest.raises(RuntimeError, match="is too big"):
        x.expand(*shape).exp()


def test_a_big_but_addressable_view_is_still_fine():
    """The limit is numpy's: 2**60 float32 elements (2**62 bytes) are a valid lazy view."""
    x = np.ones(1, np.float32)
    g = graphc.trace(lambda x: x.expand(2**30, 2**30), x)
    out = g.outputs[0]
    assert tuple(g[out]["shape"]) == (2**30, 2**30)
    assert eager.from_numpy(x).expand(2**30, 2**30).shape == (2**30, 2**30)


def test_every_node_entering_a_graph_is_checked():
    g = Graph("g")
    with pytest.raises(TooBigError, match=r"input: a tensor of shape \[4611686018427387904, 4\] "
                                          "is too big"):
        g.add_input("x", (2**62, 4), np.float64)
    x = g.add_input("x", (1,), np.float64)
    with pytest.raises(TooBigError, match="expand"):
        g.add_node("expand", (x,), {"shape": (2**62, 2)})
    # an explicit shape (what the JSON loader and passes pass) is checked too
    with pytest.raises(TooBigError, match="exp"):
        g.add_node("exp", (x,), {}, shape=(2**62, 2), dtype=np.float64)


def test_the_planner_refuses_an_arena_it_cannot_address():
    """Two live intermediates of 2**62 bytes each: each node is fine, the arena is not."""
    def f(x):
        a, b = x.expand(2**60).exp(), x.expand(2**60).sin()
        return a.argmax() + b.argmax()

    g = graphc.trace(f, np.ones(1, np.float32))
    with pytest.raises(TooBigError, match=r"arena of \d+ bytes"):
        Schedule(g)


def test_generated_constants_cannot_wrap():
    """LLVM's parser silently truncates a constant too wide for its type."""
    from llvmlite import ir
    assert str(ir.Constant(L.I64, 2**63 - 1)) == "i64 9223372036854775807"
    assert str(ir.Constant(L.I32, -2**31)) == "i32 -2147483648"
    for ty, v in ((L.I64, 2**63), (L.I64, 2**64), (L.I64, -2**63 - 1), (L.I32, 2**31)):
        with pytest.raises(TooBigError, match="does not fit"):
            ir.Constant(ty, v)


def test_a_matrix_product_beyond_32_bit_blas_dims_uses_loops():
    """cblas takes 32-bit ints: a product with 2**31 rows is compiled as plain loops
    instead of passing a truncated M (only compiled here: it would need 8 GB)."""
    cf = graphc.compile(lambda x, w: x.expand(2**31, 1) @ w)
    x, w = np.ones((1, 1), np.float32), np.ones((1, 3), np.float32)
    ir_text = cf.llvm_ir(x, w)
    assert "gemm" not in ir_text
    small = graphc.compile(lambda x, w: x.expand(4, 1) @ w)
    assert "gemm" in small.llvm_ir(x, w)
    np.testing.assert_array_equal(small(x, w), np.ones((4, 3), np.float32))
