"""``graphc.compare``: eager and compiled side by side on the seeds' functions.

Timings on these shared machines are noisy, so the tests check that every field
is present and sane (positive times, a break-even count or "never", node counts),
never which side is faster.  Numerics are checked for real: both sides against a
float64 eager run.
"""
from __future__ import annotations

import importlib
import json

import numpy as np
import pytest

import graphc
from graphc.tools.workloads import seed_step

compare_mod = importlib.import_module("graphc.tools.compare")   # graphc.compare is the function

FAST = dict(repeat=3, warmup=1, budget=0.02)      # keep each comparison well under a second


def seed_graph(a, w1, w2, w3, w4):
    # the seed tutorials: b = w1*a; c = w2*a; d = w3*b + w4*c; L = (10 - d).sum()
    b = w1 * a
    c = w2 * a
    d = w3 * b + w4 * c
    return (10 - d).sum()


def mlp_loss(x, y, w1, w2):
    return (x.mm(w1).clamp(min=0).mm(w2) - y).pow(2).sum()


# seed tutorial 003, the torch.autograd training step
mlp_step = seed_step


def data_dependent(x):
    if x.sum() > 0:                              # value-dependent control flow
        return (x * 2).sum()
    return x.sum()


@pytest.fixture(scope="module")
def seed_args():
    rng = np.random.default_rng(0)
    return tuple(rng.standard_normal((3, 3)) for _ in range(5))


@pytest.fixture(scope="module")
def mlp_args():
    rng = np.random.default_rng(1)
    f = np.float32
    return (rng.standard_normal((64, 1000)).astype(f), rng.standard_normal((64, 10)).astype(f),
            rng.standard_normal((1000, 100)).astype(f), rng.standard_normal((100, 10)).astype(f))


@pytest.fixture(scope="module")
def seed_report(seed_args):
    return graphc.compare(seed_graph, *seed_args, **FAST)


def assert_sane(r: graphc.ComparisonReport) -> None:
    e, c = r.eager, r.compiled
    assert e["time_per_call_s"] > 0 and e["first_call_s"] > 0
    assert c["time_per_call_s"] > 0 and c["first_call_s"] > 0 and c["compile_s"] >= 0
    assert r.speedup > 0
    be = r.break_even_calls
    assert be == "never" or (isinstance(be, int) and be >= 1)
    assert (be == "never") == (c["time_per_call_s"] >= e["time_per_call_s"])
    assert e["peak_bytes"] > 0 and c["peak_bytes"] == c["arena_bytes"] + c["output_bytes"]
    assert e["tape_nodes"] > 0
    assert c["traced_nodes"] > 0 and c["optimized_nodes"] > 0 and c["kernels"] >= 1
    assert r.compiled_error is None and r.compiled_possible
    assert r.all_agree, str(r)
    assert all(a["ok"] for a in r.agreement)
    assert r.divergence is None
    assert r.timing["repeat"] == 3 and r.timing["eager_number"] >= 1


def test_seed_graph_report_fields(seed_report):
    r = seed_report
    assert_sane(r)
    assert r.function == "seed_graph" and r.grads and r.mode == "value and gradients"
    assert r.signature == ("seed_graph(a: f64[3,3], w1: f64[3,3], w2: f64[3,3], w3: f64[3,3], "
                           "w4: f64[3,3])")
    assert r.eager["tape_nodes"] == 7            # 4 mul, add, rsub, sum
    assert r.compiled["gradient_nodes"] > 0
    assert r.compiled["traced_nodes"] > r.compiled["gradient_nodes"]
    names = [a["name"] for a in r.agreement]
    assert names == ["output", "grad a", "grad w1", "grad w2", "grad w3", "grad w4"]
    for a in r.agreement:
        assert a["type"] in ("f64[]", "f64[3,3]")
        assert a["compiled_abs"] < 1e-12 and a["compiled_rel"] < 1e-12
        assert a["eager_abs"] == 0                  # eager in f64 *is* the reference


def test_report_prints_a_table(seed_report):
    text = str(seed_report)
    for needle in ("graphc.compare: seed_graph(", "time per call", "compile time",
                   "break-even", "peak memory", "tracemalloc", "tape / traced nodes",
                   "optimized nodes", "native kernels", "grad w4", "agree within tolerance"):
        assert needle in text, needle
    assert "not possible" not in text
    assert repr(seed_report).startswith("<graphc.ComparisonReport seed_graph")


def test_to_json_round_trip(seed_report):
    d = seed_report.to_dict()
    text = seed_report.to_json()
    assert json.loads(text) == d
    again = graphc.ComparisonReport.from_json(text)
    assert again.to_dict() == d
    assert str(again) == str(seed_report)
    for key in ("eager", "compiled", "compiled_error", "speedup", "break_even_calls",
                "agreement", "divergence", "timing", "notes"):
        assert key in d


def test_mlp_loss_report(mlp_args):
    r = graphc.compare(mlp_loss, *mlp_args, argnums=(2, 3), **FAST)
    assert_sane(r)
    assert r.eager["tape_nodes"] == 6            # mm, clamp, mm, sub, pow, sum
    assert [a["name"] for a in r.agreement] == ["output", "grad w1", "grad w2"]
    assert [a["type"] for a in r.agreement] == ["f32[]", "f32[1000,100]", "f32[100,10]"]
    # float32 against float64: small but not zero, and compiled as good as eager
    for a in r.agreement:
        assert a["compiled_rel"] < 1e-4 and a["eager_rel"] < 1e-4
    # eager's peak holds at least the two gradients it returns
    assert r.eager["peak_bytes"] >= (1000 * 100 + 100 * 10) * 4
    assert r.compiled["output_bytes"] == 4 + (1000 * 100 + 100 * 10) * 4


def test_mlp_training_step_report(mlp_args):
    """A function that calls backward() itself is compared as a training step: the loss,
    the in-place updated weights and the zeroed .grad of both sides."""
    r = graphc.compare(mlp_step, *mlp_args, grads=False, argnums=(2, 3), **FAST)
    assert_sane(r)
    assert r.mode == "training step" and not r.grads
    names = [a["name"] for a in r.agreement]
    assert names == ["output", "w1 (updated)", "w1.grad", "w2 (updated)", "w2.grad"]
    assert r.compiled["cold_calls"] == 2 and r.compiled["traces"] == 2
    assert any("training step" in n for n in r.notes)
    # the caller's arrays are not touched
    rng = np.random.default_rng(1)
    assert np.array_equal(mlp_args[0], rng.standard_normal((64, 1000)).astype(np.float32))


def test_data_dependent_if_is_not_possible_compiled(seed_args):
    r = graphc.compare(data_dependent, seed_args[0], **FAST)
    assert not r.compiled_possible and r.compiled is None
    err = r.compiled_error
    assert err["type"] == "TracerBoolConversionError"
    assert err["argument"] == "x"
    assert err["line"].endswith(f"test_compare.py:{data_dependent.__code__.co_firstlineno + 1}")
    assert err["source"] == "if x.sum() > 0:                              # value-dependent " \
                            "control flow"
    assert "graphc.where" in err["fix"] and "static_argnums" in err["fix"]
    # the eager column is still there
    assert r.eager["time_per_call_s"] > 0 and r.eager["tape_nodes"] >= 1
    assert [a["name"] for a in r.agreement] == ["output", "grad x"]
    assert all(a["compiled_abs"] is None for a in r.agreement)
    assert r.speedup is None and r.break_even_calls is None and r.all_agree is None
    text = str(r)
    assert "compiled: not possible" in text and "if x.sum() > 0" in text
    assert "test_compare.py:" in text
    assert json.loads(r.to_json())["compiled"] is None


def test_values_only_and_several_outputs(seed_args):
    def two(x, w):
        return x * w, (x - w).sum()

    r = graphc.compare(two, seed_args[0], seed_args[1], grads=False, **FAST)
    assert r.mode == "value" and r.all_agree
    assert [a["name"] for a in r.agreement] == ["output[0]", "output[1]"]
    # with gradients the first output must be a scalar...
    with pytest.raises(ValueError, match="floating-point scalar"):
        graphc.compare(two, seed_args[0], seed_args[1], **FAST)

    def two_scalar_first(x, w):
        return (x - w).sum(), x * w

    # ...and then every output is still compared
    r = graphc.compare(two_scalar_first, seed_args[0], seed_args[1], **FAST)
    assert r.all_agree
    assert [a["name"] for a in r.agreement] == ["output[0]", "output[1]", "grad x", "grad w"]


def test_pytree_and_static_arguments(seed_args):
    def loss(params, x, scale):
        return ((x.mm(params["w"]) + params["b"]) * scale).tanh().sum()

    params = {"w": seed_args[0], "b": seed_args[1][0]}
    r = graphc.compare(loss, params, seed_args[2], 0.5, **FAST)
    assert r.all_agree
    assert [a["name"] for a in r.agreement] == ["output", "grad params['b']", "grad params['w']",
                                                "grad x"]
    assert "scale=0.5" in r.signature


def test_bad_arguments(seed_args):
    with pytest.raises(ValueError, match="argnums 5"):
        graphc.compare(seed_graph, *seed_args, argnums=(5,))
    with pytest.raises(TypeError, match="callable"):
        graphc.compare(3, *seed_args)


def test_divergence_is_located(seed_args, monkeypatch):
    """When compiled values differ from the reference, the report runs
    graphc.tools.debug.first_divergence on the optimized graph and says what it found."""
    real = compare_mod._split_compiled

    def corrupt(res, grads, single):
        outs, gs = real(res, grads, single)
        return [o + 1.0 for o in outs], gs

    monkeypatch.setattr(compare_mod, "_split_compiled", corrupt)
    r = graphc.compare(seed_graph, *seed_args, **FAST)
    assert not r.all_agree
    assert [a["ok"] for a in r.agreement] == [False, True, True, True, True, True]
    # native code agrees node by node with the interpreter, so no single node is blamed
    assert "no single node differs" in r.divergence
    assert "DIFFER" in str(r)
