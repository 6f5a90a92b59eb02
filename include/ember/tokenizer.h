// BERT's WordPiece tokenizer (uncased and cased), token for token the one Hugging Face's
// `tokenizers` runs for BertTokenizerFast / AutoTokenizer (BertNormalizer, BertPreTokenizer,
// WordPiece, the [CLS] A [SEP] template):
//
//   0. special:   the special tokens ([CLS], [SEP], [PAD], [MASK], [UNK]) written in the text, as
//                 they are (case-sensitive), stand for themselves; the text between them goes on
//   1. clean:     drop NUL, U+FFFD and control/format/private-use characters (category C*, except
//                 \t \n \r); every whitespace character becomes a space
//   2. CJK:       put spaces around CJK ideographs, so each is a word of its own
//   3. accents:   (when lower-casing, unless told otherwise) NFD, then drop non-spacing marks (Mn)
//   4. lower-case
//   5. split:     on whitespace, and every punctuation character (Unicode P*, plus ASCII's
//                 non-alphanumeric symbols such as $ + < = > ^ ` |) is a word of its own
//   6. WordPiece: each word becomes the longest vocabulary entry that starts it, then the longest
//                 "##" entry that continues it, ...; a word with a piece missing from the
//                 vocabulary, or longer than 100 characters, becomes [UNK]
//
//   auto tokenizer = ember::data::WordPieceTokenizer::from_folder("data/minilm");
//   ember::data::BatchEncoding batch = tokenizer.encode_batch({"Hello, world!", "Crème brûlée"}, 256);
//   // batch.input_ids (2, 7) int64: [[101, 7592, 1010, 2088, 999, 102, 0],      hello , world !
//   //                                 [101, 13675, 21382, 7987, 9307, 2063, 102]]  cr ##eme br ##ule ##e
//
// Text is UTF-8; bytes that are not valid UTF-8 are an ember::Error naming their offset (Hugging
// Face's tokenizers take only valid Unicode strings, so there is nothing to match there).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ember/tensor.h"

namespace ember::data {

/// The tokenizer's settings, as the fields of a Hugging Face tokenizer_config.json.
struct WordPieceOptions {
  bool lower_case = true;                  // do_lower_case
  std::optional<bool> strip_accents;       // unset: strip them when lower-casing (BERT's rule)
  bool tokenize_chinese_chars = true;      // put spaces around CJK ideographs
  int64_t max_input_chars_per_word = 100;  // longer words become [UNK]
  int64_t model_max_length = 512;          // the longest sequence the model takes, specials included
  std::string unk_token = "[UNK]";
  std::string cls_token = "[CLS]";
  std::string sep_token = "[SEP]";
  std::string pad_token = "[PAD]";
  std::string mask_token = "[MASK]";  // may be absent from the vocabulary
};

/// A batch of encoded texts, padded on the right to the longest one. Each is (B, S) int64.
struct BatchEncoding {
  Tensor input_ids;
  Tensor attention_mask;  // 1 for tokens (specials included), 0 for padding
  Tensor token_type_ids;  // zeros: every text is one segment
};

class WordPieceTokenizer {
 public:
  /// Reads `folder`/vocab.txt (one token per line; the line number is the id) and, when present,
  /// `folder`/tokenizer_config.json (do_lower_case, strip_accents, tokenize_chinese_chars,
  /// model_max_length and the special tokens). A missing folder or vocab, a vocab that is not
  /// UTF-8 text, one with a duplicate token or without the special tokens, or a malformed config
  /// throws an ember::Error naming the file and what is wrong.
  static WordPieceTokenizer from_folder(const std::string& folder);
  /// Reads a vocab.txt with the given options.
  static WordPieceTokenizer from_vocab_file(const std::string& path, WordPieceOptions options = {});
  /// `vocab` lists the tokens in id order.
  explicit WordPieceTokenizer(std::vector<std::string> vocab, WordPieceOptions options = {});
  ~WordPieceTokenizer();
  WordPieceTokenizer(WordPieceTokenizer&&) noexcept;
  WordPieceTokenizer& operator=(WordPieceTokenizer&&) noexcept;

  /// Steps 1-5: the normalized words, before WordPiece.
  std::vector<std::string> basic_tokenize(std::string_view text) const;
  /// Steps 1-6: the word pieces ("crème" -> "creme"; "tokenizer" -> "token", "##izer").
  std::vector<std::string> tokenize(std::string_view text) const;
  /// The ids of `text`'s pieces, cut to max_length (specials included) and wrapped in [CLS] ...
  /// [SEP] when add_special_tokens. max_length unset: model_max_length.
  std::vector<int64_t> encode(std::string_view text, std::optional<int64_t> max_length = std::nullopt,
                              bool add_special_tokens = true) const;
  /// encode() of each text (with the specials), padded with [PAD] to the longest. An empty batch
  /// gives (0, 0) tensors.
  BatchEncoding encode_batch(const std::vector<std::string>& texts,
                             std::optional<int64_t> max_length = std::nullopt) const;

  /// The id of a token, or nullopt when it is not in the vocabulary.
  std::optional<int64_t> token_to_id(std::string_view token) const;
  /// The token of an id (an ember::Error when out of range).
  const std::string& id_to_token(int64_t id) const;
  int64_t vocab_size() const;
  const WordPieceOptions& options() const;
  int64_t unk_id() const;
  int64_t cls_id() const;
  int64_t sep_id() const;
  int64_t pad_id() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A character-level tokenizer: the vocabulary is a sorted list of distinct bytes (Shakespeare's
/// text has 84), and each byte is its index. For `ember train gpt` and `ember generate`.
class CharTokenizer {
 public:
  /// The sorted distinct bytes of `text` (an ember::Error when it is empty).
  static CharTokenizer from_text(std::string_view text);
  /// The given vocabulary, in its order (distinct bytes; from a checkpoint).
  explicit CharTokenizer(std::string vocabulary);
  /// An ember::Error names the first character outside the vocabulary and its offset.
  std::vector<int64_t> encode(std::string_view text) const;
  std::string decode(const std::vector<int64_t>& ids) const;
  int64_t vocab_size() const { return static_cast<int64_t>(vocabulary_.size()); }
  const std::string& vocabulary() const { return vocabulary_; }

 private:
  std::string vocabulary_;
  std::vector<int16_t> id_of_byte_;  // 256 entries, -1 for bytes outside the vocabulary
};

/// A text as one long sequence of token ids with nanoGPT's split (the first 90% of tokens train,
/// the last 10% validate) and its batches: random windows of context + 1 tokens, the first context
/// as inputs and the last context as next-token targets.
class TextSplit {
 public:
  TextSplit(std::vector<int64_t> tokens, double train_fraction = 0.9);
  /// `batch` windows of `split` ("train" or "val") starting at offsets drawn with the seeded
  /// generator `state` (splitmix64, advanced): {inputs, targets}, each (batch, context) int64.
  std::pair<Tensor, Tensor> batch(std::string_view split, int64_t batch, int64_t context, uint64_t& state) const;
  int64_t train_size() const { return train_end_; }
  int64_t val_size() const { return static_cast<int64_t>(tokens_.size()) - train_end_; }

 private:
  std::vector<int64_t> tokens_;
  int64_t train_end_;
};

/// Reads a whole file (an ember::Error naming the path when it cannot be read).
std::string read_text_file(const std::string& path);

}  // namespace ember::data
