// SharedReceiveQueue: one SRQ of a device and Reactor, and the pool of registered receive buffers
// it is fed from, for connections whose receive buffers have one size
// (ConnectionOptions::sharedReceiveQueue). Their QPs have no receive queue of their own: a message
// for any of them takes the next buffer of the pool, and the buffer goes back to the device once
// the application's onRecv has returned. The pool starts small and grows by whole chunks when the
// device says it runs low (IBV_EVENT_SRQ_LIMIT_REACHED below the low watermark, re-armed after
// each growth), up to the SRQ's capacity.
//
// A connection that must never find the pool empty is guaranteed buffers on joining: a framed
// connection its receive depth (the credits its peer holds), and any connection on iWARP, which
// has no RNR retry (a message that finds no receive ends the connection). The pool always holds
// at least what its connections were guaranteed. On RoCE and InfiniBand an unframed connection is
// guaranteed nothing: a sender that finds the pool empty retries (rnrRetryCount) while it grows.
// Every connection takes a seat of its receive depth, guaranteed or not, and an SRQ seats no more
// than its capacity: when all its connections send at once, the grown pool has room for what
// their rings would have held. Without seats 50 000 ping-sr agents shared one SRQ of 4 096, and
// the other 46 000 senders' RNR retries (73 000 a second: the CM leaves min_rnr_timer at 655 ms)
// took the guest's CPUs from the server.
//
// wr_ids carry the SRQ's own serial (from the same counter as the CQ attachments' serials) and
// the buffer's index: a completion of a QP that is gone still gives its buffer back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "BufferMemory.h"
#include "MemoryAccount.h"
#include "SmallBufferArena.h"
#include "evrdma/Reactor.h"
#include "evrdma/Verbs.h"

namespace evrdma::detail {

class SharedReceiveQueue {
 public:
  static constexpr uint32_t kChunkBuffers = 32;  // buffers registered together, and the first pool
  // Work requests per SRQ (more SRQs when one is full). Less on soft-iWARP, which maps every queue
  // into the process and has room for only so many pages of them.
  static constexpr uint32_t kMaxCapacity = 4096;
  static constexpr uint32_t kMaxCapacityIwarp = 512;

  SharedReceiveQueue(ibv_pd* pd, SmallBufferArena& arena, MemoryAccount& account, size_t bufferSize, uint32_t serial)
      : pd_(pd), arena_(arena), account_(account), bufferSize_(bufferSize), serial_(serial) {}
  SharedReceiveQueue(const SharedReceiveQueue&) = delete;
  SharedReceiveQueue& operator=(const SharedReceiveQueue&) = delete;

  // Creates the SRQ (at most `maxWr` requests), posts a first chunk and arms the low watermark.
  // 0 or -errno.
  int init(uint32_t maxWr) noexcept;

  ibv_srq* get() const noexcept { return srq_.get(); }
  uint32_t serial() const noexcept { return serial_; }
  size_t bufferSize() const noexcept { return bufferSize_; }
  // A connection's place on the queue: its receive depth, and the buffers guaranteed to it (none,
  // or all of them).
  struct Seat {
    uint32_t depth = 0;
    uint32_t reserve = 0;
  };
  // Whether another connection fits: its depth among the seats, its guarantee among the buffers.
  bool hasRoomFor(Seat seat) const noexcept {
    return seated_ + seat.depth <= capacity_ && reserved_ + seat.reserve <= capacity_;
  }

  // A connection joins: the pool grows to cover every guarantee. 0 or -errno (-ENOBUFS: past the
  // Reactor's memory budget).
  int join(Seat seat) noexcept;
  void leave(Seat seat) noexcept;

  uint8_t* buffer(uint32_t index) const noexcept;
  // A completion took buffer `index` off the device (its connection, if any, handles it next).
  void onConsumed() noexcept { --posted_; }
  // A receive completion whose QP no longer receives through it (the QP is gone): its buffer goes
  // back to the device, as its connection would have given it back.
  void takeBackStray(const ibv_wc& wc) noexcept;
  // Gives buffer `index` back to the device. 0 or -errno.
  int repost(uint32_t index) noexcept;
  // IBV_EVENT_SRQ_LIMIT_REACHED: grows by half, or by kGrowthBytes of buffers if that is more
  // (whole chunks, up to the capacity), and re-arms.
  void onLowWatermark() noexcept;
  // Small buffers grow by many at a time: a burst from thousands of senders needs thousands, and
  // while a pool of 64-byte buffers grew by half from 32 (12 events to 4 096), the senders that
  // found it empty retried every 655 ms (25 000 agents sending at once on 13 queues: 120 000 RNR
  // NAKs in a 10 s burst; growing 64 KiB at a time, 42 000 in 6 s).
  static constexpr size_t kGrowthBytes = 64 * 1024;

  void addTo(SharedReceiveStats& stats) const noexcept;

 private:
  int grow(uint32_t wanted) noexcept;  // buffers, rounded up to chunks
  uint32_t buffers() const noexcept { return static_cast<uint32_t>(chunks_.size()) * kChunkBuffers; }
  void armLowWatermark() noexcept;

  ibv_pd* pd_;
  SmallBufferArena& arena_;
  MemoryAccount& account_;
  size_t bufferSize_;
  uint32_t serial_;
  uint32_t capacity_ = 0;
  SharedReceiveQueueHandle srq_;
  std::vector<std::unique_ptr<BufferMemory>> chunks_;  // kChunkBuffers buffers each
  uint32_t posted_ = 0;
  uint32_t reserved_ = 0;
  uint32_t seated_ = 0;  // the receive depths of its connections
  uint32_t connections_ = 0;
  uint64_t lowWatermarkEvents_ = 0;
  uint64_t growths_ = 0;
  uint64_t growthRefusals_ = 0;
};

}  // namespace evrdma::detail
