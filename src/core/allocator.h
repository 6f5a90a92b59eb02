// The CPU caching allocator: 64-byte aligned blocks in size classes, kept in per-class free lists
// when released so a steady-state loop never calls the system allocator. Counters feed
// ember::memory_stats().
#pragma once

#include <memory>

#include "ember/tensor.h"

namespace ember {

// A new storage of at least `nbytes` bytes from the device's caching allocator.
std::shared_ptr<StorageImpl> allocate_storage(int64_t nbytes, Device device);

}  // namespace ember
