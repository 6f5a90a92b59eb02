"""The MNIST CNN's inference on one image: WebAssembly with SIMD128 and without (in Node), against
native ember on one thread (`ember bench`'s infer_cnn_b1), in interleaved rounds on the same machine.

    python3 bench/wasm.py [--rounds 5]

Needs build/ember (the native build) and both WebAssembly builds: scripts/build-wasm and
scripts/build-wasm --no-simd. --also LABEL=FOLDER adds the web folder of another WebAssembly build
(e.g. one configured with -DCMAKE_BUILD_TYPE=Release, -O3 instead of the default -Os). Prints medians of the rounds, each side's ratio to native, the
modules' sizes and /proc/pressure/cpu before and after (a busy machine makes the ratios noisy).
"""
import argparse
import gzip
import json
import statistics
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIDES = {
    "native, 1 thread": None,
    "WebAssembly SIMD128 (Node)": ROOT / "build-wasm/web",
    "WebAssembly, no SIMD (Node)": ROOT / "build-wasm-nosimd/web",
}


def pressure() -> str:
    try:
        return Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return "n/a"


def time_side(web: Path | None) -> float:
    if web is None:
        out = subprocess.run([str(ROOT / "build/ember"), "bench", "--filter", "^infer_cnn_b1$", "--threads", "1",
                              "--json"], check=True, capture_output=True, text=True).stdout
    else:
        out = subprocess.run(["node", str(ROOT / "bench/wasm_infer.js"), str(web)], check=True, capture_output=True,
                             text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["seconds"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--also", action="append", default=[], metavar="LABEL=FOLDER")
    args = parser.parse_args()
    for also in args.also:
        label, _, folder = also.partition("=")
        SIDES[label] = Path(folder).resolve()
    for name, web in SIDES.items():
        if web is not None and not (web / "ember_wasm.wasm").exists():
            raise SystemExit(f"{web / 'ember_wasm.wasm'} is missing (scripts/build-wasm [--no-simd] makes it)")
    print(f"before: {pressure()}")
    times = {name: [] for name in SIDES}
    names = list(SIDES)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:  # the order rotates
            times[name].append(time_side(SIDES[name]))
    print(f"after: {pressure()}")
    native = statistics.median(times[names[0]])
    print(f"\n| MNIST CNN, 1 image | median latency | rounds | x native | .wasm | gzipped |")
    print("|---|---|---|---|---|---|")
    for name in names:
        median = statistics.median(times[name])
        spread = f"{min(times[name]) * 1e6:.0f}-{max(times[name]) * 1e6:.0f} us"
        size = gz = "-"
        if SIDES[name] is not None:
            data = (SIDES[name] / "ember_wasm.wasm").read_bytes()
            size, gz = f"{len(data) / 1e6:.2f} MB", f"{len(gzip.compress(data, 9)) / 1e6:.2f} MB"
        print(f"| {name} | {median * 1e6:.0f} us | {spread} | {median / native:.2f} | {size} | {gz} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
