// The selective scan's row operands, shared by the per-target code in scan.cpp and its dispatch.
#pragma once

#include <cstdint>

namespace ember::cpu {

// One (batch, channel) row: u and delta (length values), A (state values), B and C (length x
// state, the batch's), the chunk the forward saves states at.
template <class T>
struct ScanRow {
  const T* u;
  const T* delta;
  const T* a;
  const T* b;
  const T* c;
  int64_t length, state, chunk;
};

}  // namespace ember::cpu
