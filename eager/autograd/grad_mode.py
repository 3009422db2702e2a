"""Grad mode: a thread-local switch read by every op (as in PyTorch)."""

from __future__ import annotations

import functools
import threading


class _State(threading.local):
    enabled = True


STATE = _State()


def is_grad_enabled() -> bool:
    return STATE.enabled


class _Mode:
    """Context manager *and* decorator that sets grad mode for its extent."""

    _value = True

    def __enter__(self):
        self._prev = STATE.enabled
        STATE.enabled = self._value
        return self

    def __exit__(self, *exc):
        STATE.enabled = self._prev
        return False

    def __call__(self, fn):
        mode = type(self)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with mode():
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_Mode):
    """Ops inside do not record a tape: for inference and in-place weight updates."""

    _value = False


class enable_grad(_Mode):
    """Turn recording back on inside a ``no_grad`` block."""

    _value = True


class inference_mode(_Mode):
    """Alias of ``no_grad`` (eager has no separate inference tensors)."""

    _value = False

    def __init__(self, mode: bool = True) -> None:
        self._value = not mode


class set_grad_enabled:
    """``set_grad_enabled(False)`` as a call, a context manager or a decorator."""

    def __init__(self, mode: bool) -> None:
        self._prev = STATE.enabled
        self._mode = bool(mode)
        STATE.enabled = self._mode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        STATE.enabled = self._prev
        return False

    def __call__(self, fn):
        STATE.enabled = self._prev
        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            prev = STATE.enabled
            STATE.enabled = mode
            try:
                return fn(*args, **kwargs)
            finally:
                STATE.enabled = prev

        return wrapper
