#!/usr/bin/env bash
# `ember train diffusion` and `ember sample diffusion` on a tiny U-Net: the --json line has its fields
# and the loss falls; a run stopped halfway and resumed from its checkpoint ends bit-identical to an
# uninterrupted run; sampling writes a PNG grid of the right size (a row per digit), is the same for
# the same seed, runs every combination of --steps and --guidance, and scores the samples with an
# MNIST classifier; bad input is a clear error.
set -euo pipefail
ember="$1"
data="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
recipe=(--timesteps 100 --steps 30 --batch-size 16 --warmup 3 --lr 2e-3 --threads 2 --seed 4 --data "$data")
common=(--channels 8 "${recipe[@]}")

"$ember" train diffusion "${common[@]}" --save "$tmp/full.safetensors" --json > "$tmp/full.txt"
"$ember" train diffusion "${common[@]}" --stop-after 13 --save "$tmp/part.safetensors" --json > /dev/null
"$ember" train diffusion "${common[@]}" --resume "$tmp/part.safetensors" --save "$tmp/part.safetensors" --json \
  > "$tmp/resumed.txt"
cmp "$tmp/full.safetensors" "$tmp/part.safetensors" || { echo "resumed checkpoint differs"; exit 1; }

# A classifier to score the samples (one epoch of the MLP: what matters here is the plumbing).
"$ember" train mnist --model mlp --epochs 1 --threads 2 --data "$data" --save "$tmp/mlp.safetensors" > /dev/null
"$ember" sample diffusion --checkpoint "$tmp/full.safetensors" --steps 4 10 --guidance 0 2 --per-class 3 \
  --classifier "$tmp/mlp.safetensors" --data "$data" --out "$tmp/grid.png" --threads 2 --json > "$tmp/sample.txt"
"$ember" sample diffusion --checkpoint "$tmp/full.safetensors" --sampler ddpm --steps 5 --per-class 2 \
  --out "$tmp/a.png" --seed 9 --batch-size 7 > /dev/null
"$ember" sample diffusion --checkpoint "$tmp/full.safetensors" --sampler ddpm --steps 5 --per-class 2 \
  --out "$tmp/b.png" --seed 9 --batch-size 7 > "$tmp/text.txt"
cmp "$tmp/a.png" "$tmp/b.png" || { echo "the same seed gave different samples"; exit 1; }
grep -q "steps  guidance  accuracy" "$tmp/text.txt"

python3 - "$tmp" <<'PY'
import json, math, struct, sys, zlib
tmp = sys.argv[1]
full, resumed, sampled = (json.loads(open(f"{tmp}/{name}.txt").read().strip().splitlines()[-1])
                          for name in ("full", "resumed", "sample"))
assert full["task"] == "diffusion" and full["steps"] == 30 and full["images_per_second"] > 0, full
assert full["flops_per_step"] > 0 and full["parameters"] > 10000, full
curve = [point["loss"] for point in full["curve"]]
assert len(curve) == 1 and curve[0] < 1.0, curve  # noise has variance 1: predicting 0 scores 1
assert resumed["loss"] is not None and resumed["steps"] == 30, resumed
results = sampled["results"]
assert [(r["steps"], r["guidance"]) for r in results] == [(4, 0), (4, 2), (10, 0), (10, 2)], results
assert 0.5 < sampled["classifier_test_accuracy"] <= 1.0, sampled
for r in results:
    assert 0 <= r["accuracy"] <= 1 and len(r["per_class_accuracy"]) == 10 and r["samples"] == 30, r
    assert r["png"] == f"{tmp}/grid-s{r['steps']}-g{r['guidance']:g}.png", r

def png(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    width, height, depth, color = struct.unpack(">IIBB", data[16:26])
    chunks, at = b"", 8
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        if kind == b"IDAT":
            chunks += data[at + 8:at + 8 + length]
        at += 12 + length
    return width, height, depth, color, len(zlib.decompress(chunks))

# 3 columns and 10 rows of 28 pixels with 2-pixel gaps; 8-bit gray; a filter byte per row.
assert png(f"{tmp}/grid-s4-g0.png") == (3 * 30 + 2, 10 * 30 + 2, 8, 0, (10 * 30 + 2) * (3 * 30 + 3))
assert png(f"{tmp}/a.png")[:2] == (2 * 30 + 2, 302)
print("train, resume, sample and png ok: loss", curve[0])
PY

expect_error() {  # expect_error PATTERN COMMAND...: the command fails and stderr matches PATTERN
  local pattern="$1"
  shift
  if "$@" > /dev/null 2> "$tmp/err.txt"; then echo "should fail: $*"; exit 1; fi
  grep -q -- "$pattern" "$tmp/err.txt" || { echo "expected \"$pattern\" from $*, got:"; cat "$tmp/err.txt"; exit 1; }
}
expect_error "was written with channels=8 but this run uses channels=16" \
  "$ember" train diffusion --channels 16 "${recipe[@]}" --resume "$tmp/full.safetensors"
expect_error "\-\-channels must be a multiple of 8" "$ember" train diffusion --channels 12 "${recipe[@]}"
expect_error "holds a mnist_mlp model, not a checkpoint of \`ember train diffusion\`" \
  "$ember" sample diffusion --checkpoint "$tmp/mlp.safetensors"
expect_error "the number of sampling steps must be in \[1, 100\], got 101" \
  "$ember" sample diffusion --checkpoint "$tmp/full.safetensors" --steps 101
expect_error "holds a diffusion model" \
  "$ember" sample diffusion --checkpoint "$tmp/full.safetensors" --classifier "$tmp/full.safetensors"
expect_error "cannot write" \
  "$ember" sample diffusion --checkpoint "$tmp/full.safetensors" --steps 2 --per-class 1 --out "$tmp/no/such/dir.png"
echo "errors ok"
