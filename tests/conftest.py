"""Test-session setup.

BLAS thread pools: numpy and graphc each load an OpenBLAS; on a small shared
machine (CI has 2 cores) two multi-threaded pools oversubscribe the cores and
a 64x1000x100 product can take 50x longer.  Tests pin BLAS to one thread
before numpy loads (the loop-parallel tests set their own thread counts).
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
