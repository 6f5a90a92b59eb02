"""Writes torch_small.safetensors with PyTorch's `safetensors` package, and torch_small.json with
the values every tensor must load as; tests/test_io.cpp checks that ember reads the file written
by the reference implementation.

Run from the repository root:
    .venv/bin/pip install safetensors   # scripts/setup --dev installs it
    .venv/bin/python tests/golden/make_safetensors.py
"""

import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file

HERE = Path(__file__).resolve().parent


def encode(value):
    """A JSON-safe value: NaN and the infinities as strings, everything else as the number."""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    return value


def make_tensors():
    torch.manual_seed(0)
    special = [0.0, -0.0, 1.5, -2.25, float("inf"), float("-inf"), float("nan")]
    return {
        "f32.weight": torch.randn(3, 4),
        "f32.special": torch.tensor(special, dtype=torch.float32),
        "f64.values": torch.randn(2, 3, dtype=torch.float64),
        "f16.values": torch.tensor([[0.1, -65504.0], [6.1e-5, 3.0]], dtype=torch.float16),
        "bf16.values": torch.tensor([1e-3, -3.140625, 1e30, float("nan")], dtype=torch.bfloat16),
        "i64.values": torch.tensor([[-(2**63), 2**63 - 1], [0, -7]], dtype=torch.int64),
        "i32.scalar": torch.tensor(-123456, dtype=torch.int32),
        "i16.values": torch.tensor([-32768, 32767, 5], dtype=torch.int16),
        "i8.values": torch.tensor([[-128, 127], [0, -1]], dtype=torch.int8),
        "u8.values": torch.arange(250, 256, dtype=torch.uint8),
        "bool.mask": torch.tensor([True, False, True, True, False]),
        "empty": torch.zeros(0, 3),
        # A transposed view, saved as its contiguous copy (safetensors stores row-major data).
        "f32.transposed": torch.arange(6, dtype=torch.float32).reshape(2, 3).t().contiguous(),
        "nested.deep.rank4": torch.arange(24, dtype=torch.int32).reshape(1, 2, 3, 4),
    }


def main():
    tensors = make_tensors()
    metadata = {"format": "pt", "producer": "tests/golden/make_safetensors.py"}
    save_file(tensors, str(HERE / "torch_small.safetensors"), metadata=metadata)
    expected = {
        "metadata": metadata,
        "tensors": {
            name: {
                "dtype": str(t.dtype).replace("torch.", ""),
                "shape": list(t.shape),
                # float16/bfloat16 values are exact in float64, so they compare exactly.
                "values": [encode(v) for v in t.flatten().tolist()]
                if t.dtype != torch.bfloat16 and t.dtype != torch.float16
                else [encode(v) for v in t.to(torch.float64).flatten().tolist()],
            }
            for name, t in tensors.items()
        },
    }
    (HERE / "torch_small.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
