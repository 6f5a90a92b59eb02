#!/usr/bin/env bash
# `ember onnx info` reports coverage (exit 1 when an op is not imported) and `ember onnx run` writes
# each output as <name>.npy, matching onnxruntime's outputs saved beside the committed model.
set -euo pipefail
ember=$1
root=$2
cases=$root/tests/data/onnx
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

info=$("$ember" onnx info "$cases/mlp/model.onnx")
grep -q "all supported" <<<"$info" || { echo "info: $info"; exit 1; }
grep -qE "^  Gemm +2  supported" <<<"$info" || { echo "info lacks the Gemm row: $info"; exit 1; }
"$ember" onnx info --json "$cases/mlp/model.onnx" | python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["supported"] and j["opsets"]["ai.onnx"] == 17, j
assert isinstance(j["inputs"][0]["shape"][0], str), j["inputs"]  # the symbolic batch
'
# A model using an op of another domain: listed as not supported, exit code 1.
if unsupported=$("$ember" onnx info "$root/fuzz/corpus/onnx/seed-domains.onnx"); then
  echo "info must exit 1 when an op is not supported"; exit 1
fi
grep -q "NOT SUPPORTED" <<<"$unsupported" || { echo "info: $unsupported"; exit 1; }

"$ember" onnx run "$cases/mnist_cnn/model.onnx" --input "input=$cases/mnist_cnn/input.npy" --output-dir "$out" --json \
  >"$out/report.json"
python3 - "$out/logits.npy" "$cases/mnist_cnn/expected_logits.npy" "$out/report.json" <<'PY'
import ast, json, struct, sys

def load(path):  # float32 little-endian C-order .npy, version 1
    data = open(path, "rb").read()
    assert data[:6] == b"\x93NUMPY", path
    length = struct.unpack("<H", data[8:10])[0]
    header = ast.literal_eval(data[10:10 + length].decode())
    assert header["descr"] == "<f4" and not header["fortran_order"], header
    body = data[10 + length:]
    return header["shape"], struct.unpack("<%df" % (len(body) // 4), body)

shape, got = load(sys.argv[1])
want_shape, want = load(sys.argv[2])
assert shape == want_shape, (shape, want_shape)
worst = max(abs(a - b) - (1e-4 + 1e-4 * abs(b)) for a, b in zip(got, want))
assert worst <= 0, worst
report = json.load(open(sys.argv[3]))
assert report["outputs"][0]["name"] == "logits" and report["compiled"], report
PY
# --explain reports what the graph compiler did, after the timed runs (replays of the plan); it
# needs the compiled model.
explained=$("$ember" onnx run "$cases/mnist_cnn/model.onnx" --input "input=$cases/mnist_cnn/input.npy" \
  --output-dir "$out" --bench --bench-seconds 0 --explain)
grep -qE "1 traces, [1-9][0-9]* replays" <<<"$explained" || { echo "explain: $explained"; exit 1; }
grep -q "activations kept blocked between convolutions" <<<"$explained" || { echo "explain: $explained"; exit 1; }
if message=$("$ember" onnx run "$cases/mnist_cnn/model.onnx" --input "input=$cases/mnist_cnn/input.npy" \
    --output-dir "$out" --explain --eager 2>&1); then
  echo "--explain with --eager must fail"; exit 1
fi
grep -q "excludes" <<<"$message" || { echo "--explain --eager: $message"; exit 1; }
# A missing input is named.
if message=$("$ember" onnx run "$cases/bert_tiny/model.onnx" --input "input_ids=$cases/bert_tiny/input_ids.npy" \
    --output-dir "$out" 2>&1); then
  echo "a missing input must fail"; exit 1
fi
grep -q 'no value for input "attention_mask"' <<<"$message" || { echo "missing input: $message"; exit 1; }
echo "onnx CLI: ok"
