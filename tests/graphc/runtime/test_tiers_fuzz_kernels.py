"""Tiered compilation of hand-written kernels (docs/backend.md, "Tiered compilation"):
seeded random graphs of convolutions, pooling, gathers, indexing, scatters and cumulative
sums (and their gradients) start on the quick build and switch to the optimized one at
call 2..8; every call's bits must equal the first call's and an untiered build's, also
when two Python threads call across the switch.  Inputs hold NaN/Inf/-0.0, are strided
views, size-1 or size-0.

``GRAPHC_FUZZ_N`` (default 12) sets the number of programs; ``GRAPHC_FUZZ_START`` the
first seed.
"""

from __future__ import annotations

import os
import threading
import warnings

import numpy as np

import eager
import graphc
from graphc.runtime import native
from tests.parity.tierdiff import _leaves, executables, same_bits

N = int(os.environ.get("GRAPHC_FUZZ_N", "12"))
START = int(os.environ.get("GRAPHC_FUZZ_START", "0"))
F = eager.nn.functional
KINDS = ("conv", "convT", "maxpool", "avgpool", "gather", "index", "index_put", "scatter",
         "cumsum", "embedding", "maxpool_idx", "adaptive")  # fmt: skip
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e-30])


class KernelProgram:
    """One random image-and-index program: a couple of hand-written kernels in a chain
    with elementwise glue and a sum; ``fn`` returns (out, out.sum())."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.seed = seed
        self.dt = np.float32 if seed % 2 else np.float64
        b = int(rng.choice([0, 1, 2])) if seed % 7 == 3 else int(rng.choice([1, 2]))
        c, h, w = int(rng.integers(1, 4)), int(rng.integers(2, 9)), int(rng.integers(2, 9))
        x = rng.standard_normal((b, c, h, w * 2 if seed % 3 == 1 else w)).astype(self.dt)
        if seed % 3 == 1:
            x = x[..., ::2]  # a strided view
        if seed % 4 == 2 and x.size:
            flat = x.reshape(-1).copy()
            k = max(1, flat.size // 5)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                flat[rng.integers(0, flat.size, k)] = rng.choice(SPECIAL, k).astype(self.dt)
            x = flat.reshape(x.shape)
        k = rng.standard_normal((int(rng.integers(1, 4)), c, 2, 2)).astype(self.dt)
        idx = rng.integers(0, max(h, 1), size=(int(rng.integers(1, 6)),))
        self.inputs = [x, k, idx]
        self.kinds = [str(s) for s in rng.choice(KINDS, size=int(rng.integers(1, 4)))]
        self.c = c

    def __call__(self, x, k, idx):
        h = x
        for kind in self.kinds:
            if kind == "conv" and h.shape[1] == k.shape[1]:
                h = F.conv2d(h, k, padding=1).tanh()
            elif kind == "convT" and h.shape[1] == k.shape[1] and min(h.shape[2:]) >= 2:
                h = F.conv2d(h, k, stride=1, padding=0, dilation=1) * 0.5
            elif kind == "maxpool" and min(h.shape[2:]) >= 2:
                h = F.max_pool2d(h, 2) + 1.0
            elif kind == "avgpool" and min(h.shape[2:]) >= 2:
                h = F.avg_pool2d(h, 2, stride=1)
            elif kind == "maxpool_idx" and min(h.shape[2:]) >= 2:
                h = F.max_pool2d(h, 2, stride=1, padding=1)
            elif kind == "adaptive":
                h = F.adaptive_avg_pool2d(h, 1) * h
            elif kind == "gather":
                t = (idx % h.shape[3]).reshape(1, 1, 1, -1).expand(*h.shape[:3], idx.shape[0])
                h = eager.gather(h, 3, t) * 2.0
            elif kind == "index":
                h = h[:, :, idx % h.shape[2]] - h.mean()
            elif kind == "index_put":
                h = h.clone()
                h[:, :, 0] = h[:, :, -1] * 3.0
            elif kind == "scatter":
                t = (idx % h.shape[3]).reshape(1, 1, 1, -1).expand(*h.shape[:3], idx.shape[0])
                src = eager.ones(*t.shape, dtype=h.dtype)
                h = h.scatter_add(3, t, src) * h
            elif kind == "embedding":
                table = h.reshape(-1, h.shape[-1])
                if table.shape[0]:
                    e = F.embedding(idx % table.shape[0], table).exp()
                    h = e.reshape(1, 1, idx.shape[0], h.shape[-1])
            else:
                h = h.cumsum(-1) * 0.25
        return h, h.sum()


def _run(f, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _leaves(f(*[a.copy() for a in args]))


def _untiered(fn, args):
    old = native.TIERED
    native.TIERED = False
    try:
        return _run(graphc.compile(fn), args)
    finally:
        native.TIERED = old


def check_kernel_program(seed: int, grad: bool = False) -> tuple:
    """Calls 1..10 (quick until the switch) equal call 1 and an untiered build bit for
    bit; returns (tiers at call 1, tiers at the end)."""
    prog = KernelProgram(seed)
    fn = prog
    if grad:
        fn = graphc.value_and_grad(lambda x, k, idx: (prog(x, k, idx)[0] ** 2).sum(), argnums=(0,))
    args = prog.inputs
    f = graphc.compile(fn)
    first = _run(f, args)
    t0 = sorted(e.tier for e in executables(f))
    for call in range(2, 11):
        got = _run(f, args)
        for i, (a, b) in enumerate(zip(first, got)):
            assert same_bits(a, b), f"seed {seed} {prog.kinds} grad={grad}: call {call} output {i}"
    ref = _untiered(fn, args)
    for i, (a, b) in enumerate(zip(first, ref)):
        assert same_bits(a, b), f"seed {seed} {prog.kinds} grad={grad}: untiered output {i}"
    return t0, sorted(e.tier for e in executables(f))


def test_random_kernel_graphs_same_bits_across_the_switch():
    quick = 0
    for seed in range(START, START + N):
        t0, t1 = check_kernel_program(seed)
        quick += t0.count(0)
        assert all(t == 1 for t in t1)
    assert quick > N // 2  # the programs do exercise the quick build


def test_random_kernel_graph_gradients_same_bits_across_the_switch():
    for seed in range(START, START + N // 3):
        check_kernel_program(seed, grad=True)


def test_two_python_threads_calling_across_the_switch():
    progs = [KernelProgram(s) for s in range(START, START + 4)]
    want = [_untiered(p, p.inputs) for p in progs]
    fns = [graphc.compile(p) for p in progs]
    errors: list = []
    barrier = threading.Barrier(2)

    def worker():
        try:
            barrier.wait()
            for _ in range(10):
                for p, f, w in zip(progs, fns, want):
                    for a, b in zip(_run(f, p.inputs), w):
                        if not same_bits(a, b):
                            errors.append((p.seed, p.kinds))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    ts = [threading.Thread(target=worker) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    assert all(e.tier == 1 for f in fns for e in executables(f))
