"""``eager.linalg``: the vector and matrix norms of ``torch.linalg`` (``vector_norm``, ``norm``)."""

from __future__ import annotations

from eager.methods.stats import vector_norm as _vector_norm

__all__ = ["vector_norm", "norm"]


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    """The ``ord``-norm of the elements of ``x`` over ``dim`` (all of them by default)."""
    if out is not None:
        raise NotImplementedError("linalg.vector_norm: the 'out' argument is not supported")
    return _vector_norm(x, ord, dim, keepdim, dtype=dtype)


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None, out=None):
    """``linalg.norm``: the 2-norm of the elements by default, a vector norm for a number
    ``ord`` over one dim (or a 1-D input); matrix norms other than 'fro' are refused."""
    if out is not None:
        raise NotImplementedError("linalg.norm: the 'out' argument is not supported")
    if isinstance(dim, int):
        dim = (dim,)
    if ord is None:
        if dim is not None and len(dim) > 2:
            raise RuntimeError(
                f"linalg.norm: If dim is specified, it must be of length 1 or 2. Got {list(dim)}"
            )
        return _vector_norm(A, 2, dim, keepdim, dtype=dtype)
    if ord == "fro" and (dim is not None and len(dim) == 2 or dim is None and A.ndim == 2):
        return _vector_norm(A, 2, dim, keepdim, dtype=dtype)
    nd = len(dim) if dim is not None else A.ndim
    if not isinstance(ord, str) and nd == 1:
        return _vector_norm(A, ord, dim, keepdim, dtype=dtype)
    raise NotImplementedError(
        f"linalg.norm: ord={ord!r} over {nd} dims (a matrix norm) is not supported; "
        "use ord=None/'fro' or linalg.vector_norm"
    )
