"""Native lowering of the structured-loop IR nodes ``scan``, ``while`` and ``loop_out``
(contract: docs/ir.md's loop section / the loop spec): the body's code is generated once
and run in a real loop by the compiled entry point, never unrolled.

Graphs are built by hand (``Graph.add_node("scan", ...)``); bodies are traced with
``graphc.trace`` or built by hand too.  Every result is checked against a reference loop
written here in Python over numpy arrays (each step runs the body function eagerly on
``eager`` tensors, so the reference shares no code with the native backend).
"""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest

import eager
import graphc
from graphc.backend import parallel_policy
from graphc.backend.schedule import Schedule
from graphc.errors import GraphVerificationError, TooBigError
from graphc.ir import Graph
from graphc.runtime import native

def compile_graph(g: Graph, opt_level: int = 2, **kw) -> native.NativeExecutable:
    return native.NativeExecutable(g, opt_level=opt_level, **kw)


# --- building graphs ---------------------------------------------------------------------
def _t(a):
    return eager.tensor(np.asarray(a))


def _np(v):
    return v.numpy() if isinstance(v, eager.Tensor) else np.asarray(v)


def _flat(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def trace_body(fn, examples: list) -> Graph:
    """The graph of ``fn`` on example arrays (its outputs flattened)."""
    return graphc.trace(lambda *a: tuple(_flat(fn(*a))), *examples)


def scan_graph(
    body: Graph,
    consts: list,
    init: list,
    xs: list,
    length: int,
    reverse: bool = False,
    used=None,
    name: str = "f",
):
    """Outer graph: inputs consts, init, xs; one scan; loop_out outputs for ``used``
    (default: every result).  Returns (graph, result count)."""
    g = Graph(name)
    args = consts + init + xs
    ins = [g.add_input(f"a{i}", np.shape(a), np.asarray(a).dtype) for i, a in enumerate(args)]
    s = g.add_node(
        "scan",
        ins,
        {
            "body": body,
            "length": length,
            "reverse": reverse,
            "num_consts": len(consts),
            "num_carry": len(init),
        },
        shape=(),
        dtype="bool",
    )
    k = len(init)
    types = [(np.shape(a), np.asarray(a).dtype) for a in init]
    for o in body.outputs[k:]:
        d = body.nx.nodes[o]
        types.append(((length,) + tuple(d["shape"]), np.dtype(d["dtype"])))
    used = range(len(types)) if used is None else used
    g.outputs = [
        g.add_node("loop_out", (s,), {"index": j}, shape=types[j][0], dtype=types[j][1])
        for j in used
    ]
    return g, len(types)


def ref_scan(fn, consts, init, xs, length, reverse=False):
    """jax.lax.scan's semantics, in Python: (final carries, stacked ys)."""
    carry = [np.asarray(c) for c in init]
    ys_steps = []
    order = range(length - 1, -1, -1) if reverse else range(length)
    ys_at = {}
    for i in order:
        out = [
            _np(v) for v in _flat(fn(*map(_t, consts), *map(_t, carry), *[_t(x[i]) for x in xs]))
        ]
        carry = [o.astype(c.dtype) for o, c in zip(out[: len(carry)], carry)]
        ys_at[i] = out[len(carry) :]
    ys_steps = [ys_at[i] for i in range(length)]
    return carry, ys_steps


def run_scan(fn, consts, init, xs, length=None, reverse=False, opt_level=2, used=None, **kw):
    """Compile ``fn`` as a scan body, run it natively and check every result against
    :func:`ref_scan`; returns the executable."""
    consts = [np.asarray(c) for c in consts]
    init = [np.asarray(c) for c in init]
    xs = [np.asarray(x) for x in xs]
    length = xs[0].shape[0] if length is None else length
    examples = consts + init + [np.zeros(x.shape[1:], x.dtype) for x in xs]
    body = trace_body(fn, examples)
    g, nres = scan_graph(body, consts, init, xs, length, reverse, used)
    ex = compile_graph(g, opt_level=opt_level, **kw)
    got = ex.run(tuple(consts + init + xs))
    carry, steps = ref_scan(fn, consts, init, xs, length, reverse)
    want = list(carry)
    for m, o in enumerate(body.outputs[len(init) :]):
        d = body.nx.nodes[o]
        if steps:
            want.append(np.stack([s[m] for s in steps]).astype(d["dtype"]))
        else:
            want.append(np.zeros((0,) + tuple(d["shape"]), d["dtype"]))
    used = range(nres) if used is None else used
    for k, j in enumerate(used):
        _close(got[k], want[j], f"result {j}")
    return ex


def _close(got, want, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} vs {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}"
    if got.dtype.kind == "f":
        tol = 1e-5 if got.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


RNG = np.random.default_rng(0)


def _r(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


# --- scan: semantics ------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("opt_level", [0, 2])
def test_cumulative_sum_with_consts(dtype, reverse, opt_level):
    def body(w, c, x):
        nc = c * w + x
        return nc, nc * nc, (nc - x).sum()

    run_scan(
        body,
        [_r(3, dtype=dtype)],
        [_r(3, dtype=dtype)],
        [_r(7, 3, dtype=dtype)],
        reverse=reverse,
        opt_level=opt_level,
    )


def test_length_zero():
    """Final carries == init, ys empty (0, ...)."""

    def body(c, x):
        return c + x, x * 2

    ex = run_scan(body, [], [_r(3)], [np.zeros((0, 3))])
    out = ex.run((np.arange(3.0), np.zeros((0, 3))))
    assert out[1].shape == (0, 3)
    np.testing.assert_array_equal(out[0], np.arange(3.0))


def test_length_zero_without_xs():
    def body(c):
        return c * 3, c

    run_scan(body, [], [_r(2, 2)], [], length=0)


def test_no_xs_scan_over_length():
    def body(c):
        return c * 0.5 + 1.0, c.sum()

    run_scan(body, [], [_r(4)], [], length=9)


def test_size_one_and_zero_d():
    def body(c, x):
        return c + x, c * x

    run_scan(body, [], [np.float64(2.0)], [_r(1)])
    run_scan(body, [], [np.array(2.0)], [_r(5)])


def test_pass_through_outputs():
    """A body output that is directly a body input, a constant, or a view of an input:
    the body's schedule copies it into the output pointer it is given."""

    def body(k, c, m, x):
        # new carries: a const input and a view of a carry; ys: an x slice, a view of
        # a computed value, a constant and a carry input, all passed through
        return k, m.T, x, (m * 2.0).T, eager.tensor(3.0, dtype=eager.float64), c

    run_scan(body, [_r(3)], [_r(3), _r(2, 2)], [_r(4, 3)])
    run_scan(body, [_r(3)], [_r(3), _r(2, 2)], [_r(4, 3)], reverse=True)


def test_permuted_carries():
    """new carry 0 = old carry 1, new carry 1 = old carry 0 + x: each is read from one
    scratch buffer and written to the other, never overwritten mid-iteration."""

    def body(a, b, x):
        return b, a + x, a - b

    run_scan(body, [], [_r(5), _r(5)], [_r(6, 5)])

    def rot(a, b, c):
        return b, c, a, a * 10 + b

    run_scan(rot, [], [_r(3), _r(3), _r(3)], [], length=7)


def test_same_operand_as_const_carry_and_xs():
    def body(k, c, x):
        return c + k, x * k

    g = Graph("dup")
    a = g.add_input("a", (3,), "float64")
    xs = g.add_input("xs", (3, 3), "float64")
    bd = trace_body(body, [np.zeros(3), np.zeros(3), np.zeros(3)])
    s = g.add_node(
        "scan",
        (a, a, xs),
        {"body": bd, "length": 3, "reverse": False, "num_consts": 1, "num_carry": 1},
        shape=(),
        dtype="bool",
    )
    g.outputs = [
        g.add_node("loop_out", (s,), {"index": 0}, shape=(3,), dtype="float64"),
        g.add_node("loop_out", (s,), {"index": 1}, shape=(3, 3), dtype="float64"),
        g.add_node("loop_out", (s,), {"index": 0}, shape=(3,), dtype="float64"),  # a second one
    ]
    av, xv = _r(3), _r(3, 3)
    got = compile_graph(g).run((av, xv))
    carry, steps = ref_scan(body, [av], [av], [xv], 3)
    _close(got[0], carry[0], "carry")
    _close(got[2], carry[0], "second loop_out")
    _close(got[1], np.stack([s[0] for s in steps]), "ys")


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_integer_carries(dtype):
    def body(c, n, x):
        return c * 3 + x, n + 1, (c > x).sum()

    run_scan(
        body,
        [],
        [np.arange(4, dtype=dtype), np.array(0, dtype=np.int64)],
        [RNG.integers(-5, 5, (6, 4)).astype(dtype)],
    )


def test_bool_and_mixed_dtypes():
    def body(flag, acc, cnt, x):
        hit = x > 0.0
        return flag != hit, acc + x.to(eager.float32) * 2, cnt + hit.to(eager.int32), hit

    run_scan(
        body,
        [],
        [np.zeros(5, bool), np.zeros(5, np.float32), np.zeros(5, np.int32)],
        [_r(8, 5)],
    )


def test_unused_results():
    """Results without a loop_out (a y nothing reads, a carry) still run through scratch."""

    def body(a, b, x):
        return a + x, b * 2, a * x, x.sum()

    for used in ([0], [1], [3], [2], []):
        run_scan(body, [], [_r(3), _r(3)], [_r(5, 3)], used=used)


def test_matmul_and_reductions_in_body():
    """An RNN cell: a BLAS product, tanh, a reduction per step."""

    def body(w, u, h, x):
        nh = (w @ h + u @ x).tanh()
        return nh, nh.sum(), (nh.unsqueeze(1) * nh.unsqueeze(0)).sum(dim=0)

    run_scan(body, [_r(16, 16) * 0.3, _r(16, 8) * 0.3], [_r(16)], [_r(12, 8)])
    run_scan(body, [_r(64, 64) * 0.1, _r(64, 8) * 0.3], [_r(64)], [_r(5, 8)], reverse=True)


def test_batched_matmul_carry():
    def body(w, h):
        return (h @ w).relu() + 0.1, h.max()

    run_scan(body, [_r(32, 32) * 0.2], [_r(32, 32)], [], length=6)


def test_non_contiguous_operands():
    """xs a transposed input, a const that is a broadcast view, init a slice: the
    scheduler copies what the body cannot read through a plain pointer."""

    def body(k, c, x):
        return c + k * x, c.sum()

    k_body = trace_body(body, [np.zeros(3), np.zeros(3), np.zeros(3)])
    # the operands as views of the inputs (traced), then the scan added by hand
    g = graphc.trace(
        lambda xt, k, big: (k.expand(3), big[1, ::2], xt.T),
        np.zeros((3, 5)),
        np.zeros(1),
        np.zeros((2, 6)),
    )
    kc, init, xs = g.outputs
    s = g.add_node(
        "scan",
        (kc, init, xs),
        {"body": k_body, "length": 5, "reverse": True, "num_consts": 1, "num_carry": 1},
        shape=(),
        dtype="bool",
    )
    g.outputs = [
        g.add_node("loop_out", (s,), {"index": 0}, shape=(3,), dtype="float64"),
        g.add_node("loop_out", (s,), {"index": 1}, shape=(5,), dtype="float64"),
    ]
    xv, kv, bv = _r(3, 5), _r(1), _r(2, 6)
    got = compile_graph(g).run((xv, kv, bv))
    carry, steps = ref_scan(body, [np.broadcast_to(kv, (3,))], [bv[1, ::2]], [xv.T], 5, True)
    _close(got[0], carry[0], "carry")
    _close(got[1], np.stack([s[0] for s in steps]), "ys")


def test_ops_around_the_scan():
    """The scan's operands computed by fused kernels, its results consumed by others."""

    def body(c, x):
        return c * 0.9 + x, c.exp()

    bd = trace_body(body, [np.zeros(4), np.zeros(4)])
    g = Graph("around")
    a = g.add_input("a", (4,), "float64")
    xs = g.add_input("xs", (6, 4), "float64")
    a2 = g.add_node("mul", (a, a))
    xs2 = g.add_node("sin", (xs,))
    s = g.add_node(
        "scan",
        (a2, xs2),
        {"body": bd, "length": 6, "reverse": False, "num_consts": 0, "num_carry": 1},
        shape=(),
        dtype="bool",
    )
    c = g.add_node("loop_out", (s,), {"index": 0}, shape=(4,), dtype="float64")
    ys = g.add_node("loop_out", (s,), {"index": 1}, shape=(6, 4), dtype="float64")
    tot = g.add_node("sum", (ys,), {"axis": (0,), "keepdim": False})
    g.outputs = [g.add_node("add", (c, tot)), ys]
    av, xv = _r(4), _r(6, 4)
    got = compile_graph(g).run((av, xv))
    carry, steps = ref_scan(body, [], [av * av], [np.sin(xv)], 6)
    y = np.stack([s_[0] for s_ in steps])
    _close(got[0], carry[0] + y.sum(0), "out 0")
    _close(got[1], y, "ys")


# --- native, not unrolled -----------------------------------------------------------------
def test_code_size_does_not_depend_on_length():
    def body(w, c, x):
        return (c @ w).tanh() + x, c.sum()

    def ir_for(length):
        ex = run_scan(body, [_r(8, 8) * 0.3], [_r(8)], [_r(length, 8)])
        return ex.llvm_ir(), ex.llvm_ir(optimized=True)

    (a, a_opt), (b, b_opt) = ir_for(10), ir_for(1000)
    num = re.compile(r"\d+")
    assert num.sub("0", a) == num.sub("0", b)  # the same code, one constant apart
    assert abs(len(a) - len(b)) < 64
    assert num.sub("0", a_opt) == num.sub("0", b_opt)
    assert "k0_body" in a and "k0_scan_loop" in a


def test_thousand_steps():
    def body(c, x):
        return c * 0.99 + x, c[0]

    run_scan(body, [], [_r(3)], [_r(1000, 3)])


def test_inspection_shows_the_loop():
    def body(c, x):
        return c + x, c * x

    bd = trace_body(body, [np.zeros(3), np.zeros(3)])
    g, _ = scan_graph(bd, [], [np.zeros(3)], [np.zeros((4, 3))], 4)
    plan = Schedule(g)
    text = plan.describe()
    assert "<scan_loop: %" in text and "scan length 4" in text and "body (function k0_body)" in text
    ex = compile_graph(g)
    legend = ex.legend()
    assert "k0_scan_loop:" in legend and "k0_body: graph" in legend and "k0_body_k0_loop:" in legend
    assert "scan length 4" in ex.llvm_ir()


# --- nested loops ---------------------------------------------------------------------------
def _inner_sum_body() -> Graph:
    """Body (c: f64[3], rows: f64[4,3]) -> (c + sum of the rows by an inner scan, inner ys)."""

    def inner(c, r):
        return c + r, (c * r).sum()

    ib = trace_body(inner, [np.zeros(3), np.zeros(3)])
    b = Graph("outer_body")
    c = b.add_input("c", (3,), "float64")
    rows = b.add_input("rows", (4, 3), "float64")
    s = b.add_node(
        "scan",
        (c, rows),
        {"body": ib, "length": 4, "reverse": False, "num_consts": 0, "num_carry": 1},
        shape=(),
        dtype="bool",
    )
    c2 = b.add_node("loop_out", (s,), {"index": 0}, shape=(3,), dtype="float64")
    ys = b.add_node("loop_out", (s,), {"index": 1}, shape=(4,), dtype="float64")
    b.outputs = [b.add_node("mul", (c2, b.add_const(0.5))), ys]
    return b


@pytest.mark.parametrize("reverse", [False, True])
def test_nested_scan(reverse):
    body = _inner_sum_body()
    g, _ = scan_graph(body, [], [np.zeros(3)], [np.zeros((5, 4, 3))], 5, reverse=reverse)
    c0, xs = _r(3), _r(5, 4, 3)
    got = compile_graph(g).run((c0, xs))

    def ref_body(c, rows):
        ys = []
        c = _np(c)
        for r in _np(rows):
            ys.append((c * r).sum())
            c = c + r
        return c * 0.5, np.array(ys)

    carry, steps = ref_scan(ref_body, [], [c0], [xs], 5, reverse)
    _close(got[0], carry[0], "carry")
    _close(got[1], np.stack([s[0] for s in steps]), "ys")
    plan = Schedule(g)
    assert "k0_body_k0_body" not in plan.describe()  # names nest by function prefix
    legend = compile_graph(g).legend()
    assert "k0_body_k0_scan_loop:" in legend and "k0_body_k0_body_k0_loop:" in legend


# --- while --------------------------------------------------------------------------------
def while_graph(cond: Graph, body: Graph, cconsts: list, bconsts: list, init: list, used=None):
    g = Graph("w")
    args = cconsts + bconsts + init
    ins = [g.add_input(f"a{i}", np.shape(a), np.asarray(a).dtype) for i, a in enumerate(args)]
    s = g.add_node(
        "while",
        ins,
        {
            "cond": cond,
            "body": body,
            "num_cond_consts": len(cconsts),
            "num_body_consts": len(bconsts),
            "num_carry": len(init),
        },
        shape=(),
        dtype="bool",
    )
    used = range(len(init)) if used is None else used
    g.outputs = [
        g.add_node(
            "loop_out", (s,), {"index": j}, shape=np.shape(init[j]), dtype=np.asarray(init[j]).dtype
        )
        for j in used
    ]
    return g


def ref_while(cond_fn, body_fn, cconsts, bconsts, init):
    carry = [np.asarray(c) for c in init]
    n = 0
    while bool(_np(cond_fn(*map(_t, cconsts), *map(_t, carry)))):
        out = [_np(v) for v in _flat(body_fn(*map(_t, bconsts), *map(_t, carry)))]
        carry = [o.astype(c.dtype) for o, c in zip(out, carry)]
        n += 1
    return carry, n


def run_while(cond_fn, body_fn, cconsts, bconsts, init, used=None, **kw):
    cconsts = [np.asarray(c) for c in cconsts]
    bconsts = [np.asarray(c) for c in bconsts]
    init = [np.asarray(c) for c in init]
    cond = trace_body(cond_fn, cconsts + init)
    body = trace_body(body_fn, bconsts + init)
    g = while_graph(cond, body, cconsts, bconsts, init, used)
    ex = compile_graph(g, **kw)
    got = ex.run(tuple(cconsts + bconsts + init))
    want, n = ref_while(cond_fn, body_fn, cconsts, bconsts, init)
    used = range(len(init)) if used is None else used
    for k, j in enumerate(used):
        _close(got[k], want[j], f"carry {j}")
    return ex, n


def test_while_data_dependent_trip_count():
    def cond(lim, c, i):
        return c.sum() < lim

    def body(x, c, i):
        return c * 2.0 + x, i + 1

    for lim in (0.0, 1.0, 100.0, 1e6):
        ex, n = run_while(
            cond, body, [np.array(lim)], [np.full(3, 0.25)], [np.ones(3), np.array(0)]
        )
        assert ex.run((np.array(lim), np.full(3, 0.25), np.ones(3), np.array(0)))[1] == n
    # trip counts differ per call of one executable
    ex, _ = run_while(cond, body, [np.array(5.0)], [np.full(3, 0.25)], [np.ones(3), np.array(0)])
    counts = [
        int(ex.run((np.array(lim), np.full(3, 0.25), np.ones(3), np.array(0)))[1])
        for lim in (0.0, 10.0, 1000.0)
    ]
    assert counts == [0, 2, 9]


def test_while_zero_iterations_and_permuted_carries():
    def cond(a, b, n):
        return n < 5

    def body(a, b, n):
        return b, a + b, n + 1  # fibonacci: the carries swap places

    _, n = run_while(
        cond, body, [], [], [np.array(0, np.int64), np.array(1, np.int64), np.array(0)]
    )
    assert n == 5
    _, n = run_while(cond, body, [], [], [np.array(0.0), np.array(1.0), np.array(7)])
    assert n == 0


def test_while_bool_carry_and_pass_through_cond():
    def cond(go, k):
        return go

    def body(go, k):
        return k < 10, k + 3

    _, n = run_while(cond, body, [], [], [np.array(True), np.array(0, np.int32)])
    assert n == 5


def test_while_with_a_scan_inside():
    """A while whose body holds a scan (nested loop kinds), and a malformed inner scan
    refused naming the graph it is in."""

    def inner(c, r):
        return c + r, (c * r).sum()

    ib = trace_body(inner, [np.zeros(3), np.zeros(3)])

    def wbody(rows_len: int) -> Graph:
        b = Graph("wbody")
        c = b.add_input("c", (3,), "float64")
        rows = b.add_input("rows", (4, 3), "float64")
        s = b.add_node(
            "scan",
            (c, rows),
            {"body": ib, "length": rows_len, "reverse": False, "num_consts": 0, "num_carry": 1},
            shape=(),
            dtype="bool",
        )
        c2 = b.add_node("loop_out", (s,), {"index": 0}, shape=(3,), dtype="float64")
        b.outputs = [b.add_node("add", (c2, b.add_const(1.0))), rows]
        return b

    cg = trace_body(lambda c, rows: c.sum() < 50.0, [np.zeros(3), np.zeros((4, 3))])
    init = [np.zeros(3), np.abs(_r(4, 3))]
    ex = compile_graph(while_graph(cg, wbody(4), [], [], init))
    got = ex.run(tuple(init))
    c = init[0]
    while c.sum() < 50.0:
        c = c + init[1].sum(0) + 1.0
    _close(got[0], c, "carry")
    _close(got[1], init[1], "rows")
    with pytest.raises(GraphVerificationError, match="in its body graph.*leading dimension"):
        Schedule(while_graph(cg, wbody(1), [], [], init))


# --- failures -------------------------------------------------------------------------------
def test_index_error_inside_the_loop_propagates():
    """An index kernel's rc inside the body ends the loop; the entry frees its arena and
    raises IndexError; the executable stays usable."""

    def body(table, i, x):
        return i + 1, table[i] * x

    table = _r(4)
    body_g = trace_body(body, [table, np.array(0), np.array(0.0)])
    g, _ = scan_graph(body_g, [table], [np.array(0)], [_r(6)], 6)
    ex = compile_graph(g)
    with pytest.raises(IndexError):
        ex.run((table, np.array(0), _r(6)))  # reaches i = 4 at step 4
    with pytest.raises(IndexError):
        ex.run((table, np.array(-7), _r(6)))
    got = ex.run((np.arange(10.0)[:4].copy(), np.array(-4), np.ones(6)))  # -4..1: in range
    np.testing.assert_array_equal(got[1], [0.0, 1.0, 2.0, 3.0, 0.0, 1.0])
    assert got[0] == 2

    def wcond(i):
        return i < 10

    def wbody(t, i):
        return i + t[i] * 0 + 1

    wc = trace_body(wcond, [np.array(0)])
    wb = trace_body(wbody, [np.arange(3), np.array(0)])
    wex = compile_graph(while_graph(wc, wb, [], [np.arange(3)], [np.array(0)]))
    with pytest.raises(IndexError):
        wex.run((np.arange(3), np.array(0)))
    assert wex.run((np.arange(3), np.array(20)))[0] == 20


def test_huge_length_is_refused_at_schedule_time():
    """length * slice size beyond what memory can address: a clear error naming the
    loop, before any code is generated (not a crash, not a wrapped offset)."""

    def body(c):
        return c + 1.0, c.expand(1024, 3)

    bd = trace_body(body, [np.zeros(3)])
    g = Graph("huge")
    a = g.add_input("a", (3,), "float64")
    s = g.add_node(
        "scan",
        (a,),
        {"body": bd, "length": 2**61, "reverse": False, "num_consts": 0, "num_carry": 1},
        shape=(),
        dtype="bool",
    )
    g.outputs = [g.add_node("loop_out", (s,), {"index": 0}, shape=(3,), dtype="float64")]
    with pytest.raises(TooBigError, match=r"%1 = scan.*ys 0.*too big"):
        Schedule(g)
    with pytest.raises(TooBigError):
        compile_graph(g)


def test_malformed_loops_are_refused():
    def body(c, x):
        return c + x, x

    bd = trace_body(body, [np.zeros(3), np.zeros(3)])

    def make(attrs=None, xs_shape=(5, 3), out_shape=(3,), out_index=0, operands=None):
        g = Graph("bad")
        a = g.add_input("a", (3,), "float64")
        xs = g.add_input("xs", xs_shape, "float64")
        at = {"body": bd, "length": 5, "reverse": False, "num_consts": 0, "num_carry": 1}
        at.update(attrs or {})
        s = g.add_node("scan", operands or (a, xs), at, shape=(), dtype="bool")
        g.outputs = [
            g.add_node("loop_out", (s,), {"index": out_index}, shape=out_shape, dtype="float64")
        ]
        return g

    cases = [
        (make(xs_shape=(4, 3)), "leading dimension"),
        (make({"length": -1}), "length must be an int"),
        (make({"length": True}), "length must be an int"),
        (make({"num_carry": 3}), "exceed"),
        (make({"body": "nope"}), "must be a graphc Graph"),
        (make(out_shape=(4,)), "result 0 is float64"),
        (make(out_index=7), "index 7"),
        (make(xs_shape=(5, 4)), "input 1 of its body graph"),
        (make({"num_consts": 1, "num_carry": 0}), r"result 0 is float64\[5, 3\]"),
        (make({"num_consts": 0, "num_carry": 2}), "input 1 of its body graph"),
    ]
    for g, msg in cases:
        with pytest.raises(GraphVerificationError, match=msg):
            Schedule(g)
    g = make()
    g.outputs.append(2)  # the token itself
    with pytest.raises(GraphVerificationError, match="token"):
        Schedule(g)


# --- threads ------------------------------------------------------------------------------
def test_parallel_kernels_inside_the_body():
    """Loops big enough to be split across the pool run inside each iteration (the loop
    runs on the calling thread; each body kernel is one pool job, as from the entry)."""
    old = graphc.get_num_threads()
    graphc.set_num_threads(2)
    try:
        n = 1 << 18

        def body(w, c, x):
            nc = c * 0.5 + w * x
            return nc, nc.sum(), nc.max()

        ex = run_scan(body, [_r(n)], [_r(n)], [_r(4)], reverse=True)
        assert parallel_policy.needs_pool(ex.plan)
        assert ex.releases_gil
        # two Python threads calling at once: each call has its own arena and scratch
        args = (_r(n), _r(n), _r(4))
        want = ex.run(args)
        errs = []

        def call():
            try:
                for _ in range(3):
                    got = ex.run(args)
                    for g_, w_ in zip(got, want):
                        np.testing.assert_array_equal(g_, w_)
            except Exception as e:  # pragma: no cover - reported below
                errs.append(e)

        ts = [threading.Thread(target=call) for _ in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errs
    finally:
        graphc.set_num_threads(old)


def test_poisoned_arena_finds_no_aliasing():
    """Schedule(poison=True) overwrites dead arena buffers; the loop's scratch and its
    body's arena must never be read after their last use."""

    def body(w, a, b, x):
        t = (a * w).tanh()
        return b + t, a - x, (t * b).sum(), t

    run_scan(body, [_r(6)], [_r(6), _r(6)], [_r(5, 6)], poison=True, opt_level=0)
    run_scan(body, [_r(6)], [_r(6), _r(6)], [_r(5, 6)], poison=True, reverse=True, fuse=False)


def test_same_node_as_carry_and_y_and_constant_operands():
    """A body output listed twice (carry and y), and scan operands that are constants
    of the outer graph (a 0-d one is copied into a buffer first)."""

    def body(k, c, x):
        nc = c + k * x
        return nc, nc

    bd = trace_body(body, [np.zeros(3), np.zeros(()), np.zeros(3)])
    g = Graph("consts")
    xs = g.add_input("xs", (4, 3), "float64")
    k = g.add_const(np.arange(3.0))
    c0 = g.add_const(np.array(1.5))
    s = g.add_node(
        "scan",
        (k, c0, xs),
        {"body": bd, "length": 4, "reverse": True, "num_consts": 1, "num_carry": 1},
        shape=(),
        dtype="bool",
    )
    # the carry is 0-d but the body's new carry broadcasts to (3,): refused
    g.add_node("loop_out", (s,), {"index": 0}, shape=(), dtype="float64")
    with pytest.raises(GraphVerificationError, match="output 0 of its body graph"):
        Schedule(g)

    bd = trace_body(body, [np.zeros(3), np.zeros(3), np.zeros(3)])
    g = Graph("consts")
    xs = g.add_input("xs", (4, 3), "float64")
    k = g.add_const(np.arange(3.0))
    c0 = g.add_node("expand", (g.add_const(np.array(1.5)),), {"shape": (3,)})
    s = g.add_node(
        "scan",
        (k, c0, xs),
        {"body": bd, "length": 4, "reverse": True, "num_consts": 1, "num_carry": 1},
        shape=(),
        dtype="bool",
    )
    g.outputs = [
        g.add_node("loop_out", (s,), {"index": 1}, shape=(4, 3), dtype="float64"),
        g.add_node("loop_out", (s,), {"index": 0}, shape=(3,), dtype="float64"),
    ]
    xv = _r(4, 3)
    got = compile_graph(g).run((xv,))
    carry, steps = ref_scan(body, [np.arange(3.0)], [np.full(3, 1.5)], [xv], 4, True)
    _close(got[1], carry[0], "carry")
    _close(got[0], np.stack([s_[0] for s_ in steps]), "ys")


def test_self_referential_body_is_refused():
    """A body graph holding a scan over itself would recurse forever: refused."""
    b = Graph("selfish")
    c = b.add_input("c", (3,), "float64")
    s = b.add_node(
        "scan",
        (c,),
        {"body": b, "length": 1, "reverse": False, "num_consts": 0, "num_carry": 1},
        shape=(),
        dtype="bool",
    )
    b.outputs = [b.add_node("loop_out", (s,), {"index": 0}, shape=(3,), dtype="float64")]
    with pytest.raises(GraphVerificationError, match="nested more than"):
        Schedule(b)


def test_index_error_in_a_nested_body_propagates():
    def inner(table, i, x):
        return i + 1, table[i] + x

    ib = trace_body(inner, [np.zeros(16), np.array(0), np.array(0.0)])
    ob = Graph("outer_body")
    table = ob.add_input("table", (16,), "float64")
    i0 = ob.add_input("i", (), "int64")
    row = ob.add_input("row", (3,), "float64")
    s = ob.add_node(
        "scan",
        (table, i0, row),
        {"body": ib, "length": 3, "reverse": False, "num_consts": 1, "num_carry": 1},
        shape=(),
        dtype="bool",
    )
    i1 = ob.add_node("loop_out", (s,), {"index": 0}, shape=(), dtype="int64")
    ys = ob.add_node("loop_out", (s,), {"index": 1}, shape=(3,), dtype="float64")
    ob.outputs = [i1, ys]
    g, _ = scan_graph(ob, [np.zeros(16)], [np.array(0)], [np.zeros((3, 3))], 3)
    ex = compile_graph(g)
    tv, xv = np.arange(16.0), np.ones((3, 3))
    with pytest.raises(IndexError):
        ex.run((tv, np.array(10), xv))  # i reaches 16 in the second outer step
    got = ex.run((tv, np.array(-9), xv))  # -9 .. -1: in range
    assert got[0] == 0
    np.testing.assert_array_equal(got[1], (np.arange(-9, 0) % 16 + 1.0).reshape(3, 3))
