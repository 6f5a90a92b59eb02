"""Linear-algebra reference data: matmul in every rank combination (1-D dot, 2-D, vector-matrix,
batched with broadcast batch dims), shapes that leave partial register tiles and cross a packed
block of k, transposed / strided / broadcast operands, every dtype (and PyTorch's errors for bool
and mixed dtypes), shape errors, empty shapes, and linear with and without bias."""
import numpy as np
import torch
import torch.nn.functional as F

from golden_lib import FLOAT_DTYPES, INT_DTYPES, Recorder, Tensor, make


def view_name(t):
    return t.view if isinstance(t.view, str) else "expand"


def operand(shape, dtype, rng, view="contiguous"):
    """A tensor of logical `shape` reached through `view` ("contiguous", "t", "step2")."""
    shape = list(shape)
    if view == "t":
        return Tensor(make(shape[:-2] + [shape[-1], shape[-2]], dtype, rng), "t")
    if view == "step2":
        return Tensor(make([shape[0] * 2] + shape[1:], dtype, rng), "step2")
    return Tensor(make(shape, dtype, rng))


def build():
    rng = np.random.default_rng(7)
    r = Recorder()
    mm = torch.matmul

    # Every rank combination, float32 and float64.
    ranks = [
        ((5,), (5,)), ((5,), (5, 3)), ((4, 5), (5,)), ((4, 5), (5, 3)), ((5,), (2, 5, 3)), ((2, 4, 5), (5,)),
        ((2, 4, 5), (5, 3)), ((4, 5), (2, 5, 3)), ((2, 4, 5), (2, 5, 3)), ((2, 3, 4, 5), (2, 3, 5, 6)),
        ((2, 3, 4, 5), (5, 6)), ((5,), (2, 3, 5, 6)), ((2, 1, 3, 4), (5, 4, 2)), ((3, 1, 4, 5), (1, 2, 5, 3)),
        ((1, 4, 5), (3, 5, 2)),
    ]
    for dtype in ["float32", "float64"]:
        for sa, sb in ranks:
            name = f"{dtype}/{'x'.join(map(str, sa))}@{'x'.join(map(str, sb))}"
            r.case("matmul", name, mm, [operand(sa, dtype, rng), operand(sb, dtype, rng)])

    # Partial tiles (m % 6, n % 16 and n % 8), tiny and unpacked sizes, and k beyond one packed block.
    # (The golden file stays under ~1 MB: bigger shapes are checked against a naive loop in
    # test_linalg.cpp instead.)
    every_layout = [(va, vb) for va in ["contiguous", "t", "step2"] for vb in ["contiguous", "t"]]
    for m, k, n in [(1, 1, 1), (7, 13, 5), (6, 40, 16), (12, 3, 33), (2, 300, 3), (25, 30, 40), (33, 65, 17)]:
        layouts = every_layout if m * k + k * n < 2000 else [("contiguous", "contiguous"), ("t", "t")]
        for va, vb in layouts:
            r.case("matmul", f"float32/{m}x{k}@{k}x{n}/{va},{vb}", mm,
                   [operand((m, k), "float32", rng, va), operand((k, n), "float32", rng, vb)])
    for va, vb in every_layout:
        r.case("matmul", f"float64/19x40@40x11/{va},{vb}", mm,
               [operand((19, 40), "float64", rng, va), operand((40, 11), "float64", rng, vb)])
    r.case("matmul", "float32/40x260@260x50", mm, [operand((40, 260), "float32", rng),
                                                  operand((260, 50), "float32", rng)])
    # Batched operands that are transposed, strided or broadcast along the batch.
    r.case("matmul", "float32/batched-t", mm, [operand((3, 7, 9), "float32", rng, "t"),
                                               operand((3, 9, 10), "float32", rng, "t")])
    r.case("matmul", "float32/batched-step2", mm, [operand((3, 7, 9), "float32", rng, "step2"),
                                                   operand((9, 10), "float32", rng)])
    r.case("matmul", "float32/batched-expand", mm, [Tensor(make([1, 7, 9], "float32", rng), {"expand": [4, 7, 9]}),
                                                    operand((4, 9, 5), "float32", rng)])
    r.case("matmul", "float32/vector-matrix-t", mm, [operand((20,), "float32", rng),
                                                     operand((20, 37), "float32", rng, "t")])
    r.case("matmul", "float32/matrix-t-vector", mm, [operand((37, 20), "float32", rng, "t"),
                                                     operand((20,), "float32", rng)])
    r.case("matmul", "float32/vector-step2", mm, [operand((20,), "float32", rng, "step2"),
                                                  operand((20,), "float32", rng, "step2")])

    # Every dtype (integers wrap around on overflow, as in PyTorch).
    for dtype in FLOAT_DTYPES[2:] + INT_DTYPES:
        for sa, sb in [((7, 13), (13, 5)), ((13,), (13,)), ((2, 7, 13), (13, 5)), ((7, 13), (13,))]:
            name = f"{dtype}/{'x'.join(map(str, sa))}@{'x'.join(map(str, sb))}"
            r.case("matmul", name, mm, [operand(sa, dtype, rng), operand(sb, dtype, rng)])
        r.case("matmul", f"{dtype}/19x20@20x17/t,t", mm,
               [operand((19, 20), dtype, rng, "t"), operand((20, 17), dtype, rng, "t")])
    big = Tensor(torch.tensor([[100, 100], [-100, 50]], dtype=torch.int8))
    r.case("matmul", "int8/overflow", mm, [big, Tensor(torch.tensor([[2, 1], [2, 3]], dtype=torch.int8))])
    r.case("matmul", "int64/overflow", mm, [Tensor(torch.tensor([[2**62, 3]], dtype=torch.int64)),
                                            Tensor(torch.tensor([[4], [5]], dtype=torch.int64))])

    # Errors: bool, mixed dtypes, shapes that don't multiply, 0-dim operands.
    for sa, sb in [((3,), (3,)), ((2, 3), (3, 4))]:
        r.case("matmul", f"bool/{len(sa)}-d", mm, [operand(sa, "bool", rng), operand(sb, "bool", rng)])
    for a, b in [("float32", "float64"), ("float32", "int64"), ("int32", "int64"), ("float16", "float32")]:
        r.case("matmul", f"{a}@{b}", mm, [operand((2, 3), a, rng), operand((3, 4), b, rng)])
    r.case("matmul", "float32.float64/1-d", mm, [operand((3,), "float32", rng), operand((3,), "float64", rng)])
    for sa, sb in [((2, 3), (4, 5)), ((3,), (4,)), ((3,), (4, 5)), ((2, 3), (4,)), ((2, 3, 4), (3, 4, 5)),
                   ((2, 2, 3), (2, 4, 5))]:
        name = f"mismatch/{'x'.join(map(str, sa))}@{'x'.join(map(str, sb))}"
        r.case("matmul", name, mm, [operand(sa, "float32", rng), operand(sb, "float32", rng)])
    r.case("matmul", "0-dim", mm, [Tensor(torch.tensor(2.0)), operand((3,), "float32", rng)])
    r.case("matmul", "0-dim-right", mm, [operand((3,), "float32", rng), Tensor(torch.tensor(2.0))])

    # Empty shapes: no rows, no columns, no batch, and k == 0 (a matrix of zeros).
    for sa, sb in [((0, 3), (3, 4)), ((2, 3), (3, 0)), ((2, 0), (0, 3)), ((0, 2, 3), (3, 4)), ((0,), (0,))]:
        name = f"empty/{'x'.join(map(str, sa))}@{'x'.join(map(str, sb))}"
        r.case("matmul", name, mm, [operand(sa, "float32", rng), operand(sb, "float32", rng)])

    # linear: x of rank 1-3 (and 4), with and without bias, per dtype; bias broadcasting; errors.
    for dtype in ["float32", "float64"]:
        for xs in [(5,), (3, 5), (2, 3, 5), (2, 1, 3, 5)]:
            x = operand(xs, dtype, rng)
            w = operand((4, 5), dtype, rng)
            shape = "x".join(map(str, xs))
            r.case("linear", f"{dtype}/{shape}", F.linear, [x, w])
            r.case("linear", f"{dtype}/{shape}/bias", F.linear, [x, w, operand((4,), dtype, rng)])
    for dtype in FLOAT_DTYPES[2:] + INT_DTYPES:
        r.case("linear", f"{dtype}/3x13/bias", F.linear,
               [operand((3, 13), dtype, rng), operand((7, 13), dtype, rng), operand((7,), dtype, rng)])
    r.case("linear", "bool", F.linear, [operand((3, 5), "bool", rng), operand((4, 5), "bool", rng)])
    r.case("linear", "float32/20x50->33/bias", F.linear,
           [operand((20, 50), "float32", rng), operand((33, 50), "float32", rng), operand((33,), "float32", rng)])
    r.case("linear", "float32/x-t", F.linear,
           [operand((9, 5), "float32", rng, "t"), operand((4, 5), "float32", rng), operand((4,), "float32", rng)])
    r.case("linear", "float32/weight-t", F.linear,
           [operand((3, 5), "float32", rng), operand((4, 5), "float32", rng, "t"), operand((4,), "float32", rng)])
    r.case("linear", "float32/x-step2", F.linear,
           [operand((3, 2, 5), "float32", rng, "step2"), operand((4, 5), "float32", rng)])
    r.case("linear", "float32/bias-1", F.linear,
           [operand((3, 5), "float32", rng), operand((4, 5), "float32", rng), operand((1,), "float32", rng)])
    r.case("linear", "float32/bias-0-dim", F.linear,
           [operand((3, 5), "float32", rng), operand((4, 5), "float32", rng), Tensor(torch.tensor(0.5))])
    r.case("linear", "float32/bias-2-d", F.linear,
           [operand((3, 5), "float32", rng), operand((4, 5), "float32", rng), operand((3, 4), "float32", rng)])
    r.case("linear", "float32/bias-3-d", F.linear,
           [operand((2, 3, 5), "float32", rng), operand((4, 5), "float32", rng), operand((2, 3, 4), "float32", rng)])
    r.case("linear", "float32/bias-step2", F.linear,
           [operand((3, 5), "float32", rng), operand((4, 5), "float32", rng), operand((4,), "float32", rng, "step2")])
    r.case("linear", "float32/weight-1-d", F.linear, [operand((3, 5), "float32", rng), operand((5,), "float32", rng)])
    r.case("linear", "float32/weight-1-d/bias-0-dim", F.linear,
           [operand((5,), "float32", rng), operand((5,), "float32", rng), Tensor(torch.tensor(1.5))])
    r.case("linear", "float32/no-features", F.linear,
           [operand((3, 0), "float32", rng), operand((4, 0), "float32", rng), operand((4,), "float32", rng)])
    r.case("linear", "mismatch", F.linear, [operand((3, 5), "float32", rng), operand((4, 6), "float32", rng)])
    r.case("linear", "bias-mismatch", F.linear,
           [operand((3, 5), "float32", rng), operand((4, 5), "float32", rng), operand((5,), "float32", rng)])
    r.case("linear", "weight-dtype", F.linear, [operand((3, 5), "float32", rng), operand((4, 5), "float64", rng)])
    r.case("linear", "bias-dtype", F.linear,
           [operand((3, 5), "float32", rng), operand((4, 5), "float32", rng), operand((4,), "float64", rng)])
    r.case("linear", "0-dim-input", F.linear, [Tensor(torch.tensor(1.0)), operand((4, 1), "float32", rng)])
    r.case("linear", "3-d-weight", F.linear, [operand((3, 5), "float32", rng), operand((2, 4, 5), "float32", rng)])
    return r
