"""Loops LLVM's unroller leaves alone (``llvm.loop.unroll.disable``, kernel_builder): the
loop kernels and the copies of indexing/concatenation carry the metadata, hand-written
loop nests (conv, pooling) do not, identical kernels still share one function, and the
results are the numbers of the code with every loop unrollable (``UNROLL_ALL``): elementwise
results bit for bit, sums to rounding (a reduction's accumulation is ``reassoc``, and
unrolling changes the order of its partial sums)."""

import numpy as np
import pytest

import eager
import graphc
from graphc.backend import kernel_builder


def _mlp(x, w1, w2):
    h = (x @ w1).relu()
    return ((h @ w2).tanh() * 2.0).sum()


def _args(dtype=np.float64):
    rng = np.random.default_rng(3)
    return (
        rng.standard_normal((16, 8)).astype(dtype),
        rng.standard_normal((8, 32)).astype(dtype),
        rng.standard_normal((32, 4)).astype(dtype),
    )


def _same(a, b, dtype=np.float64) -> None:
    """Equal up to the summation order of a reduction."""
    tol = 1e-6 if np.dtype(dtype) == np.float32 else 1e-14
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def _ir(fn, *args, unroll_all=False, monkeypatch=None):
    monkeypatch.setattr(kernel_builder, "UNROLL_ALL", unroll_all)
    f = graphc.compile(fn, disk_cache=False)
    out = f(*args)
    return f, out, f.llvm_ir(*args, optimized=False)


def test_loop_kernels_carry_the_no_unroll_loop_id(monkeypatch):
    _, _, text = _ir(graphc.value_and_grad(_mlp, argnums=(1, 2)), *_args(), monkeypatch=monkeypatch)
    lines = text.splitlines()
    # one option node and one loop id node per module; the id's first operand is itself
    (opt,) = [ln.split(" = ")[0] for ln in lines if '!"llvm.loop.unroll.disable"' in ln]
    (loop_id,) = [ln.split(" = ")[0] for ln in lines if ln.endswith(f", {opt} }}")]
    assert f"{loop_id} = !{{ {loop_id}, {opt} }}" in lines
    latches = [ln for ln in lines if ln.strip().startswith("br label") and "!llvm.loop" in ln]
    assert latches and all(ln.endswith(f"!llvm.loop {loop_id}") for ln in latches)


def test_unroll_all_emits_no_loop_metadata(monkeypatch):
    _, _, text = _ir(
        graphc.value_and_grad(_mlp, argnums=(1, 2)),
        *_args(),
        unroll_all=True,
        monkeypatch=monkeypatch,
    )
    assert "!llvm.loop" not in text


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_same_results_as_with_every_loop_unrollable(dtype, monkeypatch):
    args = _args(dtype)
    fn = graphc.value_and_grad(_mlp, argnums=(0, 1, 2))
    _, (v0, g0), _ = _ir(fn, *args, unroll_all=True, monkeypatch=monkeypatch)
    _, (v1, g1), _ = _ir(fn, *args, monkeypatch=monkeypatch)
    _same(v0, v1, dtype)
    for a, b in zip(g0, g1):
        _same(a, b, dtype)
    # and both equal eager
    ts = [eager.tensor(a, requires_grad=True) for a in args]
    loss = _mlp(*ts)
    loss.backward()
    np.testing.assert_allclose(np.asarray(v1), loss.item(), rtol=1e-5)
    for t, g in zip(ts, g1):
        np.testing.assert_allclose(np.asarray(g), t.grad.numpy(), rtol=1e-4, atol=1e-5)


def _indexing(x):
    # slicing grad (zero + copy loops) and concatenation copies
    y = eager.cat([x[:, :3] * 2.0, x[:, 1:]], dim=1)
    return (y * y).sum()


def test_indexing_and_cat_copies_are_marked_and_correct(monkeypatch):
    x = np.random.default_rng(0).standard_normal((5, 7))
    fn = graphc.value_and_grad(_indexing)
    _, (v0, g0), _ = _ir(fn, x, unroll_all=True, monkeypatch=monkeypatch)
    f, (v1, g1), text = _ir(fn, x, monkeypatch=monkeypatch)
    assert "!llvm.loop" in text
    _same(v0, v1)
    np.testing.assert_array_equal(np.asarray(g0), np.asarray(g1))  # elementwise: exact
    t = eager.tensor(x, requires_grad=True)
    _indexing(t).backward()
    np.testing.assert_allclose(np.asarray(g1), t.grad.numpy(), rtol=1e-12)


def test_conv_loops_keep_the_unroller(monkeypatch):
    F = eager.nn.functional
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 1, 6, 6))
    w = rng.standard_normal((3, 1, 3, 3))

    def conv(x, w):
        return F.conv2d(x, w)

    _, out, text = _ir(conv, x, w, monkeypatch=monkeypatch)
    fns = text.split("\ndefine ")
    conv_fns = [s for s in fns if "_conv2d" in s.split("(")[0]]
    assert conv_fns and not any("!llvm.loop" in s for s in conv_fns)
    ref = F.conv2d(eager.tensor(x), eager.tensor(w)).numpy()
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-12)


# identical kernels still share one function with the loop id in their text:
# tests/graphc/backend/test_compile_scaling.py::test_distinct_kernel_functions_grow_slower_than_kernels
