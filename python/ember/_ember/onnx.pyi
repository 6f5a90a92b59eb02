"""ONNX import (ember/onnx.h)"""

from collections.abc import Mapping, Sequence

import ember._ember
import ember._ember.nn


class Model(ember._ember.nn.Module):
    @property
    def input_names(self) -> list[str]: ...

    @property
    def output_names(self) -> list[str]: ...

    def run(self, inputs: Mapping[str, ember._ember.Tensor]) -> dict[str, ember._ember.Tensor]:
        """Inference (compiled): a dict of inputs by name -> outputs by name."""

    def __call__(self, inputs: Sequence[ember._ember.Tensor]) -> list[ember._ember.Tensor]:
        """Eager, with autograd (fine-tuning): the outputs in order."""

    def explain(self) -> str: ...

def load(path: str, trainable: bool = True, compile: bool = True) -> Model: ...
