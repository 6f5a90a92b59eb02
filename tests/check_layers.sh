#!/usr/bin/env bash
# The layers are enforced by the build: a file of a layer that includes a header of a layer above
# it does not compile. Preprocesses small probes with each layer's include path (build/layers/<layer>,
# made by cmake/EmberLayers.cmake) and expects the upward includes to fail and the allowed ones to
# pass. An upward #include, direct or through other headers, is a file the preprocessor cannot find:
# preprocessing alone decides it (2 s for the probes here, against 158 s compiling each one).
#
# The code over the library (apps/, python/, wasm/, fuzz/) sees the public headers (the fuzzers also
# the sources of the parsers they link alone): none of it can include apps/, and only the fuzzers
# and the tests see src/.
set -euo pipefail
compiler="$1"
layers="$2"
root="$3"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# probe <layer> <header> <pass|fail>
probe() {
  local layer="$1" header="$2" expect="$3"
  printf '#include "%s"\nint main() { return 0; }\n' "$header" > "$tmp/probe.cpp"
  if "$compiler" -std=c++20 -E -o /dev/null -I"$layers/$layer/src" -I"$layers/$layer/include" "$tmp/probe.cpp" \
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
probe core ember/profiler.h fail
probe ops ops/dispatch.h pass
probe ops autograd/function.h pass
probe ops autograd/engine.h fail
probe ops ember/nn/functional.h fail
probe ops ember/profiler.h fail
probe autograd ops/dispatch.h pass
probe autograd ember/nn.h fail
probe profiler ops/cost.h pass
probe profiler ember/optim.h fail
probe optim ember/nn.h fail
probe models ember/train.h fail
probe dist ember/train/step.h fail
probe train ember/dist.h pass
probe train ember/models/gpt.h pass
probe io ember/train/checkpoint.h fail

# The consumers, with the include paths their builds give them (CMakeLists.txt, python/ and wasm/
# link ember::ember, whose public include folder is include/; scripts/fuzz).
consumer() {
  local name="$1" header="$2" expect="$3"
  shift 3
  printf '#include "%s"\nint main() { return 0; }\n' "$header" > "$tmp/probe.cpp"
  if "$compiler" -std=c++20 -E -o /dev/null "$@" "$tmp/probe.cpp" 2> "$tmp/err.txt"; then
    [ "$expect" = pass ] || { echo "$name can include $header"; exit 1; }
  else
    [ "$expect" = fail ] || { echo "$name cannot include $header:"; cat "$tmp/err.txt"; exit 1; }
    grep -q "No such file" "$tmp/err.txt" || { echo "unexpected error for $name / $header:"; cat "$tmp/err.txt"; exit 1; }
  fi
}
mkdir -p "$tmp/fuzz-view"
ln -s "$root/fuzz" "$tmp/fuzz-view/fuzz"
for header in apps/ember/cli_util.h ember/cli_util.h cli_util.h; do
  consumer python "$header" fail -I"$root/include" -I"$root/python/src"
  consumer wasm "$header" fail -I"$root/include" -I"$root/wasm/src"
  consumer fuzz "$header" fail -I"$root/include" -I"$root/src" -I"$tmp/fuzz-view"
done
for consumer_name in apps python wasm; do
  consumer "$consumer_name" ops/dispatch.h fail -I"$root/include" -I"$root/bench"
done
consumer apps ember/train.h pass -I"$root/include" -I"$root/bench"
consumer fuzz fuzz/promise.h pass -I"$root/include" -I"$root/src" -I"$tmp/fuzz-view"
consumer fuzz train/resume.cpp fail -I"$root/include" -I"$root/src/train" -I"$tmp/fuzz-view"
# No file over the library names apps/ in an include, relative paths included.
if grep -rnE '#include "(\.\./)*apps/' "$root/python" "$root/wasm" "$root/fuzz" "$root/tests" "$root/examples" \
    "$root/bench" --include='*.cpp' --include='*.h'; then
  echo "the lines above include apps/: the CLI is no library"; exit 1
fi
# Every public header compiles on its own in the lowest layer that owns it: it includes nothing
# from a layer above (its own layer's view holds exactly what it may include).
declare -A done
count=0
for layer in base kernels core cuda ops autograd profiler graph nn optim data io models dist train; do
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
