"""How accurate graphc's vector math is: the ulp table of docs/backend-accuracy.md.

``measure_ulp()`` JIT-compiles a loop kernel per function and dtype
(graphc.backend.vecmath.define_map_kernel), runs it on each input domain and compares
with a wider reference; ``format_ulp_table`` prints the result.  A tool over the backend
and the runtime, so it lives here, not in the backend."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Callable

import numpy as np
from llvmlite import ir

from ..backend.vecmath import SPECS, TRIG_ACCURATE_LIMIT, TRIG_NAN_LIMIT, define_map_kernel
from ..runtime.llvm_engine import compile_module


@dataclass(frozen=True)
class UlpRow:
    """One line of the accuracy table."""

    function: str
    dtype: str
    domain: str
    points: int
    max_ulp: float
    max_abs_error: float
    worst_input: tuple[float, ...]
    special_mismatches: int


def _np_sigmoid(x: np.ndarray, target: np.dtype | None = None) -> np.ndarray:
    """The stable form, never 1/(1+inf); 0 where eager's (PyTorch's) 1/(1+exp(-x)) is 0
    in the ``target`` dtype (exp(-x) overflows there), whatever the reference's width."""
    target = np.dtype(target or x.dtype)
    spec = SPECS[target.name]
    with np.errstate(all="ignore"):
        one = x.dtype.type(1)
        e = np.exp(-np.abs(x))
        res = np.where(x >= 0, one / (one + e), e / (one + e))
        return np.where(x < -spec.exp_finite_max, x.dtype.type(0), res)


_NP_REFS: dict[str, Callable[..., np.ndarray]] = {
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "sigmoid": _np_sigmoid,
    "sin": np.sin,
    "cos": np.cos,
    "pow": np.power,
}


def _reference_dtype(dtype: np.dtype) -> type:
    """A wider type for the 'true' value: longdouble if it is wider than double."""
    if dtype == np.float32:
        return np.float64
    if np.finfo(np.longdouble).nmant > 52:
        return np.longdouble
    return np.float64  # no extended type here: errors are then relative to numpy's own f64


def _ulp_errors(got: np.ndarray, ref: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """|got - ref| in units of the ulp of ref in ``dtype``; exact class check for nan/inf."""
    info = np.finfo(dtype)
    p = info.nmant + 1
    emin = info.minexp
    with np.errstate(all="ignore"):
        ref_t = ref.astype(dtype)
        _, e = np.frexp(ref)
        e = np.maximum(e.astype(np.int64) - 1, emin)
        ulp = np.ldexp(np.ones_like(ref), (e - (p - 1)).astype(np.int32))
        err = np.abs(got.astype(ref.dtype) - ref) / ulp
    special = ~np.isfinite(ref_t) | ~np.isfinite(got)
    same = (np.isnan(ref_t) & np.isnan(got)) | (ref_t == got)
    return np.where(special, np.where(same, 0.0, np.inf), err.astype(np.float64))


def _special_mismatches(name: str, args: list[np.ndarray], got: np.ndarray) -> int:
    """Where numpy (same dtype) gives NaN, +-inf or a signed zero, we must give the same."""
    with np.errstate(all="ignore"):
        want = _NP_REFS[name](*args)
    check = ~np.isfinite(want) | (want == 0) | ~np.isfinite(got)
    nan_ok = np.isnan(want) & np.isnan(got)
    eq_ok = (want == got) & (np.signbit(want) == np.signbit(got))
    # a zero result only has to match in sign when numpy's is an exact zero from
    # the input (e.g. tanh(-0.0)); a flushed underflow may differ by rounding.
    zero_ok = (want == 0) & (got == 0) & (np.signbit(want) == np.signbit(got))
    bad = check & ~(nan_ok | eq_ok | zero_ok)
    if name in ("sin", "cos"):
        bad &= ~(np.abs(args[0]) >= TRIG_NAN_LIMIT)
    return int(np.count_nonzero(bad))


def _wide(
    rng: np.random.Generator,
    n: int,
    dtype: np.dtype,
    lo_exp: float,
    hi_exp: float,
    *,
    signed: bool = True,
) -> np.ndarray:
    """Log-uniform magnitudes 2**U(lo_exp, hi_exp), random signs."""
    x = np.exp2(rng.uniform(lo_exp, hi_exp, n))
    if signed:
        x *= rng.choice([-1.0, 1.0], n)
    return x.astype(dtype)


def _specials(dtype: np.dtype) -> np.ndarray:
    info = np.finfo(dtype)
    tiny_sub = info.smallest_subnormal
    vals = [
        np.nan,
        np.inf,
        -np.inf,
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        -2.0,
        float(tiny_sub),
        -float(tiny_sub),
        float(info.tiny),
        -float(info.tiny),
        float(info.max),
        -float(info.max),
        3.0,
        -3.0,
        1e-30,
        -1e-30,
    ]
    if dtype == np.float64:
        vals += [
            709.782712893384,
            709.7827128933841,
            -745.1332191019411,
            -745.1332191019412,
            -708.3964185322641,
            710.0,
            -746.0,
            1e300,
            -1e300,
        ]
    else:
        vals += [88.72283, 88.72284, -103.97208, -103.27893, -87.33655, 89.0, -104.0, 1e38, -1e38]
    return np.array(vals, dtype=dtype)


def _domains(
    name: str, dtype: np.dtype, rng: np.random.Generator, n: int
) -> list[tuple[str, list[np.ndarray]]]:
    """Input sets per function: (label, [x] or [x, y])."""
    f64 = dtype == np.float64
    big = 1023 if f64 else 127
    small = -1074 if f64 else -149
    exp_max = 709.78 if f64 else 88.72
    exp_min = -745.1 if f64 else -103.9
    u = lambda a, b: rng.uniform(a, b, n).astype(dtype)  # noqa: E731
    specials = _specials(dtype)
    if name == "exp":
        return [
            ("|x| < 1", [u(-1, 1)]),
            ("normal results", [u(-708 if f64 else -87, exp_max)]),
            ("subnormal results", [u(exp_min, -708 if f64 else -87)]),
            ("near overflow", [u(exp_max - 1, exp_max + 1)]),
            ("tiny |x|", [_wide(rng, n, dtype, small, -10)]),
            ("special values", [specials]),
        ]
    if name == "log":
        positive = _wide(rng, n, dtype, small, big + 0.99, signed=False)
        return [
            ("all positive (incl. subnormal)", [positive]),
            ("(0, 10)", [u(0, 10)]),
            ("near 1", [(1 + rng.uniform(-1e-3, 1e-3, n)).astype(dtype)]),
            ("negative", [-_wide(rng, n, dtype, -10, 10, signed=False)]),
            ("special values", [specials]),
        ]
    if name in ("tanh", "sigmoid"):
        lim = 20 if name == "tanh" else (745 if f64 else 104)
        return [
            ("|x| < 1", [u(-1, 1)]),
            (f"|x| < {lim}", [u(-lim, lim)]),
            ("tiny |x|", [_wide(rng, n, dtype, small, -10)]),
            ("all magnitudes", [_wide(rng, n, dtype, small, big + 0.99)]),
            ("special values", [specials]),
        ]
    if name in ("sin", "cos"):
        return [
            ("|x| < pi", [u(-np.pi, np.pi)]),
            ("|x| < 1e3", [u(-1e3, 1e3)]),
            ("|x| < 1e5", [u(-1e5, 1e5)]),
            ("|x| < 2**20 pi/2", [u(-TRIG_ACCURATE_LIMIT, TRIG_ACCURATE_LIMIT)]),
            ("tiny |x|", [_wide(rng, n, dtype, small, -10)]),
            ("beyond: 2**20 pi/2 < |x| < 1e9", [_wide(rng, n, dtype, 20.6, 29.8)]),
            ("special values", [specials]),
        ]
    if name == "pow":
        xs = _wide(rng, n, dtype, small, big + 0.99, signed=False)
        ylim = 1074.0 if f64 else 149.0
        log2_x = np.maximum(np.abs(np.log2(xs.astype(np.float64))), 1e-3)
        y_scaled = rng.uniform(-ylim, ylim, n) / log2_x
        ints = rng.integers(-40, 41, n).astype(dtype)
        sp = np.array(np.meshgrid(specials, specials)).reshape(2, -1).astype(dtype)
        return [
            ("x in (0, 10), y in (-10, 10)", [u(0, 10), u(-10, 10)]),
            ("x all positive, y in (-2, 2)", [xs, u(-2, 2)]),
            ("x all positive, |y log2 x| < max exponent", [xs, y_scaled.astype(dtype)]),
            ("x < 0, integer y", [-u(0, 10), ints]),
            (
                "x near 1, |y| large",
                [
                    (1 + rng.uniform(-1e-6, 1e-6, n)).astype(dtype),
                    u(-1e8, 1e8) if f64 else u(-1e4, 1e4),
                ],
            ),
            ("special values (all pairs)", [sp[0], sp[1]]),
        ]
    raise KeyError(name)


def _run_kernel(jm, kernel: str, args: list[np.ndarray], dtype: np.dtype) -> np.ndarray:
    arrays = [np.ascontiguousarray(a, dtype=dtype) for a in args]
    out = np.empty_like(arrays[0])
    proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * (len(arrays) + 1)), ctypes.c_int64)
    proto(jm.address(kernel))(*[a.ctypes.data for a in arrays], out.ctypes.data, out.size)
    return out


def measure_ulp(
    n: int = 20000,
    seed: int = 0,
    functions: tuple[str, ...] = ("exp", "log", "tanh", "sigmoid", "sin", "cos", "pow"),
    dtypes: tuple[str, ...] = ("float64", "float32"),
) -> list[UlpRow]:
    """Max ulp error of the JIT-compiled (O3) functions against a wider reference.

    The reference is numpy in long double for float64 (when long double is
    wider than double) and numpy in float64 for float32, rounded to the ulp of
    the true value.  ``special_mismatches`` counts inputs where numpy's result
    in the same dtype is NaN, an infinity or a signed zero and ours differs.
    """
    module = ir.Module(name="vecmath_accuracy")
    for name in functions:
        for dt in dtypes:
            define_map_kernel(module, name, ir.FloatType() if dt == "float32" else ir.DoubleType())
    jm = compile_module(module, 3)
    rng = np.random.default_rng(seed)
    rows = []
    for name in functions:
        for dt_name in dtypes:
            dtype = np.dtype(dt_name)
            ref_type = _reference_dtype(dtype)
            kernel = f"map_{name}_{'f32' if dtype == np.float32 else 'f64'}"
            for label, args in _domains(name, dtype, rng, n):
                got = _run_kernel(jm, kernel, args, dtype)
                wide = [a.astype(ref_type) for a in args]
                with np.errstate(all="ignore"):
                    ref = (
                        _np_sigmoid(*wide, target=dtype)
                        if name == "sigmoid"
                        else _NP_REFS[name](*wide)
                    )
                errs = _ulp_errors(got, ref, dtype)
                with np.errstate(all="ignore"):
                    abs_err = np.abs(got.astype(ref.dtype) - ref)
                abs_err = np.where(np.isfinite(abs_err), abs_err, 0.0)
                if name in ("sin", "cos"):  # documented NaN range, not an error
                    errs = np.where(np.abs(args[0]) >= TRIG_NAN_LIMIT, 0.0, errs)
                worst = int(np.argmax(errs))
                rows.append(
                    UlpRow(
                        function=name,
                        dtype=dt_name,
                        domain=label,
                        points=int(got.size),
                        max_ulp=float(errs[worst]),
                        max_abs_error=float(abs_err.max()),
                        worst_input=tuple(float(a[worst]) for a in args),
                        special_mismatches=_special_mismatches(name, args, got),
                    )
                )
    jm.close()
    return rows


def format_ulp_table(rows: list[UlpRow]) -> str:
    """Markdown table of :func:`measure_ulp` rows."""
    lines = [
        "| function | dtype | inputs | points | max ulp | max abs error | worst input "
        "| special mismatches |",
        "|---|---|---|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        worst = ", ".join(f"{v:.17g}" for v in r.worst_input)
        domain = r.domain.replace("|", "\\|")
        lines.append(
            f"| {r.function} | {r.dtype} | {domain} | {r.points} | "
            f"{r.max_ulp:.3g} | {r.max_abs_error:.2g} | {worst} | "
            f"{r.special_mismatches} |"
        )
    return "\n".join(lines)
