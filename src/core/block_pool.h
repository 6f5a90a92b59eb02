// Small fixed-size blocks from per-thread free lists, for the headers of tensors and storages.
// The eager path makes one TensorImpl and one StorageImpl (plus their shared_ptr control blocks)
// per op; malloc and free for them cost about as much as the rest of a 4x4 add, so they come
// from here instead (through allocate_shared and PoolAllocator).
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>

namespace ember::detail {

template <size_t Size>
class BlockPool {
 public:
  static void* allocate() {
    Lists& lists = thread_lists();
    if (Node* node = lists.head) {
      lists.head = node->next;
      --lists.count;
      return node;
    }
    return ::operator new(Size);
  }

  static void release(void* block) {
    Lists& lists = thread_lists();
    // A thread that frees what another thread made (a data loader's batches) keeps at most
    // kMaxCached blocks, so the lists cannot grow without bound.
    if (lists.count >= kMaxCached) {
      ::operator delete(block);
      return;
    }
    auto* node = static_cast<Node*>(block);
    node->next = lists.head;
    lists.head = node;
    ++lists.count;
  }

 private:
  static constexpr int kMaxCached = 4096;
  struct Node {
    Node* next;
  };
  struct Lists {
    Node* head = nullptr;
    int count = 0;
    ~Lists() {
      while (head != nullptr) {
        Node* next = head->next;
        ::operator delete(head);
        head = next;
      }
      count = kMaxCached;  // blocks released after this thread's lists are gone go straight back
    }
  };
  static Lists& thread_lists() {
    thread_local Lists lists;
    return lists;
  }
};

// A standard allocator for allocate_shared: single objects come from BlockPool, arrays from new.
template <class T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>& /*other*/) {}  // NOLINT(google-explicit-constructor)

  static constexpr size_t kBlock = (sizeof(T) + 15) / 16 * 16;

  T* allocate(size_t n) {
    static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "BlockPool blocks have new's alignment");
    if (n == 1) return static_cast<T*>(BlockPool<kBlock>::allocate());
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) {
    if (n == 1) {
      BlockPool<kBlock>::release(p);
    } else {
      std::allocator<T>().deallocate(p, n);
    }
  }
  template <class U>
  bool operator==(const PoolAllocator<U>& /*other*/) const {
    return true;
  }
};

// std::make_shared, with the object and its control block from the block pool. Under
// AddressSanitizer the pool is bypassed so that a use after free of a header is still caught.
template <class T, class... Args>
std::shared_ptr<T> make_pooled(Args&&... args) {
#if defined(__SANITIZE_ADDRESS__)
  return std::make_shared<T>(std::forward<Args>(args)...);
#else
  return std::allocate_shared<T>(PoolAllocator<T>(), std::forward<Args>(args)...);
#endif
}

}  // namespace ember::detail
