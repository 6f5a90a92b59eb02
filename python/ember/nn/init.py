"""ember.nn.init: in-place parameter initialization (torch.nn.init)."""

from .. import _ember

globals().update({k: v for k, v in vars(_ember.nn.init).items() if not k.startswith("__")})

__all__ = [k for k in vars(_ember.nn.init) if not k.startswith("_")]
