#!/usr/bin/env python3
"""Load on `ember serve` and on llama.cpp's OpenAI-compatible server (llama-cpp-python[server], which
`scripts/setup --dev` builds from source for this CPU), the same model, threads and prompt, measured
by the same clients: each of C clients (1, 4 and 8) streams completions of 128 tokens after a
100-token prompt, one after another, for D seconds. Loopback only; every wait is bounded.

  bench/serve_load.py [--duration 60] [--clients 1,4,8] [--threads 2] [--parallel 8] [--servers ember,llama_cpp]
                      [--ember-flags "--prompt-chunk 16"]

Reported per server and client count: requests completed and failed, generated tokens per second
over all clients, time to first token and the time between tokens (p50 and p99). The levels of
the two servers alternate (ember 1, llama.cpp 1, ember 4, ...), both servers staying up, so that a
disturbance of the machine falls on both. Writes bench/results/serve_load.json; see
docs/performance.md.

llama-cpp-python's server runs one request at a time (one llama_context behind a lock): it has no
parallel slots to match --parallel, and its other clients wait for their turn.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pathlib
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODEL = ROOT / "data" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
# About 100 tokens of SmolLM2's tokenizer (the exact count is printed), after a number that differs
# from request to request: no server may answer from a cached prompt.
PROMPT = ("The old lighthouse keeper had lived alone on the island for thirty years. Every evening he climbed "
          "the spiral stairs, trimmed the wick and watched the ships pass far out at sea. One stormy night in "
          "late autumn, a small boat appeared on the rocks below, and a young girl waved a lantern towards "
          "the tower. He hurried down the stairs, pulled on his coat and ran out into the rain. The wind tore at "
          "his hat, and the waves crashed over the jetty as he made his way to the boat. When he")
TOKENS = 128


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port: int, proc: subprocess.Popen, path: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", path)
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("the server did not start")


def start(server: str, threads: int, parallel: int, context: int, extra: list[str]) -> tuple[subprocess.Popen, int]:
    port = free_port()
    log = open(pathlib.Path(tempfile.gettempdir()) / f"serve_load_{server}.log", "w")
    if server == "ember":
        cmd = [str(ROOT / "build" / "ember"), "serve", "--model", str(MODEL), "--port", str(port), "--threads",
               str(threads), "--parallel", str(parallel), "--context", str(context), "--quiet", *extra]
        ready = "/health"
    else:
        cmd = [str(ROOT / ".venv" / "bin" / "python"), "-m", "llama_cpp.server", "--model", str(MODEL), "--port",
               str(port), "--host", "127.0.0.1", "--n_threads", str(threads), "--n_threads_batch", str(threads),
               "--n_ctx", str(context), "--verbose", "False", "--interrupt_requests", "False"]
        ready = "/v1/models"
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    wait_ready(port, proc, ready)
    return proc, port


def stream_once(port: int, seed: int) -> tuple[float, list[float], int]:
    """One streamed completion: (time to first token, gaps between tokens, tokens)."""
    body = json.dumps({"model": "m", "prompt": f"Story {seed}. {PROMPT}", "max_tokens": TOKENS, "temperature": 0.8, "top_p": 0.95,
                       "seed": seed, "stream": True})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:200]!r}")
    first, last, gaps, tokens = None, None, [], 0
    for line in r:  # server-sent events, a line each
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        event = json.loads(line[6:])
        if not event.get("choices") or not event["choices"][0].get("text"):
            continue
        now = time.perf_counter()
        tokens += 1
        if first is None:
            first = now - start
        else:
            gaps.append(now - last)
        last = now
    conn.close()
    return first, gaps, tokens


def ember_counters(port: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    return {name: float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))
            for name in ("ember_decode_steps_total", "ember_decode_sequences_total", "ember_prompt_tokens_total")}


def level(port: int, clients: int, duration: float) -> dict:
    ttft, gaps, done, failed, tokens = [], [], [0], [0], [0]
    lock = threading.Lock()
    end = time.monotonic() + duration

    def client(index: int) -> None:
        seed = index * 100000
        while time.monotonic() < end:
            seed += 1
            try:
                first, between, n = stream_once(port, seed)
            except Exception as e:  # noqa: BLE001 - every failure counts
                with lock:
                    failed[0] += 1
                print(f"  request failed: {e}", file=sys.stderr)
                continue
            with lock:
                ttft.append(first)
                gaps.extend(between)
                tokens[0] += n
                done[0] += 1

    start = time.monotonic()
    workers = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=duration + 600)
    elapsed = time.monotonic() - start

    def q(values: list[float], p: float) -> float:
        return statistics.quantiles(values, n=100, method="inclusive")[p - 1] * 1000 if len(values) > 1 else 0

    return {"clients": clients, "seconds": round(elapsed, 2), "requests": done[0], "failed": failed[0],
            "tokens": tokens[0], "tokens_per_s": round(tokens[0] / elapsed, 1),
            "ttft_ms_p50": round(q(ttft, 50), 1), "ttft_ms_p99": round(q(ttft, 99), 1),
            "itl_ms_p50": round(q(gaps, 50), 2), "itl_ms_p99": round(q(gaps, 99), 2)}


def prompt_tokens(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/v1/completions", json.dumps({"prompt": f"Story 1. {PROMPT}", "max_tokens": 1}),
                 {"Content-Type": "application/json"})
    return json.loads(conn.getresponse().read())["usage"]["prompt_tokens"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=60, help="seconds per client count and server")
    parser.add_argument("--clients", default="1,4,8")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=8, help="ember's slots")
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--servers", default="ember,llama_cpp")
    parser.add_argument("--ember-flags", default="", help="more flags for ember serve, e.g. \"--prompt-chunk 16\"")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "serve_load.json"))
    args = parser.parse_args()
    servers = args.servers.split(",")
    running = {}
    try:
        for name in servers:
            running[name] = start(name, args.threads, args.parallel, args.context, args.ember_flags.split())
        n_prompt = prompt_tokens(running[servers[0]][1])
        print(f"prompt: {n_prompt} tokens; {TOKENS} tokens per request; {args.duration:.0f} s per level; "
              f"{args.threads} threads; ember --parallel {args.parallel}")
        for name in servers:  # warm up
            stream_once(running[name][1], 1)
        results = {name: [] for name in servers}
        for clients in [int(c) for c in args.clients.split(",")]:
            for name in servers:
                with open("/proc/pressure/cpu") as f:
                    pressure = f.readline().split()[1]
                before = ember_counters(running[name][1]) if name == "ember" else None
                r = level(running[name][1], clients, args.duration)
                if before:
                    after = ember_counters(running[name][1])
                    steps = after["ember_decode_steps_total"] - before["ember_decode_steps_total"]
                    r["mean_decode_batch"] = round(
                        (after["ember_decode_sequences_total"] - before["ember_decode_sequences_total"]) / steps, 2)
                r["cpu_pressure_before"] = pressure
                results[name].append(r)
                print(f"{name:10s} {clients} clients: {r['requests']:4d} requests ({r['failed']} failed), "
                      f"{r['tokens_per_s']:7.1f} tokens/s, TTFT p50 {r['ttft_ms_p50']:7.1f} ms p99 "
                      f"{r['ttft_ms_p99']:7.1f} ms, between tokens p50 {r['itl_ms_p50']:6.2f} ms p99 "
                      f"{r['itl_ms_p99']:6.2f} ms" + (f", mean decode batch {r['mean_decode_batch']}"
                                                     if "mean_decode_batch" in r else ""), flush=True)
        if len(servers) == 2:
            for a, b in zip(results[servers[0]], results[servers[1]]):
                print(f"{a['clients']} clients: {servers[0]} / {servers[1]} tokens/s "
                      f"{a['tokens_per_s'] / max(b['tokens_per_s'], 1e-9):.2f}x, p99 between tokens "
                      f"{a['itl_ms_p99']:.1f} vs {b['itl_ms_p99']:.1f} ms")
        ember = results.get("ember", [])
        if len(ember) >= 2 and ember[0]["clients"] == 1:
            print(f"ember: {ember[-1]['clients']} clients / 1 client tokens/s "
                  f"{ember[-1]['tokens_per_s'] / ember[0]['tokens_per_s']:.2f}x")
        out = {"prompt_tokens": n_prompt, "tokens_per_request": TOKENS, "duration_s": args.duration,
               "threads": args.threads, "parallel": args.parallel, "results": results}
        pathlib.Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    finally:
        for proc, _ in running.values():
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    os.chdir(ROOT)
    main()
