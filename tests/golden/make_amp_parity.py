"""Reference runs for tests/test_amp.cpp, made by PyTorch's CPU autocast and GradScaler.

    .venv/bin/python tests/golden/make_amp_parity.py   # after make_parity.py (reuses its data)

1. The default CNN of `ember train mnist`, from make_parity.py's initial weights and batch order,
   trains 50 steps with SGD-momentum (lr 0.01, 0.9) under torch.autocast("cpu", torch.bfloat16):
   the per-step losses and the final weights go to parity/amp.json and cnn_amp_bf16_final.safetensors.
2. GradScaler's schedule: a Linear(4, 3) trained 12 steps with SGD under GradScaler(init_scale=1024,
   growth_interval=3); the gradients of steps 2, 3 and 8 are made Inf or NaN (the loss times inf or
   nan). Per step: the scale used, whether the optimizer stepped; the final weights.
"""
import json
import os

import torch
from safetensors.torch import load_file, save_file

from make_parity import OUT, load_train_split, make_model

STEPS = 50


def cnn_autocast(x, y, batches):
    model = make_model("cnn")
    model.load_state_dict(load_file(os.path.join(OUT, "cnn_init.safetensors")))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for b in batches[:STEPS]:
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(x[b])
            loss = torch.nn.functional.cross_entropy(logits, y[b])
        assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
        loss.backward()
        opt.step()
        losses.append(loss.item())
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              os.path.join(OUT, "cnn_amp_bf16_final.safetensors"))
    return losses


def scaler_schedule():
    torch.manual_seed(5)
    model = torch.nn.Linear(4, 3)
    init = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=3)
    x = torch.linspace(-1, 1, 8 * 4).reshape(8, 4)
    target = torch.linspace(0, 1, 8 * 3).reshape(8, 3)
    poison = {2: float("inf"), 3: float("nan"), 8: float("inf")}
    scales, stepped = [], []
    for step in range(12):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), target)
        if step in poison:
            loss = loss * poison[step]
        scales.append(scaler.get_scale())
        scaler.scale(loss).backward()
        before = model.weight.detach().clone()
        scaler.step(opt)
        stepped.append(not torch.equal(before, model.weight.detach()))
        scaler.update()
    return {"init": {k: v.flatten().tolist() for k, v in init.items()},
            "final": {k: v.flatten().tolist() for k, v in model.state_dict().items()},
            "x": x.flatten().tolist(), "target": target.flatten().tolist(),
            "poison": {str(k): str(v) for k, v in poison.items()},
            "scales": scales, "stepped": stepped, "final_scale": scaler.get_scale(),
            "growth_tracker": scaler.state_dict()["_growth_tracker"]}


def main():
    torch.set_num_threads(2)
    x, y = load_train_split()
    with open(os.path.join(OUT, "parity.json")) as f:
        batches = [torch.tensor(b) for b in json.load(f)["models"]["cnn"]["batches"]]
    result = {"cnn_bf16": {"steps": STEPS, "lr": 0.01, "momentum": 0.9, "losses": cnn_autocast(x, y, batches)},
              "scaler": scaler_schedule()}
    with open(os.path.join(OUT, "amp.json"), "w") as f:
        json.dump(result, f)
    print("losses", result["cnn_bf16"]["losses"][:3], "...", result["cnn_bf16"]["losses"][-1])
    print("scales", result["scaler"]["scales"], "stepped", result["scaler"]["stepped"])


if __name__ == "__main__":
    main()
