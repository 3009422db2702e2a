"""Device and dtype boilerplate: eager.cuda, eager.backends, eager.device, default dtype
and device, Tensor.to/cpu/cuda/type/half, size= keywords, tensor() from 0-d tensors."""

import pickle

import numpy as np
import pytest

import eager
from eager import nn


@pytest.fixture
def default_float64():
    eager.set_default_dtype(eager.float64)
    yield
    eager.set_default_dtype(eager.float32)


def test_cuda_and_backends():
    assert eager.cuda.is_available() is False and eager.cuda.device_count() == 0
    assert eager.backends.mps.is_available() is False
    eager.cuda.manual_seed_all(0)
    eager.cuda.empty_cache()
    eager.backends.cudnn.deterministic = True
    eager.backends.cudnn.benchmark = False
    with pytest.raises(RuntimeError, match="no GPU"):
        eager.cuda.current_device()
    dev = "cuda" if eager.cuda.is_available() else "cpu"
    assert eager.ones(2, device=dev).device.type == "cpu"
    eager.use_deterministic_algorithms(True)
    assert eager.are_deterministic_algorithms_enabled()
    eager.use_deterministic_algorithms(False)


def test_device_objects():
    d = eager.device("cuda")
    assert repr(d) == "device(type='cuda')" and str(d) == "cuda"
    assert repr(eager.device("cuda:1")) == "device(type='cuda', index=1)"
    assert eager.device("cpu", 0) != eager.device("cpu")
    assert eager.device("cpu") == "cpu"
    assert pickle.loads(pickle.dumps(eager.device("mps"))) == eager.device("mps")
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda, .* device string: foo"):
        eager.device("foo")
    x = eager.ones(2)
    for bad in (lambda: x.to("cuda"), lambda: x.to(device=d), lambda: x.cuda(),
                lambda: eager.zeros(2, device="cuda:0"), lambda: nn.Linear(1, 1).to("cuda"),
                lambda: eager.set_default_device("cuda")):
        with pytest.raises(RuntimeError, match="no GPU: eager runs on the CPU"):
            bad()
    eager.set_default_device("cpu")
    assert eager.get_default_device() == eager.device("cpu")


def test_tensor_to_cpu_type():
    x = eager.ones(2, 3)
    assert x.cpu() is x and x.is_cuda is False and x.is_cpu and x.get_device() == -1
    assert x.to("cpu") is x and x.to(x) is x and x.to(eager.float32) is x
    y = x.to(copy=True)
    assert y is not x and np.array_equal(y.numpy(), x.numpy())
    assert x.to("cpu", eager.float64).dtype == eager.float64
    assert x.to(device="cpu", dtype=eager.int64, non_blocking=True).dtype == eager.int64
    assert x.to(np.float64).dtype == eager.float64
    assert x.type() == "eager.FloatTensor" and x.double().type() == "eager.DoubleTensor"
    assert x.type(eager.float64).dtype == eager.float64
    assert x.type("torch.IntTensor").dtype == eager.int32
    assert x.type("eager.LongTensor").dtype == eager.int64
    with pytest.raises(ValueError, match="invalid type: 'foo'"):
        x.type("foo")
    assert x.half().dtype == eager.float16 and x.half().numpy().dtype == np.float16
    with pytest.raises(TypeError, match="bfloat16"):
        x.bfloat16()
    with pytest.raises(AttributeError, match="bfloat16"):
        eager.bfloat16  # noqa: B018
    w = eager.ones(2, requires_grad=True)
    (w.to(eager.float64) * 2).sum().backward()
    assert w.grad.dtype == eager.float32


def test_default_dtype(default_float64):
    assert eager.get_default_dtype() == eager.float64
    assert eager.tensor([1.0, 2.0]).dtype == eager.float64
    assert eager.tensor([1, 2]).dtype == eager.int64
    for make in (lambda: eager.zeros(2), lambda: eager.ones(2), lambda: eager.randn(2),
                 lambda: eager.rand(2), lambda: eager.empty(2), lambda: eager.full((2,), 1.5),
                 lambda: eager.arange(0.0, 1.0, 0.5), lambda: eager.linspace(0, 1, 3),
                 lambda: eager.Tensor(2), lambda: nn.Linear(2, 2).weight):
        assert make().dtype == eager.float64
    assert (eager.tensor([1, 2]) * 0.5).dtype == eager.float64


def test_default_dtype_errors():
    with pytest.raises(TypeError, match="only floating-point types are supported"):
        eager.set_default_dtype(eager.int64)
    assert eager.get_default_dtype() == eager.float32


def test_creation_keywords_and_nested_tensors():
    assert eager.zeros(size=(2, 3)).shape == (2, 3)
    assert eager.ones(size=[4]).shape == (4,)
    assert eager.randn(size=(1, 2)).shape == (1, 2)
    with pytest.raises(TypeError, match="multiple values for argument 'size'"):
        eager.zeros(2, size=(2,))
    assert eager.tensor([1.0], dtype=np.float32).dtype == eager.float32
    assert eager.tensor([1], dtype=np.int32).dtype == eager.int32
    t = eager.tensor([eager.tensor(1.0, dtype=eager.float64), eager.tensor(2.0)])
    assert t.dtype == eager.float64 and t.tolist() == [1.0, 2.0]
    t = eager.tensor([[eager.tensor(1)], [eager.tensor(2)]])
    assert t.shape == (2, 1) and t.dtype == eager.int64
    assert eager.tensor([eager.tensor(1, dtype=eager.int32), 2.5]).dtype == eager.float32


def test_against_torch():
    torch = pytest.importorskip("torch")
    for dt in ("float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8",
               "bool"):
        a = torch.ones(2, dtype=getattr(torch, dt))
        b = eager.ones(2, dtype=getattr(eager, dt))
        assert a.type().replace("torch.", "eager.") == b.type()
    for spec in ("cpu", "cuda", "cuda:0", "mps", "meta"):
        assert repr(torch.device(spec)) == repr(eager.device(spec))
        assert str(torch.device(spec)) == str(eager.device(spec))
    vals = [eager.tensor(1, dtype=eager.int32), eager.tensor(2, dtype=eager.int32)]
    tvals = [torch.tensor(1, dtype=torch.int32), torch.tensor(2, dtype=torch.int32)]
    assert str(torch.tensor(tvals).dtype).split(".")[1] == eager.tensor(vals).dtype.name
