// The global random generator: ops that draw random numbers reserve counter blocks from it and pass
// the key and the first block to their kernel as attributes.
#pragma once

#include <cstdint>

namespace ember::detail {

struct RandomDraw {
  uint64_t seed;
  uint64_t first_block;
};

// Reserves `blocks` Philox blocks (four 32-bit words each) of the global generator.
RandomDraw reserve_random_blocks(int64_t blocks);
// The global generator's key and next counter block (saved and restored by compile's check mode).
RandomDraw generator_state();
void set_generator_state(const RandomDraw& state);

}  // namespace ember::detail
