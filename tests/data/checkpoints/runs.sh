#!/usr/bin/env bash
# The runs behind the checkpoint fixtures, shared by make_checkpoints.sh (which writes them and
# their expectations) and tests/check_checkpoints.sh (which checks them). Sourced with $ember,
# $data, $here (this folder) and $tmp (a scratch folder) set.
# shellcheck disable=SC2154  # those four

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

# Resumes every fixture to its end and reads the GPT, Mamba and MNIST ones with eval and generate,
# under the kernels EMBER_MAX_CPU_ISA allows; appends one JSON line per result to file $1.
collect_results() {
  local results="$1"
  for name in "${names[@]}"; do
    cp "$here/$name.safetensors" "$tmp/resumed.safetensors"
    # shellcheck disable=SC2086,SC2046
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
}
