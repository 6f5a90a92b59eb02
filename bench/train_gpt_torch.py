"""`ember train gpt` in PyTorch, for the comparison in docs/performance.md: the same model (nanoGPT,
tests/golden/make_gpt_parity.py's GPT), the same recipe (AdamW on nanoGPT's decay groups, betas
(0.9, 0.99), clipping at 1, warmup then cosine to lr/10), the same character split and the same
batches (apps/ember/train_gpt.cpp's splitmix64 windows), the same evaluation (the mean loss of
--eval-batches fixed batches per split). Prints one JSON line like `ember train gpt --json`.

    .venv/bin/python bench/train_gpt_torch.py [--layers 4 --heads 4 --dim 128 --context 64 --batch-size 12
                                               --steps 2000 --lr 1e-3 --warmup 100 --eval-batches 20]
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))
from make_gpt_parity import GPT  # noqa: E402

MASK = (1 << 64) - 1


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


class Split:
    """data::TextSplit: the first 90% of the tokens train, the rest validate; windows at splitmix64 offsets."""

    def __init__(self, tokens):
        self.tokens = tokens
        self.train_end = int(len(tokens) * 0.9)

    def batch(self, name, batch, context, state):
        begin, end = (0, self.train_end) if name == "train" else (self.train_end, len(self.tokens))
        starts = []
        for _ in range(batch):
            state, r = splitmix64(state)
            starts.append(begin + r % (end - begin - context))
        x = np.stack([self.tokens[s:s + context] for s in starts])
        y = np.stack([self.tokens[s + 1:s + 1 + context] for s in starts])
        return torch.from_numpy(x), torch.from_numpy(y), state


def main():
    p = argparse.ArgumentParser()
    for name, default in (("layers", 4), ("heads", 4), ("dim", 128), ("context", 64), ("batch-size", 12),
                          ("steps", 2000), ("warmup", 100), ("eval-batches", 20), ("seed", 1337), ("threads", 2)):
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--data", default=os.path.join(ROOT, "data", "shakespeare", "input.txt"))
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    text = open(a.data, "rb").read()
    vocabulary = sorted(set(text))
    lookup = np.zeros(256, dtype=np.int64)
    lookup[vocabulary] = np.arange(len(vocabulary))
    split = Split(lookup[np.frombuffer(text, dtype=np.uint8)])
    model = GPT(dict(vocab_size=len(vocabulary), block_size=a.context, n_layer=a.layers, n_head=a.heads,
                     n_embd=a.dim))
    params = dict(model.named_parameters())
    optimizer = torch.optim.AdamW([{"params": [q for q in params.values() if q.dim() >= 2], "weight_decay": 0.1},
                                   {"params": [q for q in params.values() if q.dim() < 2], "weight_decay": 0.0}],
                                  lr=a.lr, betas=(0.9, 0.99))

    def lr_at(step):
        min_lr = a.lr / 10
        if step < a.warmup:
            return a.lr * (step + 1) / (a.warmup + 1)
        ratio = min(1.0, (step - a.warmup) / max(a.steps - a.warmup, 1))
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - min_lr)

    def estimate(name, seed):
        model.eval()
        state, total = seed, 0.0
        with torch.no_grad():
            for _ in range(a.eval_batches):
                x, y, state = split.batch(name, a.batch_size, a.context, state)
                total += model(x, y).item()
        model.train()
        return total / a.eval_batches

    state = a.seed
    train_seconds = 0.0
    for step in range(a.steps):
        started = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        x, y, state = split.batch("train", a.batch_size, a.context, state)
        loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss.item()
        train_seconds += time.perf_counter() - started
    result = {"task": "gpt", "peer": f"torch {torch.__version__}", "steps": a.steps,
              "train_loss": estimate("train", a.seed + 1), "val_loss": estimate("val", a.seed + 2),
              "train_seconds": train_seconds,
              "tokens_per_second": a.steps * a.batch_size * a.context / train_seconds}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
