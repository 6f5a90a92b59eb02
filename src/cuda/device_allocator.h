// Storage on CUDA devices, from one caching BlockAllocator per device on that device's stream.
// In a build without CUDA, or without a usable device, every call throws a clear ember::Error.
#pragma once

#include <cstdint>
#include <memory>

#include "ember/ops.h"
#include "ember/tensor.h"

namespace ember::cuda::detail {

std::shared_ptr<StorageImpl> allocate_storage(int64_t nbytes, int device);
MemoryStats memory_stats(int device);
void reset_peak_memory_stats(int device);
void empty_cache(int device);

}  // namespace ember::cuda::detail
