// Connection, sending: the copy path (postSend), zero-copy operations and the checks they pass
// before anything is posted, batches, the region-exchange calls, and what the application may ask
// about the send side. A request goes through the FramedSender (framed) or straight to the
// SendQueue; onWritable comes once everything that had to wait went out.
#include "evrdma/Connection.h"

#include <cerrno>
#include <cstring>

#include "CmEvent.h"
#include "CompletionDispatcher.h"
#include "Frame.h"
#include "FramedSender.h"
#include "QueuePair.h"
#include "RegionExchange.h"
#include "SendQueue.h"
#include "WorkRequestId.h"

namespace evrdma {

const std::vector<RemoteRegion>& Connection::peerRegions() const noexcept {
  static const std::vector<RemoteRegion> kNone;
  return regionExchange_ ? regionExchange_->peerRegions() : kNone;
}
uint64_t Connection::lentBytes() const noexcept { return regionExchange_ ? regionExchange_->lentBytes() : 0; }
uint32_t Connection::sendCredits() const noexcept { return framedSender_ ? framedSender_->credits().credits() : 0; }
uint32_t Connection::creditsOwed() const noexcept { return framedSender_ ? framedSender_->credits().owed() : 0; }

size_t Connection::sendBacklog() const noexcept {
  const SendQueue* queue = queuePair_ ? queuePair_->sendQueue() : nullptr;
  return (framedSender_ ? framedSender_->waiting() : 0) + (queue ? queue->backlog() : 0);
}

SendQueueStats Connection::sendQueueStats() const noexcept {
  SendQueueStats out;
  if (const SendQueue* queue = queuePair_ ? queuePair_->sendQueue() : nullptr) {
    out.requests = queue->requests();
    out.posts = queue->posts();
    out.signaled = queue->signaled();
    out.inFlight = queue->inFlight();
    out.backlog = queue->backlog();
  }
  return out;
}

uint32_t Connection::freeSendBuffers() const noexcept {
  return queuePair_ ? queuePair_->sendBuffers().available() : 0;
}
uint32_t Connection::postedRecvs() const noexcept { return queuePair_ ? queuePair_->postedReceives() : 0; }
ibv_pd* Connection::protectionDomain() const noexcept {
  return queuePair_ ? queuePair_->protectionDomain() : nullptr;
}

bool Connection::supportsImmediateData() const noexcept {
  // iWARP (RFC 5040) has no immediate data; InfiniBand and RoCE do.
  return id_ && id_->verbs && id_->verbs->device->transport_type != IBV_TRANSPORT_IWARP;
}

int Connection::postSend(const void* data, size_t length, uint64_t tag) noexcept {
  return copyAndSend(data, length, false, 0, tag);
}

int Connection::postSendWithImm(const void* data, size_t length, uint32_t imm, uint64_t tag) noexcept {
  return copyAndSend(data, length, true, imm, tag);
}

int Connection::copyAndSend(const void* data, size_t length, bool hasImm, uint32_t imm, uint64_t tag) noexcept {
  if (!sendable()) return -ENOTCONN;
  if (data == nullptr && length > 0) return -EINVAL;
  if (length > options_.maxMessageSize) return -EMSGSIZE;
  if (options_.framed && length > peerMaxMessageSize_) return -EMSGSIZE;  // the peer's buffers are smaller
  if (hasImm && !supportsImmediateData()) return -EOPNOTSUPP;
  detail::SendBuffers& buffers = queuePair_->sendBuffers();
  const int slot = buffers.acquire();
  if (slot < 0) {
    backlogged_ = true;  // onWritable once a send buffer is free again
    return -ENOBUFS;
  }
  const size_t header = options_.framed ? Frame::kHeaderSize : 0;
  uint8_t* buffer = buffers.data(static_cast<uint32_t>(slot));
  if (header > 0) writeFrameHeader(buffer, FrameType::Data, 0, static_cast<uint32_t>(length), 0);
  if (length > 0) std::memcpy(buffer + header, data, length);
  SendOp op;
  op.type = OpType::Send;
  op.tag = tag;
  op.sge.addr = reinterpret_cast<uintptr_t>(buffer);
  op.sge.length = static_cast<uint32_t>(header + length);
  op.sge.lkey = buffers.lkey();
  op.copySlot = slot;
  op.hasImm = hasImm;
  op.imm = imm;
  return dispatch(op, header > 0 ? buffer : nullptr);
}

int Connection::send(const Slice& local, uint64_t tag) noexcept {
  return checkedSubmit(OpType::Send, local, nullptr, 0, false, 0, tag);
}
int Connection::sendWithImm(const Slice& local, uint32_t imm, uint64_t tag) noexcept {
  return checkedSubmit(OpType::Send, local, nullptr, 0, true, imm, tag);
}
int Connection::rdmaWrite(const Slice& local, const RemoteRegion& remote, uint64_t remoteOffset, uint64_t tag) noexcept {
  return checkedSubmit(OpType::Write, local, &remote, remoteOffset, false, 0, tag);
}
int Connection::rdmaWriteWithImm(const Slice& local, const RemoteRegion& remote, uint64_t remoteOffset, uint32_t imm,
                                 uint64_t tag) noexcept {
  return checkedSubmit(OpType::WriteWithImm, local, &remote, remoteOffset, true, imm, tag);
}
int Connection::rdmaRead(const Slice& local, const RemoteRegion& remote, uint64_t remoteOffset, uint64_t tag) noexcept {
  return checkedSubmit(OpType::Read, local, &remote, remoteOffset, false, 0, tag);
}

int Connection::checkedSubmit(OpType type, const Slice& local, const RemoteRegion* remote, uint64_t remoteOffset,
                              bool hasImm, uint32_t imm, uint64_t tag) noexcept {
  if (!sendable()) return -ENOTCONN;
  if (local.region == nullptr || !*local.region) return -EINVAL;
  if (!local.region->contains(local.offset, local.length)) return -ERANGE;
  if (local.length > ConnectionOptions::kMaxMessageSize) return -EMSGSIZE;
  if (options_.framed && type == OpType::Send && local.length > peerMaxMessageSize_) return -EMSGSIZE;
  if (type == OpType::Read && (local.region->access() & kLocalWrite) == 0) return -EACCES;
  if (hasImm && !supportsImmediateData()) return -EOPNOTSUPP;
  if (remote != nullptr) {
    if (int rc = remote->check(remoteOffset, local.length, type != OpType::Read); rc != 0) return rc;
    if (regionExchange_ && !regionExchange_->advertisedByPeer(*remote)) return -ENOENT;
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

int Connection::dispatch(const SendOp& op, uint8_t* copiedHeader) noexcept {
  if (!framedSender_) return submit(op);
  const int rc = copiedHeader != nullptr ? framedSender_->sendCopied(op, copiedHeader) : framedSender_->sendZeroCopy(op);
  noteBacklog();
  return rc;
}

int Connection::submit(const SendOp& op) noexcept {
  int rc = queuePair_->sendQueue()->submit(op);
  if (rc != 0) failLater(rc, "ibv_post_send");
  noteBacklog();
  return rc;
}

void Connection::noteBacklog() noexcept {
  if (sendBacklog() > 0) backlogged_ = true;  // onWritable once it drains
}

void Connection::notifyWritableIfDrained() noexcept {
  if (!backlogged_ || closing() || sendBacklog() > 0) return;
  backlogged_ = false;
  handler_->onWritable(*this);
}

void Connection::beginBatch() noexcept {
  if (queuePair_ && queuePair_->sendQueue()) queuePair_->sendQueue()->beginBatch();
}

int Connection::endBatch() noexcept {
  if (!queuePair_ || !queuePair_->sendQueue()) return -ENOTCONN;
  int rc = queuePair_->sendQueue()->endBatch();
  if (rc != 0) failLater(rc, "ibv_post_send");
  noteBacklog();
  return rc;
}

int Connection::requestRegion(uint64_t bytes, int access, uint64_t tag) noexcept {
  if (!options_.framed) return -EPROTONOSUPPORT;
  if (!sendable()) return -ENOTCONN;
  const int rc = regionExchange_->request(bytes, access, tag);
  noteBacklog();
  return rc;
}

int Connection::sendRegion(const MemoryRegion& region, uint64_t tag) noexcept {
  if (!options_.framed) return -EPROTONOSUPPORT;
  if (!sendable()) return -ENOTCONN;
  RemoteRegion remote;
  if (int rc = region.remote(remote); rc != 0) return rc;
  const int rc = regionExchange_->offer(remote, tag);
  noteBacklog();
  return rc;
}

int Connection::releaseRegion(const RemoteRegion& region) noexcept {
  if (!options_.framed) return -EPROTONOSUPPORT;
  if (!sendable()) return -ENOTCONN;
  const int rc = regionExchange_->release(region);
  noteBacklog();
  return rc;
}

}  // namespace evrdma
