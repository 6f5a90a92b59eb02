// What the fuzz targets share: a broken promise of the API is a finding (its message, then abort,
// which libFuzzer reports with the input), and a step that must succeed has its ember::Error
// printed before the broken promise. Each target defines ember_fuzz::kTarget, its name in messages.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "ember/error.h"

namespace ember_fuzz {

extern const char* const kTarget;

inline void require(bool cond, const char* promise) {
  if (cond) return;
  std::fprintf(stderr, "[fuzz %s] broken promise: %s\n", kTarget, promise);
  std::abort();
}

// f(), whose ember::Error breaks `promise`.
template <class F>
auto must_succeed(const char* promise, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const ember::Error& e) {
    std::fprintf(stderr, "[fuzz %s] %s\n", kTarget, e.what());
    require(false, promise);
  }
  std::abort();  // not reached: require(false, ...) aborts
}

}  // namespace ember_fuzz
