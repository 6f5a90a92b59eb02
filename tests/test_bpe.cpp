// The byte-level BPE tokenizer: ids identical to Hugging Face's for SmolLM2-135M-Instruct's GGUF file
// under each pre-tokenizer (tests/llama/make_tokenizer.py wrote tests/data/llama/tokenizer.json);
// streaming decoding; the pre-tokenizers' regexes and BPE's merge order on small vocabularies (no data
// needed); and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ember/gguf.h"
#include "ember/tokenizer.h"
#include "test_util.h"

namespace ember::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test_util::expect_error;
using Strings = std::vector<std::string>;
using Ids = std::vector<int64_t>;

const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD
const std::string kSmolLM2 = std::string(EMBER_DATA_DIR) + "/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

// The tokenizer metadata of SmolLM2's GGUF file, read once (its weights are dropped).
struct GgufVocabulary {
  Strings tokens;
  std::vector<int32_t> types;
  Strings merges;
  BpeOptions options;
};

const GgufVocabulary& smollm2_vocabulary() {
  static const GgufVocabulary vocabulary = [] {
    EXPECT_TRUE(fs::exists(kSmolLM2)) << kSmolLM2 << " is missing: run scripts/setup (it downloads SmolLM2 there)";
    const gguf::File file = gguf::load(kSmolLM2);
    GgufVocabulary v;
    v.tokens = file.value("tokenizer.ggml.tokens").to_vector<std::string>();
    v.types = file.value("tokenizer.ggml.token_type").to_vector<int32_t>();
    v.merges = file.value("tokenizer.ggml.merges").to_vector<std::string>();
    v.options.pre = file.value("tokenizer.ggml.pre").as_string();
    v.options.bos_id = file.value("tokenizer.ggml.bos_token_id").as_integer();
    v.options.eos_id = file.value("tokenizer.ggml.eos_token_id").as_integer();
    v.options.add_bos = file.value("tokenizer.ggml.add_bos_token").as_bool();
    // tokenizer.ggml.unknown_token_id (<|endoftext|>) is left out: Hugging Face's BPE has no unknown
    // token here and drops a byte without a token (SmolLM2's vocabulary lacks 21), as llama.cpp does.
    return v;
  }();
  return vocabulary;
}

// SmolLM2's tokenizer with the pre-tokenizer `pre` ("smollm", as its file says, unless told).
const BpeTokenizer& smollm2(const std::string& pre = "smollm") {
  static std::map<std::string, BpeTokenizer> tokenizers;
  auto it = tokenizers.find(pre);
  if (it == tokenizers.end()) {
    const GgufVocabulary& v = smollm2_vocabulary();
    BpeOptions options = v.options;
    options.pre = pre;
    it = tokenizers.emplace(pre, BpeTokenizer(v.tokens, v.types, v.merges, options)).first;
  }
  return it->second;
}

const json& reference() {
  static const json cases = [] {
    std::ifstream in(std::string(EMBER_TEST_DATA_DIR) + "/llama/tokenizer.json");
    EXPECT_TRUE(in.good()) << "tests/data/llama/tokenizer.json is missing (tests/llama/make_tokenizer.py writes it)";
    return json::parse(in);
  }();
  return cases;
}

std::string pieces(const BpeTokenizer& tokenizer, const Ids& ids) {
  std::string out;
  for (int64_t id : ids) out += tokenizer.id_to_token(id) + " ";
  return out;
}

// Each reference text's ids under `pre`, against the reference's `key`; the number that match.
int expect_reference_ids(const std::string& pre, const std::string& key, bool parse_special = true) {
  const BpeTokenizer& tokenizer = smollm2(pre);
  int matched = 0;
  for (const json& c : reference()) {
    const std::string text = c["text"].get<std::string>();
    const Ids expected = c[key].get<Ids>();
    const Ids got = tokenizer.encode(text, parse_special);
    if (got == expected) {
      ++matched;
    } else {
      ADD_FAILURE() << pre << " on \"" << text << "\"\n  ember:        " << pieces(tokenizer, got)
                    << "\n  Hugging Face: " << pieces(tokenizer, expected);
    }
  }
  return matched;
}

int texts() { return static_cast<int>(reference().size()); }

TEST(BpeHF, SmolLM2MatchesItsOwnTokenizer) {
  ASSERT_EQ(smollm2_vocabulary().options.pre, "smollm");
  ASSERT_GE(reference().size(), 31U);
  EXPECT_EQ(expect_reference_ids("smollm", "ids"), texts());
  // Special tokens written in the text, read as plain text.
  EXPECT_EQ(expect_reference_ids("smollm", "unsplit_ids", false), texts());
}

TEST(BpeHF, OtherPreTokenizersMatchHuggingFaceOnTheSameVocabulary) {
  // transformers' GGUF conversion knows no "smollm" and runs GPT-2's regex alone.
  EXPECT_EQ(expect_reference_ids("gpt2", "gguf_ids"), texts());
  EXPECT_EQ(expect_reference_ids("llama-bpe", "llama3_ids"), texts());
}

TEST(BpeHF, DecodeGivesTheTextBack) {
  const BpeTokenizer& tokenizer = smollm2();
  for (const json& c : reference()) {
    const std::string text = c["text"].get<std::string>();
    const std::string decoded = tokenizer.decode(c["ids"].get<Ids>());
    EXPECT_EQ(decoded, c["decoded"].get<std::string>()) << text;
    // Every text comes back but those with U+0004, which has no token in SmolLM2's vocabulary.
    if (text.find('\x04') == std::string::npos) {
      EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), text);
    } else {
      EXPECT_EQ(decoded.find('\x04'), std::string::npos);
    }
  }
}

TEST(BpeHF, Vocabulary) {
  const BpeTokenizer& tokenizer = smollm2();
  EXPECT_EQ(tokenizer.vocab_size(), 49152);
  EXPECT_EQ(tokenizer.encode("Hello world"), (Ids{19556, 905}));
  EXPECT_EQ(tokenizer.id_to_token(905), "Ġworld");
  EXPECT_EQ(tokenizer.token_bytes(905), " world");
  EXPECT_EQ(tokenizer.token_to_id("<|im_start|>"), 1);
  EXPECT_EQ(tokenizer.token_to_id(" world"), std::nullopt);  // tokens are spelled byte-level
  EXPECT_EQ(tokenizer.token_type(1), BpeTokenType::kControl);
  EXPECT_EQ(tokenizer.token_type(905), BpeTokenType::kNormal);
  EXPECT_EQ(tokenizer.options().bos_id, 1);
  EXPECT_EQ(tokenizer.options().eos_id, 2);
  EXPECT_FALSE(tokenizer.options().add_bos);
  EXPECT_EQ(tokenizer.decode({1, 19556, 2}), "<|im_start|>Hello<|im_end|>");  // control tokens as their text
  expect_error([&] { tokenizer.id_to_token(49152); }, {"[tokenizer] id 49152 is out of range"});
  expect_error([&] { tokenizer.decode({-1}); }, {"[tokenizer] id -1 is out of range"});

  BpeOptions options = smollm2_vocabulary().options;
  options.add_bos = true;
  const GgufVocabulary& v = smollm2_vocabulary();
  const BpeTokenizer with_bos(v.tokens, v.types, v.merges, options);
  EXPECT_EQ(with_bos.encode("Hello world"), (Ids{1, 19556, 905}));
  EXPECT_EQ(with_bos.encode(""), (Ids{1}));
}

TEST(BpeHF, StreamingDecoderHoldsCharactersSplitAcrossTokens) {
  const BpeTokenizer& tokenizer = smollm2();
  const std::string text = "Zoë says 👋🏽 to 日本語 👨‍👩‍👧!";
  const Ids ids = tokenizer.encode(text);
  BpeDecoder decoder(tokenizer);
  std::string streamed;
  int held = 0;  // pushes that completed no character
  for (int64_t id : ids) {
    const std::string part = decoder.push(id);
    EXPECT_EQ(part.find(kReplacement), std::string::npos) << "a U+FFFD after id " << id;
    held += part.empty() ? 1 : 0;
    streamed += part;
  }
  EXPECT_GT(held, 0);  // the emoji are split inside their bytes
  EXPECT_EQ(decoder.flush(), "");
  EXPECT_EQ(streamed, text);

  // The first token of 👋 (4 bytes) alone: held, then flushed as U+FFFD.
  const Ids wave = tokenizer.encode("👋");
  ASSERT_GT(wave.size(), 1U);
  EXPECT_EQ(decoder.push(wave[0]), "");
  EXPECT_EQ(decoder.flush(), kReplacement);
  EXPECT_EQ(tokenizer.decode({wave[0]}), kReplacement);
  // A control token after a cut character: the cut bytes are U+FFFD, then the token's text.
  EXPECT_EQ(decoder.push(wave[0]), "");
  EXPECT_EQ(decoder.push(2), kReplacement + "<|im_end|>");
  EXPECT_EQ(decoder.flush(), "");
}

// --- small vocabularies --------------------------------------------------------------------------

// GPT-2's stand-in for a byte (a test oracle apart from bpe.cpp's table).
std::string stand_in(int byte) {
  const bool prints = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE);
  int code = byte;
  if (!prints) {
    code = 256;
    for (int b = 0; b < byte; ++b) {
      code += (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE) ? 0 : 1;
    }
  }
  std::string out;
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
  return out;
}

// Every byte's stand-in (ids 0-255, in byte order), then `extra` tokens of `type`s (normal unless
// given), and `merges`.
BpeTokenizer small(const Strings& extra, const Strings& merges, BpeOptions options = {},
                   const std::vector<int32_t>& extra_types = {}) {
  Strings tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(stand_in(b));
  tokens.insert(tokens.end(), extra.begin(), extra.end());
  std::vector<int32_t> types(tokens.size(), 1);
  std::copy(extra_types.begin(), extra_types.end(), types.begin() + 256);
  return BpeTokenizer(tokens, types, merges, options);
}

BpeOptions with_pre(const std::string& pre) {
  BpeOptions options;
  options.pre = pre;
  return options;
}

Strings tokens_of(const BpeTokenizer& tokenizer, std::string_view text) {
  Strings out;
  for (int64_t id : tokenizer.encode(text)) out.push_back(tokenizer.id_to_token(id));
  return out;
}

TEST(Bpe, ByteStandIns) {
  EXPECT_EQ(stand_in(' '), "Ġ");
  EXPECT_EQ(stand_in('\n'), "Ċ");
  EXPECT_EQ(stand_in(0xAD), "Ń");
  const BpeTokenizer tokenizer = small({}, {});
  // No merges: a token per byte, each the byte's stand-in.
  EXPECT_EQ(tokenizer.encode("a é\n"), (Ids{'a', ' ', 0xC3, 0xA9, '\n'}));
  EXPECT_EQ(tokens_of(tokenizer, "a \n"), (Strings{"a", "Ġ", "Ċ"}));
  for (int b = 0; b < 256; ++b) EXPECT_EQ(tokenizer.token_bytes(b), std::string(1, static_cast<char>(b)));
}

TEST(Bpe, LowestRankMergesFirst) {
  // The rank decides, not the position.
  EXPECT_EQ(tokens_of(small({"ab", "bc"}, {"b c", "a b"}), "abc"), (Strings{"a", "bc"}));
  EXPECT_EQ(tokens_of(small({"ab", "bc"}, {"a b", "b c"}), "abc"), (Strings{"ab", "c"}));
  // Among equal ranks the leftmost: "aaa" is "aa" "a", and "aaaa" merges on to "aaaa".
  EXPECT_EQ(tokens_of(small({"aa"}, {"a a"}), "aaa"), (Strings{"aa", "a"}));
  EXPECT_EQ(tokens_of(small({"aa", "aaaa"}, {"a a", "aa aa"}), "aaaaa"), (Strings{"aaaa", "a"}));
  // A merge makes a pair of a lower rank than one waiting, which then is stale: "bc" then "abc",
  // and "c d" no longer applies.
  EXPECT_EQ(tokens_of(small({"bc", "abc", "cd"}, {"b c", "a bc", "c d"}), "abcd"), (Strings{"abc", "d"}));
  // A chain of merges builds the whole word.
  EXPECT_EQ(tokens_of(small({"ab", "cd", "abcd"}, {"c d", "a b", "ab cd"}), "abcd"), (Strings{"abcd"}));
  // Merges work on byte stand-ins, so they reach inside characters and across the space.
  EXPECT_EQ(tokens_of(small({"Ġa", "Ã©"}, {"Ġ a", "Ã ©"}), "é a"), (Strings{"Ã©", "Ġa"}));
  // Pieces never merge with each other: "a" and " a" are two pieces.
  EXPECT_EQ(tokens_of(small({"aĠ"}, {"a Ġ"}), "a a"), (Strings{"a", "Ġ", "a"}));
}

TEST(Bpe, LlamaBpeTakesAWholePieceThatIsAToken) {
  // "abc" is a token that no merge reaches: GPT-2's BPE never makes it, Llama 3's takes it whole.
  EXPECT_EQ(tokens_of(small({"bc", "abc"}, {"b c"}), "abc"), (Strings{"a", "bc"}));
  EXPECT_EQ(tokens_of(small({"bc", "abc"}, {"b c"}, with_pre("llama-bpe")), "abc"), (Strings{"abc"}));
  EXPECT_EQ(tokens_of(small({"bc", "abc"}, {"b c"}, with_pre("llama-bpe")), "abcc"), (Strings{"a", "bc", "c"}));
}

TEST(Bpe, ByteWithoutAToken) {
  const Strings tokens = {"<unk>", "a", "b", "ab"};
  const std::vector<int32_t> types = {2, 1, 1, 1};
  // Dropped before merging (its neighbours merge), as Hugging Face's BPE without an unknown token
  // drops it (llama.cpp drops it after: "a", "b")...
  const BpeTokenizer dropping(tokens, types, {"a b"});
  EXPECT_EQ(dropping.encode("acb"), (Ids{3}));
  // ... or the unknown token when there is one.
  BpeOptions unknown_options;
  unknown_options.unk_id = 0;
  const BpeTokenizer unknown(tokens, types, {"a b"}, unknown_options);
  EXPECT_EQ(unknown.encode("acb"), (Ids{1, 0, 2}));
  EXPECT_EQ(unknown.encode("é"), (Ids{0, 0}));  // one per byte
  EXPECT_EQ(unknown.decode({0}), "<unk>");
}

TEST(Bpe, DuplicateTokensAreLookedUpAsTheLastId) {
  const BpeTokenizer tokenizer = small({"ab", "ab"}, {"a b"});
  EXPECT_EQ(tokenizer.token_to_id("ab"), 257);
  EXPECT_EQ(tokenizer.encode("ab"), (Ids{257}));
  EXPECT_EQ(tokenizer.id_to_token(256), "ab");
  EXPECT_EQ(tokenizer.decode({256, 257}), "abab");
}

TEST(Bpe, SpecialTokens) {
  // 256 <s> (control), 257 <s><s> (control), 258 <user> (user-defined), 259 <u (normal).
  const BpeTokenizer tokenizer = small({"<s>", "<s><s>", "<user>", "<u"}, {}, {}, {3, 3, 4, 1});
  // The leftmost match, the longest there; the text around them as usual.
  EXPECT_EQ(tokenizer.encode("x<s><s><s>y"), (Ids{'x', 257, 256, 'y'}));
  EXPECT_EQ(tokenizer.encode("<s<user>"), (Ids{'<', 's', 258}));
  EXPECT_EQ(tokenizer.encode("a <s> b"), (Ids{'a', ' ', 256, ' ', 'b'}));
  // parse_special false: control tokens are text; user-defined ones still stand for themselves.
  EXPECT_EQ(tokenizer.encode("<s><user>", false), (Ids{'<', 's', '>', 258}));
  // Normal tokens are never matched in the text.
  EXPECT_EQ(tokenizer.encode("<u"), (Ids{'<', 'u'}));
  EXPECT_EQ(tokenizer.decode({256, 258, 'a'}), "<s><user>a");
  EXPECT_EQ(tokenizer.token_type(258), BpeTokenType::kUserDefined);
}

TEST(Bpe, Gpt2PreTokenizer) {
  const BpeTokenizer tokenizer = small({}, {}, with_pre("gpt2"));
  // \s+(?!\S) leaves the last space of a run to the word after it; at the end it takes them all.
  EXPECT_EQ(tokenizer.pre_tokenize("Hello  world"), (Strings{"Hello", " ", " world"}));
  EXPECT_EQ(tokenizer.pre_tokenize("a   "), (Strings{"a", "   "}));
  EXPECT_EQ(tokenizer.pre_tokenize("x \n y"), (Strings{"x", " \n", " y"}));
  EXPECT_EQ(tokenizer.pre_tokenize("   \n\n  x"), (Strings{"   \n\n ", " x"}));
  // Contractions are lower-case only; an apostrophe otherwise joins the punctuation around it.
  EXPECT_EQ(tokenizer.pre_tokenize("don't I'M 'sup !'s"),
            (Strings{"don", "'t", " I", "'", "M", " '", "sup", " !'", "s"}));
  EXPECT_EQ(tokenizer.pre_tokenize("3.14 123abc"), (Strings{"3", ".", "14", " 123", "abc"}));
  // Only U+0020 joins a word: other whitespace stands alone.
  EXPECT_EQ(tokenizer.pre_tokenize("\u00a0x\t\ty"), (Strings{"\u00a0", "x", "\t", "\t", "y"}));
  EXPECT_EQ(tokenizer.pre_tokenize("日本語 テキスト"), (Strings{"日本語", " テキスト"}));
  EXPECT_EQ(tokenizer.pre_tokenize("cafe\u0301!"), (Strings{"cafe", "\u0301!"}));  // a mark is no letter
  EXPECT_TRUE(tokenizer.pre_tokenize("").empty());
  EXPECT_EQ(small({}, {}).pre_tokenize("a 1"), (Strings{"a", " 1"}));  // "default" is GPT-2's
}

TEST(Bpe, SmolLMPreTokenizerSplitsDigits) {
  const BpeTokenizer tokenizer = small({}, {}, with_pre("smollm"));
  // Each digit alone; GPT-2's regex between them, its lookahead ending at a digit.
  EXPECT_EQ(tokenizer.pre_tokenize("a  1 and x 23"), (Strings{"a", "  ", "1", " and", " x", " ", "2", "3"}));
  EXPECT_EQ(tokenizer.pre_tokenize("½²x٣"), (Strings{"½", "²", "x", "٣"}));  // \p{N}, not only 0-9
}

TEST(Bpe, Llama3PreTokenizer) {
  const BpeTokenizer tokenizer = small({}, {}, with_pre("llama-bpe"));
  EXPECT_EQ(tokenizer.pre_tokenize("I'M 1234567"), (Strings{"I", "'M", " ", "123", "456", "7"}));
  EXPECT_EQ(tokenizer.pre_tokenize("\n\nhello \n hello"), (Strings{"\n\n", "hello", " \n", " hello"}));
  EXPECT_EQ(tokenizer.pre_tokenize("x!\n\ny 'hello"), (Strings{"x", "!\n\n", "y", " '", "hello"}));
  EXPECT_EQ(tokenizer.pre_tokenize("   \n\n  x"), (Strings{"   \n\n", " ", " x"}));
  EXPECT_EQ(tokenizer.pre_tokenize("\thello,world"), (Strings{"\thello", ",world"}));
}

TEST(Bpe, StreamingDecoderByteByByte) {
  const BpeTokenizer tokenizer = small({}, {});
  BpeDecoder decoder(tokenizer);
  // 👋 is F0 9F 91 8B: nothing until its last byte.
  EXPECT_EQ(decoder.push(0xF0), "");
  EXPECT_EQ(decoder.push(0x9F), "");
  EXPECT_EQ(decoder.push(0x91), "");
  EXPECT_EQ(decoder.push(0x8B), "👋");
  // A byte that begins nothing is U+FFFD at once; a cut sequence is one U+FFFD for all its bytes.
  EXPECT_EQ(decoder.push(0xFF), kReplacement);
  EXPECT_EQ(decoder.push(0xE2), "");
  EXPECT_EQ(decoder.push(0x82), "");
  EXPECT_EQ(decoder.push('a'), kReplacement + "a");
  // Surrogates and overlong forms are not UTF-8 either.
  EXPECT_EQ(decoder.push(0xED), "");
  EXPECT_EQ(decoder.push(0xA0), kReplacement + kReplacement);
  EXPECT_EQ(decoder.push(0xC0), kReplacement);
  // flush() gives what is held as U+FFFD and starts afresh.
  EXPECT_EQ(decoder.push(0xC3), "");
  EXPECT_EQ(decoder.flush(), kReplacement);
  EXPECT_EQ(decoder.flush(), "");
  EXPECT_EQ(decoder.push(0xC3), "");
  EXPECT_EQ(decoder.push(0xA9), "é");
  EXPECT_EQ(tokenizer.decode({0xC3, 0xA9, 0xC3}), "é" + kReplacement);
}

TEST(Bpe, Errors) {
  const BpeTokenizer tokenizer = small({}, {});
  expect_error([&] { tokenizer.encode("abc\xff"); }, {"[tokenizer] text is not valid UTF-8: byte 3 (0xff)"});
  expect_error([&] { tokenizer.encode("ab\xe2\x82"); }, {"byte 2 (0xe2)"});
  expect_error([&] { tokenizer.pre_tokenize("\xc0\xaf"); }, {"byte 0 (0xc0)"});
  expect_error([] { small({}, {}, with_pre("qwen2")); },
               {"[tokenizer] unknown BPE pre-tokenizer \"qwen2\"", "\"gpt2\"", "\"smollm\"", "\"llama-bpe\""});
  expect_error([] { small({"ab"}, {"a b", "a b c"}); }, {"merge 1 (\"a b c\") is not two tokens separated by"});
  expect_error([] { small({"ab"}, {"ab"}); }, {"merge 0 (\"ab\") is not two tokens"});
  expect_error([] { small({"ab"}, {"a  b"}); }, {"merge 0 (\"a  b\") is not two tokens"});
  expect_error([] { small({"ab"}, {" ab"}); }, {"merge 0 (\" ab\") is not two tokens"});
  expect_error([] { small({"ab"}, {"a b", "ab xy"}); }, {"merge 1 (\"ab xy\"): \"xy\" is not a token"});
  expect_error([] { small({}, {"a b"}); }, {"merge 0 (\"a b\"): \"ab\" is not a token"});
  expect_error([] { BpeTokenizer({"a", "b", "c"}, {1, 1}, {}); }, {"[tokenizer] 3 tokens but 2 token types"});
  expect_error([] { BpeTokenizer({}, {}, {}); }, {"[tokenizer] the vocabulary is empty"});
  expect_error([] { BpeTokenizer({"a", "b"}, {1, 7}, {}); }, {"[tokenizer] token 1 (\"b\") has type 7"});
  expect_error([] { BpeTokenizer({"a", "b\xff"}, {1, 1}, {}); }, {"[tokenizer] token 1 is not valid UTF-8: byte 1"});
  BpeOptions options;
  options.bos_id = 1;
  expect_error([&] { BpeTokenizer({"a"}, {1}, {}, options); },
               {"[tokenizer] bos_id 1 is out of range for a vocabulary of 1 tokens"});
  options = BpeOptions();
  options.add_bos = true;
  expect_error([&] { BpeTokenizer({"a"}, {1}, {}, options); }, {"[tokenizer] add_bos needs a bos_id"});
  expect_error([&] { tokenizer.token_type(256); }, {"[tokenizer] id 256 is out of range"});
}

}  // namespace
}  // namespace ember::data
