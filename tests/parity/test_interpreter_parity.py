"""The reference interpreter against eager, op by op and on random programs.

* every op of ``eager.ops.OPS`` and every one of its samples, in float32 and
  float64: a one-node graph traced through the shared op surface
  (``_dispatch``) and interpreted must give exactly the op's numpy forward and
  exactly what eager computes (same dtype, shape and bits);
* random composite programs (a seeded generator of ~10-step chains of unary,
  binary, reduction and movement ops over broadcastable shapes, 0-d and size-1
  dims included, with Python scalars and closed-over numpy constants) traced
  and interpreted against the same program run eagerly on ``eager.Tensor``.
"""
from __future__ import annotations

import numpy as np
import pytest

import eager
import graphc
from eager.surface import _dispatch
from eager.ops import OPS
from graphc.interpreter import interpret, interpret_all

FLOATS = [np.float32, np.float64]


def _with_dtype(arrays, dtype) -> list:
    """Float sample inputs in ``dtype``; index/bool operands keep their dtype."""
    return [np.asarray(a.astype(dtype) if a.dtype.kind == "f" else a) for a in arrays]


def _cases() -> list:
    cases = []
    for name in sorted(OPS):
        for k, _ in enumerate(OPS[name].samples()):
            for dt in FLOATS:
                cases.append(pytest.param(name, k, dt, id=f"{name}-{k}-{np.dtype(dt).name}"))
    return cases


def _native_tol(dtype) -> dict:
    """Native code vs numpy: a few ULP for vector math, reassociation in float sums."""
    if np.dtype(dtype).kind != "f":
        return {"rtol": 0, "atol": 0}
    if np.dtype(dtype) == np.float32:
        return {"rtol": 2e-6, "atol": 1e-6}
    return {"rtol": 1e-13, "atol": 1e-13}


def test_every_op_has_samples():
    missing = [n for n, op in OPS.items() if not op.samples()]
    assert not missing, f"ops without samples cannot be checked for parity: {missing}"


@pytest.mark.parametrize("name, k, dtype", _cases())
def test_op_parity(name, k, dtype):
    op = OPS[name]
    inputs, attrs = op.samples()[k]
    arrays = _with_dtype(inputs, dtype)

    def one_op(*xs):
        return _dispatch(name, "X", xs, dict(attrs))

    one_op.__name__ = f"op_{name}"
    g = graphc.trace(one_op, *arrays)
    # exactly the inputs plus one node of the op under test
    ops = [d["op"] for _, d in g.nx.nodes(data=True)]
    assert ops.count("input") == len(arrays)
    assert [o for o in ops if o != "input"] == [name]
    assert len(g.outputs) == 1
    node = g[g.outputs[0]]
    assert node["attrs"] == dict(attrs)

    (got,) = interpret(g, *arrays)
    ref = np.asarray(op.forward(*arrays, **attrs))
    ev = one_op(*[eager.from_numpy(a.copy()) for a in arrays])
    assert isinstance(ev, eager.Tensor)
    ev = ev.numpy()

    for other, what in ((ref, "numpy forward"), (ev, "eager")):
        msg = f"{name} sample {k}: interpreter vs {what}"
        assert got.dtype == other.dtype, f"{msg}: dtype {got.dtype} vs {other.dtype}"
        assert got.shape == other.shape, f"{msg}: shape {got.shape} vs {other.shape}"
        np.testing.assert_array_equal(got, other, err_msg=msg)
    # the node's static type is what the interpreter produced
    assert tuple(node["shape"]) == got.shape and node["dtype"] == got.dtype.name
    # and the compiled (native) entry point agrees: exactly for most ops, within the
    # documented ULP bounds of graphc's vector math (docs/backend-accuracy.md) and the
    # reassociated float sums for transcendentals and reductions
    cf = graphc.compile(one_op)
    out = cf(*arrays)
    assert out.dtype == ref.dtype and out.shape == ref.shape
    np.testing.assert_allclose(out, ref, equal_nan=True, **_native_tol(got.dtype))


def test_interpret_checks_inputs():
    g = graphc.trace(lambda x, y: x * y, np.ones((2, 3), np.float32), np.ones(3, np.float32))
    with pytest.raises(graphc.GraphcError, match="takes 2 inputs, got 1"):
        interpret(g, np.ones((2, 3), np.float32))
    with pytest.raises(graphc.GraphcError,
                       match=r"input 'y'.*expects float32\[3\], got float64\[3\]"):
        interpret(g, np.ones((2, 3), np.float32), np.ones(3))


def test_interpret_all_records_every_node():
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    g = graphc.trace(lambda x: (x.exp() * 2).sum(1), x)
    rec = interpret_all(g, x)
    assert sorted(rec) == g.node_ids()
    by_op = {g[n]["op"]: v for n, v in rec.items()}
    np.testing.assert_array_equal(by_op["exp"], np.exp(x))
    np.testing.assert_array_equal(by_op["mul"], np.exp(x) * 2)
    np.testing.assert_array_equal(rec[g.outputs[0]], (np.exp(x) * 2).sum(1))


def test_interpreter_error_names_the_node():
    # a runtime failure inside a forward (max over an empty axis) names the node
    x = np.ones((2, 3), np.float32)
    g = graphc.trace(lambda x: x.amax(0), x)
    g2 = g.copy()
    g2.nx.nodes[g2.inputs[0]]["shape"] = (0, 3)   # lie about the input: the forward must fail
    with pytest.raises(graphc.GraphcError, match=r"interpreting %1 = max\(%0\)"):
        interpret(g2, np.ones((0, 3), np.float32))


# ---------------------------------------------------------------------------
# random composite programs


def _unary():
    return {
        "neg": lambda t: -t,
        "exp_tanh": lambda t: t.tanh().exp(),
        "sin": lambda t: t.sin(),
        "cos": lambda t: t.cos(),
        "tanh": lambda t: t.tanh(),
        "sigmoid": lambda t: t.sigmoid(),
        "relu": lambda t: t.relu(),
        "abs": lambda t: t.abs(),
        "sign": lambda t: t.sign(),
        "log_abs1": lambda t: (t.abs() + 1).log(),
        "sqrt_abs": lambda t: t.abs().sqrt(),
        "square": lambda t: t.pow(2),
        "clamp": lambda t: t.clamp(-0.5, 0.75),
        "clamp_min": lambda t: t.clamp(min=0),
        "affine": lambda t: t * 0.5 + 0.25,
        "rsub": lambda t: 1.0 - t,
        "rdiv": lambda t: 2.0 / (t.abs() + 1.0),
        "copy": lambda t: t.clone(),
        "cast_roundtrip": lambda t: t.double().to(t.dtype),
    }


def _binary():
    return {
        "add": lambda a, b: a + b,
        "sub": lambda a, b: a - b,
        "mul": lambda a, b: a * b,
        "div": lambda a, b: a / (b.abs() + 1),
        "maximum": lambda a, b: eager.maximum(a, b),
        "minimum": lambda a, b: eager.minimum(a, b),
        "where": lambda a, b: eager.where(a > b, a, b * 0.5),
        "where_scalar": lambda a, b: eager.where(a >= b, a, 0.0),
        "pow": lambda a, b: (a.abs() + 0.5) ** b.tanh(),
        "mask_mul": lambda a, b: a * (a < b).to(a.dtype),
    }


def _broadcastable(a: tuple, b: tuple) -> bool:
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


class Program:
    """A seeded random chain of ops, replayable on eager Tensors or on Tracers."""

    def __init__(self, seed: int, dtype) -> None:
        self.rng = np.random.default_rng(seed)
        self.dtype = np.dtype(dtype)
        rng = self.rng
        base = [(2, 3), (3, 1, 2), (4,), (2, 1, 3)][int(rng.integers(4))]
        variants = [base, (), (1,), base[-1:], (1,) * len(base)]
        variants += [tuple(1 if rng.random() < 0.4 else d for d in base) for _ in range(3)]
        n_in = int(rng.integers(2, 4))
        self.input_shapes = [variants[int(rng.integers(len(variants)))] for _ in range(n_in)]
        self.input_shapes[0] = base
        self.inputs = [rng.uniform(-2, 2, size=s).astype(self.dtype) for s in self.input_shapes]
        self.steps: list = []
        self.consts: list = []
        self._build(int(rng.integers(8, 13)))

    # the generator runs the program eagerly as it goes, so it always knows the shapes
    def _build(self, n_steps: int) -> None:
        rng = self.rng
        pool = [eager.from_numpy(a.copy()) for a in self.inputs]
        un, bi = _unary(), _binary()
        for _ in range(n_steps):
            kind = rng.choice(["unary", "binary", "binary", "reduce", "move", "const"])
            i = int(rng.integers(len(pool)))
            x = pool[i]
            shape = tuple(x.shape)
            if kind == "unary":
                step = ("unary", str(rng.choice(sorted(un))), (i,), {})
            elif kind == "binary":
                cands = [j for j, t in enumerate(pool) if _broadcastable(shape, tuple(t.shape))]
                j = cands[int(rng.integers(len(cands)))]
                step = ("binary", str(rng.choice(sorted(bi))), (i, j), {})
            elif kind == "reduce":
                fn = str(rng.choice(["sum", "mean", "max", "min"]))
                if not shape or rng.random() < 0.25:
                    dim = None
                else:
                    dim = int(rng.integers(-len(shape), len(shape)))
                keep = bool(rng.random() < 0.5) and dim is not None
                step = ("reduce", fn, (i,), {"dim": dim, "keepdim": keep})
            elif kind == "move":
                opts = ["flatten", "unsqueeze", "reshape_back"]
                if len(shape) >= 2:
                    opts += ["transpose", "permute_rev", "slice"]
                if 1 in shape:
                    opts += ["squeeze", "expand"]
                if shape and shape[0] > 1:
                    opts += ["index_int", "index_array"]
                how = str(rng.choice(opts))
                params = {}
                if how == "unsqueeze":
                    params["dim"] = int(rng.integers(0, len(shape) + 1))
                elif how == "transpose":
                    params["dims"] = tuple(int(d) for d in rng.choice(len(shape), 2, replace=False))
                elif how == "index_int":
                    params["k"] = int(rng.integers(-shape[0], shape[0]))
                elif how == "index_array":
                    params["idx"] = rng.integers(0, shape[0], size=3)
                step = ("move", how, (i,), params)
            else:
                cshape = tuple(1 if rng.random() < 0.5 else d for d in shape)
                c = rng.uniform(-1, 1, size=cshape).astype(self.dtype)
                self.consts.append(c)
                step = ("const", str(rng.choice(["add", "mul", "radd"])), (i,),
                        {"c": len(self.consts) - 1})
            pool.append(self._apply(step, pool))
            self.steps.append(step)

    def _apply(self, step, pool):
        kind, name, idx, p = step
        x = pool[idx[0]]
        if kind == "unary":
            return _unary()[name](x)
        if kind == "binary":
            return _binary()[name](x, pool[idx[1]])
        if kind == "reduce":
            if p["dim"] is None:
                return getattr(x, name)()
            out = getattr(x, name)(p["dim"], keepdim=p["keepdim"])
            return out.values if name in ("max", "min") else out
        if kind == "move":
            shape = tuple(x.shape)
            if name == "flatten":
                return x.reshape(-1)
            if name == "unsqueeze":
                return x.unsqueeze(p["dim"])
            if name == "reshape_back":
                return x.reshape(-1).reshape(shape)
            if name == "transpose":
                return x.transpose(*p["dims"])
            if name == "permute_rev":
                return x.permute(*reversed(range(len(shape))))
            if name == "slice":
                return x[:, ::2]
            if name == "squeeze":
                return x.squeeze()
            if name == "expand":
                return x.expand(*[3 if d == 1 else d for d in shape])
            if name == "index_int":
                return x[p["k"]]
            if name == "index_array":
                return x[p["idx"]]
        if kind == "const":
            c = self.consts[p["c"]]
            if name == "add":
                return x + c
            if name == "mul":
                return x * c
            return c + x          # ndarray on the left: numpy hands the op to the tracer
        raise AssertionError(step)

    def __call__(self, *xs):
        pool = list(xs)
        for step in self.steps:
            pool.append(self._apply(step, pool))
        return pool[-1], pool[-2]

    def describe(self) -> str:
        return f"inputs {self.input_shapes} {self.dtype}; steps " + "; ".join(
            f"{k}:{n}{list(i)}" for k, n, i, _ in self.steps)


@pytest.mark.parametrize("dtype", FLOATS, ids=["f32", "f64"])
@pytest.mark.parametrize("seed", range(25))
def test_random_program(seed, dtype):
    prog = Program(seed, dtype)
    want = prog(*[eager.from_numpy(a.copy()) for a in prog.inputs])
    g = graphc.trace(prog, *prog.inputs)
    got = interpret(g, *prog.inputs)
    tol = dict(rtol=2e-6, atol=1e-6) if dtype is np.float32 else dict(rtol=1e-13, atol=1e-13)
    assert len(got) == 2
    for k, (a, b) in enumerate(zip(got, want)):
        b = b.numpy()
        msg = f"output {k} of {prog.describe()}"
        assert a.dtype == b.dtype and a.shape == b.shape, msg
        np.testing.assert_allclose(a, b, equal_nan=True, err_msg=msg, **tol)
    # the same program compiled: numpy in, numpy out, same numbers; second call is a cache hit
    cf = graphc.compile(prog)
    for _ in range(2):
        out = cf(*prog.inputs)
        for a, b in zip(out, got):
            np.testing.assert_allclose(a, b, equal_nan=True, **_native_tol(np.asarray(b).dtype))
    assert cf.cache_info().hits == 1 and cf.cache_info().traces == 1


def test_random_programs_cover_the_op_families():
    seen = set()
    for dtype in FLOATS:
        for seed in range(25):
            prog = Program(seed, dtype)
            g = graphc.trace(prog, *prog.inputs)
            seen |= {d["op"] for _, d in g.nx.nodes(data=True)}
            shapes = {tuple(d["shape"]) for _, d in g.nx.nodes(data=True)}
            seen |= {"<0-d>"} if () in shapes else set()
            seen |= {"<size-1>"} if any(1 in s for s in shapes) else set()
    for op in ["add", "sub", "mul", "div", "pow", "exp", "log", "tanh", "where", "maximum",
               "sum", "mean", "max", "reshape", "transpose", "expand", "getitem", "const",
               "cast", "clamp", "<0-d>", "<size-1>"]:
        assert op in seen, f"the random programs never produce {op}"
