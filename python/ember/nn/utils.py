"""ember.nn.utils: gradient clipping (torch.nn.utils)."""

from .. import _ember

clip_grad_norm_ = _ember.optim.clip_grad_norm_
