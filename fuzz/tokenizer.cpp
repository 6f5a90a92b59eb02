// libFuzzer target for the tokenizers (src/data/wordpiece.cpp, src/data/char_tokenizer.cpp). An
// input is up to three parts split at NUL bytes (which none of them may hold):
//
//   vocab.txt \0 text \0 tokenizer_config.json
//
// The vocab goes through parse_vocab and the config through parse_config (the readers of
// WordPieceTokenizer::from_folder; without a config, or with one that is refused, the defaults
// are used). A WordPieceTokenizer is built from the vocab, or, when the vocab is refused as it is
// (a token twice, a special token missing), from its distinct tokens and the missing special
// tokens. It then tokenizes the text (without a text part, the vocab itself): basic_tokenize,
// tokenize and encode. A CharTokenizer is built from the text and from the vocab's bytes, and
// encodes and decodes the text. ember::Error is the expected answer to bad input; any other
// exception, a crash, a leak, a hang, a sanitizer report or a broken promise of the API (checked
// below) is a finding.
//
// Run: scripts/fuzz tokenizer  (builds build-fuzz/tokenizer with ASan + UBSan, replays
// fuzz/corpus/tokenizer/, then fuzzes; see fuzz/README.md). Replay one input: build-fuzz/tokenizer FILE
#include "ember/tokenizer.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "data/wordpiece_format.h"
#include "ember/error.h"
#include "fuzz/promise.h"
#include "fuzz/utf8.h"

const char* const ember_fuzz::kTarget = "tokenizer";

namespace {

using ember::data::CharTokenizer;
using ember::data::WordPieceOptions;
using ember::data::WordPieceTokenizer;
namespace format = ember::data::wordpiece_format;

using ember_fuzz::is_utf8;
using ember_fuzz::require;

// `vocab` without repeats, then the special tokens of `options` it lacks.
std::vector<std::string> with_specials(const std::vector<std::string>& vocab, const WordPieceOptions& options) {
  std::vector<std::string> tokens;
  std::set<std::string> seen;
  for (const std::string& token : vocab) {
    if (seen.insert(token).second) tokens.push_back(token);
  }
  for (const std::string& token : {options.unk_token, options.cls_token, options.sep_token, options.pad_token}) {
    if (seen.insert(token).second) tokens.push_back(token);
  }
  return tokens;
}

void fuzz_wordpiece(const std::vector<std::string>& vocab, const WordPieceOptions& options, std::string_view text) {
  std::optional<WordPieceTokenizer> tokenizer;
  try {
    tokenizer.emplace(vocab, options);
  } catch (const ember::Error&) {
    ember_fuzz::must_succeed("distinct UTF-8 tokens with the special tokens make a tokenizer",
                             [&] { tokenizer.emplace(with_specials(vocab, options), options); });
  }
  for (int64_t id = 0; id < tokenizer->vocab_size(); ++id) {
    require(tokenizer->token_to_id(tokenizer->id_to_token(id)) == id, "a token's id is its line");
  }
  const bool valid = is_utf8(text);
  std::vector<std::string> words, pieces;
  std::vector<int64_t> ids, plain_ids;
  try {
    words = tokenizer->basic_tokenize(text);
    pieces = tokenizer->tokenize(text);
    ids = tokenizer->encode(text);
    plain_ids = tokenizer->encode(text, pieces.size(), /*add_special_tokens=*/false);
  } catch (const ember::Error& e) {
    if (valid) std::fprintf(stderr, "[fuzz tokenizer] %s\n", e.what());
    require(!valid, "valid UTF-8 text is tokenized");
    return;
  }
  require(valid, "text that is not UTF-8 is refused");
  for (const std::string& word : words) require(!word.empty() && is_utf8(word), "words are UTF-8 and not empty");
  for (const std::string& piece : pieces) require(tokenizer->token_to_id(piece).has_value(), "pieces are tokens");
  require(plain_ids.size() == pieces.size(), "encode without specials gives an id per piece");
  for (size_t i = 0; i < pieces.size(); ++i) {
    require(tokenizer->id_to_token(plain_ids[i]) == pieces[i], "encode gives the pieces' ids");
  }
  const auto limit = static_cast<size_t>(std::min<int64_t>(tokenizer->options().model_max_length, 1 << 30));
  require(ids.size() == std::min(pieces.size() + 2, limit), "encode cuts to model_max_length, specials included");
  require(ids.front() == tokenizer->cls_id() && ids.back() == tokenizer->sep_id(), "encode wraps in [CLS] ... [SEP]");
  for (size_t i = 1; i + 1 < ids.size(); ++i) require(ids[i] == plain_ids[i - 1], "the ids between are the pieces'");
}

void fuzz_char(std::string_view text, std::string_view vocab) {
  if (text.empty()) {
    try {
      CharTokenizer::from_text(text);
      require(false, "an empty text has no vocabulary");
    } catch (const ember::Error&) {
    }
  } else {
    const CharTokenizer tokenizer = CharTokenizer::from_text(text);
    const std::string& vocabulary = tokenizer.vocabulary();
    require(
        std::is_sorted(vocabulary.begin(), vocabulary.end(),
                       [](char a, char b) { return static_cast<unsigned char>(a) < static_cast<unsigned char>(b); }) &&
            std::adjacent_find(vocabulary.begin(), vocabulary.end()) == vocabulary.end(),
        "the vocabulary is the text's distinct bytes, sorted");
    const std::vector<int64_t> ids = tokenizer.encode(text);
    require(tokenizer.decode(ids) == text, "decode(encode(text)) is the text");
    try {
      tokenizer.decode({tokenizer.vocab_size()});
      require(false, "an id past the vocabulary is refused");
    } catch (const ember::Error&) {
    }
  }
  // A vocabulary as a checkpoint holds it: the bytes in their order, each once.
  std::optional<CharTokenizer> tokenizer;
  try {
    tokenizer.emplace(std::string(vocab));
  } catch (const ember::Error&) {
    std::set<char> distinct(vocab.begin(), vocab.end());
    require(vocab.empty() || distinct.size() < vocab.size(), "a vocabulary of distinct bytes is taken");
    return;
  }
  for (int64_t id = 0; id < tokenizer->vocab_size(); ++id) {
    require(tokenizer->encode(std::string(1, vocab[static_cast<size_t>(id)])) == std::vector<int64_t>{id},
            "a byte's id is its place in the vocabulary");
  }
  try {
    const std::vector<int64_t> ids = tokenizer->encode(text);
    require(tokenizer->decode(ids) == text, "decode(encode(text)) is the text");
  } catch (const ember::Error&) {
    require(std::any_of(text.begin(), text.end(), [&](char c) { return vocab.find(c) == std::string_view::npos; }),
            "a text of the vocabulary's bytes is encoded");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t first = input.find('\0');
  const std::string_view vocab_text = input.substr(0, first);
  std::string_view text = vocab_text;
  std::optional<std::string_view> config_text;
  if (first != std::string_view::npos) {
    const size_t second = input.find('\0', first + 1);
    text = input.substr(first + 1, second == std::string_view::npos ? std::string_view::npos : second - first - 1);
    if (second != std::string_view::npos) config_text = input.substr(second + 1);
  }

  WordPieceOptions options;
  if (config_text) {
    try {
      options = format::parse_config(*config_text, "<fuzz config>");
      require(options.model_max_length >= 2, "model_max_length is at least 2");
    } catch (const ember::Error&) {
      options = {};
    }
  }
  fuzz_char(text, vocab_text);
  std::vector<std::string> vocab;
  try {
    vocab = format::parse_vocab(vocab_text, "<fuzz vocab>");
  } catch (const ember::Error&) {
    return 0;
  }
  for (const std::string& token : vocab) {
    require(is_utf8(token) && token.find('\n') == std::string::npos, "tokens are UTF-8 lines");
    require(token.empty() || (token.back() != ' ' && token.back() != '\t' && token.back() != '\r'),
            "tokens have no trailing whitespace");
  }
  fuzz_wordpiece(vocab, options, text);
  return 0;
}
