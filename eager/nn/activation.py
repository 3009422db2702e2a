"""nn: activation modules (GELU, SiLU, LeakyReLU, Softplus, ELU...)."""

from __future__ import annotations

__all__: list = []
