// The device caching allocator's bookkeeping, on an ordinary heap standing in for the driver:
// segments, splitting, best fit, merging, per-stream reuse, record_stream, empty_cache, stats, OOM.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>

#include "core/block_allocator.h"
#include "test_util.h"

namespace ember::detail {
namespace {

class FakeBackend : public DeviceBackend {
 public:
  void* allocate(size_t bytes) override {
    if (live_bytes + bytes > capacity) return nullptr;
    void* p = std::malloc(bytes);
    live[p] = bytes;
    live_bytes += bytes;
    ++allocations;
    return p;
  }
  void free(void* ptr) override {
    live_bytes -= live.at(ptr);
    live.erase(ptr);
    std::free(ptr);
  }
  EventId record_event(StreamId stream) override {
    const EventId id = next_event++;
    pending.insert(id);
    recorded_on[id] = stream;
    return id;
  }
  bool event_done(EventId event) override { return pending.count(event) == 0; }
  void destroy_event(EventId event) override {
    ++destroyed;
    recorded_on.erase(event);
  }
  std::string name() const override { return "fake:0"; }

  void finish_stream(StreamId stream) {
    for (auto& [id, s] : recorded_on) {
      if (s == stream) pending.erase(id);
    }
  }

  size_t capacity = size_t{1} << 30;
  std::map<void*, size_t> live;
  size_t live_bytes = 0;
  int allocations = 0;
  int destroyed = 0;
  EventId next_event = 1;
  std::set<EventId> pending;
  std::map<EventId, StreamId> recorded_on;
};

constexpr size_t kMiB = size_t{1} << 20;

TEST(BlockAllocator, SmallRequestsShareOneSegmentAndAreRounded) {
  FakeBackend backend;
  BlockAllocator alloc(&backend);
  void* a = alloc.allocate(1, 0);
  void* b = alloc.allocate(700, 0);
  EXPECT_EQ(backend.allocations, 1);  // one 2 MiB segment serves both
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 512);
  MemoryStats s = alloc.stats();
  EXPECT_EQ(s.bytes_in_use, 512 + 1024);
  EXPECT_EQ(s.bytes_reserved, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(s.system_allocations, 1);
  alloc.free(a);
  alloc.free(b);
  EXPECT_EQ(alloc.stats().bytes_in_use, 0);
  EXPECT_EQ(alloc.stats().peak_bytes_in_use, 512 + 1024);
}

TEST(BlockAllocator, FreedBlocksAreReusedAndMergedBackIntoWholeSegments) {
  FakeBackend backend;
  BlockAllocator alloc(&backend);
  void* a = alloc.allocate(4096, 0);
  void* b = alloc.allocate(4096, 0);
  void* c = alloc.allocate(4096, 0);
  alloc.free(b);
  // Best fit: a request that fits b's hole takes it rather than the segment's tail.
  void* d = alloc.allocate(4000, 0);
  EXPECT_EQ(d, b);
  EXPECT_GE(alloc.stats().cache_hits, 1);
  alloc.free(a);
  alloc.free(c);
  alloc.free(d);
  // Everything merged: the segment is whole and empty_cache returns it.
  alloc.empty_cache();
  EXPECT_TRUE(backend.live.empty());
  MemoryStats s = alloc.stats();
  EXPECT_EQ(s.bytes_reserved, 0);
  EXPECT_EQ(s.system_frees, 1);
}

TEST(BlockAllocator, SteadyStateLoopMakesNoDriverCalls) {
  FakeBackend backend;
  BlockAllocator alloc(&backend);
  const size_t sizes[] = {256, 64 * 1024, 3 * kMiB, 25 * kMiB, 8};
  auto step = [&] {
    std::vector<void*> ptrs;
    for (size_t s : sizes) ptrs.push_back(alloc.allocate(s, 0));
    for (void* p : ptrs) alloc.free(p);
  };
  step();
  const int after_first = backend.allocations;
  for (int i = 0; i < 20; ++i) step();
  EXPECT_EQ(backend.allocations, after_first);
}

TEST(BlockAllocator, LargeRequestsGetTheirOwnRoundedSegment) {
  FakeBackend backend;
  BlockAllocator alloc(&backend);
  void* big = alloc.allocate(11 * kMiB, 0);  // above half a 20 MiB segment: its own, rounded to 2 MiB
  EXPECT_EQ(alloc.stats().bytes_reserved, static_cast<int64_t>(12 * kMiB));
  void* mid = alloc.allocate(3 * kMiB, 0);  // from a 20 MiB segment, the 17 MiB rest stays cached
  EXPECT_EQ(alloc.stats().bytes_reserved, static_cast<int64_t>(32 * kMiB));
  void* mid2 = alloc.allocate(5 * kMiB, 0);  // split from that rest, no new segment
  EXPECT_EQ(backend.allocations, 2);
  alloc.free(big);
  alloc.free(mid);
  alloc.free(mid2);
  alloc.empty_cache();
  EXPECT_TRUE(backend.live.empty());
}

TEST(BlockAllocator, BlocksAreReusedOnlyOnTheirStream) {
  FakeBackend backend;
  BlockAllocator alloc(&backend);
  void* a = alloc.allocate(4096, /*stream=*/1);
  alloc.free(a);
  void* b = alloc.allocate(4096, /*stream=*/2);
  EXPECT_NE(a, b);
  EXPECT_EQ(backend.allocations, 2);  // stream 2 got its own segment
  void* c = alloc.allocate(4096, /*stream=*/1);
  EXPECT_EQ(c, a);
  alloc.free(b);
  alloc.free(c);
}

TEST(BlockAllocator, RecordStreamDelaysReuseUntilTheOtherStreamFinishes) {
  FakeBackend backend;
  BlockAllocator alloc(&backend);
  void* a = alloc.allocate(4096, 1);
  alloc.record_stream(a, 2);
  alloc.record_stream(a, 2);  // recorded once
  alloc.record_stream(a, 1);  // its own stream: nothing to wait for
  alloc.free(a);
  EXPECT_EQ(backend.pending.size(), 1u);
  void* b = alloc.allocate(4096, 1);
  EXPECT_NE(b, a);  // stream 2 may still use a
  backend.finish_stream(2);
  void* c = alloc.allocate(4096, 1);
  EXPECT_EQ(c, a);
  EXPECT_EQ(backend.destroyed, 1);
  alloc.free(b);
  alloc.free(c);
}

TEST(BlockAllocator, OutOfMemoryReturnsTheCacheThenFailsClearly) {
  FakeBackend backend;
  backend.capacity = 24 * kMiB;
  BlockAllocator alloc(&backend);
  void* a = alloc.allocate(8 * kMiB, /*stream=*/1);  // a 20 MiB segment, cached for stream 1
  alloc.free(a);
  // 14 MiB on stream 0 needs its own 14 MiB segment: it fits only once the cached 20 MiB goes back.
  void* b = alloc.allocate(14 * kMiB, 0);
  EXPECT_EQ(alloc.stats().system_frees, 1);
  test_util::expect_error([&] { alloc.allocate(16 * kMiB, 0); }, {"[allocator] out of memory on fake:0"});
  alloc.free(b);
}

TEST(BlockAllocator, FreeingAnUnknownPointerIsAnError) {
  FakeBackend backend;
  BlockAllocator alloc(&backend);
  int x = 0;
  test_util::expect_error([&] { alloc.free(&x); }, {"did not hand out"});
  void* a = alloc.allocate(10, 0);
  alloc.free(a);
  test_util::expect_error([&] { alloc.free(a); }, {"already freed"});
}

}  // namespace
}  // namespace ember::detail
