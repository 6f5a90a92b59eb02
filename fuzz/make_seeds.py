"""Writes the seed inputs (seed-*) of the safetensors, npy, mnist, tokenizer, bpe and resume fuzz targets
into fuzz/corpus/<target>/: small valid files laid out as ember writes them (and .npy files as
NumPy's np.save writes them), and the edge cases next to them. The tokenizer seeds take a slice
of the MiniLM vocabulary that scripts/setup downloads into data/minilm/.

Run from the repository root (NumPy from scripts/setup's .venv):
    .venv/bin/python fuzz/make_seeds.py
"""

import gzip
import io
import json
import struct
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def write(target, name, data):
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"seed-{name}").write_bytes(data)


# --- safetensors -------------------------------------------------------------------------------------

SIZES = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def safetensors(tensors, metadata=None):
    """A file as ember::save writes it: "__metadata__" first, the tensors by element size (largest
    first), then by name, the header padded with spaces to a multiple of 8 bytes."""
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))
    order = sorted(tensors, key=lambda name: -SIZES.get(tensors[name][0], 1))
    for name in order:
        dtype, shape, payload = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    every = {}
    for i, dtype in enumerate(SIZES):
        shape = [2, 1] if i % 2 else [3]
        count = int(np.prod(shape))
        payload = bytes((i * 17 + k) % 256 for k in range(count * SIZES[dtype]))
        every[f"t_{dtype.lower()}"] = (dtype, shape, payload)
    every["t_bool"] = ("BOOL", [4], b"\x00\x01\x02\xff")  # bytes other than 0 and 1 read as true
    write("safetensors", "every-dtype.safetensors", safetensors(every, {"format": "pt", "epoch": "3"}))
    write("safetensors", "empty.safetensors", safetensors({}))
    write("safetensors", "metadata-only.safetensors", safetensors({}, {"note": "caf\u00e9 \u4e2d"}))
    write(
        "safetensors",
        "scalar-and-zero-size.safetensors",
        safetensors({"scalar": ("F32", [], b"\x00\x00\x80\x3f"), "none": ("I64", [0, 3], b""), "b": ("U8", [8], bytes(range(8)))}),
    )
    # Valid files ember refuses, or should: an unsupported dtype, a hole, a cut file.
    write("safetensors", "unsupported-dtype.safetensors", safetensors({"u": ("U16", [2], b"\x01\x02\x03\x04")}))
    hole = safetensors({"a": ("U8", [2], b"ab")}).replace(b"[0,2]", b"[1,3]")
    write("safetensors", "hole.safetensors", hole + b"c")
    whole = safetensors({"w": ("F32", [2, 2], bytes(16))})
    write("safetensors", "truncated.safetensors", whole[:-3])


# --- npy -----------------------------------------------------------------------------------------------


def npy(array, version=None, order="C"):
    out = io.BytesIO()
    if version is None:
        np.save(out, np.asarray(array, order=order), allow_pickle=False)
    else:
        np.lib.format.write_array(out, np.asarray(array, order=order), version=version, allow_pickle=False)
    return out.getvalue()


def npy_seeds():
    arange = np.arange(6)
    for dtype in ["<f2", "<f4", "<f8", "|i1", "<i2", "<i4", "<i8", "|u1", "|b1"]:
        write("npy", f"{dtype[1:]}.npy", npy(arange.reshape(2, 3).astype(dtype)))
    write("npy", "big-endian.npy", npy(arange.astype(">i4")))
    write("npy", "fortran.npy", npy(np.arange(24, dtype="<f4").reshape(2, 3, 4), order="F"))
    write("npy", "scalar.npy", npy(np.float64(2.5)))
    write("npy", "zero-size.npy", npy(np.zeros((0, 3), dtype="<i2")))
    write("npy", "version-2.npy", npy(arange.astype("<i2"), version=(2, 0)))
    write("npy", "version-3.npy", npy(arange.astype("|u1"), version=(3, 0)))
    # Valid NumPy files ember refuses: complex numbers, strings, a structured dtype.
    write("npy", "complex.npy", npy(np.zeros(2, dtype="<c8")))
    write("npy", "unicode.npy", npy(np.array(["ab", "c"])))
    write("npy", "structured.npy", npy(np.zeros(2, dtype=[("x", "<f4"), ("y", "<i2")])))


# --- mnist ---------------------------------------------------------------------------------------------


def gz(data):
    return gzip.compress(data, mtime=0)


def idx(dims, data):
    return struct.pack(">I", 0x800 | len(dims)) + b"".join(struct.pack(">I", d) for d in dims) + bytes(data)


def csv_rows(labels):
    return "".join(",".join(str((r * 31 + i) % 256) for i in range(784)) + f",{label}\n" for r, label in enumerate(labels)).encode()


def mnist_seeds():
    images = idx([1, 28, 28], [(i * 7) % 256 for i in range(784)])
    labels = idx([3], [4, 0, 9])
    write("mnist", "images-idx3-ubyte", images)
    write("mnist", "labels-idx1-ubyte", labels)
    write("mnist", "images-idx3-ubyte.gz", gz(images))
    write("mnist", "labels-idx1-ubyte.gz", gz(labels))
    rows = csv_rows(range(10))
    write("mnist", "digits.csv.gz", gz(rows))
    write("mnist", "crlf.csv", csv_rows([7]).replace(b"\n", b"\r\n") + b"\n")
    # Two gzip members, one after the other (as `cat a.gz b.gz` makes), then bytes that are not gzip.
    write("mnist", "two-members.csv.gz", gz(csv_rows([1])) + gz(csv_rows([2])) + b"\x00\x00")
    write("mnist", "truncated.csv.gz", gz(rows)[:200])
    write("mnist", "images-wrong-size-idx3-ubyte", idx([1, 27, 28], [1] * (27 * 28)))


# --- tokenizer -----------------------------------------------------------------------------------------


def tokenizer_seeds():
    vocab = (ROOT / "data" / "minilm" / "vocab.txt").read_text(encoding="utf-8").split("\n")
    config = (ROOT / "data" / "minilm" / "tokenizer_config.json").read_bytes()
    # [PAD], [UNK], [CLS], [SEP], [MASK], some punctuation, and the pieces of the texts below.
    words = ["!", ",", ".", "the", "hello", "world", "token", "##izer", "cr", "##eme", "br", "##ule", "##e", "中", "##ing"]
    slice_ = [vocab[0]] + vocab[100:104] + [w for w in words if w in vocab]
    vocab_text = "\n".join(slice_) + "\n"
    texts = {
        "uncased": "Hello, world! The tokenizer: Cr\u00e8me br\u00fbl\u00e9e.",
        "cjk": "hello\u4e2d\u6587 [CLS] world[SEP]\u3000the",
        "controls": "a\u0000b\tc\u200bd\ufffd\u0130stanbul \U0001F600",
    }
    for name, text in texts.items():
        write("tokenizer", f"{name}.txt", vocab_text.encode() + b"\x00" + text.encode() + b"\x00" + config)
    cased = json.dumps({"do_lower_case": False, "strip_accents": False, "model_max_length": 1e30,
                        "unk_token": {"content": "[UNK]", "lstrip": False}, "tokenize_chinese_chars": False})
    write("tokenizer", "cased.txt", vocab_text.replace("\n", "\r\n").encode() + b"\x00" + texts["uncased"].encode() + b"\x00" + cased.encode())
    write("tokenizer", "no-config.txt", vocab_text.encode() + b"\x00" + b"tokenizer world")
    write("tokenizer", "vocab-only.txt", vocab_text.encode())
    write("tokenizer", "not-utf8.txt", vocab_text.encode() + b"\x00" + b"hello \xc3\x28 world")


# --- resume --------------------------------------------------------------------------------------------


def number(v):
    return "%.17g" % v


def resume_seeds():
    """Checkpoints of `ember train mnist|gpt|ssm|diffusion` at their default settings (those
    fuzz/resume.cpp checks against), without their tensors."""
    gpt_shared = {"layers": "4", "dim": "192", "context": "128", "vocabulary": "0a6162", "lr": number(1e-3),
                  "warmup": "100", "steps": "1800", "batch_size": "16", "seed": "1337", "steps_done": "900",
                  "batch_state": "12297829382473034410"}
    runs = {
        "mnist": {"task": "mnist", "model": "cnn", "optimizer": "adam", "lr": number(3e-3), "batch_size": "64",
                  "shift": "2", "schedule": "cosine", "epochs": "10", "seed": "0", "epochs_done": "3"},
        "gpt": dict(gpt_shared, task="gpt", heads="4", dropout=number(0.0)),
        "ssm": dict(gpt_shared, task="ssm", state="16", expand="2", conv="4"),
        "diffusion": {"task": "diffusion", "channels": "32", "multipliers": "1,2,2", "groups": "8", "classes": "10",
                      "image_size": "28", "timesteps": "1000", "schedule": "cosine", "steps": "1700",
                      "batch_size": "64", "lr": number(1e-3), "warmup": "200", "drop_class": number(0.1),
                      "ema": number(0.999), "seed": "0", "steps_done": "500"},
    }
    for name, metadata in runs.items():
        write("resume", f"{name}.safetensors", safetensors({"model.w": ("F32", [2], bytes(8))}, metadata))
    write("resume", "mnist-amp.safetensors", safetensors({}, dict(runs["mnist"], amp="bf16", epochs_done="10")))
    write("resume", "gpt-done-past-steps.safetensors", safetensors({}, dict(runs["gpt"], steps_done="1801")))


# --- bpe ---------------------------------------------------------------------------------------------

def byte_alphabet():
    """GPT-2's printable stand-ins for the 256 bytes, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def bpe_seeds():
    """A byte-level vocabulary (the 256 bytes, a few merges and ChatML's control tokens) with texts
    that reach the special tokens, digits, contractions, whitespace runs and multi-byte characters."""
    alphabet = byte_alphabet()
    merges = ["\u0120 t", "h e", "\u0120t he", "i n", "\u0120 w", "o r", "\u0120w or", "l d", "\u0120wor ld"]
    merges = [m.encode().decode("unicode_escape") for m in merges]
    tokens = alphabet + ["<|im_start|>", "<|im_end|>"] + [m.replace(" ", "") for m in merges]
    vocab = "\n".join(tokens).encode()
    merge_text = "\n".join(merges).encode()
    texts = {
        "chat": "<|im_start|>user\nHello the world<|im_end|>\n",
        "digits": "In 2024, 3.14159 and  12 \t\t42",
        "contractions": "don't I'M we'll they'd O'Neil's",
        "unicode": "caf\u00e9 \u65e5\u672c\u8a9e \U0001F44B\U0001F3FD  \u00a0end\n\n",
    }
    for name, text in texts.items():
        for pre in ["smollm", "gpt2", "llama-bpe"]:
            write("bpe", f"{name}-{pre}.txt", vocab + b"\x00" + merge_text + b"\x00" + text.encode() + b"\x00" + pre.encode())
    write("bpe", "bad-merge.txt", vocab + b"\x00" + b"a b c\n" + b"\x00" + b"abc")
    write("bpe", "not-utf8.txt", vocab + b"\x00" + merge_text + b"\x00" + b"the \xc3\x28 world")


if __name__ == "__main__":
    safetensors_seeds()
    npy_seeds()
    mnist_seeds()
    tokenizer_seeds()
    bpe_seeds()
    resume_seeds()
