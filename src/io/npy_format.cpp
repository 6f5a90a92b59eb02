// The byte level of NumPy .npy files (npy_format.h): the preamble is validated and the header's
// Python literal parsed strictly before either is trusted, and np.save's header is written byte
// for byte.
#include "io/npy_format.h"

#include <algorithm>
#include <array>
#include <bit>
#include <span>
#include <utility>
#include <vector>

#include "ember/error.h"

namespace ember::npy_format {
namespace {

// ember reads and writes tensor memory as it is; '<' data needs no swap on this host.
static_assert(std::endian::native == std::endian::little, ".npy IO assumes a little-endian host");

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr size_t kVersionOffset = 6;           // after the magic: major, minor
constexpr size_t kLengthOffset = 8;            // the header length, 2 or 4 bytes
constexpr size_t kMaxPreambleBytes = 12;       // magic, version and a 4-byte length
constexpr size_t kGrowthAxisMaxDigits = 21;    // np.lib.format.GROWTH_AXIS_MAX_DIGITS
constexpr size_t kMaxQuotedHeaderChars = 200;  // of a header quoted in an error message

// --- dtypes ---------------------------------------------------------------------------------------

// The descr NumPy writes for every ember dtype it has: all but bfloat16 (a new dtype fails the
// size check here until it is listed). The part after the byte-order character is what load
// matches.
constexpr std::array<std::pair<DType, std::string_view>, kNumElementDTypes - 1> kDescrs{{
    {kFloat32, "<f4"},
    {kFloat64, "<f8"},
    {kFloat16, "<f2"},
    {kInt64, "<i8"},
    {kInt32, "<i4"},
    {kInt16, "<i2"},
    {kInt8, "|i1"},
    {kUInt8, "|u1"},
    {kBool, "|b1"},
}};

// '<f4', '>i2', '|u1'... ('|', "not applicable", and '=', native, both read as little-endian, as
// NumPy reads them on this host).
std::optional<ElementType> element_type_of(std::string_view descr) {
  if (descr.size() < 2) return std::nullopt;
  const char order = descr[0];
  if (order != '<' && order != '>' && order != '|' && order != '=') return std::nullopt;
  for (const auto& [dtype, candidate] : kDescrs) {
    if (candidate.substr(1) == descr.substr(1)) return ElementType{dtype, order == '>'};
  }
  return std::nullopt;
}

// A shape as Python writes a tuple: (), (5,), (2, 3).
std::string python_tuple(std::span<const int64_t> dims) {
  std::string text = "(";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(dims[i]);
  }
  return text + (dims.size() == 1 ? ",)" : ")");
}

// Header text for an error message: the padding dropped, non-printable bytes escaped, long
// headers cut.
std::string quoted(std::string_view text) {
  while (!text.empty() && (text.back() == ' ' || text.back() == '\n')) text.remove_suffix(1);
  std::string out;
  for (size_t i = 0; i < text.size() && i < kMaxQuotedHeaderChars; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      constexpr char kHex[] = "0123456789abcdef";
      out += {'\\', 'x', kHex[c >> 4], kHex[c & 0xf]};
    }
  }
  if (text.size() > kMaxQuotedHeaderChars) out += "...";
  return out;
}

// --- the preamble ---------------------------------------------------------------------------------

// Where the header is. `start` holds the file's first min(file_size, kMaxPreambleBytes) bytes.
struct Preamble {
  uint64_t header_offset = 0;
  uint64_t header_length = 0;
};

Preamble read_preamble(std::span<const uint8_t> start, uint64_t file_size, const std::string& what) {
  const size_t magic_bytes = std::min(start.size(), kMagic.size());
  const std::string_view magic(reinterpret_cast<const char*>(start.data()), magic_bytes);
  EMBER_CHECK(magic == kMagic.substr(0, magic_bytes), "[load_npy] ", what,
              ": not a .npy file: it does not start with the magic string \"\\x93NUMPY\"");
  EMBER_CHECK(file_size >= kLengthOffset, "[load_npy] ", what, ": the file has ", file_size,
              " bytes, too few for the .npy magic string and version: it is truncated");
  const int major = start[kVersionOffset];
  const int minor = start[kVersionOffset + 1];
  EMBER_CHECK((major == 1 || major == 2 || major == 3) && minor == 0, "[load_npy] ", what, ": format version ", major,
              ".", minor, " is not supported (ember reads 1.0, 2.0 and 3.0)");
  const size_t length_bytes = major == 1 ? 2 : 4;
  Preamble preamble;
  preamble.header_offset = kLengthOffset + length_bytes;
  EMBER_CHECK(file_size >= preamble.header_offset, "[load_npy] ", what, ": the file has ", file_size,
              " bytes, too few for the header length of a version ", major, ".0 file: it is truncated");
  for (size_t i = 0; i < length_bytes; ++i) {
    preamble.header_length |= static_cast<uint64_t>(start[kLengthOffset + i]) << (8 * i);
  }
  EMBER_CHECK(preamble.header_length <= file_size - preamble.header_offset, "[load_npy] ", what, ": the header length ",
              preamble.header_length, " is larger than the rest of the file (", file_size - preamble.header_offset,
              " bytes): the file is truncated or corrupt");
  return preamble;
}

// --- the header -----------------------------------------------------------------------------------

struct HeaderFields {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;  // as written: may hold negative dimensions, validated afterwards
};

// The header is the repr() of a Python dict, then spaces and a newline:
//
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
//
// This parser takes exactly that literal: the three keys once each in any order, either quote
// style (no escapes), True or False, a tuple of integers (a trailing comma, and the 'L' suffix of
// Python 2's longs, which NumPy still reads in version 1.0 and 2.0 files), whitespace between
// tokens, and a trailing comma before the closing brace. Nothing else is Python to it.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& what) : text_(text), what_(what) {}

  HeaderFields parse() {
    HeaderFields fields;
    bool seen_descr = false, seen_fortran_order = false, seen_shape = false;
    expect('{', "at the start");
    while (!consume('}')) {
      const std::string key = parse_string("a key");
      expect(':', "after the key '" + key + "'");
      if (key == "descr") {
        check_first(seen_descr, key);
        fields.descr = parse_descr();
      } else if (key == "fortran_order") {
        check_first(seen_fortran_order, key);
        fields.fortran_order = parse_bool(key);
      } else if (key == "shape") {
        check_first(seen_shape, key);
        fields.shape = parse_tuple();
      } else {
        EMBER_FAIL("[load_npy] ", what_, ": the header has the unexpected key '", quoted(key),
                   "' (a .npy header has exactly 'descr', 'fortran_order' and 'shape'): ", quoted(text_));
      }
      if (consume(',')) continue;
      if (!consume('}')) fail("expected ',' or '}' after the value of '" + key + "'");
      break;
    }
    skip_whitespace();
    if (pos_ < text_.size()) fail("unexpected text after the closing '}'");
    for (const auto& [seen, key] : {std::pair{seen_descr, "descr"}, std::pair{seen_fortran_order, "fortran_order"},
                                    std::pair{seen_shape, "shape"}}) {
      EMBER_CHECK(seen, "[load_npy] ", what_, ": the header has no '", key, "': ", quoted(text_));
    }
    return fields;
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const {
    EMBER_FAIL("[load_npy] ", what_, ": the header is not the dict literal NumPy writes: ", problem, " at character ",
               pos_, " of ", quoted(text_));
  }

  // Python's whitespace inside brackets, newlines included.
  void skip_whitespace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  // Skips whitespace, then consumes `c` if it comes next.
  bool consume(char c) {
    skip_whitespace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void expect(char c, const std::string& where) {
    if (!consume(c)) fail(std::string("expected '") + c + "' " + where);
  }

  void check_first(bool& seen, const std::string& key) {
    if (seen) fail("the key '" + key + "' appears twice");
    seen = true;
  }

  std::string parse_string(const std::string& role) {
    skip_whitespace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      fail("expected a quoted string as " + role);
    }
    const char quote = text_[pos_++];
    const size_t begin = pos_;
    for (; pos_ < text_.size() && text_[pos_] != quote; ++pos_) {
      if (text_[pos_] == '\\') fail("escape sequences are not supported");
      if (text_[pos_] == '\n') fail("unterminated string");
    }
    if (pos_ >= text_.size()) fail("unterminated string");
    return std::string(text_.substr(begin, pos_++ - begin));
  }

  // A string; a list is a structured dtype, which ember has no tensor for.
  std::string parse_descr() {
    skip_whitespace();
    if (pos_ < text_.size() && text_[pos_] == '[') {
      // The list up to its closing bracket, for the message.
      size_t end = pos_;
      for (int depth = 0; end < text_.size(); ++end) {
        depth += text_[end] == '[' ? 1 : text_[end] == ']' ? -1 : 0;
        if (depth == 0) break;
      }
      EMBER_FAIL("[load_npy] ", what_, ": the structured dtype ", quoted(text_.substr(pos_, end + 1 - pos_)),
                 " is not supported (ember reads arrays of one numeric or bool dtype)");
    }
    return parse_string("the value of 'descr'");
  }

  bool parse_bool(const std::string& key) {
    skip_whitespace();
    for (const auto& [word, value] :
         {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    }
    fail("expected True or False as the value of '" + key + "'");
  }

  std::vector<int64_t> parse_tuple() {
    expect('(', "to open the value of 'shape'");
    std::vector<int64_t> dims;
    while (!consume(')')) {
      dims.push_back(parse_int());
      if (consume(',')) continue;
      if (!consume(')')) fail("expected ',' or ')' after a dimension of 'shape'");
      if (dims.size() == 1) {
        fail("the shape (" + std::to_string(dims[0]) + ") is an int, not a tuple (a one-element tuple is written (" +
             std::to_string(dims[0]) + ",))");
      }
      break;
    }
    return dims;
  }

  int64_t parse_int() {
    skip_whitespace();
    const bool negative = pos_ < text_.size() && text_[pos_] == '-';
    if (negative) ++pos_;
    if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') fail("expected an integer in 'shape'");
    uint64_t value = 0;
    const size_t begin = pos_;
    for (; pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9'; ++pos_) {
      const auto digit = static_cast<uint64_t>(text_[pos_] - '0');
      if (value > (static_cast<uint64_t>(INT64_MAX) - digit) / 10) {
        while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
        EMBER_FAIL("[load_npy] ", what_, ": the header's shape has the dimension ", negative ? "-" : "",
                   text_.substr(begin, pos_ - begin), ", which does not fit in 64 bits");
      }
      value = value * 10 + digit;
    }
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;
    return negative ? -static_cast<int64_t>(value) : static_cast<int64_t>(value);
  }

  std::string_view text_;
  const std::string& what_;
  size_t pos_ = 0;
};

Header parse_header(std::string_view text, const Preamble& preamble, uint64_t file_size, const std::string& what) {
  const HeaderFields fields = HeaderParser(text, what).parse();
  const std::optional<ElementType> type = element_type_of(fields.descr);
  EMBER_CHECK(type.has_value(), "[load_npy] ", what, ": the dtype '", quoted(fields.descr),
              "' is not supported (ember reads float16/32/64 'f2' 'f4' 'f8', int8/16/32/64 'i1' 'i2' 'i4' 'i8', "
              "uint8 'u1' and bool 'b1', either byte order)");
  const std::string shape_text = python_tuple(fields.shape);
  EMBER_CHECK(fields.shape.size() <= static_cast<size_t>(kMaxDims), "[load_npy] ", what, ": the header's shape ",
              shape_text, " has ", fields.shape.size(), " dimensions; ember supports at most ", kMaxDims);
  Header header;
  header.type = *type;
  header.fortran_order = fields.fortran_order;
  header.data_offset = preamble.header_offset + preamble.header_length;
  // As NumPy does, the product of the non-zero dimensions must fit even when another one is
  // zero: ember computes strides from them.
  const auto item_bytes = static_cast<uint64_t>(dtype_size(type->dtype));
  uint64_t bytes = item_bytes;
  bool zero_size = false;
  for (const int64_t dim : fields.shape) {
    EMBER_CHECK(dim >= 0, "[load_npy] ", what, ": the header's shape ", shape_text, " has a negative dimension");
    zero_size = zero_size || dim == 0;
    EMBER_CHECK(dim == 0 || (!__builtin_mul_overflow(bytes, static_cast<uint64_t>(dim), &bytes) &&
                             bytes <= static_cast<uint64_t>(INT64_MAX)),
                "[load_npy] ", what, ": the header's shape ", shape_text, " is too large: its ", type->dtype,
                " data would need more than 2^63 bytes");
    header.shape.push_back(dim);
  }
  header.data_bytes = zero_size ? 0 : bytes;
  const uint64_t file_data_bytes = file_size - header.data_offset;
  EMBER_CHECK(header.data_bytes == file_data_bytes, "[load_npy] ", what, ": the header's shape ", shape_text, " needs ",
              header.data_bytes, " bytes of ", type->dtype, " but the file has ", file_data_bytes, " after the header",
              header.data_bytes > file_data_bytes ? " (it is truncated)" : " (trailing bytes)");
  return header;
}

}  // namespace

std::optional<std::string_view> descr_of(DType dtype) {
  for (const auto& [candidate, descr] : kDescrs) {
    if (candidate == dtype) return descr;
  }
  return std::nullopt;
}

Header read_header(const detail::Source& source, const std::string& what) {
  std::array<uint8_t, kMaxPreambleBytes> start{};
  const uint64_t start_bytes = std::min<uint64_t>(source.size(), start.size());
  source.read(start.data(), start_bytes, 0);
  const Preamble preamble = read_preamble(std::span(start.data(), start_bytes), source.size(), what);
  std::string text(preamble.header_length, '\0');
  source.read(text.data(), text.size(), preamble.header_offset);
  return parse_header(text, preamble, source.size(), what);
}

void read_data(const detail::Source& source, const Header& header, void* out) {
  if (header.data_bytes == 0) return;
  source.read(out, static_cast<size_t>(header.data_bytes), header.data_offset);
  const auto item_bytes = static_cast<size_t>(dtype_size(header.type.dtype));
  auto* bytes = static_cast<uint8_t*>(out);
  if (header.type.big_endian && item_bytes > 1) {
    for (uint64_t i = 0; i < header.data_bytes; i += item_bytes) std::reverse(bytes + i, bytes + i + item_bytes);
  }
  if (header.type.dtype == kBool) {
    // A C++ bool holding a byte other than 0 or 1 is undefined behaviour; read those as true.
    for (uint64_t i = 0; i < header.data_bytes; ++i) bytes[i] = bytes[i] != 0 ? 1 : 0;
  }
}

std::string encode_header(std::string_view descr, const Shape& shape) {
  std::string dict = "{'descr': '" + std::string(descr) +
                     "', 'fortran_order': False, 'shape': " + python_tuple(std::span(shape.begin(), shape.end())) +
                     ", }";
  // NumPy leaves room for the first axis to grow to 21 digits, so a file can be appended to in place.
  if (!shape.empty()) dict.append(kGrowthAxisMaxDigits - std::to_string(shape[0]).size(), ' ');
  const uint64_t text_bytes = dict.size() + 1;  // and the newline
  for (const int major : {1, 2}) {
    const uint64_t length_bytes = major == 1 ? 2 : 4;
    // NumPy pads a full 64 bytes when the header would end aligned already.
    const uint64_t padding = kDataAlignment - (kLengthOffset + length_bytes + text_bytes) % kDataAlignment;
    const uint64_t header_length = text_bytes + padding;
    if (header_length >> (8 * length_bytes) != 0) continue;  // too long for this version's length field
    std::string out(kMagic);
    out += static_cast<char>(major);
    out += '\0';
    for (uint64_t i = 0; i < length_bytes; ++i) out += static_cast<char>((header_length >> (8 * i)) & 0xff);
    out += dict;
    out.append(padding, ' ');
    out += '\n';
    return out;
  }
  EMBER_FAIL("[save_npy] a header of ", text_bytes, " bytes is too long for a .npy file");  // unreachable: 8 dims
}

}  // namespace ember::npy_format
