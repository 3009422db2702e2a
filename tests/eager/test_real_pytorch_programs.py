"""Real PyTorch programs (the official tutorials, Karpathy's makemore/nanoGPT, the usual
utilities), written as their authors write them against ``torch``, run with
``import eager as torch`` and, behind importorskip, with real PyTorch: the outputs,
shapes, dtypes, gradients, module reprs and error types must agree.

Each program is a function of the torch-like module and of inputs drawn from numpy's
seeded generator (so no number depends on either library's RNG); it returns a dict of
named results that ``_same`` compares.
"""

from __future__ import annotations

import math
import os
import tempfile

import numpy as np
import pytest

import eager

PROGRAMS: dict = {}


def program(fn):
    """Register a program (run on eager always, compared with torch when installed)."""
    PROGRAMS[fn.__name__] = fn
    return fn


def _plain(v):
    """A comparable form of a result: tensors become (dtype name, shape, values)."""
    if hasattr(v, "detach") and hasattr(v, "shape") and hasattr(v, "dtype"):
        return ("tensor", str(v.dtype).split(".")[-1], tuple(v.shape), v.detach().numpy().copy())
    if isinstance(v, np.ndarray):
        return ("tensor", "ndarray " + str(v.dtype), v.shape, v.copy())
    if isinstance(v, (list, tuple)):
        return type(v)(_plain(x) for x in v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, type) and issubclass(v, BaseException):
        return v.__name__
    return v


def _same(a, b, path="", rtol=1e-4, atol=1e-5):
    if isinstance(a, tuple) and a and isinstance(a[0], str) and a[0] == "tensor":
        assert isinstance(b, tuple) and b[0] == "tensor", path
        assert a[1] == b[1], f"{path}: dtype {a[1]} != {b[1]}"
        assert a[2] == b[2], f"{path}: shape {a[2]} != {b[2]}"
        if a[3].dtype.kind == "f":
            np.testing.assert_allclose(a[3], b[3], rtol=rtol, atol=atol, err_msg=path)
        else:
            np.testing.assert_array_equal(a[3], b[3], err_msg=path)
    elif isinstance(a, dict):
        assert sorted(a) == sorted(b), f"{path}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            _same(a[k], b[k], f"{path}.{k}", rtol, atol)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), f"{path}: {a!r} != {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}[{i}]", rtol, atol)
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=rtol, abs_tol=atol) or (a != a and b != b), (
            f"{path}: {a} != {b}"
        )
    else:
        assert type(a) is type(b) and a == b, f"{path}: {a!r} != {b!r}"


def _dt(dtype):
    """A dtype's name without its module (``eager.float32`` prints as such)."""
    return str(dtype).split(".")[-1]


def _run(name, torch):
    return _plain(PROGRAMS[name](torch, np.random.default_rng(0)))


def _raises(fn):
    """The exception type ``fn()`` raises (its name), or None."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return type(e).__name__
    return None


def _params_from_numpy(torch, model, rng):
    """Overwrite every parameter with seeded numpy draws (as a user loading weights)."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.uniform(-0.3, 0.3, tuple(p.shape)).astype(np.float32)))


# --------------------------------------------------------------------------------------
# "Learn the Basics": tensors


@program
def basics_tensors(torch, rng):
    data = [[1, 2], [3, 4]]
    x_data = torch.tensor(data)
    np_array = np.array(data)
    x_np = torch.from_numpy(np_array)
    x_ones = torch.ones_like(x_data)
    x_rand = torch.rand_like(x_data, dtype=torch.float)
    shape = (2, 3)
    ones_tensor = torch.ones(shape)
    zeros_tensor = torch.zeros(shape)
    tensor = torch.ones(4, 4)
    tensor[:, 1] = 0
    first_row, first_col, last_col = tensor[0], tensor[:, 0], tensor[..., -1]
    t1 = torch.cat([tensor, tensor, tensor], dim=1)
    y1 = tensor @ tensor.T
    y2 = tensor.matmul(tensor.T)
    y3 = torch.rand_like(y1)
    torch.matmul(tensor, tensor.T, out=y3)
    z1 = tensor * tensor
    z2 = tensor.mul(tensor)
    agg = tensor.sum()
    agg_item = agg.item()
    tensor.add_(5)
    t = torch.ones(5)
    n = t.numpy()
    t.add_(1)
    n_after = n.copy()
    n2 = np.ones(5)
    t2 = torch.from_numpy(n2)
    np.add(n2, 1, out=n2)
    return dict(
        x_data=x_data,
        x_np=x_np,
        x_ones=x_ones,
        x_rand=(tuple(x_rand.shape), _dt(x_rand.dtype), x_rand.device.type),
        ones=ones_tensor,
        zeros=zeros_tensor,
        first=(first_row, first_col, last_col),
        t1=t1,
        y=(y1, y2, y3),
        z=(z1, z2),
        agg=(agg_item, type(agg_item).__name__),
        added=tensor,
        shares=(n_after, t2),
        attrs=(tuple(tensor.shape), _dt(tensor.dtype), str(tensor.device)),
        list=tensor[0].tolist(),
    )


# --------------------------------------------------------------------------------------
# autograd tutorial


@program
def autograd_tutorial(torch, rng):
    x = torch.ones(5)
    y = torch.zeros(3)
    w = torch.tensor(rng.standard_normal((5, 3)).astype(np.float32), requires_grad=True)
    b = torch.tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True)
    z = torch.matmul(x, w) + b
    loss = torch.nn.functional.binary_cross_entropy_with_logits(z, y)
    # (a composite's grad_fn is its last primitive's: loss's is MeanBackward0 here,
    # BinaryCrossEntropyWithLogitsBackward0 in PyTorch, a documented difference)
    names = (type(z.grad_fn).__name__, loss.grad_fn is not None)
    loss.backward()
    grads = (w.grad, b.grad)
    z = torch.matmul(x, w) + b
    rg1 = z.requires_grad
    with torch.no_grad():
        z = torch.matmul(x, w) + b
    rg2 = z.requires_grad
    z_det = (torch.matmul(x, w) + b).detach()
    inp = torch.eye(4, 5, requires_grad=True)
    out = (inp + 1).pow(2).t()
    out.backward(torch.ones_like(out), retain_graph=True)
    first = inp.grad.clone()
    out.backward(torch.ones_like(out), retain_graph=True)
    second = inp.grad.clone()
    inp.grad.zero_()
    out.backward(torch.ones_like(out), retain_graph=True)
    third = inp.grad
    # backward of a non-scalar without gradient: RuntimeError
    err = _raises(lambda: (inp * 2).backward())
    # a leaf's grad_fn is None; is_leaf
    return dict(
        names=names,
        grads=grads,
        rg=(rg1, rg2, z_det.requires_grad),
        jvp=(first, second, third),
        err=err,
        leaf=(w.grad_fn is None, w.is_leaf, z.is_leaf, loss.is_leaf),
    )


# --------------------------------------------------------------------------------------
# "Learn the Basics": build the model, optimization loop, save and load


def _basics_model(torch):
    nn = torch.nn

    class NeuralNetwork(nn.Module):
        def __init__(self):
            super().__init__()
            self.flatten = nn.Flatten()
            self.linear_relu_stack = nn.Sequential(
                nn.Linear(28 * 28, 64),
                nn.ReLU(),
                nn.Linear(64, 64),
                nn.ReLU(),
                nn.Linear(64, 10),
            )

        def forward(self, x):
            x = self.flatten(x)
            logits = self.linear_relu_stack(x)
            return logits

    return NeuralNetwork()


@program
def basics_model(torch, rng):
    nn = torch.nn
    model = _basics_model(torch)
    _params_from_numpy(torch, model, rng)
    X = torch.from_numpy(rng.random((3, 28, 28), dtype=np.float32))
    logits = model(X)
    pred_probab = nn.Softmax(dim=1)(logits)
    y_pred = pred_probab.argmax(1)
    input_image = torch.from_numpy(rng.random((3, 28, 28), dtype=np.float32))
    flat_image = nn.Flatten()(input_image)
    layer1 = nn.Linear(in_features=28 * 28, out_features=20)
    hidden1 = layer1(flat_image)
    hidden1 = nn.ReLU()(hidden1)
    params = [(name, tuple(param.size())) for name, param in model.named_parameters()]
    return dict(
        repr=repr(model),
        logits=logits,
        probab=pred_probab,
        y_pred=y_pred,
        flat=tuple(flat_image.size()),
        hidden=(tuple(hidden1.size()), bool((hidden1 >= 0).all())),
        params=params,
        layer_repr=repr(layer1),
        n_params=sum(p.numel() for p in model.parameters()),
    )


@program
def basics_optimization(torch, rng):
    nn = torch.nn
    TensorDataset = torch.utils.data.TensorDataset
    DataLoader = torch.utils.data.DataLoader
    model = _basics_model(torch)
    _params_from_numpy(torch, model, rng)
    X = torch.from_numpy(rng.random((40, 1, 28, 28), dtype=np.float32))
    Y = torch.from_numpy(rng.integers(0, 10, 40))
    train_dataloader = DataLoader(TensorDataset(X, Y), batch_size=16)
    test_dataloader = DataLoader(TensorDataset(X, Y), batch_size=16)
    learning_rate, epochs = 1e-1, 2
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
    losses, tests = [], []

    def train_loop(dataloader, model, loss_fn, optimizer):
        size = len(dataloader.dataset)
        model.train()
        for batch, (X, y) in enumerate(dataloader):
            pred = model(X)
            loss = loss_fn(pred, y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            loss, current = loss.item(), batch * 16 + len(X)
            losses.append((loss, current, size))

    def test_loop(dataloader, model, loss_fn):
        model.eval()
        size = len(dataloader.dataset)
        num_batches = len(dataloader)
        test_loss, correct = 0, 0
        with torch.no_grad():
            for X, y in dataloader:
                pred = model(X)
                test_loss += loss_fn(pred, y).item()
                correct += (pred.argmax(1) == y).type(torch.float).sum().item()
        test_loss /= num_batches
        correct /= size
        tests.append((test_loss, correct))

    for _t in range(epochs):
        train_loop(train_dataloader, model, loss_fn, optimizer)
        test_loop(test_dataloader, model, loss_fn)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model_weights.pth")
        torch.save(model.state_dict(), path)
        model2 = _basics_model(torch)
        model2.load_state_dict(torch.load(path, weights_only=True))
        model2.eval()
        same = all(
            torch.equal(a, b)
            for a, b in zip(model.state_dict().values(), model2.state_dict().values())
        )
    return dict(losses=losses, tests=tests, same=same, keys=list(model.state_dict().keys()))


# --------------------------------------------------------------------------------------
# the tests


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_runs_on_eager(name):
    _run(name, eager)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_agrees_with_pytorch(name):
    torch = pytest.importorskip("torch")
    _same(_run(name, eager), _run(name, torch), name)
