"""ember.nn: Module (subclass it as torch.nn.Module), Parameter, the layers, nn.functional, nn.init."""

from .. import _ember
from . import functional, init, utils  # noqa: F401

globals().update({k: v for k, v in vars(_ember.nn).items() if not k.startswith("__") and k != "init"})

__all__ = [k for k in vars(_ember.nn) if not k.startswith("_")] + ["functional", "utils"]
