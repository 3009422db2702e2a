"""nn.functional: embedding, one_hot and other lookups (re-exported by eager/nn/functional.py)."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

import eager._dtype as D
from eager._operands import _dispatch
from eager.methods.indexing import _check_range, _concrete

from ._fused import fused_embedding

__all__: list = ["one_hot", "embedding"]


def one_hot(tensor: Any, num_classes: int = -1) -> Any:
    """int64 one-hot encoding: a new last dim of size ``num_classes`` (-1: max + 1,
    eagerly only) with 1 at each value's position."""
    if tensor._npdtype != np.dtype(np.int64):
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    num_classes = int(num_classes)
    data = _concrete(tensor)
    if num_classes == -1:
        if data is None:
            raise RuntimeError(
                "one_hot: num_classes=-1 infers the number of classes from the values, "
                "which a compiled (traced) graph cannot do; pass num_classes"
            )
        if data.size == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(data.max()) + 1
    elif num_classes < -1:
        raise RuntimeError("num_classes should be positive")
    if data is not None and data.size:
        if data.min() < 0:
            raise RuntimeError("Class values must be non-negative.")
        if data.max() >= num_classes:
            raise RuntimeError("Class values must be smaller than num_classes.")
    shape = tuple(tensor.shape)
    zeros = tensor._wrap_const(np.zeros((), np.int64)).expand(shape + (num_classes,))
    ones = tensor._wrap_const(np.ones((), np.int64)).expand(shape + (1,))
    # a scatter: compiled code checks every class is in [0, num_classes) when it runs
    return zeros.scatter(-1, tensor.unsqueeze(-1), ones)


def embedding(
    input: Any,
    weight: Any,
    padding_idx: Optional[int] = None,
    max_norm: Optional[float] = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Any:
    """The rows of ``weight`` that ``input``'s indices name (shape input.shape + (dim,));
    the ``padding_idx`` row gets no gradient."""
    if max_norm is not None:
        raise NotImplementedError(
            "embedding: max_norm is not supported (it renormalizes weight in place)"
        )
    if scale_grad_by_freq:
        raise NotImplementedError("embedding: scale_grad_by_freq=True is not supported")
    if sparse:
        raise NotImplementedError("embedding: sparse=True (sparse gradients) is not supported")
    if input._npdtype.name not in ("int64", "int32"):
        name = D.from_np(input._npdtype).name
        kind = {"float32": "Float", "float64": "Double", "bool": "Bool"}.get(
            name, name.capitalize()
        )
        raise RuntimeError(
            "Expected tensor for argument #1 'indices' to have one of the following scalar "
            f"types: Long, Int; but got torch.{kind}Tensor instead (while checking "
            "arguments for embedding)"
        )
    if weight.ndim != 2:
        raise RuntimeError("'weight' must be 2-D")
    n = weight.shape[0]
    if padding_idx is not None:
        if padding_idx > 0:
            assert padding_idx < n, "Padding_idx must be within num_embeddings"
        elif padding_idx < 0:
            assert padding_idx >= -n, "Padding_idx must be within num_embeddings"
            padding_idx = n + padding_idx
    _check_range(input, n)
    if padding_idx is None:
        fused = fused_embedding(input, weight)
        if fused is not None:  # one node, a bincount gradient (eager/nn/_fused.py)
            return fused
    flat = input.reshape(-1)
    out = weight._index_rows(0, flat, "EmbeddingBackward0")
    out = out.reshape(tuple(input.shape) + (weight.shape[1],))
    if padding_idx is not None:  # the padding row's value, without a gradient
        pad = (input == padding_idx).unsqueeze(-1)
        out = _dispatch("where", "EmbeddingBackward0", (pad, out.detach(), out), {})
    return out
