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
# the tests


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_runs_on_eager(name):
    _run(name, eager)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_agrees_with_pytorch(name):
    torch = pytest.importorskip("torch")
    _same(_run(name, eager), _run(name, torch), name)
