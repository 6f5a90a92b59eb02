// BERT's WordPiece tokenizer (ember/tokenizer.h). Unicode facts (categories, canonical
// decompositions, lower-case mappings) come from utf8proc; the rules that use them follow Hugging
// Face's `tokenizers` (BertNormalizer, BertPreTokenizer, WordPiece), which AutoTokenizer runs.
//
// Note [Unicode versions]: `tokenizers` reads categories from tables of Unicode 8/9 (the
// unicode_categories crate), utf8proc from Unicode 15. Characters assigned since then differ: a
// non-spacing mark or punctuation character added after Unicode 9 is stripped or split here and
// kept inside its word there, and an unassigned code point (category Cn) is kept by both. Text in
// the scripts BERT's vocabulary covers does not meet these characters.
#include <utf8proc.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "base/json_text.h"
#include "data/wordpiece_format.h"
#include "ember/error.h"
#include "ember/tokenizer.h"

namespace ember::data {
namespace {

namespace fs = std::filesystem;
using Codepoints = std::vector<char32_t>;

// --- character classes -------------------------------------------------------------------------

utf8proc_category_t category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }

// Removed by cleaning: control, format and private-use characters (tab, newline and carriage
// return are whitespace instead). Unassigned code points stay, as in `tokenizers`.
bool is_control(char32_t c) {
  if (c == U'\t' || c == U'\n' || c == U'\r') return false;
  const utf8proc_category_t cat = category(c);
  return cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CO ||
         cat == UTF8PROC_CATEGORY_CS;
}

// Unicode's White_Space property (Rust's char::is_whitespace, which `tokenizers` uses). Of its
// control characters (U+000B, U+000C, U+0085) cleaning removes the ones it meets first.
bool is_whitespace(char32_t c) {
  if ((c >= U'\t' && c <= U'\r') || c == U' ' || c == 0x85 || c == 0x2028 || c == 0x2029) return true;
  return category(c) == UTF8PROC_CATEGORY_ZS;
}

// ASCII's symbols (BERT counts $ + < = > ^ ` | ~ as punctuation too) and Unicode's P* categories.
bool is_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  const utf8proc_category_t cat = category(c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

// The CJK Unified Ideographs blocks BERT pads with spaces. The sixth range starts at 0x2B920 as in
// `tokenizers` (Google's BERT and the slow Python tokenizer start it at 0x2B820).
bool is_cjk_ideograph(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// --- UTF-8 -----------------------------------------------------------------------------------------

// `what` names the text in the error ("text", "vocab.txt line 7").
Codepoints decode_utf8(std::string_view text, const std::string& what) {
  Codepoints out;
  out.reserve(text.size());
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  const auto size = static_cast<utf8proc_ssize_t>(text.size());
  utf8proc_ssize_t at = 0;
  while (at < size) {
    utf8proc_int32_t c = 0;
    const utf8proc_ssize_t used = utf8proc_iterate(bytes + at, size - at, &c);
    EMBER_CHECK(used > 0, "[tokenizer] ", what, " is not valid UTF-8: byte ", at, " (0x", std::hex,
                static_cast<int>(bytes[at]), std::dec, ") does not start a valid sequence");
    out.push_back(static_cast<char32_t>(c));
    at += used;
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  utf8proc_uint8_t buffer[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buffer);
  out.append(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

std::string encode_utf8(const Codepoints& text, size_t begin, size_t end) {
  std::string out;
  out.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) append_utf8(out, text[i]);
  return out;
}

// --- normalization (BertNormalizer) ----------------------------------------------------------------

// Canonical decomposition (NFD): each character's full decomposition, then combining marks put in
// canonical order (a stable sort of each run of non-zero combining classes).
Codepoints nfd(const Codepoints& text) {
  Codepoints out;
  out.reserve(text.size());
  utf8proc_int32_t buffer[32];
  for (char32_t c : text) {
    int boundclass = 0;
    const utf8proc_ssize_t n =
        utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buffer, 32, UTF8PROC_DECOMPOSE, &boundclass);
    EMBER_CHECK(n > 0 && n <= 32, "[tokenizer] cannot decompose U+", std::hex, static_cast<uint32_t>(c));
    for (utf8proc_ssize_t i = 0; i < n; ++i) out.push_back(static_cast<char32_t>(buffer[i]));
  }
  auto combining_class = [](char32_t c) {
    return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
  };
  for (size_t start = 0; start < out.size();) {
    if (combining_class(out[start]) == 0) {
      ++start;
      continue;
    }
    size_t end = start;
    while (end < out.size() && combining_class(out[end]) != 0) ++end;
    std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(start), out.begin() + static_cast<std::ptrdiff_t>(end),
                     [&](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    start = end;
  }
  return out;
}

Codepoints normalize(const Codepoints& text, const WordPieceOptions& options) {
  Codepoints out;
  out.reserve(text.size());
  for (char32_t c : text) {
    if (c == 0 || c == 0xFFFD || is_control(c)) continue;
    if (is_whitespace(c)) c = U' ';
    if (options.tokenize_chinese_chars && is_cjk_ideograph(c)) {
      out.insert(out.end(), {U' ', c, U' '});
    } else {
      out.push_back(c);
    }
  }
  if (options.strip_accents.value_or(options.lower_case)) {
    out = nfd(out);
    std::erase_if(out, [](char32_t c) { return category(c) == UTF8PROC_CATEGORY_MN; });
  }
  if (options.lower_case) {
    Codepoints lower;
    lower.reserve(out.size());
    for (char32_t c : out) {
      if (c == 0x130) {  // İ: the one full lower-case mapping of two characters (i + combining dot)
        lower.insert(lower.end(), {U'i', 0x307});
      } else {
        lower.push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
      }
    }
    out = std::move(lower);
  }
  return out;
}

// --- files -----------------------------------------------------------------------------------------

std::string read_text_file(const fs::path& path, const char* what) {
  std::error_code error;
  EMBER_CHECK(fs::is_regular_file(path, error), "[tokenizer] ", what, " '", path.string(), "' does not exist");
  std::ifstream in(path, std::ios::binary);
  EMBER_CHECK(in.good(), "[tokenizer] cannot open ", what, " '", path.string(), "'");
  std::ostringstream contents;
  contents << in.rdbuf();
  EMBER_CHECK(!in.bad(), "[tokenizer] cannot read ", what, " '", path.string(), "'");
  return contents.str();
}

// A special token in tokenizer_config.json: a string, or an object with "content" (AddedToken).
void read_token(const nlohmann::json& config, const char* key, std::string& token) {
  if (!config.contains(key) || config[key].is_null()) return;
  const nlohmann::json& value = config[key];
  if (value.is_string()) {
    token = value.get<std::string>();
  } else if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    token = value["content"].get<std::string>();
  } else {
    EMBER_FAIL("[tokenizer] tokenizer_config.json: \"", key, "\" must be a string, got ",
               ember::detail::json_text(value));
  }
}

void read_bool(const nlohmann::json& config, const char* key, bool& flag) {
  if (!config.contains(key) || config[key].is_null()) return;
  EMBER_CHECK(config[key].is_boolean(), "[tokenizer] tokenizer_config.json: \"", key, "\" must be true or false, got ",
              ember::detail::json_text(config[key]));
  flag = config[key].get<bool>();
}

WordPieceOptions read_config(const fs::path& path) {
  std::error_code error;
  if (!fs::exists(path, error)) return {};
  return wordpiece_format::parse_config(read_text_file(path, "tokenizer config"), path.string());
}

// Heterogeneous lookup: find a std::string_view without building a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace

struct WordPieceTokenizer::Impl {
  std::vector<std::string> tokens;
  std::unordered_map<std::string, int64_t, StringHash, std::equal_to<>> ids;
  WordPieceOptions options;
  int64_t unk = 0, cls = 0, sep = 0, pad = 0;
  std::vector<std::string> specials;  // the special tokens in the vocabulary, longest first

  // Calls on_text(segment) for the text between special tokens and on_special(token) for each
  // special token written in `text` (the leftmost match, the longest there), in order.
  template <class OnText, class OnSpecial>
  void split_specials(std::string_view text, OnText on_text, OnSpecial on_special) const {
    size_t segment = 0;
    for (size_t at = 0; at < text.size();) {
      const auto match = std::find_if(specials.begin(), specials.end(),
                                      [&](const std::string& token) { return text.substr(at).starts_with(token); });
      if (match == specials.end()) {
        ++at;
        continue;
      }
      if (at > segment) on_text(text.substr(segment, at - segment));
      on_special(*match);
      at += match->size();
      segment = at;
    }
    if (segment < text.size()) on_text(text.substr(segment));
  }

  // Greedy longest match first: the longest vocabulary entry that starts the word, then the
  // longest "##" entry that starts the rest, ...; [UNK] for the whole word when a piece is missing.
  void word_pieces(const Codepoints& word, std::vector<std::string>& out) const {
    if (static_cast<int64_t>(word.size()) > options.max_input_chars_per_word) {
      out.push_back(options.unk_token);
      return;
    }
    const size_t first = out.size();
    std::string candidate;
    for (size_t start = 0; start < word.size();) {
      size_t end = word.size();
      for (; end > start; --end) {
        candidate = start > 0 ? "##" : "";
        candidate += encode_utf8(word, start, end);
        if (ids.contains(candidate)) break;
      }
      if (end == start) {  // no piece starts here
        out.resize(first);
        out.push_back(options.unk_token);
        return;
      }
      out.push_back(candidate);
      start = end;
    }
  }

  // The normalized words, each split off at whitespace and around punctuation.
  std::vector<Codepoints> words(std::string_view text) const {
    const Codepoints normalized = normalize(decode_utf8(text, "text"), options);
    std::vector<Codepoints> out;
    Codepoints word;
    auto flush = [&] {
      if (!word.empty()) out.push_back(std::move(word));
      word.clear();
    };
    for (char32_t c : normalized) {
      if (is_whitespace(c)) {
        flush();
      } else if (is_punctuation(c)) {
        flush();
        out.push_back({c});
      } else {
        word.push_back(c);
      }
    }
    flush();
    return out;
  }

  int64_t special_id(const std::string& token, const char* role) const {
    const auto it = ids.find(token);
    EMBER_CHECK(it != ids.end(), "[tokenizer] the vocabulary (", tokens.size(), " tokens) has no ", role, " token \"",
                token, "\"");
    return it->second;
  }
};

WordPieceTokenizer::WordPieceTokenizer(std::vector<std::string> vocab, WordPieceOptions options)
    : impl_(std::make_unique<Impl>()) {
  EMBER_CHECK(options.max_input_chars_per_word > 0, "[tokenizer] max_input_chars_per_word must be positive, got ",
              options.max_input_chars_per_word);
  EMBER_CHECK(options.model_max_length >= 2, "[tokenizer] model_max_length must be at least 2, got ",
              options.model_max_length);
  impl_->tokens = std::move(vocab);
  impl_->options = std::move(options);
  impl_->ids.reserve(impl_->tokens.size());
  for (size_t i = 0; i < impl_->tokens.size(); ++i) {
    const auto [it, inserted] = impl_->ids.emplace(impl_->tokens[i], static_cast<int64_t>(i));
    EMBER_CHECK(inserted, "[tokenizer] the vocabulary lists \"", impl_->tokens[i], "\" twice (ids ", it->second,
                " and ", i, ")");
  }
  impl_->unk = impl_->special_id(impl_->options.unk_token, "unknown");
  impl_->cls = impl_->special_id(impl_->options.cls_token, "classifier");
  impl_->sep = impl_->special_id(impl_->options.sep_token, "separator");
  impl_->pad = impl_->special_id(impl_->options.pad_token, "padding");
  const WordPieceOptions& o = impl_->options;
  for (const std::string& token : {o.unk_token, o.cls_token, o.sep_token, o.pad_token, o.mask_token}) {
    if (!token.empty() && impl_->ids.contains(token) &&
        std::find(impl_->specials.begin(), impl_->specials.end(), token) == impl_->specials.end()) {
      impl_->specials.push_back(token);
    }
  }
  std::stable_sort(impl_->specials.begin(), impl_->specials.end(),
                   [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
}

WordPieceTokenizer::~WordPieceTokenizer() = default;
WordPieceTokenizer::WordPieceTokenizer(WordPieceTokenizer&&) noexcept = default;
WordPieceTokenizer& WordPieceTokenizer::operator=(WordPieceTokenizer&&) noexcept = default;

WordPieceTokenizer WordPieceTokenizer::from_vocab_file(const std::string& path, WordPieceOptions options) {
  std::vector<std::string> vocab = wordpiece_format::parse_vocab(read_text_file(path, "vocab file"), path);
  try {
    return WordPieceTokenizer(std::move(vocab), std::move(options));
  } catch (const Error& e) {
    EMBER_FAIL(e.what(), " (in '", path, "')");
  }
}

WordPieceTokenizer WordPieceTokenizer::from_folder(const std::string& folder) {
  std::error_code error;
  EMBER_CHECK(fs::is_directory(folder, error), "[tokenizer] '", folder, "' is not a folder");
  return from_vocab_file((fs::path(folder) / "vocab.txt").string(),
                         read_config(fs::path(folder) / "tokenizer_config.json"));
}

std::vector<std::string> WordPieceTokenizer::basic_tokenize(std::string_view text) const {
  decode_utf8(text, "text");  // all of it valid before any part is used (the offsets in errors)
  std::vector<std::string> out;
  impl_->split_specials(
      text,
      [&](std::string_view segment) {
        for (const Codepoints& word : impl_->words(segment)) out.push_back(encode_utf8(word, 0, word.size()));
      },
      [&](const std::string& special) { out.push_back(special); });
  return out;
}

std::vector<std::string> WordPieceTokenizer::tokenize(std::string_view text) const {
  decode_utf8(text, "text");
  std::vector<std::string> out;
  impl_->split_specials(
      text,
      [&](std::string_view segment) {
        for (const Codepoints& word : impl_->words(segment)) impl_->word_pieces(word, out);
      },
      [&](const std::string& special) { out.push_back(special); });
  return out;
}

std::vector<int64_t> WordPieceTokenizer::encode(std::string_view text, std::optional<int64_t> max_length,
                                                bool add_special_tokens) const {
  const int64_t limit = max_length.value_or(impl_->options.model_max_length);
  const int64_t specials = add_special_tokens ? 2 : 0;
  EMBER_CHECK(limit >= specials, "[tokenizer] max_length must be at least ", specials, ", got ", limit);
  const std::vector<std::string> pieces = tokenize(text);
  const size_t kept = std::min(pieces.size(), static_cast<size_t>(limit - specials));
  std::vector<int64_t> ids;
  ids.reserve(kept + 2);
  if (add_special_tokens) ids.push_back(impl_->cls);
  for (size_t i = 0; i < kept; ++i) ids.push_back(impl_->ids.find(pieces[i])->second);
  if (add_special_tokens) ids.push_back(impl_->sep);
  return ids;
}

std::optional<int64_t> WordPieceTokenizer::token_to_id(std::string_view token) const {
  const auto it = impl_->ids.find(token);
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

const std::string& WordPieceTokenizer::id_to_token(int64_t id) const {
  EMBER_CHECK(id >= 0 && id < vocab_size(), "[tokenizer] id ", id, " is out of range for a vocabulary of ",
              vocab_size(), " tokens");
  return impl_->tokens[static_cast<size_t>(id)];
}

int64_t WordPieceTokenizer::vocab_size() const { return static_cast<int64_t>(impl_->tokens.size()); }
const WordPieceOptions& WordPieceTokenizer::options() const { return impl_->options; }
int64_t WordPieceTokenizer::unk_id() const { return impl_->unk; }
int64_t WordPieceTokenizer::cls_id() const { return impl_->cls; }
int64_t WordPieceTokenizer::sep_id() const { return impl_->sep; }
int64_t WordPieceTokenizer::pad_id() const { return impl_->pad; }

// --- the files ---------------------------------------------------------------------------------

namespace wordpiece_format {

std::vector<std::string> parse_vocab(std::string_view text, const std::string& path) {
  EMBER_CHECK(!text.empty(), "[tokenizer] vocab file '", path, "' is empty");
  EMBER_CHECK(text.find('\0') == std::string_view::npos, "[tokenizer] vocab file '", path,
              "' is not a text file (it holds NUL bytes)");
  std::vector<std::string> tokens;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string token(text.substr(start, end - start));
    while (!token.empty() && (token.back() == '\r' || token.back() == ' ' || token.back() == '\t')) token.pop_back();
    decode_utf8(token, "vocab file '" + path + "' line " + std::to_string(tokens.size() + 1));
    tokens.push_back(std::move(token));
    start = end + 1;
  }
  return tokens;
}

WordPieceOptions parse_config(std::string_view text, const std::string& path) {
  WordPieceOptions options;
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    EMBER_FAIL("[tokenizer] '", path, "' is not valid JSON: ", e.what());
  }
  EMBER_CHECK(config.is_object(), "[tokenizer] '", path, "' must hold a JSON object");
  read_bool(config, "do_lower_case", options.lower_case);
  read_bool(config, "tokenize_chinese_chars", options.tokenize_chinese_chars);
  if (config.contains("strip_accents") && !config["strip_accents"].is_null()) {
    bool strip = false;
    read_bool(config, "strip_accents", strip);
    options.strip_accents = strip;
  }
  if (config.contains("model_max_length")) {
    const nlohmann::json& value = config["model_max_length"];
    EMBER_CHECK(value.is_number() && value.get<double>() >= 2, "[tokenizer] tokenizer_config.json: model_max_length ",
                "must be a number of at least 2, got ", ember::detail::json_text(value));
    // Hugging Face writes 1e30 for "no limit".
    const double length = value.get<double>();
    options.model_max_length =
        length >= 9e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(value.get<double>());
  }
  read_token(config, "unk_token", options.unk_token);
  read_token(config, "cls_token", options.cls_token);
  read_token(config, "sep_token", options.sep_token);
  read_token(config, "pad_token", options.pad_token);
  read_token(config, "mask_token", options.mask_token);
  return options;
}

}  // namespace wordpiece_format

}  // namespace ember::data
