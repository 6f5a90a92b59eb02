// What the tokenizer targets ask of text: whether it is valid UTF-8 (utf8proc's reading).
#pragma once

#include <utf8proc.h>

#include <cstddef>
#include <string_view>

namespace ember_fuzz {

inline bool is_utf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  for (size_t at = 0; at < text.size();) {
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t used = utf8proc_iterate(bytes + at, static_cast<utf8proc_ssize_t>(text.size() - at), &c);
    if (used <= 0) return false;
    at += static_cast<size_t>(used);
  }
  return true;
}

}  // namespace ember_fuzz
