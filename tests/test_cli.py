"""The ``graphc`` command, run as a user runs it: ``python -m graphc ...`` in a subprocess
(``run``); the many checks of what its ``main()`` prints and returns for one kind of input
(usage errors, the user's errors, the ``ir`` stages) call ``main()`` here (``run_here``).

Output goes to a pipe here, so progress messages (terminal only) never appear.
Usage errors are one line on stderr with exit status 2 and no traceback.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import warnings

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODULE = textwrap.dedent('''
    import numpy as np
    import eager


    def seed_graph(a, w1, w2, w3, w4):
        b = w1 * a
        c = w2 * a
        d = w3 * b + w4 * c
        return (10 - d).sum()


    def example_args():
        rng = np.random.default_rng(1)
        return tuple(rng.standard_normal((3, 3)) for _ in range(5))


    def small(x, w):
        return (x.mm(w).tanh() ** 2).sum()


    def small_example_args():
        return (np.ones((2, 3), np.float32), np.full((3, 4), 0.5, np.float32))


    def branchy(x):
        if x.sum() > 0:
            return (x * 2).sum()
        return x.sum()


    def bad_shape(x):
        return x.reshape(7, 3)


    def too_big(x):
        return x.expand(2**31, 2**31, 4) * 1.0
''')


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "graphc", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=env)


def run_here(*args: str) -> subprocess.CompletedProcess:
    """``graphc ARGS`` in this process: ``graphc.tools.cli.main``, the function
    ``python -m graphc`` calls and exits with, its stdout and stderr captured.  For the
    checks of what main() says and returns (usage errors, errors of the user's function,
    the ``ir`` stages); a subprocess per case paid an interpreter start and the imports
    each (~1.5 s).  The command as a user starts it (``run``) keeps its own tests: help,
    demo, compare, ``ir``, a usage error from main() and one from argparse, and a user's
    error, each through ``python -m graphc``.  What a file loaded here adds to
    ``sys.modules`` and ``sys.path`` is taken out again."""
    import contextlib
    import io

    from graphc.tools.cli import main

    mods, path = set(sys.modules), list(sys.path)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings(record=True) as caught:
            warnings.resetwarnings()         # a new interpreter's filters: what it would print
            warnings.simplefilter("default")
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning,
                             ResourceWarning):
                warnings.simplefilter("ignore", category)
            try:
                code = main(list(args))
            except SystemExit as e:          # argparse's usage errors
                code = e.code
        for w in caught:                     # on stderr, as a subprocess would show them
            err.write(warnings.formatwarning(w.message, w.category, w.filename, w.lineno))
    finally:
        for name in set(sys.modules) - mods:
            if name.startswith("_graphc_cli_"):
                del sys.modules[name]
        sys.path[:] = path
    return subprocess.CompletedProcess(["graphc", *args], code, out.getvalue(),
                                       err.getvalue())


def assert_usage_error(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("graphc"), lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert r.stdout == ""


@pytest.fixture(scope="module")
def module_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "model.py"
    path.write_text(MODULE)
    return str(path)


# ---------------------------------------------------------------------------
# help


@pytest.mark.parametrize("cmd", [[], ["demo"], ["compare"], ["ir"], ["bench"]])
def test_help(cmd):
    r = run(*cmd, "--help")
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.startswith("usage: graphc")
    if not cmd:
        for sub in ("demo", "compare", "ir", "bench"):
            assert sub in r.stdout
    if cmd in (["compare"], ["ir"]):
        # the example-input convention is documented
        for needle in ("FILE.py:FUNCTION", "--example", "example_args()", "EXAMPLE_ARGS",
                       "<FUNCTION>_example_args()", "--args", "f32[64,1000]"):
            assert needle in r.stdout, needle
    if cmd == ["ir"]:
        for stage in ("traced", "grad", "optimized", "llvm", "asm", "plan", "--dot"):
            assert stage in r.stdout
    if cmd == ["demo"]:
        assert "--steps" in r.stdout and "--quiet" in r.stdout


def test_no_command_prints_help():
    r = run()
    assert r.returncode == 2 and "usage: graphc" in r.stdout


# ---------------------------------------------------------------------------
# demo


def test_demo_output_shape():
    r = run("demo", "--steps", "20")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""                        # piped: no progress messages
    out = r.stdout
    rows = re.findall(r"^\s+(\d+)\s+(\S+)\s+(\S+)\s*$", out, re.M)
    assert [int(s) for s, _, _ in rows] == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 19]
    losses = [(float(e), float(c)) for _, e, c in rows]
    for e, c in losses:                          # the two columns agree
        assert c == pytest.approx(e, rel=1e-4)
    assert losses[-1][0] < losses[0][0]          # and training makes progress
    assert re.search(r"w1: max abs difference \S+ \(relative \S+\)\s+agree", out)
    assert re.search(r"w2: max abs difference \S+ \(relative \S+\)\s+agree", out)
    assert re.search(r"time per step: eager \S+ \S+, compiled \S+ \S+ -> speedup \S+x", out)
    assert "graphc.compare: seed_loss(x: f32[64,1000], y: f32[64,10], w1: f32[1000,100], " \
           "w2: f32[100,10])" in out
    assert "agree within tolerance" in out
    assert "optimized IR of the compiled training step:" in out
    assert "graph seed_step(x: f32[64,1000]" in out and "matmul(" in out
    # the IR's source comments point at the numbered listing printed first
    assert "demo_step.py:2       y_pred = x.mm(w1).clamp(min=0).mm(w2)" in out
    assert re.search(r"= matmul\(x, w1\) : f32\[64,100\]\s+# demo_step.py:2$", out, re.M)
    assert "mul(1e-06, " in out                  # float32 constants print as written


def test_demo_quiet():
    r = run("demo", "--steps", "3", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "speedup" in r.stdout and "graphc.compare" not in r.stdout
    assert "eager loss" not in r.stdout


# ---------------------------------------------------------------------------
# compare


def test_compare_example(module_file):
    r = run("compare", f"{module_file}:seed_graph", "--example")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("graphc.compare: seed_graph(a: f64[3,3], w1: f64[3,3]")
    assert "grad w4" in r.stdout and "agree within tolerance" in r.stdout


def test_compare_function_specific_example_wins(module_file):
    # small_example_args() is used for small, not the module-wide example_args()
    r = run("compare", f"{module_file}:small", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["signature"] == "small(x: f32[2,3], w: f32[3,4])"
    assert d["all_agree"] is True and d["compiled"]["kernels"] >= 1


def test_compare_args_spec_json(module_file):
    r = run("compare", f"{module_file}:seed_graph", "--args",
            "f32[3,3],f32[3,3],f32[3,3],f32[3,3],f32[3,3]", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["function"] == "seed_graph"
    assert d["signature"].startswith("seed_graph(a: f32[3,3]")
    assert d["all_agree"] is True
    assert [a["name"] for a in d["agreement"]][:2] == ["output", "grad a"]


def test_compare_no_grads_and_not_possible(module_file):
    r = run("compare", f"{module_file}:branchy", "--args", "f64[4]", "--no-grads")
    assert r.returncode == 0, r.stderr
    assert "[value]" in r.stdout
    assert "compiled: not possible -- TracerBoolConversionError" in r.stdout
    assert "model.py:" in r.stdout and "if x.sum() > 0:" in r.stdout


# ---------------------------------------------------------------------------
# ir


@pytest.mark.parametrize("stage,needle", [
    ("traced", "graph seed_graph(a: f64[3,3]"),
    ("grad", "backward"),
    ("optimized", "graph seed_graph("),
    ("llvm", "define"),
    ("asm", "graphc_entry"),
    ("plan", "plan for seed_graph"),
])
def test_ir_stages_with_dot(module_file, tmp_path, stage, needle):
    dot = tmp_path / f"g_{stage}.dot"
    r = run_here("ir", f"{module_file}:seed_graph", "--example", "--stage", stage,
                 "--dot", str(dot))
    assert r.returncode == 0, r.stderr
    assert needle in r.stdout
    text = dot.read_text()
    assert text.startswith("digraph") and text.rstrip().endswith("}")
    assert "->" in text
    if stage == "grad":
        assert "#ffe9d6" in text                 # backward nodes are shaded
    assert f"wrote {dot}" in r.stderr
    assert "Traceback" not in r.stderr


def test_ir_args_spec(module_file):
    r = run("ir", f"{module_file}:small", "--args", "f64[2,3],f64[3,4]", "--stage", "traced")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("graph small(x: f64[2,3], w: f64[3,4])")
    assert "tanh" in r.stdout


def test_ir_of_untraceable_function_fails_cleanly(module_file):
    r = run("ir", f"{module_file}:branchy", "--args", "f32[3]")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "TracerBoolConversionError" in r.stderr and "model.py:" in r.stderr


@pytest.mark.parametrize("cmd", ["ir", "compare"])
@pytest.mark.parametrize("fn, needle", [("bad_shape", "shape '[7, 3]' is invalid"),
                                        ("too_big", "is too big")])
def test_errors_of_the_users_function_are_one_line_at_their_line(module_file, cmd, fn,
                                                                   needle):
    """A shape error in the function (eagerly in compare, while tracing in ir) is the
    user's: one line naming their file and line, never a traceback."""
    r = run_here(cmd, f"{module_file}:{fn}", "--args", "f32[4,5]" if fn == "bad_shape" else
                 "f32[1,1,1]")
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr and len(lines) == 1, r.stderr
    assert needle in lines[0] and re.search(r"model\.py:\d+", lines[0]), lines[0]
    assert "cannot be broadcast" not in lines[0]


def test_args_too_large_for_random_inputs(module_file):
    r = run_here("ir", f"{module_file}:bad_shape", "--args", "f32[100000000000]")
    assert_usage_error(r, "too large", "100000000000")


@pytest.mark.parametrize("spec", ["f32[0,99999999999999999999999]",
                                  "f64[99999999999999999999999]", "f32[100000,100000,100000]"])
@pytest.mark.parametrize("cmd", ["ir", "compare"])
def test_args_with_dimensions_numpy_cannot_hold(module_file, cmd, spec):
    """Refused before numpy sees them (numpy raised 'Maximum allowed dimension exceeded'
    with a traceback for a dimension beyond its index type, even with 0 elements)."""
    assert_usage_error(run_here(cmd, f"{module_file}:bad_shape", "--args", spec),
                       f"--args item '{spec}'", "use smaller sizes")


# ---------------------------------------------------------------------------
# bad input: one line, exit status 2


def test_missing_file(tmp_path):
    assert_usage_error(run("compare", f"{tmp_path}/nope.py:f", "--args", "f32[3]"),
                       "does not exist")


def test_missing_function(module_file):
    assert_usage_error(run_here("ir", f"{module_file}:nope", "--example"),
                       "has no function 'nope'", "seed_graph")


def test_missing_colon(module_file):
    assert_usage_error(run_here("compare", module_file, "--example"), "FILE.py:FUNCTION")


@pytest.mark.parametrize("spec,needle", [
    ("f33[3]", "unknown dtype"),
    ("f32[3", "unbalanced"),
    ("f32[a]", "expected DTYPE[DIMS]"),
    ("f32[3],,f32[3]", "empty item"),
])
def test_bad_spec(module_file, spec, needle):
    assert_usage_error(run_here("compare", f"{module_file}:small", "--args", spec), needle)


def test_wrong_number_of_inputs(module_file):
    assert_usage_error(run_here("compare", f"{module_file}:small", "--args", "f32[3]"),
                       "does not take the 1 argument")


def test_bad_stage(module_file):
    assert_usage_error(run("ir", f"{module_file}:small", "--stage", "bogus"),
                       "invalid choice: 'bogus'")


def test_module_that_fails_to_import(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("x = 1\nraise RuntimeError('boom')\n")
    assert_usage_error(run_here("compare", f"{bad}:f", "--args", "f32[3]"),
                       "importing broken.py failed at line 2", "boom")


def test_no_inputs(tmp_path):
    m = tmp_path / "plain.py"
    m.write_text("def f(x):\n    return x.sum()\n")
    assert_usage_error(run_here("compare", f"{m}:f"), "pass --args SPEC")
    assert_usage_error(run_here("compare", f"{m}:f", "--example"), "EXAMPLE_ARGS")


# ---------------------------------------------------------------------------
# bench


@pytest.mark.skipif(importlib.util.find_spec("graphc.tools.bench") is None,
                    reason="graphc/tools/bench.py (written by the lead) is not there yet")
def test_bench_quick():
    r = run("bench", "--quick", "--only", "W0", "W3", "--json", timeout=300)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert "environment" in d
    assert [w["id"] for w in d["workloads"]] == ["W0", "W3"]
    r = run("bench", "--threads", "0")
    assert_usage_error(r, "--threads")
    env = d["environment"]
    assert env["graphc threads"].split()[0].isdigit() and "numpy BLAS threads" in env


def test_bench_verdicts_against_pytorch_eager_and_the_products():
    from graphc.tools.bench import _verdict
    times = {"numpy": 2.0, "matmuls only": 1.0, "eager": 3.0, "compiled": 1.2,
             "torch eager": 3.3}
    assert _verdict("<=t", 1.0, times, "eager") == "target <= 1.0x torch eager (0.91x): met"
    assert _verdict("<=m", 1.3, times, "compiled") == \
        "target <= 1.3x matmuls only (1.20x): met"
    del times["torch eager"]
    assert "not measured" in _verdict("<=t", 1.0, times, "eager")
