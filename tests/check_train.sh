#!/usr/bin/env bash
# `ember train mnist`: the --json line has every promised field, bad input is a clear error, and a
# run stopped after one epoch and resumed from its checkpoint ends bit-identical to an
# uninterrupted run (same final checkpoint bytes, same results), --compile ends with the same loss
# as eager, --amp bf16/f16 train as well as float32 (f16 resumes bit-identically with its loss
# scaler), and the default CNN's steady-state steps make no calls to the system allocator.
set -euo pipefail
ember="$1"
data="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
settings=(--model mlp --epochs 2 --threads 2 --seed 7)
common=("${settings[@]}" --data "$data")

"$ember" train mnist "${common[@]}" --save "$tmp/full.safetensors" --json > "$tmp/full.txt"
"$ember" train mnist "${common[@]}" --stop-after 1 --save "$tmp/part.safetensors" --json > /dev/null
"$ember" train mnist "${common[@]}" --resume "$tmp/part.safetensors" --save "$tmp/part.safetensors" --json \
  > "$tmp/resumed.txt"
cmp "$tmp/full.safetensors" "$tmp/part.safetensors" || { echo "resumed checkpoint differs"; exit 1; }

python3 - "$tmp/full.txt" "$tmp/resumed.txt" <<'PY'
import json, sys
full, resumed = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:3])
for key in ["task", "model", "epochs", "train_samples", "test_samples", "test_accuracy", "final_loss", "seconds",
            "samples_per_second", "system_allocs_per_step"]:
    assert key in full, f"missing {key}: {full}"
assert full["task"] == "mnist" and full["model"] == "mlp" and full["epochs"] == 2, full
assert full["train_samples"] == 4000 and full["test_samples"] == 1000, full
assert 0.8 < full["test_accuracy"] <= 1.0, full
for key in ["test_accuracy", "final_loss"]:
    assert full[key] == resumed[key], (key, full[key], resumed[key])
print("json and resume ok:", full["test_accuracy"], full["final_loss"])
PY

# --amp: bf16 and f16 autocast train as well as float32 (within 3 points of accuracy); an f16 run
# stopped and resumed (its GradScaler state in the checkpoint) ends bit-identical to an
# uninterrupted one; a float32 checkpoint does not resume an --amp run.
for amp in bf16 f16; do
  "$ember" train mnist "${common[@]}" --amp "$amp" --save "$tmp/amp_$amp.safetensors" --json > "$tmp/amp_$amp.txt"
done
"$ember" train mnist "${common[@]}" --amp f16 --stop-after 1 --save "$tmp/amp_part.safetensors" --json > /dev/null
"$ember" train mnist "${common[@]}" --amp f16 --resume "$tmp/amp_part.safetensors" --save "$tmp/amp_part.safetensors" \
  --json > /dev/null
cmp "$tmp/amp_f16.safetensors" "$tmp/amp_part.safetensors" || { echo "resumed --amp f16 checkpoint differs"; exit 1; }
python3 - "$tmp/full.txt" "$tmp/amp_bf16.txt" "$tmp/amp_f16.txt" <<'PY'
import json, sys
full, bf16, f16 = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:4])
for run in (bf16, f16):
    assert abs(run["test_accuracy"] - full["test_accuracy"]) <= 0.03, (run, full)
print("amp ok:", full["test_accuracy"], bf16["test_accuracy"], f16["test_accuracy"])
PY
grep -q '"grad_scaler.scale"' "$tmp/amp_f16.safetensors" || { echo "no GradScaler state in the f16 checkpoint"; exit 1; }
if "$ember" train mnist "${common[@]}" --amp bf16 --resume "$tmp/full.safetensors" > "$tmp/err.txt" 2>&1; then
  echo "an --amp run resumed a float32 checkpoint"; exit 1
fi
grep -q "amp" "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
# --amp f16 --compile: the loss scaler's decisions are replayed host regions reading its Inf/NaN
# flag anew each step; the losses are those of the eager f16 run.
"$ember" train mnist "${common[@]}" --amp f16 --compile --json > "$tmp/amp_f16_compiled.txt"
python3 - "$tmp/amp_f16.txt" "$tmp/amp_f16_compiled.txt" <<'PY'
import json, math, sys
eager, compiled = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:3])
assert compiled["compiled"] is True and compiled["compiles"] == 2, compiled
assert math.isclose(eager["final_loss"], compiled["final_loss"], rel_tol=1e-4), (eager, compiled)
assert abs(eager["test_accuracy"] - compiled["test_accuracy"]) <= 0.005, (eager, compiled)
print("--amp f16 --compile ok:", eager["final_loss"], compiled["final_loss"])
PY

# --compile: the same run with each step through ember::compile (a second plan for the last, smaller
# batch of each epoch: 4,000 images in batches of 64) ends with the same loss to 4 significant digits.
"$ember" train mnist "${common[@]}" --compile --json > "$tmp/compiled.txt"
python3 - "$tmp/full.txt" "$tmp/compiled.txt" <<'PY'
import json, math, sys
eager, compiled = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:3])
assert eager["compiled"] is False and "compiles" not in eager, eager
assert compiled["compiled"] is True and compiled["compiles"] == 2 and compiled["replays"] == 2 * 63 - 2, compiled
assert compiled["arena_bytes"] > 0, compiled
a, b = eager["final_loss"], compiled["final_loss"]
assert math.isclose(a, b, rel_tol=1e-4), f"final loss {a} eager, {b} compiled"
assert abs(eager["test_accuracy"] - compiled["test_accuracy"]) <= 0.005, (eager, compiled)
print(f"--compile ok: final loss {a:.6g} eager, {b:.6g} compiled ({eager['seconds']:.1f}s vs "
      f"{compiled['seconds']:.1f}s); {compiled['compiles']} traces, arena {compiled['arena_bytes']} bytes")
PY

# The default CNN's steady-state steps are served entirely by the caching allocator.
"$ember" train mnist --epochs 2 --threads 2 --data "$data" --json > "$tmp/cnn.txt"
python3 - "$tmp/cnn.txt" <<'PY'
import json, sys
cnn = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert cnn["model"] == "cnn" and cnn["system_allocs_per_step"] == 0, cnn
print("steady-state system allocations per step:", cnn["system_allocs_per_step"])
PY

# Mismatched settings and bad files are refused with a message, not a crash.
if "$ember" train mnist "${common[@]}" --lr 0.5 --resume "$tmp/full.safetensors" 2> "$tmp/err.txt"; then
  echo "resuming with another lr should fail"; exit 1
fi
grep -q "\[train\] checkpoint .* was written with lr=" "$tmp/err.txt"
echo "not a checkpoint" > "$tmp/bad.safetensors"
if "$ember" train mnist "${common[@]}" --resume "$tmp/bad.safetensors" 2> "$tmp/err.txt"; then
  echo "a corrupt checkpoint should fail"; exit 1
fi
grep -q "\[load\]" "$tmp/err.txt"
if "$ember" train mnist "${settings[@]}" --data "$tmp/nowhere" 2> "$tmp/err.txt"; then
  echo "a missing data folder should fail"; exit 1
fi
grep -q "scripts/setup" "$tmp/err.txt"
# A bad count is named in one short line, not a range up to the largest double.
if "$ember" train mnist --epochs 0 2> "$tmp/err.txt"; then echo "--epochs 0 should fail"; exit 1; fi
grep -q -- "--epochs: must be a whole number from 1 to 2147483647, got 0" "$tmp/err.txt"
[ "$(wc -c < "$tmp/err.txt")" -lt 200 ] || { echo "the --epochs message is too long:"; cat "$tmp/err.txt"; exit 1; }
echo "errors ok"
