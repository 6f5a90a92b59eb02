"""ember.optim: the fused optimizers (SGD, Adam, AdamW, Adagrad, RMSprop) and lr_scheduler."""

from .. import _ember
from . import lr_scheduler  # noqa: F401

globals().update({k: v for k, v in vars(_ember.optim).items() if not k.startswith("__") and k != "lr_scheduler"})

__all__ = [k for k in vars(_ember.optim) if not k.startswith("_")]
