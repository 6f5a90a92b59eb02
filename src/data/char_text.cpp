// Character-level text for the GPT: the byte vocabulary, the train/validation split and its random
// windows (include/ember/tokenizer.h).
#include <algorithm>
#include <fstream>
#include <sstream>

#include "ember/error.h"
#include "ember/ops.h"
#include "ember/tokenizer.h"

namespace ember::data {
namespace {

std::string printable(unsigned char c) {
  if (c >= 0x20 && c < 0x7F) return std::string("'") + static_cast<char>(c) + "'";
  static const char* kHex = "0123456789abcdef";
  return std::string("byte 0x") + kHex[c >> 4] + kHex[c & 15];
}

// splitmix64: the next 64 random bits of `state`.
uint64_t next_random(uint64_t& state) {
  state += 0x9E3779B97F4A7C15ULL;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
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

TextSplit::TextSplit(std::vector<int64_t> tokens, double train_fraction)
    : tokens_(std::move(tokens)),
      train_end_(static_cast<int64_t>(static_cast<double>(tokens_.size()) * train_fraction)) {
  EMBER_CHECK(train_fraction > 0.0 && train_fraction < 1.0, "[TextSplit] train_fraction must be in (0, 1), got ",
              train_fraction);
}

std::pair<Tensor, Tensor> TextSplit::batch(std::string_view split, int64_t batch, int64_t context,
                                           uint64_t& state) const {
  EMBER_CHECK(split == "train" || split == "val", "[TextSplit] split must be \"train\" or \"val\", got \"", split,
              "\"");
  const int64_t begin = split == "train" ? 0 : train_end_;
  const int64_t end = split == "train" ? train_end_ : static_cast<int64_t>(tokens_.size());
  EMBER_CHECK(batch > 0 && context > 0, "[TextSplit] batch and context must be positive, got ", batch, " and ",
              context);
  EMBER_CHECK(end - begin > context, "[TextSplit] the ", split, " split holds ", end - begin,
              " tokens, too few for windows of ", context + 1);
  std::vector<int64_t> inputs(static_cast<size_t>(batch * context)), targets(inputs.size());
  const auto starts = static_cast<uint64_t>(end - begin - context);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t start = begin + static_cast<int64_t>(next_random(state) % starts);
    std::copy_n(tokens_.begin() + start, context, inputs.begin() + b * context);
    std::copy_n(tokens_.begin() + start + 1, context, targets.begin() + b * context);
  }
  return {from_vector(inputs, Shape{batch, context}), from_vector(targets, Shape{batch, context})};
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EMBER_CHECK(in.good(), "[read_text_file] cannot open ", path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace ember::data
