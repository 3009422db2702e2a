"""One-line text forms shared by the IR's printer, verifier and error messages: short
dtype names, ``f32[2,3]`` types, escaped names and source lines, and a node described
for an error message.  The bottom of the ``graphc.ir`` package: numpy only."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

_SHORT = {
    "float32": "f32",
    "float64": "f64",
    "float16": "f16",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "bool",
}


def short_dtype(dtype: Any) -> str:
    name = np.dtype(dtype).name
    return _SHORT.get(name, name)


def type_str(shape: Sequence[int], dtype: Any) -> str:
    return f"{short_dtype(dtype)}[{','.join(str(d) for d in shape)}]"


def printable(text: object) -> str:
    """A name or source location as one visible line: control, format and separator
    characters (``\\r``, ``\\x1b``, ``\\u2028``...) are spelled as escapes, so a
    hostile string cannot rewrite or hide lines of the printed IR, an error message or a
    terminal.  Printable Unicode (a non-ASCII file name) is kept."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(
        ch
        if ch.isprintable()
        else (
            f"\\x{ord(ch):02x}"
            if ord(ch) < 0x100
            else f"\\u{ord(ch):04x}"
            if ord(ch) < 0x10000
            else f"\\U{ord(ch):08x}"
        )
        for ch in s
    )


def describe(g, nid: int) -> str:
    """One-line description of a node for error messages."""
    d = g.nx.nodes[nid]
    ops = ", ".join(f"%{o}" for o in d["operands"])
    where = f" (from {printable(d['src'])})" if d.get("src") else ""
    return f"%{nid} = {d['op']}({ops}) : {type_str(d['shape'], d['dtype'])}{where}"
