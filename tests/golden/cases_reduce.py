"""Reduction reference data: sum, mean, prod, amax, amin, argmax, argmin, var, std, logsumexp, all, any,
norm, softmax and log_softmax in every dtype (and PyTorch's errors for the dtypes it rejects), every
layout (contiguous, transposed, strided, broadcast), many axis sets, special values, large
magnitudes, long inputs for accuracy, zero-size tensors and user errors.

Attribute conventions read by tests/test_reduce.cpp: "dims" is a list (empty = every dim), "dim" an
int or null, "p" a number or the string "inf" / "-inf" (JSON has no infinity). "decode": [divisor,
shift] turns a stored uint8 input into float32 as x / divisor + shift on both sides before the op, so
long inputs cost one byte per element in the JSON while still having full float mantissas.
"""
import numpy as np
import torch

from golden_lib import ALL_DTYPES, DTYPES, FLOAT_DTYPES, Recorder, Tensor, layouts, make

INF = float("inf")
NAN = float("nan")


def decoded(x, decode):
    if decode is None:
        return x
    return x.to(torch.float32) / decode[0] + decode[1]


def all_dims(x, dims):
    """ember's empty dims mean every dim; torch needs them spelled out for some ops."""
    return tuple(dims) if dims else (tuple(range(x.dim())) or (0,))


def p_value(p):
    return {"inf": INF, "-inf": -INF}.get(p, p) if isinstance(p, str) else p


def f_sum(x, dims, keepdim, decode=None):
    x = decoded(x, decode)
    return torch.sum(x, all_dims(x, dims), keepdim=keepdim)


def f_mean(x, dims, keepdim, decode=None):
    x = decoded(x, decode)
    return torch.mean(x, all_dims(x, dims), keepdim=keepdim)


def f_prod(x, dims, keepdim, decode=None):
    x = decoded(x, decode)
    # torch.prod takes one dim; a product over several dims is the product of the flattened dims.
    rank = max(x.dim(), 1)
    for d in all_dims(x, dims):
        if not -rank <= d < rank:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {d})")
    dims = sorted(d % rank for d in all_dims(x, dims))
    if len(set(dims)) != len(dims):
        raise RuntimeError("dim appears multiple times in the list of dims")
    if x.dim() == 0:
        return torch.prod(x, 0, keepdim=keepdim) if dims else x.prod()
    for d in reversed(dims):
        x = torch.prod(x, d, keepdim=True)
    if not keepdim:
        for d in reversed(dims):
            x = x.squeeze(d)
    return x


def f_amax(x, dims, keepdim, decode=None):
    x = decoded(x, decode)
    return torch.amax(x, dims, keepdim=keepdim)


def f_amin(x, dims, keepdim, decode=None):
    x = decoded(x, decode)
    return torch.amin(x, dims, keepdim=keepdim)


def f_argmax(x, dim, keepdim, decode=None):
    return torch.argmax(decoded(x, decode), dim, keepdim=keepdim)


def f_argmin(x, dim, keepdim, decode=None):
    return torch.argmin(decoded(x, decode), dim, keepdim=keepdim)


def f_var(x, dims, correction, keepdim, decode=None):
    x = decoded(x, decode)
    return torch.var(x, all_dims(x, dims), correction=correction, keepdim=keepdim)


def f_std(x, dims, correction, keepdim, decode=None):
    x = decoded(x, decode)
    return torch.std(x, all_dims(x, dims), correction=correction, keepdim=keepdim)


def f_logsumexp(x, dims, keepdim, decode=None):
    x = decoded(x, decode)
    return torch.logsumexp(x, all_dims(x, dims), keepdim=keepdim)


def f_all(x, dims, keepdim, decode=None):
    x = decoded(x, decode)
    return torch.all(x, all_dims(x, dims), keepdim=keepdim) if x.dim() else torch.all(x)


def f_any(x, dims, keepdim, decode=None):
    x = decoded(x, decode)
    return torch.any(x, all_dims(x, dims), keepdim=keepdim) if x.dim() else torch.any(x)


def f_norm(x, p, dims, keepdim, decode=None):
    x = decoded(x, decode)
    return torch.linalg.vector_norm(x, ord=p_value(p), dim=tuple(dims) if dims else None, keepdim=keepdim)


def f_softmax(x, dim, decode=None):
    return torch.softmax(decoded(x, decode), dim)


def f_log_softmax(x, dim, decode=None):
    return torch.log_softmax(decoded(x, decode), dim)


# Ops that take "dims" + "keepdim", with the extra attributes each needs.
DIMS_OPS = {
    "sum": (f_sum, {}), "mean": (f_mean, {}), "prod": (f_prod, {}), "amax": (f_amax, {}),
    "amin": (f_amin, {}), "var": (f_var, {"correction": 1}), "std": (f_std, {"correction": 1}),
    "logsumexp": (f_logsumexp, {}), "all": (f_all, {}), "any": (f_any, {}), "norm": (f_norm, {"p": 2.0}),
}
ARG_OPS = {"argmax": f_argmax, "argmin": f_argmin}
SOFTMAX_OPS = {"softmax": f_softmax, "log_softmax": f_log_softmax}
# Ops with their own kernels (the others are composed from these), tested on more sizes and dtypes.
KERNEL_OPS = {"sum", "prod", "amax", "amin", "all", "any"}

# (dims, keepdim) on a 3-D tensor: single, negative, several, out of order, every dim.
AXES_FULL = [([0], False), ([1], True), ([-1], False), ([0, 2], False), ([2, 0], True), ([-1, -3], False),
             ([], False), ([], True)]
AXES_SHORT = [([0], False), ([-1], True), ([0, 2], False), ([], False)]

# Rows of special values: nan, infinities of both signs, all -inf, mixed.
SPECIAL_ROWS = [[1.0, NAN, 3.0, -2.0], [INF, -INF, 0.0, 1.0], [-INF, -INF, -INF, -INF], [INF, INF, 1.0, 2.0],
                [NAN, INF, -INF, 0.5], [0.0, -0.0, 0.0, -0.0]]


def view_name(x):
    return x.view if isinstance(x.view, str) else "expand"


def build():
    rng = np.random.default_rng(7)
    r = Recorder()

    def float_input(shape, dtype="float32", low=-3.0, high=3.0):
        return Tensor(make(shape, dtype, rng, low=low, high=high))

    def prod_input(shape, dtype):
        # Values near 1 so long products neither overflow nor vanish.
        if dtype in FLOAT_DTYPES:
            return float_input(shape, dtype, low=0.5, high=1.5)
        return Tensor(make(shape, dtype, rng))

    # --- ops over a set of dims ------------------------------------------------------------------
    for op, (fn, extra) in DIMS_OPS.items():
        def case(name, inputs, dims, keepdim, **more):
            r.case(op, name, fn, inputs, {**extra, "dims": list(dims), "keepdim": keepdim, **more})

        # every dtype: one dim and every dim
        for dtype in ALL_DTYPES:
            x = prod_input([3, 4], dtype) if op == "prod" else Tensor(make([3, 4], dtype, rng))
            case(f"{dtype}/dim1", [x], [1], False)
            case(f"{dtype}/all", [x], [], False)
        # layouts x axis sets in float32, a shorter sweep in int32, float16, bfloat16 and float64
        for x in layouts([2, 3, 5], "float32", rng):
            axes = AXES_FULL if x.view == "contiguous" else AXES_SHORT
            if op == "prod":
                x = Tensor(make(list(x.base.shape), "float32", rng, low=0.5, high=1.5), x.view)
            for dims, keepdim in axes:
                case(f"float32/{view_name(x)}/dims{dims}/keep{int(keepdim)}", [x], dims, keepdim)
        for dtype in ["int32", "float16", "bfloat16", "float64"]:
            for x in layouts([2, 3, 5], dtype, rng):
                case(f"{dtype}/{view_name(x)}/dims[0, 2]", [x], [0, 2], False)
        # a strided 1-D input (no unit-stride dim anywhere) and a higher-rank one
        case("float32/step2-1d", [Tensor(make([74], "float32", rng, low=0.5, high=1.5), "step2")], [], False)
        case("float32/5d", [Tensor(make([2, 3, 2, 2, 3], "float32", rng, low=0.5, high=1.5))], [1, 3], False)
        case("float32/5d-keep", [Tensor(make([2, 3, 2, 2, 3], "float32", rng, low=0.5, high=1.5))], [0, -1, 2], True)
        # rows long enough for several unrolled SIMD iterations plus a tail, inner and outer reductions
        medium = prod_input([3, 100], "float32")
        case("float32/medium/dim1", [medium], [1], False)
        if op in KERNEL_OPS:
            case("float32/medium/dim0", [medium], [0], False)
            medium_t = Tensor(make([100, 3], "float32", rng, low=0.5, high=1.5), "t")
            case("float32/medium-t/dim1", [medium_t], [1], False)
            for dtype in ["float16", "bfloat16", "int64", "bool"]:
                x = prod_input([2, 40], dtype)
                case(f"{dtype}/medium/dim1", [x], [1], False)
                case(f"{dtype}/medium/dim0", [x], [0], False)
        # 0-dim
        scalar = Tensor(torch.tensor(2.5))
        case("float32/0-dim/all", [scalar], [], False)
        case("float32/0-dim/dim0", [scalar], [0], False)
        case("float32/0-dim/dim-1-keep", [scalar], [-1], True)
        # special values along rows and along columns
        special = Tensor(torch.tensor(SPECIAL_ROWS, dtype=torch.float32))
        case("float32/special/dim1", [special], [1], False)
        case("float32/special/dim0", [special], [0], False)
        nan_lane = torch.from_numpy(rng.uniform(-3, 3, size=(2, 37))).to(torch.float32)
        nan_lane[0, 21] = NAN
        nan_lane[1, 5] = INF
        case("float32/nan-in-vector/dim1", [Tensor(nan_lane)], [1], False)
        case("float64/special/dim1", [Tensor(torch.tensor(SPECIAL_ROWS, dtype=torch.float64))], [1], False)
        case("float16/special/dim1", [Tensor(torch.tensor(SPECIAL_ROWS, dtype=torch.float16))], [1], False)
        # zero-size
        for shape in ([0, 3], [3, 0]):
            empty = Tensor(torch.zeros(shape))
            for dims in ([0], [1], []):
                case(f"float32/empty{shape}/dims{dims}", [empty], dims, False)
        case("int64/empty/all", [Tensor(torch.zeros([0, 2], dtype=torch.int64))], [], False)
        # user errors
        x = float_input([3, 4])
        case("error/duplicate", [x], [1, 1], False)
        case("error/duplicate-negative", [x], [1, -1], False)
        case("error/out-of-range", [x], [2], False)
        case("error/out-of-range-negative", [x], [-3], False)

    # long inputs for accuracy (uint8 in the JSON, decoded to float32 on both sides)
    def long_input(shape):
        return Tensor(torch.from_numpy(rng.integers(0, 256, size=shape).astype(np.uint8)))

    decode = [7.3, -17.0]
    # 100697 elements: a random row of 997 repeated 101 times (broadcast in the JSON, contiguous once decoded)
    long_100k = Tensor(long_input([1, 997]).base, {"expand": [101, 997]})
    r.case("sum", "float32/long-100k/all", f_sum, [long_100k], {"dims": [], "keepdim": False, "decode": decode})
    r.case("sum", "float32/long-100k/dim0", f_sum, [long_100k], {"dims": [0], "keepdim": False, "decode": decode})
    r.case("sum", "float32/long/dim0", f_sum, [long_input([3000, 3])], {"dims": [0], "keepdim": False, "decode": decode})
    r.case("sum", "float32/long/dim1", f_sum, [long_input([3, 3000])], {"dims": [1], "keepdim": False, "decode": decode})
    r.case("mean", "float32/long/all", f_mean, [long_input([6000])], {"dims": [], "keepdim": False, "decode": decode})
    r.case("var", "float32/long/all", f_var, [long_input([6000])],
           {"dims": [], "correction": 1, "keepdim": False, "decode": [7.3, 1000.0]})
    r.case("norm", "float32/long/all", f_norm, [long_input([6000])],
           {"p": 2.0, "dims": [], "keepdim": False, "decode": decode})
    r.case("logsumexp", "float32/long/all", f_logsumexp, [long_input([6000])],
           {"dims": [], "keepdim": False, "decode": [7.3, 0.0]})

    # sum and mean of 16-bit floats: accumulated in float32, rounded once
    for op in ["sum", "mean"]:
        fn = DIMS_OPS[op][0]
        for dtype in ["float16", "bfloat16"]:
            x = Tensor(make([4, 300], dtype, rng, low=0.0, high=4.0))
            r.case(op, f"{dtype}/long-row", fn, [x], {"dims": [1], "keepdim": False})
            r.case(op, f"{dtype}/long-column", fn, [x], {"dims": [0], "keepdim": False})

    # var / std corrections, including a divisor at or below zero (inf / nan, as PyTorch)
    for op in ["var", "std"]:
        fn = DIMS_OPS[op][0]
        x = float_input([3, 4])
        for correction in [0, 2, -1, 4, 5]:
            r.case(op, f"float32/correction{correction}", fn, [x], {"dims": [1], "correction": correction, "keepdim": False})
        r.case(op, "float32/single-element", fn, [float_input([1])], {"dims": [], "correction": 1, "keepdim": False})
        big = Tensor(torch.from_numpy(1e4 + rng.uniform(-1, 1, size=(4, 50))).to(torch.float32))
        r.case(op, "float32/large-offset", fn, [big], {"dims": [1], "correction": 1, "keepdim": True})

    # norm orders
    for p in [1.0, 2.0, 3.0, 0.5, "inf", "-inf", 0.0, -1.0]:
        for x in layouts([3, 4, 5], "float32", rng)[:3]:
            r.case("norm", f"float32/p{p}/{view_name(x)}", f_norm, [x], {"p": p, "dims": [1, 2], "keepdim": False})
        r.case("norm", f"float32/p{p}/all", f_norm, [float_input([4, 6])], {"p": p, "dims": [], "keepdim": True})
        r.case("norm", f"float16/p{p}", f_norm, [float_input([4, 6], "float16")], {"p": p, "dims": [0], "keepdim": False})
        r.case("norm", f"float32/p{p}/special", f_norm, [Tensor(torch.tensor(SPECIAL_ROWS))],
               {"p": p, "dims": [1], "keepdim": False})
        for dims in ([0], [1], []):
            r.case("norm", f"float32/p{p}/empty{dims}", f_norm, [Tensor(torch.zeros([0, 3]))],
                   {"p": p, "dims": dims, "keepdim": False})
    r.case("norm", "float32/overflow", f_norm, [Tensor(torch.tensor([3e20, 4e20, 1.0]))],
           {"p": 2.0, "dims": [], "keepdim": False})
    r.case("norm", "int64/p1", f_norm, [Tensor(make([3], "int64", rng))], {"p": 1.0, "dims": [], "keepdim": False})

    # logsumexp stability: huge magnitudes, infinities
    big = torch.tensor([[1e4, 1e4 - 1, 1e4 - 2], [-1e4, -1e4 + 3, -1e4], [88.0, 89.0, 90.0], [1e30, -1e30, 0.0]])
    r.case("logsumexp", "float32/large-magnitude", f_logsumexp, [Tensor(big)], {"dims": [1], "keepdim": False})
    r.case("logsumexp", "float64/large-magnitude", f_logsumexp, [Tensor(big.double() * 10)], {"dims": [1], "keepdim": True})

    # all / any on rows that are all true, all false, mixed; floats with nan (nan is true)
    truth = torch.tensor([[True, True, True], [False, False, False], [True, False, True]])
    for op in ["all", "any"]:
        fn = DIMS_OPS[op][0]
        r.case(op, "bool/patterns", fn, [Tensor(truth)], {"dims": [1], "keepdim": False})
        r.case(op, "float32/nan-is-true", fn, [Tensor(torch.tensor([[NAN, 1.0], [0.0, NAN], [0.0, -0.0]]))],
               {"dims": [1], "keepdim": False})
        long_bool = torch.zeros(3, 300, dtype=torch.bool)
        long_bool[0] = True
        long_bool[1, 299] = True
        long_bool[2, :299] = True
        r.case(op, "bool/long-rows", fn, [Tensor(long_bool)], {"dims": [1], "keepdim": False})
        r.case(op, "bool/long-columns", fn, [Tensor(long_bool)], {"dims": [0], "keepdim": False})

    # integer sums and products widen to int64 and wrap around like it
    r.case("prod", "int64/wrap", f_prod, [Tensor(torch.full([70], 3, dtype=torch.int64))], {"dims": [], "keepdim": False})
    r.case("prod", "int8/widen", f_prod, [Tensor(torch.full([9], 5, dtype=torch.int8))], {"dims": [], "keepdim": False})
    r.case("sum", "int8/widen", f_sum, [Tensor(torch.full([300], 100, dtype=torch.int8))], {"dims": [], "keepdim": False})
    r.case("sum", "int64/wrap", f_sum, [Tensor(torch.tensor([2**62, 2**62, 2**62], dtype=torch.int64))],
           {"dims": [], "keepdim": False})

    # --- argmax / argmin -------------------------------------------------------------------------
    for op, fn in ARG_OPS.items():
        def case(name, inputs, dim, keepdim):
            r.case(op, name, fn, inputs, {"dim": dim, "keepdim": keepdim})

        for dtype in ALL_DTYPES:
            x = Tensor(make([3, 4], dtype, rng))
            case(f"{dtype}/dim1", [x], 1, False)
            case(f"{dtype}/flat", [x], None, False)
        for x in layouts([3, 4, 5], "float32", rng):
            for dim, keepdim in [(0, False), (1, True), (-1, False), (None, False), (None, True)]:
                case(f"float32/{view_name(x)}/dim{dim}/keep{int(keepdim)}", [x], dim, keepdim)
        for x in layouts([3, 4, 5], "int32", rng):  # small integers: many ties, the first index wins
            case(f"int32/{view_name(x)}/dim1", [x], 1, False)
            case(f"int32/{view_name(x)}/flat", [x], None, False)
        ties = Tensor(torch.tensor([[2.0, 5.0, 5.0, 1.0], [7.0, 7.0, 7.0, 7.0], [-1.0, -3.0, -3.0, -1.0]]))
        case("float32/ties/dim1", [ties], 1, False)
        case("float32/ties/dim0", [ties], 0, False)
        case("float32/ties/flat", [ties], None, False)
        special = Tensor(torch.tensor(SPECIAL_ROWS, dtype=torch.float32))
        case("float32/special/dim1", [special], 1, False)
        case("float32/special/dim0", [special], 0, False)
        case("float32/special/flat", [special], None, False)
        medium = float_input([3, 150])
        case("float32/medium/dim1", [medium], 1, False)
        case("float32/medium/dim0", [medium], 0, False)
        case("float32/medium/flat", [medium], None, False)
        case("float16/medium/dim0", [float_input([70, 3], "float16")], 0, False)
        case("float32/0-dim", [Tensor(torch.tensor(2.5))], None, False)
        case("float32/0-dim/dim0", [Tensor(torch.tensor(2.5))], 0, True)
        case("float32/5d", [float_input([2, 3, 2, 2, 3])], 3, False)
        case("float32/step2-1d", [Tensor(make([74], "float32", rng), "step2")], 0, False)
        for shape in ([0, 3], [3, 0]):
            empty = Tensor(torch.zeros(shape))
            for dim in (0, 1, None):
                case(f"float32/empty{shape}/dim{dim}", [empty], dim, False)
        case("error/out-of-range", [float_input([3, 4])], 2, False)

    # --- softmax / log_softmax -------------------------------------------------------------------
    for op, fn in SOFTMAX_OPS.items():
        def case(name, inputs, dim):
            r.case(op, name, fn, inputs, {"dim": dim})

        for dtype in ALL_DTYPES:
            case(f"{dtype}/dim-1", [Tensor(make([3, 4], dtype, rng))], -1)
            case(f"{dtype}/dim0", [Tensor(make([3, 4], dtype, rng))], 0)
        for x in layouts([3, 4, 5], "float32", rng):
            for dim in [0, 1, -1]:
                case(f"float32/{view_name(x)}/dim{dim}", [x], dim)
        for dtype in ["float64", "float16", "bfloat16"]:
            for dim in [0, -1]:
                case(f"{dtype}/medium/dim{dim}", [float_input([2, 70], dtype, low=-8, high=8)], dim)
        medium = float_input([3, 150], low=-10, high=10)
        case("float32/medium/dim1", [medium], 1)
        case("float32/medium/dim0", [medium], 0)
        case("float32/5d/dim2", [float_input([2, 3, 4, 2, 3])], 2)
        # stability: huge magnitudes would overflow exp without subtracting the max
        big = torch.tensor([[1e4, 1e4 - 1, 1e4 - 2, 1e4 - 50], [-1e4, -1e4 + 3, -1e4, -1e4 + 1],
                            [88.0, 89.0, 90.0, 200.0], [1e30, -1e30, 0.0, 1e30], [3e38, 3e38, -3e38, 0.0]])
        case("float32/large-magnitude/dim1", [Tensor(big)], 1)
        case("float32/large-magnitude/dim0", [Tensor(big)], 0)
        case("float64/large-magnitude/dim1", [Tensor(big.double() * 1e5)], 1)
        special = Tensor(torch.tensor(SPECIAL_ROWS, dtype=torch.float32))
        case("float32/special/dim1", [special], 1)
        case("float32/special/dim0", [special], 0)
        # -inf in some lanes of a row longer than a vector (masked attention rows)
        masked = torch.from_numpy(rng.uniform(-5, 5, size=(3, 41))).to(torch.float32)
        masked[0, 10:] = -INF
        masked[1, :] = -INF
        masked[2, ::3] = -INF
        case("float32/masked/dim1", [Tensor(masked)], 1)
        case("float32/masked/dim0", [Tensor(masked)], 0)
        r.case(op, "float32/long-row", fn, [long_input([1500])], {"dim": 0, "decode": [7.3, -17.0]})
        case("float32/0-dim", [Tensor(torch.tensor(2.5))], 0)
        case("float32/0-dim/dim-1", [Tensor(torch.tensor(2.5))], -1)
        case("float32/empty/dim0", [Tensor(torch.zeros([0, 3]))], 0)
        case("float32/empty/dim1", [Tensor(torch.zeros([0, 3]))], 1)
        case("float32/size1-dim", [float_input([3, 1])], 1)
        case("error/out-of-range", [float_input([3, 4])], 2)
        case("error/out-of-range-negative", [float_input([3, 4])], -3)
    return r
