"""ember.nn.functional: the layers' functions (torch.nn.functional), each one ember op."""

from .. import _ember

globals().update({k: v for k, v in vars(_ember.functional).items() if not k.startswith("__")})

__all__ = [k for k in vars(_ember.functional) if not k.startswith("_")]
