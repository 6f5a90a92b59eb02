#!/usr/bin/env bash
# The bad-input sweep: every `ember` command given what users get wrong (a missing file, a folder
# for a file, an empty, truncated or wrong file, another model's checkpoint, huge, zero, negative or
# NaN numbers, NaN in the data) must end at once with a clear error: a non-zero exit, a message
# starting with "[" (after "error: ") that names the file or option, and never a crash, an abort,
# "terminate called", a sanitizer report or a hang. A few inputs are documented clean successes.
#
# BAD_INPUT_TABLE=FILE writes the table of docs/reliability.md ("Bad input: what the user sees")
# from the runs: the command and what the user sees.
set -euo pipefail
ember="$1"
root="$2"
data="$root/data"
text="$data/shakespeare/input.txt"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
table="${BAD_INPUT_TABLE:-/dev/null}"
limit=30  # seconds per case: every case ends in well under one
cases=0
failed=0

# A failed case: the sweep stops (KEEP_GOING=1: it reports every failed case, then fails).
fail() {
  failed=$((failed + 1))
  [ -n "${KEEP_GOING:-}" ] || exit 1
}

# A command line as the table shows it: the scratch folder and the repository dropped, the ember path
# shortened.
shown() {
  local line="ember"
  for arg in "${@:2}"; do
    arg="${arg//$tmp\//}"
    arg="${arg//$root\//}"
    if [[ "$arg" == *[![:print:]]* ]]; then
      arg="$(printf '%q' "$arg")"
    elif [[ "$arg" == *" "* || -z "$arg" ]]; then
      arg="\"$arg\""
    fi
    line+=" $arg"
  done
  # The small runs' settings, as "…" (the longest first).
  for settings in "${tiny_gpt[*]:-}" "${gpt_run[*]:-}" "${tiny_diffusion[*]:-}" "${diffusion_run[*]:-}" \
    "${mnist[*]:-}" "${sample[*]:-}"; do
    [ -n "$settings" ] && line="${line//" $settings"/ …}"
  done
  echo "$line"
}

# What the user sees: stderr's first line starting with "error: [" (else "[", else the output's last
# line), its paths shortened, at most 150 characters, escaped for a Markdown table.
seen() {
  local line
  line="$(grep -m1 -E '^error: \[' "$tmp/err.txt" || grep -m1 -E '^\[' "$tmp/err.txt" || tail -n1 "$tmp/out.txt")"
  line="${line#error: }"
  line="${line//$tmp\//}"
  line="${line//$root\//}"
  ((${#line} > 150)) && line="${line:0:147}..."
  line="${line//|/\\|}"
  echo "$line"
}

# run COMMAND...: runs it under the time limit and fails the sweep on a crash, an abort, a hang or a
# sanitizer report, whatever its exit code; sets $status.
run() {
  status=0
  timeout -k 5 "$limit" "$@" > "$tmp/out.txt" 2> "$tmp/err.txt" < /dev/null || status=$?
  cases=$((cases + 1))
  if ((status == 124 || status == 137)); then
    echo "HANG (over ${limit}s): $(shown "$@")"
    fail
    return 1
  fi
  if ((status >= 128)); then
    echo "CRASH (signal $((status - 128))): $(shown "$@")"
    cat "$tmp/err.txt"
    fail
    return 1
  fi
  if grep -qE 'terminate called|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:|core dumped' \
    "$tmp/err.txt"; then
    echo "CRASH REPORT: $(shown "$@")"
    cat "$tmp/err.txt"
    fail
    return 1
  fi
}

# fails INPUT PATTERN COMMAND...: the command exits non-zero with an "error: [" line on stderr that
# matches PATTERN (an extended regular expression naming the file or option); INPUT says what was
# wrong, for the table.
fails() {
  local input="$1" pattern="$2"
  shift 2
  run "$@" || return 0
  if ((status == 0)); then
    echo "should fail ($input): $(shown "$@")"
    cat "$tmp/out.txt" "$tmp/err.txt"
    fail
    return 0
  fi
  if ! grep -qE '^error: \[' "$tmp/err.txt"; then
    echo "no \"error: [\" line ($input): $(shown "$@")"
    cat "$tmp/err.txt"
    fail
    return 0
  fi
  if ! grep -qE -- "$pattern" "$tmp/err.txt"; then
    echo "expected /$pattern/ ($input): $(shown "$@"), got:"
    cat "$tmp/err.txt"
    fail
    return 0
  fi
  echo "| \`$(shown "$@")\` | $input | \`\` $(seen) \`\` |" >> "$table"
}

# succeeds INPUT PATTERN COMMAND...: a documented clean success (exit 0) whose output matches PATTERN.
succeeds() {
  local input="$1" pattern="$2"
  shift 2
  run "$@" || return 0
  if ((status != 0)) || ! grep -qE -- "$pattern" "$tmp/out.txt" "$tmp/err.txt"; then
    echo "should succeed with /$pattern/ ($input): $(shown "$@") (exit $status)"
    cat "$tmp/out.txt" "$tmp/err.txt"
    fail
    return 0
  fi
  echo "| \`$(shown "$@")\` | $input | succeeds: \`\` $(seen) \`\` |" >> "$table"
}

echo "| command | input | what the user sees |" > "$table"
echo "|---|---|---|" >> "$table"

# --- the files: small real checkpoints, and the wrong ones ---------------------------------------------
# The tiny runs' settings, without the ones a case sets (an option may be given once).
gpt_run=(--layers 1 --warmup 0 --eval-every 2 --eval-batches 1 --sample 0 --threads 2)
tiny_gpt=("${gpt_run[@]}" --heads 2 --dim 16 --context 16 --batch-size 2 --steps 2)
# Half a run of 4 steps, so that a copy with a NaN weight can resume.
"$ember" train gpt "${gpt_run[@]}" --heads 2 --dim 16 --context 16 --batch-size 2 --steps 4 --stop-after 2 --data "$text" \
  --save "$tmp/gpt.safetensors" > /dev/null
"$ember" train ssm --layers 1 --dim 16 --state 4 --context 16 --batch-size 2 --steps 2 --warmup 0 --eval-every 2 \
  --eval-batches 1 --sample 0 --threads 2 --data "$text" --save "$tmp/ssm.safetensors" > /dev/null
"$ember" train mnist --model mlp --epochs 1 --threads 2 --data "$data/mnist" --save "$tmp/mlp.safetensors" > /dev/null
"$ember" train diffusion --channels 8 --timesteps 10 --steps 2 --batch-size 4 --warmup 0 --threads 2 \
  --data "$data/mnist" --save "$tmp/diffusion.safetensors" > /dev/null
"$ember" quantize "$tmp/gpt.safetensors" "$tmp/gpt.gguf" --type q8_0 > /dev/null
mkdir -p "$tmp/folder" "$tmp/empty-folder" "$tmp/bad-mnist"
: > "$tmp/empty.bin"
printf 'just some notes\n' > "$tmp/notes.txt"
head -c 3000 "$tmp/gpt.safetensors" > "$tmp/truncated.safetensors"
head -c 2000 "$tmp/gpt.gguf" > "$tmp/truncated.gguf"
head -c 300 "$root/tests/data/onnx/mlp/model.onnx" > "$tmp/truncated.onnx"
head -c 1000 "$data/mnist/mnist_5k.csv.gz" > "$tmp/bad-mnist/mnist_5k.csv.gz"
printf 'ab' > "$tmp/two-chars.txt"
python3 - "$tmp" "$root" <<'PY'
import json, struct, sys, zlib
tmp, root = sys.argv[1], sys.argv[2]
sys.path.insert(0, f"{root}/tests")
import gguf_walk

def npy(path, descr, shape, body):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, repr(tuple(shape)))
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    open(path, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + body)

# A PNG (a 1x1 grey image): what a user might pass for a checkpoint.
def chunk(kind, payload):
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))
open(f"{tmp}/image.png", "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
                                     + chunk(b"IDAT", zlib.compress(b"\x00\x80")) + chunk(b"IEND", b""))
# .npy inputs for the MNIST MLP (input: (N, 1, 28, 28) float32): NaN and Inf, int64, another shape,
# a header of huge dims over a few bytes.
values = [0.5] * 784
values[3], values[7] = float("nan"), float("inf")
npy(f"{tmp}/nan.npy", "<f4", (1, 1, 28, 28), struct.pack("<784f", *values))
npy(f"{tmp}/int64.npy", "<i8", (1, 1, 28, 28), bytes(8 * 784))
npy(f"{tmp}/wrong-shape.npy", "<f4", (1, 3, 5), bytes(4 * 15))
npy(f"{tmp}/huge.npy", "<f4", (1 << 40, 1 << 40), bytes(16))

# safetensors: rewrite a checkpoint's header (metadata or a tensor's entry), keeping its data.
def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]
def write_safetensors(path, header, body):
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + body)
header, body = read_safetensors(f"{tmp}/gpt.safetensors")
for name, value in [("heads-zero", "0"), ("dim-huge", "99999999998")]:
    h = json.loads(json.dumps(header))
    h["__metadata__"]["heads" if name == "heads-zero" else "dim"] = value
    write_safetensors(f"{tmp}/gpt-{name}.safetensors", h, body)
# A NaN in the first weight of the GPT and of the MLP.
for model in ["gpt", "mlp"]:
    header, body = read_safetensors(f"{tmp}/{model}.safetensors")
    name = sorted(k for k in header if k.startswith("model.") and header[k]["dtype"] == "F32")[0]
    start = header[name]["data_offsets"][0]
    body = body[:start] + struct.pack("<f", float("nan")) + body[start + 4:]
    write_safetensors(f"{tmp}/{model}-nan.safetensors", header, body)
# A tensor entry of huge dims over 16 bytes of data.
write_safetensors(f"{tmp}/huge.safetensors",
                  {"model.w": {"dtype": "F32", "shape": [1 << 40, 1 << 40], "data_offsets": [0, 16]}}, bytes(16))

# GGUF: the quantized GPT with its first tensor's dims made huge (the data stays as it was).
data = bytearray(open(f"{tmp}/gpt.gguf", "rb").read())
pos = gguf_walk.first_tensor_info(data)
pos += 8 + struct.unpack_from("<Q", data, pos)[0]  # the first tensor's name
n_dims = struct.unpack_from("<I", data, pos)[0]
for d in range(n_dims):
    struct.pack_into("<Q", data, pos + 4 + 8 * d, 1 << 40)
open(f"{tmp}/huge.gguf", "wb").write(bytes(data))

# ONNX: a model whose initializer claims huge dims over no data (protobuf written by hand).
def varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out
def field(number, payload):  # a length-delimited field
    return varint(number << 3 | 2) + varint(len(payload)) + payload
def number(number, value):
    return varint(number << 3) + varint(value)
tensor = number(1, 1 << 40) + number(1, 1 << 40) + number(2, 1) + field(8, b"w") + field(9, bytes(16))
value_info = field(1, b"w")
node = field(1, b"w") + field(2, b"y") + field(4, b"Relu")
graph = field(1, node) + field(2, b"g") + field(5, tensor) + field(12, field(1, b"y"))
model = number(1, 8) + field(7, graph) + field(8, number(2, 17))
open(f"{tmp}/huge.onnx", "wb").write(model)
PY

missing="$tmp/missing.safetensors"

# --- info ---------------------------------------------------------------------------------------------
fails "an unknown option" "\[info\] .*--bogus" "$ember" info --bogus
fails "no command" "\[ember\] A subcommand is required" "$ember"
fails "an unknown command" "\[ember\] unknown command \"talk\"; the commands: info, train, sample, generate, chat" "$ember" talk
fails "an unknown subcommand" "\[train\] unknown command \"bert\"; the commands: mnist, gpt, ssm, diffusion" \
  "$ember" train bert --epochs 1

# --- train mnist ----------------------------------------------------------------------------------------
mnist=(--model mlp --epochs 1 --threads 2)
fails "missing data folder" "\[mnist\] .*$tmp/missing" "$ember" train mnist "${mnist[@]}" --data "$tmp/missing"
fails "empty data folder" "\[mnist\] no MNIST data in .*empty-folder" "$ember" train mnist "${mnist[@]}" \
  --data "$tmp/empty-folder"
fails "truncated data file" "\[mnist\] .*mnist_5k.csv.gz" "$ember" train mnist "${mnist[@]}" --data "$tmp/bad-mnist"
fails "a file for the data folder" "\[mnist\] .*notes.txt" "$ember" train mnist "${mnist[@]}" --data "$tmp/notes.txt"
fails "zero batch size" "\[train mnist\] --batch-size: must be a whole number from 1 to 2147483647, got 0" \
  "$ember" train mnist --batch-size 0
fails "negative epochs" "\[train mnist\] --epochs: must be a whole number from 1 to 2147483647, got -3" \
  "$ember" train mnist --epochs -3
fails "huge batch size" "\[train mnist\] --batch-size: must be a whole number from 1 to 2147483647, got 1000000000000" \
  "$ember" train mnist --batch-size 1000000000000
fails "NaN learning rate" "\[train mnist\] --lr: must be a finite number > 0, got nan" "$ember" train mnist --lr nan
fails "infinite learning rate" "\[train mnist\] --lr: must be a finite number > 0, got inf" \
  "$ember" train mnist --lr inf
fails "a word for a number" "\[train mnist\] --threads: must be a whole number from 0 to 4096, got two" \
  "$ember" train mnist --threads two
fails "missing checkpoint to resume" "\[.*\] .*missing.safetensors" "$ember" train mnist "${mnist[@]}" \
  --data "$data/mnist" --resume "$missing"
fails "another model's checkpoint to resume" "\[train\] .*gpt.safetensors" "$ember" train mnist "${mnist[@]}" \
  --data "$data/mnist" --resume "$tmp/gpt.safetensors"
fails "a PNG to resume" "\[.*\] .*image.png" "$ember" train mnist "${mnist[@]}" --data "$data/mnist" \
  --resume "$tmp/image.png"
fails "a huge learning rate, --detect-anomaly" "\[anomaly\] the (forward|backward) of [a-z_0-9]+ produced (NaN|Inf)" \
  "$ember" train mnist "${mnist[@]}" --data "$data/mnist" --lr 1e30 --optimizer sgd --detect-anomaly
fails "--detect-anomaly with --compile" "\[train mnist\] --detect-anomaly .* --compile" \
  "$ember" train mnist "${mnist[@]}" --data "$data/mnist" --compile --detect-anomaly
fails "--save into a missing folder" "\[.*\] .*$tmp/missing/model.safetensors" "$ember" train mnist "${mnist[@]}" \
  --data "$data/mnist" --stop-after 1 --save "$tmp/missing/model.safetensors"

# --- train gpt / ssm --------------------------------------------------------------------------------------
fails "missing text" "\[.*\] .*missing.txt" "$ember" train gpt "${tiny_gpt[@]}" --data "$tmp/missing.txt"
fails "empty text" "\[train gpt\] .*empty.bin" "$ember" train gpt "${tiny_gpt[@]}" --data "$tmp/empty.bin"
fails "a folder for the text" "\[train gpt\] .*folder" "$ember" train gpt "${tiny_gpt[@]}" --data "$tmp/folder"
fails "a text shorter than the context" "\[TextSplit\] the train split holds 1 tokens, too few for windows of 17" "$ember" train gpt "${tiny_gpt[@]}" \
  --data "$tmp/two-chars.txt"
fails "zero dim" "\[train gpt\] --dim: must be a whole number of at least 1, got 0" "$ember" train gpt --dim 0
fails "heads not dividing dim" "\[GPT\] n_embd 16 is not divisible by n_head 3" "$ember" train gpt "${gpt_run[@]}" --dim 16 --context 16 --batch-size 2 \
  --steps 2 --data "$text" --heads 3
fails "huge dim" "cannot allocate .* bytes" "$ember" train gpt "${gpt_run[@]}" --heads 2 --context 16 --batch-size 2 --steps 2 \
  --data "$text" --dim 1000000000
fails "huge context" "cannot allocate .* bytes" "$ember" train gpt "${gpt_run[@]}" --heads 2 --dim 16 --batch-size 2 --steps 2 \
  --data "$text" --context 1000000000
fails "huge batch size" "cannot allocate" "$ember" train gpt "${gpt_run[@]}" --heads 2 --dim 16 --context 16 --steps 2 \
  --data "$text" --batch-size 1000000000000
fails "huge layers" "cannot allocate" "$ember" train gpt --heads 2 --warmup 0 --sample 0 --threads 2 --dim 16 \
  --context 16 --batch-size 2 --steps 2 --data "$text" --layers 1000000000000
fails "NaN dropout" "\[train gpt\] --dropout: must be a number from 0 to 0.99, got nan" \
  "$ember" train gpt --dropout nan
fails "negative learning rate" "\[train gpt\] --lr: must be a finite number > 0, got -1" "$ember" train gpt --lr -1
fails "another model's checkpoint to resume" "\[.*\] .*mlp.safetensors" "$ember" train gpt "${tiny_gpt[@]}" \
  --data "$text" --resume "$tmp/mlp.safetensors"
fails "a truncated checkpoint to resume" "\[.*\] .*truncated.safetensors" "$ember" train gpt "${tiny_gpt[@]}" \
  --data "$text" --resume "$tmp/truncated.safetensors"
fails "a NaN weight, --detect-anomaly" "\[anomaly\] the (forward|backward) of [a-z_0-9]+ produced (NaN|Inf)" \
  "$ember" train gpt "${gpt_run[@]}" --heads 2 --dim 16 --context 16 --batch-size 2 --steps 4 --data "$text" \
  --resume "$tmp/gpt-nan.safetensors" --detect-anomaly
fails "huge state" "cannot allocate .* bytes" "$ember" train ssm --layers 1 --dim 16 --context 16 --batch-size 2 \
  --steps 2 --warmup 0 --threads 2 --data "$text" --state 1000000000000
fails "zero expand" "\[train ssm\] --expand: must be a whole number of at least 1, got 0" "$ember" train ssm --expand 0

# --- train diffusion / sample diffusion -------------------------------------------------------------------
diffusion_run=(--steps 2 --batch-size 4 --warmup 0 --threads 2)
tiny_diffusion=("${diffusion_run[@]}" --timesteps 10 --channels 8)
fails "missing data folder" "\[mnist\] .*$tmp/missing" "$ember" train diffusion "${tiny_diffusion[@]}" \
  --data "$tmp/missing"
fails "huge time steps" "\[diffusion\] the number of time steps must be in \[1, 100000\], got 100000000000000" "$ember" train diffusion "${diffusion_run[@]}" --channels 8 --data "$data/mnist" \
  --timesteps 100000000000000
fails "huge channels" "cannot allocate .* bytes" "$ember" train diffusion "${diffusion_run[@]}" --timesteps 10 \
  --data "$data/mnist" \
  --channels 1000000000
fails "NaN EMA decay" "\[train diffusion\] --ema: must be a number from 0 to 1, got nan" "$ember" train diffusion \
  --ema nan
fails "drop-class above 1" "\[train diffusion\] --drop-class: must be a number from 0 to 1, got 2" \
  "$ember" train diffusion --drop-class 2
fails "another model's checkpoint to resume" "\[.*\] .*gpt.safetensors" "$ember" train diffusion \
  "${tiny_diffusion[@]}" --data "$data/mnist" --resume "$tmp/gpt.safetensors"
sample=(--steps 2 --per-class 1 --threads 2)
fails "missing checkpoint" "\[.*\] .*missing.safetensors" "$ember" sample diffusion --checkpoint "$missing" "${sample[@]}"
fails "another model's checkpoint" "\[.*\] .*gpt.safetensors" "$ember" sample diffusion --checkpoint "$tmp/gpt.safetensors" \
  "${sample[@]}"
fails "a text file as checkpoint" "\[.*\] .*notes.txt is neither a safetensors checkpoint nor a GGUF file" \
  "$ember" sample diffusion --checkpoint "$tmp/notes.txt" "${sample[@]}"
fails "a GPT as the classifier" "\[.*\] .*gpt.safetensors" "$ember" sample diffusion \
  --checkpoint "$tmp/diffusion.safetensors" "${sample[@]}" --classifier "$tmp/gpt.safetensors" --data "$data/mnist"
fails "NaN guidance" "\[sample diffusion\] --guidance: must be a finite number, got nan" "$ember" sample diffusion \
  --checkpoint "$tmp/diffusion.safetensors" --guidance nan
fails "huge per-class count" "cannot allocate .* bytes|--per-class" "$ember" sample diffusion \
  --checkpoint "$tmp/diffusion.safetensors" --steps 1 --per-class 1000000000000 --batch-size 1000000000000
fails "the largest per-class count" "\[sample diffusion\] --per-class 9223372036854775807 samples of each of 10 classes" \
  "$ember" sample diffusion --checkpoint "$tmp/diffusion.safetensors" --steps 1 --per-class 9223372036854775807
fails "--out into a missing folder" "\[.*\] .*missing/grid.png" "$ember" sample diffusion \
  --checkpoint "$tmp/diffusion.safetensors" "${sample[@]}" --out "$tmp/missing/grid.png"

# --- generate -----------------------------------------------------------------------------------------
fails "missing checkpoint" "\[generate\] cannot open .*missing.safetensors" "$ember" generate --checkpoint "$missing"
fails "a folder as checkpoint" "\[generate\] .*folder is a folder, not a checkpoint file" \
  "$ember" generate --checkpoint "$tmp/folder"
fails "an empty file" "\[generate\] .*empty.bin is neither a safetensors checkpoint nor a GGUF file" \
  "$ember" generate --checkpoint "$tmp/empty.bin"
fails "a PNG as checkpoint" "\[generate\] .*image.png is neither" "$ember" generate --checkpoint "$tmp/image.png"
fails "a truncated checkpoint" "\[.*\] .*truncated.safetensors" "$ember" generate --checkpoint "$tmp/truncated.safetensors"
fails "a truncated GGUF" "\[.*\] .*truncated.gguf" "$ember" generate --checkpoint "$tmp/truncated.gguf"
fails "another model's checkpoint" "\[generate\] checkpoint .*mlp.safetensors is not a language model" \
  "$ember" generate --checkpoint "$tmp/mlp.safetensors"
fails "metadata: zero heads" "\[generate\] checkpoint .*gpt-heads-zero.safetensors: its settings do not make a gpt model" \
  "$ember" generate --checkpoint "$tmp/gpt-heads-zero.safetensors" --tokens 2
fails "metadata: a huge dim" "\[generate\] checkpoint .*gpt-dim-huge.safetensors: its settings do not make a gpt model: .*cannot allocate" \
  "$ember" generate --checkpoint "$tmp/gpt-dim-huge.safetensors" --tokens 2
fails "a NaN weight" "\[generate\] checkpoint .*gpt-nan.safetensors: tensor .* holds 1 NaN" \
  "$ember" generate --checkpoint "$tmp/gpt-nan.safetensors" --tokens 2
fails "a huge tensor in the header" "\[.*\] .*huge.safetensors" "$ember" generate --checkpoint "$tmp/huge.safetensors"
fails "a GGUF tensor of huge dims" "\[.*\] .*huge.gguf" "$ember" generate --checkpoint "$tmp/huge.gguf"
fails "NaN temperature" "\[generate\] --temperature: must be a finite number >= 0, got nan" \
  "$ember" generate --checkpoint "$tmp/gpt.safetensors" --temperature nan
fails "top-p of 0" "\[generate\] --top-p: must be a number in \(0, 1\], got 0" \
  "$ember" generate --checkpoint "$tmp/gpt.safetensors" --top-p 0
fails "a prompt outside the vocabulary" "\[generate\] --prompt cannot be encoded" \
  "$ember" generate --checkpoint "$tmp/gpt.safetensors" --prompt $'\x01\x02' --tokens 2
fails "a prompt longer than the context" "\[generate\] the prompt has .* characters, more than the model's context" \
  "$ember" generate --checkpoint "$tmp/gpt.safetensors" --prompt "$(printf 'a%.0s' {1..100})" --tokens 2
succeeds "zero tokens" "ROMEO" "$ember" generate --checkpoint "$tmp/gpt.safetensors" --prompt ROMEO --tokens 0
succeeds "an SSM checkpoint" "tokens in" "$ember" generate --checkpoint "$tmp/ssm.safetensors" --tokens 3 --threads 2

# --- eval -----------------------------------------------------------------------------------------------
fails "missing checkpoint" "\[eval gpt\] cannot open .*missing.safetensors" "$ember" eval gpt --checkpoint "$missing"
fails "a text file as checkpoint" "\[eval gpt\] .*notes.txt is neither" "$ember" eval gpt --checkpoint "$tmp/notes.txt"
fails "missing text" "\[eval gpt\] cannot read .*missing.txt" "$ember" eval gpt --checkpoint "$tmp/gpt.safetensors" \
  --data "$tmp/missing.txt"
fails "a NaN weight" "\[eval gpt\] checkpoint .*gpt-nan.safetensors: tensor .* holds 1 NaN" \
  "$ember" eval gpt --checkpoint "$tmp/gpt-nan.safetensors" --data "$text"
fails "huge batch size" "cannot allocate" "$ember" eval gpt --checkpoint "$tmp/gpt.safetensors" --data "$text" \
  --batch-size 1000000000000
fails "a batch size whose token count wraps around" "\[TextSplit\] a batch of 4611686018427387904 windows of 16 tokens" \
  "$ember" eval gpt --checkpoint "$tmp/gpt.safetensors" --data "$text" --batch-size 4611686018427387904
fails "zero batches" "\[eval gpt\] --batches: must be a whole number of at least 1, got 0" \
  "$ember" eval gpt --checkpoint "$tmp/gpt.safetensors" --batches 0
fails "another model's checkpoint" "\[eval mnist\] checkpoint .*gpt.safetensors is not an MNIST checkpoint" \
  "$ember" eval mnist --checkpoint "$tmp/gpt.safetensors" --data "$data/mnist"
fails "a NaN weight" "\[eval mnist\] checkpoint .*mlp-nan.safetensors: tensor .* holds 1 NaN" \
  "$ember" eval mnist --checkpoint "$tmp/mlp-nan.safetensors" --data "$data/mnist"
fails "missing data folder" "\[mnist\] .*missing" "$ember" eval mnist --checkpoint "$tmp/mlp.safetensors" \
  --data "$tmp/missing"

# --- quantize -------------------------------------------------------------------------------------------
fails "missing input" "\[quantize\] cannot open .*missing.safetensors" "$ember" quantize "$missing" "$tmp/x.gguf" \
  --type q8_0
fails "an empty folder as input" "\[tokenizer\] vocab file .*empty-folder/vocab.txt' does not exist" "$ember" quantize "$tmp/empty-folder" "$tmp/x.gguf" \
  --type q8_0
fails "a PNG as input" "\[quantize\] .*image.png is neither" "$ember" quantize "$tmp/image.png" "$tmp/x.gguf" --type q8_0
fails "output into a missing folder" "\[.*\] .*missing/x.gguf" "$ember" quantize "$tmp/gpt.safetensors" \
  "$tmp/missing/x.gguf" --type q8_0
fails "a folder as output" "\[.*\] .*folder" "$ember" quantize "$tmp/gpt.safetensors" "$tmp/folder" --type q8_0
fails "the input as output" "\[quantize\] the output .*gpt.safetensors" "$ember" quantize "$tmp/gpt.safetensors" \
  "$tmp/gpt.safetensors" --type q8_0
fails "a NaN weight" "\[quantize\] checkpoint .*gpt-nan.safetensors: tensor .* holds 1 NaN" \
  "$ember" quantize "$tmp/gpt-nan.safetensors" "$tmp/x.gguf" --type q8_0
fails "a diffusion checkpoint" "\[quantize\] .*diffusion.safetensors" "$ember" quantize "$tmp/diffusion.safetensors" \
  "$tmp/x.gguf" --type q8_0

# --- embed ----------------------------------------------------------------------------------------------
fails "missing model" "\[SentenceEncoder\] the model folder .*missing' does not exist" "$ember" embed --model "$tmp/missing" "a text"
fails "an empty folder as model" "\[tokenizer\] vocab file .*empty-folder/vocab.txt' does not exist" "$ember" embed --model "$tmp/empty-folder" "a text"
fails "a safetensors file as model" "\[embed\] .*gpt.safetensors is not a sentence-transformers folder" \
  "$ember" embed --model "$tmp/gpt.safetensors" "a text"
fails "a GPT's GGUF as model" "\[embed\] .*gpt.gguf is not a sentence-transformers folder" \
  "$ember" embed --model "$tmp/gpt.gguf" "a text"
fails "no text" "\[embed\] texts is required" "$ember" embed
if [ -f "$data/minilm/model.safetensors" ]; then
  succeeds "an empty text" "cosine similarity" "$ember" embed --model "$data/minilm" --threads 2 ""
fi

# --- serve ----------------------------------------------------------------------------------------------
fails "missing model" "\[Llama\] .*missing.gguf does not exist" "$ember" serve --model "$tmp/missing.gguf"
fails "a safetensors file as model" "\[gguf::load\] .*gpt.safetensors: .* not a GGUF file" \
  "$ember" serve --model "$tmp/gpt.safetensors"
fails "a port out of range" "\[serve\] --port: must be a whole number from 0 to 65535, got 70000" \
  "$ember" serve --port 70000
fails "no slots" "\[serve\] --parallel: must be a whole number from 1 to 256, got 0" "$ember" serve --parallel 0
fails "a tiny body limit" "\[serve\] --max-body: must be a whole number from 1024" "$ember" serve --max-body 10
if [ -f "$data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
  smollm2=(--model "$data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" --threads 2)
  fails "a context longer than the model's" "\[serve\] the context must be in \[2, 8192\] .*got 100000" \
    "$ember" serve "${smollm2[@]}" --context 100000 --port 0
  fails "a missing embedding model" "\[SentenceEncoder\] the model folder .*missing' does not exist" \
    "$ember" serve "${smollm2[@]}" --embedding-model "$tmp/missing" --port 0
  fails "an address not of this machine" "\[serve\] cannot listen on 203.0.113.7:8080" \
    "$ember" serve "${smollm2[@]}" --host 203.0.113.7 --port 8080
fi

# --- onnx -----------------------------------------------------------------------------------------------
mlp="$root/tests/data/onnx/mlp/model.onnx"
fails "missing model" "\[onnx\] .*missing.onnx" "$ember" onnx info "$tmp/missing.onnx"
fails "a folder as model" "\[onnx\] .*folder is a folder, not an ONNX model file" "$ember" onnx info "$tmp/folder"
fails "an empty file" "\[onnx\] .*empty.bin is empty" "$ember" onnx info "$tmp/empty.bin"
fails "a truncated model" "\[onnx\] .*truncated.onnx" "$ember" onnx info "$tmp/truncated.onnx"
fails "a safetensors file as model" "\[onnx\] .*gpt.safetensors" "$ember" onnx info "$tmp/gpt.safetensors"
fails "an initializer of huge dims" "\[onnx\] .*huge.onnx" "$ember" onnx run "$tmp/huge.onnx" -o "$tmp/out"
fails "a PNG as model" "\[onnx\] .*image.png" "$ember" onnx run "$tmp/image.png" -o "$tmp/out"
fails "missing input file" "\[load_npy\] .*missing.npy" "$ember" onnx run "$mlp" --input "$tmp/missing.npy" -o "$tmp/out"
fails "a safetensors file as .npy" "\[load_npy\] .*gpt.safetensors" "$ember" onnx run "$mlp" \
  --input "$tmp/gpt.safetensors" -o "$tmp/out"
fails "an .npy of huge dims" "\[load_npy\] .*huge.npy" "$ember" onnx run "$mlp" --input "$tmp/huge.npy" -o "$tmp/out"
fails "an int64 input" "\[onnx\] .*input.*int64|float32" "$ember" onnx run "$mlp" --input "$tmp/int64.npy" -o "$tmp/out"
fails "an input of another shape" "\[onnx\] .*input" "$ember" onnx run "$mlp" --input "$tmp/wrong-shape.npy" -o "$tmp/out"
fails "an input name the model lacks" "\[onnx\] .*has no input \"image\" \(it takes input\)" "$ember" onnx run "$mlp" --input "image=$tmp/nan.npy" \
  -o "$tmp/out"
fails "a file as the output folder" "\[onnx run\] .*notes.txt" "$ember" onnx run "$mlp" --input "$tmp/nan.npy" \
  -o "$tmp/notes.txt"
fails "more threads than the pool takes" "\[onnx run\] --threads: must be a whole number from 0 to 4096, got 100000" \
  "$ember" onnx run "$mlp" --threads 100000
fails "NaN --bench-seconds" "\[onnx run\] --bench-seconds: must be a finite number >= 0, got nan" \
  "$ember" onnx run "$mlp" --bench --bench-seconds nan
succeeds "NaN and Inf in the input" "warning: input \"input\" \(.*nan.npy\) holds 1 NaN and 1 infinite values" \
  "$ember" onnx run "$mlp" --input "$tmp/nan.npy" -o "$tmp/out"
fails "NaN and Inf in the input, --detect-anomaly" "\[anomaly\] the forward of [a-z_0-9]+ produced (NaN|Inf)" \
  "$ember" onnx run "$mlp" --input "$tmp/nan.npy" -o "$tmp/out" --detect-anomaly

# --- bench, roofline, nas ---------------------------------------------------------------------------------
fails "an invalid regular expression" "\[bench\] .*\(" "$ember" bench --filter "(" --quick
fails "a filter matching nothing" "\[bench\] .*nothing-matches" "$ember" bench --filter nothing-matches --quick
fails "missing MNIST folder" "\[mnist\] no MNIST data in .*missing" "$ember" bench --filter train_mnist_epoch --quick --data "$tmp/missing"
fails "zero repeats" "\[bench\] --repeats: must be a whole number from 1 to 2147483647, got 0" "$ember" bench --repeats 0
fails "NaN latency" "\[bench\] --latency: must be a finite number >= 0, got nan" "$ember" bench --latency nan
fails "missing trace" "\[roofline\] .*missing.json" "$ember" roofline --from-trace "$tmp/missing.json"
fails "a PNG as trace" "\[roofline\] .*image.png" "$ember" roofline --from-trace "$tmp/image.png"
fails "an empty bench file" "\[roofline\] .*empty.bin" "$ember" roofline --from-bench "$tmp/empty.bin"
fails "a population of 1" "\[nas mnist\] --population: must be a whole number from 2 to 2147483647, got 1" \
  "$ember" nas mnist --population 1
fails "NaN budget" "\[nas mnist\] --budget-minutes: must be a finite number >= 0, got nan" \
  "$ember" nas mnist --budget-minutes nan
fails "crossover above 1" "\[nas mnist\] --crossover: must be a number from 0 to 1, got 1.5" \
  "$ember" nas mnist --crossover 1.5
fails "more validation images than training images" "\[nas\] .*validation|\[nas mnist\] .*validation" \
  "$ember" nas mnist --validation 1000000 --threads 2 --data "$data/mnist"
fails "missing data folder" "\[mnist\] .*missing" "$ember" nas mnist --threads 2 --data "$tmp/missing"

((failed == 0)) || { echo "bad input: $failed of $cases cases failed"; exit 1; }
echo "bad input: $cases cases ok in ${SECONDS}s"
