// LendingPool: memory a framed connection registers once, at setup, for the regions its peer asks
// for (ConnectionOptions::lendingPoolBytes), so that answering a requestRegion() is carving a
// piece, not allocating, zeroing and registering memory in the receive path. Pieces are 64-byte
// aligned, first fit; one given back is zeroed then (the next borrower never sees the last one's
// bytes) and merged with its free neighbours. One registration covers the pool, so the rkey of any
// piece reaches all of it, and with read and write access: the pool is this one peer's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

#include "MemoryAccount.h"
#include "evrdma/MemoryRegion.h"

namespace evrdma::detail {

class LendingPool {
 public:
  static constexpr size_t kAlignment = 64;

  // Allocates, zeroes and registers `bytes` for remote read and write, charged to `account`.
  // 0, or -errno (-ENOBUFS past the account's budget, -ENOMEM past RLIMIT_MEMLOCK).
  int init(ibv_pd* pd, MemoryAccount& account, uint64_t bytes) noexcept;

  // A piece of `bytes` with `access` (kRemoteRead and/or kRemoteWrite); empty when no free range
  // is large enough.
  MemoryRegion take(uint64_t bytes, int access) noexcept;
  // A piece taken from this pool comes back: zeroed, free again.
  void give(const MemoryRegion& piece) noexcept;

  uint64_t freeBytes() const noexcept { return free_; }
  const MemoryRegion& region() const noexcept { return region_; }

 private:
  MemoryCharge charge_;
  MemoryRegion region_;
  std::map<size_t, size_t> freeRanges_;  // offset -> length, never adjacent
  uint64_t free_ = 0;
};

}  // namespace evrdma::detail
