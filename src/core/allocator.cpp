#include "core/allocator.h"

#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "core/block_pool.h"

namespace ember {
namespace {

std::atomic<MemoryObserver> g_memory_observer{nullptr};

void observe_memory(int64_t bytes_in_use, int64_t delta) {
  if (const MemoryObserver observer = g_memory_observer.load(std::memory_order_relaxed)) [[unlikely]] {
    observer(kCPU, bytes_in_use, delta);
  }
}

constexpr int64_t kAlignment = 64;

// Size classes: multiples of 64 bytes up to 1 KiB, then four classes per power of two, so a
// cached block wastes at most a quarter of its size.
int64_t size_class(int64_t nbytes) {
  if (nbytes <= 1024) return nbytes <= 0 ? kAlignment : (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  const int64_t power = std::bit_floor(static_cast<uint64_t>(nbytes - 1));
  const int64_t step = power / 4;
  return (nbytes + step - 1) / step * step;
}

class CpuCachingAllocator {
 public:
  void* allocate(int64_t nbytes, int64_t* class_bytes) {
    const int64_t bytes = size_class(nbytes);
    *class_bytes = bytes;
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<void*>& blocks = free_list(bytes);
    void* p = nullptr;
    if (!blocks.empty()) {
      p = blocks.back();
      blocks.pop_back();
      ++stats_.cache_hits;
    } else {
      p = std::aligned_alloc(kAlignment, static_cast<size_t>(bytes));
      if (p == nullptr) {
        release_cached_locked();  // retry once with the cache returned to the system
        p = std::aligned_alloc(kAlignment, static_cast<size_t>(bytes));
      }
      EMBER_CHECK(p != nullptr, "[allocator] out of memory allocating ", bytes, " bytes (", stats_.bytes_in_use,
                  " in use)");
      ++stats_.system_allocations;
      stats_.bytes_reserved += bytes;
    }
    stats_.bytes_in_use += bytes;
    if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
    observe_memory(stats_.bytes_in_use, bytes);  // the profiler's memory timeline
    return p;
  }

  void release(void* p, int64_t class_bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.bytes_in_use -= class_bytes;
    observe_memory(stats_.bytes_in_use, -class_bytes);
    free_list(class_bytes).push_back(p);
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached_locked();
  }

  MemoryStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }

 private:
  // The small classes (multiples of 64 bytes up to 1 KiB) are an array: a small op's output
  // skips the hash lookup.
  std::vector<void*>& free_list(int64_t class_bytes) {
    if (class_bytes <= kSmallLimit) return small_[class_bytes / kAlignment - 1];
    return free_[class_bytes];
  }

  void release_blocks_locked(std::vector<void*>& blocks, int64_t bytes) {
    for (void* p : blocks) {
      std::free(p);
      stats_.bytes_reserved -= bytes;
      ++stats_.system_frees;
    }
    blocks.clear();
  }

  void release_cached_locked() {
    for (int i = 0; i < kSmallClasses; ++i) release_blocks_locked(small_[i], (i + 1) * kAlignment);
    for (auto& [bytes, blocks] : free_) release_blocks_locked(blocks, bytes);
  }

  static constexpr int64_t kSmallLimit = 1024;
  static constexpr int kSmallClasses = kSmallLimit / kAlignment;

  std::mutex mutex_;
  std::vector<void*> small_[kSmallClasses];
  std::unordered_map<int64_t, std::vector<void*>> free_;
  MemoryStats stats_;
};

CpuCachingAllocator& cpu_allocator() {
  // Never destroyed: storages released during static destruction still find it.
  static auto* allocator = new CpuCachingAllocator();
  return *allocator;
}

// The class size is recomputed from the requested size, so storages report exactly what was asked.
void release_cpu_block(void* data, int64_t nbytes, void* /*context*/) {
  cpu_allocator().release(data, size_class(nbytes));
}

DeviceAllocator* g_device_allocators[kNumDeviceTypes] = {};

DeviceAllocator& device_allocator(Device device, const char* op) {
  DeviceAllocator* allocator = g_device_allocators[static_cast<int>(device.type)];
  EMBER_CHECK(allocator != nullptr, "[", op, "] no allocator is registered for ", device);
  return *allocator;
}

}  // namespace

void register_device_allocator(DeviceType type, DeviceAllocator* allocator) {
  g_device_allocators[static_cast<int>(type)] = allocator;
}

void set_memory_observer(MemoryObserver observer) { g_memory_observer.store(observer, std::memory_order_relaxed); }

std::shared_ptr<StorageImpl> allocate_storage(int64_t nbytes, Device device) {
  if (!device.is_cpu()) return device_allocator(device, "allocate").allocate(nbytes, device.index);
  EMBER_CHECK(nbytes >= 0, "[allocate] negative size ", nbytes);
  int64_t class_bytes = 0;
  void* p = cpu_allocator().allocate(nbytes, &class_bytes);
  return detail::make_pooled<StorageImpl>(p, nbytes, device, &release_cpu_block, nullptr);
}

MemoryStats allocator_stats(Device device) {
  if (!device.is_cpu()) return device_allocator(device, "memory_stats").stats(device.index);
  return cpu_allocator().stats();
}
void allocator_reset_peak(Device device) {
  if (!device.is_cpu()) return device_allocator(device, "reset_peak_memory_stats").reset_peak(device.index);
  cpu_allocator().reset_peak();
}
void allocator_empty_cache(Device device) {
  if (!device.is_cpu()) return device_allocator(device, "empty_cache").empty_cache(device.index);
  cpu_allocator().empty_cache();
}

}  // namespace ember
