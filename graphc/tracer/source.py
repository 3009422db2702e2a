"""Where in the user's code a traced op was written: the ``file.py:line`` that error
messages and graph nodes carry."""

from __future__ import annotations

import os
import sys

import eager

# eager/ and graphc/ (the package this one lies in), whose frames are never the user's
_PKG_DIRS = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep
    for m in (eager, sys.modules[__name__.split(".", 1)[0]])
)


def user_src(skip: int = 1) -> str:
    """``file.py:line`` of the innermost frame outside eager/ and graphc/."""
    f = sys._getframe(skip)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_PKG_DIRS) and not fn.startswith("<frozen"):
            return f"{os.path.basename(fn)}:{f.f_lineno}"
        f = f.f_back
    return ""
