#include "cuda/device_allocator.h"

#include <mutex>
#include <vector>

#include "core/allocator.h"
#include "core/block_allocator.h"
#include "core/block_pool.h"
#include "cuda/kernels.h"
#include "ember/cuda.h"

#ifdef EMBER_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ember::cuda {
namespace {

void check_device(int device, const char* op) {
  EMBER_CHECK(device >= 0 && device < device_count(), "[", op, "] device cuda:", device,
              " is not available: ", status());
}

#ifdef EMBER_WITH_CUDA

void check(cudaError_t result, const char* what) {
  EMBER_CHECK(result == cudaSuccess, "[cuda] ", what, " failed: ", cudaGetErrorName(result), ": ",
              cudaGetErrorString(result));
}

// Switches to `device` for the scope, and back.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

class CudaBackend : public ember::detail::DeviceBackend {
 public:
  explicit CudaBackend(int device) : device_(device) {}

  void* allocate(size_t bytes) override {
    DeviceGuard guard(device_);
    void* ptr = nullptr;
    const cudaError_t result = cudaMalloc(&ptr, bytes);
    if (result == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // out of memory is answered with nullptr, not a sticky error
      return nullptr;
    }
    check(result, "cudaMalloc");
    return ptr;
  }
  void free(void* ptr) override {
    DeviceGuard guard(device_);
    check(cudaFree(ptr), "cudaFree");
  }
  ember::detail::EventId record_event(ember::detail::StreamId stream) override {
    DeviceGuard guard(device_);
    cudaEvent_t event = nullptr;
    check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(event, reinterpret_cast<cudaStream_t>(stream)), "cudaEventRecord");
    return reinterpret_cast<ember::detail::EventId>(event);
  }
  bool event_done(ember::detail::EventId event) override {
    const cudaError_t result = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
    if (result == cudaErrorNotReady) return false;
    check(result, "cudaEventQuery");
    return true;
  }
  void destroy_event(ember::detail::EventId event) override { cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event)); }
  std::string name() const override { return "cuda:" + std::to_string(device_); }

 private:
  int device_;
};

struct DeviceState {
  explicit DeviceState(int device) : backend(device), allocator(&backend) {}
  CudaBackend backend;
  ember::detail::BlockAllocator allocator;
};

DeviceState& state(int device) {
  // Never destroyed: storages released during static destruction still find their allocator.
  static std::vector<DeviceState*>* states = [] {
    auto* v = new std::vector<DeviceState*>();
    for (int d = 0; d < device_count(); ++d) v->push_back(new DeviceState(d));
    return v;
  }();
  return *(*states)[device];
}

void release_block(void* data, int64_t /*nbytes*/, void* context) {
  const int device = static_cast<int>(reinterpret_cast<intptr_t>(context));
  state(device).allocator.free(data);
}

#endif

// Storage on CUDA devices for core's allocate_storage and the memory counters.
class CudaAllocator final : public DeviceAllocator {
 public:
  std::shared_ptr<StorageImpl> allocate(int64_t nbytes, int device, const char* op) override {
    check_device(device, "allocate");
#ifdef EMBER_WITH_CUDA
    // Until per-device streams exist, every block belongs to the default stream (0).
    void* ptr = nullptr;
    try {
      ptr = state(device).allocator.allocate(static_cast<size_t>(nbytes), 0);
    } catch (const Error& e) {  // out of memory even with the cache returned: name the op it was for
      EMBER_FAIL("[", op, "] cannot allocate ", nbytes, " bytes (", format_bytes(nbytes), ") on cuda:", device, ": ",
                 e.what());
    }
    return ember::detail::make_pooled<StorageImpl>(ptr, nbytes, Device{DeviceType::kCUDA, device}, &release_block,
                                                   reinterpret_cast<void*>(static_cast<intptr_t>(device)));
#else
    return nullptr;
#endif
  }

  MemoryStats stats(int device) override {
    check_device(device, "memory_stats");
#ifdef EMBER_WITH_CUDA
    return state(device).allocator.stats();
#else
    return {};
#endif
  }

  void reset_peak(int device) override {
    check_device(device, "reset_peak_memory_stats");
#ifdef EMBER_WITH_CUDA
    state(device).allocator.reset_peak();
#endif
  }

  void empty_cache(int device) override {
    check_device(device, "empty_cache");
#ifdef EMBER_WITH_CUDA
    state(device).allocator.empty_cache();
#endif
  }

  // cudaMemcpy on the default stream: ordered after the kernels queued before it, and back on the
  // host when it returns. Pageable host memory is staged by the driver.
  void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, int64_t nbytes) override {
    const Device device = dst_device.is_cpu() ? src_device : dst_device;
    check_device(device.index, "copy");
    if (!src_device.is_cpu()) check_device(src_device.index, "copy");
#ifdef EMBER_WITH_CUDA
    DeviceGuard guard(device.index);
    check(cudaMemcpy(dst, src, static_cast<size_t>(nbytes), cudaMemcpyDefault), "cudaMemcpy");
#endif
  }
};

// The allocator is registered with core at start-up (core's table is constant-initialized, so the
// order of static initializers does not matter): memory_stats(cuda) and the factories work before
// any op has run. This file is always linked: the kernel table calls register_backend. Never
// destroyed, like the CPU allocator.
[[maybe_unused]] const bool kAllocatorRegistered = [] {
  register_device_allocator(DeviceType::kCUDA, new CudaAllocator());
  return true;
}();

}  // namespace

void register_backend(KernelTable& table) { register_kernels(table); }

}  // namespace ember::cuda
