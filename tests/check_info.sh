#!/usr/bin/env bash
# `ember info --json` prints one JSON object with every documented field.
set -euo pipefail
out=$("$1" info --json)
for key in version compiler simd_target simd_compiled gemm_kernel num_threads num_threads_source build_type options cuda blas devices \
    built runtime architectures status gpus; do
  grep -q "\"$key\"" <<<"$out" || { echo "missing $key in: $out"; exit 1; }
done
"$1" info | grep -q "SIMD target" || { echo "plain info lacks the SIMD target"; exit 1; }
# EMBER_MAX_CPU_ISA caps the dispatched target (and with it the GEMM tile); a bad value is named.
# (Only where SSE4 is compiled in: the sanitizer builds compile one target.)
compiled=$("$1" info --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["simd_compiled"])')
if [[ ",$compiled," == *",SSE4,"* ]]; then
  target=$(EMBER_MAX_CPU_ISA=SSE4 "$1" info --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["simd_target"])')
  [ "$target" = "SSE4" ] || { echo "EMBER_MAX_CPU_ISA=SSE4 gave target $target"; exit 1; }
fi
EMBER_MAX_CPU_ISA=bogus "$1" info --json 2>&1 >/dev/null | grep -q "EMBER_MAX_CPU_ISA=bogus is not one of" ||
  { echo "a bad EMBER_MAX_CPU_ISA is not reported"; exit 1; }
# The thread count comes from EMBER_NUM_THREADS before OMP_NUM_THREADS; a bad value is named.
threads=$(EMBER_NUM_THREADS=3 OMP_NUM_THREADS=5 "$1" info --json | python3 -c 'import json, sys; j = json.load(sys.stdin); print(j["num_threads"], j["num_threads_source"])')
[ "$threads" = "3 EMBER_NUM_THREADS" ] || { echo "EMBER_NUM_THREADS=3 gave $threads"; exit 1; }
threads=$(env -u EMBER_NUM_THREADS OMP_NUM_THREADS=5,2 "$1" info --json | python3 -c 'import json, sys; j = json.load(sys.stdin); print(j["num_threads"], j["num_threads_source"])')
[ "$threads" = "5 OMP_NUM_THREADS" ] || { echo "OMP_NUM_THREADS=5,2 gave $threads"; exit 1; }
if message=$(EMBER_NUM_THREADS=two "$1" info --json 2>&1 >/dev/null); then echo "EMBER_NUM_THREADS=two must fail"; exit 1; fi
grep -q "EMBER_NUM_THREADS=two is not a thread count" <<<"$message" || { echo "a bad EMBER_NUM_THREADS: $message"; exit 1; }
if "$1" bogus 2>/dev/null; then echo "an unknown command must fail"; exit 1; fi
# --help says only what exists: no graph compiler yet.
if "$1" --help | grep -qi "graph compiler"; then echo "--help claims a graph compiler"; exit 1; fi
# ember info --ops lists every op of the primitive table with its backends.
ops=$("$1" info --ops)
for op in add conv2d conv2d_weight_grad matmul adam_step view cross_entropy; do
  grep -qE "^$op " <<<"$ops" || { echo "info --ops lacks $op"; exit 1; }
done
# bfloat16 too on a CPU with AVX512_BF16; the CUDA column through cuDNN in a build with its header.
grep -qE "^conv2d +primitive +float32,float64(,bfloat16)? +(not implemented|not built|float32,float64,bfloat16) +yes +yes" <<<"$ops" ||
  { echo "conv2d's row is wrong:"; grep "^conv2d " <<<"$ops"; exit 1; }
grep -qE "^mean +composite" <<<"$ops" || { echo "mean should be a composite"; exit 1; }
"$1" info --ops --json | python3 -c '
import json, sys
ops = {o["name"]: o for o in json.load(sys.stdin)["ops"]}
assert ops["add"]["cpu"] and ops["add"]["backward"] and ops["add"]["cost_rule"], ops["add"]
assert ops["view"]["sort"] == "view" and not ops["view"]["cost_rule"], ops["view"]
assert all(o["cpu"] for o in ops.values() if o["sort"] == "primitive"), "a primitive without a CPU kernel"
'
echo "ok"
