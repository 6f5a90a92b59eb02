#!/usr/bin/env bash
# `ember info --json` prints one JSON object with every documented field.
set -euo pipefail
out=$("$1" info --json)
for key in version compiler simd_target simd_compiled gemm_kernel num_threads openmp build_type options cuda blas devices \
    built runtime architectures status gpus; do
  grep -q "\"$key\"" <<<"$out" || { echo "missing $key in: $out"; exit 1; }
done
"$1" info | grep -q "SIMD target" || { echo "plain info lacks the SIMD target"; exit 1; }
# EMBER_MAX_CPU_ISA caps the dispatched target (and with it the GEMM tile); a bad value is named.
target=$(EMBER_MAX_CPU_ISA=SSE4 "$1" info --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["simd_target"])')
[ "$target" = "SSE4" ] || { echo "EMBER_MAX_CPU_ISA=SSE4 gave target $target"; exit 1; }
EMBER_MAX_CPU_ISA=bogus "$1" info --json 2>&1 >/dev/null | grep -q "EMBER_MAX_CPU_ISA=bogus is not one of" ||
  { echo "a bad EMBER_MAX_CPU_ISA is not reported"; exit 1; }
if "$1" bogus 2>/dev/null; then echo "an unknown command must fail"; exit 1; fi
echo "ok"
