"""dev.py's test command: the suite on every CPU unless the arguments choose the workers.

(The README's commands themselves run from a fresh clone in tests/test_docs.py.)"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dev():
    spec = importlib.util.spec_from_file_location("_dev_under_test", ROOT / "dev.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)        # defines functions only (main runs under __main__)
    return mod


@pytest.mark.parametrize("rest", [[], ["-q"], ["-q", "-x", "tests/eager/test_seeds.py"],
                                  ["-p", "no:cacheprovider", "-k", "not slow"],
                                  ["--dist", "loadfile"]])
def test_parallel_by_default(dev, rest, monkeypatch):
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    assert dev.pytest_args(rest) == [*dev.PARALLEL, *rest]
    # the user's later --dist wins over ours (argparse keeps the last)
    assert dev.PARALLEL[:2] == ["-n", "logical"]


@pytest.mark.parametrize("rest", [["-n", "0"], ["-n0"], ["-n", "3", "-q"], ["-nauto"],
                                  ["--numprocesses=2"], ["--numprocesses", "4"],
                                  ["-p", "no:xdist"], ["-pno:xdist"], ["-q", "-p", "no:xdist"]])
def test_the_users_choice_of_workers_wins(dev, rest, monkeypatch):
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    assert dev.pytest_args(rest) == rest


def test_workers_chosen_in_pytest_addopts(dev, monkeypatch):
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:xdist -q")
    assert dev.pytest_args(["-x"]) == ["-x"]
    monkeypatch.setenv("PYTEST_ADDOPTS", "-n 0")
    assert dev.pytest_args([]) == []


def test_test_extra_installs_pytest_xdist():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    extra = re.search(r"^test = \[(.*)\]$", text, re.M)
    assert extra and '"pytest-xdist' in extra.group(1), "dev.py test needs pytest-xdist"
    # pytest's own settings must not need xdist: `python -m pytest` works without it
    ini = text[text.index("[tool.pytest.ini_options]"):]
    ini = ini[:ini.index("\n[", 1)]
    assert "-n" not in re.findall(r"addopts = \"(.*)\"", ini)[0].split()
