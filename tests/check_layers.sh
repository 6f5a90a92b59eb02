#!/usr/bin/env bash
# The layers are enforced by the build: a file of a layer that includes a header of a layer above
# it does not compile. Compiles small probes with each layer's include path (build/layers/<layer>,
# made by cmake/EmberLayers.cmake) and expects the upward includes to fail and the allowed ones to
# pass.
set -euo pipefail
compiler="$1"
layers="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# probe <layer> <header> <pass|fail>
probe() {
  local layer="$1" header="$2" expect="$3"
  printf '#include "%s"\nint main() { return 0; }\n' "$header" > "$tmp/probe.cpp"
  if "$compiler" -std=c++20 -fsyntax-only -I"$layers/$layer/src" -I"$layers/$layer/include" "$tmp/probe.cpp" \
      2> "$tmp/err.txt"; then
    [ "$expect" = pass ] || { echo "layer $layer can include $header, which is above it"; exit 1; }
  else
    [ "$expect" = fail ] || { echo "layer $layer cannot include $header:"; cat "$tmp/err.txt"; exit 1; }
    grep -q "No such file" "$tmp/err.txt" || { echo "unexpected error for $layer / $header:"; cat "$tmp/err.txt"; exit 1; }
  fi
}

probe base ember/primitives.h pass
probe base ember/tensor.h fail
probe kernels base/kernel.h pass
probe kernels ember/tensor.h fail
probe kernels ops/dispatch.h fail
probe core ember/tensor.h pass
probe core ember/ops.h fail
probe core cuda/device_allocator.h fail
probe core profiler/op_scope.h fail
probe ops ops/dispatch.h pass
probe ops autograd/function.h pass
probe ops autograd/engine.h fail
probe ops ember/nn/functional.h fail
probe ops profiler/op_scope.h fail
probe autograd ops/dispatch.h pass
probe autograd ember/nn.h fail
probe profiler ops/cost.h pass
probe profiler ember/optim.h fail
probe optim ember/nn.h fail
echo "ok: upward includes fail to compile"
