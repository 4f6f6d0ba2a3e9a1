// Connection, completions: each work completion of the connection's QP, routed to what it means
// (a send finished, a message or frame arrived, a receive to post again) and to the application's
// callbacks, with the statistics and the words for what went wrong; and what the device reports
// about the QP or its CQ.
#include "evrdma/Connection.h"

#include <arpa/inet.h>

#include <cerrno>
#include <string>

#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>  // the device writes received bytes behind valgrind's back
#define EVRDMA_MARK_DEFINED(address, length) VALGRIND_MAKE_MEM_DEFINED(address, length)
#else
#define EVRDMA_MARK_DEFINED(address, length) ((void)(address), (void)(length))
#endif

#include "CmEvent.h"
#include "CompletionDispatcher.h"
#include "Frame.h"
#include "FramedSender.h"
#include "HeldMessages.h"
#include "QueuePair.h"
#include "RegionExchange.h"
#include "SendQueue.h"
#include "WorkRequestId.h"

namespace evrdma {

int Connection::pauseReceiving() noexcept {
  if (closing()) return -ENOTCONN;
  if (!options_.framed && options_.sharedReceiveQueue) return -EOPNOTSUPP;
  receivingPaused_ = true;
  deliverHeldTimer_.cancel();
  return 0;
}

int Connection::resumeReceiving() noexcept {
  if (closing()) return -ENOTCONN;
  receivingPaused_ = false;
  // From a later turn: the caller may be inside a callback of this connection (onRecv among them).
  if (!heldMessages_->empty()) deliverHeldTimer_.startOnce(std::chrono::milliseconds(0));
  return 0;
}

uint32_t Connection::receivesHeld() const noexcept {
  return static_cast<uint32_t>(heldMessages_->size() + idleRecvSlots_.size());
}

void Connection::noteReceivesHeld() noexcept {
  if (framedSender_) framedSender_->setReceivesHeld(receivesHeld());
}

int Connection::postRecv() noexcept {
  if (!sendable()) return -ENOTCONN;
  if (idleRecvSlots_.empty()) {
    // From onRecv: the buffer being delivered goes back once the callback returns.
    if (deliveringSlot_ < 0 || repostDelivered_) return -ENOBUFS;
    repostDelivered_ = true;
    return 0;
  }
  if (int rc = repostRecv(idleRecvSlots_.back()); rc != 0) return rc;
  idleRecvSlots_.pop_back();
  noteReceivesHeld();
  if (framedSender_) framedSender_->maybeSendCreditFrame();
  return 0;
}

int Connection::repostRecv(uint32_t slot) noexcept {
  int rc = queuePair_->postReceive(slot);
  if (rc == 0 && framedSender_) framedSender_->onReceiveReposted();  // a credit we owe the peer
  return rc;
}

void Connection::postReceiveAgain(uint32_t slot) noexcept {
  if (closing() || state_ != ConnectionState::Established) {
    keepReceive(slot);
    return;
  }
  if (int rc = repostRecv(slot); rc != 0) {
    keepReceive(slot);
    fail(rc, "ibv_post_recv");
  }
}

void Connection::keepReceive(uint32_t slot) noexcept {
  if (queuePair_->sharesReceives())
    (void)queuePair_->postReceive(slot);  // the pool's buffer: back at once (the connection is going down)
  else
    idleRecvSlots_.push_back(slot);
}

void Connection::onCompletion(const ibv_wc& wc) noexcept {
  if (detail::wrid::isSend(wc.wr_id))
    onSendCompletion(wc);
  else
    onReceiveCompletion(wc);
}

void Connection::onSendCompletion(const ibv_wc& wc) noexcept {
  int rc = queuePair_->sendQueue()->complete(wc, [this](const SendOp& op, ibv_wc_status status) {
    if (op.copySlot >= 0) queuePair_->sendBuffers().release(static_cast<uint32_t>(op.copySlot));
    if (framedSender_) framedSender_->releaseSlot(op.frameSlot);
    if (status == IBV_WC_WR_FLUSH_ERR) {
      // The QP went to the error state and handed its work back: the connection is going down,
      // and DISCONNECTED (or an earlier, real error) says why. iWARP may flush first.
      ++stats_.flushedCompletions;
      reportUnfinished(op, status);
      noteUnexplainedFlush();
      return;
    }
    if (status != IBV_WC_SUCCESS) {
      reportUnfinished(op, status);
      if (closing()) return;
      errorText_ = std::string("work completion (") + toString(op.type) + "): " + ibv_wc_status_str(status);
      // The peer refusing a send (remote invalid request / remote operation error): almost always
      // a message longer than its receive buffers.
      const std::string length = std::to_string(op.sge.length + op.header.length);
      const bool peerRefused =
          op.type == OpType::Send && (status == IBV_WC_REM_INV_REQ_ERR || status == IBV_WC_REM_OP_ERR);
      // iWARP has no such NAK: a peer that cannot take the message terminates the connection, and
      // the send completes with a local QP operation error. So does a send whose bytes went out as
      // the peer closed the connection (soft-iWARP: the peer's FIN came before its transmit thread
      // was done with the send). The transport does not say which.
      const bool brokeOnIwarp = op.type == OpType::Send && status == IBV_WC_LOC_QP_OP_ERR && !supportsImmediateData();
      if (peerRefused)
        errorText_ += ": the peer could not take a message of " + length +
                      " B; is its maxMessageSize smaller? Both sides must use the same maxMessageSize";
      else if (brokeOnIwarp)
        errorText_ += ": the connection broke during the send (iWARP does not say why): the peer closed it as the "
                      "send completed (its bytes may have arrived), or could not take a message of " +
                      length + " B (is its maxMessageSize smaller? Both sides must use the same maxMessageSize)";
      fail(peerRefused ? -EMSGSIZE : brokeOnIwarp ? -ECONNABORTED : -EIO, errorText_.c_str());
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
      if (!closing()) handler_->onSendDone(*this, op.tag);
    } else {
      ++stats_.opsCompleted;
      handler_->onOpDone(*this, OpCompletion{op.tag, op.type, status, op.sge.length});  // even closing: see the header
    }
  });
  if (rc != 0) fail(rc, "ibv_post_send");
  if (!closing()) {
    if (framedSender_) framedSender_->pump();  // a frame slot may have come free
    notifyWritableIfDrained();
  }
  maybeFinish();
}

void Connection::onReceiveCompletion(const ibv_wc& wc) noexcept {
  const uint32_t slot = detail::wrid::index(wc.wr_id);
  queuePair_->onReceiveCompleted();
  if (wc.status != IBV_WC_WR_FLUSH_ERR) notePeerReached();  // a flush is our QP's error, not the peer
  if (wc.status != IBV_WC_SUCCESS) {
    keepReceive(slot);
    if (wc.status == IBV_WC_WR_FLUSH_ERR) {
      ++stats_.flushedCompletions;  // see onSendCompletion
      noteUnexplainedFlush();
    } else if (!closing()) {
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
  ++receivesSeen_;  // the peer is alive (keepalive)
  // The peer may send as soon as it is established, before our ESTABLISHED event arrives.
  if (state_ == ConnectionState::Accepting || state_ == ConnectionState::Connecting) transportUp(true);
  detail::HeldMessage message;
  message.slot = slot;
  message.length = wc.byte_len;
  message.hasImm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
  message.imm = message.hasImm ? ntohl(wc.imm_data) : 0;
  // An RDMA write with immediate consumes a receive but puts no bytes in its buffer.
  message.intoBuffer = wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM;
  if (message.intoBuffer) EVRDMA_MARK_DEFINED(queuePair_->receiveBuffer(slot), wc.byte_len);
  if (!closing() && (state_ == ConnectionState::Established || helloSent_))
    onMessage(message);
  else
    keepReceive(slot);
  if (framedSender_ && !closing()) {
    framedSender_->pump();  // credits may have come back; a keepalive reply may wait
    notifyWritableIfDrained();
  }
  maybeFinish();
}

void Connection::onMessage(const detail::HeldMessage& message) noexcept {
  Frame frame;
  const bool parsed = options_.framed && message.intoBuffer;
  if (parsed) {
    const char* why = "";
    if (parseFrame(queuePair_->receiveBuffer(message.slot), message.length, frame, why) != 0) {
      errorText_ = std::string("malformed frame from the peer: ") + why;
      fail(-EPROTO, errorText_.c_str());
      keepReceive(message.slot);
      return;
    }
    framedSender_->onCreditsReturned(frame.credits);
    if (frame.asksForCredits) framedSender_->onAsk(frame.requestId);
    if (frame.answersAsk) framedSender_->onAnswer();
    if ((frame.type == FrameType::Hello) != (state_ != ConnectionState::Established)) {
      fail(-EPROTO, frame.type == FrameType::Hello ? "the peer sent a second hello"
                                                   : "the peer's first frame was not a hello (is it framed too?)");
      keepReceive(message.slot);
      return;
    }
    // evrdma's own frames: handled now, whether receiving is paused or not, and their receives
    // are evrdma's to post again (the application never saw them).
    switch (frame.type) {
      case FrameType::Hello:
        peerMaxMessageSize_ = frame.maxMessageSize;
        markEstablished();  // the limits are known: the application may send
        postReceiveAgain(message.slot);
        return;
      case FrameType::KeepaliveProbe:
        framedSender_->queueKeepaliveReply();  // goes with the pump after this, returning this receive
        postReceiveAgain(message.slot);
        return;
      case FrameType::Credit:
      case FrameType::KeepaliveReply:  // heard: that is all a reply says
        postReceiveAgain(message.slot);
        return;
      default:
        break;  // data and the region exchange: the application's, in order
    }
    framedSender_->onMessageFromPeer();
  }
  if (receivingPaused_ || !heldMessages_->empty()) {
    heldMessages_->push_back(message);
    noteReceivesHeld();
    return;
  }
  deliver(message, parsed ? &frame : nullptr);
}

void Connection::deliver(const detail::HeldMessage& message, const Frame* parsed) noexcept {
  const uint8_t* payload = message.intoBuffer ? queuePair_->receiveBuffer(message.slot) : nullptr;
  size_t length = message.length;
  if (options_.framed && message.intoBuffer) {
    Frame held;
    const char* why = "";
    // Parsed and checked when it arrived (onMessage); a held message is parsed again.
    if (parsed == nullptr) {
      (void)parseFrame(payload, message.length, held, why);
      parsed = &held;
    }
    const Frame& frame = *parsed;
    if (frame.type != FrameType::Data) {
      if (regionExchange_->onFrame(frame, why) != 0) fail(-EPROTO, why);
      noteBacklog();
      postReceiveAgain(message.slot);
      return;
    }
    payload = frame.payload;
    length = frame.payloadLength;
  }
  ++stats_.messagesReceived;
  stats_.bytesReceived += length;
  const bool applicationPosts = !options_.autoPostRecv;
  if (applicationPosts) {
    deliveringSlot_ = message.slot;
    repostDelivered_ = false;
  }
  if (message.hasImm)
    handler_->onRecvWithImm(*this, message.imm, payload, length);
  else
    handler_->onRecv(*this, payload, length);
  deliveringSlot_ = -1;
  if (applicationPosts && !repostDelivered_ && sendable()) {
    idleRecvSlots_.push_back(message.slot);  // the application's, until postRecv()
    noteReceivesHeld();
    return;
  }
  postReceiveAgain(message.slot);
}

void Connection::deliverHeld() noexcept {
  beginBatch();  // what the handler sends from these callbacks goes out together
  while (!heldMessages_->empty() && !receivingPaused_ && sendable()) {
    const detail::HeldMessage message = heldMessages_->front();
    heldMessages_->pop_front();
    deliver(message, nullptr);
  }
  noteReceivesHeld();
  if (framedSender_ && !closing()) framedSender_->pump();  // the receives given back: credits
  endBatch();
  if (!closing()) notifyWritableIfDrained();
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

void Connection::onCompletionQueueError(int err, const char* op) noexcept {
  errorText_ = std::string(op) + " failed on the connection's completion queue";
  fail(err, errorText_.c_str());
}

}  // namespace evrdma
