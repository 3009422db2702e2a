#!/usr/bin/env python3
"""Set up a private virtualenv (.venv) and run the demo, the tests or the benchmarks.

Needs only a Python >= 3.10 with the standard library: everything else is
installed into .venv from the package index on first use.

    python3 dev.py demo      # eager vs compiled on the seeds' MLP
    python3 dev.py test      # the test suite (extra args go to pytest)
    python3 dev.py bench     # the benchmark tables
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
        return subprocess.call([str(PY), "-m", "pytest", *rest], cwd=ROOT)
    if cmd == "bench":
        return subprocess.call([str(BIN / "graphc"), "bench", *rest], cwd=ROOT)
    if cmd == "setup":
        return 0
    print(f"dev.py: unknown command {cmd!r}; use demo, test, bench or setup", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
