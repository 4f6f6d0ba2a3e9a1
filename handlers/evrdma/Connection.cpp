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
      }) {}

Connection::~Connection() {
  // Normally finish() already released everything; this covers a Reactor torn down mid-close.
  qp_.reset();
  completion_.reset();
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
  const size_t size = options_.maxMessageSize;
  recvBuffers_ = MemoryRegion::allocate(pd_, size * options_.recvDepth, kLocalWrite, error);
  if (!recvBuffers_) return error;
  sendBuffers_ = MemoryRegion::allocate(pd_, size * options_.sendDepth, 0, error);
  if (!sendBuffers_) return error;

  op = "ibv_create_cq";
  completion_ = completions_->attach(options_.recvDepth + options_.sendDepth, static_cast<CompletionHandler*>(this), error);
  if (!completion_) return error;

  op = "rdma_create_qp";
  ibv_qp_init_attr attr{};
  attr.send_cq = attr.recv_cq = completion_->cq();
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = options_.sendDepth;
  attr.cap.max_recv_wr = options_.recvDepth;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
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
  freeSendSlots_.clear();
  for (uint32_t slot = options_.sendDepth; slot-- > 0;) freeSendSlots_.push_back(slot);
  op = "ibv_post_recv";
  for (uint32_t slot = 0; slot < options_.recvDepth; ++slot)
    if (int rc = postRecvSlot(slot); rc != 0) return rc;
  return 0;
}

int Connection::postRecvSlot(uint32_t slot) noexcept {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(recvBuffers_.data() + size_t{slot} * options_.maxMessageSize);
  sge.length = static_cast<uint32_t>(options_.maxMessageSize);
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
  uint32_t slot = idleRecvSlots_.back();
  int rc = postRecvSlot(slot);
  if (rc == 0) idleRecvSlots_.pop_back();
  return rc;
}

int Connection::postSend(const void* data, size_t length, uint64_t tag) noexcept {
  if (state_ != ConnectionState::Established || teardownStarted_) return -ENOTCONN;
  if (length > options_.maxMessageSize) return -EMSGSIZE;
  if (freeSendSlots_.empty()) return -ENOBUFS;
  uint32_t slot = freeSendSlots_.back();
  uint8_t* buffer = sendBuffers_.data() + size_t{slot} * options_.maxMessageSize;
  if (length > 0) std::memcpy(buffer, data, length);
  SendOp op;
  op.type = OpType::Send;
  op.tag = tag;
  op.sge.addr = reinterpret_cast<uintptr_t>(buffer);
  op.sge.length = static_cast<uint32_t>(length);
  op.sge.lkey = sendBuffers_.lkey();
  op.copySlot = static_cast<int32_t>(slot);
  freeSendSlots_.pop_back();
  return submit(op);
}

int Connection::submit(SendOp op) noexcept {
  int rc = sendQueue_->submit(op);
  if (rc != 0) fail(rc, "ibv_post_send");
  return rc;
}

int Connection::checkedSubmit(OpType type, const Slice& local, const RemoteRegion* remote, uint64_t remoteOffset,
                              bool hasImm, uint32_t imm, uint64_t tag) noexcept {
  if (state_ != ConnectionState::Established || teardownStarted_) return -ENOTCONN;
  if (local.region == nullptr || !*local.region) return -EINVAL;
  if (!local.region->contains(local.offset, local.length)) return -ERANGE;
  if (local.length > kMaxMessageSize) return -EMSGSIZE;
  if (type == OpType::Read && (local.region->access() & kLocalWrite) == 0) return -EACCES;
  if (hasImm && !supportsImmediateData()) return -EOPNOTSUPP;
  if (remote != nullptr) {
    if (int rc = remote->check(remoteOffset, local.length, type != OpType::Read); rc != 0) return rc;
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
  return submit(op);
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
  if (rc != 0) fail(rc, "ibv_post_send");
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

void Connection::markEstablished() noexcept {
  if (state_ == ConnectionState::Established) return;
  setState(ConnectionState::Established);
  handler_->onEstablished(*this);
}

void Connection::onCmEvent(const CmEvent& event) noexcept {
  if (finished_) return;
  if (teardownStarted_) {
    // Closing: only the end of the disconnect matters now.
    if (event.type == RDMA_CM_EVENT_DISCONNECTED) {
      disconnectDone_ = true;
      maybeFinish();
    }
    return;
  }
  switch (event.type) {
    case RDMA_CM_EVENT_ESTABLISHED:
      if (state_ == ConnectionState::Connecting || state_ == ConnectionState::Accepting) {
        markEstablished();
        onRoleCmEvent(event);  // lets the role stop its timers
        return;
      }
      if (state_ == ConnectionState::Established) return;  // a receive announced it already
      break;
    case RDMA_CM_EVENT_DISCONNECTED:
      if (state_ == ConnectionState::Established) {
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
      fail(-ENODEV, "device removal");
      return;
    default:
      if (onRoleCmEvent(event)) return;
  }
  errorText_ = std::string("unexpected CM event ") + event.name() + " in state " + toString(state_);
  fail(-EPROTO, errorText_.c_str());
}

void Connection::onSendCompletion(const ibv_wc& wc) noexcept {
  bool drained = false;
  int rc = sendQueue_->complete(
      wc,
      [this](const SendOp& op, ibv_wc_status status) {
        if (op.copySlot >= 0) freeSendSlots_.push_back(static_cast<uint32_t>(op.copySlot));
        if (status == IBV_WC_WR_FLUSH_ERR) {
          // The QP went to the error state and handed its work back: the connection is going
          // down, and DISCONNECTED (or an earlier, real error) says why. iWARP may flush first.
          ++stats_.flushedCompletions;
          return;
        }
        if (status != IBV_WC_SUCCESS) {
          if (teardownStarted_) return;
          if (op.copySlot < 0) handler_->onOpDone(*this, OpCompletion{op.tag, op.type, status, op.sge.length});
          errorText_ = std::string("work completion (") + toString(op.type) + "): " + ibv_wc_status_str(status);
          fail(-EIO, errorText_.c_str());
          return;
        }
        if (op.copySlot >= 0 || op.type == OpType::Send) {
          ++stats_.messagesSent;
          stats_.bytesSent += op.sge.length;
        } else if (op.type == OpType::Read) {
          stats_.bytesRead += op.sge.length;
        } else {
          stats_.bytesWritten += op.sge.length;
        }
        if (teardownStarted_) return;
        if (op.copySlot >= 0) {
          handler_->onSendDone(*this, op.tag);
        } else {
          ++stats_.opsCompleted;
          handler_->onOpDone(*this, OpCompletion{op.tag, op.type, status, op.sge.length});
        }
      },
      drained);
  if (rc != 0) fail(rc, "ibv_post_send");
  if (drained && !teardownStarted_) handler_->onWritable(*this);
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
      errorText_ = std::string("work completion (receive): ") + ibv_wc_status_str(wc.status);
      fail(-EIO, errorText_.c_str());
    }
    maybeFinish();
    return;
  }
  {
    ++stats_.messagesReceived;
    stats_.bytesReceived += wc.byte_len;
    // The peer may send as soon as it is established, before our ESTABLISHED event arrives.
    if (state_ == ConnectionState::Accepting || state_ == ConnectionState::Connecting) markEstablished();
    if (!teardownStarted_ && state_ == ConnectionState::Established) {
      // An RDMA write with immediate consumes a receive but puts no bytes in its buffer.
      const bool intoBuffer = wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM;
      uint8_t* data = intoBuffer ? recvBuffers_.data() + size_t{slot} * options_.maxMessageSize : nullptr;
      if (data != nullptr) EVRDMA_MARK_DEFINED(data, wc.byte_len);
      if (wc.wc_flags & IBV_WC_WITH_IMM)
        handler_->onRecvWithImm(*this, ntohl(wc.imm_data), data, wc.byte_len);
      else
        handler_->onRecv(*this, data, wc.byte_len);
    }
    if (options_.autoPostRecv && !teardownStarted_ && state_ == ConnectionState::Established) {
      if (int rc = postRecvSlot(slot); rc != 0) {
        idleRecvSlots_.push_back(slot);
        fail(rc, "ibv_post_recv");
      }
    } else {
      idleRecvSlots_.push_back(slot);
    }
  }
  maybeFinish();
}

void Connection::onAsyncError(ibv_event_type type) noexcept {
  errorText_ = std::string("device async event: ") + ibv_event_type_str(type);
  fail(-EIO, errorText_.c_str());
}

void Connection::close() noexcept { beginTeardown(); }

void Connection::fail(int err, const char* op) noexcept {
  if (teardownStarted_ || finished_) return;
  failed_ = true;
  handler_->onError(*this, err, op);
  beginTeardown();
}

void Connection::beginTeardown() noexcept {
  if (teardownStarted_ || finished_) return;
  teardownStarted_ = true;
  if (sendQueue_) stats_.requestsDropped += sendQueue_->dropBacklog();  // never posted: nothing to wait for
  const bool wasConnected = state_ == ConnectionState::Established;
  setState(ConnectionState::Disconnecting);
  if (!wasConnected || !qp_) {
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
  qp_.reset();
  sendQueue_.reset();
  completion_.reset();
  recvBuffers_.reset();
  sendBuffers_.reset();
  pd_ = nullptr;
  id_.reset();
  finished_ = true;
  setState(failed_ ? ConnectionState::Failed : ConnectionState::Closed);
  handler_->onClosed(*this);
  onFinished();
}

}  // namespace evrdma
