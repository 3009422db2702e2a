"""Grad mode: a thread-local switch read by every op (as in PyTorch)."""

from __future__ import annotations

import functools
import threading
from typing import Optional


class _State(threading.local):
    enabled = True
    inference = False


STATE = _State()


def is_grad_enabled() -> bool:
    return STATE.enabled


def is_inference_mode_enabled() -> bool:
    """Whether an ``inference_mode()`` block is active on this thread."""
    return STATE.inference


class _Mode:
    """Context manager *and* decorator that sets grad mode for its extent
    (``@no_grad()`` and, as in PyTorch, ``@no_grad`` without parentheses)."""

    _value = True
    _inference: Optional[bool] = None  # inference_mode sets it

    def __new__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return cls()(args[0])  # used as a bare decorator
        return super().__new__(cls)

    def __enter__(self):
        self._prev = (STATE.enabled, STATE.inference)
        STATE.enabled = self._value
        if self._inference is not None:
            STATE.inference = self._inference
        return self

    def __exit__(self, *exc):
        STATE.enabled, STATE.inference = self._prev
        return False

    def _clone(self) -> "_Mode":
        new = object.__new__(type(self))
        new.__dict__.update({k: v for k, v in self.__dict__.items() if k != "_prev"})
        return new

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self._clone():
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_Mode):
    """Ops inside do not record a tape: for inference and in-place weight updates."""

    _value = False


class enable_grad(_Mode):
    """Turn recording back on inside a ``no_grad`` block."""

    _value = True


class inference_mode(_Mode):
    """``no_grad`` that also sets ``is_inference_mode_enabled()`` (eager has no
    separate inference tensors); ``inference_mode(False)`` turns both back on."""

    _value = False
    _inference = True

    def __init__(self, mode: bool = True) -> None:
        self._value = False if mode else True
        self._inference = True if mode else False


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
