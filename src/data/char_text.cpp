// Character-level text for the GPT: the train/validation split and its random windows
// (include/ember/tokenizer.h); the byte vocabulary is char_tokenizer.cpp.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "ember/error.h"
#include "ember/ops.h"
#include "ember/tokenizer.h"

namespace ember::data {
namespace {

// splitmix64: the next 64 random bits of `state`.
uint64_t next_random(uint64_t& state) {
  state += 0x9E3779B97F4A7C15ULL;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

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
              " tokens, too few for windows of ", static_cast<uint64_t>(context) + 1);
  // Checked: batch * context wrapped around once sized the buffers to 0 and the copies ran past them.
  int64_t count = 0;
  EMBER_CHECK(!__builtin_mul_overflow(batch, context, &count), "[TextSplit] a batch of ", batch, " windows of ",
              context, " tokens holds more tokens than a 64-bit count holds");
  // Tensors, not vectors: more than memory holds is "[empty] cannot allocate N bytes ...".
  Tensor inputs = empty({batch, context}, kInt64), targets = empty({batch, context}, kInt64);
  int64_t* x = inputs.data_ptr<int64_t>();
  int64_t* y = targets.data_ptr<int64_t>();
  const auto starts = static_cast<uint64_t>(end - begin - context);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t start = begin + static_cast<int64_t>(next_random(state) % starts);
    std::copy_n(tokens_.begin() + start, context, x + b * context);
    std::copy_n(tokens_.begin() + start + 1, context, y + b * context);
  }
  return {inputs, targets};
}

std::string read_text_file(const std::string& path) {
  std::error_code error;  // a folder opens as a stream that reads as empty
  EMBER_CHECK(!std::filesystem::is_directory(path, error), "[read_text_file] ", path, " is a folder, not a text file");
  std::ifstream in(path, std::ios::binary);
  EMBER_CHECK(in.good(), "[read_text_file] cannot open ", path);
  std::ostringstream text;
  text << in.rdbuf();
  EMBER_CHECK(!in.bad(), "[read_text_file] reading ", path, " failed");
  return text.str();
}

}  // namespace ember::data
