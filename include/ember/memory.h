// Memory counters of each device's caching allocator, and returning its cache to the system.
#pragma once

#include <cstdint>

#include "ember/device.h"

namespace ember {

struct MemoryStats {
  int64_t bytes_in_use = 0;  // handed out to tensors now
  int64_t peak_bytes_in_use = 0;
  int64_t bytes_reserved = 0;      // in use + cached
  int64_t system_allocations = 0;  // calls to the system allocator
  int64_t cache_hits = 0;
  int64_t system_frees = 0;
};

MemoryStats memory_stats(Device device = kCPU);
void reset_peak_memory_stats(Device device = kCPU);
// Returns every cached, unused block to the system (with glibc, malloc_trim then hands the freed
// pages back, so resident memory drops).
void empty_cache(Device device = kCPU);

// The calls to the system allocator that the calling thread's CPU allocations made (the part of
// MemoryStats::system_allocations that is this thread's). A training loop reads it around its steps
// to count what the steps cost apart from a data loader's background thread, whose prefetching
// reaches its most batches alive at moments that depend on the timing.
int64_t thread_system_allocations();

}  // namespace ember
