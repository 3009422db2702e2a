"""The four seed tutorials (the PyTorch autograd tutorials the project started from), cell by cell, run with ``import eager as torch``.

Each deterministic cell is executed exactly as the seed writes it and the test
asserts what the seed prints: reprs, grad_fn names, errors and warnings.  Where
a seed cell shows random numbers we assert the relations the tutorial derives
(analytic gradients) instead of the digits.  Seed 003's notebook is also
replayed as one session through a tiny notebook runner that compares the
captured output of every cell with the text the seed shows.
"""
from __future__ import annotations

import ast
import contextlib
import io
import re
import warnings

import numpy as np
import pytest

import eager
import eager as torch
from eager.autograd import Variable

ADDR = re.compile(r"<(\w+) object at 0x[0-9a-f]+>")
FREED = "Trying to backward through the graph a second time"
RETAIN = "Specify retain_graph=True"
NONLEAF = "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed"


def np_(t) -> np.ndarray:
    return np.asarray(t.detach()._data)


# ---------------------------------------------------------------------------
# a tiny notebook runner: exec a cell, display the value of a trailing expression


def run_cell(ns: dict, src: str) -> str:
    """Run ``src`` in ``ns`` like a Jupyter cell; return what the cell shows."""
    tree = ast.parse(src)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(tree, "<cell>", "exec"), ns)
        if last is not None:
            value = eval(compile(last, "<cell>", "eval"), ns)
            if value is not None:
                print(repr(value))
    return buf.getvalue()


def shown(text: str) -> str:
    """Strip the object addresses the notebook printed (they differ run to run)."""
    return ADDR.sub(r"<\1 object at 0x...>", text).strip()


# ---------------------------------------------------------------------------
# seed 003 (autograd notebook): the session, cell by cell

SEED3_SESSION = [
    # (cell source, output the seed shows)
    ("x = torch.ones(2, 2, requires_grad=True)\nprint(x)",
     "tensor([[1., 1.],\n        [1., 1.]], requires_grad=True)"),
    ("y = x + 2\nprint(y)",
     "tensor([[3., 3.],\n        [3., 3.]], grad_fn=<AddBackward0>)"),
    ("print(y.grad_fn)", "<AddBackward0 object at 0x...>"),
    ("z = y * y * 3\nout = z.mean()\n\nprint(z, out)",
     "tensor([[27., 27.],\n        [27., 27.]], grad_fn=<MulBackward0>) "
     "tensor(27., grad_fn=<MeanBackward0>)"),
    ("a = torch.randn(2, 2)\na = ((a * 3) / (a - 1))\nprint(a.requires_grad)\n"
     "a.requires_grad_(True)\nprint(a.requires_grad)\nb = (a * a).sum()\nprint(b.grad_fn)",
     "False\nTrue\n<SumBackward0 object at 0x...>"),
    ("out.backward()", ""),
    ("print(x.grad)", "tensor([[4.5000, 4.5000],\n        [4.5000, 4.5000]])"),
    ("x.data", "tensor([[1., 1.],\n        [1., 1.]])"),
]

SEED3_AFTER_ERROR = [
    ("# let's try again\ny = x + 2\nz = y * y * 3\nout = z.mean()\n\nout.retain_grad()\n\n"
     "out.backward(create_graph=True, retain_graph=True)", ""),
    ("x.grad", "tensor([[9., 9.],\n        [9., 9.]], grad_fn=<AddBackward0>)"),
    # The seed (an old PyTorch) shows grad_fn=<ZeroBackward>; modern PyTorch names the
    # node ZeroBackward0 and eager follows modern PyTorch.
    ("x.grad.zero_()\nx.grad", "tensor([[0., 0.],\n        [0., 0.]], grad_fn=<ZeroBackward0>)"),
    ("out.backward()  # this won't complain now", ""),
    ("x.grad", "tensor([[4.5000, 4.5000],\n        [4.5000, 4.5000]], grad_fn=<ZeroBackward0>)"),
    ("out.grad", "tensor(2.)"),
]

SEED3_TAIL = [
    ("print(x.requires_grad)\nprint((x ** 2).requires_grad)\n\nwith torch.no_grad():\n"
     "    print((x ** 2).requires_grad)", "True\nTrue\nFalse"),
    ("print(x.requires_grad)\ny = x.detach()\nprint(y.requires_grad)\nprint(x.eq(y).all())",
     "True\nFalse\ntensor(True)"),
]


def _replay(ns: dict, cells: list) -> None:
    for src, expected in cells:
        got = shown(run_cell(ns, src))
        assert got == expected, f"cell:\n{src}\nshows:\n{got}\nseed shows:\n{expected}"


def test_seed3_notebook_session_replays_exactly():
    ns = {"torch": eager}
    _replay(ns, SEED3_SESSION)

    # In [14]: reading .grad of a non-leaf warns and shows nothing (None)
    with pytest.warns(UserWarning, match="not a leaf Tensor"):
        assert run_cell(ns, "# this is supposed to raise a warning\nout.grad") == ""

    # In [15]: retain_grad() then backward a second time: the buffers are gone
    with pytest.raises(RuntimeError, match=FREED) as info:
        run_cell(ns, "out.retain_grad()\n\n# what if we try to re-run backward once again ?\n"
                     "out.backward()")
    assert RETAIN in str(info.value)
    assert "when calling backward the first time" in str(info.value) or \
        "backward through the graph a second time" in str(info.value)

    _replay(ns, SEED3_AFTER_ERROR)

    # In [22]: y is an intermediate: its grad was not retained (warning, None)
    with pytest.warns(UserWarning, match="not a leaf Tensor"):
        assert run_cell(ns, "y.grad") == ""

    _replay(ns, SEED3_TAIL)


# --- seed 003 again, cell by cell, with explicit value assertions ------------------


def _seed3_forward():
    x = torch.ones(2, 2, requires_grad=True)
    y = x + 2
    z = y * y * 3
    out = z.mean()
    return x, y, z, out


def test_seed3_leaf_repr_and_flags():
    x = torch.ones(2, 2, requires_grad=True)
    assert repr(x) == "tensor([[1., 1.],\n        [1., 1.]], requires_grad=True)"
    assert str(x) == repr(x)
    assert x.is_leaf and x.requires_grad and x.grad_fn is None and x.grad is None


def test_seed3_forward_values_and_grad_fns():
    x, y, z, out = _seed3_forward()
    assert repr(y) == "tensor([[3., 3.],\n        [3., 3.]], grad_fn=<AddBackward0>)"
    assert type(y.grad_fn).__name__ == "AddBackward0"
    assert re.fullmatch(r"<AddBackward0 object at 0x[0-9a-f]+>", repr(y.grad_fn))
    assert repr(z) == "tensor([[27., 27.],\n        [27., 27.]], grad_fn=<MulBackward0>)"
    assert repr(out) == "tensor(27., grad_fn=<MeanBackward0>)"
    assert out.shape == () and out.item() == 27.0
    np.testing.assert_array_equal(np_(z), np.full((2, 2), 27.0, np.float32))
    assert not y.is_leaf and not z.is_leaf and not out.is_leaf


def test_seed3_requires_grad_underscore_cell():
    eager.manual_seed(0)
    a = torch.randn(2, 2)
    a = ((a * 3) / (a - 1))
    assert a.requires_grad is False
    assert a.grad_fn is None and a.is_leaf
    ret = a.requires_grad_(True)
    assert ret is a
    assert a.requires_grad is True
    b = (a * a).sum()
    assert type(b.grad_fn).__name__ == "SumBackward0"
    assert re.fullmatch(r"<SumBackward0 object at 0x[0-9a-f]+>", str(b.grad_fn))
    # the flag defaults to True when not given, and can be switched back off on a leaf
    a.requires_grad_(False)
    assert a.requires_grad is False
    a.requires_grad_()
    assert a.requires_grad is True


def test_seed3_backward_gives_4_5_and_data():
    x, y, z, out = _seed3_forward()
    assert out.backward() is None
    assert repr(x.grad) == "tensor([[4.5000, 4.5000],\n        [4.5000, 4.5000]])"
    np.testing.assert_allclose(np_(x.grad), 1.5 * (np_(x) + 2))   # d o / d x_i = 3/2 (x_i + 2)
    assert x.grad.grad_fn is None and not x.grad.requires_grad
    d = x.data
    assert repr(d) == "tensor([[1., 1.],\n        [1., 1.]])"
    assert not d.requires_grad and d.grad_fn is None


def test_seed3_out_backward_equivalent_to_explicit_one():
    x, _, _, out = _seed3_forward()
    out.backward(torch.tensor(1.))
    g1 = np_(x.grad).copy()
    x2, _, _, out2 = _seed3_forward()
    out2.backward()
    np.testing.assert_array_equal(g1, np_(x2.grad))


def test_seed3_nonleaf_grad_warns():
    x, y, z, out = _seed3_forward()
    out.backward()
    with pytest.warns(UserWarning, match=re.escape(NONLEAF)):
        assert out.grad is None
    with pytest.warns(UserWarning, match="retain_grad"):
        assert y.grad is None
    with warnings.catch_warnings():        # a leaf's .grad never warns
        warnings.simplefilter("error")
        assert x.grad is not None


def test_seed3_second_backward_raises():
    x, y, z, out = _seed3_forward()
    out.backward()
    out.retain_grad()
    with pytest.raises(RuntimeError) as info:
        out.backward()
    msg = str(info.value)
    assert msg.startswith("Trying to backward through the graph a second time")
    assert "Specify retain_graph=True" in msg
    # the failed call did not touch the gradient already accumulated
    np.testing.assert_array_equal(np_(x.grad), np.full((2, 2), 4.5, np.float32))


def test_seed3_create_graph_accumulates_then_zero_then_backward_again():
    x, y, z, out = _seed3_forward()
    out.backward()                                  # x.grad = 4.5
    y = x + 2
    z = y * y * 3
    out = z.mean()
    out.retain_grad()
    out.backward(create_graph=True, retain_graph=True)
    # accumulated, not replaced, and (create_graph) differentiable
    assert repr(x.grad) == "tensor([[9., 9.],\n        [9., 9.]], grad_fn=<AddBackward0>)"
    assert x.grad.requires_grad
    assert repr(out.grad) == "tensor(1.)"

    ret = x.grad.zero_()
    assert ret is x.grad
    # seed shows <ZeroBackward> (old PyTorch); modern PyTorch and eager: ZeroBackward0
    assert repr(x.grad) == "tensor([[0., 0.],\n        [0., 0.]], grad_fn=<ZeroBackward0>)"

    out.backward()                                  # retained graph: no complaint
    assert repr(x.grad) == ("tensor([[4.5000, 4.5000],\n        [4.5000, 4.5000]], "
                            "grad_fn=<ZeroBackward0>)")
    assert repr(out.grad) == "tensor(2.)"           # retained grad accumulated 1 + 1
    with pytest.warns(UserWarning, match="not a leaf"):
        assert y.grad is None


def test_seed3_no_grad_cell():
    x = torch.ones(2, 2, requires_grad=True)
    assert x.requires_grad is True
    assert (x ** 2).requires_grad is True
    with torch.no_grad():
        r = x ** 2
        assert r.requires_grad is False and r.grad_fn is None
    assert (x ** 2).requires_grad is True          # restored on exit


def test_seed3_detach_cell():
    x = torch.ones(2, 2, requires_grad=True)
    y = x.detach()
    assert x.requires_grad is True and y.requires_grad is False
    assert y.is_leaf and y.grad_fn is None
    r = x.eq(y).all()
    assert repr(r) == "tensor(True)" and r.dtype == torch.bool
    # same storage: an in-place change through the detached tensor is visible in x
    y.mul_(3)
    np.testing.assert_array_equal(np_(x), np.full((2, 2), 3.0, np.float32))


# --- seed 003: the three two-layer MLP loops --------------------------------------

N, D_IN, H, D_OUT = 64, 1000, 100, 10
LR = 1e-6


def _seed3_data(seed: int = 0):
    eager.manual_seed(seed)
    dtype = torch.float
    device = torch.device("cpu")
    x = torch.randn(N, D_IN, device=device, dtype=dtype)
    y = torch.randn(N, D_OUT, device=device, dtype=dtype)
    w1 = torch.randn(D_IN, H, device=device, dtype=dtype)
    w2 = torch.randn(H, D_OUT, device=device, dtype=dtype)
    return x, y, w1, w2


def _numpy_loop(x, y, w1, w2, steps=500):
    """Seed 003 In [4], verbatim (pure numpy: the reference)."""
    learning_rate = 1e-6
    losses = []
    for t in range(steps):
        h = x.dot(w1)
        h_relu = np.maximum(h, 0)
        y_pred = h_relu.dot(w2)
        loss = np.square(y_pred - y).sum()
        losses.append(loss)
        grad_y_pred = 2.0 * (y_pred - y)
        grad_w2 = h_relu.T.dot(grad_y_pred)
        grad_h_relu = grad_y_pred.dot(w2.T)
        grad_h = grad_h_relu.copy()
        grad_h[h < 0] = 0
        grad_w1 = x.T.dot(grad_h)
        w1 -= learning_rate * grad_w1
        w2 -= learning_rate * grad_w2
    return losses


def _torch_manual_loop(x, y, w1, w2, steps=500):
    """Seed 003 In [6], verbatim: hand-written backward with eager tensors."""
    learning_rate = 1e-6
    losses = []
    for t in range(steps):
        h = x.mm(w1)  # x * w
        h_relu = h.clamp(min=0)
        y_pred = h_relu.mm(w2)
        loss = (y_pred - y).pow(2).sum().item()
        losses.append(loss)
        grad_y_pred = 2.0 * (y_pred - y)
        grad_w2 = h_relu.t().mm(grad_y_pred)
        grad_h_relu = grad_y_pred.mm(w2.t())
        grad_h = grad_h_relu.clone()
        grad_h[h < 0] = 0
        grad_w1 = x.t().mm(grad_h)
        w1 -= learning_rate * grad_w1
        w2 -= learning_rate * grad_w2
    return losses


def _torch_autograd_loop(x, y, w1, w2, steps=500):
    """Seed 003 In [9], verbatim: autograd backward, no_grad update, zero_ grads."""
    learning_rate = 1e-6
    losses = []
    for t in range(steps):
        y_pred = x.mm(w1).clamp(min=0).mm(w2)
        loss = (y_pred - y).pow(2).sum()
        losses.append(loss.item())
        loss.backward()
        with torch.no_grad():
            w1 -= learning_rate * w1.grad
            w2 -= learning_rate * w2.grad
            w1.grad.zero_()
            w2.grad.zero_()
    return losses


def _check_trajectory(losses):
    """The seed's shape: ~3e7 at t=0, orders of magnitude lower every 50 steps, < 1 by 450."""
    assert len(losses) == 500
    assert all(np.isfinite(losses))
    assert losses[0] > 1e6
    assert losses[50] < 1e-2 * losses[0]
    assert losses[100] < losses[50]
    assert losses[450] < 1.0
    assert losses[-1] < 1e-6 * losses[0]
    checkpoints = losses[::50]
    assert all(b < a for a, b in zip(checkpoints, checkpoints[1:]))


@pytest.mark.slow
def test_seed3_numpy_mlp_loop_reference():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, D_IN))
    y = rng.standard_normal((N, D_OUT))
    w1 = rng.standard_normal((D_IN, H))
    w2 = rng.standard_normal((H, D_OUT))
    _check_trajectory(_numpy_loop(x, y, w1, w2))


@pytest.mark.slow
def test_seed3_manual_and_autograd_mlp_loops_agree():
    x, y, w1, w2 = _seed3_data(0)
    x_np, y_np = np_(x).astype(np.float64), np_(y).astype(np.float64)
    w1_np, w2_np = np_(w1).astype(np.float64), np_(w2).astype(np.float64)
    aw1 = w1.clone().requires_grad_(True)         # autograd weights: same start
    aw2 = w2.clone().requires_grad_(True)
    assert aw1.is_leaf and aw2.is_leaf

    manual = _torch_manual_loop(x, y, w1, w2)
    assert all(isinstance(v, float) for v in manual)     # .item() gives Python floats
    _check_trajectory(manual)

    auto = _torch_autograd_loop(x, y, aw1, aw2)
    _check_trajectory(auto)
    # same weights, same arithmetic: the losses agree to float32 tolerance
    np.testing.assert_allclose(auto, manual, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np_(aw1), np_(w1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np_(aw2), np_(w2), rtol=1e-4, atol=1e-5)
    assert w1.dtype == torch.float32 and aw1.dtype == torch.float32
    assert aw1.requires_grad and aw1.is_leaf and aw1.grad is not None
    np.testing.assert_array_equal(np_(aw1.grad), 0)      # zeroed by the last step

    # and the float64 numpy reference from the same start follows the same path
    ref = _numpy_loop(x_np, y_np, w1_np, w2_np)
    np.testing.assert_allclose(manual[:300], ref[:300], rtol=2e-2)


def test_seed3_manual_step_matches_autograd_gradients():
    """One step of each loop, compared directly (fast version of the slow test)."""
    eager.manual_seed(3)
    x, y = torch.randn(8, 20), torch.randn(8, 4)
    w1, w2 = torch.randn(20, 6), torch.randn(6, 4)
    h = x.mm(w1)
    h_relu = h.clamp(min=0)
    y_pred = h_relu.mm(w2)
    grad_y_pred = 2.0 * (y_pred - y)
    grad_w2 = h_relu.t().mm(grad_y_pred)
    grad_h = grad_y_pred.mm(w2.t()).clone()
    grad_h[h < 0] = 0
    grad_w1 = x.t().mm(grad_h)

    a1, a2 = w1.clone().requires_grad_(), w2.clone().requires_grad_()
    loss = (x.mm(a1).clamp(min=0).mm(a2) - y).pow(2).sum()
    assert type(loss.grad_fn).__name__ == "SumBackward0"
    loss.backward()
    np.testing.assert_allclose(np_(a1.grad), np_(grad_w1), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(np_(a2.grad), np_(grad_w2), rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------
# seed 001 (computation graphs, PyTorch 101)


def test_seed1_uninitialized_tensor_constructor():
    tsr = torch.Tensor(3, 5)
    assert tuple(tsr.shape) == (3, 5) and tsr.dtype == torch.float32
    assert not tsr.requires_grad and tsr.is_leaf
    text = repr(tsr)                          # garbage values, but it prints as a 3x5 tensor
    assert text.startswith("tensor([[") and text.count("\n") == 2


def test_seed1_requires_grad_construction_cell():
    t1 = torch.randn((3, 3), requires_grad=True)
    assert t1.requires_grad and tuple(t1.shape) == (3, 3)
    t2 = torch.FloatTensor(3, 3)  # No way to specify requires_grad while initiating
    assert not t2.requires_grad
    t2.requires_grad = True
    assert t2.requires_grad and t2.is_leaf and t2.dtype == torch.float32
    assert tuple(t2.shape) == (3, 3)


def _seed1_graph(seed=1):
    eager.manual_seed(seed)
    a = torch.randn((3, 3), requires_grad=True)
    w1 = torch.randn((3, 3), requires_grad=True)
    w2 = torch.randn((3, 3), requires_grad=True)
    w3 = torch.randn((3, 3), requires_grad=True)
    w4 = torch.randn((3, 3), requires_grad=True)
    b = w1 * a
    c = w2 * a
    d = w3 * b + w4 * c
    return a, w1, w2, w3, w4, b, c, d


def test_seed1_grad_fn_print_cell():
    ns = {"torch": eager}
    src = """
import torch
a = torch.randn((3,3), requires_grad = True)

w1 = torch.randn((3,3), requires_grad = True)
w2 = torch.randn((3,3), requires_grad = True)
w3 = torch.randn((3,3), requires_grad = True)
w4 = torch.randn((3,3), requires_grad = True)

b = w1*a
c = w2*a

d = w3*b + w4*c

L = 10 - d

print("The grad fn for a is", a.grad_fn)
print("The grad fn for d is", d.grad_fn)
""".replace("import torch", "torch = torch")
    out = run_cell(ns, src)
    assert shown(out) == ("The grad fn for a is None\n"
                          "The grad fn for d is <AddBackward0 object at 0x...>")
    assert re.search(r"<AddBackward0 object at 0x[0-9a-f]+>", out)
    d = ns["d"]
    assert type(d.grad_fn).__name__ == "AddBackward0"
    assert ns["a"].grad_fn is None
    assert type(ns["L"].grad_fn).__name__ == "RsubBackward1"     # 10 - d


def test_seed1_graph_structure_is_made_of_functions():
    a, w1, w2, w3, w4, b, c, d = _seed1_graph()
    L = (10 - d).sum()
    names = lambda node: [type(n).__name__ if n is not None else None  # noqa: E731
                          for n, _ in node.next_functions]
    assert type(L.grad_fn).__name__ == "SumBackward0"
    rsub = L.grad_fn.next_functions[0][0]
    assert type(rsub).__name__ == "RsubBackward1"
    # the Python scalar 10 is not a graph input: the only real edge goes to d's node
    edges = [n for n, _ in rsub.next_functions if n is not None]
    assert len(edges) == 1
    add = edges[0]
    assert add is d.grad_fn and names(add) == ["MulBackward0", "MulBackward0"]
    m3 = add.next_functions[0][0]                 # w3 * b
    assert names(m3) == ["AccumulateGrad", "MulBackward0"]
    assert m3.next_functions[0][0].variable is w3
    assert m3.next_functions[1][0] is b.grad_fn
    assert b.grad_fn.next_functions[0][0].variable is w1
    assert b.grad_fn.next_functions[1][0].variable is a
    # a feeds two products: both edges reach the same AccumulateGrad node
    assert b.grad_fn.next_functions[1][0] is c.grad_fn.next_functions[1][0]


def test_seed1_vector_backward_raises():
    a, w1, w2, w3, w4, b, c, d = _seed1_graph()
    L = (10 - d)
    with pytest.raises(RuntimeError, match="^grad can be implicitly created only for scalar "
                                           "outputs$"):
        L.backward()
    assert all(t.grad is None for t in (a, w1, w2, w3, w4))


def _expected_seed1_grads(a, w1, w2, w3, w4):
    A, W1, W2, W3, W4 = (np_(t) for t in (a, w1, w2, w3, w4))
    return {"a": -(W3 * W1 + W4 * W2), "w1": -(W3 * A), "w2": -(W4 * A),
            "w3": -(W1 * A), "w4": -(W2 * A)}


def _check_seed1_grads(a, w1, w2, w3, w4):
    exp = _expected_seed1_grads(a, w1, w2, w3, w4)
    for name, t in zip(["a", "w1", "w2", "w3", "w4"], [a, w1, w2, w3, w4]):
        assert t.grad is not None and tuple(t.grad.shape) == (3, 3)
        np.testing.assert_allclose(np_(t.grad), exp[name], rtol=1e-6, atol=1e-6,
                                   err_msg=name)


def test_seed1_sum_backward_cell():
    a, w1, w2, w3, w4, b, c, d = _seed1_graph()
    L = (10 - d).sum()
    assert L.shape == () and type(L.grad_fn).__name__ == "SumBackward0"
    L.backward()
    _check_seed1_grads(a, w1, w2, w3, w4)


def test_seed1_ones_backward_cell():
    a, w1, w2, w3, w4, b, c, d = _seed1_graph()
    L = (10 - d)
    L.backward(torch.ones(L.shape))
    _check_seed1_grads(a, w1, w2, w3, w4)


def test_seed1_both_ways_agree():
    g = []
    for way in ("sum", "ones"):
        a, w1, w2, w3, w4, b, c, d = _seed1_graph(seed=7)
        if way == "sum":
            (10 - d).sum().backward()
        else:
            (10 - d).backward(torch.ones((3, 3)))
        g.append([np_(t.grad).copy() for t in (a, w1, w2, w3, w4)])
    for x, y in zip(*g):
        np.testing.assert_array_equal(x, y)


def test_seed1_gradient_descent_update_cell():
    a, w1, w2, w3, w4, b, c, d = _seed1_graph()
    (10 - d).sum().backward()
    old, grad = np_(w1).copy(), np_(w1.grad).copy()
    leaf = w1
    learning_rate = 0.5
    w1 = w1 - learning_rate * w1.grad
    np.testing.assert_allclose(np_(w1), old - 0.5 * grad, rtol=1e-6)
    # the result is a new non-leaf tensor in the graph; the old leaf is untouched
    assert type(w1.grad_fn).__name__ == "SubBackward0"
    assert not w1.is_leaf and w1.requires_grad
    np.testing.assert_array_equal(np_(leaf), old)
    assert repr(w1).endswith("grad_fn=<SubBackward0>)")


# ---------------------------------------------------------------------------
# seed 002 (computation graph blog post)

SEED2_X = [[-0.3360, -0.2482, -1.1120], [1.7921, 0.1434, -0.8937], [-1.0977, 1.2902, 1.3045]]
SEED2_Y = [[2.3281, 2.5035, 0.7760], [6.5842, 3.2868, 1.2125], [0.8045, 5.5803, 5.6090]]
SEED2_Z = [[8.3123, 9.0141, 2.1038], [25.3369, 12.1474, 3.8501], [2.2181, 21.3214, 21.4362]]


def test_seed2_graph_values_grad_fns_and_gradient():
    # The seed prints x, y = 2 * x + 3 and z = 4 * y - 1 (its z values are those of
    # the combined graph z = 4 * (2x + 3) - 1): we build exactly that graph from x.
    x = torch.tensor(SEED2_X, requires_grad=True)
    assert repr(x) == ("tensor([[-0.3360, -0.2482, -1.1120],\n"
                       "        [ 1.7921,  0.1434, -0.8937],\n"
                       "        [-1.0977,  1.2902,  1.3045]], requires_grad=True)")
    y = 2 * x + 3
    assert type(y.grad_fn).__name__ == "AddBackward0"
    assert repr(y).endswith("grad_fn=<AddBackward0>)")
    np.testing.assert_allclose(np_(y), SEED2_Y, atol=2e-4)   # x printed at 4 decimals
    z = 4 * y - 1
    assert type(z.grad_fn).__name__ == "SubBackward0"
    assert repr(z).endswith("grad_fn=<SubBackward0>)")
    np.testing.assert_allclose(np_(z), SEED2_Z, atol=1e-3)
    assert z.grad_fn.next_functions[0][0].__class__.__name__ == "MulBackward0"
    z.sum().backward()
    # dz/dx = dz/dy * dy/dx = 4 * 2 = 8
    assert repr(x.grad) == ("tensor([[8., 8., 8.],\n        [8., 8., 8.],\n"
                            "        [8., 8., 8.]])")


def test_seed2_randn_session():
    x = torch.randn([3, 3], requires_grad=True)
    y = 2 * x + 3
    assert repr(y).endswith("grad_fn=<AddBackward0>)")
    y2 = torch.randn([3, 3], requires_grad=True)     # the seed rebinds y here
    assert repr(y2).endswith("requires_grad=True)")
    z = 4 * y2 - 1
    assert repr(z).endswith("grad_fn=<SubBackward0>)")
    z.sum().backward()
    np.testing.assert_array_equal(np_(y2.grad), np.full((3, 3), 4.0, np.float32))
    assert x.grad is None                            # z does not depend on x here


def test_seed2_no_grad_context_and_decorator():
    x = torch.randn([3, 3], requires_grad=True)
    with torch.no_grad():
        r = 2 * x + 3
    assert not r.requires_grad and r.grad_fn is None

    @torch.no_grad()
    def test_function(x):
        assert not torch.is_grad_enabled()
        return x * 2 + 1

    out = test_function(x)
    assert not out.requires_grad and out.grad_fn is None
    assert test_function.__name__ == "test_function"
    assert torch.is_grad_enabled()                  # restored after the call
    assert (x * 2).requires_grad


# ---------------------------------------------------------------------------
# seed 000 (Getting started with PyTorch part 1: Variables and autograd)


def test_seed0_variable_returns_tensor_with_deprecation():
    with pytest.warns(DeprecationWarning):
        var_ex = Variable(torch.randn((4, 3)))  # creating a Variable
    assert isinstance(var_ex, torch.Tensor) and type(var_ex) is torch.Tensor
    assert tuple(var_ex.shape) == (4, 3)
    assert isinstance(var_ex.data, torch.Tensor)
    assert var_ex.grad is None and var_ex.grad_fn is None and not var_ex.requires_grad

    t = torch.randn(3, 3)
    with pytest.warns(DeprecationWarning):
        v = torch.autograd.Variable(t, requires_grad=True)
    assert isinstance(v, torch.Tensor) and v.requires_grad and v.is_leaf
    (v * 2).sum().backward()
    np.testing.assert_array_equal(np_(v.grad), np.full((3, 3), 2.0, np.float32))


def test_seed0_volatile_is_deprecated_and_excludes_from_graph():
    t = torch.randn(3, 3)
    with pytest.warns(DeprecationWarning, match="volatile"):
        a = torch.autograd.Variable(t, volatile=True)
    assert isinstance(a, torch.Tensor) and not a.requires_grad
    b = a * 2 + 1
    assert b.grad_fn is None and not b.requires_grad   # no graph for b or what depends on b
    c = (b * b).sum()
    assert c.grad_fn is None
    # requires_grad=True together with volatile=True: volatile wins
    with pytest.warns(DeprecationWarning):
        v = torch.autograd.Variable(t, requires_grad=True, volatile=True)
    assert not v.requires_grad


def _seed0_graph():
    with pytest.warns(DeprecationWarning):
        a = Variable(torch.randn((3, 3)), requires_grad=True)
        w1 = Variable(torch.randn((3, 3)), requires_grad=True)
        w2 = Variable(torch.randn((3, 3)), requires_grad=True)
        w3 = Variable(torch.randn((3, 3)), requires_grad=True)
        w4 = Variable(torch.randn((3, 3)), requires_grad=True)
    return a, w1, w2, w3, w4


def test_seed0_autograd_graph_and_leaf_grads():
    a, w1, w2, w3, w4 = _seed0_graph()
    b = w1 * a
    c = w2 * a
    d = w3 * b + w4 * c
    L = (10 - d).sum()
    assert type(d.grad_fn).__name__ == "AddBackward0"
    assert type(b.grad_fn).__name__ == "MulBackward0"
    assert all(t.grad_fn is None for t in (a, w1, w2, w3, w4))   # leaves
    L.backward()
    _check_seed1_grads(a, w1, w2, w3, w4)
    # dL/dd = -1 reached d, but d is not a leaf: its grad was not kept
    with pytest.warns(UserWarning, match="not a leaf"):
        assert d.grad is None
    learning_rate = 0.1
    old = np_(w1).copy()
    w1 = w1 - learning_rate * w1.grad  # update the weights using GD
    np.testing.assert_allclose(np_(w1), old + 0.1 * np_(w3 * a), rtol=1e-5, atol=1e-6)


def test_seed0_retain_grad_lets_you_read_nonleaf_grad():
    a, w1, w2, w3, w4 = _seed0_graph()
    b = w1 * a
    b.retain_grad()
    c = w2 * a
    d = w3 * b + w4 * c
    d.retain_grad()
    assert d.retains_grad and b.retains_grad and not c.retains_grad
    L = (10 - d).sum()
    L.backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # no warning for retained grads
        np.testing.assert_array_equal(np_(d.grad), -np.ones((3, 3), np.float32))
        np.testing.assert_allclose(np_(b.grad), -np_(w3), rtol=1e-6)
    assert not d.grad.requires_grad


def test_seed0_requires_grad_is_contagious():
    with pytest.warns(DeprecationWarning):
        a = Variable(torch.randn((3, 3)), requires_grad=True)
        w1 = Variable(torch.randn((3, 3)))          # requires_grad defaults to False
    assert not w1.requires_grad
    b = w1 * a
    assert b.requires_grad and type(b.grad_fn).__name__ == "MulBackward0"
    c = w1 * w1
    assert not c.requires_grad and c.grad_fn is None and c.is_leaf
    (b + c).sum().backward()
    assert w1.grad is None
    np.testing.assert_allclose(np_(a.grad), np_(w1), rtol=1e-6)


def test_seed0_freezing_a_branch():
    """Excluding ``b`` from the graph: no gradient reaches w1, ``a`` only gets c's."""
    a, w1, w2, w3, w4 = _seed0_graph()
    b = w1 * a
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf variables"):
        b.requires_grad = False                     # not allowed on a non-leaf ...
    b = b.detach()                                  # ... the modern spelling
    assert not b.requires_grad and b.is_leaf
    c = w2 * a
    d = w3 * b + w4 * c
    (10 - d).sum().backward()
    assert w1.grad is None
    np.testing.assert_allclose(np_(a.grad), -np_(w4 * w2), rtol=1e-6)
    np.testing.assert_allclose(np_(w3.grad), -np_(b), rtol=1e-6)


def test_seed0_no_grad_for_inference():
    a, w1, w2, w3, w4 = _seed0_graph()
    with torch.no_grad():
        b = w1 * a
        d = w3 * b + w4 * (w2 * a)
        assert not torch.is_grad_enabled()
    assert torch.is_grad_enabled()
    assert not b.requires_grad and not d.requires_grad and d.grad_fn is None
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad"):
        (10 - d).sum().backward()


def test_seed0_graph_is_rebuilt_each_forward_and_freed_by_backward():
    a, w1, w2, w3, w4 = _seed0_graph()
    L = (10 - (w3 * (w1 * a))).sum()
    L.backward()
    with pytest.raises(RuntimeError, match=FREED):
        L.backward()
    L2 = (10 - (w3 * (w1 * a))).sum()               # a new forward builds a new graph
    assert L2.grad_fn is not L.grad_fn
    L2.backward()
    np.testing.assert_allclose(np_(w1.grad), -2 * np_(w3 * a), rtol=1e-6)   # accumulated
