"""Adversarial tests of eager's fast paths (where's bit select, the float32 erf, the
fused GELU node, the glibc malloc tuning).  Modest by default; EAGER_FUZZ_LONG=1 makes
the sweeps denser (erf: every 64th float32 bit pattern instead of every 4099th)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import eager
import eager.nn.functional as F
from eager.ops.pointwise import _erf, _erf_table

LONG = os.environ.get("EAGER_FUZZ_LONG", "") not in ("", "0")
ROOT = Path(__file__).resolve().parents[2]


# --- where: bit select -------------------------------------------------------------


def _bits_equal(a, b):
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_where_bool_with_other_bytes_than_0_1():
    """A bool array made by viewing uint8 holds bytes 2..255, which np.where takes as
    True; the bit select negated the raw byte (mask 0xFE for 2) and mixed both sides."""
    rng = np.random.default_rng(0)
    c = rng.integers(0, 4, 5000).astype(np.uint8).view(np.bool_)
    x = rng.standard_normal(5000).astype(np.float32)
    y = rng.standard_normal(5000).astype(np.float32)
    r = eager.where(eager.from_numpy(c), eager.from_numpy(x), eager.from_numpy(y))
    assert _bits_equal(r.numpy(), np.where(c, x, y))


def test_where_foreign_byte_order_gives_what_np_where_gives():
    # eager.tensor refuses a foreign-order array, as PyTorch does
    # (test_adversarial_round24.py); one can still reach an op as a plain numpy operand
    rng = np.random.default_rng(1)
    c = rng.random(5000) < 0.5
    x = rng.standard_normal(5000).astype(">f8")
    y = rng.standard_normal(5000).astype(">f8")
    with pytest.raises(ValueError, match="byte order"):
        eager.tensor(x)
    r = eager.where(eager.from_numpy(c), eager.tensor(x.astype("=f8")), y).numpy()
    w = np.where(c, x, y)
    assert r.dtype == w.dtype and np.array_equal(r, w)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_where_bits_views_broadcast_payloads(dtype):
    rng = np.random.default_rng(2)
    it = {2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(dtype).itemsize]
    raw = rng.integers(0, np.iinfo(it).max, (64, 128), dtype=it, endpoint=True)
    x = raw.view(dtype)  # every bit pattern: NaN payloads, -0.0, inf, subnormals
    y = raw[::-1].copy().view(dtype)
    c = rng.random((64, 128)) < 0.5
    cases = [
        (c, x, y),
        (c.T, x.T, y.T),  # transposed everything
        (c[:, ::2], x[:, ::2], y[:, 1::2]),  # strided views
        (c, x[:1], y),  # broadcast x
        (c, np.array(-0.0, dtype), y),  # 0-d side
        (c[:, None, :], x[:3], y[:1]),  # 3-d broadcast
        (np.broadcast_to(c[:1], (64, 128)), x, y),  # zero-stride condition
    ]
    for cc, xx, yy in cases:
        r = eager.where(eager.from_numpy(cc), eager.from_numpy(xx), eager.from_numpy(yy))
        w = np.where(cc, xx, yy)
        assert _bits_equal(r.numpy(), w)
        assert not np.shares_memory(r.numpy(), xx) and not np.shares_memory(r.numpy(), yy)


def test_where_gradients_and_mixed_dtypes():
    rng = np.random.default_rng(3)
    c = rng.random((64, 128)) < 0.5
    x = eager.tensor(rng.standard_normal((64, 128)), requires_grad=True)
    y = eager.tensor(rng.standard_normal((64, 128)).astype(np.float32), requires_grad=True)
    r = eager.where(eager.from_numpy(c), x, y)
    assert r.dtype == eager.float64
    r.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), c.astype(np.float64))
    np.testing.assert_array_equal(y.grad.numpy(), (~c).astype(np.float32))


# --- erf: bit-identical to the implementation before the rounding trick -------------


def _erf_reference(x):
    """The float64 evaluation as it was before the 2**52 rounding (np.rint + astype)."""
    cols = _erf_table()
    shape = x.shape
    x = x.reshape(-1)
    with np.errstate(all="ignore"):
        ax = np.abs(x)
        np.minimum(ax, 6.0, out=ax)
        nan = np.isnan(ax)
        ax[nan] = 0.0
        j = np.rint(ax * 64).astype(np.intp)
        h = j * (-1.0 / 64)
        h += ax
        out = cols[6].take(j)
        for c in cols[5::-1]:
            out *= h
            out += c.take(j)
        np.copysign(out, x, out=out)
        out[nan] = np.nan
    return out.reshape(shape)


def _check_erf_bits(x):
    got = _erf(x)
    want = _erf_reference(x.astype(np.float64)).astype(x.dtype)
    assert got.dtype == x.dtype
    it = {2: np.uint16, 4: np.uint32}[x.dtype.itemsize]
    bad = got.reshape(-1).view(it) != want.reshape(-1).view(it)
    assert not bad.any(), x.reshape(-1)[bad][:10]


def test_erf_float32_edges_bit_identical():
    f = np.finfo(np.float32)
    edges = [0.0, -0.0, f.tiny, -f.tiny, f.smallest_subnormal, f.max, -f.max, np.inf,
             -np.inf, np.nan, -np.nan, 6.0, -6.0, 5.9999995, 6.0000005]  # fmt: skip
    # the nodes j/64 and the half-way points between them (rounding ties), +- 1 ulp
    k = np.arange(0, 6 * 64 * 2 + 1) / 128.0
    base = np.concatenate([np.array(edges), k, -k]).astype(np.float32)
    near = np.concatenate([base, np.nextafter(base, np.float32(np.inf)),
                           np.nextafter(base, np.float32(-np.inf))])  # fmt: skip
    payloads = np.array([0x7FC00001, 0xFFC12345, 0x7F800001, 0xFFFFFFFF], np.uint32)
    _check_erf_bits(np.concatenate([near, payloads.view(np.float32)]))
    _check_erf_bits(np.array(0.25, np.float32))  # 0-d
    _check_erf_bits(np.zeros((0, 3), np.float32))  # size-0


def test_erf_float32_dense_sweep_bit_identical():
    step = 64 if LONG else 4099
    for start in range(0, 2**32, 2**26):
        bits = np.arange(start, min(start + 2**26, 2**32), step, dtype=np.uint64)
        _check_erf_bits(bits.astype(np.uint32).view(np.float32))


def test_erf_float16_all_values_bit_identical():
    _check_erf_bits(np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16))


def test_erf_non_contiguous_and_shape():
    x = np.linspace(-7, 7, 600, dtype=np.float32).reshape(20, 30)[:, ::3]
    t = eager.from_numpy(x).erf()
    assert t.shape == (20, 10)
    np.testing.assert_array_equal(t.numpy(), np.vectorize(math.erf)(x).astype(np.float32))


# --- GELU: the fused node against PyTorch -------------------------------------------

SPECIAL = [0.0, -0.0, 1e-30, -1e-30, 1.0, -1.0, 3.0, -3.0, 6.0, -6.0, 10.0, -10.0, 40.0,
           -40.0, np.inf, -np.inf, np.nan]  # fmt: skip


def _gelu_inputs(dtype):
    rng = np.random.default_rng(4)
    return {
        "rand": rng.standard_normal((7, 5)).astype(dtype) * 4,
        "special": np.array(SPECIAL, dtype),
        "0d": np.array(0.7, dtype),
        "size0": np.zeros((0, 3), dtype),
        "size1": np.array([[-0.3]], dtype),
    }


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_fused_vs_composite(dtype):
    """The fused node's values equal the composite's bit for bit (float32: with the erf
    op's evaluation, ``FAST_GELU`` off; with it on, within 2.4e-7 + 2.4e-7 absolute);
    its gradient agrees with the composite's (which is differentiated op by op)."""
    import eager.nn._fn_pointwise as FP

    for fast in (False, True) if dtype == np.float32 else (True,):
        FP.FAST_GELU = fast
        try:
            _gelu_vs_composite(dtype, fast)
        finally:
            FP.FAST_GELU = True


def _gelu_vs_composite(dtype, fast):
    from eager.nn._fn_pointwise import _gelu_composite

    tol = 1e-6 if dtype == np.float32 else 1e-13
    for name, xn in _gelu_inputs(dtype).items():
        x = eager.tensor(xn, requires_grad=True)
        x2 = eager.tensor(xn, requires_grad=True)
        y, y2 = F.gelu(x), _gelu_composite(x2)
        assert type(y.grad_fn).__name__ == "GeluBackward0"
        a, b = y.detach().numpy(), y2.detach().numpy()
        if dtype == np.float32 and fast:
            bound = 5e-7 + np.spacing(np.abs(b)).astype(np.float64)  # (both within 2.4e-7)
            with np.errstate(all="ignore"):
                ok = (np.abs(a.astype(np.float64) - b) <= bound) | _same(a, b)
            assert np.all(ok), name
        else:
            assert _bits_equal(a, b), name
        with np.errstate(all="ignore"):
            y.sum().backward()
            y2.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), x2.grad.numpy(), rtol=tol, atol=tol)


def _same(a, b):
    """Elementwise: the same value (NaN with NaN, infinities equal, zeros of either sign)."""
    return (a == b) | (np.isnan(a) & np.isnan(b))


def test_gelu_saved_input_modified_raises():
    x = eager.tensor([0.5, -1.0], requires_grad=True)
    a = x * 1.0
    y = F.gelu(a)
    a.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gelu_against_pytorch(dtype):
    torch = pytest.importorskip("torch")
    tol = 2e-6 if dtype == "float32" else 1e-13
    for name, xn in _gelu_inputs(getattr(np, dtype)).items():
        if dtype == "float32" and name == "special":
            # PyTorch 2.13's AVX512 float32 kernel computes x (1 + erf) / 2: NaN at +inf
            # (its AVX2 kernel and eager: inf; eager's special values are checked against
            # the composite in test_gelu_fused_vs_composite)
            xn = xn[xn != np.inf]
        rng = np.random.default_rng(5)
        g = rng.standard_normal(xn.shape).astype(dtype)
        x = eager.tensor(xn, requires_grad=True)
        tx = torch.tensor(xn, requires_grad=True)
        y, ty = F.gelu(x), torch.nn.functional.gelu(tx)
        np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=tol, atol=tol)
        with np.errstate(all="ignore"):
            (gx,) = eager.autograd.grad(y, x, eager.tensor(g), create_graph=True)
            (tgx,) = torch.autograd.grad(ty, tx, torch.tensor(g), create_graph=True)
            np.testing.assert_allclose(
                gx.detach().numpy(), tgx.detach().numpy(), rtol=10 * tol, atol=10 * tol
            )
            (gx1,) = eager.autograd.grad(F.gelu(x), x, eager.tensor(g))
            np.testing.assert_allclose(
                gx1.numpy(), tgx.detach().numpy(), rtol=10 * tol, atol=10 * tol
            )
            if xn.size:
                (ggx,) = eager.autograd.grad(gx.sum(), x)
                (tggx,) = torch.autograd.grad(tgx.sum(), tx)
                np.testing.assert_allclose(
                    ggx.numpy(), tggx.numpy(), rtol=100 * tol, atol=100 * tol
                )
    xn = np.linspace(-4, 4, 9)
    p, t = eager.func.jvp(F.gelu, (eager.tensor(xn),), (eager.ones(9, dtype=eager.float64),))
    tp, tt = torch.func.jvp(
        torch.nn.functional.gelu, (torch.tensor(xn),), (torch.ones(9, dtype=torch.float64),)
    )
    np.testing.assert_allclose(t.numpy(), tt.numpy(), rtol=1e-12, atol=1e-12)


# --- malloc tuning never breaks the import -------------------------------------------


def _run(code: str) -> str:
    import eager._malloc as MA

    env = {
        k: v for k, v in os.environ.items() if k not in MA._USER_SETTINGS + ("EAGER_NO_MALLOPT",)
    }
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.mark.parametrize(
    "setup",
    [
        "import sys; sys.modules['ctypes'] = None",  # a Python built without _ctypes
        "import os; os.confstr = lambda name: None",  # confstr knows no glibc version
        "import os\ndef f(name): raise ValueError('unrecognized configuration name')\nos.confstr = f",
        "import os; del os.confstr",  # no confstr at all (Windows)
        "import ctypes\nclass L:\n    def __init__(self, *a, **k): pass\nctypes.CDLL = L",  # no mallopt
        "import ctypes\ndef L(*a, **k): raise OSError('no libc')\nctypes.CDLL = L",
    ],
)
def test_malloc_tuning_skips_without_glibc_mallopt(setup):
    out = _run(
        setup
        + "\nimport eager, eager._malloc as M\nprint(M._state['done'], float(eager.ones(3).sum()))"
    )
    assert out == "False 3.0"
