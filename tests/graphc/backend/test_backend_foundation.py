"""Backend foundations: JIT engine, OpenBLAS binding, vectorizable math."""

from __future__ import annotations

import ctypes
import re
import sys
import threading

import numpy as np
import pytest
from llvmlite import ir

from graphc.backend import blas, vecmath
from graphc.runtime import llvm_engine as jit
from graphc.tools import vecmath_accuracy

F64, F32 = ir.DoubleType(), ir.FloatType()
DOUBLE_FN = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)

SCALE_IR = """
define double @scale(double %x) {
  %y = fmul double %x, {k}
  ret double %y
}
"""


def scale_ir(k: float, name: str = "scale") -> str:
    return SCALE_IR.replace("{k}", repr(float(k))).replace("@scale", f"@{name}")


# ---------------------------------------------------------------------------
# JIT
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_compile_and_call(opt_level):
    jm = jit.compile_module(scale_ir(2.5), opt_level)
    f = DOUBLE_FN(jm.address("scale"))
    assert f(4.0) == 10.0
    assert jm.function_names == ("scale",)
    assert jm.opt_level == opt_level


@pytest.mark.parametrize("opt_level", [0, 3])
def test_ir_and_asm_text(opt_level):
    jm = jit.compile_module(scale_ir(3.0), opt_level)
    before, after, asm = jm.llvm_ir(optimized=False), jm.llvm_ir(optimized=True), jm.asm()
    for text in (before, after, asm):
        assert text.strip() and "scale" in text
    assert "target triple" in after  # the host triple was set before optimising
    if opt_level == 3:
        assert "memory(none)" in after  # O3 inferred attributes: the pipeline ran


def test_compile_accepts_llvmlite_module():
    module = ir.Module(name="from_ir_builder")
    fn = ir.Function(module, ir.FunctionType(F64, [F64]), name="twice")
    b = ir.IRBuilder(fn.append_basic_block())
    b.ret(b.fadd(fn.args[0], fn.args[0]))
    jm = jit.compile_module(module, 2)
    assert jm.name == "from_ir_builder"
    assert DOUBLE_FN(jm.address("twice"))(1.25) == 2.5


def test_object_code_round_trip():
    jm = jit.compile_module(scale_ir(-4.0), 3)
    data = jm.object_code()
    assert isinstance(data, bytes) and len(data) > 0
    jm.close()  # the reloaded code must not depend on the original engine
    again = jit.load_object_code(data, function_names=("scale",))
    assert DOUBLE_FN(again.address("scale"))(2.0) == -8.0
    with pytest.raises(jit.JitError, match="object code"):
        again.llvm_ir()


def test_load_object_code_rejects_garbage():
    with pytest.raises(jit.JitError, match="not an object file"):
        jit.load_object_code(b"not an object file" * 4)


def test_object_code_round_trip_keeps_ir_when_given():
    jm = jit.compile_module(scale_ir(5.0), 2)
    again = jit.load_object_code(jm.object_code(), llvm_ir=jm.llvm_ir(False),
                                 optimized_ir=jm.llvm_ir(True))
    assert "scale" in again.asm()
    assert DOUBLE_FN(again.address("scale"))(1.0) == 5.0


def test_same_symbol_in_independent_modules():
    modules = [jit.compile_module(scale_ir(k), 1) for k in (1.0, 2.0, 3.0)]
    fns = [DOUBLE_FN(m.address("scale")) for m in modules]
    assert [f(10.0) for f in fns] == [10.0, 20.0, 30.0]
    modules[1].close()
    assert fns[0](1.0) == 1.0 and fns[2](1.0) == 3.0


def test_errors_are_clear():
    with pytest.raises(jit.JitError, match="could not parse"):
        jit.compile_module("define double @f( {", 0)
    use_before_def = ("define i32 @f() {\n  %a = add i32 %b, 1\n  %b = add i32 1, 1\n"
                      "  ret i32 %a\n}")
    with pytest.raises(jit.JitError, match="invalid.*dominate"):
        jit.compile_module(use_before_def, 0)
    jm = jit.compile_module(scale_ir(1.0), 0)
    with pytest.raises(jit.JitError, match="no function 'nope'.*scale"):
        jm.address("nope")
    with pytest.raises(ValueError, match="opt_level"):
        jit.compile_module(scale_ir(1.0), 4)
    jm.close()
    with pytest.raises(jit.JitError, match="closed"):
        jm.address("scale")


def test_host_cpu_key():
    key = jit.host_cpu_key()
    assert jit.host_cpu_name() in key
    assert jit.host_cpu_features() in key
    assert "llvm-" in key and "llvmlite-" in key


def test_concurrent_compilation_from_threads():
    n_threads, rounds = 4, 3
    barrier = threading.Barrier(n_threads)
    results: dict[int, list[float]] = {}
    errors: list[BaseException] = []

    def work(tid: int) -> None:
        try:
            out = []
            for r in range(rounds):
                barrier.wait()
                module = ir.Module(name=f"thread{tid}_{r}")
                vecmath.define_map_kernel(module, "exp", F64, kernel_name="kernel")
                fn = ir.Function(module, ir.FunctionType(F64, [F64]), name="scale")
                b = ir.IRBuilder(fn.append_basic_block())
                b.ret(b.fmul(fn.args[0], ir.Constant(F64, float(tid * 10 + r))))
                jm = jit.compile_module(module, 3)
                x = np.linspace(-1, 1, 33)
                y = np.empty_like(x)
                k = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
                    jm.address("kernel"))
                k(x.ctypes.data, y.ctypes.data, x.size)
                np.testing.assert_allclose(y, np.exp(x), rtol=1e-15)
                out.append(DOUBLE_FN(jm.address("scale"))(1.0))
                jm.close()
            results[tid] = out
        except BaseException as exc:  # reported in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert results == {t: [float(t * 10 + r) for r in range(rounds)] for t in range(n_threads)}


# ---------------------------------------------------------------------------
# BLAS
# ---------------------------------------------------------------------------

needs_blas = pytest.mark.skipif(not blas.available(), reason=str(blas.unavailable_reason()))


@needs_blas
@pytest.mark.parametrize("dtype, rtol", [(np.float32, 1e-5), (np.float64, 1e-13)])
def test_gemm_matches_numpy(dtype, rtol):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((7, 13)).astype(dtype)
    b = rng.standard_normal((13, 5)).astype(dtype)
    c = blas.gemm(a, b)
    assert c.dtype == dtype and c.shape == (7, 5)
    np.testing.assert_allclose(c, a @ b, rtol=rtol, atol=rtol)
    # non-contiguous input is made contiguous, not misread
    np.testing.assert_allclose(blas.gemm(a.T.copy().T, b[:, ::-1]), a @ b[:, ::-1],
                               rtol=rtol, atol=rtol)


@needs_blas
def test_gemm_rejects_bad_input():
    with pytest.raises(ValueError, match="inner dimensions"):
        blas.gemm(np.ones((2, 3)), np.ones((2, 3)))
    with pytest.raises(TypeError, match="float32 and float64"):
        blas.gemm(np.ones((2, 2), np.int64), np.ones((2, 2), np.int64))


@needs_blas
def test_blas_addresses_and_threads():
    assert blas.sgemm_address() and blas.dgemm_address()
    assert blas.sgemm_address() != blas.dgemm_address()
    before = blas.get_num_threads()
    try:
        blas.set_num_threads(1)
        assert blas.get_num_threads() == 1
    finally:
        blas.set_num_threads(before)
    assert "OpenBLAS" in blas.config()


def test_blas_missing_wheel_is_reported(monkeypatch):
    monkeypatch.setattr(blas, "_loaded", False)
    monkeypatch.setattr(blas, "_state", None)
    monkeypatch.setattr(blas, "_reason", None)
    monkeypatch.setitem(sys.modules, "scipy_openblas32", None)  # import now fails
    assert not blas.available()
    assert "pip install scipy-openblas32" in blas.unavailable_reason()
    with pytest.raises(blas.BlasUnavailableError, match="scipy-openblas32"):
        blas.gemm(np.ones((2, 2)), np.ones((2, 2)))


@needs_blas
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_jit_code_calls_registered_gemm(dtype):
    """Generated code calls cblas through the stable registered name."""
    fty = F32 if dtype == np.float32 else F64
    module = ir.Module(name="mm")
    gemm = blas.declare_gemm(module, dtype)
    ptr, i32 = ir.PointerType(), ir.IntType(32)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr, ptr, ptr, i32, i32, i32]),
                     name="mm")
    a, b, c, m, n, k = fn.args
    bld = ir.IRBuilder(fn.append_basic_block())
    const = lambda v: ir.Constant(i32, v)  # noqa: E731
    bld.call(gemm, [const(blas.CBLAS_ROW_MAJOR), const(blas.CBLAS_NO_TRANS),
                    const(blas.CBLAS_NO_TRANS), m, n, k, ir.Constant(fty, 1.0), a, k, b, n,
                    ir.Constant(fty, 0.0), c, n])
    bld.ret_void()
    from graphc.runtime.native import register_blas
    register_blas()                       # what the runtime does before it compiles a product
    jm = jit.compile_module(module, 2)
    assert blas.gemm_symbol(dtype) in jm.llvm_ir()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 4)).astype(dtype)
    w = rng.standard_normal((4, 9)).astype(dtype)
    out = np.zeros((6, 9), dtype)
    cfn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 3, *[ctypes.c_int32] * 3)(jm.address("mm"))
    cfn(x.ctypes.data, w.ctypes.data, out.ctypes.data, 6, 9, 4)
    np.testing.assert_array_equal(out, blas.gemm(x, w))


# ---------------------------------------------------------------------------
# Vector math
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ulp_rows():
    return vecmath_accuracy.measure_ulp(n=4000, seed=1)


def test_ulp_table_within_documented_bounds(ulp_rows):
    checked = 0
    for row in ulp_rows:
        if row.domain.startswith("beyond"):
            continue  # documented degradation, reported separately
        bound = vecmath.ULP_BOUNDS[(row.function, row.dtype)]
        assert row.max_ulp <= bound, row
        checked += 1
    assert checked >= 60


def test_special_values_match_numpy(ulp_rows):
    bad = [row for row in ulp_rows if row.special_mismatches]
    assert not bad, bad


def test_trig_beyond_accurate_range_is_backward_stable(ulp_rows):
    for row in ulp_rows:
        if row.domain.startswith("beyond") and row.dtype == "float64":
            # absolute error stays about |x| * 2**-53 (|x| < 1e9 here)
            assert row.max_abs_error < 1e9 * 2.0 ** -52, row


@pytest.fixture(scope="module")
def math_module():
    module = ir.Module(name="vm_specials")
    for name in vecmath.FUNCTIONS:
        for ty in (F64, F32):
            vecmath.define_map_kernel(module, name, ty)
    return jit.compile_module(module, 3)


def run(jm, name: str, dtype, *args) -> np.ndarray:
    arrays = [np.asarray(a, dtype=dtype) for a in args]
    suffix = "f32" if dtype == np.float32 else "f64"
    return vecmath_accuracy._run_kernel(jm, f"map_{name}_{suffix}", arrays, np.dtype(dtype))


def same(got: np.ndarray, want: np.ndarray) -> bool:
    """Bitwise-class equality: NaN == NaN, signed zeros and infinities equal."""
    want = np.asarray(want, dtype=got.dtype)
    return bool(np.all((np.isnan(got) & np.isnan(want))
                       | ((got == want) & (np.signbit(got) == np.signbit(want)))))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_special_values_explicit(math_module, dtype):
    inf, nan = np.inf, np.nan
    jm = math_module
    assert same(run(jm, "exp", dtype, [nan, inf, -inf, 0.0, -0.0, 1e5, -1e5]),
                [nan, inf, 0.0, 1.0, 1.0, inf, 0.0])
    assert same(run(jm, "log", dtype, [nan, inf, -inf, 0.0, -0.0, -1.0, 1.0]),
                [nan, inf, nan, -inf, -inf, nan, 0.0])
    tiny = np.finfo(dtype).smallest_subnormal
    assert same(run(jm, "tanh", dtype, [nan, inf, -inf, 0.0, -0.0, 50.0, -50.0, tiny, -tiny]),
                [nan, 1.0, -1.0, 0.0, -0.0, 1.0, -1.0, tiny, -tiny])
    big = np.finfo(dtype).max
    s = run(jm, "sigmoid", dtype, [nan, inf, -inf, 0.0, big, -big, 1e4, -1e4])
    assert same(s, [nan, 1.0, 0.0, 0.5, 1.0, 0.0, 1.0, 0.0])
    finite = np.linspace(-1000, 1000, 2001, dtype=dtype)
    assert np.all(np.isfinite(run(jm, "sigmoid", dtype, finite)))
    for name in ("sin", "cos"):
        assert np.all(np.isnan(run(jm, name, dtype, [nan, inf, -inf])))
    assert same(run(jm, "sin", dtype, [0.0, -0.0]), [0.0, -0.0])
    assert same(run(jm, "cos", dtype, [0.0, -0.0]), [1.0, 1.0])
    assert same(run(jm, "sqrt", dtype, [4.0, -1.0, inf, -0.0]), [2.0, nan, inf, -0.0])
    assert same(run(jm, "abs", dtype, [-3.0, -0.0, -inf]), [3.0, 0.0, inf])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_pow_special_cases_match_numpy(math_module, dtype):
    vals = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0,
                     3.0, -3.0, 2.5, -2.5, 1e-310 if dtype == np.float64 else 1e-40],
                    dtype=dtype)
    x, y = (a.ravel() for a in np.meshgrid(vals, vals))
    with np.errstate(all="ignore"):
        want = np.power(x, y)
    got = run(math_module, "pow", dtype, x, y)
    special = ~np.isfinite(want) | (want == 0) | (np.abs(want) == 1)
    assert same(got[special], want[special])
    np.testing.assert_allclose(got[~special], want[~special], rtol=4 * np.finfo(dtype).eps)


def test_trig_nan_beyond_limit(math_module):
    x = np.array([vecmath.TRIG_NAN_LIMIT, -1e300], dtype=np.float64)
    assert np.all(np.isnan(run(math_module, "sin", np.float64, x)))
    assert np.all(np.isnan(run(math_module, "cos", np.float64, x)))


def test_functions_defined_once_per_module():
    module = ir.Module()
    first = vecmath.get_exp(module, F64)
    assert vecmath.get_exp(module, F64) is first
    assert vecmath.get_function(module, "exp", F32) is not first
    assert first.linkage == "internal" and "alwaysinline" in first.attributes
    with pytest.raises(KeyError, match="no function 'lgamma'"):
        vecmath.get_function(module, "lgamma", F64)
    with pytest.raises(TypeError, match="float and double"):
        vecmath.get_exp(module, ir.HalfType())


def test_opt_level_zero_gives_same_numbers():
    module = ir.Module()
    for name in ("exp", "log", "tanh", "pow"):
        vecmath.define_map_kernel(module, name, F64)
    o0, o3 = jit.compile_module(module, 0), jit.compile_module(module, 3)
    x = np.linspace(0.01, 30, 257)
    for name in ("exp", "log", "tanh", "pow"):
        args = (x, x) if name == "pow" else (x,)
        np.testing.assert_array_equal(run(o0, name, np.float64, *args),
                                      run(o3, name, np.float64, *args))


VECTOR_RE = re.compile(r"<(\d+) x (double|float)>")
CALL_RE = re.compile(r"call [^@]*@\"?([\w.$]+)")


@pytest.mark.parametrize("ty", [F64, F32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(vecmath.FUNCTIONS))
def test_functions_vectorize_without_libm_calls(name, ty):
    module = ir.Module()
    vecmath.define_map_kernel(module, name, ty, kernel_name="k")
    text = jit.compile_module(module, 3).llvm_ir(optimized=True)
    widths = {int(w) for w, _ in VECTOR_RE.findall(text)}
    assert widths and max(widths) >= 2, f"{name} did not vectorize:\n{text}"
    callees = set(CALL_RE.findall(text))
    assert all(c.startswith("llvm.") for c in callees), callees
    assert "graphc.vm" not in text  # everything was inlined
