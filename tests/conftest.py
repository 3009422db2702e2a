"""Test-session setup.

numpy's BLAS pool: tests compare graphc with eager, whose products numpy's
OpenBLAS computes; one thread makes its rounding the same as graphc's at one
thread and keeps the suite steady on a small shared machine (CI has 2 cores).
graphc needs no variable (its own OpenBLAS is always single-threaded inside its
one pool); tests that compare bit for bit pin graphc's thread count themselves.
"""
import os
import shutil
import sys
import tempfile

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

_PYCACHE_OWNER = "GRAPHC_TESTS_PYCACHE_OWNER"


def pytest_configure(config):
    """Where bytecode writing is off (``PYTHONDONTWRITEBYTECODE``), every Python process a
    test starts (the CLI, the examples, the doc pages, clean-process checks: a few hundred
    in all) compiled eager's and graphc's sources again, about a third of a second of CPU
    each.  The session gives them one bytecode cache in a temporary directory of its own
    (``PYTHONPYCACHEPREFIX``; nothing is written into the tree) and removes it at the end.
    The first process of the session (pytest-xdist's controller) makes it; its workers and
    every subprocess inherit it.  Bytecode is what the interpreter would run anyway: no
    test checks how a module was loaded, and a user's ``PYTHONPYCACHEPREFIX`` is kept."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    prefix = tempfile.mkdtemp(prefix="graphc-tests-pycache-")
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    os.environ[_PYCACHE_OWNER] = str(os.getpid())
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    sys.pycache_prefix = prefix


def pytest_unconfigure(config):
    if os.environ.get(_PYCACHE_OWNER) == str(os.getpid()):
        prefix = os.environ.pop("PYTHONPYCACHEPREFIX", "")
        del os.environ[_PYCACHE_OWNER]
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
        sys.pycache_prefix = None
        if prefix.startswith(os.path.join(tempfile.gettempdir(), "graphc-tests-pycache-")):
            shutil.rmtree(prefix, ignore_errors=True)


def pytest_addoption(parser):
    group = parser.getgroup("fuzz", "differential fuzzing (tests/parity/test_fuzz.py)")
    group.addoption("--fuzz", type=int, default=None, metavar="N",
                    help="number of random programs to check (default 40)")
    group.addoption("--fuzz-seed", type=int, default=0, metavar="S",
                    help="seed of the first program (default 0)")


def pytest_generate_tests(metafunc):
    if "fuzz_seed" in metafunc.fixturenames:
        n = metafunc.config.getoption("fuzz")
        start = metafunc.config.getoption("fuzz_seed")
        seeds = range(start, start + (40 if n is None else n))
        metafunc.parametrize("fuzz_seed", seeds, ids=[f"seed{s}" for s in seeds])
