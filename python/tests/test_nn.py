"""ember.nn and ember.optim from Python: Module subclasses whose attributes register parameters,
buffers and children as in PyTorch; state_dict / load_state_dict / save / load; train and eval;
module hooks; the built-in layers against NumPy; the optimizers' updates against their formulas;
the schedulers."""

import numpy as np
import pytest

import ember
from ember import nn
import ember.nn.functional as F


class Block(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.fc = nn.Linear(features, features)
        self.scale = nn.Parameter(ember.ones(features))
        self.register_buffer("count", ember.zeros(1))
        self.note = "a plain attribute"

    def forward(self, x):
        return F.relu(self.fc(x)) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(4), Block(4)])
        self.head = nn.Sequential(nn.Linear(4, 3), nn.Tanh())
        self.frozen = nn.Parameter(ember.zeros(2), requires_grad=False)

    def forward(self, x, extra=None):  # any signature: Python modules are called directly
        for block in self.blocks:
            x = block(x)
        out = self.head(x)
        return (out, extra) if extra is not None else out


def test_python_modules_register_like_pytorch():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["frozen", "blocks.0.scale", "blocks.0.fc.weight", "blocks.0.fc.bias", "blocks.1.scale",
                     "blocks.1.fc.weight", "blocks.1.fc.bias", "head.0.weight", "head.0.bias"]
    assert not net.frozen.requires_grad and net.blocks[0].scale.requires_grad
    assert isinstance(net.blocks[1], Block) and net.blocks[1].note == "a plain attribute"
    assert [n for n, _ in net.named_buffers()] == ["blocks.0.count", "blocks.1.count"]
    assert len(net.parameters()) == 9 and len(list(net.modules())) == 9
    assert [n for n, _ in net.named_modules()][:3] == ["", "blocks", "blocks.0"]
    assert sorted(net.state_dict()) == sorted(names + ["blocks.0.count", "blocks.1.count"])
    r = repr(net)
    assert r.startswith("Net(") and "(blocks): ModuleList(" in r and "Linear(in_features=4, out_features=3" in r
    out, extra = net(ember.randn(2, 4), extra=5)
    assert out.shape == (2, 3) and extra == 5
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        net.missing
    with pytest.raises(TypeError, match="registered parameter"):
        net.blocks[0].scale = ember.ones(4)


def test_gradients_flow_through_python_modules():
    ember.manual_seed(1)
    net = Net()
    x = ember.randn(5, 4)
    net(x).square().sum().backward()
    for name, p in net.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and p.grad.shape == p.shape, name
            assert p.grad.abs().sum().item() > 0, name
    assert net.frozen.grad is None
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())


def test_state_dict_round_trip(tmp_path):
    ember.manual_seed(2)
    a, b = Net(), Net()
    x = ember.randn(3, 4)
    assert not a(x).eq(b(x)).all().item()
    path = str(tmp_path / "net.safetensors")
    ember.save(a.state_dict(), path, {"epoch": "3"})
    loaded = ember.load(path)
    assert ember.load_metadata(path)["epoch"] == "3"
    result = b.load_state_dict(loaded)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert a(x).eq(b(x)).all().item()
    loaded["extra"] = ember.ones(1)
    with pytest.raises(ember.Error, match="extra"):
        b.load_state_dict(loaded)
    assert b.load_state_dict(loaded, strict=False).unexpected_keys == ["extra"]
    with pytest.raises(ember.Error, match="cannot open|No such|does not exist"):
        ember.load(str(tmp_path / "missing.safetensors"))


def test_train_eval_and_to():
    net = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    assert net.training and net[1].training
    assert net.eval() is net and not net[1].training
    x = ember.ones(4, 3)
    assert net(x).eq(net(x)).all().item()  # dropout is off in eval
    net.train()
    assert net[1].training
    net.to(ember.float64)
    assert net[0].weight.dtype == ember.float64


def test_module_hooks():
    layer = nn.Linear(2, 2)
    calls = []
    h1 = layer.register_forward_pre_hook(lambda m, x: calls.append(("pre", type(m).__name__)))
    h2 = layer.register_forward_hook(lambda m, x, y: y * 0)  # replaces the output
    h3 = layer.register_full_backward_hook(lambda m, gi, go: calls.append(("backward", go.shape)))
    x = ember.ones(1, 2, requires_grad=True)
    y = layer(x)
    assert y.tolist() == [[0.0, 0.0]] and calls == [("pre", "Linear")]
    y.sum().backward()
    assert calls[-1] == ("backward", (1, 2))
    for h in (h1, h2, h3):
        h.remove()
    assert layer(x).abs().sum().item() > 0

    block = Block(3)  # a Python module with hooks runs through the C++ call path
    block.register_forward_hook(lambda m, inp, out: out + 100)
    assert block(ember.zeros(1, 3)).min().item() >= 100


def test_layers_against_numpy():
    ember.manual_seed(3)
    lin = nn.Linear(4, 3)
    x = ember.randn(2, 4)
    w, b = lin.weight.detach().numpy(), lin.bias.detach().numpy()
    np.testing.assert_allclose(lin(x).detach().numpy(), x.numpy() @ w.T + b, rtol=1e-5, atol=1e-6)
    conv = nn.Conv2d(1, 2, 3, padding=1)
    img = ember.randn(1, 1, 5, 5)
    out = conv(img).detach().numpy()
    k, bias, xp = conv.weight.detach().numpy(), conv.bias.detach().numpy(), np.pad(img.numpy()[0, 0], 1)
    ref = np.array([[[(xp[i:i + 3, j:j + 3] * k[c, 0]).sum() + bias[c] for j in range(5)] for i in range(5)]
                    for c in range(2)])
    np.testing.assert_allclose(out[0], ref, rtol=1e-4, atol=1e-5)
    ln = nn.LayerNorm(4)
    y = ln(x).detach().numpy()
    xn = x.numpy()
    np.testing.assert_allclose(y, (xn - xn.mean(-1, keepdims=True)) / np.sqrt(xn.var(-1, keepdims=True) + 1e-5),
                               rtol=1e-4, atol=1e-5)
    assert nn.MaxPool2d(2)(ember.arange(16, dtype=ember.float32).reshape(1, 1, 4, 4)).flatten().tolist() == \
        [5.0, 7.0, 13.0, 15.0]
    emb = nn.Embedding(10, 3)
    assert emb(ember.tensor([[1, 2]])).shape == (1, 2, 3)
    loss = F.cross_entropy(ember.tensor([[2.0, 0.0, 0.0]]), ember.tensor([0]))
    assert loss.item() == pytest.approx(-np.log(np.exp(2) / (np.exp(2) + 2)), rel=1e-6)
    assert F.mse_loss(ember.ones(3), ember.zeros(3), reduction="sum").item() == 3.0
    attn, weights = nn.MultiheadAttention(8, 2, batch_first=True)(*(ember.randn(1, 5, 8),) * 3)
    assert attn.shape == (1, 5, 8) and weights.shape == (1, 5, 5)


def test_rope_rotates_pairs_and_passes_gradients():
    ember.manual_seed(4)
    x = ember.randn(1, 3, 2, 6)  # (B, T, H, D): the first 4 of each head rotated
    angles = np.outer(np.arange(3), [1.0, 0.1])
    cos, sin = ember.tensor(np.cos(angles).astype(np.float32)), ember.tensor(np.sin(angles).astype(np.float32))
    xn, c, s = x.numpy(), np.cos(angles)[None, :, None], np.sin(angles)[None, :, None]
    a, b = xn[..., 0:4:2], xn[..., 1:4:2]
    adjacent = np.stack([a * c - b * s, a * s + b * c], -1).reshape(1, 3, 2, 4)
    np.testing.assert_allclose(F.rope(x, cos, sin).numpy()[..., :4], adjacent, rtol=1e-5, atol=1e-6)
    a, b = xn[..., 0:2], xn[..., 2:4]
    halves = np.concatenate([a * c - b * s, a * s + b * c], -1)
    np.testing.assert_allclose(F.rope(x, cos, sin, style="halves").numpy()[..., :4], halves, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(F.rope(x, cos, sin).numpy()[..., 4:], xn[..., 4:])
    leaf = x.detach().requires_grad_()
    (F.rope(leaf, cos, sin) ** 2).sum().backward()  # a rotation keeps the norm: the gradient is 2x
    np.testing.assert_allclose(leaf.grad.numpy(), 2 * xn, rtol=1e-5, atol=1e-6)
    with pytest.raises(ember.Error, match="style must be"):
        F.rope(x, cos, sin, style="neox")


def test_sgd_and_adam_updates():
    p = nn.Parameter(ember.tensor([1.0, -2.0]))
    opt = ember.optim.SGD([p], lr=0.1, momentum=0.9)
    for _ in range(2):
        opt.zero_grad()
        (p * p).sum().backward()
        opt.step()
    # momentum: v1 = g0, p1 = p0 - lr g0; v2 = 0.9 v1 + g1, p2 = p1 - lr v2
    p0 = np.array([1.0, -2.0])
    p1 = p0 - 0.1 * 2 * p0
    p2 = p1 - 0.1 * (0.9 * 2 * p0 + 2 * p1)
    np.testing.assert_allclose(p.detach().numpy(), p2, rtol=1e-6)

    q = nn.Parameter(ember.tensor([0.5, 3.0], dtype=ember.float64))
    adam = ember.optim.AdamW([{"params": [q], "weight_decay": 0.0}], lr=0.01, betas=(0.8, 0.99))
    assert adam.param_groups[0]["betas"] == (0.8, 0.99) and adam.param_groups[0]["lr"] == 0.01
    m = v = np.zeros(2)
    qn = np.array([0.5, 3.0])
    for t in range(1, 4):
        adam.zero_grad()
        (q ** 3).sum().backward()
        adam.step()
        g = 3 * qn ** 2
        m, v = 0.8 * m + 0.2 * g, 0.99 * v + 0.01 * g * g
        qn = qn - 0.01 * (m / (1 - 0.8 ** t)) / (np.sqrt(v / (1 - 0.99 ** t)) + 1e-8)
    np.testing.assert_allclose(q.detach().numpy(), qn, rtol=1e-10)
    adam.param_groups[0]["lr"] = 0.5
    assert adam.param_groups[0]["lr"] == 0.5
    state = adam.state_dict()
    assert any("exp_avg" in k for k in state)
    with pytest.raises(TypeError, match="unexpected argument \"momentum\""):
        ember.optim.Adam([q], momentum=0.9)
    with pytest.raises(ember.Error, match="lr"):
        ember.optim.SGD([q], lr=-1.0)


def test_schedulers_and_clipping():
    p = nn.Parameter(ember.ones(2))
    opt = ember.optim.SGD([p], lr=1.0)
    sched = ember.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4)
    lrs = []
    for _ in range(4):
        opt.step()
        sched.step()
        lrs.append(sched.get_last_lr()[0])
    np.testing.assert_allclose(lrs, [0.5 * (1 + np.cos(np.pi * t / 4)) for t in range(1, 5)], atol=1e-12)
    step = ember.optim.lr_scheduler.StepLR(ember.optim.SGD([p], lr=1.0), step_size=2, gamma=0.5)
    for _ in range(4):
        step.step()
    assert step.get_last_lr() == [0.25]
    p.grad = ember.tensor([3.0, 4.0])
    norm = ember.nn.utils.clip_grad_norm_([p], max_norm=1.0)
    assert norm.item() == pytest.approx(5.0) and p.grad.tolist() == pytest.approx([0.6, 0.8], rel=1e-5)


def test_init_functions():
    ember.manual_seed(0)
    w = ember.empty(100, 50)
    nn.init.xavier_uniform_(w)
    bound = np.sqrt(6 / 150)
    assert -bound <= w.min().item() and w.max().item() <= bound and w.std().item() > bound / 3
    nn.init.zeros_(w)
    assert w.abs().sum().item() == 0


def test_cycles_through_python_modules_are_collected():
    """A hook closing over its module, a Python module inside a container inside a Python module:
    the collector sees the references C++ holds and frees everything (the array a buffer of the
    model shares is released with it)."""
    import gc
    import sys

    array = np.zeros(4, dtype=np.float32)
    base = sys.getrefcount(array)

    def build():
        outer = Net()
        outer.register_buffer("shared", ember.from_numpy(array))
        outer.blocks[0].register_forward_hook(lambda m, x, y: outer and y)  # closes over outer: a cycle
        outer.me = outer.blocks  # the container twice
        outer(ember.ones(1, 4))
        return outer

    model = build()
    assert sys.getrefcount(array) > base
    del model
    gc.collect()
    assert sys.getrefcount(array) == base


def test_scripts_exit_without_leaks(tmp_path):
    """The usual shapes of a model script leave nothing behind at exit (nanobind reports any
    instance still alive then)."""
    import subprocess
    import sys
    import pathlib
    script = tmp_path / "script.py"
    script.write_text(
        "import ember\n"
        "from ember import nn\n"
        "class Block(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(4, 4)\n"
        "        self.register_forward_hook(lambda m, x, y: None)\n"
        "    def log(self, module, x, y):\n"
        "        return None\n"
        "    def forward(self, x):\n"
        "        return self.fc(x).relu()\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.blocks = nn.ModuleList([Block() for _ in range(3)])\n"
        "        self.tail = nn.Sequential(Block(), nn.Linear(4, 2))\n"
        "        self.child = Block()\n"
        "    def forward(self, x):\n"
        "        for b in self.blocks:\n"
        "            x = b(x)\n"
        "        return self.tail(self.child(x))\n"
        "model = Net()\n"
        "opt = ember.optim.Adam(model.parameters())\n"
        "model(ember.ones(2, 4)).sum().backward()\n"
        "opt.step()\n"
        "print('done')\n")
    env = dict(__import__("os").environ, PYTHONPATH=str(pathlib.Path(ember.__file__).resolve().parents[1]),
               EMBER_LEAK_WARNINGS="1")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "done"
    assert "leaked" not in out.stderr, out.stderr
