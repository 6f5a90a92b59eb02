// The blocked weight gradients' shared schedule (conv_weight_tiles.h).
#include "kernels/cpu/conv_weight_tiles.h"

namespace ember::cpu {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

WeightTiles weight_tiles(const Conv2dGeometry& g, int64_t lanes, int threads, int64_t band_positions) {
  WeightTiles w;
  w.lanes = lanes;
  w.taps = g.kernel_h * g.kernel_w;
  w.in_blocks = ceil_div(g.in_channels, lanes);
  w.groups = ceil_div(ceil_div(g.out_channels, lanes), 2);
  w.tap_parts = 1;
  while (w.tap_parts < w.taps && w.groups * w.in_blocks * w.tap_parts < 2 * threads) ++w.tap_parts;
  w.taps_per_part = ceil_div(w.taps, w.tap_parts);
  w.band = std::max<int64_t>(1, band_positions / g.out_width);
  return w;
}

void scatter_weight_tiles(const Conv2dGeometry& g, const WeightTiles& w, const float* sums, float* grad_weight) {
  const int64_t half = w.lanes / 2;
  parallel_for(0, g.out_channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      const int64_t og = o / (2 * w.lanes), j = o % (2 * w.lanes);
      for (int64_t ci = 0; ci < g.in_channels; ++ci) {
        for (int64_t tap = 0; tap < w.taps; ++tap) {
          grad_weight[(o * g.in_channels + ci) * w.taps + tap] =
              sums[w.offset(tap, ci / half, og) + (ci % half) * 2 * w.lanes + j];
        }
      }
    }
  });
}

}  // namespace ember::cpu
