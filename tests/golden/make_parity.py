"""Reference runs for the training parity test (tests/test_parity.cpp): PyTorch trains the MLP and
the default CNN of `ember train mnist` for 50 steps with SGD-momentum and with Adam on the offline
MNIST split, from saved initial weights and a saved batch order. The C++ test replays the same
batches in ember and compares every step's loss and the final weights.

    .venv/bin/python tests/golden/make_parity.py     # needs data/mnist/mnist_5k.csv.gz (scripts/setup)

Writes tests/golden/parity/: <model>_init.safetensors, <model>_<optimizer>_final.safetensors and
parity.json (batch indices into the training split, per-step losses, hyper-parameters).
"""
import gzip
import json
import os

import numpy as np
import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "parity")
STEPS = 50
BATCH = 64
MEAN, STD = 0.1307, 0.3081


def load_train_split():
    """The fixed split: rows are sorted by label; per digit the first 400 rows are training."""
    with gzip.open(os.path.join(ROOT, "data", "mnist", "mnist_5k.csv.gz"), "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.int64)
    pixels, labels = rows[:, :784], rows[:, 784]
    train = np.concatenate([np.flatnonzero(labels == d)[:400] for d in range(10)])
    x = torch.from_numpy(pixels[train].astype(np.float32)).reshape(-1, 1, 28, 28)
    x = (x / 255.0 - MEAN) / STD
    return x, torch.from_numpy(labels[train])


def make_model(name):
    if name == "mlp":
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 128), torch.nn.ReLU(),
                                   torch.nn.Linear(128, 10))
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(512, 10))


OPTIMIZERS = {
    "sgd_momentum": (lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9), {"lr": 0.01, "momentum": 0.9}),
    "adam": (lambda p: torch.optim.Adam(p, lr=1e-3), {"lr": 1e-3}),
}


def main():
    torch.set_num_threads(2)
    x, y = load_train_split()
    os.makedirs(OUT, exist_ok=True)
    result = {"steps": STEPS, "batch_size": BATCH, "models": {}}
    for seed, model_name in enumerate(["mlp", "cnn"]):
        torch.manual_seed(100 + seed)
        init = make_model(model_name)
        save_file({k: v.contiguous() for k, v in init.state_dict().items()},
                  os.path.join(OUT, f"{model_name}_init.safetensors"))
        g = torch.Generator().manual_seed(200 + seed)
        batches = [torch.randperm(len(x), generator=g)[:BATCH] for _ in range(STEPS)]
        entry = {"batches": [b.tolist() for b in batches], "optimizers": {}}
        for opt_name, (make_opt, hyper) in OPTIMIZERS.items():
            model = make_model(model_name)
            model.load_state_dict(init.state_dict())
            opt = make_opt(model.parameters())
            losses = []
            for b in batches:
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x[b]), y[b])
                loss.backward()
                opt.step()
                losses.append(loss.item())
            save_file({k: v.contiguous() for k, v in model.state_dict().items()},
                      os.path.join(OUT, f"{model_name}_{opt_name}_final.safetensors"))
            entry["optimizers"][opt_name] = {"hyper": hyper, "losses": losses}
        result["models"][model_name] = entry
    with open(os.path.join(OUT, "parity.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
