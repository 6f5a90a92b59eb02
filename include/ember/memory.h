// Memory counters of each device's caching allocator, and returning its cache to the system.
#pragma once

#include <cstdint>
#include <string>

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

// The largest single CPU request the allocator passes to the system allocator: physical memory
// plus swap, or the process's cgroup limit when smaller.
int64_t cpu_memory_limit();

// Throws "[op] cannot allocate N bytes (what): more than this machine's memory (...)" when `bytes`
// (a double: an estimate need not fit in 64 bits) is over cpu_memory_limit(). For code that is
// about to make many allocations (a model of many layers) that together cannot fit: each alone
// would pass, and the process would grind until the OOM killer ends it.
void check_fits_in_memory(double bytes, const char* op, const std::string& what);

}  // namespace ember
