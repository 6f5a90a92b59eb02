"""Gradients: backward, grad, gradcheck"""

from collections.abc import Callable, Sequence

import ember._ember


class _AnomalyGuard:
    def __init__(self) -> None: ...

def backward(tensors: Sequence[ember._ember.Tensor], grad_tensors: Sequence[ember._ember.Tensor] = [], retain_graph: bool = False) -> None: ...

def grad(outputs: Sequence[ember._ember.Tensor], inputs: Sequence[ember._ember.Tensor], grad_outputs: Sequence[ember._ember.Tensor] | None = None, retain_graph: bool = False, allow_unused: bool = False) -> list[ember._ember.Tensor | None]: ...

def gradcheck(func: Callable, inputs: Sequence[ember._ember.Tensor], eps: float = 1e-06, atol: float = 1e-05, rtol: float = 0.001) -> bool:
    """
    Compares the gradients of func (a tensor-valued function of the inputs) with central differences (use float64 inputs); raises ember.Error naming the first mismatch.
    """
