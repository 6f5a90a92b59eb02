// Philox4x32-10, the counter-based generator: element i of a draw depends only on (seed, counter
// offset + i), so results are the same whatever the thread count.
#pragma once

#include <array>
#include <cstdint>

namespace ember::detail {

inline std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * counter[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * counter[2];
    counter = {static_cast<uint32_t>(p1 >> 32) ^ counter[1] ^ key[0], static_cast<uint32_t>(p1),
               static_cast<uint32_t>(p0 >> 32) ^ counter[3] ^ key[1], static_cast<uint32_t>(p0)};
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return counter;
}

// A draw: the key (from the seed) and the first counter block it uses. Ops take their draws from
// the global generator (reserve_random_blocks in src/ops/factory.cpp) and hand them to kernels as attributes.
struct PhiloxDraw {
  std::array<uint32_t, 2> key;
  uint64_t first_block;
};

inline PhiloxDraw philox_draw(uint64_t seed, uint64_t first_block) {
  return {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}, first_block};
}

// Four 32-bit random words for block `block` of a draw.
inline std::array<uint32_t, 4> philox_block(const PhiloxDraw& draw, uint64_t block) {
  const uint64_t c = draw.first_block + block;
  return philox4x32({static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0u, 0u}, draw.key);
}

}  // namespace ember::detail
