// MNIST readers: the standard IDX files (plain or gzip'ed) and the offline CSV subset
// mnist_5k.csv.gz. Both go through zlib's gz* functions, which read plain files unchanged, and both
// validate every count and size against the bytes actually read before trusting them.
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <sstream>
#include <system_error>

#include "ember/data.h"
#include "ember/ops.h"

namespace ember::data {
namespace {

constexpr int64_t kNumClasses = 10;
constexpr int64_t kPixelsPerImage = 28 * 28;
constexpr size_t kMaxFileBytes = size_t{1} << 30;  // MNIST's largest file is 47 MB unpacked

// The 784 pixels then the label; the subset has 500 rows of each digit.
constexpr int64_t kSubsetRows = 5000;
constexpr int64_t kSubsetRowsPerDigit = 500;

std::string hex32(uint32_t value) {
  std::ostringstream out;
  out << "0x" << std::hex;
  out.width(8);
  out.fill('0');
  out << value;
  return out.str();
}

bool file_exists(const std::filesystem::path& path) {
  std::error_code error;
  return std::filesystem::exists(path, error);
}

// The whole file, gunzip'ed when it is gzip data (zlib reads other files unchanged).
std::vector<uint8_t> read_file(const std::string& path) {
  errno = 0;
  gzFile file = gzopen(path.c_str(), "rb");
  EMBER_CHECK(file != nullptr, "[mnist] cannot open '", path,
              "': ", errno != 0 ? std::generic_category().message(errno) : "out of memory");
  std::vector<uint8_t> bytes;
  constexpr size_t kChunk = size_t{1} << 20;
  for (;;) {
    const size_t used = bytes.size();
    bytes.resize(used + kChunk);
    const int got = gzread(file, bytes.data() + used, static_cast<unsigned>(kChunk));
    if (got < 0) {
      int code = 0;
      const std::string message = gzerror(file, &code);
      gzclose(file);
      EMBER_FAIL("[mnist] cannot read '", path,
                 "': ", code == Z_ERRNO ? std::generic_category().message(errno) : message,
                 code == Z_ERRNO ? "" : " (the gzip data is corrupt or truncated)");
    }
    bytes.resize(used + static_cast<size_t>(got));
    if (got == 0) break;
    if (bytes.size() > kMaxFileBytes) {
      gzclose(file);
      EMBER_FAIL("[mnist] '", path, "' is larger than ", kMaxFileBytes >> 20, " MiB unpacked: not an MNIST file");
    }
  }
  // A gzip stream cut short is not an error for gzread (it returns what there is, to support
  // files still being written); gzerror reports it as Z_BUF_ERROR.
  int code = 0;
  gzerror(file, &code);
  gzclose(file);
  EMBER_CHECK(code != Z_BUF_ERROR, "[mnist] cannot read '", path,
              "': the gzip data ends early (the gzip data is corrupt or truncated)");
  return bytes;
}

// Pixel byte -> float: scaled to [0, 1], then standardized when asked.
std::array<float, 256> pixel_table(bool normalize) {
  std::array<float, 256> table{};
  for (int v = 0; v < 256; ++v) {
    const float scaled = static_cast<float>(v) / 255.0f;
    table[static_cast<size_t>(v)] = normalize ? (scaled - MNIST::kMean) / MNIST::kStd : scaled;
  }
  return table;
}

// --- IDX --------------------------------------------------------------------------------------------

// An IDX file: magic 0x00 0x00 <type 0x08 = unsigned byte> <number of dims>, then each dim as a
// big-endian u32, then the bytes row-major.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;  // the whole file
  size_t data_offset = 0;
  const uint8_t* data() const { return bytes.data() + data_offset; }
};

IdxArray read_idx(const std::string& path, uint8_t expected_dims, const char* what) {
  IdxArray idx;
  idx.bytes = read_file(path);
  const std::vector<uint8_t>& b = idx.bytes;
  EMBER_CHECK(b.size() >= 4, "[mnist] '", path, "' has ", b.size(), " bytes, too few for an IDX header");
  const uint32_t magic = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
  const uint32_t expected_magic = 0x0800u | expected_dims;
  EMBER_CHECK(magic == expected_magic, "[mnist] '", path, "' has magic number ", hex32(magic), ", expected ",
              hex32(expected_magic), " for an IDX file of ", what);
  const size_t header = 4 + 4 * size_t{expected_dims};
  EMBER_CHECK(b.size() >= header, "[mnist] '", path, "' has ", b.size(), " bytes, too few for its ", header,
              "-byte IDX header");
  uint64_t payload = 1;
  for (size_t d = 0; d < expected_dims; ++d) {
    const uint8_t* p = b.data() + 4 + 4 * d;
    const uint32_t dim = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
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

// The first existing of name and name.gz in root.
std::string find_idx_file(const std::filesystem::path& root, const std::string& name) {
  for (const std::string& candidate : {name, name + ".gz"}) {
    if (file_exists(root / candidate)) return (root / candidate).string();
  }
  EMBER_FAIL("[mnist] '", (root / name).string(), "' not found (nor '", name, ".gz') in '", root.string(), "'");
}

std::string idx_prefix(Split split) { return split == Split::kTrain ? "train" : "t10k"; }

// --- CSV --------------------------------------------------------------------------------------------

struct Digits {
  std::vector<uint8_t> pixels;  // (rows, 784)
  std::vector<uint8_t> labels;  // (rows)
};

// Rows "p0,p1,...,p783,label" of integers; blank lines are skipped.
Digits parse_csv(const std::vector<uint8_t>& bytes, const std::string& path) {
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

}  // namespace

MNIST::MNIST(Tensor images, Tensor labels, std::string source)
    : TensorDataset(std::move(images), std::move(labels)), source_(std::move(source)) {}

MNIST MNIST::from_idx(const std::string& root, Split split, bool normalize) {
  const std::string prefix = idx_prefix(split);
  const std::string images_path = find_idx_file(root, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_idx_file(root, prefix + "-labels-idx1-ubyte");
  const IdxArray images = read_idx(images_path, 3, "images (count x rows x columns)");
  const IdxArray labels = read_idx(labels_path, 1, "labels (count)");
  const int64_t count = images.dims[0];
  EMBER_CHECK(labels.dims[0] == count, "[mnist] '", images_path, "' holds ", count, " images but '", labels_path,
              "' holds ", labels.dims[0], " labels");
  const int64_t rows = images.dims[1];
  const int64_t columns = images.dims[2];
  EMBER_CHECK(rows == 28 && columns == 28, "[mnist] '", images_path, "' holds images of ", rows, " x ", columns,
              " pixels, expected 28 x 28");

  Tensor image_tensor = empty({count, 1, rows, columns}, kFloat32);
  const std::array<float, 256> table = pixel_table(normalize);
  float* out = image_tensor.data_ptr<float>();
  const uint8_t* pixels = images.data();
  for (int64_t i = 0; i < count * rows * columns; ++i) out[i] = table[pixels[i]];

  Tensor label_tensor = empty({count}, kInt64);
  int64_t* label_out = label_tensor.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t label = labels.data()[i];
    EMBER_CHECK(label < kNumClasses, "[mnist] '", labels_path, "': label ", int{label}, " of example ", i,
                " is not a digit 0..9");
    label_out[i] = label;
  }
  return MNIST(std::move(image_tensor), std::move(label_tensor), images_path + " + " + labels_path);
}

MNIST MNIST::from_csv(const std::string& path, Split split, bool normalize) {
  return read_csv(path, split, normalize, /*require_full_subset=*/false);
}

MNIST MNIST::read_csv(const std::string& path, Split split, bool normalize, bool require_full_subset) {
  EMBER_CHECK(file_exists(path), "[mnist] '", path, "' not found: run scripts/setup to download ", kCsvName);
  const Digits digits = parse_csv(read_file(path), path);
  const int64_t total = static_cast<int64_t>(digits.labels.size());
  std::array<int64_t, kNumClasses> per_digit{};
  for (const uint8_t label : digits.labels) ++per_digit[label];
  if (require_full_subset) {
    std::ostringstream counts;
    for (int64_t d = 0; d < kNumClasses; ++d) counts << (d ? ", " : "") << d << ": " << per_digit[d];
    const bool complete = total == kSubsetRows && std::all_of(per_digit.begin(), per_digit.end(),
                                                              [](int64_t c) { return c == kSubsetRowsPerDigit; });
    EMBER_CHECK(complete, "[mnist] '", path, "' has ", total, " rows (per digit ", counts.str(), "), expected ",
                kSubsetRows, " with ", kSubsetRowsPerDigit,
                " per digit: the file is incomplete or corrupt; delete it and run scripts/setup again");
  }

  // Per digit, in file order: the first count - count / 5 rows are training, the last count / 5 test.
  std::array<int64_t, kNumClasses> train_rows{};
  int64_t selected = 0;
  for (int64_t d = 0; d < kNumClasses; ++d) {
    train_rows[d] = per_digit[d] - per_digit[d] / 5;
    selected += split == Split::kTrain ? train_rows[d] : per_digit[d] / 5;
  }
  Tensor images = empty({selected, 1, 28, 28}, kFloat32);
  Tensor labels = empty({selected}, kInt64);
  float* image_out = images.data_ptr<float>();
  int64_t* label_out = labels.data_ptr<int64_t>();
  const std::array<float, 256> table = pixel_table(normalize);
  std::array<int64_t, kNumClasses> seen{};
  int64_t row_out = 0;
  for (int64_t row = 0; row < total; ++row) {
    const uint8_t label = digits.labels[static_cast<size_t>(row)];
    const bool is_train = seen[label]++ < train_rows[label];
    if (is_train != (split == Split::kTrain)) continue;
    const uint8_t* pixels = digits.pixels.data() + row * kPixelsPerImage;
    float* out = image_out + row_out * kPixelsPerImage;
    for (int64_t i = 0; i < kPixelsPerImage; ++i) out[i] = table[pixels[i]];
    label_out[row_out++] = label;
  }
  return MNIST(std::move(images), std::move(labels), path);
}

namespace {

bool has_idx_images(const std::string& root, Split split) {
  const std::filesystem::path images = std::filesystem::path(root) / (idx_prefix(split) + "-images-idx3-ubyte");
  return file_exists(images) || file_exists(images.string() + ".gz");
}

// root/mnist_5k.csv.gz, or an error saying how to get it.
std::string subset_path(const std::string& root, Split split) {
  const std::filesystem::path csv = std::filesystem::path(root) / MNIST::kCsvName;
  EMBER_CHECK(file_exists(csv), "[mnist] no MNIST data in '", root, "': expected the IDX files (", idx_prefix(split),
              "-images-idx3-ubyte[.gz] and the labels beside them) or ", MNIST::kCsvName,
              "; run scripts/setup to download ", csv.string());
  return csv.string();
}

}  // namespace

MNIST::MNIST(const std::string& root, Split split, bool normalize)
    : MNIST(has_idx_images(root, split) ? from_idx(root, split, normalize)
                                        : read_csv(subset_path(root, split), split, normalize,
                                                   /*require_full_subset=*/true)) {}

}  // namespace ember::data
