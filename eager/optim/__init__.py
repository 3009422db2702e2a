"""eager.optim: the optimizers (``SGD``, ``Adam``, ``AdamW``, ``RMSprop``, ``Adagrad``) and
``lr_scheduler``, with PyTorch's update formulas, param groups and state dicts."""

from __future__ import annotations

from .optimizer import SGD, Adagrad, Adam, AdamW, Optimizer, RMSprop

import eager.optim.lr_scheduler as lr_scheduler  # noqa: E402

# Pickles name a class by module and name: keep the name eager.optim.SGD that pickles of
# the one-file eager/optim.py used (and that users import).
for _cls in (Optimizer, SGD, Adam, AdamW, RMSprop, Adagrad):
    _cls.__module__ = __name__

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "lr_scheduler"]
