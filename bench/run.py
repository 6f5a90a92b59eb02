#!/usr/bin/env python3
"""The benchmark runner behind scripts/bench: ember against PyTorch (eager and torch.compile),
NumPy, onnxruntime and llama.cpp (the llm_* rows), interleaved, with the machine's own limits as the
yardstick.

  bench/run.py [--filter REGEX] [--quick] [--threads T] [--rounds R] [--write-docs]
  bench/run.py --check bench/baseline.json [--from bench/results/latest.json]
  bench/run.py --load [--filter REGEX] [--quick] [--rounds R] [--write-docs]
  bench/run.py --self-test

For each workload: every peer is set up and warmed up once (torch.compile compiles here, untimed),
then R rounds each time ember (a fresh `ember bench --filter '^name$' --json` process) and every
peer in-process, in an order that rotates from round to round; a round's number is the median of
its samples, and the reported time is the median over rounds. The machine's peaks (FMA and
streaming bandwidth) are measured first by `ember bench --machine`. Same thread count everywhere.

Writes bench/results/latest.json and bench/results/latest_detail.json (every round, the spread,
the peaks in full). Beside every workload a probe (`ember bench --machine`, before and after its
rounds) records the FMA rate the host delivers; after the run, the workloads timed while it was
under 85% of the run's best, and with --check those whose ratios fell, are timed again over 5
rounds (once the host is back at speed, waiting up to 2 minutes; at most --retime-minutes of it, 4 by
default), and the results and the check
read that second measurement (the first is kept in the detail). --quick skips both. The rows ending in _py (bench/python_rows.py) time ember from Python through its
bindings, in-process like the peers; their `cpp` peer is the same work as ember's C++ row. --load instead times single calls of ember and PyTorch eager, quiet and then
beside a `yes` process that keeps one core busy, and writes bench/results/load.json with the
medians and p99s. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DOCS = ROOT / "docs" / "performance.md"
PEER_ORDER = ("torch", "torch_compile", "numpy", "onnxruntime", "llama_cpp", "cpp")
PEER_TITLES = {"torch": "torch", "torch_compile": "compile", "numpy": "numpy", "onnxruntime": "ort",
               "llama_cpp": "llama.cpp", "cpp": "cpp"}
CHECK_TOLERANCE = 0.10  # --check flags a ratio that fell by more than this fraction
DOCS_BEGIN = "<!-- bench-table:begin (bench/run.py --write-docs) -->"
DOCS_END = "<!-- bench-table:end -->"
LOAD_BEGIN = "<!-- load-table:begin (bench/run.py --load --write-docs) -->"
LOAD_END = "<!-- load-table:end -->"
# The goals of a loaded run (docs/performance.md, "Under load"): with one of the cores taken by
# another process, a workload's median may grow at most this much, and no more than PyTorch's.
LOAD_LIMIT = 2.5


# --- ratios, shared by the table and --check ----------------------------------------------------------


def ridge_point(machine: dict) -> float:
    """FLOPs per byte above which the FMA peak, not the bandwidth, bounds a workload."""
    return machine["fma_peak_gflops"] / machine["stream_gbps"]


def peak_fraction(result: dict, machine: dict) -> tuple[str, float] | None:
    """("flops", share of the FMA peak) for compute-bound workloads, ("bw", share of the streaming
    bandwidth) for memory-bound ones, chosen by arithmetic intensity against the ridge point. None
    for workloads that measure overhead (dispatch) or move no data."""
    if result["name"].startswith("dispatch_") or result["bytes"] <= 0 or result["ember_s"] <= 0:
        return None
    if result["flops"] / result["bytes"] >= ridge_point(machine):
        return "flops", result["flops"] / result["ember_s"] / 1e9 / machine["fma_peak_gflops"]
    return "bw", result["bytes"] / result["ember_s"] / 1e9 / machine["stream_gbps"]


def speed_ratio(result: dict, peer: str) -> float | None:
    """peer time / ember time: > 1 means ember is faster."""
    peer_s = result.get("peers", {}).get(peer)
    if peer_s is None or result["ember_s"] <= 0:
        return None
    return peer_s / result["ember_s"]


def ratios(result: dict, machine: dict) -> dict[str, float]:
    """Every ratio --check compares: 'peak' and 'vs <peer>'."""
    out = {}
    fraction = peak_fraction(result, machine)
    if fraction is not None:
        out["peak"] = fraction[1]
    for peer in PEER_ORDER:
        r = speed_ratio(result, peer)
        if r is not None:
            out[f"vs {peer}"] = r
    return out


def check(current: dict, baseline: dict, tolerance: float = CHECK_TOLERANCE) -> list[str]:
    """The regressions of `current` against `baseline`: one line per ratio that fell by more than
    `tolerance` (a fraction). Workloads or peers missing from either side are not compared."""
    base_by_name = {r["name"]: r for r in baseline["results"]}
    problems = []
    for result in current["results"]:
        base = base_by_name.get(result["name"])
        if base is None:
            continue
        now, before = ratios(result, current["machine"]), ratios(base, baseline["machine"])
        for key in now:
            if key not in before or before[key] <= 0:
                continue
            change = now[key] / before[key] - 1
            if change < -tolerance:
                problems.append(f"{result['name']}: {key} ratio fell {-change:.1%} "
                                f"({before[key]:.3g} -> {now[key]:.3g}): {moved(result, base, key)}")
    return problems


def moved(result: dict, base: dict, key: str) -> str:
    """Which side of a ratio moved between `base` and `result`: ember's own time, and the peer's (or
    the machine's peak for the 'peak' ratio), so a fall that is only a faster peer reads as such."""

    def change(now: float, before: float) -> str:
        return f"{now / before - 1:+.0%}"

    parts = [f"ember's time {change(result['ember_s'], base['ember_s'])}"]
    if key.startswith("vs "):
        peer = key[3:]
        parts.append(f"{peer}'s {change(result['peers'][peer], base['peers'][peer])}")
    verdict = "ember slower" if result["ember_s"] > base["ember_s"] * (1 + CHECK_TOLERANCE / 2) else "ember not slower"
    return ", ".join(parts) + f" ({verdict})"


def self_test() -> int:
    """The check logic on synthetic results: a 15% drop must be flagged, a 5% drop must not."""
    machine = {"cpu": "test", "threads": 2, "fma_peak_gflops": 100.0, "stream_gbps": 10.0}
    baseline = {"machine": machine, "results": [
        {"name": "matmul", "ember_s": 1.0, "peers": {"torch": 1.2, "numpy": 1.1}, "flops": 80e9, "bytes": 1e6},
        {"name": "add", "ember_s": 1.0, "peers": {"torch": 1.0}, "flops": 1e6, "bytes": 8e9},
        {"name": "dispatch_add_f32_4x4", "ember_s": 1e-7, "peers": {"torch": 1e-6}, "flops": 16, "bytes": 192},
    ]}

    def scaled(name: str, ember_factor: float = 1.0, peer: str | None = None, peer_factor: float = 1.0,
               machine_factor: float = 1.0) -> dict:
        out = json.loads(json.dumps(baseline))
        out["machine"]["fma_peak_gflops"] *= machine_factor
        out["machine"]["stream_gbps"] *= machine_factor
        for r in out["results"]:
            if r["name"] == name:
                r["ember_s"] *= ember_factor
                if peer:
                    r["peers"][peer] *= peer_factor
        return out

    failures = []

    def expect(label: str, current: dict, flagged: list[str]):
        problems = check(current, baseline)
        got = sorted({p.split(":")[0] + ":" + p.split(":")[1].split(" ratio")[0] for p in problems})
        if "15% slower" in label and problems and not all("(ember slower)" in p for p in problems):
            failures.append(f"{label}: expected every line to say ember is slower ({problems})")
        if "peer 15% faster" in label and problems and not all("(ember not slower)" in p for p in problems):
            failures.append(f"{label}: expected every line to say ember is not slower ({problems})")
        want = sorted(flagged)
        if got != want:
            failures.append(f"{label}: expected {want}, got {got} ({problems})")

    expect("identical", baseline, [])
    # ember 15% slower relative to torch on matmul: vs torch and vs numpy fall ~13%, the peak share too.
    expect("15% slower", scaled("matmul", ember_factor=1 / 0.85),
           ["matmul: peak", "matmul: vs numpy", "matmul: vs torch"])
    expect("5% slower", scaled("matmul", ember_factor=1 / 0.95), [])
    # Only the torch ratio drops: torch got 15% faster, ember did not.
    expect("peer 15% faster", scaled("add", peer="torch", peer_factor=0.85), ["add: vs torch"])
    expect("peer 5% faster", scaled("add", peer="torch", peer_factor=0.95), [])
    # A slower machine (everything 15% slower, peaks too) changes no ratio.
    slow = scaled("matmul", machine_factor=0.85)
    for r in slow["results"]:
        r["ember_s"] /= 0.85
        r["peers"] = {k: v / 0.85 for k, v in r["peers"].items()}
    expect("uniformly slower machine", slow, [])
    # dispatch has no peak ratio; its torch ratio is still checked.
    expect("dispatch 15% slower", scaled("dispatch_add_f32_4x4", ember_factor=1 / 0.85),
           ["dispatch_add_f32_4x4: vs torch"])
    # Which baselines are of this CPU: the family and model decide; a name alone needs the peaks close.
    zen5 = {"cpu": "AMD EPYC (family 26, model 2)", "fma_peak_gflops": 480.0}
    for other, want in (({"cpu": "AMD EPYC (family 26, model 2)", "fma_peak_gflops": 300.0}, True),
                        ({"cpu": "AMD EPYC (family 25, model 17)", "fma_peak_gflops": 480.0}, False),
                        ({"cpu": "AMD EPYC", "fma_peak_gflops": 235.0}, False),
                        ({"cpu": "AMD EPYC", "fma_peak_gflops": 450.0}, True),
                        ({"cpu": "Intel(R) Xeon(R) Processor", "fma_peak_gflops": 480.0}, False)):
        if same_cpu(zen5, other) != want or same_cpu(other, zen5) != want:
            failures.append(f"same_cpu({zen5}, {other}) should be {want}")
    # A call of a long call's length is its own warm-up: measured once, with no untimed call first
    # when the caller says it is warm (the long rows of a full run, after their first round).
    sys.path.insert(0, str(ROOT / "bench"))
    import timing  # noqa: E402
    calls = []
    instant = timing.TimingPolicy(sample_seconds=0.0, budget_seconds=0.0, repeats=5, long_call_seconds=0.0)
    for warm, want in ((True, 2), (False, 1)):
        calls.clear()
        timed = timing.measure(lambda: calls.append(1), instant, warm=warm)
        if len(calls) != want or not timed.long_call(instant):
            failures.append(f"measure(warm={warm}) made {len(calls)} calls (want {want}), long_call "
                            f"{timed.long_call(instant)}")
    # A warm-up call of --cold-call seconds is the sample: one call in all.
    calls.clear()
    cold = timing.TimingPolicy(sample_seconds=0.0, budget_seconds=0.0, repeats=5, long_call_seconds=0.0,
                               cold_call_seconds=0.0)
    timed = timing.measure(lambda: calls.append(1), cold)
    if len(calls) != 1 or timed.samples != 1:
        failures.append(f"measure with cold_call_seconds=0 made {len(calls)} calls (want 1)")
    # ... and a set-up call that long is the first round's sample, except where it compiled.
    long_policy = timing.TimingPolicy(cold_call_seconds=10.0)
    for side, seconds, explicit, want in (("torch", 12.0, False, True), ("torch", 9.0, False, False),
                                          ("torch", None, False, False), ("torch_compile", 12.0, False, False),
                                          ("llama_cpp", 12.0, True, False)):
        if first_round_sample(side, seconds, explicit, long_policy) != want:
            failures.append(f"first_round_sample({side}, {seconds}, {explicit}) should be {want}")
    for f in failures:
        print("self-test FAILED:", f)
    if not failures:
        print("bench/run.py self-test: check logic OK (flags a 15% drop, not a 5% one)")
    return 1 if failures else 0


# Results written before the CPU's family and model were recorded name only the model ("AMD EPYC",
# which covers Zen 4 and Zen 5). Such a baseline is taken for this CPU when the name matches and the
# FMA peaks are within this factor of each other (Zen 5's is twice Zen 4's).
LEGACY_PEAK_FACTOR = 1.3


def same_cpu(here: dict, there: dict) -> bool:
    """Whether two runs' machines are one kind of CPU: the same name, family and model, or, for a
    machine recorded by name alone, the same name and an FMA peak within LEGACY_PEAK_FACTOR."""
    a, b = here["cpu"], there["cpu"]
    if a == b:
        return True
    if "(family " in a and "(family " in b:
        return False
    if a.split(" (family ")[0] != b.split(" (family ")[0]:
        return False
    peaks = sorted((here["fma_peak_gflops"], there["fma_peak_gflops"]))
    return peaks[0] > 0 and peaks[1] / peaks[0] <= LEGACY_PEAK_FACTOR


def run_check(current: dict, baseline_path: Path) -> int:
    if not baseline_path.exists():
        print(f"--check: no baseline at {baseline_path}. Make one from a run you trust: "
              f"cp bench/results/latest.json {baseline_path}", file=sys.stderr)
        return 2
    baseline = json.loads(baseline_path.read_text())
    here, there = current["machine"]["cpu"], baseline["machine"]["cpu"]
    if not same_cpu(current["machine"], baseline["machine"]):
        # Peak shares and peer ratios are properties of the CPU (an AMX Xeon runs PyTorch's bf16
        # products on tiles; its FMA peak is twice a Zen 4 core's): compare runs of one CPU only.
        matching = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "bench").glob("baseline*.json"))
                    if same_cpu(current["machine"], json.loads(p.read_text())["machine"])]
        print(f"--check: {baseline_path} was measured on {there!r} (FMA peak "
              f"{baseline['machine']['fma_peak_gflops']:.0f} GFLOP/s), this run on {here!r} (FMA peak "
              f"{current['machine']['fma_peak_gflops']:.0f} GFLOP/s); ratios of different CPUs are not comparable. "
              + (f"This CPU's baseline: {', '.join(matching)}." if matching else
                 f"Make one from a quiet run here: cp bench/results/latest.json bench/baseline_<cpu>.json"),
              file=sys.stderr)
        return 2
    problems = check(current, baseline)
    if problems:
        print(f"--check against {baseline_path}: {len(problems)} ratio(s) fell by more than "
              f"{CHECK_TOLERANCE:.0%}:")
        for p in problems:
            print("  " + p)
        return 1
    compared = len({r["name"] for r in baseline["results"]} & {r["name"] for r in current["results"]})
    print(f"--check against {baseline_path}: no ratio fell by more than {CHECK_TOLERANCE:.0%} "
          f"({compared} workloads compared)")
    return 0


# --- the table ----------------------------------------------------------------------------------------


def format_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-6:
        return f"{s * 1e9:.0f} ns"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def table_rows(latest: dict, detail: dict | None = None) -> tuple[list[str], list[list[str]]]:
    header = ["workload", "ember"] + [PEER_TITLES[p] for p in PEER_ORDER] + \
             [f"x {PEER_TITLES[p]}" for p in PEER_ORDER] + ["of peak", "noise"]
    rows = []
    for r in latest["results"]:
        row = [r["name"], format_seconds(r["ember_s"])]
        row += [format_seconds(r["peers"].get(p)) for p in PEER_ORDER]
        for p in PEER_ORDER:
            ratio = speed_ratio(r, p)
            row.append("-" if ratio is None else f"{ratio:.2f}")
        fraction = peak_fraction(r, latest["machine"])
        row.append("-" if fraction is None else f"{fraction[1]:.0%} {'FMA' if fraction[0] == 'flops' else 'BW'}")
        noise = (detail or {}).get(r["name"], {}).get("ember_noise")
        row.append("-" if noise is None else f"{noise:.0%}")
        rows.append(row)
    return header, rows


def print_table(latest: dict, detail: dict | None = None) -> None:
    header, rows = table_rows(latest, detail)
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    print(line(header))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))


def markdown_table(latest: dict, detail: dict | None = None) -> str:
    header, rows = table_rows(latest, detail)
    m = latest["machine"]
    out = [f"Machine: {m['cpu']}, {m['threads']} threads; measured FMA peak {m['fma_peak_gflops']:.0f} GFLOP/s "
           f"(f32), streaming bandwidth {m['stream_gbps']:.1f} GB/s; ridge point "
           f"{ridge_point(m):.1f} FLOP/byte.", ""]
    if detail and detail.get("_run"):
        run = detail["_run"]
        out += [f"Run: {run.get('date', '?')}, {run.get('rounds', '?')} round(s)"
                f"{' (--quick)' if run.get('quick') else ''}, torch {run.get('torch', '?')}, "
                f"numpy {run.get('numpy', '?')}, {run.get('seconds', 0) / 60:.1f} minutes.", ""]
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
    for row in rows:
        out.append("| " + " | ".join(row) + " |")
    return "\n".join(out) + "\n"


def write_section(begin: str, end: str, table: str) -> None:
    text = DOCS.read_text() if DOCS.exists() else ""
    if begin not in text or end not in text:
        raise SystemExit(f"--write-docs: {DOCS} has no '{begin}' ... '{end}' section to fill")
    before, rest = text.split(begin, 1)
    _, after = rest.split(end, 1)
    DOCS.write_text(before + begin + "\n" + table + end + after)
    print(f"wrote the table into {DOCS.relative_to(ROOT)}")


def write_docs(latest: dict, detail: dict | None) -> None:
    write_section(DOCS_BEGIN, DOCS_END, markdown_table(latest, detail))


# --- running ----------------------------------------------------------------------------------------


def ember_json(ember: Path, args: list[str], threads: int) -> list[dict]:
    out = subprocess.run([str(ember), "bench", "--json", "--threads", str(threads), *args], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def host_clock() -> tuple[float, float]:
    """(CPU seconds this process has used, all its threads: PyTorch's, onnxruntime's; seconds the
    hypervisor has stolen from this machine's CPUs, from /proc/stat where there is one)."""
    t = os.times()
    stolen = 0.0
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        stolen = int(fields[8]) / os.sysconf("SC_CLK_TCK")  # cpu user nice system idle iowait irq softirq steal
    except (OSError, IndexError, ValueError):
        pass
    return t.user + t.system, stolen


def settle(limit_s: float = 1.0, window_s: float = 0.005, idle_cores: float = 0.05) -> float:
    """Waits until this process's threads are idle: a peer's thread pool keeps spinning after its
    call (OpenBLAS's for about 0.1 s, OpenMP's by its spin count) and would otherwise share the
    cores with the next side's timing, an ember process that cannot see it. Returns the seconds
    waited (at most limit_s)."""
    start = time.perf_counter()
    while True:
        cpu0, t0 = time.process_time(), time.perf_counter()  # every thread's, to the nanosecond
        time.sleep(window_s)
        cpu1, t1 = time.process_time(), time.perf_counter()
        if (cpu1 - cpu0) / (t1 - t0) < idle_cores or t1 - start >= limit_s:
            return t1 - start


def measure_machine(ember: Path, threads: int) -> dict:
    """The best of two measurements of each peak (a disturbed run only lowers a peak)."""
    runs = [ember_json(ember, ["--machine"], threads)[0] for _ in range(2)]
    best = {k: max(r[k] for r in runs) for k in ("fma_gflops_f32", "fma_gflops_f64", "dram_gbps", "l2_gbps")}
    return {"cpu": runs[0]["cpu"], "threads": runs[0]["threads"], **best}


# A workload is timed again at the end when a probe beside it found the host's FMA rate under this
# share of the best it measured in the run: on a shared host a 2-vCPU machine sometimes runs on one
# core's time (the FMA peak halves). The streaming bandwidth is recorded beside it but not judged:
# it moved between 29 and 52 GB/s from probe to probe on a quiet host (64 MiB arrays partly in a
# shared L3).
SLOW_FMA = 0.85


def write_results(latest: dict, detail: dict) -> None:
    """bench/results/latest.json and latest_detail.json, each replaced whole."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    for path, data in ((RESULTS / "latest.json", latest), (RESULTS / "latest_detail.json", detail)):
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.replace(path)


def host_speed(ember: Path, threads: int) -> dict:
    """What the host delivers now: `ember bench --machine` (0.5 s), FMA GFLOP/s and DRAM GB/s."""
    r = ember_json(ember, ["--machine"], threads)[0]
    return {"fma": r["fma_gflops_f32"], "dram": r["dram_gbps"]}


def slow_host(speed: dict, best: dict) -> bool:
    return speed["fma"] < SLOW_FMA * best["fma"]


def load_rows(load: dict) -> tuple[list[str], list[list[str]]]:
    """One row per workload: each side's quiet and loaded median, mean and p99, the loaded/quiet
    ratios, and whether the goal held (ember's loaded/quiet median ratio <= LOAD_LIMIT and <=
    PyTorch's; the mean ratio is shown beside it)."""
    header = ["workload"]
    for side in ("ember", "torch"):
        header += [f"{side} quiet", "loaded", "p99 quiet", "p99 loaded", "x median", "x mean"]
    header.append("goal")
    rows = []
    for r in load["results"]:
        row, ratios = [r["name"]], {}
        for side in ("ember", "torch"):
            s = r.get(side)
            if not s:
                row += ["-"] * 6
                continue
            q, l = s["quiet"], s["loaded"]
            ratios[side] = l["median_s"] / q["median_s"]
            row += [format_seconds(q["median_s"]), format_seconds(l["median_s"]), format_seconds(q["p99_s"]),
                    format_seconds(l["p99_s"]), f"{ratios[side]:.2f}", f"{l['mean_s'] / q['mean_s']:.2f}"]
        met = ratios["ember"] <= LOAD_LIMIT and ratios["ember"] <= ratios.get("torch", math.inf)
        row.append("met" if met else ("<= 2.5" if ratios["ember"] <= LOAD_LIMIT else "MISSED"))
        rows.append(row)
    return header, rows


def load_markdown(load: dict) -> str:
    header, rows = load_rows(load)
    run = load["run"]
    out = [f"Run: {run['date']}, {run['threads']} threads, torch {run['torch']}, {run['rounds']} round(s) of "
           f"{run['seconds_per_side']} s of single calls per side; the load is one `yes > /dev/null`. x median, "
           f"x mean: loaded / quiet. goal: met when ember's x median <= {LOAD_LIMIT} and <= PyTorch's; "
           f"'<= 2.5' when only the first holds.", ""]
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 2) + [":---:"]) + "|")
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def run_load(args, ember: Path, names: list[str], peer_setups: dict, torch_version: str) -> int:
    """Quiet and loaded latency of ember and PyTorch eager, side by side: for each workload and
    round, both sides quiet, then both again while one `yes` process keeps a core busy."""
    import peers  # noqa: E402
    seconds = 0.2 if args.quick else 0.6
    started = time.time()
    results = []
    for name in names:
        setup = peer_setups.get(name, {}).get("torch")
        torch_fn = None
        if setup is not None:
            made = setup()
            torch_fn = made if isinstance(made, tuple) else (made, None)
        sides = ["ember"] + (["torch"] if torch_fn else [])
        samples = {side: {"quiet": [], "loaded": []} for side in sides}
        for r in range(args.rounds):
            for condition in ("quiet", "loaded"):
                load = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) if condition == "loaded" else None
                try:
                    if load:
                        time.sleep(0.2)  # let the scheduler settle with the load running
                    for side in sides[r % len(sides):] + sides[:r % len(sides)]:
                        if side == "ember":
                            rec = ember_json(ember, ["--filter", f"^{re.escape(name)}$", "--latency", str(seconds)],
                                             args.threads)[0]
                            samples[side][condition].append((rec["median_s"], rec["mean_s"], rec["p99_s"]))
                        else:
                            samples[side][condition].append(peers.latency(torch_fn[0], seconds, torch_fn[1]))
                        settle()
                finally:
                    if load:
                        load.kill()
                        load.wait()
        result = {"name": name}
        for side in sides:
            result[side] = {c: {key: statistics.median(x[i] for x in v)
                                for i, key in enumerate(("median_s", "mean_s", "p99_s"))}
                            for c, v in samples[side].items()}
        results.append(result)
        header, rows = load_rows({"results": [result]})
        print("  ".join(f"{h}={c}" for h, c in zip(header, rows[0])), flush=True)
    load = {"run": {"date": time.strftime("%Y-%m-%d %H:%M"), "threads": args.threads, "rounds": args.rounds,
                    "seconds_per_side": seconds, "torch": torch_version, "minutes": (time.time() - started) / 60},
            "results": results}
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "load.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(load, indent=1) + "\n")
    tmp.replace(path)
    header, rows = load_rows(load)
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header)]
    print()
    for cells in [header] + rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))))
    missed = [row[0] for row in rows if row[-1] != "met"]
    print(f"\nwrote bench/results/load.json ({(time.time() - started) / 60:.1f} minutes); "
          f"{len(rows) - len(missed)} of {len(rows)} workloads met the goal"
          f"{': not ' + ', '.join(missed) if missed else ''}")
    if args.write_docs:
        write_section(LOAD_BEGIN, LOAD_END, load_markdown(load))
    return 0


def warm_up(fn, policy) -> float | None:
    """Two untimed calls, or one when it lasted a long call's time (a training run of seconds).
    Returns that call's seconds when it did (such a call needs no further warm-up before it is
    timed), None when it did not."""
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    if seconds < policy.long_call_seconds:
        fn()
        return None
    return seconds


def first_round_sample(side: str, seconds: float | None, explicit_warmup: bool, policy) -> bool:
    """Whether a side's set-up call is its first round's sample, as `ember bench` takes a warm-up
    call of --cold-call seconds: a call that long, of the timed callable itself, on a side that does
    not compile on its first call (torch.compile does)."""
    return (seconds is not None and seconds >= policy.cold_call_seconds and not explicit_warmup
            and side != "torch_compile")


def spread(values: list[float]) -> float | None:
    return max(values) / min(values) - 1 if len(values) > 1 and min(values) > 0 else None


def run(args) -> int:
    # Threads first: OpenBLAS (NumPy), MKL and OpenMP (PyTorch) read these when they load.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    sys.path.insert(0, str(ROOT / "bench"))
    import numpy as np  # noqa: E402
    import torch  # noqa: E402
    import peers  # noqa: E402

    torch.set_num_threads(args.threads)
    ember = Path(args.ember)
    if not ember.is_absolute():
        ember = ROOT / ember
    if not ember.exists():
        raise SystemExit(f"bench/run.py: no ember binary at {ember} (scripts/bench builds it)")

    started = time.time()
    import python_rows  # noqa: E402
    py_rows = {name: row for name, row in python_rows.ROWS.items() if not args.filter or re.search(args.filter, name)}
    try:
        listed = ember_json(ember, ["--list"] + (["--filter", args.filter] if args.filter else []), args.threads)
    except subprocess.CalledProcessError:
        if not py_rows:  # the filter matched nothing at all
            raise
        listed = []
    # --quick skips the slow workloads unless a filter picked them.
    names = [w["name"] for w in listed if not (args.quick and w["slow"] and not args.filter)]
    skipped = [w["name"] for w in listed if w["name"] not in names]
    peer_setups = peers.workloads(str(ROOT / "data" / "mnist"))
    names += [name for name in py_rows if not args.load]
    if args.peers:
        wanted_peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    else:
        wanted_peers = list(PEER_ORDER)

    if args.load:
        return run_load(args, ember, names, peer_setups, torch.__version__)

    peaks = measure_machine(ember, args.threads)
    machine = {"cpu": peaks["cpu"], "threads": args.threads, "fma_peak_gflops": peaks["fma_gflops_f32"],
               "stream_gbps": peaks["dram_gbps"]}
    print(f"machine: {peaks['cpu']}, {args.threads} threads: FMA peak {peaks['fma_gflops_f32']:.1f} GFLOP/s f32 "
          f"({peaks['fma_gflops_f64']:.1f} f64), streaming {peaks['dram_gbps']:.1f} GB/s (L2 {peaks['l2_gbps']:.0f})")
    print(f"workloads: {len(names)}{f' (--quick skips {len(skipped)}: ' + ', '.join(skipped) + ')' if skipped else ''}"
          f"; {args.rounds} rounds each, interleaved\n", flush=True)

    policy = peers.TimingPolicy(0.005, 0.5, 3) if args.quick else peers.TimingPolicy(0.02, 3.0, args.repeats)
    ember_args = ["--quick"] if args.quick else ["--repeats", str(args.repeats)]
    results, detail = [], {}
    for name in names:
        row_started = time.perf_counter()
        # Set up and warm up every peer once; compilation happens here and is not timed.
        callables = {}
        py_row = py_rows.get(name)  # (the ember side's setup, the C++ row it mirrors)
        cpp_name = py_row[1] if py_row else name
        # The sides whose call lasts seconds: timed without a warm-up call from then on (a call of
        # seconds warms up itself; a 2,000-step training row took 14 of a full run's 26 minutes
        # with one untimed call per side and round).
        long_sides = set()
        first_samples = {}  # side -> its set-up call's seconds, where that call is its first round's sample
        if py_row:
            ember_py = py_row[0]()
            seconds = warm_up(ember_py, policy)
            if seconds is not None:
                long_sides.add("ember")
            if first_round_sample("ember", seconds, False, policy):
                first_samples["ember"] = seconds
        for peer in wanted_peers:
            setup = peer_setups.get(cpp_name, {}).get(peer)
            if setup is None:
                continue
            try:
                made = setup()
                fn, warmup = made if isinstance(made, tuple) else (made, None)
                seconds = warm_up(warmup or fn, policy)
                if seconds is not None and warmup is None:
                    long_sides.add(peer)
                if first_round_sample(peer, seconds, warmup is not None, policy):
                    first_samples[peer] = seconds
                callables[peer] = (fn, warmup)
            except (ImportError, FileNotFoundError) as e:  # a package or file that is not installed
                print(f"  {name}: {peer} skipped: {type(e).__name__}: {e}", flush=True)
            except Exception as e:  # a peer that fails (torch.compile, say) is recorded as absent
                print(f"  {name}: {peer} failed, left out: {type(e).__name__}: {str(e).splitlines()[0][:200]}",
                      flush=True)
        rounds = {"ember": []} | {p: [] for p in callables} | ({"cpp": []} if py_row else {})
        for side, seconds in first_samples.items():
            rounds[side].append(seconds)
        busy: list[tuple[float, float]] = []  # per ember process: (cores this process used, cores stolen)
        ember_record = None
        speeds = [] if args.quick else [host_speed(ember, args.threads)]
        waits = [settle()]  # the warm-ups' threads too
        try:
            for r in range(args.rounds):
                order = ["ember"] + list(callables) + (["cpp"] if py_row else [])
                order = order[r % len(order):] + order[:r % len(order)]  # rotate: no side always goes first
                for side in order:
                    if r == 0 and side in first_samples:
                        continue  # its set-up call was this round's sample
                    if side == "ember" and py_row:
                        timing = peers.measure(ember_py, policy, warm="ember" not in long_sides)
                        rounds["ember"].append(timing.median_s)
                        if timing.long_call(policy):
                            long_sides.add("ember")
                    elif side in ("ember", "cpp"):
                        # What else ran meanwhile: this process's own threads (a peer's that did not go
                        # to sleep) and the host (stolen time), in cores, over ember's whole process.
                        (cpu0, stolen0), start = host_clock(), time.perf_counter()
                        ember_record = ember_json(ember, ["--filter", f"^{re.escape(cpp_name)}$", *ember_args]
                                                  + (["--no-warmup"] if side in long_sides else []), args.threads)[0]
                        (cpu1, stolen1), wall = host_clock(), time.perf_counter() - start
                        busy.append(((cpu1 - cpu0) / wall, (stolen1 - stolen0) / wall))
                        rounds[side].append(ember_record["seconds"])
                        if (ember_record["samples"] == 1 and ember_record["iterations"] == 1
                                and ember_record["seconds"] >= policy.long_call_seconds):
                            long_sides.add(side)
                    else:
                        fn, warmup = callables[side]
                        # A short warm-up per round (a full one only for the expensive epoch workload).
                        timing = peers.measure(fn, policy, warmup, warm=side not in long_sides)
                        rounds[side].append(timing.median_s)
                        if timing.long_call(policy) and warmup is None:
                            long_sides.add(side)
                    waits.append(settle())  # the side just timed leaves no thread spinning beside the next
        except subprocess.CalledProcessError as e:  # ember's side cannot run (a missing model file, say)
            why = (e.stderr or "").strip().splitlines()
            print(f"  {name}: ember failed, row left out: {why[-1] if why else e}", flush=True)
            callables.clear()
            continue
        callables.clear()
        if not args.quick:
            speeds.append(host_speed(ember, args.threads))
        result = {"name": name, "ember_s": statistics.median(rounds["ember"]),
                  "peers": {p: statistics.median(rounds[p]) for p in PEER_ORDER if p in rounds},
                  "flops": float(ember_record["flops"]), "bytes": float(ember_record["bytes"])}
        results.append(result)
        detail[name] = {"rounds": rounds, "ember_noise": spread(rounds["ember"]),
                        "peer_noise": {p: spread(v) for p, v in rounds.items() if p != "ember"},
                        "beside_ember": busy, "settle_s": waits, "host": speeds,
                        "wall_s": time.perf_counter() - row_started}
        if busy and max(max(b) for b in busy) > 0.1:
            print(f"  {name}: while ember ran, this process kept up to {max(b[0] for b in busy):.2f} cores busy "
                  f"and the host stole up to {max(b[1] for b in busy):.2f}: ember's time may be disturbed", flush=True)
        partial = {"machine": machine, "results": [result]}
        header, rows = table_rows(partial, detail)
        print("  ".join(f"{h}={c}" for h, c in zip(header, rows[0])), flush=True)

    latest = {"machine": machine, "results": results}
    best = {"fma": max([peaks["fma_gflops_f32"]] + [h["fma"] for d in detail.values() for h in d["host"]]),
            "dram": max([peaks["dram_gbps"]] + [h["dram"] for d in detail.values() for h in d["host"]])}
    machine["fma_peak_gflops"] = best["fma"]  # the start's measurement may have met a slow host
    detail["_run"] = {"best_host": best, "date": time.strftime("%Y-%m-%d %H:%M"), "rounds": args.rounds, "quick": args.quick,
                      "filter": args.filter, "skipped": skipped, "torch": torch.__version__,
                      "numpy": np.__version__, "seconds": time.time() - started, "peaks": peaks}
    write_results(latest, detail)
    print()
    print_table(latest, detail)
    print(f"\nratios: x peer = peer time / ember time (> 1: ember is faster); of peak = share of the FMA peak "
          f"(compute-bound) or of the streaming bandwidth (memory-bound; > 100% when the data fits in cache); "
          f"noise = spread of ember's rounds (max/min - 1).")
    print_wall(detail)
    print(f"wrote bench/results/latest.json ({(time.time() - started) / 60:.1f} minutes)")
    return 0


def print_wall(detail: dict, top: int = 8) -> None:
    """Where the run's time went: the workloads that took longest, set-up and every side included."""
    walls = sorted(((d["wall_s"], n) for n, d in detail.items() if not n.startswith("_") and "wall_s" in d),
                   reverse=True)
    if walls:
        total = sum(w for w, _ in walls)
        print(f"longest workloads (of {total / 60:.1f} minutes in all): "
              + ", ".join(f"{n} {w:.0f} s" for w, n in walls[:top]), flush=True)


RETIME_ROUNDS = 5  # rounds for a workload timed again
HOST_WAIT_S = 120  # how long the re-timing waits for the host to return to speed


def retime(args, baseline_path: Path | None) -> None:
    """Times again, interleaved over RETIME_ROUNDS rounds, the workloads measured while a probe found
    the host slow, and (with --check) those whose ratios fell, as many as fit in --retime-minutes
    (the rest are listed in the detail's `not_retimed`), and puts them into
    bench/results/latest*.json in place of the first measurement (kept in the detail as `first`).
    Waits up to HOST_WAIT_S for the host to return to speed first. A regression of ember's own
    shows again; a round disturbed by the host does not."""
    latest = json.loads((RESULTS / "latest.json").read_text())
    detail = json.loads((RESULTS / "latest_detail.json").read_text())
    best = detail["_run"].get("best_host")
    slow = {n for n, d in detail.items() if not n.startswith("_") and best and any(slow_host(h, best) for h in d.get("host", []))}
    flagged = set()
    if baseline_path is not None and baseline_path.exists():
        baseline = json.loads(baseline_path.read_text())
        if same_cpu(latest["machine"], baseline["machine"]):
            flagged = {p.split(":")[0] for p in check(latest, baseline)}
    rounds = max(RETIME_ROUNDS, args.rounds)
    # Within the budget: first the workloads --check flagged, then those timed on a slow host, each
    # group cheapest first (the estimate scales the first pass's wall time to the rounds).
    cost = {n: detail[n].get("wall_s", 0.0) * rounds / max(args.rounds, 1) for n in slow | flagged}
    names, left, planned = [], [], 0.0
    for n in sorted(flagged, key=cost.get) + sorted(slow - flagged, key=cost.get):
        if planned + cost[n] <= args.retime_minutes * 60:
            names.append(n)
            planned += cost[n]
        else:
            left.append(n)
    if left:
        print(f"\nnot timed again (over the {args.retime_minutes:g}-minute budget, --retime-minutes): "
              + ", ".join(sorted(left)), flush=True)
        detail["_run"]["not_retimed"] = sorted(left)
        if not names:
            write_results(latest, detail)
    if not names:
        return
    names.sort()
    print(f"\ntiming {len(names)} workload(s) again, {rounds} rounds, about {planned / 60:.1f} minutes"
          + (f"; {len(slow)} measured while the host ran below {SLOW_FMA:.0%} of its best FMA rate" if slow else "")
          + (f"; {len(flagged)} flagged by --check" if flagged else "") + ": " + ", ".join(names), flush=True)
    ember = Path(args.ember) if Path(args.ember).is_absolute() else ROOT / args.ember
    waited = 0.0
    while best and slow_host(now := host_speed(ember, args.threads), best) and waited < HOST_WAIT_S:
        print(f"  the host delivers {now['fma']:.0f} GFLOP/s (best {best['fma']:.0f}): waiting", flush=True)
        time.sleep(15)
        waited += 15
    again = argparse.Namespace(**vars(args))
    again.filter = "^(" + "|".join(re.escape(n) for n in names) + ")$"
    again.rounds = rounds
    run(again)
    retimed = json.loads((RESULTS / "latest.json").read_text())
    retimed_detail = json.loads((RESULTS / "latest_detail.json").read_text())
    by_name = {r["name"]: r for r in retimed["results"]}
    first = {r["name"]: r for r in latest["results"]}
    latest["results"] = [by_name.get(r["name"], r) for r in latest["results"]]
    latest["machine"]["fma_peak_gflops"] = max(latest["machine"]["fma_peak_gflops"],
                                               retimed["machine"]["fma_peak_gflops"])
    for name in by_name:
        detail[name] = retimed_detail[name] | {"first": {"result": first[name], "detail": detail.get(name)}}
    detail["_run"]["retimed"] = sorted(by_name)
    detail["_run"]["seconds"] += retimed_detail["_run"]["seconds"] + waited
    still = [n for n in by_name if best and any(slow_host(h, best) for h in retimed_detail[n].get("host", []))]
    if still:
        print(f"  still on a slow host when timed again: {', '.join(still)}", flush=True)
        detail["_run"]["slow_host"] = still
    write_results(latest, detail)
    print()
    print_table(latest, detail)
    print(f"wrote bench/results/latest.json with the {len(by_name)} re-timed workload(s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--filter", default="", help="only workloads whose name matches this regular expression")
    parser.add_argument("--quick", action="store_true",
                        help="1 round of shorter, fewer samples; skips the slow workloads unless --filter is given")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads for everyone (default: all cores)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds per workload (default 3, --quick 1)")
    parser.add_argument("--repeats", type=int, default=5, help="samples per side and round")
    parser.add_argument("--peers", default="", help="comma-separated subset of torch,torch_compile,numpy,onnxruntime,llama_cpp (the _py rows always time cpp)")
    parser.add_argument("--ember", default="build/ember", help="the ember binary")
    parser.add_argument("--check", metavar="BASELINE", help="flag ratios that fell more than 10%% against BASELINE")
    parser.add_argument("--from", dest="from_file", metavar="RESULTS", help="use these results instead of running")
    parser.add_argument("--write-docs", action="store_true", help="write the table into docs/performance.md")
    parser.add_argument("--load", action="store_true",
                        help="instead: ember and PyTorch quiet and beside a one-core load (yes), median and p99")
    parser.add_argument("--retime-minutes", type=float, default=4.0,
                        help="the most time spent timing workloads again at the end (default 4)")
    parser.add_argument("--self-test", action="store_true", help="test the --check logic and exit")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if args.threads < 1:
        parser.error("--threads must be at least 1")
    if args.retime_minutes < 0:
        parser.error("--retime-minutes must be at least 0")
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    if args.from_file:
        latest = json.loads(Path(args.from_file).read_text())
        detail_path = Path(args.from_file).with_name(Path(args.from_file).stem + "_detail.json")
        detail = json.loads(detail_path.read_text()) if detail_path.exists() else None
        print_table(latest, detail)
        if args.write_docs:
            write_docs(latest, detail)
        status = 0
    else:
        status = run(args)
        if args.load:
            return status
        if status == 0 and not args.quick:
            retime(args, Path(args.check) if args.check else None)
        latest = json.loads((RESULTS / "latest.json").read_text())
        if args.write_docs:
            detail = json.loads((RESULTS / "latest_detail.json").read_text())
            write_docs(latest, detail)
    if args.check:
        status = max(status, run_check(latest, Path(args.check)))
    return status


if __name__ == "__main__":
    sys.exit(main())
