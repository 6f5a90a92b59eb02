// The byte level of the MNIST readers: gunzipping a file's bytes in memory, the IDX files and the
// CSV subset, and the CSV's split into training and test rows. Nothing here knows Tensor, so the
// fuzzer (fuzz/mnist.cpp) links this file, base/error.cpp and zlib alone; mnist.cpp reads the
// files and makes the tensors. Errors start with "[mnist]" and name the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ember::mnist_format {

inline constexpr int64_t kNumClasses = 10;
inline constexpr int64_t kPixelsPerImage = 28 * 28;
inline constexpr size_t kMaxFileBytes = size_t{1} << 30;  // unpacked; MNIST's largest file is 47 MB

// The subset mnist_5k.csv.gz: 5000 rows, 500 of each digit.
inline constexpr int64_t kSubsetRows = 5000;
inline constexpr int64_t kSubsetRowsPerDigit = 500;

// `file` as the reader sees it: when it starts with gzip's magic bytes, its gzip members
// decompressed one after the other (bytes after the last member that do not start another one are
// ignored, as zlib's gzread ignores them); any other file unchanged. Corrupt or truncated gzip data,
// and more than `max_bytes` unpacked (a gzip bomb), are errors naming `path`.
std::vector<uint8_t> unpack(std::span<const uint8_t> file, const std::string& path, size_t max_bytes = kMaxFileBytes);

// An IDX file: magic 0x00 0x00 <type 0x08 = unsigned byte> <number of dims>, then each dim as a
// big-endian u32, then the bytes row-major, and nothing after them.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;  // the whole (unpacked) file
  size_t data_offset = 0;
  const uint8_t* data() const { return bytes.data() + data_offset; }
};

// Checks the magic number (unsigned bytes, `dims` dimensions; `what` names the content in the
// error), the header and that the data is exactly as long as the dims say.
IdxArray parse_idx(std::vector<uint8_t> bytes, uint8_t dims, const char* what, const std::string& path);

struct Digits {
  std::vector<uint8_t> pixels;  // (rows, 784), row-major
  std::vector<uint8_t> labels;  // (rows), each 0..9
  int64_t rows() const { return static_cast<int64_t>(labels.size()); }
};

// An images file (count x 28 x 28) and its labels file (count), checked against each other.
Digits idx_digits(const IdxArray& images, const std::string& images_path, const IdxArray& labels,
                  const std::string& labels_path);

// Rows "p0,p1,...,p783,label" of integers (pixels 0..255, labels 0..9), lines ending in "\n" or
// "\r\n"; blank lines are skipped. A file without rows is an error.
Digits parse_csv(std::span<const uint8_t> bytes, const std::string& path);

// Checks that `digits` are the whole subset (5000 rows, 500 per digit); the error gives the counts.
void check_full_subset(const Digits& digits, const std::string& path);

// The CSV's split: per digit, in file order, the first count - count / 5 rows are training, the
// last count / 5 test.
Digits split_rows(const Digits& digits, bool train);

}  // namespace ember::mnist_format
