"""Tensor methods: linear algebra (bmm, mv, outer, addmm, baddbmm, einsum...).

A mixin of :class:`eager.surface.TensorOps` (see eager/methods/__init__.py).

``addmm`` and ``baddbmm`` are primitives (records in eager/ops/linalg.py, one BLAS gemm
with the bias in native code); ``mm``, ``bmm``, ``mv`` and ``dot`` check their operands as
PyTorch does and record the ``matmul`` primitive under PyTorch's backward name
(``BmmBackward0``...); ``outer``, ``addmv``, ``addbmm``, ``tensordot`` and ``einsum`` are
composites of those.
"""

from __future__ import annotations

from typing import cast

import numpy as np

import eager._operands as O
from eager._dtype import _TORCH_NAMES


def _tensor_cls() -> type:
    """eager.surface.TensorOps (bound into eager._operands at import time)."""
    return cast(type, O.TensorOps)


def _tname(dt) -> str:
    return _TORCH_NAMES.get(np.dtype(dt).name, np.dtype(dt).name)


def _check_tensor(x, fn: str, arg: str, pos: int) -> None:
    if not isinstance(x, _tensor_cls()):
        raise TypeError(
            f"{fn}(): argument '{arg}' (position {pos}) must be Tensor, not {type(x).__name__}"
        )


def _scale(v, name: str, dt) -> float:
    """A beta/alpha argument as the float the records carry (integral for integer tensors)."""
    if isinstance(v, _tensor_cls()):
        raise TypeError(f"{name} must be a Python number, not a Tensor")
    f = float(v)
    if np.dtype(dt).kind != "f" and f != int(f):
        raise RuntimeError(
            f"For integral input tensors, argument {name} must not be a floating point number."
        )
    return f


class LinalgMethods:
    __slots__ = ()

    def mm(self, mat2):
        """Matrix product of two 2-D tensors (no broadcasting)."""
        _check_tensor(mat2, "mm", "mat2", 1)
        for what, m in (("self", self), ("mat2", mat2)):
            if m.ndim != 2:  # PyTorch's message, then what mm needs
                raise RuntimeError(
                    f"{what} must be a matrix (mm takes 2-D tensors, got {m.ndim}-D)"
                )
        if self.shape[1] != mat2.shape[0]:
            raise RuntimeError(
                f"mat1 and mat2 shapes cannot be multiplied ({self.shape[0]}x{self.shape[1]} "
                f"and {mat2.shape[0]}x{mat2.shape[1]})"
            )
        if self._npdtype != mat2._npdtype:
            raise RuntimeError(
                f"expected m1 and m2 to have the same dtype, but got: "
                f"{_cname(self._npdtype)} != {_cname(mat2._npdtype)}"
            )
        if self._npdtype.kind == "b":
            raise NotImplementedError("\"addmm_impl_cpu_\" not implemented for 'Bool'")
        return self._op("matmul", "MmBackward0", mat2)

    def bmm(self, mat2):
        """Batched matrix product of two 3-D tensors (b, n, m) @ (b, m, p) (no broadcasting)."""
        _check_tensor(mat2, "bmm", "mat2", 1)
        if self.ndim != 3:
            raise RuntimeError("batch1 must be a 3D tensor")
        if mat2.ndim != 3:
            raise RuntimeError("batch2 must be a 3D tensor")
        if tuple(mat2.shape[:2]) != (self.shape[0], self.shape[2]):
            raise RuntimeError(
                f"Expected size for first two dimensions of batch2 tensor to be: "
                f"[{self.shape[0]}, {self.shape[2]}] but got: [{mat2.shape[0]}, {mat2.shape[1]}]."
            )
        if self._npdtype != mat2._npdtype:
            raise RuntimeError(
                f"expected scalar type {_tname(self._npdtype)} but found {_tname(mat2._npdtype)}"
            )
        if self._npdtype.kind == "b":
            raise NotImplementedError("\"bmm\" not implemented for 'Bool'")
        return self._op("matmul", "BmmBackward0", mat2)

    def mv(self, vec):
        """Matrix-vector product: (n, m) @ (m,) -> (n,)."""
        _check_tensor(vec, "mv", "vec", 1)
        if self.ndim != 2 or vec.ndim != 1:
            raise RuntimeError(f"vector + matrix @ vector expected, got 1, {self.ndim}, {vec.ndim}")
        if self.shape[1] != vec.shape[0]:
            raise RuntimeError(
                f"size mismatch, got input ({self.shape[0]}), mat "
                f"({self.shape[0]}x{self.shape[1]}), vec ({vec.shape[0]})"
            )
        if self._npdtype != vec._npdtype:
            raise RuntimeError(
                f"addmv input tensors must have the same dtype, but got "
                f"{_tname(vec._npdtype)}, {_tname(self._npdtype)}, and {_tname(vec._npdtype)}"
            )
        if self._npdtype.kind == "b":
            raise NotImplementedError("\"addmv_impl_cpu\" not implemented for 'Bool'")
        return self._op("matmul", "MvBackward0", vec)

    def _dot_check(self, other, fn):
        _check_tensor(other, fn, "tensor", 1)
        if self.ndim != 1 or other.ndim != 1:
            raise RuntimeError(
                f"1D tensors expected, but got {self.ndim}D and {other.ndim}D tensors"
            )
        if self.shape[0] != other.shape[0]:
            raise RuntimeError(
                f"inconsistent tensor size, expected tensor [{self.shape[0]}] and src "
                f"[{other.shape[0]}] to have the same number of elements, but got "
                f"{self.shape[0]} and {other.shape[0]} elements respectively"
            )
        if self._npdtype != other._npdtype:
            raise RuntimeError(
                f"{fn} : expected both vectors to have same dtype, but found "
                f"{_tname(self._npdtype)} and {_tname(other._npdtype)}"
            )
        if self._npdtype.kind == "b":
            raise NotImplementedError(f"\"{fn}\" not implemented for 'Bool'")

    def dot(self, other):
        """Inner product of two 1-D tensors of one dtype."""
        self._dot_check(other, "dot")
        return self._op("matmul", "DotBackward0", other)

    def vdot(self, other):
        """Inner product of two 1-D tensors, conjugating the first (real tensors: ``dot``)."""
        self._dot_check(other, "vdot")
        return self._op("matmul", "VdotBackward0", other)

    def outer(self, vec2):
        """Outer product of two 1-D tensors: (n,), (m,) -> (n, m)."""
        _check_tensor(vec2, "outer", "vec2", 1)
        for what, v in (("self", self), ("vec2", vec2)):
            if v.ndim != 1:
                raise RuntimeError(f"outer: Expected 1-D argument {what}, but got {v.ndim}-D")
        return self.unsqueeze(1) * vec2

    def ger(self, vec2):
        """Outer product of two 1-D tensors (the old name of ``outer``)."""
        return self.outer(vec2)

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        """``beta * self + alpha * (mat1 @ mat2)`` for 2-D ``mat1``, ``mat2``; self broadcasts."""
        _check_tensor(mat1, "addmm", "mat1", 1)
        _check_tensor(mat2, "addmm", "mat2", 2)
        b, a = _scale(beta, "beta", self._npdtype), _scale(alpha, "alpha", self._npdtype)
        return self._op("addmm", "AddmmBackward0", mat1, mat2, beta=b, alpha=a)

    def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
        """``beta * self + alpha * (batch1 @ batch2)`` for 3-D batches; self broadcasts."""
        _check_tensor(batch1, "baddbmm", "batch1", 1)
        _check_tensor(batch2, "baddbmm", "batch2", 2)
        b, a = _scale(beta, "beta", self._npdtype), _scale(alpha, "alpha", self._npdtype)
        return self._op("baddbmm", "BaddbmmBackward0", batch1, batch2, beta=b, alpha=a)

    def addmv(self, mat, vec, *, beta=1, alpha=1):
        """``beta * self + alpha * (mat @ vec)`` (a composite of ``addmm``)."""
        _check_tensor(mat, "addmv", "mat", 1)
        _check_tensor(vec, "addmv", "vec", 2)
        if mat.ndim != 2 or vec.ndim != 1 or self.ndim > 1:
            raise RuntimeError(
                f"vector + matrix @ vector expected, got {self.ndim}, {mat.ndim}, {vec.ndim}"
            )
        n = self.shape[0] if self.ndim else 1
        if mat.shape[1] != vec.shape[0] or n not in (1, mat.shape[0]):
            raise RuntimeError(
                f"size mismatch, got input ({n}), mat ({mat.shape[0]}x{mat.shape[1]}), "
                f"vec ({vec.shape[0]})"
            )
        inp = self.reshape(-1, 1)
        return inp.addmm(mat, vec.unsqueeze(1), beta=beta, alpha=alpha).squeeze(1)

    def addbmm(self, batch1, batch2, *, beta=1, alpha=1):
        """``beta * self + alpha * sum_b(batch1[b] @ batch2[b])``: one ``addmm`` over (M, B*K)."""
        _check_tensor(batch1, "addbmm", "batch1", 1)
        _check_tensor(batch2, "addbmm", "batch2", 2)
        for what, m in (("batch1", batch1), ("batch2", batch2)):
            if m.ndim != 3:
                raise RuntimeError(f"{what} must be a 3D tensor")
        if tuple(batch2.shape[:2]) != (batch1.shape[0], batch1.shape[2]):
            raise RuntimeError(
                f"Expected size for first two dimensions of batch2 tensor to be: "
                f"[{batch1.shape[0]}, {batch1.shape[2]}] but got: "
                f"[{batch2.shape[0]}, {batch2.shape[1]}]."
            )
        nb, m, k = batch1.shape
        n = batch2.shape[2]
        a = batch1.transpose(0, 1).reshape(m, nb * k)
        return self.addmm(a, batch2.reshape(nb * k, n), beta=beta, alpha=alpha)


def _cname(dt) -> str:
    """C type names PyTorch's mm dtype error uses (float, double, long int...)."""
    return {
        "float32": "float",
        "float64": "double",
        "int64": "long int",
        "int32": "int",
        "int16": "short int",
        "int8": "signed char",
        "uint8": "unsigned char",
        "bool": "bool",
        "float16": "c10::Half",
    }.get(np.dtype(dt).name, np.dtype(dt).name)


# --- module-level functions -----------------------------------------------------------


def _method_fn(name: str, first: str, doc: str):
    def fn(input, *args, **kwargs):
        _check_tensor(input, name, first, 0)
        return getattr(input, name)(*args, **kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


def tensordot(a, b, dims=2):
    """Contraction of ``a``'s last ``dims`` dims with ``b``'s first (or the listed pairs)."""
    _check_tensor(a, "tensordot", "a", 0)
    _check_tensor(b, "tensordot", "b", 1)
    if isinstance(dims, _tensor_cls()):
        dims = dims.tolist()
    if isinstance(dims, (int, np.integer)):
        d = int(dims)
        if d < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={d}")
        if d > a.ndim or d > b.ndim:
            raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got dims={d}")
        da, db = list(range(a.ndim - d, a.ndim)), list(range(d))
    else:
        da, db = dims
        da = [da] if isinstance(da, (int, np.integer)) else list(da)
        db = [db] if isinstance(db, (int, np.integer)) else list(db)
        if len(da) != len(db):
            raise RuntimeError("both dimension lists should have same length")
    da = [int(x) % max(a.ndim, 1) for x in da]
    db = [int(x) % max(b.ndim, 1) for x in db]
    for x, y in zip(da, db):
        if a.shape[x] != b.shape[y]:
            raise RuntimeError(
                f"contracted dimensions need to match, but first has size {a.shape[x]} in dim "
                f"{x} and second has size {b.shape[y]} in dim {y}"
            )
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    la = [next(letters) for _ in range(a.ndim)]
    lb = [next(letters) for _ in range(b.ndim)]
    for x, y in zip(da, db):
        lb[y] = la[x]
    out = [c for i, c in enumerate(la) if i not in da] + [
        c for i, c in enumerate(lb) if i not in db
    ]
    return einsum(f"{''.join(la)},{''.join(lb)}->{''.join(out)}", a, b)


# --- einsum -------------------------------------------------------------------------------

_ELL = "..."


def _parse_term(term: str, start: int, what: str) -> list:
    """Subscripts of one operand (or the output) as labels: letters and at most one '...'."""
    out: list = []
    i = 0
    while i < len(term):
        c = term[i]
        if c == ".":
            if term[i : i + 3] != _ELL or _ELL in out:
                tail = " (...)" if what == "output" else ""
                raise RuntimeError(
                    f"einsum(): found '.' for {what} that is not part of any ellipsis{tail}"
                )
            out.append(_ELL)
            i += 3
            continue
        if not ("a" <= c <= "z" or "A" <= c <= "Z"):
            raise RuntimeError(
                f"einsum(): invalid subscript given at index {start + i} in the equation "
                "string, subscripts must be in [a-zA-Z]"
            )
        out.append(c)
        i += 1
    return out


def _einsum_parse(equation: str, operands: tuple):
    eq = equation.replace(" ", "")
    arrow = eq.find("->")
    lhs, rhs = (eq, None) if arrow < 0 else (eq[:arrow], eq[arrow + 2 :])
    terms = lhs.split(",")
    if len(terms) > len(operands):
        raise RuntimeError("einsum(): fewer operands were provided than specified in the equation")
    if len(terms) < len(operands):
        raise RuntimeError("einsum(): more operands were provided than specified in the equation")
    labels, pos = [], 0
    for k, term in enumerate(terms):
        t = _parse_term(term, pos, f"operand {k}")
        pos += len(term) + 1
        nd = operands[k].ndim
        nl = len([c for c in t if c != _ELL])
        if _ELL in t:
            if nl > nd:
                raise RuntimeError(
                    f"einsum(): the number of subscripts in the equation ({nl}) is more than "
                    f"the number of dimensions ({nd}) for operand {k}"
                )
        elif nl != nd:
            raise RuntimeError(
                f"einsum(): the number of subscripts in the equation ({nl}) does not match the "
                f"number of dimensions ({nd}) for operand {k} and no ellipsis was given"
            )
        labels.append(t)
    out = None
    if rhs is not None:
        out = _parse_term(rhs, arrow + 2, "output")
        seen: set = set()
        known = {c for t in labels for c in t}
        for c in out:
            if c in seen:
                raise RuntimeError(
                    f"einsum(): output subscript {c} appears more than once in the output"
                )
            seen.add(c)
            if c != _ELL and c not in known:
                raise RuntimeError(
                    f"einsum(): output subscript {c} does not appear in the equation for any "
                    "input operand"
                )
    return labels, out


def _expand_labels(labels: list, operands: tuple) -> tuple:
    """Per operand, one label per dimension: letters, and ('...', j) for the j-th of the
    broadcast ellipsis dims (aligned right); and the number of ellipsis dims."""
    n_ell = 0
    for t, x in zip(labels, operands):
        if _ELL in t:
            n_ell = max(n_ell, x.ndim - (len(t) - 1))
    full = []
    for t, x in zip(labels, operands):
        if _ELL not in t:
            full.append(list(t))
            continue
        e = x.ndim - (len(t) - 1)
        i = t.index(_ELL)
        full.append(t[:i] + [(_ELL, n_ell - e + j) for j in range(e)] + t[i + 1 :])
    return full, n_ell


def _label_sizes(full: list, operands: tuple) -> dict:
    sizes: dict = {}
    for k, (ls, x) in enumerate(zip(full, operands)):
        for i, lab in enumerate(ls):
            j = ls.index(lab)
            if j < i and x.shape[j] != x.shape[i]:
                raise RuntimeError(
                    f"einsum(): subscript {lab} is repeated for operand {k} but the sizes don't "
                    f"match, {x.shape[i]} != {x.shape[j]}"
                )
        for lab, s in zip(ls, x.shape):
            prev = sizes.get(lab)
            if prev is None or prev == 1:
                sizes[lab] = s
            elif s != 1 and s != prev:
                if isinstance(lab, tuple):
                    raise RuntimeError(
                        f"einsum(): dimension {lab[1]} covered by ellipsis in operand {k}"
                        f"has size {s} which does not broadcast with previously seen ellipsis "
                        f"with size {prev} for the respective dimension"
                    )
                raise RuntimeError(
                    f"einsum(): subscript {lab} has size {s} for operand {k} which does not "
                    f"broadcast with previously seen size {prev}"
                )
    return sizes


def _take_diagonals(x, ls: list, k: int):
    """Repeated labels within one operand ('ii->i'): keep the diagonal, one dim per label.
    ``where`` with an identity mask, then a sum over the repeated dim: exact (the other
    elements are exactly 0, whatever they held)."""
    ls = list(ls)
    while True:
        dup = next(
            ((i, j) for i in range(len(ls)) for j in range(i + 1, len(ls)) if ls[i] == ls[j]), None
        )
        if dup is None:
            return x, ls
        i, j = dup
        if x.shape[i] != x.shape[j]:
            raise RuntimeError(
                f"einsum(): subscript {ls[i]} is repeated for operand {k} but the sizes don't "
                f"match, {x.shape[j]} != {x.shape[i]}"
            )
        n = x.shape[i]
        shape = [1] * x.ndim
        shape[i] = shape[j] = n
        mask = np.eye(n, dtype=bool).reshape(shape)
        x = O.where(mask, x, 0).sum(j)
        del ls[j]


def _sum_labels(x, ls: list, drop: set):
    axes = [i for i, lab in enumerate(ls) if lab in drop]
    if axes:
        x = x.sum(tuple(axes))
        ls = [lab for lab in ls if lab not in drop]
    return x, ls


def _contract(x, lx: list, y, ly: list, keep: set, sizes: dict):
    """One pairwise step: batch labels (in both, kept), contracted labels (in both, not
    kept), the rest of each side; as a (batched) matmul over permuted, reshaped operands."""
    # size-1 dims meeting a larger one: broadcast them first
    for t in (0, 1):
        z, lz = (x, lx) if t == 0 else (y, ly)
        want = [sizes[lab] for lab in lz]
        if list(z.shape) != want:
            z = z.expand(*want)
            if t == 0:
                x = z
            else:
                y = z
    sy = set(ly)
    sx = set(lx)
    batch = [lab for lab in lx if lab in sy and lab in keep]
    con = [lab for lab in lx if lab in sy and lab not in keep]
    xo = [lab for lab in lx if lab not in sy]
    yo = [lab for lab in ly if lab not in sx]

    def sz(labs):
        return int(np.prod([sizes[lab] for lab in labs], dtype=np.int64))

    if not con:
        # no contraction: a broadcast product (elementwise, fuses), no BLAS
        xp = x.permute(*[lx.index(lab) for lab in batch + xo])
        yp = y.permute(*[ly.index(lab) for lab in batch + yo])
        xp = xp.reshape(*[sizes[lab] for lab in batch + xo] + [1] * len(yo))
        yp = yp.reshape(*[sizes[lab] for lab in batch] + [1] * len(xo) + [sizes[lab] for lab in yo])
        return xp * yp, batch + xo + yo
    xp = x.permute(*[lx.index(lab) for lab in batch + xo + con])
    yp = y.permute(*[ly.index(lab) for lab in batch + con + yo])
    M, K, N = sz(xo), sz(con), sz(yo)
    if batch:
        B = sz(batch)
        r = xp.reshape(B, M, K) @ yp.reshape(B, K, N)
    else:
        r = xp.reshape(M, K) @ yp.reshape(K, N)
    return r.reshape(*[sizes[lab] for lab in batch + xo + yo]), batch + xo + yo


def einsum(*args):
    """Einstein summation: ``einsum('ij,jk->ik', a, b)`` (or ``einsum(eq, [a, b])``), as
    pairwise contractions left to right, each a permute/reshape/matmul (BLAS)."""
    if not args or not isinstance(args[0], str) or len(args) < 2:
        if args and not isinstance(args[0], str):
            raise NotImplementedError(
                "einsum(): the sublist form einsum(op0, sublist0, ...) is not supported; "
                "pass an equation string"
            )
        raise ValueError(
            "einsum(): must specify the equation string and at least one operand, or at least "
            "one operand and its subscripts list"
        )
    equation, operands = args[0], args[1:]
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    for k, x in enumerate(operands):
        if not isinstance(x, _tensor_cls()):
            raise TypeError(
                f"expected Tensor as element {k} in argument 1, but got {type(x).__name__}"
            )
    dt0 = operands[0]._npdtype
    for x in operands[1:]:
        if x._npdtype != dt0:
            raise RuntimeError(f"expected scalar type {_tname(dt0)} but found {_tname(x._npdtype)}")
    labels, out = _einsum_parse(equation, operands)
    full, n_ell = _expand_labels(labels, operands)
    sizes = _label_sizes(full, operands)
    ell = [(_ELL, j) for j in range(n_ell)]
    if out is None:  # implicit: the ellipsis dims, then the labels seen once, sorted
        counts: dict = {}
        for t in labels:
            for c in t:
                if c != _ELL:
                    counts[c] = counts.get(c, 0) + 1
        out_full = ell + sorted(c for c, n in counts.items() if n == 1)
    else:
        out_full = []
        for c in out:
            out_full += ell if c == _ELL else [c]
    xs, ls = [], []
    for k, (x, lab) in enumerate(zip(operands, full)):
        x, lab = _take_diagonals(x, lab, k)
        xs.append(x)
        ls.append(lab)
    # labels needed after step k: in the output or in a later operand
    outset = set(out_full)

    def needed_after(k):
        s = set(outset)
        for lab in ls[k + 1 :]:
            s |= set(lab)
        return s

    x, lx = _sum_labels(
        xs[0], ls[0], set(ls[0]) - needed_after(0) - set().union(*[set(t) for t in ls[1:]])
    )
    for k in range(1, len(xs)):
        keep = needed_after(k)
        y, ly = _sum_labels(xs[k], ls[k], set(ls[k]) - keep - set(lx))
        x, lx = _sum_labels(x, lx, set(lx) - keep - set(ly))
        x, lx = _contract(x, lx, y, ly, keep, sizes)
    x, lx = _sum_labels(x, lx, set(lx) - outset)
    # broadcast size-1 dims to the sizes other operands gave their labels, then order
    want = [sizes[lab] for lab in lx]
    if list(x.shape) != want:
        x = x.expand(*want)
    if lx != out_full or any(x is o for o in operands):  # a view, never an operand itself
        x = x.permute(*[lx.index(lab) for lab in out_full])
    return x


#: module-level functions that are not methods, by name
FUNCTIONS: dict = {
    "einsum": einsum,
    "tensordot": tensordot,
    "bmm": _method_fn("bmm", "input", "Batched matrix product of two 3-D tensors."),
    "mv": _method_fn("mv", "input", "Matrix-vector product."),
    "vdot": _method_fn("vdot", "input", "Inner product of two 1-D tensors."),
    "outer": _method_fn("outer", "input", "Outer product of two 1-D tensors."),
    "ger": _method_fn("ger", "input", "Outer product of two 1-D tensors (old name of outer)."),
    "addmm": _method_fn("addmm", "input", "beta * input + alpha * (mat1 @ mat2)."),
    "baddbmm": _method_fn("baddbmm", "input", "beta * input + alpha * (batch1 @ batch2)."),
    "addmv": _method_fn("addmv", "input", "beta * input + alpha * (mat @ vec)."),
    "addbmm": _method_fn("addbmm", "input", "beta * input + alpha * sum_b(batch1[b] @ batch2[b])."),
}
#: methods that are also module-level functions (``eager.name(x, ...)``)
METHOD_FUNCTIONS: list = []
