"""The lock that makes ``fork`` wait for graphc's lazy imports, and graphc's one set of
fork hooks that wait for work in flight.

graphc loads its compiler (the passes, capture, and the native backend with llvmlite)
on the first compile, not at ``import graphc``.  A ``fork`` while another thread is
inside one of those imports would leave the child waiting forever: Python's import lock
of that module is then held by a thread the child does not have.  graphc.api imports
them under :data:`IMPORT_LOCK`, and ``fork`` takes it first, so the child sees each
module either not imported or complete.

A module loaded lazily that must also make ``fork`` wait (graphc.runtime.llvm_engine:
no call into LLVM in flight) registers with :func:`at_fork` instead of
``os.register_at_fork``.  Python copies its list of ``before`` hooks when a fork starts,
so a hook registered by an import that the fork was waiting for would run its
``after_in_parent`` half without its ``before`` half (releasing a lock it never took)
and the fork would not have waited for it.  Here the participants are read only once
:data:`IMPORT_LOCK` is held, and exactly those that were held are released.
"""

from __future__ import annotations

import os
import threading
from typing import Callable, NamedTuple

#: Held around graphc's lazy imports and, by ``fork``, across the fork.
IMPORT_LOCK = threading.RLock()


class _Participant(NamedTuple):
    before: Callable[[], None]
    after_in_parent: Callable[[], None]
    after_in_child: Callable[[], None]


_PARTICIPANTS: list[_Participant] = []
_held: list[_Participant] = []


def at_fork(
    *,
    before: Callable[[], None],
    after_in_parent: Callable[[], None],
    after_in_child: Callable[[], None],
) -> None:
    """Register hooks that ``fork`` runs after taking :data:`IMPORT_LOCK` (``before``, in
    registration order), and undoes in reverse order in the parent.  Every registered
    ``after_in_child`` runs in the child (it must be safe even if ``before`` did not run
    for that fork: it only makes new locks)."""
    _PARTICIPANTS.append(_Participant(before, after_in_parent, after_in_child))


def _hold_for_fork() -> None:
    global _held
    IMPORT_LOCK.acquire()
    held: list[_Participant] = []
    try:
        for p in list(_PARTICIPANTS):
            p.before()
            held.append(p)
    except BaseException:
        for p in reversed(held):
            p.after_in_parent()
        IMPORT_LOCK.release()
        raise
    _held = held


def _release_after_fork() -> None:
    global _held
    held, _held = _held, []
    for p in reversed(held):
        p.after_in_parent()
    IMPORT_LOCK.release()


def _new_lock_in_child() -> None:
    global IMPORT_LOCK, _held
    IMPORT_LOCK = threading.RLock()
    _held = []
    for p in list(_PARTICIPANTS):
        p.after_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_hold_for_fork,
        after_in_parent=_release_after_fork,
        after_in_child=_new_lock_in_child,
    )
