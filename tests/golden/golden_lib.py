"""Shared helpers for the reference-data script: tensor encoding, layouts, case recording.

A case is {"op", "name", "inputs": [tensor|scalar|list], "attrs": {...}, "expected": tensor|[tensors]|null,
"error": bool}. A tensor is {"dtype", "shape", "data": hex of its contiguous little-endian bytes,
"view": recipe}. The recipe turns the stored base tensor into the tested input the same way on both
sides: "contiguous"; "t" (swap the last two dims); "step2" (every other row of a base twice as long
in dim 0); {"expand": shape} (broadcast a base with size-1 dims).
"""
import json
import os

import numpy as np
import torch

DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool,
}
NAMES = {v: k for k, v in DTYPES.items()}
FLOAT_DTYPES = ["float32", "float64", "float16", "bfloat16"]
INT_DTYPES = ["int64", "int32", "int16", "int8", "uint8"]
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + ["bool"]

HERE = os.path.dirname(os.path.abspath(__file__))


def encode(t, view="contiguous"):
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        raw = t.view(torch.int16).numpy().tobytes()
    else:
        raw = t.numpy().tobytes()
    return {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data": raw.hex(), "view": view}


def apply_view(base, view):
    if view == "contiguous":
        return base
    if view == "t":
        return base.transpose(-1, -2)
    if view == "step2":
        return base[::2]
    if isinstance(view, dict) and "expand" in view:
        return base.expand(*view["expand"])
    raise ValueError(view)


class Tensor:
    """An input: a base tensor plus the view recipe applied to it."""

    def __init__(self, base, view="contiguous"):
        self.base = base
        self.view = view

    def value(self):
        return apply_view(self.base, self.view)

    def encode(self):
        return encode(self.base, self.view)


def make(shape, dtype, rng, low=-3.0, high=3.0, positive=False):
    """Random values for a dtype: floats uniform in [low, high) (or (0.1, high) if positive), ints small."""
    torch_dtype = DTYPES[dtype]
    if dtype == "bool":
        return torch.from_numpy(rng.random(shape) < 0.5)
    if dtype in INT_DTYPES:
        lo = 0 if (dtype == "uint8" or positive) else -5
        return torch.from_numpy(rng.integers(lo, 6, size=shape)).to(torch_dtype)
    if positive:
        values = rng.uniform(0.1, high, size=shape)
    else:
        values = rng.uniform(low, high, size=shape)
    return torch.from_numpy(values).to(torch_dtype)


def layouts(shape, dtype, rng, **kw):
    """The same logical shape as contiguous, transposed, strided (step 2) and broadcast inputs."""
    shape = list(shape)
    out = [Tensor(make(shape, dtype, rng, **kw))]
    if len(shape) >= 2:
        base = make(shape[:-2] + [shape[-1], shape[-2]], dtype, rng, **kw)
        out.append(Tensor(base, "t"))
    if len(shape) >= 1:
        out.append(Tensor(make([shape[0] * 2] + shape[1:], dtype, rng, **kw), "step2"))
        base_shape = [1] + shape[1:]
        out.append(Tensor(make(base_shape, dtype, rng, **kw), {"expand": shape}))
    return out


def encode_value(v):
    if isinstance(v, Tensor):
        return v.encode()
    if isinstance(v, torch.Tensor):
        return encode(v)
    if isinstance(v, (list, tuple)):
        return [encode_value(x) for x in v]
    if isinstance(v, (bool, int, float)):
        return {"scalar": v}
    if v is None:
        return None
    raise TypeError(type(v))


def value_of(v):
    if isinstance(v, Tensor):
        return v.value()
    if isinstance(v, (list, tuple)):
        return [value_of(x) for x in v]
    return v


class Recorder:
    def __init__(self):
        self.cases = []

    def case(self, op, name, fn, inputs, attrs=None):
        """Runs fn(*input values, **attrs) in PyTorch; records the result, or that it raised."""
        attrs = attrs or {}
        entry = {"op": op, "name": name, "inputs": [encode_value(v) for v in inputs], "attrs": attrs}
        try:
            result = fn(*[value_of(v) for v in inputs], **attrs)
        except (RuntimeError, ValueError, IndexError, TypeError) as e:
            entry["expected"] = None
            entry["error"] = True
            entry["message"] = str(e).splitlines()[0][:200]
        else:
            entry["error"] = False
            if isinstance(result, (list, tuple)):
                entry["expected"] = [encode(r) for r in result]
            else:
                entry["expected"] = encode(result)
        self.cases.append(entry)

    def write(self, area):
        path = os.path.join(HERE, f"{area}.json")
        with open(path, "w") as f:
            json.dump({"generator": f"torch {torch.__version__}", "cases": self.cases}, f, separators=(",", ":"))
        print(f"{path}: {len(self.cases)} cases")
