"""Every script in examples/ runs to completion and prints what it is there to show.

Each example runs in a fresh interpreter (``sys.executable``, from the project
root, with a timeout), must exit with status 0, and must print its key lines:
the facts a reader runs it for.  The examples also assert their own numbers
(gradients agree, derivatives match the analytic values...), so a wrong result
fails here as a non-zero exit status.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TIMEOUT = 120

# example -> regular expressions that must each match a line of its output
KEY_LINES = {
    "seed_graph_3x3.py": [
        r"^The grad fn for a is None$",
        r"^The grad fn for d is AddBackward0$",
        r"^\s+AccumulateGrad -> w1\.grad$",
        r"^second backward: Trying to backward through the graph a second time",
        r"^graph L3\(a: f32\[3,3\], w1: f32\[3,3\]",
        r"^graph L3_grad\(",
        r"# seed_graph_3x3\.py:\d+, backward$",
        r"^gradients agree",
    ],
    "mlp_both_ways.py": [
        r"^\s+eager: first two steps .* us/step$",
        r"^\s+compiled: first two steps .* us/step$",
        r"^\s+0\s+\S+\s+\S+$",
        r"^per step: eager \d+ us, compiled \d+ us",
        r"^compiled cache: 2 traces, 498 hits .*\.grad None -> set",
    ],
    "inspect_stages.py": [
        r"^===== 1\. traced",
        r"^graph loss\(x: f64\[100000\], w: f64\[\], b: f64\[\]\) \{$",
        r"^graph loss_grad\(",
        r"^===== 3\. optimized",
        r"^plan for value_and_grad_loss: 1 kernels",
        r"k0: <loop \[100000\]: reduce %\d+, reduce %\d+, reduce %\d+>",
        r"^define internal i32 @\"k0",
        r"<\d+ x double>",
        r"^  \.\.\. \([1-9]\d* arithmetic instructions on packed doubles",
        r"^wrote .*graphc_loss\.dot",
        r"^digraph \"loss\" \{$",
    ],
    "control_flow.py": [
        r"^scaled\(\[1\. 2\. 3\.\]\) =  12\.0",
        r"^TracerBoolConversionError: bool\(\) .* at control_flow\.py:\d+ .*depends on argument x",
        r"^  %\d+ = where\(%\d+, %\d+, %\d+\) : f64\[\]",
        r"^scaled_cond\(\[-1\. -2\. -3\.\]\) =   6\.0   grad = \[-1\. -1\. -1\.\]$",
        r"^one trace serves both branches: 1 trace",
        r"^where and cond agree with eager",
    ],
    "custom_function.py": [
        r"grad_fn=<ClippedExpBackward>\)$",
        r"^y\.grad_fn: ClippedExpBackward -> next_functions: \['AccumulateGrad'\]$",
        r"^gradcheck\(ClippedExp\): True$",
        r"^gradcheck\(WrongExp\) fails as it should:$",
        r"Jacobian mismatch for output 0 with respect to input 0",
    ],
    "higher_order.py": [
        r"^d1 = tensor\(.*$",
        r"grad_fn=<AddBackward0>\)$",
        r"^f''' compiled: \d+ traced nodes \(f alone: \d+\)",
        r"^\s+0\.50\s+3\s+1\.31289991\s+1\.31289991\s+1\.31289991$",
        r"^eager and compiled derivatives of orders 1-3 match the analytic values",
        r"^H @ v = ",
    ],
    "train_module_compiled.py": [
        r"^step\s+eager loss\s+compiled loss$",
        r"^\s+59\s+\S+\s+\S+$",
        r"^losses agree to .* traces: 1, recompiles: 0$",
        r"^graph inputs: x, self_fc1_weight, self_fc1_bias, self_fc2_weight, self_fc2_bias$",
    ],
    "classifier_both_ways.py": [
        r"^MLP 64-64-10: 90 Adam steps on 1500 digits$",
        r"^CNN \(LeNet-style\): 90 Adam steps on 1500 digits$",
        r"^  test accuracy: eager \d+\.\d%, compiled \d+\.\d%$",
        r"^  later steps \(median\): eager .* ms, compiled .* ms",
        r"^eager and compiled agree step by step, and both learn$",
    ],
    "compiled_in_eager.py": [
        r"^compiled block output grad_fn: CompiledFunctionBackward$",
        r"^eager block output grad_fn:\s+AddBackward0$",
        r"^alpha\s+\[1\]\s+\S+$",
        r"^gradients through the compiled block equal the eager ones$",
        r"^step 4: loss compiled-block ",
        r"^why it re-traced: .*argument alpha: \.grad None -> set$",
    ],
    "eager_mlp.py": [
        r"^== autograd \+ manual SGD \(seed 003\) ==$",
        r"^0 \d",
        r"^Final Loss: ",
        r"^== nn\.Sequential \+ optim\.Adam ==$",
        r"ms per step",
    ],
}


def _run(name: str, tmp: Path) -> subprocess.CompletedProcess:
    # TMPDIR: the test's own directory, so an example that writes a file of a fixed name in
    # the temporary directory (inspect_stages.py's graphc_loss.dot, which it then reads
    # back) cannot race another test process of a parallel run (`dev.py test`)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", TMPDIR=str(tmp))
    return subprocess.run([sys.executable, str(EXAMPLES / name)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)


@pytest.mark.parametrize("name", sorted(KEY_LINES))
def test_example_runs_and_prints_its_key_lines(name, tmp_path):
    r = _run(name, tmp_path)
    assert r.returncode == 0, f"{name} exited with {r.returncode}:\n{r.stderr[-3000:]}"
    missing = [pat for pat in KEY_LINES[name] if not re.search(pat, r.stdout, re.M)]
    assert not missing, f"{name} did not print lines matching {missing}:\n{r.stdout[-3000:]}"


def test_every_example_is_covered_and_documented():
    """A new example needs key lines here, a docstring saying what it shows, and a
    line in the README's table."""
    scripts = sorted(p.name for p in EXAMPLES.glob("*.py"))
    assert scripts == sorted(KEY_LINES), "examples/ and KEY_LINES disagree"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in scripts:
        doc = ast.get_docstring(ast.parse((EXAMPLES / name).read_text(encoding="utf-8")))
        assert doc and len(doc.split()) >= 15, f"{name} needs a docstring saying what it shows"
        assert f"(examples/{name})" in readme, f"README.md does not list examples/{name}"
