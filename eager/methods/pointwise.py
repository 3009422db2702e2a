"""Tensor methods: elementwise math and activations (erf, log1p, gelu, floor, remainder, isnan...).

A mixin of :class:`eager.surface.TensorOps` (see eager/methods/__init__.py).  The math
functions with numerics of their own are primitives (eager/ops/pointwise.py); isnan,
isinf, isfinite, nan_to_num, frac and reciprocal are composites.
"""

from __future__ import annotations

import numpy as np

import eager._operands as O  # by full name: "from .. import" is an edge to eager


def _unary(op: str, gname: str, doc: str):
    def method(self):
        return self._op(op, gname)

    method.__name__ = op
    method.__doc__ = doc
    return method


class PointwiseMethods:
    __slots__ = ()

    log1p = _unary("log1p", "Log1PBackward0", "log(1 + x), accurate for small x.")
    expm1 = _unary("expm1", "Expm1Backward0", "exp(x) - 1, accurate for small x.")
    erf = _unary("erf", "ErfBackward0", "The error function.")
    tan = _unary("tan", "TanBackward0", "Tangent.")
    asin = _unary("asin", "AsinBackward0", "Inverse sine (NaN outside [-1, 1]).")
    acos = _unary("acos", "AcosBackward0", "Inverse cosine (NaN outside [-1, 1]).")
    atan = _unary("atan", "AtanBackward0", "Inverse tangent.")
    sinh = _unary("sinh", "SinhBackward0", "Hyperbolic sine.")
    cosh = _unary("cosh", "CoshBackward0", "Hyperbolic cosine.")
    asinh = _unary("asinh", "AsinhBackward0", "Inverse hyperbolic sine.")
    acosh = _unary("acosh", "AcoshBackward0", "Inverse hyperbolic cosine (NaN below 1).")
    atanh = _unary("atanh", "AtanhBackward0", "Inverse hyperbolic tangent.")
    log2 = _unary("log2", "Log2Backward0", "Base-2 logarithm.")
    log10 = _unary("log10", "Log10Backward0", "Base-10 logarithm.")
    exp2 = _unary("exp2", "Exp2Backward0", "2 ** x.")
    floor = _unary("floor", "FloorBackward0", "Round down; integers unchanged; gradient 0.")
    ceil = _unary("ceil", "CeilBackward0", "Round up; integers unchanged; gradient 0.")
    trunc = _unary("trunc", "TruncBackward0", "Round toward zero; integers unchanged.")
    fix = trunc
    arcsin, arccos, arctan = asin, acos, atan
    arcsinh, arccosh, arctanh = asinh, acosh, atanh

    def round(self, decimals=0):
        """Round half to even; ``decimals`` rounds to that many decimal digits."""
        if decimals == 0:
            return self._op("round", "RoundBackward0")
        if self._npdtype.kind != "f":
            raise NotImplementedError("round with decimals is not implemented for integers")
        scale = 10.0 ** abs(int(decimals))
        if decimals > 0:
            return (self * scale)._op("round", "RoundBackward1") / scale
        return (self / scale)._op("round", "RoundBackward1") * scale

    def frac(self):
        """x - trunc(x): the fractional part, with the sign of x."""
        if self._npdtype.kind != "f":
            name = {"b": "Bool", "i": "Long", "u": "Byte"}.get(self._npdtype.kind, "Long")
            raise NotImplementedError(f"\"frac_cpu\" not implemented for '{name}'")
        return self - self.trunc()

    def reciprocal(self):
        """1 / x (integers give float32)."""
        return 1.0 / self

    # --- division with rounding -------------------------------------------------------------
    def floor_divide(self, other):
        """x // y rounded to the floor, as Python's ``//`` (PyTorch's floor_divide)."""
        return self._binary("floor_divide", other, "FloorDivideBackward0")

    def remainder(self, other):
        """Python's ``%``: the result has the sign of the divisor."""
        return self._binary("remainder", other, "RemainderBackward1")

    def fmod(self, other):
        """C's fmod: the result has the sign of the dividend."""
        return self._binary("fmod", other, "FmodBackward1")

    def __floordiv__(self, other):
        return self.floor_divide(other)

    def __rfloordiv__(self, other):
        return self._rbinary("floor_divide", other, "FloorDivideBackward0")

    def __mod__(self, other):
        return self.remainder(other)

    def __rmod__(self, other):
        return self._rbinary("remainder", other, "RemainderBackward1")

    def atan2(self, other):
        """atan2(self, other): the angle of the point (other, self), in (-pi, pi]."""
        return self._binary("atan2", other, "Atan2Backward0")

    arctan2 = atan2

    # --- classification ----------------------------------------------------------------------
    def isnan(self):
        """True where the element is NaN."""
        return self != self

    def isinf(self):
        """True where the element is +inf or -inf."""
        if self._npdtype.kind != "f":
            return self != self
        return self.abs() == float("inf")

    def isposinf(self):
        """True where the element is +inf."""
        if self._npdtype.kind != "f":
            return self != self
        return self == float("inf")

    def isneginf(self):
        """True where the element is -inf."""
        if self._npdtype.kind != "f":
            return self != self
        return self == float("-inf")

    def isfinite(self):
        """True where the element is neither NaN nor infinite."""
        if self._npdtype.kind != "f":
            return self == self
        return self.abs() < float("inf")

    def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
        """NaN, +inf and -inf replaced (by default with 0 and the dtype's largest and
        smallest finite values)."""
        if self._npdtype.kind != "f":
            return self.clone()
        info = np.finfo(self._npdtype)
        hi = float(info.max) if posinf is None else float(posinf)
        lo = float(info.min) if neginf is None else float(neginf)
        inf = float("inf")
        out = O.where(self == inf, hi, O.where(self == -inf, lo, self))
        return O.where(self != self, float(nan), out)

    def clamp_min(self, min):
        """``clamp(min=min)``: values below ``min`` raised to it."""
        return self.clamp(min=min)

    def clamp_max(self, max):
        """``clamp(max=max)``: values above ``max`` lowered to it."""
        return self.clamp(max=max)


#: module-level functions that are not methods, by name
FUNCTIONS: dict = {}
#: methods that are also module-level functions (``eager.name(x, ...)``)
METHOD_FUNCTIONS: list = [
    "log1p", "expm1", "erf", "tan", "asin", "acos", "atan", "arcsin", "arccos", "arctan",
    "sinh", "cosh", "asinh", "acosh", "atanh", "arcsinh", "arccosh", "arctanh",
    "log2", "log10", "exp2", "floor", "ceil", "round", "trunc", "fix", "frac", "reciprocal",
    "floor_divide", "remainder", "fmod", "atan2", "arctan2",
    "isnan", "isinf", "isposinf", "isneginf", "isfinite", "nan_to_num",
    "clamp_min", "clamp_max",
]  # fmt: skip
