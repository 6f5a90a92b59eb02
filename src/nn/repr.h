// Formatting for the layers' extra_repr(), close to what PyTorch prints: tuples as "(3, 3)",
// normalized shapes as "(128,)", floats as Python's repr would show them ("1e-05", "0.1").
// (Strings are built with streams: GCC 12 reports false -Wrestrict errors on `"(" + std::string`.)
#pragma once

#include <optional>
#include <sstream>
#include <string>

#include "ember/error.h"
#include "ember/nn/functional.h"
#include "ember/shape.h"

namespace ember::nn::repr {

using ember::detail::concat;

inline std::string tuple(Pair p) { return concat("(", p.h, ", ", p.w, ")"); }

// One number when both sides agree, as PyTorch prints an int kernel_size given to a pool.
inline std::string pair(Pair p) { return p.h == p.w ? concat(p.h) : tuple(p); }

inline std::string shape_tuple(const Shape& shape) {
  std::ostringstream out;
  out << '(';
  for (int i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << (shape.size() == 1 ? ",)" : ")");
  return out.str();
}

inline const char* boolean(bool value) { return value ? "true" : "false"; }

// Doubles print as C's %g, which matches Python's repr for the usual options (1e-05, 0.1, 0.5).
inline std::string optional_number(const std::optional<double>& value) {
  return value ? concat(*value) : std::string("None");
}

}  // namespace ember::nn::repr
