"""Concatenations of many operands and entries of many inputs compile in linear time:
above a few operands the cat kernel copies by one loop over constant tables
(graphc.backend.lowering.joining.CAT_TABLE_MIN), above a few inputs the entry checks and
reads its inputs by loops over the argument tuple (graphc.backend.lower.ENTRY_LOOP_MIN).
Both forms must give exactly eager's bits, for every dtype, layout and dim."""

from __future__ import annotations

import functools
import operator

import numpy as np
import pytest

import eager
import graphc
from graphc.backend import abi, lower
from graphc.backend.lowering import joining


def _brief_cat(*ts):
    return eager.cat([t.t() if t.ndim else t for t in ts], 0)


def _brief_inputs(n):
    return [np.full((2, k % 3), float(k)) for k in range(n)]


def _eager(f, xs):
    return f(*[eager.tensor(a) for a in xs]).numpy()


def _same(got, want):
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want, equal_nan=True), (got, want)


def _pre_ir(cf):
    (entry,) = cf._cache.values()
    return entry.stages["_executable"].jit.llvm_ir(optimized=False)


@pytest.mark.parametrize("n", [1, 2, 17, 40])
@pytest.mark.parametrize("lv", [0, 3])
def test_transposed_operands_with_empty_ones(n, lv):
    xs = _brief_inputs(n)
    cf = graphc.compile(_brief_cat, opt_level=lv, disk_cache=False)
    _same(cf(*xs), _eager(_brief_cat, xs))
    ir_text = _pre_ir(cf)
    assert ("_cat_t0" in ir_text) == (n > joining.CAT_TABLE_MIN)
    assert ("check_inputs" in ir_text) == (n > lower.ENTRY_LOOP_MIN)


def test_1100_operands_at_o3():
    xs = _brief_inputs(1100)
    cf = graphc.compile(_brief_cat, opt_level=3, disk_cache=False)
    _same(cf(*xs), _eager(_brief_cat, xs))


def test_table_and_unrolled_forms_agree(monkeypatch):
    xs = _brief_inputs(30)
    table = graphc.compile(_brief_cat, disk_cache=False)(*xs)
    monkeypatch.setattr(joining, "CAT_TABLE_MIN", None)
    monkeypatch.setattr(lower, "ENTRY_LOOP_MIN", None)
    cf = graphc.compile(_brief_cat, disk_cache=False)
    unrolled = cf(*xs)
    assert "_cat_t0" not in _pre_ir(cf) and "check_inputs" not in _pre_ir(cf)
    _same(table, unrolled)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
@pytest.mark.parametrize("n", [3, 20])
def test_dtypes(dtype, n):
    rng = np.random.default_rng(n)
    xs = [(rng.standard_normal((k % 4, 3)) * 5).astype(dtype) for k in range(n)]

    def f(*ts):
        return eager.cat(ts, 0)

    _same(graphc.compile(f, disk_cache=False)(*xs), _eager(f, xs))


@pytest.mark.parametrize("n", [3, 20])
def test_mixed_dtypes_promote(n):
    kinds = ["bool", "int32", "int64", "float32", "float64"]
    xs = [(np.arange(6).reshape(2, 3) - k).astype(kinds[k % 5]) for k in range(n)]

    def f(*ts):
        return eager.cat(ts, 1)

    want = _eager(f, xs)
    assert want.dtype == (np.float64 if n >= 5 else np.int64)
    _same(graphc.compile(f, disk_cache=False)(*xs), want)


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
@pytest.mark.parametrize("n", [2, 20])
def test_each_dim_non_contiguous_operands(dim, n):
    """Operands are strided, transposed, broadcast and size-0 views made in the function;
    legacy (0,) operands are skipped."""
    rng = np.random.default_rng(dim + 10 * n)
    base = [3, 4, 2]
    xs = []
    for k in range(n):
        shape = list(base)
        shape[dim] = k % 3  # 0, 1 or 2 along the cat dim
        xs.append(rng.standard_normal([2 * s for s in shape]))

    def f(*ts):
        parts = []
        for k, t in enumerate(ts):
            v = t[::2, ::2, ::2]
            if k % 4 == 1:
                v = (v.transpose(0, 2).contiguous().transpose(0, 2)) * 1.0
            elif k % 4 == 2:
                v = v.flip(1)
            parts.append(v)
        parts.insert(1, eager.zeros(0))
        return eager.cat(parts, dim)

    _same(graphc.compile(f, disk_cache=False)(*xs), _eager(f, xs))


@pytest.mark.parametrize("n", [3, 20])
def test_zero_d_and_size_one(n):
    xs = [np.array(float(k)) for k in range(n)]

    def f(*ts):
        return eager.stack(ts) + eager.cat([t.reshape(1) for t in ts])

    _same(graphc.compile(f, disk_cache=False)(*xs), _eager(f, xs))


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_stack_of_many(dim):
    rng = np.random.default_rng(dim)
    xs = [rng.standard_normal((3, 2)).astype(np.float32) for _ in range(25)]

    def f(*ts):
        return eager.stack([t.t() for t in ts], dim)

    _same(graphc.compile(f, disk_cache=False)(*xs), _eager(f, xs))


@pytest.mark.parametrize("threads", [1, 2])
def test_thread_counts(threads):
    old = graphc.get_num_threads()
    graphc.set_num_threads(threads)
    try:
        rng = np.random.default_rng(threads)
        xs = [rng.standard_normal((64, 33)) for _ in range(40)]

        def f(*ts):
            return eager.cat([t * 2.0 for t in ts], 1) * 3.0 - 1.0  # exact ops (exp is 1 ulp)

        _same(graphc.compile(f, disk_cache=False)(*xs), _eager(f, xs))
    finally:
        graphc.set_num_threads(old)


@pytest.mark.parametrize("n", [3, 20])
def test_grad_through_cat_and_split(n):
    """cat's VJP splits the cotangent; split's VJP concatenates (many pieces)."""
    rng = np.random.default_rng(n)
    xs = [rng.standard_normal((k % 3 + 1, 4)) for k in range(n)]
    w = rng.standard_normal((sum(k % 3 + 1 for k in range(n)), 4))

    def loss(*ts):
        y = eager.cat(ts, 0) * eager.tensor(w)
        pieces = y.split(1, 0)
        return functools.reduce(operator.add, [p.sin().sum() * (i + 1) for i, p in enumerate(pieces)])

    argnums = tuple(range(n))
    got = graphc.compile(graphc.grad(loss, argnums=argnums), disk_cache=False)(*xs)
    ts = [eager.tensor(a, requires_grad=True) for a in xs]
    loss(*ts).backward()
    assert len(got) == n
    for g, t in zip(got, ts):
        np.testing.assert_allclose(np.asarray(g), t.grad.numpy(), rtol=1e-12, atol=1e-12)


# --- the entry of many inputs ---------------------------------------------------------


def test_sum_of_many_inputs():
    xs = [np.full((3,), float(k)) for k in range(40)]

    def f(*ts):
        return eager.stack([t.sum() for t in ts]).sum()

    cf = graphc.compile(f, disk_cache=False)
    _same(np.asarray(cf(*xs)), _eager(f, xs))
    assert "check_inputs" in _pre_ir(cf)


def test_many_inputs_many_kernels_in_parts():
    """100 inputs, 100 reductions: the entry runs its kernels through part functions
    (graphc.backend.parts), which take the data pointers the input loop read."""
    xs = [np.full((3,), float(k)) for k in range(100)]

    def f(*ts):
        return eager.stack([t.sum() * (i + 1) for i, t in enumerate(ts)])

    cf = graphc.compile(f, opt_level=0, disk_cache=False)
    _same(cf(*xs), _eager(f, xs))
    ir_text = _pre_ir(cf)
    assert "check_inputs" in ir_text and "graphc_part" in ir_text


def test_many_inputs_layouts_are_copied():
    """A non-contiguous or misaligned input anywhere (here the 36th) is copied and the
    call retried, as with few inputs."""
    xs = [np.arange(6.0) + k for k in range(40)]

    def f(*ts):
        return eager.cat(ts, 0)

    cf = graphc.compile(f, disk_cache=False)
    want = _eager(f, xs)
    _same(cf(*xs), want)
    ys = list(xs)
    ys[35] = np.repeat(xs[35], 2)[::2]
    buf = bytearray(1 + 6 * 8)
    mis = np.frombuffer(buf, np.float64, offset=1, count=6)
    mis[:] = xs[39]
    ys[39] = mis
    _same(cf(*ys), want)


def test_many_inputs_wrong_types_and_counts():
    """The loop over the argument tuple refuses what the straight-line checks refuse."""
    xs = [np.arange(3.0) for _ in range(40)]

    def f(*ts):
        return eager.cat(ts, 0)

    cf = graphc.compile(f, disk_cache=False)
    want = _eager(f, xs)
    _same(cf(*xs), want)

    class Sub(np.ndarray):
        pass

    ys = list(xs)
    ys[33] = xs[33].view(Sub)
    _same(np.asarray(cf(*ys)), want)
    # the native entry itself: a tuple of the wrong length, an item that is not an ndarray
    (entry,) = cf._cache.values()
    exe = entry.stages["_executable"]
    _same(np.asarray(exe._native(tuple(xs))[0]), want)
    assert exe._native(tuple(xs[:-1])) == abi.RC_ARGS
    assert exe._native(tuple(xs + xs[:1])) == abi.RC_ARGS
    assert exe._native(tuple(xs[:33] + [[0.0, 1.0, 2.0]] + xs[34:])) == abi.RC_TYPE
    assert exe._native(tuple(xs[:39] + [ys[33]])) == abi.RC_TYPE
    assert exe._native(tuple([ys[33]] + xs[1:])) == abi.RC_TYPE
    ro = xs[5].copy()
    ro.flags.writeable = False  # read-only inputs are fine (nothing is written over them)
    _same(np.asarray(exe._native(tuple(xs[:5] + [ro] + xs[6:]))[0]), want)
    assert exe._native(tuple(xs[:20] + [np.repeat(xs[20], 2)[::2]] + xs[21:])) == abi.RC_LAYOUT


def _sgd(*ts):
    n = len(ts) // 2
    for w, g in zip(ts[:n], ts[n:]):
        w -= 0.5 * g
    return ts[0].sum()


def _sgd_ref(ws, gs):
    for w, g in zip(ws, gs):
        w -= 0.5 * g
    return ws[0].sum()


@pytest.mark.parametrize("case", ["plain", "overlap", "readonly"])
def test_many_inputs_in_place_updates(case):
    """20 parameters updated in place (40 inputs): the in-place guard still sees every
    input's flags and memory."""
    cf = graphc.compile(_sgd, recompile_limit=100, disk_cache=False)
    ws = [np.arange(9.0) + k for k in range(20)]
    gs = [np.linspace(1.0, 2.0, 9) * k for k in range(20)]
    base = np.arange(10.0)
    if case == "overlap":
        ws[17], gs[3] = base[1:], base[:-1]
    if case == "readonly":
        ws[19].flags.writeable = False
        # refused before anything runs, with numpy's error for a numpy argument
        # (CompiledFunction's memory check) ...
        with pytest.raises(ValueError, match="read-only"):
            cf(*ws, *gs)
        np.testing.assert_array_equal(ws[19], np.arange(9.0) + 19)
        # ... and the native entry's own guard, reached directly, sees input 19's flags
        ws[19].flags.writeable = True
        cf(*ws, *gs)
        exe = cf._native((*ws, *gs))
        ws[19].flags.writeable = False
        before = ws[19].copy()
        assert exe._native(tuple(ws + gs)) == abi.RC_LAYOUT
        np.testing.assert_array_equal(ws[19], before)
        return
    rb = base.copy()
    rws = [np.array(w) for w in ws]
    rgs = [np.array(g) for g in gs]
    if case == "overlap":
        rws[17], rgs[3] = rb[1:], rb[:-1]
    want = _sgd_ref(rws, rgs)
    got = cf(*ws, *gs)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    for w, rw in zip(ws, rws):
        np.testing.assert_allclose(w, rw, rtol=1e-12)
    if case == "overlap":
        np.testing.assert_allclose(base, rb, rtol=1e-12)
