#!/usr/bin/env bash
# `ember train gpt` and `ember generate` on a tiny model: the --json line has its fields and the
# loss falls; a run stopped halfway and resumed from its checkpoint ends bit-identical to an
# uninterrupted run; --compile ends with the same losses; `ember generate` rebuilds the model from the checkpoint alone and decodes the
# same greedy text with and without the KV cache; bad input (another architecture, a malformed
# batch_state, characters outside the vocabulary, a prompt longer than the context, missing data) is
# a clear error.
set -euo pipefail
ember="$1"
data="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
model=(--layers 1 --heads 2 --context 16)  # and --dim 32
run=(--batch-size 8 --steps 40 --warmup 4 --eval-every 20 --eval-batches 4 --sample 20 --threads 2 --seed 5)
common=("${model[@]}" --dim 32 "${run[@]}" --lr 3e-3 --data "$data")

"$ember" train gpt "${common[@]}" --save "$tmp/full.safetensors" --json > "$tmp/full.txt"
"$ember" train gpt "${common[@]}" --stop-after 20 --save "$tmp/part.safetensors" --json > /dev/null
"$ember" train gpt "${common[@]}" --resume "$tmp/part.safetensors" --save "$tmp/part.safetensors" --json \
  > "$tmp/resumed.txt"
cmp "$tmp/full.safetensors" "$tmp/part.safetensors" || { echo "resumed checkpoint differs"; exit 1; }

python3 - "$tmp/full.txt" "$tmp/resumed.txt" <<'PY'
import json, math, sys
full, resumed = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:3])
for key in ["task", "steps", "parameters", "train_loss", "val_loss", "final_loss", "train_seconds", "seconds",
            "tokens_per_second", "evals", "sample"]:
    assert key in full, f"missing {key}: {full}"
assert full["task"] == "gpt" and full["steps"] == 40 and len(full["evals"]) == 2, full
assert [e["step"] for e in full["evals"]] == [20, 40], full["evals"]
assert full["val_loss"] < math.log(84) - 0.8, full  # from ln(84) = 4.43 at the start
assert len(full["sample"]) == 20 and full["tokens_per_second"] > 0, full
for key in ["train_loss", "val_loss", "final_loss", "sample"]:
    assert full[key] == resumed[key], (key, full[key], resumed[key])
print("json and resume ok: val loss", full["val_loss"])
PY

# --compile: the same run with each step through ember::compile (one plan: every batch has one shape)
# ends with the same losses to 4 significant digits.
"$ember" train gpt "${common[@]}" --compile --json > "$tmp/compiled.txt"
python3 - "$tmp/full.txt" "$tmp/compiled.txt" <<'PY'
import json, math, sys
eager, compiled = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:3])
assert eager["compiled"] is False and "compiles" not in eager, eager
assert compiled["compiled"] is True and compiled["compiles"] == 1 and compiled["replays"] == 39, compiled
assert compiled["arena_bytes"] > 0, compiled
for key in ["final_loss", "train_loss", "val_loss"]:
    a, b = eager[key], compiled[key]
    assert math.isclose(a, b, rel_tol=1e-4), f"{key} {a} eager, {b} compiled"
print(f"--compile ok: final loss {eager['final_loss']:.6g} eager, {compiled['final_loss']:.6g} compiled "
      f"({eager['train_seconds']:.2f}s vs {compiled['train_seconds']:.2f}s of training steps)")
PY

# generate rebuilds the model from the checkpoint; greedy text is the same with and without the cache,
# also past the context of 16 (where the cache restarts from the last 16 characters).
"$ember" generate --checkpoint "$tmp/full.safetensors" --prompt "ROMEO:" --tokens 40 --temperature 0 \
  > "$tmp/cached.txt" 2> "$tmp/rate.txt"
"$ember" generate --checkpoint "$tmp/full.safetensors" --prompt "ROMEO:" --tokens 40 --temperature 0 --no-cache \
  > "$tmp/recomputed.txt" 2> /dev/null
cmp "$tmp/cached.txt" "$tmp/recomputed.txt" || { echo "greedy text differs with and without the cache"; exit 1; }
[ "$(head -c 6 "$tmp/cached.txt")" = "ROMEO:" ] || { echo "the text does not start with the prompt"; exit 1; }
[ "$(wc -c < "$tmp/cached.txt")" -eq 47 ] || { echo "expected prompt + 40 characters + newline"; exit 1; }
grep -q "40 tokens in .* tokens/s (KV cache)" "$tmp/rate.txt"
# Sampling: the same seed writes the same text.
a=$("$ember" generate --checkpoint "$tmp/full.safetensors" --tokens 30 --top-k 10 --top-p 0.9 --seed 3 2> /dev/null)
b=$("$ember" generate --checkpoint "$tmp/full.safetensors" --tokens 30 --top-k 10 --top-p 0.9 --seed 3 2> /dev/null)
[ "$a" = "$b" ] || { echo "the same seed gave different text"; exit 1; }
echo "generate ok"

expect_error() {  # expect_error PATTERN COMMAND...: the command fails and stderr matches PATTERN
  local pattern="$1"
  shift
  if "$@" > /dev/null 2> "$tmp/err.txt"; then echo "should fail: $*"; exit 1; fi
  grep -q -- "$pattern" "$tmp/err.txt" || { echo "expected \"$pattern\" from $*, got:"; cat "$tmp/err.txt"; exit 1; }
}
expect_error "\[train gpt\] checkpoint .* holds a model of another architecture: --dim 32 there, 48 in this run" \
  "$ember" train gpt "${model[@]}" --dim 48 "${run[@]}" --lr 3e-3 --data "$data" --resume "$tmp/full.safetensors"
expect_error "\[train gpt\] checkpoint .* was written with lr=" \
  "$ember" train gpt "${model[@]}" --dim 32 "${run[@]}" --lr 1e-3 --data "$data" --resume "$tmp/full.safetensors"
printf 'abcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabcabc\n' > "$tmp/abc.txt"
expect_error "\[train gpt\] checkpoint .* another vocabulary" \
  "$ember" train gpt "${model[@]}" --dim 32 "${run[@]}" --lr 3e-3 --data "$tmp/abc.txt" --resume "$tmp/full.safetensors"
# A checkpoint whose batch_state entry is missing or not a whole number is refused (a missing one
# ended the process with an uncaught std::invalid_argument; "-1" read as 2^64 - 1).
for state in "" "-1" "12abc"; do
  python3 - "$tmp/full.safetensors" "$tmp/state.safetensors" "$state" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
length = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + length])
if sys.argv[3]:
    header["__metadata__"]["batch_state"] = sys.argv[3]
else:
    del header["__metadata__"]["batch_state"]
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + data[8 + length:])
PY
  expect_error "\[train gpt\] checkpoint .* has no valid batch_state entry (got \"$state\")" \
    "$ember" train gpt "${common[@]}" --resume "$tmp/state.safetensors"
done
expect_error "\[train gpt\] cannot read $tmp/nowhere.txt: run scripts/setup" \
  "$ember" train gpt "${model[@]}" --dim 32 "${run[@]}" --data "$tmp/nowhere.txt"
expect_error "\[generate\] --prompt cannot be encoded .* '~' at offset 3" \
  "$ember" generate --checkpoint "$tmp/full.safetensors" --prompt "abc~"
expect_error "\[generate\] the prompt has 17 characters, more than the model's context of 16" \
  "$ember" generate --checkpoint "$tmp/full.safetensors" --prompt "abcdefghijklmnopq"
expect_error "\[generate\] checkpoint .* is not a language model from" \
  "$ember" generate --checkpoint "$(dirname "$0")/golden/torch_small.safetensors"
expect_error "\[generate\] cannot open .*missing.safetensors" "$ember" generate --checkpoint "$tmp/missing.safetensors"
echo "errors ok"
