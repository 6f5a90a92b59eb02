// Augmentation for image batches.
#include <algorithm>

#include "data/philox_stream.h"
#include "ember/autograd.h"
#include "ember/data.h"
#include "ember/ops.h"

namespace ember::data {

Tensor random_shift(const Tensor& images, int64_t max_shift, double fill, uint64_t seed, uint64_t stream) {
  EMBER_CHECK(images.dim() == 4, "[random_shift] expected images (N, C, H, W), got shape ", images.shape());
  EMBER_CHECK(images.is_floating_point(), "[random_shift] expected floating-point images, got ", images.dtype());
  EMBER_CHECK(max_shift >= 0, "[random_shift] max_shift must be non-negative, got ", max_shift);
  autograd::NoGradGuard no_grad;
  const int64_t n = images.size(0), h = images.size(2), w = images.size(3);
  Tensor out = full(images.shape(), fill, images.dtype());
  detail::PhiloxStream random(seed, stream);
  const uint64_t choices = static_cast<uint64_t>(2 * max_shift + 1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t dy = static_cast<int64_t>(random.below(choices)) - max_shift;
    const int64_t dx = static_cast<int64_t>(random.below(choices)) - max_shift;
    // out[y, x] = in[y - dy, x - dx] where both are inside the image.
    const int64_t rows = h - std::abs(dy), cols = w - std::abs(dx);
    if (rows <= 0 || cols <= 0) continue;
    const Tensor src =
        images.select(0, i).narrow(1, std::max<int64_t>(0, -dy), rows).narrow(2, std::max<int64_t>(0, -dx), cols);
    out.select(0, i).narrow(1, std::max<int64_t>(0, dy), rows).narrow(2, std::max<int64_t>(0, dx), cols).copy_(src);
  }
  return out;
}

}  // namespace ember::data
