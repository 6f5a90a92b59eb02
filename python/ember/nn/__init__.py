"""ember.nn: Module (subclass it as torch.nn.Module), Parameter, the layers, nn.functional, nn.init."""

import importlib as _importlib

from .. import _ember

globals().update({k: v for k, v in vars(_ember.nn).items() if not k.startswith("__")})
functional = _ember.functional
init = _ember.nn.init
utils = _importlib.import_module(".utils", __name__)

__all__ = [k for k in vars(_ember.nn) if not k.startswith("_")] + ["functional", "utils"]
