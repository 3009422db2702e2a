"""Test-session setup.

BLAS thread pools: numpy and graphc each load an OpenBLAS; on a small shared
machine (CI has 2 cores) two multi-threaded pools oversubscribe the cores and
a 64x1000x100 product can take 50x longer.  Tests pin BLAS to one thread
before numpy loads (the loop-parallel tests set their own thread counts).
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def pytest_addoption(parser):
    group = parser.getgroup("fuzz", "differential fuzzing (tests/graphc/test_fuzz.py)")
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
