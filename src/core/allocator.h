// Storage allocation per device type. The CPU caching allocator is built in: 64-byte aligned
// blocks in size classes, kept in per-class free lists when released so a steady-state loop never
// calls the system allocator. Other device types get their allocator from their backend, which
// registers it here (src/cuda/device_allocator.cpp); core never calls into a backend.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "ember/memory.h"
#include "ember/tensor.h"

namespace ember {

// A device type's storage allocator.
class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  // Out of memory is an ember::Error "[op] cannot allocate N bytes ..." naming `op`.
  virtual std::shared_ptr<StorageImpl> allocate(int64_t nbytes, int device, const char* op) = 0;
  virtual MemoryStats stats(int device) = 0;
  virtual void reset_peak(int device) = 0;
  virtual void empty_cache(int device) = 0;
  // Copies `nbytes` bytes between two places of which one or both are on this device type (the
  // other may be the host), in the order of the work queued before, and waits until a host
  // destination holds them.
  virtual void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, int64_t nbytes) = 0;
};

// Registers the allocator of a (non-CPU) device type; `allocator` must live forever.
void register_device_allocator(DeviceType type, DeviceAllocator* allocator);

// A new storage of at least `nbytes` bytes from the device's caching allocator. A request that
// cannot be met is an ember::Error "[op] cannot allocate N bytes (...)" naming `op`, the op the
// memory is for (Note [what cannot be allocated] in allocator.cpp); so is a device type without a
// registered allocator.
std::shared_ptr<StorageImpl> allocate_storage(int64_t nbytes, Device device, const char* op = "allocate");

// Copies `nbytes` bytes from src on src_device to dst on dst_device (a device's allocator moves
// them when either side is not the CPU).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, int64_t nbytes);

// "3.6 TiB": a byte count for a message (binary units, one decimal).
std::string format_bytes(int64_t bytes);

// The counters, peak reset and cache release of the device's allocator (ember/memory.h's
// functions make sure the backends are registered first).
MemoryStats allocator_stats(Device device);
void allocator_reset_peak(Device device);
void allocator_empty_cache(Device device);

// Called on every CPU allocation and release while set (the profiler's memory timeline), with the
// bytes in use after it and the change. One relaxed load when unset.
using MemoryObserver = void (*)(Device device, int64_t bytes_in_use, int64_t delta);
void set_memory_observer(MemoryObserver observer);

}  // namespace ember
