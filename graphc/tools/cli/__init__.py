"""The ``graphc`` command: run the demo, compare eager and compiled, read the IR, benchmark.

    graphc demo                         the seeds' MLP trained eagerly and compiled
    graphc compare model.py:loss --example
    graphc ir model.py:loss --args f32[64,1000],f32[1000,100] --stage optimized
    graphc bench --quick
    graphc export model.py:predict --args f32[1,64] -o model.onnx

Usage errors (a missing file or function, a bad --args spec) print one line on
stderr and exit with status 2; a function that cannot be compiled exits with 1.
Progress messages go to stderr only when it is a terminal.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .common import EXIT_FAILED, EXIT_USAGE, CompileFailed, UsageError, _progress
from .demo import cmd_demo

STAGES = ("traced", "grad", "optimized", "llvm", "asm", "plan")

EXAMPLE_HELP = """\
where the inputs come from:
  --example     the module that defines FUNCTION provides them, looked up in this order:
                  <FUNCTION>_example_args()   a function returning a tuple of arguments
                  example_args()              a function returning a tuple of arguments
                  EXAMPLE_ARGS                a tuple of arguments
                (a value that is not a tuple is one argument).  Arguments are numpy
                arrays, eager Tensors, Python scalars or nested tuples/lists/dicts of them.
  --args SPEC   seeded random arrays, comma-separated: DTYPE[DIMS], e.g.
                  f32[64,1000],f32[1000,100],f64[],i64[4],bool[2,2]
                dtypes f16 f32 f64 i8 i16 i32 i64 u8 bool (or numpy names such as float32);
                floats are standard normal, integers uniform in [0, 10), bools fair coins.
                A bare number (3, 0.5) passes that Python scalar (a constant to graphc).
  If neither is given, --example is used when the module provides examples.
"""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (usage is one ``--help`` away)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


# ---------------------------------------------------------------------------
# loading a function and its inputs


def load_function(target: str) -> tuple:
    """``path/to/file.py:function`` -> (module, function, name)."""
    if ":" not in target:
        raise UsageError(f"expected FILE.py:FUNCTION, got {target!r}")
    path, _, name = target.rpartition(":")
    if not path or not name:
        raise UsageError(f"expected FILE.py:FUNCTION, got {target!r}")
    if not os.path.isfile(path):
        what = "is a directory" if os.path.isdir(path) else "does not exist"
        raise UsageError(f"file {path!r} {what}")
    path = os.path.abspath(path)
    mod_name = "_graphc_cli_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot load {path!r} as a Python module (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    here = os.path.dirname(path)
    added = here not in sys.path
    if added:
        sys.path.insert(0, here)  # the file may import its neighbours
    try:
        spec.loader.exec_module(module)
    except SystemExit:
        raise UsageError(f"importing {path!r} called sys.exit()") from None
    except BaseException as e:  # the user's module failed: say where, in one line
        line = _user_line(e, path)
        raise UsageError(
            f"importing {os.path.basename(path)} failed{line}: {type(e).__name__}: {e}"
        ) from None
    obj: Any = module
    for part in name.split("."):
        if not hasattr(obj, part):
            funcs = sorted(
                k
                for k, v in vars(module).items()
                if callable(v)
                and not k.startswith("_")
                and getattr(v, "__module__", None) == mod_name
            )
            hint = f"; functions defined there: {', '.join(funcs)}" if funcs else ""
            raise UsageError(f"{os.path.basename(path)} has no function {name!r}{hint}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UsageError(
            f"{name!r} in {os.path.basename(path)} is a {type(obj).__name__}, not a function"
        )
    return module, obj, name


def _failed(name: str, exc: BaseException, module: Any) -> "CompileFailed":
    """One line for a failure while running or compiling the user's function: at the
    user's line when the error is raised from their file, else marked as graphc's own."""
    from ...errors import GraphcError

    path = getattr(module, "__file__", None) or ""
    line = _user_line(exc, path)
    where = f" ({os.path.basename(path)}{line.replace(' at line ', ':')})" if line else ""
    msg = f"{name}{where}: {type(exc).__name__}: {exc}"
    if not line and not isinstance(
        exc, (GraphcError, TypeError, ValueError, RuntimeError, IndexError, MemoryError)
    ):
        msg += " (an internal error of graphc; please report it with this command line)"
    return CompileFailed(msg)


def _user_line(exc: BaseException, path: str) -> str:
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
    return f" at line {frames[-1].lineno}" if frames else ""


_DTYPES = {
    "f16": "float16",
    "f32": "float32",
    "f64": "float64",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u8": "uint8",
    "bool": "bool",
    "b1": "bool",
}


def _split_top(spec: str) -> list:
    """Split on commas outside brackets."""
    parts, depth, cur = [], 0, ""
    for ch in spec:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise UsageError(f"bad --args spec {spec!r}: unbalanced ']'")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if depth:
        raise UsageError(f"bad --args spec {spec!r}: unbalanced '['")
    parts.append(cur)
    return [p.strip() for p in parts]


# the largest random input --args makes (bytes of its float64 draw): 8 GiB
_ARGS_BYTES = 8 << 30


def parse_args_spec(spec: str, seed: int = 0) -> tuple:
    """``f32[3,3],f64[10],i64[4],0.5`` -> seeded random arrays (and Python scalars)."""
    rng = np.random.default_rng(seed)
    out = []
    for item in _split_top(spec):
        if not item:
            raise UsageError(f"bad --args spec {spec!r}: empty item")
        m = re.fullmatch(r"([A-Za-z][A-Za-z0-9]*)\[([0-9,\s]*)\]", item)
        if m is None:
            try:
                out.append(int(item))
                continue
            except ValueError:
                pass
            try:
                out.append(float(item))
                continue
            except ValueError:
                pass
            raise UsageError(
                f"bad --args item {item!r}: expected DTYPE[DIMS] such as "
                "f32[3,3] or f64[] (a scalar), or a number"
            )
        name, dims = m.group(1), m.group(2)
        dt_name = _DTYPES.get(name.lower(), name.lower())
        try:
            dt = np.dtype(dt_name)
        except TypeError:
            raise UsageError(
                f"bad --args item {item!r}: unknown dtype {name!r} (use {', '.join(_DTYPES)})"
            ) from None
        if dt.kind not in "fiub":
            raise UsageError(f"bad --args item {item!r}: dtype {dt.name} is not supported")
        parts = [d.strip() for d in dims.split(",")] if dims.strip() else []
        if parts and parts[-1] == "":  # a trailing comma, as in Python's (3,)
            parts.pop()
        if any(d == "" for d in parts):  # f32[2,,3] is a typo, not f32[2,3]
            raise UsageError(f"bad --args item {item!r}: an empty dimension between commas")
        try:
            shape = tuple(int(d) for d in parts)
        except ValueError:
            raise UsageError(f"bad --args item {item!r}: dimensions must be integers") from None
        n = math.prod(shape)
        if any(d > sys.maxsize for d in shape):  # numpy's limit, even with 0 elements
            raise UsageError(
                f"--args item {item!r}: a dimension is larger than numpy allows "
                f"({sys.maxsize}); use smaller sizes"
            )
        if n * 8 > _ARGS_BYTES:  # the random draw is float64 before the cast
            raise UsageError(
                f"--args item {item!r}: {n} elements is too large for random "
                f"inputs (at most {_ARGS_BYTES // 8} elements); use smaller sizes"
            )
        try:
            if dt.kind == "f":
                out.append(rng.standard_normal(shape).astype(dt))
            elif dt.kind == "b":
                out.append(rng.random(shape) < 0.5)
            else:
                out.append(rng.integers(0, 10, size=shape).astype(dt))
        except MemoryError:
            raise UsageError(
                f"--args item {item!r}: not enough memory for {n} elements; use smaller sizes"
            ) from None
    return tuple(out)


def example_args(module: Any, name: str) -> Optional[tuple]:
    """The module's example inputs for ``name`` (see EXAMPLE_HELP), or None."""
    short = name.split(".")[-1]
    for attr in (f"{short}_example_args", "example_args"):
        f = getattr(module, attr, None)
        if callable(f):
            try:
                value = f()
            except Exception as e:
                raise UsageError(f"{attr}() raised {type(e).__name__}: {e}") from None
            return value if isinstance(value, tuple) else (value,)
    if hasattr(module, "EXAMPLE_ARGS"):
        value = module.EXAMPLE_ARGS
        return value if isinstance(value, tuple) else (value,)
    return None


def resolve_inputs(ns: argparse.Namespace, module: Any, name: str, fn: Callable) -> tuple:
    """The inputs from --args or the module's examples, checked against fn's parameters."""
    if ns.args is not None:
        args, source = parse_args_spec(ns.args, ns.seed), "--args"
    else:
        args, source = _examples(ns, module, name), "the module's example inputs"
    import inspect

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return args
    try:
        sig.bind(*args)
    except TypeError:
        raise UsageError(
            f"{name}{sig} does not take the {len(args)} argument"
            f"{'s' if len(args) != 1 else ''} of {source}"
        ) from None
    return args


def _examples(ns: argparse.Namespace, module: Any, name: str) -> tuple:
    ex = example_args(module, name)
    if ex is None:
        short = name.split(".")[-1]
        if ns.example:
            raise UsageError(
                f"--example: the module defines none of {short}_example_args(), "
                "example_args(), EXAMPLE_ARGS"
            )
        raise UsageError(
            f"no inputs for {name}: pass --args SPEC (e.g. --args f32[3,3]) or "
            f"define {short}_example_args(), example_args() or EXAMPLE_ARGS in "
            "the module"
        )
    return ex


def _add_input_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "target", metavar="FILE.py:FUNCTION", help="the Python file and the function in it"
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--args", metavar="SPEC", help="random inputs, e.g. f32[3,3],f64[10],i64[4]")
    g.add_argument(
        "--example", action="store_true", help="use the module's example inputs (see below)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the --args arrays (default 0)")


# ---------------------------------------------------------------------------
# graphc compare


def cmd_compare(ns: argparse.Namespace) -> int:
    from ..compare import compare

    module, fn, name = load_function(ns.target)
    args = resolve_inputs(ns, module, name, fn)
    prog = _progress(not ns.json)
    prog(f"running {name} eagerly and compiled (compile, time, check numerics)...")
    try:
        report = compare(fn, *args, grads=not ns.no_grads)
    except Exception as e:  # the user's function failed (eagerly or compiled)
        raise _failed(name, e, module) from None
    print(report.to_json() if ns.json else report)
    return 0


# ---------------------------------------------------------------------------
# graphc ir


def cmd_ir(ns: argparse.Namespace) -> int:
    from ...api import compile as graphc_compile

    module, fn, name = load_function(ns.target)
    args = resolve_inputs(ns, module, name, fn)
    cf = graphc_compile(fn)
    prog = _progress(True)
    prog(f"compiling {name}...")
    try:
        entry = cf._entry_for(args)
        if ns.stage in ("traced", "grad", "optimized"):
            text = cf.ir(*args, stage=ns.stage)
            graph = entry.stages[ns.stage]
        else:
            graph = entry.stages["optimized"]
            if ns.stage == "llvm":
                text = cf.llvm_ir(*args, optimized=ns.llvm_optimized)
            elif ns.stage == "asm":
                text = cf.asm(*args)
            else:
                text = cf.plan(*args)
    except Exception as e:
        raise _failed(name, e, module) from None
    if ns.dot:
        _write_dot(graph.to_dot(), ns.dot)
    print(text.rstrip("\n"))
    return 0


def _write_dot(dot: str, path: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(dot if dot.endswith("\n") else dot + "\n")
    except OSError as e:
        raise UsageError(f"cannot write {path!r}: {e.strerror}") from None
    exe = shutil.which("dot")
    if exe is None:
        print(
            f"wrote {path} (no SVG: the Graphviz 'dot' program is not installed; with it, "
            f"run: dot -Tsvg {path} -o {os.path.splitext(path)[0]}.svg)",
            file=sys.stderr,
        )
        return
    svg = os.path.splitext(path)[0] + ".svg"
    r = subprocess.run([exe, "-Tsvg", path, "-o", svg], capture_output=True, text=True)
    if r.returncode:
        print(f"wrote {path}; Graphviz failed to render it: {r.stderr.strip()}", file=sys.stderr)
    else:
        print(f"wrote {path} and {svg}", file=sys.stderr)


# ---------------------------------------------------------------------------
# graphc bench


def cmd_bench(ns: argparse.Namespace) -> int:
    import inspect

    try:
        from .. import bench
    except ImportError as e:
        raise CompileFailed(f"graphc.tools.bench is not available: {e}") from None
    if ns.threads is not None and ns.threads < 1:
        raise UsageError(f"--threads must be a positive integer, got {ns.threads}")
    if ns.blas_threads is not None and ns.blas_threads < 1:
        raise UsageError(f"--blas-threads must be a positive integer, got {ns.blas_threads}")
    want = None if ns.blas_threads is None else str(ns.blas_threads)
    if (
        want is not None
        and os.environ.get("OPENBLAS_NUM_THREADS") != want
        and not os.environ.get("GRAPHC_BENCH_CHILD")
    ):
        # numpy's OpenBLAS reads its thread count when numpy loads: run the benchmark in a
        # child process where numpy's pool (and PyTorch's) gets that count
        args = [sys.executable, "-m", "graphc", "bench", "--blas-threads", want]
        args += ["--json"] if ns.json else []
        args += ["--quick"] if ns.quick else []
        args += ["--threads", str(ns.threads)] if ns.threads is not None else []
        args += ["--only", *ns.only] if ns.only else []
        env = dict(os.environ, OPENBLAS_NUM_THREADS=want, GRAPHC_BENCH_CHILD="1")
        return subprocess.call(args, env=env)
    params = inspect.signature(bench.run).parameters
    kwargs: dict = {"quick": ns.quick}
    if ns.only:
        kwargs["only"] = [w.upper() for w in ns.only]
    if ns.threads is not None:
        if "threads" in params:
            kwargs["threads"] = ns.threads
        else:
            from ...runtime import parallel

            parallel.set_num_threads(ns.threads)
    prog = _progress(True)
    if "progress" in params and sys.stderr.isatty():
        kwargs["progress"] = prog
    results = bench.run(**kwargs)
    if ns.json:
        print(json.dumps(results, indent=1, default=str))
    else:
        print(bench.format_tables(results))
    return 0


# ---------------------------------------------------------------------------
# the parser


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="graphc",
        description="graphc: one Tensor API, run eagerly or compiled. Start with 'graphc demo'.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run 'graphc COMMAND --help' for the options of each command.",
    )
    from ..._version import __version__

    p.add_argument("--version", action="version", version=f"graphc {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    d = sub.add_parser(
        "demo",
        help="train the seeds' MLP eagerly and compiled, side by side",
        description="Train the seeds' two-layer MLP (seed tutorial 003: N, D_in, "
        "H, D_out = 64, 1000, 100, 10; lr 1e-6) eagerly and compiled from the "
        "same initial weights; print the losses in two columns, the final "
        "agreement of the weights, the time per step of each and the speedup, "
        "then graphc.compare on the step's loss and the optimized IR of the "
        "compiled step.",
    )
    d.add_argument("--steps", type=int, default=500, help="training steps (default 500)")
    d.add_argument(
        "--quiet", action="store_true", help="print only the summary (agreement, times, speedup)"
    )
    d.set_defaults(func=cmd_demo)

    c = sub.add_parser(
        "compare",
        help="run a function eagerly and compiled and compare them",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(
            "Run FUNCTION from FILE.py eagerly (eager autograd) and compiled "
            "(graphc.compile) on the same inputs and print time per call, "
            "compile time and break-even, peak memory, graph sizes and the "
            "numerical agreement of every output and gradient with a float64 "
            "run (graphc.compare).  With gradients (the default) FUNCTION's "
            "first output must be a floating-point scalar; a function that "
            "calls backward() itself is compared as a training step.",
            79,
        ),
        epilog=EXAMPLE_HELP,
    )
    _add_input_options(c)
    c.add_argument(
        "--no-grads", action="store_true", help="compare values only (no backward / value_and_grad)"
    )
    c.add_argument("--json", action="store_true", help="print the report as JSON")
    c.set_defaults(func=cmd_compare)

    i = sub.add_parser(
        "ir",
        help="print a compilation stage of a function",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(
            "Compile FUNCTION from FILE.py for the given inputs and print one "
            "stage: traced (the graph as recorded), grad (with its gradient "
            "nodes), optimized (after the passes), llvm (LLVM IR), asm (host "
            "assembly), plan (native kernels and arena).",
            79,
        ),
        epilog=EXAMPLE_HELP,
    )
    _add_input_options(i)
    i.add_argument(
        "--stage",
        choices=STAGES,
        default="optimized",
        help="which stage to print (default optimized)",
    )
    i.add_argument(
        "--llvm-optimized",
        action="store_true",
        help="with --stage llvm: the LLVM IR after LLVM's own optimizer",
    )
    i.add_argument(
        "--dot",
        metavar="FILE",
        help="also write Graphviz DOT of the graph stage to FILE (llvm/asm/plan: "
        "the optimized graph); an SVG next to it if Graphviz 'dot' is installed",
    )
    i.set_defaults(func=cmd_ir)

    from .export import add_parser as _add_export

    _add_export(sub, _add_input_options, EXAMPLE_HELP, (load_function, resolve_inputs, _failed))

    b = sub.add_parser(
        "bench",
        help="run the benchmark workloads W0-W5 (docs/benchmarks.md)",
        description="Benchmarks W0-W5: numpy hand-written vs eager vs "
        "compiled, as tables of medians and ratios measured in the same run.",
    )
    b.add_argument("--json", action="store_true", help="print JSON instead of tables")
    b.add_argument("--quick", action="store_true", help="fewer repeats")
    b.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="threads for graphc's parallel loops and matrix products",
    )
    b.add_argument("--only", nargs="+", metavar="ID", help="only these workloads, e.g. W1 W3")
    b.add_argument(
        "--blas-threads",
        type=int,
        default=None,
        metavar="N",
        help="threads of numpy's (and PyTorch's) BLAS pool, e.g. 1 to compare "
        "with the reference figures; default: the environment as it is",
    )
    b.set_defaults(func=cmd_bench)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if not getattr(ns, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return ns.func(ns)
    except UsageError as e:
        print(f"graphc {ns.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except CompileFailed as e:
        print(f"graphc {ns.command}: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("graphc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `graphc ir ... | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
