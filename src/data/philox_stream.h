// A counter-based stream of random words for the data pipeline (shuffling, augmentation).
#pragma once

#include <array>
#include <cstdint>

#include "base/philox.h"

namespace ember::data::detail {

// A stream of 64-bit random words: Philox4x32-10 keyed by the seed, counting blocks within the
// stream (an epoch, a batch). Counter-based: a stream needs no state from the streams before it.
class PhiloxStream {
 public:
  PhiloxStream(uint64_t seed, uint64_t stream)
      : key_{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)},
        stream_low_(static_cast<uint32_t>(stream)),
        stream_high_(static_cast<uint32_t>(stream >> 32)) {}

  uint64_t next() {
    if (used_ == 2) {
      words_ = ember::detail::philox4x32(
          {static_cast<uint32_t>(block_), static_cast<uint32_t>(block_ >> 32), stream_low_, stream_high_}, key_);
      ++block_;
      used_ = 0;
    }
    const uint64_t value = (static_cast<uint64_t>(words_[2 * used_ + 1]) << 32) | words_[2 * used_];
    ++used_;
    return value;
  }

  // Uniform in [0, bound), without modulo bias: draws below 2^64 mod bound are rejected, so the
  // accepted range is a whole multiple of bound.
  uint64_t below(uint64_t bound) {
    const uint64_t threshold = (0 - bound) % bound;
    uint64_t value = next();
    while (value < threshold) value = next();
    return value % bound;
  }

 private:
  std::array<uint32_t, 2> key_;
  uint32_t stream_low_;
  uint32_t stream_high_;
  uint64_t block_ = 0;
  std::array<uint32_t, 4> words_{};
  int used_ = 2;
};

}  // namespace ember::data::detail
