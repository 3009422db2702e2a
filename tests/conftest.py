"""Test-session setup.

numpy's BLAS pool: tests compare graphc with eager, whose products numpy's
OpenBLAS computes; one thread makes its rounding the same as graphc's at one
thread and keeps the suite steady on a small shared machine (CI has 2 cores).
graphc needs no variable (its own OpenBLAS is always single-threaded inside its
one pool); tests that compare bit for bit pin graphc's thread count themselves.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def pytest_addoption(parser):
    group = parser.getgroup("fuzz", "differential fuzzing (tests/parity/test_fuzz.py)")
    group.addoption("--fuzz", type=int, default=None, metavar="N",
                    help="number of random programs to check (default 120)")
    group.addoption("--fuzz-seed", type=int, default=0, metavar="S",
                    help="seed of the first program (default 0)")


def pytest_generate_tests(metafunc):
    if "fuzz_seed" in metafunc.fixturenames:
        n = metafunc.config.getoption("fuzz")
        start = metafunc.config.getoption("fuzz_seed")
        seeds = range(start, start + (120 if n is None else n))
        metafunc.parametrize("fuzz_seed", seeds, ids=[f"seed{s}" for s in seeds])
