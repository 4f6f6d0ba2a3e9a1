// QueuePair: the verbs resources of one connection, made once its cm_id knows the device: the
// receive ring (one registered buffer per posted receive), the send buffers of postSend(), the
// frame slots of a framed connection, entries on one of the device's shared CQs, the RC QP and its
// SendQueue; and the posting of receives. The members are declared in creation order, so
// destroying the object releases them in the only safe order (QP before the CQ reservation,
// before the memory it used). The protection domain is the device's (CompletionDispatcher).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "CompletionDispatcher.h"
#include "SendQueue.h"
#include "evrdma/BufferPool.h"
#include "evrdma/ConnectionOptions.h"
#include "evrdma/MemoryRegion.h"
#include "evrdma/Verbs.h"

namespace evrdma {
class Reactor;
}

namespace evrdma::detail {

class QueuePair {
 public:
  // Bytes per send / receive buffer: a framed message carries its header in the same buffer (at
  // least the largest protocol frame: a hello or region offer must fit the smallest buffers).
  static size_t bufferSize(const ConnectionOptions& options) noexcept;

  QueuePair() = default;
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

  // Makes everything on the device of `id` (whose address is resolved) and posts every receive.
  // Completions go to `handler`. Returns 0, or -errno with `op` naming the failing call.
  int setUp(Reactor& reactor, rdma_cm_id* id, const ConnectionOptions& options, CompletionHandler& handler,
            const char*& op) noexcept;

  // Posts receive buffer `slot` (again). 0 or -errno.
  int postReceive(uint32_t slot) noexcept;
  // A receive completed (successfully or not): its buffer is ours until posted again.
  void onReceiveCompleted() noexcept { --postedReceives_; }
  uint8_t* receiveBuffer(uint32_t slot) const noexcept { return recvRing_.data() + size_t{slot} * bufferSize_; }
  uint32_t postedReceives() const noexcept { return postedReceives_; }

  // The device touches no memory of ours from here on (the QP is gone; the rest stays).
  void destroyQp() noexcept { qp_.reset(); }
  bool hasQp() const noexcept { return static_cast<bool>(qp_); }

  CompletionDispatcher* completions() const noexcept { return completions_; }
  CompletionDispatcher::Attachment* attachment() const noexcept { return attachment_.get(); }
  ibv_pd* protectionDomain() const noexcept { return pd_; }
  BufferPool& sendBuffers() noexcept { return sendBuffers_; }
  const BufferPool& sendBuffers() const noexcept { return sendBuffers_; }
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
  CompletionDispatcher* completions_ = nullptr;
  ibv_pd* pd_ = nullptr;
  // Creation order; destroyed in reverse.
  MemoryRegion recvRing_;  // bufferSize per slot, written by the local HCA only
  BufferPool sendBuffers_;  // postSend()'s buffers, only read by the HCA
  MemoryRegion frameSlots_;
  std::unique_ptr<CompletionDispatcher::Attachment> attachment_;
  CmQueuePair qp_;
  std::unique_ptr<SendQueue> sendQueue_;
};

}  // namespace evrdma::detail
