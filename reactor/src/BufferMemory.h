// BufferMemory: registered memory for buffers the device writes or reads locally (a connection's
// receive ring and send buffers, a shared receive queue's chunks): a block of the device's
// SmallBufferArena when it is small, else a region of its own, charged to the Reactor's budget.
// A region of its own keeps its memory in a shared owner, so that bytes lent out of it (a byte
// stream's receive buffers in a program's evbuffer) stay readable after the registration, the
// connection and the Reactor are gone: the last holder unmaps it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "MemoryAccount.h"
#include "PreparedMappings.h"
#include "SmallBufferArena.h"
#include "evrdma/MemoryRegion.h"

namespace evrdma::detail {

class BufferMemory {
 public:
  // Returns 0 or -errno (-ENOBUFS: past the Reactor's memory budget, which a region of its own
  // is charged to, as the arena's slabs are). A region of its own takes its memory from
  // `prepared` when that holds a block made for `bytes`. No `arena` (memory on a connection's own
  // protection domain, which the arena's slabs are not on): always a region of its own.
  int allocate(SmallBufferArena* arena, MemoryAccount& account, ibv_pd* pd, size_t bytes, int access,
               PreparedMappings* prepared = nullptr) noexcept;
  explicit operator bool() const noexcept { return static_cast<bool>(lease_) || static_cast<bool>(region_); }
  // Kept from allocate(): asked for each message posted (the lease's are out of line).
  uint8_t* data() const noexcept { return data_; }
  uint32_t lkey() const noexcept { return lkey_; }
  // What it pins: its block, or its region rounded to pages (0 for 0 bytes); `arena` false: a
  // region of its own whatever its size.
  static size_t pinnedBytes(size_t bytes, bool arena = true) noexcept;
  // A region of its own: its memory, which whoever holds this keeps mapped (null for an arena block,
  // whose memory goes back to the arena with this).
  const std::shared_ptr<void>& sharedMemory() const noexcept { return memory_; }

 private:
  SmallBufferArena::Lease lease_;
  MemoryCharge charge_;
  std::shared_ptr<void> memory_;  // declared before region_: unmapped after it is deregistered
  MemoryRegion region_;
  uint8_t* data_ = nullptr;
  uint32_t lkey_ = 0;
};

}  // namespace evrdma::detail
