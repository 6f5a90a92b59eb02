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

// --- Byte-level BPE ----------------------------------------------------------------------------
//
// GPT-2's byte-level BPE, as Llama-family GGUF files carry it (tokenizer.ggml.model "gpt2": SmolLM2,
// Llama 3, ...), token for token what Hugging Face's `tokenizers` gives with the model's own
// tokenizer.json (llama.cpp agrees but in the corners src/data/bpe.cpp names):
//
//   0. special:      control and user-defined tokens written in the text (the leftmost, the longest
//                    there) stand for themselves; the text between them goes on
//   1. pre-tokenize: the regex the `pre` name selects cuts the text into pieces (words with the
//                    space before them, runs of digits or punctuation, runs of whitespace)
//   2. byte-level:   each piece's UTF-8 bytes become GPT-2's printable stand-ins (a space is "Ġ")
//   3. BPE:          adjacent symbols merge, the pair of lowest merge rank first (the leftmost among
//                    equals), until no listed pair is left; each symbol is then a token
//
//   ember::data::BpeOptions options;
//   options.pre = "smollm";  // tokenizer.ggml.pre
//   ember::data::BpeTokenizer tokenizer(tokens, token_types, merges, options);
//   tokenizer.encode("Hello world");  // {19556, 905}: "Hello", "Ġworld" (SmolLM2)
//   tokenizer.decode({19556, 905});   // "Hello world"
//
// Text is UTF-8; invalid bytes are an ember::Error naming their offset. The vocabulary comes as
// plain vectors (a GGUF file's tokenizer.ggml.tokens, token_type and merges): this layer does not
// read files.
//
// For SmolLM2 ("smollm") transformers' own GGUF conversion differs from both: it knows no "smollm"
// and runs GPT-2's regex without splitting digits first, so "a  1" and " ½" tokenize otherwise
// there; pre = "gpt2" gives its ids.

/// A token's type, as a GGUF file's tokenizer.ggml.token_type numbers it (llama.cpp's
/// llama_token_type).
enum class BpeTokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // <|im_start|>, <|endoftext|>: matched in the text unless told not to
  kUserDefined = 4,  // added tokens: always matched in the text
  kUnused = 5,
  kByte = 6,
};

struct BpeOptions {
  /// The pre-tokenizer (tokenizer.ggml.pre): "default" and "gpt2" (GPT-2's regex), "smollm" (each
  /// digit a piece of its own, then GPT-2's regex), "llama-bpe" (Llama 3's regex; a piece that is a
  /// token is not merged). Any other name is an ember::Error listing these.
  std::string pre = "default";
  std::optional<int64_t> bos_id;  // tokenizer.ggml.bos_token_id
  std::optional<int64_t> eos_id;  // tokenizer.ggml.eos_token_id
  /// Stands for a byte the vocabulary has no token for; unset, such a byte is dropped before merging,
  /// as Hugging Face's BPE without an unk_token (SmolLM2's) drops it. A GGUF file's
  /// tokenizer.ggml.unknown_token_id is not this: neither Hugging Face nor llama.cpp uses it here.
  std::optional<int64_t> unk_id;
  bool add_bos = false;  // tokenizer.ggml.add_bos_token: encode() starts with bos_id
};

class BpeTokenizer {
 public:
  /// `tokens` in id order, a type per token (BpeTokenType's numbers), and `merges` in rank order,
  /// each "left right" (two tokens whose concatenation is a token). An ember::Error names the first
  /// thing wrong: sizes that differ, a type out of range, a token that is not UTF-8, a malformed
  /// merge (by its index), an id in `options` out of range, an unknown `pre`. A token listed twice
  /// is looked up as its last id, as llama.cpp and Hugging Face's GGUF conversion do.
  BpeTokenizer(std::vector<std::string> tokens, std::vector<int32_t> token_types, std::vector<std::string> merges,
               BpeOptions options = {});
  ~BpeTokenizer();
  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;

  /// The ids of `text` (with bos_id first when add_bos). parse_special false reads control tokens
  /// written in the text as plain text (user-defined ones still stand for themselves).
  std::vector<int64_t> encode(std::string_view text, bool parse_special = true) const;
  /// Step 1 alone: the pieces BPE works on, as UTF-8 text (special tokens are not looked for).
  std::vector<std::string> pre_tokenize(std::string_view text) const;
  /// The text of `ids`: their bytes (token_bytes) joined, where bytes that are not valid UTF-8 (ids
  /// that end inside a character) become U+FFFD, as Hugging Face's decode() does.
  std::string decode(const std::vector<int64_t>& ids) const;
  /// The bytes a token stands for: a byte-level token's bytes (which may be part of a character),
  /// a control, user-defined or unknown token's text as it is.
  const std::string& token_bytes(int64_t id) const;

  /// The id of a token (its byte-level text: " world" is "Ġworld"), or nullopt.
  std::optional<int64_t> token_to_id(std::string_view token) const;
  /// The token of an id, as the vocabulary writes it (an ember::Error when out of range).
  const std::string& id_to_token(int64_t id) const;
  BpeTokenType token_type(int64_t id) const;
  int64_t vocab_size() const;
  const BpeOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Streaming decoding, for text generated a token at a time: push() returns only complete, valid
/// UTF-8, holding back the bytes of a character whose last bytes are still to come (an emoji is
/// often 2-4 tokens); bytes that cannot begin or continue a character become U+FFFD. The tokenizer
/// must outlive the decoder.
class BpeDecoder {
 public:
  explicit BpeDecoder(const BpeTokenizer& tokenizer) : tokenizer_(&tokenizer) {}
  /// The text that `id` completes (often empty while a character is incomplete).
  std::string push(int64_t id);
  /// What is held back, as U+FFFD (empty when nothing is); the decoder starts afresh.
  std::string flush();

 private:
  const BpeTokenizer* tokenizer_;
  std::string pending_;  // the start of a character whose remaining bytes have not come
};

}  // namespace ember::data
