"""The compiled-function API under unusual use: every argument kind after every other,
fork while another thread compiles, and a project that stands on its own."""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import eager
import graphc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

KINDS = {
    "array": lambda: np.ones(3),
    "array_f32_2d": lambda: np.ones((2, 2), np.float32),
    "tensor": lambda: eager.ones(3),
    "list": lambda: [np.ones(3), np.ones(3)],
    "tuple": lambda: (np.ones(3),),
    "dict": lambda: {"a": np.ones(3)},
    "none": lambda: None,
    "float": lambda: 1.5,
    "int": lambda: 2,
    "bool": lambda: True,
    "numpy_scalar": lambda: np.float64(2.0),
    "array_0d": lambda: np.array(1.0),
}


def _identity_or_one(x):
    return 1.0 if x is None else x


@pytest.mark.parametrize("first, second", list(itertools.permutations(KINDS, 2)))
def test_every_argument_kind_is_accepted_after_any_other(first, second):
    """The recompile reason is computed for any pair of signatures (it once indexed
    every key item as an array's), and each signature stays callable."""
    cf = graphc.compile(_identity_or_one)
    for kind in (first, second, first, second):
        out = cf(KINDS[kind]())
        assert out is not None
    same = {first, second} == {"numpy_scalar", "array_0d"}    # both a 0-d float64 array
    assert cf.cache_info().traces == (1 if same else 2)
    for reason in cf.recompile_reasons:
        assert reason.startswith("re-traced _identity_or_one: argument x"), reason


def test_fork_while_another_thread_compiles():
    """A child forked while a thread of the parent compiles must be able to compile and
    run (the LLVM lock is held across fork, then fresh in the child; every other lock is
    replaced in the child).  Each child has a deadline: a deadlock fails, not hangs."""
    code = textwrap.dedent("""
        import os, threading, time, faulthandler, multiprocessing
        import numpy as np, graphc

        stop = False
        def compile_forever():
            k = 0
            while not stop:
                k += 1
                graphc.compile(lambda x, k=k: (x * k).exp().sum() + k)(np.ones(8))

        def child_work(_=None):
            faulthandler.dump_traceback_later(60, exit=True)
            return float(graphc.compile(lambda x: (x + 1).sum())(np.ones(4)))

        threading.Thread(target=compile_forever, daemon=True).start()
        time.sleep(0.3)
        for trial in range(4):
            time.sleep(0.05)
            pid = os.fork()
            if pid == 0:
                os._exit(0 if child_work() == 8.0 else 3)
            deadline = time.time() + 90
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                if time.time() > deadline:
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                    status = -1
                    break
                time.sleep(0.02)
            assert status == 0, ("child", trial, status)
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(2) as pool:
            res = pool.map_async(child_work, range(2), chunksize=1)
            assert res.get(timeout=120) == [8.0, 8.0]
        stop = True
        print("ok")
    """)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", code],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.stdout, r.stderr[-3000:])


def test_fork_while_another_thread_imports_the_backend_for_its_first_compile():
    """graphc imports its backend at the first compile.  A fork while another thread is
    inside that import once left the child waiting forever on the module's import lock
    (held by a thread the child does not have): fork now waits for the import.  An
    import hook makes one backend module slow, so the fork lands inside the import.

    The LLVM engine is imported later in that same import: its fork hooks, registered
    while the fork waited, once ran their after-fork half without their before half
    (releasing a lock never taken) and the fork did not wait for the thread's calls into
    LLVM, so the child could hang in LLVM.  They go through graphc's one set of fork
    hooks now (graphc.runtime.imports.at_fork)."""
    code = textwrap.dedent("""
        import importlib.abc, os, sys, threading, time, faulthandler
        import numpy as np, graphc

        class Slow(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name != "graphc.backend.lower":
                    return None
                sys.meta_path.remove(self)
                spec = importlib.util.find_spec(name)
                run = spec.loader.exec_module
                def exec_module(module):
                    started.set()
                    time.sleep(1.0)
                    run(module)
                spec.loader.exec_module = exec_module
                return spec

        import importlib.util
        started = threading.Event()
        sys.meta_path.insert(0, Slow())
        t = threading.Thread(target=lambda: graphc.compile(lambda x: x.exp().sum())(np.ones(3)))
        t.start()
        assert started.wait(60)
        pid = os.fork()
        if pid == 0:
            faulthandler.dump_traceback_later(60, exit=True)
            r = float(graphc.compile(lambda x: (x + 1).sum())(np.ones(4)))
            os._exit(0 if r == 8.0 else 3)
        _, status = os.waitpid(pid, 0)
        t.join()
        assert status == 0, status
        print("ok")
    """)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", code],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.stdout, r.stderr[-3000:])
    assert "Exception ignored" not in r.stderr, r.stderr[-3000:]


def test_a_0d_bool_index_is_refused_when_tracing_and_assignment_works():
    """x[b] for a 0-d bool b has a dim of size 1 or 0 depending on b: no static shape."""
    def f(x):
        return x[x.sum() > 0]
    x = np.ones(3)
    assert f(eager.tensor(x)).shape == (1, 3) and f(eager.tensor(-x)).shape == (0, 3)
    with pytest.raises(TypeError, match="0-d bool"):
        graphc.compile(f)(x)
    with pytest.raises(TypeError, match="0-d bool"):
        graphc.compile(f, backend="interpreter")(x)

    def g(x):
        y = x * 1
        y[y.sum() > 0] = 7.0
        return y
    for arg in (x, -x):
        np.testing.assert_array_equal(graphc.compile(g)(arg), g(eager.tensor(arg)).numpy())


def test_printed_ir_and_dot_show_control_characters_as_escapes():
    """Names and source locations reach the terminal and Graphviz: a carriage return or
    an escape sequence in them must not rewrite what the reader sees."""
    g = graphc.Graph("evil\rname\u2028x")
    i = g.add_input("a\x1bb", (3,), "float64")
    g.outputs.append(g.add_node("exp", (i,), {}, src="f.py:1\rinjected"))
    for text in (str(g), g.to_dot()):
        assert all(ch.isprintable() or ch == "\n" for ch in text), repr(text)
        assert "x0dname" in text and "x1bb" in text and "u2028" in text
    assert "f.py:1\\x0dinjected" in str(g)


def test_the_project_never_points_outside_itself():
    """A clone of the project holds only the project: no file may send a reader to
    material that is not in it."""
    bad = []
    for top in ("eager", "graphc", "tests", "examples", "docs", ".ci"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if not name.endswith((".py", ".md", ".toml", ".txt", ".json")) and name != "run":
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for needle in ("shared/", "BENCHMARKS.md", "../shared"):
                    if needle in text and path != os.path.abspath(__file__):
                        bad.append(f"{os.path.relpath(path, ROOT)}: {needle}")
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        if "shared/" in f.read():
            bad.append("README.md: shared/")
    assert not bad, bad


def _more_kinds() -> dict:
    """KINDS plus dtypes, byte order, tensors that require grad and special floats."""
    return {
        "f64[3]": np.arange(3.0), "f32[3]": np.arange(3, dtype=np.float32),
        "i64[3]": np.arange(3), "bool[3]": np.ones(3, bool),
        ">f8[3]": np.arange(3.0).astype(">f8"), "0-d": np.array(2.5),
        "Tensor": eager.arange(3.0), "Tensor rg": eager.ones(3, requires_grad=True),
        "list": [1.0, np.ones(2)], "tuple": (np.ones(2), 2), "dict": {"a": np.ones(2), "b": 1},
        "None": None, "float": 1.5, "0.0": 0.0, "-0.0": -0.0, "nan": float("nan"), "int": 3,
        "bool": True, "np.float32": np.float32(2.0), "np.int64": np.int64(4),
    }


def _same_value(a, b) -> bool:
    """Equal values, types and dtypes (the sign of a zero and NaN included)."""
    if isinstance(a, eager.Tensor):
        return isinstance(b, eager.Tensor) and _same_value(a.detach().numpy(),
                                                           b.detach().numpy())
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same_value, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and
                np.array_equal(a, b, equal_nan=True) and
                np.array_equal(np.signbit(a), np.signbit(b)))
    if isinstance(a, float):
        return type(b) is float and (a.hex() == b.hex() or a != a and b != b)
    return type(a) is type(b) and a == b


def test_each_kind_after_any_other_gives_what_a_fresh_function_gives():
    """Not only callable: the result of every pair equals a fresh function's (a cached
    signature that compares equal must also trace the same: 0.0 and -0.0 do not)."""
    def f(x):
        return x

    kinds = _more_kinds()
    fresh = {k: graphc.compile(f)(v) for k, v in kinds.items()}
    native = graphc.compile(f, recompile_limit=100)     # each kind after all others
    for kind, v in list(kinds.items()) * 2:
        assert _same_value(native(v), fresh[kind]), kind
    assert native.cache_info().traces == len(kinds)
    for first, a in kinds.items():      # every pair; the reason does not depend on the
        cf = graphc.compile(f, backend="interpreter")   # backend, and this one is quick
        for second, b in kinds.items():
            cf.clear_cache()
            cf(a)
            assert _same_value(cf(b), fresh[second]), (first, second)
            if first != second:
                assert cf.recompile_reasons[-1].startswith("re-traced f: argument x"), \
                    (first, second, cf.recompile_reasons[-1])


def test_static_float_sign_and_nan_in_the_key():
    """0.0 == -0.0, but a trace with one baked in is wrong for the other (x / -0.0 is
    -inf); a NaN is unequal to itself, but must not re-trace on every call."""
    cf = graphc.compile(lambda x, s: x / s)
    x = np.ones(2)
    np.testing.assert_array_equal(cf(x, 0.0), [np.inf, np.inf])
    np.testing.assert_array_equal(cf(x, -0.0), [-np.inf, -np.inf])
    assert cf.recompile_reasons[-1].endswith("argument s: static value 0.0 -> static value -0.0")
    st = graphc.compile(lambda x, s: x / s, static_argnums=(1,))
    np.testing.assert_array_equal(st(x, 0.0), [np.inf, np.inf])
    np.testing.assert_array_equal(st(x, -0.0), [-np.inf, -np.inf])
    np.testing.assert_array_equal(st(x, np.float32(-0.0)), [-np.inf, -np.inf])
    np.testing.assert_array_equal(graphc.compile(lambda x, p: x / p["s"])(x, {"s": -0.0}),
                                  [-np.inf, -np.inf])
    for _ in range(3):
        assert np.isnan(cf(x, float("nan"))).all()
        assert np.isnan(st(x, float("nan"))).all()
    assert cf.cache_info().traces == 3 and st.cache_info().traces == 4


def test_recompile_reason_names_the_nearest_signature_and_the_leaf():
    cf = graphc.compile(lambda x: x)
    for arg in (np.ones(3), [1.0, np.ones(2)], None, {"w": np.ones(2)}, {"w": np.ones(4)},
                {"w": 1.0}):
        cf(arg)
    r = cf.recompile_reasons
    assert r[0].endswith("argument x: ndarray float64[3] -> structure [*, *]")
    assert r[1].endswith("argument x: ndarray float64[3] -> None")
    # the dict of the same structure is nearer than the array: its leaf is named
    assert r[3].endswith("argument x['w']: shape [2] -> [4]")
    assert r[4].endswith("argument x['w']: ndarray float64[2] -> static value 1.0")


X = np.linspace(-1, 1, 6).astype(np.float32).reshape(2, 3)


@pytest.mark.parametrize("index", [
    lambda x: x > 0, lambda x: x.sum() > 0, lambda x: x.sum() < 0, lambda x: (1, x.sum() > 0),
    lambda x: (x.sum() > 0, None), lambda x: True, lambda x: np.array(False),
    lambda x: np.array([True, False]), lambda x: [True, False]],
    ids=["mask", "0-d true", "0-d false", "int, 0-d", "0-d, None", "True", "np 0-d",
         "np mask", "list mask"])
@pytest.mark.parametrize("backend", ["native", "interpreter"])
def test_bool_index_of_any_shape_or_origin_is_refused_naming_the_line(index, backend):
    """Traced or constant, with other index items or alone: no static shape."""
    def f(x):
        return x[index(x)] * 2

    with pytest.raises(TypeError) as ei:
        graphc.compile(f, backend=backend)(X)
    msg = str(ei.value)
    assert "bool" in msg and "graphc.where" in msg, msg
    assert f"test_api_robustness.py:{f.__code__.co_firstlineno + 1}" in msg, msg


@pytest.mark.parametrize("mask,value", [
    (lambda y: y > 0, 0.0),
    (lambda y: y > 0, [7.0]),                                    # one value: broadcast
    (lambda y: eager.tensor([True, False]), [7.0, 8.0, 9.0]),  # rows; used to mask columns
    (lambda y: eager.tensor([False, True]), [[7.0, 8.0, 9.0]]),
    (lambda y: y.sum() > 0, 5.0), (lambda y: y.sum() < 0, 5.0),  # 0-d masks
    (lambda y: y.sum() > 0, [1.0, 2.0, 3.0]), (lambda y: y.sum() > 0, [[[1.0, 2.0, 3.0]]]),
    (lambda y: True, 4.0),
], ids=["full", "one value", "rows", "rows [[v]]", "0-d true", "0-d false", "0-d row",
        "0-d [[[row]]]", "True"])
def test_masked_assignment_matches_eager_with_gradients(mask, value):
    def f(x, v):
        y = x * 1
        y[mask(y)] = v
        return (y * y).sum()

    v = np.asarray(value, np.float32)
    xe, ve = eager.from_numpy(X).requires_grad_(), eager.from_numpy(v).requires_grad_()
    want = f(xe, ve)
    gx, gv = eager.autograd.grad(want, (xe, ve))
    for level in (0, 2):
        val, (cx, cv) = graphc.compile(graphc.value_and_grad(f, argnums=(0, 1)),
                                       opt_level=level)(X, v)
        np.testing.assert_allclose(val, want.item(), rtol=1e-6)
        np.testing.assert_allclose(cx, gx.numpy(), rtol=1e-6)
        np.testing.assert_allclose(cv, gv.numpy(), rtol=1e-6)


def test_masked_assignment_of_one_value_per_element_is_refused_natively():
    """``y[mask] = values`` scatters the values in order (data-dependent): it was traced
    as ``where(mask, values, y)``, which broadcast them in place (wrong numbers)."""
    def f(x):
        y = x * 1
        y[(y == 0) | (y == 2) | (y == 4)] = eager.tensor([10.0, 20.0, 30.0])
        return y

    x = np.arange(6.0).reshape(2, 3)
    want = f(eager.from_numpy(x)).numpy()
    np.testing.assert_array_equal(want, [[10, 1, 20], [3, 30, 5]])      # PyTorch's answer
    np.testing.assert_array_equal(graphc.compile(f, backend="interpreter")(x), want)
    with pytest.raises(graphc.UnsupportedOpError, match="boolean index tensors"):
        graphc.compile(f)(x)
    with pytest.raises(IndexError, match=r"shape of the mask \[3\] does not match"):
        graphc.compile(lambda x: x.__setitem__(np.ones(3, bool), 0.0))(x)


@pytest.mark.parametrize("char", ["\r", "\n", "\x0b", "\x00", "\x1b", "\x85", "\u2028"])
def test_error_messages_and_plans_show_control_characters_as_escapes(char):
    """Node descriptions (in every lowering, verifier and interpreter error), plans, the
    pass that made a node and the native executable's name reach the terminal too."""
    from graphc.backend.schedule import Schedule
    from graphc.runtime.native import NativeExecutable
    g = graphc.trace(lambda x: (x + 1).sum(), np.ones(2))
    add = next(n for n in g.node_ids() if g[n]["op"] == "add")
    g.nx.nodes[add]["src"] = f"f.py:1{char}  %9 = evil(x)"
    g.nx.nodes[add]["by"] = f"pass{char}"
    g.name = f"na{char}me"
    exe = NativeExecutable(g.copy(), 0, name=f"fn{char}")
    with pytest.raises(graphc.GraphcError) as ei:
        exe.run([np.ones(3)])
    for text in (graphc.ir.describe(g, add), Schedule(g).describe(), str(g), str(ei.value)):
        assert all(c == "\n" or c.isprintable() for c in text), repr(text)
    assert f"by pass{graphc.ir.printable(char)}" in str(g)


_FORK_PRELUDE = """
import multiprocessing, threading, time, warnings
import numpy as np
import graphc
from graphc.runtime import llvm_engine as jit
warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork() with threads (meant)
CTX = multiprocessing.get_context("fork")


def child(q, n):
    # a new signature of CF (its lock and LLVM) and another function
    try:
        q.put(float(CF(np.ones(n))) == 2.0 * n and float(OTHER(np.ones(3))) == 3.0)
    except BaseException as e:
        q.put(repr(e))


def fork_and_check(n):
    q = CTX.Queue()
    p = CTX.Process(target=child, args=(q, n))
    p.start()
    p.join(60)
    if p.is_alive():
        p.kill()
        p.join()
        return "hung"
    return q.get(timeout=5) if p.exitcode == 0 else f"exit {p.exitcode}"


OTHER = graphc.compile(lambda x: x.sum())
"""

_FORK_SCENARIOS = {
    # the parent's thread is tracing CF (holding CF's lock) across the fork
    "function_lock_held": _FORK_PRELUDE + """
tracing, forked = threading.Event(), threading.Event()


def f(x):
    if x.shape[0] == 1000:
        tracing.set()
        forked.wait(30)
    return (x * 2).sum()


CF = graphc.compile(f)
t = threading.Thread(target=CF, args=(np.ones(1000),))
t.start()
assert tracing.wait(30)
res = fork_and_check(5)
forked.set()
t.join()
print(res)
""",
    # the parent's thread holds the LLVM lock: the fork waits for it, the child has it free
    "llvm_lock_held": _FORK_PRELUDE + """
CF = graphc.compile(lambda x: (x * 2).sum())
held = threading.Event()


def hold():
    with jit.LLVM_LOCK:
        held.set()
        time.sleep(0.3)


t = threading.Thread(target=hold)
t.start()
assert held.wait(30)
res = fork_and_check(5)
t.join()
print(res)
""",
}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")
@pytest.mark.parametrize("scenario", sorted(_FORK_SCENARIOS))
def test_fork_while_a_lock_is_held_at_a_known_point(scenario):
    """The deterministic cases behind the test above: a function's lock held by a thread
    that is tracing, and the LLVM lock held, at the moment of the fork."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", _FORK_SCENARIOS[scenario]], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "True", (r.stdout, r.stderr[-3000:])
