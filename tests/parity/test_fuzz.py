"""Differential fuzzing: random programs, eager vs compiled vs interpreter (vs PyTorch when
it happens to be importable).  ``pytest --fuzz N --fuzz-seed S`` runs N programs from
seed S (the default run is small and seeded; see docs/testing.md)."""
from __future__ import annotations

import warnings

import numpy as np

from tests.parity import fuzzgen

try:                                    # an oracle when present, never a dependency
    import torch as _torch
    _torch.set_default_dtype(_torch.float64)
except ImportError:
    _torch = None


def features_for(i: int) -> frozenset:
    """The mix of the corpus: plain, special values, in-place writes through views (and
    aliased arguments), and now and then a program on >= 2^18 elements."""
    if i % 17 == 16:
        return frozenset({"big"})
    return (frozenset(), frozenset({"special"}), frozenset({"inplace"}),
            frozenset({"inplace", "special"}))[i % 4]


def test_every_registered_op_is_generated_or_excused():
    assert fuzzgen.missing_ops() == []
    for name, why in fuzzgen.NOT_GENERATED.items():
        assert why.strip(), name


def test_generated_programs_are_valid_and_varied():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)    # numpy on NaN/Inf inputs
        progs = [fuzzgen.generate(s, features_for(s)) for s in range(40)]
    sources = {p.source for p in progs}
    assert len(sources) == len(progs)
    assert any(p.writes for p in progs)
    assert any(0 in a.shape for p in progs for a in p.inputs)
    assert any(a.ndim == 0 for p in progs for a in p.inputs)
    assert {p.opt_level for p in progs} == {0, 1, 2, 3}
    assert {a.dtype for p in progs for a in p.inputs} == {np.dtype("float32"),
                                                          np.dtype("float64")}


def test_fuzz(fuzz_seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)    # numpy on NaN/Inf inputs
        prog = fuzzgen.generate(fuzz_seed, features_for(fuzz_seed))
        fuzzgen.check_program(prog, grads=True, second_order=fuzz_seed % 3 == 0,
                              torch=_torch)


def test_a_failure_prints_a_pasteable_test():
    prog = fuzzgen.generate(3)
    text = prog.as_test("output 0")
    ns: dict = {}
    exec(text, ns)
    ns["test_fuzz_repro"]()             # runs: the reproduction is valid Python
    assert "def test_fuzz_repro" in text and "graphc.compile(f" in text
