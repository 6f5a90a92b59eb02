"""Reference run for the Mamba training parity test (tests/test_mamba.cpp): PyTorch trains a small
Mamba language model (2 layers, d_model 32, d_state 16, d_conv 4, expand 2, Shakespeare's 84
characters, context 24) for 30 steps with the GPT's recipe (AdamW, decay on the 2-D weights but
A_log, betas (0.9, 0.99), clipping at 1.0, warmup then cosine decay) on batches drawn from the
Shakespeare text. The model is the reference implementation's (mamba_ssm's Mamba, Block with
RMSNorm and MambaLMHeadModel with the tied output) written in plain PyTorch, with its selective
scan as a sequential loop (selective_scan_ref's recurrence). The C++ test loads the same initial
weights, replays the same batches in ember and compares every step's loss, the first step's
gradients and the final weights.

    .venv/bin/python tests/golden/make_mamba_parity.py   # needs data/shakespeare/input.txt (scripts/setup)

Writes tests/golden/mamba_parity.safetensors: init.<name>, grad.<name> (step 0) and final.<name> for
every parameter (the reference's names; lm_head.weight is tied to backbone.embedding.weight and not
stored), inputs and targets (steps, batch, context) int64, losses and lrs (steps) float64, and the
config in the metadata.
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
CONFIG = dict(vocab_size=84, d_model=32, n_layer=2, d_state=16, d_conv=4, expand=2, context=24)
STEPS, BATCH = 30, 4
LR, MIN_LR, WARMUP, WEIGHT_DECAY, CLIP = 3e-3, 3e-4, 3, 0.1, 1.0


def selective_scan(u, delta, A, B, C):
    """u, delta (b, d, l); A (d, n); B, C (b, n, l): h_t = exp(delta_t A) h_t-1 + delta_t u_t B_t, y_t = C_t . h_t."""
    b, d, length = u.shape
    h = u.new_zeros(b, d, A.shape[1])
    ys = []
    for t in range(length):
        dt = delta[:, :, t].unsqueeze(-1)
        h = torch.exp(dt * A) * h + dt * u[:, :, t].unsqueeze(-1) * B[:, :, t].unsqueeze(1)
        ys.append((h * C[:, :, t].unsqueeze(1)).sum(-1))
    return torch.stack(ys, dim=2)


class Mixer(nn.Module):
    def __init__(self, c):
        super().__init__()
        d_inner, self.d_state = c["expand"] * c["d_model"], c["d_state"]
        self.dt_rank = math.ceil(c["d_model"] / 16)
        self.in_proj = nn.Linear(c["d_model"], 2 * d_inner, bias=False)
        self.conv1d = nn.Conv1d(d_inner, d_inner, c["d_conv"], groups=d_inner, padding=c["d_conv"] - 1)
        self.x_proj = nn.Linear(d_inner, self.dt_rank + 2 * self.d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, d_inner, bias=True)
        std = self.dt_rank ** -0.5
        nn.init.uniform_(self.dt_proj.weight, -std, std)
        dt = torch.exp(torch.rand(d_inner) * (math.log(0.1) - math.log(0.001)) + math.log(0.001)).clamp(min=1e-4)
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))
        self.dt_proj.bias._no_reinit = True
        A = torch.arange(1, self.d_state + 1, dtype=torch.float32).repeat(d_inner, 1)
        self.A_log = nn.Parameter(torch.log(A))
        self.D = nn.Parameter(torch.ones(d_inner))
        self.out_proj = nn.Linear(d_inner, c["d_model"], bias=False)

    def forward(self, hidden):
        length = hidden.shape[1]
        x, z = self.in_proj(hidden).chunk(2, dim=-1)
        x = F.silu(self.conv1d(x.transpose(1, 2))[..., :length])
        dt, B, C = self.x_proj(x.transpose(1, 2)).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        delta = F.softplus(self.dt_proj(dt)).transpose(1, 2)
        y = selective_scan(x, delta, -torch.exp(self.A_log), B.transpose(1, 2), C.transpose(1, 2))
        y = y + x * self.D.unsqueeze(-1)
        return self.out_proj(y.transpose(1, 2) * F.silu(z))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.mixer = Mixer(c)
        self.norm = nn.RMSNorm(c["d_model"], eps=1e-5)

    def forward(self, x):
        return x + self.mixer(self.norm(x))


class Mamba(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.backbone = nn.Module()
        self.backbone.embedding = nn.Embedding(c["vocab_size"], c["d_model"])
        self.backbone.layers = nn.ModuleList([Block(c) for _ in range(c["n_layer"])])
        self.backbone.norm_f = nn.RMSNorm(c["d_model"], eps=1e-5)
        self.lm_head = nn.Linear(c["d_model"], c["vocab_size"], bias=False)
        self.lm_head.weight = self.backbone.embedding.weight
        # MambaLMHeadModel._init_weights: zero Linear biases (but dt_proj's), N(0, 0.02) embedding,
        # out_proj rescaled by 1 / sqrt(n_layer) after a fresh default draw.
        for module in self.modules():
            if isinstance(module, nn.Linear) and module.bias is not None and \
                    not getattr(module.bias, "_no_reinit", False):
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
        for name, p in self.named_parameters():
            if name.endswith("out_proj.weight"):
                nn.init.kaiming_uniform_(p, a=math.sqrt(5))
                with torch.no_grad():
                    p /= math.sqrt(c["n_layer"])

    def forward(self, idx, targets):
        x = self.backbone.embedding(idx)
        for block in self.backbone.layers:
            x = block(x)
        logits = self.lm_head(self.backbone.norm_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def lr_at(step):
    if step < WARMUP:
        return LR * (step + 1) / (WARMUP + 1)
    ratio = (step - WARMUP) / (STEPS - WARMUP)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def main():
    torch.manual_seed(4321)
    with open(os.path.join(ROOT, "data", "shakespeare", "input.txt"), "rb") as f:
        text = f.read()
    vocabulary = sorted(set(text))
    assert len(vocabulary) == CONFIG["vocab_size"]
    index = {b: i for i, b in enumerate(vocabulary)}
    data = np.array([index[b] for b in text[:200_000]], dtype=np.int64)
    rng = np.random.default_rng(8)
    t = CONFIG["context"]
    starts = rng.integers(0, len(data) - t - 1, size=(STEPS, BATCH))
    inputs = torch.from_numpy(np.stack([[data[s:s + t] for s in row] for row in starts]))
    targets = torch.from_numpy(np.stack([[data[s + 1:s + 1 + t] for s in row] for row in starts]))

    model = Mamba(CONFIG)
    params = dict(model.named_parameters())
    init = {f"init.{k}": v.detach().clone() for k, v in params.items()}
    decayed = [p for k, p in params.items() if p.dim() >= 2 and not k.endswith("A_log")]
    undecayed = [p for k, p in params.items() if p.dim() < 2 or k.endswith("A_log")]
    optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": WEIGHT_DECAY},
                                   {"params": undecayed, "weight_decay": 0.0}], lr=LR, betas=(0.9, 0.99),
                                  foreach=False)
    losses, lrs, grads = [], [], {}
    for step in range(STEPS):
        lr = lr_at(step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss = model(inputs[step], targets[step])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if step == 0:
            grads = {f"grad.{k}": p.grad.detach().clone() for k, p in params.items()}
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        optimizer.step()
        losses.append(loss.item())
        lrs.append(lr)
    final = {f"final.{k}": v.detach().clone() for k, v in params.items()}
    tensors = {**init, **grads, **final, "inputs": inputs.contiguous(), "targets": targets.contiguous(),
               "losses": torch.tensor(losses, dtype=torch.float64), "lrs": torch.tensor(lrs, dtype=torch.float64)}
    metadata = {k: str(v) for k, v in CONFIG.items()}
    metadata.update(steps=str(STEPS), batch=str(BATCH), weight_decay=str(WEIGHT_DECAY), clip=str(CLIP),
                    generator=f"torch {torch.__version__}")
    path = os.path.join(HERE, "mamba_parity.safetensors")
    save_file(tensors, path, metadata=metadata)
    print(f"{path}: losses {losses[0]:.4f} -> {losses[-1]:.4f}")


if __name__ == "__main__":
    main()
