// Checks shared by the optimizers' option validators: each throws ember::Error starting with
// "[<optimizer>]" and naming the option and its value.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ember/error.h"
#include "ember/optim/optimizer.h"

namespace ember::optim::detail {

inline double get(const Options& options, const char* name) {
  const auto it = options.find(name);
  EMBER_CHECK(it != options.end(), "[optim] param group has no option '", name, "'");
  return it->second;
}

// 0 <= value (NaN fails too).
inline void check_non_negative(const char* op, const Options& options, const char* name) {
  const double value = get(options, name);
  EMBER_CHECK(value >= 0.0, "[", op, "] invalid ", name, ": ", value, " (expected >= 0)");
}

// 0 <= value < 1.
inline void check_unit_interval(const char* op, const Options& options, const char* name) {
  const double value = get(options, name);
  EMBER_CHECK(value >= 0.0 && value < 1.0, "[", op, "] invalid ", name, ": ", value, " (expected in [0, 1))");
}

// A flag stored as a number: 0 or 1.
inline bool get_flag(const char* op, const Options& options, const char* name) {
  const double value = get(options, name);
  EMBER_CHECK(value == 0.0 || value == 1.0, "[", op, "] invalid ", name, ": ", value, " (expected 0 or 1)");
  return value != 0.0;
}

// The constructors' plain parameter list as one group (none when empty: the base reports that).
inline std::vector<ParamGroup> single_group(std::vector<Tensor> params) {
  std::vector<ParamGroup> groups;
  if (!params.empty()) groups.push_back(ParamGroup{std::move(params), {}});
  return groups;
}

}  // namespace ember::optim::detail
