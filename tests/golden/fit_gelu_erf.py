"""The coefficients of the CPU kernels' erf for GELU (src/kernels/cpu/functors-inl.h, Note [GELU's erf]).

erf(x) ~ x P(x^2) / Q(x^2) on [0, 3.92], P of degree 5, Q of degree 5 with Q(0) = 1: a rational fit
of least maximum absolute error, found by Lawson's iteration (weighted least squares whose weights grow
where the error is largest) on the linearized residual x P(u) - erf(x) Q(u), re-weighted by 1/Q from
the last step. Past 3.92 erf is 1 within 2.4e-8, which the kernel returns. Prints the coefficients
as float32 literals and the float32 evaluation's worst absolute error (with fused multiply-adds, as
the kernels evaluate them).

    .venv/bin/python tests/golden/fit_gelu_erf.py
"""

import math

import numpy as np

CLAMP = 3.92
P_DEGREE = 5
Q_DEGREE = 5


def fit(p_degree: int, q_degree: int, clamp: float, iterations: int = 60):
    # A dense grid, denser near the end of the range (Chebyshev-like), where the error peaks.
    x = np.unique(np.concatenate([np.linspace(0, clamp, 20000)[1:],
                                  clamp * (1 - np.cos(np.linspace(0, np.pi / 2, 4000)))[1:]]))
    u = x * x
    f = np.array([math.erf(v) for v in x])
    weights = np.ones_like(x)
    q_values = np.ones_like(x)
    best = None
    for _ in range(iterations):
        a_columns = x[:, None] * u[:, None] ** np.arange(p_degree + 1)
        b_columns = -(f[:, None] * u[:, None] ** np.arange(1, q_degree + 1))
        matrix = np.concatenate([a_columns, b_columns], axis=1)
        scale = np.sqrt(weights) / q_values
        solution, *_ = np.linalg.lstsq(matrix * scale[:, None], f * scale, rcond=None)
        p = solution[:p_degree + 1]
        q = np.concatenate([[1.0], solution[p_degree + 1:]])
        q_values = np.polyval(q[::-1], u)
        error = x * np.polyval(p[::-1], u) / q_values - f
        worst = np.abs(error).max()
        if best is None or worst < best[0]:
            best = (worst, p.copy(), q.copy())
        weights = weights * (np.abs(error) / worst + 1e-3)
        weights /= weights.max()
    return best


def float32_error(p: np.ndarray, q: np.ndarray, clamp: float) -> float:
    """Worst |erf - kernel| over [-4.5, 4.5] in float32 with fused multiply-adds."""
    def f32(v):
        return np.asarray(v, dtype=np.float64).astype(np.float32)

    def fma(a, b, c):
        return f32(a.astype(np.float64) * b.astype(np.float64) + np.float64(c))

    xs = np.linspace(-4.5, 4.5, 2000001).astype(np.float32)
    want = np.array([math.erf(v) for v in xs.astype(np.float64)])
    ax = np.minimum(np.abs(xs), np.float32(clamp))
    u = f32(ax.astype(np.float64) ** 2)
    p32, q32 = p.astype(np.float32), q.astype(np.float32)
    pv = np.full_like(u, p32[-1])
    for c in p32[-2::-1]:
        pv = fma(pv, u, c)
    qv = np.full_like(u, q32[-1])
    for c in q32[-2::-1]:
        qv = fma(qv, u, c)
    got = np.minimum(f32(f32(ax.astype(np.float64) * pv) / qv.astype(np.float64)), np.float32(1))
    got = np.where(ax >= np.float32(clamp), np.float32(1), got)
    got = np.copysign(got, xs)
    return float(np.abs(got.astype(np.float64) - want).max())


def main() -> None:
    worst, p, q = fit(P_DEGREE, Q_DEGREE, CLAMP)
    print(f"fit's worst absolute error (float64): {worst:.3g}")
    print("P (u^0 first):", ", ".join(f"{v!r}f" for v in p.astype(np.float32).tolist()))
    print("Q (u^0 first):", ", ".join(f"{v!r}f" for v in q.astype(np.float32).tolist()))
    print(f"float32 evaluation's worst absolute error: {float32_error(p, q, CLAMP):.3g}")


if __name__ == "__main__":
    main()
