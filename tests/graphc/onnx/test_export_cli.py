"""``graphc export FILE:FUNCTION --args SPEC -o model.onnx``."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from graphc.tools.cli import main  # noqa: E402

SRC = '''
import eager as torch

def predict(x, w):
    return (x @ w).relu().sum(1)

def noisy(x):
    return x + torch.randn(3)
'''


@pytest.fixture
def model_file(tmp_path):
    p = tmp_path / "model.py"
    p.write_text(SRC)
    return p


def test_export_writes_a_runnable_model(model_file, tmp_path, capsys):
    out = tmp_path / "m.onnx"
    rc = main(["export", f"{model_file}:predict", "--args", "f32[2,3],f32[3,4]", "-o", str(out)])
    assert rc == 0
    assert "wrote" in capsys.readouterr().out
    m = onnx.load(str(out))
    onnx.checker.check_model(m)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    x = np.ones((2, 3), np.float32)
    w = np.full((3, 4), -0.5, np.float32)
    w[:, 0] = 1.0
    np.testing.assert_allclose(sess.run(None, {"x": x, "w": w})[0], [3.0, 3.0])


def test_export_refusal_exits_1_naming_the_op(model_file, tmp_path, capsys):
    rc = main(["export", f"{model_file}:noisy", "--args", "f32[3]", "-o", str(tmp_path / "n.onnx")])
    assert rc == 1
    err = capsys.readouterr().err
    assert "philox" in err and "model.py:8" in err


def test_export_usage_errors_exit_2(model_file, tmp_path, capsys):
    assert main(["export", f"{model_file}:nope", "--args", "f32[3]", "-o", "x.onnx"]) == 2
    rc = main(["export", f"{model_file}:predict", "--args", "f32[2,3],f32[3,4]",
               "-o", str(tmp_path / "no" / "dir" / "m.onnx")])
    assert rc == 2
    assert "cannot write" in capsys.readouterr().err
