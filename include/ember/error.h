// ember::Error, the one exception type for every user mistake, and the checks that throw it.
// Every message starts with "[op_name]" and names the shapes, dtypes or values involved.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace ember {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {

template <class... Args>
std::string concat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

[[noreturn]] void throw_error(const std::string& message);

}  // namespace detail
}  // namespace ember

// EMBER_CHECK(cond, "[op] text ", value, " more text"): throws ember::Error when cond is false.
// The message parts are only formatted on failure.
#define EMBER_CHECK(cond, ...)                                            \
  do {                                                                    \
    if (!(cond)) [[unlikely]] {                                           \
      ::ember::detail::throw_error(::ember::detail::concat(__VA_ARGS__)); \
    }                                                                     \
  } while (0)

#define EMBER_FAIL(...) ::ember::detail::throw_error(::ember::detail::concat(__VA_ARGS__))
