"""The two PyTorch models whose ONNX export is committed under data/ (mlp.onnx,
cnn.onnx).  Needs PyTorch; regenerate with
``PYTHONPATH=. /work/torchenv/bin/python tests/graphc/onnx/torch_models.py``."""

from __future__ import annotations

import io
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
EXAMPLE_SHAPES = {"mlp": (2, 8), "cnn": (2, 1, 8, 8)}


def build(name: str):
    """(torch module in eval mode, example input) of ``name`` ("mlp" or "cnn"), seeded."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    if name == "mlp":
        m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(),
                          nn.Linear(16, 3), nn.LogSoftmax(dim=-1))
    else:
        m = nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(4, 6, 3, stride=1, padding=1, groups=2), nn.GELU(),
            nn.AvgPool2d(2), nn.Flatten(), nn.Linear(6 * 2 * 2, 5), nn.Softmax(dim=1),
        )
        with torch.no_grad():  # non-trivial running statistics
            m[1].running_mean.uniform_(-0.5, 0.5)
            m[1].running_var.uniform_(0.5, 1.5)
    m.eval()
    x = torch.randn(*EXAMPLE_SHAPES[name])
    return m, x


def attention_block():
    """(a pre-norm self-attention block with GELU and a Linear, in eval mode; an input
    of shape (2, 5, 8)): PyTorch's export of it has Shape/Gather/Div/Concat/Reshape
    chains, LayerNormalization, Softmax, Transpose, MatMul.  Not committed."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln = nn.LayerNorm(8)
            self.att = nn.MultiheadAttention(8, 2, batch_first=True)
            self.ff = nn.Linear(8, 8)

        def forward(self, x):
            h = self.ln(x)
            a, _ = self.att(h, h, h, need_weights=False)
            return self.ff(torch.nn.functional.gelu(x + a)).mean(dim=1)

    torch.manual_seed(0)
    return Block().eval(), torch.randn(2, 5, 8)


def export_bytes(name: str) -> bytes:
    """The ONNX export (TorchScript exporter, opset 17, dynamic batch) as bytes."""
    import torch

    m, x = attention_block() if name == "attention" else build(name)
    buf = io.BytesIO()
    torch.onnx.export(m, (x,), buf, input_names=["x"], output_names=["y"], opset_version=17,
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, dynamo=False)
    return buf.getvalue()


if __name__ == "__main__":
    for n in ("mlp", "cnn"):
        (DATA / f"{n}.onnx").write_bytes(export_bytes(n))
        print(n, (DATA / f"{n}.onnx").stat().st_size, "bytes")
