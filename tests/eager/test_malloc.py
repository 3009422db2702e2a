"""eager/_malloc.py: glibc's malloc thresholds set once at import (no page faults per
training step), skipped when the user chose their own or opted out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import eager
import eager._malloc as MA

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, **env) -> str:
    e = {k: v for k, v in os.environ.items() if k not in MA._USER_SETTINGS + ("EAGER_NO_MALLOPT",)}
    e.update(env, PYTHONPATH=str(ROOT))
    r = subprocess.run(
        [sys.executable, "-c", code], env=e, capture_output=True, text=True, cwd=ROOT
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_tune_is_idempotent_and_returns_its_first_answer():
    first = MA.tune()
    assert MA.tune() is first
    assert isinstance(first, bool)


glibc = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION")),
    reason="glibc only",
)


@glibc
def test_import_sets_thresholds_unless_opted_out_or_user_set():
    code = "import eager, eager._malloc as M; print(M._state['done'])"
    assert _run(code) == "True"
    assert _run(code, EAGER_NO_MALLOPT="1") == "False"
    assert _run(code, MALLOC_TRIM_THRESHOLD_="131072") == "False"
    assert _run(code, EAGER_NO_MALLOPT="0") == "True"


@glibc
def test_no_page_faults_per_step_for_large_temporaries():
    """The same 2 MB arrays made and freed each step fault their pages in only once."""
    code = (
        "import resource, numpy as np, eager\n"
        "x = eager.randn(512, 1024)\n"
        "def step():\n"
        "    y = (x * 2.0).exp() + 1.0\n"
        "    return float(y.sum())\n"
        "for _ in range(3): step()\n"
        "f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "for _ in range(10): step()\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) // 10)\n"
    )
    assert int(_run(code)) < 50
    assert eager.tensor([1.0]).exp().item() > 2  # (eager works in this process too)
