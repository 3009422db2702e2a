"""Random programs over the op registry, for differential testing (see docs/testing.md).

A program is Python source written against the public Tensor API: a function of one
to three array arguments, built one statement at a time.  Each candidate statement is
run eagerly on the program's real inputs as it is generated, so the program is always
valid and the generator knows every value's shape and dtype; a candidate eager refuses
is dropped.  Every op of ``eager.ops.registry.OPS`` is reached through one of the
templates in ``OP_TEMPLATES`` or named in ``NOT_GENERATED`` with the reason, and a
test checks that nothing is missing.

:func:`check_program` runs one program eagerly, compiled (native code at an opt level,
and the interpreter) and, when it happens to be importable, with PyTorch, and compares
values, gradients (value_and_grad against eager's backward) and a Hessian-vector
product (grad of grad against eager's double backward).  A mismatch raises
``AssertionError`` whose message is a pasteable test.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import eager
import graphc
from tests.parity import fuzz_ops
from eager.ops.registry import OPS

# op name -> statement templates.  {a}, {b}: values (b broadcasts against a); {d}: a dim
# of a; {k}: keepdim; {s}: a scalar.  "ins" templates write into {a} (a value made in
# the function, never an argument) and may go through views.
OP_TEMPLATES = {
    "abs": ["{a}.abs()"], "cos": ["{a}.cos()"], "exp": ["{a}.exp()"], "log": ["{a}.log()"],
    "neg": ["-{a}"], "relu": ["{a}.relu()"], "sigmoid": ["{a}.sigmoid()"],
    "sign": ["{a}.sign()"], "sin": ["{a}.sin()"], "sqrt": ["{a}.sqrt()"],
    "tanh": ["{a}.tanh()"],
    "add": ["{a} + {b}", "{a} + {s}"], "sub": ["{a} - {b}", "{s} - {a}"],
    "mul": ["{a} * {b}", "{a} * {s}"], "div": ["{a} / {b}", "{a} / {s}"],
    "pow": ["{a} ** 2", "{a}.abs() ** {b}", "{a} ** 0.5", "{a} ** -1"],
    "maximum": ["eager.maximum({a}, {b})"], "minimum": ["eager.minimum({a}, {b})"],
    "eq": ["({a} == {b})"], "ne": ["({a} != {b})"], "lt": ["({a} < {b})"],
    "le": ["({a} <= {s})"], "gt": ["({a} > {b})"], "ge": ["({a} >= {s})"],
    "logical_and": ["(({a} > 0) & ({b} < 0.5))"], "logical_or": ["(({a} > 0) | ({b} < 0))"],
    "logical_not": ["({a} > 0).logical_not()"],
    "where": ["eager.where({a} > {s}, {a}, {b})"],
    "cast": ["{a}.float()", "{a}.double()", "({a} > 0).to({a}.dtype)", "{a}.long().to({a}.dtype)"],
    "clamp": ["{a}.clamp(-0.5, 0.7)", "{a}.clamp(min={s})"],
    "copy": ["{a}.clone()"], "detach": ["{a}.detach()"],
    "fill": ["({a} * 1).fill_({s})", "eager.zeros_like({a})"],
    "sum": ["{a}.sum()", "{a}.sum({d}, keepdim={k})"], "mean": ["{a}.mean({d}, keepdim={k})"],
    "max": ["{a}.max()", "{a}.amax({d}, keepdim={k})"],
    "min": ["{a}.min()", "{a}.amin({d})"],
    "max_dim": ["{a}.max({d}, keepdim={k}).values"], "min_dim": ["{a}.min({d}).values"],
    "argmax": ["{a}.argmax({d}).to({a}.dtype)"], "argmin": ["{a}.argmin({d}, keepdim={k}).to({a}.dtype)"],
    "all": ["({a} > 0).all({d}).to({a}.dtype)"], "any": ["({a} > {s}).any().to({a}.dtype)"],
    "matmul": ["{a} @ {a}.t()", "{a}.t() @ {a}", "{a} @ {a}.transpose(-1, -2)"],
    "expand": ["{a}[..., :1].expand({a}.shape)", "{a}.unsqueeze(0).expand(2, *{a}.shape)"],
    "reshape": ["{a}.reshape(-1)", "{a}.flatten()", "{a}.unsqueeze({d})", "{a}.squeeze()"],
    "transpose": ["{a}.t()", "{a}.transpose(0, -1)", "{a}.T"],
    "getitem": ["{a}[0]", "{a}[1:]", "{a}[::2]", "{a}[..., -1]", "{a}[None]",
                "{a}[eager.tensor([0, -1])]"],
    "setitem": ["ins:{a}[0] = {s}", "ins:{a}[..., :1] = {b}[..., :1]"],
}
# in-place writes, through views too (only into values made inside the function)
INPLACE_TEMPLATES = ["ins:{a}.add_({s})", "ins:{a}.mul_({b})", "ins:{a}[0:1].mul_({s})",
                     "ins:{a}.t()[0].sub_({s})", "ins:{a}.reshape(-1)[::2].fill_({s})",
                     "ins:{a}.clamp_(-1, 1)", "ins:{a}.unsqueeze(0)[0].zero_()"]
NOT_GENERATED = {
    "getitem_grad": "made only by the gradient of getitem; every value_and_grad of a program "
                    "with getitem runs it",
    "philox": "random draws differ from eager's by design (graphc's own stream); "
              "tests/graphc/runtime/test_random.py checks them against the interpreter bit for bit",
}

for _part in fuzz_ops.MODULES:  # the templates of the newer ops, one file per topic
    OP_TEMPLATES.update(_part.TEMPLATES)
    NOT_GENERATED.update(_part.NOT_GENERATED)

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 5e-324, 1e30, -1e30, 1.0, -1.0])


@dataclass
class Program:
    source: str
    inputs: list
    name: str = "f"
    writes: bool = False            # has in-place statements
    opt_level: int = 2
    features: set = field(default_factory=set)

    def fn(self) -> Callable:
        ns: dict = {"eager": eager, "np": np}
        exec(self.source, ns)
        return ns[self.name]

    def as_test(self, note: str = "") -> str:
        """A pasteable pytest function reproducing this program."""
        lines = ["import numpy as np, eager, graphc", "", self.source.rstrip(), "",
                 "", "def test_fuzz_repro():"]
        for i, a in enumerate(self.inputs):
            lines.append(f"    x{i} = np.array({a.tolist()!r}, dtype=np.{a.dtype.name})"
                         .replace("nan", "np.nan").replace("inf", "np.inf") +
                         f".reshape({a.shape!r})")
        args = ", ".join(f"x{i}" for i in range(len(self.inputs)))
        lines += [f"    want = {self.name}(*[eager.tensor(a.copy()) for a in ({args},)])",
                  f"    got = graphc.compile({self.name}, opt_level={self.opt_level})"
                  f"(*[a.copy() for a in ({args},)])",
                  "    # compare want and got" + (f": {note}" if note else "")]
        return "\n".join(lines)


def _random_input(rng, shape, dtype, special: bool) -> np.ndarray:
    x = rng.standard_normal(shape)
    if special and x.size:
        k = max(1, x.size // 4)
        flat = x.reshape(-1)
        flat[rng.integers(0, x.size, k)] = rng.choice(SPECIAL, k)
    return x.astype(dtype)


SHAPES = [(), (1,), (3,), (2, 3), (3, 1), (1, 4), (2, 3, 4), (0,), (0, 3), (4, 0, 2)]
BIG_SHAPES = [(1 << 18,), (512, 640), (3, 1 << 17)]


def generate(seed: int, features: frozenset = frozenset()) -> Program:
    """One random program.  ``features``: "inplace" (writes, through views too),
    "big" (>= 2^18 elements: the parallel loops), "special" (NaN, Inf, -0, subnormal,
    1e30 inputs)."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(rng.choice([np.float32, np.float64]))
    if "big" in features:
        shape = BIG_SHAPES[int(rng.integers(len(BIG_SHAPES)))]
    else:
        shape = SHAPES[int(rng.integers(len(SHAPES)))]
    n_in = int(rng.integers(1, 4))
    shapes = [shape] + [tuple(1 if (rng.random() < 0.3 and d) else d for d in shape)
                        for _ in range(n_in - 1)]
    inputs = [_random_input(rng, s, dtype, "special" in features) for s in shapes]
    names = [f"x{i}" for i in range(n_in)]
    head = "def f(" + ", ".join(names) + "):"
    lines: list = []
    made: list = []                     # values made inside the function
    info: dict = {n: (a.ndim, a.dtype) for n, a in zip(names, inputs)}
    ops = sorted(OP_TEMPLATES)
    n_stmts = int(rng.integers(2, 7 if "big" not in features else 4))
    writes = False
    attempts = 0
    while len(made) < n_stmts and attempts < 60:
        attempts += 1
        pool = names + made
        if "inplace" in features and made and rng.random() < 0.35:
            tmpl = INPLACE_TEMPLATES[int(rng.integers(len(INPLACE_TEMPLATES)))]
        else:
            op = ops[int(rng.integers(len(ops)))]
            tmpl = OP_TEMPLATES[op][int(rng.integers(len(OP_TEMPLATES[op])))]
        inplace = tmpl.startswith("ins:")
        if inplace and (not made or "inplace" not in features):
            continue
        a = (made if inplace else pool)[int(rng.integers(len(made) if inplace else len(pool)))]
        b = pool[int(rng.integers(len(pool)))]
        nd = info[a][0]
        stmt = (tmpl[4:] if inplace else tmpl).format(
            a=a, b=b, d=int(rng.integers(-nd, nd)) if nd else 0, k=bool(rng.integers(2)),
            s=float(rng.choice([0.5, -1.5, 2.0, 0.0, 3.0])))
        target = f"v{len(made)}"
        line = stmt if inplace else f"{target} = {stmt}"
        src = "\n".join([head] + ["    " + ln for ln in lines + [line]] +
                        [f"    return {a if inplace else target}"])
        ns: dict = {"eager": eager, "np": np}
        try:                            # the whole program so far, eagerly, on fresh inputs
            exec(src, ns)
            out = ns["f"](*[eager.tensor(x.copy()) for x in inputs])
        except Exception:
            continue                    # eager refuses it: not a program
        if inplace:
            writes = True
        else:
            if not isinstance(out, eager.Tensor) or out._data.dtype.kind not in "fb" or \
                    out._data.size > (1 << 22):
                continue
            info[target] = (out.ndim, out._data.dtype)
            made.append(target)
        lines.append(line)
    outs = made[-3:] or names[:1]
    body = "\n".join([head] + ["    " + ln for ln in lines] +
                     [f"    return ({', '.join(outs)},)"])
    return Program(body, inputs, writes=writes, opt_level=int(rng.integers(0, 4)),
                   features=set(features))


# ----------------------------------------------------------------------------------------
# running and comparing


def _tol(dtype: np.dtype) -> tuple:
    return (2e-4, 1e-5) if dtype == np.float32 else (1e-9, 1e-12)


def _assert_close(got, want, what: str, prog: Program) -> None:
    got = np.asarray(got)
    want = np.asarray(want)
    msg = f"{what}\n{prog.as_test(what)}"
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}: {msg}"
    if want.dtype.kind == "b" or got.dtype.kind == "b":
        assert np.array_equal(got, want), msg
        return
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    nan_g, nan_w = np.isnan(g), np.isnan(w)
    assert np.array_equal(nan_g, nan_w), f"NaN positions differ: {msg}"
    fin = np.isfinite(w)
    assert np.array_equal(np.isinf(g), np.isinf(w)) and np.array_equal(g[np.isinf(w)],
                                                                        w[np.isinf(w)]), \
        f"infinities differ: {msg}"
    # float32 tolerances when a float32 value may have taken part (an input, .float(), an
    # op on bools, which gives the default float32): a float64 result carries its rounding
    rtol, atol = _tol(np.dtype(np.float32) if _low_precision(prog) else np.dtype(np.float64))
    if fin.any():
        scale = float(np.max(np.abs(w[fin]))) if w.size else 1.0
        np.testing.assert_allclose(g[fin], w[fin], rtol=rtol, atol=atol * (1 + scale) +
                                   rtol * scale * 1e-3, err_msg=msg)


def _low_precision(prog: Program) -> bool:
    return any(a.dtype == np.float32 for a in prog.inputs) or any(
        t in prog.source for t in (".float()", "==", "!=", "<", ">", "logical_not"))


def _to_np(v):
    return v.detach().numpy() if isinstance(v, eager.Tensor) else np.asarray(v)


def _run_eager(fn, inputs, requires_grad=False):
    ts = [eager.tensor(a.copy(), requires_grad=requires_grad) for a in inputs]
    return ts, fn(*ts)


def check_program(prog: Program, grads: bool = True, second_order: bool = True,
                  torch=None) -> None:
    fn = prog.fn()
    try:
        ts, want = _run_eager(fn, prog.inputs)
    except Exception as e:              # (generation ran it, so this is rare)
        raise AssertionError(f"eager failed: {e}\n{prog.as_test()}") from None
    want = [_to_np(w) for w in want] + [t.numpy() for t in ts]    # arguments written too
    for cfg in ({"opt_level": prog.opt_level}, {"backend": "interpreter"}):
        args = [a.copy() for a in prog.inputs]
        try:
            got = list(graphc.compile(fn, **cfg)(*args)) + args
        except graphc.TracerError as e:
            if "memory layout graphc does not follow" in str(e):
                return                  # a documented refusal (docs/limitations.md)
            raise
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_close(g, w, f"output {i} with {cfg}", prog)
    if torch is not None:
        _check_torch(prog, want, torch)
    if prog.writes and len(prog.inputs) > 1 and prog.inputs[1].shape == prog.inputs[0].shape:
        _check_aliased(prog, fn)
    if not grads or prog.writes:
        return                          # eager refuses some gradients after writes
    want = want[:len(want) - len(prog.inputs)]
    floats = [o for o in range(len(want)) if want[o].dtype.kind == "f"]
    if not floats or prog.inputs[0].dtype.kind != "f":
        return
    rng = np.random.default_rng(len(prog.source))
    weights = [rng.uniform(0.5, 1.5, size=want[o].shape).astype(want[o].dtype) for o in floats]

    def loss(*xs):
        outs = fn(*xs)
        total = 0.0
        for o, wgt in zip(floats, weights):
            total = total + (outs[o] * eager.tensor(wgt)).sum()
        return total

    argnums = tuple(range(len(prog.inputs)))
    ts, l_eager = _run_eager(loss, prog.inputs, requires_grad=True)
    if not isinstance(l_eager, eager.Tensor) or not l_eager.requires_grad:
        return
    g_eager = eager.autograd.grad(l_eager, ts, allow_unused=True,
                                  create_graph=second_order)
    val, g_comp = graphc.compile(graphc.value_and_grad(loss, argnums=argnums),
                                 opt_level=prog.opt_level)(*[a.copy() for a in prog.inputs])
    _assert_close(val, l_eager.detach().numpy(), "value_and_grad value", prog)
    for i, (gc, ge) in enumerate(zip(g_comp, g_eager)):
        ge = np.zeros_like(prog.inputs[i]) if ge is None else ge.detach().numpy()
        _assert_close(gc, ge, f"gradient of input {i}", prog)
    if not second_order:
        return
    vs = [rng.uniform(-1, 1, size=a.shape).astype(a.dtype) for a in prog.inputs]
    dot = None
    for ge, v in zip(g_eager, vs):
        if ge is not None and ge.requires_grad:
            term = (ge * eager.tensor(v)).sum()
            dot = term if dot is None else dot + term
    if dot is None:
        return
    h_eager = eager.autograd.grad(dot, ts, allow_unused=True)

    def gv(*xs):
        gs = graphc.grad(loss, argnums=argnums)(*xs)
        total = 0.0
        for gi, v in zip(gs, vs):
            total = total + (gi * eager.tensor(v)).sum()
        return total

    h_comp = graphc.compile(graphc.grad(gv, argnums=argnums),
                            opt_level=prog.opt_level)(*[a.copy() for a in prog.inputs])
    for i, (hc, he) in enumerate(zip(h_comp, h_eager)):
        he = np.zeros_like(prog.inputs[i]) if he is None else he.detach().numpy()
        _assert_close(hc, he, f"Hessian-vector product, input {i}", prog)


def _check_aliased(prog: Program, fn: Callable) -> None:
    """The first argument passed twice (one buffer): compiled must do what eager does."""
    base_e = prog.inputs[0].copy()
    t = eager.from_numpy(base_e)
    try:
        want = fn(t, t, *[eager.tensor(a.copy()) for a in prog.inputs[2:]])
    except Exception:
        return                          # eager refuses this sharing
    want = [_to_np(w) for w in want] + [base_e]
    base_c = prog.inputs[0].copy()
    got = list(graphc.compile(fn, opt_level=prog.opt_level)(
        base_c, base_c, *[a.copy() for a in prog.inputs[2:]])) + [base_c]
    for i, (g, w) in enumerate(zip(got, want)):
        _assert_close(g, w, f"output {i} with the first argument passed twice", prog)


def _check_torch(prog: Program, want: list, torch) -> None:
    """The same source run by PyTorch (float64 results compared at float tolerances)."""
    ns = {"eager": torch, "np": np}
    exec(prog.source, ns)
    try:
        outs = ns[prog.name](*[torch.from_numpy(a.copy()) for a in prog.inputs])
    except Exception:
        return                          # an API PyTorch spells differently
    for i, (o, w) in enumerate(zip(outs, want)):
        _assert_close(o.detach().numpy(), w, f"output {i} against PyTorch", prog)


def missing_ops() -> list:
    """Registered ops neither generated nor listed in NOT_GENERATED."""
    return sorted(set(OPS) - set(OP_TEMPLATES) - set(NOT_GENERATED))
