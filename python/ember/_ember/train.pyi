"""
Checkpoints, the model registry, the training step and loop (ember/train.h)
"""

from collections.abc import Callable, Mapping, Sequence

import ember._ember
import ember._ember.models
import ember._ember.nn


class Checkpoint:
    @property
    def path(self) -> str: ...

    @property
    def format(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def quantization(self) -> str: ...

    @property
    def settings(self) -> dict[str, str]: ...

    @property
    def tensors(self) -> dict[str, ember._ember.Tensor]: ...

    def part(self, prefix: str) -> dict[str, ember._ember.Tensor]: ...

    def model_state(self) -> dict[str, ember._ember.Tensor]: ...

def read_checkpoint(path: str, op: str = 'checkpoint', finite: bool = True) -> Checkpoint:
    """
    Reads a checkpoint or model file (safetensors or GGUF, told by its first bytes).
    """

MODEL_PREFIX: str = 'model.'

OPTIMIZER_PREFIX: str = 'optimizer.'

SCHEDULE_PREFIX: str = 'schedule.'

SCALER_PREFIX: str = 'grad_scaler.'

AVERAGE_PREFIX: str = 'ema.'

class LoadedModel:
    @property
    def kind(self) -> str: ...

    @property
    def model(self) -> ember._ember.nn.Module: ...

    @property
    def config(self) -> dict: ...

    @property
    def tokenizer(self) -> ember._ember.models.CharTokenizer | None: ...

    @property
    def context(self) -> int: ...

    @property
    def encoder(self) -> ember._ember.models.SentenceEncoder | None: ...

    @property
    def source(self) -> Checkpoint: ...

def load_model(path: str, kinds: Sequence[str] = [], average: bool = False) -> LoadedModel:
    """
    Rebuilds the model a checkpoint, a GGUF file of `ember quantize` or a sentence-transformers folder holds.
    """

def model_kinds() -> list:
    """The registry's model kinds."""

class TrainingStep:
    """
    One training step: zero_grad, forward and loss (under autocast), backward, clipping, the optimizer's step, optionally compiled.
    """

    def __init__(self, model: ember._ember.nn.Module, optimizer: str = 'adam', lr: float = 0.001, loss: Callable, clip_grad_norm: float = 0.0, amp: str = 'none', compile: bool = False) -> None: ...

    def __call__(self, batch: Sequence[ember._ember.Tensor]) -> list[ember._ember.Tensor]: ...

    def set_lr(self, lr: float) -> None: ...

    def state_dict(self) -> dict[str, ember._ember.Tensor]:
        """The optimizer's state (as a checkpoint's optimizer. part holds it)."""

    def load_checkpoint(self, checkpoint: Checkpoint) -> None:
        """
        Restores the model, the optimizer (and scaler) from a training checkpoint.
        """

    def save_checkpoint(self, path: str, settings: Mapping[str, str] = {}) -> None: ...

class Run:
    """
    A run of `ember train` (a task and its loop): run() trains and returns the summary.
    """

    def run(self, on_progress: Callable | None = None) -> dict: ...

    @property
    def first_step(self) -> int: ...

    def sample(self, tokens: int = 300) -> str: ...

def text_run(model: str = 'gpt', layers: int = 0, heads: int = 0, dim: int = 0, context: int = 0, batch_size: int = 0, steps: int = 0, lr: float = 0.0, warmup: int = -1, seed: int = 1337, data: str = 'data/shakespeare/input.txt', eval_every: int = 0, eval_batches: int = 0, amp: str = 'none', compile: bool = False, stop_after: int = 0, save: str = '', resume: str = '') -> Run:
    """
    `ember train gpt|ssm` as a run: the CLI's options and defaults (0 or -1: the default); resume continues a checkpoint the CLI or Python wrote.
    """

def mnist_run(model: str = 'cnn', epochs: int = 10, batch_size: int = 64, optimizer: str = 'adam', lr: float | None = None, schedule: str = 'cosine', shift: int = 2, seed: int = 0, data: str = 'data/mnist', amp: str = 'none', compile: bool = False, stop_after: int = 0, save: str = '', resume: str = '') -> Run:
    """`ember train mnist` as a run (its options and defaults)."""
