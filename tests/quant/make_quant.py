"""Reference quantizations for tests/test_quant.cpp, made by the PyPI `gguf` package (whose Q8_0,
Q4_0 and Q4_1 quantizers reproduce llama.cpp's reference C code bit for bit).

    .venv/bin/python tests/quant/make_quant.py      # writes tests/data/quant/*.npy

input.npy holds rows of 128 float32 values chosen to reach every branch of the quantizers: random
rows, an all-zero block, exact rounding ties, a largest magnitude that is negative, two largest
magnitudes of opposite signs, q4_1's rounding boundaries and a constant block (d = 0), a scale
that is subnormal in float16, and one that overflows it (the last row).
For each format F: F.npy (the blocks' bytes, uint8, one row per input row) and F_dequantized.npy.
"""
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, quants

OUT = Path(__file__).resolve().parent.parent / "data" / "quant"
K = 128


def rows() -> np.ndarray:
    rng = np.random.default_rng(17)
    out = [rng.standard_normal(K), rng.uniform(-3, 3, K) * 10.0 ** rng.integers(-3, 3, K)]
    zero_block = rng.standard_normal(K)
    zero_block[32:64] = 0.0
    out.append(zero_block)
    # q8_0 ties: the block's max|x| is 127, so x / d = x, and k + 0.5 rounds away from zero.
    ties = np.tile(np.array([127.0, -127.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5]), K // 8)
    out.append(ties)
    # q4_0: the largest magnitude negative (d > 0); x / d + 8.5 lands on whole numbers.
    negative_max = np.tile(np.array([-8.0, 7.0, -0.5, 0.5, 3.5, -3.5, 6.5, 0.0]), K // 8)
    out.append(negative_max)
    # Two largest magnitudes of opposite signs: the first one found sets the sign of d.
    opposite = rng.uniform(-1, 1, K)
    opposite[0], opposite[5] = 4.0, -4.0
    opposite[32], opposite[40] = -4.0, 4.0
    out.append(opposite)
    # q4_1: min 0 and max 15 make d = 1, so (x - min) / d + 0.5 lands on halves and whole numbers;
    # a block of one value (d = 0, every q = 0, m = the value); a block of negatives only.
    q4_1 = np.tile(np.array([0.0, 15.0, 0.5, 1.5, 7.5, 14.5, 3.0, 9.25]), K // 8)
    q4_1[32:64] = 2.5
    q4_1[64:96] = -rng.uniform(1, 2, 32)
    out.append(q4_1)
    out.append(rng.standard_normal(K) * 1e-6)  # scales below float16's normal range
    out.append(rng.standard_normal(K) * 3e6)   # max|x| / 127 beyond float16's largest value
    return np.stack(out).astype(np.float32)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    x = rows()
    np.save(OUT / "input.npy", x)
    for name, qtype in [("q8_0", GGMLQuantizationType.Q8_0), ("q4_0", GGMLQuantizationType.Q4_0),
                        ("q4_1", GGMLQuantizationType.Q4_1)]:
        with np.errstate(over="ignore"):
            q = quants.quantize(x, qtype)
            deq = quants.dequantize(q, qtype).astype(np.float32)
        np.save(OUT / f"{name}.npy", q.astype(np.uint8))
        np.save(OUT / f"{name}_dequantized.npy", deq)
        print(f"{name}: {q.shape[0]} rows of {q.shape[1]} bytes")


if __name__ == "__main__":
    main()
