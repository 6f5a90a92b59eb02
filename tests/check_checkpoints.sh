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
# The expectations and the runs: make_checkpoints.sh runs exactly these (its `expected` part).
sed -n '/^declare -A command options/,/^names=/p' "$here/make_checkpoints.sh" > "$tmp/runs.sh"
# shellcheck disable=SC1091
source "$tmp/runs.sh"
results="$tmp/results.jsonl"
: > "$results"
for name in "${names[@]}"; do
  cp "$here/$name.safetensors" "$tmp/resumed.safetensors"
  # shellcheck disable=SC2086,SC2154
  "$ember" ${command[$name]} ${options[$name]} $(data_option "$name") --threads 2 \
    --resume "$tmp/resumed.safetensors" --save "$tmp/resumed.safetensors" --json > "$tmp/run.json"
  python3 - "$name" "$tmp/run.json" "$tmp/resumed.safetensors" >> "$results" <<'PY'
import hashlib, json, sys
name, run, checkpoint = sys.argv[1:4]
result = json.loads(open(run).read().strip().splitlines()[-1])
keep = ["final_loss", "test_accuracy", "train_loss", "val_loss", "sample", "loss", "curve", "evals"]
kept = {k: result[k] for k in keep if k in result}
for e in kept.get("evals", []):
    e.pop("tokens_per_second", None)
for c in kept.get("curve", []):
    c.pop("seconds", None)
print(json.dumps({"name": name, "sha256": hashlib.sha256(open(checkpoint, "rb").read()).hexdigest(), "result": kept}))
PY
done
for file in gpt.safetensors gpt_q8_0.gguf; do
  "$ember" eval gpt --checkpoint "$here/$file" --data "$data/shakespeare/input.txt" --batches 2 --threads 2 --json |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print(json.dumps({"name": "eval '"$file"'", "result": {"val_loss": r["val_loss"]}}))' >> "$results"
  "$ember" generate --checkpoint "$here/$file" --prompt "ROMEO:" --tokens 24 --temperature 0 --threads 2 2> /dev/null |
    python3 -c 'import json,sys; print(json.dumps({"name": "generate '"$file"'", "result": {"text": sys.stdin.read()}}))' >> "$results"
done
"$ember" generate --checkpoint "$here/ssm.safetensors" --prompt "ROMEO:" --tokens 24 --temperature 0 --threads 2 2> /dev/null |
  python3 -c 'import json,sys; print(json.dumps({"name": "generate ssm.safetensors", "result": {"text": sys.stdin.read()}}))' >> "$results"
for file in mnist_cnn.safetensors mnist_mlp_q4_0.gguf; do
  "$ember" eval mnist --checkpoint "$here/$file" --data "$data/mnist" --threads 2 --json |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print(json.dumps({"name": "eval '"$file"'", "result": {"test_accuracy": r["test_accuracy"]}}))' >> "$results"
done
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
