// The clock that times training runs and searches.
#pragma once

#include <chrono>

namespace ember::train {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace ember::train
