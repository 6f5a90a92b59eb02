#!/usr/bin/env bash
# `ember train ssm` (a Mamba model) on a tiny model: the --json line has its fields and the loss
# falls; a run stopped halfway and resumed from its checkpoint ends bit-identical to an uninterrupted
# run; --compile ends with the same losses; `ember generate` rebuilds the model from the checkpoint
# alone and writes past the training context through the recurrent state (the same seed, the same
# text); `ember eval gpt` reads the checkpoint and gives train's validation loss; bad input (another
# architecture, a GPT checkpoint resumed as ssm, --no-cache) is a clear error.
set -euo pipefail
ember="$1"
data="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
model=(--layers 1 --state 8 --context 16)  # and --dim 32
run=(--batch-size 8 --steps 40 --warmup 4 --eval-every 20 --eval-batches 4 --sample 20 --threads 2 --seed 5)
common=("${model[@]}" --dim 32 "${run[@]}" --lr 3e-3 --data "$data")

"$ember" train ssm "${common[@]}" --save "$tmp/full.safetensors" --json > "$tmp/full.txt"
"$ember" train ssm "${common[@]}" --stop-after 20 --save "$tmp/part.safetensors" --json > /dev/null
"$ember" train ssm "${common[@]}" --resume "$tmp/part.safetensors" --save "$tmp/part.safetensors" --json \
  > "$tmp/resumed.txt"
cmp "$tmp/full.safetensors" "$tmp/part.safetensors" || { echo "resumed checkpoint differs"; exit 1; }
"$ember" train ssm "${common[@]}" --compile --json > "$tmp/compiled.txt"
"$ember" eval gpt --checkpoint "$tmp/full.safetensors" --data "$data" --batches 4 --json > "$tmp/eval.txt"

python3 - "$tmp/full.txt" "$tmp/resumed.txt" "$tmp/compiled.txt" "$tmp/eval.txt" <<'PY'
import json, math, sys
full, resumed, compiled, evaluated = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:5])
assert full["task"] == "ssm" and full["steps"] == 40 and len(full["evals"]) == 2, full
# 1 layer of d_model 32, d_inner 64, state 8, conv 4, dt_rank 2, and the 84-character embedding.
layer = 32 * 128 + 64 * 4 + 64 + 64 * (2 + 16) + 2 * 64 + 64 + 64 * 8 + 64 + 64 * 32 + 32
assert full["parameters"] == layer + 84 * 32 + 32, full["parameters"]
assert full["val_loss"] < math.log(84) - 0.8, full  # from ln(84) = 4.43 at the start
assert len(full["sample"]) == 20 and full["tokens_per_second"] > 0, full
for key in ["train_loss", "val_loss", "final_loss", "sample"]:
    assert full[key] == resumed[key], (key, full[key], resumed[key])
assert compiled["compiled"] is True and compiled["compiles"] == 1 and compiled["replays"] == 39, compiled
for key in ["final_loss", "train_loss", "val_loss"]:
    assert math.isclose(full[key], compiled[key], rel_tol=1e-4), (key, full[key], compiled[key])
assert evaluated["task"] == "ssm" and evaluated["context"] == 16, evaluated
assert math.isclose(evaluated["val_loss"], full["val_loss"], rel_tol=1e-6), (evaluated, full["val_loss"])
print("json, resume, compile and eval ok: val loss", full["val_loss"])
PY

# generate: 100 characters after a prompt, far past the training context of 16.
"$ember" generate --checkpoint "$tmp/full.safetensors" --prompt "ROMEO:" --tokens 100 --temperature 0 \
  > "$tmp/greedy.txt" 2> "$tmp/rate.txt"
[ "$(head -c 6 "$tmp/greedy.txt")" = "ROMEO:" ] || { echo "the text does not start with the prompt"; exit 1; }
[ "$(wc -c < "$tmp/greedy.txt")" -eq 107 ] || { echo "expected prompt + 100 characters + newline"; exit 1; }
grep -q "100 tokens in .* tokens/s (recurrent state)" "$tmp/rate.txt"
a=$("$ember" generate --checkpoint "$tmp/full.safetensors" --tokens 30 --top-k 10 --seed 3 2> /dev/null)
b=$("$ember" generate --checkpoint "$tmp/full.safetensors" --tokens 30 --top-k 10 --seed 3 2> /dev/null)
[ "$a" = "$b" ] || { echo "the same seed gave different text"; exit 1; }
echo "generate ok"

expect_error() {  # expect_error PATTERN COMMAND...: the command fails and stderr matches PATTERN
  local pattern="$1"
  shift
  if "$@" > /dev/null 2> "$tmp/err.txt"; then echo "should fail: $*"; exit 1; fi
  grep -q -- "$pattern" "$tmp/err.txt" || { echo "expected \"$pattern\" from $*, got:"; cat "$tmp/err.txt"; exit 1; }
}
expect_error "\[train ssm\] checkpoint .* holds a model of another architecture: --state 8 there, 16 in this run" \
  "$ember" train ssm --layers 1 --state 16 --context 16 --dim 32 "${run[@]}" --lr 3e-3 --data "$data" \
  --resume "$tmp/full.safetensors"
expect_error "\[train gpt\] checkpoint .* is not a checkpoint of \`ember train gpt\` (task \"ssm\")" \
  "$ember" train gpt --layers 1 --context 16 --dim 32 "${run[@]}" --lr 3e-3 --data "$data" \
  --resume "$tmp/full.safetensors"
expect_error "\[generate\] --no-cache applies to GPT checkpoints" \
  "$ember" generate --checkpoint "$tmp/full.safetensors" --no-cache
expect_error "\[quantize\]" "$ember" quantize "$tmp/full.safetensors" "$tmp/q.gguf" --type q8_0
echo "errors ok"
