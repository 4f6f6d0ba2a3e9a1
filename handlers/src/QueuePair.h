// QueuePair: the verbs resources of one connection, made once its cm_id knows the device: entries
// on one of the device's shared CQs, the receive ring (one registered buffer per posted receive;
// none when the connection receives through the device's shared receive queue, whose place it
// holds instead), the send buffers of postSend(), the frame slots of a framed connection, the RC
// QP and its SendQueue; and the posting of receives. The members are declared in creation order,
// so destroying the object releases them in the only safe order (the QP before the memory it used
// and its CQ reservation). The protection domain is the device's (Device), and so is the arena
// small buffers come from; or, for a connection with a protection domain of its own
// (ConnectionOptions::ownProtectionDomain, or one that lends memory), its own, where every buffer
// is a region of its own (the arena's slabs are on the device's domain).
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "CompletionDispatcher.h"
#include "Device.h"
#include "SendQueue.h"
#include "BufferMemory.h"
#include "SmallBufferArena.h"
#include "evrdma/ConnectionOptions.h"
#include "evrdma/MemoryRegion.h"
#include "evrdma/Verbs.h"

namespace evrdma {
class Reactor;
}

namespace evrdma::detail {

// postSend()'s buffers: `count` of `size` bytes in one BufferMemory, taken and given back by
// index.
class SendBuffers {
 public:
  int allocate(SmallBufferArena* arena, MemoryAccount& account, ibv_pd* pd, uint32_t count, size_t size,
               PreparedMappings* prepared) noexcept;
  explicit operator bool() const noexcept { return static_cast<bool>(memory_); }
  // An index, or -ENOBUFS. Once per message each: inline.
  int acquire() noexcept {
    if (free_.empty()) return -ENOBUFS;
    const uint32_t index = free_.back();
    free_.pop_back();
    return static_cast<int>(index);
  }
  // `free_` was reserved for every buffer (allocate): never grows here.
  void release(uint32_t index) noexcept { free_.push_back(index); }
  uint8_t* data(uint32_t index) const noexcept { return memory_.data() + size_t{index} * size_; }
  uint32_t lkey() const noexcept { return memory_.lkey(); }
  uint32_t available() const noexcept { return static_cast<uint32_t>(free_.size()); }

 private:
  BufferMemory memory_;
  size_t size_ = 0;
  std::vector<uint32_t> free_;  // a stack: the most recently released buffer is warm in the cache
};

class QueuePair {
 public:
  // Bytes per send / receive buffer: a framed message carries its header in the same buffer (at
  // least the largest protocol frame: a hello or region offer must fit the smallest buffers).
  static size_t bufferSize(const ConnectionOptions& options) noexcept;

  QueuePair() = default;
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

  // What setUp() registers for a connection with `options`: the bytes it pins, and the lengths of
  // the buffers too large for the device's arena, or all of them on a protection domain of the
  // connection's own (regions of their own, which a PreparedMappings may hold ready).
  struct MemoryNeeds {
    uint64_t pinned = 0;
    std::vector<size_t> ownRegions;
  };
  static MemoryNeeds memoryNeeds(const ConnectionOptions& options);

  // Makes everything on the device of `id` (whose address is resolved) and posts every receive.
  // Completions go to `handler`. Large buffers take their memory from `prepared` where it holds
  // some. Returns 0, or -errno with `op` naming the failing call.
  int setUp(Reactor& reactor, rdma_cm_id* id, const ConnectionOptions& options, CompletionHandler& handler,
            const char*& op, PreparedMappings* prepared = nullptr) noexcept;

  // Posts receive buffer `slot` (again): into the QP's own receive queue, or back to the shared
  // receive queue's pool. 0 or -errno.
  int postReceive(uint32_t slot) noexcept;
  // A receive completed (successfully or not): its buffer is ours until posted again.
  void onReceiveCompleted() noexcept {
    if (sharedReceives_.srq == nullptr) --postedReceives_;
  }
  uint8_t* receiveBuffer(uint32_t slot) const noexcept {
    return sharedReceives_.srq != nullptr ? sharedReceives_.srq->buffer(slot)
                                          : recvRing_.data() + size_t{slotBuffers_[slot]} * bufferSize_;
  }
  // Lending (ConnectionOptions::spareRecvBuffers): receive `slot`, which completed, takes a spare
  // buffer, and the one holding its message leaves the ring; its index is returned (-1: no spare
  // left, or memory that cannot be lent). It comes back with giveBackReceiveBuffer. `outlivesUs`:
  // the buffer may be held after the connection is gone (a loan), so a block of the device's
  // arena, which goes back with the connection, cannot be lent; a send from it (sendReceived)
  // completes or is flushed before that.
  int64_t exchangeReceiveBuffer(uint32_t slot, bool outlivesUs) noexcept;
  // A buffer of the ring by its own index (one exchangeReceiveBuffer returned), and the ring's key.
  uint8_t* receiveBufferAt(uint32_t buffer) const noexcept { return recvRing_.data() + size_t{buffer} * bufferSize_; }
  uint32_t receiveLkey() const noexcept { return recvRing_.lkey(); }
  void giveBackReceiveBuffer(uint32_t buffer) noexcept { spareBuffers_.push_back(buffer); }
  // Spare buffers were registered, and none is free now (all lent).
  bool sparesAllLent() const noexcept { return spareBuffers_.empty() && slotBuffers_.size() < receiveBuffers_; }
  // The receive ring's memory, when it is a region of its own (null: a block of the device's
  // arena, or a shared receive queue): held, it stays mapped after this QueuePair is gone.
  const std::shared_ptr<void>& receiveMemory() const noexcept { return recvRing_.sharedMemory(); }
  // Receives posted to the QP's own receive queue (0 with a shared one: the pool's are not ours).
  uint32_t postedReceives() const noexcept { return postedReceives_; }
  // Receives go through the device's shared receive queue: a buffer the connection does not post
  // again must still go back to the pool.
  bool sharesReceives() const noexcept { return sharedReceives_.srq != nullptr; }

  // The device touches no memory of ours from here on (the QP is gone; the rest stays).
  void destroyQp() noexcept { qp_.reset(); }
  bool hasQp() const noexcept { return static_cast<bool>(qp_); }

  Device* device() const noexcept { return device_; }
  CompletionDispatcher::Attachment* attachment() const noexcept { return attachment_.get(); }
  ibv_pd* protectionDomain() const noexcept { return pd_; }
  SendBuffers& sendBuffers() noexcept { return sendBuffers_; }
  const SendBuffers& sendBuffers() const noexcept { return sendBuffers_; }
  SendQueue* sendQueue() const noexcept { return sendQueue_.get(); }
  // Framed: the frame slots' memory (FramedSender::kSlotSize each, sendDepth + 1 of them).
  uint8_t* frameSlots() const noexcept { return frameSlots_.data(); }
  uint32_t frameSlotLkey() const noexcept { return frameSlots_.lkey(); }
  uint32_t frameSlotCount() const noexcept { return frameSlotCount_; }

 private:
  std::string failure_;  // names a failed setUp step in words, when `op` alone would not
  size_t bufferSize_ = 0;
  uint32_t frameSlotCount_ = 0;
  uint32_t postedReceives_ = 0;
  std::vector<uint32_t> slotBuffers_;   // receive slot -> buffer in recvRing_ (own receive queue)
  std::vector<uint32_t> spareBuffers_;  // buffers of recvRing_ in no slot and not lent
  size_t receiveBuffers_ = 0;           // in recvRing_: recvDepth + spareRecvBuffers
  Device* device_ = nullptr;
  ibv_pd* pd_ = nullptr;
  // The connection's own protection domain (usesOwnProtectionDomain), retired to its Device once
  // everything registered on it here is gone.
  struct OwnDomain {
    Device* device = nullptr;
    ibv_pd* pd = nullptr;
    OwnDomain() = default;
    OwnDomain(const OwnDomain&) = delete;
    OwnDomain& operator=(const OwnDomain&) = delete;
    ~OwnDomain() {
      if (pd != nullptr) device->retireDomain(pd);
    }
  };
  // A place in a shared receive queue, left when the QueuePair goes.
  struct SharedReceives {
    SharedReceiveQueue* srq = nullptr;
    SharedReceiveQueue::Seat seat;
    SharedReceives() = default;
    SharedReceives(const SharedReceives&) = delete;
    SharedReceives& operator=(const SharedReceives&) = delete;
    ~SharedReceives() {
      if (srq != nullptr) srq->leave(seat);
    }
  };

  // Creation order; destroyed in reverse.
  std::unique_ptr<CompletionDispatcher::Attachment> attachment_;
  OwnDomain ownDomain_;  // freed after all below, while the attachment keeps the Device
  SharedReceives sharedReceives_;
  BufferMemory recvRing_;  // bufferSize per slot (none with a shared receive queue)
  SendBuffers sendBuffers_;    // postSend()'s buffers
  BufferMemory frameSlots_;
  CmQueuePair qp_;
  std::unique_ptr<SendQueue> sendQueue_;
};

}  // namespace evrdma::detail
