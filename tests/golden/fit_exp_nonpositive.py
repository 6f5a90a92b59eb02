"""The coefficients of the CPU kernels' exp of x <= 0 (src/kernels/cpu/exp_nonpositive-inl.h, Note
[attention exp]).

x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2 (a little more after rounding), and
e^r ~ 1 + r + c2 r^2 + ... + c6 r^6: the first two terms fixed (so e^0 is exactly 1 and small r keep
their bits), c2..c6 of least maximum relative error on that interval, found by Lawson's iteration
(weighted least squares whose weights grow where the error is largest). Prints the coefficients as
float32 literals, the fit's worst relative error, and the worst error of the float32 evaluation (with
fused multiply-adds, as the kernels evaluate it) over [-87.3, 0] in units of the result's last place,
beside the degree-6 Taylor polynomial's.

    .venv/bin/python tests/golden/fit_exp_nonpositive.py
"""

import math

import numpy as np

DEGREE = 6
HALF_RANGE = math.log(2) / 2 * 1.0001


def fit(degree: int, half_range: float, iterations: int = 80):
    r = np.concatenate([np.linspace(-half_range, half_range, 20001),
                        half_range * np.cos(np.linspace(0, np.pi, 4001))])
    f = np.exp(r)
    columns = r[:, None] ** np.arange(2, degree + 1)
    target = f - 1 - r
    weights = np.ones_like(r)
    best = None
    for _ in range(iterations):
        scale = np.sqrt(weights) / f
        solution, *_ = np.linalg.lstsq(columns * scale[:, None], target * scale, rcond=None)
        error = (1 + r + columns @ solution) / f - 1
        worst = np.abs(error).max()
        if best is None or worst < best[0]:
            best = (worst, solution.copy())
        weights = weights * (np.abs(error) / worst + 1e-3)
        weights /= weights.max()
    return best


def f32(v):
    return np.asarray(v, dtype=np.float64).astype(np.float32)


def fma(a, b, c):
    # float32 operands: a * b is exact in float64, so this rounds once, as a fused multiply-add does.
    return f32(np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64))


def float32_ulp_error(coefficients) -> float:
    """Worst |kernel - e^x| in units of the last place of e^x, over [-87.3, 0] in float32."""
    xs = np.concatenate([np.linspace(-87.3, 0, 4000001), -np.logspace(-30, 1, 100001)]).astype(np.float32)
    n = np.round(f32(xs.astype(np.float64) * np.float32(1.44269504088896341)))
    r = fma(n, np.float32(-0.693359375), xs)
    r = fma(n, np.float32(2.12194440e-4), r)
    c = [np.float32(v) for v in coefficients]  # c6 first, down to c0
    p = np.full_like(r, c[0])
    for v in c[1:]:
        p = fma(p, r, v)
    got = f32(p.astype(np.float64) * np.exp2(n.astype(np.float64)))
    want = np.exp(xs.astype(np.float64))
    ulp = np.spacing(want.astype(np.float32)).astype(np.float64)
    return float((np.abs(got.astype(np.float64) - want) / ulp).max())


def main() -> None:
    worst, c = fit(DEGREE, HALF_RANGE)
    print(f"fit's worst relative error (float64): {worst:.3g}")
    literals = [float(v) for v in np.float32(c[::-1])]
    print("c6 .. c2:", ", ".join(f"{v!r}f" for v in literals))
    print(f"float32 evaluation's worst error: {float32_ulp_error(literals + [1.0, 1.0]):.2f} ulp")
    taylor = [1 / math.factorial(k) for k in range(DEGREE, -1, -1)]
    print(f"the degree-{DEGREE} Taylor polynomial's: {float32_ulp_error(taylor):.2f} ulp")


if __name__ == "__main__":
    main()
