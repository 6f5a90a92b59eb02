// libFuzzer target for the MNIST readers (src/data/mnist_format.cpp). Every input is a file as
// MNIST reads it: unpack (gzip decoded in memory with zlib's inflate, other files unchanged; here
// with a limit of 1 MiB unpacked) must agree with zlib's gzread on gzip files, which read them
// before (the same bytes, or both refuse the file), and return any other file as it is;
// the bytes then go through parse_idx as an images and as a labels file, each one that passes is
// paired with a labels or images file made here (idx_digits), and through parse_csv, whose digits
// are split into training and test rows (split_rows) and checked as the whole subset
// (check_full_subset). ember::Error is the expected answer to a bad file; any other exception, a
// crash, a leak, a hang, a sanitizer report or a broken promise of the API (checked below) is a
// finding.
//
// Run: scripts/fuzz mnist  (builds build-fuzz/mnist with ASan + UBSan, replays fuzz/corpus/mnist/,
// then fuzzes; see fuzz/README.md). Replay one input: build-fuzz/mnist FILE
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/mnist_format.h"
#include "ember/error.h"
#include "fuzz/promise.h"

const char* const ember_fuzz::kTarget = "mnist";

namespace {

namespace format = ember::mnist_format;

using ember_fuzz::require;

// unpack's limit here: 1 MiB, which an input of 1 KiB can exceed (deflate packs up to 1032:1), so
// that gzip bombs are found and refused in a fraction of a second.
constexpr size_t kMaxBytes = size_t{1} << 20;

// The file as zlib's gzread reads it (the reader before unpack), or nullopt where it reports an
// error: a corrupt stream, a stream cut short, or more than kMaxBytes. Read in one call, with
// buffers larger than any input and output here: gzread loses the end of a cut stream when an
// output buffer (its own 16 KiB one, or the caller's) fills just as the last input is consumed
// (the next fill sees no input left, and reports neither the rest nor the cut), which is how the
// reader before unpack took some cut files (fuzz/corpus/mnist/crash-cut-gzip-*).
std::optional<std::vector<uint8_t>> gzread_reference(std::span<const uint8_t> file) {
  const int fd = memfd_create("fuzz-mnist", MFD_CLOEXEC);
  require(fd >= 0, "memfd_create works");
  require(write(fd, file.data(), file.size()) == static_cast<ssize_t>(file.size()), "the input is written whole");
  require(lseek(fd, 0, SEEK_SET) == 0, "the input is rewound");
  gzFile gz = gzdopen(fd, "rb");  // owns fd from here
  require(gz != nullptr, "gzdopen works");
  require(gzbuffer(gz, kMaxBytes) == 0, "gzbuffer works");
  static const std::unique_ptr<uint8_t[]> buffer(new uint8_t[kMaxBytes + 1]);  // kept: no page faults per run
  const int got = gzread(gz, buffer.get(), static_cast<unsigned>(kMaxBytes + 1));
  int code = 0;
  gzerror(gz, &code);  // a stream cut short reads as what there is, and Z_BUF_ERROR
  gzclose(gz);
  if (got < 0 || static_cast<size_t>(got) > kMaxBytes || code == Z_BUF_ERROR) return std::nullopt;
  return std::vector<uint8_t>(buffer.get(), buffer.get() + got);
}

std::vector<uint8_t> be32(uint32_t value) {
  return {static_cast<uint8_t>(value >> 24), static_cast<uint8_t>(value >> 16), static_cast<uint8_t>(value >> 8),
          static_cast<uint8_t>(value)};
}

// An IDX file of `dims` holding `data`, parsed.
format::IdxArray idx_file(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> bytes = be32(0x0800u | static_cast<uint32_t>(dims.size()));
  for (const uint32_t dim : dims) {
    const std::vector<uint8_t> word = be32(dim);
    bytes.insert(bytes.end(), word.begin(), word.end());
  }
  bytes.insert(bytes.end(), data.begin(), data.end());
  return format::parse_idx(std::move(bytes), static_cast<uint8_t>(dims.size()), "made", "<made>");
}

void check_digits(const format::Digits& digits) {
  require(digits.pixels.size() == digits.labels.size() * format::kPixelsPerImage, "784 pixels per label");
  require(std::all_of(digits.labels.begin(), digits.labels.end(), [](uint8_t l) { return l < format::kNumClasses; }),
          "labels are digits 0..9");
}

void fuzz_idx(const std::vector<uint8_t>& bytes) {
  try {
    const format::IdxArray images = format::parse_idx(bytes, 3, "images (count x rows x columns)", "<fuzz>");
    require(images.dims.size() == 3 && images.data_offset == 16, "an images file has 3 dims after 16 bytes");
    const uint64_t payload = static_cast<uint64_t>(images.dims[0]) * images.dims[1] * images.dims[2];
    require(images.bytes.size() - images.data_offset == payload, "the data is as long as the dims say");
    const bool square = images.dims[1] == 28 && images.dims[2] == 28;
    // Labels 0, 1, ..., 9, 0, ...: one per image (at most 64 when the images are not 28 x 28, whose
    // count is not bounded by the data: 0 rows of any count hold no pixels).
    const auto count = static_cast<size_t>(images.dims[0]);
    std::vector<uint8_t> labels(square ? count : std::min<size_t>(count, 64));
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<uint8_t>(i % 10);
    try {
      const format::Digits digits =
          format::idx_digits(images, "<fuzz>", idx_file({static_cast<uint32_t>(labels.size())}, labels), "<made>");
      require(square && labels.size() == count, "only 28 x 28 images with a label each are read");
      check_digits(digits);
      require(std::equal(digits.pixels.begin(), digits.pixels.end(), images.data()), "the pixels are the file's");
    } catch (const ember::Error&) {
      require(!square || labels.size() != count, "28 x 28 images with a valid label each are read");
    }
  } catch (const ember::Error&) {
  }
  try {
    const format::IdxArray labels = format::parse_idx(bytes, 1, "labels (count)", "<fuzz>");
    require(labels.dims.size() == 1 && labels.bytes.size() - labels.data_offset == static_cast<size_t>(labels.dims[0]),
            "a labels file holds as many bytes as its count");
    if (labels.dims[0] > 64) return;  // the images made to pair with them would be large
    const auto count = static_cast<uint32_t>(labels.dims[0]);
    const bool valid = std::all_of(labels.data(), labels.data() + count, [](uint8_t l) { return l < 10; });
    try {
      const format::Digits digits =
          format::idx_digits(idx_file({count, 28, 28}, std::vector<uint8_t>(count * format::kPixelsPerImage, 7)),
                             "<made>", labels, "<fuzz>");
      require(valid, "labels past 9 are refused");
      check_digits(digits);
    } catch (const ember::Error&) {
      require(!valid, "valid labels with as many 28 x 28 images are read");
    }
  } catch (const ember::Error&) {
  }
}

void fuzz_csv(const std::vector<uint8_t>& bytes) {
  format::Digits digits;
  try {
    digits = format::parse_csv(bytes, "<fuzz>");
  } catch (const ember::Error&) {
    return;
  }
  require(digits.rows() > 0, "a CSV that is read has rows");
  check_digits(digits);
  const format::Digits train = format::split_rows(digits, true);
  const format::Digits test = format::split_rows(digits, false);
  check_digits(train);
  check_digits(test);
  require(train.rows() + test.rows() == digits.rows(), "the training and test rows are all the rows");
  std::array<int64_t, format::kNumClasses> all{}, in_train{}, in_test{};
  for (const uint8_t l : digits.labels) ++all[l];
  for (const uint8_t l : train.labels) ++in_train[l];
  for (const uint8_t l : test.labels) ++in_test[l];
  for (size_t d = 0; d < all.size(); ++d) {
    require(in_test[d] == all[d] / 5 && in_train[d] == all[d] - all[d] / 5, "a fifth of each digit's rows is test");
  }
  const bool full = digits.rows() == format::kSubsetRows &&
                    std::all_of(all.begin(), all.end(), [](int64_t c) { return c == format::kSubsetRowsPerDigit; });
  try {
    format::check_full_subset(digits, "<fuzz>");
    require(full, "only 500 rows of each digit are the whole subset");
  } catch (const ember::Error&) {
    require(!full, "500 rows of each digit are the whole subset");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> file(data, size);
  const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  std::vector<uint8_t> bytes;
  try {
    bytes = format::unpack(file, "<fuzz>", kMaxBytes);
  } catch (const ember::Error&) {
    require(gzip || size > kMaxBytes, "a file that is not gzip is refused only when it is too large");
    require(!gzip || !gzread_reference(file).has_value(), "unpack refuses only what gzread refuses");
    return 0;
  }
  if (gzip) {
    const std::optional<std::vector<uint8_t>> reference = gzread_reference(file);
    require(reference.has_value(), "unpack reads only what gzread reads");
    require(bytes == *reference, "unpack reads the bytes gzread reads");
  } else {
    require(std::equal(bytes.begin(), bytes.end(), data, data + size), "a file that is not gzip reads as it is");
  }
  fuzz_idx(bytes);
  fuzz_csv(bytes);
  return 0;
}
