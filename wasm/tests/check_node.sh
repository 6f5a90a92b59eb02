#!/usr/bin/env bash
# The WebAssembly module in Node against the native build: the cross-platform checks
# (wasm/src/checks.h) on the committed inputs, and the JavaScript API on the shipped MNIST CNN and on
# its GGUF forms written by `ember quantize` (wasm/tests/node_test.js compares).
#   check_node.sh <web folder of a WebAssembly build> <ember_wasm_checks> <ember CLI> <repository>
set -euo pipefail
web="$1"
checks="$2"
ember="$3"
root="$4"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
inputs="$root/wasm/tests/inputs.safetensors"
checkpoint="$root/web/mnist_cnn.safetensors"

"$checks" "$inputs" "$checkpoint" "$tmp/native.safetensors"
for type in f32 q8_0; do
  "$ember" quantize "$checkpoint" "$tmp/cnn-$type.gguf" --type "$type" --threads 1 > /dev/null
done
node "$root/wasm/tests/node_test.js" "$web" "$inputs" "$checkpoint" "$tmp/native.safetensors" "$tmp"
