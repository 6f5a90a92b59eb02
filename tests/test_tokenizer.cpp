// The WordPiece tokenizer: ids identical to Hugging Face's tokenizer for the MiniLM in data/minilm
// on tricky texts (tests/golden/make_minilm.py wrote minilm.json), one at a time and as a padded
// batch; its rules on a small vocabulary (no data needed); and its errors: invalid UTF-8, missing
// or corrupt vocab files, a malformed config.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/tokenizer.h"
#include "minilm_golden.h"

namespace ember::data {
namespace {

namespace fs = std::filesystem;
using minilm_golden::expect_error;
using minilm_golden::golden;
using minilm_golden::kMiniLM;
using nlohmann::json;

// The MiniLM tokenizer, read once; a clear failure when scripts/setup has not fetched it.
const WordPieceTokenizer& minilm() {
  static const WordPieceTokenizer tokenizer = [] {
    if (!fs::exists(kMiniLM + "/vocab.txt")) {
      ADD_FAILURE() << kMiniLM << " is missing: run scripts/setup (it downloads all-MiniLM-L6-v2 there)";
    }
    return WordPieceTokenizer::from_folder(kMiniLM);
  }();
  return tokenizer;
}

std::vector<int64_t> row(const Tensor& t, int64_t i) {
  const Tensor r = t.select(0, i).contiguous();
  const auto* p = r.data_ptr<int64_t>();
  return {p, p + r.numel()};
}

// A folder per test, removed afterwards.
class TokenizerFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("ember_tokenizer_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1)));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
  }
  std::string folder() const { return dir_.string(); }
  fs::path dir_;
};

const std::vector<std::string> kSmallVocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un",    "##aff", "##able",
                                              "cafe",  "café",  "Café",  ",",     "!",      "hello", "##s",   "a",
                                              "##b",   "的",    "x",     "##x",   "[",      "]"};

TEST(TokenizerHF, MatchesHuggingFaceOnTrickyTexts) {
  const WordPieceTokenizer& tokenizer = minilm();
  ASSERT_EQ(tokenizer.vocab_size(), 30522);
  ASSERT_EQ(golden()["tokenizer"]["model_max_length"].get<int64_t>(), tokenizer.options().model_max_length);
  for (const json& c : golden()["tokenizer"]["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const std::optional<int64_t> max_length =
        c["max_length"].is_null() ? std::nullopt : std::optional<int64_t>(c["max_length"].get<int64_t>());
    const std::vector<int64_t> expected = c["ids"].get<std::vector<int64_t>>();
    const std::vector<int64_t> got = tokenizer.encode(text, max_length);
    if (got != expected) {
      std::string got_tokens, expected_tokens;
      for (int64_t id : got) got_tokens += tokenizer.id_to_token(id) + " ";
      for (int64_t id : expected) expected_tokens += tokenizer.id_to_token(id) + " ";
      ADD_FAILURE() << "case " << c["name"].get<std::string>() << "\n  ember:        " << got_tokens
                    << "\n  Hugging Face: " << expected_tokens;
    }
  }
}

TEST(TokenizerHF, BatchIsPaddedAndTruncatedAsHuggingFace) {
  const json& batch = golden()["tokenizer"]["batch"];
  const auto texts = batch["texts"].get<std::vector<std::string>>();
  const BatchEncoding encoded = minilm().encode_batch(texts, batch["max_length"].get<int64_t>());
  const auto input_ids = batch["input_ids"].get<std::vector<std::vector<int64_t>>>();
  ASSERT_EQ(encoded.input_ids.shape(), (Shape{static_cast<int64_t>(texts.size()), 256}));
  EXPECT_EQ(encoded.input_ids.dtype(), DType::kInt64);
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto b = static_cast<int64_t>(i);
    EXPECT_EQ(row(encoded.input_ids, b), input_ids[i]) << "text " << i;
    EXPECT_EQ(row(encoded.attention_mask, b), batch["attention_mask"][i].get<std::vector<int64_t>>()) << "text " << i;
    EXPECT_EQ(row(encoded.token_type_ids, b), batch["token_type_ids"][i].get<std::vector<int64_t>>()) << "text " << i;
  }
}

TEST(TokenizerHF, PiecesOfWords) {
  const WordPieceTokenizer& tokenizer = minilm();
  EXPECT_EQ(tokenizer.tokenize("Crème brûlée"), (std::vector<std::string>{"cr", "##eme", "br", "##ule", "##e"}));
  EXPECT_EQ(tokenizer.basic_tokenize(" Hello,\tWORLD! 東京 "),
            (std::vector<std::string>{"hello", ",", "world", "!", "東", "京"}));
  EXPECT_EQ(tokenizer.cls_id(), 101);
  EXPECT_EQ(tokenizer.sep_id(), 102);
  EXPECT_EQ(tokenizer.pad_id(), 0);
  EXPECT_EQ(tokenizer.unk_id(), 100);
  EXPECT_EQ(tokenizer.token_to_id("hello"), 7592);
  EXPECT_EQ(tokenizer.token_to_id("no-such-token"), std::nullopt);
  EXPECT_EQ(tokenizer.id_to_token(7592), "hello");
  EXPECT_NE(expect_error([&] { tokenizer.id_to_token(30522); }).find("[tokenizer] id 30522 is out of range"),
            std::string::npos);
}

TEST(Tokenizer, SmallVocabularyRules) {
  const WordPieceTokenizer tokenizer(kSmallVocab);
  // Greedy longest match with ## continuations; a word with an unknown piece is one [UNK].
  EXPECT_EQ(tokenizer.tokenize("unaffable"), (std::vector<std::string>{"un", "##aff", "##able"}));
  EXPECT_EQ(tokenizer.tokenize("unaffablez"), (std::vector<std::string>{"[UNK]"}));
  // Lower-cased with accents stripped (the uncased default): "Café" becomes "cafe".
  EXPECT_EQ(tokenizer.tokenize("Café, hellos!"), (std::vector<std::string>{"cafe", ",", "hello", "##s", "!"}));
  // CJK ideographs are words of their own; punctuation splits words.
  EXPECT_EQ(tokenizer.tokenize("a的b"), (std::vector<std::string>{"a", "的", "[UNK]"}));
  EXPECT_EQ(tokenizer.tokenize("ab"), (std::vector<std::string>{"a", "##b"}));
  // 100 characters are a word; 101 are [UNK].
  EXPECT_EQ(tokenizer.tokenize(std::string(100, 'x')).size(), 100U);
  EXPECT_EQ(tokenizer.tokenize(std::string(101, 'x')), (std::vector<std::string>{"[UNK]"}));
  // Special tokens written in the text stand for themselves (case-sensitive).
  EXPECT_EQ(tokenizer.tokenize("a[SEP]b [mask]"), (std::vector<std::string>{"a", "[SEP]", "[UNK]", "[", "[UNK]", "]"}));
  // Control characters vanish; every whitespace separates.
  EXPECT_EQ(tokenizer.tokenize(std::string("a\0b", 3) + "\u200b\u00a0a"), (std::vector<std::string>{"a", "##b", "a"}));
  EXPECT_TRUE(tokenizer.tokenize("").empty());
  EXPECT_EQ(tokenizer.encode(""), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(tokenizer.encode("ab ab", 4), (std::vector<int64_t>{2, 15, 16, 3}));  // "a", "##b" kept of 4 pieces
  EXPECT_EQ(tokenizer.encode("a", std::nullopt, false), (std::vector<int64_t>{15}));

  // Cased: accents and case kept unless asked.
  WordPieceOptions options;
  options.lower_case = false;
  const WordPieceTokenizer cased(kSmallVocab, options);
  EXPECT_EQ(cased.tokenize("Café café cafe"), (std::vector<std::string>{"Café", "café", "cafe"}));
  options.strip_accents = true;
  const WordPieceTokenizer stripped(kSmallVocab, options);
  EXPECT_EQ(stripped.tokenize("café"), (std::vector<std::string>{"cafe"}));

  const BatchEncoding batch = tokenizer.encode_batch({"a", "unaffable cafe", ""});
  EXPECT_EQ(batch.input_ids.shape(), (Shape{3, 6}));
  EXPECT_EQ(row(batch.input_ids, 0), (std::vector<int64_t>{2, 15, 3, 0, 0, 0}));
  EXPECT_EQ(row(batch.attention_mask, 1), (std::vector<int64_t>{1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(row(batch.attention_mask, 2), (std::vector<int64_t>{1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(tokenizer.encode_batch({}).input_ids.shape(), (Shape{0, 0}));
}

TEST(Tokenizer, InvalidUtf8IsAnError) {
  const WordPieceTokenizer tokenizer(kSmallVocab);
  for (const std::string& bad : {std::string("abc\xff"), std::string("ab\xe2\x82"), std::string("\xc0\xaf"),
                                 std::string("x\xed\xa0\x80"), std::string("\x80")}) {
    const std::string message = expect_error([&] { tokenizer.tokenize(bad); });
    EXPECT_NE(message.find("[tokenizer] text is not valid UTF-8: byte "), std::string::npos) << message;
  }
  EXPECT_NE(expect_error([&] { tokenizer.encode("abc\xff"); }).find("byte 3 (0xff)"), std::string::npos);
  EXPECT_NE(expect_error([&] { tokenizer.encode("a", 1); }).find("max_length must be at least 2"), std::string::npos);
}

TEST(Tokenizer, VocabularyErrors) {
  EXPECT_NE(expect_error([] {
              WordPieceTokenizer({"[UNK]", "[CLS]", "[SEP]"});
            }).find("[tokenizer] the vocabulary (3 tokens) has no padding token \"[PAD]\""),
            std::string::npos);
  EXPECT_NE(expect_error([] {
              WordPieceTokenizer({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "a"});
            }).find("lists \"a\" twice (ids 4 and 5)"),
            std::string::npos);
}

TEST_F(TokenizerFiles, MissingFolderAndVocab) {
  EXPECT_NE(expect_error([&] { WordPieceTokenizer::from_folder(folder() + "/nope"); }).find("is not a folder"),
            std::string::npos);
  const std::string message = expect_error([&] { WordPieceTokenizer::from_folder(folder()); });
  EXPECT_NE(message.find("[tokenizer] vocab file '" + folder() + "/vocab.txt' does not exist"), std::string::npos)
      << message;
}

TEST_F(TokenizerFiles, CorruptVocab) {
  write("vocab.txt", "");
  EXPECT_NE(expect_error([&] { WordPieceTokenizer::from_folder(folder()); }).find("is empty"), std::string::npos);
  write("vocab.txt", std::string("[PAD]\n[UNK]\0\0\0\x01\x02", 14));
  EXPECT_NE(expect_error([&] { WordPieceTokenizer::from_folder(folder()); }).find("not a text file"),
            std::string::npos);
  write("vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nca\xfe\n");
  std::string message = expect_error([&] { WordPieceTokenizer::from_folder(folder()); });
  EXPECT_NE(message.find("vocab file '" + folder() + "/vocab.txt' line 5 is not valid UTF-8"), std::string::npos)
      << message;
  write("vocab.txt", "[PAD]\n[UNK]\n[SEP]\nhello\n");
  message = expect_error([&] { WordPieceTokenizer::from_folder(folder()); });
  EXPECT_NE(message.find("has no classifier token \"[CLS]\""), std::string::npos) << message;
  EXPECT_NE(message.find("vocab.txt"), std::string::npos) << message;

  // A good vocabulary (Windows line ends, no newline at the end) with a malformed config.
  write("vocab.txt", "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\nhello");
  write("tokenizer_config.json", "{\"do_lower_case\": tru");
  EXPECT_NE(expect_error([&] { WordPieceTokenizer::from_folder(folder()); }).find("is not valid JSON"),
            std::string::npos);
  write("tokenizer_config.json", "{\"do_lower_case\": \"yes\"}");
  EXPECT_NE(expect_error([&] {
              WordPieceTokenizer::from_folder(folder());
            }).find("\"do_lower_case\" must be true or false, got \"yes\""),
            std::string::npos);
  // Nested deeper than a recursive dump of it (for the message) had stack for: from_folder crashed.
  write("tokenizer_config.json", "{\"unk_token\": " + std::string(200000, '[') + std::string(200000, ']') + "}");
  EXPECT_NE(expect_error([&] {
              WordPieceTokenizer::from_folder(folder());
            }).find("\"unk_token\" must be a string, got an array of 1 item"),
            std::string::npos);
  write("tokenizer_config.json",
        "{\"do_lower_case\": false, \"model_max_length\": 1e30, \"unk_token\": "
        "{\"content\": \"[UNK]\"}}");
  const WordPieceTokenizer tokenizer = WordPieceTokenizer::from_folder(folder());
  EXPECT_EQ(tokenizer.vocab_size(), 5);
  EXPECT_FALSE(tokenizer.options().lower_case);
  EXPECT_EQ(tokenizer.options().model_max_length, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(tokenizer.encode("hello Hello"), (std::vector<int64_t>{2, 4, 1, 3}));
}

}  // namespace
}  // namespace ember::data
