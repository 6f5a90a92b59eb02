// The caching allocator for device memory (CUDA). Memory comes from the driver in segments, is
// handed out as blocks split from them, and is cached when freed, so a steady-state training
// step never calls the driver. Blocks belong to the stream they were allocated on and are reused
// only on that stream; a block also used on another stream (record_stream) returns to the cache
// only when that stream's work recorded at free time has finished.
//
// The driver is behind DeviceBackend, so the bookkeeping is the same code with cudaMalloc in the
// CUDA build and with an ordinary heap in the tests that run on machines without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "ember/memory.h"

namespace ember::detail {

using StreamId = uintptr_t;  // an opaque stream handle (cudaStream_t); 0 is the default stream
using EventId = uintptr_t;

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  // nullptr when the device is out of memory.
  virtual void* allocate(size_t bytes) = 0;
  virtual void free(void* ptr) = 0;
  // An event marking the work queued on `stream` so far, and whether it has finished.
  virtual EventId record_event(StreamId stream) = 0;
  virtual bool event_done(EventId event) = 0;
  virtual void destroy_event(EventId event) = 0;
  virtual std::string name() const = 0;  // "cuda:0", for error messages
};

class BlockAllocator {
 public:
  // Requests are rounded up to this, and nothing smaller is split off a block.
  static constexpr size_t kMinBlock = 512;
  // Blocks up to kSmallSize come from kSmallSegment segments; larger ones from kLargeSegment
  // segments up to kLargeSegment / 2, and from their own segment (rounded to kRound) beyond.
  static constexpr size_t kSmallSize = size_t{1} << 20;
  static constexpr size_t kSmallSegment = size_t{2} << 20;
  static constexpr size_t kLargeSegment = size_t{20} << 20;
  static constexpr size_t kRound = size_t{2} << 20;

  explicit BlockAllocator(DeviceBackend* backend) : backend_(backend) {}
  ~BlockAllocator();
  BlockAllocator(const BlockAllocator&) = delete;
  BlockAllocator& operator=(const BlockAllocator&) = delete;

  // Throws ember::Error when the device is out of memory even after the cache was returned.
  void* allocate(size_t bytes, StreamId stream);
  void free(void* ptr);
  // `ptr` is also used by work on `stream`: when it is freed, reuse waits for that work.
  void record_stream(void* ptr, StreamId stream);
  // Returns every segment with no block in use to the driver.
  void empty_cache();
  MemoryStats stats();
  void reset_peak();

 private:
  struct Block {
    char* ptr = nullptr;
    size_t size = 0;
    StreamId stream = 0;
    bool allocated = false;
    bool small = false;     // which pool it returns to
    Block* prev = nullptr;  // neighbours within the same segment
    Block* next = nullptr;
    std::vector<StreamId> other_streams;  // from record_stream
    int pending_events = 0;
  };
  struct BySize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BySize>;

  static size_t round_size(size_t bytes);
  static size_t segment_size(size_t rounded);
  Pool& pool_for(const Block* block) { return block->small ? small_pool_ : large_pool_; }
  Block* find_free(Pool& pool, size_t rounded, StreamId stream);
  Block* new_segment(size_t rounded, StreamId stream, bool small);
  void release_to_pool(Block* block);
  void process_events();
  void release_free_segments();

  DeviceBackend* backend_;
  std::mutex mutex_;
  Pool small_pool_;
  Pool large_pool_;
  std::unordered_map<void*, Block*> allocated_;
  std::vector<std::pair<EventId, Block*>> events_;  // (event, block waiting for it), oldest first
  MemoryStats stats_;
};

}  // namespace ember::detail
