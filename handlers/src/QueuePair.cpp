// QueuePair: creating one connection's verbs resources in order (CQ entries, rings, QP), posting
// receives, and releasing them in member order.
#include "QueuePair.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "FramedSender.h"
#include "MemoryLock.h"
#include "Frame.h"
#include "ReactorCore.h"
#include "WorkRequestId.h"
#include "evrdma/Reactor.h"

namespace evrdma::detail {

int SendBuffers::allocate(SmallBufferArena* arena, MemoryAccount& account, ibv_pd* pd, uint32_t count, size_t size,
                          PreparedMappings* prepared) noexcept {
  if (count == 0 || size == 0) return -EINVAL;
  if (size > SIZE_MAX / count) return -EOVERFLOW;
  if (int rc = memory_.allocate(arena, account, pd, size_t{count} * size, 0, prepared); rc != 0) return rc;
  size_ = size;
  free_.reserve(count);
  for (uint32_t index = count; index-- > 0;) free_.push_back(index);
  return 0;
}

size_t QueuePair::bufferSize(const ConnectionOptions& options) noexcept {
  if (!options.framed) return options.maxMessageSize;
  return Frame::kHeaderSize + std::max<size_t>(options.maxMessageSize, Frame::kLargestControlPayload);
}

namespace {
// The three blocks setUp() registers: the receive ring, postSend()'s buffers, the frame slots.
struct BufferBytes {
  size_t ring, send, slots;
};
BufferBytes bufferBytes(const ConnectionOptions& options, size_t bufferSize) noexcept {
  return BufferBytes{options.sharedReceiveQueue ? 0 : bufferSize * (options.recvDepth + options.spareRecvBuffers),
                     bufferSize * options.sendDepth,
                     options.framed ? size_t{options.sendDepth + 1} * FramedSender::kSlotSize : 0};
}
}  // namespace

QueuePair::MemoryNeeds QueuePair::memoryNeeds(const ConnectionOptions& options) {
  MemoryNeeds needs;
  const BufferBytes blocks = bufferBytes(options, bufferSize(options));
  const bool arena = !usesOwnProtectionDomain(options);
  for (size_t bytes : {blocks.ring, blocks.send, blocks.slots}) {
    if (bytes == 0) continue;
    needs.pinned += BufferMemory::pinnedBytes(bytes, arena);
    if (!arena || !SmallBufferArena::serves(bytes)) needs.ownRegions.push_back(bytes);
  }
  return needs;
}

int QueuePair::setUp(Reactor& reactor, rdma_cm_id* id, const ConnectionOptions& options, CompletionHandler& handler,
                     const char*& op, PreparedMappings* prepared) noexcept {
  bufferSize_ = bufferSize(options);
  int error = 0;
  op = "completion channel";
  device_ = coreOf(reactor).device(id->verbs, error);
  if (device_ == nullptr) return error;
  op = "ibv_create_cq";
  attachment_ = device_->attach(options.recvDepth + options.sendDepth, &handler, error);
  if (!attachment_) return error;
  pd_ = device_->protectionDomain();
  if (usesOwnProtectionDomain(options)) {
    op = "ibv_alloc_pd (ConnectionOptions::ownProtectionDomain)";
    ownDomain_.device = device_;
    ownDomain_.pd = pd_ = device_->makeOwnDomain(error);
    if (pd_ == nullptr) return error;
  }

  // Receives are written by the local HCA only; sends are only read. Small buffers come from the
  // device's arena (registered for local write), larger ones are regions of their own.
  const bool shared = options.sharedReceiveQueue;
  if (shared) {
    op = "shared receive queue";
    // Guaranteed buffers: a framed peer holds recvDepth credits; an iWARP peer that finds no
    // receive ends the connection (no RNR retry).
    const SharedReceiveQueue::Seat seat{options.recvDepth,
                                        options.framed || isIwarp(id->verbs) ? options.recvDepth : 0};
    SharedReceiveQueue* srq = device_->sharedReceiveQueue(bufferSize_, seat, error);
    if (srq == nullptr || (error = srq->join(seat)) != 0) return error;
    sharedReceives_.srq = srq;
    sharedReceives_.seat = seat;
    attachment_->receiveThrough(srq);
  }
  op = "receive/send buffer registration";
  const BufferBytes blocks = bufferBytes(options, bufferSize_);
  const size_t ringBytes = blocks.ring, sendBytes = blocks.send, slotBytes = blocks.slots;
  SmallBufferArena* arena = ownDomain_.pd != nullptr ? nullptr : &device_->smallBuffers();
  MemoryAccount& account = device_->memoryAccount();
  if (!shared) {
    error = recvRing_.allocate(arena, account, pd_, ringBytes, kLocalWrite, prepared);
    // Slot i starts with buffer i; the spares follow the ring.
    receiveBuffers_ = size_t{options.recvDepth} + options.spareRecvBuffers;
    slotBuffers_.resize(options.recvDepth);
    for (uint32_t slot = 0; slot < options.recvDepth; ++slot) slotBuffers_[slot] = slot;
    for (uint32_t spare = options.recvDepth + options.spareRecvBuffers; spare > options.recvDepth; --spare)
      spareBuffers_.push_back(spare - 1);
  }
  if (error == 0) error = sendBuffers_.allocate(arena, account, pd_, options.sendDepth, bufferSize_, prepared);
  if (error == 0 && options.framed) {
    frameSlotCount_ = options.sendDepth + 1;
    error = frameSlots_.allocate(arena, account, pd_, slotBytes, 0, prepared);
  }
  if (error != 0) {
    // Registered memory counts against RLIMIT_MEMLOCK; past it the kernel says only ENOMEM.
    const auto pinned = [arena](size_t bytes) { return BufferMemory::pinnedBytes(bytes, arena != nullptr); };  // 0 for 0 bytes
    const uint64_t perConnection = memoryNeeds(options).pinned;
    uint64_t more = pinned(ringBytes);
    if (recvRing_ || shared) more = pinned(sendBytes);
    if ((recvRing_ || shared) && sendBuffers_) more = pinned(slotBytes);
    const std::string hint = error == -ENOBUFS ? account.refusal(more, perConnection)
                                               : memoryLockHint(currentMemoryLockState(), more, perConnection);
    if (!hint.empty()) {
      failure_ = hint;
      op = failure_.c_str();
    }
    return error;
  }

  op = "rdma_create_qp";
  ibv_qp_init_attr attr{};
  attr.send_cq = attr.recv_cq = attachment_->cq();
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = options.sendDepth;
  attr.cap.max_recv_wr = shared ? 0 : options.recvDepth;
  attr.cap.max_send_sge = options.framed ? 2 : 1;  // framed send(): header + the application's bytes
  attr.cap.max_recv_sge = shared ? 0 : 1;
  attr.srq = shared ? sharedReceives_.srq->get() : nullptr;
  // A framed message carries its header too: a 64-byte message is 72 bytes on the wire.
  attr.cap.max_inline_data = options.maxInlineData > 0 && options.framed
                                 ? options.maxInlineData + static_cast<uint32_t>(Frame::kHeaderSize)
                                 : options.maxInlineData;
  attr.sq_sig_all = 0;
  if (rdma_create_qp(id, pd_, &attr) != 0) {
    attr.cap.max_inline_data = 0;  // some devices have no inline data at all
    if (rdma_create_qp(id, pd_, &attr) != 0) {
      const int failed = errno ? -errno : -ENOMEM;
      // soft-iWARP maps every queue into the process and refuses past about 70 QPs per process,
      // and after some thousand have come and gone several at a time (EAGAIN or ENOMEM), which
      // its errno alone does not say.
      const char* device = ibv_get_device_name(id->verbs->device);
      if ((failed == -EAGAIN || failed == -ENOMEM) && device != nullptr && std::strncmp(device, "siw", 3) == 0) {
        failure_ = "rdma_create_qp: soft-iWARP (siw) holds about 70 queue pairs per process (fewer after heavy churn)";
        op = failure_.c_str();
      }
      return failed;
    }
  }
  qp_.reset(id);
  attachment_->bind(id->qp->qp_num);

  ibv_qp* qp = id->qp;
  const uint32_t signalEvery =
      options.signalEvery != 0 ? options.signalEvery : std::max<uint32_t>(1, options.sendDepth / 4);
  sendQueue_ = std::make_unique<SendQueue>(options.sendDepth, signalEvery, attr.cap.max_inline_data,
                                           attachment_->serial(), qp);
  op = "ibv_post_recv";
  if (shared) return 0;  // the pool's buffers are posted already
  for (uint32_t slot = 0; slot < options.recvDepth; ++slot)
    if (int rc = postReceive(slot); rc != 0) return rc;
  return 0;
}

int64_t QueuePair::exchangeReceiveBuffer(uint32_t slot, bool outlivesUs) noexcept {
  if (spareBuffers_.empty() || sharedReceives_.srq != nullptr || (outlivesUs && !recvRing_.sharedMemory())) return -1;
  const uint32_t taken = slotBuffers_[slot];
  slotBuffers_[slot] = spareBuffers_.back();
  spareBuffers_.pop_back();
  return taken;
}

int QueuePair::postReceive(uint32_t slot) noexcept {
  if (sharedReceives_.srq != nullptr) return sharedReceives_.srq->repost(slot);
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(receiveBuffer(slot));
  sge.length = static_cast<uint32_t>(bufferSize_);
  sge.lkey = recvRing_.lkey();
  ibv_recv_wr wr{};
  wr.wr_id = wrid::receive(attachment_->serial(), slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(qp_->qp, &wr, &bad); rc != 0) return -rc;
  ++postedReceives_;
  return 0;
}

}  // namespace evrdma::detail
