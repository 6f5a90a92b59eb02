#include "core/allocator.h"

#include <unistd.h>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>  // malloc_trim
#endif
#if defined(__linux__)
#include <sys/sysinfo.h>
#endif

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

// Note [what cannot be allocated]: on Linux, malloc rarely says no. With overcommit (the default
// heuristic, or overcommit_memory=1) a request larger than the machine may still get address space,
// and the process is killed by the OOM killer when it touches the pages: no error, no message.
// So a single CPU request larger than all the memory the process could ever use is refused up
// front, with the numbers: physical memory plus swap, or the cgroup's limit (memory.max plus
// memory.swap.max, cgroup v2) when the process runs in a smaller one. Requests below that go to
// the system allocator; if it answers null (overcommit_memory=2, ulimit -v) that is an error too.
// What is not caught: many requests that each fit but together exceed the memory (the kernel's
// OOM killer decides those, as for any program).
struct MemoryLimit {
  int64_t bytes = std::numeric_limits<int64_t>::max();
  std::string description;  // "23.4 GiB of RAM + 0 B of swap"
};

#if defined(__linux__)
// A cgroup v2 limit file's value ("max" or missing: none).
std::optional<int64_t> read_cgroup_value(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  try {
    return std::stoll(text);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

int64_t saturating_add(int64_t a, int64_t b) {
  int64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? std::numeric_limits<int64_t>::max() : sum;
}
#endif

MemoryLimit find_memory_limit() {
  MemoryLimit limit;
#if defined(__linux__)
  struct sysinfo info {};
  if (sysinfo(&info) == 0) {
    const int64_t unit = info.mem_unit;
    const int64_t ram = static_cast<int64_t>(info.totalram) * unit, swap = static_cast<int64_t>(info.totalswap) * unit;
    limit.bytes = saturating_add(ram, swap);
    limit.description = format_bytes(ram) + " of RAM + " + format_bytes(swap) + " of swap";
  }
  // The cgroup this process runs in ("0::/path" in /proc/self/cgroup under cgroup v2).
  std::ifstream cgroups("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {
    if (line.rfind("0::", 0) != 0) continue;
    const std::string folder = "/sys/fs/cgroup" + line.substr(3);
    if (const std::optional<int64_t> memory = read_cgroup_value(folder + "/memory.max")) {
      const int64_t swap = read_cgroup_value(folder + "/memory.swap.max").value_or(0);
      if (saturating_add(*memory, swap) < limit.bytes) {
        limit.bytes = saturating_add(*memory, swap);
        limit.description = "the cgroup's limit of " + format_bytes(*memory) + " + " + format_bytes(swap) + " of swap";
      }
    }
  }
#elif defined(_SC_PHYS_PAGES)
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) {
    limit.bytes = static_cast<int64_t>(pages) * page_size;
    limit.description = format_bytes(limit.bytes) + " of RAM";
  }
#endif
  return limit;
}

const MemoryLimit& memory_limit() {
  static const MemoryLimit limit = find_memory_limit();
  return limit;
}

// Size classes: multiples of 64 bytes up to 1 KiB, then four classes per power of two, so a
// cached block wastes at most a quarter of its size.
int64_t size_class(int64_t nbytes) {
  if (nbytes <= 1024) return nbytes <= 0 ? kAlignment : (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  const int64_t power = std::bit_floor(static_cast<uint64_t>(nbytes - 1));
  const int64_t step = power / 4;
  return (nbytes + step - 1) / step * step;
}

// This thread's share of MemoryStats::system_allocations (thread_system_allocations()).
thread_local int64_t t_system_allocations = 0;

class CpuCachingAllocator {
 public:
  // `op` names the op the request is for, in the error when it cannot be met.
  void* allocate(int64_t nbytes, int64_t* class_bytes, const char* op) {
    if (nbytes > memory_limit().bytes) [[unlikely]] {
      check_fits_in_memory(static_cast<double>(nbytes), op, format_bytes(nbytes));
    }
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
      EMBER_CHECK(p != nullptr, "[", op, "] cannot allocate ", nbytes, " bytes (", format_bytes(nbytes),
                  "): the system allocator refused (out of memory; ember holds ", format_bytes(stats_.bytes_in_use),
                  " in tensors)");
      ++stats_.system_allocations;
      ++t_system_allocations;
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
    {
      std::lock_guard<std::mutex> lock(mutex_);
      release_cached_locked();
    }
#if defined(__GLIBC__)
    // free() keeps blocks below the mmap threshold (128 KiB at first, raised to the size of each
    // larger block freed) in malloc's heap, still resident: after 1,100 steps of a small GPT only
    // 0.5 of the 2.1 MiB freed left the process. malloc_trim hands every whole free page of malloc's
    // arenas back to the system (tests/test_soak.cpp checks that resident memory drops).
    malloc_trim(0);
#endif
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

std::string format_bytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 6) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.1f %s", value, kUnits[unit]);
  return text;
}

int64_t cpu_memory_limit() { return memory_limit().bytes; }

void check_fits_in_memory(double bytes, const char* op, const std::string& what) {
  const MemoryLimit& limit = memory_limit();
  if (bytes <= static_cast<double>(limit.bytes)) return;
  char count[32];
  std::snprintf(count, sizeof(count), bytes < 9.2e18 ? "%.0f" : "%.3g", bytes);
  EMBER_FAIL("[", op, "] cannot allocate ", count, " bytes (", what, "): more than this machine's memory (",
             limit.description, ")");
}

std::shared_ptr<StorageImpl> allocate_storage(int64_t nbytes, Device device, const char* op) {
  EMBER_CHECK(nbytes >= 0, "[", op, "] cannot allocate a negative size, ", nbytes, " bytes");
  if (!device.is_cpu()) return device_allocator(device, op).allocate(nbytes, device.index, op);
  int64_t class_bytes = 0;
  void* p = cpu_allocator().allocate(nbytes, &class_bytes, op);
  return detail::make_pooled<StorageImpl>(p, nbytes, device, &release_cpu_block, nullptr);
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, int64_t nbytes) {
  if (nbytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, static_cast<size_t>(nbytes));
    return;
  }
  const Device device = dst_device.is_cpu() ? src_device : dst_device;
  device_allocator(device, "copy").copy_bytes(dst, dst_device, src, src_device, nbytes);
}

int64_t thread_system_allocations() { return t_system_allocations; }

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
