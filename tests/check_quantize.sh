#!/usr/bin/env bash
# `ember quantize` and `ember eval` end to end: a tiny GPT and an MNIST MLP trained for a moment,
# quantized to q8_0, q4_0, q4_1, int8 (and written as f32 GGUF); `ember eval` reads safetensors and GGUF
# alike, the f32 GGUF evaluates exactly as its checkpoint and as training did, the quantized files
# within a loose bound of it; `ember generate` runs from a GGUF file; MiniLM (when scripts/setup
# fetched it) embeds from its int8 GGUF alone, close to the float model; bad input is a clear error.
set -euo pipefail
ember="$1"
data="$2"  # the repository's data/ folder
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
text="$data/shakespeare/input.txt"

expect_error() {  # expect_error PATTERN COMMAND...: the command fails and stderr matches PATTERN
  local pattern="$1"
  shift
  if "$@" > /dev/null 2> "$tmp/err.txt"; then echo "should fail: $*"; exit 1; fi
  grep -q -- "$pattern" "$tmp/err.txt" || { echo "expected \"$pattern\" from $*, got:"; cat "$tmp/err.txt"; exit 1; }
}

# --- GPT ---------------------------------------------------------------------------------------------
"$ember" train gpt --layers 2 --heads 2 --dim 64 --context 32 --batch-size 16 --steps 300 --warmup 10 \
  --eval-every 300 --eval-batches 4 --sample 0 --lr 3e-3 --threads 2 --seed 5 --data "$text" \
  --save "$tmp/gpt.safetensors" --json > "$tmp/train.json"
"$ember" eval gpt --checkpoint "$tmp/gpt.safetensors" --data "$text" --batches 4 --threads 2 --json > "$tmp/eval-safetensors.json"
for type in f32 q8_0 q4_0 q4_1 int8; do
  "$ember" quantize "$tmp/gpt.safetensors" "$tmp/gpt-$type.gguf" --type "$type" --threads 2 --json \
    > "$tmp/quantize-$type.json"
  "$ember" eval gpt --checkpoint "$tmp/gpt-$type.gguf" --data "$text" --batches 4 --threads 2 --json \
    > "$tmp/eval-$type.json"
done
"$ember" quantize "$tmp/gpt.safetensors" "$tmp/gpt-weights.gguf" --type q4_0 --weights-only --skip transformer.h.0.mlp \
  --threads 2 --json > "$tmp/quantize-weights.json"
"$ember" eval gpt --checkpoint "$tmp/gpt-weights.gguf" --data "$text" --batches 4 --threads 2 --json \
  > "$tmp/eval-weights.json"
python3 - "$tmp" <<'PY'
import json, os, sys
tmp = sys.argv[1]
def read(name):
    return json.loads(open(os.path.join(tmp, name)).read().strip().splitlines()[-1])
train, base = read("train.json"), read("eval-safetensors.json")
# eval gpt measures what training measured: the same batches, the same loss.
assert base["val_loss"] == train["val_loss"], (base, train["val_loss"])
assert base["format"] == "safetensors" and base["quantization"] == "f32" and base["batch_size"] == 16, base
assert base["val_loss"] < 2.8, base  # from ln(84) = 4.43: the model has learned something to lose
bounds = {"f32": 0.0, "q8_0": 0.01, "q4_0": 0.05, "q4_1": 0.05, "int8": 0.02}  # relative to the float loss
for kind, bound in bounds.items():
    q, e = read(f"quantize-{kind}.json"), read(f"eval-{kind}.json")
    assert e["format"] == "gguf" and e["quantization"] == kind, e
    relative = abs(e["val_loss"] - base["val_loss"]) / base["val_loss"]
    assert relative <= bound, f"{kind}: val loss {e['val_loss']} against {base['val_loss']}"
    assert q["output_bytes"] == os.path.getsize(os.path.join(tmp, f"gpt-{kind}.gguf")), q
    if kind == "f32":
        assert q["quantized"] == [] and q["model_bytes_after"] == q["model_bytes_before"], q
    else:
        # every Linear layer of the two blocks: c_attn, c_proj, c_fc, c_proj
        assert len(q["quantized"]) == 8 and q["skipped"] == [], q
        assert q["model_bytes_after"] < q["model_bytes_before"], q
    print(f"gpt {kind}: val loss {e['val_loss']:.4f} ({100 * relative:.2f}% from f32), "
          f"{q['output_bytes']} bytes")
w, e = read("quantize-weights.json"), read("eval-weights.json")
assert len(w["quantized"]) == 6 and [s["name"] for s in w["skipped"]] == ["transformer.h.0.mlp.c_fc",
                                                                          "transformer.h.0.mlp.c_proj"], w
assert abs(e["val_loss"] - base["val_loss"]) / base["val_loss"] <= 0.05, e
PY

# generate runs from the GGUF alone; greedy text is the same with and without the KV cache.
"$ember" generate --checkpoint "$tmp/gpt-q8_0.gguf" --prompt "ROMEO:" --tokens 30 --temperature 0 --threads 2 \
  > "$tmp/cached.txt" 2> "$tmp/rate.txt"
"$ember" generate --checkpoint "$tmp/gpt-q8_0.gguf" --prompt "ROMEO:" --tokens 30 --temperature 0 --threads 2 \
  --no-cache > "$tmp/recomputed.txt" 2> /dev/null
cmp "$tmp/cached.txt" "$tmp/recomputed.txt" || { echo "q8_0: greedy text differs with and without the cache"; exit 1; }
[ "$(head -c 6 "$tmp/cached.txt")" = "ROMEO:" ] && [ "$(wc -c < "$tmp/cached.txt")" -eq 37 ] ||
  { echo "generate from GGUF:"; cat "$tmp/cached.txt"; exit 1; }
grep -q "30 tokens in .* tokens/s (KV cache)" "$tmp/rate.txt"
echo "gpt: eval, quantize and generate ok"

# --- MNIST MLP -----------------------------------------------------------------------------------------
"$ember" train mnist --model mlp --epochs 1 --threads 2 --seed 3 --data "$data/mnist" --save "$tmp/mlp.safetensors" \
  --json > "$tmp/train-mlp.json"
"$ember" eval mnist --checkpoint "$tmp/mlp.safetensors" --data "$data/mnist" --threads 2 --json > "$tmp/eval-mlp.json"
for type in q8_0 int8; do
  "$ember" quantize "$tmp/mlp.safetensors" "$tmp/mlp-$type.gguf" --type "$type" --json > "$tmp/quantize-mlp-$type.json"
  "$ember" eval mnist --checkpoint "$tmp/mlp-$type.gguf" --data "$data/mnist" --threads 2 --json \
    > "$tmp/eval-mlp-$type.json"
done
python3 - "$tmp" <<'PY'
import json, os, sys
tmp = sys.argv[1]
def read(name):
    return json.loads(open(os.path.join(tmp, name)).read().strip().splitlines()[-1])
train, base = read("train-mlp.json"), read("eval-mlp.json")
assert base["test_accuracy"] == train["test_accuracy"] and base["model"] == "mlp", (base, train)
for kind in ["q8_0", "int8"]:
    q, e = read(f"quantize-mlp-{kind}.json"), read(f"eval-mlp-{kind}.json")
    assert e["quantization"] == kind and e["test_samples"] == 1000, e
    assert abs(e["test_accuracy"] - base["test_accuracy"]) <= 0.02, (kind, e, base)
    layers = sorted(q["quantized"] + [s["name"] for s in q["skipped"]])
    assert layers == ["1", "3"] and len(q["quantized"]) >= 1, q
    print(f"mnist mlp {kind}: accuracy {e['test_accuracy']:.3f} (f32 {base['test_accuracy']:.3f}), "
          f"quantized {q['quantized']}, {q['output_bytes']} bytes")
PY

# --- errors ----------------------------------------------------------------------------------------------
expect_error "\[quantize\] --type must be q8_0, q4_0, q4_1, int8 or f32, got \"q5_k\"" \
  "$ember" quantize "$tmp/gpt.safetensors" "$tmp/x.gguf" --type q5_k
expect_error "\[quantize\] cannot open $tmp/missing.safetensors" \
  "$ember" quantize "$tmp/missing.safetensors" "$tmp/x.gguf" --type q8_0
expect_error "\[quantize\] .* is already quantized (q8_0)" \
  "$ember" quantize "$tmp/gpt-q8_0.gguf" "$tmp/x.gguf" --type q4_0
expect_error "\[quantize\] --skip \"lm_head\" names no module of the gpt model (the GPT's output layer is tied" \
  "$ember" quantize "$tmp/gpt.safetensors" "$tmp/x.gguf" --type q8_0 --skip lm_head
expect_error "\[generate\] checkpoint .*mlp-int8.gguf is not a language model from .* (it holds a mnist_mlp model)" \
  "$ember" generate --checkpoint "$tmp/mlp-int8.gguf"
expect_error "\[eval mnist\] checkpoint .*gpt-q4_0.gguf is not an MNIST checkpoint .* (it holds a gpt model)" \
  "$ember" eval mnist --checkpoint "$tmp/gpt-q4_0.gguf" --data "$data/mnist"
expect_error "\[eval gpt\] .*input.txt is neither a safetensors checkpoint nor a GGUF file" \
  "$ember" eval gpt --checkpoint "$text"
expect_error "\[embed\] .*gpt-int8.gguf is not a sentence-transformers folder or a GGUF file of one" \
  "$ember" embed --model "$tmp/gpt-int8.gguf" "a text"
expect_error "\[eval gpt\] .*mixed.gguf is a GGUF file without an ember.model entry" \
  "$ember" eval gpt --checkpoint "$(dirname "$0")/data/gguf/mixed.gguf"
# A GGUF file whose tensors do not fit the model its metadata describes: a key is missing.
python3 - "$tmp/gpt-f32.gguf" "$tmp/renamed.gguf" "$(dirname "$0")" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
import gguf_walk
data = bytearray(open(sys.argv[1], "rb").read())
# The first tensor renamed (the first byte of its name), so that the model misses a key.
pos = gguf_walk.first_tensor_info(data)
data[pos + 8] = ord("X")
open(sys.argv[2], "wb").write(bytes(data))
PY
expect_error "\[generate\] checkpoint .*renamed.gguf does not fit the gpt model its metadata describes" \
  "$ember" generate --checkpoint "$tmp/renamed.gguf"
grep -q 'missing keys: "transformer.h.0.attn.c_attn.bias"' "$tmp/err.txt" || { cat "$tmp/err.txt"; exit 1; }
echo "errors ok"

# --- MiniLM ----------------------------------------------------------------------------------------------
if [ -f "$data/minilm/model.safetensors" ]; then
  "$ember" quantize "$data/minilm" "$tmp/minilm-int8.gguf" --type int8 --json > "$tmp/quantize-minilm.json"
  sentences=("A man is eating food." "A kitten rests on a rug." "Stock markets fell sharply today.")
  "$ember" embed --model "$data/minilm" --json --threads 2 "${sentences[@]}" > "$tmp/embed-f32.json"
  "$ember" embed --model "$tmp/minilm-int8.gguf" --json --threads 2 "${sentences[@]}" > "$tmp/embed-int8.json"
  python3 - "$tmp" <<'PY'
import json, math, os, sys
tmp = sys.argv[1]
q = json.load(open(os.path.join(tmp, "quantize-minilm.json")))
# 6 Linear layers per block and the pooler; the word embeddings (47 MB) stay in float
assert len(q["quantized"]) == 6 * 6 + 1 and q["output_bytes"] < 0.7 * q["input_bytes"], q
a, b = (json.load(open(os.path.join(tmp, f"embed-{k}.json"))) for k in ["f32", "int8"])
for u, v in zip(a["embeddings"], b["embeddings"]):
    cosine = sum(x * y for x, y in zip(u, v)) / math.sqrt(sum(x * x for x in u) * sum(y * y for y in v))
    assert cosine > 0.98, cosine
    print(f"minilm int8: cosine to f32 {cosine:.5f}")
PY
else
  echo "MiniLM not fetched (scripts/setup): skipping its check"
fi
echo "quantize CLI: ok"
