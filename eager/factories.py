"""The creation functions: ``tensor``, ``zeros``, ``randn``, ``arange``... and the seed.

Each makes a new leaf tensor from a numpy array.  While a tracing compiler (graphc)
traces on this thread (``TRACING.tracer`` set), random draws and the array factories
come from the tracer instead (see :class:`_Tracing`).  ``manual_seed`` seeds eager's
generator and records the seed in ``SEED`` for compiled code.

This module sits above eager/tensor.py (docs/eager-layers.md); its last block is the
wiring, the one place where the layers below receive ``Tensor`` and the factories.
"""

from __future__ import annotations

import builtins
import threading
from typing import Optional

import numpy as np

# Layers below this module only (see docs/eager-layers.md).  Modules by full name: a
# "from . import x" would also be an import of the package eager itself.
import eager._dtype as D
import eager._operands as _operands_mod
import eager._tape as _tape_mod
import eager._views as _views_mod
import eager.autograd.backward_codegen as _codegen_mod
import eager.autograd.engine as _engine_mod
import eager.autograd.function as _function_mod
import eager.surface as _surface_mod
import eager.tensor as _tensor_mod
from .tensor import Tensor, check_device, device


def _finish(arr: np.ndarray, requires_grad: bool, device_=None) -> Tensor:
    if device_ is not None:
        check_device(device_)
    t = Tensor._make(arr)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _shape(size) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    try:
        return tuple(builtins.int(s) for s in size)
    except (TypeError, ValueError):
        raise TypeError(f"size must be a sequence of ints, got {size!r}") from None


def _size_kw(size: tuple, kw: dict, fn: str) -> tuple:
    """PyTorch's ``size=`` keyword (``zeros(size=(2, 3))``), and its other no-op keywords."""
    kw.pop("layout", None)
    kw.pop("pin_memory", None)
    if kw.pop("memory_format", None) is not None:
        pass
    if "out" in kw:
        raise NotImplementedError(f"{fn}(): the out= argument is not supported by eager")
    if "size" in kw:
        if size:
            raise TypeError(f"{fn}() got multiple values for argument 'size'")
        size = (kw.pop("size"),)
    if kw:
        raise TypeError(f"{fn}() got an unexpected keyword argument '{next(iter(kw))}'")
    return size


def set_default_dtype(d) -> None:
    """Make ``d`` (a floating dtype) the dtype of float data and of the float factories."""
    npd = D.to_np(d)
    if npd.kind != "f":
        raise TypeError("only floating-point types are supported as the default type")
    D.DEFAULT_FLOAT = npd


def get_default_dtype():
    """The dtype float data and the float factories use (``eager.float32`` unless set)."""
    return D.FROM_NP[D.DEFAULT_FLOAT]


def set_default_device(dev) -> None:
    """Only the CPU can be the default device (``None`` or ``'cpu'``)."""
    if dev is not None:
        check_device(dev)


def get_default_device() -> device:
    """``device(type='cpu')``."""
    return device("cpu")


def _dt(dtype, default=None) -> np.dtype:
    if dtype is None:
        return default if default is not None else D.DEFAULT_FLOAT
    return D.to_np(dtype)


def tensor(data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Copy ``data`` (nested lists, numbers, arrays, tensors) into a new leaf tensor."""
    if isinstance(data, np.ndarray):
        D.native_order(data)
    if isinstance(data, Tensor):
        arr = data._data.copy() if dtype is None else data._data.astype(D.to_np(dtype))
        return _finish(arr, requires_grad, device)
    if (
        isinstance(data, (list, tuple))
        and data
        and builtins.any(isinstance(d, Tensor) for d in _flat(data))
    ):
        if dtype is None:
            dtype = _nested_dtype(data)
        data = _tensors_to_lists(data)
    npd = D.to_np(dtype) if dtype is not None else D.infer_tensor_dtype(data)
    D.check_no_np_bool(data, npd)
    try:
        arr = np.array(data, dtype=npd)
    except (ValueError, TypeError) as e:
        raise ValueError(
            f"tensor(): could not convert data to a {D.from_np(npd)} tensor: {e}"
        ) from None
    return _finish(arr, requires_grad, device)


def _flat(seq):
    stack = [seq]
    while stack:
        s = stack.pop()
        if isinstance(s, (list, tuple)):
            stack.extend(s)
        else:
            yield s


def _nested_dtype(data) -> np.dtype:
    """The dtype of ``tensor([t0, t1, 2.5])``: the tensors' dtypes promoted, then with
    the plain numbers' (a float among int tensors gives the default float dtype)."""
    items = list(_flat(data))
    tensors = [x._data.dtype for x in items if isinstance(x, Tensor)]
    out = tensors[0]
    for d in tensors[1:]:
        out = D.promote(out, d)
    others = [x for x in items if not isinstance(x, Tensor)]
    if others:
        out = D.promote(out, D.infer_tensor_dtype(others))
    return out


def _tensors_to_lists(data):
    if isinstance(data, Tensor):
        return data._data.tolist()
    if isinstance(data, (list, tuple)):
        return [_tensors_to_lists(d) for d in data]
    return data


def as_tensor(data, dtype=None, device=None) -> Tensor:
    if isinstance(data, Tensor) and (dtype is None or D.to_np(dtype) == data._data.dtype):
        return data
    if isinstance(data, np.ndarray):
        D.native_order(data)
        if dtype is None or D.to_np(dtype) == data.dtype:
            return _finish(data, False, device)
    return tensor(data, dtype=dtype, device=device)


def from_numpy(arr: np.ndarray) -> Tensor:
    """Share memory with a numpy array (writes show in both)."""
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"from_numpy expects a numpy.ndarray, got {type(arr).__name__}")
    D.native_order(arr)
    if arr.dtype not in D.FROM_NP:
        raise TypeError(
            f"can't convert np.ndarray of type {arr.dtype}; supported: float64, "
            "float32, float16, int64, int32, int16, int8, uint8 and bool"
        )
    return Tensor._make(arr)


_gen = np.random.default_rng()
# (seed, how many times manual_seed was called): compiled code seeds its own stream from it
SEED = [None, 0]


class _Tracing(threading.local):
    """What a tracing compiler (graphc) asks of eager while it traces on this thread
    (``tracer`` is None otherwise): random draws (``randn`` & co.) and the tensors the
    factories make (``zeros``, ``ones``, ``full``, ``empty``, ``arange``, ``linspace``,
    ``eye`` and the ``_like`` forms) come from ``tracer.random(kind, shape, dtype,
    params)`` and ``tracer.factory(array, requires_grad)`` as traced values, so fresh
    draws are made at every call and writing traced values into a factory's tensor in
    place (``out = zeros(T, H); out[t] = h``) is traced too; code that must not run
    while tracing (an optimizer's step) checks it."""

    tracer = None


TRACING = _Tracing()


def _factory(arr: np.ndarray, requires_grad: bool, device_=None):
    tracer = TRACING.tracer
    if tracer is not None:
        if device_ is not None:
            check_device(device_)
        return tracer.factory(arr, requires_grad)
    return _finish(arr, requires_grad, device_)


def manual_seed(seed: int):
    """Seed eager's generator and compiled code's (numbers differ from PyTorch's, and
    eager's from compiled code's; each sequence is reproducible)."""
    global _gen
    _gen = np.random.default_rng(builtins.int(seed))
    SEED[0], SEED[1] = builtins.int(seed), SEED[1] + 1
    return _gen


def seed() -> int:
    """Seed eager's generator from fresh entropy; returns the seed."""
    s = builtins.int(np.random.SeedSequence().entropy % (2**63))
    manual_seed(s)
    return s


def initial_seed() -> int:
    """The seed last given to ``manual_seed`` (or ``seed``)."""
    if SEED[0] is None:
        seed()
    return builtins.int(SEED[0])


class Generator:
    """``torch.Generator``: an eager random stream of its own for the ``generator=``
    argument of ``randn``, ``rand``, ``randint``, ``randperm``, ``multinomial``...
    (numpy's PCG64 seeded by ``manual_seed``: reproducible, not PyTorch's numbers).
    Refused inside a compiled function: its draws would be constants of the trace."""

    def __init__(self, device="cpu") -> None:
        check_device(device)
        self.device = _tensor_mod.device(device) if isinstance(device, str) else device
        self._seed = builtins.int(np.random.SeedSequence().entropy % (2**63))
        self._rng = np.random.default_rng(self._seed)

    def manual_seed(self, seed) -> "Generator":
        """Reseed this generator; returns it (``g = Generator().manual_seed(42)``)."""
        self._seed = builtins.int(seed)
        self._rng = np.random.default_rng(self._seed)
        return self

    def seed(self) -> int:
        """Reseed from fresh entropy; returns the seed."""
        self.manual_seed(np.random.SeedSequence().entropy % (2**63))
        return self._seed

    def initial_seed(self) -> int:
        """The seed this generator was last seeded with."""
        return self._seed

    def get_state(self):
        """An opaque copy of the generator's state (for ``set_state``)."""
        return dict(self._rng.bit_generator.state)

    def set_state(self, state) -> "Generator":
        """Restore a state ``get_state`` returned."""
        self._rng.bit_generator.state = dict(state)
        return self


def _rng(generator, fn: str):
    """The numpy generator behind ``generator=`` (None: eager's global stream)."""
    if generator is None:
        return _gen
    if TRACING.tracer is not None:
        raise NotImplementedError(
            f"{fn}: a generator= argument cannot be compiled (its draws would be constants "
            "of the compiled code); use the default generator (eager.manual_seed) inside a "
            "compiled function"
        )
    if isinstance(generator, Generator):
        return generator._rng
    if isinstance(generator, np.random.Generator):
        return generator
    raise TypeError(f"{fn}: generator must be a torch.Generator, not {type(generator).__name__}")


def randn(
    *size, dtype=None, device=None, requires_grad: bool = False, generator=None, **kw
) -> Tensor:
    size = _size_kw(size, kw, "randn")
    g = _rng(generator, "randn")
    npd = _dt(dtype)
    if npd.kind != "f":
        raise RuntimeError(f"randn: expected a floating point dtype, got {D.from_np(npd)}")
    if TRACING.tracer is not None and generator is None:
        return TRACING.tracer.random("normal", _shape(size), npd, {})
    arr = g.standard_normal(_shape(size), dtype=npd if npd != np.float16 else np.float32)
    return _finish(arr.astype(npd, copy=False), requires_grad, device)


def rand(
    *size, dtype=None, device=None, requires_grad: bool = False, generator=None, **kw
) -> Tensor:
    size = _size_kw(size, kw, "rand")
    g = _rng(generator, "rand")
    npd = _dt(dtype)
    if TRACING.tracer is not None and generator is None:
        return TRACING.tracer.random("uniform", _shape(size), npd, {})
    arr = g.random(_shape(size), dtype=npd if npd in (np.float32, np.float64) else np.float64)
    return _finish(arr.astype(npd, copy=False), requires_grad, device)


def randint(
    low, high=None, size=(), dtype=None, device=None, requires_grad=False, generator=None
) -> Tensor:
    """Integers drawn uniformly from [low, high) (``randint(high, size)`` too)."""
    if isinstance(high, (tuple, list)):  # randint(high, size), as PyTorch allows
        low, high, size = 0, low, high
    elif high is None:
        low, high = 0, low
    g = _rng(generator, "randint")
    if TRACING.tracer is not None:
        return TRACING.tracer.random(
            "integers",
            tuple(size),
            _dt(dtype, np.dtype(np.int64)),
            {"low": builtins.int(low), "high": builtins.int(high)},
        )
    arr = g.integers(low, high, size=tuple(size)).astype(_dt(dtype, np.dtype(np.int64)))
    return _finish(arr, requires_grad, device)


def randn_like(t: Tensor, dtype=None, requires_grad=False) -> Tensor:
    return randn(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def rand_like(t: Tensor, dtype=None, requires_grad=False) -> Tensor:
    return rand(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def bernoulli(input: Tensor, p: Optional[float] = None, generator=None) -> Tensor:
    """1 with probability ``input`` (or ``p``), else 0, in input's shape and dtype."""
    prob = input if p is None else p
    u = rand(input.shape, dtype=input.dtype, generator=generator)
    return (u < prob).to(input.dtype)


def zeros(*size, dtype=None, device=None, requires_grad: bool = False, **kw) -> Tensor:
    size = _size_kw(size, kw, "zeros")
    return _factory(np.zeros(_shape(size), dtype=_dt(dtype)), requires_grad, device)


def ones(*size, dtype=None, device=None, requires_grad: bool = False, **kw) -> Tensor:
    size = _size_kw(size, kw, "ones")
    return _factory(np.ones(_shape(size), dtype=_dt(dtype)), requires_grad, device)


def empty(*size, dtype=None, device=None, requires_grad: bool = False, **kw) -> Tensor:
    size = _size_kw(size, kw, "empty")
    return _factory(np.empty(_shape(size), dtype=_dt(dtype)), requires_grad, device)


def full(size, fill_value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    if dtype is None:
        dtype = (
            D.infer_np_dtype(fill_value)
            if not isinstance(fill_value, builtins.float)
            else D.DEFAULT_FLOAT
        )
    v = fill_value
    if isinstance(v, (builtins.int, builtins.float, np.number)):  # NaN/inf/too big for an int
        v = D.checked_fill(v, _dt(dtype))
    return _factory(np.full(_shape((size,)), v, dtype=_dt(dtype)), requires_grad, device)


def zeros_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return zeros(t.shape, dtype=dtype or t.dtype, device=device, requires_grad=requires_grad)


def ones_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return ones(t.shape, dtype=dtype or t.dtype, device=device, requires_grad=requires_grad)


def empty_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    return empty(t.shape, dtype=dtype or t.dtype, device=device, requires_grad=requires_grad)


def full_like(t: Tensor, fill_value, dtype=None, device=None, requires_grad=False) -> Tensor:
    return full(
        t.shape, fill_value, dtype=dtype or t.dtype, device=device, requires_grad=requires_grad
    )


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False) -> Tensor:
    if end is None:
        start, end = 0, start
    if dtype is None:
        isfloat = builtins.any(isinstance(v, builtins.float) for v in (start, end, step))
        npd = D.DEFAULT_FLOAT if isfloat else np.dtype(np.int64)
    else:
        npd = D.to_np(dtype)
    if step == 0:
        raise RuntimeError("arange: step must be nonzero")
    return _factory(np.arange(start, end, step).astype(npd), requires_grad, device)


def linspace(start, end, steps: int, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _factory(np.linspace(start, end, steps).astype(_dt(dtype)), requires_grad, device)


def eye(n: int, m: Optional[int] = None, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _factory(np.eye(n, m, dtype=_dt(dtype)), requires_grad, device)


def _typed_ctor(npd):
    def ctor(*args, requires_grad: bool = False):
        return Tensor(*args, dtype=npd, requires_grad=requires_grad)

    return ctor


FloatTensor = _typed_ctor(np.float32)
DoubleTensor = _typed_ctor(np.float64)
LongTensor = _typed_ctor(np.int64)
IntTensor = _typed_ctor(np.int32)
BoolTensor = _typed_ctor(np.bool_)


# --- wiring: the one place where the layers below receive Tensor and its factories --------
# tensor, _views, _tape, surface, _operands, autograd.function, autograd.engine and
# autograd.backward_codegen sit below this module and never import it; each exposes a
# bind() that stores what it needs in module globals (read at the same cost as before).
# eager/__init__ imports this module before anything can run an op, so the wiring is
# complete before the first tensor exists.
_views_mod.bind(Tensor)
_tape_mod.bind(Tensor)
_tensor_mod.bind(tensor=tensor)
_operands_mod.bind(tensor_ops=_surface_mod.TensorOps, tensor=tensor)
# surface's Tensor.to validates its device argument with check_device (CPU only)
_surface_mod.bind(device=check_device, rand=rand, randn=randn, bernoulli=bernoulli)
_function_mod.bind(Tensor, zeros)
_engine_mod.bind(Tensor, tensor, zeros_like)
_codegen_mod.bind(Tensor)
