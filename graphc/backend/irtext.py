"""The one way a user-controlled string reaches LLVM IR text.

Graph names, function names, file paths and source lines end up in the
generated module as comments (``; graph f: ...``, ``; %3 = add(...) (from
f.py:12)``) and as its ``; ModuleID``.  LLVM ends a comment at ``\\n`` *or*
``\\r`` and parses what follows as IR, and llvmlite hands the text to LLVM as a
C string, so a NUL cuts it short: an unescaped ``"a\\rcall @system(...)"`` in a
source location is code.  Every such string goes through :func:`escape`, which
keeps printable ASCII and spells everything else as a Python-style escape, so
the result is one inert line.  :func:`check` is the backstop the JIT runs on
every module text before LLVM parses it: generated IR is printable ASCII, tabs
and newlines, and anything else means a string bypassed :func:`escape`.
"""

from __future__ import annotations

import re

from llvmlite import ir

# printable ASCII except the backslash (the escape character itself) and the double
# quote (the module name is printed between quotes)
_KEEP = re.compile(r"[ !#-\[\]-~]*")
_UNSAFE_IR = re.compile(r"[^\t\n -~]")


def escape(text: object) -> str:
    """``text`` as one line of printable ASCII: other characters become ``\\xNN``,
    ``\\uNNNN`` or ``\\UNNNNNNNN``, and ``\\`` and ``"`` become ``\\\\`` and ``\\x22``.

    Safe inside an LLVM comment, the module name or a quoted name.
    """
    s = str(text)
    if _KEEP.fullmatch(s):
        return s
    out = []
    for ch in s:
        o = ord(ch)
        if ch == "\\":
            out.append("\\\\")
        elif 0x20 <= o < 0x7F and ch != '"':
            out.append(ch)
        elif o < 0x100:
            out.append(f"\\x{o:02x}")
        elif o < 0x10000:
            out.append(f"\\u{o:04x}")
        else:
            out.append(f"\\U{o:08x}")
    return "".join(out)


def comment(b: ir.IRBuilder, text: object) -> None:
    """Emit ``; text`` at the builder's position, escaped (see :func:`escape`)."""
    b.comment(escape(text))


def module(name: object) -> ir.Module:
    """A new llvmlite module whose ``; ModuleID`` line is ``name``, escaped."""
    return ir.Module(name=escape(name))


def check(text: str) -> None:
    """Raise ValueError naming the line if ``text`` holds a character generated IR never
    contains (a control character other than tab and newline, or non-ASCII)."""
    m = _UNSAFE_IR.search(text)
    if m is not None:
        line = text.count("\n", 0, m.start()) + 1
        raise ValueError(
            f"character {m.group()!r} on line {line} of the LLVM IR text: a "
            "string reached the IR without graphc.backend.irtext.escape"
        )
