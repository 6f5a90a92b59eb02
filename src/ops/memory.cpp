// ember/memory.h: the device backends are registered first, so a device's counters can be read
// before any op has run on it.
#include "ember/memory.h"

#include "core/allocator.h"
#include "ops/dispatch.h"

namespace ember {

MemoryStats memory_stats(Device device) {
  if (!device.is_cpu()) dispatch::ensure_backends();
  return allocator_stats(device);
}

void reset_peak_memory_stats(Device device) {
  if (!device.is_cpu()) dispatch::ensure_backends();
  allocator_reset_peak(device);
}

void empty_cache(Device device) {
  if (!device.is_cpu()) dispatch::ensure_backends();
  allocator_empty_cache(device);
}

}  // namespace ember
