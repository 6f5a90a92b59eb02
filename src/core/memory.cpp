// ember/memory.h: each device's allocator, from core's table (the CPU's built in; a device backend
// registers its own at start-up, so a device's counters can be read before any op has run on it).
#include "ember/memory.h"

#include "core/allocator.h"

namespace ember {

MemoryStats memory_stats(Device device) { return allocator_stats(device); }

void reset_peak_memory_stats(Device device) { allocator_reset_peak(device); }

void empty_cache(Device device) { allocator_empty_cache(device); }

}  // namespace ember
