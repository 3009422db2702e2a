"""graphc's symbolic reverse mode against eager's tape and central finite differences.

Three independent routes to every gradient:

* symbolic: ``graphc.grad`` / ``Graph.grad`` emit the VJP rules as graph nodes and the
  graph is run by graphc (compiled) or by ``graphc.interpret``;
* tape: eager records the same rules on its tape and ``eager.autograd.grad`` walks it;
* numbers: central differences of the op's *numpy forward* (float64), which share no
  code with either rule.

Covered: every differentiable op of the registry over each of its samples, seeded
random composite programs (broadcasting, reductions with axes/keepdim, movement,
matmul, indexing, where, 0-d and size-1 shapes), second and third order, the API's
structure rules (argnums, pytrees, has_aux, vjp, unused inputs) and its error messages,
and the ``grad`` stage of ``CompiledFunction.ir``.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import eager
import graphc
from eager.surface import _dispatch
from eager.ops import OPS
from eager.tensor import Tensor

EPS = 1e-6
RTOL = 1e-6

DIFF_OPS = sorted(n for n, o in OPS.items() if o.differentiable)


# ---------------------------------------------------------------------------
# helpers


def _float_positions(op, inputs) -> list:
    return [i for i, a in enumerate(inputs)
            if a.dtype.kind == "f" and i < len(op.vjp) and op.vjp[i] is not None]


def central_diff(f, inputs: list, positions: list, eps: float = EPS) -> list:
    """d f / d inputs[p] for p in positions by central differences (f returns a float)."""
    grads = []
    for p in positions:
        x = np.array(inputs[p], dtype=np.float64)
        g = np.zeros_like(x)
        flat, gflat = x.reshape(-1), g.reshape(-1)
        for k in range(flat.size):
            old = flat[k]
            args = list(inputs)
            flat[k] = old + eps
            args[p] = x.astype(inputs[p].dtype)
            hi = f(*args)
            flat[k] = old - eps
            args[p] = x.astype(inputs[p].dtype)
            lo = f(*args)
            flat[k] = old
            gflat[k] = (hi - lo) / (2 * eps)
        grads.append(g)
    return grads


def assert_grads_close(actual, expected, what: str, rtol: float = RTOL, scale=None) -> None:
    """Elementwise |a - e| <= rtol * (|e| + scale): relative, with a floor at the gradient scale."""
    assert len(actual) == len(expected), what
    if scale is None:
        scale = max([1.0] + [float(np.max(np.abs(e))) for e in expected if np.size(e)])
    for k, (a, e) in enumerate(zip(actual, expected)):
        a = np.asarray(a)
        assert a.shape == np.shape(e), f"{what}: gradient {k} has shape {a.shape}, want {np.shape(e)}"
        np.testing.assert_allclose(a.astype(np.float64), np.asarray(e, dtype=np.float64),
                                   rtol=rtol, atol=rtol * scale, err_msg=f"{what}: gradient {k}")


def eager_grads(fn, inputs: list, positions: list) -> list:
    """Gradients from eager's tape: leaves for the float inputs, plain tensors for the rest."""
    ts = []
    for i, a in enumerate(inputs):
        t = Tensor._make(np.array(a))
        if i in positions:
            t.requires_grad_(True)
        ts.append(t)
    out = fn(*ts)
    leaves = [ts[i] for i in positions]
    gs = eager.autograd.grad(out, leaves, allow_unused=True)
    return [np.zeros_like(inputs[i]) if g is None else g.detach().numpy()
            for g, i in zip(gs, positions)]


def _weights(shape, dtype, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.5, 1.5, size=shape).astype(dtype)


# ---------------------------------------------------------------------------
# every differentiable op, every sample


def _op_cases() -> list:
    cases = []
    for name in DIFF_OPS:
        for k in range(len(OPS[name].samples())):
            cases.append(pytest.param(name, k, id=f"{name}-{k}"))
    return cases


def _op_problem(name: str, k: int):
    """(objective on tensors/tracers, objective on numpy, inputs, float positions, eps, rtol)."""
    op = OPS[name]
    inputs, attrs = op.samples()[k]
    ref = np.asarray(op.forward(*inputs, **attrs))
    w = _weights(ref.shape, ref.dtype, seed=k)

    def objective(*xs):
        return (_dispatch(name, "X", xs, attrs) * w).sum()

    def numeric(*xs):
        out = np.asarray(op.forward(*xs, **attrs), dtype=np.float64)
        return float((out * w.astype(np.float64)).sum())

    positions = _float_positions(op, inputs)
    # a float32 result (cast) quantizes the objective: difference over a wider step
    eps, rtol = (1e-2, 1e-4) if ref.dtype == np.float32 else (EPS, RTOL)
    return objective, numeric, inputs, positions, eps, rtol


def test_every_differentiable_op_has_a_case():
    assert len(DIFF_OPS) >= 25
    for name in DIFF_OPS:
        assert OPS[name].samples(), f"{name} has no samples"


@pytest.mark.parametrize("name,k", _op_cases())
def test_op_symbolic_equals_tape_equals_finite_differences(name, k):
    objective, numeric, inputs, positions, eps, rtol = _op_problem(name, k)
    assert positions, f"{name} sample {k} has no differentiable float input"
    sym = graphc.grad(objective, argnums=tuple(positions))(*inputs)
    tape = eager_grads(objective, inputs, positions)
    fd = central_diff(numeric, inputs, positions, eps)
    what = f"{name} sample {k}"
    for s, i in zip(sym, positions):
        assert isinstance(s, np.ndarray) and s.dtype == inputs[i].dtype, what
    assert_grads_close(sym, tape, f"{what}: symbolic vs tape", rtol=1e-12)
    assert_grads_close(sym, fd, f"{what}: symbolic vs finite differences", rtol=rtol)


@pytest.mark.parametrize("name,k", _op_cases())
def test_op_graph_grad_interpreted(name, k):
    """``Graph.grad()`` on the traced objective, run by the reference interpreter."""
    objective, numeric, inputs, positions, eps, rtol = _op_problem(name, k)
    g = graphc.trace(objective, *inputs)
    float_inputs = [nid for nid in g.inputs if np.dtype(g.nx.nodes[nid]["dtype"]).kind == "f"]
    gg = g.grad()
    graphc.verify(gg)
    assert len(gg.outputs) == 1 + len(float_inputs)
    outs = graphc.interpret(gg, *inputs)
    tol = 1e-6 if outs[0].dtype == np.float32 else 1e-12
    np.testing.assert_allclose(outs[0], numeric(*inputs), rtol=tol, atol=tol)
    by_node = dict(zip(float_inputs, outs[1:]))
    got = [by_node[g.inputs[i]] for i in positions]
    tape = eager_grads(objective, inputs, positions)
    assert_grads_close(got, tape, f"{name} sample {k}: Graph.grad vs tape", rtol=1e-12)
    roles = {d.get("role") for _, d in gg.nx.nodes(data=True) if d["op"] not in ("input", "const")}
    if any(np.size(x) for x in inputs):
        assert "backward" in roles, "gradient nodes must carry role=backward"


# ---------------------------------------------------------------------------
# random composite programs

SHAPES = [(), (1,), (3,), (2, 3), (1, 4), (3, 1, 2), (2, 1), (1, 1)]

UNARY = {
    "sin": lambda a: a.sin(), "cos": lambda a: a.cos(), "tanh": lambda a: a.tanh(),
    "sigmoid": lambda a: a.sigmoid(), "softlog": lambda a: (a * a + 1).log(),
    "softsqrt": lambda a: (a * a + 0.5).sqrt(), "square": lambda a: a ** 2,
    "neg": lambda a: -a, "expsin": lambda a: a.sin().exp(), "affine": lambda a: a * 0.5 + 1.5,
    "rsub": lambda a: 1.0 - a, "recip": lambda a: 1.0 / (a * a + 1),
    # kinks: random values land within EPS of one with negligible probability
    "relu": lambda a: a.relu(), "abs": lambda a: a.abs(), "clamp": lambda a: a.clamp(-0.3, 0.5),
}
BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (b * b + 1), "pow": lambda a, b: (a * a + 0.5) ** b.tanh(),
    "rsubmul": lambda a, b: b - a * 2.0, "maximum": lambda a, b: eager.maximum(a, b * 0.9),
}


class Program:
    """A seeded random chain of ops; runs unchanged on eager Tensors and on graphc Tracers."""

    def __init__(self, seed: int, length: int = 8) -> None:
        self.rng = rng = np.random.default_rng(seed)
        self.inputs: list = []
        self.steps: list = []            # (description, fn(vals) -> value)
        self.shapes: list = []           # static shape of every value
        self._new_input(SHAPES[rng.integers(len(SHAPES))])
        self._new_input(SHAPES[rng.integers(len(SHAPES))])
        for _ in range(length):
            self._step()
        self.w = _weights(self.shapes[-1], np.float64, seed)

    # --- building -------------------------------------------------------------------
    def _new_input(self, shape) -> int:
        self.inputs.append(self.rng.uniform(-1, 1, size=shape))
        k = len(self.shapes)
        i = len(self.inputs) - 1
        self.steps.append((f"v{k} = input{i}{list(shape)}", lambda v, xs, i=i: xs[i]))
        self.shapes.append(tuple(shape))
        return k

    def _add(self, desc: str, fn, shape) -> None:
        k = len(self.shapes)
        self.steps.append((f"v{k} = {desc}", fn))
        self.shapes.append(tuple(shape))

    def _partner(self, shape) -> int:
        """An earlier value, or a new input, whose shape broadcasts with ``shape``."""
        rng = self.rng
        ok = []
        for k, s in enumerate(self.shapes[:-1]):
            try:
                np.broadcast_shapes(s, shape)
                ok.append(k)
            except ValueError:
                pass
        if ok and rng.random() < 0.5:
            return ok[rng.integers(len(ok))]
        choice = rng.integers(4)
        if choice == 0:
            new = shape
        elif choice == 1:     # some dims set to 1
            new = tuple(1 if rng.random() < 0.5 else d for d in shape)
        elif choice == 2:     # a suffix (broadcast over leading dims), possibly 0-d
            new = shape[rng.integers(len(shape) + 1):]
        else:                 # a new leading dim: the result grows
            new = (2,) + tuple(shape)
        return self._new_input(new)

    def _step(self) -> None:
        rng = self.rng
        a = len(self.shapes) - 1
        s = self.shapes[a]
        kind = rng.choice(["unary", "binary", "binary", "reduce", "movement", "matmul",
                           "index", "where", "setitem"])
        if kind == "matmul" and not s:
            kind = "unary"
        if kind in ("index", "setitem") and (not s or s[0] == 0):
            kind = "binary"
        if kind == "unary":
            name = list(UNARY)[rng.integers(len(UNARY))]
            self._add(f"{name}(v{a})", lambda v, xs, f=UNARY[name], a=a: f(v[a]), s)
        elif kind == "binary":
            b = self._partner(s)
            name = list(BINARY)[rng.integers(len(BINARY))]
            shape = np.broadcast_shapes(s, self.shapes[b])
            self._add(f"{name}(v{a}, v{b})",
                      lambda v, xs, f=BINARY[name], a=a, b=b: f(v[a], v[b]), shape)
        elif kind == "reduce" and s and rng.random() < 0.25:
            dim = int(rng.integers(-len(s), len(s)))
            keep = bool(rng.random() < 0.5)
            shape = tuple(1 if i == dim % len(s) else d for i, d in enumerate(s)) if keep else \
                tuple(d for i, d in enumerate(s) if i != dim % len(s))
            self._add(f"max(v{a}, dim={dim}, keepdim={keep}).values",
                      lambda v, xs, a=a, d=dim, k=keep: v[a].max(dim=d, keepdim=k).values, shape)
        elif kind == "reduce":
            mean = bool(rng.random() < 0.5)
            keep = bool(rng.random() < 0.5)
            if s and rng.random() < 0.7:
                n = int(rng.integers(1, len(s) + 1))
                axes = tuple(int(x) for x in sorted(rng.choice(len(s), size=n, replace=False)))
            else:
                axes = None
            red = tuple(range(len(s))) if axes is None else axes
            shape = tuple(1 if i in red else d for i, d in enumerate(s)) if keep else \
                tuple(d for i, d in enumerate(s) if i not in red)
            if axes is None and not keep:
                fn = (lambda v, xs, a=a: v[a].mean()) if mean else (lambda v, xs, a=a: v[a].sum())
            else:
                fn = (lambda v, xs, a=a, ax=axes, kp=keep: getattr(v[a], "mean" if mean else "sum")(
                    dim=ax, keepdim=kp))
            self._add(f"{'mean' if mean else 'sum'}(v{a}, dim={axes}, keepdim={keep})", fn, shape)
        elif kind == "movement":
            if len(s) >= 2 and rng.random() < 0.5:
                perm = tuple(int(p) for p in rng.permutation(len(s)))
                self._add(f"v{a}.permute{perm}", lambda v, xs, a=a, p=perm: v[a].permute(*p),
                          tuple(s[p] for p in perm))
            else:
                n = int(np.prod(s, dtype=np.int64))
                options = [(n,), tuple(reversed(s)) or (1,), (1,) + s, s + (1,)]
                if n == 1:
                    options.append(())
                new = options[rng.integers(len(options))]
                self._add(f"v{a}.reshape{new}", lambda v, xs, a=a, t=new: v[a].reshape(t), new)
        elif kind == "matmul":
            k = int(rng.integers(1, 4))
            if len(s) == 1 and rng.random() < 0.3:
                b = self._new_input((s[0],))
                shape = ()
            else:
                b = self._new_input((s[-1], k))
                shape = s[:-1] + (k,)
            self._add(f"matmul(v{a}, v{b})", lambda v, xs, a=a, b=b: v[a] @ v[b], shape)
        elif kind == "index":
            n0 = s[0]
            choice = rng.integers(3)
            if choice == 0:
                i = int(rng.integers(-n0, n0))
                self._add(f"v{a}[{i}]", lambda v, xs, a=a, i=i: v[a][i], s[1:])
            elif choice == 1 and n0 > 1:
                self._add(f"v{a}[1:]", lambda v, xs, a=a: v[a][1:], (n0 - 1,) + s[1:])
            else:
                idx = rng.integers(0, n0, size=3)      # repeated indices accumulate
                self._add(f"v{a}[{idx.tolist()}]", lambda v, xs, a=a, idx=idx: v[a][idx],
                          (3,) + s[1:])
        elif kind == "setitem":       # functionalized in a trace, CopySlices on the tape
            i = int(rng.integers(-s[0], s[0]))

            def assign(v, xs, a=a, i=i):
                y = v[a] * 1.0
                y[i] = v[a][i].sin() * 2.0
                return y
            self._add(f"v{a} with [{i}] = sin(v{a}[{i}]) * 2", assign, s)
        else:   # where: the condition carries no gradient
            b = self._partner(s)
            shape = np.broadcast_shapes(s, self.shapes[b])
            self._add(f"where(v{a} > 0.1, v{a}, 2 * v{b})",
                      lambda v, xs, a=a, b=b: eager.where(v[a] > 0.1, v[a], v[b] * 2.0), shape)

    # --- running ----------------------------------------------------------------------
    def run(self, *xs):
        vals: list = []
        for _, fn in self.steps:
            vals.append(fn(vals, xs))
        return vals[-1]

    def objective(self, *xs):
        return (self.run(*xs) * self.w).sum()

    def numeric(self, *xs) -> float:
        with eager.no_grad():
            out = self.objective(*[Tensor._make(np.asarray(x)) for x in xs])
        return float(out.numpy())

    def __str__(self) -> str:
        return "\n".join(d for d, _ in self.steps)


# GRAPHC_FUZZ_N programs from GRAPHC_FUZZ_START (default 60 from 0, was 120; the op
# families below are all reached by them).  Gradients of random programs are also checked
# by tests/parity/test_fuzz.py (value_and_grad against eager's backward, 40 by default).
PROGRAM_SEEDS = list(range(int(os.environ.get("GRAPHC_FUZZ_START", "0")),
                           int(os.environ.get("GRAPHC_FUZZ_START", "0"))
                           + int(os.environ.get("GRAPHC_FUZZ_N", "60"))))


def test_program_generator_covers_the_op_families():
    text = "\n".join(str(Program(s)) for s in PROGRAM_SEEDS)
    for word in ["matmul", "where", "sum(", "mean(", "reshape", "permute", "[1:]", "keepdim=True",
                 "input0[]", "pow(", "div(", "max(", "maximum(", "relu(", " with [", "clamp("]:
        assert word in text, f"no random program uses {word}"
    assert any(Program(s).shapes[-1] == () for s in PROGRAM_SEEDS)


@pytest.mark.parametrize("seed", PROGRAM_SEEDS)
def test_random_program_symbolic_equals_tape_equals_finite_differences(seed):
    prog = Program(seed, length=8 if seed % 3 else 14)
    xs = prog.inputs
    pos = list(range(len(xs)))
    sym = graphc.grad(prog.objective, argnums=tuple(pos))(*xs)
    tape = eager_grads(prog.objective, xs, pos)
    fd = central_diff(prog.numeric, xs, pos)
    what = f"program {seed}:\n{prog}"
    assert_grads_close(sym, tape, f"symbolic vs tape, {what}", rtol=1e-10)
    assert_grads_close(sym, fd, f"symbolic vs finite differences, {what}", rtol=1e-5)
    # the same gradient from Graph.grad, interpreted
    gg = graphc.trace(prog.objective, *xs).grad()
    outs = graphc.interpret(gg, *xs)
    np.testing.assert_allclose(outs[0], prog.numeric(*xs), rtol=1e-12)
    assert_grads_close(outs[1:], tape, f"Graph.grad vs tape, {what}", rtol=1e-10)


# ---------------------------------------------------------------------------
# higher order

SCALAR_FUNCS = {
    # name: (f, [f', f'', f'''] analytic)
    "x**4": (lambda x: x ** 4, [lambda x: 4 * x ** 3, lambda x: 12 * x ** 2, lambda x: 24 * x]),
    "sin*exp": (lambda x: x.sin() * x.exp(),
                [lambda x: np.exp(x) * (np.sin(x) + np.cos(x)), lambda x: 2 * np.exp(x) * np.cos(x),
                 lambda x: 2 * np.exp(x) * (np.cos(x) - np.sin(x))]),
    "tanh": (lambda x: x.tanh(),
             [lambda x: 1 - np.tanh(x) ** 2, lambda x: -2 * np.tanh(x) * (1 - np.tanh(x) ** 2),
              lambda x: (1 - np.tanh(x) ** 2) * (6 * np.tanh(x) ** 2 - 2)]),
    "log(1+x^2)/x": (lambda x: (x * x + 1).log() / x,
                     None),
}


@pytest.mark.parametrize("name", list(SCALAR_FUNCS))
@pytest.mark.parametrize("x0", [0.7, -1.3])
def test_higher_order_against_finite_differences_and_analytic(name, x0):
    f, analytic = SCALAR_FUNCS[name]
    x = np.array(x0)
    d1 = graphc.grad(f)
    d2 = graphc.grad(graphc.grad(f))
    d3 = graphc.compile(graphc.grad(graphc.grad(graphc.grad(f))))
    orders = [lambda v: float(f(Tensor._make(v)).numpy()),
              lambda v: float(d1(v)), lambda v: float(d2(v)), lambda v: float(d3(v))]
    for n in (1, 2, 3):
        got = orders[n](x)
        h = 1e-5
        fd = (orders[n - 1](x + h) - orders[n - 1](x - h)) / (2 * h)
        assert got == pytest.approx(fd, rel=1e-6, abs=1e-6), f"order {n} vs finite differences"
        if analytic is not None:
            assert got == pytest.approx(analytic[n - 1](x0), rel=1e-12, abs=1e-12), \
                f"order {n} vs analytic"
    # eager's create_graph gives the same third derivative
    t = Tensor._make(np.array(x0)).requires_grad_(True)
    (g1,) = eager.autograd.grad(f(t), t, create_graph=True)
    (g2,) = eager.autograd.grad(g1, t, create_graph=True)
    (g3,) = eager.autograd.grad(g2, t)
    assert float(d3(x)) == pytest.approx(float(g3.numpy()), rel=1e-12, abs=1e-12)
    assert d3.cache_info().traces == 1


def test_third_order_graph_is_marked_backward_and_cached():
    d3 = graphc.compile(graphc.grad(graphc.grad(graphc.grad(lambda x: x ** 4))))
    x = np.array(0.5)
    text = d3.ir(x)
    assert "backward" in text
    assert float(d3(x)) == pytest.approx(12.0)
    assert float(d3(np.array(2.0))) == pytest.approx(48.0)
    assert d3.cache_info().hits == 2 and d3.cache_info().traces == 1


def test_second_order_vector_hessian_vector_product():
    """grad of (grad f . v): a Hessian-vector product, against the analytic Hessian."""
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, size=(4, 4))
    x = rng.uniform(-1, 1, size=(4,))
    v = rng.uniform(-1, 1, size=(4,))

    def f(x):
        return (a @ x).tanh().sum() + (x ** 3).sum()

    def gv(x, v):
        return (graphc.grad(f)(x) * v).sum()

    hv = graphc.grad(gv)(x, v)
    t = np.tanh(a @ x)
    hess = a.T @ np.diag(-2 * t * (1 - t ** 2)) @ a + np.diag(6 * x)
    np.testing.assert_allclose(hv, hess @ v, rtol=1e-12, atol=1e-12)


def test_detach_stops_the_gradient():
    """``detach()`` in a trace is a node of its own (op ``detach``) that backprop stops at."""
    x = np.array([1.0, -2.0, 3.0])

    def f(x):
        return (x * x.detach() + x.detach().exp()).sum()

    np.testing.assert_array_equal(graphc.grad(f)(x), x)
    t = Tensor._make(x.copy()).requires_grad_(True)
    f(t).backward()
    np.testing.assert_array_equal(t.grad.numpy(), x)
    assert "detach(x)" in str(graphc.trace(f, x))

    @graphc.compile
    def step(w):
        loss = (w * w.detach()).sum()
        loss.backward()
        return loss

    w = Tensor._make(x.copy()).requires_grad_(True)
    step(w)
    np.testing.assert_array_equal(w.grad.numpy(), x)


def test_backward_on_a_leaf_made_inside_the_trace():
    """The PyTorch idiom ``x = x.detach().requires_grad_()`` then ``backward()``."""
    def input_grad(x):
        x = x.detach().requires_grad_(True)
        (x ** 3).sum().backward()
        return x.grad

    x = np.array([0.5, -2.0])
    np.testing.assert_allclose(graphc.compile(input_grad)(x), 3 * x ** 2)
    t = Tensor._make(x.copy())
    np.testing.assert_allclose(input_grad(t).numpy(), 3 * x ** 2)

    def marks_its_argument(x):      # an ndarray argument has no .grad to write back
        x.requires_grad_(True)
        (x ** 3).sum().backward()
        return x.grad.sum()

    assert float(graphc.compile(marks_its_argument)(x)) == pytest.approx(3 * (x ** 2).sum())


def test_grad_of_a_function_that_runs_backward_inside():
    """The backward nodes are ordinary graph nodes: differentiating them is the same walk."""
    def grad_norm(x):
        x = x.detach().requires_grad_(True)
        (x ** 3).sum().backward()
        return x.grad.sum()                 # sum(3 x^2), with x detached from the outer x

    def grad_sum(x):
        x.requires_grad_(True)
        (x ** 3).sum().backward()
        return x.grad.sum()                 # sum(3 x^2)

    x = np.array([0.5, -2.0])
    np.testing.assert_allclose(graphc.grad(grad_sum)(x), 6 * x)
    np.testing.assert_array_equal(graphc.grad(grad_norm)(x), np.zeros(2))


# ---------------------------------------------------------------------------
# API structure: argnums, pytrees, has_aux, vjp, unused inputs


def test_unused_inputs_get_zero_gradients():
    def f(x, y, z):
        return (x * 2).sum()

    x, y, z = np.ones((2, 3)), np.ones(4), np.ones(())
    gx, gy, gz = graphc.grad(f, argnums=(0, 1, 2))(x, y, z)
    np.testing.assert_array_equal(gx, np.full((2, 3), 2.0))
    np.testing.assert_array_equal(gy, np.zeros(4))
    np.testing.assert_array_equal(gz, np.zeros(()))
    assert gy.dtype == y.dtype and gz.shape == ()
    # an input used only through a non-differentiable path also has a zero gradient
    gy = graphc.grad(lambda x, y: (x * (y > 0)).sum(), argnums=1)(x[0, :3], y[:3])
    np.testing.assert_array_equal(gy, np.zeros(3))


def test_argnums_int_tuple_and_negative():
    def f(x, y):
        return (x * y * y).sum()

    x, y = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    gx = graphc.grad(f)(x, y)
    np.testing.assert_allclose(gx, y * y)
    gy = graphc.grad(f, argnums=1)(x, y)
    np.testing.assert_allclose(gy, 2 * x * y)
    both = graphc.grad(f, argnums=(0, 1))(x, y)
    assert isinstance(both, tuple) and len(both) == 2
    np.testing.assert_allclose(both[1], 2 * x * y)
    np.testing.assert_allclose(graphc.grad(f, argnums=-1)(x, y), 2 * x * y)
    (only,) = graphc.grad(f, argnums=(1,))(x, y)
    np.testing.assert_allclose(only, 2 * x * y)
    with pytest.raises(ValueError, match="argnums 2 is out of range"):
        graphc.grad(f, argnums=2)(x, y)


def test_pytree_arguments_get_gradients_in_the_same_structure():
    def loss(params, batch):
        h = (batch["x"] @ params["w"] + params["b"]).tanh()
        return ((h - batch["y"]) ** 2).mean() + (params["extra"][0] ** 2).sum()

    rng = np.random.default_rng(0)
    params = {"w": rng.normal(size=(3, 2)), "b": rng.normal(size=(2,)),
              "extra": (rng.normal(size=(2,)), rng.normal(size=()))}
    batch = {"x": rng.normal(size=(5, 3)), "y": rng.normal(size=(5, 2))}
    g = graphc.grad(loss)(params, batch)
    assert isinstance(g, dict) and sorted(g) == ["b", "extra", "w"]
    assert isinstance(g["extra"], tuple) and len(g["extra"]) == 2
    np.testing.assert_array_equal(g["extra"][1], np.zeros(()))       # unused leaf
    flat = [params["w"], params["b"], params["extra"][0], params["extra"][1]]

    def flat_loss(w, b, e0, e1):
        return loss({"w": w, "b": b, "extra": (e0, e1)}, {k: Tensor._make(v)
                                                          for k, v in batch.items()})

    fd = central_diff(lambda *a: float(flat_loss(*[Tensor._make(x) for x in a]).numpy()),
                      flat, [0, 1, 2, 3])
    assert_grads_close([g["w"], g["b"], g["extra"][0], g["extra"][1]], fd, "pytree grad")
    # both arguments, and value_and_grad keeps the structure too
    v, (gp, gb) = graphc.value_and_grad(loss, argnums=(0, 1))(params, batch)
    assert float(v) == pytest.approx(float(flat_loss(*[Tensor._make(x) for x in flat]).numpy()))
    assert sorted(gb) == ["x", "y"] and gb["x"].shape == (5, 3)
    np.testing.assert_allclose(gp["w"], g["w"], rtol=1e-12)
    # lists stay lists
    gl = graphc.grad(lambda ws: (ws[0] * ws[1]).sum())([np.ones(2), np.full(2, 3.0)])
    assert isinstance(gl, list)
    np.testing.assert_array_equal(gl[0], [3.0, 3.0])


def test_value_and_grad_has_aux():
    def f(x):
        y = x.sin()
        return y.sum(), {"y": y, "n": 3}

    x = np.array([0.1, 0.2, 0.3])
    (value, aux), g = graphc.value_and_grad(f, has_aux=True)(x)
    assert float(value) == pytest.approx(np.sin(x).sum())
    np.testing.assert_allclose(aux["y"], np.sin(x))
    assert aux["n"] == 3
    np.testing.assert_allclose(g, np.cos(x))
    g2, aux2 = graphc.grad(f, has_aux=True)(x)
    np.testing.assert_allclose(g2, np.cos(x))
    np.testing.assert_allclose(aux2["y"], np.sin(x))
    with pytest.raises(TypeError, match=r"has_aux=True requires fn to return \(value, aux\)"):
        graphc.grad(lambda x: x.sum(), has_aux=True)(x)


def test_grad_with_eager_tensors_returns_tensors():
    x = eager.tensor([1.0, 2.0, 3.0])
    v, g = graphc.value_and_grad(lambda x: (x ** 2).sum())(x)
    assert isinstance(g, Tensor) and isinstance(v, Tensor)
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0, 6.0])
    assert float(v) == pytest.approx(14.0)


def test_vjp_with_a_cotangent():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(3, 4))
    b = rng.normal(size=(4,))
    ct = rng.normal(size=(3, 4))

    def f(a, b):
        return (a * b).tanh() + b

    out, f_vjp = graphc.vjp(f, a, b)
    np.testing.assert_allclose(out, np.tanh(a * b) + b)
    ga, gb = f_vjp(ct)
    ta = Tensor._make(a.copy()).requires_grad_(True)
    tb = Tensor._make(b.copy()).requires_grad_(True)
    ea, eb = eager.autograd.grad(f(ta, tb), (ta, tb), grad_outputs=Tensor._make(ct))
    np.testing.assert_allclose(ga, ea.numpy(), rtol=1e-12)
    np.testing.assert_allclose(gb, eb.numpy(), rtol=1e-12)
    assert gb.shape == (4,)
    # the vjp function can be called again with another cotangent
    ga2, _ = f_vjp(2 * ct)
    np.testing.assert_allclose(ga2, 2 * ga, rtol=1e-12)
    with pytest.raises(ValueError, match=r"cotangent shape \[4\] does not match the output shape "
                                         r"\[3, 4\]"):
        f_vjp(np.ones(4))


def test_vjp_inside_a_compiled_function():
    @graphc.compile
    def jvp_free(x, ct):
        out, pullback = graphc.vjp(lambda x: x.exp() * 2, x)
        (g,) = pullback(ct)
        return out, g

    x, ct = np.array([0.0, 1.0]), np.array([1.0, 3.0])
    out, g = jvp_free(x, ct)
    np.testing.assert_allclose(out, 2 * np.exp(x))
    np.testing.assert_allclose(g, 2 * np.exp(x) * ct)


def test_grad_composes_with_compile_both_ways():
    def f(x):
        return (x.sin() ** 2).sum()

    x = np.linspace(-1, 1, 5)
    expected = 2 * np.sin(x) * np.cos(x)
    np.testing.assert_allclose(graphc.compile(graphc.grad(f))(x), expected, rtol=1e-12)
    # the grad wrapper compiles itself per signature when called outside a trace
    gf = graphc.grad(f)
    np.testing.assert_allclose(gf(x), expected, rtol=1e-12)
    np.testing.assert_allclose(gf(x[:3]), expected[:3], rtol=1e-12)

    @graphc.compile
    def step(x):
        return x - 0.1 * graphc.grad(f)(x)

    np.testing.assert_allclose(step(x), x - 0.1 * expected, rtol=1e-12)


def test_float32_inputs_give_float32_gradients():
    x = np.array([0.5, 1.5], dtype=np.float32)
    g = graphc.grad(lambda x: (x * x.exp()).sum())(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, (1 + x) * np.exp(x), rtol=1e-6)


def test_integer_arguments_outside_argnums_are_fine():
    def f(x, idx):
        return (x[idx] ** 2).sum()

    x = np.array([1.0, 2.0, 3.0])
    g = graphc.grad(f)(x, np.array([0, 2, 2]))
    np.testing.assert_allclose(g, [2.0, 0.0, 12.0])


# ---------------------------------------------------------------------------
# error messages


def test_grad_of_integer_argument_is_a_clear_type_error():
    def f(x, idx):
        return (x[idx] ** 2).sum()

    x, idx = np.array([1.0, 2.0]), np.array([0, 1])
    with pytest.raises(TypeError, match=r"argument 1 \(idx\).*int64.*only floating-point") as e:
        graphc.grad(f, argnums=1)(x, idx)
    assert "argnums" in str(e.value)
    with pytest.raises(TypeError, match=r"argument 0 \(mask\).*bool"):
        graphc.grad(lambda mask, x: (x * mask).sum())(np.array([True, False]), x)
    with pytest.raises(TypeError, match=r"argument 0 \(p\['b'\]\).*int64"):
        graphc.grad(lambda p: (p["a"] * p["b"]).sum())({"a": x, "b": idx})
    with pytest.raises(TypeError, match=r"argument 0 \(x\) is a Python number"):
        graphc.grad(lambda x: x * 2.0)(3.0)


def test_non_scalar_output_without_cotangent_names_vjp():
    x = np.ones((2, 3))
    with pytest.raises(TypeError, match=r"must return a scalar.*shape \[2, 3\].*graphc\.vjp"):
        graphc.grad(lambda x: x * 2)(x)
    with pytest.raises(TypeError, match=r"graphc\.vjp"):
        graphc.value_and_grad(lambda x: x.sum(0))(x)
    g = graphc.trace(lambda x: x * 2, x)
    with pytest.raises(TypeError, match=r"output 0 has shape \[2, 3\].*graphc\.vjp"):
        g.grad()
    # a one-element non-0-d output is a scalar for grad
    np.testing.assert_array_equal(graphc.grad(lambda x: x.sum(1, keepdim=True)[:1])(x),
                                  [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])


def test_non_float_output_is_a_clear_error():
    with pytest.raises(TypeError, match="floating-point scalar, got int64"):
        graphc.grad(lambda x: (x > 0).sum())(np.ones(3))
    with pytest.raises(TypeError, match="must return a traced scalar array, got tuple"):
        graphc.grad(lambda x: (x.sum(), x.sum()))(np.ones(3))


def test_graph_grad_errors():
    g = graphc.trace(lambda x, i: x[i].sum(), np.ones(3), np.array([0, 1]))
    with pytest.raises(TypeError, match="'i' is not floating point"):
        g.grad(wrt=[g.inputs[1]])
    with pytest.raises(graphc.GraphcError, match="not an input"):
        g.grad(wrt=[g.outputs[0]])
    gg = g.grad()                                    # float inputs only by default
    assert len(gg.outputs) == 2


# ---------------------------------------------------------------------------
# CompiledFunction.ir(stage="grad")


def test_ir_grad_stage_prints_backward_nodes():
    @graphc.compile
    def loss(x, w):
        return ((x @ w).tanh() ** 2).mean()

    x, w = np.ones((4, 3)), np.full((3, 2), 0.1)
    text = loss.ir(x, w, stage="grad")
    assert text.startswith("graph loss_grad(x: f64[4,3], w: f64[3,2])")
    lines = text.splitlines()
    fwd = [ln for ln in lines if "matmul" in ln and "backward" not in ln]
    bwd = [ln for ln in lines if ln.strip().startswith("%") and ln.rstrip().endswith("backward")]
    assert len(fwd) == 1 and bwd, text
    assert any("matmul" in ln for ln in bwd) and any("transpose" in ln for ln in bwd)
    ret = [ln for ln in lines if ln.strip().startswith("return")][0]
    assert ret.count("%") == 3                      # value, d/dx, d/dw
    # the traced stage is unchanged; the grad stage is cached on the entry
    assert "backward" not in loss.ir(x, w)
    entry = loss._entry_for((x, w))
    graph_before = entry.stages["grad"]
    assert loss.ir(x, w, stage="grad") == text
    assert entry.stages["grad"] is graph_before
    # the grad stage computes the right thing
    outs = graphc.interpret(graph_before, x, w)
    gx, gw = graphc.grad(loss.__wrapped__, argnums=(0, 1))(x, w)
    np.testing.assert_allclose(outs[1], gx, rtol=1e-12)
    np.testing.assert_allclose(outs[2], gw, rtol=1e-12)
    assert loss.cache_info().traces == 1


def test_ir_grad_stage_of_a_function_that_runs_backward_is_its_trace():
    @graphc.compile
    def step(w, x):
        loss = (x @ w).pow(2).sum()
        loss.backward()
        return loss

    w = eager.randn(3, 2, requires_grad=True)
    x = eager.randn(4, 3)
    text = step.ir(w, x, stage="grad")
    assert text == step.ir(w, x)
    assert "backward" in text


def test_ir_grad_stage_errors():
    @graphc.compile
    def f(x):
        return x * 2

    @graphc.compile
    def count(x):
        return (x > 0).sum()

    x = np.ones(3)
    with pytest.raises(TypeError, match=r"floating-point scalar.*graphc\.vjp"):
        f.ir(x, stage="grad")
    with pytest.raises(TypeError, match="int64"):
        count.ir(x, stage="grad")
    with pytest.raises(ValueError, match="unknown stage 'nope'; available: traced.*grad"):
        f.ir(x, stage="nope")
