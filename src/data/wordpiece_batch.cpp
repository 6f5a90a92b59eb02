// WordPieceTokenizer::encode_batch: a batch of texts as padded id tensors. The only part of the
// tokenizer that makes tensors, kept apart so the rest (wordpiece.cpp) links without them.
#include <algorithm>

#include "ember/ops.h"
#include "ember/tokenizer.h"

namespace ember::data {

BatchEncoding WordPieceTokenizer::encode_batch(const std::vector<std::string>& texts,
                                               std::optional<int64_t> max_length) const {
  std::vector<std::vector<int64_t>> rows;
  rows.reserve(texts.size());
  size_t longest = 0;
  for (const std::string& text : texts) {
    rows.push_back(encode(text, max_length));
    longest = std::max(longest, rows.back().size());
  }
  const auto batch = static_cast<int64_t>(rows.size());
  const auto length = static_cast<int64_t>(longest);
  BatchEncoding out{full({batch, length}, pad_id(), DType::kInt64), zeros({batch, length}, DType::kInt64),
                    zeros({batch, length}, DType::kInt64)};
  auto* input_ids = static_cast<int64_t*>(out.input_ids.data_ptr());
  auto* attention_mask = static_cast<int64_t*>(out.attention_mask.data_ptr());
  for (size_t b = 0; b < rows.size(); ++b) {
    std::copy(rows[b].begin(), rows[b].end(), input_ids + b * longest);
    std::fill_n(attention_mask + b * longest, rows[b].size(), int64_t{1});
  }
  return out;
}

}  // namespace ember::data
