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


def _same(a, b, path="", rtol=1e-4, atol=1e-4):
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
# "What is torch.nn really?"


@program
def nn_really(torch, rng):
    nn, F, optim = torch.nn, torch.nn.functional, torch.optim
    x_train = torch.from_numpy(rng.random((64, 784), dtype=np.float32))
    y_train = torch.from_numpy(rng.integers(0, 10, 64))
    n, c = x_train.shape
    weights = torch.from_numpy(rng.standard_normal((784, 10)).astype(np.float32)) / math.sqrt(784)
    weights.requires_grad_()
    bias = torch.zeros(10, requires_grad=True)

    def log_softmax(x):
        return x - x.exp().sum(-1).log().unsqueeze(-1)

    def model(xb):
        return log_softmax(xb @ weights + bias)

    def nll(input, target):
        return -input[range(target.shape[0]), target].mean()

    def accuracy(out, yb):
        preds = torch.argmax(out, dim=1)
        return (preds == yb).float().mean()

    bs, lr, epochs = 16, 0.5, 2
    first = (
        nll(model(x_train[0:bs]), y_train[0:bs]),
        accuracy(model(x_train[0:bs]), y_train[0:bs]),
    )
    for _epoch in range(epochs):
        for i in range((n - 1) // bs + 1):
            start_i = i * bs
            end_i = start_i + bs
            xb = x_train[start_i:end_i]
            yb = y_train[start_i:end_i]
            loss = nll(model(xb), yb)
            loss.backward()
            with torch.no_grad():
                weights -= weights.grad * lr
                bias -= bias.grad * lr
                weights.grad.zero_()
                bias.grad.zero_()
    manual = (nll(model(x_train), y_train), weights, bias)
    loss_func = F.cross_entropy
    same_loss = loss_func(x_train @ weights + bias, y_train)

    class Mnist_Logistic(nn.Module):
        def __init__(self):
            super().__init__()
            self.weights = nn.Parameter(torch.zeros(784, 10))
            self.bias = nn.Parameter(torch.zeros(10))

        def forward(self, xb):
            return xb @ self.weights + self.bias

    m = Mnist_Logistic()
    with torch.no_grad():
        m.weights.copy_(torch.from_numpy(rng.standard_normal((784, 10)).astype(np.float32)) / 28)

    def fit():
        for _epoch in range(epochs):
            for i in range((n - 1) // bs + 1):
                xb = x_train[i * bs : i * bs + bs]
                yb = y_train[i * bs : i * bs + bs]
                loss = loss_func(m(xb), yb)
                loss.backward()
                with torch.no_grad():
                    for p in m.parameters():
                        p -= p.grad * lr
                    m.zero_grad()

    fit()
    module_loss = loss_func(m(x_train), y_train)

    class Lambda(nn.Module):
        def __init__(self, func):
            super().__init__()
            self.func = func

        def forward(self, x):
            return self.func(x)

    cnn = nn.Sequential(
        Lambda(lambda x: x.view(-1, 1, 28, 28)),
        nn.Conv2d(1, 4, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(4, 10, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        Lambda(lambda x: x.view(x.size(0), -1)),
    )
    _params_from_numpy(torch, cnn, rng)
    opt = optim.SGD(cnn.parameters(), lr=0.1, momentum=0.9)
    train_ds = torch.utils.data.TensorDataset(x_train, y_train)
    train_dl = torch.utils.data.DataLoader(train_ds, batch_size=bs)
    cnn_losses = []
    for xb, yb in train_dl:
        loss = loss_func(cnn(xb), yb)
        loss.backward()
        opt.step()
        opt.zero_grad()
        cnn_losses.append(loss.item())

    def get_model():
        model = nn.Sequential(nn.Linear(784, 10))
        _params_from_numpy(torch, model, np.random.default_rng(5))
        return model, optim.SGD(model.parameters(), lr=lr)

    def loss_batch(model, loss_func, xb, yb, opt=None):
        loss = loss_func(model(xb), yb)
        if opt is not None:
            loss.backward()
            opt.step()
            opt.zero_grad()
        return loss.item(), len(xb)

    model2, opt2 = get_model()
    model2.train()
    for xb, yb in train_dl:
        loss_batch(model2, loss_func, xb, yb, opt2)
    model2.eval()
    with torch.no_grad():
        losses, nums = zip(*[loss_batch(model2, loss_func, xb, yb) for xb, yb in train_dl])
    val_loss = np.sum(np.multiply(losses, nums)) / np.sum(nums)
    return dict(
        first=first,
        manual=manual,
        same_loss=same_loss,
        module_loss=module_loss,
        cnn_losses=cnn_losses,
        cnn_repr=repr(cnn[1:]),
        val_loss=float(val_loss),
    )


# --------------------------------------------------------------------------------------
# the 60 minute blitz: the CIFAR-10 CNN


@program
def blitz_cifar_cnn(torch, rng):
    nn, F, optim = torch.nn, torch.nn.functional, torch.optim

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 6, 5)
            self.pool = nn.MaxPool2d(2, 2)
            self.conv2 = nn.Conv2d(6, 16, 5)
            self.fc1 = nn.Linear(16 * 5 * 5, 120)
            self.fc2 = nn.Linear(120, 84)
            self.fc3 = nn.Linear(84, 10)

        def forward(self, x):
            x = self.pool(F.relu(self.conv1(x)))
            x = self.pool(F.relu(self.conv2(x)))
            x = torch.flatten(x, 1)  # flatten all dimensions except batch
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            x = self.fc3(x)
            return x

    net = Net()
    _params_from_numpy(torch, net, rng)
    images = torch.from_numpy(rng.standard_normal((8, 3, 32, 32)).astype(np.float32))
    labels = torch.from_numpy(rng.integers(0, 10, 8))
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(images, labels), batch_size=4, shuffle=False
    )
    running = []
    for _epoch in range(2):
        running_loss = 0.0
        for i, data in enumerate(loader, 0):
            inputs, labels_b = data
            optimizer.zero_grad()
            outputs = net(inputs)
            loss = criterion(outputs, labels_b)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
        running.append(running_loss)
    classes = ("plane", "car", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
    correct, total = 0, 0
    correct_pred = {classname: 0 for classname in classes}
    with torch.no_grad():
        for data in loader:
            images_b, labels_b = data
            outputs = net(images_b)
            _, predicted = torch.max(outputs.data, 1)
            total += labels_b.size(0)
            correct += (predicted == labels_b).sum().item()
            for label, prediction in zip(labels_b, predicted):
                if label == prediction:
                    correct_pred[classes[label]] += 1
    return dict(
        running=running,
        acc=(correct, total),
        per_class=correct_pred,
        repr=repr(net),
        grad=net.conv1.weight.grad,
    )


# --------------------------------------------------------------------------------------
# char-RNN name classification


@program
def char_rnn(torch, rng):
    nn = torch.nn
    import string

    all_letters = string.ascii_letters + " .,;'"
    n_letters = len(all_letters)

    def letterToIndex(letter):
        return all_letters.find(letter)

    def letterToTensor(letter):
        tensor = torch.zeros(1, n_letters)
        tensor[0][letterToIndex(letter)] = 1
        return tensor

    def lineToTensor(line):
        tensor = torch.zeros(len(line), 1, n_letters)
        for li, letter in enumerate(line):
            tensor[li][0][letterToIndex(letter)] = 1
        return tensor

    class RNN(nn.Module):
        def __init__(self, input_size, hidden_size, output_size):
            super().__init__()
            self.hidden_size = hidden_size
            self.i2h = nn.Linear(input_size + hidden_size, hidden_size)
            self.i2o = nn.Linear(input_size + hidden_size, output_size)
            self.softmax = nn.LogSoftmax(dim=1)

        def forward(self, input, hidden):
            combined = torch.cat((input, hidden), 1)
            hidden = self.i2h(combined)
            output = self.i2o(combined)
            output = self.softmax(output)
            return output, hidden

        def initHidden(self):
            return torch.zeros(1, self.hidden_size)

    all_categories = ["English", "French", "Italian"]
    rnn = RNN(n_letters, 16, len(all_categories))
    _params_from_numpy(torch, rnn, rng)
    criterion = nn.NLLLoss()
    learning_rate = 0.005

    def categoryFromOutput(output):
        top_n, top_i = output.topk(1)
        category_i = top_i[0].item()
        return all_categories[category_i], category_i

    def train(category_tensor, line_tensor):
        hidden = rnn.initHidden()
        rnn.zero_grad()
        for i in range(line_tensor.size()[0]):
            output, hidden = rnn(line_tensor[i], hidden)
        loss = criterion(output, category_tensor)
        loss.backward()
        for p in rnn.parameters():
            p.data.add_(p.grad.data, alpha=-learning_rate)
        return output, loss.item()

    results = []
    for category, line in [("English", "Smith"), ("French", "Dubois"), ("Italian", "Rossi")] * 2:
        category_tensor = torch.tensor([all_categories.index(category)], dtype=torch.long)
        output, loss = train(category_tensor, lineToTensor(line))
        results.append((categoryFromOutput(output), loss))
    with torch.no_grad():
        hidden = rnn.initHidden()
        line = lineToTensor("Jones")
        for i in range(line.size()[0]):
            output, hidden = rnn(line[i], hidden)
        topv, topi = output.topk(2, 1, True)
    return dict(
        letter=letterToTensor("J"),
        line=tuple(lineToTensor("Jones").size()),
        results=results,
        top=(topv, topi, topv[0][0].item(), topi[0][1].item()),
        repr=repr(rnn),
    )


# --------------------------------------------------------------------------------------
# a GPT (Karpathy's "Let's build GPT" gpt.py, small): attention heads with a tril buffer,
# nn.ModuleList, LayerNorm, Dropout, Embedding, AdamW, estimate_loss, generate


def _gpt(torch, vocab_size, n_embd=16, n_head=2, n_layer=2, block_size=8, dropout=0.0):
    nn, F = torch.nn, torch.nn.functional

    class Head(nn.Module):
        def __init__(self, head_size):
            super().__init__()
            self.key = nn.Linear(n_embd, head_size, bias=False)
            self.query = nn.Linear(n_embd, head_size, bias=False)
            self.value = nn.Linear(n_embd, head_size, bias=False)
            self.register_buffer("tril", torch.tril(torch.ones(block_size, block_size)))
            self.dropout = nn.Dropout(dropout)

        def forward(self, x):
            B, T, C = x.shape
            k = self.key(x)
            q = self.query(x)
            wei = q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5
            wei = wei.masked_fill(self.tril[:T, :T] == 0, float("-inf"))
            wei = F.softmax(wei, dim=-1)
            wei = self.dropout(wei)
            v = self.value(x)
            return wei @ v

    class MultiHeadAttention(nn.Module):
        def __init__(self, num_heads, head_size):
            super().__init__()
            self.heads = nn.ModuleList([Head(head_size) for _ in range(num_heads)])
            self.proj = nn.Linear(head_size * num_heads, n_embd)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x):
            out = torch.cat([h(x) for h in self.heads], dim=-1)
            return self.dropout(self.proj(out))

    class FeedFoward(nn.Module):
        def __init__(self, n_embd):
            super().__init__()
            self.net = nn.Sequential(
                nn.Linear(n_embd, 4 * n_embd),
                nn.GELU(),
                nn.Linear(4 * n_embd, n_embd),
                nn.Dropout(dropout),
            )

        def forward(self, x):
            return self.net(x)

    class Block(nn.Module):
        def __init__(self, n_embd, n_head):
            super().__init__()
            head_size = n_embd // n_head
            self.sa = MultiHeadAttention(n_head, head_size)
            self.ffwd = FeedFoward(n_embd)
            self.ln1 = nn.LayerNorm(n_embd)
            self.ln2 = nn.LayerNorm(n_embd)

        def forward(self, x):
            x = x + self.sa(self.ln1(x))
            x = x + self.ffwd(self.ln2(x))
            return x

    class GPTLanguageModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.token_embedding_table = nn.Embedding(vocab_size, n_embd)
            self.position_embedding_table = nn.Embedding(block_size, n_embd)
            self.blocks = nn.Sequential(*[Block(n_embd, n_head=n_head) for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(n_embd)
            self.lm_head = nn.Linear(n_embd, vocab_size)
            self.apply(self._init_weights)

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets=None):
            B, T = idx.shape
            tok_emb = self.token_embedding_table(idx)
            pos_emb = self.position_embedding_table(torch.arange(T, device="cpu"))
            x = tok_emb + pos_emb
            x = self.blocks(x)
            x = self.ln_f(x)
            logits = self.lm_head(x)
            if targets is None:
                loss = None
            else:
                B, T, C = logits.shape
                logits = logits.view(B * T, C)
                targets = targets.view(B * T)
                loss = F.cross_entropy(logits, targets)
            return logits, loss

        def generate(self, idx, max_new_tokens):
            for _ in range(max_new_tokens):
                idx_cond = idx[:, -block_size:]
                logits, loss = self(idx_cond)
                logits = logits[:, -1, :]
                probs = F.softmax(logits, dim=-1)
                idx_next = torch.multinomial(probs, num_samples=1)
                idx = torch.cat((idx, idx_next), dim=1)
            return idx

    return GPTLanguageModel()


@program
def gpt_training(torch, rng):
    text = "hello world, this is a tiny corpus for a tiny gpt. " * 4
    chars = sorted(list(set(text)))
    vocab_size = len(chars)
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for i, ch in enumerate(chars)}

    def encode(s):
        return [stoi[c] for c in s]

    def decode(L):
        return "".join([itos[i] for i in L])

    data = torch.tensor(encode(text), dtype=torch.long)
    n = int(0.9 * len(data))
    train_data, val_data = data[:n], data[n:]
    block_size, batch_size = 8, 4

    def get_batch(split, ix):
        data = train_data if split == "train" else val_data
        x = torch.stack([data[i : i + block_size] for i in ix])
        y = torch.stack([data[i + 1 : i + block_size + 1] for i in ix])
        return x, y

    model = _gpt(torch, vocab_size)
    _params_from_numpy(torch, model, rng)
    n_params = sum(p.numel() for p in model.parameters()) / 1e6
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ["train", "val"]:
            losses = torch.zeros(2)
            for k in range(2):
                X, Y = get_batch(split, rng.integers(0, len(val_data) - block_size, batch_size))
                logits, loss = model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean()
        model.train()
        return out

    history = []
    for _iter in range(3):
        xb, yb = get_batch("train", rng.integers(0, len(train_data) - block_size, batch_size))
        logits, loss = model(xb, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        history.append(loss.item())
    est = estimate_loss()
    context = torch.zeros((1, 1), dtype=torch.long)
    gen = model.generate(context, max_new_tokens=5)[0].tolist()
    return dict(
        n_params=n_params,
        history=history,
        est=est,
        gen=(len(gen), all(0 <= i < vocab_size for i in gen), type(decode(gen)).__name__),
        logits_shape=tuple(logits.shape),
        keys=list(model.state_dict().keys())[:6],
        grad=model.lm_head.weight.grad,
    )


# --------------------------------------------------------------------------------------
# makemore (Karpathy): bigram counts, the one-hot neural bigram, the MLP, manual backprop

WORDS = ["emma", "olivia", "ava", "isabella", "sophia", "charlotte", "mia", "amelia"]


@program
def makemore_bigram(torch, rng):
    F = torch.nn.functional
    chars = sorted(list(set("".join(WORDS))))
    stoi = {s: i + 1 for i, s in enumerate(chars)}
    stoi["."] = 0
    itos = {i: s for s, i in stoi.items()}
    V = len(stoi)
    N = torch.zeros((V, V), dtype=torch.int32)
    for w in WORDS:
        chs = ["."] + list(w) + ["."]
        for ch1, ch2 in zip(chs, chs[1:]):
            N[stoi[ch1], stoi[ch2]] += 1
    P = (N + 1).float()
    P /= P.sum(1, keepdims=True)
    g = torch.Generator().manual_seed(2147483647)
    samples = []
    for _i in range(3):
        out, ix = [], 0
        while True:
            p = P[ix]
            ix = torch.multinomial(p, num_samples=1, replacement=True, generator=g).item()
            out.append(itos[ix])
            if ix == 0 or len(out) > 30:
                break
        samples.append("".join(out))
    log_likelihood, n = 0.0, 0
    for w in WORDS:
        chs = ["."] + list(w) + ["."]
        for ch1, ch2 in zip(chs, chs[1:]):
            prob = P[stoi[ch1], stoi[ch2]]
            logprob = torch.log(prob)
            log_likelihood += logprob
            n += 1
    nll = -log_likelihood
    xs, ys = [], []
    for w in WORDS:
        chs = ["."] + list(w) + ["."]
        for ch1, ch2 in zip(chs, chs[1:]):
            xs.append(stoi[ch1])
            ys.append(stoi[ch2])
    xs = torch.tensor(xs)
    ys = torch.tensor(ys)
    num = xs.nelement()
    W0 = torch.randn((V, V), generator=g, requires_grad=True)
    W = torch.tensor(rng.standard_normal((V, V)).astype(np.float32), requires_grad=True)
    history = []
    for _k in range(5):
        xenc = F.one_hot(xs, num_classes=V).float()
        logits = xenc @ W
        counts = logits.exp()
        probs = counts / counts.sum(1, keepdims=True)
        loss = -probs[torch.arange(num), ys].log().mean() + 0.01 * (W**2).mean()
        history.append(loss.item())
        W.grad = None
        loss.backward()
        W.data += -50 * W.grad
    # sampling never picks a zero-probability category; without replacement: distinct
    pz = torch.tensor([0.0, 1.0, 0.0, 3.0, 0.0])
    draws = torch.multinomial(pz, 100, replacement=True, generator=g)
    distinct = torch.multinomial(torch.ones(2, 6), 6, generator=g)
    return dict(
        N=N,
        P=P,
        samples=(len(samples), all(s.endswith(".") or len(s) > 30 for s in samples)),
        nll=(nll, nll / n),
        onehot=F.one_hot(xs[:5], num_classes=V),
        W0=(tuple(W0.shape), _dt(W0.dtype), W0.requires_grad, W0.is_leaf),
        history=history,
        W=W,
        draws=(_dt(draws.dtype), tuple(draws.shape), sorted(set(draws.tolist()))),
        distinct=(tuple(distinct.shape), [sorted(r) for r in distinct.tolist()]),
        # without replacement, zero weights come after the others (no error)
        zero_last=torch.multinomial(torch.tensor([1.0, 0.0]), 2, generator=g),
        zero_last2=torch.multinomial(torch.tensor([[0.0, 2.0, 0.0]] * 3), 2)[:, 0],
        errors=(
            _raises(lambda: torch.multinomial(torch.tensor([1.0, -1.0]), 1)),
            _raises(lambda: torch.multinomial(torch.tensor([0.0, 0.0]), 1)),
            _raises(lambda: torch.multinomial(torch.tensor([1.0, 1.0]), 3)),
            _raises(lambda: torch.multinomial(torch.tensor([1, 2]), 1)),
        ),
    )


@program
def makemore_mlp(torch, rng):
    F = torch.nn.functional
    block_size = 3
    chars = sorted(list(set("".join(WORDS))))
    stoi = {s: i + 1 for i, s in enumerate(chars)}
    stoi["."] = 0
    V = len(stoi)

    def build_dataset(words):
        X, Y = [], []
        for w in words:
            context = [0] * block_size
            for ch in w + ".":
                ix = stoi[ch]
                X.append(context)
                Y.append(ix)
                context = context[1:] + [ix]
        X = torch.tensor(X)
        Y = torch.tensor(Y)
        return X, Y

    Xtr, Ytr = build_dataset(WORDS)
    g = torch.Generator().manual_seed(2147483647)

    def T(*shape, scale=1.0):
        return torch.from_numpy((rng.standard_normal(shape) * scale).astype(np.float32))

    C = T(V, 4)
    W1 = T(12, 20, scale=(5 / 3) / (12**0.5))
    b1 = T(20, scale=0.01)
    W2 = T(20, V, scale=0.01)
    b2 = T(V) * 0
    bngain = torch.ones((1, 20))
    bnbias = torch.zeros((1, 20))
    bnmean_running = torch.zeros((1, 20))
    bnstd_running = torch.ones((1, 20))
    parameters = [C, W1, b1, W2, b2, bngain, bnbias]
    n_params = sum(p.nelement() for p in parameters)
    for p in parameters:
        p.requires_grad = True
    lre = torch.linspace(-3, 0, 10)
    lrs = 10**lre
    history = []
    for i in range(4):
        ix = torch.randint(0, Xtr.shape[0], (8,), generator=g)
        ix = torch.from_numpy(rng.integers(0, Xtr.shape[0], 8))
        emb = C[Xtr[ix]]
        embcat = emb.view(emb.shape[0], -1)
        hpreact = embcat @ W1 + b1
        bnmeani = hpreact.mean(0, keepdim=True)
        bnstdi = hpreact.std(0, keepdim=True)
        hpreact = bngain * (hpreact - bnmeani) / bnstdi + bnbias
        with torch.no_grad():
            bnmean_running = 0.999 * bnmean_running + 0.001 * bnmeani
            bnstd_running = 0.999 * bnstd_running + 0.001 * bnstdi
        h = torch.tanh(hpreact)
        h.retain_grad()
        logits = h @ W2 + b2
        loss = F.cross_entropy(logits, Ytr[ix])
        for p in parameters:
            p.grad = None
        loss.backward()
        lr = 0.1 if i < 100000 else 0.01
        for p in parameters:
            p.data += -lr * p.grad
        history.append(loss.log10().item())
    # (b1's gradient is ~0, rounding noise: batchnorm subtracts it again)
    ud = [((lr * p.grad).std() / p.data.std()).log10().item() for p in parameters if p is not b1]
    # makemore part 4: manual backprop of the cross entropy, checked with cmp()
    n = 8
    Xb, Yb = Xtr[:n], Ytr[:n]
    emb = C[Xb]
    embcat = emb.view(emb.shape[0], -1)
    hpre = embcat @ W1 + b1
    h = torch.tanh(hpre)
    logits = h @ W2 + b2
    logit_maxes = logits.max(1, keepdim=True).values
    norm_logits = logits - logit_maxes
    counts = norm_logits.exp()
    counts_sum = counts.sum(1, keepdims=True)
    counts_sum_inv = counts_sum**-1
    probs = counts * counts_sum_inv
    logprobs = probs.log()
    loss = -logprobs[range(n), Yb].mean()
    for t in [
        logprobs,
        probs,
        counts,
        counts_sum,
        counts_sum_inv,
        norm_logits,
        logit_maxes,
        logits,
        h,
        hpre,
        embcat,
        emb,
    ]:
        t.retain_grad()
    for p in parameters:
        p.grad = None
    loss.backward()

    def cmp(s, dt, t):
        ex = torch.all(dt == t.grad).item()
        app = torch.allclose(dt, t.grad)
        maxdiff = (dt - t.grad).abs().max().item()
        return (s, ex, app, maxdiff < 1e-6)

    dlogprobs = torch.zeros_like(logprobs)
    dlogprobs[range(n), Yb] = -1.0 / n
    dlogits = F.softmax(logits, 1)
    dlogits[range(n), Yb] -= 1
    dlogits /= n
    dlogit_maxes = -(dlogits * 0).sum(1, keepdim=True)
    dh = dlogits @ W2.T
    dhpre = (1.0 - h**2) * dh
    demb = (dhpre @ W1.T).view(emb.shape)
    dC = torch.zeros_like(C)
    for k in range(Xb.shape[0]):
        for j in range(Xb.shape[1]):
            ix = Xb[k, j]
            dC[ix] += demb[k, j]
    onehot_max = F.one_hot(logits.max(1).indices, num_classes=logits.shape[1])
    return dict(
        X=(Xtr, Ytr),
        n_params=n_params,
        lrs=lrs,
        history=history,
        running=(bnmean_running, bnstd_running),
        ud=ud,
        h_grad=h.grad,
        cmp=[
            cmp("logprobs", dlogprobs, logprobs),
            cmp("logits", dlogits, logits),
            cmp("h", dh, h),
            cmp("hpre", dhpre, hpre),
            cmp("C", dC, C),
        ],
        dlogit_maxes=dlogit_maxes,
        onehot_max=onehot_max,
    )


@program
def micrograd_check(torch, rng):
    x1 = torch.Tensor([2.0]).double()
    x1.requires_grad = True
    x2 = torch.Tensor([0.0]).double()
    x2.requires_grad = True
    w1 = torch.Tensor([-3.0]).double()
    w1.requires_grad = True
    w2 = torch.Tensor([1.0]).double()
    w2.requires_grad = True
    b = torch.Tensor([6.8813735870195432]).double()
    b.requires_grad = True
    n = x1 * w1 + x2 * w2 + b
    o = torch.tanh(n)
    data = o.data.item()
    o.backward()
    empty = torch.Tensor(2, 3)
    return dict(
        data=data,
        grads=(x2.grad.item(), w2.grad.item(), x1.grad.item(), w1.grad.item()),
        dtypes=(_dt(x1.dtype), _dt(torch.Tensor([1, 2]).dtype)),
        empty=(tuple(empty.shape), _dt(empty.dtype)),
        item_type=type(o.item()).__name__,
    )


# --------------------------------------------------------------------------------------
# common utilities


@program
def utilities(torch, rng):
    a = torch.from_numpy(rng.standard_normal((3, 4)).astype(np.float32))
    torch.manual_seed(0)
    r1 = torch.randn(3)
    torch.manual_seed(0)
    r2 = torch.randn(3)
    g = torch.Generator().manual_seed(7)
    perm = torch.randperm(10, generator=g)
    perm2 = torch.randperm(5)
    torch.testing.assert_close(a, a.clone())
    close_err = _raises(lambda: torch.testing.assert_close(a, a + 1))
    close_dtype_err = _raises(lambda: torch.testing.assert_close(a, a.double()))
    torch.testing.assert_close(a, a.double(), check_dtype=False)
    torch.testing.assert_close(a + 1e-7, a)
    with torch.inference_mode():
        inf = a * 2
    w = a.clone().requires_grad_()

    @torch.no_grad
    def bare(x):
        return x * 2

    @torch.inference_mode
    def bare_inf(x):
        return (x * 2, torch.is_inference_mode_enabled())

    @torch.inference_mode(False)
    def no_inf(x):
        return x * 2

    @torch.no_grad()
    def called(x):
        return x * 2

    with torch.inference_mode():
        inner = (no_inf(w).requires_grad, torch.is_grad_enabled())
    decorated = (
        bare(w).requires_grad,
        bare_inf(w)[0].requires_grad,
        bare_inf(w)[1],
        no_inf(w).requires_grad,
        called(w).requires_grad,
        inner,
        bare.__name__,
    )
    ds = torch.utils.data.TensorDataset(a, torch.arange(3))
    loader = torch.utils.data.DataLoader(ds, batch_size=2, shuffle=True, drop_last=True)
    batches = [(tuple(xb.shape), tuple(yb.shape)) for xb, yb in loader]
    parts = torch.utils.data.random_split(range(10), [0.7, 0.3], generator=g)
    parts2 = torch.utils.data.random_split(range(10), [3, 7])
    nested = torch.utils.data.DataLoader([(1.0, 2), (3.0, 4), (5.0, 6)], batch_size=2)
    nested_batches = [b for b in nested]
    dict_loader = list(torch.utils.data.DataLoader([{"x": a[0], "y": 1}] * 3, batch_size=3))
    torch.set_printoptions(precision=2)
    rep = repr(torch.tensor([1.23456, 2.5]))
    torch.set_printoptions(precision=4)
    return dict(
        seeded=torch.equal(r1, r2),
        allclose=(torch.allclose(a, a + 1e-9), torch.allclose(a, a + 1)),
        close_err=(close_err, close_dtype_err),
        perm=(sorted(perm.tolist()), _dt(perm.dtype), sorted(perm2.tolist())),
        numel=(torch.numel(a), a.numel(), a.nelement()),
        T=a.T,
        tolist=a.tolist(),
        scalar_list=(torch.tensor(3.5).tolist(), torch.tensor([1, 2]).tolist()),
        numpy=(a.numpy().dtype.name, torch.from_numpy(np.arange(3)).dtype == torch.int64),
        inference=(inf.requires_grad, torch.is_inference_mode_enabled()),
        decorated=decorated,
        loader=(len(loader), batches),
        split=(
            [len(p) for p in parts],
            sorted(parts[0].indices + parts[1].indices),
            [len(p) for p in parts2],
        ),
        nested=nested_batches,
        dict_loader=(sorted(dict_loader[0]), tuple(dict_loader[0]["x"].shape), dict_loader[0]["y"]),
        rep=rep,
        initial_seed=(torch.initial_seed(), g.initial_seed()),
        clamp=(a.clamp_min(0.1), torch.clamp_max(a, 0.2)),
        normal=(
            tuple(torch.normal(0.0, 1.0, size=(2, 3)).shape),
            tuple(torch.normal(a, 0.5).shape),
            _dt(torch.normal(torch.zeros(2), torch.ones(3, 1), generator=g).dtype),
            tuple(torch.normal(torch.zeros(2), torch.ones(3, 1)).shape),
        ),
        randint_like=(
            _dt(torch.randint_like(a, 5).dtype),
            bool((torch.randint_like(a, 5) < 5).all()),
        ),
        gen_device=str(g.device),
        errors=(
            _raises(lambda: torch.utils.data.TensorDataset(a, torch.arange(4))),
            _raises(lambda: torch.utils.data.random_split(range(10), [3, 3])),
            _raises(lambda: torch.randn(2, generator=3)),
            _raises(lambda: a.view(4, 4)),
            _raises(lambda: a @ a),
            _raises(lambda: a[5]),
            _raises(lambda: torch.cat([a, a.T])),
        ),
    )


# --------------------------------------------------------------------------------------
# the tests


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_runs_on_eager(name):
    _run(name, eager)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_agrees_with_pytorch(name):
    torch = pytest.importorskip("torch")
    _same(_run(name, eager), _run(name, torch), name)


# --------------------------------------------------------------------------------------
# compiled: the forward or the loss of a few programs under graphc.compile == eager


def _compiled_vs_eager(make_model, loss_of, inputs):
    """Loss value and parameter gradients of ``loss_of(model, *inputs)`` eagerly and with
    the loss function compiled (backward outside), on twin models."""
    graphc = pytest.importorskip("graphc")
    results = []
    for compiled in (False, True):
        model = make_model()
        _params_from_numpy(eager, model, np.random.default_rng(1))

        def loss_fn(*xs):
            return loss_of(model, *xs)  # noqa: B023  (model: a closure cell, read now)

        fn = graphc.compile(loss_fn) if compiled else loss_fn
        loss = fn(*inputs)
        loss.backward()
        results.append((loss.item(), [p.grad.numpy().copy() for p in model.parameters()]))
    (le, ge), (lc, gc) = results
    assert math.isclose(le, lc, rel_tol=1e-5, abs_tol=1e-6)
    for a, b in zip(ge, gc):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


def test_compiled_reads_a_module_in_a_keyword_only_default():
    """``def loss_fn(*xs, model=model)``: the model's parameters get their gradients."""
    graphc = pytest.importorskip("graphc")
    m = eager.nn.Linear(3, 1)
    x = eager.ones(2, 3)

    def f(*xs, model=m):
        return model(xs[0]).sum()

    graphc.compile(f)(x).backward()
    np.testing.assert_allclose(m.weight.grad.numpy(), np.full((1, 3), 2.0, np.float32))
    m.weight.grad = None
    graphc.compile(f)(x).backward()  # again (the cached trace reads the default too)
    np.testing.assert_allclose(m.weight.grad.numpy(), np.full((1, 3), 2.0, np.float32))


def test_compiled_nn_really_nll_with_range_index():
    rng = np.random.default_rng(3)
    x = eager.from_numpy(rng.random((16, 784), dtype=np.float32))
    y = eager.from_numpy(rng.integers(0, 10, 16))

    def loss_of(model, xb, yb):
        out = model(xb)
        out = out - out.exp().sum(-1).log().unsqueeze(-1)
        return -out[range(yb.shape[0]), yb].mean()

    _compiled_vs_eager(lambda: eager.nn.Sequential(eager.nn.Linear(784, 10)), loss_of, (x, y))


def test_compiled_cifar_cnn_loss():
    rng = np.random.default_rng(4)
    x = eager.from_numpy(rng.standard_normal((2, 3, 32, 32)).astype(np.float32))
    y = eager.from_numpy(rng.integers(0, 10, 2))
    nn, F = eager.nn, eager.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.pool = nn.Conv2d(3, 6, 5), nn.MaxPool2d(2, 2)
            self.conv2, self.fc1 = nn.Conv2d(6, 16, 5), nn.Linear(16 * 5 * 5, 10)

        def forward(self, x):
            x = self.pool(F.relu(self.conv1(x)))
            x = self.pool(F.relu(self.conv2(x)))
            return self.fc1(eager.flatten(x, 1))

    _compiled_vs_eager(Net, lambda m, xb, yb: nn.CrossEntropyLoss()(m(xb), yb), (x, y))


def test_compiled_gpt_loss():
    rng = np.random.default_rng(5)
    idx = eager.from_numpy(rng.integers(0, 11, (2, 8)))
    tgt = eager.from_numpy(rng.integers(0, 11, (2, 8)))
    _compiled_vs_eager(lambda: _gpt(eager, 11), lambda m, a, b: m(a, b)[1], (idx, tgt))


def test_compiled_makemore_mlp_loss():
    rng = np.random.default_rng(6)
    X = eager.from_numpy(rng.integers(0, 27, (10, 3)))
    Y = eager.from_numpy(rng.integers(0, 27, 10))
    nn, F = eager.nn, eager.nn.functional

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.C = nn.Parameter(eager.zeros(27, 4))
            self.W1, self.b1 = nn.Parameter(eager.zeros(12, 20)), nn.Parameter(eager.zeros(20))
            self.W2, self.b2 = nn.Parameter(eager.zeros(20, 27)), nn.Parameter(eager.zeros(27))

        def forward(self, X):
            emb = self.C[X]
            h = eager.tanh(emb.view(-1, 12) @ self.W1 + self.b1)
            return h @ self.W2 + self.b2

    def loss_of(m, X, Y):
        logits = m(X)
        counts = logits.exp()
        probs = counts / counts.sum(1, keepdims=True)
        manual = -probs[eager.arange(X.shape[0]), Y].log().mean()
        return F.cross_entropy(logits, Y) + manual

    _compiled_vs_eager(MLP, loss_of, (X, Y))


def test_compiled_random_sampling():
    """randperm and multinomial trace (fresh draws every call); a Generator is refused."""
    graphc = pytest.importorskip("graphc")
    probs = eager.tensor([[0.0, 1.0, 0.0, 3.0], [1.0, 1.0, 1.0, 1.0]])

    def sample(p):
        return (
            eager.multinomial(p, 20, replacement=True),
            eager.multinomial(p, 4),
            eager.randperm(6),
        )

    f = graphc.compile(sample)
    eager.manual_seed(0)
    draws = [f(probs) for _ in range(3)]
    for with_r, without, perm in draws:
        assert with_r.dtype == eager.int64 and tuple(with_r.shape) == (2, 20)
        assert set(with_r[0].tolist()) <= {1, 3}
        assert sorted(without[0].tolist()[:2]) == [1, 3]
        assert [sorted(r) for r in without.tolist()] == [[0, 1, 2, 3]] * 2
        assert sorted(perm.tolist()) == list(range(6)) and perm.dtype == eager.int64
    assert any(not eager.equal(draws[0][2], d[2]) for d in draws[1:])
    g = eager.Generator().manual_seed(1)
    with pytest.raises(NotImplementedError, match="generator"):
        graphc.compile(lambda p: eager.multinomial(p, 1, generator=g))(probs)
