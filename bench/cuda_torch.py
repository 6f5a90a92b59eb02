"""PyTorch CUDA beside ember's CUDA kernels, for scripts/gpu-check.

  python3 bench/cuda_torch.py --json FILE
  python3 bench/cuda_torch.py --merge EMBER_JSON TORCH_JSON --out FILE

--json times PyTorch on the rows ember_cuda_bench times, with the same names, shapes, dtypes and
byte and flop counts: fresh random inputs per row, 3 warm-up calls, then 25 calls each timed by a
pair of CUDA events; a row's time is their median, its spread (max - min) / median. The copy row's
bandwidth is the card's measured ceiling.

--merge puts the two files side by side (either may be missing, or lack rows of the other),
writes FILE and prints the table: torch/ember above 1 means ember is faster; "of copy" is ember's
bandwidth over PyTorch's device-to-device copy, for the rows that only move memory.
"""

import argparse
import datetime
import json
import statistics
import subprocess
import sys

M = 2**20
N = 64 * M  # the elementwise and reduction rows
S = 8192  # the square rows
K = 4096  # the float32 matmuls

RESNET = (32, 64, 56, 56)
CONV_FLOPS = 2 * 32 * 64 * 56 * 56 * 64 * 9

# name, op, shape, dtype, TF32 allowed, bytes, flops
ROWS = [
    ("d2d_copy_f32_256M", "copy", 256 * M, "float32", False, 2 * 4 * 256 * M, 0),
    ("add_f32_64M", "add", N, "float32", False, 3 * 4 * N, 0),
    ("add_bf16_64M", "add", N, "bfloat16", False, 3 * 2 * N, 0),
    ("add_bcast_f32_8192x8192", "add_row", (S, S), "float32", False, (2 * S * S + S) * 4, 0),
    ("gelu_f32_64M", "gelu", N, "float32", False, 2 * 4 * N, 0),
    ("sum_f32_64M", "sum", N, "float32", False, 4 * N, 0),
    ("softmax_f32_8192x8192", "softmax", (S, S), "float32", False, 2 * 4 * S * S, 0),
    ("layernorm_f32_8192x8192", "layernorm", (S, S), "float32", False, 2 * 4 * S * S, 0),
    ("matmul_f32_4096", "matmul", (K, K), "float32", False, 3 * 4 * K * K, 2 * K**3),
    ("matmul_tf32_4096", "matmul", (K, K), "float32", True, 3 * 4 * K * K, 2 * K**3),
    ("matmul_bf16_8192", "matmul", (S, S), "bfloat16", False, 3 * 2 * S * S, 2 * S**3),
    # scores and their gradient's size read, the per-row losses written
    ("cross_entropy_f32_4096x32000", "cross_entropy", (4096, 32000), "float32", False, 4 * 4096 * 32000, 0),
    # 100 tensors of 100K: parameters, gradients, both moments read, three written
    ("adam_step_f32_10M", "adam", (100, 100_000), "float32", False, 7 * 4 * 10_000_000, 0),
    # ResNet's 3 x 3 convolutions of 64 channels at 56 x 56, batch 32; float32 without TF32, as ember
    ("conv2d_f32_resnet_b32", "conv", RESNET, "float32", False, 2 * 4 * 32 * 64 * 56 * 56, CONV_FLOPS),
    ("conv2d_bf16_resnet_b32", "conv", RESNET, "bfloat16", False, 2 * 2 * 32 * 64 * 56 * 56, CONV_FLOPS),
    ("conv2d_train_f32_resnet_b32", "conv_train", RESNET, "float32", False, 5 * 4 * 32 * 64 * 56 * 56,
     3 * CONV_FLOPS),
    # the stem's pooling, 3 x 3 stride 2 padding 1, with the indices the backward needs
    ("maxpool2d_f32_resnet_b32", "maxpool", (32, 64, 112, 112), "float32", False,
     (4 + 4 + 8 / 4) * 32 * 64 * 56 * 56, 0),
    # one Adam step of `ember train mnist`'s CNN, batch 64: launch-bound on both sides
    ("train_step_mnist_cnn_b64", "mnist_step", (64, 1, 28, 28), "float32", False, 0, 0),
]


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def gbps(row):
    return row["bytes"] / row["median_ms"] / 1e6 if row and row["bytes"] and row["median_ms"] else None


def tflops(row):
    return row["flops"] / row["median_ms"] / 1e9 if row and row["flops"] and row["median_ms"] else None


def setup(torch, op, shape, dtype):
    """Makes the inputs of a row and returns the call to time."""
    dtype = getattr(torch, dtype)
    if op == "adam":  # PyTorch's default Adam on CUDA (the multi-tensor form)
        params = [torch.randn(shape[1], device="cuda", dtype=dtype, requires_grad=True) for _ in range(shape[0])]
        for p in params:
            p.grad = torch.randn_like(p)
        optimizer = torch.optim.Adam(params, lr=1e-3)
        return optimizer.step
    if op == "cross_entropy":
        scores = torch.randn(shape, device="cuda", dtype=dtype)
        target = torch.randint(0, shape[1], (shape[0],), device="cuda")
        return lambda: torch.nn.functional.cross_entropy(scores, target, reduction="none")
    if op in ("conv", "conv_train"):
        x = torch.randn(shape, device="cuda", dtype=dtype, requires_grad=op == "conv_train")
        w = torch.randn(shape[1], shape[1], 3, 3, device="cuda", dtype=dtype, requires_grad=op == "conv_train")
        if op == "conv":
            return lambda: torch.nn.functional.conv2d(x, w, padding=1)
        grad = torch.randn(shape, device="cuda", dtype=dtype)
        return lambda: torch.nn.functional.conv2d(x, w, padding=1).backward(grad)
    if op == "mnist_step":
        nn = torch.nn
        model = nn.Sequential(nn.Conv2d(1, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 5), nn.ReLU(),
                              nn.MaxPool2d(2), nn.Flatten(), nn.Linear(512, 10)).to(device="cuda", dtype=dtype)
        optimizer = torch.optim.Adam(model.parameters())
        x = torch.randn(shape, device="cuda", dtype=dtype)
        y = torch.randint(0, 10, (shape[0],), device="cuda")

        def step():
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        return step
    if op == "layernorm":
        x = torch.randn(shape, device="cuda", dtype=dtype)
        w, b = torch.randn(shape[-1], device="cuda", dtype=dtype), torch.randn(shape[-1], device="cuda", dtype=dtype)
        return lambda: torch.nn.functional.layer_norm(x, (shape[-1],), w, b)
    if op == "maxpool":
        x = torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
        return lambda: torch.nn.functional.max_pool2d(x, 3, 2, 1)
    a, b = torch.randn(shape, device="cuda", dtype=dtype), None
    if op == "add_row":
        b = torch.randn(shape[-1], device="cuda", dtype=dtype)  # broadcast over the rows
    elif op in ("copy", "add", "matmul"):
        b = torch.randn(shape, device="cuda", dtype=dtype)
    calls = {
        "copy": lambda: b.copy_(a),
        "add": lambda: a + b,
        "add_row": lambda: a + b,
        "gelu": lambda: torch.nn.functional.gelu(a),  # the erf form
        "sum": lambda: a.sum(),
        "softmax": lambda: torch.softmax(a, -1),
        "matmul": lambda: a @ b,
    }
    return calls[op]


def allow_tf32(torch, allowed):
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # PyTorch 2.9 on
        torch.backends.cuda.matmul.fp32_precision = "tf32" if allowed else "ieee"
        torch.backends.cudnn.conv.fp32_precision = "tf32" if allowed else "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = allowed
        torch.backends.cudnn.allow_tf32 = allowed


def measure(torch, call, warmups=3, repeats=25):
    for _ in range(warmups):
        call()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
    for start, end in events:
        start.record()
        call()
        end.record()
    torch.cuda.synchronize()
    times = [start.elapsed_time(end) for start, end in events]
    median = statistics.median(times)
    return median, (max(times) - min(times)) / median


def driver_version():
    try:
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        return subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def time_torch(path):
    import torch

    result = {"peer": "pytorch", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "cuda": torch.version.cuda, "driver": driver_version(), "date": now(), "rows": []}
    print(f"{result['device']}, torch {result['torch']}, CUDA {result['cuda']}, driver {result['driver']}")
    for name, op, shape, dtype, tf32, nbytes, flops in ROWS:
        allow_tf32(torch, tf32)
        torch.manual_seed(0)
        try:
            median, spread = measure(torch, setup(torch, op, shape, dtype))
        except RuntimeError as error:  # out of memory, a missing kernel: the other rows still count
            print(f"{name:<26} failed: {error}")
            continue
        row = {"name": name, "median_ms": median, "spread": spread, "bytes": nbytes, "flops": flops}
        result["rows"].append(row)
        rate = f"{tflops(row):8.1f} TFLOP/s" if flops else f"{gbps(row):8.1f} GB/s" if nbytes else ""
        print(f"{name:<26} {median:9.3f} ms  spread {spread:6.1%}  {rate}")
        torch.cuda.empty_cache()
    with open(path, "w") as f:
        json.dump(result, f, indent=1)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as error:
        print(f"cuda_torch: {path}: {error}", file=sys.stderr)
        return {}


def merge(ember_path, torch_path, out_path):
    ember, peer = load(ember_path), load(torch_path)
    ember_rows = {row["name"]: row for row in ember.get("rows", [])}
    torch_rows = {row["name"]: row for row in peer.get("rows", [])}
    names = list(ember_rows) + [name for name in torch_rows if name not in ember_rows]
    ceiling = gbps(torch_rows.get("d2d_copy_f32_256M"))
    rows = []
    for name in names:
        mine, theirs = ember_rows.get(name), torch_rows.get(name)
        ember_ms = mine["median_ms"] if mine else None
        torch_ms = theirs["median_ms"] if theirs else None
        memory_only = mine and mine["bytes"] and not mine["flops"]
        rows.append({"name": name, "ember_ms": ember_ms, "torch_ms": torch_ms,
                     "ratio": torch_ms / ember_ms if ember_ms and torch_ms else None,
                     "ember_gbps": gbps(mine), "ember_tflops": tflops(mine),
                     "bw_fraction": gbps(mine) / ceiling if memory_only and ceiling else None})
    result = {"date": peer.get("date") or now(), "device": ember.get("device") or peer.get("device"),
              "torch": peer.get("torch"),
              "cuda": peer.get("cuda"), "driver": peer.get("driver"),
              "rows": rows}
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)

    def cell(value, spec):
        return "-" if value is None else format(value, spec)

    print(f"{result['device'] or 'device unknown'}, torch {result['torch'] or '-'},"
          f" copy ceiling {cell(ceiling, '.0f')} GB/s")
    columns = [("ember_ms", "ember ms", ".3f"), ("torch_ms", "torch ms", ".3f"), ("ratio", "torch/ember", ".2f"),
               ("ember_gbps", "GB/s", ".0f"), ("ember_tflops", "TFLOP/s", ".1f"), ("bw_fraction", "of copy", ".0%")]
    print(f"{'row':<26}" + "".join(f" {title:>11}" for _, title, _ in columns))
    for row in rows:
        print(f"{row['name']:<26}" + "".join(f" {cell(row[key], spec):>11}" for key, _, spec in columns))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--json", metavar="FILE", help="time PyTorch and write FILE")
    mode.add_argument("--merge", nargs=2, metavar=("EMBER_JSON", "TORCH_JSON"), help="compare two result files")
    parser.add_argument("--out", metavar="FILE", help="where --merge writes the comparison")
    args = parser.parse_args()
    if args.json:
        time_torch(args.json)
    elif not args.out:
        parser.error("--merge needs --out")
    else:
        merge(*args.merge, args.out)


if __name__ == "__main__":
    main()
