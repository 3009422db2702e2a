"""eager.save / eager.load: the safe (never-pickle) checkpoint format."""

import collections
import io
import math
import zipfile

import numpy as np
import pytest

import eager
from eager import nn, optim


def _roundtrip(obj, tmp_path=None):
    if tmp_path is None:
        buf = io.BytesIO()
        eager.save(obj, buf)
        buf.seek(0)
        return eager.load(buf)
    path = tmp_path / "ck.pt"
    eager.save(obj, path)
    return eager.load(str(path))


def test_tensors_and_python_values_round_trip(tmp_path):
    a = eager.arange(6.0).reshape(2, 3)
    obj = {
        "a": a, "same": a, "i": eager.tensor([1, 2], dtype=eager.int32),
        "b": eager.tensor([True, False]), "h": eager.ones(2, dtype=eager.float16),
        "d": eager.tensor(2.5, dtype=eager.float64), "empty": eager.zeros(0, 3),
        "t": eager.transpose(eager.arange(6.0).reshape(2, 3), 0, 1),
        "nums": [1, 2.5, float("inf"), -0.0, None, True, "s", 10**30],
        "tup": (1, (2, [3])), 3: "int key", (1, 2): "tuple key",
        "np": np.arange(3, dtype=np.int16), "dtype": eager.float64,
        "size": eager.Size([2, 3]), "dev": eager.device("cpu"),
    }
    for where in (None, tmp_path):
        back = _roundtrip(obj, where)
        assert list(back) == list(obj)
        assert back["a"] is back["same"]
        for k in ("a", "i", "b", "h", "d", "empty", "t"):
            assert back[k].dtype == obj[k].dtype and back[k].shape == obj[k].shape
            assert np.array_equal(back[k].numpy(), obj[k].numpy())
        assert back["nums"][:2] == [1, 2.5] and math.isinf(back["nums"][2])
        assert math.copysign(1, back["nums"][3]) == -1 and back["nums"][4:] == [None, True,
                                                                                  "s", 10**30]
        assert back["tup"] == (1, (2, [3])) and back[3] == "int key"
        assert back[(1, 2)] == "tuple key"
        assert back["np"].dtype == np.int16 and isinstance(back["np"], np.ndarray)
        assert back["dtype"] is eager.float64 and back["size"] == (2, 3)
        assert back["dev"] == eager.device("cpu")


def test_parameters_and_requires_grad():
    p = nn.Parameter(eager.ones(2))
    back = _roundtrip([p, eager.ones(1, requires_grad=True), eager.ones(1)])
    assert isinstance(back[0], nn.Parameter) and back[0].requires_grad
    assert back[1].requires_grad and not isinstance(back[1], nn.Parameter)
    assert not back[2].requires_grad


def test_model_and_optimizer_checkpoint(tmp_path):
    eager.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    opt = optim.Adam(model.parameters(), lr=0.01, amsgrad=True)
    sched = optim.lr_scheduler.StepLR(opt, 2)
    for _ in range(3):
        opt.zero_grad()
        model(eager.ones(5, 3)).pow(2).sum().backward()
        opt.step()
        sched.step()
    path = tmp_path / "ck.pt"
    eager.save({"model": model.state_dict(), "opt": opt.state_dict(),
                "sched": sched.state_dict(), "epoch": 3}, path)
    ck = eager.load(path, weights_only=True)
    assert isinstance(ck["model"], collections.OrderedDict)
    model2 = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    model2.load_state_dict(ck["model"])
    opt2 = optim.Adam(model2.parameters(), lr=0.5, amsgrad=True)
    opt2.load_state_dict(ck["opt"])
    sched2 = optim.lr_scheduler.StepLR(opt2, 2)
    sched2.load_state_dict(ck["sched"])
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    for m, o in ((model, opt), (model2, opt2)):
        o.zero_grad()
        m(eager.ones(5, 3)).pow(2).sum().backward()
        o.step()
    for a, b in zip(model.parameters(), model2.parameters()):
        assert np.array_equal(a.detach().numpy(), b.detach().numpy())


def test_refuses_unsafe_objects():
    with pytest.raises(TypeError, match="save its state_dict"):
        eager.save(nn.Linear(1, 1), io.BytesIO())
    with pytest.raises(TypeError, match="cannot save an object of type set"):
        eager.save({1, 2}, io.BytesIO())
    with pytest.raises(TypeError, match="cannot save an object of type function"):
        eager.save({"f": lambda: 0}, io.BytesIO())


def test_corrupted_truncated_and_foreign_files(tmp_path):
    good = tmp_path / "good.pt"
    eager.save({"w": eager.ones(100)}, good)
    data = good.read_bytes()
    cases = {
        "trunc.pt": data[: len(data) // 2],
        "empty.pt": b"",
        "text.pt": b"hello world",
        "pickle.pt": b"\x80\x04\x95...",
    }
    flipped = bytearray(data)
    i = data.index(b"\x93NUMPY") + 200
    flipped[i] ^= 0xFF
    cases["flipped.pt"] = bytes(flipped)
    for name, payload in cases.items():
        (tmp_path / name).write_bytes(payload)
        with pytest.raises(RuntimeError, match=f"eager.load: .*{name}"):
            eager.load(tmp_path / name)
    with pytest.raises(RuntimeError, match="PyTorch checkpoint"):
        eager.load(tmp_path / "pickle.pt")
    foreign = tmp_path / "foreign.zip"
    with zipfile.ZipFile(foreign, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02.")
    with pytest.raises(RuntimeError, match="PyTorch checkpoint"):
        eager.load(foreign)
    with pytest.raises(RuntimeError, match="no GPU"):
        eager.load(good, map_location="cuda")
    assert eager.load(good, map_location="cpu")["w"].shape == (100,)


def test_torch_checkpoint_is_refused():
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buf)
    buf.seek(0)
    with pytest.raises(RuntimeError, match="PyTorch checkpoint"):
        eager.load(buf)
