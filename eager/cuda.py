"""eager.cuda: the ``torch.cuda`` boilerplate real scripts call, answering "no GPU".

``is_available()`` is False and ``device_count()`` is 0, so the usual
``device = 'cuda' if torch.cuda.is_available() else 'cpu'`` picks the CPU; seeding and
cache calls are no-ops (as PyTorch's are without a GPU); anything that needs a GPU
raises a clear error.
"""

from __future__ import annotations

from typing import Any

from .tensor import NO_GPU


def _no_gpu(what: str) -> RuntimeError:
    return RuntimeError(f"{NO_GPU}: eager.cuda.{what}() needs a GPU")


def is_available() -> bool:
    """False: eager has no GPU."""
    return False


def device_count() -> int:
    """0: eager has no GPU."""
    return 0


def is_initialized() -> bool:
    """False: there is no CUDA state to initialise."""
    return False


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """False."""
    return False


def manual_seed(seed: int) -> None:
    """No-op (PyTorch ignores it silently without a GPU)."""


def manual_seed_all(seed: int) -> None:
    """No-op (PyTorch ignores it silently without a GPU)."""


def seed() -> None:
    """No-op."""


def seed_all() -> None:
    """No-op."""


def empty_cache() -> None:
    """No-op: there is no GPU memory cache."""


def synchronize(device: Any = None) -> None:
    """Refused: there is no GPU to wait for."""
    raise _no_gpu("synchronize")


def current_device() -> int:
    """Refused: there is no current GPU."""
    raise _no_gpu("current_device")


def set_device(device: Any) -> None:
    """Refused: there is no GPU to select."""
    raise _no_gpu("set_device")


def get_device_name(device: Any = None) -> str:
    """Refused: there is no GPU to name."""
    raise _no_gpu("get_device_name")


def get_device_properties(device: Any = None) -> Any:
    """Refused: there is no GPU."""
    raise _no_gpu("get_device_properties")


def memory_allocated(device: Any = None) -> int:
    """0: no GPU memory is in use."""
    return 0


def max_memory_allocated(device: Any = None) -> int:
    """0: no GPU memory is in use."""
    return 0


def reset_peak_memory_stats(device: Any = None) -> None:
    """No-op."""
