"""NaN, ±Inf, ±0, subnormals and huge magnitudes through every elementwise op and reduction.

For each case (a function written against the Tensor API, so the same code runs
on ``eager`` and on ``torch``) and each float dtype:

* eager == PyTorch: the same NaN positions, the same infinities, the same signs
  of zero and of every result, zero where PyTorch gives zero, finite values
  within a few ulp (numpy's and PyTorch's math libraries round differently).
  When ``torch`` imports the comparison is live; otherwise eager is checked
  against ``special_values_torch.json``, the classes PyTorch 2.13 (CPU) gave,
  recorded by running this file with torch installed:
  ``python tests/parity/test_special_values.py --record``.
* compiled at opt levels 0-3 == eager: the same classes bit for bit (NaN
  positions, signs of zero) and values exact, or within the documented
  accuracy of graphc's vector math for transcendentals.

Left out on purpose (documented in docs/limitations.md): float-to-int casts of
NaN/Inf/out-of-range values (undefined in C; native code saturates), and sums
whose overflow depends on the order of the additions (native code reassociates).
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

import eager
import graphc

try:                                     # an optional oracle, never a dependency
    import torch
except ImportError:
    torch = None

HERE = os.path.dirname(os.path.abspath(__file__))
RECORD = os.path.join(HERE, "special_values_torch.json")
DTYPES = ("float32", "float64")
LEVELS = (0, 1, 2, 3)


def _specials(dt: str) -> list:
    """One value per role: NaN, infinities, signed zeros, subnormals, huge, ordinary."""
    f = np.finfo(dt)
    sub = float(f.smallest_subnormal)
    exp_big, exp_small = (88.8, -103.5) if dt == "float32" else (709.9, -744.5)
    return [np.nan, np.inf, -np.inf, 0.0, -0.0, sub, -sub, sub * 5, float(f.max) / 2,
            -float(f.max) / 2, 1.0, -1.0, 0.5, -2.5, 3.0, exp_big, exp_small]


def _pair_values(dt: str) -> list:
    f = np.finfo(dt)
    return [np.nan, np.inf, -np.inf, 0.0, -0.0, float(f.smallest_subnormal), float(f.max) / 2,
            1.0, -1.0, 0.5, -2.5]


def _rows(dt: str) -> np.ndarray:
    """Rows for reductions over dim 1: NaN first/middle, infinities, zeros of both signs,
    subnormals, ties; no row whose sum overflows in one order and not in another."""
    nan, inf = np.nan, np.inf
    h, s = float(np.finfo(dt).max) / 2, float(np.finfo(dt).smallest_subnormal)
    return np.array([[nan, 1, 2, 3], [1, nan, -inf, 2], [inf, -inf, 1, 2], [inf, inf, 1, 1],
                     [-inf, -1, -inf, -0.0], [-0.0, -0.0, -0.0, -0.0], [0.0, -0.0, -0.0, 0.0],
                     [-0.0, 0.0, 0.0, -0.0], [h, h, h, h], [-h, -h, -1, 1], [s, s, -s, 0.0],
                     [s, -s, -s, -0.0], [1, 3, 3, 2], [-2, -5, -5, -1], [0.0, 0.0, 0.0, 0.0],
                     [nan, nan, 1, inf], [2, 1, nan, nan]], dtype=dt)


def _grid(dt: str) -> tuple:
    v = np.array(_pair_values(dt), dtype=dt)
    return np.repeat(v, len(v)), np.tile(v, len(v))


UNARY = {
    "neg": lambda T, x: -x, "exp": lambda T, x: x.exp(), "log": lambda T, x: x.log(),
    "sqrt": lambda T, x: x.sqrt(), "sin": lambda T, x: x.sin(), "cos": lambda T, x: x.cos(),
    "tanh": lambda T, x: x.tanh(), "sigmoid": lambda T, x: x.sigmoid(),
    "relu": lambda T, x: x.relu(), "abs": lambda T, x: x.abs(), "sign": lambda T, x: x.sign(),
    "clamp": lambda T, x: x.clamp(-1.0, 1.0), "clamp_min": lambda T, x: x.clamp(min=0.0),
    "clamp_max": lambda T, x: x.clamp(max=-0.0), "logical_not": lambda T, x: T.logical_not(x),
    "to_bool": lambda T, x: x.bool(), "to_double": lambda T, x: x.double(),
    "to_float": lambda T, x: x.float(), "clone": lambda T, x: x.clone(),
    "detach": lambda T, x: x.detach() * 1.0, "zeros_like": lambda T, x: T.zeros_like(x),
    "pow_half": lambda T, x: x ** 0.5, "pow_minus_half": lambda T, x: x ** -0.5,
    "pow_2": lambda T, x: x ** 2, "pow_3": lambda T, x: x ** 3, "pow_minus_1": lambda T, x: x ** -1,
    "pow_0": lambda T, x: x ** 0, "pow_1": lambda T, x: x ** 1, "pow_1_5": lambda T, x: x ** 1.5,
    "rpow_2": lambda T, x: 2.0 ** x, "rpow_half": lambda T, x: 0.5 ** x,
    "mul_2": lambda T, x: x * 2.0, "add_zero": lambda T, x: x + 0.0, "sub_zero": lambda T, x: x - 0.0,
    "add_minus_zero": lambda T, x: x + (-0.0), "div_2": lambda T, x: x / 2.0,
    "rdiv_1": lambda T, x: 1.0 / x, "mul_minus_1": lambda T, x: x * -1.0,
}
BINARY = {
    "add": lambda T, x, y: x + y, "sub": lambda T, x, y: x - y, "mul": lambda T, x, y: x * y,
    "div": lambda T, x, y: x / y, "pow": lambda T, x, y: x ** y,
    "maximum": lambda T, x, y: T.maximum(x, y), "minimum": lambda T, x, y: T.minimum(x, y),
    "eq": lambda T, x, y: x == y, "ne": lambda T, x, y: x != y, "lt": lambda T, x, y: x < y,
    "le": lambda T, x, y: x <= y, "gt": lambda T, x, y: x > y, "ge": lambda T, x, y: x >= y,
    "logical_and": lambda T, x, y: T.logical_and(x, y),
    "logical_or": lambda T, x, y: T.logical_or(x, y),
    "where": lambda T, x, y: T.where(x > y, x, y),
}
REDUCE = {
    "sum": lambda T, x: x.sum(1), "mean": lambda T, x: x.mean(1), "amax": lambda T, x: x.amax(1),
    "amin": lambda T, x: x.amin(1), "max_values": lambda T, x: x.max(1).values,
    "max_indices": lambda T, x: x.max(1).indices, "min_indices": lambda T, x: x.min(1).indices,
    "argmax": lambda T, x: x.argmax(1), "argmin": lambda T, x: x.argmin(1),
    "all": lambda T, x: x.all(1), "any": lambda T, x: x.any(1),
    "sum_full": lambda T, x: x[:, 3:].sum(), "amax_full": lambda T, x: x[12:].amax(),
    "mean_dim0": lambda T, x: x[12:].mean(0), "amin_dim0": lambda T, x: x[:8].amin(0),
    "sum_keepdim": lambda T, x: x.sum(1, keepdim=True),
}
CASES = {**{k: ("unary", f) for k, f in UNARY.items()},
         **{k: ("binary", f) for k, f in BINARY.items()},
         **{k: ("reduce", f) for k, f in REDUCE.items()}}
# vector-math results: a few ulp from numpy's libm (docs/backend-accuracy.md)
TRANSCENDENTAL = {"exp", "log", "sin", "cos", "tanh", "sigmoid", "pow", "pow_1_5", "rpow_2",
                  "rpow_half", "pow_3", "pow_minus_1"}


def _inputs(kind: str, dt: str) -> list:
    if kind == "unary":
        return [np.array(_specials(dt), dtype=dt)]
    if kind == "binary":
        return list(_grid(dt))
    return [_rows(dt)]


def _classes(a: np.ndarray) -> str:
    """One letter per element: n NaN, P/M +-inf, z/Z +-0, p/m finite > 0 / < 0; bools and
    integers as their value."""
    a = np.asarray(a).reshape(-1)
    if a.dtype.kind == "b":
        return "".join("T" if v else "F" for v in a)
    if a.dtype.kind in "iu":
        return ",".join(str(int(v)) for v in a)
    out = []
    for v in a:
        if np.isnan(v):
            out.append("n")
        elif np.isinf(v):
            out.append("P" if v > 0 else "M")
        elif v == 0:
            out.append("Z" if np.signbit(v) else "z")
        else:
            out.append("p" if v > 0 else "m")
    return "".join(out)


def _run(T, name: str, arrays: list) -> np.ndarray:
    kind, fn = CASES[name]
    if T is eager:
        xs = [eager.from_numpy(a.copy()) for a in arrays]
        with np.errstate(all="ignore"):
            return np.asarray(fn(eager, *xs).numpy())
    xs = [torch.from_numpy(a.copy()) for a in arrays]
    return fn(torch, *xs).numpy()


def _dtype_name(a: np.ndarray) -> str:
    return np.asarray(a).dtype.name


def _close(got, want, dt: str, name: str, what: str) -> None:
    """Same classes, and the finite values within a few ulp of each other."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{name} {dt}: {what}: shape {got.shape} vs {want.shape}"
    cg, cw = _classes(got), _classes(want)
    if cg != cw:
        bad = [i for i, (a, b) in enumerate(zip(cg, cw)) if a != b]
        raise AssertionError(f"{name} {dt}: {what}: classes differ at {bad[:8]}: got "
                             f"{[got.reshape(-1)[i] for i in bad[:8]]}, want "
                             f"{[want.reshape(-1)[i] for i in bad[:8]]}\n{cg}\n{cw}")
    if got.dtype.kind == "f":
        tol = {"float32": 4e-6, "float64": 1e-13}[got.dtype.name]
        fin = np.isfinite(want) & np.isfinite(got)
        np.testing.assert_allclose(got[fin], want[fin].astype(got.dtype), rtol=tol, atol=0,
                                   err_msg=f"{name} {dt}: {what}")


def _recorded() -> dict:
    with open(RECORD) as f:
        return json.load(f)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_eager_matches_pytorch(name, dt):
    arrays = _inputs(CASES[name][0], dt)
    got = _run(eager, name, arrays)
    if torch is not None:
        want = _run(torch, name, arrays)
        assert _dtype_name(got) == _dtype_name(want), f"{name} {dt}: dtype"
        _close(got, want, dt, name, "eager vs PyTorch")
        return
    rec = _recorded()[f"{name}/{dt}"]
    assert [_dtype_name(got), list(np.shape(got))] == rec[:2], f"{name} {dt}: dtype and shape"
    assert _classes(got) == rec[2], f"{name} {dt}: eager vs recorded PyTorch classes"


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_matches_eager(name, dt):
    kind, fn = CASES[name]
    arrays = _inputs(kind, dt)
    want = _run(eager, name, arrays)
    for lvl in LEVELS:
        def one(*xs):
            return fn(eager, *xs)

        one.__name__ = f"special_{name}"
        got = graphc.compile(one, opt_level=lvl)(*arrays)
        assert _dtype_name(got) == _dtype_name(want), f"{name} {dt} opt_level={lvl}: dtype"
        if name in TRANSCENDENTAL:
            _close(got, want, dt, name, f"opt_level={lvl} vs eager")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{name} {dt} opt_level={lvl}")
            assert _classes(got) == _classes(want), f"{name} {dt} opt_level={lvl}: signs"


def record() -> None:
    """Write what PyTorch gives (dtype, shape, classes) for every case and dtype."""
    out = {}
    for name in sorted(CASES):
        for dt in DTYPES:
            r = _run(torch, name, _inputs(CASES[name][0], dt))
            out[f"{name}/{dt}"] = [_dtype_name(r), list(r.shape), _classes(r)]
    out["_source"] = f"torch {torch.__version__}, numpy {np.__version__}"
    with open(RECORD, "w") as f:         # one case per line
        f.write("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(out[k])}"
                                    for k in sorted(out)) + "\n}\n")


if __name__ == "__main__" and "--record" in sys.argv:
    record()


@pytest.mark.parametrize("dt", DTYPES)
def test_sin_cos_of_huge_arguments_in_every_kind_of_kernel(dt):
    """graphc's vector sin/cos are accurate below 2**20 pi/2 only (NaN from 2**51): a
    kernel meeting a larger argument runs again with libm's -- in a fused loop, with a
    reduction, split across threads, and in an in-place update (which must not run twice)."""
    from graphc.backend.abi import PARALLEL_MIN
    rng = np.random.default_rng(5)
    n = PARALLEL_MIN + 11
    x = rng.uniform(-10, 10, n)
    x[[3, 1000, n - 1]] = [1e7, -float(np.finfo(dt).max) / 3, 2.0 ** 60]
    x = x.astype(dt)
    tol = {"float32": 2e-6, "float64": 1e-12}[dt]
    with np.errstate(all="ignore"):
        s, c = np.sin(x), np.cos(x)
    for lvl in (0, 2):
        got = graphc.compile(lambda x: (x.sin(), x.cos() * 2, (x.sin() + 1).sum()),
                             opt_level=lvl)(x)
        np.testing.assert_allclose(got[0], s, rtol=tol, atol=tol)
        np.testing.assert_allclose(got[1], 2 * c, rtol=tol, atol=tol)
        np.testing.assert_allclose(got[2], (s.astype(np.float64) + 1).sum(), rtol=1e-5)
    small = x[:8].copy()

    def update(w):
        w -= w.sin()

    w = small.copy()
    graphc.compile(update)(w)
    np.testing.assert_allclose(w, small - np.sin(small), rtol=tol, atol=tol)


def test_float_to_int_casts_of_nan_and_out_of_range_values_agree():
    """C leaves them undefined; eager (numpy and PyTorch on x86) gives the integer minimum,
    and compiled code does the same at every opt level (it once saturated: NaN gave 0)."""
    a = np.array([np.nan, np.inf, -np.inf, 1e10, -1e10, 3e9, -3e9, 2.0 ** 63, 2.7, -2.7, -0.0])
    for dt in (eager.int64, eager.int32):
        for fdt in (np.float64, np.float32):
            x = a.astype(fdt)
            want = eager.tensor(x).to(dt).numpy()
            lo = np.iinfo(want.dtype).min
            assert want[0] == want[1] == want[2] == lo and list(want[-3:]) == [2, -2, 0]
            for opt in (0, 3):
                got = graphc.compile(lambda t: t.to(dt), opt_level=opt)(x)
                np.testing.assert_array_equal(got, want)
