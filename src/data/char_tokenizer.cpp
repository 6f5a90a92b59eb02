// CharTokenizer (include/ember/tokenizer.h): the byte vocabulary of a text. It makes no tensors, so
// the fuzzer (fuzz/tokenizer.cpp) links this file and base/error.cpp alone.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ember/error.h"
#include "ember/tokenizer.h"

namespace ember::data {
namespace {

std::string printable(unsigned char c) {
  if (c >= 0x20 && c < 0x7F) return std::string("'") + static_cast<char>(c) + "'";
  static const char* kHex = "0123456789abcdef";
  return std::string("byte 0x") + kHex[c >> 4] + kHex[c & 15];
}

}  // namespace

CharTokenizer CharTokenizer::from_text(std::string_view text) {
  EMBER_CHECK(!text.empty(), "[CharTokenizer] cannot build a vocabulary from an empty text");
  bool seen[256] = {};
  for (const char c : text) seen[static_cast<unsigned char>(c)] = true;
  std::string vocabulary;
  for (int b = 0; b < 256; ++b) {
    if (seen[b]) vocabulary.push_back(static_cast<char>(b));
  }
  return CharTokenizer(std::move(vocabulary));
}

CharTokenizer::CharTokenizer(std::string vocabulary) : vocabulary_(std::move(vocabulary)), id_of_byte_(256, -1) {
  EMBER_CHECK(!vocabulary_.empty(), "[CharTokenizer] the vocabulary is empty");
  for (size_t i = 0; i < vocabulary_.size(); ++i) {
    const auto b = static_cast<unsigned char>(vocabulary_[i]);
    EMBER_CHECK(id_of_byte_[b] < 0, "[CharTokenizer] the vocabulary holds ", printable(b), " twice");
    id_of_byte_[b] = static_cast<int16_t>(i);
  }
}

std::vector<int64_t> CharTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    EMBER_CHECK(id_of_byte_[b] >= 0, "[CharTokenizer] ", printable(b), " at offset ", i,
                " is not in the vocabulary of ", vocabulary_.size(), " characters");
    ids[i] = id_of_byte_[b];
  }
  return ids;
}

std::string CharTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    EMBER_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "[CharTokenizer] id ", ids[i], " is outside the vocabulary of ",
                vocabulary_.size(), " characters");
    text[i] = vocabulary_[static_cast<size_t>(ids[i])];
  }
  return text;
}

}  // namespace ember::data
