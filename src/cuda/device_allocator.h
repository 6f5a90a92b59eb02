// The CUDA backend: storage on CUDA devices from one caching BlockAllocator per device (on that
// device's stream), registered with core's allocate_storage. In a build without CUDA, or without a
// usable device, every allocation and counter throws a clear ember::Error.
#pragma once

#include "base/kernel.h"

namespace ember::cuda {

// Registers the CUDA allocator with core, and the CUDA kernels in `table` (kernels.h).
void register_backend(KernelTable& table);

}  // namespace ember::cuda
