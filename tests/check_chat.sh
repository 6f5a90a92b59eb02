#!/usr/bin/env bash
# `ember chat`, `ember generate --model` and `ember bench llm` end to end on SmolLM2-135M-Instruct
# (data/smollm2, which scripts/setup fetches): one greedy reply, a conversation read from stdin with
# /reset and /exit, a raw completion, the speed report as JSON, and bad input as clear errors.
set -euo pipefail
ember="$1"
model="$2/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
[ -f "$model" ] || { echo "$model is missing: run scripts/setup"; exit 1; }

expect_error() {  # expect_error PATTERN COMMAND...: the command fails and stderr matches PATTERN
  local pattern="$1"
  shift
  if "$@" > /dev/null 2> "$tmp/err.txt" < /dev/null; then echo "should fail: $*"; exit 1; fi
  grep -q -- "$pattern" "$tmp/err.txt" || { echo "expected \"$pattern\" from $*, got:"; cat "$tmp/err.txt"; exit 1; }
}

# One reply: greedy, with a system message (the reference chat of tests/data/llama/model.json).
"$ember" chat --model "$model" --system "You are a concise assistant. Answer in one sentence." \
  --prompt "Why is the sky blue?" --temperature 0 --repeat-penalty 1 --max-tokens 12 --threads 2 \
  > "$tmp/reply.txt" 2> "$tmp/rate.txt"
# Its exact words depend on the build's float rounding (transformers' float reply starts "The sky is
# blue because of a process called Rayleigh"; the 4-bit model's second and third tokens are
# near-ties): the test asks for a reply about the sky, and the same reply from stdin below.
grep -q "^The .*blue" "$tmp/reply.txt" || { echo "chat --prompt:"; cat "$tmp/reply.txt"; exit 1; }
grep -q "^\[31 prompt tokens, 12 tokens in .* tokens/s; cut at --max-tokens\]" "$tmp/rate.txt" ||
  { echo "chat rate:"; cat "$tmp/rate.txt"; exit 1; }

# A conversation from stdin: a reply per line, /reset between, /exit ends it before the last line.
printf 'Why is the sky blue?\n/reset\n\nWhy is the sky blue?\n/exit\nnever read\n' |
  "$ember" chat --model "$model" --system "You are a concise assistant. Answer in one sentence." \
    --temperature 0 --repeat-penalty 1 --max-tokens 12 --threads 2 > "$tmp/conversation.txt" 2> "$tmp/rates.txt"
[ "$(wc -l < "$tmp/conversation.txt")" -eq 2 ] && [ "$(sed -n 1p "$tmp/conversation.txt")" = "$(cat "$tmp/reply.txt")" ] &&
  [ "$(sed -n 2p "$tmp/conversation.txt")" = "$(cat "$tmp/reply.txt")" ] ||
  { echo "chat from stdin:"; cat "$tmp/conversation.txt"; exit 1; }
[ "$(grep -c "prompt tokens" "$tmp/rates.txt")" -eq 2 ]

# Raw completion: the prompt, then the greedy continuation (transformers' float one starts " Paris.",
# by a margin of 2.5 logits over the runner-up).
"$ember" generate --model "$model" --prompt "The capital of France is" --tokens 3 --temperature 0 --threads 2 \
  > "$tmp/completion.txt" 2> "$tmp/rate.txt"
[ "$(head -c 30 "$tmp/completion.txt")" = "The capital of France is Paris" ] ||
  { echo "generate --model:"; cat "$tmp/completion.txt"; exit 1; }
grep -q "5 prompt tokens, 3 tokens in" "$tmp/rate.txt"

# The speed report.
"$ember" bench llm --model "$model" --pp 16 --tg 4 --repeats 1 --threads 2 --json > "$tmp/bench.json"
python3 - "$tmp/bench.json" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read())
assert r["pp"] == 16 and r["tg"] == 4 and r["pp_tokens_per_s"] > 0 and r["tg_tokens_per_s"] > 0, r
assert r["load_ms"] < 5000, r
PY
"$ember" bench llm --model "$model" --pp 4 --tg 3 --repeats 1 --threads 2 --batch 3 > "$tmp/batch.txt"
grep -q "tg3 .* tokens/s (3 sequences together, .* each)" "$tmp/batch.txt" || { cat "$tmp/batch.txt"; exit 1; }
expect_error "\[bench llm\] .*--batch" "$ember" bench llm --model "$model" --batch 0

# Bad input.
expect_error "\[Llama\] $tmp/missing.gguf does not exist (scripts/setup downloads" \
  "$ember" chat --model "$tmp/missing.gguf" --prompt hi
head -c 1000 "$model" > "$tmp/truncated.gguf"
expect_error "\[gguf::load\] $tmp/truncated.gguf: .*truncated" "$ember" chat --model "$tmp/truncated.gguf" --prompt hi
expect_error "\[Llama\] .*mixed.gguf: general.architecture is \"ember-test\"; ember runs the llama architecture only" \
  "$ember" generate --model "$(dirname "$0")/data/gguf/mixed.gguf" --prompt hi
expect_error "\[chat\] unknown chat template \"llama2\"; ember knows: chatml" \
  "$ember" chat --model "$model" --chat-template llama2 --prompt hi
expect_error "\[chat\] the conversation (.* tokens) no longer fits the context of 16" \
  "$ember" chat --model "$model" --context 16 --prompt "Why is the sky blue?"
expect_error "\[generate\] give either --checkpoint .* or --model" "$ember" generate --prompt hi
expect_error "\[generate\] the prompt (5 tokens) and 8192 new tokens do not fit the context of 8192" \
  "$ember" generate --model "$model" --prompt "The capital of France is" --tokens 8192
expect_error "\[chat\] --context: .*" "$ember" chat --model "$model" --context 0 --prompt hi
echo "chat, generate --model and bench llm: ok"
