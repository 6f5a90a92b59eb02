#!/usr/bin/env bash
# Old checkpoints keep working: the fixtures of tests/data/checkpoints (one of each model kind,
# written by the CLI before training moved into the library, each stopped halfway through its run)
# resume to the same final checkpoint, bit for bit, and the same results; `ember eval` and `ember
# generate` read them (and two GGUF files of `ember quantize`) to the same numbers and text. The
# kernels run capped at AVX2 (or SSE4 on a machine without AVX2), as when the expectations were made.
set -euo pipefail
ember="$1"
data="$2"
here="$(cd "$(dirname "$0")" && pwd)/data/checkpoints"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
target=AVX2
grep -qw avx2 /proc/cpuinfo || target=SSE4
export EMBER_MAX_CPU_ISA=$target
# The runs and results make_checkpoints.sh made the expectations from.
# shellcheck source=tests/data/checkpoints/runs.sh
source "$here/runs.sh"
results="$tmp/results.jsonl"
: > "$results"
collect_results "$results"
python3 - "$here/expected.json" "$target" "$results" <<'PY'
import json, sys
expected_path, target, results = sys.argv[1:4]
expected = json.load(open(expected_path))[target]
got = {r["name"]: {k: v for k, v in r.items() if k != "name"} for r in map(json.loads, open(results))}
bad = [name for name in expected if got.get(name) != expected[name]]
for name in bad:
    print(f"{name}: expected {json.dumps(expected[name])[:400]}\n  got {json.dumps(got.get(name))[:400]}")
missing = sorted(set(got) - set(expected))
assert not missing, f"no expectation for {missing}"
if bad:
    sys.exit(1)
print(f"{len(expected)} checks of the old checkpoints passed ({target})")
PY
