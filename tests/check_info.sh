#!/usr/bin/env bash
# `ember info --json` prints one JSON object with every documented field.
set -euo pipefail
out=$("$1" info --json)
for key in version compiler simd_target simd_compiled gemm_kernel num_threads openmp build_type options cuda blas devices \
    built runtime architectures status gpus; do
  grep -q "\"$key\"" <<<"$out" || { echo "missing $key in: $out"; exit 1; }
done
"$1" info | grep -q "SIMD target" || { echo "plain info lacks the SIMD target"; exit 1; }
if "$1" bogus 2>/dev/null; then echo "an unknown command must fail"; exit 1; fi
echo "ok"
