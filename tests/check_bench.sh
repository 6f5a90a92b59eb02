#!/usr/bin/env bash
# `ember bench`: lists every workload of the harness, times one and prints the JSON fields that
# bench/run.py reads, refuses a bad filter; and bench/run.py's --check logic passes its self-test.
# Usage: check_bench.sh path/to/ember repo_root
set -euo pipefail
ember=$1
root=$2

count=$("$ember" bench --list --json | grep -c '"name"')
[ "$count" -ge 37 ] || { echo "expected at least 37 workloads, got $count"; exit 1; }
"$ember" bench --list | grep -qx "train_mnist_epoch  (slow: scripts/bench --quick skips it)" ||
  { echo "train_mnist_epoch is not listed as slow"; exit 1; }

out=$("$ember" bench --quick --repeats 2 --filter '^add_f32_256$' --json --threads 1)
[ "$(wc -l <<<"$out")" -eq 1 ] || { echo "expected one JSON line, got: $out"; exit 1; }
for key in name seconds min_s max_s samples iterations flops bytes threads; do
  grep -q "\"$key\"" <<<"$out" || { echo "missing $key in: $out"; exit 1; }
done
grep -q '"name":"add_f32_256"' <<<"$out" || { echo "wrong workload in: $out"; exit 1; }
# add on 256 x 256 float32: 65536 FLOPs, 3 x 256 KiB moved.
grep -q '"flops":65536.0' <<<"$out" || { echo "wrong flops in: $out"; exit 1; }
grep -q '"bytes":786432.0' <<<"$out" || { echo "wrong bytes in: $out"; exit 1; }

# --no-warmup (scripts/bench passes it for a workload whose call lasts seconds) times the same way.
cold=$("$ember" bench --quick --repeats 2 --filter '^add_f32_256$' --json --threads 1 --no-warmup)
grep -q '"name":"add_f32_256".*"samples":2' <<<"$cold" || { echo "--no-warmup: unexpected $cold"; exit 1; }
# A first call at least --cold-call seconds long is the one sample (the 2,000-step training row).
first=$("$ember" bench --quick --repeats 2 --filter '^add_f32_256$' --json --threads 1 --cold-call 0)
grep -q '"name":"add_f32_256".*"samples":1' <<<"$first" || { echo "--cold-call 0: unexpected $first"; exit 1; }

machine=$("$ember" bench --machine --json --threads 1)
for key in cpu threads fma_gflops_f32 fma_gflops_f64 dram_gbps l2_gbps; do
  grep -q "\"$key\"" <<<"$machine" || { echo "missing $key in: $machine"; exit 1; }
done

if "$ember" bench --filter 'no_such_workload' 2>/dev/null; then echo "an unmatched filter must fail"; exit 1; fi
error=$("$ember" bench --filter '(' 2>&1 || true)
grep -q "\[bench\] --filter" <<<"$error" || { echo "a bad regex must be reported, got: $error"; exit 1; }

python3 "$root/bench/run.py" --self-test
echo "ok"
