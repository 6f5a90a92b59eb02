"""Reference run for the GPT training parity test (tests/test_gpt.cpp): PyTorch trains a small
nanoGPT (2 layers, 2 heads, 32 dims, context 16, Shakespeare's 84 characters) for 50 steps with
nanoGPT's recipe (AdamW with weight decay on the 2-D weights only, betas (0.9, 0.99), gradient
clipping at 1.0, linear warmup then cosine decay) and dropout 0, on batches drawn from the
Shakespeare text. The C++ test loads the same initial weights, replays the same batches in ember
and compares every step's loss and the final weights.

    .venv/bin/python tests/golden/make_gpt_parity.py   # needs data/shakespeare/input.txt (scripts/setup)

Writes tests/golden/gpt_parity.safetensors: init.<name> and final.<name> for every parameter
(nanoGPT's names; lm_head.weight is tied to transformer.wte.weight and not stored), inputs and
targets (steps, batch, context) int64, losses and lrs (steps) float64, and the config in the metadata.
"""
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CONFIG = dict(vocab_size=84, block_size=16, n_layer=2, n_head=2, n_embd=32)
STEPS, BATCH = 50, 4
LR, MIN_LR, WARMUP, WEIGHT_DECAY, CLIP = 1e-3, 1e-4, 5, 0.1, 1.0


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head = c["n_head"]
        self.c_attn = nn.Linear(c["n_embd"], 3 * c["n_embd"])
        self.c_proj = nn.Linear(c["n_embd"], c["n_embd"])

    def forward(self, x):
        b, t, ch = x.shape
        q, k, v = self.c_attn(x).split(ch, dim=2)
        q, k, v = (z.view(b, t, self.n_head, ch // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, ch))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"])
        self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"])

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c["n_embd"])
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c["n_embd"])
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab_size"], c["n_embd"]), wpe=nn.Embedding(c["block_size"], c["n_embd"]),
            h=nn.ModuleList([Block(c) for _ in range(c["n_layer"])]), ln_f=nn.LayerNorm(c["n_embd"])))
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * c["n_layer"]))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(t))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def lr_at(step):
    """nanoGPT's get_lr: linear warmup, then cosine decay to MIN_LR at the last step."""
    if step < WARMUP:
        return LR * (step + 1) / (WARMUP + 1)
    ratio = (step - WARMUP) / (STEPS - WARMUP)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def main():
    torch.manual_seed(1234)
    with open(os.path.join(ROOT, "data", "shakespeare", "input.txt"), "rb") as f:
        text = f.read()
    vocabulary = sorted(set(text))
    assert len(vocabulary) == CONFIG["vocab_size"]
    index = {b: i for i, b in enumerate(vocabulary)}
    data = np.array([index[b] for b in text[:200_000]], dtype=np.int64)
    rng = np.random.default_rng(7)
    t = CONFIG["block_size"]
    starts = rng.integers(0, len(data) - t - 1, size=(STEPS, BATCH))
    inputs = torch.from_numpy(np.stack([[data[s:s + t] for s in row] for row in starts]))
    targets = torch.from_numpy(np.stack([[data[s + 1:s + 1 + t] for s in row] for row in starts]))

    model = GPT(CONFIG)
    init = {f"init.{k}": v.detach().clone() for k, v in model.named_parameters()}
    params = dict(model.named_parameters())
    groups = [{"params": [p for p in params.values() if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
              {"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.99), foreach=False)
    losses, lrs = [], []
    for step in range(STEPS):
        lr = lr_at(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss = model(inputs[step], targets[step])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        losses.append(loss.item())
        lrs.append(lr)
    final = {f"final.{k}": v.detach().clone() for k, v in model.named_parameters()}
    tensors = {**init, **final, "inputs": inputs.contiguous(), "targets": targets.contiguous(),
               "losses": torch.tensor(losses, dtype=torch.float64), "lrs": torch.tensor(lrs, dtype=torch.float64)}
    metadata = {k: str(v) for k, v in CONFIG.items()}
    metadata.update(steps=str(STEPS), batch=str(BATCH), weight_decay=str(WEIGHT_DECAY), clip=str(CLIP),
                    generator=f"torch {torch.__version__}")
    path = os.path.join(HERE, "gpt_parity.safetensors")
    save_file(tensors, path, metadata=metadata)
    print(f"{path}: losses {losses[0]:.4f} -> {losses[-1]:.4f}")


if __name__ == "__main__":
    main()
