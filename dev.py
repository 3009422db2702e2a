#!/usr/bin/env python3
"""Set up a private virtualenv (.venv) and run the demo, the tests or the benchmarks.

Needs only a Python >= 3.10 with the standard library: everything else is
installed into .venv from the package index on first use.

    python3 dev.py demo      # eager vs compiled on the seeds' MLP
    python3 dev.py test      # the test suite on every CPU (extra args go to pytest)
    python3 dev.py bench     # the benchmark tables
    python3 dev.py docs      # regenerate docs/ir.md's op table and docs/ops.md from the code
    python3 dev.py lint      # ruff (lint and format check) and mypy, as CI runs them

`test` runs pytest with pytest-xdist, one worker process per CPU this process may use
(`-n logical --dist worksteal`): about half the wall time of one process on two cores.
Choosing the workers yourself turns that off: `-n 0` (or `-p no:xdist`) runs the tests
in one process, `-n 3` runs three workers; `--pdb` runs in one process.  See
docs/testing.md ("Running in parallel").
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"


def _stamp() -> str:
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()


def ensure_venv() -> None:
    """Create .venv and install the project (editable) with its test extra, once."""
    marker = VENV / ".installed"
    if marker.exists() and marker.read_text() == _stamp():
        return
    if not PY.exists():
        print("dev.py: creating .venv", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("dev.py: installing the project and its dependencies into .venv", flush=True)
    subprocess.check_call([str(PY), "-m", "pip", "install", "-q", "--upgrade", "pip"])
    subprocess.check_call([str(PY), "-m", "pip", "install", "-q", "-e", f"{ROOT}[test]"])
    marker.write_text(_stamp())


# the parallel run `dev.py test` asks for unless the arguments choose the workers
PARALLEL = ["-n", "logical", "--dist", "worksteal"]


def pytest_args(rest: list[str]) -> list[str]:
    """pytest's arguments for ``dev.py test REST``: ``PARALLEL`` first, unless REST (or
    PYTEST_ADDOPTS) chooses the workers itself (``-n N``, ``--numprocesses``) or turns
    pytest-xdist off (``-p no:xdist``); REST as given after it."""
    import shlex
    given = [*shlex.split(os.environ.get("PYTEST_ADDOPTS", "")), *rest]
    for i, a in enumerate(given):
        if a.startswith("--numprocesses") or (a.startswith("-n") and not a.startswith("--")):
            return rest
        plugin = a[2:] if a.startswith("-p") and len(a) > 2 else (
            given[i + 1] if a == "-p" and i + 1 < len(given) else "")
        if plugin.strip() == "no:xdist":
            return rest
    return [*PARALLEL, *rest]


OP_TABLE = ("<!-- op-table: begin -->\n", "<!-- op-table: end -->")
OPS_PAGE = ("<!-- ops: begin -->\n", "<!-- ops: end -->")


def write_op_table() -> int:
    """Rewrite the generated op table of docs/ir.md and the catalogue docs/ops.md."""
    table = subprocess.run([str(PY), "-c", "import eager; from eager.ops.registry import "
                            "op_table; print(op_table(), end='')"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout
    doc = ROOT / "docs" / "ir.md"
    text = doc.read_text(encoding="utf-8")
    begin, end = text.index(OP_TABLE[0]) + len(OP_TABLE[0]), text.index(OP_TABLE[1])
    doc.write_text(text[:begin] + table + text[end:], encoding="utf-8")
    print(f"dev.py: wrote the op table of {doc.relative_to(ROOT)}")
    page = subprocess.run([str(PY), "-c", "from graphc.tools.opdocs import ops_page; "
                           "print(ops_page(), end='')"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    doc = ROOT / "docs" / "ops.md"
    text = doc.read_text(encoding="utf-8")
    begin, end = text.index(OPS_PAGE[0]) + len(OPS_PAGE[0]), text.index(OPS_PAGE[1])
    doc.write_text(text[:begin] + page + text[end:], encoding="utf-8")
    print(f"dev.py: wrote the catalogue of {doc.relative_to(ROOT)}")
    return 0


def lint() -> int:
    """ruff's lint rules on all Python files, ruff's format check on the packages, mypy on
    the packages (settings in pyproject.toml); stops at the first that fails."""
    steps = [[str(BIN / "ruff"), "check", "eager", "graphc", "tests", "examples", "dev.py"],
             [str(BIN / "ruff"), "format", "--check", "eager", "graphc"],
             [str(BIN / "mypy")]]
    for cmd in steps:
        print("dev.py lint:", " ".join(Path(cmd[0]).name if i == 0 else c
                                       for i, c in enumerate(cmd)), flush=True)
        rc = subprocess.call(cmd, cwd=ROOT)
        if rc:
            return rc
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    cmd, rest = argv[0], argv[1:]
    ensure_venv()
    if cmd == "demo":
        # the user's environment as it is: graphc runs its loops and products on one
        # pool of its own, so no thread variable is needed for it to be fast
        return subprocess.call([str(BIN / "graphc"), "demo", *rest], cwd=ROOT)
    if cmd == "test":
        return subprocess.call([str(PY), "-m", "pytest", *pytest_args(rest)], cwd=ROOT)
    if cmd == "bench":
        return subprocess.call([str(BIN / "graphc"), "bench", *rest], cwd=ROOT)
    if cmd == "docs":
        return write_op_table()
    if cmd == "lint":
        return lint()
    if cmd == "setup":
        return 0
    print(f"dev.py: unknown command {cmd!r}; use demo, test, bench, lint, docs or setup",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
