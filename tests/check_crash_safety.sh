#!/usr/bin/env bash
# Crash safety of the files ember writes (docs/reliability.md, "Crash safety"):
# 1. kill_trials.py kills `ember train mnist --save`, `ember train gpt --save`, `ember quantize`,
#    `ember onnx run` and the profiler's trace with SIGKILL at random moments (half of them aimed at
#    the saves) and checks that each file is the previous one or a complete one, bit-identical to
#    an uninterrupted run's, loadable, with no temporary file left once a later write has run.
#    EMBER_KILL_TRIALS sets the trials per writer (N, or name=N,name=N); the default keeps CI short.
# 2. A full disk and a read-only folder: each writer fails with "[op] ... '<path>' ...: <reason>",
#    exits non-zero, leaves the previous file byte-identical and no temporary file. Both need a
#    private mount namespace (a small tmpfs, then remounted read-only); without one, the disk is
#    "full" by RLIMIT_FSIZE (EFBIG) and the folder read-only by permissions (as another user when
#    root); where neither works the check is skipped with a message.
set -euo pipefail

# --- inside a private mount namespace: $0 --inside EMBER DATA_DIR TMP -------------------------------
if [ "${1:-}" = "--inside" ]; then
  ember="$2"
  data="$3"
  tmp="$4"
  mnt="$tmp/mnt"
  mkdir -p "$mnt"
  # Room for the previous files and a little more (tmpfs counts whole pages).
  size=$(( $(cat "$tmp/prev/"* | wc -c) + 1048576 ))
  mount -t tmpfs -o "size=$size" tmpfs "$mnt"
  cp "$tmp/prev/ckpt.safetensors" "$tmp/prev/model.gguf" "$tmp/prev/roofline.svg" "$mnt/"
  mkdir "$mnt/out"
  cp "$tmp/prev/logits.npy" "$mnt/out/"
  # writer FILE REASON OP COMMAND...: fails with "[OP] ... '<path>' ...: REASON", leaving the
  # previous file byte-identical and no temporary file.
  writer() {
    local file="$1" reason="$2" op="$3"
    shift 3
    local path="$mnt/$file"
    if "$@" > "$tmp/out.txt" 2> "$tmp/err.txt"; then
      echo "should fail ($reason): $*"; exit 1
    fi
    grep -qF "[$op] " "$tmp/err.txt" && grep -qF "'$path'" "$tmp/err.txt" && grep -qF "$reason" "$tmp/err.txt" ||
      { echo "expected [$op], '$path' and \"$reason\" from $*, got:"; cat "$tmp/err.txt"; exit 1; }
    cmp -s "$path" "$tmp/prev/$(basename "$file")" || { echo "$path changed after: $*"; exit 1; }
    local left
    left=$(find "$(dirname "$path")" -name ".$(basename "$path").tmp.*")
    [ -z "$left" ] || { echo "temporary files left by $*: $left"; exit 1; }
    echo "  $(head -n 1 "$tmp/err.txt")"
  }
  fill() {  # fill FREE_BYTES: fills the tmpfs but for about FREE_BYTES
    rm -f "$mnt/filler"
    dd if=/dev/zero of="$mnt/filler" bs=65536 2> /dev/null || true
    truncate -s "-$1" "$mnt/filler"
  }
  # Each writer: the MNIST checkpoint, the GGUF file of `ember quantize`, the .npy output of
  # `ember onnx run`, the SVG of `ember roofline` (the profiler's trace is written as they are).
  big_writers() {  # big_writers REASON
    writer ckpt.safetensors "$1" save "$ember" train mnist --model mlp --epochs 1 --threads 2 --seed 7 \
      --data "$data" --save "$mnt/ckpt.safetensors"
    writer model.gguf "$1" gguf::save "$ember" quantize "$tmp/prev/ckpt.safetensors" "$mnt/model.gguf" --type int8
  }
  small_writers() {  # small_writers REASON
    writer out/logits.npy "$1" save_npy "$ember" onnx run "$tmp/model.onnx" --input "input=$tmp/input.npy" \
      --output-dir "$mnt/out"
    writer roofline.svg "$1" roofline "$ember" roofline --threads 1 --svg "$mnt/roofline.svg"
  }
  echo "a full disk (a tmpfs of $size bytes):"
  fill 16384  # the checkpoint and the GGUF file fail midway
  big_writers "No space left on device"
  fill 0  # the small files fail at their first page
  small_writers "No space left on device"
  rm "$mnt/filler"
  echo "a read-only folder (the tmpfs remounted read-only):"
  mount -o remount,ro "$mnt"
  big_writers "Read-only file system"
  small_writers "Read-only file system"
  exit 0
fi

ember="$1"
root="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
here="$(cd "$(dirname "$0")" && pwd)"

# --- kills -------------------------------------------------------------------------------------------
python3 "$here/kill_trials.py" "$ember" "$root" "$tmp/kill" --trials "${EMBER_KILL_TRIALS:-train_mnist=10,train_gpt=10,quantize=10,onnx_run=10,profile_trace=6}"
export EMBER_PEAKS_CACHE="$tmp/kill/peaks.json"  # measured once by the trace's trials

# --- a full disk and a read-only folder ----------------------------------------------------------------
mkdir "$tmp/prev"
data="$root/data/mnist"
cases="$root/tests/data/onnx/mnist_cnn"
cp "$cases/model.onnx" "$cases/input.npy" "$tmp/"
"$ember" train mnist --model mlp --epochs 1 --threads 2 --seed 3 --data "$data" \
  --save "$tmp/prev/ckpt.safetensors" > /dev/null
"$ember" quantize "$tmp/prev/ckpt.safetensors" "$tmp/prev/model.gguf" --type q8_0 > /dev/null
"$ember" onnx run "$tmp/model.onnx" --input "input=$cases/finetune_x.npy" --output-dir "$tmp/prev" > /dev/null
"$ember" roofline --threads 1 --svg "$tmp/prev/roofline.svg" > /dev/null

if unshare -m true 2> /dev/null; then
  unshare -m "$0" --inside "$ember" "$data" "$tmp"
elif unshare --user --map-root-user --mount true 2> /dev/null; then
  unshare --user --map-root-user --mount "$0" --inside "$ember" "$data" "$tmp"
else
  # No mount namespace: RLIMIT_FSIZE for the full disk (EFBIG, "File too large"), permissions for
  # the read-only folder (root ignores them, so as the user nobody where root).
  echo "no private mount namespace here: a file size limit stands for the full disk"
  mkdir "$tmp/dir"
  cp "$tmp/prev/ckpt.safetensors" "$tmp/dir/"
  if (trap '' XFSZ; ulimit -f 64; "$ember" train mnist --model mlp --epochs 1 --threads 2 --seed 7 --data "$data" \
      --save "$tmp/dir/ckpt.safetensors") > /dev/null 2> "$tmp/err.txt"; then
    echo "a save past the file size limit must fail"; exit 1
  fi
  grep -qF "[save] writing '$tmp/dir/ckpt.safetensors' failed" "$tmp/err.txt" && grep -qF "File too large" "$tmp/err.txt" ||
    { cat "$tmp/err.txt"; exit 1; }
  cmp "$tmp/dir/ckpt.safetensors" "$tmp/prev/ckpt.safetensors"
  [ "$(ls -A "$tmp/dir")" = "ckpt.safetensors" ] || { ls -A "$tmp/dir"; exit 1; }
  echo "  $(head -n 1 "$tmp/err.txt")"
  as=()
  if [ "$(id -u)" -eq 0 ]; then
    if command -v setpriv > /dev/null && setpriv --reuid=65534 --regid=65534 --clear-groups true 2> /dev/null; then
      as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
      chmod 755 "$tmp" "$tmp/dir"
    else
      echo "SKIPPED: the read-only folder (root, with no mount namespace and no setpriv)"
      exit 0
    fi
  fi
  chmod 555 "$tmp/dir"
  if "${as[@]}" "$ember" quantize "$tmp/prev/ckpt.safetensors" "$tmp/dir/model.gguf" --type int8 \
      > /dev/null 2> "$tmp/err.txt"; then
    echo "a save into a folder we may not write must fail"; exit 1
  fi
  chmod 755 "$tmp/dir"
  grep -qF "[gguf::save] cannot write '$tmp/dir/model.gguf'" "$tmp/err.txt" && grep -qF "Permission denied" "$tmp/err.txt" ||
    { cat "$tmp/err.txt"; exit 1; }
  [ "$(ls -A "$tmp/dir")" = "ckpt.safetensors" ] || { ls -A "$tmp/dir"; exit 1; }
  echo "  $(head -n 1 "$tmp/err.txt")"
fi
echo "crash safety: ok"
