// Prints tensors exactly as PyTorch's repr does (torch/_tensor_str.py): the same number format
// choice (integer, fixed or scientific), column alignment, 80-column wrapping, summarization of
// tensors over 1000 elements with 3 edge items, and the dtype/size suffixes.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "ember/ops.h"

namespace ember {
namespace {

constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int kLineWidth = 80;

std::string printf_string(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}

class Formatter {
 public:
  Formatter(const std::vector<double>& values, DType dtype) : floating_(is_floating(dtype)), bool_(dtype == kBool) {
    if (!floating_) {
      for (double v : values) max_width_ = std::max<int>(max_width_, static_cast<int>(plain(v).size()));
      return;
    }
    std::vector<double> finite;
    for (double v : values) {
      if (std::isfinite(v) && v != 0) finite.push_back(v);
    }
    if (finite.empty()) return;
    double lo = std::abs(finite[0]), hi = lo;
    for (double v : finite) {
      lo = std::min(lo, std::abs(v));
      hi = std::max(hi, std::abs(v));
      if (v != std::ceil(v)) int_mode_ = false;
    }
    if (int_mode_) {
      sci_mode_ = hi / lo > 1000.0 || hi > 1e8;
    } else {
      sci_mode_ = hi / lo > 1000.0 || hi > 1e8 || lo < 1e-4;
    }
    for (double v : finite) {
      const std::string s = format_finite(v);
      max_width_ = std::max<int>(max_width_, static_cast<int>(s.size()));
    }
  }

  int width() const { return max_width_; }

  std::string format(double v) const {
    std::string s;
    if (!floating_) {
      s = plain(v);
    } else if (std::isnan(v)) {
      s = "nan";
    } else if (std::isinf(v)) {
      s = v > 0 ? "inf" : "-inf";
    } else {
      s = format_finite(v);
    }
    if (static_cast<int>(s.size()) < max_width_) s.insert(0, static_cast<size_t>(max_width_) - s.size(), ' ');
    return s;
  }

 private:
  std::string format_finite(double v) const {
    if (sci_mode_) return printf_string("%.4e", v);
    if (int_mode_) return printf_string("%.0f", v).append(".");
    return printf_string("%.4f", v);
  }

  std::string plain(double v) const {
    if (bool_) return v != 0 ? "True" : "False";
    return std::to_string(static_cast<int64_t>(v));
  }

  bool floating_;
  bool bool_;
  bool int_mode_ = true;
  bool sci_mode_ = false;
  int max_width_ = 1;
};

double value_at(const Tensor& t, int64_t offset) {
  return dispatch_dtype(t.dtype(), [&](auto tag) -> double {
    using T = typename decltype(tag)::type;
    return static_cast<double>(static_cast<compute_t<T>>(static_cast<const T*>(t.data_ptr())[offset]));
  });
}

// The indices along a dim that get printed (all, or the edges when summarizing).
std::vector<int64_t> shown(int64_t size, bool summarize) {
  std::vector<int64_t> indices;
  if (summarize && size > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i) indices.push_back(i);
    for (int64_t i = size - kEdgeItems; i < size; ++i) indices.push_back(i);
  } else {
    for (int64_t i = 0; i < size; ++i) indices.push_back(i);
  }
  return indices;
}

void collect(const Tensor& t, int dim, int64_t offset, bool summarize, std::vector<double>* values) {
  if (dim == t.dim()) {
    values->push_back(value_at(t, offset));
    return;
  }
  for (int64_t i : shown(t.shape()[dim], summarize))
    collect(t, dim + 1, offset + i * t.strides()[dim], summarize, values);
}

std::string render(const Tensor& t, int dim, int64_t offset, int indent, bool summarize, const Formatter& f) {
  const int remaining = t.dim() - dim;
  if (remaining == 0) return f.format(value_at(t, offset));
  const int64_t size = t.shape()[dim];
  const bool elided = summarize && size > 2 * kEdgeItems;
  if (remaining == 1) {
    const int element_length = f.width() + 2;
    const int per_line = std::max(1, (kLineWidth - indent) / element_length);
    std::vector<std::string> items;
    for (int64_t i : shown(size, summarize)) {
      if (elided && i == size - kEdgeItems) items.emplace_back(" ...");
      items.push_back(f.format(value_at(t, offset + i * t.strides()[dim])));
    }
    std::string out = "[";
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0 && i % static_cast<size_t>(per_line) == 0) {
        out.append(",\n").append(static_cast<size_t>(indent) + 1, ' ');
      } else if (i > 0) {
        out.append(", ");
      }
      out += items[i];
    }
    return out + "]";
  }
  std::string separator(",");
  separator.append(static_cast<size_t>(remaining - 1), '\n').append(static_cast<size_t>(indent) + 1, ' ');
  std::string out = "[";
  bool first = true;
  for (int64_t i : shown(size, summarize)) {
    if (!first) out += separator;
    if (elided && i == size - kEdgeItems) out.append("...").append(separator);
    first = false;
    out += render(t, dim + 1, offset + i * t.strides()[dim], indent + 1, summarize, f);
  }
  return out + "]";
}

}  // namespace

std::ostream& operator<<(std::ostream& out, const Tensor& tensor) {
  if (!tensor.defined()) return out << "[ undefined tensor ]";
  // A device tensor prints its values from a host copy, with the device first among the suffixes.
  const Tensor t = tensor.device().is_cpu() ? tensor : tensor.detach().to(kCPU);
  const std::string prefix = "tensor(";
  const int indent = static_cast<int>(prefix.size());
  std::vector<std::string> suffixes;
  if (!tensor.device().is_cpu()) {
    std::ostringstream device;
    device << "device='" << tensor.device() << "'";
    suffixes.push_back(device.str());
  }
  std::string body;
  const bool default_dtype = t.dtype() == kFloat32 || t.dtype() == kInt64 || t.dtype() == kBool;
  if (t.numel() == 0) {
    if (t.dim() != 1) {
      std::string size = "size=(";
      for (int d = 0; d < t.dim(); ++d) size += (d > 0 ? ", " : "") + std::to_string(t.shape()[d]);
      suffixes.push_back(size + ")");
    }
    if (t.dtype() != kFloat32) suffixes.push_back(std::string("dtype=torch.").append(dtype_name(t.dtype())));
    body = "[]";
  } else {
    if (!default_dtype) suffixes.push_back(std::string("dtype=torch.").append(dtype_name(t.dtype())));
    const bool summarize = t.numel() > kThreshold;
    std::vector<double> values;
    collect(t, 0, 0, summarize, &values);
    const Formatter formatter(values, t.dtype());
    body = render(t, 0, 0, indent, summarize, formatter);
  }
  std::string text = prefix + body;
  // As PyTorch counts it: len(text) - text.rfind("\n") + 1, with rfind giving -1 when absent.
  const size_t newline = text.rfind('\n');
  size_t last_line = newline == std::string::npos ? text.size() + 2 : text.size() - newline + 1;
  for (const std::string& suffix : suffixes) {
    if (last_line + suffix.size() + 2 > static_cast<size_t>(kLineWidth)) {
      text.append(",\n").append(static_cast<size_t>(indent), ' ').append(suffix);
      last_line = static_cast<size_t>(indent) + suffix.size();
    } else {
      text += ", " + suffix;
      last_line += suffix.size() + 2;
    }
  }
  return out << text << ")";
}

}  // namespace ember
