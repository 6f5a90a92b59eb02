"""Writes wasm/tests/inputs.safetensors: the committed inputs of the cross-platform checks
(wasm/src/checks.h), which the native build and the WebAssembly build must turn into the same
outputs (wasm/tests/node_test.js compares them).

    .venv/bin/python wasm/tests/make_inputs.py

Needs NumPy and data/mnist (scripts/setup). Holds: ten MNIST test digits (one of each class, uint8),
a (3, 5, 7) and b (5, 7) of every dtype the WebAssembly build runs, an image batch and a kernel
bank for the convolutions, and rows and a weight for a larger GEMM.
"""
import gzip
import json
import pathlib
import struct

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]


def digits():
    rows = np.loadtxt(gzip.open(ROOT / "data/mnist/mnist_5k.csv.gz"), delimiter=",", dtype=np.int64)
    images, labels = rows[:, :784], rows[:, 784]
    # The last image of each class lies in the held-out fifth (src/data/mnist_format.cpp, split_rows).
    picks = [np.nonzero(labels == d)[0][-1] for d in range(10)]
    return images[picks].reshape(10, 28, 28).astype(np.uint8)


def bf16_bits(x):
    """float32 to bfloat16 bits, rounding to nearest even."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def save(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        dtype, array = tensors[name]
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    rng = np.random.default_rng(21)
    tensors = {"digits": ("U8", digits())}
    a, b = rng.standard_normal((3, 5, 7)) * 2, rng.standard_normal((5, 7)) * 2
    tensors["a_float32"], tensors["b_float32"] = ("F32", a.astype(np.float32)), ("F32", b.astype(np.float32))
    tensors["a_float64"], tensors["b_float64"] = ("F64", a), ("F64", b)
    tensors["a_float16"], tensors["b_float16"] = ("F16", a.astype(np.float16)), ("F16", b.astype(np.float16))
    tensors["a_bfloat16"], tensors["b_bfloat16"] = ("BF16", bf16_bits(a)), ("BF16", bf16_bits(b))
    ia, ib = rng.integers(-20, 21, (3, 5, 7)), rng.integers(-20, 21, (5, 7))
    for name, code, dtype in (("int64", "I64", np.int64), ("int32", "I32", np.int32), ("int16", "I16", np.int16),
                              ("int8", "I8", np.int8)):
        tensors["a_" + name], tensors["b_" + name] = (code, ia.astype(dtype)), (code, ib.astype(dtype))
    tensors["a_uint8"], tensors["b_uint8"] = ("U8", (ia + 20).astype(np.uint8)), ("U8", (ib + 20).astype(np.uint8))
    tensors["a_bool"], tensors["b_bool"] = ("BOOL", ia > 0), ("BOOL", ib > 5)
    tensors["image"] = ("F32", rng.standard_normal((2, 3, 9, 9)).astype(np.float32))
    tensors["kernel"] = ("F32", rng.standard_normal((4, 3, 3, 3)).astype(np.float32) / 3)
    tensors["rows"] = ("F32", rng.standard_normal((33, 130)).astype(np.float32))
    tensors["weight"] = ("F32", rng.standard_normal((70, 130)).astype(np.float32) / 11)
    save(ROOT / "wasm/tests/inputs.safetensors", tensors)


if __name__ == "__main__":
    main()
