"""Compiled == eager for the pointwise ops and activations: values on special and random
inputs (native code within the vector math's ulp bounds), gradients to second order,
integer division rules, and the accuracy of the new vector-math functions."""

from __future__ import annotations

import math

import numpy as np
import pytest

import eager
import eager.nn.functional as F
import graphc
from graphc.errors import UnsupportedOpError

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 1e-300,
           5e-324, 1e30, -1e30, 1e300, 0.9999, -0.9999, 700.0, -700.0, 30.0, 89.5, 3.0, 6.5]

UNARY = ["log1p", "expm1", "erf", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
         "acosh", "atanh", "log2", "log10", "exp2", "floor", "ceil", "round", "trunc",
         "frac", "reciprocal", "isnan", "isinf", "isfinite", "isposinf", "isneginf",
         "nan_to_num"]
ACTIVATIONS = {
    "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
    "softplus": F.softplus, "softplus_beta": lambda x: F.softplus(x, 2.0, 5.0),
    "leaky_relu": F.leaky_relu, "elu": lambda x: F.elu(x, 1.5), "hardtanh": F.hardtanh,
    "relu6": F.relu6, "mish": F.mish, "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid, "logsigmoid": F.logsigmoid,
}


def _tol(dtype) -> dict:
    return {"rtol": 4e-6, "atol": 1e-30} if dtype == np.float32 else {"rtol": 1e-13, "atol": 1e-300}


def _inputs(dtype, n=200, low=-5.0, high=5.0):
    rng = np.random.default_rng(3)
    with np.errstate(over="ignore"):
        return np.concatenate([np.array(SPECIAL, dtype=dtype),
                               rng.uniform(low, high, n).astype(dtype)])


def _compare(got, want, dtype, atol=None):
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind != "f":
        np.testing.assert_array_equal(got, want)
        return
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    tol = _tol(dtype)
    if atol is not None:
        tol["atol"] = atol
    np.testing.assert_allclose(got, want, equal_nan=True, **tol)
    zero = want == 0
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", UNARY)
def test_unary_compiled_equals_eager_on_special_values(name, dtype):
    x = _inputs(dtype)

    def f(x):
        return getattr(x, name)()

    f.__name__ = f"pw_{name}"
    want = f(eager.tensor(x.copy())).numpy()
    _compare(graphc.compile(f)(x.copy()), want, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_compiled_equals_eager(name, dtype):
    x = _inputs(dtype)
    fn = ACTIVATIONS[name]
    want = fn(eager.tensor(x.copy())).numpy()
    # gelu's 1 + erf(x / sqrt2) and 1 + tanh(...) cancel for negative x: a last-ulp
    # difference of erf or tanh is an absolute error of about |x| * eps there
    atol = (1e-6 if dtype == np.float32 else 1e-14) if name.startswith("gelu") else None
    _compare(graphc.compile(fn)(x.copy()), want, dtype, atol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["remainder", "fmod", "floor_divide", "atan2"])
def test_binary_compiled_equals_eager_on_special_values(name, dtype):
    sp = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 5.0, -5.0, 0.1, 2.5, 1e300,
                   -7.25, 3.0], dtype=dtype)
    a, b = np.repeat(sp, sp.size), np.tile(sp, sp.size)
    fn = getattr(eager, name)
    want = fn(eager.tensor(a.copy()), eager.tensor(b.copy())).numpy()
    _compare(graphc.compile(fn)(a, b), want, dtype)
    # Python numbers on either side, through the operators
    ops = {"remainder": lambda x: (x % 1.5, 2.5 % x), "floor_divide": lambda x: (x // -1.5,
                                                                                 2.5 // x)}
    if name in ops:
        want2 = [t.numpy() for t in ops[name](eager.tensor(a.copy()))]
        got2 = graphc.compile(ops[name])(a)
        for g, w in zip(got2, want2):
            _compare(g, w, dtype)


def test_integer_division_compiled():
    x = np.arange(-9, 10, dtype=np.int64)

    def f(x):
        return x // 4, x % -3, eager.fmod(x, -3), x // -2, x % 7

    want = [t.numpy() for t in f(eager.tensor(x))]
    for g, w in zip(graphc.compile(f)(x), want):
        np.testing.assert_array_equal(g, w)
        assert g.dtype == np.int64
    for fn in (lambda x, y: x // y, lambda x: x % 0, lambda x: x // -1):
        args = (x, x) if fn.__code__.co_argcount == 2 else (x,)
        with pytest.raises(UnsupportedOpError, match="constant divisor"):
            graphc.compile(fn)(*args)


def test_integer_rounding_compiled_is_identity():
    x = np.array([-3, 0, 7], dtype=np.int32)
    out = graphc.compile(lambda x: (x.floor(), x.round(), x.ceil(), x.trunc()))(x)
    for o in out:
        assert o.dtype == np.int32
        np.testing.assert_array_equal(o, x)


GRAD_FUNCS = dict(ACTIVATIONS)
GRAD_FUNCS.update({n: (lambda n: lambda x: getattr(x, n)())(n)
                   for n in ["log1p", "expm1", "erf", "tan", "atan", "sinh", "cosh", "asinh",
                             "exp2", "log2", "log10", "floor", "round"]})
GRAD_FUNCS.update({
    "asin": lambda x: (x * 0.2).asin(), "acos": lambda x: (x * 0.2).acos(),
    "atanh": lambda x: (x * 0.2).atanh(), "acosh": lambda x: (x.abs() + 1.5).acosh(),
    "atan2": lambda x: eager.atan2(x, x * x + 0.5), "remainder": lambda x: x % (x * 0.3 + 2.0),
    "fmod": lambda x: eager.fmod(x * 3, x.abs() + 0.7),
    "floor_divide": lambda x: x * (x // 0.7),
})
GRAD_X = np.array([-2.3, -1.1, -0.6, -0.2, 0.35, 0.8, 1.7, 2.6, 4.2])
SECOND_ORDER = ["gelu", "gelu_tanh", "silu", "softplus", "softplus_beta", "elu", "mish",
                "logsigmoid", "erf", "log1p", "expm1", "atan", "atan2", "tan",
                "sinh", "asinh"]


@pytest.mark.parametrize("name", sorted(GRAD_FUNCS))
def test_gradient_compiled_equals_eager(name):
    fn = GRAD_FUNCS[name]

    def loss(x):
        return (fn(x) * fn(x)).sum()

    x = eager.tensor(GRAD_X.copy(), requires_grad=True)
    loss(x).backward()
    got_v, got_g = graphc.value_and_grad(loss)(GRAD_X.copy())
    np.testing.assert_allclose(got_v, loss(eager.tensor(GRAD_X)).item(), rtol=1e-13)
    np.testing.assert_allclose(got_g, x.grad.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", SECOND_ORDER)
def test_second_order_compiled_equals_eager(name):
    fn = GRAD_FUNCS[name]

    def loss(x):
        return fn(x).sum()

    # eager: the Hessian-vector product d/dx (grad . v) with create_graph
    v = np.linspace(0.5, 1.5, GRAD_X.size)
    x = eager.tensor(GRAD_X.copy(), requires_grad=True)
    (g,) = eager.autograd.grad(loss(x), x, create_graph=True)
    (g * eager.tensor(v)).sum().backward()

    def gv(x):
        return (graphc.grad(loss)(x) * v).sum()

    got = graphc.compile(graphc.grad(gv))(GRAD_X.copy())
    np.testing.assert_allclose(got, x.grad.numpy(), rtol=1e-11, atol=1e-13)


def test_fused_activation_is_one_kernel_and_traced_through_the_interpreter():
    def f(x):
        return F.gelu(F.silu(x) + F.softplus(x))

    x = _inputs(np.float64)
    g = graphc.trace(f, x)
    (interp,) = graphc.interpret(g, x)
    want = f(eager.tensor(x)).numpy()
    np.testing.assert_array_equal(interp, want)
    np.testing.assert_allclose(graphc.compile(f)(x), want, rtol=1e-13, equal_nan=True)


# --- the vector math of the new functions: accuracy against wide references ---------------

REFS = {
    "log1p": (np.log1p, [(-0.999, 1), (-1e-8, 1e-8), (1, 1e6)]),
    "expm1": (np.expm1, [(-1, 1), (-40, 40), (-1e-8, 1e-8)]),
    "erf": (None, [(-1, 1), (-6, 6), (1, 1.75), (1.75, 3)]),
    "atan": (np.arctan, [(-1, 1), (-100, 100)]),
    "asin": (np.arcsin, [(-1, 1)]),
    "acos": (np.arccos, [(-1, 1)]),
    "sinh": (np.sinh, [(-1, 1), (-30, 30), (-1e-6, 1e-6)]),
    "cosh": (np.cosh, [(-30, 30)]),
    "asinh": (np.arcsinh, [(-10, 10), (-1e-5, 1e-5)]),
    "acosh": (np.arccosh, [(1, 10), (1, 1.001)]),
    "atanh": (np.arctanh, [(-1, 1)]),
    "log2": (np.log2, [(0.001, 100)]),
    "log10": (np.log10, [(0.001, 100)]),
    "exp2": (np.exp2, [(-50, 50)]),
    "atan2": (np.arctan2, [(-3, 3)]),
}


@pytest.fixture(scope="module")
def math_kernels():
    from llvmlite import ir

    from graphc.backend import vecmath
    from graphc.runtime.llvm_engine import compile_module

    module = ir.Module(name="pointwise_math")
    for name in REFS:
        for ty in (ir.DoubleType(), ir.FloatType()):
            vecmath.define_map_kernel(module, name, ty)
    return compile_module(module, 3)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(REFS))
def test_vecmath_accuracy_within_documented_bounds(math_kernels, name, dtype):
    from graphc.backend import vecmath
    from graphc.tools import vecmath_accuracy as va

    ref_fn, domains = REFS[name]
    rng = np.random.default_rng(0)
    kernel = f"map_{name}_{'f64' if dtype == np.float64 else 'f32'}"
    wide = np.longdouble if dtype == np.float64 else np.float64
    worst = 0.0
    for lo, hi in domains:
        args = [rng.uniform(lo, hi, 4000).astype(dtype)]
        if name == "atan2":
            args.append(rng.uniform(lo, hi, 4000).astype(dtype))
        got = va._run_kernel(math_kernels, kernel, args, np.dtype(dtype))
        if name == "erf":
            ref = np.array([math.erf(float(v)) for v in args[0]]).astype(wide)
        else:
            ref = ref_fn(*[a.astype(wide) for a in args])
        worst = max(worst, float(np.max(va._ulp_errors(got, ref, np.dtype(dtype)))))
    assert worst <= vecmath.ULP_BOUNDS[(name, np.dtype(dtype).name)], worst
