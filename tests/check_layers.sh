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
probe core profiler/range.h fail
probe ops ops/dispatch.h pass
probe ops autograd/function.h pass
probe ops autograd/engine.h fail
probe ops ember/nn/functional.h fail
probe ops profiler/range.h fail
probe autograd ops/dispatch.h pass
probe autograd ember/nn.h fail
probe profiler ops/cost.h pass
probe profiler ember/optim.h fail
probe optim ember/nn.h fail
# Every public header compiles on its own in the lowest layer that owns it: it includes nothing
# from a layer above (its own layer's view holds exactly what it may include).
declare -A done
count=0
for layer in base kernels core cuda ops autograd profiler nn optim data io models; do
  while IFS= read -r header; do
    name="${header#"$layers/$layer/include/"}"
    [ -n "${done[$name]:-}" ] && continue
    done[$name]=1
    printf '#include "%s"\n' "$name" > "$tmp/header.cpp"
    "$compiler" -std=c++20 -fsyntax-only -I"$layers/$layer/src" -I"$layers/$layer/include" "$tmp/header.cpp" \
      2> "$tmp/err.txt" || { echo "public header $name does not compile on its own in layer $layer:"; cat "$tmp/err.txt"; exit 1; }
    count=$((count + 1))
  done < <(find -L "$layers/$layer/include" -name '*.h' | sort)
done
echo "ok: upward includes fail to compile; $count public headers compile on their own"
