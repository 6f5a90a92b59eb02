"""ember.data: MNIST, TensorDataset and the DataLoader with its background worker."""

from . import _ember

globals().update({k: v for k, v in vars(_ember.data).items() if not k.startswith("__")})

__all__ = [k for k in vars(_ember.data) if not k.startswith("_")]
