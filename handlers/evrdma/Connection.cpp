#include "evrdma/Connection.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>  // the device writes received bytes behind valgrind's back
#define EVRDMA_MARK_DEFINED(address, length) VALGRIND_MAKE_MEM_DEFINED(address, length)
#else
#define EVRDMA_MARK_DEFINED(address, length) ((void)(address), (void)(length))
#endif

#include "evrdma/Address.h"
#include "evrdma/Reactor.h"

namespace evrdma {
namespace {

// wr_id: bit 63 send queue or receive queue, bits 32..62 the CQ attachment's serial, bits 0..31
// the receive buffer slot or the send queue's sequence number.
constexpr uint64_t kSendFlag = SendQueue::kSendFlag;
constexpr size_t kMaxMessageSize = size_t{1} << 30;
// A frame slot holds a header, or a whole protocol frame (the largest is an offer).
constexpr size_t kFrameSlotSize = 64;
static_assert(Frame::kHeaderSize + RemoteRegion::kWireSize + 8 <= kFrameSlotSize);
constexpr int kRemoteAccess = kRemoteRead | kRemoteWrite;

}  // namespace

const char* toString(ConnectionState state) noexcept {
  switch (state) {
    case ConnectionState::Idle: return "Idle";
    case ConnectionState::ResolvingAddr: return "ResolvingAddr";
    case ConnectionState::ResolvingRoute: return "ResolvingRoute";
    case ConnectionState::Connecting: return "Connecting";
    case ConnectionState::Accepting: return "Accepting";
    case ConnectionState::Established: return "Established";
    case ConnectionState::Disconnecting: return "Disconnecting";
    case ConnectionState::Closed: return "Closed";
    case ConnectionState::Failed: return "Failed";
  }
  return "?";
}

Connection::Connection(Reactor& reactor, std::unique_ptr<ConnectionHandler> handler, const ConnectionOptions& options,
                       bool isClient)
    : reactor_(reactor),
      handler_(handler ? std::move(handler) : std::make_unique<ConnectionHandler>()),
      options_(options),
      isClient_(isClient),
      disconnectTimer_(reactor, [this] {
        disconnectDone_ = true;  // waited long enough for the peer and the flushes
        scheduleFinish();
      }) {
  reactor.join(static_cast<detail::ReactorMember*>(this));
}

Connection::~Connection() {
  if (!orphaned_) reactor_.leave(static_cast<detail::ReactorMember*>(this));
  releaseResources();  // normally finish() did already
}

void Connection::onReactorGone() noexcept {
  // Silent: the application hears nothing (see Reactor), and nothing here touches the Reactor.
  orphaned_ = true;
  if (!finished_) {
    teardownStarted_ = true;
    finished_ = true;
    releaseResources();
    setState(failed_ ? ConnectionState::Failed : ConnectionState::Closed);
  }
  onOrphaned();  // may free this object
}

void Connection::adoptId(CmId id) noexcept {
  id_ = std::move(id);
  id_->context = static_cast<CmEventHandler*>(this);
  if (!isClient_) peerAddress_ = formatAddress(rdma_get_peer_addr(id_.get()));
}

int Connection::checkOptions(const ConnectionOptions& options, const char*& problem) noexcept {
  if (options.maxMessageSize == 0 || options.maxMessageSize > kMaxMessageSize) {
    problem = "maxMessageSize must be 1 B .. 1 GiB";
    return -EINVAL;
  }
  if (options.recvDepth == 0 || options.sendDepth == 0 || options.recvDepth > 4096 || options.sendDepth > 4096) {
    problem = "recvDepth and sendDepth must be 1 .. 4096";
    return -EINVAL;
  }
  if (options.retryCount > 7 || options.rnrRetryCount > 7) {
    problem = "retryCount and rnrRetryCount must be 0 .. 7";
    return -EINVAL;
  }
  if (options.framed && options.recvDepth < CreditLedger::kMinRecvDepth) {
    problem = "framed connections need recvDepth >= 3";
    return -EINVAL;
  }
  return 0;
}

int Connection::setUpVerbs(const char*& op) noexcept {
  if (int rc = checkOptions(options_, op); rc != 0) return rc;
  ibv_context* device = id_->verbs;
  int error = 0;
  op = "completion channel";
  completions_ = reactor_.completions(device, error);
  if (completions_ == nullptr) return error;

  pd_ = completions_->protectionDomain();

  // Least access: receives are written by the local HCA only; sends are only read.
  op = "receive/send buffer registration";
  recvBuffers_ = MemoryRegion::allocate(pd_, bufferSize() * options_.recvDepth, kLocalWrite, error);
  if (!recvBuffers_) return error;
  sendBuffers_ = BufferPool::allocate(pd_, options_.sendDepth, bufferSize(), 0, error);
  if (!sendBuffers_) return error;
  if (options_.framed) {
    frameSlots_ = BufferPool::allocate(pd_, options_.sendDepth + 1, kFrameSlotSize, 0, error);
    if (!frameSlots_) return error;
    ledger_ = CreditLedger(options_.recvDepth);
  }

  op = "ibv_create_cq";
  completion_ = completions_->attach(options_.recvDepth + options_.sendDepth, static_cast<CompletionHandler*>(this), error);
  if (!completion_) return error;

  op = "rdma_create_qp";
  ibv_qp_init_attr attr{};
  attr.send_cq = attr.recv_cq = completion_->cq();
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = options_.sendDepth;
  attr.cap.max_recv_wr = options_.recvDepth;
  attr.cap.max_send_sge = options_.framed ? 2 : 1;  // framed send(): header + the application's bytes
  attr.cap.max_recv_sge = 1;
  attr.cap.max_inline_data = options_.maxInlineData;
  attr.sq_sig_all = 0;
  if (rdma_create_qp(id_.get(), pd_, &attr) != 0) {
    attr.cap.max_inline_data = 0;  // some devices have no inline data at all
    if (rdma_create_qp(id_.get(), pd_, &attr) != 0) return errno ? -errno : -ENOMEM;
  }
  qp_.reset(id_.get());
  completion_->bind(id_->qp->qp_num);

  ibv_qp* qp = id_->qp;
  uint32_t signalEvery = options_.signalEvery != 0 ? options_.signalEvery : std::max<uint32_t>(1, options_.sendDepth / 4);
  sendQueue_ = std::make_unique<SendQueue>(options_.sendDepth, signalEvery, attr.cap.max_inline_data, wrIdBase(),
                                           [qp](ibv_send_wr* wr, ibv_send_wr** bad) { return ibv_post_send(qp, wr, bad); });
  op = "ibv_post_recv";
  for (uint32_t slot = 0; slot < options_.recvDepth; ++slot)
    if (int rc = postRecvSlot(slot); rc != 0) return rc;
  return 0;
}

int Connection::postRecvSlot(uint32_t slot) noexcept {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(recvBuffers_.data() + size_t{slot} * bufferSize());
  sge.length = static_cast<uint32_t>(bufferSize());
  sge.lkey = recvBuffers_.lkey();
  ibv_recv_wr wr{};
  wr.wr_id = wrIdBase() | slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(qp_->qp, &wr, &bad); rc != 0) return -rc;
  ++postedRecvs_;
  return 0;
}

int Connection::postRecv() noexcept {
  if (state_ != ConnectionState::Established || teardownStarted_) return -ENOTCONN;
  if (idleRecvSlots_.empty()) return -ENOBUFS;
  if (int rc = repostRecv(idleRecvSlots_.back()); rc != 0) return rc;
  idleRecvSlots_.pop_back();
  maybeSendCreditFrame();
  return 0;
}

int Connection::repostRecv(uint32_t slot) noexcept {
  int rc = postRecvSlot(slot);
  if (rc == 0 && options_.framed) ledger_.onReceiveReposted();  // a credit we owe the peer
  return rc;
}

int Connection::postSend(const void* data, size_t length, uint64_t tag) noexcept {
  return copyAndSend(data, length, false, 0, tag);
}

int Connection::postSendWithImm(const void* data, size_t length, uint32_t imm, uint64_t tag) noexcept {
  return copyAndSend(data, length, true, imm, tag);
}

int Connection::copyAndSend(const void* data, size_t length, bool hasImm, uint32_t imm, uint64_t tag) noexcept {
  if (state_ != ConnectionState::Established || teardownStarted_) return -ENOTCONN;
  if (data == nullptr && length > 0) return -EINVAL;
  if (length > options_.maxMessageSize) return -EMSGSIZE;
  if (options_.framed && length > peerMaxMessageSize_) return -EMSGSIZE;  // the peer's buffers are smaller
  if (hasImm && !supportsImmediateData()) return -EOPNOTSUPP;
  const int slot = sendBuffers_.acquire();
  if (slot < 0) return -ENOBUFS;
  const size_t header = options_.framed ? Frame::kHeaderSize : 0;
  uint8_t* buffer = sendBuffers_.data(static_cast<uint32_t>(slot));
  if (header > 0) writeFrameHeader(buffer, FrameType::Data, 0, static_cast<uint32_t>(length), 0);
  if (length > 0) std::memcpy(buffer + header, data, length);
  Pending pending;
  SendOp& op = pending.op;
  op.type = OpType::Send;
  op.tag = tag;
  op.sge.addr = reinterpret_cast<uintptr_t>(buffer);
  op.sge.length = static_cast<uint32_t>(header + length);
  op.sge.lkey = sendBuffers_.region().lkey();
  op.copySlot = slot;
  op.hasImm = hasImm;
  op.imm = imm;
  if (!options_.framed) return submit(op);
  pending.spendsCredit = true;
  pending.headerAt = buffer;
  return enqueue(std::move(pending));
}

int Connection::submit(SendOp op) noexcept {
  int rc = sendQueue_->submit(op);
  if (rc != 0) failLater(rc, "ibv_post_send");
  if (sendQueue_ && sendQueue_->backlog() > 0) backlogged_ = true;
  return rc;
}

int Connection::enqueue(Pending pending) noexcept {
  waiting_.push_back(std::move(pending));
  int rc = pumpWaiting();
  if (!waiting_.empty()) backlogged_ = true;
  return rc;
}

// Sends what waits, in order, as far as credits and frame slots allow.
int Connection::pumpWaiting() noexcept {
  while (!waiting_.empty() && !teardownStarted_) {
    Pending& next = waiting_.front();
    if (next.spendsCredit && !ledger_.canSendMessage()) {
      if (!next.countedWait) ++stats_.creditWaits;
      next.countedWait = true;
      break;
    }
    const bool needsSlot = next.zeroCopyHeader || !next.control.empty();
    if (needsSlot && frameSlots_.available() == 0) break;
    SendOp op = next.op;
    uint16_t returned = 0;
    if (next.spendsCredit) {
      if (op.type == OpType::WriteWithImm)
        ledger_.spendForImmediate();  // no header to carry credits
      else
        returned = ledger_.spendForMessage();
    }
    uint8_t* header = next.headerAt;
    if (needsSlot) {
      header = takeFrameSlot(op);
      ibv_sge sge{reinterpret_cast<uintptr_t>(header), 0, frameSlots_.region().lkey()};
      if (!next.control.empty()) {
        std::memcpy(header, next.control.data(), next.control.size());
        sge.length = static_cast<uint32_t>(next.control.size());
        op.sge = sge;
      } else {
        writeFrameHeader(header, FrameType::Data, 0, op.sge.length, 0);
        sge.length = Frame::kHeaderSize;
        op.header = sge;
      }
    }
    if (header != nullptr) setFrameCredits(header, returned);
    waiting_.pop_front();
    if (int rc = submit(op); rc != 0) return rc;
  }
  maybeSendCreditFrame();
  return 0;
}

void Connection::maybeSendCreditFrame() noexcept {
  if (!options_.framed || teardownStarted_ || !sendQueue_) return;
  if (!ledger_.creditFrameDue() || frameSlots_.available() == 0) return;  // retried when a send completes
  SendOp op;
  op.type = OpType::Send;
  op.internal = true;
  uint8_t* frame = takeFrameSlot(op);
  writeFrameHeader(frame, FrameType::Credit, ledger_.spendForCreditFrame(), 0, 0);
  op.sge = ibv_sge{reinterpret_cast<uintptr_t>(frame), static_cast<uint32_t>(Frame::kHeaderSize),
                   frameSlots_.region().lkey()};
  ++stats_.creditFramesSent;
  submit(op);
}

uint8_t* Connection::takeFrameSlot(SendOp& op) noexcept {
  const int slot = frameSlots_.acquire();  // callers checked that one is free
  op.frameSlot = slot;
  return frameSlots_.data(static_cast<uint32_t>(slot));
}

void Connection::notifyWritableIfDrained() noexcept {
  if (!backlogged_ || teardownStarted_ || !waiting_.empty() || (sendQueue_ && sendQueue_->backlog() > 0)) return;
  backlogged_ = false;
  handler_->onWritable(*this);
}

int Connection::sendControl(std::vector<uint8_t> frame) noexcept {
  Pending pending;
  pending.op.type = OpType::Send;
  pending.op.internal = true;
  pending.spendsCredit = true;
  pending.control = std::move(frame);
  return enqueue(std::move(pending));
}

int Connection::checkedSubmit(OpType type, const Slice& local, const RemoteRegion* remote, uint64_t remoteOffset,
                              bool hasImm, uint32_t imm, uint64_t tag) noexcept {
  if (state_ != ConnectionState::Established || teardownStarted_) return -ENOTCONN;
  if (local.region == nullptr || !*local.region) return -EINVAL;
  if (!local.region->contains(local.offset, local.length)) return -ERANGE;
  if (local.length > kMaxMessageSize) return -EMSGSIZE;
  if (options_.framed && type == OpType::Send && local.length > peerMaxMessageSize_) return -EMSGSIZE;
  if (type == OpType::Read && (local.region->access() & kLocalWrite) == 0) return -EACCES;
  if (hasImm && !supportsImmediateData()) return -EOPNOTSUPP;
  if (remote != nullptr) {
    if (int rc = remote->check(remoteOffset, local.length, type != OpType::Read); rc != 0) return rc;
    if (options_.framed && !advertisedByPeer(*remote)) return -ENOENT;
  }
  Pending pending;
  SendOp& op = pending.op;
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
  if (!options_.framed) return submit(op);
  pending.spendsCredit = type == OpType::Send || type == OpType::WriteWithImm;
  pending.zeroCopyHeader = type == OpType::Send;
  return enqueue(std::move(pending));
}

bool Connection::advertisedByPeer(const RemoteRegion& remote) const noexcept {
  for (const RemoteRegion& r : peerRegions_) {
    if (r.rkey != remote.rkey || remote.address < r.address) continue;
    const uint64_t offset = remote.address - r.address;
    if (offset <= r.length && remote.length <= r.length - offset && (remote.access & ~r.access) == 0) return true;
  }
  return false;
}

int Connection::requestRegion(uint64_t bytes, int access, uint64_t tag) noexcept {
  if (!options_.framed) return -EPROTONOSUPPORT;
  if (state_ != ConnectionState::Established || teardownStarted_) return -ENOTCONN;
  if (bytes == 0 || (access & ~kRemoteAccess) != 0 || (access & kRemoteAccess) == 0) return -EINVAL;
  if (peerRegions_.size() + regionRequests_.size() >= options_.maxPeerRegions) return -ENOSPC;
  const uint64_t id = nextRequestId_++;
  regionRequests_.push_back({id, tag, bytes, static_cast<uint32_t>(access)});
  return sendControl(regionRequestFrame(id, bytes, static_cast<uint32_t>(access), 0));
}

int Connection::sendRegion(const MemoryRegion& region, uint64_t tag) noexcept {
  if (!options_.framed) return -EPROTONOSUPPORT;
  if (state_ != ConnectionState::Established || teardownStarted_) return -ENOTCONN;
  RemoteRegion remote;
  if (int rc = region.remote(remote); rc != 0) return rc;
  offered_.push_back(remote);
  return sendControl(regionOfferFrame(remote, tag, 0));
}

int Connection::releaseRegion(const RemoteRegion& region) noexcept {
  if (!options_.framed) return -EPROTONOSUPPORT;
  if (state_ != ConnectionState::Established || teardownStarted_) return -ENOTCONN;
  auto it = std::find_if(peerRegions_.begin(), peerRegions_.end(), [&](const RemoteRegion& r) {
    return r.rkey == region.rkey && r.address == region.address;
  });
  if (it == peerRegions_.end()) return -ENOENT;
  peerRegions_.erase(it);
  return sendControl(regionReleaseFrame(region.rkey, region.address, 0));
}

void Connection::onRegionRequest(const Frame& frame) noexcept {
  int error = 0;
  std::unique_ptr<MemoryRegion> region;
  if (frame.requestBytes > options_.maxLentBytes - lentBytes_) {
    error = ENOMEM;  // over what this side agreed to lend
  } else {
    region = std::make_unique<MemoryRegion>(
        MemoryRegion::allocate(pd_, frame.requestBytes, static_cast<int>(frame.requestAccess), error));
    if (!*region) error = error < 0 ? -error : ENOMEM;
  }
  if (error != 0) {
    sendControl(regionRefusedFrame(frame.requestId, static_cast<uint32_t>(error), 0));
    return;
  }
  RemoteRegion remote;
  region->remote(remote);
  lentBytes_ += frame.requestBytes;
  ++stats_.regionsLent;
  lent_.push_back(std::move(region));
  if (sendControl(regionGrantFrame(frame.requestId, remote, 0)) != 0) return;
  handler_->onRegionLent(*this, *lent_.back());
}

void Connection::onRegionRelease(const Frame& frame) noexcept {
  auto lent = std::find_if(lent_.begin(), lent_.end(), [&](const std::unique_ptr<MemoryRegion>& r) {
    return r->get()->rkey == frame.releaseRkey && reinterpret_cast<uintptr_t>(r->data()) == frame.releaseAddress;
  });
  if (lent != lent_.end()) {
    lentBytes_ -= (*lent)->length();
    lent_.erase(lent);  // deregistered: the peer can no longer reach it
    return;
  }
  auto offered = std::find_if(offered_.begin(), offered_.end(), [&](const RemoteRegion& r) {
    return r.rkey == frame.releaseRkey && r.address == frame.releaseAddress;
  });
  if (offered != offered_.end()) {
    offered_.erase(offered);
    return;
  }
  fail(-EPROTO, "the peer released a region it was never given");
}

void Connection::onFrame(const Frame& frame, const ibv_wc& wc) noexcept {
  if ((frame.type == FrameType::Hello) != (state_ != ConnectionState::Established)) {
    fail(-EPROTO, frame.type == FrameType::Hello ? "the peer sent a second hello"
                                                 : "the peer's first frame was not a hello (is it framed too?)");
    return;
  }
  switch (frame.type) {
    case FrameType::Hello:
      peerMaxMessageSize_ = frame.maxMessageSize;
      markEstablished();  // the limits are known: the application may send
      return;
    case FrameType::Data:
      ++stats_.messagesReceived;
      stats_.bytesReceived += frame.payloadLength;
      if (wc.wc_flags & IBV_WC_WITH_IMM)
        handler_->onRecvWithImm(*this, ntohl(wc.imm_data), frame.payload, frame.payloadLength);
      else
        handler_->onRecv(*this, frame.payload, frame.payloadLength);
      return;
    case FrameType::Credit:
      return;
    case FrameType::RegionRequest:
      onRegionRequest(frame);
      return;
    case FrameType::RegionGrant:
    case FrameType::RegionRefused: {
      auto it = std::find_if(regionRequests_.begin(), regionRequests_.end(),
                             [&](const RegionRequest& r) { return r.id == frame.requestId; });
      if (it == regionRequests_.end()) {
        fail(-EPROTO, "the peer answered a region request that was never made");
        return;
      }
      const RegionRequest request = *it;
      regionRequests_.erase(it);
      if (frame.type == FrameType::RegionRefused) {
        if (frame.error == 0 || frame.error > 4095) {
          fail(-EPROTO, "the peer refused a region request with an invalid error");
          return;
        }
        handler_->onRegionRefused(*this, request.tag, -static_cast<int>(frame.error));
        return;
      }
      if (frame.region.length != request.bytes || frame.region.access != request.access) {
        fail(-EPROTO, "the peer granted a region other than the one requested");
        return;
      }
      peerRegions_.push_back(frame.region);
      handler_->onRegionGranted(*this, request.tag, frame.region);
      return;
    }
    case FrameType::RegionOffer:
      if (peerRegions_.size() + regionRequests_.size() >= options_.maxPeerRegions) {
        fail(-EPROTO, "the peer sent more regions than maxPeerRegions");
        return;
      }
      peerRegions_.push_back(frame.region);
      handler_->onRegionReceived(*this, frame.region, frame.tag);
      return;
    case FrameType::RegionRelease:
      onRegionRelease(frame);
      return;
  }
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

bool Connection::supportsImmediateData() const noexcept {
  // iWARP (RFC 5040) has no immediate data; InfiniBand and RoCE do.
  return id_ && id_->verbs && id_->verbs->device->transport_type != IBV_TRANSPORT_IWARP;
}

void Connection::beginBatch() noexcept {
  if (sendQueue_) sendQueue_->beginBatch();
}

int Connection::endBatch() noexcept {
  if (!sendQueue_) return -ENOTCONN;
  int rc = sendQueue_->endBatch();
  if (rc != 0) failLater(rc, "ibv_post_send");
  if (sendQueue_ && sendQueue_->backlog() > 0) backlogged_ = true;  // onWritable once it drains
  return rc;
}

rdma_conn_param Connection::connParam(const std::vector<uint8_t>& privateData) const noexcept {
  rdma_conn_param param{};
  param.private_data = privateData.empty() ? nullptr : privateData.data();
  param.private_data_len = static_cast<uint8_t>(privateData.size());
  param.responder_resources = options_.responderResources;
  param.initiator_depth = options_.initiatorDepth;
  param.retry_count = options_.retryCount;  // used by the active side only
  param.rnr_retry_count = options_.rnrRetryCount;
  return param;
}

void Connection::transportUp(bool peerSpoke) noexcept {
  if (!options_.framed) {
    markEstablished();
    return;
  }
  // Framed: our first frame says how large a message we take (and returns our receives as
  // credits); the connection is established for the application once the peer's has arrived.
  // The client speaks first, the agent answers: an iWARP responder must not send before the
  // initiator has (siw terminates connections that race it).
  if (helloSent_ || !sendQueue_ || (!isClient_ && !peerSpoke)) return;
  helloSent_ = true;
  SendOp op;
  op.type = OpType::Send;
  op.internal = true;
  uint8_t* frame = takeFrameSlot(op);
  const std::vector<uint8_t> hello = helloFrame(options_.maxMessageSize, ledger_.spendForCreditFrame());
  std::memcpy(frame, hello.data(), hello.size());
  op.sge = ibv_sge{reinterpret_cast<uintptr_t>(frame), static_cast<uint32_t>(hello.size()), frameSlots_.region().lkey()};
  submit(op);
}

void Connection::markEstablished() noexcept {
  if (state_ == ConnectionState::Established) return;
  setState(ConnectionState::Established);
  onEstablishedByRole();  // e.g. the client's connect timer stops, whoever announced it
  maybeSendCreditFrame();  // framed: tell the peer about our receives before anything else
  handler_->onEstablished(*this);
}

void Connection::onCmEvent(const CmEvent& event) noexcept {
  if (finished_) return;
  if (teardownStarted_) {
    // Closing: only the end of the disconnect matters now, or the device going away under it.
    if (event.type == RDMA_CM_EVENT_DISCONNECTED) {
      disconnectDone_ = true;
      maybeFinish();
    } else if (event.type == RDMA_CM_EVENT_DEVICE_REMOVAL) {
      onDeviceGone();
    }
    return;
  }
  switch (event.type) {
    case RDMA_CM_EVENT_ESTABLISHED:
      if (state_ == ConnectionState::Connecting || state_ == ConnectionState::Accepting) {
        transportUp(false);
        return;
      }
      if (state_ == ConnectionState::Established) return;  // a receive announced it already
      break;
    case RDMA_CM_EVENT_DISCONNECTED:
      if (state_ == ConnectionState::Established) {
        // The CM channel may be read before the completion channel: what the peer sent before
        // it left is in the CQ already, and reaches onRecv before onDisconnected.
        if (completion_) completion_->deliverPending();
        if (teardownStarted_ || finished_) {  // the application closed (or it failed) meanwhile
          disconnectDone_ = true;
          maybeFinish();
          return;
        }
        handler_->onDisconnected(*this);
        disconnectDone_ = true;  // the peer's side is gone; ours follows in beginTeardown
        beginTeardown();
        return;
      }
      if (state_ == ConnectionState::Connecting || state_ == ConnectionState::Accepting) {
        fail(-ECONNRESET, "connection reset before it was established");
        return;
      }
      break;
    case RDMA_CM_EVENT_TIMEWAIT_EXIT:
    case RDMA_CM_EVENT_ADDR_CHANGE:
      return;  // informational: nothing to do
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      onDeviceGone();
      return;
    default:
      if (onRoleCmEvent(event)) return;
  }
  errorText_ = std::string("unexpected CM event ") + event.name() + " in state " + toString(state_);
  fail(-EPROTO, errorText_.c_str());
}

void Connection::onSendCompletion(const ibv_wc& wc) noexcept {
  int rc = sendQueue_->complete(
      wc,
      [this](const SendOp& op, ibv_wc_status status) {
        if (op.copySlot >= 0) sendBuffers_.release(static_cast<uint32_t>(op.copySlot));
        if (op.frameSlot >= 0) frameSlots_.release(static_cast<uint32_t>(op.frameSlot));
        if (status == IBV_WC_WR_FLUSH_ERR) {
          // The QP went to the error state and handed its work back: the connection is going
          // down, and DISCONNECTED (or an earlier, real error) says why. iWARP may flush first.
          ++stats_.flushedCompletions;
          reportUnfinished(op, status);
          return;
        }
        if (status != IBV_WC_SUCCESS) {
          reportUnfinished(op, status);
          if (teardownStarted_) return;
          errorText_ = std::string("work completion (") + toString(op.type) + "): " + ibv_wc_status_str(status);
          // The peer refusing a send (remote invalid request / remote operation error): almost
          // always a message longer than its receive buffers.
          const bool peerTooSmall = op.type == OpType::Send && (status == IBV_WC_REM_INV_REQ_ERR || status == IBV_WC_REM_OP_ERR);
          if (peerTooSmall)
            errorText_ += ": the peer could not take a message of " + std::to_string(op.sge.length + op.header.length) +
                          " B; is its maxMessageSize smaller? Both sides must use the same maxMessageSize";
          fail(peerTooSmall ? -EMSGSIZE : -EIO, errorText_.c_str());
          return;
        }
        if (op.internal) return;  // evrdma's own frame
        if (op.copySlot >= 0 || op.type == OpType::Send) {
          ++stats_.messagesSent;
          stats_.bytesSent += op.sge.length - (op.copySlot >= 0 && options_.framed ? Frame::kHeaderSize : 0);
        } else if (op.type == OpType::Read) {
          stats_.bytesRead += op.sge.length;
        } else {
          stats_.bytesWritten += op.sge.length;
        }
        if (op.copySlot >= 0) {
          if (!teardownStarted_) handler_->onSendDone(*this, op.tag);
        } else {
          ++stats_.opsCompleted;
          handler_->onOpDone(*this, OpCompletion{op.tag, op.type, status, op.sge.length});  // even closing: see the header
        }
      });
  if (rc != 0) fail(rc, "ibv_post_send");
  if (!teardownStarted_) {
    pumpWaiting();  // a frame slot may have come free
    notifyWritableIfDrained();
  }
  maybeFinish();
}

void Connection::onCompletion(const ibv_wc& wc) noexcept {
  if ((wc.wr_id & kSendFlag) != 0) {
    onSendCompletion(wc);
    return;
  }
  const auto slot = static_cast<uint32_t>(wc.wr_id & 0xffffffffu);
  --postedRecvs_;
  if (wc.status != IBV_WC_SUCCESS) {
    idleRecvSlots_.push_back(slot);
    if (wc.status == IBV_WC_WR_FLUSH_ERR) {
      ++stats_.flushedCompletions;  // see onSendCompletion
    } else if (!teardownStarted_) {
      // A message longer than the receive buffer fails the receive (LOC_LEN_ERR; rxe reports a
      // local QP operation error): almost always two sides with different maxMessageSize.
      const bool tooLong = wc.status == IBV_WC_LOC_LEN_ERR || wc.status == IBV_WC_LOC_QP_OP_ERR;
      errorText_ = std::string("work completion (receive): ") + ibv_wc_status_str(wc.status);
      if (tooLong)
        errorText_ += ": a message longer than this side's maxMessageSize (" + std::to_string(options_.maxMessageSize) +
                      " B) arrived? Both sides must use the same maxMessageSize";
      fail(tooLong ? -EMSGSIZE : -EIO, errorText_.c_str());
    }
    maybeFinish();
    return;
  }
  // The peer may send as soon as it is established, before our ESTABLISHED event arrives.
  if (state_ == ConnectionState::Accepting || state_ == ConnectionState::Connecting) transportUp(true);
  // An RDMA write with immediate consumes a receive but puts no bytes in its buffer.
  const bool intoBuffer = wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM;
  uint8_t* data = intoBuffer ? recvBuffers_.data() + size_t{slot} * bufferSize() : nullptr;
  if (data != nullptr) EVRDMA_MARK_DEFINED(data, wc.byte_len);
  if (!teardownStarted_ && (state_ == ConnectionState::Established || helloSent_)) {
    if (options_.framed && intoBuffer) {
      Frame frame;
      const char* why = "";
      if (parseFrame(data, wc.byte_len, frame, why) != 0) {
        errorText_ = std::string("malformed frame from the peer: ") + why;
        idleRecvSlots_.push_back(slot);
        fail(-EPROTO, errorText_.c_str());
        maybeFinish();
        return;
      }
      ledger_.onCreditsReturned(frame.credits);
      onFrame(frame, wc);
    } else {
      ++stats_.messagesReceived;
      stats_.bytesReceived += wc.byte_len;
      if (wc.wc_flags & IBV_WC_WITH_IMM)
        handler_->onRecvWithImm(*this, ntohl(wc.imm_data), data, wc.byte_len);
      else
        handler_->onRecv(*this, data, wc.byte_len);
    }
  }
  if (options_.autoPostRecv && !teardownStarted_ && state_ == ConnectionState::Established) {
    if (int rc = repostRecv(slot); rc != 0) {
      idleRecvSlots_.push_back(slot);
      fail(rc, "ibv_post_recv");
    }
  } else {
    idleRecvSlots_.push_back(slot);
  }
  if (options_.framed && !teardownStarted_) {
    pumpWaiting();  // credits may have come back
    notifyWritableIfDrained();
  }
  maybeFinish();
}

void Connection::onAsyncError(ibv_event_type type) noexcept {
  errorText_ = std::string("device async event: ") + ibv_event_type_str(type);
  // iWARP reports no completion for a message its receive buffer cannot hold: the QP goes fatal.
  if (type == IBV_EVENT_QP_FATAL && !supportsImmediateData())
    errorText_ += " (on iWARP: a message longer than this side's maxMessageSize (" +
                  std::to_string(options_.maxMessageSize) +
                  " B), or one that found no receive posted; both sides must use the same maxMessageSize)";
  fail(-EIO, errorText_.c_str());
}

void Connection::onDeviceGone() noexcept {
  // Every connection on the device hears it (this one too, if its QP exists): onDeviceRemoved.
  if (completions_ != nullptr) completions_->markDeviceRemoved();
  onDeviceRemoved();
}

void Connection::onDeviceRemoved() noexcept {
  // Nothing posted will come back, and the removal waits for our resources: release them now
  // rather than after disconnectTimeout.
  if (deviceGone_ || finished_) return;
  deviceGone_ = true;
  // Also when the connection was already closing because the peer went (the removal may break
  // it from the other end first): the application learns why. Not after its own close().
  if (teardownStarted_ && !failed_ && !closeRequested_) {
    failed_ = true;
    handler_->onError(*this, -ENODEV, "device removal: the RDMA device went away");
  }
  fail(-ENODEV, "device removal: the RDMA device went away");
  if (teardownStarted_) {
    disconnectDone_ = true;
    scheduleFinish();
  }
}

void Connection::onCompletionQueueError(int err, const char* op) noexcept {
  errorText_ = std::string(op) + " failed on the connection's completion queue";
  fail(err, errorText_.c_str());
}

void Connection::reportUnfinished(const SendOp& op, ibv_wc_status status) noexcept {
  // Copied sends used evrdma's own buffers, and internal frames are evrdma's: nothing to give back.
  if (orphaned_ || op.internal || op.copySlot >= 0) return;
  handler_->onOpDone(*this, OpCompletion{op.tag, op.type, status, op.sge.length});
}

void Connection::failLater(int err, const char* op) noexcept {
  if (teardownStarted_ || finished_) return;
  failed_ = true;
  // The caller is inside one of our calls (postSend, endBatch...): it gets the error as the
  // return value, and onError comes after it returned (deferred before finish(), so it precedes
  // onClosed).
  laterErrorText_ = op;
  reactor_.defer([this, err] { handler_->onError(*this, err, laterErrorText_.c_str()); });
  beginTeardown();
}

void Connection::close() noexcept {
  if (!teardownStarted_) closeRequested_ = true;
  beginTeardown();
}

void Connection::fail(int err, const char* op) noexcept {
  if (teardownStarted_ || finished_) return;
  failed_ = true;
  handler_->onError(*this, err, op);
  beginTeardown();
}

void Connection::beginTeardown() noexcept {
  if (teardownStarted_ || finished_) return;
  teardownStarted_ = true;
  // Never posted: nothing to wait for. Reported as flushed just before onClosed, in the order
  // issued (the send queue's backlog is older than what waits for credits).
  if (sendQueue_)
    for (const SendOp& op : sendQueue_->takeBacklog()) {
      ++stats_.requestsDropped;
      dropped_.push_back(op);
    }
  for (const Pending& pending : waiting_) {
    ++stats_.requestsDropped;
    dropped_.push_back(pending.op);
  }
  waiting_.clear();
  const bool wasConnected = state_ == ConnectionState::Established;
  setState(ConnectionState::Disconnecting);
  if (!wasConnected || !qp_ || deviceGone_) {
    // Nothing established: destroying the id cancels a resolution or a pending connect.
    disconnectDone_ = true;
    scheduleFinish();
    return;
  }
  // Moves the QP to the error state, which flushes every posted work request back to us.
  if (rdma_disconnect(id_.get()) != 0) disconnectDone_ = true;  // EINVAL: the peer went first
  disconnectTimer_.startOnce(options_.disconnectTimeout);
  maybeFinish();
}

void Connection::maybeFinish() noexcept {
  size_t sendsInFlight = sendQueue_ ? sendQueue_->inFlight() : 0;
  if (teardownStarted_ && disconnectDone_ && postedRecvs_ == 0 && sendsInFlight == 0) scheduleFinish();
}

void Connection::scheduleFinish() noexcept {
  if (finishScheduled_ || finished_) return;
  finishScheduled_ = true;
  // Never inside a callback of this connection: the handler may still be on the stack.
  reactor_.defer([this] { finish(); });
}

void Connection::finish() noexcept {
  disconnectTimer_.cancel();
  qp_.reset();  // the device touches no memory of ours from here on
  // What the flush did not hand back (disconnectTimeout ran out first), then what never went out.
  if (sendQueue_)
    for (const SendOp& op : sendQueue_->takeInFlight()) reportUnfinished(op, IBV_WC_WR_FLUSH_ERR);
  for (const SendOp& op : dropped_) reportUnfinished(op, IBV_WC_WR_FLUSH_ERR);
  dropped_.clear();
  releaseResources();
  finished_ = true;
  setState(failed_ ? ConnectionState::Failed : ConnectionState::Closed);
  handler_->onClosed(*this);
  onFinished();
}

void Connection::releaseResources() noexcept {
  qp_.reset();
  sendQueue_.reset();
  completion_.reset();
  recvBuffers_.reset();
  sendBuffers_ = BufferPool{};
  frameSlots_ = BufferPool{};
  lent_.clear();  // regions registered for the peer go with the connection
  lentBytes_ = 0;
  peerRegions_.clear();
  offered_.clear();
  regionRequests_.clear();
  waiting_.clear();
  dropped_.clear();
  pd_ = nullptr;
  id_.reset();
}

}  // namespace evrdma
