"""Optimizer reference data: torch.optim's SGD, Adam, AdamW, Adagrad and RMSprop (foreach=False) over
ten steps with fixed gradients, learning-rate schedulers' sequences, and clip_grad_norm_.

Case kinds read by tests/test_optim.cpp (tensors as in golden_lib.encode):
- "optimizer": {"optimizer", "options" (ember's names: betas are beta1/beta2, flags 0/1), "groups"
  (per-group overrides, one per group; every parameter goes to group param_group[i]), "param_group",
  "params" (initial values), "grads" (per step, per parameter; null = no gradient that step),
  "expected" (the parameters after each step)}.
- "scheduler": {"scheduler", "args", "optimizer", "options", "group_lrs", "steps", "lrs" (get_last_lr()
  after construction and after each step), "momenta" (OneCycleLR: the groups' momentum or beta1 at
  the same points)}.
- "clip": {"params" grads, "has_grad", "max_norm", "norm_type" (number or "inf"), "total_norm",
  "clipped"}.
"""
import numpy as np
import torch

from golden_lib import Recorder, encode

STEPS = 10
SHAPES = [(4, 3), (5,), (2, 2, 3)]


def torch_options(name, options):
    """ember's option names -> torch.optim keyword arguments."""
    kw = dict(options)
    if "beta1" in kw or "beta2" in kw:
        kw["betas"] = (kw.pop("beta1", 0.9), kw.pop("beta2", 0.999))
    for flag in ("nesterov", "amsgrad", "centered"):
        if flag in kw:
            kw[flag] = bool(kw[flag])
    if name in ("SGD", "Adam", "AdamW", "Adagrad", "RMSprop"):
        kw["foreach"] = False
    return kw


OPTIMIZERS = {
    "SGD": torch.optim.SGD,
    "Adam": torch.optim.Adam,
    "AdamW": torch.optim.AdamW,
    "Adagrad": torch.optim.Adagrad,
    "RMSprop": torch.optim.RMSprop,
}


def optimizer_case(rec, rng, name, case_name, options, dtype, groups=None, missing=()):
    """Runs `name` for STEPS steps on three parameters; `missing` lists (step, param) without a grad."""
    torch_dtype = {"float32": torch.float32, "float64": torch.float64}[dtype]
    groups = groups or [{}]
    param_group = [i % len(groups) for i in range(len(SHAPES))]
    params = [torch.from_numpy(rng.uniform(-2, 2, size=s)).to(torch_dtype).requires_grad_() for s in SHAPES]
    initial = [encode(p) for p in params]
    torch_groups = []
    for g, overrides in enumerate(groups):
        torch_groups.append({"params": [p for p, pg in zip(params, param_group) if pg == g],
                             **torch_options(name, overrides)})
    kw = torch_options(name, options)
    opt = OPTIMIZERS[name](torch_groups, **kw)
    grads_per_step, expected = [], []
    for step in range(STEPS):
        row = []
        for i, p in enumerate(params):
            if (step, i) in missing:
                p.grad = None
                row.append(None)
            else:
                g = torch.from_numpy(rng.normal(0, 1, size=p.shape)).to(torch_dtype)
                p.grad = g.clone()
                row.append(encode(g))
        opt.step()
        grads_per_step.append(row)
        expected.append([encode(p) for p in params])
    rec.cases.append({"kind": "optimizer", "name": case_name, "optimizer": name, "options": options,
                      "groups": groups, "param_group": param_group, "dtype": dtype, "params": initial,
                      "grads": grads_per_step, "expected": expected})


def optimizer_cases(rec, rng):
    combos = {
        "SGD": [
            ("plain", {"lr": 0.1}),
            ("momentum", {"lr": 0.05, "momentum": 0.9}),
            ("dampening", {"lr": 0.05, "momentum": 0.9, "dampening": 0.3}),
            ("nesterov", {"lr": 0.05, "momentum": 0.9, "nesterov": 1}),
            ("nesterov_weight_decay", {"lr": 0.05, "momentum": 0.8, "nesterov": 1, "weight_decay": 0.1}),
            ("weight_decay", {"lr": 0.1, "weight_decay": 0.05}),
        ],
        "Adam": [
            ("default", {"lr": 0.01}),
            ("weight_decay", {"lr": 0.01, "weight_decay": 0.1}),
            ("amsgrad", {"lr": 0.02, "amsgrad": 1}),
            ("amsgrad_weight_decay", {"lr": 0.02, "amsgrad": 1, "weight_decay": 0.05, "eps": 1e-6}),
            ("betas", {"lr": 0.01, "beta1": 0.8, "beta2": 0.95, "eps": 1e-4}),
            ("small_beta1", {"lr": 0.01, "beta1": 0.3, "beta2": 0.5}),  # lerp weight 0.7: the other branch
        ],
        "AdamW": [
            ("default", {"lr": 0.01}),
            ("weight_decay", {"lr": 0.01, "weight_decay": 0.3}),
            ("amsgrad", {"lr": 0.02, "amsgrad": 1, "weight_decay": 0.1, "beta1": 0.85}),
        ],
        "Adagrad": [
            ("default", {"lr": 0.1}),
            ("decay", {"lr": 0.1, "lr_decay": 0.05, "weight_decay": 0.1, "initial_accumulator_value": 0.5, "eps": 1e-6}),
        ],
        "RMSprop": [
            ("default", {"lr": 0.01}),
            ("centered", {"lr": 0.01, "centered": 1}),
            ("momentum", {"lr": 0.01, "momentum": 0.9}),
            ("centered_momentum_weight_decay", {"lr": 0.01, "centered": 1, "momentum": 0.5, "weight_decay": 0.1}),
            ("small_alpha", {"lr": 0.01, "alpha": 0.3, "centered": 1, "eps": 1e-5}),
        ],
    }
    for name, entries in combos.items():
        for case_name, options in entries:
            for dtype in ("float32", "float64"):
                optimizer_case(rec, rng, name, f"{name}_{case_name}_{dtype}", options, dtype)
    # Param groups with their own options, and parameters that miss a gradient on some steps (skipped,
    # their state untouched).
    missing = {(0, 1), (3, 1), (4, 0), (7, 2)}
    optimizer_case(rec, rng, "SGD", "SGD_groups_float64", {"lr": 0.1, "momentum": 0.9}, "float64",
                   groups=[{}, {"lr": 0.01, "momentum": 0.5, "nesterov": 1}], missing=missing)
    optimizer_case(rec, rng, "Adam", "Adam_groups_float64", {"lr": 0.01}, "float64",
                   groups=[{"amsgrad": 1}, {"lr": 0.05, "weight_decay": 0.1}], missing=missing)
    optimizer_case(rec, rng, "AdamW", "AdamW_groups_float32", {"lr": 0.01}, "float32",
                   groups=[{}, {"lr": 0.001, "beta1": 0.5}], missing=missing)
    optimizer_case(rec, rng, "Adagrad", "Adagrad_groups_float64", {"lr": 0.1}, "float64",
                   groups=[{}, {"lr_decay": 0.1, "initial_accumulator_value": 1.0}], missing=missing)
    optimizer_case(rec, rng, "RMSprop", "RMSprop_groups_float64", {"lr": 0.01}, "float64",
                   groups=[{"centered": 1}, {"momentum": 0.9, "alpha": 0.9}], missing=missing)


def scheduler_case(rec, case_name, scheduler, args, optimizer, options, group_lrs, steps):
    params = [torch.zeros(2, requires_grad=True) for _ in group_lrs]
    opt = OPTIMIZERS[optimizer]([{"params": [p], "lr": lr} for p, lr in zip(params, group_lrs)],
                                **torch_options(optimizer, options))
    kw = dict(args)
    sched = getattr(torch.optim.lr_scheduler, scheduler)(opt, **kw)
    momentum_key = "betas" if "betas" in opt.defaults else "momentum"

    def momenta():
        if momentum_key == "betas":
            return [g["betas"][0] for g in opt.param_groups]
        return [g.get("momentum", 0.0) for g in opt.param_groups]

    lrs, moms = [sched.get_last_lr()], [momenta()]
    for _ in range(steps):
        opt.step()  # no gradients: nothing moves, but torch wants optimizer.step() before the scheduler's
        sched.step()
        lrs.append(sched.get_last_lr())
        moms.append(momenta())
    entry = {"kind": "scheduler", "name": case_name, "scheduler": scheduler, "args": args, "optimizer": optimizer,
             "options": options, "group_lrs": group_lrs, "steps": steps, "lrs": lrs}
    if scheduler == "OneCycleLR":
        entry["momenta"] = moms
    rec.cases.append(entry)


def scheduler_cases(rec):
    lrs = [0.1, 0.03]
    scheduler_case(rec, "StepLR", "StepLR", {"step_size": 3, "gamma": 0.5}, "SGD", {}, lrs, 12)
    scheduler_case(rec, "StepLR_one", "StepLR", {"step_size": 1, "gamma": 0.9}, "Adam", {}, lrs, 6)
    scheduler_case(rec, "CosineAnnealingLR", "CosineAnnealingLR", {"T_max": 10, "eta_min": 0.001}, "SGD", {}, lrs, 35)
    scheduler_case(rec, "CosineAnnealingLR_zero_min", "CosineAnnealingLR", {"T_max": 7}, "Adam", {}, lrs, 16)
    scheduler_case(rec, "LinearLR_warmup", "LinearLR", {"start_factor": 0.25, "end_factor": 1.0, "total_iters": 4},
                   "SGD", {}, lrs, 8)
    scheduler_case(rec, "LinearLR_decay", "LinearLR", {"start_factor": 1.0, "end_factor": 0.1, "total_iters": 6},
                   "AdamW", {}, lrs, 9)
    scheduler_case(rec, "LinearLR_default", "LinearLR", {}, "SGD", {}, lrs, 7)
    scheduler_case(rec, "OneCycleLR_cos_sgd", "OneCycleLR", {"max_lr": 0.5, "total_steps": 20}, "SGD",
                   {"momentum": 0.9}, lrs, 20)
    scheduler_case(rec, "OneCycleLR_linear_adam", "OneCycleLR",
                   {"max_lr": [0.2, 0.05], "total_steps": 17, "pct_start": 0.25, "anneal_strategy": "linear",
                    "div_factor": 10.0, "final_div_factor": 100.0}, "Adam", {}, lrs, 17)
    scheduler_case(rec, "OneCycleLR_three_phase", "OneCycleLR",
                   {"max_lr": 0.3, "total_steps": 23, "three_phase": True, "base_momentum": 0.8,
                    "max_momentum": 0.9}, "RMSprop", {"momentum": 0.5}, lrs, 23)
    scheduler_case(rec, "OneCycleLR_no_momentum", "OneCycleLR",
                   {"max_lr": 0.3, "total_steps": 12, "cycle_momentum": False, "pct_start": 0.5}, "Adagrad", {}, lrs, 12)


def clip_cases(rec, rng):
    shapes = [(3, 4), (7,), (2, 3, 2), (5,)]
    for dtype, torch_dtype in (("float32", torch.float32), ("float64", torch.float64)):
        for max_norm in (0.5, 1e3):
            for norm_type in (2.0, 1.0, 3.0, "inf"):
                params = [torch.zeros(s, dtype=torch_dtype, requires_grad=True) for s in shapes]
                has_grad = [True, True, False, True]
                grads = []
                for p, has in zip(params, has_grad):
                    g = torch.from_numpy(rng.normal(0, 1, size=p.shape)).to(torch_dtype)
                    grads.append(encode(g))
                    if has:
                        p.grad = g.clone()
                p_value = float("inf") if norm_type == "inf" else norm_type
                total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=p_value)
                clipped = [encode(p.grad) if has else None for p, has in zip(params, has_grad)]
                rec.cases.append({"kind": "clip", "name": f"clip_{dtype}_{max_norm}_{norm_type}", "grads": grads,
                                  "has_grad": has_grad, "max_norm": max_norm, "norm_type": norm_type,
                                  "total_norm": encode(total), "clipped": clipped})


def build():
    rng = np.random.default_rng(20240611)
    rec = Recorder()
    optimizer_cases(rec, rng)
    scheduler_cases(rec)
    clip_cases(rec, rng)
    return rec
