"""The op registry, op by op, and composite programs against independent references.

* completeness: every op has a forward, a shape rule, a VJP rule for each float
  input (or is explicitly non-differentiable) and samples;
* every sample: the numpy forward agrees with the shape rule (float64 and
  float32) and with the public dispatch path (``Tensor._apply``);
* gradcheck on every differentiable op and sample, gradgradcheck on the
  elementwise ops and the structural ones (matmul, sum, mean, movement);
* composites: the seeds' graphs against hand-derived numpy gradients, a softmax
  against finite differences, and random seeded programs through gradcheck;
* gradcheck itself: it must catch wrong, non-linear and non-reentrant rules.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import eager
from eager.surface import _dispatch
from eager.autograd import GradcheckError, gradcheck, gradgradcheck
from eager.ops import OPS, Meta, OpDef
from eager.ops.registry import ATTR_TYPES, FAMILIES
from eager.tensor import Tensor

# Ops whose outputs carry no gradient (comparisons, logic, index-valued reductions, and
# graphc's stop-gradient ``detach``, the one with a float output).
# float outputs with no gradient: detach (stop_gradient) and random draws, whose only
# operand is the integer generator state
STOP_GRADIENT = {"detach", "philox"}
NON_DIFFERENTIABLE = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
                      "logical_not", "argmax", "argmin", "all", "any", "argsort",
                      "max_pool2d_indices"} | STOP_GRADIENT
# ops of 4-D (N, C, H, W) operands only: no 0-d sample is possible
NO_0D = {"conv2d", "conv2d_input_grad", "conv2d_weight_grad", "max_pool2d", "max_pool2d_grad",
         "max_pool2d_select"}
# Beyond kind == "elementwise", the structural ops whose second derivatives we check.
GRADGRAD_EXTRA = {"matmul", "sum", "mean", "reshape", "transpose", "expand", "getitem",
                  "prod", "cumprod", "linrec"}

ALL_OPS = sorted(OPS)


def _leaf(a: np.ndarray, requires_grad: bool = False) -> Tensor:
    t = Tensor._make(np.array(a))
    if requires_grad:
        t.requires_grad_(True)
    return t


def _with_dtype(arrays: list, dtype) -> list:
    return [a.astype(dtype) if a.dtype.kind == "f" else a for a in arrays]


def _needs_grad(op: OpDef, i: int, a: np.ndarray) -> bool:
    return (a.dtype.kind == "f" and op.vjp is not None and i < len(op.vjp)
            and op.vjp[i] is not None)


def _op_fn(op: OpDef, attrs: dict):
    def fn(*xs):
        return _dispatch(op.name, "X", xs, attrs)
    return fn


def _sample_cases(pred) -> list:
    cases = []
    for name in ALL_OPS:
        op = OPS[name]
        if pred(op):
            for k in range(len(op.samples())):
                cases.append(pytest.param(name, k, id=f"{name}-{k}"))
    return cases


# ---------------------------------------------------------------------------
# registry completeness


def registry_problems(op: OpDef) -> list:
    """Everything that makes an op record incomplete; [] when it is complete."""
    problems = []
    if not callable(op.forward):
        problems.append("no numpy forward")
    if not callable(op.shape):
        problems.append("no shape/dtype rule")
    if op.family not in FAMILIES:
        problems.append(f"unknown family {op.family!r}")
    if set(op.attr_types) != set(op.attrs):
        problems.append(f"attribute types {sorted(op.attr_types)} do not match attrs {op.attrs}")
    for a, t in op.attr_types.items():
        if t not in ATTR_TYPES:
            problems.append(f"attribute {a!r} has unknown type {t!r}")
    samples = op.samples() if callable(op.samples) else []
    if not samples:
        problems.append("no samples")
    if op.vjp is None:
        if op.name not in NON_DIFFERENTIABLE:
            problems.append("no VJP rules (vjp=None) but the op is not listed as "
                            "non-differentiable")
    else:
        if not op.differentiable:
            problems.append("vjp is a tuple of None: use vjp=None for a non-differentiable op")
        if op.arity is not None and len(op.vjp) != op.arity:
            problems.append(f"{len(op.vjp)} VJP rules for arity {op.arity}")
        for i, rule in enumerate(op.vjp):
            if rule is not None and not callable(rule):
                problems.append(f"VJP rule {i} is not callable")
    for k, (ins, attrs) in enumerate(samples):
        if op.arity is not None and len(ins) != op.arity:
            problems.append(f"sample {k} has {len(ins)} inputs for arity {op.arity}")
        extra = set(attrs) - set(op.attrs)
        if extra:
            problems.append(f"sample {k} passes attrs {sorted(extra)} not declared in "
                            f"attrs={op.attrs}")
        try:
            out = op.shape(*[Meta(a.shape, a.dtype) for a in ins], **attrs)
        except Exception as e:           # reported, not raised: list every problem at once
            problems.append(f"sample {k}: shape rule raised {type(e).__name__}: {e}")
            continue
        if op.vjp is None:
            if out.dtype.kind == "f" and op.name not in STOP_GRADIENT:
                problems.append(f"sample {k}: float output but no VJP rules")
            continue
        for i, a in enumerate(ins):
            if a.dtype.kind == "f" and out.dtype.kind == "f" and not _needs_grad(op, i, a):
                problems.append(f"sample {k}: float input {i} has no VJP rule")
    if op.saves is not None and any(not isinstance(i, int) or i < 0 for i in op.saves):
        problems.append(f"saves={op.saves} must hold input positions")
    reads = getattr(op, "reads", None)
    if reads is not None:
        if op.vjp is None or len(reads) != len(op.vjp):
            problems.append(f"reads={reads} needs one entry per VJP rule")
        elif any(not isinstance(i, int) or i < 0 or (op.arity is not None and i >= op.arity)
                 for r in reads if r is not None for i in r):
            problems.append(f"reads={reads} must hold input positions")
    return problems


@pytest.mark.parametrize("name", ALL_OPS)
def test_registry_complete(name):
    op = OPS[name]
    assert op.name == name
    assert registry_problems(op) == []


def test_registry_has_the_core_primitives():
    core = {"neg", "exp", "log", "sqrt", "sin", "cos", "tanh", "sigmoid", "relu", "abs", "clamp",
            "add", "sub", "mul", "div", "pow", "maximum", "minimum", "where", "eq", "gt", "lt",
            "sum", "mean", "max", "min", "argmax", "all", "any", "reshape", "transpose",
            "expand", "getitem", "setitem", "matmul", "cast"}
    assert core <= set(OPS), sorted(core - set(OPS))


def _broken(**changes) -> OpDef:
    base = dict(name="fake", forward=np.exp, shape=lambda x: Meta(x.shape, x.dtype),
                vjp=(lambda g, out, x: g * out,), arity=1,
                samples=lambda: [([np.ones((2,))], {})])
    base.update(changes)
    return OpDef(**base)


@pytest.mark.parametrize("changes, expect", [
    ({}, None),
    ({"vjp": None}, "not listed as non-differentiable"),
    ({"vjp": (None,)}, "vjp is a tuple of None"),
    ({"samples": lambda: []}, "no samples"),
    ({"forward": None}, "no numpy forward"),
    ({"shape": None}, "no shape/dtype rule"),
    ({"arity": 2, "vjp": (lambda g, out, x, y: g, None),
      "forward": np.add, "shape": lambda x, y: Meta(x.shape, x.dtype),
      "samples": lambda: [([np.ones(2), np.ones(2)], {})]}, "float input 1 has no VJP rule"),
    ({"samples": lambda: [([np.ones((2,))], {"axis": 0})]}, "not declared"),
])
def test_registry_check_catches_incomplete_records(changes, expect):
    problems = registry_problems(_broken(**changes))
    if expect is None:
        assert problems == []
    else:
        assert any(expect in p for p in problems), problems


# ---------------------------------------------------------------------------
# forward vs shape rule vs public dispatch


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", ALL_OPS)
def test_forward_matches_shape_rule(name, dtype):
    op = OPS[name]
    for k, (ins, attrs) in enumerate(op.samples()):
        ins = _with_dtype(ins, dtype)
        out = np.asarray(op.forward(*ins, **attrs))
        meta = op.shape(*[Meta(a.shape, a.dtype) for a in ins], **attrs)
        assert (out.shape, out.dtype) == (meta.shape, meta.dtype), \
            f"{name} sample {k}: forward gives {out.shape} {out.dtype}, shape rule {meta}"


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("name", ALL_OPS)
def test_dispatch_matches_numpy_forward(name, requires_grad):
    op = OPS[name]
    for k, (ins, attrs) in enumerate(op.samples()):
        want = np.asarray(op.forward(*ins, **attrs))
        xs = [_leaf(a, requires_grad and _needs_grad(op, i, a)) for i, a in enumerate(ins)]
        got = _dispatch(name, "X", tuple(xs), attrs)
        assert isinstance(got, Tensor)
        assert got.numpy(force=True).dtype == want.dtype, f"{name} sample {k}"
        np.testing.assert_array_equal(got.numpy(force=True), want, err_msg=f"{name} sample {k}")
        recorded = requires_grad and op.differentiable and want.dtype.kind == "f" and \
            any(x.requires_grad for x in xs)
        assert (got.grad_fn is not None) == recorded, f"{name} sample {k}"


# ---------------------------------------------------------------------------
# gradients of every op


def _check_kwargs(op: OpDef, ins: list, attrs: dict) -> dict:
    """Outputs narrower than float64 (cast to float32) need a coarser finite difference."""
    out = op.shape(*[Meta(a.shape, a.dtype) for a in ins], **attrs)
    if out.dtype == np.float64:
        return {}
    return {"eps": 1e-3, "atol": 1e-4, "rtol": 1e-3}


@pytest.mark.parametrize("name, k", _sample_cases(lambda op: op.differentiable))
def test_gradcheck_op(name, k):
    op = OPS[name]
    ins, attrs = op.samples()[k]
    xs = [_leaf(a, _needs_grad(op, i, a)) for i, a in enumerate(ins)]
    assert gradcheck(_op_fn(op, attrs), xs, **_check_kwargs(op, ins, attrs))


def _gradgrad_op(op: OpDef) -> bool:
    return op.differentiable and (op.family == "elementwise" or op.name in GRADGRAD_EXTRA)


@pytest.mark.parametrize("name, k", _sample_cases(_gradgrad_op))
def test_gradgradcheck_op(name, k):
    op = OPS[name]
    ins, attrs = op.samples()[k]
    xs = [_leaf(a, _needs_grad(op, i, a)) for i, a in enumerate(ins)]
    kwargs = _check_kwargs(op, ins, attrs)
    with warnings.catch_warnings():
        if kwargs:      # float32 outputs get float32 grad_outputs: the warning is expected
            warnings.simplefilter("ignore", UserWarning)
        assert gradgradcheck(_op_fn(op, attrs), xs, **kwargs)


def test_gradgrad_set_covers_the_brief():
    names = {n for n in ALL_OPS if _gradgrad_op(OPS[n])}
    assert GRADGRAD_EXTRA <= names
    assert {"exp", "mul", "div", "pow", "tanh", "sigmoid", "where"} <= names


def test_samples_cover_0d_size1_size0_and_broadcast():
    """Every family's samples include the awkward shapes (the gradchecks above run on them)."""
    for name in ALL_OPS:
        op = OPS[name]
        if not op.differentiable or name in ("getitem_grad",):
            continue
        shapes = []
        for ins, attrs in op.samples():
            shapes += [a.shape for a in ins if a.dtype.kind == "f"]
            shapes.append(op.shape(*[Meta(a.shape, a.dtype) for a in ins], **attrs).shape)
        has_0d = any(s == () for s in shapes)
        has_1 = any(1 in s for s in shapes)
        has_0 = any(0 in s for s in shapes)
        if name == "matmul" or name in NO_0D:
            has_0d = True                      # matmul needs at least 1-D operands
        if name in ("max", "min"):
            has_0 = True                       # empty reductions are errors, tested separately
        assert has_0d and has_1 and has_0, (name, shapes)
    for name in ("add", "mul", "where", "matmul", "maximum"):
        samples = OPS[name].samples()
        assert any(len({a.shape for a in ins if a.dtype.kind == "f"}) > 1
                   for ins, _ in samples), f"{name}: no broadcasting sample"


# ---------------------------------------------------------------------------
# composites against independent references


def _randn(*shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def test_seed_3x3_graph_matches_hand_derived_gradients():
    """The seeds' graph: b = w1*a, c = w2*a, d = w3*b + w4*c, L = (10 - d).sum()."""
    arrs = {k: _randn(3, 3, seed=i) for i, k in enumerate(["a", "w1", "w2", "w3", "w4"])}
    t = {k: eager.tensor(v, dtype=eager.float64, requires_grad=True) for k, v in arrs.items()}
    b = t["w1"] * t["a"]
    c = t["w2"] * t["a"]
    d = t["w3"] * b + t["w4"] * c
    L = (10 - d).sum()
    L.backward()
    a, w1, w2, w3, w4 = (arrs[k] for k in ["a", "w1", "w2", "w3", "w4"])
    want = {"a": -(w3 * w1 + w4 * w2), "w1": -w3 * a, "w2": -w4 * a,
            "w3": -w1 * a, "w4": -w2 * a}
    for k, g in want.items():
        np.testing.assert_allclose(t[k].grad.numpy(), g, rtol=1e-12, atol=1e-12, err_msg=k)
    np.testing.assert_allclose(L.item(), np.sum(10 - (w3 * w1 * a + w4 * w2 * a)), rtol=1e-12)


def test_seed_vector_backward_needs_a_gradient():
    a = eager.randn((3, 3), requires_grad=True)
    w = eager.randn((3, 3), requires_grad=True)
    L = 10 - w * a
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar"):
        L.backward()
    L.backward(eager.ones(L.shape))
    np.testing.assert_allclose(a.grad.numpy(), -w.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), -a.detach().numpy(), rtol=1e-6)


def test_two_layer_net_matches_the_seeds_numpy_backprop():
    """Seed 003: autograd gradients equal the hand-written numpy backward pass."""
    N, D_in, H, D_out = 8, 5, 6, 3
    x, y = _randn(N, D_in, seed=10), _randn(N, D_out, seed=11)
    w1, w2 = _randn(D_in, H, seed=12), _randn(H, D_out, seed=13)
    # numpy, as in the seed
    h = x.dot(w1)
    h_relu = np.maximum(h, 0)
    y_pred = h_relu.dot(w2)
    loss = np.square(y_pred - y).sum()
    grad_y_pred = 2.0 * (y_pred - y)
    grad_w2 = h_relu.T.dot(grad_y_pred)
    grad_h_relu = grad_y_pred.dot(w2.T)
    grad_h = grad_h_relu.copy()
    grad_h[h < 0] = 0
    grad_w1 = x.T.dot(grad_h)
    # eager autograd
    tx, ty = eager.from_numpy(x), eager.from_numpy(y)
    tw1 = eager.tensor(w1, dtype=eager.float64, requires_grad=True)
    tw2 = eager.tensor(w2, dtype=eager.float64, requires_grad=True)
    tloss = (tx.mm(tw1).clamp(min=0).mm(tw2) - ty).pow(2).sum()
    tloss.backward()
    np.testing.assert_allclose(tloss.item(), loss, rtol=1e-12)
    np.testing.assert_allclose(tw1.grad.numpy(), grad_w1, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tw2.grad.numpy(), grad_w2, rtol=1e-10, atol=1e-12)
    # and the seed's manual backward written with eager tensors
    th = tx.mm(tw1.detach())
    tg = (2.0 * (th.clamp(min=0).mm(tw2.detach()) - ty)).mm(tw2.detach().t()).clone()
    tg[th < 0] = 0
    np.testing.assert_allclose(tx.t().mm(tg).numpy(), grad_w1, rtol=1e-10, atol=1e-12)


def _fd_grad(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of a scalar numpy function (independent of eager)."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


def test_softmax_gradient_vs_finite_differences_and_formula():
    x = _randn(4, 5, seed=20)
    w = _randn(4, 5, seed=21)

    def np_loss(v):
        s = np.exp(v) / np.exp(v).sum(1, keepdims=True)
        return (s * w).sum()

    t = eager.tensor(x, dtype=eager.float64, requires_grad=True)
    s = t.exp() / t.exp().sum(1, keepdim=True)
    (s * eager.from_numpy(w)).sum().backward()
    sn = np.exp(x) / np.exp(x).sum(1, keepdims=True)
    formula = sn * (w - (w * sn).sum(1, keepdims=True))
    np.testing.assert_allclose(t.grad.numpy(), formula, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(t.grad.numpy(), _fd_grad(np_loss, x), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(s.detach().numpy().sum(1), np.ones(4), rtol=1e-12)


def test_mlp_loss_second_derivative():
    """Hessian-vector product of a small tanh net vs finite differences of its gradient."""
    x, w0 = _randn(3, 4, seed=30), _randn(4, 2, seed=31)
    v = _randn(4, 2, seed=32)

    def grad_at(w):
        tw = eager.tensor(w, dtype=eager.float64, requires_grad=True)
        loss = (eager.from_numpy(x) @ tw).tanh().pow(2).sum()
        (g,) = eager.autograd.grad(loss, tw, create_graph=True)
        return tw, g

    tw, g = grad_at(w0)
    (hv,) = eager.autograd.grad((g * eager.from_numpy(v)).sum(), tw)
    eps = 1e-6
    fd = (grad_at(w0 + eps * v)[1].detach().numpy() -
          grad_at(w0 - eps * v)[1].detach().numpy()) / (2 * eps)
    np.testing.assert_allclose(hv.numpy(), fd, rtol=1e-5, atol=1e-8)


# --- random composite programs ------------------------------------------------------------------

# (name, eager function, numpy reference); inputs are kept in a tame range by the ops themselves
UNARY = [
    ("neg", lambda a: -a, np.negative),
    ("exp_tanh", lambda a: a.tanh().exp(), lambda a: np.exp(np.tanh(a))),
    ("sin", lambda a: a.sin(), np.sin),
    ("cos", lambda a: a.cos(), np.cos),
    ("tanh", lambda a: a.tanh(), np.tanh),
    ("sigmoid", lambda a: a.sigmoid(), lambda a: 1 / (1 + np.exp(-a))),
    ("log1sq", lambda a: (a * a + 1).log(), lambda a: np.log(a * a + 1)),
    ("sqrt1sq", lambda a: (a * a + 1).sqrt(), lambda a: np.sqrt(a * a + 1)),
    ("abs", lambda a: a.abs(), np.abs),
    ("relu", lambda a: a.relu(), lambda a: np.maximum(a, 0)),
    ("clamp", lambda a: a.clamp(-0.8, 0.8), lambda a: np.clip(a, -0.8, 0.8)),
    ("square", lambda a: a ** 2, np.square),
    ("scale", lambda a: 0.5 * a - 1.5, lambda a: 0.5 * a - 1.5),
    ("sum_keep", lambda a: a.sum(-1, keepdim=True) if a.ndim else a.sum(),
     lambda a: a.sum(-1, keepdims=True) if a.ndim else a.sum()),
    ("mean0", lambda a: a.mean(0) if a.ndim else a.mean(),
     lambda a: a.mean(0) if a.ndim else a.mean()),
]
BINARY = [
    ("add", lambda a, b: a + b, np.add),
    ("sub", lambda a, b: a - b, np.subtract),
    ("mul", lambda a, b: a * b, np.multiply),
    ("div", lambda a, b: a / (b * b + 1), lambda a, b: a / (b * b + 1)),
    ("maximum", lambda a, b: eager.maximum(a, b), np.maximum),
    ("minimum", lambda a, b: eager.minimum(a, b), np.minimum),
    ("pow", lambda a, b: (a.abs() + 0.5) ** b.tanh(),
     lambda a, b: (np.abs(a) + 0.5) ** np.tanh(b)),
    ("where", lambda a, b: eager.where(a > b, a, b * 2), lambda a, b: np.where(a > b, a, b * 2)),
]


def _random_shapes(rng, n: int) -> list:
    """n shapes that broadcast together, including 0-d and size-1 dims."""
    nd = int(rng.integers(0, 4))
    full = [int(rng.integers(2, 4)) for _ in range(nd)]
    shapes = []
    for _ in range(n):
        keep = int(rng.integers(0, nd + 1))
        s = [1 if rng.random() < 0.3 else d for d in full[nd - keep:]]
        shapes.append(tuple(s))
    return shapes


def _random_program(seed: int, length: int = 8):
    rng = np.random.default_rng(seed)
    n_in = int(rng.integers(1, 4))
    shapes = _random_shapes(rng, n_in)
    inputs = [rng.uniform(-1.5, 1.5, size=s) for s in shapes]
    steps = []
    for _ in range(length):
        n_vals = n_in + len(steps)
        if rng.random() < 0.5:
            steps.append(("u", int(rng.integers(len(UNARY))), int(rng.integers(n_vals))))
        else:
            steps.append(("b", int(rng.integers(len(BINARY))), int(rng.integers(n_vals)),
                          int(rng.integers(n_vals))))

    def run(vals, fns_index):
        vals = list(vals)
        for step in steps:
            if step[0] == "u":
                vals.append(UNARY[step[1]][fns_index](vals[step[2]]))
            else:
                vals.append(BINARY[step[1]][fns_index](vals[step[2]], vals[step[3]]))
        return vals[-1]

    def describe():
        names = [(UNARY if s[0] == "u" else BINARY)[s[1]][0] + str(s[2:]) for s in steps]
        return f"inputs {shapes}: " + " -> ".join(names)

    return inputs, (lambda *xs: run(xs, 1)), (lambda *xs: run(xs, 2)), describe()


@pytest.mark.parametrize("seed", range(120))
def test_random_program_gradcheck(seed):
    inputs, eager_fn, numpy_fn, desc = _random_program(seed)
    xs = [eager.tensor(a, dtype=eager.float64, requires_grad=True) for a in inputs]
    out = eager_fn(*xs)
    np.testing.assert_allclose(out.detach().numpy(), numpy_fn(*inputs), rtol=1e-12, atol=1e-12,
                               err_msg=desc)
    assert gradcheck(eager_fn, xs), desc


@pytest.mark.parametrize("seed", range(20))
def test_random_program_gradgradcheck(seed):
    inputs, eager_fn, _, desc = _random_program(1000 + seed, length=5)
    xs = [eager.tensor(a, dtype=eager.float64, requires_grad=True) for a in inputs]
    assert gradgradcheck(eager_fn, xs), desc


def test_random_programs_cover_0d_and_size1():
    shapes = [s for seed in range(120) for s in map(np.shape, _random_program(seed)[0])]
    assert () in shapes
    assert any(1 in s for s in shapes)
    assert len({len(s) for s in shapes}) >= 3


# ---------------------------------------------------------------------------
# gradcheck itself


def _f64(*shape, seed=0, requires_grad=True):
    return eager.tensor(_randn(*shape, seed=seed), dtype=eager.float64,
                        requires_grad=requires_grad)


class _WrongScale(eager.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x * 2.5


class _Nonlinear(eager.autograd.Function):
    """Right one-hot rows, but not linear in g: right Jacobian, wrong backward."""

    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return g.abs() * 3


class _Noisy(eager.autograd.Function):
    calls = 0

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        _Noisy.calls += 1
        return g * 2 + g * (1e-9 * _Noisy.calls)


class _FirstOrderOnly(eager.autograd.Function):
    """x**3 whose backward is computed off the tape: right first, wrong second derivative."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x.detach() ** 2


def test_gradcheck_passes_and_handles_shapes_and_args():
    x, y = _f64(3, 4, seed=1), _f64(4, seed=2)
    assert gradcheck(lambda a, b: a * b + b.exp(), (x, y))
    assert gradcheck(lambda a: a.sin(), x)                             # a bare tensor
    assert gradcheck(lambda a: a * 2, (_f64(),))                        # 0-d
    assert gradcheck(lambda a: a.exp(), (_f64(0, 3),))                  # size 0
    assert gradcheck(lambda a, k, s: (a * k).sum(s), (x, 3.0, 1))        # non-tensor args
    assert gradcheck(lambda a, b: (a + b, a.sum(), a > 0), (x, y))       # tuple, bool output
    ints = eager.tensor([1, 2, 3, 4])
    assert gradcheck(lambda a, i: a * i, (x, ints))                     # int tensor passed through
    assert gradcheck(lambda a, b: a * 2, (x, y))                        # an unused input


def test_gradcheck_error_names_input_output_and_error():
    x, y = _f64(2, seed=3), _f64(2, seed=4)
    with pytest.raises(GradcheckError) as exc:
        gradcheck(lambda a, b: (a + b, _WrongScale.apply(b)), (x, y))
    msg = str(exc.value)
    assert "output 1 with respect to input 1" in msg
    assert "max error" in msg and "numerical:" in msg and "analytical:" in msg
    assert isinstance(exc.value, RuntimeError)
    assert gradcheck(lambda a: _WrongScale.apply(a), (x,), raise_exception=False) is False


def test_gradcheck_hides_large_jacobians():
    x = _f64(20, seed=5)
    with pytest.raises(GradcheckError) as exc:
        gradcheck(_WrongScale.apply, (x,))
    assert "numerical:" not in str(exc.value) and "input 0" in str(exc.value)


def test_gradcheck_catches_nonlinear_and_nonreentrant_backward():
    x = _f64(3, seed=6)
    with pytest.raises(GradcheckError, match="not linear in grad_output"):
        gradcheck(_Nonlinear.apply, (x,))
    with pytest.raises(GradcheckError, match="not reentrant"):
        gradcheck(_Noisy.apply, (x,))
    assert gradcheck(_Noisy.apply, (x,), nondet_tol=1e-6)


def test_gradcheck_warns_on_float32_and_needs_an_input():
    x32 = eager.randn(3, requires_grad=True)
    with pytest.warns(UserWarning, match="not a double precision"):
        gradcheck(lambda a: a * 2, (x32,), eps=1e-3, atol=1e-3, rtol=1e-2)
    with pytest.raises(ValueError, match="at least one input tensor to require gradient"):
        gradcheck(lambda a: a * 2, (_f64(3, requires_grad=False),))


def test_gradgradcheck_catches_a_rule_computed_off_the_tape():
    x = _f64(3, seed=7)
    assert gradcheck(_FirstOrderOnly.apply, (x,))
    assert gradgradcheck(lambda a: a ** 3, (x,))
    with pytest.raises(GradcheckError):
        gradgradcheck(_FirstOrderOnly.apply, (x,))
    assert gradgradcheck(_FirstOrderOnly.apply, (x,), raise_exception=False) is False


def test_gradgradcheck_with_given_grad_outputs():
    x = _f64(2, 3, seed=8)
    go = _f64(2, 3, seed=9)
    assert gradgradcheck(lambda a: a.tanh() * a, (x,), (go,))
    assert gradgradcheck(lambda a: a.tanh() * a, (x,), (go.detach(),))


def test_gradcheck_is_exported_like_pytorch():
    assert eager.autograd.gradcheck is gradcheck
    assert eager.autograd.gradgradcheck is gradgradcheck
    assert issubclass(eager.autograd.GradcheckError, RuntimeError)
