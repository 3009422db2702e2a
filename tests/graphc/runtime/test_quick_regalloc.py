"""Quick-tier modules are generated with LLVM's fast register allocator
(``compile_module(fast_regalloc=True)``, docs/backend.md "Tiered compilation"): cheaper
code generation, the same arithmetic.  The option is process-wide in LLVM, so graphc
sets it for each of its code generations; a full build must not inherit it."""

import numpy as np
import pytest

import eager
import graphc
from graphc.runtime import llvm_engine as jit
from graphc.runtime import native


def _exe(f):
    (entry,) = f._cache.values()
    return entry.stages["_executable"]


def _step(x, w, b, y):
    # a product on BLAS, a reassoc sum (reduction kernel), a softmax (row max, exp,
    # row sums), a ReLU mask and a mean: both kinds of functions of a quick module
    h = eager.relu(x @ w + b)
    logits = h - h.max(dim=1, keepdim=True).values
    p = logits.exp() / logits.exp().sum(dim=1, keepdim=True)
    return (p * y).sum(), h.mean(dim=0), (h * h).sum(dim=1)


rng = np.random.default_rng(21)
ARGS = (
    rng.standard_normal((67, 33)).astype(np.float32),
    rng.standard_normal((33, 19)).astype(np.float32),
    rng.standard_normal(19).astype(np.float32),
    rng.random((67, 19)).astype(np.float32),
)
F64 = tuple(a.astype(np.float64) for a in ARGS)


def _bits(out):
    return [np.asarray(o).tobytes() for o in out]


@pytest.mark.parametrize("args", [ARGS, F64], ids=["f32", "f64"])
def test_quick_code_with_fast_regalloc_gives_the_full_builds_bits(args, monkeypatch):
    f = graphc.compile(_step)
    quick = [f(*args) for _ in range(2)]
    exe = _exe(f)
    assert exe.tier == 0 and exe.jit.fast_regalloc
    assert exe.upgrade() and exe.tier == 1 and not exe.jit.fast_regalloc
    full = f(*args)
    monkeypatch.setattr(native, "TIERED", False)
    untiered = graphc.compile(_step)(*args)
    for q in quick:
        assert _bits(q) == _bits(full) == _bits(untiered)


def test_fast_regalloc_changes_only_the_register_allocation():
    # the quick build's own IR, generated both ways: other machine code, same results
    f = graphc.compile(_step)
    f(*ARGS)
    ir_text = _exe(f).jit.llvm_ir(optimized=False)
    plain = jit.compile_module(ir_text, 2, name="plain")
    fast = jit.compile_module(ir_text, 2, name="fast", fast_regalloc=True)
    again = jit.compile_module(ir_text, 2, name="again")  # the option does not stick
    assert plain.object_code() != fast.object_code()
    assert plain.object_code() == again.object_code()
    assert fast.fast_regalloc and not plain.fast_regalloc
    assert fast.asm() != plain.asm()


def test_asm_of_a_quick_module_is_regenerated_with_its_register_allocation():
    f = graphc.compile(_step)
    f(*ARGS)
    exe = _exe(f)
    assert exe.tier == 0
    asm_quick = exe.jit.asm()
    # a full build in between leaves LLVM's option at the optimized allocator
    graphc.compile(lambda x: (x * 3.0).sum())(ARGS[0])
    exe.jit._asm = None
    assert exe.jit.asm() == asm_quick


def test_the_option_is_left_as_llvm_uses_it_at_O1_to_O3_and_O0_code_is_unchanged():
    f = graphc.compile(_step)
    f(*ARGS)
    ir_text = _exe(f).jit.llvm_ir(optimized=False)
    o0 = jit.compile_module(ir_text, 0, name="o0").object_code()
    jit.compile_module(ir_text, 2, name="quick", fast_regalloc=True)
    assert jit._OPTIMIZED_REGALLOC[0] is True  # other LLVM users' -O2 code: greedy
    assert jit.compile_module(ir_text, 0, name="o0 again").object_code() == o0
    assert jit._OPTIMIZED_REGALLOC[0] is True
