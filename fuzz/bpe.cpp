// libFuzzer target for the byte-level BPE tokenizer (src/data/bpe.cpp), which reads vocabularies
// and merges from GGUF files and text from users. An input is up to four parts split at NUL bytes
// (which none of them may hold):
//
//   tokens (one per line) \0 merges ("left right", one per line) \0 text \0 pre-tokenizer name
//
// Tokens that start with "<|" are control tokens, the others normal. A tokenizer is built from the
// parts (the pre-tokenizer "smollm" when the fourth part is absent), then encodes the text (with
// and without parsing special tokens), splits it and decodes the ids, at once and through the
// streaming decoder. ember::Error is the expected answer to bad input; any other exception, a
// crash, a leak, a hang, a sanitizer report or a broken promise of the API (checked below) is a
// finding.
//
// Run: scripts/fuzz bpe  (builds build-fuzz/bpe with ASan + UBSan, replays fuzz/corpus/bpe/, then
// fuzzes; see fuzz/README.md). Replay one input: build-fuzz/bpe FILE
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ember/error.h"
#include "ember/tokenizer.h"
#include "fuzz/promise.h"
#include "fuzz/utf8.h"

const char* const ember_fuzz::kTarget = "bpe";

namespace {

using ember::data::BpeDecoder;
using ember::data::BpeOptions;
using ember::data::BpeTokenizer;
using ember_fuzz::is_utf8;
using ember_fuzz::require;

std::vector<std::string> lines(std::string_view part) {
  std::vector<std::string> out;
  while (!part.empty()) {
    const size_t end = part.find('\n');
    out.emplace_back(part.substr(0, end));
    if (end == std::string_view::npos) break;
    part.remove_prefix(end + 1);
  }
  return out;
}

void check(const BpeTokenizer& tokenizer, std::string_view text) {
  for (const bool special : {true, false}) {
    std::vector<int64_t> ids;
    try {
      ids = tokenizer.encode(text, special);
    } catch (const ember::Error&) {
      require(!is_utf8(text), "encode refuses only text that is not UTF-8");
      return;
    }
    require(is_utf8(text), "encode takes only UTF-8 text");
    for (const int64_t id : ids) require(id >= 0 && id < tokenizer.vocab_size(), "ids are in the vocabulary");
    const std::string decoded = tokenizer.decode(ids);
    require(is_utf8(decoded), "decode gives UTF-8");
    // The streaming decoder gives the same text, a piece at a time, each piece UTF-8.
    BpeDecoder decoder(tokenizer);
    std::string streamed;
    for (const int64_t id : ids) {
      const std::string piece = decoder.push(id);
      require(is_utf8(piece), "the decoder's pieces are UTF-8");
      streamed += piece;
    }
    streamed += decoder.flush();
    require(streamed == decoded, "streaming decode gives decode's text");
  }
  std::string joined;
  for (const std::string& piece : tokenizer.pre_tokenize(text)) joined += piece;
  require(joined == text, "the pre-tokenizer's pieces are the text");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  while (parts.size() < 3) {
    const size_t nul = input.find('\0');
    if (nul == std::string_view::npos) break;
    parts.push_back(input.substr(0, nul));
    input.remove_prefix(nul + 1);
  }
  parts.push_back(input);
  std::vector<std::string> tokens = lines(parts[0]);
  std::vector<int32_t> types;
  for (const std::string& token : tokens) types.push_back(token.rfind("<|", 0) == 0 ? 3 : 1);
  const std::vector<std::string> merges = parts.size() > 1 ? lines(parts[1]) : std::vector<std::string>{};
  const std::string_view text = parts.size() > 2 ? parts[2] : parts[0];
  BpeOptions options;
  options.pre = parts.size() > 3 ? std::string(parts[3]) : "smollm";
  try {
    const BpeTokenizer tokenizer(std::move(tokens), std::move(types), merges, options);
    check(tokenizer, text);
  } catch (const ember::Error&) {
    // A vocabulary, merge list or pre-tokenizer name the constructor refuses.
  }
  return 0;
}
