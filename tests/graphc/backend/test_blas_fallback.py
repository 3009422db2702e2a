"""Without the BLAS library, matrix products fall back to generated loops (same results)."""
import numpy as np

import graphc
from graphc.backend import blas


def test_matmul_without_blas_uses_loops(monkeypatch):
    monkeypatch.setattr(blas, "available", lambda: False)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 5, 7))
    b = rng.standard_normal((7, 3))
    f = graphc.compile(lambda a, b: (a @ b).sum(0))
    np.testing.assert_allclose(f(a, b), (a @ b).sum(0), rtol=1e-12)
    assert "graphc_cblas_dgemm" not in f.llvm_ir(a, b)
