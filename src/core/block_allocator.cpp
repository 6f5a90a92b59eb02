#include "core/block_allocator.h"

#include <tuple>

#include "ember/error.h"

namespace ember::detail {

// Free blocks are ordered by (stream, size, address): a lower_bound finds the smallest block of
// the right stream that fits (best fit), and ties go to the lowest address.
bool BlockAllocator::BySize::operator()(const Block* a, const Block* b) const {
  return std::tie(a->stream, a->size, a->ptr) < std::tie(b->stream, b->size, b->ptr);
}

BlockAllocator::~BlockAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [event, block] : events_) backend_->destroy_event(event);
  release_free_segments();
}

size_t BlockAllocator::round_size(size_t bytes) {
  if (bytes < kMinBlock) return kMinBlock;
  return (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
}

size_t BlockAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallSegment;
  if (rounded <= kLargeSegment / 2) return kLargeSegment;
  return (rounded + kRound - 1) / kRound * kRound;
}

BlockAllocator::Block* BlockAllocator::find_free(Pool& pool, size_t rounded, StreamId stream) {
  Block key;
  key.stream = stream;
  key.size = rounded;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  pool.erase(it);
  return block;
}

BlockAllocator::Block* BlockAllocator::new_segment(size_t rounded, StreamId stream, bool small) {
  const size_t bytes = segment_size(rounded);
  void* ptr = backend_->allocate(bytes);
  if (ptr == nullptr) {
    // Out of memory: give the cache back to the driver and try once more.
    release_free_segments();
    ptr = backend_->allocate(bytes);
  }
  EMBER_CHECK(ptr != nullptr, "[allocator] out of memory on ", backend_->name(), " allocating ", rounded,
              " bytes (a segment of ", bytes, "); ", stats_.bytes_in_use, " bytes in use, ", stats_.bytes_reserved,
              " reserved");
  ++stats_.system_allocations;
  stats_.bytes_reserved += static_cast<int64_t>(bytes);
  auto* block = new Block;
  block->ptr = static_cast<char*>(ptr);
  block->size = bytes;
  block->stream = stream;
  block->small = small;
  return block;
}

void* BlockAllocator::allocate(size_t bytes, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  process_events();
  const size_t rounded = round_size(bytes);
  const bool small = rounded <= kSmallSize;
  Pool& pool = small ? small_pool_ : large_pool_;
  Block* block = find_free(pool, rounded, stream);
  if (block != nullptr) {
    ++stats_.cache_hits;
  } else {
    block = new_segment(rounded, stream, small);
  }
  // Split off the rest when it is worth keeping: any remainder in the small pool, more than a
  // small block's worth in the large one (smaller tails would only fragment it).
  const size_t rest = block->size - rounded;
  if (small ? rest >= kMinBlock : rest > kSmallSize) {
    auto* tail = new Block;
    tail->ptr = block->ptr + rounded;
    tail->size = rest;
    tail->stream = stream;
    tail->small = small;
    tail->prev = block;
    tail->next = block->next;
    if (block->next != nullptr) block->next->prev = tail;
    block->next = tail;
    block->size = rounded;
    pool.insert(tail);
  }
  block->allocated = true;
  allocated_[block->ptr] = block;
  stats_.bytes_in_use += static_cast<int64_t>(block->size);
  if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
  return block->ptr;
}

void BlockAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = allocated_.find(ptr);
  EMBER_CHECK(it != allocated_.end(), "[allocator] free of a pointer that ", backend_->name(),
              "'s allocator did not hand out (or already freed)");
  Block* block = it->second;
  allocated_.erase(it);
  stats_.bytes_in_use -= static_cast<int64_t>(block->size);
  if (block->other_streams.empty()) {
    release_to_pool(block);
    return;
  }
  // Work queued on the other streams may still read or write the block: reuse waits for it.
  for (StreamId stream : block->other_streams) {
    events_.emplace_back(backend_->record_event(stream), block);
    ++block->pending_events;
  }
  block->other_streams.clear();
}

void BlockAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = allocated_.find(ptr);
  EMBER_CHECK(it != allocated_.end(), "[allocator] record_stream on a pointer that ", backend_->name(),
              "'s allocator did not hand out");
  Block* block = it->second;
  if (stream == block->stream) return;
  for (StreamId s : block->other_streams) {
    if (s == stream) return;
  }
  block->other_streams.push_back(stream);
}

void BlockAllocator::release_to_pool(Block* block) {
  block->allocated = false;
  Pool& pool = pool_for(block);
  // Merge with free neighbours of the same segment, so the segment can become whole again.
  if (Block* prev = block->prev; prev != nullptr && !prev->allocated && prev->pending_events == 0) {
    pool.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    delete block;
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && !next->allocated && next->pending_events == 0) {
    pool.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    delete next;
  }
  pool.insert(block);
}

void BlockAllocator::process_events() {
  size_t kept = 0;
  for (auto& [event, block] : events_) {
    if (backend_->event_done(event)) {
      backend_->destroy_event(event);
      if (--block->pending_events == 0) release_to_pool(block);
    } else {
      events_[kept++] = {event, block};
    }
  }
  events_.resize(kept);
}

void BlockAllocator::release_free_segments() {
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* block = *it;
      if (block->prev == nullptr && block->next == nullptr) {
        backend_->free(block->ptr);
        stats_.bytes_reserved -= static_cast<int64_t>(block->size);
        ++stats_.system_frees;
        it = pool->erase(it);
        delete block;
      } else {
        ++it;
      }
    }
  }
}

void BlockAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  process_events();
  release_free_segments();
}

MemoryStats BlockAllocator::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void BlockAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

}  // namespace ember::detail
