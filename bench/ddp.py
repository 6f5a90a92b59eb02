#!/usr/bin/env python3
"""Data-parallel training side by side, in interleaved rounds (docs/distributed.md):

  python3 bench/ddp.py [--ember build/ember] [--rounds 3] [--quick]

For the MNIST CNN and the default GPT it times 1 process x 2 threads against 2 ranks x 1 thread on
MPI and on Gloo, and for the GPT it sweeps the gradient bucket size on MPI. Each row gives the
median throughput over the rounds, the all-reduce time on the communication thread, the share of it
that ran while backward did (hidden), and how long the end of backward waited for it (exposed).
Needs nothing beyond the standard library; it reads `ember train ... --json`.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_RANKS = os.path.join(HERE, "..", "tests", "dist", "run_ranks.sh")


def run(command, env_threads=None):
    env = dict(os.environ)
    if env_threads is not None:
        env["EMBER_NUM_THREADS"] = str(env_threads)
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def overlap_from_trace(path):
    """The share of the gradient all-reduces' time (ranges on the communication thread's track) that
    lies inside backward (from the first to the last backward event of its training step, on the
    main thread's track), and the number of all-reduces."""
    events = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"] == "train step" and e["tid"] == 0]
    backward = []
    for start, end in steps:
        inside = [e for e in events if e["tid"] == 0 and e["args"].get("phase") == "backward" and
                  start <= e["ts"] <= end]
        if inside:
            backward.append((min(e["ts"] for e in inside), max(e["ts"] + e["dur"] for e in inside)))
    # The gradient buckets are float32; the loss's reduction for printing is a float64 scalar.
    comm = [e for e in events if e["tid"] != 0 and e["name"].startswith("all_reduce #") and "float32" in e["name"]]
    total = sum(e["dur"] for e in comm)
    hidden = 0.0
    for e in comm:
        for start, end in backward:
            hidden += max(0.0, min(end, e["ts"] + e["dur"]) - max(start, e["ts"]))
    return (hidden / total if total else 0.0), len(comm)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ember", default=os.path.join(HERE, "..", "build", "ember"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="shorter runs (a smoke test of the script)")
    args = parser.parse_args()

    cnn = [args.ember, "train", "mnist", "--epochs", "1" if args.quick else "3", "--json"]
    gpt_steps = "6" if args.quick else "40"
    gpt = [args.ember, "train", "gpt", "--steps", gpt_steps, "--warmup", "2", "--eval-every", gpt_steps,
           "--eval-batches", "1", "--sample", "1", "--json"]
    rate = {"mnist": "samples_per_second", "gpt": "tokens_per_second"}
    configs = [
        ("cnn", "1 process x 2 threads", cnn + ["--threads", "2"], None),
        ("cnn", "2 ranks x 1 thread, mpi", ["bash", RUN_RANKS, "mpi", "2"] + cnn + ["--ddp"], 1),
        ("cnn", "2 ranks x 1 thread, gloo", ["bash", RUN_RANKS, "gloo", "2"] + cnn + ["--ddp"], 1),
        ("gpt", "1 process x 2 threads", gpt + ["--threads", "2"], None),
    ]
    for mb in ["25", "4", "1", "0.25"]:
        configs.append(("gpt", f"2 ranks x 1 thread, mpi, {mb} MB buckets",
                        ["bash", RUN_RANKS, "mpi", "2"] + gpt + ["--ddp", "--bucket-mb", mb], 1))
    configs.append(("gpt", "2 ranks x 1 thread, gloo, 1 MB buckets",
                    ["bash", RUN_RANKS, "gloo", "2"] + gpt + ["--ddp", "--bucket-mb", "1"], 1))

    results = {i: [] for i in range(len(configs))}
    for round_index in range(args.rounds):
        for i, (_, name, command, threads) in enumerate(configs):
            results[i].append(run(command, threads))
            print(f"round {round_index + 1}/{args.rounds}: {configs[i][0]} {name}", file=sys.stderr)

    print(f"{'model':5} {'setup':40} {'throughput':>19} {'buckets':>8} {'all-reduce s':>13} {'hidden':>7} "
          f"{'exposed s':>10}")
    for i, (model, name, _, _) in enumerate(configs):
        runs = results[i]
        key = rate["mnist" if model == "cnn" else "gpt"]
        throughput = statistics.median(r[key] for r in runs)
        if "ranks" in runs[0]:
            comm = statistics.median(r["communication_seconds"] for r in runs)
            hidden = statistics.median(
                r["hidden_communication_seconds"] / r["communication_seconds"] if r["communication_seconds"] else 0
                for r in runs)
            exposed = statistics.median(r["exposed_communication_seconds"] for r in runs)
            extra = f"{runs[0]['buckets']:>8} {comm:>13.3f} {100 * hidden:>6.0f}% {exposed:>10.3f}"
        else:
            extra = f"{'':>8} {'':>13} {'':>7} {'':>10}"
        unit = "samples/s" if model == "cnn" else "tokens/s"
        print(f"{model:5} {name:40} {throughput:>9.0f} {unit:<9} {extra}")

    # The overlap again, read off a profile: rank 0's Chrome trace of the GPT with 1 MB buckets.
    with tempfile.TemporaryDirectory() as folder:
        trace = os.path.join(folder, "trace.json")
        run(["bash", RUN_RANKS, "mpi", "2"] + gpt + ["--ddp", "--bucket-mb", "1", "--profile", trace], 1)
        share, count = overlap_from_trace(trace)
    print(f"profile (gpt, mpi, 1 MB buckets): {count} gradient all-reduces on the communication thread's track, "
          f"{100 * share:.0f}% of their time inside backward")


if __name__ == "__main__":
    main()
