// MNIST readers: the standard IDX files (plain or gzip'ed) and the offline CSV subset
// mnist_5k.csv.gz. Here the files are read whole and the digits become tensors; mnist_format.cpp
// gunzips and validates every count and size against the bytes there are before trusting them.
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <system_error>

#include "data/mnist_format.h"
#include "ember/data.h"
#include "ember/ops.h"

namespace ember::data {
namespace {

bool file_exists(const std::filesystem::path& path) {
  std::error_code error;
  return std::filesystem::exists(path, error);
}

// The whole file, gunzip'ed when it is gzip data (other files unchanged).
std::vector<uint8_t> read_file(const std::string& path) {
  errno = 0;
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  EMBER_CHECK(file != nullptr, "[mnist] cannot open '", path,
              "': ", errno != 0 ? std::generic_category().message(errno) : "out of memory");
  std::vector<uint8_t> bytes;
  constexpr size_t kChunk = size_t{1} << 20;
  for (;;) {
    const size_t used = bytes.size();
    bytes.resize(used + kChunk);
    errno = 0;
    const size_t got = std::fread(bytes.data() + used, 1, kChunk, file.get());
    bytes.resize(used + got);
    EMBER_CHECK(!std::ferror(file.get()), "[mnist] cannot read '", path,
                "': ", std::generic_category().message(errno != 0 ? errno : EIO));
    if (got < kChunk) break;
    // The limit on unpacked bytes holds for the file as it is too (no MNIST file comes near it).
    EMBER_CHECK(bytes.size() <= mnist_format::kMaxFileBytes, "[mnist] '", path, "' is larger than ",
                mnist_format::kMaxFileBytes >> 20, " MiB unpacked: not an MNIST file");
  }
  return mnist_format::unpack(bytes, path);
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

// The first existing of name and name.gz in root.
std::string find_idx_file(const std::filesystem::path& root, const std::string& name) {
  for (const std::string& candidate : {name, name + ".gz"}) {
    if (file_exists(root / candidate)) return (root / candidate).string();
  }
  EMBER_FAIL("[mnist] '", (root / name).string(), "' not found (nor '", name, ".gz') in '", root.string(), "'");
}

std::string idx_prefix(Split split) { return split == Split::kTrain ? "train" : "t10k"; }

// The digits as tensors: images float32 (rows, 1, 28, 28), labels int64 (rows).
std::pair<Tensor, Tensor> to_tensors(const mnist_format::Digits& digits, bool normalize) {
  const int64_t rows = digits.rows();
  Tensor images = empty({rows, 1, 28, 28}, kFloat32);
  const std::array<float, 256> table = pixel_table(normalize);
  float* out = images.data_ptr<float>();
  for (int64_t i = 0; i < rows * mnist_format::kPixelsPerImage; ++i)
    out[i] = table[digits.pixels[static_cast<size_t>(i)]];
  Tensor labels = empty({rows}, kInt64);
  std::copy(digits.labels.begin(), digits.labels.end(), labels.data_ptr<int64_t>());
  return {std::move(images), std::move(labels)};
}

}  // namespace

MNIST::MNIST(Tensor images, Tensor labels, std::string source)
    : TensorDataset(std::move(images), std::move(labels)), source_(std::move(source)) {}

MNIST MNIST::from_idx(const std::string& root, Split split, bool normalize) {
  const std::string prefix = idx_prefix(split);
  const std::string images_path = find_idx_file(root, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_idx_file(root, prefix + "-labels-idx1-ubyte");
  const mnist_format::IdxArray images_file =
      mnist_format::parse_idx(read_file(images_path), 3, "images (count x rows x columns)", images_path);
  const mnist_format::IdxArray labels_file =
      mnist_format::parse_idx(read_file(labels_path), 1, "labels (count)", labels_path);
  auto [images, labels] =
      to_tensors(mnist_format::idx_digits(images_file, images_path, labels_file, labels_path), normalize);
  return MNIST(std::move(images), std::move(labels), images_path + " + " + labels_path);
}

MNIST MNIST::from_csv(const std::string& path, Split split, bool normalize) {
  return read_csv(path, split, normalize, /*require_full_subset=*/false);
}

MNIST MNIST::read_csv(const std::string& path, Split split, bool normalize, bool require_full_subset) {
  EMBER_CHECK(file_exists(path), "[mnist] '", path, "' not found: run scripts/setup to download ", kCsvName);
  const std::vector<uint8_t> bytes = read_file(path);
  const mnist_format::Digits digits = mnist_format::parse_csv(bytes, path);
  if (require_full_subset) mnist_format::check_full_subset(digits, path);
  auto [images, labels] = to_tensors(mnist_format::split_rows(digits, split == Split::kTrain), normalize);
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
