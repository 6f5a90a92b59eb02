"""Elementwise reference data: every unary and binary op, where, clamp, masked_fill, in every dtype and
layout (contiguous, transposed, strided, broadcast), plus special values (nan, inf, zeros)."""
import numpy as np
import torch
import torch.nn.functional as F

from golden_lib import ALL_DTYPES, DTYPES, FLOAT_DTYPES, INT_DTYPES, Recorder, Tensor, layouts, make

UNARY = {
    "neg": torch.neg, "abs": torch.abs, "sign": torch.sign, "exp": torch.exp, "log": torch.log,
    "log1p": torch.log1p, "expm1": torch.expm1, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "square": torch.square, "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh,
    "sigmoid": torch.sigmoid, "relu": torch.relu, "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
    "logical_not": torch.logical_not, "isnan": torch.isnan, "isinf": torch.isinf,
}
POSITIVE_DOMAIN = {"log", "sqrt", "rsqrt"}
BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
    "minimum": torch.minimum, "maximum": torch.maximum, "eq": torch.eq, "ne": torch.ne, "lt": torch.lt,
    "le": torch.le, "gt": torch.gt, "ge": torch.ge, "logical_and": torch.logical_and,
    "logical_or": torch.logical_or,
}
SCALAR_OK = {"add", "sub", "mul", "div", "pow", "eq", "ne", "lt", "le", "gt", "ge"}
SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 100.0, -100.0, 1e-8]


def build():
    rng = np.random.default_rng(2)
    r = Recorder()
    for name, fn in UNARY.items():
        for dtype in ALL_DTYPES:
            for i, x in enumerate(layouts([3, 4], dtype, rng, positive=name in POSITIVE_DOMAIN)):
                r.case(name, f"{dtype}/{x.view if isinstance(x.view, str) else 'expand'}", fn, [x])
        for dtype in FLOAT_DTYPES:
            r.case(name, f"{dtype}/special", fn, [Tensor(torch.tensor(SPECIAL, dtype=DTYPES[dtype]))])
        # A long row so the SIMD body and its scalar tail both run.
        r.case(name, "float32/long", fn,
               [Tensor(make([1037], "float32", rng, low=-8, high=8, positive=name in POSITIVE_DOMAIN))])
        r.case(name, "float64/long", fn,
               [Tensor(make([515], "float64", rng, low=-8, high=8, positive=name in POSITIVE_DOMAIN))])
        r.case(name, "float32/0-dim", fn, [Tensor(torch.tensor(0.75))])
        r.case(name, "float32/empty", fn, [Tensor(torch.zeros(0, 3))])

    for name, fn in BINARY.items():
        for dtype in ALL_DTYPES:
            positive = name == "pow" and dtype in INT_DTYPES
            for x in layouts([3, 4], dtype, rng, positive=positive):
                y = Tensor(make([3, 4], dtype, rng, positive=positive or name == "div"))
                r.case(name, f"{dtype}/{x.view if isinstance(x.view, str) else 'expand'}", fn, [x, y])
            # broadcasting both ways
            r.case(name, f"{dtype}/broadcast", fn,
                   [Tensor(make([4, 1, 3], dtype, rng, positive=positive)),
                    Tensor(make([2, 1], dtype, rng, positive=positive or name == "div"))])
            # with Python scalars of each kind
            for scalar in ([2, 0.5, True] if name in SCALAR_OK else []):
                r.case(name, f"{dtype}/scalar-{type(scalar).__name__}", fn,
                       [Tensor(make([5], dtype, rng, positive=positive)), scalar])
        # mixed dtypes promote
        for a, b in [("int32", "float32"), ("uint8", "int8"), ("float16", "bfloat16"), ("bool", "int64"),
                     ("float64", "float32"), ("int64", "float16")]:
            r.case(name, f"{a}+{b}", fn, [Tensor(make([2, 3], a, rng, positive=True)),
                                          Tensor(make([3], b, rng, positive=True))])
        # 0-dim tensors rank below dimensioned ones
        r.case(name, "float32+0-dim float64", fn,
               [Tensor(make([3], "float32", rng, positive=True)), Tensor(torch.tensor(1.5, dtype=torch.float64))])
        r.case(name, "float32/special", fn,
               [Tensor(torch.tensor(SPECIAL, dtype=torch.float32)),
                Tensor(torch.tensor(SPECIAL[::-1], dtype=torch.float32))])
        r.case(name, "float32/long", fn, [Tensor(make([1037], "float32", rng, positive=True)),
                                          Tensor(make([1037], "float32", rng, positive=True))])
        r.case(name, "float32/incompatible", fn, [Tensor(make([3, 4], "float32", rng)),
                                                  Tensor(make([3], "float32", rng))])

    for dtype in ALL_DTYPES:
        cond = Tensor(make([3, 4], "bool", rng))
        r.case("where", dtype, torch.where, [cond, Tensor(make([3, 4], dtype, rng)), Tensor(make([4], dtype, rng))])
        r.case("where", f"{dtype}/scalar", torch.where, [cond, Tensor(make([3, 4], dtype, rng)), 2])
    r.case("where", "non-bool condition", torch.where,
           [Tensor(make([3], "int64", rng)), Tensor(make([3], "float32", rng)), Tensor(make([3], "float32", rng))])
    r.case("where", "float32+int64", torch.where,
           [Tensor(make([3], "bool", rng)), Tensor(make([3], "float32", rng)), Tensor(make([3], "int64", rng))])

    for dtype in ALL_DTYPES:
        x = Tensor(make([3, 4], dtype, rng))
        # uint8 gets a bound it can hold: PyTorch's handling of -1 for uint8 is not a defined conversion
        r.case("clamp", f"{dtype}/both", lambda t, lo, hi: torch.clamp(t, lo, hi), [x, 1 if dtype == "uint8" else -1, 2])
        r.case("clamp", f"{dtype}/min", lambda t, lo: torch.clamp(t, min=lo), [x, 0])
        r.case("clamp", f"{dtype}/float-bounds", lambda t, lo, hi: torch.clamp(t, lo, hi), [x, -0.5, 1.5])
    r.case("clamp", "float32/nan", lambda t, lo, hi: torch.clamp(t, lo, hi),
           [Tensor(torch.tensor(SPECIAL)), -1.0, 1.0])
    r.case("clamp", "float32/min>max", lambda t, lo, hi: torch.clamp(t, lo, hi), [Tensor(make([4], "float32", rng)), 2.0, 1.0])

    for dtype in ALL_DTYPES:
        x = Tensor(make([3, 4], dtype, rng))
        r.case("masked_fill", dtype, lambda t, m, v: t.masked_fill(m, v), [x, Tensor(make([4], "bool", rng)), 1])
    r.case("masked_fill", "float-value-into-int", lambda t, m, v: t.masked_fill(m, v),
           [Tensor(make([3], "int64", rng)), Tensor(make([3], "bool", rng)), 1.5])
    r.case("masked_fill", "mask-not-bool", lambda t, m, v: t.masked_fill(m, v),
           [Tensor(make([3], "float32", rng)), Tensor(make([3], "int64", rng)), 1.5])
    return r
