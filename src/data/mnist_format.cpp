// The byte level of the MNIST readers (mnist_format.h): gzip decoded in memory with zlib's
// inflate, and every count and size checked against the bytes there are before it is trusted.
#include "data/mnist_format.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <sstream>
#include <utility>

#include "ember/error.h"

namespace ember::mnist_format {
namespace {

std::string hex32(uint32_t value) {
  std::ostringstream out;
  out << "0x" << std::hex;
  out.width(8);
  out.fill('0');
  out << value;
  return out.str();
}

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

bool starts_gzip_member(std::span<const uint8_t> bytes) {
  return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
}

// Owns an inflate stream (windowBits 15 + 32: a gzip or zlib header, detected).
class Inflater {
 public:
  explicit Inflater(const std::string& path) {
    const int status = inflateInit2(&stream_, 15 + 32);
    EMBER_CHECK(status == Z_OK, "[mnist] cannot read '", path, "': zlib's inflateInit2 failed (",
                stream_.msg != nullptr ? stream_.msg : zError(status), ")");
  }
  ~Inflater() { inflateEnd(&stream_); }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
  z_stream& stream() { return stream_; }

 private:
  z_stream stream_{};
};

[[noreturn]] void fail_too_large(const std::string& path, size_t max_bytes) {
  const bool mib = max_bytes % (size_t{1} << 20) == 0;
  EMBER_FAIL("[mnist] '", path, "' is larger than ", mib ? max_bytes >> 20 : max_bytes, mib ? " MiB" : " bytes",
             " unpacked: not an MNIST file");
}

}  // namespace

std::vector<uint8_t> unpack(std::span<const uint8_t> file, const std::string& path, size_t max_bytes) {
  if (!starts_gzip_member(file)) {
    if (file.size() > max_bytes) fail_too_large(path, max_bytes);
    return {file.begin(), file.end()};
  }
  Inflater inflater(path);
  z_stream& stream = inflater.stream();
  std::vector<uint8_t> out;
  size_t consumed = 0;  // bytes of `file` inflate has read
  size_t produced = 0;  // bytes of `out` it has written
  for (;;) {
    if (produced == out.size()) {
      // Doubling, so the copies cost O(size); one byte past the limit tells a file that exceeds it.
      out.resize(std::min(std::max(out.size() * 2, size_t{1} << 16), max_bytes + 1));
    }
    const size_t in_chunk = std::min<size_t>(file.size() - consumed, UINT_MAX);
    const size_t out_chunk = std::min<size_t>(out.size() - produced, UINT_MAX);
    stream.next_in = const_cast<Bytef*>(file.data() + consumed);  // zlib does not write through it
    stream.avail_in = static_cast<uInt>(in_chunk);
    stream.next_out = out.data() + produced;
    stream.avail_out = static_cast<uInt>(out_chunk);
    const int status = inflate(&stream, Z_NO_FLUSH);
    consumed += in_chunk - stream.avail_in;
    produced += out_chunk - stream.avail_out;
    if (produced > max_bytes) fail_too_large(path, max_bytes);
    if (status == Z_STREAM_END) {
      // A gzip file may hold several members, decompressed one after the other; anything else
      // after a member is ignored, as gzread ignores it.
      if (!starts_gzip_member(file.subspan(consumed))) break;
      inflateReset(&stream);
      continue;
    }
    if (status == Z_OK) continue;
    // Z_BUF_ERROR: no progress. With room left to write, the input has run out inside a member.
    if (status == Z_BUF_ERROR && produced == out.size()) continue;
    EMBER_CHECK(status != Z_BUF_ERROR, "[mnist] cannot read '", path,
                "': the gzip data ends early (the gzip data is corrupt or truncated)");
    EMBER_FAIL("[mnist] cannot read '", path, "': ", stream.msg != nullptr ? stream.msg : zError(status),
               " (the gzip data is corrupt or truncated)");
  }
  out.resize(produced);
  return out;
}

IdxArray parse_idx(std::vector<uint8_t> bytes, uint8_t dims, const char* what, const std::string& path) {
  IdxArray idx;
  idx.bytes = std::move(bytes);
  const std::vector<uint8_t>& b = idx.bytes;
  EMBER_CHECK(b.size() >= 4, "[mnist] '", path, "' has ", b.size(), " bytes, too few for an IDX header");
  const uint32_t magic = big_endian_u32(b.data());
  const uint32_t expected_magic = 0x0800u | dims;
  EMBER_CHECK(magic == expected_magic, "[mnist] '", path, "' has magic number ", hex32(magic), ", expected ",
              hex32(expected_magic), " for an IDX file of ", what);
  const size_t header = 4 + 4 * size_t{dims};
  EMBER_CHECK(b.size() >= header, "[mnist] '", path, "' has ", b.size(), " bytes, too few for its ", header,
              "-byte IDX header");
  uint64_t payload = 1;
  for (size_t d = 0; d < dims; ++d) {
    const uint32_t dim = big_endian_u32(b.data() + 4 + 4 * d);
    idx.dims.push_back(dim);
    payload *= dim;  // below 2^30 * 2^32 here, so it cannot overflow before the check
    EMBER_CHECK(payload <= kMaxFileBytes, "[mnist] '", path, "' has a header claiming more than ", kMaxFileBytes,
                " bytes of data");
  }
  idx.data_offset = header;
  std::ostringstream dims_text;
  for (size_t d = 0; d < idx.dims.size(); ++d) dims_text << (d ? " x " : "") << idx.dims[d];
  EMBER_CHECK(b.size() - header == payload, "[mnist] '", path, "' holds ", b.size() - header,
              " bytes of data but its header says ", dims_text.str(), " = ", payload,
              ": the file is truncated or corrupt");
  return idx;
}

Digits idx_digits(const IdxArray& images, const std::string& images_path, const IdxArray& labels,
                  const std::string& labels_path) {
  EMBER_CHECK(images.dims.size() == 3 && labels.dims.size() == 1, "[mnist] '", images_path, "' and '", labels_path,
              "' are not an images file and a labels file");
  const int64_t count = images.dims[0];
  EMBER_CHECK(labels.dims[0] == count, "[mnist] '", images_path, "' holds ", count, " images but '", labels_path,
              "' holds ", labels.dims[0], " labels");
  const int64_t rows = images.dims[1];
  const int64_t columns = images.dims[2];
  EMBER_CHECK(rows == 28 && columns == 28, "[mnist] '", images_path, "' holds images of ", rows, " x ", columns,
              " pixels, expected 28 x 28");
  Digits digits;
  digits.pixels.assign(images.data(), images.data() + count * kPixelsPerImage);
  digits.labels.assign(labels.data(), labels.data() + count);
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t label = digits.labels[static_cast<size_t>(i)];
    EMBER_CHECK(label < kNumClasses, "[mnist] '", labels_path, "': label ", int{label}, " of example ", i,
                " is not a digit 0..9");
  }
  return digits;
}

Digits parse_csv(std::span<const uint8_t> bytes, const std::string& path) {
  Digits digits;
  const char* p = reinterpret_cast<const char*>(bytes.data());
  const char* const file_end = p + bytes.size();
  int64_t line = 0;
  while (p < file_end) {
    ++line;
    const char* line_end = std::find(p, file_end, '\n');
    const char* next_line = line_end == file_end ? file_end : line_end + 1;
    if (line_end > p && line_end[-1] == '\r') --line_end;
    if (line_end == p) {
      p = next_line;
      continue;
    }
    for (int64_t column = 0; column <= kPixelsPerImage; ++column) {
      int value = 0;
      const auto [after, error] = std::from_chars(p, line_end, value);
      const bool is_label = column == kPixelsPerImage;
      EMBER_CHECK(error == std::errc() && (after == line_end || *after == ','), "[mnist] ", path, " line ", line,
                  ", column ", column + 1, ": expected an integer, got '", std::string(p, std::find(p, line_end, ',')),
                  "'");
      EMBER_CHECK(is_label || after != line_end, "[mnist] ", path, " line ", line, ": expected ", kPixelsPerImage + 1,
                  " comma-separated values (784 pixels, then the label), got ", column + 1);
      EMBER_CHECK(!is_label || after == line_end, "[mnist] ", path, " line ", line, ": expected ", kPixelsPerImage + 1,
                  " comma-separated values (784 pixels, then the label), got more");
      if (is_label) {
        EMBER_CHECK(value >= 0 && value < kNumClasses, "[mnist] ", path, " line ", line, ": label ", value,
                    " is not a digit 0..9");
        digits.labels.push_back(static_cast<uint8_t>(value));
      } else {
        EMBER_CHECK(value >= 0 && value <= 255, "[mnist] ", path, " line ", line, ", column ", column + 1,
                    ": pixel value ", value, " is outside 0..255");
        digits.pixels.push_back(static_cast<uint8_t>(value));
      }
      p = is_label ? after : after + 1;
    }
    p = next_line;
  }
  EMBER_CHECK(!digits.labels.empty(), "[mnist] ", path, " holds no rows");
  return digits;
}

void check_full_subset(const Digits& digits, const std::string& path) {
  std::array<int64_t, kNumClasses> per_digit{};
  for (const uint8_t label : digits.labels) ++per_digit[label];
  const bool complete = digits.rows() == kSubsetRows && std::all_of(per_digit.begin(), per_digit.end(),
                                                                    [](int64_t c) { return c == kSubsetRowsPerDigit; });
  if (complete) return;
  std::ostringstream counts;
  for (int64_t d = 0; d < kNumClasses; ++d) counts << (d ? ", " : "") << d << ": " << per_digit[d];
  EMBER_FAIL("[mnist] '", path, "' has ", digits.rows(), " rows (per digit ", counts.str(), "), expected ", kSubsetRows,
             " with ", kSubsetRowsPerDigit,
             " per digit: the file is incomplete or corrupt; delete it and run scripts/setup again");
}

Digits split_rows(const Digits& digits, bool train) {
  std::array<int64_t, kNumClasses> per_digit{};
  for (const uint8_t label : digits.labels) ++per_digit[label];
  std::array<int64_t, kNumClasses> train_rows{};
  for (int64_t d = 0; d < kNumClasses; ++d) train_rows[d] = per_digit[d] - per_digit[d] / 5;
  Digits out;
  std::array<int64_t, kNumClasses> seen{};
  for (int64_t row = 0; row < digits.rows(); ++row) {
    const uint8_t label = digits.labels[static_cast<size_t>(row)];
    const bool is_train = seen[label]++ < train_rows[label];
    if (is_train != train) continue;
    const auto* pixels = digits.pixels.data() + row * kPixelsPerImage;
    out.pixels.insert(out.pixels.end(), pixels, pixels + kPixelsPerImage);
    out.labels.push_back(label);
  }
  return out;
}

}  // namespace ember::mnist_format
