"""Reference run for the diffusion parity test (tests/test_diffusion.cpp): PyTorch builds the small
class-conditional U-Net of include/ember/models/diffusion.h (same module and parameter names), trains
it for a few AdamW steps on the DDPM loss with the randomness spelled out (time steps, noise and
labels, some of them "no class", are stored), then runs the DDPM and DDIM samplers with
classifier-free guidance from stored starting noise and stored per-step noise. The C++ test loads the
same initial weights, replays the steps and the samplers in ember and compares the losses, the first
step's gradients, the final weights and every sampler's output. It also stores both noise schedules'
alpha_bar and a time-step embedding.

The initial weights are PyTorch's default initialization everywhere: the model's zero-initialized
layers (every ResBlock's conv2, conv_out) are drawn too, so that the first step's gradients reach
every parameter.

    .venv/bin/python tests/golden/make_diffusion_parity.py

Writes tests/golden/diffusion_parity.safetensors.
"""
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = dict(image_channels=1, channels=8, multipliers=[1, 2], groups=4, num_classes=10)
SIZE, TIMESTEPS, STEPS, BATCH, LR, WEIGHT_DECAY = 8, 50, 4, 6, 2e-3, 0.01


def linear_alpha_bars(n):
    scale = 1000.0 / n
    betas = torch.linspace(scale * 1e-4, scale * 0.02, n, dtype=torch.float64)
    return torch.cumprod(1 - betas, 0)


def cosine_alpha_bars(n):
    def f(s):
        return math.cos((s + 0.008) / 1.008 * math.pi / 2) ** 2
    betas = torch.tensor([min(1 - f((i + 1) / n) / f(i / n), 0.999) for i in range(n)], dtype=torch.float64)
    return torch.cumprod(1 - betas, 0)


def sampling_steps(n, steps):
    if steps == 1:
        return [n - 1]
    return [int(math.floor((n - 1) * (steps - 1 - i) / (steps - 1) + 0.5)) for i in range(steps)]


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(torch.arange(half, dtype=torch.float32) * (-math.log(10000.0) / half))
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.sin(args), torch.cos(args)], dim=1)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, emb, groups):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.emb_proj = nn.Linear(emb, cout)
        self.norm2 = nn.GroupNorm(groups, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x, emb):
        h = self.conv1(F.silu(self.norm1(x))) + self.emb_proj(F.silu(emb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return (self.skip(x) if self.skip is not None else x) + h


class UNet(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        ch, mult, groups = c["channels"], c["multipliers"], c["groups"]
        emb = 4 * ch
        self.time_fc1 = nn.Linear(ch, emb)
        self.time_fc2 = nn.Linear(emb, emb)
        self.class_embedding = nn.Embedding(c["num_classes"] + 1, emb)
        self.conv_in = nn.Conv2d(c["image_channels"], ch * mult[0], 3, padding=1)
        self.down, self.downsample = nn.ModuleList(), nn.ModuleList()
        cur = ch * mult[0]
        for level, m in enumerate(mult):
            self.down.append(ResBlock(cur, ch * m, emb, groups))
            cur = ch * m
            if level + 1 < len(mult):
                self.downsample.append(nn.Conv2d(cur, cur, 3, stride=2, padding=1))
        self.mid = ResBlock(cur, cur, emb, groups)
        self.up, self.upsample = nn.ModuleList(), nn.ModuleList()
        for level in reversed(range(len(mult))):
            self.up.append(ResBlock(cur + ch * mult[level], ch * mult[level], emb, groups))
            cur = ch * mult[level]
            if level > 0:
                self.upsample.append(nn.Conv2d(cur, ch * mult[level - 1], 3, padding=1))
                cur = ch * mult[level - 1]
        self.norm_out = nn.GroupNorm(groups, cur)
        self.conv_out = nn.Conv2d(cur, c["image_channels"], 3, padding=1)

    def forward(self, x, t, labels):
        emb = self.time_fc2(F.silu(self.time_fc1(timestep_embedding(t, self.c["channels"])))) + \
            self.class_embedding(labels)
        h = self.conv_in(x)
        skips = []
        levels = len(self.c["multipliers"])
        for level in range(levels):
            h = self.down[level](h, emb)
            skips.append(h)
            if level + 1 < levels:
                h = self.downsample[level](h)
        h = self.mid(h, emb)
        for i in range(levels):
            level = levels - 1 - i
            h = self.up[i](torch.cat([h, skips[level]], 1), emb)
            if level > 0:
                h = self.upsample[i](F.interpolate(h, scale_factor=2.0, mode="nearest"))
        return self.conv_out(F.silu(self.norm_out(h)))


def guided_noise(model, x, t, labels, guidance):
    n = x.shape[0]
    if guidance == 1.0:
        return model(x, torch.full((n,), t), labels)
    none = torch.full((n,), CONFIG["num_classes"])
    eps = model(torch.cat([x, x]), torch.full((2 * n,), t), torch.cat([labels, none]))
    cond, uncond = eps[:n], eps[n:]
    return uncond + (cond - uncond) * guidance


def denoise_step(alpha_bars, x, eps, t, t_prev, sampler, eta, noise):
    a = alpha_bars[t].item()
    a_prev = alpha_bars[t_prev].item() if t_prev >= 0 else 1.0
    x0 = ((x - eps * math.sqrt(1 - a)) / math.sqrt(a)).clamp(-1, 1)
    e = (x - x0 * math.sqrt(a)) / math.sqrt(1 - a)
    if t_prev < 0:
        return x0
    b = 1 - a / a_prev
    if sampler == "ddpm":
        mean = x0 * (math.sqrt(a_prev) * b / (1 - a)) + x * (math.sqrt(1 - b) * (1 - a_prev) / (1 - a))
        return mean + noise * math.sqrt(b * (1 - a_prev) / (1 - a))
    s = eta * math.sqrt((1 - a_prev) / (1 - a) * b)
    out = x0 * math.sqrt(a_prev) + e * math.sqrt(max(1 - a_prev - s * s, 0.0))
    return out + noise * s if s > 0 else out


@torch.no_grad()
def run_sampler(model, alpha_bars, name, sampler, steps, guidance, eta, labels, out):
    gen = torch.Generator().manual_seed(100 + len(out))
    x = torch.randn(labels.shape[0], 1, SIZE, SIZE, generator=gen)
    out[f"{name}.start"] = x.clone()
    visited = sampling_steps(TIMESTEPS, steps)
    for i, t in enumerate(visited):
        t_prev = visited[i + 1] if i + 1 < len(visited) else -1
        noise = torch.randn(x.shape, generator=gen)
        out[f"{name}.noise.{i}"] = noise
        x = denoise_step(alpha_bars, x, guided_noise(model, x, t, labels, guidance), t, t_prev, sampler, eta, noise)
    out[f"{name}.result"] = x
    out[f"{name}.settings"] = torch.tensor([steps, guidance, eta, 1.0 if sampler == "ddpm" else 0.0],
                                           dtype=torch.float64)


def main():
    torch.manual_seed(1234)
    model = UNet(CONFIG)
    params = dict(model.named_parameters())
    tensors = {f"init.{k}": v.detach().clone() for k, v in params.items()}
    alpha_bars = cosine_alpha_bars(TIMESTEPS)
    tensors["alpha_bars.cosine"] = alpha_bars
    tensors["alpha_bars.linear"] = linear_alpha_bars(TIMESTEPS)
    tensors["alpha_bars.linear1000"] = linear_alpha_bars(1000)
    tensors["alpha_bars.cosine1000"] = cosine_alpha_bars(1000)
    embed_t = torch.tensor([0, 1, 7, 499, 999])
    tensors["embedding.t"] = embed_t
    tensors["embedding.value"] = timestep_embedding(embed_t, 16)

    x0 = torch.rand(STEPS, BATCH, 1, SIZE, SIZE) * 2 - 1
    t = torch.randint(0, TIMESTEPS, (STEPS, BATCH))
    noise = torch.randn(STEPS, BATCH, 1, SIZE, SIZE)
    labels = torch.randint(0, CONFIG["num_classes"] + 1, (STEPS, BATCH))  # some are 10: no class
    tensors.update(x0=x0, t=t, noise=noise, labels=labels)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, foreach=False)
    losses = []
    keep = alpha_bars.float()
    for step in range(STEPS):
        ab = keep[t[step]].view(-1, 1, 1, 1)
        xt = x0[step] * ab.sqrt() + noise[step] * (1 - ab).sqrt()
        loss = F.mse_loss(model(xt, t[step], labels[step]), noise[step])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if step == 0:
            tensors.update({f"grad.{k}": p.grad.detach().clone() for k, p in params.items()})
        optimizer.step()
        losses.append(loss.item())
    tensors["losses"] = torch.tensor(losses, dtype=torch.float64)
    tensors.update({f"final.{k}": v.detach().clone() for k, v in params.items()})

    sample_labels = torch.tensor([0, 3, 7, 9])
    tensors["sample.labels"] = sample_labels
    runs = {}
    run_sampler(model, alpha_bars, "ddpm", "ddpm", 5, 2.5, 0.0, sample_labels, runs)
    run_sampler(model, alpha_bars, "ddpm_full", "ddpm", TIMESTEPS, 1.0, 0.0, sample_labels, runs)
    run_sampler(model, alpha_bars, "ddim", "ddim", 4, 3.0, 0.0, sample_labels, runs)
    run_sampler(model, alpha_bars, "ddim_eta", "ddim", 3, 0.0, 0.5, sample_labels, runs)
    tensors.update(runs)
    metadata = {k: str(v) for k, v in CONFIG.items() if k != "multipliers"}
    metadata.update(multipliers=",".join(map(str, CONFIG["multipliers"])), size=str(SIZE),
                    timesteps=str(TIMESTEPS), lr=str(LR), weight_decay=str(WEIGHT_DECAY),
                    generator=f"torch {torch.__version__}")
    path = os.path.join(HERE, "diffusion_parity.safetensors")
    save_file({k: v.contiguous() for k, v in tensors.items()}, path, metadata=metadata)
    print(f"{path}: losses {', '.join(f'{v:.4f}' for v in losses)}")


if __name__ == "__main__":
    main()
