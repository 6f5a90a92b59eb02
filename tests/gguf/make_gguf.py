"""Reference GGUF files for ember's GGUF reader and writer (tests/test_gguf.cpp).

Every file is written by the `gguf` Python package's GGUFWriter (the package llama.cpp's converters
use), next to a JSON sidecar saying what it holds, so that the C++ test can both check what ember
reads and rebuild the same metadata and tensors, write them with ember::gguf::save and compare the
bytes:

  mixed.gguf     metadata of every value type (arrays of every type, arrays of strings, nested
                 arrays, unicode and empty strings) and tensors in F32, F16, BF16, Q8_0, Q4_0 and Q4_1
  aligned.gguf   general.alignment = 64 (add_custom_alignment), tensors in I8, I16, I32, I64, F64,
                 a 0-dim F32, an empty F32, a 4-D F16 and a Q4_0 of one block
  empty.gguf     no metadata (an empty architecture is not written) and no tensors

and a few seeds for the fuzzer in fuzz/corpus/gguf/ (see fuzz_seeds).

Sidecar (<name>.json):
  {"metadata": [{"key": k, "type": "uint8" | ... | "array", "value": v,
                 "element_type": t (arrays only; their "value" is a list of such typed objects)}],
   "tensors": [{"name": n, "ggml_type": "Q8_0", "shape": [ember's shape: GGUF's ne reversed],
                "source": the values given to the writer or the quantizer (flat, row-major),
                "dequantized": gguf.quants.dequantize of the stored bytes (float32, flat),
                "hex": the stored bytes}]}
Float32 values are written as the float64 that equals them, so they parse back exactly.

Run from the repository root (seeded: a re-run writes the same bytes):
    .venv/bin/python tests/gguf/make_gguf.py
"""

import json
import math
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

OUT = Path(__file__).resolve().parent.parent / "data" / "gguf"
FUZZ = Path(__file__).resolve().parent.parent.parent / "fuzz" / "corpus" / "gguf"

SCALAR_NAMES = {
    V.UINT8: "uint8", V.INT8: "int8", V.UINT16: "uint16", V.INT16: "int16", V.UINT32: "uint32",
    V.INT32: "int32", V.FLOAT32: "float32", V.BOOL: "bool", V.STRING: "string", V.ARRAY: "array",
    V.UINT64: "uint64", V.INT64: "int64", V.FLOAT64: "float64",
}


def typed(value, vtype, sub_type=None):
    """The sidecar's form of a value as GGUFWriter._pack_val writes it (types inferred as it does)."""
    if vtype == V.ARRAY:
        item_type = sub_type if sub_type is not None else V.get_type(value[0])
        return {"type": "array", "element_type": SCALAR_NAMES[item_type],
                "value": [typed(item, item_type) for item in value]}
    if vtype == V.FLOAT32:
        value = float(np.float32(value))
    return {"type": SCALAR_NAMES[vtype], "value": value}


class Writer:
    """GGUFWriter plus the sidecar."""

    def __init__(self, name, arch):
        self.name = name
        self.writer = gguf.GGUFWriter(OUT / f"{name}.gguf", arch)
        self.metadata = [{"key": "general.architecture", **typed(arch, V.STRING)}] if arch else []
        self.tensors = []

    def kv(self, key, value, vtype, sub_type=None):
        self.writer.add_key_value(key, value, vtype, sub_type=sub_type)
        self.metadata.append({"key": key, **typed(value, vtype, sub_type)})

    def alignment(self, alignment):
        self.writer.add_custom_alignment(alignment)
        self.metadata.append({"key": "general.alignment", **typed(alignment, V.UINT32)})

    def tensor(self, name, source, qtype):
        """Stores `source` (a NumPy array) as GGML type `qtype`."""
        source = np.asarray(source)
        if qtype in (Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1):
            stored = gguf.quants.quantize(source.astype(np.float32), qtype)  # uint8 bytes
            self.writer.add_tensor(name, stored, raw_dtype=qtype)
            dequantized = gguf.quants.dequantize(stored, qtype)
        else:
            stored = source
            self.writer.add_tensor(name, stored)
            dequantized = source.astype(np.float32) if source.dtype.kind == "f" else None
        entry = {"name": name, "ggml_type": qtype.name, "shape": list(source.shape),
                 "source": source.ravel().tolist(), "hex": stored.tobytes().hex()}
        if dequantized is not None:
            entry["dequantized"] = [float(x) for x in np.asarray(dequantized, dtype=np.float32).ravel()]
        self.tensors.append(entry)

    def close(self):
        self.writer.write_header_to_file()
        self.writer.write_kv_data_to_file()
        self.writer.write_tensors_to_file()
        self.writer.close()
        # One line per entry: readable, and small.
        def lines(entries):
            return ",\n".join("  " + json.dumps(e, ensure_ascii=False) for e in entries)
        text = f'{{\n "metadata": [\n{lines(self.metadata)}\n ],\n "tensors": [\n{lines(self.tensors)}\n ]\n}}\n'
        json.loads(text)
        (OUT / f"{self.name}.json").write_text(text)


def mixed(rng):
    w = Writer("mixed", "ember-test")
    w.kv("test.uint8", 200, V.UINT8)
    w.kv("test.int8", -100, V.INT8)
    w.kv("test.uint16", 65000, V.UINT16)
    w.kv("test.int16", -32000, V.INT16)
    w.kv("test.uint32", 4_000_000_000, V.UINT32)
    w.kv("test.int32", -2_000_000_000, V.INT32)
    w.kv("test.float32", 0.1, V.FLOAT32)
    w.kv("test.float32_negative_zero", -0.0, V.FLOAT32)
    w.kv("test.bool_true", True, V.BOOL)
    w.kv("test.bool_false", False, V.BOOL)
    w.kv("test.string", "héllo wörld, 日本語 🦙", V.STRING)
    w.kv("test.string_empty", "", V.STRING)
    w.kv("test.uint64", 2**64 - 1, V.UINT64)
    w.kv("test.int64", -(2**63), V.INT64)
    w.kv("test.float64", math.pi, V.FLOAT64)
    w.kv("test.array.uint8", [0, 1, 255], V.ARRAY, V.UINT8)
    w.kv("test.array.int8", [-128, 0, 127], V.ARRAY, V.INT8)
    w.kv("test.array.uint16", [0, 65535], V.ARRAY, V.UINT16)
    w.kv("test.array.int16", [-32768, 32767], V.ARRAY, V.INT16)
    w.kv("test.array.uint32", [0, 2**32 - 1], V.ARRAY, V.UINT32)
    w.kv("test.array.int32", [1, -2, 3], V.ARRAY)  # inferred: int32
    w.kv("test.array.float32", [0.5, -1.25, 3.0e38], V.ARRAY)  # inferred: float32
    w.kv("test.array.bool", [True, False, True], V.ARRAY)  # inferred: bool
    w.kv("test.array.string", ["a", "ünïcödé", "", "🦙 llama"], V.ARRAY)  # inferred: string
    w.kv("test.array.uint64", [2**64 - 1, 0], V.ARRAY, V.UINT64)
    w.kv("test.array.int64", [-(2**63), 2**63 - 1], V.ARRAY, V.INT64)
    w.kv("test.array.float64", [math.e, -1e-300], V.ARRAY, V.FLOAT64)
    w.kv("test.array.nested", [[1, 2], [3], [4, 5, 6]], V.ARRAY)  # arrays of int32
    w.kv("test.array.nested_strings", [["a", "b"], ["ć"]], V.ARRAY)
    w.kv("test.array.nested_deeper", [[[1.5]], [[2.5, 3.5], [4.5]]], V.ARRAY)
    w.kv("tokenizer.ggml.tokens", [f"<tok{i}>" for i in range(40)], V.ARRAY)

    w.tensor("f32.weight", rng.standard_normal((3, 5)).astype(np.float32), Q.F32)
    w.tensor("f16.weight", (np.arange(12, dtype=np.float32) * 0.25 - 1.5).reshape(2, 6).astype(np.float16), Q.F16)
    w.tensor("bf16.weight", ((np.arange(12) % 64 - 32) * 0.5).astype(np.float32).reshape(4, 3), Q.BF16)
    w.tensor("blk.0.q8_0.weight", (rng.standard_normal((3, 64)) * 2).astype(np.float32), Q.Q8_0)
    w.tensor("blk.0.q4_0.weight", (rng.standard_normal((2, 96)) * 2).astype(np.float32), Q.Q4_0)
    w.tensor("blk.1.q8_0.weight", (rng.standard_normal((2, 2, 32))).astype(np.float32), Q.Q8_0)
    # Its own generator, so the tensors above and the other files keep their values.
    w.tensor("blk.1.q4_1.weight", (np.random.default_rng(41).standard_normal((2, 64)) - 1).astype(np.float32), Q.Q4_1)
    w.close()


def aligned(rng):
    w = Writer("aligned", "ember-aligned")
    w.alignment(64)
    w.kv("test.note", "alignment 64", V.STRING)
    w.tensor("i8", np.array([[-128, 0, 127], [1, -1, 5]], dtype=np.int8), Q.I8)
    w.tensor("i16", np.array([-32768, 1, 2, 3, 32767], dtype=np.int16), Q.I16)
    w.tensor("i32", np.arange(-4, 4, dtype=np.int32).reshape(2, 2, 2), Q.I32)
    w.tensor("i64", np.array([-(2**63), 0, 2**63 - 1], dtype=np.int64), Q.I64)
    w.tensor("f64", rng.standard_normal((2, 2)), Q.F64)
    w.tensor("scalar", np.array(2.5, dtype=np.float32), Q.F32)
    w.tensor("empty", np.zeros((0, 4), dtype=np.float32), Q.F32)
    w.tensor("f16_4d", (np.arange(6, dtype=np.float32) - 2).reshape(1, 2, 1, 3).astype(np.float16), Q.F16)
    w.tensor("q4_0", (rng.standard_normal((1, 32))).astype(np.float32), Q.Q4_0)
    w.close()


def empty():
    Writer("empty", "").close()


def fuzz_seeds(rng):
    """Seeds for fuzz/gguf.cpp beside the files above (scripts/fuzz replays those too): files cut
    short in the header and in the data, version 2, and arrays nested 16 deep (the most ember reads)."""
    FUZZ.mkdir(parents=True, exist_ok=True)
    mixed_bytes = (OUT / "mixed.gguf").read_bytes()
    (FUZZ / "seed-truncated-header.gguf").write_bytes(mixed_bytes[:300])
    (FUZZ / "seed-truncated-data.gguf").write_bytes(mixed_bytes[:-100])
    aligned_bytes = bytearray((OUT / "aligned.gguf").read_bytes())
    aligned_bytes[4] = 2  # the version: 2 has version 3's layout
    (FUZZ / "seed-version-2.gguf").write_bytes(bytes(aligned_bytes))

    w = gguf.GGUFWriter(FUZZ / "seed-nested.gguf", "nested")
    deep = [1]
    for _ in range(15):
        deep = [deep]
    w.add_key_value("deep", deep, V.ARRAY)
    w.add_key_value("strings", [["a", "bc"], ["", "d"]], V.ARRAY)
    w.add_key_value("flag", True, V.BOOL)
    w.add_tensor("q8", gguf.quants.quantize(rng.standard_normal((2, 32)).astype(np.float32), Q.Q8_0), raw_dtype=Q.Q8_0)
    w.add_tensor("empty", np.zeros((0,), dtype=np.float32))
    w.add_tensor("i16", np.arange(3, dtype=np.int16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20240611)
    mixed(rng)
    aligned(rng)
    empty()
    fuzz_seeds(rng)
    root = OUT.parent.parent.parent
    for path in sorted([*OUT.iterdir(), *FUZZ.iterdir()]):
        print(f"{path.relative_to(root)}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
