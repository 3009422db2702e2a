"""The native backend: parity, dtypes, layouts, opt levels, NaN/Inf, inspection, caches,
threads and memory.

* every op sample (float32 and float64) compiled at opt_level=0 agrees with the
  interpreter and stays identical when its inputs arrive Fortran-ordered,
  strided, reversed or read-only (opt_level=2 is covered by
  tests/parity/test_interpreter_parity.py);
* int64/int32/bool programs (comparisons, where, argmax/argmin, integer sums,
  logical ops, casts) and broadcasting / 0-d / size-1 / size-0 shapes: native ==
  interpreter == eager, same dtype and shape;
* random composite programs agree across opt levels 0..3;
* NaN and Inf propagate like numpy through max/min/relu/clamp/maximum/minimum,
  comparisons, sums and argmax;
* ``llvm_ir()``/``asm()`` name kernels and graph nodes; every op has a lowering;
* the engine LRU, the disk cache (including corrupted entries), concurrent
  calls and compiles, and bounded memory over many compiles and calls (slow).
"""
from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import threading
import warnings
import weakref

import numpy as np
import pytest

import eager
import graphc
from eager.surface import _dispatch
from eager.ops import OPS
from graphc.backend import schedule as P
from graphc.interpreter import interpret
from graphc.runtime import cache

from tests.parity.test_interpreter_parity import Program, _native_tol, _with_dtype

FLOATS = [np.float32, np.float64]
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))  # repository root


def _flat(x) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _np(x) -> np.ndarray:
    return x.numpy() if isinstance(x, eager.Tensor) else np.asarray(x)


def _tol(dtype) -> dict:
    return _native_tol(np.dtype(dtype))


def _assert_same(got, want, msg: str = "", exact: bool = False) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{msg}: dtype {got.dtype} vs {want.dtype}"
    assert got.shape == want.shape, f"{msg}: shape {got.shape} vs {want.shape}"
    if exact or got.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=msg)
    else:
        np.testing.assert_allclose(got, want, equal_nan=True, err_msg=msg, **_tol(got.dtype))


def three_way(fn, *arrays, opt_level: int = 2, exact: bool = False) -> list:
    """Run ``fn`` eagerly, through the interpreter and natively; assert all agree."""
    want = [_np(v) for v in _flat(fn(*[eager.from_numpy(np.array(a)) for a in arrays]))]
    g = graphc.trace(fn, *arrays)
    interp = interpret(g, *arrays)
    native = _flat(graphc.compile(fn, opt_level=opt_level)(*arrays))
    assert len(interp) == len(native) == len(want)
    for k, (w, i, n) in enumerate(zip(want, interp, native)):
        _assert_same(i, w, f"output {k}: interpreter vs eager", exact=True)
        _assert_same(n, w, f"output {k}: native vs eager", exact=exact)
    return native


# ---------------------------------------------------------------------------------------
# every op sample, at opt_level 0, in every memory layout


def _layouts(a: np.ndarray) -> dict:
    """The same values as ``a`` in other memory layouts (same shape and dtype)."""
    out = {"fortran": np.array(a, order="F")}
    ro = a.copy()
    ro.flags.writeable = False
    out["readonly"] = ro
    if a.ndim:
        big = np.zeros(tuple(2 * d for d in a.shape), a.dtype)
        every_other = tuple(slice(None, None, 2) for _ in a.shape)
        big[every_other] = a
        out["strided"] = big[every_other]
        flip = tuple(slice(None, None, -1) for _ in a.shape)
        out["reversed"] = np.ascontiguousarray(a[flip])[flip]
    for name, v in out.items():
        assert v.shape == a.shape and v.dtype == a.dtype and np.array_equal(v, a), name
    return out


def _sample_cases() -> list:
    return [pytest.param(name, k, dt, id=f"{name}-{k}-{np.dtype(dt).name}")
            for name in sorted(OPS) for k, _ in enumerate(OPS[name].samples()) for dt in FLOATS]


@pytest.mark.parametrize("name, k, dtype", _sample_cases())
def test_op_sample_native_o0_every_layout(name, k, dtype):
    inputs, attrs = OPS[name].samples()[k]
    arrays = _with_dtype(inputs, dtype)

    def one_op(*xs):
        return _dispatch(name, "X", xs, dict(attrs))

    one_op.__name__ = f"op_{name}"
    (ref,) = interpret(graphc.trace(one_op, *arrays), *arrays)
    cf = graphc.compile(one_op, opt_level=0)
    out = cf(*arrays)
    _assert_same(out, ref, f"{name} sample {k} at opt_level=0")
    layouts = [_layouts(a) for a in arrays]
    for kind in ("fortran", "readonly", "strided", "reversed"):
        moved = [lay.get(kind, a) for lay, a in zip(layouts, arrays)]
        _assert_same(cf(*moved), out, f"{name} sample {k} with {kind} inputs", exact=True)
    for a, orig in zip(arrays, _with_dtype(inputs, dtype)):
        np.testing.assert_array_equal(a, orig)          # inputs are never written
    assert cf.cache_info().traces == 1                 # layouts share the signature


# ---------------------------------------------------------------------------------------
# integer and bool dtypes


def _int_cases() -> list:
    rng = np.random.default_rng(7)
    i = rng.integers(-4, 5, (3, 4))
    j = rng.integers(-4, 5, (4,))
    i32 = rng.integers(-4, 5, (3, 4)).astype(np.int32)
    p = rng.random((3, 4)) < 0.5
    q = rng.random((4,)) < 0.5
    f = rng.uniform(-3, 3, (3, 4))
    cmp = lambda x, y: (x < y, x <= y, x > y, x >= y, x == y, x != y)  # noqa: E731
    cases = {
        "cmp_int64": (cmp, i, j),
        "cmp_bool": (cmp, p, q),
        "cmp_int_float": (cmp, i, f),
        "cmp_int32_int64": (cmp, i32, j),
        "cmp_bool_int": (cmp, p, j),
        "where_int": (lambda c, x, y: eager.where(c, x, y), p, i, j),
        "where_bool": (lambda c, x, y: eager.where(c, x, y), p, p, q),
        "where_int_float": (lambda c, x, y: eager.where(c, x, y), p, i, f),
        "where_int_cond": (lambda c, x, y: eager.where(c > 0, x, y), i, f, j),
        "argmax_int": (lambda x: (x.argmax(), x.argmax(0), x.argmax(1, keepdim=True)), i),
        "argmin_int": (lambda x: (x.argmin(), x.argmin(0), x.argmin(1, keepdim=True)), i),
        "argmax_bool": (lambda x: (x.argmax(), x.argmax(0), x.argmin(1)), p),
        "argmax_int32": (lambda x: (x.argmax(1), x.argmin(0)), i32),
        "sum_int": (lambda x: (x.sum(), x.sum(0), x.sum(1, keepdim=True)), i),
        "sum_int32": (lambda x: (x.sum(), x.sum(0)), i32),
        "sum_bool": (lambda x: (x.sum(), x.sum(0), x.sum(1, keepdim=True)), p),
        "max_min_int": (lambda x: (x.amax(), x.amin(0), x.amax(1, keepdim=True)), i),
        "all_any": (lambda x, y: (x.all(), x.any(0), y.all(1), y.any()), p, i),
        "logical": (lambda x, y: (eager.logical_and(x, y), eager.logical_or(x, y),
                                  eager.logical_not(x)), p, q),
        "logical_int_float": (lambda x, y: (eager.logical_and(x, y), eager.logical_or(x, y),
                                            eager.logical_not(y)), i, f),
        "cast_int": (lambda x: (x.to(eager.float32), x.double(), x.bool(), x.int(),
                                x.to(eager.int64)), i),
        "cast_float": (lambda x: (x.long(), x.int(), x.bool(), x.float()), f),
        "cast_bool": (lambda x: (x.long(), x.float(), x.double(), x.int()), p),
        "cast_int32": (lambda x: (x.long(), x.double(), x.bool()), i32),
        "arith_int": (lambda x, y: (x + y, x - y, x * y, -x, x.abs(), x.sign(),
                                    x.clamp(-2, 3), eager.maximum(x, y),
                                    eager.minimum(x, y)), i, j),
        "arith_int32": (lambda x, y: (x + y, x * y, -x, x.abs()), i32, j),
        "int_pow": (lambda x: (x ** 2, x * x * x), i),
        "int_true_div": (lambda x, y: x / (y.abs() + 1), i, j),
        "int_float_promote": (lambda x, y: (x + y, x * y, y - x), i, f),
        "bool_arith": (lambda x, y: (x.long() + y, x.to(eager.float64) * 2.5), p, j),
        "int_matmul": (lambda x, y: x @ y, i, j),
        "int_index": (lambda x, t: (x[1], x[:, 1:3], x[t], x.T[t]), i, np.array([2, 0, -1])),
        "bool_reshape_transpose": (lambda x: (x.T, x.reshape(4, 3), x.unsqueeze(0)), p),
        "int_scalar_ops": (lambda x: (x + 3, x * 2, x > 1, x == 0), i),
    }
    return [pytest.param(v[0], v[1:], id=k) for k, v in cases.items()]


@pytest.mark.parametrize("fn, arrays", _int_cases())
def test_int_and_bool_dtypes(fn, arrays):
    three_way(fn, *arrays, exact=True)


def test_int_overflow_wraps_like_numpy():
    x = np.array([2 ** 62, -2 ** 63, 2 ** 63 - 1], np.int64)
    out = three_way(lambda x: (x + x, x * 3, -x, x.sum()), x, exact=True)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out[0], x + x)


# ---------------------------------------------------------------------------------------
# broadcasting, 0-d, size-1 and size-0 shapes

SHAPE_PAIRS = [
    ((), ()), ((), (3,)), ((1,), (3,)), ((3,), (1,)), ((2, 1, 3), (4, 1)), ((5, 1), (1, 5)),
    ((1, 1, 1), ()), ((2, 3), (2, 3)), ((0,), ()), ((0, 3), (3,)), ((2, 0), (1, 1)),
    ((0,), (1,)), ((3, 0, 2), (1, 2)),
]


def _shape_fn(x, y):
    z = x * y + (x - y).tanh() / (y.abs() + 1)
    outs = [z, eager.maximum(x, y), (x < y), eager.where(x > 0, x, y), z.sum(),
            z.sum(-1, keepdim=True) if z.ndim else z.sum(), z.mean() if z.numel() else z.sum(),
            z.reshape(-1), (z + 1).exp()]
    if z.numel():
        outs += [z.amax(), z.amin(0) if z.ndim else z.amin(), z.argmax()]
    if z.ndim >= 2:
        outs += [z.transpose(0, 1), z.sum((0, 1)), z[..., :1]]
    return tuple(outs)


@pytest.mark.parametrize("dtype", FLOATS, ids=["f32", "f64"])
@pytest.mark.parametrize("sx, sy", SHAPE_PAIRS, ids=[f"{a}x{b}" for a, b in SHAPE_PAIRS])
def test_broadcast_and_degenerate_shapes(sx, sy, dtype):
    rng = np.random.default_rng(len(sx) * 10 + len(sy))
    x = rng.uniform(-2, 2, sx).astype(dtype)
    y = rng.uniform(-2, 2, sy).astype(dtype)
    three_way(_shape_fn, x, y)


@pytest.mark.parametrize("fn", [lambda x: x.sum(0), lambda x: x.sum(0, keepdim=True),
                                lambda x: x.amax(0), lambda x: (x.mean(0), x.amin())],
                         ids=["sum0", "sum0_keepdim", "amax0", "mean0_amin"])
def test_a_reduction_to_one_element_in_a_parallel_loop(fn):
    """(N, 1) reduced over dim 0 with N above PARALLEL_MIN: the loop is split across
    threads and its reduction, shaped (1,), is a full one (lowering raised KeyError)."""
    from graphc.backend.abi import PARALLEL_MIN
    x = np.random.default_rng(0).normal(size=(PARALLEL_MIN + 37, 1))
    three_way(fn, x)


def test_gradient_of_a_1x1_bias_over_many_rows():
    def loss(x, w, b):
        return ((x @ w + b) ** 2).sum()

    rng = np.random.default_rng(1)
    x, w, b = rng.normal(size=(2**18, 1)), rng.normal(size=(1, 1)), rng.normal(size=(1, 1))
    value, (gw, gb) = graphc.compile(graphc.value_and_grad(loss, argnums=(1, 2)))(x, w, b)
    tw, tb = eager.from_numpy(w.copy()).requires_grad_(), eager.from_numpy(b.copy()).requires_grad_()
    want = loss(eager.from_numpy(x), tw, tb)
    want.backward()
    np.testing.assert_allclose(value, want.item(), rtol=1e-12)
    np.testing.assert_allclose(gw, tw.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(gb, tb.grad.numpy(), rtol=1e-12)


EMPTY_EXTREMA = {
    "amax1": lambda x: x.amax(1), "amin1_keepdim": lambda x: x.amin(1, keepdim=True),
    "max1": lambda x: tuple(x.max(1)), "min1_keepdim": lambda x: tuple(x.min(1, keepdim=True)),
    "argmax1": lambda x: x.argmax(1), "argmin1_keepdim": lambda x: x.argmin(1, keepdim=True),
    "amax02": lambda x: x.reshape(0, 3, 1).amax((1, 2)),
}


@pytest.mark.parametrize("opt_level", [0, 2])
@pytest.mark.parametrize("case", sorted(EMPTY_EXTREMA))
def test_extrema_of_an_empty_tensor_over_non_empty_dims(case, opt_level):
    """PyTorch returns an empty result when the reduced dims are not empty."""
    out = three_way(EMPTY_EXTREMA[case], np.ones((0, 3)), opt_level=opt_level, exact=True)
    assert all(o.size == 0 for o in out)


EMPTY_DIM_ERRORS = {
    "amax0": (lambda x: x.amax(0), IndexError, "max(): Expected reduction dim 0 to have non-zero"),
    "max0": (lambda x: x.max(0), IndexError, "max(): Expected reduction dim 0 to have non-zero"),
    "amin0": (lambda x: x.amin(0), IndexError, "min(): Expected reduction dim 0 to have non-zero"),
    "argmax0": (lambda x: x.argmax(0), IndexError, "argmax(): Expected reduction dim 0 to"),
    "argmin0": (lambda x: x.argmin(0), IndexError, "argmin(): Expected reduction dim 0 to"),
    "max": (lambda x: x.max(), RuntimeError, "max(): Expected reduction dim to be specified"),
    "amin": (lambda x: x.amin(), RuntimeError, "min(): Expected reduction dim to be specified"),
    "argmax": (lambda x: x.argmax(), IndexError, "argmax(): Expected reduction dim to be"),
}


@pytest.mark.parametrize("case", sorted(EMPTY_DIM_ERRORS))
def test_extrema_over_an_empty_dim_raise_pytorchs_error(case):
    """No identity to return: eager and the tracer raise PyTorch's error and type."""
    fn, err, msg = EMPTY_DIM_ERRORS[case]
    x = np.ones((0, 3))
    with pytest.raises(err, match=re.escape(msg)):
        fn(eager.from_numpy(x))
    with pytest.raises(err, match=re.escape(msg) + r".*\[while tracing"):
        graphc.compile(fn)(x)


# PyTorch accepts dim 0 or -1 of a 0-d tensor in a reduction (the tensor itself); eager
# passed it to numpy, which raised AxisError, and tracing max(0) raised IndexError
# (found by the fuzzer, seeds 254 and 259)
ZERO_D_REDUCTIONS = ["x.sum(0)", "x.sum(-1, keepdim=True)", "x.mean(0)", "x.amax(0)",
                     "x.amin(-1, keepdim=True)", "x.max(0).values",
                     "x.min(-1, keepdim=True)[0]", "x.sum((0,))"]


@pytest.mark.parametrize("src", ZERO_D_REDUCTIONS)
def test_a_reduction_over_dim_0_of_a_0d_tensor_is_the_tensor(src):
    fn = eval("lambda x: " + src)
    x = eager.tensor(2.5, dtype=eager.float64, requires_grad=True)
    y = fn(x)
    assert y.shape == () and float(y) == 2.5
    (gx,) = eager.autograd.grad(y * 3, x)
    assert float(gx) == 3.0
    for lvl in (0, 2):
        assert graphc.compile(fn, opt_level=lvl)(np.array(2.5)) == 2.5
        assert graphc.compile(graphc.grad(lambda a: fn(a) * 3), opt_level=lvl)(
            np.array(2.5)) == 3.0
    idx = x.detach().max(0).indices if "max" in src else x.detach().argmin(-1)
    assert idx.shape == () and int(idx) == 0


# ---------------------------------------------------------------------------------------
# random composite programs: every opt level gives the same results


@pytest.mark.parametrize("dtype", FLOATS, ids=["f32", "f64"])
@pytest.mark.parametrize("seed", range(10))
def test_random_program_opt_levels_agree(seed, dtype):
    prog = Program(seed + 100, dtype)
    ref = interpret(graphc.trace(prog, *prog.inputs), *prog.inputs)
    levels = (0, 1, 2, 3) if seed < 3 else (0, 3)
    results = {}
    for lvl in levels:
        out = graphc.compile(prog, opt_level=lvl)(*prog.inputs)
        for k, (a, b) in enumerate(zip(out, ref)):
            _assert_same(a, b, f"opt_level={lvl} output {k} of {prog.describe()}")
        results[lvl] = out
    for lvl in levels[1:]:
        for a, b in zip(results[lvl], results[0]):
            _assert_same(a, b, f"opt_level={lvl} vs 0 on {prog.describe()}")


# ---------------------------------------------------------------------------------------
# NaN and Inf

NAN_X = np.array([[np.nan, 1.0, -np.inf, 3.0], [np.inf, -0.0, 2.0, np.nan],
                  [0.5, -7.0, np.inf, -np.inf]])
NAN_Y = np.array([[0.0, np.nan, 1.0, np.inf], [np.nan, 0.0, -np.inf, 1.0],
                  [1.0, -7.0, np.nan, -np.inf]])

NAN_CASES = {
    "max_all": (lambda x, y: x.amax(), lambda x, y: np.max(x)),
    "max_axis0": (lambda x, y: x.amax(0), lambda x, y: np.max(x, 0)),
    "max_axis1": (lambda x, y: x.amax(1), lambda x, y: np.max(x, 1)),
    "min_axis1_keep": (lambda x, y: x.amin(1, keepdim=True),
                       lambda x, y: np.min(x, 1, keepdims=True)),
    "min_all": (lambda x, y: x.amin(), lambda x, y: np.min(x)),
    "max_finite_rows": (lambda x, y: x[2:].amax(1), lambda x, y: np.max(x[2:], 1)),
    "relu": (lambda x, y: x.relu(), lambda x, y: np.maximum(x, 0)),
    "clamp": (lambda x, y: x.clamp(-1, 1), lambda x, y: np.clip(x, -1, 1)),
    "clamp_min": (lambda x, y: x.clamp(min=0.5), lambda x, y: np.maximum(x, 0.5)),
    "maximum": (lambda x, y: eager.maximum(x, y), np.maximum),
    "minimum": (lambda x, y: eager.minimum(x, y), np.minimum),
    "lt": (lambda x, y: x < y, np.less),
    "le": (lambda x, y: x <= y, np.less_equal),
    "gt": (lambda x, y: x > y, np.greater),
    "ge": (lambda x, y: x >= y, np.greater_equal),
    "eq": (lambda x, y: x == y, np.equal),
    "ne": (lambda x, y: x != y, np.not_equal),
    "self_ne": (lambda x, y: x != x, lambda x, y: x != x),
    "sum_all": (lambda x, y: x.sum(), lambda x, y: np.sum(x)),
    "sum_axis": (lambda x, y: x.sum(1), lambda x, y: np.sum(x, 1)),
    "sum_inf": (lambda x, y: x[2:, :3].sum(), lambda x, y: np.sum(x[2:, :3])),
    "mean_axis0": (lambda x, y: x.mean(0), lambda x, y: np.mean(x, 0)),
    "argmax": (lambda x, y: x.argmax(1), lambda x, y: np.argmax(x, 1)),
    "argmin": (lambda x, y: x.argmin(1), lambda x, y: np.argmin(x, 1)),
    "argmax_all": (lambda x, y: x.argmax(), lambda x, y: np.argmax(x)),
    "argmax_axis0": (lambda x, y: x.argmax(0), lambda x, y: np.argmax(x, 0)),
    "where": (lambda x, y: eager.where(x > y, x, y), lambda x, y: np.where(x > y, x, y)),
    "sign_abs": (lambda x, y: x.sign() * x.abs(), lambda x, y: np.sign(x) * np.abs(x)),
    "mul_add": (lambda x, y: x * y + x, lambda x, y: x * y + x),
    "div": (lambda x, y: x / y, lambda x, y: x / y),
    "logical": (lambda x, y: eager.logical_and(x, y), np.logical_and),
    "to_bool": (lambda x, y: x.bool(), lambda x, y: x.astype(bool)),
}


@pytest.mark.parametrize("opt_level", [0, 2])
@pytest.mark.parametrize("dtype", FLOATS, ids=["f32", "f64"])
@pytest.mark.parametrize("case", sorted(NAN_CASES))
def test_nan_inf_propagate_like_numpy(case, dtype, opt_level):
    fn, ref = NAN_CASES[case]
    x, y = NAN_X.astype(dtype), NAN_Y.astype(dtype)
    with np.errstate(all="ignore"):
        want = np.asarray(ref(x, y))
    got = graphc.compile(fn, opt_level=opt_level)(x, y)
    if want.dtype.kind == "i":
        want = want.astype(np.int64)
    assert got.shape == want.shape
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want.astype(got.dtype), equal_nan=True, **_tol(dtype))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
        np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    else:
        np.testing.assert_array_equal(got, want)
    with np.errstate(all="ignore"):
        ev = _np(fn(eager.from_numpy(x.copy()), eager.from_numpy(y.copy())))
    _assert_same(got, ev, f"{case}: native vs eager")


# ---------------------------------------------------------------------------------------
# inspection and registry


def _inspect_me(x, w):
    h = (x @ w).tanh()
    return (h * 2 + 1).sum(0)


def test_llvm_ir_and_asm_name_kernels_and_nodes():
    x, w = np.ones((4, 3)), np.ones((3, 5))
    cf = graphc.compile(_inspect_me, opt_level=2)
    plan_text = cf.plan(x, w)
    kernels = re.findall(r"k(\d+): <(\w+)", plan_text)
    assert kernels, plan_text
    names = [f"k{i}_{kind}" for i, kind in kernels]
    g = cf._entry_for((x, w)).stages["optimized"]
    matmul = [n for n, d in g.nx.nodes(data=True) if d["op"] == "matmul"][0]
    node_comment = re.compile(rf"%{matmul} = matmul\(%\d+, %\d+\) : f64\[4,5\] "
                              rf"\(from test_native\.py:\d+\)")
    raw = cf.llvm_ir(x, w)
    opt = cf.llvm_ir(x, w, optimized=True)
    asm = cf.asm(x, w)
    for what, text in (("unoptimized IR", raw), ("optimized IR", opt), ("asm", asm)):
        assert "graphc_entry" in text, what
        for name in names:
            assert name in text, f"{what} does not name kernel {name}"
        assert node_comment.search(text), f"{what} has no comment for node %{matmul}"
    assert raw != opt.split("\n", 1)[1]
    assert "define internal" in raw and "; %" in raw
    assert re.search(r"^\s*(call|jmp)\w*\s", asm, re.M)          # real machine code


def test_every_op_has_a_native_lowering():
    """Every op record has exactly the lowering entry its family needs (a scalar lowering,
    a reduction, a view or a kernel), and no entry lowers an op no record defines."""
    from graphc.backend import lowering
    assert lowering.problems() == []
    for name, op in OPS.items():
        low = lowering.LOWERINGS[name]
        if op.family == "elementwise":
            assert name in P.ELEMENTWISE and low.scalar is not None
        elif op.family == "view":
            assert name in P.VIEW_OPS and low.view is not None


def test_lowering_table_refuses_what_is_not_an_op():
    from graphc.backend.lowering import table
    with pytest.raises(ValueError, match="no op record defines"):
        table.register("no_such_op", scalar=lambda kb, e: None)
    with pytest.raises(ValueError, match="two lowerings"):
        table.register("add", scalar=lambda kb, e: None)


# ---------------------------------------------------------------------------------------
# engine LRU


@pytest.fixture
def engine_limit():
    old = cache.engine_limit()
    yield cache.set_engine_limit
    cache.set_engine_limit(old)


def _poly(x):
    return (x * 3 + 1).sum()


def test_lru_evicts_least_recently_used(engine_limit):
    engine_limit(3)
    cf = graphc.compile(_poly, opt_level=0, recompile_limit=100)
    arrays = [np.arange(n, dtype=np.float64) for n in range(1, 7)]
    for a in arrays[:3]:
        assert cf(a) == _poly(a)
    cf(arrays[0])                           # arrays[0] is now more recent than 1 and 2
    old_entry = cf._entry_for((arrays[1],))
    jit_ref = weakref.ref(old_entry.stages["_executable"].jit)
    del old_entry
    cf(arrays[3])                           # evicts arrays[1] (least recently used)
    assert cf.cache_info().entries == 3 and cf.evictions == 1
    gc.collect()
    assert jit_ref() is None, "the evicted entry's engine was not freed"
    traces = cf.cache_info().traces
    cf(arrays[0])                           # still cached
    assert cf.cache_info().traces == traces
    assert cf(arrays[1]) == _poly(arrays[1])    # evicted: re-traced, right answer
    assert cf.cache_info().traces == traces + 1
    assert cache.live_engines() <= 3


def test_lru_keeps_an_entry_alive_while_in_use(engine_limit):
    engine_limit(2)
    cf = graphc.compile(_poly, opt_level=0, recompile_limit=100)
    a = np.arange(4.0)
    cf(a)
    entry = cf._entry_for((a,))             # what a call in flight holds
    for n in range(10, 14):
        cf(np.ones(n))
    assert cf._cache.get(entry.key) is not entry        # evicted from the cache ...
    for _ in range(3):                                  # ... but its engine still runs
        (out,) = entry.run([a])
        assert out == _poly(a)


def test_lru_limit_validation_and_shrink(engine_limit):
    with pytest.raises(ValueError):
        engine_limit(0)
    with pytest.raises(ValueError):
        engine_limit(2.5)
    engine_limit(None)
    fns = [graphc.compile(lambda x, k=k: x * k, opt_level=0) for k in range(4)]
    for f in fns:
        f(np.ones(3))
    assert all(f.cache_info().entries == 1 for f in fns)
    engine_limit(2)                          # shrinking evicts at once
    assert sum(f.cache_info().entries for f in fns) == 2
    assert fns[0].cache_info().entries == 0 and fns[3].cache_info().entries == 1


# ---------------------------------------------------------------------------------------
# disk cache


def _disk_fn(x, w):
    return ((x @ w).tanh() * 0.5 + x.sum()).amax(1)


def _disk_args():
    rng = np.random.default_rng(3)
    return rng.normal(size=(4, 3)), rng.normal(size=(3, 6))


def _executable(cf, args):
    return cf._entry_for(args).stages["_executable"]


def test_disk_cache_round_trip(tmp_path):
    d = str(tmp_path / "cache")
    args = _disk_args()
    want = _disk_fn(*[eager.from_numpy(a) for a in args]).numpy()
    cf = graphc.compile(_disk_fn, disk_cache=d)
    np.testing.assert_allclose(cf(*args), want, rtol=1e-12)
    assert _executable(cf, args).cache_status == "disk-stored"
    files = cache.DiskCache(d).entries()
    assert len(files) == 1
    blob = open(files[0], "rb").read()
    assert blob.startswith(cache.MAGIC)
    header = blob[len(cache.MAGIC):blob.index(b"\n", len(cache.MAGIC))]
    import json
    meta = json.loads(header)
    assert meta["format"] == cache.FORMAT_VERSION and meta["key"] in files[0]
    assert blob[-meta["size"]:].startswith(b"\x7fELF")      # a plain object file
    cf2 = graphc.compile(_disk_fn, disk_cache=d)             # a new function: new trace
    np.testing.assert_array_equal(cf2(*args), cf(*args))
    ex = _executable(cf2, args)
    assert ex.cache_status == "disk-hit"
    # inspection still works on code loaded from disk
    assert "graphc_entry" in cf2.llvm_ir(*args) and "graphc_entry" in cf2.asm(*args)
    # other opt levels and other constants are other keys
    cf3 = graphc.compile(_disk_fn, disk_cache=d, opt_level=0)
    np.testing.assert_allclose(cf3(*args), want, rtol=1e-12)
    assert _executable(cf3, args).cache_status == "disk-stored"
    assert len(cache.DiskCache(d).entries()) == 2


def test_disk_cache_key_covers_constants(tmp_path):
    d = str(tmp_path / "c")
    x = np.ones(3)
    outs = []
    for c in (np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0])):
        cf = graphc.compile(lambda x: x * c, disk_cache=d)
        outs.append(cf(x))
        assert _executable(cf, (x,)).cache_status == "disk-stored"
    np.testing.assert_array_equal(outs[1], [1.0, 2.0, 4.0])


def test_disk_cache_key_covers_in_place_updates(tmp_path):
    """``w -= g`` and ``return w - g`` optimize to the same graph; only the first may write
    into ``w``'s memory, so they must not share object code."""
    d = str(tmp_path / "c")

    def update(w, g):
        w -= g

    def difference(w, g):
        return w - g

    g = np.ones(4)
    w = np.arange(4.0)
    graphc.compile(update, disk_cache=d)(w, g)
    np.testing.assert_array_equal(w, [-1.0, 0.0, 1.0, 2.0])
    w2 = np.arange(4.0)
    out = graphc.compile(difference, disk_cache=d)(w2, g)
    np.testing.assert_array_equal(out, [-1.0, 0.0, 1.0, 2.0])
    np.testing.assert_array_equal(w2, np.arange(4.0))          # not written


def _corrupt(path: str, how: str, other: str) -> None:
    blob = open(path, "rb").read()
    start = blob.index(b"\n", len(cache.MAGIC)) + 1
    if how == "flip_payload":
        i = start + (len(blob) - start) // 2
        blob = blob[:i] + bytes([blob[i] ^ 0xFF]) + blob[i + 1:]
    elif how == "truncate_payload":
        blob = blob[:start + 100]
    elif how == "truncate_header":
        blob = blob[:len(cache.MAGIC) + 10]
    elif how == "empty":
        blob = b""
    elif how == "garbage":
        blob = os.urandom(3000)
    elif how == "bad_magic":
        blob = b"X" + blob[1:]
    elif how == "wrong_key":           # a well-formed entry for another key: a foreign file
        blob = blob.replace(os.path.basename(path)[:64].encode(), b"0" * 64)
    elif how == "other_entry":         # a valid entry of another graph under this name
        blob = open(other, "rb").read()
    elif how == "future_format":
        blob = blob.replace(b'"format":1', b'"format":99')
    else:
        raise AssertionError(how)
    with open(path, "wb") as fh:
        fh.write(blob)


CORRUPTIONS = ["flip_payload", "truncate_payload", "truncate_header", "empty", "garbage",
               "bad_magic", "wrong_key", "other_entry", "future_format"]


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_disk_cache_bad_entry_is_ignored_and_recompiled(tmp_path, how):
    d = str(tmp_path / "cache")
    args = _disk_args()
    want = graphc.compile(_disk_fn, disk_cache=False)(*args)
    graphc.compile(lambda x: x + 1, disk_cache=d)(np.ones(2))        # another entry
    other = cache.DiskCache(d).entries()[0]
    graphc.compile(_disk_fn, disk_cache=d)(*args)
    (path,) = [p for p in cache.DiskCache(d).entries() if p != other]
    _corrupt(path, how, other)
    cf = graphc.compile(_disk_fn, disk_cache=d)
    with pytest.warns(cache.DiskCacheWarning, match="ignoring disk cache entry"):
        got = cf(*args)
    np.testing.assert_array_equal(got, want)
    assert _executable(cf, args).cache_status == "disk-stored"      # recompiled, rewritten
    cf2 = graphc.compile(_disk_fn, disk_cache=d)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(cf2(*args), want)
    assert _executable(cf2, args).cache_status == "disk-hit"


def test_disk_cache_hit_in_another_process(tmp_path):
    d = str(tmp_path / "shared")
    code = (
        "import numpy as np, graphc\n"
        "def f(x, w):\n"
        "    return ((x @ w).relu() + 1).sum(0)\n"
        "cf = graphc.compile(f)\n"
        "x = np.arange(12.0).reshape(4, 3); w = np.arange(6.0).reshape(3, 2)\n"
        "out = cf(x, w)\n"
        "print(cf._entry_for((x, w)).stages['_executable'].cache_status, out.tolist())\n")
    env = dict(os.environ, GRAPHC_CACHE_DIR=d, PYTHONPATH=ROOT)
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=120) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    assert runs[0].stdout.split()[0] == "disk-stored"
    assert runs[1].stdout.split()[0] == "disk-hit"
    assert runs[0].stdout.split(" ", 1)[1] == runs[1].stdout.split(" ", 1)[1]
    x = np.arange(12.0).reshape(4, 3)
    w = np.arange(6.0).reshape(3, 2)
    assert runs[1].stdout.split(" ", 1)[1].strip() == str((np.maximum(x @ w, 0) + 1)
                                                          .sum(0).tolist())


def test_disk_cache_hit_of_a_parallel_graph_in_another_process(tmp_path):
    """Object code that releases the GIL and reads the thread count links in a new process."""
    code = (
        "import numpy as np, graphc\n"
        "graphc.set_num_threads(2)\n"
        "cf = graphc.compile(graphc.value_and_grad(lambda x, w: ((x * w).tanh() ** 2).sum(),"
        " argnums=1))\n"
        "x = np.linspace(-1, 1, 1 << 19); w = np.array(0.5)\n"
        "v, g = cf(x, w)\n"
        "exe = cf._entry_for((x, w)).stages['_executable']\n"
        "print(exe.cache_status, exe.releases_gil, round(float(v), 6), round(float(g), 6))\n")
    env = dict(os.environ, GRAPHC_CACHE_DIR=str(tmp_path / "c"), PYTHONPATH=ROOT)
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=120) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    assert runs[0].stdout.split()[:2] == ["disk-stored", "True"]
    assert runs[1].stdout.split()[:2] == ["disk-hit", "True"]
    x = np.linspace(-1, 1, 1 << 19)
    t = np.tanh(x * 0.5)
    want = [round(float((t ** 2).sum()), 6), round(float((2 * t * (1 - t * t) * x).sum()), 6)]
    for r in runs:
        assert [float(v) for v in r.stdout.split()[2:]] == pytest.approx(want, rel=1e-9)


# ---------------------------------------------------------------------------------------
# the call: the entry point allocates the outputs and returns them as a tuple


def _seed_vg():
    def seed(a, w1, w2, w3, w4):
        d = w3 * (w1 * a) + w4 * (w2 * a)
        return (10 - d).sum()
    return graphc.compile(graphc.value_and_grad(seed, argnums=(0, 1, 2, 3, 4)))


def test_outputs_are_new_independent_arrays_and_nothing_leaks():
    cf = _seed_vg()
    xs = [np.random.default_rng(k).normal(size=(3, 3)) for k in range(5)]
    a, w1, w2, w3, w4 = xs
    cf(*xs)                   # compiling may leave garbage cycles that refer to the inputs
    gc.collect()
    refs = [sys.getrefcount(x) for x in xs]
    v, grads = cf(*xs)
    assert sys.getrefcount(v) == 2                    # ``v`` and getrefcount's argument
    assert type(grads) is tuple and len(grads) == 5
    np.testing.assert_allclose(v, (10 - (w3 * w1 * a + w4 * w2 * a)).sum(), rtol=1e-14)
    for g, want in zip(grads, [-(w3 * w1 + w4 * w2), -w3 * a, -w4 * a, -w1 * a, -w2 * a]):
        np.testing.assert_allclose(g, want, rtol=1e-14)
    outs = [v, *grads]
    for o in outs:
        assert type(o) is np.ndarray and o.dtype == np.float64
        assert o.flags.owndata and o.flags.writeable and o.flags.c_contiguous
        assert not any(np.shares_memory(o, x) for x in xs)
    assert not any(np.shares_memory(p, q) for i, p in enumerate(outs) for q in outs[i + 1:])
    again = cf(*xs)
    assert again[0] is not v and all(p is not q for p, q in zip(again[1], grads))
    fortran = [np.asfortranarray(x) for x in xs]      # rc 1: copied, then called again
    for _ in range(200):
        cf(*xs)
        got = cf(*fortran)
    np.testing.assert_array_equal(got[1][0], grads[0])
    gc.collect()
    assert [sys.getrefcount(x) for x in xs] == refs


def _traced_growth(fn, n: int) -> int:
    """Bytes still allocated (tracemalloc sees numpy's data buffers) after ``n`` calls.
    numpy also records the size of an allocation that failed (as np.empty does), so
    absurd sizes are left out."""
    import tracemalloc
    fn()
    gc.collect()
    tracemalloc.start()
    try:
        for _ in range(n):
            fn()
        gc.collect()
        return sum(t.size for t in tracemalloc.take_snapshot().traces if t.size < 1 << 40)
    finally:
        tracemalloc.stop()


def test_failed_calls_drop_their_outputs():
    cf = graphc.compile(lambda x, i: (x * 2, x[i]))
    x, ok, bad = np.arange(float(1 << 17)), np.array([0, 4]), np.array([0, 1 << 17])
    refs = sys.getrefcount(x), sys.getrefcount(bad)

    def fail():
        with pytest.raises(IndexError, match="out of range"):
            cf(x, bad)
    assert _traced_growth(fail, 20) < 1 << 20         # 20 leaked outputs would be 20 MB
    assert (sys.getrefcount(x), sys.getrefcount(bad)) == refs
    np.testing.assert_array_equal(cf(x, ok)[1], [0.0, 4.0])


def test_an_output_numpy_cannot_allocate_raises_its_memory_error():
    cf = graphc.compile(lambda a, b: (a * 2, a + b))     # the second output is 128 TiB
    a, b = np.ones((1 << 22, 1)), np.ones((1, 1 << 22))
    refs = sys.getrefcount(a), sys.getrefcount(b)

    def fail():
        with pytest.raises(MemoryError, match="Unable to allocate"):
            cf(a, b)
    assert _traced_growth(fail, 5) < 1 << 20          # the first output (32 MB) is freed
    assert (sys.getrefcount(a), sys.getrefcount(b)) == refs


def test_native_entry_checks_its_argument_tuple():
    from graphc.backend import abi as L
    from graphc.errors import GraphcError
    cf = graphc.compile(lambda x, y: x * y)
    x = np.ones(3)
    cf(x, x)
    exe = cf._entry_for((x, x)).stages["_executable"]
    assert exe._native([x, x]) == L.RC_ARGS              # a list is not read as a tuple
    assert exe._native((x,)) == L.RC_ARGS
    with pytest.raises(GraphcError, match="takes a tuple of 2 arrays"):
        exe.run_trusted((x, x, x))                      # the entry's own check
    with pytest.raises(GraphcError, match="takes 2 input arrays"):
        exe.run((x, x, x))                              # run checks first
    assert type(exe.run([x, x])) is tuple
    assert not exe.releases_gil


# ---------------------------------------------------------------------------------------
# threads


def test_concurrent_calls_and_compiles():
    rng = np.random.default_rng(11)
    fns = [
        lambda x, y: (x * y + 1).tanh().sum(0),
        lambda x, y: eager.maximum(x @ y.T, 0).amax(1),
        lambda x, y: eager.where(x > y, x - y, (y - x).exp()).mean(1),
    ]
    # per function: a small signature and one big enough to run with the GIL released
    sigs = [((3, 4), np.float64), ((160, 128), np.float32)]
    inputs = [(rng.normal(size=s).astype(dt), rng.normal(size=s).astype(dt)) for s, dt in sigs]
    want = {(fi, si): _np(f(*[eager.from_numpy(a.copy()) for a in inputs[si]]))
            for fi, f in enumerate(fns) for si in range(len(sigs))}
    cfs = [graphc.compile(f) for f in fns]
    n_threads, n_calls = 8, 150
    barrier = threading.Barrier(n_threads)
    errors = []

    def worker(t):
        try:
            barrier.wait()
            order = np.random.default_rng(t).integers(0, len(fns) * len(sigs), n_calls)
            for c in order:
                fi, si = divmod(int(c), len(sigs))
                got = cfs[fi](*inputs[si])
                np.testing.assert_allclose(got, want[fi, si], rtol=2e-5, atol=1e-5)
        except BaseException as e:    # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]
    for cf in cfs:
        info = cf.cache_info()
        assert info.traces == len(sigs) and info.entries == len(sigs), info
        assert info.misses == len(sigs)


def test_concurrent_backward_through_a_compiled_function():
    cf = graphc.compile(lambda x, w: ((x @ w).tanh() ** 2).sum())
    rng = np.random.default_rng(5)
    xs = [rng.normal(size=(4, 3)) for _ in range(6)]
    w0 = rng.normal(size=(3, 2))

    def expected(x):
        w = eager.from_numpy(w0.copy()).requires_grad_()
        ((eager.from_numpy(x) @ w).tanh() ** 2).sum().backward()
        return w.grad.numpy()

    want = [expected(x) for x in xs]
    barrier = threading.Barrier(6)
    errors = []

    def worker(t):
        try:
            barrier.wait()
            for _ in range(20):
                w = eager.from_numpy(w0.copy()).requires_grad_()
                cf(eager.from_numpy(xs[t]), w).backward()
                np.testing.assert_allclose(w.grad.numpy(), want[t], rtol=1e-10, atol=1e-12)
        except BaseException as e:    # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]
    assert cf.cache_info().traces == 1
    (entry,) = cf._cache.values()
    assert entry.stages["_vjp_fn"].cache_info().traces == 1


def test_concurrent_calls_while_the_lru_evicts(engine_limit):
    engine_limit(3)
    cfs = [graphc.compile(lambda x: (x * 2).sum(), opt_level=0, recompile_limit=10 ** 6),
           graphc.compile(lambda x: (x + 1).amax(), opt_level=0, recompile_limit=10 ** 6)]
    refs = [lambda a: (a * 2).sum(), lambda a: (a + 1).max()]
    arrays = [np.arange(n, dtype=np.float64) for n in range(1, 6)]
    errors = []

    def worker(t):
        rng = np.random.default_rng(t)
        try:
            for _ in range(40):
                fi, ai = int(rng.integers(2)), int(rng.integers(len(arrays)))
                assert cfs[fi](arrays[ai]) == refs[fi](arrays[ai])
        except BaseException as e:    # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]
    assert cache.live_engines() <= 3
    assert sum(cf.evictions for cf in cfs) > 0


# ---------------------------------------------------------------------------------------
# memory (slow; run in CI)


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_memory_bounded_over_600_distinct_compiles(engine_limit):
    """600 compile-and-call cycles of distinct signatures: with the LRU at 16 engines the
    resident size plateaus (after 200 compiles, 12 times the limit, it must stop growing:
    400 more engines kept alive would add far more than the bound).  opt_level=0 because
    llvmlite leaks ~90 KB per *optimized* compile (graphc.runtime.llvm_engine docstring);
    that leak is llvmlite's, not the engines'."""
    engine_limit(16)
    cf = graphc.compile(lambda x, y: (x * 2 + y).exp().sum(), opt_level=0,
                        recompile_limit=10 ** 6)
    gc.collect()
    start = _rss_mb()
    marks = {}
    for n in range(1, 601):
        x = np.full(n, 0.001)
        out = cf(x, x)
        if n % 50 == 0:
            assert abs(out - np.exp(0.003) * n) < 1e-9 * n
        if n in (200, 600):
            gc.collect()
            marks[n] = _rss_mb()
    assert cf.cache_info().traces == 600
    assert cf.cache_info().entries <= 16 and cache.live_engines() <= 16
    assert cf.evictions >= 600 - 16
    assert marks[600] - start < 200, f"RSS grew {marks[600] - start:.0f} MB"
    # after the LRU filled up (200 compiles in), growth must have stopped
    assert marks[600] - marks[200] < 20, \
        f"RSS still growing: {marks[200]:.0f} MB at 200 compiles, {marks[600]:.0f} at 600"


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_memory_flat_over_a_million_calls():
    cf = graphc.compile(lambda x, y: (x * y + 1.0).relu().sum(1))
    x, y = np.ones((3, 3)), np.full((3, 3), 2.0)
    for _ in range(100_000):                 # warm up allocator pools
        cf(x, y)
    gc.collect()
    before = _rss_mb()
    for _ in range(900_000):
        out = cf(x, y)
    gc.collect()
    after = _rss_mb()
    np.testing.assert_array_equal(out, [9.0, 9.0, 9.0])
    assert cf.cache_info().traces == 1 and cf.cache_info().hits == 999_999
    assert after - before < 8, f"RSS grew {after - before:.1f} MB over 900,000 calls"


def test_run_rejects_inputs_the_code_was_not_compiled_for():
    from graphc.errors import GraphcError
    f = graphc.compile(lambda a, b: a * b + 1)
    x = np.ones((3, 4))
    f(x, x)
    exe = _executable(f, (x, x))
    np.testing.assert_array_equal(exe.run([x, x])[0], x * x + 1)
    for bad in ([x, np.ones(3, np.int8)], [x, np.ones((4, 3))], [x, x.tolist()], [x]):
        with pytest.raises(GraphcError, match="input|takes"):
            exe.run(bad)


def test_disk_cache_key_covers_every_code_generator_file():
    """An edit anywhere in the backend (its lowering table's subpackage too), the runtime's
    entry point, engine and pool, or the random op's constants makes new keys: edited code
    never reuses object code compiled by the old one."""
    import os

    from graphc.runtime import cache as C

    root = os.path.dirname(os.path.dirname(os.path.abspath(graphc.__file__)))
    files = set(C._code_generator_files(root))
    backend = os.path.join(root, "graphc", "backend")
    for dirpath, dirnames, filenames in os.walk(backend):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for f in filenames:
            if f.endswith(".py"):
                assert os.path.relpath(os.path.join(dirpath, f), root) in files, f
    assert os.path.join("graphc", "backend", "lowering", "elementwise.py") in files
    assert os.path.join("eager", "ops", "random.py") in files


def test_in_place_guard_checks_every_pair_natively():
    """The native guard of in-place outputs (a loop over constant tables) refuses, with
    RC_LAYOUT, inputs an updated input overlaps or a read-only target; disjoint ones run."""
    from graphc.backend import abi

    def update(w, v, g, h):
        w -= g
        v += h

    args = (np.zeros(4), np.zeros(4), np.ones(4), np.ones(4))
    cf = graphc.compile(update)
    cf(*args)
    exe = _executable(cf, args)
    assert sorted(set(exe.plan.inplace.values())) == [0, 1]
    buf = np.zeros(16)
    assert exe._native((buf[0:4], buf[4:8], buf[8:12], buf[12:16])).__class__ is tuple
    base = np.zeros(8)
    overlapping = [
        (base[0:4], np.zeros(4), base[2:6], np.ones(4)),  # w and g share bytes
        (np.zeros(4), base[0:4], np.ones(4), base[3:7]),  # v and h (last pair)
        (base[0:4], base[3:7], np.ones(4), np.ones(4)),  # the two targets
        (np.zeros(4), base[4:8], base[0:4].copy(), base[1:5]),  # v's neighbour h overlaps
    ]
    for arrays in overlapping:
        rc = exe._native(arrays)
        lo = [a.__array_interface__["data"][0] for a in arrays]
        touching = any(
            i != j and lo[i] < lo[j] + 32 and lo[j] < lo[i] + 32 for i in (0, 1) for j in range(4)
        )
        assert (rc == abi.RC_LAYOUT) == touching, (rc, lo)
    ro = np.zeros(4)
    ro.flags.writeable = False
    assert exe._native((ro, np.zeros(4), np.ones(4), np.ones(4))) == abi.RC_LAYOUT
    # the public call still computes eager's answer on overlapping arrays (through copies)
    w = np.zeros(6)
    cf(w[0:4], np.zeros(4), w[2:6], np.ones(4))
    want = np.zeros(6)
    want[0:4] -= want[2:6]
    np.testing.assert_array_equal(w, want)
