"""ember.optim: the fused optimizers (SGD, Adam, AdamW, Adagrad, RMSprop) and lr_scheduler."""

from .. import _ember

globals().update({k: v for k, v in vars(_ember.optim).items() if not k.startswith("__")})

__all__ = [k for k in vars(_ember.optim) if not k.startswith("_")]
