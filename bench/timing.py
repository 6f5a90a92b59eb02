"""How the benchmark times a peer's callable: the same procedure as `ember bench`
(apps/ember/bench.cpp's measure() and measure_latency()). Standard library only, so that
bench/run.py's self-test can check it without NumPy or PyTorch."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Optional


@dataclass
class TimingPolicy:
    sample_seconds: float = 0.02
    budget_seconds: float = 3.0
    repeats: int = 5
    long_call_seconds: float = 1.0  # a call at least this long is timed once (as ember bench does)
    # A warm-up call at least this long is the one sample (ember bench --cold-call): a first call's
    # extra costs are a fraction of a percent of a training run of tens of seconds.
    cold_call_seconds: float = 10.0


@dataclass
class Timing:
    median_s: float
    min_s: float
    max_s: float
    samples: int
    iterations: int

    def long_call(self, policy: TimingPolicy) -> bool:
        """Whether this was one call long enough to be its own warm-up next time."""
        return self.samples == 1 and self.iterations == 1 and self.median_s >= policy.long_call_seconds


def _time_calls(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def measure(fn: Callable[[], object], policy: TimingPolicy, warmup: Optional[Callable[[], object]] = None,
            warm: bool = True) -> Timing:
    """The same procedure as ember bench (apps/ember/bench.cpp's measure()); warm=False skips the
    untimed first call, as `ember bench --no-warmup` does."""
    if warm and warmup is not None:
        warmup()
    elif warm:
        first = _time_calls(fn, 1)
        if first >= policy.cold_call_seconds:
            return Timing(first, first, first, 1, 1)
    # Calibration: the calls per sample grow until a sample lasts sample_seconds.
    iterations = 1
    while True:
        sample_cost = _time_calls(fn, iterations) * iterations
        if sample_cost >= policy.sample_seconds:
            break
        growth = min(max(1.2 * policy.sample_seconds / max(sample_cost, 1e-9), 2.0), 10.0)
        iterations = math.ceil(iterations * growth)
    if iterations == 1 and sample_cost >= policy.long_call_seconds:
        return Timing(sample_cost, sample_cost, sample_cost, 1, 1)
    samples = min(max(int(policy.budget_seconds / sample_cost), 1), policy.repeats)
    per_call = sorted(_time_calls(fn, iterations) for _ in range(samples))
    n = len(per_call)
    median = per_call[n // 2] if n % 2 else 0.5 * (per_call[n // 2 - 1] + per_call[n // 2])
    return Timing(median, per_call[0], per_call[-1], samples, iterations)


def latency(fn: Callable[[], object], seconds: float,
            warmup: Optional[Callable[[], object]] = None) -> tuple[float, float, float]:
    """The same procedure as ember bench --latency: single calls, each timed on its own, for about
    `seconds` (at least 5, at most 5000), after the warm-up. Returns (median, mean, p99)."""
    (warmup or fn)()
    calls = []
    deadline = time.perf_counter() + seconds
    while len(calls) < 5 or (len(calls) < 5000 and time.perf_counter() < deadline):
        start = time.perf_counter()
        fn()
        calls.append(time.perf_counter() - start)
    calls.sort()
    n = len(calls)
    median = calls[n // 2] if n % 2 else 0.5 * (calls[n // 2 - 1] + calls[n // 2])
    return median, sum(calls) / n, calls[min(n - 1, math.ceil(0.99 * n) - 1)]
