"""Shape and indexing reference data: cat, stack, split, chunk, repeat, tile, flip, roll, pad,
index_select, gather, scatter_add, one_hot and embedding, over every dtype torch supports for them,
with contiguous, transposed, strided and broadcast inputs (index tensors included), negative dims,
empty and single-element tensors, and the inputs PyTorch rejects."""
import numpy as np
import torch
import torch.nn.functional as F

from golden_lib import ALL_DTYPES, Recorder, Tensor, layouts, make

INDEX_DTYPES = ["int64", "int32"]


def view_name(t):
    return t.view if isinstance(t.view, str) else "expand"


def index_layouts(shape, high, rng, dtype="int64"):
    """Index tensors of `shape` with values in [0, high), in the four layouts of golden_lib.layouts."""
    torch_dtype = {"int64": torch.int64, "int32": torch.int32}[dtype]

    def values(s):
        return torch.from_numpy(rng.integers(0, high, size=s)).to(torch_dtype)

    shape = list(shape)
    out = [Tensor(values(shape))]
    if len(shape) >= 2:
        out.append(Tensor(values(shape[:-2] + [shape[-1], shape[-2]]), "t"))
    if len(shape) >= 1:
        out.append(Tensor(values([shape[0] * 2] + shape[1:]), "step2"))
        out.append(Tensor(values([1] + shape[1:]), {"expand": shape}))
    return out


def index(values, dtype="int64"):
    return Tensor(torch.tensor(values, dtype={"int64": torch.int64, "int32": torch.int32, "int16": torch.int16,
                                              "float32": torch.float32}[dtype]))


def cat_cases(r, rng):
    cat = lambda ts, dim: torch.cat(ts, dim)  # noqa: E731
    for dtype in ALL_DTYPES:
        for x in layouts([3, 4], dtype, rng):
            v = view_name(x)
            r.case("cat", f"{dtype}/{v}/dim0", cat, [[x, Tensor(make([2, 4], dtype, rng))]], {"dim": 0})
            r.case("cat", f"{dtype}/{v}/dim-1", cat, [[Tensor(make([3, 1], dtype, rng)), x]], {"dim": -1})
        r.case("cat", f"{dtype}/three/dim1", cat,
               [[Tensor(make([2, 2, 3], dtype, rng)), Tensor(make([2, 1, 3], dtype, rng)),
                 Tensor(make([2, 4, 3], dtype, rng))]], {"dim": 1})
    for a, b in [("int32", "float32"), ("uint8", "int8"), ("float16", "bfloat16"), ("bool", "int64"),
                 ("float64", "float32"), ("int64", "float16"), ("bool", "uint8"), ("int16", "int32")]:
        r.case("cat", f"{a}+{b}", cat, [[Tensor(make([2, 3], a, rng)), Tensor(make([1, 3], b, rng))]], {"dim": 0})
    r.case("cat", "int8+int64+float64", cat,
           [[Tensor(make([2], "int8", rng)), Tensor(make([3], "int64", rng)), Tensor(make([1], "float64", rng))]],
           {"dim": 0})
    r.case("cat", "single", cat, [[Tensor(make([2, 3], "float32", rng), "t")]], {"dim": 1})
    r.case("cat", "zero-size part", cat, [[Tensor(make([0, 3], "float32", rng)), Tensor(make([2, 3], "float32", rng))]],
           {"dim": 0})
    r.case("cat", "all zero-size", cat, [[Tensor(make([2, 0], "float32", rng)), Tensor(make([2, 0], "float32", rng))]],
           {"dim": 1})
    # Legacy empty 1-D tensors are skipped (but still take part in promotion).
    r.case("cat", "legacy empty skipped", cat,
           [[Tensor(torch.empty(0)), Tensor(make([2, 3], "float32", rng)), Tensor(torch.empty(0))]], {"dim": 1})
    r.case("cat", "legacy empty promotes", cat,
           [[Tensor(torch.empty(0, dtype=torch.float64)), Tensor(make([2, 3], "int32", rng))]], {"dim": -1})
    r.case("cat", "legacy empty only", cat, [[Tensor(torch.empty(0)), Tensor(torch.empty(0, dtype=torch.int64))]],
           {"dim": 0})
    r.case("cat", "legacy dim out of range", cat, [[Tensor(torch.empty(0)), Tensor(make([2, 3], "float32", rng))]],
           {"dim": 2})
    r.case("cat", "empty list", cat, [[]], {"dim": 0})
    r.case("cat", "0-dim", cat, [[Tensor(torch.tensor(1.0)), Tensor(torch.tensor(2.0))]], {"dim": 0})
    r.case("cat", "ndim mismatch", cat, [[Tensor(make([2, 3], "float32", rng)), Tensor(make([2, 3, 1], "float32", rng))]],
           {"dim": 0})
    r.case("cat", "size mismatch", cat, [[Tensor(make([2, 3], "float32", rng)), Tensor(make([2, 4], "float32", rng))]],
           {"dim": 0})
    r.case("cat", "dim out of range", cat, [[Tensor(make([2, 3], "float32", rng))]], {"dim": 2})
    r.case("cat", "dim too negative", cat, [[Tensor(make([2, 3], "float32", rng))]], {"dim": -3})


def stack_cases(r, rng):
    stack = lambda ts, dim: torch.stack(ts, dim)  # noqa: E731
    for dtype in ALL_DTYPES:
        for x in layouts([3, 4], dtype, rng):
            v = view_name(x)
            for dim in ([0, 1, 2, -1] if dtype == "float32" else [0, -1]):
                r.case("stack", f"{dtype}/{v}/dim{dim}", stack, [[x, Tensor(make([3, 4], dtype, rng))]], {"dim": dim})
    r.case("stack", "three 1-D", stack, [[Tensor(make([4], "int64", rng)) for _ in range(3)]], {"dim": 0})
    r.case("stack", "0-dim", stack, [[Tensor(torch.tensor(1.5)), Tensor(torch.tensor(2))]], {"dim": 0})
    r.case("stack", "promote", stack, [[Tensor(make([2], "uint8", rng)), Tensor(make([2], "int8", rng))]], {"dim": 1})
    r.case("stack", "empty tensors", stack, [[Tensor(torch.empty(0)), Tensor(torch.empty(0))]], {"dim": 1})
    r.case("stack", "zero-size", stack, [[Tensor(make([2, 0], "float32", rng))] * 2], {"dim": -1})
    r.case("stack", "empty list", stack, [[]], {"dim": 0})
    r.case("stack", "shape mismatch", stack,
           [[Tensor(make([2, 3], "float32", rng)), Tensor(make([2, 4], "float32", rng))]], {"dim": 0})
    r.case("stack", "dim out of range", stack, [[Tensor(make([2, 3], "float32", rng))] * 2], {"dim": 3})
    r.case("stack", "dim too negative", stack, [[Tensor(make([2, 3], "float32", rng))] * 2], {"dim": -4})


def split_cases(r, rng):
    split = lambda t, split, dim: torch.split(t, split, dim)  # noqa: E731
    chunk = lambda t, chunks, dim: torch.chunk(t, chunks, dim)  # noqa: E731
    for dtype in ALL_DTYPES:
        for x in layouts([5, 4], dtype, rng):
            v = view_name(x)
            r.case("split", f"{dtype}/{v}/size2/dim0", split, [x], {"split": 2, "dim": 0})
            r.case("split", f"{dtype}/{v}/sizes/dim-1", split, [x], {"split": [1, 0, 3], "dim": -1})
            r.case("chunk", f"{dtype}/{v}/3/dim0", chunk, [x], {"chunks": 3, "dim": 0})
            r.case("chunk", f"{dtype}/{v}/2/dim-1", chunk, [x], {"chunks": 2, "dim": -1})
    x = Tensor(make([6, 3], "float32", rng))
    r.case("split", "size larger than dim", split, [x], {"split": 10, "dim": 0})
    r.case("split", "size divides", split, [x], {"split": 3, "dim": 0})
    r.case("split", "size 1", split, [x], {"split": 1, "dim": 1})
    r.case("split", "zero-size dim", split, [Tensor(torch.zeros(0, 3))], {"split": 2, "dim": 0})
    r.case("split", "size 0 on zero-size dim", split, [Tensor(torch.zeros(0, 3))], {"split": 0, "dim": 0})
    r.case("split", "sizes on zero-size dim", split, [Tensor(torch.zeros(0, 3))], {"split": [0, 0], "dim": 0})
    r.case("split", "empty sizes on zero-size dim", split, [Tensor(torch.zeros(0, 3))], {"split": [], "dim": 0})
    r.case("split", "negative size", split, [x], {"split": -1, "dim": 0})
    r.case("split", "size 0", split, [x], {"split": 0, "dim": 0})
    r.case("split", "sizes do not sum", split, [x], {"split": [2, 2], "dim": 0})
    r.case("split", "sizes too large", split, [x], {"split": [4, 4], "dim": 0})
    r.case("split", "negative sizes", split, [x], {"split": [7, -1], "dim": 0})
    r.case("split", "0-dim", split, [Tensor(torch.tensor(1.0))], {"split": 1, "dim": 0})
    r.case("split", "dim out of range", split, [x], {"split": 1, "dim": 2})
    r.case("chunk", "more chunks than size", chunk, [x], {"chunks": 5, "dim": 1})
    r.case("chunk", "6 into 4", chunk, [Tensor(make([6], "int64", rng))], {"chunks": 4, "dim": 0})
    r.case("chunk", "one chunk", chunk, [x], {"chunks": 1, "dim": 0})
    r.case("chunk", "zero-size dim", chunk, [Tensor(torch.zeros(0, 3))], {"chunks": 3, "dim": 0})
    r.case("chunk", "zero chunks", chunk, [x], {"chunks": 0, "dim": 0})
    r.case("chunk", "negative chunks", chunk, [x], {"chunks": -2, "dim": 0})
    r.case("chunk", "0-dim", chunk, [Tensor(torch.tensor(1.0))], {"chunks": 1, "dim": 0})
    r.case("chunk", "dim out of range", chunk, [x], {"chunks": 2, "dim": -3})


def repeat_cases(r, rng):
    repeat = lambda t, repeats: t.repeat(repeats)  # noqa: E731
    tile = lambda t, reps: torch.tile(t, tuple(reps))  # noqa: E731
    for dtype in ALL_DTYPES:
        for x in layouts([2, 3], dtype, rng):
            v = view_name(x)
            r.case("repeat", f"{dtype}/{v}/2x3", repeat, [x], {"repeats": [2, 3]})
            r.case("repeat", f"{dtype}/{v}/more dims", repeat, [x], {"repeats": [2, 1, 2]})
            r.case("tile", f"{dtype}/{v}/fewer reps", tile, [x], {"reps": [3]})
            r.case("tile", f"{dtype}/{v}/more reps", tile, [x], {"reps": [2, 2, 1]})
    x = Tensor(make([2, 3], "float32", rng))
    r.case("repeat", "ones", repeat, [x], {"repeats": [1, 1]})
    r.case("repeat", "zero", repeat, [x], {"repeats": [0, 2]})
    r.case("repeat", "size-1 dims", repeat, [Tensor(make([1, 3, 1], "float32", rng))], {"repeats": [4, 2, 3]})
    r.case("repeat", "0-dim", repeat, [Tensor(torch.tensor(2.5))], {"repeats": [2, 3]})
    r.case("repeat", "0-dim no repeats", repeat, [Tensor(torch.tensor(2.5))], {"repeats": []})
    r.case("repeat", "zero-size input", repeat, [Tensor(torch.zeros(0, 2))], {"repeats": [3, 2]})
    # Four dims that all need splitting: 4 + 4 interleaved dims reach kMaxDims exactly; five exceed it.
    r.case("repeat", "4-D all repeated", repeat, [Tensor(make([2, 3, 2, 2], "float32", rng))],
           {"repeats": [2, 2, 3, 2]})
    r.case("repeat", "5-D all repeated", repeat, [Tensor(make([2, 2, 3, 2, 2], "int32", rng))],
           {"repeats": [2, 3, 2, 2, 3]})
    r.case("repeat", "fewer repeats than dims", repeat, [x], {"repeats": [2]})
    r.case("repeat", "negative", repeat, [x], {"repeats": [2, -1]})
    r.case("tile", "empty reps", tile, [x], {"reps": []})
    r.case("tile", "0-dim", tile, [Tensor(torch.tensor(True))], {"reps": [3]})
    r.case("tile", "negative", tile, [x], {"reps": [-1]})


def flip_roll_cases(r, rng):
    flip = lambda t, dims: torch.flip(t, dims)  # noqa: E731
    roll = lambda t, shifts, dims: torch.roll(t, shifts, dims)  # noqa: E731
    for dtype in ALL_DTYPES:
        for x in layouts([3, 4], dtype, rng):
            v = view_name(x)
            r.case("flip", f"{dtype}/{v}/dim0", flip, [x], {"dims": [0]})
            r.case("flip", f"{dtype}/{v}/both", flip, [x], {"dims": [-1, 0]})
            r.case("roll", f"{dtype}/{v}/dim1", roll, [x], {"shifts": [1], "dims": [1]})
            r.case("roll", f"{dtype}/{v}/both", roll, [x], {"shifts": [-1, 2], "dims": [0, -1]})
            r.case("roll", f"{dtype}/{v}/flat", roll, [x], {"shifts": [5], "dims": []})
    x = Tensor(make([2, 3, 4], "float32", rng))
    r.case("flip", "3-D middle", flip, [x], {"dims": [1]})
    r.case("flip", "3-D all", flip, [x], {"dims": [0, 1, 2]})
    r.case("flip", "no dims", flip, [x], {"dims": []})
    r.case("flip", "0-dim", flip, [Tensor(torch.tensor(3.0))], {"dims": [0]})
    r.case("flip", "zero-size", flip, [Tensor(torch.zeros(0, 3))], {"dims": [0, 1]})
    r.case("flip", "long row", flip, [Tensor(make([1037], "float32", rng))], {"dims": [0]})
    r.case("flip", "repeated dim", flip, [x], {"dims": [0, -3]})
    r.case("flip", "dim out of range", flip, [x], {"dims": [3]})
    r.case("roll", "shift larger than size", roll, [x], {"shifts": [7], "dims": [2]})
    r.case("roll", "negative shift larger than size", roll, [x], {"shifts": [-11], "dims": [1]})
    r.case("roll", "zero shift", roll, [x], {"shifts": [0], "dims": [0]})
    r.case("roll", "same dim twice", roll, [x], {"shifts": [1, 2], "dims": [2, 2]})
    r.case("roll", "three dims", roll, [x], {"shifts": [1, -1, 3], "dims": [0, 1, 2]})
    r.case("roll", "flat 3-D", roll, [x], {"shifts": [-5], "dims": []})
    r.case("roll", "0-dim flat", roll, [Tensor(torch.tensor(3.0))], {"shifts": [1], "dims": []})
    r.case("roll", "zero-size", roll, [Tensor(torch.zeros(0, 3))], {"shifts": [1], "dims": [0]})
    r.case("roll", "zero-size flat", roll, [Tensor(torch.zeros(0, 3))], {"shifts": [2], "dims": []})
    r.case("roll", "0-dim with dim", roll, [Tensor(torch.tensor(3.0))], {"shifts": [1], "dims": [0]})
    r.case("roll", "two shifts no dims", roll, [x], {"shifts": [1, 2], "dims": []})
    r.case("roll", "shifts and dims differ", roll, [x], {"shifts": [1, 2], "dims": [0]})
    r.case("roll", "no shifts", roll, [x], {"shifts": [], "dims": []})
    r.case("roll", "dim out of range", roll, [x], {"shifts": [1], "dims": [3]})


def pad_cases(r, rng):
    # JSON has no inf or nan: such values are written as the strings "inf", "-inf", "nan".
    pad = lambda t, pads, value: F.pad(t, pads, value=float(value) if isinstance(value, str) else value)  # noqa: E731
    for dtype in ALL_DTYPES:
        value = True if dtype == "bool" else 2
        for x in layouts([3, 4], dtype, rng):
            v = view_name(x)
            r.case("pad", f"{dtype}/{v}/last", pad, [x], {"pads": [1, 2], "value": value})
            r.case("pad", f"{dtype}/{v}/both dims", pad, [x], {"pads": [0, 1, 2, 1], "value": 0})
            r.case("pad", f"{dtype}/{v}/crop", pad, [x], {"pads": [-1, 2, 1, -2], "value": value})
    x = Tensor(make([2, 3, 4], "float32", rng))
    r.case("pad", "float value", pad, [x], {"pads": [1, 1, 1, 1, 1, 1], "value": -1.5})
    r.case("pad", "inf value", pad, [x], {"pads": [1, 0], "value": "inf"})
    r.case("pad", "nan value", pad, [x], {"pads": [0, 1], "value": "nan"})
    r.case("pad", "middle dim only", pad, [x], {"pads": [0, 0, 2, 0], "value": 1})
    r.case("pad", "empty pads", pad, [x], {"pads": [], "value": 0})
    r.case("pad", "zeros", pad, [x], {"pads": [0, 0, 0, 0], "value": 7})
    r.case("pad", "crop to nothing", pad, [x], {"pads": [-2, -2], "value": 0})
    r.case("pad", "crop all and pad", pad, [Tensor(make([3], "float32", rng))], {"pads": [-3, 2], "value": 5})
    r.case("pad", "zero-size input", pad, [Tensor(torch.zeros(0, 3))], {"pads": [1, 1, 1, 0], "value": 4})
    r.case("pad", "0-dim", pad, [Tensor(torch.tensor(2.0))], {"pads": [], "value": 0})
    r.case("pad", "int truncates float value", pad, [Tensor(make([3], "int32", rng))], {"pads": [1, 1], "value": -1.7})
    r.case("pad", "int8 max edge", pad, [Tensor(make([3], "int8", rng))], {"pads": [1, 1], "value": 127.5})
    r.case("pad", "bool from int", pad, [Tensor(make([3], "bool", rng))], {"pads": [1, 1], "value": -3})
    r.case("pad", "float16 max", pad, [Tensor(make([3], "float16", rng))], {"pads": [1, 0], "value": 65504.0})
    r.case("pad", "odd length", pad, [x], {"pads": [1], "value": 0})
    r.case("pad", "too long", pad, [x], {"pads": [1, 1, 1, 1, 1, 1, 1, 1], "value": 0})
    r.case("pad", "negative size", pad, [x], {"pads": [-3, -2], "value": 0})
    r.case("pad", "crop more than size", pad, [Tensor(make([3], "float32", rng))], {"pads": [-4, 2], "value": 0})
    r.case("pad", "uint8 negative value", pad, [Tensor(make([3], "uint8", rng))], {"pads": [1, 1], "value": -1})
    r.case("pad", "int8 overflow", pad, [Tensor(make([3], "int8", rng))], {"pads": [1, 1], "value": 128})
    r.case("pad", "int nan", pad, [Tensor(make([3], "int64", rng))], {"pads": [1, 1], "value": "nan"})
    r.case("pad", "float16 overflow", pad, [Tensor(make([3], "float16", rng))], {"pads": [1, 1], "value": 65505.0})
    r.case("pad", "float32 overflow", pad, [Tensor(make([3], "float32", rng))], {"pads": [1, 1], "value": 1e300})


def index_select_cases(r, rng):
    index_select = lambda t, i, dim: torch.index_select(t, dim, i)  # noqa: E731
    for dtype in ALL_DTYPES:
        for x in layouts([3, 4], dtype, rng):
            v = view_name(x)
            r.case("index_select", f"{dtype}/{v}/dim0", index_select, [x, index([2, 0, 2, 1])], {"dim": 0})
            r.case("index_select", f"{dtype}/{v}/dim-1", index_select, [x, index([3, 1], "int32")], {"dim": -1})
    x = Tensor(make([3, 4, 5], "float32", rng))
    for idx in index_layouts([6], 4, rng):
        r.case("index_select", f"index {view_name(idx)}", index_select, [x, idx], {"dim": 1})
    r.case("index_select", "0-dim index", index_select, [x, index(2)], {"dim": 2})
    r.case("index_select", "empty index", index_select, [x, index([])], {"dim": 0})
    r.case("index_select", "0-dim input", index_select, [Tensor(torch.tensor(5.0)), index([0])], {"dim": 0})
    r.case("index_select", "zero-size input", index_select, [Tensor(torch.zeros(0, 3)), index([])], {"dim": 0})
    r.case("index_select", "many rows", index_select,
           [Tensor(make([20, 8], "float64", rng)), Tensor(torch.from_numpy(rng.integers(0, 20, size=50)))],
           {"dim": 0})
    r.case("index_select", "out of range", index_select, [x, index([0, 3])], {"dim": 0})
    r.case("index_select", "negative", index_select, [x, index([-1])], {"dim": 1})
    r.case("index_select", "zero-size dim", index_select, [Tensor(torch.zeros(0, 3)), index([0])], {"dim": 0})
    r.case("index_select", "empty rows out of range", index_select, [Tensor(torch.zeros(2, 0)), index([5])],
           {"dim": 0})
    r.case("index_select", "int16 index", index_select, [x, index([0], "int16")], {"dim": 0})
    r.case("index_select", "float index", index_select, [x, index([0.0], "float32")], {"dim": 0})
    r.case("index_select", "2-D index", index_select, [x, index([[0, 1]])], {"dim": 0})
    r.case("index_select", "0-dim input two indices", index_select, [Tensor(torch.tensor(5.0)), index([0, 0])],
           {"dim": 0})
    r.case("index_select", "dim out of range", index_select, [x, index([0])], {"dim": 3})


def gather_cases(r, rng):
    gather = lambda t, i, dim: torch.gather(t, dim, i)  # noqa: E731
    for dtype in ALL_DTYPES:
        for x in layouts([3, 4], dtype, rng):
            v = view_name(x)
            r.case("gather", f"{dtype}/{v}/dim0", gather, [x, index([[2, 0, 1, 2], [0, 0, 2, 1]])], {"dim": 0})
            r.case("gather", f"{dtype}/{v}/dim-1", gather, [x, index([[3, 1], [0, 0], [2, 3]], "int32")], {"dim": -1})
    x = Tensor(make([3, 4, 5], "float32", rng))
    for index_dtype in INDEX_DTYPES:
        for idx in index_layouts([3, 4, 2], 5, rng, index_dtype):
            r.case("gather", f"index {index_dtype} {view_name(idx)}", gather, [x, idx], {"dim": 2})
        for idx in index_layouts([2, 6, 3], 4, rng, index_dtype):
            r.case("gather", f"index {index_dtype} {view_name(idx)} dim1", gather, [x, idx], {"dim": 1})
    r.case("gather", "index longer than input along dim", gather, [Tensor(make([3, 4], "int64", rng)),
                                                                   index([[0] * 6, [3] * 6])], {"dim": 1})
    r.case("gather", "0-dim", gather, [Tensor(torch.tensor(5.0)), index(0)], {"dim": 0})
    r.case("gather", "0-dim input 1-D index", gather, [Tensor(torch.tensor(5.0)), index([0, 0])], {"dim": 0})
    r.case("gather", "1-D input 0-dim index", gather, [Tensor(make([3], "float32", rng)), index(2)], {"dim": 0})
    r.case("gather", "empty index", gather, [x, Tensor(torch.zeros(3, 0, 5, dtype=torch.int64))], {"dim": 1})
    r.case("gather", "empty index larger than input", gather, [x, Tensor(torch.zeros(0, 9, dtype=torch.int64))],
           {"dim": 0})
    r.case("gather", "empty int16 index", gather, [x, Tensor(torch.zeros(0, dtype=torch.int16))], {"dim": 0})
    r.case("gather", "empty index, dim out of range", gather, [x, index([])], {"dim": 3})
    r.case("gather", "many lines", gather, [Tensor(make([16, 40], "float32", rng)),
                                            Tensor(torch.from_numpy(rng.integers(0, 16, size=(20, 40))))], {"dim": 0})
    r.case("gather", "out of range", gather, [x, index([[[7]]])], {"dim": 1})
    r.case("gather", "negative", gather, [x, index([[[-1]]])], {"dim": 2})
    r.case("gather", "zero-size dim", gather, [Tensor(torch.zeros(3, 0)), index([[0]])], {"dim": 1})
    r.case("gather", "ndim mismatch", gather, [x, index([0, 1])], {"dim": 0})
    r.case("gather", "index larger than input", gather, [Tensor(make([3, 4], "float32", rng)),
                                                         Tensor(torch.zeros(4, 2, dtype=torch.int64))], {"dim": 1})
    r.case("gather", "int16 index", gather, [x, index([[[0]]], "int16")], {"dim": 0})
    r.case("gather", "dim out of range", gather, [x, index([[[0]]])], {"dim": 3})


def scatter_add_cases(r, rng):
    scatter_add = lambda t, i, src, dim: torch.scatter_add(t, dim, i, src)  # noqa: E731
    for dtype in ALL_DTYPES:
        for x in layouts([3, 4], dtype, rng):
            v = view_name(x)
            src = Tensor(make([3, 4], dtype, rng))
            r.case("scatter_add", f"{dtype}/{v}/dim0", scatter_add,
                   [x, index([[2, 0, 1, 2], [0, 0, 2, 1], [2, 2, 2, 2]]), src], {"dim": 0})
            r.case("scatter_add", f"{dtype}/{v}/dim-1", scatter_add,
                   [x, index([[3, 3], [0, 1]], "int32"), src], {"dim": -1})
    x = Tensor(make([3, 4, 5], "float64", rng))
    for idx in index_layouts([3, 4, 2], 5, rng):
        for src in layouts([3, 4, 2], "float64", rng):
            r.case("scatter_add", f"index {view_name(idx)} src {view_name(src)}", scatter_add, [x, idx, src],
                   {"dim": 2})
    for x2 in layouts([3, 4, 5], "float64", rng):
        r.case("scatter_add", f"self {view_name(x2)}", scatter_add,
               [x2, index_layouts([2, 4, 3], 3, rng)[0], Tensor(make([2, 4, 3], "float64", rng))], {"dim": 0})
    r.case("scatter_add", "src larger than index", scatter_add,
           [Tensor(make([3, 4], "float32", rng)), index([[0, 1], [1, 0]]), Tensor(make([3, 5], "float32", rng))],
           {"dim": 0})
    r.case("scatter_add", "index longer than self along dim", scatter_add,
           [Tensor(make([3, 2], "float32", rng)), Tensor(torch.zeros(5, 2, dtype=torch.int64)),
            Tensor(make([5, 2], "float32", rng))], {"dim": 0})
    r.case("scatter_add", "int8 wraps", scatter_add,
           [Tensor(torch.zeros(3, dtype=torch.int8)), index([0, 0, 2]), Tensor(torch.full((3,), 100, dtype=torch.int8))],
           {"dim": 0})
    r.case("scatter_add", "0-dim", scatter_add, [Tensor(torch.tensor(1.0)), index(0), Tensor(torch.tensor(2.0))],
           {"dim": 0})
    r.case("scatter_add", "empty index", scatter_add,
           [Tensor(make([3], "float32", rng)), index([]), Tensor(make([3], "float32", rng))], {"dim": 0})
    r.case("scatter_add", "empty index, other shapes", scatter_add,
           [Tensor(make([3, 4], "float32", rng)), Tensor(torch.zeros(0, 9, dtype=torch.int64)),
            Tensor(make([2], "float32", rng))], {"dim": 0})
    r.case("scatter_add", "empty int16 index", scatter_add,
           [Tensor(make([3], "float32", rng)), index([], "int16"), Tensor(make([3], "float32", rng))], {"dim": 0})
    r.case("scatter_add", "empty index, dim out of range", scatter_add,
           [Tensor(make([3], "float32", rng)), index([]), Tensor(make([3], "float32", rng))], {"dim": 1})
    r.case("scatter_add", "empty index, dtype mismatch", scatter_add,
           [Tensor(make([3], "float32", rng)), index([]), Tensor(make([3], "int32", rng))], {"dim": 0})
    r.case("scatter_add", "many lines", scatter_add,
           [Tensor(torch.zeros(10, 40, dtype=torch.float64)),
            Tensor(torch.from_numpy(rng.integers(0, 10, size=(25, 40)))), Tensor(make([25, 40], "float64", rng))],
           {"dim": 0})
    r.case("scatter_add", "out of range", scatter_add,
           [Tensor(make([3], "float32", rng)), index([0, 5, 2]), Tensor(make([3], "float32", rng))], {"dim": 0})
    r.case("scatter_add", "negative", scatter_add,
           [Tensor(make([3], "float32", rng)), index([0, -1, 2]), Tensor(make([3], "float32", rng))], {"dim": 0})
    r.case("scatter_add", "dtype mismatch", scatter_add,
           [Tensor(make([3], "float32", rng)), index([0, 1]), Tensor(make([3], "float64", rng))], {"dim": 0})
    r.case("scatter_add", "src smaller than index", scatter_add,
           [Tensor(make([3], "float32", rng)), index([0, 1, 2]), Tensor(make([2], "float32", rng))], {"dim": 0})
    r.case("scatter_add", "index larger than self", scatter_add,
           [Tensor(make([3, 2], "float32", rng)), Tensor(torch.zeros(2, 3, dtype=torch.int64)),
            Tensor(make([3, 3], "float32", rng))], {"dim": 0})
    r.case("scatter_add", "ndim mismatch", scatter_add,
           [Tensor(make([3, 2], "float32", rng)), index([0, 1]), Tensor(make([3, 2], "float32", rng))], {"dim": 0})
    r.case("scatter_add", "int16 index", scatter_add,
           [Tensor(make([3], "float32", rng)), index([0, 1], "int16"), Tensor(make([3], "float32", rng))], {"dim": 0})


def one_hot_embedding_cases(r, rng):
    one_hot = lambda i, num_classes: F.one_hot(i, num_classes)  # noqa: E731
    embedding = lambda w, i: F.embedding(i, w)  # noqa: E731
    for idx in index_layouts([3, 4], 5, rng):
        r.case("one_hot", f"{view_name(idx)}/infer", one_hot, [idx], {"num_classes": -1})
        r.case("one_hot", f"{view_name(idx)}/7", one_hot, [idx], {"num_classes": 7})
    r.case("one_hot", "0-dim", one_hot, [index(2)], {"num_classes": -1})
    r.case("one_hot", "1-D exact", one_hot, [index([0, 3, 1])], {"num_classes": 4})
    r.case("one_hot", "empty with classes", one_hot, [Tensor(torch.zeros(2, 0, dtype=torch.int64))],
           {"num_classes": 3})
    r.case("one_hot", "long", one_hot, [Tensor(torch.from_numpy(rng.integers(0, 10, size=200)))],
           {"num_classes": -1})
    r.case("one_hot", "empty infer", one_hot, [index([])], {"num_classes": -1})
    r.case("one_hot", "empty zero classes", one_hot, [index([])], {"num_classes": 0})
    r.case("one_hot", "too few classes", one_hot, [index([0, 2, 1])], {"num_classes": 2})
    r.case("one_hot", "negative value", one_hot, [index([0, -2, 1])], {"num_classes": -1})
    r.case("one_hot", "negative value and too large", one_hot, [index([5, -2])], {"num_classes": 3})
    r.case("one_hot", "int32 index", one_hot, [index([0, 1], "int32")], {"num_classes": -1})
    r.case("one_hot", "zero classes", one_hot, [index([0])], {"num_classes": 0})

    for dtype in ALL_DTYPES:
        for w in layouts([5, 3], dtype, rng):
            r.case("embedding", f"{dtype}/{view_name(w)}", embedding, [w, index([[4, 0, 2], [1, 1, 3]])])
    w = Tensor(make([6, 4], "float32", rng))
    for index_dtype in INDEX_DTYPES:
        for idx in index_layouts([3, 2], 6, rng, index_dtype):
            r.case("embedding", f"index {index_dtype} {view_name(idx)}", embedding, [w, idx])
    r.case("embedding", "0-dim index", embedding, [w, index(3)])
    r.case("embedding", "empty index", embedding, [w, Tensor(torch.zeros(2, 0, dtype=torch.int64))])
    r.case("embedding", "out of range", embedding, [w, index([6])])
    r.case("embedding", "negative", embedding, [w, index([-1])])
    r.case("embedding", "1-D weight", embedding, [Tensor(make([6], "float32", rng)), index([0])])
    r.case("embedding", "3-D weight", embedding, [Tensor(make([6, 2, 2], "float32", rng)), index([0])])
    r.case("embedding", "int16 index", embedding, [w, index([0], "int16")])


def build():
    rng = np.random.default_rng(7)
    r = Recorder()
    cat_cases(r, rng)
    stack_cases(r, rng)
    split_cases(r, rng)
    repeat_cases(r, rng)
    flip_roll_cases(r, rng)
    pad_cases(r, rng)
    index_select_cases(r, rng)
    gather_cases(r, rng)
    scatter_add_cases(r, rng)
    one_hot_embedding_cases(r, rng)
    return r
