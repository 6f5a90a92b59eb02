"""ember: a readable C++ deep-learning library with PyTorch's API.

The package is the C++ library itself (ember._ember, bound with nanobind) under PyTorch's names:
ember.Tensor, ember.nn, ember.optim, ember.autograd, ember.compile, ember.profiler, ember.data;
and ember.models (GPT, Mamba, UNet, Bert), ember.train (checkpoints, load_model, the training step
and the runs of `ember train`), ember.onnx and ember.gguf.
Tensors share memory with NumPy (numpy(), from_numpy) and with anything that speaks DLPack
(torch.from_dlpack(t), ember.from_dlpack(x)). Errors from the library raise ember.Error, a
RuntimeError carrying the library's "[op] ..." message. Every call into the library releases the
GIL, so Python threads can run ember concurrently.
"""

from __future__ import annotations

import contextlib as _contextlib
import importlib as _importlib

from . import _ember
from ._ember import *  # noqa: F401,F403  (the ops, Tensor, dtype, save/load, ...)
from ._ember import Error, Tensor, dtype  # noqa: F401

# The Python modules wrap the extension's submodules of the same names (import ember.nn works).
nn = _importlib.import_module(".nn", __name__)
optim = _importlib.import_module(".optim", __name__)
autograd = _importlib.import_module(".autograd", __name__)
profiler = _importlib.import_module(".profiler", __name__)
data = _importlib.import_module(".data", __name__)
del functional  # noqa: F821  (ember.nn.functional)

# ember.models, ember.train, ember.onnx, ember.gguf: the extension's submodules as they are, importable
# by name (import ember.train).
import sys as _sys

for _name in ("models", "train", "onnx", "gguf"):
    _sys.modules[f"{__name__}.{_name}"] = getattr(_ember, _name)
    globals()[_name] = getattr(_ember, _name)
del _name

__version__ = "0.1.0"

# dtypes under PyTorch's names: ember.float32, ember.float, ember.long, ...
float32 = dtype.float32
float64 = dtype.float64
float16 = dtype.float16
bfloat16 = dtype.bfloat16
int64 = dtype.int64
int32 = dtype.int32
int16 = dtype.int16
int8 = dtype.int8
uint8 = dtype.uint8
bool = dtype.bool  # noqa: A001  (as torch.bool)
q8_0 = dtype.q8_0
q4_0 = dtype.q4_0
q4_1 = dtype.q4_1
float = float32  # noqa: A001
double = float64
half = float16
long = int64
int = int32  # noqa: A001
short = int16


class _GradMode(_contextlib.ContextDecorator):
    """Sets whether operations record gradients inside a `with` block or a decorated function."""

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled
        self._previous: list[bool] = []

    def __enter__(self) -> None:
        self._previous.append(_ember.is_grad_enabled())
        _ember.set_grad_enabled(self._enabled)

    def __exit__(self, *exc) -> None:
        _ember.set_grad_enabled(self._previous.pop())


class no_grad(_GradMode):
    """Context manager and decorator: operations inside record no gradients (torch.no_grad)."""

    def __init__(self) -> None:
        super().__init__(False)


class enable_grad(_GradMode):
    """Context manager and decorator: gradients are recorded inside (torch.enable_grad)."""

    def __init__(self) -> None:
        super().__init__(True)


class inference_mode(no_grad):
    """ember has no separate inference mode: the same as no_grad."""


class autocast(_contextlib.ContextDecorator):
    """Runs matmul-heavy ops in bfloat16 (or float16) inside the block (torch.autocast on the CPU)."""

    def __init__(self, device_type: str = "cpu", dtype: dtype = dtype.bfloat16, enabled: bool = True) -> None:
        if device_type != "cpu":
            raise ValueError(f"[autocast] ember autocasts on the CPU only, got device_type={device_type!r}")
        self._dtype, self._enabled, self._guards = dtype, enabled, []

    def __enter__(self) -> None:
        self._guards.append(_ember._Autocast(self._dtype, self._enabled))

    def __exit__(self, *exc) -> None:
        self._guards.pop()


def as_tensor(data, dtype: dtype | None = None) -> Tensor:
    """Shares memory with an array (NumPy, DLPack) when it can, copies otherwise (torch.as_tensor)."""
    if isinstance(data, Tensor):
        return data if dtype is None or data.dtype == dtype else data.to(dtype)
    if hasattr(data, "__dlpack__") or hasattr(data, "__array_interface__"):
        try:
            shared = from_dlpack(data) if hasattr(data, "__dlpack__") else from_numpy(data)
            return shared if dtype is None or shared.dtype == dtype else shared.to(dtype)
        except Error:
            pass
    return tensor(data, dtype=dtype)


# Every public name, for `from ember import *` and for the stubs.
__all__ = [name for name in dir(_ember) if not name.startswith("_")] + [
    "float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool", "q8_0", "q4_0",
    "q4_1", "float", "double", "half", "long", "int", "short", "no_grad", "enable_grad", "inference_mode", "autocast",
    "as_tensor", "nn", "optim", "autograd", "profiler", "data",
]
__all__ = [name for name in __all__ if name != "functional"]
