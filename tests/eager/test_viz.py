"""eager.viz: DOT and text renderings of the backward graph."""
from __future__ import annotations

import os
import stat
import time

import eager
import eager as torch
from eager import viz


def seed_graph():
    """Seed 001's graph: b = w1*a; c = w2*a; d = w3*b + w4*c; L = (10 - d).sum()."""
    a = torch.randn((3, 3), requires_grad=True)
    w1 = torch.randn((3, 3), requires_grad=True)
    w2 = torch.randn((3, 3), requires_grad=True)
    w3 = torch.randn((3, 3), requires_grad=True)
    w4 = torch.randn((3, 3), requires_grad=True)
    b = w1 * a
    c = w2 * a
    d = w3 * b + w4 * c
    L = (10 - d).sum()
    return L, {"a": a, "w1": w1, "w2": w2, "w3": w3, "w4": w4}


SEED_DOT = """\
digraph backward {
  node [shape=box, style=filled, fillcolor=white, fontname="Helvetica", fontsize=10];
  n0 [label="SumBackward0"];
  n1 [label="RsubBackward1"];
  n2 [label="AddBackward0"];
  n3 [label="MulBackward0"];
  n4 [label="w3\\n(3, 3)", fillcolor=lightblue];
  n5 [label="MulBackward0"];
  n6 [label="w1\\n(3, 3)", fillcolor=lightblue];
  n7 [label="a\\n(3, 3)", fillcolor=lightblue];
  n8 [label="MulBackward0"];
  n9 [label="w4\\n(3, 3)", fillcolor=lightblue];
  n10 [label="MulBackward0"];
  n11 [label="w2\\n(3, 3)", fillcolor=lightblue];
  out [label="L\\n()", fillcolor=darkolivegreen1];
  n1 -> n0;
  n2 -> n1;
  n3 -> n2;
  n8 -> n2;
  n4 -> n3;
  n5 -> n3;
  n6 -> n5;
  n7 -> n5;
  n9 -> n8;
  n10 -> n8;
  n11 -> n10;
  n7 -> n10;
  n0 -> out;
}
"""

SEED_TEXT = """\
[n0] SumBackward0
  [n1] RsubBackward1
    [n2] AddBackward0
      [n3] MulBackward0
        [n4] AccumulateGrad w3 (3, 3)
        [n5] MulBackward0
          [n6] AccumulateGrad w1 (3, 3)
          [n7] AccumulateGrad a (3, 3)
      [n8] MulBackward0
        [n9] AccumulateGrad w4 (3, 3)
        [n10] MulBackward0
          [n11] AccumulateGrad w2 (3, 3)
          [n7] AccumulateGrad a (3, 3) (see above)
"""


def test_seed_graph_dot_golden():
    L, params = seed_graph()
    assert viz.to_dot(L, dict(params, L=L)) == SEED_DOT


def test_seed_graph_dot_structure():
    L, params = seed_graph()
    dot = viz.to_dot(L, params)
    nodes = [ln for ln in dot.splitlines() if "[label=" in ln and "->" not in ln]
    edges = [ln for ln in dot.splitlines() if "->" in ln]
    # 7 grad_fn nodes + 5 distinct leaves + the output; `a` is shared, so 1 node, 2 edges
    assert len(nodes) == 13
    assert sum("MulBackward0" in n for n in nodes) == 4
    assert sum("lightblue" in n for n in nodes) == 5
    assert len(edges) == 13
    assert sum(e.startswith("  n7 ->") for e in edges) == 2
    assert 'out [label="output\\n()"' in dot         # the output is not in params here


def test_seed_graph_text_golden():
    L, params = seed_graph()
    assert viz.to_text(L, params) == SEED_TEXT


def test_unnamed_leaves_show_accumulategrad_and_shape():
    x = torch.ones(2, 3, requires_grad=True)
    y = (x * 2).mean()
    assert viz.to_text(y) == ("[n0] MeanBackward0\n"
                              "  [n1] MulBackward0\n"
                              "    [n2] AccumulateGrad (2, 3)\n")
    assert 'n2 [label="AccumulateGrad\\n(2, 3)", fillcolor=lightblue];' in viz.to_dot(y)


def test_output_is_deterministic_across_runs():
    (L1, p1), (L2, p2) = seed_graph(), seed_graph()
    assert viz.to_dot(L1, p1) == viz.to_dot(L2, p2)
    assert viz.to_text(L1, p1) == viz.to_text(L2, p2)


def test_graph_is_still_drawable_after_backward():
    L, params = seed_graph()
    L.backward()
    assert viz.to_text(L, params) == SEED_TEXT


def test_tensor_without_graph():
    t = torch.ones(2)
    assert viz.to_text(t) == "(no backward graph: the tensor does not require grad)\n"
    dot = viz.to_dot(t)
    assert "->" not in dot and 'out [label="output\\n(2)"' in dot


def test_leaf_tensor_is_its_own_graph():
    w = torch.ones(4, requires_grad=True)
    assert viz.to_text(w, {"w": w}) == "[n0] AccumulateGrad w (4)\n"
    assert "n0 -> out;" in viz.to_dot(w, {"w": w})


def test_constants_do_not_appear():
    x = torch.ones(2, requires_grad=True)
    c = torch.ones(2)                       # does not require grad: no edge
    y = (x * c + 1).sum()
    assert viz.to_text(y, {"x": x}) == ("[n0] SumBackward0\n"
                                        "  [n1] AddBackward0\n"
                                        "    [n2] MulBackward0\n"
                                        "      [n3] AccumulateGrad x (2)\n")


def test_multi_output_edges_are_labelled():
    class Split(eager.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1, x * 2

        @staticmethod
        def backward(ctx, g1, g2):
            return g1 + 2 * g2

    x = torch.ones(3, requires_grad=True)
    u, v = Split.apply(x)
    y = (u + v).sum()
    dot = viz.to_dot(y)
    assert 'label="SplitBackward"' in dot
    assert "n2 -> n1;" in dot and 'n2 -> n1 [label="1"];' in dot
    assert viz.to_text(y) == ("[n0] SumBackward0\n"
                              "  [n1] AddBackward0\n"
                              "    [n2] SplitBackward\n"
                              "      [n3] AccumulateGrad (3)\n"
                              "    [n2] SplitBackward (see above)\n")


def test_quotes_in_names_are_escaped():
    w = torch.ones(1, requires_grad=True)
    dot = viz.to_dot((w * 2).sum(), {'w"1\\': w})
    assert 'label="w\\"1\\\\\\n(1)"' in dot


def test_nn_model_graph_uses_named_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    loss = model(torch.randn(2, 4)).sum()
    text = viz.to_text(loss, dict(model.named_parameters()))
    for name in ("0.weight (3, 4)", "0.bias (3)", "2.weight (1, 3)", "2.bias (1)"):
        assert f"AccumulateGrad {name}" in text


def test_deep_text_indentation_is_capped():
    x = torch.ones(1, requires_grad=True)
    y = x
    for _ in range(60):
        y = y * 1.0
    lines = viz.to_text(y).splitlines()
    assert len(lines) == 61
    assert lines[viz.MAX_INDENT] == "  " * viz.MAX_INDENT + f"[n{viz.MAX_INDENT}] MulBackward0"
    assert lines[-1] == "  " * viz.MAX_INDENT + "<depth 60> [n60] AccumulateGrad (1)"


def test_100k_chain_is_fast():
    x = torch.ones(3, requires_grad=True)
    y = x
    for _ in range(100_000):
        y = y * 1.0001
    # CPU time, not wall time: rendering is one thread, and the bound is about the
    # algorithm (linear in the nodes: ~1.5 s here), not about how loaded the machine is
    # (wall time was 7 s on two cores busy with other test processes)
    start = time.process_time()
    dot = viz.to_dot(y, {"x": x})
    text = viz.to_text(y, {"x": x})
    elapsed = time.process_time() - start
    assert elapsed < 5.0, f"rendering took {elapsed:.2f}s of CPU time"
    assert dot.count("->") == 100_001
    assert 'n100000 [label="x\\n(3)", fillcolor=lightblue];' in dot
    assert text.count("\n") == 100_001
    assert text.rstrip().endswith("[n100000] AccumulateGrad x (3)")


def _fake_dot(tmp_path):
    exe = tmp_path / "bin" / "dot"
    exe.parent.mkdir()
    exe.write_text('#!/bin/sh\n# fake graphviz: dot -Tsvg IN -o OUT\necho "<svg/>" > "$4"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_render_without_graphviz(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    L, params = seed_graph()
    dot_path, svg_path = viz.render(L, tmp_path / "graph", dict(params, L=L))
    assert dot_path == str(tmp_path / "graph.dot") and svg_path is None
    with open(dot_path) as f:
        assert f.read() == SEED_DOT
    err = capsys.readouterr().err
    assert "Graphviz 'dot' program is not on PATH" in err and "dot -Tsvg" in err


def test_render_with_graphviz(tmp_path, monkeypatch):
    exe = _fake_dot(tmp_path)
    monkeypatch.setenv("PATH", str(exe.parent))
    L, params = seed_graph()
    dot_path, svg_path = viz.render(L, str(tmp_path / "g.dot"), params)
    assert dot_path == str(tmp_path / "g.dot") and svg_path == str(tmp_path / "g.svg")
    assert os.path.exists(dot_path)
    with open(svg_path) as f:
        assert f.read().strip() == "<svg/>"


def test_viz_is_reachable_lazily_from_eager():
    assert eager.viz is viz
