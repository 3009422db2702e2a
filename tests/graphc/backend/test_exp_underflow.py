"""Vector exp's lanes below its clamp (``vecmath.EXP_UNDERFLOW_SELECT``): computed from
0.0 with +0.0 selected, instead of through an underflowing product (slow on AMD cores).
Every function built on the exp core must give the same bits as before, everywhere."""

from __future__ import annotations

import numpy as np
import pytest

import eager
import graphc
from graphc.backend import vecmath


@pytest.fixture
def switch():
    before = vecmath.EXP_UNDERFLOW_SELECT

    def set_(on: bool) -> None:
        vecmath.EXP_UNDERFLOW_SELECT = on

    yield set_
    vecmath.EXP_UNDERFLOW_SELECT = before


def _sweep(dtype) -> np.ndarray:
    rng = np.random.default_rng(1)
    info = np.finfo(dtype)
    lo = -746.0 if dtype == np.float64 else -104.0
    parts = [
        np.array([-np.inf, np.inf, np.nan, -0.0, 0.0, info.min, info.max, info.tiny]),
        np.array([lo, np.nextafter(lo, -np.inf), np.nextafter(lo, np.inf)]),
        np.linspace(lo - 3, lo + 30, 4001),  # around the clamp: subnormal results
        rng.standard_normal(3000) * 30,
        -np.abs(rng.standard_normal(2000)) * 1e4,
        -(10.0 ** rng.uniform(0, 30, 1000)),
    ]
    x = np.concatenate(parts).astype(dtype)
    return np.concatenate([x, -x])


FUNCS = {
    "exp": lambda a: a.exp(),
    "sigmoid": lambda a: a.sigmoid(),
    "tanh": lambda a: a.tanh(),
    "erf": lambda a: a.erf(),
    "expm1": lambda a: a.expm1(),
    "pow": lambda a: (a * 0.0 + 1.7) ** (a * 0.01),
    "cosh+sinh": lambda a: (a * 0.1).cosh() + (a * 0.1).sinh(),
    "gelu": lambda a: eager.nn.functional.gelu(a),
    "masked softmax": lambda a: (
        a.reshape(-1, 4).masked_fill(a.reshape(-1, 4) < -50, float("-inf")).softmax(-1)
    ),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(FUNCS))
def test_same_bits_as_the_underflowing_product(switch, dtype, name):
    x = _sweep(dtype)
    x = x[: len(x) // 4 * 4]
    outs = []
    for on in (False, True):
        switch(on)
        with np.errstate(all="ignore"):
            outs.append(np.asarray(graphc.compile(FUNCS[name])(x)))
    assert outs[0].dtype == outs[1].dtype
    assert np.array_equal(outs[0].view(np.uint8), outs[1].view(np.uint8)), name


def test_exp_below_the_clamp_is_positive_zero(switch):
    switch(True)
    for dt in (np.float32, np.float64):
        x = np.array([-np.inf, -1e30, -800.0, -105.0, np.nan], dt)
        got = np.asarray(graphc.compile(lambda a: a.exp())(x))
        want = np.exp(x)
        assert np.array_equal(got, want, equal_nan=True)
        assert not np.signbit(got[:4]).any()
