// MaxPool2d, AvgPool2d and AdaptiveAvgPool2d: options plus a call into nn::functional.
#include <sstream>

#include "ember/nn/modules.h"
#include "nn/repr.h"

namespace ember::nn {
namespace {

void check_window(const char* op, Pair kernel, Pair stride, Pair padding) {
  EMBER_CHECK(kernel.h > 0 && kernel.w > 0, "[", op, "] kernel_size must be positive, got ", repr::tuple(kernel));
  EMBER_CHECK(stride.h > 0 && stride.w > 0, "[", op, "] stride must be positive, got ", repr::tuple(stride));
  EMBER_CHECK(padding.h >= 0 && padding.w >= 0 && 2 * padding.h <= kernel.h && 2 * padding.w <= kernel.w, "[", op,
              "] padding must be non-negative and at most half of kernel_size ", repr::tuple(kernel), ", got ",
              repr::tuple(padding));
}

}  // namespace

MaxPool2d::MaxPool2d(Pair kernel, std::optional<Pair> stride_, Pair padding_, Pair dilation_, bool ceil)
    : kernel_size(kernel), stride(stride_.value_or(kernel)), padding(padding_), dilation(dilation_), ceil_mode(ceil) {
  check_window("MaxPool2d", kernel_size, stride, padding);
  EMBER_CHECK(dilation.h > 0 && dilation.w > 0, "[MaxPool2d] dilation must be positive, got ", repr::tuple(dilation));
}

Tensor MaxPool2d::forward(const Tensor& input) {
  return functional::max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode);
}

std::string MaxPool2d::extra_repr() const {
  return repr::concat("kernel_size=", repr::pair(kernel_size), ", stride=", repr::pair(stride),
                      ", padding=", repr::pair(padding), ", dilation=", repr::pair(dilation),
                      ", ceil_mode=", repr::boolean(ceil_mode));
}

AvgPool2d::AvgPool2d(Pair kernel, std::optional<Pair> stride_, Pair padding_, bool ceil, bool include_pad)
    : kernel_size(kernel),
      stride(stride_.value_or(kernel)),
      padding(padding_),
      ceil_mode(ceil),
      count_include_pad(include_pad) {
  check_window("AvgPool2d", kernel_size, stride, padding);
}

Tensor AvgPool2d::forward(const Tensor& input) {
  return functional::avg_pool2d(input, kernel_size, stride, padding, ceil_mode, count_include_pad);
}

std::string AvgPool2d::extra_repr() const {
  std::ostringstream out;
  out << "kernel_size=" << repr::pair(kernel_size) << ", stride=" << repr::pair(stride)
      << ", padding=" << repr::pair(padding);
  if (ceil_mode) out << ", ceil_mode=true";
  if (!count_include_pad) out << ", count_include_pad=false";
  return out.str();
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Pair size) : output_size(size) {
  EMBER_CHECK(size.h > 0 && size.w > 0, "[AdaptiveAvgPool2d] output_size must be positive, got ", repr::tuple(size));
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& input) { return functional::adaptive_avg_pool2d(input, output_size); }

std::string AdaptiveAvgPool2d::extra_repr() const { return repr::concat("output_size=", repr::pair(output_size)); }

// --- Upsample -------------------------------------------------------------------------------------

Upsample::Upsample(std::optional<std::vector<int64_t>> size_, std::optional<std::vector<double>> scale_factor_,
                   std::string mode_, std::optional<bool> align_corners_)
    : size(std::move(size_)),
      scale_factor(std::move(scale_factor_)),
      mode(std::move(mode_)),
      align_corners(align_corners_) {
  EMBER_CHECK(size.has_value() != scale_factor.has_value(),
              "[Upsample] exactly one of size and scale_factor must be given");
}

Tensor Upsample::forward(const Tensor& input) {
  return functional::interpolate(input, size, scale_factor, mode, align_corners);
}

std::string Upsample::extra_repr() const {
  std::string out;
  if (size) {
    out = "size=(";
    for (size_t i = 0; i < size->size(); ++i) out += repr::concat(i > 0 ? ", " : "", (*size)[i]);
    out += ")";
  } else {
    out = "scale_factor=(";
    for (size_t i = 0; i < scale_factor->size(); ++i) out += repr::concat(i > 0 ? ", " : "", (*scale_factor)[i]);
    out += ")";
  }
  return repr::concat(out, ", mode='", mode, "'");
}

}  // namespace ember::nn
