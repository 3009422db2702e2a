"""The lock that makes ``fork`` wait for graphc's lazy imports.

graphc loads its compiler (the passes, capture, and the native backend with llvmlite)
on the first compile, not at ``import graphc``.  A ``fork`` while another thread is
inside one of those imports would leave the child waiting forever: Python's import lock
of that module is then held by a thread the child does not have.  graphc.api imports
them under :data:`IMPORT_LOCK`, and ``fork`` takes it first (this module's hook, and
graphc.runtime.llvm_engine's, which takes it before the LLVM lock: the one order every
thread uses), so the child sees each module either not imported or complete.
"""

from __future__ import annotations

import os
import threading

#: Held around graphc's lazy imports and, by ``fork``, across the fork.
IMPORT_LOCK = threading.RLock()


def _hold_for_fork() -> None:
    IMPORT_LOCK.acquire()


def _release_after_fork() -> None:
    IMPORT_LOCK.release()


def _new_lock_in_child() -> None:
    global IMPORT_LOCK
    IMPORT_LOCK = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_hold_for_fork,
        after_in_parent=_release_after_fork,
        after_in_child=_new_lock_in_child,
    )
