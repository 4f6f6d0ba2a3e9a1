// ConnectionSender: the copy path (postSend), zero-copy operations and the checks they pass before
// anything is posted, batches, the region-exchange calls, and each send completion with the
// statistics and the words for what went wrong. A request goes through the FramedSender (framed)
// or straight to the SendQueue; onWritable comes once everything that had to wait went out.
#include "ConnectionSender.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "ConnectionCore.h"
#include "Frame.h"
#include "FramedSender.h"
#include "QueuePair.h"
#include "RegionExchange.h"
#include "SendQueue.h"
#include "evrdma/Connection.h"

namespace evrdma::detail {

size_t ConnectionSender::backlog() const noexcept {
  const SendQueue* queue = c_.queuePair_ ? c_.queuePair_->sendQueue() : nullptr;
  return (c_.framedSender_ ? c_.framedSender_->waiting() : 0) + (queue ? queue->backlog() : 0);
}

SendQueueStats ConnectionSender::queueStats() const noexcept {
  SendQueueStats out;
  if (const SendQueue* queue = c_.queuePair_ ? c_.queuePair_->sendQueue() : nullptr) {
    out.requests = queue->requests();
    out.posts = queue->posts();
    out.signaled = queue->signaled();
    out.inFlight = queue->inFlight();
    out.backlog = queue->backlog();
  }
  return out;
}

int ConnectionSender::copyAndSend(const void* data, size_t length, bool hasImm, uint32_t imm, uint64_t tag) noexcept {
  if (data == nullptr && length > 0 && c_.sendable()) return -EINVAL;
  return copyIn(length, [data, length](uint8_t* to) { std::memcpy(to, data, length); }, hasImm, imm, tag);
}

// Inline, and used in this file only: copyIn (every copied message) makes no call for them.
inline int ConnectionSender::acquireSendBuffer(size_t length, bool hasImm, uint8_t*& data) noexcept {
  if (!c_.sendable()) return -ENOTCONN;
  const ConnectionOptions& options = c_.options_;
  if (length > options.maxMessageSize) return -EMSGSIZE;
  if (options.framed && length > c_.peerMaxMessageSize_) return -EMSGSIZE;  // the peer's buffers are smaller
  if (hasImm && !c_.supportsImmediateData()) return -EOPNOTSUPP;
  SendBuffers& buffers = c_.queuePair_->sendBuffers();
  const int slot = buffers.acquire();
  if (slot < 0) {
    backlogged_ = true;  // onWritable once a send buffer is free again
    return -ENOBUFS;
  }
  data = buffers.data(static_cast<uint32_t>(slot)) + (options.framed ? Frame::kHeaderSize : 0);
  return slot;
}

inline int ConnectionSender::sendAcquired(int slot, uint8_t* data, size_t length, bool hasImm, uint32_t imm,
                                           uint64_t tag) noexcept {
  SendOp op;
  op.tag = tag;
  op.sge.lkey = c_.queuePair_->sendBuffers().lkey();
  op.copySlot = slot;
  op.hasImm = hasImm;
  op.imm = imm;
  return sendMessageIn(op, data - (c_.options_.framed ? Frame::kHeaderSize : 0), length);
}

template <typename Filler>
int ConnectionSender::copyIn(size_t length, Filler&& fill, bool hasImm, uint32_t imm, uint64_t tag) noexcept {
  uint8_t* data = nullptr;
  const int slot = acquireSendBuffer(length, hasImm, data);
  if (slot < 0) return slot;
  if (length > 0) fill(data);
  return sendAcquired(slot, data, length, hasImm, imm, tag);
}

int ConnectionSender::takeSendBuffer(size_t length, bool hasImm, uint8_t*& data) noexcept {
  return acquireSendBuffer(length, hasImm, data);
}

int ConnectionSender::sendTaken(int slot, uint8_t* data, size_t length, bool hasImm, uint32_t imm,
                                uint64_t tag) noexcept {
  return sendAcquired(slot, data, length, hasImm, imm, tag);
}

int ConnectionSender::sendReceiveBuffer(uint32_t buffer, size_t length, uint64_t tag) noexcept {
  SendOp op;
  op.tag = tag;
  op.sge.lkey = c_.queuePair_->receiveLkey();
  op.copySlot = static_cast<int32_t>(buffer);
  op.forwarded = true;
  return sendMessageIn(op, c_.queuePair_->receiveBufferAt(buffer), length);  // its header is ours now, not the peer's
}

int ConnectionSender::sendMessageIn(SendOp& op, uint8_t* buffer, size_t length) noexcept {
  const size_t header = c_.options_.framed ? Frame::kHeaderSize : 0;
  if (header > 0) writeFrameHeader(buffer, FrameType::Data, 0, static_cast<uint32_t>(length), 0);
  op.type = OpType::Send;
  op.sge.addr = reinterpret_cast<uintptr_t>(buffer);
  op.sge.length = static_cast<uint32_t>(header + length);
  return dispatch(op, header > 0 ? buffer : nullptr);
}

int ConnectionSender::sendRegistered(const uint8_t* data, size_t length, uint32_t lkey, uint64_t tag) noexcept {
  if (!c_.sendable()) return -ENOTCONN;
  if (length > c_.options_.maxMessageSize || (c_.options_.framed && length > c_.peerMaxMessageSize_)) return -EMSGSIZE;
  SendOp op;
  op.type = OpType::Send;
  op.tag = tag;
  op.sge = ibv_sge{reinterpret_cast<uintptr_t>(data), static_cast<uint32_t>(length), lkey};
  return dispatch(op, nullptr);
}

int ConnectionSender::checkedSubmit(OpType type, const Slice& local, const RemoteRegion* remote, uint64_t remoteOffset,
                                    bool hasImm, uint32_t imm, uint64_t tag) noexcept {
  if (!c_.sendable()) return -ENOTCONN;
  if (local.region == nullptr || !*local.region) return -EINVAL;
  if (!local.region->contains(local.offset, local.length)) return -ERANGE;
  if (local.length > ConnectionOptions::kMaxMessageSize) return -EMSGSIZE;
  if (c_.options_.framed && type == OpType::Send && local.length > c_.peerMaxMessageSize_) return -EMSGSIZE;
  if (type == OpType::Read && (local.region->access() & kLocalWrite) == 0) return -EACCES;
  if (hasImm && !c_.supportsImmediateData()) return -EOPNOTSUPP;
  if (remote != nullptr) {
    if (int rc = remote->check(remoteOffset, local.length, type != OpType::Read); rc != 0) return rc;
    if (c_.regionExchange_ && !c_.regionExchange_->advertisedByPeer(*remote)) return -ENOENT;
  }
  SendOp op;
  op.type = type;
  op.tag = tag;
  op.sge.addr = reinterpret_cast<uintptr_t>(local.region->data() + local.offset);
  op.sge.length = static_cast<uint32_t>(local.length);
  op.sge.lkey = local.region->lkey();
  if (remote != nullptr) {
    op.remoteAddress = remote->address + remoteOffset;
    op.rkey = remote->rkey;
  }
  op.hasImm = hasImm;
  op.imm = imm;
  return dispatch(op, nullptr);
}

int ConnectionSender::dispatch(const SendOp& op, uint8_t* copiedHeader) noexcept {
  FramedSender* framed = c_.framedSender_.get();
  if (framed == nullptr) return submit(op);
  return framedPosted(copiedHeader != nullptr ? framed->sendCopied(op, copiedHeader) : framed->sendZeroCopy(op));
}

int ConnectionSender::framedPosted(int rc) noexcept {
  if (rc != 0) c_.failLater(rc, "ibv_post_send");
  if (!backlogged_) noteBacklog();  // once noted, it stays so until onWritable
  return rc;
}

int ConnectionSender::submit(const SendOp& op) noexcept {
  // Unframed (dispatch): the queue's backlog is all there is; asked of it directly, per message.
  SendQueue& queue = *c_.queuePair_->sendQueue();
  int rc = queue.submit(op);
  if (rc != 0) c_.failLater(rc, "ibv_post_send");
  if (queue.backlog() > 0) backlogged_ = true;  // onWritable once it drains
  return rc;
}

int ConnectionSender::ownPosted(int rc) noexcept {
  if (rc != 0) c_.failLater(rc, "ibv_post_send");
  return rc;
}

void ConnectionSender::noteBacklog() noexcept {
  if (backlog() > 0) backlogged_ = true;  // onWritable once it drains
}

void ConnectionSender::notifyWritableIfDrained() noexcept {
  if (!backlogged_ || c_.closing() || backlog() > 0) return;
  backlogged_ = false;
  c_.handler_->onWritable(c_.facade());
}

void ConnectionSender::beginBatch() noexcept {
  if (c_.queuePair_ && c_.queuePair_->sendQueue()) c_.queuePair_->sendQueue()->beginBatch();
}

int ConnectionSender::endBatch() noexcept {
  SendQueue* queue = c_.queuePair_ ? c_.queuePair_->sendQueue() : nullptr;
  if (queue == nullptr) return -ENOTCONN;
  int rc = queue->endBatch();
  if (rc != 0) c_.failLater(rc, "ibv_post_send");
  if (!backlogged_) noteBacklog();  // once noted, it stays so until onWritable
  return rc;
}

int ConnectionSender::requestRegion(uint64_t bytes, int access, uint64_t tag) noexcept {
  if (!c_.options_.framed) return -EPROTONOSUPPORT;
  if (!c_.sendable()) return -ENOTCONN;
  const int rc = c_.regionExchange_->request(bytes, access, tag);
  noteBacklog();
  return rc;
}

int ConnectionSender::sendRegion(const MemoryRegion& region, uint64_t tag) noexcept {
  if (!c_.options_.framed) return -EPROTONOSUPPORT;
  if (!c_.sendable()) return -ENOTCONN;
  RemoteRegion remote;
  if (int rc = region.remote(remote); rc != 0) return rc;
  const int rc = c_.regionExchange_->offer(remote, tag);
  noteBacklog();
  return rc;
}

int ConnectionSender::releaseRegion(const RemoteRegion& region) noexcept {
  if (!c_.options_.framed) return -EPROTONOSUPPORT;
  if (!c_.sendable()) return -ENOTCONN;
  const int rc = c_.regionExchange_->release(region);
  noteBacklog();
  return rc;
}

void ConnectionSender::onCompletion(const ibv_wc& wc) noexcept {
  ConnectionTally& stats = c_.tally_;
  int rc = c_.queuePair_->sendQueue()->complete(wc, [this, &stats](const SendOp& op, ibv_wc_status status) {
    if (op.copySlot >= 0) releaseBuffer(op);
    if (c_.framedSender_) c_.framedSender_->releaseSlot(op.frameSlot);
    if (status == IBV_WC_WR_FLUSH_ERR) {
      // The QP went to the error state and handed its work back: the connection is going down,
      // and DISCONNECTED (or an earlier, real error) says why. iWARP may flush first.
      stats.add(&ConnectionStats::flushedCompletions);
      c_.teardown.reportUnfinished(op, status);
      c_.teardown.noteUnexplainedFlush();
      return;
    }
    if (status != IBV_WC_SUCCESS) {
      failedCompletion(op, status);
      return;
    }
    if (op.internal) return;  // evrdma's own frame
    if (op.copySlot >= 0 || op.type == OpType::Send) {
      stats.add(&ConnectionStats::messagesSent);
      stats.add(&ConnectionStats::bytesSent,
                op.sge.length - (op.copySlot >= 0 && c_.options_.framed ? Frame::kHeaderSize : 0));
    } else if (op.type == OpType::Read) {
      stats.add(&ConnectionStats::bytesRead, op.sge.length);
    } else {
      stats.add(&ConnectionStats::bytesWritten, op.sge.length);
    }
    if (op.copySlot >= 0) {
      if (!c_.closing()) c_.handler_->onSendDone(c_.facade(), op.tag);
    } else {
      stats.add(&ConnectionStats::opsCompleted);
      // Even closing: every accepted operation gets its onOpDone (see evrdma/Connection.h).
      c_.handler_->onOpDone(c_.facade(), OpCompletion{op.tag, op.type, status, op.sge.length});
    }
  });
  if (rc != 0) c_.fail(rc, "ibv_post_send");
  if (!c_.closing()) {
    if (c_.framedSender_) ownPosted(c_.framedSender_->pump());  // a frame slot may have come free
    notifyWritableIfDrained();
  }
  c_.teardown.maybeFinish();
}

void ConnectionSender::releaseBuffer(const SendOp& op) noexcept {
  if (op.forwarded)
    c_.queuePair_->giveBackReceiveBuffer(static_cast<uint32_t>(op.copySlot));  // a spare again
  else
    c_.queuePair_->sendBuffers().release(static_cast<uint32_t>(op.copySlot));
}

void ConnectionSender::failedCompletion(const SendOp& op, ibv_wc_status status) noexcept {
  c_.teardown.reportUnfinished(op, status);
  if (c_.closing()) return;
  std::string& text = c_.errorText_;
  text = std::string("work completion (") + toString(op.type) + "): " + ibv_wc_status_str(status);
  // The peer refusing a send (remote invalid request / remote operation error): almost always a
  // message longer than its receive buffers.
  const std::string length = std::to_string(op.sge.length + op.header.length);
  const bool peerRefused = op.type == OpType::Send && (status == IBV_WC_REM_INV_REQ_ERR || status == IBV_WC_REM_OP_ERR);
  // iWARP has no such NAK: a peer that cannot take the message terminates the connection, and the
  // send completes with a local QP operation error. So does a send whose bytes went out as the
  // peer closed the connection (soft-iWARP: the peer's FIN came before its transmit thread was
  // done with the send). The transport does not say which.
  const bool brokeOnIwarp = op.type == OpType::Send && status == IBV_WC_LOC_QP_OP_ERR && !c_.supportsImmediateData();
  if (peerRefused)
    text += ": the peer could not take a message of " + length +
            " B; is its maxMessageSize smaller? Both sides must use the same maxMessageSize";
  else if (brokeOnIwarp)
    text += ": the connection broke during the send (iWARP does not say why): the peer closed it as the send "
            "completed (its bytes may have arrived), or could not take a message of " +
            length + " B (is its maxMessageSize smaller? Both sides must use the same maxMessageSize)";
  c_.fail(peerRefused ? -EMSGSIZE : brokeOnIwarp ? -ECONNABORTED : -EIO, text.c_str());
}

}  // namespace evrdma::detail
