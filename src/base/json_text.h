// A JSON value as the readers' error messages show it (the safetensors header, a tokenizer's
// tokenizer_config.json). nlohmann's dump() recurses once per level of nesting, and a file can nest
// arrays tens of thousands deep in a few pages (ember::load crashed on such a header while
// describing it): here a value is shown as its text only when it is flat, else by its kind and
// size.
#pragma once

#include <algorithm>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace ember::detail {

// `value`'s JSON text when it is a scalar or an array or object of scalars (cut after 200
// characters), else "an array of 3 items" or "an object of 1 key".
inline std::string json_text(const nlohmann::json& value) {
  constexpr size_t kMaxChars = 200;
  const bool flat = !value.is_structured() || std::none_of(value.begin(), value.end(), [](const nlohmann::json& item) {
    return item.is_structured();
  });
  if (!flat) {
    const size_t n = value.size();
    return std::string(value.is_array() ? "an array of " : "an object of ") + std::to_string(n) +
           (value.is_array() ? (n == 1 ? " item" : " items") : (n == 1 ? " key" : " keys"));
  }
  std::string text = value.dump();
  if (text.size() > kMaxChars) text.replace(kMaxChars, std::string::npos, "...");
  return text;
}

}  // namespace ember::detail
