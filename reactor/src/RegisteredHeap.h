// RegisteredHeap: libevent's memory, from memory a device can send from without a copy. A program
// opts in once (evrdma_use_registered_memory, before it makes anything of libevent's, or
// evrdma::useRegisteredMemory): libevent's memory functions then allocate each block of 1 KiB or
// more (evbuffer chains: what bufferevent_write copies into) from one reserved range of address
// space, and the smaller ones (events, bufferevents) from malloc as before. A stream asks lkeyFor()
// for the bytes at the front of what the program wrote: a block of the range is registered on the
// connection's protection domain on first use (its whole 2 MiB slab, or its own run of slabs), and
// the stream sends straight from it. Blocks are powers of two in slabs of their own class below
// 2 MiB, whole runs of slabs above; freed blocks are kept for reuse, registered. One per process,
// thread-safe (libevent may allocate on any thread); never unmapped (libevent frees after static
// destructors). A protection domain about to be freed is forgotten first (forget()).
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace evrdma::detail {

class RegisteredHeap {
 public:
  static constexpr size_t kSlabBytes = size_t{2} << 20;
  static constexpr size_t kSmallest = 1024;  // below: malloc (libevent's chains are 1 KiB and up)
  static constexpr size_t kClasses = 11;     // 1 KiB ... 1 MiB in slabs; 2 MiB and up in runs

  // The process's heap, made on first use; null where the range could not be reserved.
  static RegisteredHeap* instance() noexcept;
  // Installs the heap as libevent's memory functions: 0, or -ENOMEM (the range could not be
  // reserved: nothing changed).
  static int install() noexcept;
  // Whether install() ran (the heap is then libevent's).
  static bool installed() noexcept;

  // libevent's memory functions (event_set_mem_functions).
  static void* allocate(size_t bytes);
  static void* reallocate(void* block, size_t bytes);
  static void release(void* block);

  bool contains(const void* at) const noexcept {
    const auto address = reinterpret_cast<uintptr_t>(at);
    return address >= base_ && address < base_ + reserved_;
  }
  // The lkey under which `pd` may send the `length` bytes at `at`: true, or false when they are not
  // all in one block of the heap, or their slab could not be registered (the caller copies).
  bool lkeyFor(ibv_pd* pd, const void* at, size_t length, uint32_t& lkey) noexcept;
  // Deregisters every slab registered on `pd` (before it is freed).
  void forget(ibv_pd* pd) noexcept;
  // Bytes of the range handed out as slabs (each registered on the domains that sent from it).
  uint64_t slabBytes() const noexcept;
  uint64_t registeredBytes() const noexcept;

 private:
  struct Segment {
    uintptr_t start = 0;
    size_t length = 0;       // a slab's kSlabBytes, a run's whole slabs
    int sizeClass = -1;      // its blocks' class, or -1: one run, one block
    std::vector<std::pair<ibv_pd*, ibv_mr*>> registrations;
  };

  RegisteredHeap(uintptr_t base, size_t reserved) : base_(base), reserved_(reserved) {}
  void* allocateLocked(size_t bytes) noexcept;
  void releaseLocked(uintptr_t block) noexcept;
  size_t blockSizeLocked(uintptr_t block) const noexcept;
  // `units` slabs from the range, as one new segment: its index, or -1 when the range is spent.
  int carveLocked(size_t units, int sizeClass) noexcept;
  Segment* segmentOfLocked(uintptr_t address) noexcept;

  const uintptr_t base_;
  const size_t reserved_;
  mutable std::mutex mutex_;
  size_t carved_ = 0;  // slabs handed out from the front of the range
  std::vector<Segment> segments_;
  std::vector<int32_t> segmentOfUnit_;  // per slab of the range: its segment, or -1
  std::vector<uintptr_t> freeBlocks_[kClasses];
  std::unordered_multimap<size_t, uintptr_t> freeRuns_;  // slabs in the run -> its start
  uint64_t registeredBytes_ = 0;
};

}  // namespace evrdma::detail
