"""Differential fuzzing of the native backend's memory plan and fusion (docs/backend.md).

Seeded random programs aimed at the arena plan's riskiest moves: a value stored over the
slot of an operand whose last reader is its kernel (``Schedule._reusable``), costly values
stored once and read from a register (``_materialize_shared_costly``,
``_reads_in_register``), matrix products with bias/relu epilogues and batched products
summed over the batch (``_summed_product``).  Every program's dying operand is also read
transposed, flipped, rolled, broadcast or sliced by the kernel that kills it; inputs mix
float64/float32/int32/bool, hold NaN/Inf/-0.0, are non-contiguous views, are written in
place, or are returned.  Each program runs compiled with ``poison_freed=True`` (freed
arena bytes are overwritten), compiled without it (must be the same bits), on the
interpreter backend, and in eager; and its gradient through ``graphc.grad``.

``GRAPHC_FUZZ_N`` (default 12) sets how many programs per test;
``GRAPHC_FUZZ_START`` the first seed (a failure prints its seed).
"""

from __future__ import annotations

import os
import threading
import warnings

import numpy as np
import pytest

import eager
import graphc
from graphc.backend import parallel_policy
from graphc.runtime import parallel
from tests.parity.tierdiff import same_bits

N = int(os.environ.get("GRAPHC_FUZZ_N", "12"))
START = int(os.environ.get("GRAPHC_FUZZ_START", "0"))
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e300, -1e-310])

OPS = (
    "mm", "mm_epi", "costly", "T", "flip", "roll", "rowb", "colb", "red", "where",
    "cast32", "casti", "skip", "shift", "bsum", "mask", "amax", "softmax", "bcast_costly",
    "bsum2", "bsum3", "relu_over",
)  # fmt: skip


def _leaves(out) -> list:
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _leaves(o)]
    if isinstance(out, eager.Tensor):
        return [out.detach().numpy().copy()]
    return [np.array(out, copy=True)]


class ReuseProgram:
    """A seeded random program over (n, n) values: each step makes a new value from the
    current one (which often dies there) read in another layout."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        rng = self.rng = np.random.default_rng(seed)
        n = int(
            rng.choice(
                [0, 1, 2, 3, 4, 5, 7, 17, 33],
                p=[0.04, 0.08, 0.14, 0.16, 0.16, 0.14, 0.14, 0.1, 0.04],
            )
        )
        self.n = n
        dt = np.float32 if seed % 4 == 3 else np.float64
        self.dt = dt
        x = rng.standard_normal((n, n)).astype(dt)
        w = (rng.standard_normal((n, n)) * 0.5).astype(dt)
        b = rng.standard_normal(n).astype(dt)
        bat = rng.standard_normal((int(rng.integers(0, 4)), n, n)).astype(dt)
        if seed % 3 == 0 and x.size:
            flat = x.reshape(-1)
            k = max(1, x.size // 4)
            flat[rng.integers(0, x.size, k)] = rng.choice(SPECIAL, k).astype(dt)
        if seed % 5 == 1 and n:  # a non-contiguous view holding the same values
            x = np.repeat(x, 2, axis=1)[:, ::2]
        self.inputs = [x, w, b, bat]
        self.ops = [str(o) for o in rng.choice(OPS, size=int(rng.integers(3, 10)))]
        self.consts = [float(rng.choice([0.5, -1.5, 2.0, 0.25])) for _ in self.ops]
        self.skips = [int(rng.integers(0, 1 << 30)) for _ in self.ops]
        self.outs = [int(rng.integers(0, 1 << 30)) for _ in range(2)]
        self.inplace = seed % 7 == 2
        self.return_input = seed % 11 == 5

    def __call__(self, x, w, b, bat):
        hs = [x]
        h = x
        n = self.n
        for o, c, sk in zip(self.ops, self.consts, self.skips):
            if o == "mm":
                h = (h @ w) * c
            elif o == "mm_epi":
                h = (h @ w + b).relu()
            elif o == "costly":
                e = (h * c).tanh().exp()  # costly, read twice
                h = e * e.T + e
            elif o == "T":
                h = h.T * c + h
            elif o == "flip":
                h = h.flip(0) - h * c
            elif o == "roll":
                h = eager.cat([h[1:], h[:1]]) + h if n else h + 1.0
            elif o == "rowb":
                h = h[:1].expand(n, n) * h if n else h * c
            elif o == "colb":
                h = h[:, :1] + h * c if n else h + c
            elif o == "red":
                h = h - h.sum(dim=1, keepdim=True) * c
            elif o == "amax":
                h = h * 0.5 + h.amax(dim=0, keepdim=True) if n else h
            elif o == "where":
                h = eager.where(h > 0, h, hs[sk % len(hs)].T * c)
            elif o == "cast32":
                h = (h.float() * c).double() + h if h.dtype == eager.float64 else h * c
            elif o == "casti":
                h = (h.clamp(-100, 100) * 4).to(eager.int32).to(h.dtype) * 0.25 + h.T
            elif o == "mask":
                h = h * (h.T > 0) + (h < c).to(h.dtype)
            elif o == "skip":
                h = h + hs[sk % len(hs)]
            elif o == "shift":
                h = h.flip(1) * c + h.T.flip(0)
            elif o == "bsum":  # a batched product summed over its batch, then elementwise
                h = (bat @ bat.transpose(1, 2)).sum(0) * c + h
            elif o == "bsum2":  # a linear layer's weight gradient: sum_b A_b^T @ G_b
                h = ((bat * h).transpose(1, 2) @ bat).sum(0, keepdim=True)[0] + h.T
            elif o == "bsum3":
                h = (bat @ (bat * c)).sum(dim=(0,)).relu() - h
            elif o == "softmax":  # exp read by a row sum and a division: stored once
                e = (h - h.amax(dim=1, keepdim=True)).exp() if n else h.exp()
                h = e / e.sum(dim=1, keepdim=True) + e * c
            elif o == "bcast_costly":  # a costly row vector fused into a wider loop
                h = h * (1.0 - (b * c).abs() ** 1.5)[None, :] + (b * c).erf()
            else:  # "relu_over": an arena value read at its own element, then dead
                p = (h @ w) * c
                h = eager.where(p > 0, p, p * 0.1).exp() + p
            hs.append(h)
        outs = [h, h.sum(), hs[self.outs[0] % len(hs)], hs[self.outs[1] % len(hs)] * 1.0]
        if self.inplace:
            x.add_(h)
            outs.append(x)
        if self.return_input:
            outs.append(w)
        return tuple(outs)

    def loss(self, x, w, b, bat):
        out = self(x, w, b, bat)
        return (out[0] * out[3]).sum() + out[1]


def _run_eager(prog, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _leaves(prog(*[eager.tensor(a.copy()) for a in args]))


def _run(f, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _leaves(f(*[a.copy() for a in args]))


def _scale(outs) -> float:
    """The largest finite magnitude among float outputs (cancellation's absolute floor)."""
    m = 1.0
    for o in outs:
        o = np.asarray(o)
        if o.dtype.kind == "f" and o.size:
            fin = np.abs(o[np.isfinite(o)])
            if fin.size:
                m = max(m, float(fin.max()))
    return m


def _close(got, want, rtol, floor: float = 0.0) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if got.dtype.kind != "f":
        return np.array_equal(got, want)
    fin = np.isfinite(want)
    if not np.array_equal(np.isnan(got), np.isnan(want)):
        return False
    if not np.array_equal(got[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)]):
        return False
    g, wv = got[fin].astype(np.float64), want[fin].astype(np.float64)
    scale = float(np.max(np.abs(wv))) if wv.size else 0.0
    return bool(np.all(np.abs(g - wv) <= rtol * np.abs(wv) + rtol * max(scale, floor) + 1e-300))


def check_program(seed: int) -> None:
    """One program: poisoned native == plain native bit for bit, == interpreter and eager
    within reassociation tolerance (NaN/Inf patterns equal)."""
    prog = ReuseProgram(seed)
    args = prog.inputs
    rtol = 1e-4 if prog.dt == np.float32 else 1e-9
    poisoned = _run(graphc.compile(prog, poison_freed=True), args)
    plain = _run(graphc.compile(prog), args)
    interp = _run(graphc.compile(prog, backend="interpreter"), args)
    eag = _run_eager(prog, args)
    assert len(poisoned) == len(plain) == len(interp) == len(eag)
    floor = _scale(interp) * 4 * max(prog.n, 1)
    for i, (p, q, r, e) in enumerate(zip(poisoned, plain, interp, eag)):
        assert same_bits(p, q), f"seed {seed} ops {prog.ops}: output {i} poisoned != plain"
        assert _close(p, r, rtol, floor), f"seed {seed} ops {prog.ops}: output {i} native != interp"
        assert _close(p, e, rtol, floor), f"seed {seed} ops {prog.ops}: output {i} native != eager"


def check_grad(seed: int) -> None:
    """The program's gradient wrt (x, w, b): poisoned native vs the interpreter."""
    prog = ReuseProgram(seed)
    args = prog.inputs
    rtol = 1e-3 if prog.dt == np.float32 else 1e-8
    prog.inplace = False
    gf = graphc.grad(prog.loss, argnums=(0, 1, 2))
    got = _run(graphc.compile(gf, poison_freed=True), args)
    want = _run(graphc.compile(gf, backend="interpreter"), args)
    floor = _scale(want) * 4 * max(prog.n, 1)
    for i, (p, r) in enumerate(zip(got, want)):
        assert _close(p, r, rtol, floor), f"seed {seed} ops {prog.ops}: grad {i} native != interp"


def test_random_reuse_programs_poisoned_match_interpreter_and_eager():
    for seed in range(START, START + N):
        check_program(seed)


def test_random_reuse_programs_gradients():
    for seed in range(START, START + N // 2):
        check_grad(seed)


@pytest.fixture
def small_parallel(monkeypatch):
    """Split even small loops and products across threads; restores the thread count."""
    from graphc.backend import abi

    before = parallel.get_num_threads()
    monkeypatch.setattr(parallel_policy, "PARALLEL_MIN", 4)
    monkeypatch.setattr(parallel_policy, "GEMM_PARALLEL_MIN", 8)
    monkeypatch.setattr(abi, "PARALLEL_MIN", 4)
    yield parallel.set_num_threads
    parallel.set_num_threads(before)


def test_random_reuse_programs_split_across_threads(small_parallel):
    # seed 7 is the program that found the epilogue bug (2 threads)
    for t, seeds in ((2, [7] + list(range(START, START + N // 4))), (3, [7])):
        small_parallel(t)
        for seed in seeds:
            check_program(seed)


def _epilogue_prog(x, w, b, y):
    h = (x @ w + b).relu()
    g = (h @ w.T - b).tanh() * h
    return g, (y @ w + b).relu().sum(dim=0), h.T @ g


def test_matmul_epilogues_at_thread_counts_1_2_3(small_parallel):
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 5, 17):
        args = [rng.standard_normal((n, n)) for _ in range(2)] + [
            rng.standard_normal(n),
            rng.standard_normal((n, n))[:, ::-1],
        ]
        want = _run(graphc.compile(_epilogue_prog, backend="interpreter"), args)
        outs = []
        for t in (1, 2, 3):
            small_parallel(t)
            got = _run(graphc.compile(_epilogue_prog, poison_freed=True), args)
            for p, r in zip(got, want):
                assert _close(p, r, 1e-10), (n, t)
            outs.append(got)
        for o in outs[1:]:  # elementwise epilogues: the same bits whatever the split
            assert same_bits(o[0], outs[0][0]) or n > 3


def test_random_programs_from_two_python_threads():
    progs = [ReuseProgram(s) for s in range(START, START + 6)]
    fns = [graphc.compile(p, poison_freed=True) for p in progs]
    want = [_run(graphc.compile(p, backend="interpreter"), p.inputs) for p in progs]
    errors: list = []

    def worker(k):
        try:
            for _ in range(3):
                for i in range(k, len(progs) + k):
                    i %= len(progs)
                    got = _run(fns[i], progs[i].inputs)
                    rtol = 1e-4 if progs[i].dt == np.float32 else 1e-9
                    for p, r in zip(got, want[i]):
                        if not _close(p, r, rtol):
                            errors.append((progs[i].seed, k))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    ts = [threading.Thread(target=worker, args=(k,)) for k in (0, 3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


def _kept_then_written(x, y):
    a = x * 1.0  # the optimizer makes this output the input itself
    x.add_(y)
    return a, x.T


@pytest.mark.parametrize("backend", ["native", "interpreter"])
def test_an_output_reduced_to_an_input_is_not_changed_by_its_in_place_write(backend):
    # found by the fuzzer (seeds 44, 72): the interpreter returned the argument's own
    # array for ``x * 1.0``, which the write-back of ``x.add_`` then changed
    f = graphc.compile(_kept_then_written, backend=backend)
    x = np.ones(3)
    a, xt = f(x, np.full(3, 2.0))
    np.testing.assert_array_equal(a, np.ones(3))
    np.testing.assert_array_equal(x, np.full(3, 3.0))
    xe = np.ones(3)
    for out in graphc.compile(lambda v: (v * 1.0, v, v.T), backend=backend)(xe):
        assert not np.may_share_memory(out, xe)


def _summed_then_costly(h, bat):
    s = ((bat * h).transpose(1, 2) @ bat).sum(0, keepdim=True)[0] + h.T
    e = (s * 2.0).tanh().exp()
    return e * e.T + e


def test_an_epilogue_never_stores_over_an_operand_the_product_still_reads(small_parallel):
    # found by the fuzzer (seed 7, 2 threads): the loop after a product ran inside the
    # product's thread shares (parallel_policy.epilogues) and stored its value into the
    # arena slot of the product's operand ``bat * h`` (dead after the product, so the
    # plan shared the slot) while the other thread's share was still reading it
    rng = np.random.default_rng(0)
    h, bat = rng.standard_normal((4, 4)), rng.standard_normal((2, 4, 4))
    want = graphc.compile(_summed_then_costly, backend="interpreter")(h, bat)
    for t in (1, 2, 3):
        small_parallel(t)
        for poison in (False, True):
            cf = graphc.compile(_summed_then_costly, poison_freed=poison)
            np.testing.assert_allclose(cf(h, bat), want, rtol=1e-12, atol=1e-12)
        plan = cf._native((h, bat)).plan
        # the plan does share the slot; the loop then runs after the product, not inside
        assert [k.kind for k in plan.kernels[1:3]] == ["matmul", "loop"]
        assert parallel_policy._overwrites_product_memory(plan, *plan.kernels[1:3])
        assert 1 not in parallel_policy.epilogues(plan)
