"""Adversarial tests of tiered compilation (graphc/runtime/native.py, docs/backend.md
"Tiered compilation"): the first call (quick code) and a call after the switch give the
same bits -- for random programs (tests/parity/tierdiff.py), for the LLVM folds that
could differ between an optnone and an O3 build, and across the switch itself (threads,
errors, fork, profiling, transforms, the autograd bridge, memory)."""

import gc
import re
import os
import signal
import threading
import warnings
import weakref

import numpy as np
import pytest

import eager
import graphc
from graphc.runtime import native
from tests.parity import fuzzgen, tierdiff

SEEDS = range(12)  # the CI sample (4 of each feature mix); `python -m tests.parity.tierdiff N START`
# for more


@pytest.mark.parametrize(
    "seed", SEEDS, ids=[f"prog{s}" for s in SEEDS]
)  # not "seed": README's `-k seed`
def test_fuzz_quick_tier_equals_full_tier_bit_for_bit(seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        prog = fuzzgen.generate(seed, tierdiff.features_for(seed))
    tierdiff.check_tiers(prog, seed)


def test_fuzz_sample_reaches_the_quick_tier():
    total = 0
    for seed in SEEDS[:6]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            prog = fuzzgen.generate(seed, tierdiff.features_for(seed))
        total += tierdiff.check_tiers(prog, seed, grads=False)["quick"]
    assert total >= 3  # the sample exercises quick code, not only full builds


# --- the bits: what LLVM could fold differently at O3 ------------------------------------


def _vals(dt):
    base = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -2.5, 3.0]
    base += [1e-40, -1e-42, 1e-310, 5e-324, 1e30, -1e30, 1e300, 88.7, 89.0, -103.0, 709.7]
    base += [-745.0, 710.0, 1e-7, 0.1, 7.5, -7.5, 2.1e9, -2.2e9, 9.3e18, -9.3e18, 1e19]
    base += [4.5, 2.5, -0.5, 0.49999997, 2147483647.5, -2147483648.5, 9.2233720368547758e18]
    rnd = np.random.default_rng(1).standard_normal(61) * 4
    with np.errstate(all="ignore"):
        return np.concatenate([np.array(base), rnd]).astype(dt)


def _tiers_agree(fn, *args, quick=True):
    """Call 1 on quick code, upgrade, call again: the same bits (and it was tiered,
    unless ``quick=False``: a graph that compiles fully at once)."""
    f = graphc.compile(fn)
    first = tierdiff._leaves(f(*[a.copy() for a in args]))
    exes = tierdiff.executables(f)
    if quick:
        assert [e.tier for e in exes] == [0], "expected a quick-tier build"
    assert exes[0].upgrade() is quick
    after = tierdiff._leaves(f(*[a.copy() for a in args]))
    for a, b in zip(first, after):
        assert tierdiff.same_bits(a, b), (fn, a, b)
    return first


F = eager.nn.functional
UNARY = {
    "exp": lambda a: a.exp(),
    "log": lambda a: a.log(),
    "tanh": lambda a: a.tanh(),
    "erf": lambda a: a.erf(),
    "sigmoid": lambda a: a.sigmoid(),
    "sin": lambda a: a.sin(),  # beyond the vector range: libm, in both tiers
    "log1p": lambda a: a.log1p(),
    "expm1": lambda a: a.expm1(),
    "sqrt": lambda a: a.sqrt(),
    "gelu-tanh": lambda a: F.gelu(a, approximate="tanh"),
    "softplus": lambda a: F.softplus(a),
    "pow 2": lambda a: a**2,  # LLVM's libcall simplifier (pow(x, 2) -> x*x...) must
    "pow 0.5": lambda a: a**0.5,  # not apply: graphc's pow is its own function
    "pow -1": lambda a: a**-1,
    "pow 3": lambda a: a**3,
    "2 ** x": lambda a: 2.0**a,
    "10 ** x": lambda a: 10.0**a,
    "round": lambda a: a.round(),
    "x*c+d (fmuladd? no: two roundings)": lambda a: a * 1.1 + 0.3,
    "x*x+x": lambda a: a * a + a,
    "0 - x (sign of zero)": lambda a: 0.0 - a,
    "x * 0 (NaN, -0)": lambda a: a * 0.0,
    "x / 3 (no reciprocal)": lambda a: a / 3.0,
    "float -> int64 out of range (fptosi poison)": lambda a: a.long().to(a.dtype),
    "float -> int32 out of range": lambda a: a.int().to(a.dtype),
    "relu / clamp NaN": lambda a: a.relu() + a.clamp(-1, 1),
}


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_pointwise_special_values_same_bits(name, dt):
    _tiers_agree(UNARY[name], _vals(dt))


BINARY = {
    "pow": lambda a, b: a**b,
    "maximum (NaN, +-0)": eager.maximum,
    "minimum (NaN, +-0)": eager.minimum,
    "where/select": lambda a, b: eager.where(a > b, a, b),
    "remainder": lambda a, b: a % b,
    "floor_divide": lambda a, b: a // b,
    "atan2": eager.atan2,
    "div": lambda a, b: a / b,
}


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_special_values_same_bits(name, dt):
    x = _vals(dt)
    _tiers_agree(BINARY[name], x, np.roll(x, 7))


REDUCTIONS = {
    "sum": lambda a: a.sum(),
    "sum rows": lambda a: a.sum(1),
    "mean cols": lambda a: a.mean(0),
    "max (select chain: not vectorized without nnan/nsz)": lambda a: a.max(),
    "amin rows": lambda a: a.amin(1),
    "prod": lambda a: a.prod(1),
    "var": lambda a: a.var(1),
    "softmax": lambda a: a.softmax(1),
    "logsumexp": lambda a: a.logsumexp(0),
    "argmax": lambda a: a.argmax(1).to(a.dtype),
    "norm": lambda a: a.norm(),
}


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("special", [False, True], ids=["finite", "special"])
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions_same_bits(name, special, dt):
    m = _vals(dt)[:100].reshape(10, 10)
    if not special:
        m = np.nan_to_num(m, nan=0.5, posinf=3.0, neginf=-3.0).clip(-50, 50)
    _tiers_agree(REDUCTIONS[name], m)  # argmax too: an argreduce kernel runs quick code


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
def test_reductions_of_every_length_same_bits(dt):
    # the vectorizer's split (VF x interleave, remainder loop) depends on the trip count
    for n in (1, 2, 3, 7, 8, 9, 16, 17, 31, 33, 64, 65, 127, 1001):
        r = np.random.default_rng(n)
        x = (r.standard_normal(n) * 10.0 ** r.uniform(-8, 8, n)).astype(dt)
        _tiers_agree(lambda a: ((a * 1.5).sum(), (a * a.flip(0)).sum(), a.mean()), x)


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
def test_signed_zeros_and_nan_in_min_max_reductions(dt):
    z = np.array([-0.0, 0.0, -0.0, 0.0, 0.0, -0.0, -0.0, -0.0, 0.0, 0.0, -0.0, 0.0], dt)
    _tiers_agree(lambda a: (a.max(), a.min(), a.amax(0), a.sum(), a.prod()), z.reshape(3, 4))
    n = z.copy()
    n[5] = np.nan
    _tiers_agree(lambda a: (a.max(), a.amin(1)), n.reshape(3, 4))


def test_float32_subnormals_are_not_flushed_in_either_tier():
    x = np.array([1e-40, -1e-45, 1.2e-38, 3e-39, 0.0], np.float32)
    out = _tiers_agree(lambda a: (a * 0.5, a + a, a.sum()), x)
    assert out[0][0] != 0.0 and out[1][1] != 0.0


def test_integer_division_by_zero_or_minus_one_is_refused_not_undefined():
    # sdiv/srem by 0 or INT_MIN / -1 is undefined behaviour in LLVM (O3 may fold it
    # any way): graphc compiles integer division only for a known divisor != 0, -1
    x = np.array([np.iinfo(np.int64).min, -7, 7, 0], np.int64)
    _tiers_agree(lambda a: (a // 3, a % 3, a // -2), x)
    for d in (0, -1):
        with pytest.raises(graphc.GraphcError, match="constant divisor"):
            graphc.compile(lambda a, d=d: a // d)(x)
    with pytest.raises(graphc.GraphcError, match="constant divisor"):
        graphc.compile(lambda a, b: a % b)(x, x)


def test_integer_overflow_wraps_in_both_tiers():
    # no nsw/nuw flags on integer arithmetic: wrapping is defined, never poison
    big = np.array([np.iinfo(np.int64).max, np.iinfo(np.int64).min, 3], np.int64)
    _tiers_agree(lambda a: (a + a, a * a, a - 1, (a * 3).sum()), big)
    i32 = np.array([np.iinfo(np.int32).max, np.iinfo(np.int32).min, 5], np.int32)
    _tiers_agree(lambda a: (a + a, a * a, a.sum()), i32)


def test_host_without_fma_refuses_the_quick_tier(monkeypatch):
    # llvm.fmuladd is fused by the code generator only where the CPU has FMA, while
    # LLVM's constant folder always folds it as a fused operation: without FMA an O3
    # build and an optnone build can round a polynomial differently
    monkeypatch.setattr(native, "_HOST_HAS_FMA", False)
    f = graphc.compile(lambda a: a.exp())
    f(np.ones(3))
    assert [e.tier for e in tierdiff.executables(f)] == [1]


# --- the switch --------------------------------------------------------------------------


X = np.random.default_rng(0).standard_normal((6, 50))


def _loss(a):
    return ((a * 1.3).tanh() * a.exp()).sum(1)


def _exe(f):
    (exe,) = tierdiff.executables(f)
    return exe


def test_errors_before_during_and_after_the_switch():
    f = graphc.compile(_loss)
    want = f(X)
    exe = _exe(f)
    assert exe.tier == 0
    for k in range(2 * native.TIER_UP_CALLS):
        with pytest.raises(graphc.GraphcError):
            exe.run((X.astype(np.float32),))  # a bad input, refused before the code runs
        with pytest.raises(graphc.GraphcError):
            exe.run((X, X))
        with pytest.raises(graphc.GraphcError):
            exe.run_trusted(X)  # not a tuple of arrays: the native entry's own check
        assert tierdiff.same_bits(f(X), want)
    assert exe.tier == 1
    with pytest.raises(graphc.GraphcError):
        exe.run((X[:1],))
    # non-contiguous inputs take the slow path (a copy) through both tiers
    g = graphc.compile(_loss)
    want = g(np.ascontiguousarray(X[:, ::2]))
    for _ in range(native.TIER_UP_CALLS + 2):
        assert tierdiff.same_bits(g(X[:, ::2]), want)
    assert _exe(g).tier == 1
    # a graph that raises from native code (an index out of range: a gather kernel,
    # compiled fully at once) keeps raising
    take = graphc.compile(lambda x, i: (x[i] * 2.0).exp().sum())
    x, bad = np.arange(10.0), np.array([0, 10, 3])
    for _ in range(native.TIER_UP_CALLS + 2):
        with pytest.raises(IndexError, match="out of range"):
            take(x, bad)


def _in_child(fn) -> int:
    """Run ``fn()`` in a forked child (60 s alarm); its exit status (0: passed)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            signal.alarm(60)
            code = 0 if fn() else 2
        except BaseException:  # noqa: BLE001
            code = 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_before_after_and_during_the_switch():
    f = graphc.compile(_loss)
    want = f(X)
    exe = _exe(f)
    assert exe.tier == 0

    def child_upgrades():
        outs = [f(X) for _ in range(native.TIER_UP_CALLS + 1)]
        return _exe(f).tier == 1 and all(tierdiff.same_bits(o, want) for o in outs)

    assert _in_child(child_upgrades) == 0  # forked on quick code
    assert exe.tier == 0
    # forked while another thread holds the switch's lock (compiling the full build):
    # the child must still be able to switch, not wait forever for that thread
    exe._tier_lock.acquire()
    try:
        assert _in_child(lambda: exe.upgrade() and tierdiff.same_bits(f(X), want)) == 0
    finally:
        exe._tier_lock.release()
    assert exe.upgrade() is True
    assert _in_child(lambda: tierdiff.same_bits(f(X), want)) == 0  # forked after


def test_threads_switching_many_signatures_get_the_same_bits():
    f = graphc.compile(_loss)
    shapes = [(3, 5), (4, 5), (6, 50), (1, 1), (0, 4)]
    args = [np.random.default_rng(i).standard_normal(s) for i, s in enumerate(shapes)]
    old = native.TIERED
    native.TIERED = False
    try:
        ref = graphc.compile(_loss)
        want = [ref(a) for a in args]
    finally:
        native.TIERED = old
    barrier = threading.Barrier(4)
    errors = []

    def worker(k):
        try:
            barrier.wait()
            for i in range(3 * native.TIER_UP_CALLS):
                j = (i + k) % len(args)
                assert tierdiff.same_bits(f(args[j]), want[j])
                if i == 5 and k == 0:
                    for e in tierdiff.executables(f):
                        e.upgrade()  # an explicit switch while others count
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert not errors, errors[0]
    assert {e.tier for e in tierdiff.executables(f)} == {1}


def test_the_quick_module_is_freed_after_the_switch():
    f = graphc.compile(_loss)
    f(X)
    exe = _exe(f)
    quick = weakref.ref(exe.jit)
    for _ in range(native.TIER_UP_CALLS + 1):
        f(X)
    assert exe.tier == 1
    gc.collect()
    assert quick() is None, gc.get_referrers(quick())
    # repeated compiles of many signatures: every quick module goes once switched
    before = len(native.jit._LIVE)
    g = graphc.compile(lambda a: (a * 2.0).sum(0), recompile_limit=100)
    for n in range(1, 25):
        a = np.ones((n, 3))
        for _ in range(native.TIER_UP_CALLS + 1):
            g(a)
    gc.collect()
    assert {e.tier for e in tierdiff.executables(g)} == {1}
    assert len(native.jit._LIVE) - before <= len(tierdiff.executables(g))


def test_profiled_and_untiered_builds_compile_fully(monkeypatch):
    monkeypatch.setenv("GRAPHC_PROFILE", "1")
    f = graphc.compile(_loss)
    want = f(X)
    assert _exe(f).tier == 1 and _exe(f).kernel_profile()
    monkeypatch.delenv("GRAPHC_PROFILE")
    g = graphc.compile(_loss)
    assert tierdiff.same_bits(g(X), want) and _exe(g).tier == 0
    monkeypatch.setattr(native, "TIERED", False)
    h = graphc.compile(_loss)
    assert tierdiff.same_bits(h(X), want) and _exe(h).tier == 1


def test_disk_cached_compile_matches_the_quick_tier(tmp_path):
    f = graphc.compile(_loss)
    quick = f(X)
    cached = graphc.compile(_loss, disk_cache=str(tmp_path / "c"))
    assert tierdiff.same_bits(cached(X), quick)  # disk-stored
    again = graphc.compile(_loss, disk_cache=str(tmp_path / "c"))
    assert tierdiff.same_bits(again(X), quick)
    assert _exe(again).cache_status == "disk-hit" and _exe(again).tier == 1


def test_compiled_functions_under_transforms_and_in_scan_bodies():
    inner = graphc.compile(lambda a: (a.tanh() * a).sum())
    x = X[0].copy()
    want_val = inner(x)
    vg = graphc.compile(graphc.value_and_grad(inner))
    first = vg(x)
    for _ in range(native.TIER_UP_CALLS + 1):
        assert all(tierdiff.same_bits(a, b) for a, b in zip(vg(x), first))
    assert tierdiff.same_bits(first[0], want_val)
    vm = graphc.compile(graphc.vmap(inner))
    first = vm(X)
    for e in tierdiff.executables(vm):
        e.upgrade()
    assert tierdiff.same_bits(vm(X), first)

    def body(c, row):
        return c + inner(row), inner(row)

    sc = graphc.compile(lambda xs: graphc.scan(body, np.float64(0.0), xs))
    c0, ys0 = sc(X)
    assert [e.tier for e in tierdiff.executables(sc)] == [1]  # loops: full build at once
    assert tierdiff.same_bits(ys0[0], want_val)


def test_autograd_bridge_gradient_executable_has_its_own_tier():
    f = graphc.compile(lambda a: ((a * 1.3).tanh() * a.exp()).sum())
    grads, tiers = [], []
    for _ in range(native.TIER_UP_CALLS + 3):
        t = eager.tensor(X.copy(), requires_grad=True)
        f(t).backward()
        grads.append(t.grad.numpy().copy())
        (entry,) = f._cache.values()
        vjp = entry.stages["_vjp_fn"]
        tiers.append(tierdiff.executables(vjp)[0].tier)
    assert tiers[0] == 0 and tiers[-1] == 1
    assert all(tierdiff.same_bits(g, grads[0]) for g in grads)
    t = eager.tensor(X.copy(), requires_grad=True)
    ((t * 1.3).tanh() * t.exp()).sum().backward()
    np.testing.assert_allclose(grads[0], t.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_a_failed_switch_never_fails_the_call_even_with_warnings_as_errors(monkeypatch):
    f = graphc.compile(_loss)
    want = f(X)
    exe = _exe(f)
    monkeypatch.setattr(native, "optimized_functions", lambda text, names: {n: text for n in names})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pytest -W error, python -W error
        for _ in range(2 * native.TIER_UP_CALLS):
            assert tierdiff.same_bits(f(X), want)
    assert exe.tier == 0


def test_a_call_path_bound_before_the_switch_runs_the_optimized_code():
    f = graphc.compile(_loss)
    want = f(X)
    (entry,) = f._cache.values()
    exe = entry.stages["_executable"]
    stale = entry.call  # e.g. made by a thread while another one switched
    assert exe.upgrade() is True and entry.call is not stale
    n = exe._tier_calls
    for _ in range(3):
        assert tierdiff.same_bits(stale((X,)), want)
    assert exe._tier_calls == n  # not counted: forwarded to the optimized code


# --- no undefined behaviour in generated code (where O3 and optnone may legally differ) --

_DEF = re.compile(r'^\s*(%"?[\w.]+"?) = (\w+) (.*)$')
_FN = re.compile(r'^define [^@]*@"?([\w.]+)"?\(')


def _ub_findings(ir_text: str) -> list:
    """Instructions whose result LLVM may treat as poison/UB for some inputs: a shift
    by a non-constant or too large amount, an integer division by a non-constant, 0 or
    -1, and fptosi/fptoui of a value not first clamped by a select."""
    defs: dict = {}  # this function's values -> the instruction defining them
    bad, fn = [], ""
    for ln in ir_text.splitlines():
        fm = _FN.match(ln)
        if fm:
            fn, defs = fm.group(1), {}
        m = _DEF.match(ln)
        if not m:
            continue
        defs[m.group(1)] = m.group(2)
        op, rest = m.group(2), m.group(3)
        if op in ("shl", "lshr", "ashr", "sdiv", "srem", "udiv", "urem"):
            ty, operands = rest.split(" ", 1)
            amount = operands.rsplit(",", 1)[1].strip()
            if not re.fullmatch(r"-?\d+", amount):
                if not (op in ("sdiv", "srem") and fn.endswith("_chunk")):  # chunks >= 1
                    bad.append(f"{fn}: {ln.strip()}")
                continue
            k, width = int(amount), int(ty.lstrip("i<>x 0123456789").strip() or ty[1:])
            if op in ("shl", "lshr", "ashr") and not 0 <= k < width:
                bad.append(f"{fn}: {ln.strip()}")
            if op in ("sdiv", "srem", "udiv", "urem") and k in (0, -1):
                bad.append(f"{fn}: {ln.strip()}")
        if op in ("fptosi", "fptoui"):
            src = rest.split(" ")[1]
            if defs.get(src) != "select":
                bad.append(f"{fn}: {ln.strip()}")
    return bad


def test_generated_code_has_no_undefined_integer_or_conversion_ops():
    bad = 'define void @"k"(i64 %"y") {\n  %"a" = fptosi double 1.0 to i64\n'
    bad += '  %"b" = shl i64 %"y", %"y"\n  %"c" = lshr i64 %"y", 64\n  %"d" = sdiv i64 %"y", -1\n}'
    assert len(_ub_findings(bad)) == 4  # the checker finds what it looks for
    progs = {
        "casts": (
            lambda a: (a.long(), a.int(), (a * 1e12).long().to(a.dtype)),
            (_vals(np.float64),),
        ),
        "int div": (lambda a: (a // 3, a % 7, a // -5), (np.arange(-20, 20),)),
        "int pow": (lambda a: a**3, (np.arange(-5, 5),)),
        "vecmath": (
            lambda a: (
                a.exp(),
                a.log(),
                a.tanh(),
                a.erf(),
                a.sigmoid(),
                a**1.7,
                a.expm1(),
                a.sin(),
            ),
            (_vals(np.float32),),
        ),
        "reductions": (lambda a: (a.sum(0), a.amax(1), a.var(0), a.logsumexp(1)), (X,)),
        "big sum": (lambda a: (a * 2.0).sum(), (np.ones(1 << 19),)),  # parallel chunks
    }
    for seed in range(30):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            p = fuzzgen.generate(seed, tierdiff.features_for(seed))
        progs[f"seed{seed}"] = (p.fn(), tuple(p.inputs))
    found = []
    for name, (fn, args) in progs.items():
        f = graphc.compile(fn)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            try:
                f(*[a.copy() for a in args])
            except graphc.TracerError:
                continue
        for exe in tierdiff.executables(f):
            found += [f"{name}: {x}" for x in _ub_findings(exe.jit.llvm_ir(False))]
    assert not found, "\n".join(found[:20])


_FMULADD_IR = r"""
define double @f(double %x) ATTR {
  %r = call double @llvm.fmuladd.f64(double 0x3FF0000002000000, double 0x3FF0000002000000,
                                     double 0xBFF0000004000000)
  %s = fadd double %r, %x
  ret double %s
}
declare double @llvm.fmuladd.f64(double, double, double)
"""


def _fmuladd_demo(features: str, opt: int) -> float:
    import ctypes

    import llvmlite.binding as llvm

    with native.jit.LLVM_LOCK:
        tm = llvm.Target.from_default_triple().create_target_machine(
            cpu=llvm.get_host_cpu_name(), features=features, opt=opt, jit=True
        )
        m = llvm.parse_assembly(_FMULADD_IR.replace("ATTR", "noinline optnone" if not opt else ""))
        if opt:
            pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=opt))
            pb.getModulePassManager().run(m, pb)
        ee = llvm.create_mcjit_compiler(m, tm)
        ee.finalize_object()
        fn = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(ee.get_function_address("f"))
        out = fn(0.0)
        ee.close()
    return out


def test_why_hosts_without_fma_skip_the_quick_tier():
    # (1 + 2^-27)^2 - (1 + 2^-26) is 2^-54 fused, 0 rounded twice.  The optnone build
    # rounds twice where the CPU lacks FMA; O3 constant-folds llvm.fmuladd fused anyway.
    feats = native.jit.host_cpu_features().split(",")
    off = ",".join("-" + f[1:] if f[1:] in ("fma", "fma4", "avx512f") else f for f in feats)
    assert _fmuladd_demo(off, 0) == 0.0
    assert _fmuladd_demo(off, 3) == 2.0**-54
    if native._host_has_fma():  # this host: fused in both builds
        assert _fmuladd_demo(",".join(feats), 0) == _fmuladd_demo(",".join(feats), 3) == 2.0**-54
