// The schedule the blocked weight gradients share (Note [blocked weight gradient] in
// conv_nchwc.cpp; its bfloat16 form in conv_nchwc_bf16.cpp): the result cut into tiles of one tap,
// half a block of input channels and two vectors of output channels, tasks over (pair of output
// vectors, input block, range of taps), each walking the chunk's images a band of output rows at a
// time, and the tiles' float32 sums scattered into the (C_out, C_in, kh, kw) result at the end.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/parallel.h"

namespace ember::cpu {

struct WeightTiles {
  int64_t lanes = 0;      // output channels per vector, input channels per block
  int64_t taps = 0;       // kh * kw
  int64_t in_blocks = 0;  // input blocks
  int64_t groups = 0;     // pairs of output vectors
  int64_t tap_parts = 0, taps_per_part = 0;
  int64_t band = 0;  // output rows per pass over a tile's sums

  int64_t input_tiles() const { return 2 * in_blocks; }  // half blocks
  int64_t tile_floats() const { return lanes * lanes; }  // lanes / 2 input channels x 2 vectors
  int64_t count() const { return taps * input_tiles() * groups; }
  int64_t offset(int64_t tap, int64_t it, int64_t og) const {
    return ((tap * input_tiles() + it) * groups + og) * tile_floats();
  }
};

// g's tiles with `lanes`-wide vectors and blocks. Taps are split between tasks only as far as it
// takes to give every thread two tasks; a band holds about `band_positions` output positions.
WeightTiles weight_tiles(const Conv2dGeometry& g, int64_t lanes, int threads, int64_t band_positions);

// For each task, image n of the chunk's `images` and band [oh0, oh1): tile(n, og, oh0, oh1, tap, it,
// first, sums) for every tile the task owns, in an order the thread count does not change; `first`
// (the chunk is the batch's first, n == 0 and oh0 == 0) says the tile's sums start at zero.
template <class Tile>
void run_weight_tiles(const WeightTiles& w, const Conv2dGeometry& g, int64_t images, bool first_chunk, int threads,
                      float* sums, const Tile& tile) {
  parallel_tasks(w.groups * w.in_blocks * w.tap_parts, threads, [&](int64_t t) {
    const int64_t og = t % w.groups, ib = (t / w.groups) % w.in_blocks, part = t / (w.groups * w.in_blocks);
    const int64_t tap0 = part * w.taps_per_part, tap1 = std::min(w.taps, tap0 + w.taps_per_part);
    for (int64_t n = 0; n < images; ++n) {
      for (int64_t oh0 = 0; oh0 < g.out_height; oh0 += w.band) {
        const int64_t oh1 = std::min(g.out_height, oh0 + w.band);
        const bool first = first_chunk && n == 0 && oh0 == 0;
        for (int64_t tap = tap0; tap < tap1; ++tap) {
          for (int64_t it = 2 * ib; it < 2 * ib + 2; ++it) {
            tile(n, og, oh0, oh1, tap, it, first, sums + w.offset(tap, it, og));
          }
        }
      }
    }
  });
}

// grad_weight (C_out, C_in, kh, kw) from the tiles' sums.
void scatter_weight_tiles(const Conv2dGeometry& g, const WeightTiles& w, const float* sums, float* grad_weight);

}  // namespace ember::cpu
