"""ember.optim.lr_scheduler: StepLR, CosineAnnealingLR, LinearLR, OneCycleLR (torch.optim.lr_scheduler)."""

from .. import _ember

globals().update({k: v for k, v in vars(_ember.optim.lr_scheduler).items() if not k.startswith("__")})

__all__ = [k for k in vars(_ember.optim.lr_scheduler) if not k.startswith("_")]
