// Shape, Strides and axis lists: small vectors of int64 stored inline (up to kMaxDims), so making
// a view never touches the heap.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <type_traits>
#include <utility>
#include <vector>

#include "ember/error.h"

namespace ember {

inline constexpr int kMaxDims = 8;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> values) { assign(values.begin(), values.end()); }
  Shape(const std::vector<int64_t>& values) { assign(values.begin(), values.end()); }  // NOLINT
  template <class It>
  requires(!std::is_integral_v<It>) Shape(It first, It last) { assign(first, last); }
  explicit Shape(int size, int64_t value = 0) {
    resize(size);
    std::fill(begin(), end(), value);
  }

  int size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t* data() { return values_; }
  const int64_t* data() const { return values_; }
  int64_t* begin() { return values_; }
  int64_t* end() { return values_ + size_; }
  const int64_t* begin() const { return values_; }
  const int64_t* end() const { return values_ + size_; }
  int64_t& operator[](int i) { return values_[i]; }
  int64_t operator[](int i) const { return values_[i]; }
  int64_t back() const { return values_[size_ - 1]; }

  void resize(int size) {
    EMBER_CHECK(size >= 0 && size <= kMaxDims, "[shape] at most ", kMaxDims, " dimensions are supported, got ", size);
    for (int i = size_; i < size; ++i) values_[i] = 0;
    size_ = size;
  }
  void push_back(int64_t value) {
    EMBER_CHECK(size_ < kMaxDims, "[shape] at most ", kMaxDims, " dimensions are supported");
    values_[size_++] = value;
  }
  void insert(int position, int64_t value) {
    push_back(0);
    for (int i = size_ - 1; i > position; --i) values_[i] = values_[i - 1];
    values_[position] = value;
  }
  void erase(int position) {
    for (int i = position; i + 1 < size_; ++i) values_[i] = values_[i + 1];
    --size_;
  }

  // Product of all entries (1 for an empty shape).
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < size_; ++i) n *= values_[i];
    return n;
  }
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  // A plain loop: shapes are short, and a library call costs more than comparing them.
  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.size_ != b.size_) return false;
    for (int i = 0; i < a.size_; ++i) {
      if (a.values_[i] != b.values_[i]) return false;
    }
    return true;
  }

 private:
  template <class It>
  void assign(It first, It last) {
    const auto count = std::distance(first, last);
    EMBER_CHECK(count <= kMaxDims, "[shape] at most ", kMaxDims, " dimensions are supported, got ", count);
    size_ = static_cast<int>(count);
    std::copy(first, last, values_);
  }

  int64_t values_[kMaxDims] = {};
  int size_ = 0;
};

using Strides = Shape;
using Axes = Shape;

inline std::ostream& operator<<(std::ostream& out, const Shape& shape) {
  out << '[';
  for (int i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  return out << ']';
}

// The number of elements of `shape`, checked: a negative dimension, or a product that does not fit
// in int64, is an ember::Error naming `op` (Shape::numel() would wrap around silently, and a
// wrapped count makes a huge shape look small).
int64_t checked_numel(const Shape& shape, const char* op);

// Contiguous (row-major) strides for `shape`, in elements.
Strides contiguous_strides(const Shape& shape);

// The strides that read (shape, strides) broadcast to `to` (numpy's rule, aligned at the right):
// 0 for the dims `to` adds and for size-1 dims it expands.
Strides broadcast_strides(const Shape& shape, const Strides& strides, const Shape& to);

// The storage elements [first, end) a geometry touches (non-negative strides; empty for zero
// elements).
std::pair<int64_t, int64_t> storage_extent(const Shape& shape, const Strides& strides, int64_t offset);
// The same for a geometry from the user (as_strided, from_blob): an extent beyond what 64 bits
// count is an ember::Error naming `op` (wrapped around, it could pass a bounds check).
std::pair<int64_t, int64_t> checked_storage_extent(const Shape& shape, const Strides& strides, int64_t offset,
                                                   const char* op);

// The stride of dims [0, count) of (sizes, strides) merged into one dim, if they can be: each dim
// must step exactly over the one inside it (size-1 dims don't count).
std::optional<int64_t> merged_stride(const int64_t* sizes, const int64_t* strides, int count);

// Whether (shape, strides) is row-major contiguous (size-1 dims may have any stride; an empty
// shape is contiguous).
inline bool is_contiguous_layout(const Shape& shape, const Strides& strides) {
  int64_t expected = 1;
  for (int d = shape.size() - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    if (shape[d] == 0) return true;
    if (strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

// Wraps a possibly negative axis into [0, ndim); throws "[op] axis ... out of range".
int normalize_axis(int64_t axis, int ndim, const char* op);

// NumPy broadcasting of two shapes; throws naming `op` when they are incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace ember
