"""Real models written once as PyTorch code: the classifier (W6), the CNN (W7) and the
attention block (W8) of the benchmarks, also used by the examples and the tests.

As with the seed step (:mod:`.workloads`), the code is source text run against a module
with the torch API: ``build()`` gives the models on ``eager`` (``import eager as
torch``), ``build(torch)`` the same models on PyTorch for the benchmarks' PyTorch column
and the differential tests.  Nothing here imports PyTorch.
"""

from __future__ import annotations

from types import ModuleType, SimpleNamespace
from typing import Optional

import eager

MODELS_FILE = "models.py"
MODELS_SOURCE = '''\
nn = torch.nn
F = torch.nn.functional


class Classifier(nn.Module):
    """W6: an MLP over flattened 8x8 images, 64 -> 128 -> 10 with ReLU."""

    def __init__(self, d_in=64, hidden=128, classes=10):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(d_in, hidden), nn.ReLU(),
                                 nn.Linear(hidden, classes))

    def forward(self, x):
        return self.net(x)


class LeNet(nn.Module):
    """W7: conv 3x3 (1->16) + ReLU + 2x2 max-pool, conv 3x3 (16->32) + ReLU + 2x2
    max-pool, flatten, linear -> 10 (28x28 input; ``side`` sets another; ``padding`` pads
    both convolutions, optional ``batch_norm`` after the first and ``dropout`` before the
    linear layer)."""

    def __init__(self, side=28, classes=10, c1=16, c2=32, padding=0, dropout=0.0,
                 batch_norm=False):
        super().__init__()
        layers = [nn.Conv2d(1, c1, 3, padding=padding)]
        if batch_norm:
            layers.append(nn.BatchNorm2d(c1))
        layers += [nn.ReLU(), nn.MaxPool2d(2),
                   nn.Conv2d(c1, c2, 3, padding=padding), nn.ReLU(), nn.MaxPool2d(2),
                   nn.Flatten()]
        if dropout:
            layers.append(nn.Dropout(dropout))
        s = ((side + 2 * padding - 2) // 2 + 2 * padding - 2) // 2
        layers.append(nn.Linear(c2 * s * s, classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class AttentionBlock(nn.Module):
    """W8: one pre-norm causal self-attention block with a GELU MLP and residuals, over
    token embeddings, projected back to the vocabulary."""

    def __init__(self, vocab=128, width=64, heads=4, seq=64, mlp=256):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.randn(seq, width) * 0.02)
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, mlp), nn.GELU(), nn.Linear(mlp, width))
        self.head = nn.Linear(width, vocab)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq), diagonal=1).bool())

    def forward(self, tokens):
        b, t = tokens.shape
        x = self.embed(tokens) + self.pos[:t]
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=-1)
        d = x.shape[-1] // self.heads
        q, k, v = (z.reshape(b, t, self.heads, d).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * d ** -0.5
        att = att.masked_fill(self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, -1)
        x = x + self.proj(y)
        x = x + self.mlp(self.ln2(x))
        return self.head(x)


def class_loss(model, x, labels):
    """Cross-entropy of the model's logits against integer class labels."""
    return F.cross_entropy(model(x), labels)


def token_loss(model, tokens, targets):
    """Cross-entropy of next-token logits over every position."""
    logits = model(tokens)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
'''


def build(torch: Optional[ModuleType] = None) -> SimpleNamespace:
    """The models and their losses written against ``torch`` (default: eager)."""
    ns: dict = {"torch": eager if torch is None else torch}
    exec(compile(MODELS_SOURCE, MODELS_FILE, "exec"), ns)
    return SimpleNamespace(
        **{k: ns[k] for k in ("Classifier", "LeNet", "AttentionBlock", "class_loss", "token_loss")}
    )
