"""``eager.save`` / ``eager.load``: a safe checkpoint format (never pickle).

A checkpoint is a zip archive holding ``eager_save/format.json`` (the structure of the
saved object as tagged JSON) and one ``.npy`` file per tensor (numpy's format, read with
``allow_pickle=False``).  What can be saved: tensors (their values, dtype, shape,
``requires_grad`` and whether they are ``nn.Parameter``s; a tensor saved twice in one
object loads as one tensor), numpy arrays, dicts (any of the keys below, insertion order
kept; ``OrderedDict`` and ``Counter`` stay themselves), lists, tuples, ``str``, ``int``,
``float`` (also nan/inf), ``bool``, ``None``, eager dtypes, devices and ``Size``: so
``model.state_dict()``, ``optimizer.state_dict()``, schedulers' state dicts and the
usual ``{'epoch': ..., 'model': ..., 'optim': ...}`` checkpoints.  Loading never runs
code from the file, whatever ``weights_only`` says.
"""

from __future__ import annotations

import io
import json
import math
import os
import zipfile
from collections import Counter, OrderedDict
from typing import Any, Optional

import numpy as np

import eager._dtype as D
from .surface import Size as _Size
from .tensor import Tensor, check_device, device

FORMAT = "eager.save"
VERSION = 1
_ROOT = "eager_save/"
_STRUCT = _ROOT + "format.json"


class _Writer:
    def __init__(self) -> None:
        self.arrays: list = []
        self.meta: list = []
        self.seen: dict = {}

    def array(self, arr: np.ndarray, extra: dict) -> int:
        if not arr.dtype.isnative:  # stored (and loaded back) in the native byte order
            arr = arr.astype(arr.dtype.newbyteorder("="))
        if arr.dtype not in D.FROM_NP:
            raise TypeError(f"eager.save: cannot save a numpy array of dtype {arr.dtype}")
        self.arrays.append(arr)
        self.meta.append(dict(dtype=arr.dtype.name, shape=list(arr.shape), **extra))
        return len(self.arrays) - 1

    def encode(self, obj: Any) -> Any:
        # Iterative: (object, where the encoded node goes) pairs on a stack.
        out: list = [None]
        stack = [(obj, out, 0)]
        while stack:
            o, parent, key = stack.pop()
            node, children = self._node(o)
            parent[key] = node
            stack.extend(reversed(children))
        return out[0]

    def _node(self, o: Any) -> tuple:
        if o is None or isinstance(o, (str, bool)):
            return o, []
        if isinstance(o, (int, np.integer)) and not isinstance(o, np.bool_):
            return int(o), []
        if isinstance(o, np.bool_):
            return bool(o), []
        if isinstance(o, (float, np.floating)):
            f = float(o)
            return (f if math.isfinite(f) else {"$f": repr(f)}), []
        if isinstance(o, Tensor):
            idx = self.seen.get(id(o))
            if idx is None:
                from eager.nn.module import is_parameter

                extra = {"requires_grad": bool(o.requires_grad), "parameter": is_parameter(o)}
                idx = self.array(o._data, extra)
                self.seen[id(o)] = idx
            return {"$t": idx}, []
        if isinstance(o, np.ndarray):
            return {"$np": self.array(o, {})}, []
        if isinstance(o, D.dtype):
            return {"$dtype": o.name}, []
        if isinstance(o, device):
            return {"$device": str(o)}, []
        if isinstance(o, _Size):
            return {"$size": [int(s) for s in o]}, []
        if isinstance(o, (list, tuple)):
            if type(o) not in (list, tuple):
                raise TypeError(_unsupported(o))
            items: list = [None] * len(o)
            node = items if type(o) is list else {"$tuple": items}
            return node, [(v, items, i) for i, v in enumerate(o)]
        if isinstance(o, dict):
            tag = {OrderedDict: "$od", Counter: "$counter", dict: "$d"}.get(type(o))
            if tag is None:
                raise TypeError(_unsupported(o))
            pairs: list = [[None, None] for _ in o]
            children = []
            for i, (k, v) in enumerate(o.items()):
                children.append((k, pairs[i], 0))
                children.append((v, pairs[i], 1))
            return {tag: pairs}, children
        raise TypeError(_unsupported(o))


def _unsupported(o: Any) -> str:
    hint = ""
    if hasattr(o, "state_dict"):
        hint = " (save its state_dict() instead and load it into a new instance)"
    return (
        f"eager.save: cannot save an object of type {type(o).__name__}{hint}; the safe "
        "format holds tensors, numpy arrays, dicts, lists, tuples, str, int, float, bool "
        "and None"
    )


def save(
    obj: Any,
    f: Any,
    pickle_module: Any = None,
    pickle_protocol: int = 2,
    _use_new_zipfile_serialization: bool = True,
    _disable_byteorder_record: bool = False,
) -> None:
    """Write ``obj`` (tensors in nested dicts/lists/tuples, numbers, strings) to ``f``, a
    path or a binary file object, in eager's safe format (zip of JSON + .npy, no pickle)."""
    if pickle_module is not None:
        raise NotImplementedError("eager.save: pickle_module is not supported (no pickle)")
    w = _Writer()
    tree = w.encode(obj)
    struct = {"format": FORMAT, "version": VERSION, "tensors": w.meta, "tree": tree}
    text = json.dumps(struct, allow_nan=False, separators=(",", ":"))
    target = os.fspath(f) if isinstance(f, (str, os.PathLike)) else f
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr(_STRUCT, text)
        for i, arr in enumerate(w.arrays):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, arr, allow_pickle=False)
            z.writestr(f"{_ROOT}tensors/{i}.npy", buf.getvalue())


class _BadFile(Exception):
    pass


def _name(f: Any) -> str:
    if isinstance(f, (str, os.PathLike)):
        return os.fspath(f)  # type: ignore[return-value]
    return str(getattr(f, "name", f"<{type(f).__name__}>"))


def load(
    f: Any,
    map_location: Any = None,
    pickle_module: Any = None,
    *,
    weights_only: Optional[bool] = True,
    mmap: Optional[bool] = None,
    **pickle_load_args: Any,
) -> Any:
    """Read an object written by :func:`save` from a path or binary file object.

    Never unpickles (``weights_only`` is accepted for compatibility and changes nothing);
    a file that is not eager's format, or is corrupted or truncated, is a RuntimeError
    naming the file."""
    if pickle_module is not None:
        raise NotImplementedError("eager.load: pickle_module is not supported (no pickle)")
    if map_location is not None and not callable(map_location):
        locs = map_location.values() if isinstance(map_location, dict) else [map_location]
        for loc in locs:
            check_device(loc)
    name = _name(f)
    if isinstance(f, (str, os.PathLike)):
        with open(os.fspath(f), "rb") as fh:
            data = fh.read()
    else:
        data = f.read()
        if isinstance(data, str):
            raise TypeError(f"eager.load: {name} is opened in text mode; open it with 'rb'")
    try:
        return _load_bytes(data)
    except _BadFile as e:
        raise RuntimeError(f"eager.load: {name}: {e}") from None
    except (zipfile.BadZipFile, ValueError, KeyError, TypeError, EOFError, IndexError) as e:
        raise RuntimeError(
            f"eager.load: {name} is not a file written by eager.save, or it is corrupted "
            f"or truncated ({type(e).__name__}: {e})"
        ) from None


def _load_bytes(data: bytes) -> Any:
    if data[:1] == b"\x80":
        raise _BadFile(_TORCH_MSG)
    if not data.startswith(b"PK"):
        raise _BadFile(
            "not a file written by eager.save (it is not a zip archive; empty, truncated "
            "or another format)"
        )
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        names = z.namelist()
        if _STRUCT not in names:
            if any(n.endswith("data.pkl") for n in names):
                raise _BadFile(_TORCH_MSG)
            raise _BadFile(f"not a file written by eager.save (no {_STRUCT} inside)")
        struct = json.loads(z.read(_STRUCT).decode("utf-8"))
        if not isinstance(struct, dict) or struct.get("format") != FORMAT:
            raise _BadFile("not a file written by eager.save (unknown format tag)")
        if struct.get("version") != VERSION:
            raise _BadFile(
                f"written by a newer eager.save (format version {struct.get('version')})"
            )
        tensors = []
        for i, meta in enumerate(struct["tensors"]):
            with z.open(f"{_ROOT}tensors/{i}.npy") as fh:
                arr = np.lib.format.read_array(io.BytesIO(fh.read()), allow_pickle=False)
            if arr.dtype.name != meta["dtype"] or list(arr.shape) != meta["shape"]:
                raise _BadFile(f"tensor {i} does not match its recorded dtype/shape")
            tensors.append((arr, meta))
    return _decode(struct["tree"], _materialize(tensors))


_TORCH_MSG = (
    "this is a PyTorch checkpoint (torch.save's pickle-based format); eager never "
    "unpickles. Load it with PyTorch and re-save the tensors, e.g. "
    "eager.save({k: eager.tensor(v.numpy()) for k, v in sd.items()}, path)"
)


def _materialize(tensors: list) -> list:
    out = []
    for arr, meta in tensors:
        if meta.get("requires_grad") is None:  # a numpy array
            out.append(arr)
            continue
        t = Tensor._make(arr)
        if meta.get("parameter"):
            from eager.nn.module import Parameter

            t = Parameter(t, requires_grad=bool(meta["requires_grad"]))
        elif meta["requires_grad"]:
            t.requires_grad_(True)
        out.append(t)
    return out


def _decode(tree: Any, tensors: list) -> Any:
    out: list = [None]
    # (node, container, key): containers are filled after their children (post-order) so
    # that dict keys (which may be tuples) are complete before they are hashed.
    stack: list = [(tree, out, 0, False)]
    while stack:
        node, parent, key, done = stack.pop()
        if done:
            parent[key] = _build(node)
            continue
        if isinstance(node, list):
            holder: dict = {"kind": "list", "items": [None] * len(node)}
            stack.append((holder, parent, key, True))
            stack.extend((v, holder["items"], i, False) for i, v in enumerate(node))
            continue
        if not isinstance(node, dict):
            parent[key] = node
            continue
        if len(node) != 1:
            raise ValueError("malformed structure node")
        ((tag, val),) = node.items()
        if tag == "$t" or tag == "$np":
            parent[key] = tensors[int(val)]
        elif tag == "$f":
            parent[key] = float(val)
        elif tag == "$dtype":
            parent[key] = D._by_name(val)
        elif tag == "$device":
            parent[key] = device(val)
        elif tag == "$size":
            parent[key] = _Size(tuple(int(v) for v in val))
        elif tag == "$tuple":
            holder = {"kind": "tuple", "items": [None] * len(val)}
            stack.append((holder, parent, key, True))
            stack.extend((v, holder["items"], i, False) for i, v in enumerate(val))
        elif tag in ("$d", "$od", "$counter"):
            holder = {"kind": tag, "pairs": [[None, None] for _ in val]}
            stack.append((holder, parent, key, True))
            for i, pair in enumerate(val):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise ValueError("malformed dict entry")
                stack.append((pair[0], holder["pairs"][i], 0, False))
                stack.append((pair[1], holder["pairs"][i], 1, False))
        else:
            raise ValueError(f"unknown structure tag {tag!r}")
    return out[0]


def _build(holder: dict) -> Any:
    kind = holder["kind"]
    if kind == "list":
        return holder["items"]
    if kind == "tuple":
        return tuple(holder["items"])
    cls = {"$d": dict, "$od": OrderedDict, "$counter": Counter}[kind]
    out = cls()
    for k, v in holder["pairs"]:
        out[k] = v
    return out
