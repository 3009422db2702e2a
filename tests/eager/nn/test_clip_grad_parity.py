"""clip_grad_norm_ / get_total_norm / clip_grads_with_norm_ / clip_grad_value_ written with
tensor ops (so a compiled step can call them): the same results and errors as PyTorch."""

import math
import warnings

import numpy as np
import pytest

import eager

SHAPES = [(3, 4), (5,), (), (0, 2), (1,)]
NONEMPTY = [(3, 4), (5,), (), (2,), (1,)]  # inf norms of an empty grad: refused


def _params(lib, dtypes, scale=1.0, none_at=(), special=None, shapes=SHAPES):
    rng = np.random.default_rng(1)
    ps = []
    for i, (shape, dt) in enumerate(zip(shapes, dtypes)):
        p = lib.nn.Parameter(lib.tensor(rng.standard_normal(shape).astype(dt)))
        if i not in none_at:
            g = (rng.standard_normal(shape) * scale).astype(dt)
            if special is not None and i == 0:
                g.flat[0] = special
            p.grad = lib.tensor(g)
        ps.append(p)
    return ps


def _grads(ps):
    return [None if p.grad is None else p.grad.detach().numpy().copy() for p in ps]


def _dt(t):
    return str(t.dtype).split(".")[-1]


CASES = [
    dict(max_norm=1.0),
    dict(max_norm=100.0),
    dict(max_norm=0.0),
    dict(max_norm=0.5, norm_type=math.inf),
    dict(max_norm=0.5, norm_type="inf"),
    dict(max_norm=0.5, norm_type=-math.inf),
    dict(max_norm=0.5, norm_type=1),
    dict(max_norm=0.5, norm_type=3.5),
    dict(max_norm=0.5, norm_type=0),
    dict(max_norm=2, foreach=False),
    dict(max_norm=2, foreach=None),
]


@pytest.mark.parametrize("dtypes", [("float32",) * 5, ("float64",) * 5, ("float32", "float64") * 3])
@pytest.mark.parametrize("kw", CASES)
@pytest.mark.parametrize("none_at", [(), (1, 3)])
def test_clip_grad_norm_against_torch(kw, dtypes, none_at):
    torch = pytest.importorskip("torch")
    res = []
    shapes = NONEMPTY if math.isinf(float(kw.get("norm_type", 2))) else SHAPES
    for lib in (eager, torch):
        ps = _params(lib, dtypes, none_at=none_at, shapes=shapes)
        total = lib.nn.utils.clip_grad_norm_(ps, **kw)
        res.append((total, _grads(ps)))
    (te, ge), (tt, gt) = res
    assert isinstance(te, eager.Tensor) and te.dim() == 0 and _dt(te) == _dt(tt)
    tol = 1e-6 if "float32" in dtypes else 1e-13
    np.testing.assert_allclose(float(te), float(tt), rtol=tol)
    for a, b in zip(ge, gt):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def test_single_tensor_and_generator():
    torch = pytest.importorskip("torch")
    for lib in (eager, torch):
        p = lib.nn.Parameter(lib.ones(4))
        p.grad = lib.full((4,), 3.0)
        total = lib.nn.utils.clip_grad_norm_(p, 1.0)
        assert float(total) == 6.0
        np.testing.assert_allclose(p.grad.numpy(), np.full(4, 3.0 / (6.0 + 1e-6), np.float32))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            t = lib.nn.utils.clip_grad_norm_((q for q in []), 1.0)
        assert float(t) == 0.0 and "empty generator" in str(w[0].message)


@pytest.mark.parametrize("special", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("norm_type", [2.0, math.inf, 1.0])
def test_error_if_nonfinite(special, norm_type):
    torch = pytest.importorskip("torch")
    msgs = []
    for lib in (eager, torch):
        ps = _params(lib, ("float32",) * 5, special=special, shapes=NONEMPTY)
        with pytest.raises(RuntimeError) as ei:
            lib.nn.utils.clip_grad_norm_(ps, 1.0, norm_type=norm_type, error_if_nonfinite=True)
        msgs.append(str(ei.value))
        # not raising: the grads are scaled by the non-finite norm, as PyTorch does
        ps = _params(lib, ("float32",) * 5, special=special, shapes=NONEMPTY)
        lib.nn.utils.clip_grad_norm_(ps, 1.0, norm_type=norm_type)
        msgs.append(_grads(ps))
    assert msgs[0] == msgs[2]
    for a, b in zip(msgs[1], msgs[3]):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_get_total_norm_and_clip_grads_with_norm():
    torch = pytest.importorskip("torch")
    out = []
    for lib in (eager, torch):
        ps = _params(lib, ("float64",) * 5)
        total = lib.nn.utils.get_total_norm([p.grad for p in ps], 3.0)
        lib.nn.utils.clip_grads_with_norm_(ps, 0.25, total)
        out.append((float(total), _grads(ps)))
        assert float(lib.nn.utils.get_total_norm([])) == 0.0
    assert out[0][0] == pytest.approx(out[1][0], rel=1e-14)
    for a, b in zip(out[0][1], out[1][1]):
        np.testing.assert_allclose(a, b, rtol=1e-13)


@pytest.mark.parametrize("value", [0.0, 0.3, 5])
def test_clip_grad_value_against_torch(value):
    torch = pytest.importorskip("torch")
    out = []
    for lib in (eager, torch):
        ps = _params(lib, ("float32", "float64") * 3, none_at=(2,), special=math.nan)
        assert lib.nn.utils.clip_grad_value_(ps, value) is None
        out.append(_grads(ps))
    for a, b in zip(*out):
        if a is None:
            assert b is None
        else:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("norm_type", [math.inf, -math.inf])
@pytest.mark.parametrize("foreach", [None, False])
def test_inf_norm_of_empty_grad_is_refused(norm_type, foreach):
    torch = pytest.importorskip("torch")
    msgs = []
    for lib in (eager, torch):
        p = lib.nn.Parameter(lib.ones(0, 2))
        p.grad = lib.ones(0, 2)
        with pytest.raises(RuntimeError) as ei:
            lib.nn.utils.clip_grad_norm_([p], 1.0, norm_type, foreach=foreach)
        msgs.append(str(ei.value))
    assert msgs[0] == msgs[1]


def _no_grads(kind):
    p = eager.nn.Parameter(eager.ones(3))
    return {
        "all_none": lambda: [p, eager.nn.Parameter(eager.ones(2))],
        "empty_list": lambda: [],
        "tensor_no_grad": lambda: p,
        "empty_generator": lambda: (q for q in []),
    }[kind](), p


@pytest.mark.parametrize("foreach", [None, True, False])
@pytest.mark.parametrize("kind", ["all_none", "empty_list", "tensor_no_grad", "empty_generator"])
def test_nothing_to_clip(kind, foreach):
    # no gradient at all: clip_grad_norm_ returns a 0 norm (PyTorch's documented early
    # return), clip_grad_value_ clips nothing and returns None; the grads stay None.
    # PyTorch 2.13's clip_grad_value_ raises an internal error here instead (see
    # test_nothing_to_clip_against_torch and docs/limitations.md)
    params, p = _no_grads(kind)
    assert eager.nn.utils.clip_grad_value_(params, 0.5, foreach=foreach) is None
    params, p = _no_grads(kind)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        n = eager.nn.utils.clip_grad_norm_(params, 1.0, foreach=foreach)
    assert n.shape == () and n.dtype == eager.float32 and n.item() == 0.0
    assert p.grad is None
    gen_warned = ["empty generator" in str(x.message) for x in w]
    assert gen_warned == ([True] if kind == "empty_generator" else [])


@pytest.mark.parametrize("foreach", [None, True, False])
@pytest.mark.parametrize("kind", ["all_none", "empty_list", "tensor_no_grad", "empty_generator"])
def test_nothing_to_clip_against_torch(kind, foreach):
    torch = pytest.importorskip("torch")
    tp = torch.nn.Parameter(torch.ones(3))
    tparams = {
        "all_none": [tp, torch.nn.Parameter(torch.ones(2))],
        "empty_list": [],
        "tensor_no_grad": tp,
        "empty_generator": (q for q in []),
    }[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tn = torch.nn.utils.clip_grad_norm_(tparams, 1.0, foreach=foreach)
    params, _ = _no_grads(kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        en = eager.nn.utils.clip_grad_norm_(params, 1.0, foreach=foreach)
    assert (en.item(), _dt(en)) == (tn.item(), _dt(tn))
    # clip_grad_value_: PyTorch groups the (empty) list of grads by device before its
    # loop and that grouping refuses an empty list with an internal check (whose message
    # asks for a report); the loop itself would clamp nothing.  Eager clips nothing.
    tparams = [torch.nn.Parameter(torch.ones(2))] if kind != "empty_list" else []
    try:
        tv = torch.nn.utils.clip_grad_value_(tparams, 0.5, foreach=foreach)
    except RuntimeError as e:
        assert "nested_tensorlist[0].empty()" in str(e)
    else:
        assert tv is None  # a PyTorch with the check fixed: the same as eager
    params, _ = _no_grads(kind)
    assert eager.nn.utils.clip_grad_value_(params, 0.5, foreach=foreach) is None
