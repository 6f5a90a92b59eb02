// GPT-2's byte-level BPE tokenizer (ember/tokenizer.h), as llama.cpp's LLM_VOCAB_BPE and Hugging
// Face's `tokenizers` (ByteLevel pre-tokenizer and decoder, BPE model) run it for GGUF files. The
// pre-tokenizers' regexes are matched by hand over code points (utf8proc gives the categories), one
// function per regex, each alternative in the regex's order.
//
// Where llama.cpp differs (Hugging Face's ids are the reference): it drops a byte that has no token
// after merging, not before; it matches special tokens longest first over the whole text, not the
// leftmost first (which differ only when special tokens overlap); its "default" pre-tokenizer for
// BPE is not GPT-2's regex alone (ember's "default" is, as Hugging Face's ByteLevel).
//
// Note [Unicode versions]: as for WordPiece (wordpiece.cpp), utf8proc's tables are of Unicode 15;
// Oniguruma's (which `tokenizers` matches the regex with) may be of another version, so a letter or
// digit assigned since the older one can fall in another class. Text in the scripts the models'
// vocabularies cover does not meet these characters.
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ember/error.h"
#include "ember/tokenizer.h"

namespace ember::data {
namespace {

// --- bytes to printable characters ---------------------------------------------------------------

// GPT-2's bytes_to_unicode: the bytes that print as themselves in Latin-1 (! to ~, ¡ to ¬, ® to ÿ)
// stand for themselves; the other 68 (controls, space, DEL, NBSP, soft hyphen) take U+0100 onwards
// in byte order, so that every token is printable text with no spaces in it.
struct ByteTable {
  std::array<char32_t, 256> char_of{};
  std::array<int16_t, 256 + 68> byte_of{};  // -1 for characters that stand for no byte
};

const ByteTable& byte_table() {
  static const ByteTable table = [] {
    ByteTable t;
    t.byte_of.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool prints = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t.char_of[static_cast<size_t>(b)] = prints ? static_cast<char32_t>(b) : next++;
      t.byte_of[t.char_of[static_cast<size_t>(b)]] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return table;
}

void append_utf8(std::string& out, char32_t c) {
  utf8proc_uint8_t buffer[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buffer);
  out.append(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

std::string byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, byte_table().char_of[b]);
  return out;
}

// --- UTF-8 -----------------------------------------------------------------------------------------

// The code point at `text`[at] and its length in bytes; nullopt for bytes that are not valid UTF-8.
std::optional<std::pair<char32_t, size_t>> next_char(std::string_view text, size_t at) {
  utf8proc_int32_t c = 0;
  const utf8proc_ssize_t used = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + at),
                                                 static_cast<utf8proc_ssize_t>(text.size() - at), &c);
  if (used <= 0) return std::nullopt;
  return std::pair{static_cast<char32_t>(c), static_cast<size_t>(used)};
}

void check_utf8(std::string_view text, const std::string& what) {
  for (size_t at = 0; at < text.size();) {
    const auto c = next_char(text, at);
    EMBER_CHECK(c.has_value(), "[tokenizer] ", what, " is not valid UTF-8: byte ", at, " (0x", std::hex,
                static_cast<int>(static_cast<unsigned char>(text[at])), std::dec, ") does not start a valid sequence");
    at += c->second;
  }
}

// How the bytes at the start of `bytes` read as UTF-8 (Unicode's Table 3-7 of well-formed
// sequences): a whole character of `length` bytes, the first `length` bytes of one cut off by the
// end, or `length` bytes that begin none (the longest start of a sequence that goes wrong, or one
// stray byte: each such run is one U+FFFD, as Python and Rust replace them).
struct Utf8Prefix {
  enum Kind { kChar, kCut, kInvalid } kind;
  size_t length;
};

Utf8Prefix read_utf8_prefix(std::string_view bytes) {
  const auto lead = static_cast<unsigned char>(bytes[0]);
  if (lead < 0x80) return {Utf8Prefix::kChar, 1};
  size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // the range of the second byte; later ones are 80..BF
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // no overlong forms
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;  // nothing above U+10FFFF
  } else {
    return {Utf8Prefix::kInvalid, 1};
  }
  for (size_t i = 1; i < length; ++i) {
    if (i == bytes.size()) return {Utf8Prefix::kCut, i};
    const auto b = static_cast<unsigned char>(bytes[i]);
    const bool fits = i == 1 ? (b >= low && b <= high) : (b >= 0x80 && b <= 0xBF);
    if (!fits) return {Utf8Prefix::kInvalid, i};
  }
  return {Utf8Prefix::kChar, length};
}

// Moves the complete characters at the start of `pending` to `out` (each invalid run as U+FFFD),
// leaving a character cut off by the end in `pending`, or with `final` replacing it too.
void drain_utf8(std::string& pending, std::string& out, bool final) {
  size_t at = 0;
  while (at < pending.size()) {
    const Utf8Prefix prefix = read_utf8_prefix(std::string_view(pending).substr(at));
    if (prefix.kind == Utf8Prefix::kCut && !final) break;
    if (prefix.kind == Utf8Prefix::kChar) {
      out.append(pending, at, prefix.length);
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
    }
    at += prefix.length;
  }
  pending.erase(0, at);
}

// --- character classes -------------------------------------------------------------------------

// What the regexes ask of a character: \p{L}, \p{N}, \s, or none of these.
enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

// Unicode's White_Space property, which \s matches in Oniguruma and llama.cpp.
bool is_whitespace(char32_t c) {
  if ((c >= U'\t' && c <= U'\r') || c == U' ' || c == 0x85 || c == 0x2028 || c == 0x2029) return true;
  return utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_ZS;
}

CharClass classify(char32_t c) {
  if (c < 0x80) {  // the common case, without the table lookup
    if ((c >= U'a' && c <= U'z') || (c >= U'A' && c <= U'Z')) return CharClass::kLetter;
    if (c >= U'0' && c <= U'9') return CharClass::kNumber;
    return is_whitespace(c) ? CharClass::kSpace : CharClass::kOther;
  }
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return CharClass::kLetter;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return CharClass::kNumber;
    default:
      return is_whitespace(c) ? CharClass::kSpace : CharClass::kOther;
  }
}

// A text as code points, their classes and their byte offsets (offsets[size()] is the byte length),
// so that the pieces cut from it are byte ranges of the original.
struct Chars {
  std::vector<char32_t> chars;
  std::vector<CharClass> classes;
  std::vector<size_t> offsets;

  explicit Chars(std::string_view text) {  // `text` is valid UTF-8
    chars.reserve(text.size());
    offsets.reserve(text.size() + 1);
    for (size_t at = 0; at < text.size();) {
      const auto [c, length] = *next_char(text, at);
      chars.push_back(c);
      classes.push_back(classify(c));
      offsets.push_back(at);
      at += length;
    }
    offsets.push_back(text.size());
  }
  size_t size() const { return chars.size(); }
  bool is_line_break(size_t i) const { return chars[i] == U'\r' || chars[i] == U'\n'; }
  // The end of the run of `cls` characters that starts at i (i itself when it is not one).
  size_t run_end(size_t i, size_t end, CharClass cls) const {
    while (i < end && classes[i] == cls) ++i;
    return i;
  }
};

// --- the pre-tokenizers' regexes -------------------------------------------------------------------
//
// Each match_* returns the length (in characters, at least 1) of the regex's match at `i`, within
// [i, end): the first alternative that matches, as a backtracking engine takes it.

// 's 't 're 've 'm 'll 'd after an apostrophe at i (ASCII letters only; `any_case` for (?i:...)).
size_t match_contraction(const Chars& t, size_t i, size_t end, bool any_case) {
  auto letter = [&](size_t k) -> char32_t {
    if (k >= end) return 0;
    const char32_t c = t.chars[k];
    return any_case && c >= U'A' && c <= U'Z' ? c - U'A' + U'a' : c;
  };
  const char32_t first = letter(i + 1);
  if (first == U's' || first == U't' || first == U'm' || first == U'd') return 2;
  const char32_t second = letter(i + 2);
  if ((first == U'r' && second == U'e') || (first == U'v' && second == U'e') || (first == U'l' && second == U'l')) {
    return 3;
  }
  return 0;
}

// `\s+(?!\S)|\s+` at the start of a run of whitespace: all of it at the end of the text; before
// anything else all but its last character, which goes with what follows (" world"), unless the
// run is that one character.
size_t match_whitespace(const Chars& t, size_t i, size_t end) {
  const size_t run = t.run_end(i, end, CharClass::kSpace) - i;
  if (i + run == end || run == 1) return run;
  return run - 1;
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t match_gpt2(const Chars& t, size_t i, size_t end) {
  if (t.chars[i] == U'\'') {
    if (const size_t n = match_contraction(t, i, end, false)) return n;
  }
  // ` ?X+` for the three classes X: a space joins the run of letters, digits or others after it.
  const size_t start = t.chars[i] == U' ' && i + 1 < end && t.classes[i + 1] != CharClass::kSpace ? i + 1 : i;
  if (t.classes[start] != CharClass::kSpace) return t.run_end(start, end, t.classes[start]) - i;
  return match_whitespace(t, i, end);
}

// Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
size_t match_llama3(const Chars& t, size_t i, size_t end) {
  const CharClass cls = t.classes[i];
  if (t.chars[i] == U'\'') {
    if (const size_t n = match_contraction(t, i, end, true)) return n;
  }
  // Letters, after any one character that is not a line break, letter or digit (" world", "'hello").
  if (cls == CharClass::kLetter) return t.run_end(i, end, cls) - i;
  if (cls != CharClass::kNumber && !t.is_line_break(i) && i + 1 < end && t.classes[i + 1] == CharClass::kLetter) {
    return t.run_end(i + 1, end, CharClass::kLetter) - i;
  }
  if (cls == CharClass::kNumber) return std::min<size_t>(3, t.run_end(i, end, cls) - i);
  // Others after an optional space, with the line breaks that follow them.
  const size_t start = t.chars[i] == U' ' && i + 1 < end && t.classes[i + 1] == CharClass::kOther ? i + 1 : i;
  if (t.classes[start] == CharClass::kOther) {
    size_t k = t.run_end(start, end, CharClass::kOther);
    while (k < end && t.is_line_break(k)) ++k;
    return k - i;
  }
  // `\s*[\r\n]+`: whitespace up to its last line break.
  const size_t run_end = t.run_end(i, end, CharClass::kSpace);
  for (size_t k = run_end; k > i; --k) {
    if (t.is_line_break(k - 1)) return k - i;
  }
  return match_whitespace(t, i, end);
}

enum class Pre { kGpt2, kSmolLM, kLlama3 };

Pre pre_of(const std::string& name) {
  if (name == "default" || name == "gpt2") return Pre::kGpt2;
  if (name == "smollm") return Pre::kSmolLM;
  if (name == "llama-bpe") return Pre::kLlama3;
  EMBER_FAIL("[tokenizer] unknown BPE pre-tokenizer \"", name,
             "\": the supported ones are \"default\", \"gpt2\", \"smollm\" and \"llama-bpe\"");
}

// Appends the pieces of [begin, end) as character ranges.
void split(const Chars& t, size_t begin, size_t end, Pre pre, std::vector<std::pair<size_t, size_t>>& pieces) {
  for (size_t i = begin; i < end;) {
    size_t length = 0;
    if (pre == Pre::kSmolLM) {
      // Each digit is a piece; GPT-2's regex runs on the text between them, so that its lookahead
      // ends there (Hugging Face's Digits(individual_digits) before ByteLevel; llama.cpp's "\p{N}").
      if (t.classes[i] == CharClass::kNumber) {
        length = 1;
      } else {
        size_t stop = i;
        while (stop < end && t.classes[stop] != CharClass::kNumber) ++stop;
        split(t, i, stop, Pre::kGpt2, pieces);
        i = stop;
        continue;
      }
    } else {
      length = pre == Pre::kLlama3 ? match_llama3(t, i, end) : match_gpt2(t, i, end);
    }
    pieces.emplace_back(i, i + length);
    i += length;
  }
}

// Heterogeneous lookup: find a std::string_view without building a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

struct BpeTokenizer::Impl {
  std::vector<std::string> tokens;
  std::vector<BpeTokenType> types;
  std::vector<std::string> bytes;  // what each token decodes to
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids;
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  std::unordered_map<uint64_t, Merge> merges;  // (left id, right id) -> rank and the merged token
  std::array<int32_t, 256> byte_ids{};         // the token of each single byte, -1 when there is none
  BpeOptions options;
  Pre pre = Pre::kGpt2;
  bool ignore_merges = false;              // a piece that is a token is that token (Llama 3)
  std::vector<int32_t> specials;           // control and user-defined tokens, longest first
  std::array<bool, 256> starts_special{};  // the first bytes of the specials' texts

  void check_id(std::optional<int64_t> id, const char* what) const {
    EMBER_CHECK(!id || (*id >= 0 && *id < static_cast<int64_t>(tokens.size())), "[tokenizer] ", what, " ", *id,
                " is out of range for a vocabulary of ", tokens.size(), " tokens");
  }

  void read_merges(const std::vector<std::string>& merge_list) {
    merges.reserve(merge_list.size());
    for (size_t rank = 0; rank < merge_list.size(); ++rank) {
      const std::string& merge = merge_list[rank];
      const size_t space = merge.find(' ');
      EMBER_CHECK(space != std::string::npos && space > 0 && space + 1 < merge.size() &&
                      merge.find(' ', space + 1) == std::string::npos,
                  "[tokenizer] merge ", rank, " (\"", merge, "\") is not two tokens separated by one space");
      const std::string_view left = std::string_view(merge).substr(0, space);
      const std::string_view right = std::string_view(merge).substr(space + 1);
      const auto left_id = ids.find(left), right_id = ids.find(right);
      EMBER_CHECK(left_id != ids.end(), "[tokenizer] merge ", rank, " (\"", merge, "\"): \"", left,
                  "\" is not a token");
      EMBER_CHECK(right_id != ids.end(), "[tokenizer] merge ", rank, " (\"", merge, "\"): \"", right,
                  "\" is not a token");
      const std::string joined = std::string(left) + std::string(right);
      const auto merged = ids.find(joined);
      EMBER_CHECK(merged != ids.end(), "[tokenizer] merge ", rank, " (\"", merge, "\"): \"", joined,
                  "\" is not a token");
      // A pair listed twice keeps its first (lowest) rank, as llama.cpp does.
      merges.emplace(pair_key(left_id->second, right_id->second), Merge{static_cast<int32_t>(rank), merged->second});
    }
  }

  // The special token written at `text`[at] (the longest there), or -1. Without parse_special only
  // user-defined tokens count.
  int32_t special_at(std::string_view text, size_t at, bool parse_special) const {
    if (!starts_special[static_cast<unsigned char>(text[at])]) return -1;
    for (int32_t id : specials) {
      const auto i = static_cast<size_t>(id);
      if ((parse_special || types[i] == BpeTokenType::kUserDefined) && text.substr(at).starts_with(tokens[i])) {
        return id;
      }
    }
    return -1;
  }

  // Calls on_text(segment) for the text between special tokens and on_special(id) for each special
  // token written in `text` (the leftmost match, the longest there), in order.
  template <class OnText, class OnSpecial>
  void split_specials(std::string_view text, bool parse_special, OnText on_text, OnSpecial on_special) const {
    size_t segment = 0;
    for (size_t at = 0; at < text.size();) {
      const int32_t id = special_at(text, at, parse_special);
      if (id < 0) {
        ++at;
        continue;
      }
      if (at > segment) on_text(text.substr(segment, at - segment));
      on_special(id);
      at += tokens[static_cast<size_t>(id)].size();
      segment = at;
    }
    if (segment < text.size()) on_text(text.substr(segment));
  }

  // Step 3 for one piece (its raw bytes): appends its tokens' ids.
  void merge_piece(std::string_view piece, std::vector<int64_t>& out) const {
    if (ignore_merges) {
      const auto it = ids.find(byte_level(piece));
      if (it != ids.end()) {
        out.push_back(it->second);
        return;
      }
    }
    // The symbols, a list linked in both directions (a merged symbol keeps the left one's slot).
    struct Symbol {
      int32_t id;
      int32_t prev, next;  // -1 at the ends
    };
    std::vector<Symbol> symbols;
    symbols.reserve(piece.size());
    for (unsigned char byte : piece) {
      // A byte without a token is the unknown token, or without one it is dropped before merging (so
      // its neighbours may merge), as Hugging Face's BPE does: SmolLM2's vocabulary lacks 21 bytes
      // and its tokenizer.json sets no unk_token. (llama.cpp drops it after merging.)
      const int32_t id = byte_ids[byte] >= 0 ? byte_ids[byte] : static_cast<int32_t>(options.unk_id.value_or(-1));
      if (id < 0) continue;
      const auto i = static_cast<int32_t>(symbols.size());
      symbols.push_back({id, i - 1, i + 1});
    }
    if (symbols.empty()) return;
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.back().next = -1;
    // Candidate merges, lowest rank first and the leftmost among equals. A candidate is stale when
    // either symbol has changed since it was queued.
    struct Candidate {
      int32_t rank, left, left_id, right_id, merged;
      bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    auto consider = [&](int32_t left) {
      if (left < 0 || symbols[static_cast<size_t>(left)].next < 0) return;
      const Symbol& a = symbols[static_cast<size_t>(left)];
      const Symbol& b = symbols[static_cast<size_t>(a.next)];
      const auto it = merges.find(pair_key(a.id, b.id));
      if (it != merges.end()) queue.push({it->second.rank, left, a.id, b.id, it->second.merged});
    };
    for (int32_t i = 0; i + 1 < n; ++i) consider(i);
    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      Symbol& a = symbols[static_cast<size_t>(c.left)];
      if (a.id != c.left_id || a.next < 0) continue;
      Symbol& b = symbols[static_cast<size_t>(a.next)];
      if (b.id != c.right_id) continue;
      a.id = c.merged;
      b.id = -2;  // merged away (a stale candidate's ids never match it)
      a.next = b.next;
      if (a.next >= 0) symbols[static_cast<size_t>(a.next)].prev = c.left;
      consider(a.prev);
      consider(c.left);
    }
    for (const Symbol* symbol = &symbols[0];; symbol = &symbols[static_cast<size_t>(symbol->next)]) {
      out.push_back(symbol->id);
      if (symbol->next < 0) break;
    }
  }
};

BpeTokenizer::BpeTokenizer(std::vector<std::string> tokens, std::vector<int32_t> token_types,
                           std::vector<std::string> merges, BpeOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  EMBER_CHECK(!tokens.empty(), "[tokenizer] the vocabulary is empty");
  EMBER_CHECK(tokens.size() == token_types.size(), "[tokenizer] ", tokens.size(), " tokens but ", token_types.size(),
              " token types: there must be one type per token");
  EMBER_CHECK(tokens.size() <= static_cast<size_t>(INT32_MAX), "[tokenizer] ", tokens.size(),
              " tokens are more than ids of 32 bits hold");
  d.tokens = std::move(tokens);
  d.options = std::move(options);
  d.pre = pre_of(d.options.pre);
  // Llama 3's tokenizer.json sets BPE's ignore_merges, and llama.cpp's llama-bpe does too.
  d.ignore_merges = d.pre == Pre::kLlama3;
  d.check_id(d.options.bos_id, "bos_id");
  d.check_id(d.options.eos_id, "eos_id");
  d.check_id(d.options.unk_id, "unk_id");
  EMBER_CHECK(!d.options.add_bos || d.options.bos_id.has_value(), "[tokenizer] add_bos needs a bos_id");

  const ByteTable& table = byte_table();
  d.types.reserve(d.tokens.size());
  d.bytes.reserve(d.tokens.size());
  d.ids.reserve(d.tokens.size());
  for (size_t id = 0; id < d.tokens.size(); ++id) {
    const std::string& token = d.tokens[id];
    const int32_t type = token_types[id];
    EMBER_CHECK(type >= 0 && type <= 6, "[tokenizer] token ", id, " (\"", token, "\") has type ", type,
                ", not one of 0 (undefined) to 6 (byte)");
    d.types.push_back(static_cast<BpeTokenType>(type));
    check_utf8(token, "token " + std::to_string(id));
    // A duplicate takes the later id, as llama.cpp's and Hugging Face's maps from text to id do.
    // An empty token (llama.cpp renames them) is never produced.
    if (!token.empty()) d.ids.insert_or_assign(token, static_cast<int32_t>(id));

    const BpeTokenType t = d.types.back();
    std::string decoded;
    if (t == BpeTokenType::kControl || t == BpeTokenType::kUserDefined || t == BpeTokenType::kUnknown) {
      decoded = token;
    } else {
      // Each stand-in back to its byte; a token with a character that stands for no byte is its
      // text as it is (as Hugging Face's ByteLevel decoder takes it).
      for (size_t at = 0; at < token.size();) {
        const auto [c, length] = *next_char(token, at);
        if (c >= table.byte_of.size() || table.byte_of[c] < 0) {
          decoded = token;
          break;
        }
        decoded += static_cast<char>(table.byte_of[c]);
        at += length;
      }
    }
    d.bytes.push_back(std::move(decoded));
  }
  for (size_t b = 0; b < 256; ++b) {
    std::string stand_in;
    append_utf8(stand_in, table.char_of[b]);
    const auto it = d.ids.find(stand_in);
    d.byte_ids[b] = it == d.ids.end() ? -1 : it->second;
  }
  d.read_merges(merges);

  for (const auto& [token, id] : d.ids) {
    const BpeTokenType t = d.types[static_cast<size_t>(id)];
    if (t != BpeTokenType::kControl && t != BpeTokenType::kUserDefined) continue;
    d.specials.push_back(id);
    d.starts_special[static_cast<unsigned char>(token[0])] = true;
  }
  std::sort(d.specials.begin(), d.specials.end(), [&](int32_t a, int32_t b) {
    const size_t size_a = d.tokens[static_cast<size_t>(a)].size(), size_b = d.tokens[static_cast<size_t>(b)].size();
    return size_a != size_b ? size_a > size_b : a < b;
  });
}

BpeTokenizer::~BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;

std::vector<int64_t> BpeTokenizer::encode(std::string_view text, bool parse_special) const {
  check_utf8(text, "text");  // all of it valid before any part is used (the offsets in errors)
  std::vector<int64_t> out;
  out.reserve(text.size() / 3 + 2);
  if (impl_->options.add_bos) out.push_back(*impl_->options.bos_id);
  std::vector<std::pair<size_t, size_t>> pieces;
  impl_->split_specials(
      text, parse_special,
      [&](std::string_view segment) {
        const Chars chars(segment);
        pieces.clear();
        split(chars, 0, chars.size(), impl_->pre, pieces);
        for (const auto& [begin, end] : pieces) {
          impl_->merge_piece(segment.substr(chars.offsets[begin], chars.offsets[end] - chars.offsets[begin]), out);
        }
      },
      [&](int32_t id) { out.push_back(id); });
  return out;
}

std::vector<std::string> BpeTokenizer::pre_tokenize(std::string_view text) const {
  check_utf8(text, "text");
  const Chars chars(text);
  std::vector<std::pair<size_t, size_t>> pieces;
  split(chars, 0, chars.size(), impl_->pre, pieces);
  std::vector<std::string> out;
  out.reserve(pieces.size());
  for (const auto& [begin, end] : pieces) {
    out.emplace_back(text.substr(chars.offsets[begin], chars.offsets[end] - chars.offsets[begin]));
  }
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string pending, out;
  for (int64_t id : ids) pending += token_bytes(id);
  drain_utf8(pending, out, true);
  return out;
}

const std::string& BpeTokenizer::token_bytes(int64_t id) const {
  EMBER_CHECK(id >= 0 && id < vocab_size(), "[tokenizer] id ", id, " is out of range for a vocabulary of ",
              vocab_size(), " tokens");
  return impl_->bytes[static_cast<size_t>(id)];
}

std::optional<int64_t> BpeTokenizer::token_to_id(std::string_view token) const {
  const auto it = impl_->ids.find(token);
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

const std::string& BpeTokenizer::id_to_token(int64_t id) const {
  EMBER_CHECK(id >= 0 && id < vocab_size(), "[tokenizer] id ", id, " is out of range for a vocabulary of ",
              vocab_size(), " tokens");
  return impl_->tokens[static_cast<size_t>(id)];
}

BpeTokenType BpeTokenizer::token_type(int64_t id) const {
  id_to_token(id);  // the range check
  return impl_->types[static_cast<size_t>(id)];
}

int64_t BpeTokenizer::vocab_size() const { return static_cast<int64_t>(impl_->tokens.size()); }
const BpeOptions& BpeTokenizer::options() const { return impl_->options; }

std::string BpeDecoder::push(int64_t id) {
  pending_ += tokenizer_->token_bytes(id);
  std::string out;
  drain_utf8(pending_, out, false);
  return out;
}

std::string BpeDecoder::flush() {
  std::string out;
  drain_utf8(pending_, out, true);
  return out;
}

}  // namespace ember::data
