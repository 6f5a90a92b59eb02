"""Reference ONNX models and data for ember's ONNX importer.

Each case is a folder holding
  model.onnx    the model (all weights inside, except the `external_data` case: weights.bin)
  <input>.npy   one file per graph input
  expected_<output>.npy  onnxruntime's outputs on those inputs (CPUExecutionProvider, default
                graph optimizations, one thread)
  case.json     {"inputs": {name: file}, "outputs": {name: file}, "atol", "rtol", "opset",
                 "exporter": "torchscript" | "dynamo", "about"}
and the mnist_cnn case also a fine-tuning reference (finetune.json, finetune_x.npy, finetune_y.npy,
finetune_weights.safetensors): see make_mnist_cnn.

Run from the repository root:
    .venv/bin/python tests/onnx/make_onnx.py                  # small cases -> tests/data/onnx (committed)
    .venv/bin/python tests/onnx/make_onnx.py --large          # big models  -> data/onnx (git-ignored)
    .venv/bin/python tests/onnx/make_onnx.py --large DIR --only minilm
    .venv/bin/python tests/onnx/make_onnx.py --only gpt_tiny

Everything is seeded (torch.manual_seed per case) and runs on one thread, so a re-run writes the
same .npy bytes. The large `minilm` case reads the pretrained MiniLM from data/minilm (offline).
"""

import argparse
import copy
import json
import math
import os
import re
import sys
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn
import torch.nn.functional as F
from onnx import helper, numpy_helper

torch.set_num_threads(1)
warnings.filterwarnings("ignore")  # the TorchScript exporter's deprecation and tracer warnings
import logging

logging.getLogger("torch.onnx").setLevel(logging.ERROR)  # "torchvision is not installed" notices

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SMALL_DIR = ROOT / "tests" / "data" / "onnx"
LARGE_DIR = ROOT / "data" / "onnx"
MINILM_DIR = ROOT / "data" / "minilm"

MAX_SMALL_MODEL_BYTES = 1 << 20
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


# --- helpers -----------------------------------------------------------------------------------------


def file_name(name):
    """A plain file name ([a-z0-9_.]) for a tensor name."""
    out = re.sub(r"[^a-z0-9_.]", "_", name.lower())
    return out or "tensor"


def export_torchscript(model, args, path, input_names, output_names, opset, dynamic_axes=None,
                       do_constant_folding=True, training=torch.onnx.TrainingMode.EVAL):
    torch.onnx.export(model, args, str(path), dynamo=False, opset_version=opset, input_names=input_names,
                      output_names=output_names, dynamic_axes=dynamic_axes, do_constant_folding=do_constant_folding,
                      keep_initializers_as_inputs=False, training=training)


def export_dynamo(model, args, path, input_names, output_names, dynamic_shapes=None, opset=None):
    torch.onnx.export(model, args, str(path), dynamo=True, opset_version=opset, input_names=input_names,
                      output_names=output_names, dynamic_shapes=dynamic_shapes, external_data=False, optimize=True,
                      verbose=False)
    # The exporter may leave a .data file next to the model when weights are large; this one must not.
    assert not Path(str(path) + ".data").exists(), f"{path}: the dynamo exporter wrote external data"


def op_types(graph, out=None):
    """Every op type in a graph and its subgraphs (domain-qualified outside the default domain)."""
    out = set() if out is None else out
    for node in graph.node:
        out.add(node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}")
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                op_types(attr.g, out)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    op_types(g, out)
    return out


def default_opset(proto):
    return next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))


def ort_session(path):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def max_diffs(actual, expected):
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.size == 0:
        return 0.0, 0.0
    diff = np.abs(actual - expected)
    rel = diff / np.maximum(np.abs(expected), 1e-12)
    return float(diff.max()), float(rel.max())


RESULTS = []  # one row per written case, for the summary table


def check_against_torch(case, output_names, results, torch_outputs, atol, rtol):
    """The largest |onnxruntime - torch| over the outputs; fails past atol + rtol * max|torch|."""
    assert len(torch_outputs) == len(results), (len(torch_outputs), len(results))
    worst = 0.0
    for name, t, r in zip(output_names, torch_outputs, results):
        t = t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        assert t.shape == r.shape, f"{case}/{name}: torch {t.shape} vs onnxruntime {r.shape}"
        abs_diff, _ = max_diffs(r, t)
        bound = float(np.max(np.abs(t.astype(np.float64)))) if t.size else 0.0
        assert abs_diff <= atol + rtol * bound, f"{case}/{name}: torch and onnxruntime differ by {abs_diff} " \
                                                 f"(|max| {bound})"
        worst = max(worst, abs_diff)
    return worst


def write_case(case_dir, inputs, about, exporter, atol=1e-4, rtol=1e-4, torch_outputs=None, small=True,
               extra_files=(), other_shapes=()):
    """Runs case_dir/model.onnx in onnxruntime on `inputs` (name -> array) and writes the npy files and
    case.json. torch_outputs (list, in graph output order) is compared with onnxruntime's as a check;
    other_shapes: (inputs, torch_outputs) pairs of other batch / sequence sizes, checked the same way
    (not written) to show that the dynamic axes are dynamic."""
    model_path = case_dir / "model.onnx"
    onnx.checker.check_model(str(model_path), full_check=True)
    proto = onnx.load(str(model_path), load_external_data=False)
    graph_inputs = [i.name for i in proto.graph.input]
    assert sorted(graph_inputs) == sorted(inputs), f"{case_dir.name}: graph inputs {graph_inputs} != {list(inputs)}"
    session = ort_session(model_path)
    output_names = [o.name for o in session.get_outputs()]
    results = session.run(None, {name: inputs[name] for name in graph_inputs})

    case = {"inputs": {}, "outputs": {}, "atol": atol, "rtol": rtol, "opset": default_opset(proto),
            "exporter": exporter, "about": about}
    used = set()
    for name in graph_inputs:
        fname = file_name(name) + ".npy"
        assert fname not in used, fname
        used.add(fname)
        np.save(case_dir / fname, np.ascontiguousarray(inputs[name]))
        case["inputs"][name] = fname
    for name, value in zip(output_names, results):
        fname = "expected_" + file_name(name) + ".npy"
        assert fname not in used, fname
        used.add(fname)
        np.save(case_dir / fname, np.ascontiguousarray(value))
        case["outputs"][name] = fname
    (case_dir / "case.json").write_text(json.dumps(case, indent=2) + "\n")

    torch_diff = None
    if torch_outputs is not None:
        torch_diff = check_against_torch(case_dir.name, output_names, results, torch_outputs, atol, rtol)
    for other_inputs, other_torch in other_shapes:
        other = session.run(None, {name: np.asarray(other_inputs[name]) for name in graph_inputs})
        check_against_torch(case_dir.name + " (other shapes)", output_names, other, other_torch, atol, rtol)

    size = model_path.stat().st_size + sum((case_dir / f).stat().st_size for f in extra_files)
    if small:
        assert model_path.stat().st_size < MAX_SMALL_MODEL_BYTES, f"{model_path} is {size} bytes"
    RESULTS.append({
        "case": case_dir.name, "size": size, "opset": case["opset"], "ir": proto.ir_version, "exporter": exporter,
        "ops": sorted(op_types(proto.graph)),
        "inputs": [(n, tuple(inputs[n].shape), str(inputs[n].dtype)) for n in graph_inputs],
        "outputs": [(n, tuple(r.shape), str(r.dtype)) for n, r in zip(output_names, results)],
        "torch_diff": torch_diff,
    })
    return case


def other_shape(model, names, *args):
    """(inputs, torch outputs) of model on args: a write_case other_shapes entry."""
    with torch.no_grad():
        outs = model(*args)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    return {n: a.numpy() for n, a in zip(names, args)}, outs


def fresh_dir(path):
    path.mkdir(parents=True, exist_ok=True)
    for f in path.iterdir():
        if f.is_file():
            f.unlink()
    return path


def initializer_names(proto):
    return {t.name for t in proto.graph.initializer}


def check_names_match_state_dict(proto, model, case):
    """Every float initializer is a state_dict key and every state_dict key an initializer."""
    floats = {t.name for t in proto.graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    keys = set(model.state_dict())
    assert floats == keys, f"{case}: initializers {sorted(floats - keys)} not in the state dict, " \
                           f"state dict keys {sorted(keys - floats)} not initializers"
    for t in proto.graph.initializer:
        if t.name in keys:
            assert np.array_equal(numpy_helper.to_array(t), model.state_dict()[t.name].numpy()), t.name


# --- models ------------------------------------------------------------------------------------------


def mnist_mlp():
    """src/models/mnist.cpp: Flatten, Linear(784, 128), ReLU, Linear(128, 10); input (N, 1, 28, 28)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))


def mnist_cnn():
    """src/models/mnist.cpp: Conv2d(1, 16, 5), ReLU, MaxPool2d(2), Conv2d(16, 32, 5), ReLU, MaxPool2d(2),
    Flatten, Linear(512, 10); input (N, 1, 28, 28). State dict keys 0.*, 3.*, 7.* as ember's Sequential."""
    return nn.Sequential(nn.Conv2d(1, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(512, 10))


def mnist_like(n, seed):
    """n MNIST-like images (N, 1, 28, 28): sparse strokes in 0..255 / 255, normalized as ember's MNIST."""
    g = torch.Generator().manual_seed(seed)
    raw = ((torch.rand(n, 1, 28, 28, generator=g) - 0.55) * 3.0).clamp(0.0, 1.0)
    raw = torch.round(raw * 255.0) / 255.0
    return ((raw - MNIST_MEAN) / MNIST_STD).to(torch.float32)


class GPTConfig:
    def __init__(self, vocab_size=65, block_size=32, n_layer=2, n_head=2, n_embd=64):
        self.vocab_size, self.block_size, self.n_layer, self.n_head, self.n_embd = \
            vocab_size, block_size, n_layer, n_head, n_embd


class CausalSelfAttention(nn.Module):
    """nanoGPT's attention. sdpa=False: explicit q k^T / sqrt(d), masked_fill with nanoGPT's `bias` tril
    buffer, softmax, @ v; sdpa=True: F.scaled_dot_product_attention(is_causal=True)."""

    def __init__(self, c, sdpa):
        super().__init__()
        self.n_head, self.sdpa = c.n_head, sdpa
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd)
        if not sdpa:
            self.register_buffer("bias", torch.tril(torch.ones(c.block_size, c.block_size))
                                 .view(1, 1, c.block_size, c.block_size), persistent=False)

    def forward(self, x):
        b, t, ch = x.size()
        q, k, v = self.c_attn(x).split(ch, dim=2)
        q, k, v = (z.view(b, t, self.n_head, ch // self.n_head).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, ch))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd)
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))  # exact (erf) GELU, as ember's linear_gelu default


class Block(nn.Module):
    def __init__(self, c, sdpa):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.n_embd)
        self.attn = CausalSelfAttention(c, sdpa)
        self.ln_2 = nn.LayerNorm(c.n_embd)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT (include/ember/models/gpt.h): tied lm_head, no dropout, biases everywhere."""

    def __init__(self, c, sdpa=False):
        super().__init__()
        self.config = c
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c.vocab_size, c.n_embd), wpe=nn.Embedding(c.block_size, c.n_embd),
            h=nn.ModuleList([Block(c, sdpa) for _ in range(c.n_layer)]), ln_f=nn.LayerNorm(c.n_embd)))
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def gpt_tiny_model(sdpa):
    """The tiny GPT with nanoGPT's initialization, then random LayerNorm affines and biases so that
    every parameter matters (seeded: both attention variants get the same weights)."""
    torch.manual_seed(1234)
    c = GPTConfig()
    model = GPT(c, sdpa)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * c.n_layer))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.mul_(10.0)  # larger weights than nanoGPT's init: logits of order 1, not 0.01
            elif name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return model.eval()


# --- small cases -------------------------------------------------------------------------------------


def make_mlp(out):
    d = fresh_dir(out / "mlp")
    torch.manual_seed(0)
    model = mnist_mlp().eval()
    x = mnist_like(4, seed=100)
    export_torchscript(model, (x,), d / "model.onnx", ["input"], ["logits"], 17,
                       dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    check_names_match_state_dict(onnx.load(str(d / "model.onnx")), model, "mlp")
    with torch.no_grad():
        ref = [model(x)]
    write_case(d, {"input": x.numpy()}, "ember's MNIST MLP (Flatten, Linear 784-128, ReLU, Linear 128-10), "
               "dynamic batch", "torchscript", torch_outputs=ref,
               other_shapes=[other_shape(model, ["input"], mnist_like(3, seed=200))])


def make_external_data(out):
    """The mlp case's model re-saved with every tensor in weights.bin."""
    d = fresh_dir(out / "external_data")
    src = out / "mlp"
    if not (src / "model.onnx").exists():
        make_mlp(out)
    proto = onnx.load(str(src / "model.onnx"))
    onnx.save_model(proto, str(d / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0, convert_attribute=False)
    x = np.load(src / "input.npy")
    expected = np.load(src / "expected_logits.npy")
    write_case(d, {"input": x}, "the mlp case with all initializers in external data weights.bin "
               "(onnx.save_model save_as_external_data, one file, size_threshold 0)", "torchscript",
               torch_outputs=[torch.from_numpy(expected)], extra_files=["weights.bin"])
    total = sum(f.stat().st_size for f in d.iterdir())
    assert total < MAX_SMALL_MODEL_BYTES, total


def make_mnist_cnn(out, small=True):
    """The CNN with dynamic batch, batch 4 (batch 1 for the large set), and (small set only) the
    fine-tuning reference:

      SGD(lr=0.05, momentum=0.9, dampening 0, no weight decay, not Nesterov) over all parameters,
      5 steps on the same batch (finetune_x (16, 1, 28, 28), finetune_y (16,) int64), model.train(),
      each step: zero_grad, loss = F.cross_entropy(model(x), y) (mean over the batch), record the loss,
      backward, step. finetune.json "losses" are the 5 losses before each update; "final_loss" the
      loss with the final weights; finetune_weights.safetensors the state dict after the 5 steps.
    """
    name = "mnist_cnn"
    d = fresh_dir(out / name)
    torch.manual_seed(0)
    model = mnist_cnn().eval()
    x = mnist_like(4 if small else 1, seed=101)
    export_torchscript(model, (x,), d / "model.onnx", ["input"], ["logits"], 17,
                       dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    proto = onnx.load(str(d / "model.onnx"))
    check_names_match_state_dict(proto, model, name)
    with torch.no_grad():
        ref = [model(x)]
    write_case(d, {"input": x.numpy()}, "ember's MNIST CNN (Conv 1-16 k5, ReLU, MaxPool 2, Conv 16-32 k5, ReLU, "
               "MaxPool 2, Flatten, Linear 512-10), dynamic batch; initializer names = state_dict keys",
               "torchscript", torch_outputs=ref, small=small,
               other_shapes=[other_shape(model, ["input"], mnist_like(2 if small else 5, seed=201))])
    if not small:
        return

    from safetensors.torch import save_file

    lr, momentum, steps = 0.05, 0.9, 5
    fx = mnist_like(16, seed=102)
    fy = torch.randint(0, 10, (16,), generator=torch.Generator().manual_seed(103), dtype=torch.int64)
    tuned = copy.deepcopy(model).train()
    # The start weights are the exported initializers.
    for t in proto.graph.initializer:
        assert np.array_equal(numpy_helper.to_array(t), tuned.state_dict()[t.name].numpy())
    opt = torch.optim.SGD(tuned.parameters(), lr=lr, momentum=momentum)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(tuned(fx), fy)
        losses.append(float(loss.item()))
        loss.backward()
        opt.step()
    with torch.no_grad():
        final_loss = float(F.cross_entropy(tuned(fx), fy).item())
    np.save(d / "finetune_x.npy", fx.numpy())
    np.save(d / "finetune_y.npy", fy.numpy())
    save_file({k: v.detach().contiguous() for k, v in tuned.state_dict().items()},
              str(d / "finetune_weights.safetensors"))
    spec = {"optimizer": "sgd", "lr": lr, "momentum": momentum, "dampening": 0.0, "weight_decay": 0.0,
            "nesterov": False, "steps": steps, "loss": "cross_entropy", "reduction": "mean",
            "inputs": "finetune_x.npy", "targets": "finetune_y.npy", "losses": losses, "final_loss": final_loss,
            "weights": "finetune_weights.safetensors",
            "note": "model.train() (no dropout or batch norm in this CNN: the same as eval); the same batch "
                    "every step; each step zero_grad, loss = mean cross-entropy of model(x) vs y, record loss, "
                    "backward, SGD step (PyTorch momentum: buf = momentum * buf + grad, buf = grad on the first "
                    "step; p -= lr * buf); losses are before each step's update; start weights = model.onnx's "
                    "initializers; weights = the state dict after all steps"}
    (d / "finetune.json").write_text(json.dumps(spec, indent=2) + "\n")
    print(f"  finetune losses {losses} final {final_loss}")


def make_mnist_cnn_dynamo(out):
    d = fresh_dir(out / "mnist_cnn_dynamo")
    torch.manual_seed(0)
    model = mnist_cnn().eval()  # the same weights as mnist_cnn
    x = mnist_like(4, seed=104)
    export_dynamo(model, (x,), d / "model.onnx", ["input"], ["logits"],
                  dynamic_shapes=({0: torch.export.Dim("batch")},))
    proto = onnx.load(str(d / "model.onnx"))
    floats = {t.name for t in proto.graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    print(f"  dynamo initializers: {sorted(initializer_names(proto))}; "
          f"float ones = state_dict keys: {floats == set(model.state_dict())}")
    with torch.no_grad():
        ref = [model(x)]
    write_case(d, {"input": x.numpy()}, "the mnist_cnn model (same weights) from the dynamo exporter "
               "(torch.export), dynamic batch", "dynamo", torch_outputs=ref,
               other_shapes=[other_shape(model, ["input"], mnist_like(7, seed=202))])


def make_gpt_tiny(out):
    d = fresh_dir(out / "gpt_tiny")
    model = gpt_tiny_model(sdpa=False)
    idx = torch.randint(0, 65, (2, 32), generator=torch.Generator().manual_seed(105), dtype=torch.int64)
    export_torchscript(model, (idx,), d / "model.onnx", ["idx"], ["logits"], 17,
                       dynamic_axes={"idx": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}})
    with torch.no_grad():
        ref = [model(idx)]
    write_case(d, {"idx": idx.numpy()}, "ember's nanoGPT, tiny (vocab 65, context 32, 2 layers, 2 heads, 64 dims), "
               "random weights, explicit matmul + tril-buffer mask + softmax attention, erf GELU, tied lm_head; "
               "dynamic batch and sequence (<= 32)", "torchscript", torch_outputs=ref,
               other_shapes=[other_shape(model, ["idx"], torch.randint(0, 65, (3, 7))),
                             other_shape(model, ["idx"], torch.randint(0, 65, (1, 1)))])


def make_gpt_tiny_dynamo(out):
    d = fresh_dir(out / "gpt_tiny_dynamo")
    model = gpt_tiny_model(sdpa=True)
    idx = torch.randint(0, 65, (2, 32), generator=torch.Generator().manual_seed(106), dtype=torch.int64)
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=32)
    export_dynamo(model, (idx,), d / "model.onnx", ["idx"], ["logits"], dynamic_shapes=({0: batch, 1: seq},))
    with torch.no_grad():
        ref = [model(idx)]
    write_case(d, {"idx": idx.numpy()}, "the gpt_tiny model (same weights) with F.scaled_dot_product_attention"
               "(is_causal=True), dynamo exporter, dynamic batch and sequence", "dynamo", torch_outputs=ref,
               other_shapes=[other_shape(model, ["idx"], torch.randint(0, 65, (3, 7))),
                             other_shape(model, ["idx"], torch.randint(0, 65, (1, 1)))])


class BertLastHidden(nn.Module):
    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                         token_type_ids=token_type_ids).last_hidden_state


def make_bert_tiny(out):
    import transformers

    d = fresh_dir(out / "bert_tiny")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=128, max_position_embeddings=64)
    bert = transformers.BertModel._from_config(config, attn_implementation="eager")
    with torch.no_grad():  # random LayerNorm affines and biases (the default init makes them 1 and 0)
        for name, p in bert.named_parameters():
            if p.dim() == 1:
                p.copy_((1.0 if "LayerNorm.weight" in name else 0.0) + 0.1 * torch.randn_like(p))
    model = BertLastHidden(bert).eval()
    g = torch.Generator().manual_seed(107)
    ids = torch.randint(1, 1000, (2, 16), generator=g, dtype=torch.int64)
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 11:] = 0
    ids[1, 11:] = 0  # [PAD]
    names = ["input_ids", "attention_mask"]
    axes = {n: {0: "batch", 1: "seq"} for n in names + ["last_hidden_state"]}
    export_torchscript(model, (ids, mask), d / "model.onnx", names, ["last_hidden_state"], 14, dynamic_axes=axes)
    with torch.no_grad():
        ref = [model(ids, mask)]
    ids2 = torch.randint(1, 1000, (3, 9), generator=g, dtype=torch.int64)
    mask2 = torch.ones(3, 9, dtype=torch.int64)
    mask2[0, 6:] = 0
    write_case(d, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()},
               "transformers BertModel, tiny (vocab 1000, hidden 64, 2 layers, 2 heads, ffn 128), random init, "
               "eager attention, row 1 padded after 11 tokens; token_type_ids from the model's zero buffer; "
               "dynamic batch and sequence (<= 64)", "torchscript", torch_outputs=ref,
               other_shapes=[other_shape(model, names, ids2, mask2)])


class OldOps(nn.Module):
    """Ops whose ONNX signature changed after opset 9/11 (see make_old_opset)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(6, 5)
        self.drop = nn.Dropout(0.25)

    def forward(self, x):  # x (B, 4, 6)
        b = x.size(0)
        u = self.drop(x).unsqueeze(1)                     # Dropout, Unsqueeze axes=[1]: (B, 1, 4, 6)
        s = u.squeeze(1)                                  # Squeeze axes=[1]
        p1, p2, p3 = torch.split(s, [1, 2, 3], dim=2)     # Split split=[1, 2, 3]
        sl = x[:, 1:3, 2:5]                               # Slice: (B, 2, 3)
        mean = x.mean(dim=2, keepdim=True)                # ReduceMean axes=[2]
        total = x.sum(dim=1)                              # ReduceSum axes=[1] keepdims=0
        top = x.amax(dim=(1, 2))                          # ReduceMax axes=[1, 2]
        clipped = torch.clamp(x, -0.5, 0.75)              # Clip
        padded = F.pad(x, (1, 2), value=0.5)              # Pad (last dim 6 -> 9)
        flat = torch.flatten(padded, 1)                   # Flatten axis=1: (B, 36)
        soft = F.softmax(x, dim=1)                        # softmax on a non-last axis
        mixed = torch.cat([p3 * 2.0, p1 - mean, p2], dim=2).transpose(1, 2)  # Concat, Transpose: (B, 6, 4)
        lin = self.lin(mixed.reshape(-1, 8)[:, :6])           # Reshape -1: (3B, 8) -> (3B, 5)
        out_a = torch.cat([flat, clipped.reshape(b, -1), soft.reshape(b, -1)], dim=1)
        out_b = lin.reshape(b, -1) + top.unsqueeze(1)
        return out_a, out_b, sl, total


def add_old_opset_nodes(path, opset):
    """Appends hand-made nodes the exporter never emits: Reshape with a 0 (copy this dim) in the shape,
    and a Softmax with axis=1 on a 3-D tensor, which before opset 13 means a softmax over the
    flattened dims 1.. (the 2-D coercion), not over dim 1 alone."""
    proto = onnx.load(str(path))
    g = proto.graph
    x = g.input[0].name
    g.initializer.append(numpy_helper.from_array(np.array([0, -1], dtype=np.int64), "reshape_zero_shape"))
    g.node.append(helper.make_node("Reshape", [x, "reshape_zero_shape"], ["reshape_zero"], name="ReshapeZero"))
    g.node.append(helper.make_node("Softmax", [x], ["softmax_coerced"], name="SoftmaxCoerced", axis=1))
    g.output.append(helper.make_tensor_value_info("reshape_zero", onnx.TensorProto.FLOAT, ["batch", 24]))
    g.output.append(helper.make_tensor_value_info("softmax_coerced", onnx.TensorProto.FLOAT, ["batch", 4, 6]))
    assert default_opset(proto) == opset
    onnx.save(proto, str(path))


def make_old_opset(out, case, opset):
    d = fresh_dir(out / case)
    torch.manual_seed(7)
    model = OldOps()
    x = torch.randn(3, 4, 6, generator=torch.Generator().manual_seed(108))
    outputs = ["out_a", "out_b", "sliced", "total"]
    axes = {n: {0: "batch"} for n in ["x"] + outputs}
    # training=TRAINING with the model in train mode keeps the Dropout node (ratio attribute, no
    # training_mode input before opset 12: onnxruntime runs it as the identity, as in inference).
    model.train()
    export_torchscript(model, (x,), d / "model.onnx", ["x"], outputs, opset, dynamic_axes=axes,
                       do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
    add_old_opset_nodes(d / "model.onnx", opset)
    model.eval()
    def reference(x):
        with torch.no_grad():
            n = x.size(0)
            return list(model(x)) + [x.reshape(n, -1), F.softmax(x.reshape(n, -1), dim=1).reshape(n, 4, 6)]

    ref = reference(x)
    x2 = torch.randn(5, 4, 6)
    write_case(d, {"x": x.numpy()}, f"opset {opset}: Dropout, Squeeze/Unsqueeze axes, Split split, Slice, "
               "ReduceMean/Sum/Max axes, Clip, Pad, Flatten, Softmax on a non-last axis, Concat, Transpose, Reshape "
               "-1; plus hand-added Reshape [0, -1] and Softmax axis=1 on 3-D (old 2-D coercion)",
               "torchscript", torch_outputs=ref, other_shapes=[({"x": x2.numpy()}, reference(x2))])


class ZooA(nn.Module):
    """Convolutions, pooling, batch norm."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn1 = nn.BatchNorm2d(8)                       # after a ReLU: not folded into the conv
        self.conv2 = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=4)
        self.conv3 = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)  # depthwise
        self.conv4 = nn.Conv2d(8, 6, (3, 1), stride=(2, 1), padding=(1, 0))
        self.deconv = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
        self.deconv2 = nn.ConvTranspose2d(8, 2, 2, stride=2, groups=2)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.maxpool_ceil = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.avgpool = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)
        self.avgpool_inc = nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=True)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.bn2 = nn.BatchNorm1d(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):  # x (B, 3, 16, 16)
        h = self.bn1(torch.relu(self.conv1(x)))           # (B, 8, 8, 8)
        h = torch.sigmoid(self.conv2(h)) * torch.tanh(self.conv3(h))
        pooled = self.maxpool(h) + self.avgpool(h) - 0.5 * self.avgpool_inc(h)  # (B, 8, 4, 4)
        logits = self.fc(self.bn2(self.gap(pooled).flatten(1)))
        return logits, self.deconv(h), self.deconv2(h), self.conv4(h), self.maxpool_ceil(h)


class ZooB(nn.Module):
    """Elementwise math, comparisons, shape ops, normalizations, reductions, matmuls."""

    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(6)
        self.fc = nn.Linear(6, 4)
        self.w = nn.Parameter(torch.randn(3, 6, 5) * 0.5)
        self.scale = nn.Parameter(torch.randn(6))
        self.register_buffer("idx", torch.tensor([3, 0, 5, 5]))

    def forward(self, x, y):  # x, y (B, T, 6)
        b, t, c = x.shape
        math_ = (torch.erf(x) + torch.sqrt(torch.abs(y) + 0.1) - torch.exp(-x * x)
                 + torch.log(torch.abs(x) + 1.0))                                   # Erf Sqrt Abs Exp Neg Log
        power = torch.pow(torch.abs(y) + 0.5, 1.7) + torch.pow(torch.abs(x) + 0.5, y)  # Pow
        select = torch.where(x > y, x, 2.0 * y)                                    # Greater Where
        compare = ((x < 0).to(torch.float32) + 2.0 * (torch.floor(x) == torch.floor(y)).to(torch.float32)
                   + torch.floor(x * 3.0).to(torch.int64).to(torch.float32))       # Less Equal Floor Cast
        pos = torch.arange(t).to(torch.float32)                                    # Range
        zeros = torch.zeros(x.shape)                                               # ConstantOfShape
        expanded = self.scale.expand(b, t, c) + pos.view(1, t, 1) + zeros          # Expand
        gathered = x[:, :, self.idx]                                               # Gather
        strided = x[:, ::2, 1::2]                                                  # Slice step 2
        s1, s2, s3 = torch.split(x, [1, 2, 3], dim=2)                              # Split
        split = torch.cat([s3 * 2.0, s1, s2 - 1.0], dim=2)
        norms = torch.cat([self.ln(x), F.log_softmax(x, dim=-1), F.softmax(x, dim=1)], dim=2)  # LayerNorm,
        #                                                             LogSoftmax, Softmax on a non-last axis
        reduced = x.amax(dim=1) + torch.minimum(x, y).sum(dim=1) - torch.maximum(x, y).mean(dim=1)  # ReduceMax Min Max
        vmax, imax = torch.max(y, dim=2)                                           # ReduceMax ArgMax
        matmul = torch.matmul(x.unsqueeze(1), self.w)                              # MatMul, batch broadcast
        gemm = self.fc(x[:, 0])                                                    # Gather + Gemm transB
        return (math_ + power + select + compare, expanded, gathered, strided, split, norms, reduced,
                vmax, imax, matmul, gemm)


class ZooC(nn.Module):
    """CumSum (RoBERTa's position ids from the mask, a float running sum), TopK, flip."""

    def forward(self, x, mask):  # x (B, T, 6) float, mask (B, T) int64
        positions = torch.cumsum(mask, dim=1) * mask + 1                  # CumSum on int64
        running = torch.cumsum(x, dim=1)                                   # CumSum on float
        values, indices = torch.topk(x, 3, dim=-1)                         # TopK
        smallest, _ = torch.topk(x, 2, dim=1, largest=False)
        return positions, running, values, indices, smallest, torch.flip(x, dims=[1])


def make_ops_zoo_a(out):
    d = fresh_dir(out / "ops_zoo_a")
    torch.manual_seed(11)
    model = ZooA()
    with torch.no_grad():
        for bn in (model.bn1, model.bn2):
            bn.weight.copy_(1.0 + 0.3 * torch.randn_like(bn.weight))
            bn.bias.copy_(0.3 * torch.randn_like(bn.bias))
    model.train()
    with torch.no_grad():  # non-trivial running statistics
        for _ in range(4):
            model(torch.randn(6, 3, 16, 16) * 1.5 + 0.3)
    model.eval()
    assert not torch.allclose(model.bn1.running_var, torch.ones(8))
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(109))
    outputs = ["logits", "deconv", "deconv_grouped", "conv_strided", "maxpool_ceil"]
    axes = {n: {0: "batch"} for n in ["x"] + outputs}
    export_torchscript(model, (x,), d / "model.onnx", ["x"], outputs, 17, dynamic_axes=axes)
    with torch.no_grad():
        ref = list(model(x))
    write_case(d, {"x": x.numpy()}, "Conv (stride, padding, dilation, groups, depthwise, no bias, 3x1), "
               "ConvTranspose (stride 2, output_padding, groups), BatchNormalization (2-D after ReLU, 1-D; trained "
               "running stats), MaxPool (padding, ceil_mode), AveragePool (count_include_pad 0 and 1), "
               "GlobalAveragePool, Sigmoid, Tanh, Gemm", "torchscript", torch_outputs=ref,
               other_shapes=[other_shape(model, ["x"], torch.randn(3, 3, 16, 16))])


def make_ops_zoo_b(out):
    d = fresh_dir(out / "ops_zoo_b")
    torch.manual_seed(12)
    model = ZooB()
    with torch.no_grad():
        model.ln.weight.copy_(1.0 + 0.3 * torch.randn(6))
        model.ln.bias.copy_(0.3 * torch.randn(6))
    model.eval()
    g = torch.Generator().manual_seed(110)
    x = torch.randn(2, 5, 6, generator=g)
    y = torch.randn(2, 5, 6, generator=g)
    outputs = ["math", "expanded", "gathered", "strided", "split", "norms", "reduced", "max_values",
               "max_indices", "matmul", "gemm"]
    axes = {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}
    export_torchscript(model, (x, y), d / "model.onnx", ["x", "y"], outputs, 17, dynamic_axes=axes)
    with torch.no_grad():
        ref = list(model(x, y))
    write_case(d, {"x": x.numpy(), "y": y.numpy()}, "Erf Sqrt Abs Exp Neg Log Pow Where Greater Less Equal "
               "Floor Cast Range ConstantOfShape Expand Gather Slice(step 2) Split(unequal) LayerNormalization "
               "LogSoftmax Softmax(axis 1) ReduceMax ArgMax Min Max MatMul(batch broadcast) Gemm(transB); dynamic "
               "batch and sequence", "torchscript", torch_outputs=ref,
               other_shapes=[other_shape(model, ["x", "y"], torch.randn(3, 8, 6), torch.randn(3, 8, 6))])


def make_ops_zoo_c(out):
    d = fresh_dir(out / "ops_zoo_c")
    model = ZooC().eval()
    g = torch.Generator().manual_seed(111)
    x = torch.randn(2, 5, 6, generator=g)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    outputs = ["positions", "running", "top_values", "top_indices", "smallest", "flipped"]
    axes = {"x": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}}
    export_torchscript(model, (x, mask), d / "model.onnx", ["x", "mask"], outputs, 17, dynamic_axes=axes)
    with torch.no_grad():
        ref = list(model(x, mask))
    write_case(d, {"x": x.numpy(), "mask": mask.numpy()}, "CumSum (int64 and float), TopK (largest and smallest, "
               "values and indices), flip; dynamic batch and sequence", "torchscript", torch_outputs=ref,
               other_shapes=[other_shape(model, ["x", "mask"], torch.randn(3, 4, 6), torch.ones(3, 4, dtype=torch.int64))])


SMALL_CASES = {
    "mlp": make_mlp,
    "external_data": make_external_data,
    "mnist_cnn": make_mnist_cnn,
    "mnist_cnn_dynamo": make_mnist_cnn_dynamo,
    "gpt_tiny": make_gpt_tiny,
    "gpt_tiny_dynamo": make_gpt_tiny_dynamo,
    "bert_tiny": make_bert_tiny,
    "ops_old_opset": lambda out: make_old_opset(out, "ops_old_opset", 11),
    "ops_opset9": lambda out: make_old_opset(out, "ops_opset9", 9),
    "ops_zoo_a": make_ops_zoo_a,
    "ops_zoo_b": make_ops_zoo_b,
    "ops_zoo_c": make_ops_zoo_c,
}


# --- large cases -------------------------------------------------------------------------------------


def conv3x3(cin, cout, stride=1):
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ResNet (resnet18 = BasicBlock, [2, 2, 2, 2]), the same module names."""

    def __init__(self, layers=(2, 2, 2, 2), num_classes=1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride=stride, bias=False),
                                       nn.BatchNorm2d(planes))
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        layers += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def make_resnet18(out):
    d = fresh_dir(out / "resnet18")
    torch.manual_seed(18)
    model = ResNet()
    # Running statistics from two batches (cumulative average), so that the eval-mode activations stay
    # of order 1 through the 18 layers; random BN affines.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.copy_(1.0 + 0.1 * torch.randn_like(m.weight))
                m.bias.copy_(0.1 * torch.randn_like(m.bias))
                m.momentum = None
        model.train()
        for _ in range(2):
            model(torch.randn(2, 3, 224, 224))
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.momentum = 0.1
    model.eval()
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(118))
    export_torchscript(model, (x,), d / "model.onnx", ["input"], ["logits"], 17,
                       dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    with torch.no_grad():
        ref = [model(x)]
    write_case(d, {"input": x.numpy()}, "torchvision-architecture ResNet-18 (BasicBlock [2,2,2,2], 1000 classes), "
               "random weights, eval (BatchNorm folded into the convs by the exporter), dynamic batch",
               "torchscript", atol=1e-3, rtol=1e-3, torch_outputs=ref, small=False,
               other_shapes=[other_shape(model, ["input"], torch.randn(2, 3, 224, 224))])


def make_minilm(out):
    from transformers import AutoModel, AutoTokenizer

    d = fresh_dir(out / "minilm")
    tokenizer = AutoTokenizer.from_pretrained(str(MINILM_DIR), local_files_only=True)
    bert = AutoModel.from_pretrained(str(MINILM_DIR), local_files_only=True, attn_implementation="eager")
    model = BertLastHidden(bert).eval()
    enc = tokenizer(["ember imports ONNX models: a MiniLM sentence embedding, run on the CPU and the GPU."],
                    padding="max_length", max_length=128, truncation=True, return_tensors="pt")
    ids = enc["input_ids"].to(torch.int64)
    mask = enc["attention_mask"].to(torch.int64)
    types = enc["token_type_ids"].to(torch.int64)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    enc2 = tokenizer(["A second, shorter text.", "And a third one, a little longer than the second text."],
                     padding=True, return_tensors="pt")
    batch2 = [enc2[n].to(torch.int64) for n in names]
    axes = {n: {0: "batch", 1: "seq"} for n in names + ["last_hidden_state"]}
    export_torchscript(model, (ids, mask, types), d / "model.onnx", names, ["last_hidden_state"], 17,
                       dynamic_axes=axes)
    with torch.no_grad():
        ref = [model(ids, mask, types)]
    write_case(d, {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": types.numpy()},
               "pretrained MiniLM-L6-H384 (data/minilm, all-MiniLM-L6-v2's BertModel), eager attention, one "
               "tokenized sentence padded to 128; dynamic batch and sequence", "torchscript", atol=1e-3, rtol=1e-3,
               torch_outputs=ref, small=False, other_shapes=[other_shape(model, names, *batch2)])


LARGE_CASES = {
    "resnet18": make_resnet18,
    "minilm": make_minilm,
    "mnist_cnn": lambda out: make_mnist_cnn(out, small=False),
}


# --- main --------------------------------------------------------------------------------------------


def print_table():
    print()
    print(f"{'case':<18} {'bytes':>10} {'opset':>5} {'ir':>3} {'exporter':<11} {'torch-ort':>9}  op types")
    for r in RESULTS:
        diff = "-" if r["torch_diff"] is None else f"{r['torch_diff']:.1e}"
        print(f"{r['case']:<18} {r['size']:>10} {r['opset']:>5} {r['ir']:>3} {r['exporter']:<11} {diff:>9}  "
              f"{' '.join(r['ops'])}")
    print()
    for r in RESULTS:
        ins = ", ".join(f"{n} {list(s)} {t}" for n, s, t in r["inputs"])
        outs = ", ".join(f"{n} {list(s)} {t}" for n, s, t in r["outputs"])
        print(f"{r['case']}: inputs {ins}; outputs {outs}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--large", nargs="?", const=str(LARGE_DIR), default=None, metavar="DIR",
                        help=f"write the large cases into DIR (default {LARGE_DIR.relative_to(ROOT)})")
    parser.add_argument("--only", action="append", metavar="NAME", help="build only this case (repeatable)")
    parser.add_argument("--out", default=None, help=f"directory for the small cases (default {SMALL_DIR})")
    args = parser.parse_args()

    cases = LARGE_CASES if args.large is not None else SMALL_CASES
    out = Path(args.large) if args.large is not None else Path(args.out) if args.out else SMALL_DIR
    names = args.only or list(cases)
    for name in names:
        if name not in cases:
            sys.exit(f"unknown case {name!r}; choose from {', '.join(cases)}")
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        print(f"{name} ...", flush=True)
        cases[name](out)
    print_table()
    if args.large is None:
        total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
        print(f"\n{out}: {total} bytes in all")


if __name__ == "__main__":
    main()
