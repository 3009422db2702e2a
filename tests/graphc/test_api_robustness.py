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
