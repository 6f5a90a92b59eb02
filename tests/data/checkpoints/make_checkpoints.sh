#!/usr/bin/env bash
# Writes the checkpoint fixtures of tests/check_checkpoints.sh: one small checkpoint of each model
# kind `ember train` makes (MNIST MLP and CNN, GPT, GPT with --amp f16, Mamba, diffusion), each
# stopped halfway through its run, and the GGUF files `ember quantize` makes of two of them; then
# what resuming and reading them gives (expected.json): the final checkpoint's SHA-256 and the
# results of resuming each run to its end, of `ember eval` and of `ember generate`, with the kernels
# capped at AVX2 and at SSE4.
#
# The committed fixtures were written by the CLI of commit a2aee08, before the training code moved
# from the CLI into the library (src/train/): a checkpoint of that version must load and resume to
# the bits expected.json records in every later one. A deliberate change of a kernel's rounding
# re-records expected.json (`... expected`, saying which kernel in the commit); the fixtures are
# never rewritten. Run from the repository root:
#   tests/data/checkpoints/make_checkpoints.sh build/ember data [fixtures|expected]
set -euo pipefail
ember="$1"
data="$2"
what="${3:-all}"
here="$(cd "$(dirname "$0")" && pwd)"

# shellcheck source=tests/data/checkpoints/runs.sh
source "$here/runs.sh"

if [ "$what" = all ] || [ "$what" = fixtures ]; then
  for name in "${names[@]}"; do
    # shellcheck disable=SC2086,SC2046
    "$ember" ${command[$name]} ${options[$name]} $(data_option "$name") --threads 2 --stop-after "$(half "$name")" \
      --save "$here/$name.safetensors" --json > /dev/null
  done
  "$ember" quantize "$here/gpt.safetensors" "$here/gpt_q8_0.gguf" --type q8_0 --threads 2 > /dev/null
  "$ember" quantize "$here/mnist_mlp.safetensors" "$here/mnist_mlp_q4_0.gguf" --type q4_0 --threads 2 > /dev/null
fi

if [ "$what" = all ] || [ "$what" = expected ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  # Under the kernels' AVX2 and SSE4 paths (EMBER_MAX_CPU_ISA caps them), which every x86-64
  # machine with AVX2 runs, AVX-512 machines included: the check compares like with like anywhere.
  targets="AVX2 SSE4"
  out="$here/expected.json"
  [ -f "$out" ] || echo '{}' > "$out"
  for target in $targets; do
    export EMBER_MAX_CPU_ISA="$target"
    results="$tmp/$target.jsonl"
    : > "$results"
    collect_results "$results"
    python3 - "$out" "$target" "$results" <<'PY'
import json, sys
out, target, results = sys.argv[1:4]
expected = json.load(open(out))
expected[target] = {r["name"]: {k: v for k, v in r.items() if k != "name"} for r in map(json.loads, open(results))}
open(out, "w").write(json.dumps(expected, indent=1, sort_keys=True) + "\n")
PY
  done
fi
