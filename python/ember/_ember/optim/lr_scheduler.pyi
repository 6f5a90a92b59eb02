"""Learning-rate schedules (torch.optim.lr_scheduler)"""

from collections.abc import Mapping

import ember._ember
import ember._ember.optim


class LRScheduler:
    def step(self) -> None: ...

    def get_last_lr(self) -> list[float]: ...

    @property
    def last_epoch(self) -> int: ...

    @property
    def base_lrs(self) -> list[float]: ...

    def state_dict(self) -> dict[str, ember._ember.Tensor]: ...

    def load_state_dict(self, state_dict: Mapping[str, ember._ember.Tensor]) -> None: ...

class StepLR(LRScheduler):
    def __init__(self, optimizer: ember._ember.optim.Optimizer, step_size: int, gamma: float = 0.1) -> None: ...

class CosineAnnealingLR(LRScheduler):
    def __init__(self, optimizer: ember._ember.optim.Optimizer, T_max: int, eta_min: float = 0.0) -> None: ...

class LinearLR(LRScheduler):
    def __init__(self, optimizer: ember._ember.optim.Optimizer, start_factor: float = 0.3333333333333333, end_factor: float = 1.0, total_iters: int = 5) -> None: ...

class OneCycleLR(LRScheduler):
    def __init__(self, optimizer: ember._ember.optim.Optimizer, max_lr: float, total_steps: int, pct_start: float = 0.3, anneal_strategy: str = 'cos', cycle_momentum: bool = True, base_momentum: float = 0.85, max_momentum: float = 0.95, div_factor: float = 25.0, final_div_factor: float = 10000.0, three_phase: bool = False) -> None: ...
