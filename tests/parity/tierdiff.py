"""Tier differential checking: the quick build (tier 0) and the fully optimized build
(tier 1) of one compiled function must give the same bits (docs/backend.md, "Tiered
compilation").  :func:`check_tiers` runs a fuzzer program (tests/parity/fuzzgen.py)
compiled, calls it once on quick code, then until it is upgraded, and compares every
call's outputs (and its value_and_grad's) bit for bit with the first, with an untiered
build, and with the interpreter (at the fuzzer's tolerances).

Run a bigger campaign with ``python -m tests.parity.tierdiff N [START]``.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np

import eager
import graphc
from graphc.runtime import native
from tests.parity import fuzzgen

# more special values than the fuzzer's: float32 subnormals, signed zeros, huge/tiny
SPECIAL32 = np.array(
    [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-45, 1e-38, 3e38, -3e38, 88.8, -104.0]
)
SPECIAL64 = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 5e-324, -2e-310, 1e308, 709.9, -745.2])


def same_bits(got, want) -> bool:
    """Bit equality, with any NaN equal to any NaN (the payload is not specified) and
    the sign of zeros checked."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if got.dtype.kind != "f":
        return np.array_equal(got, want)
    if not np.array_equal(got, want, equal_nan=True):
        return False
    return np.array_equal(np.signbit(got) | np.isnan(got), np.signbit(want) | np.isnan(want))


def _leaves(out) -> list:
    if isinstance(out, dict):
        return [x for k in sorted(out) for x in _leaves(out[k])]
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _leaves(o)]
    return [np.asarray(out.detach().numpy() if isinstance(out, eager.Tensor) else out)]


def executables(f) -> list:
    """The native executables of every signature compiled function ``f`` has cached."""
    return [e.stages["_executable"] for e in f._cache.values() if "_executable" in e.stages]


def variant_inputs(prog: fuzzgen.Program, seed: int) -> list:
    """The program's inputs, with more special values, (for some seeds) passed as
    non-contiguous views, or with the last input in the other float dtype."""
    rng = np.random.default_rng(seed)
    out = []
    for a in prog.inputs:
        a = a.copy()
        if a.size and seed % 3 == 0:
            sp = SPECIAL32 if a.dtype == np.float32 else SPECIAL64
            flat = a.reshape(-1)
            k = max(1, a.size // 3)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                flat[rng.integers(0, a.size, k)] = rng.choice(sp, k).astype(a.dtype)
        if seed % 4 == 1 and a.ndim:
            big = np.repeat(a, 2, axis=-1)  # a strided view holding the same values
            a = big[..., ::2]
        out.append(a)
    if seed % 5 == 2 and len(out) > 1:  # mixed dtypes: the last input in the other float
        other = np.float64 if out[-1].dtype == np.float32 else np.float32
        mixed = out[:-1] + [out[-1].astype(other)]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prog.fn()(*[eager.tensor(a.copy()) for a in mixed])
            out = mixed
        except Exception:  # noqa: BLE001 - eager refuses the mix: keep one dtype
            pass
    return out


class TierMismatch(AssertionError):
    """Two tiers (or builds) of one compiled function gave different bits."""


def _compare(a: list, b: list, what: str, prog) -> None:
    if len(a) != len(b):
        raise TierMismatch(f"{what}: {len(a)} outputs != {len(b)}\n{prog.source}")
    for i, (x, y) in enumerate(zip(a, b)):
        if not same_bits(x, y):
            raise TierMismatch(f"{what}: output {i} differs:\n{x!r}\n{y!r}\n{prog.source}")


def _tiered_run(fn, args: list, opt_level: int) -> tuple:
    """Call 1 (quick code where the graph is tiered) and every call up to and after the
    switch; returns (first outputs, list of later outputs, tiers seen at the first call)."""
    f = graphc.compile(fn, opt_level=opt_level)
    first = _leaves(f(*[a.copy() for a in args]))
    tiers = sorted(x.tier for x in executables(f))
    later = [_leaves(f(*[a.copy() for a in args])) for _ in range(native.TIER_UP_CALLS + 1)]
    for x in executables(f):  # a call-count switch must have happened; force it if not
        x.upgrade()
    later.append(_leaves(f(*[a.copy() for a in args])))
    assert all(x.tier == 1 for x in executables(f)) or not executables(f)
    return first, later, tiers


def _untiered(fn, args: list, opt_level: int) -> list:
    old = native.TIERED
    native.TIERED = False
    try:
        return _leaves(graphc.compile(fn, opt_level=opt_level)(*[a.copy() for a in args]))
    finally:
        native.TIERED = old


def check_tiers(prog: fuzzgen.Program, seed: int, grads: bool = True) -> dict:
    """Check one program: tier 0 == tier 1 == untiered bit for bit, interpreter close.
    Returns counts {"tiered": executables that started on quick code, ...}."""
    fn = prog.fn()
    args = variant_inputs(prog, seed)
    opt = max(1, prog.opt_level)  # tiering needs opt_level >= 1
    stats = {"quick": 0, "full": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.filterwarnings("error", message=".*differ between the quick")
        try:
            first, later, tiers = _tiered_run(fn, args, opt)
        except graphc.TracerError as e:
            if "memory layout graphc does not follow" in str(e):
                return stats
            raise
        stats["quick"] += tiers.count(0)
        stats["full"] += tiers.count(1)
        for k, out in enumerate(later):
            _compare(first, out, f"call 1 vs call {k + 2} (tiers {tiers})", prog)
        _compare(first, _untiered(fn, args, opt), "tiered vs untiered", prog)
        interp = _leaves(graphc.compile(fn, backend="interpreter")(*[a.copy() for a in args]))
        p2 = fuzzgen.Program(prog.source, [np.ascontiguousarray(a) for a in args])
        for i, (g, w) in enumerate(zip(first, interp)):
            fuzzgen._assert_close(g, w, f"output {i}: native tier 0 vs interpreter", p2)
        if not grads or prog.writes:
            return stats
        floats = [i for i, o in enumerate(first) if o.dtype.kind == "f"]
        if not floats or args[0].dtype.kind != "f":
            return stats

        def loss(*xs):
            outs = fn(*xs)
            total = 0.0
            for o in floats:
                total = total + (outs[o] * 1.25).sum()
            return total

        vg = graphc.value_and_grad(loss, argnums=tuple(range(len(args))))
        try:
            first, later, tiers = _tiered_run(vg, args, opt)
        except (graphc.GraphcError, TypeError, ValueError, RuntimeError):
            return stats  # a program without a gradient (e.g. integer-only paths)
        stats["quick"] += tiers.count(0)
        stats["full"] += tiers.count(1)
        for k, out in enumerate(later):
            _compare(first, out, f"grad: call 1 vs call {k + 2} (tiers {tiers})", prog)
        _compare(first, _untiered(vg, args, opt), "grad: tiered vs untiered", prog)
    return stats


def features_for(i: int) -> frozenset:
    """Special values in half of the programs (in-place writes and big inputs skip the
    quick tier's point here: small graphs)."""
    return (frozenset(), frozenset({"special"}), frozenset({"inplace", "special"}))[i % 3]


def main(argv: list) -> int:
    """``python -m tests.parity.tierdiff N [START]``: a campaign of N programs."""
    n = int(argv[1]) if len(argv) > 1 else 200
    start = int(argv[2]) if len(argv) > 2 else 0
    total = {"quick": 0, "full": 0}
    bad = []
    for s in range(start, start + n):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            prog = fuzzgen.generate(s, features_for(s))
        try:
            st = check_tiers(prog, s)
        except TierMismatch as e:
            bad.append(s)
            print(f"seed {s}: MISMATCH {e}", flush=True)
            continue
        except Exception as e:  # noqa: BLE001 - report, keep going
            print(f"seed {s}: {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        for k in total:
            total[k] += st[k]
    print(f"programs {n} (seeds {start}..{start + n - 1}); executables {total}; mismatches {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
