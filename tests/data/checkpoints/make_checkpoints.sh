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
# the same bits in every later one. Run from the repository root:
#   tests/data/checkpoints/make_checkpoints.sh build/ember data [fixtures|expected]
set -euo pipefail
ember="$1"
data="$2"
what="${3:-all}"
here="$(cd "$(dirname "$0")" && pwd)"

# The runs: name, the command, its options. Each is stopped after half its run with --save; the
# check resumes it with the same options.
declare -A command options
command[mnist_mlp]="train mnist"
options[mnist_mlp]="--model mlp --optimizer momentum --epochs 2 --batch-size 100 --seed 3"
command[mnist_cnn]="train mnist"
options[mnist_cnn]="--model cnn --epochs 2 --batch-size 100 --seed 4"
command[gpt]="train gpt"
options[gpt]="--layers 1 --heads 2 --dim 16 --context 16 --batch-size 4 --steps 20 --warmup 2 --eval-every 10 --eval-batches 2 --sample 20 --seed 5"
command[gpt_f16]="train gpt"
options[gpt_f16]="--layers 1 --heads 2 --dim 16 --context 16 --batch-size 4 --steps 20 --warmup 2 --eval-every 10 --eval-batches 2 --sample 20 --seed 6 --amp f16"
command[ssm]="train ssm"
options[ssm]="--layers 1 --dim 16 --state 4 --context 16 --batch-size 4 --steps 20 --warmup 2 --eval-every 10 --eval-batches 2 --sample 20 --seed 7"
command[diffusion]="train diffusion"
options[diffusion]="--channels 8 --timesteps 50 --steps 6 --batch-size 8 --warmup 1 --save-every 3 --seed 8"
half() {  # the --stop-after of each run
  case "$1" in mnist_*) echo 1 ;; diffusion) echo 3 ;; *) echo 10 ;; esac
}
data_option() {
  case "$1" in mnist_* | diffusion) echo "--data $data/mnist" ;; *) echo "--data $data/shakespeare/input.txt" ;; esac
}
names=(mnist_mlp mnist_cnn gpt gpt_f16 ssm diffusion)

if [ "$what" = all ] || [ "$what" = fixtures ]; then
  for name in "${names[@]}"; do
    # shellcheck disable=SC2086
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
    for name in "${names[@]}"; do
      cp "$here/$name.safetensors" "$tmp/resumed.safetensors"
      # shellcheck disable=SC2086
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
    python3 - "$out" "$target" "$results" <<'PY'
import json, sys
out, target, results = sys.argv[1:4]
expected = json.load(open(out))
expected[target] = {r["name"]: {k: v for k, v in r.items() if k != "name"} for r in map(json.loads, open(results))}
open(out, "w").write(json.dumps(expected, indent=1, sort_keys=True) + "\n")
PY
  done
fi
