"""One LLVM function per distinct kernel body (compile time grows with distinct kernels).

A loop written in Python and unrolled by tracing repeats the same kernels once per
iteration: the same ops on the same shapes, only on other buffers.  Every kernel
takes its buffers as pointer arguments (graphc.backend.lower), so two kernels
whose function bodies are the same text up to the names of their local values
(arguments, instructions, blocks) and their comments compute the same thing: the
lowerer keeps the first and calls it for both.  LLVM then optimizes and generates
code once per *distinct* kernel, which bounds the most expensive stages by the
number of distinct kernels instead of the number of kernels.

The test is on the text itself, not on a summary of the kernel, so it cannot merge
two kernels that differ in anything the code depends on (a shape, an offset, a
constant, a global, an attribute): only local names and comments are ignored.
"""

from __future__ import annotations

import re

from llvmlite import ir

# a comment line (llvmlite prints instructions, comments too, indented by two spaces)
_COMMENT = re.compile(r"(?m)^  ;.*\n")
# what names a local value: an instruction's result, or a block's label line
_DEFINES = re.compile(r'(?m)^  %"([^"]*)" = |^"?([^"\s:;%@]+)"?:$')
# a use of a local name (llvmlite quotes every local name it prints), or a label line
_TOKEN = re.compile(r'%"([^"]*)"|(?m:^"?([^"\s:;%@]+)"?:$)')
_ARG = re.compile(r'%"([^"]*)"')

# kernels and distinct kernel functions of the last share_identical call (tests read it)
last_stats: dict = {}


def canonical_text(fn: ir.Function) -> str:
    """``fn``'s IR text with comments dropped, its own name replaced by ``@F`` and every
    local name (argument, instruction result, block label) renumbered in order of first
    appearance: two functions have the same canonical text exactly when one is the
    other renamed.  Names that are not ``fn``'s own locals are kept as they are."""
    text = _COMMENT.sub("", str(fn))
    head, _, body = text.partition("\n")
    head = head.replace(fn.get_reference(), "@F", 1)
    local = set(_ARG.findall(head))
    for value, label in _DEFINES.findall(body):
        local.add(value or label)
    canon: dict = {}

    def sub(m: "re.Match") -> str:
        value, label = m.group(1), m.group(2)
        name = value if label is None else label
        if name not in local:
            return m.group(0)
        k = canon.get(name)
        if k is None:
            k = canon[name] = f"v{len(canon)}"
        return f'%"{k}"' if label is None else f"{k}:"

    return _TOKEN.sub(sub, head + "\n" + body)


def share_identical(module: ir.Module, fns: list) -> list:
    """``fns`` with each function replaced by the first one of the same canonical text;
    the replaced functions are removed from ``module`` (nothing calls them yet).  Order
    and the choice of the kept function are deterministic (first in ``fns``)."""
    seen: dict = {}
    out = []
    removed = 0
    for fn in fns:
        key = canonical_text(fn)
        first = seen.get(key)
        if first is None:
            seen[key] = fn
            out.append(fn)
            continue
        del module.globals[fn.name]
        removed += 1
        out.append(first)
    last_stats.clear()
    last_stats.update(kernels=len(fns), distinct=len(seen), removed=removed)
    return out


__all__ = ["canonical_text", "share_identical"]
