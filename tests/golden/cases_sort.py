"""Triangle, scan and sorting reference data: tril, triu, cumsum, sort, argsort and topk over the
dtypes torch supports for them, with contiguous, transposed, strided and broadcast inputs, negative
dims, 0-dim, empty and size-1 dims, NaN and infinities, long rows (topk's heap and partition
paths, cumsum's accumulation) and the inputs PyTorch rejects.

topk's cases hold distinct values along the selected dim, so its indices are well defined; op
"topk_values" has ties and records the values only. topk with sorted=False returns its k elements
in an unspecified order: those cases record them sorted best first (values, then the matching
indices), and the test sorts ember's result the same way. Attributes: "diagonal", "dim", "dtype"
(a dtype name or null), "descending", "stable", "k", "largest", "sorted".
"""
import numpy as np
import torch

from golden_lib import ALL_DTYPES, DTYPES, FLOAT_DTYPES, INT_DTYPES, Recorder, Tensor, layouts, make

INF = float("inf")
NAN = float("nan")


def view_name(x):
    return x.view if isinstance(x.view, str) else "expand"


def f_tril(x, diagonal):
    return torch.tril(x, diagonal)


def f_triu(x, diagonal):
    return torch.triu(x, diagonal)


def f_cumsum(x, dim, dtype):
    return torch.cumsum(x, dim, dtype=DTYPES[dtype] if dtype else None)


def f_sort(x, dim, descending, stable):
    return list(torch.sort(x, dim=dim, descending=descending, stable=stable))


def f_argsort(x, dim, descending, stable):
    return torch.argsort(x, dim=dim, descending=descending, stable=stable)


def f_topk(x, k, dim, largest, sorted):
    values, indices = torch.topk(x, k, dim=dim, largest=largest, sorted=sorted)
    if not sorted and values.numel() > 0:
        # Best first, as the C++ test orders ember's result (the values are distinct).
        order = torch.sort(values, dim=dim, descending=largest, stable=True).indices
        values, indices = values.gather(dim, order), indices.gather(dim, order)
    return [values, indices]


def f_topk_values(x, k, dim, largest, sorted):
    return torch.topk(x, k, dim=dim, largest=largest, sorted=sorted).values


def distinct(shape, dtype, rng):
    """Values without ties anywhere in the tensor: a shuffled ramp, exact in every dtype."""
    n = int(np.prod(shape)) if shape else 1
    ramp = rng.permutation(n).astype(np.float64)
    if dtype in FLOAT_DTYPES:
        values = (ramp - n / 2) / 4 if n <= 400 else (ramp - n / 2) / 7
    elif dtype == "uint8":
        values = ramp
    else:
        values = ramp - n // 2
    return torch.from_numpy(values.reshape(shape)).to(DTYPES[dtype])


def distinct_layouts(shape, dtype, rng):
    """Contiguous, transposed and strided inputs of distinct values (a broadcast one would repeat)."""
    shape = list(shape)
    out = [Tensor(distinct(shape, dtype, rng))]
    if len(shape) >= 2:
        out.append(Tensor(distinct(shape[:-2] + [shape[-1], shape[-2]], dtype, rng), "t"))
    out.append(Tensor(distinct([shape[0] * 2] + shape[1:], dtype, rng), "step2"))
    return out


def triangle_cases(r, rng):
    for op, fn in [("tril", f_tril), ("triu", f_triu)]:
        def case(name, x, diagonal):
            r.case(op, name, fn, [x], {"diagonal": diagonal})

        for dtype in ALL_DTYPES:
            x = Tensor(make([3, 4], dtype, rng))
            case(f"{dtype}/diag0", x, 0)
            case(f"{dtype}/diag1", x, 1)
        for x in layouts([2, 3, 4], "float32", rng):
            for diagonal in [-2, -1, 0, 1, 3]:
                case(f"float32/{view_name(x)}/diag{diagonal}", x, diagonal)
        for shape in ([4, 4], [2, 6], [6, 2], [2, 3, 4, 5], [1, 1], [1, 5], [5, 1]):
            for diagonal in [0, -1, 2]:
                case(f"float32/{shape}/diag{diagonal}", Tensor(make(shape, "float32", rng)), diagonal)
        for diagonal in [-100, -4, 4, 100, 2**62, -2**62]:
            case(f"float32/far-diagonal{diagonal}", Tensor(make([3, 4], "float32", rng)), diagonal)
        for shape in ([0, 3], [3, 0], [2, 0, 4], [0, 0]):
            case(f"float32/empty{shape}", Tensor(make(shape, "float32", rng)), 0)
        case("uint8/batched", Tensor(make([3, 20, 30], "uint8", rng)), 1)
        case("float32/batched-t", Tensor(make([2, 30, 20], "float32", rng), "t"), -3)
        case("error/1-d", Tensor(make([4], "float32", rng)), 0)
        case("error/0-d", Tensor(torch.tensor(1.5)), 0)


def cumsum_cases(r, rng):
    def case(name, x, dim, dtype=None):
        r.case("cumsum", name, f_cumsum, [x], {"dim": dim, "dtype": dtype})

    for dtype in ALL_DTYPES:
        x = Tensor(make([3, 4], dtype, rng))
        case(f"{dtype}/dim1", x, 1)
        case(f"{dtype}/dim0", x, 0)
    for x in layouts([2, 3, 5], "float32", rng):
        for dim in [0, 1, 2, -1, -3]:
            case(f"float32/{view_name(x)}/dim{dim}", x, dim)
    for x in layouts([4, 6], "int32", rng):
        case(f"int32/{view_name(x)}/dim0", x, 0)
    case("float32/0-dim/dim0", Tensor(torch.tensor(2.5)), 0)
    case("float32/0-dim/dim-1", Tensor(torch.tensor(2.5)), -1)
    case("int64/0-dim", Tensor(torch.tensor(7)), 0)
    for shape, dim in [([0, 3], 0), ([0, 3], 1), ([3, 0], 1), ([3, 0], 0), ([0], 0)]:
        case(f"float32/empty{shape}/dim{dim}", Tensor(make(shape, "float32", rng)), dim)
    for shape, dim in [([1, 5], 0), ([5, 1], 1), ([1], 0), ([3, 1, 4], 1)]:
        case(f"float32/size1{shape}/dim{dim}", Tensor(make(shape, "float32", rng)), dim)
    # long lines: float32 accumulates in double, 16-bit floats in float, as PyTorch's CPU kernel
    case("float32/long-row", Tensor(make([2, 1500], "float32", rng)), 1)
    case("float32/long-column", Tensor(make([1500, 2], "float32", rng)), 0)
    case("float32/wide-inner", Tensor(make([2, 5, 300], "float32", rng)), 1)  # two column blocks
    case("float64/long-row", Tensor(make([1, 600], "float64", rng)), -1)
    for dtype in ["float16", "bfloat16"]:
        case(f"{dtype}/long-row", Tensor(make([2, 300], dtype, rng, low=0.0, high=2.0)), 1)
        case(f"{dtype}/long-column", Tensor(make([300, 2], dtype, rng, low=0.0, high=2.0)), 0)
    case("int8/widen", Tensor(torch.full([300], 100, dtype=torch.int8)), 0)
    case("bool/long", Tensor(make([3, 200], "bool", rng)), 1)
    special = torch.tensor([[1.0, NAN, 2.0], [INF, 1.0, -INF], [-INF, -INF, 1.0]])
    case("float32/special/dim1", Tensor(special), 1)
    case("float32/special/dim0", Tensor(special), 0)
    # the dtype argument: the input is converted first
    case("int32/to-float64", Tensor(make([3, 4], "int32", rng)), 1, "float64")
    case("float32/to-float64", Tensor(make([3, 4], "float32", rng)), 0, "float64")
    case("int8/to-int32", Tensor(torch.full([3, 50], 100, dtype=torch.int8)), 1, "int32")
    case("float64/to-float32", Tensor(make([3, 4], "float64", rng)), 1, "float32")
    case("bool/to-float32", Tensor(make([3, 4], "bool", rng)), 1, "float32")
    case("error/dim-out-of-range", Tensor(make([3, 4], "float32", rng)), 2)
    case("error/dim-out-of-range-negative", Tensor(make([3, 4], "float32", rng)), -3)
    case("error/0-dim-dim1", Tensor(torch.tensor(1.0)), 1)


def sort_cases(r, rng):
    for op, fn in [("sort", f_sort), ("argsort", f_argsort)]:
        def case(name, x, dim=-1, descending=False, stable=False):
            r.case(op, name, fn, [x], {"dim": dim, "descending": descending, "stable": stable})

        # every dtype; small integers and bools tie often: stable, so that PyTorch's order of ties is
        # defined (ember's sort is always stable; PyTorch's stable=False may order ties otherwise)
        for dtype in ALL_DTYPES:
            x = Tensor(make([3, 6], dtype, rng))
            ties = dtype not in FLOAT_DTYPES
            case(f"{dtype}/ascending", x, -1, False, ties)
            case(f"{dtype}/descending", x, -1, True, ties)
            if op == "sort":
                case(f"{dtype}/dim0", x, 0, True, True)
        if op == "argsort":
            case("float32/0-dim", Tensor(torch.tensor(1.5)))
            case("float32/layout-t", Tensor(make([5, 4], "float32", rng), "t"), 0, True)
            case("int32/long-row-ties", Tensor(make([2, 300], "int32", rng)), 1, True, True)
            continue
        for x in layouts([3, 4, 5], "float32", rng):
            for dim, descending in [(0, False), (1, True), (-1, False), (-1, True), (-3, True)]:
                # the broadcast input ties along dim 0
                case(f"float32/{view_name(x)}/dim{dim}/desc{int(descending)}", x, dim, descending,
                     view_name(x) == "expand")
        special = torch.tensor([[1.0, NAN, 0.0, -0.0, INF, -INF, NAN, 0.0, -1.0],
                                [NAN, NAN, NAN, 2.0, 2.0, -INF, -INF, 0.0, 3.0]])
        for descending in [False, True]:
            case(f"float32/special/desc{int(descending)}", Tensor(special), -1, descending, True)
            case(f"float16/special/desc{int(descending)}", Tensor(special.half()), -1, descending, True)
            case(f"float64/special/desc{int(descending)}/stable", Tensor(special.double()), -1, descending, True)
        case("float32/0-dim", Tensor(torch.tensor(1.5)), 0)
        case("float32/0-dim/dim-1", Tensor(torch.tensor(1.5)), -1, True)
        for shape, dim in [([0, 3], 0), ([0, 3], 1), ([3, 0], 1), ([0], 0), ([1], 0), ([4, 1], 1), ([1, 4], 0)]:
            case(f"float32/{shape}/dim{dim}", Tensor(make(shape, "float32", rng)), dim)
        case("float32/long-row", Tensor(make([2, 800], "float32", rng)), -1, True)
        case("float32/long-column", Tensor(make([500, 3], "float32", rng)), 0)
        case("int16/long-row-ties", Tensor(make([3, 500], "int16", rng)), 1, False, True)
        case("error/dim-out-of-range", Tensor(make([3, 4], "float32", rng)), 2)
        case("error/0-dim-dim1", Tensor(torch.tensor(1.0)), 1)


def topk_cases(r, rng):
    def case(name, x, k, dim=-1, largest=True, sorted=True):
        r.case("topk", name, f_topk, [x], {"k": k, "dim": dim, "largest": largest, "sorted": sorted})

    for dtype in [d for d in ALL_DTYPES if d != "bool"]:
        x = Tensor(distinct([3, 7], dtype, rng))
        case(f"{dtype}/k3", x, 3)
        case(f"{dtype}/k2/smallest/dim0", x, 2, 0, False)
    case("bool/error", Tensor(make([3, 4], "bool", rng)), 2)
    for x in distinct_layouts([3, 4, 6], "float32", rng):
        v = view_name(x)
        for k, dim, largest in [(1, -1, True), (3, -1, False), (6, 2, True), (0, -1, True), (2, 0, True),
                                (3, 1, False), (4, -2, True)]:
            case(f"float32/{v}/k{k}/dim{dim}/largest{int(largest)}", x, k, dim, largest)
        case(f"float32/{v}/unsorted/k3", x, 3, -1, True, False)
        case(f"float32/{v}/unsorted/k2/smallest/dim1", x, 2, 1, False, False)
    # a broadcast input, selected along a dim that is not broadcast
    case("float32/expand/k2", Tensor(distinct([1, 3, 6], "float32", rng), {"expand": [4, 3, 6]}), 2, -1)
    # long rows: the heap (k <= n / 16) and the partition (larger k) paths, sorted and not
    # (int16 keeps the JSON small; tests/ops_sort.cpp checks large float32 rows against sort)
    long_row = Tensor(distinct([2, 2000], "int16", rng))
    for k in [1, 7, 100, 300, 2000]:
        case(f"int16/long-row/k{k}", long_row, k)
    for k in [7, 300]:
        case(f"int16/long-row/k{k}/smallest/unsorted", long_row, k, -1, False, False)
    float_row = Tensor(distinct([1, 1000], "float32", rng))
    case("float32/long-row/k5", float_row, 5)
    case("float32/long-row/k400/unsorted", float_row, 400, -1, True, False)
    case("float32/long-column/k5", Tensor(distinct([600, 2], "float32", rng)), 5, 0)
    # a vocabulary-sized row (the text-generation case)
    case("int16/vocab-row/k10", Tensor(distinct([1, 30000], "int16", rng)), 10)
    special = torch.tensor([[1.0, NAN, 0.0, INF, -INF, 2.0], [-INF, 5.0, INF, -1.0, 3.0, NAN]])
    for k in [1, 3, 6]:
        case(f"float32/special/k{k}", Tensor(special), k)
        case(f"float32/special/k{k}/smallest", Tensor(special), k, -1, False)
    case("float32/0-dim/k1", Tensor(torch.tensor(1.5)), 1)
    case("float32/0-dim/k0", Tensor(torch.tensor(1.5)), 0)
    case("float32/empty-rows", Tensor(make([0, 5], "float32", rng)), 2)
    case("float32/empty-dim/k0", Tensor(make([3, 0], "float32", rng)), 0)
    case("float32/size1-dim", Tensor(distinct([4, 1], "float32", rng)), 1)
    case("error/k-too-large", Tensor(distinct([3, 4], "float32", rng)), 5)
    case("error/k-negative", Tensor(distinct([3, 4], "float32", rng)), -1)
    case("error/0-dim-k2", Tensor(torch.tensor(1.5)), 2)
    case("error/dim-out-of-range", Tensor(distinct([3, 4], "float32", rng)), 1, 2)

    # ties: the values only (which of the tied indices is taken is not part of the contract)
    def values_case(name, x, k, dim=-1, largest=True):
        r.case("topk_values", name, f_topk_values, [x], {"k": k, "dim": dim, "largest": largest, "sorted": True})

    ties = torch.tensor([[2.0, 5.0, 5.0, 1.0, 5.0, 2.0], [7.0, 7.0, 7.0, 7.0, 7.0, 7.0], [0.0, -0.0, 1.0, 1.0, 0.0, -1.0]])
    for k in [1, 2, 4]:
        values_case(f"float32/ties/k{k}", Tensor(ties), k)
        values_case(f"float32/ties/k{k}/smallest", Tensor(ties), k, -1, False)
    values_case("int32/small-ints/k5", Tensor(make([4, 40], "int32", rng)), 5)
    values_case("int64/small-ints/dim0", Tensor(make([40, 3], "int64", rng)), 7, 0, False)


def build():
    rng = np.random.default_rng(11)
    r = Recorder()
    triangle_cases(r, rng)
    cumsum_cases(r, rng)
    sort_cases(r, rng)
    topk_cases(r, rng)
    return r
