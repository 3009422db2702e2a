"""The ``reduction`` argument of the losses, and the pre-1.0 flags that mean one."""

from __future__ import annotations

import warnings
from typing import Optional

_REDUCTIONS = ("none", "mean", "sum")


def legacy_reduction(size_average: Optional[bool], reduce: Optional[bool]) -> str:
    """Map the pre-1.0 ``size_average``/``reduce`` flags to ``reduction`` (with PyTorch's warning).

    Older tutorials write ``MSELoss(size_average=False)``, which means ``reduction='sum'``.
    """
    if size_average is None:
        size_average = True
    if reduce is None:
        reduce = True
    if size_average and reduce:
        ret = "mean"
    elif reduce:
        ret = "sum"
    else:
        ret = "none"
    warnings.warn(
        f"size_average and reduce args will be deprecated, please use reduction='{ret}' instead.",
        UserWarning,
        stacklevel=3,
    )
    return ret


def check_reduction(reduction: str) -> str:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction
