"""ember.autograd: backward, grad, gradcheck, and anomaly detection (torch.autograd)."""

import contextlib as _contextlib

from . import _ember

backward = _ember.autograd.backward
grad = _ember.autograd.grad
gradcheck = _ember.autograd.gradcheck


class detect_anomaly(_contextlib.ContextDecorator):
    """Inside, a NaN or Inf produced in backward raises an error naming the op that made it."""

    def __init__(self) -> None:
        self._guards: list = []

    def __enter__(self) -> None:
        self._guards.append(_ember.autograd._AnomalyGuard())

    def __exit__(self, *exc) -> None:
        self._guards.pop()


__all__ = ["backward", "grad", "gradcheck", "detect_anomaly"]
