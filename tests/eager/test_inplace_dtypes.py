"""In-place ops follow PyTorch's casting rule, checked against a table made with PyTorch.

An in-place op computes its out-of-place result type (PyTorch promotion, Python scalars
weak) and refuses to store it into a tensor of a lower category (float -> int, int ->
bool): ``int64_w -= 0.5 * g`` raises instead of truncating.  ``copy_``, ``fill_`` and
``x[i] = v`` convert.  ``inplace_dtypes_torch.json`` holds what PyTorch 2.13 does for
every op x self dtype x other operand below; regenerate it by running this file with a
Python that has torch, numpy and pytest.  When torch is importable the test also compares
live.
"""
from __future__ import annotations

import json
import math
import pathlib
import re
import sys

import numpy as np
import pytest

TABLE_PATH = pathlib.Path(__file__).with_name("inplace_dtypes_torch.json")
DTYPES = ["float16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool"]
SELF = {"f": [-1.5, 0.0, 2.0], "i": [-2, 0, 3], "u": [0, 1, 3], "b": [False, True, True]}
OTHER = {"f": [0.5, 2.0, 1.0], "i": [2, 1, 3], "u": [2, 1, 3], "b": [True, False, True]}
OTHERS = [f"t:{d}" for d in DTYPES] + ["int", "float", "bool"]
SCALARS = {"int": 2, "float": 0.5, "bool": True}


def _first(o):
    return o[0] if not isinstance(o, (int, float)) else o


BINARY = {
    "add_": lambda s, o: s.add_(o),
    "sub_": lambda s, o: s.sub_(o),
    "mul_": lambda s, o: s.mul_(o),
    "div_": lambda s, o: s.div_(o),
    "pow_": lambda s, o: s.pow_(o),
    "clamp_min": lambda s, o: s.clamp_(min=o),
    "clamp_max": lambda s, o: s.clamp_(max=o),
    "copy_": lambda s, o: s.copy_(o),
    "fill_": lambda s, o: s.fill_(_first(o)),
    "setitem": lambda s, o: s.__setitem__(slice(None), o),
    "setitem_int": lambda s, o: s.__setitem__(1, _first(o)),
    "__iadd__": lambda s, o: s.__iadd__(o),
    "__isub__": lambda s, o: s.__isub__(o),
    "__imul__": lambda s, o: s.__imul__(o),
    "__itruediv__": lambda s, o: s.__itruediv__(o),
    "__ipow__": lambda s, o: s.__ipow__(o),
}
UNARY = {"neg_": lambda s: s.neg_(), "relu_": lambda s: s.relu_(),
         "exp_": lambda s: s.exp_(), "zero_": lambda s: s.zero_()}
CAST = re.compile(r"result type (\w+) can't be cast to the desired output type ([\w ]+)$")


def _kind(d: str) -> str:
    return "b" if d == "bool" else "u" if d == "uint8" else "i" if d.startswith("int") else "f"


def _tensor(lib, d: str, values: list):
    return lib.tensor(values, dtype=getattr(lib, d))


def _operand(lib, other: str):
    if other.startswith("t:"):
        d = other[2:]
        return _tensor(lib, d, OTHER[_kind(d)])
    if other == "int" or other == "float" or other == "bool":
        return SCALARS[other]
    raise ValueError(other)


def keys() -> list:
    out = [f"{op}|{d}|{o}" for op in BINARY for d in DTYPES for o in OTHERS]
    return out + [f"{op}|{d}|" for op in UNARY for d in DTYPES]


def outcome(lib, key: str) -> list:
    """``["ok", dtype name, values]``, ``["cast"]`` (PyTorch's casting error) or
    ``["error", exception class name]`` for what ``lib`` does on case ``key``."""
    op, d, other = key.split("|")
    s = _tensor(lib, d, SELF[_kind(d)])
    before = s.tolist()
    try:
        if op in UNARY:
            res = UNARY[op](s)
        else:
            res = BINARY[op](s, _operand(lib, other))
    except Exception as e:      # noqa: BLE001 -- the outcome is what we compare
        if s.tolist() != before:
            return ["error-after-write", type(e).__name__]
        if isinstance(e, RuntimeError) and CAST.search(str(e)):
            return ["cast"]
        return ["error", type(e).__name__]
    if op not in ("setitem", "setitem_int") and res is not s:
        return ["not-in-place"]
    return ["ok", str(s.dtype).split(".")[-1], [float(v) if not isinstance(v, bool) else v
                                                for v in s.tolist()]]


def _same(ours: list, ref: list) -> bool:
    if ref[0] != "ok":
        # PyTorch raises NotImplementedError for a few bool ops (a RuntimeError subclass)
        return ours[0] == ref[0] and (ref[0] == "cast" or ours[1] in (ref[1], "RuntimeError"))
    if ours[0] != "ok" or ours[1] != ref[1]:
        return False
    return all(a == b or (isinstance(a, float) and math.isclose(a, b, rel_tol=1e-6))
               or (a != a and b != b) for a, b in zip(ours[2], ref[2]))


def _table() -> dict:
    return json.loads(TABLE_PATH.read_text())


def _mismatches(ref: dict, keys_) -> list:
    import eager
    bad = []
    for key in keys_:
        ours = outcome(eager, key)
        if not _same(ours, ref[key]):
            bad.append(f"{key}: PyTorch {ref[key]}, eager {ours}")
    return bad


@pytest.mark.parametrize("op", list(BINARY) + list(UNARY))
def test_inplace_matches_pytorch_table(op):
    ref = _table()
    bad = _mismatches(ref, [k for k in keys() if k.split("|")[0] == op])
    assert not bad, "\n".join(bad)


def test_table_covers_every_case():
    ref = _table()
    assert sorted(ref) == sorted(keys())
    kinds = {v[0] for v in ref.values()}
    assert kinds == {"ok", "cast", "error"}


def test_inplace_matches_live_pytorch():
    torch = pytest.importorskip("torch", reason="PyTorch is not a dependency; this compares "
                                                "live only where it happens to be installed")
    ref = {k: outcome(torch, k) for k in keys()}
    assert not _mismatches(ref, keys())


def test_the_seeds_update_with_an_int_weight_raises():
    import eager
    w = eager.arange(3)
    g = eager.ones(3)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                                           "output type Long"):
        w -= 0.5 * g
    assert w.tolist() == [0, 1, 2]          # nothing was written
    with pytest.raises(RuntimeError, match="result type Float can't be cast"):
        w.clamp_(min=0.5)
    with pytest.raises(RuntimeError, match="result type Float can't be cast"):
        w.div_(2)


def test_the_rule_is_one_function():
    from eager import _dtype as D
    f32, i64, i32, u8, b = (np.dtype(n) for n in ("float32", "int64", "int32", "uint8", "bool"))
    assert D.can_cast(np.dtype("float64"), f32) and D.can_cast(i64, i32)
    assert D.can_cast(np.dtype("int16"), u8) and D.can_cast(b, f32)
    assert not D.can_cast(f32, i64) and not D.can_cast(i64, b) and not D.can_cast(f32, b)
    D.check_inplace_result(i64, u8)
    with pytest.raises(RuntimeError, match="^result type Double can't be cast to the desired "
                                           "output type Bool$"):
        D.check_inplace_result(np.dtype("float64"), b)


def test_cast_rule_with_grad_recording():
    import eager
    x = eager.zeros(3, dtype=eager.int64)
    y = eager.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="result type Float can't be cast"):
        x.add_(y)
    assert x.tolist() == [0, 0, 0] and x.grad_fn is None
    # a lower float width is fine and keeps the history
    leaf = eager.ones(3, dtype=eager.float16, requires_grad=True)
    h = leaf * 1
    w = eager.full((3,), 2.0, dtype=eager.float64, requires_grad=True)
    h.mul_(w)
    assert h.dtype == eager.float16 and type(h.grad_fn).__name__ == "MulBackward0"
    h.sum().backward()
    assert leaf.grad.tolist() == [2.0, 2.0, 2.0] and w.grad.tolist() == [1.0, 1.0, 1.0]


def test_fast_path_failures_give_pytorch_errors_not_attribute_errors():
    import eager
    for dt in (eager.int8, eager.uint8, eager.int32, eager.int64, eager.bool):
        x = eager.zeros(2, dtype=dt)
        for other in (0.5, eager.ones(2)):
            for method in ("add_", "sub_", "mul_"):
                if dt is eager.bool and method == "sub_":
                    continue        # bool subtraction has its own error
                with pytest.raises(RuntimeError, match="can't be cast"):
                    getattr(x, method)(other)


if __name__ == "__main__":      # regenerate the table: run with a Python that has torch
    import torch
    table = {k: outcome(torch, k) for k in keys()}
    with open(TABLE_PATH, "w") as f:
        f.write("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}"
                                   for k, v in table.items()) + "\n}\n")
    print(f"wrote {len(table)} cases to {TABLE_PATH}", file=sys.stderr)
