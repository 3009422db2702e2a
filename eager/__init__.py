"""eager: define-by-run autograd over numpy, with PyTorch's API and semantics.

``import eager as torch`` runs the seed tutorials' code unchanged.
"""

from __future__ import annotations

from . import _malloc
from . import ops  # noqa: F401  (registers every primitive)
from ._dtype import (
    bool,
    double,
    dtype,
    float,
    float16,
    float32,
    float64,
    half,
    int,
    int8,  # noqa: A004
    int16,
    int32,
    int64,
    long,
    short,
    uint8,
)
from .surface import Size, TensorOps, maximum, minimum, where
from .surface import matmul as _surface_matmul
from .autograd import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from .tensor import Tensor, device
from .factories import (
    BoolTensor,
    DoubleTensor,
    FloatTensor,
    IntTensor,
    LongTensor,
    arange,
    as_tensor,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    bernoulli,
    full_like,
    Generator,
    initial_seed,
    linspace,
    manual_seed,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randn,
    randn_like,
    seed,
    tensor,
    zeros,
    zeros_like,
)
from . import autograd  # noqa: E402
from .random_extra import multinomial, normal, randint_like, randperm  # noqa: E402
from ._format import set_printoptions  # noqa: E402

__version__ = "0.1.0"

_malloc.tune()  # glibc thresholds: no page faults per step (eager/_malloc.py)


def _write_out(out, result, name):
    """PyTorch's ``out=``: the result written into ``out`` (same shape), which is returned."""
    if not isinstance(out, Tensor):
        raise TypeError(f"{name}(): argument 'out' must be Tensor, not {type(out).__name__}")
    if is_grad_enabled() and (result.requires_grad or out.requires_grad):
        raise RuntimeError(
            f"{name}(): functions with out=... arguments don't support automatic "
            "differentiation, but one of the arguments requires grad."
        )
    if tuple(out.shape) != tuple(result.shape):
        raise NotImplementedError(
            f"{name}(): out= of shape {list(out.shape)} for a result of shape "
            f"{list(result.shape)}: eager does not resize out tensors"
        )
    return out.copy_(result)


def _method(name):
    def fn(input, *args, out=None, **kwargs):
        if not isinstance(input, TensorOps):
            input = tensor(input)
        result = getattr(input, name)(*args, **kwargs)
        return result if out is None else _write_out(out, result, name)

    fn.__name__ = name
    fn.__doc__ = f"Module-level form of ``Tensor.{name}``."
    return fn


for _name in [
    "add",
    "sub",
    "mul",
    "div",
    "true_divide",
    "pow",
    "neg",
    "abs",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tanh",
    "sigmoid",
    "relu",
    "sign",
    "clamp",
    "clip",
    "square",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "logical_not",
    "logical_and",
    "logical_or",
    "sum",
    "mean",
    "max",
    "min",
    "amax",
    "amin",
    "argmax",
    "argmin",
    "all",
    "any",
    "reshape",
    "flatten",
    "unsqueeze",
    "squeeze",
    "transpose",
    "permute",
    "t",
    "mm",
    "dot",
    "clone",
    "detach",
    "unbind",
]:
    globals()[_name] = _method(_name)

# the functions of eager/methods/ (by topic: pointwise, shape, stats, indexing, linalg)
from .methods import FUNCTIONS as _FUNCTIONS, METHOD_FUNCTIONS as _METHOD_FUNCTIONS  # noqa: E402

globals().update(_FUNCTIONS)
for _name in _METHOD_FUNCTIONS:
    globals()[_name] = _method(_name)


def matmul(input, other, *, out=None):  # noqa: F811
    """Matrix product (numpy's/PyTorch's broadcasting rules); ``out=`` as PyTorch."""
    result = _surface_matmul(input, other)
    return result if out is None else _write_out(out, result, "matmul")


subtract, multiply, divide, negative, absolute = sub, mul, div, neg, abs  # noqa: F821
is_tensor = lambda obj: isinstance(obj, Tensor)  # noqa: E731


def numel(input) -> int:  # noqa: F811
    return input.numel()


def is_floating_point(input) -> bool:
    return input.is_floating_point()


def broadcast_to(input, shape):
    return input.expand(shape)


# --- nn/optim/boilerplate surface: save/load, default dtype/device, cuda/backends ----------
from .factories import (  # noqa: E402
    get_default_device,
    get_default_dtype,
    set_default_device,
    set_default_dtype,
)
from .serialization import load, save  # noqa: E402
from . import backends, cuda  # noqa: E402,F401

_DETERMINISTIC = [False]


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """Recorded only: eager's CPU kernels are deterministic already."""
    _DETERMINISTIC[0] = True if mode else False


def are_deterministic_algorithms_enabled() -> bool:
    """What ``use_deterministic_algorithms`` last set (eager is deterministic anyway)."""
    return _DETERMINISTIC[0]


def __getattr__(name):
    if name == "bfloat16":
        raise AttributeError(
            "module 'eager' has no attribute 'bfloat16': numpy (so eager) has no bfloat16; "
            "use eager.float32 or eager.float16"
        )
    if name in ("nn", "optim", "viz", "linalg", "utils", "testing", "func"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'eager' has no attribute {name!r}")
