// SmallBufferArena: registered memory for the small buffers of many connections (a ring of a few
// 64-byte receives, a few send buffers), carved out of shared slabs: a connection with 2 x 64 B
// receives and 2 x 64 B sends takes 256 bytes instead of pinning two pages of its own (each region
// is rounded up to whole pages). One per device and Reactor, on the device's protection domain.
// Blocks are powers of two from kSmallestBlock to kLargestBlock, each class in slabs of its own;
// a slab is deregistered once none of its blocks is in use, except one spare per class, so a
// connection coming and going does not register and deregister a slab each time. Registered for
// local write (receives need it; sends only read). Single-threaded, like the Reactor. Taking and
// giving back are O(1) however many slabs there are: the slabs with free blocks wait in a list (a
// scan of every slab for one took 9 % of a server's CPU while 25 000 agents connected).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "FlaggedList.h"
#include "MemoryAccount.h"
#include "evrdma/MemoryRegion.h"

namespace evrdma::detail {

class SmallBufferArena {
 public:
  static constexpr size_t kSlabBytes = 16 * 1024;
  static constexpr size_t kSmallestBlock = 64;
  static constexpr size_t kLargestBlock = 2048;
  static constexpr size_t kClasses = 6;  // 64, 128, ..., 2048

 private:
  struct Slab;

 public:
  // One block, given back when the lease goes.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept { *this = std::move(other); }
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { reset(); }
    void reset() noexcept;
    explicit operator bool() const noexcept { return slab_ != nullptr; }
    uint8_t* data() const noexcept { return data_; }
    uint32_t lkey() const noexcept;

   private:
    friend class SmallBufferArena;
    SmallBufferArena* arena_ = nullptr;
    Slab* slab_ = nullptr;
    uint8_t* data_ = nullptr;
    uint32_t index_ = 0;
  };

  // Slabs are charged to `account` (may be null).
  explicit SmallBufferArena(ibv_pd* pd, MemoryAccount* account = nullptr) : pd_(pd), account_(account) {}
  SmallBufferArena(const SmallBufferArena&) = delete;
  SmallBufferArena& operator=(const SmallBufferArena&) = delete;
  ~SmallBufferArena();

  // Whether `bytes` is served here (1 .. kLargestBlock).
  static bool serves(size_t bytes) noexcept { return bytes > 0 && bytes <= kLargestBlock; }
  // The block size `bytes` takes.
  static size_t blockSize(size_t bytes) noexcept;
  // A zeroed block of at least `bytes` (see serves()). An empty lease and -errno on failure
  // (-EINVAL for a size not served, -ENOBUFS past the account's budget, else what the registration
  // gave: -ENOMEM past RLIMIT_MEMLOCK).
  Lease take(size_t bytes, int& error);

  size_t slabCount() const noexcept;
  uint64_t blocksInUse() const noexcept { return blocksInUse_; }

 private:
  struct Slab {
    MemoryCharge charge;
    MemoryRegion region;
    size_t classIndex = 0;
    std::vector<uint32_t> free;  // a stack of block indexes
    uint32_t inUse = 0;
    bool listed = false;  // in withFree_
  };
  static size_t classOf(size_t bytes) noexcept;
  void give(Slab* slab, uint32_t index) noexcept;

  ibv_pd* pd_;
  MemoryAccount* account_;
  std::array<std::vector<std::unique_ptr<Slab>>, kClasses> slabs_;
  std::array<FlaggedList<Slab, &Slab::listed>, kClasses> withFree_;  // the slabs of each class with a block free
  std::array<size_t, kClasses> emptySlabs_{};          // of each class, with no block in use
  uint64_t blocksInUse_ = 0;
};

}  // namespace evrdma::detail
