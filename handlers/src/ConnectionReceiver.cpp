// ConnectionReceiver: each receive completion routed to what it means (a protocol frame handled,
// a message delivered or held while paused), the receives posted again or kept, and the
// receive-side back-pressure (pauseReceiving / resumeReceiving).
#include "ConnectionReceiver.h"

#include <arpa/inet.h>

#include <cerrno>
#include <new>
#include <string>

#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>  // the device writes received bytes behind valgrind's back
#define EVRDMA_MARK_DEFINED(address, length) VALGRIND_MAKE_MEM_DEFINED(address, length)
#else
#define EVRDMA_MARK_DEFINED(address, length) ((void)(address), (void)(length))
#endif

#include "ConnectionCore.h"
#include "Frame.h"
#include "FramedSender.h"
#include "HeldMessages.h"
#include "QueuePair.h"
#include "RegionExchange.h"
#include "SendQueue.h"
#include "WorkRequestId.h"
#include "evrdma/Connection.h"

namespace evrdma::detail {

ConnectionReceiver::ConnectionReceiver(ConnectionCore& core)
    : c_(core), deliverHeldTimer_(core.reactor_, [this] { deliverHeld(); }) {}

ReceiveLoan* ConnectionReceiver::lendDelivering() noexcept {
  if (lendableSlot_ < 0 || c_.queuePair_->sharesReceives()) return nullptr;
  if (!loanDesk_) {
    const std::shared_ptr<void>& memory = c_.queuePair_->receiveMemory();
    if (!memory) return nullptr;  // an arena block goes back to the arena with the connection
    loanDesk_ = std::shared_ptr<LoanDesk>(new (std::nothrow) LoanDesk(memory, c_.options_.spareRecvBuffers));
    if (!loanDesk_) return nullptr;
  }
  collectLoans();
  const int64_t buffer = c_.queuePair_->exchangeReceiveBuffer(static_cast<uint32_t>(lendableSlot_), true);
  if (buffer < 0) return nullptr;
  auto* loan = new (std::nothrow) ReceiveLoan(loanDesk_, static_cast<uint32_t>(buffer));
  if (loan == nullptr) {
    // The slot keeps the spare; the message's buffer is a spare now, its bytes copied instead.
    c_.queuePair_->giveBackReceiveBuffer(static_cast<uint32_t>(buffer));
    return nullptr;
  }
  lendableSlot_ = -1;  // lent once
  sendableSlot_ = -1;  // and no longer the connection's to send
  ++lent_;
  return loan;
}

int ConnectionReceiver::sendDelivering(uint64_t tag) noexcept {
  if (!c_.sendable()) return -ENOTCONN;
  if (sendableSlot_ < 0) return -EINVAL;  // outside onRecv, sent or lent already, or no bytes
  if (c_.queuePair_->sharesReceives()) return -EOPNOTSUPP;  // the pool's buffers are not the connection's
  if (c_.options_.framed && sendableLength_ > c_.peerMaxMessageSize_) return -EMSGSIZE;
  const int64_t buffer = c_.queuePair_->exchangeReceiveBuffer(static_cast<uint32_t>(sendableSlot_), false);
  if (buffer < 0) return -ENOBUFS;  // every spare is on its way out: postSend copies instead
  sendableSlot_ = -1;
  lendableSlot_ = -1;
  return c_.sender.sendReceiveBuffer(static_cast<uint32_t>(buffer), sendableLength_, tag);
}

bool ConnectionReceiver::findsNoSpare(const HeldMessage& message) noexcept {
  if (lendFrom_ == 0 || !message.intoBuffer || message.hasImm || message.length < lendFrom_ + Frame::kHeaderSize)
    return false;
  collectLoans();
  return c_.queuePair_->sparesAllLent();
}

void ConnectionReceiver::collectLoans() noexcept {
  if (!loanDesk_ || !c_.queuePair_) return;
  loanDesk_->collect([this](uint32_t buffer) {
    c_.queuePair_->giveBackReceiveBuffer(buffer);
    --lent_;
  });
}

int ConnectionReceiver::pause() noexcept {
  if (c_.closing()) return -ENOTCONN;
  if (!c_.options_.framed && c_.options_.sharedReceiveQueue) return -EOPNOTSUPP;
  paused_ = true;
  deliverHeldTimer_.cancel();
  return 0;
}

int ConnectionReceiver::resume() noexcept {
  if (c_.closing()) return -ENOTCONN;
  paused_ = false;
  // From a later turn: the caller may be inside a callback of this connection (onRecv among them).
  if (!heldMessages_.empty()) deliverHeldTimer_.startOnce(std::chrono::milliseconds(0));
  return 0;
}

void ConnectionReceiver::dropHeld() noexcept {
  deliverHeldTimer_.cancel();
  for (; !heldMessages_.empty(); heldMessages_.pop_front()) keep(heldMessages_.front().slot);
}

void ConnectionReceiver::handOutHeldAsPeerLeft() noexcept {
  peerLeft_ = true;
  deliverHeldTimer_.cancel();
  // The handler may close from a callback: what is left is dropped then (dropHeld).
  while (!heldMessages_.empty() && !c_.closing()) {
    const HeldMessage message = heldMessages_.front();
    heldMessages_.pop_front();
    deliver(message, nullptr);
  }
}

void ConnectionReceiver::noteHeld() noexcept {
  if (c_.flowControl_) c_.flowControl_->setHeld(held());
}

int ConnectionReceiver::postRecv() noexcept {
  if (!c_.sendable()) return -ENOTCONN;
  if (idleSlots_.empty()) {
    // From onRecv: the buffer being delivered goes back once the callback returns.
    if (deliveringSlot_ < 0 || repostDelivered_) return -ENOBUFS;
    repostDelivered_ = true;
    return 0;
  }
  if (int rc = repost(idleSlots_.back()); rc != 0) return rc;
  idleSlots_.pop_back();
  noteHeld();
  if (c_.framedSender_) c_.sender.ownPosted(c_.framedSender_->maybeSendCreditFrame());
  return 0;
}

int ConnectionReceiver::repost(uint32_t slot) noexcept {
  int rc = c_.queuePair_->postReceive(slot);
  if (rc == 0 && c_.flowControl_) c_.flowControl_->onReceiveReposted();  // a credit we owe the peer
  return rc;
}

void ConnectionReceiver::postAgain(uint32_t slot) noexcept {
  if (c_.closing() || c_.life_ != detail::Life::Established || peerLeft_) {
    keep(slot);
    return;
  }
  if (int rc = repost(slot); rc != 0) {
    keep(slot);
    c_.fail(rc, "ibv_post_recv");
  }
}

void ConnectionReceiver::keep(uint32_t slot) noexcept {
  if (c_.queuePair_->sharesReceives())
    (void)c_.queuePair_->postReceive(slot);  // the pool's buffer: back at once (the connection is going down)
  else
    idleSlots_.push_back(slot);
}

bool ConnectionReceiver::onCompletion(const ibv_wc& wc) noexcept {
  const uint32_t slot = wrid::index(wc.wr_id);  // counted as consumed by the core already
  if (wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && deliversAtOnce()) {
    deliverPlain(slot, wc);
    return false;
  }
  if (wc.status != IBV_WC_SUCCESS) {
    keep(slot);
    if (wc.status == IBV_WC_WR_FLUSH_ERR) {
      c_.tally_.add(&ConnectionStats::flushedCompletions);  // see ConnectionSender::onCompletion
      c_.teardown.noteUnexplainedFlush();
    } else if (!c_.closing()) {
      // A message longer than the receive buffer fails the receive (LOC_LEN_ERR; rxe reports a
      // local QP operation error): almost always two sides with different maxMessageSize.
      const bool tooLong = wc.status == IBV_WC_LOC_LEN_ERR || wc.status == IBV_WC_LOC_QP_OP_ERR;
      c_.errorText_ = std::string("work completion (receive): ") + ibv_wc_status_str(wc.status);
      if (tooLong)
        c_.errorText_ += ": a message longer than this side's maxMessageSize (" + std::to_string(c_.options_.maxMessageSize) +
                      " B) arrived? Both sides must use the same maxMessageSize";
      c_.fail(tooLong ? -EMSGSIZE : -EIO, c_.errorText_.c_str());
    }
    c_.teardown.maybeFinish();
    return false;
  }
  ++receivesSeen_;  // the peer is alive (keepalive)
  HeldMessage message;
  message.slot = slot;
  message.length = wc.byte_len;
  message.hasImm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
  message.imm = message.hasImm ? ntohl(wc.imm_data) : 0;
  // An RDMA write with immediate consumes a receive but puts no bytes in its buffer.
  message.intoBuffer = wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM;
  if (message.intoBuffer) EVRDMA_MARK_DEFINED(c_.queuePair_->receiveBuffer(slot), wc.byte_len);
  if (!c_.closing() && (c_.life_ == detail::Life::Established || c_.helloSent_))
    onMessage(message);
  else
    keep(slot);
  return true;  // ConnectionCore::afterReceiving
}

void ConnectionReceiver::handOut(const uint8_t* payload, size_t length, bool hasImm, uint32_t imm) noexcept {
  c_.tally_.add(&ConnectionStats::messagesReceived);
  c_.tally_.add(&ConnectionStats::bytesReceived, length);
  if (stream_ != nullptr && !hasImm) {
    ReceiveLoan* loan = lendFrom_ > 0 && length >= lendFrom_ ? lendDelivering() : nullptr;
    if (!stream_->onStreamBytes(c_.facade(), payload, length, loan)) (void)pause();  // its window is full
    return;
  }
  if (hasImm)
    c_.handler_->onRecvWithImm(c_.facade(), imm, payload, length);
  else
    c_.handler_->onRecv(c_.facade(), payload, length);
}

bool ConnectionReceiver::deliversAtOnce() const noexcept {
  return !c_.options_.framed && c_.options_.autoPostRecv && !paused_ && heldMessages_.empty() && lendFrom_ == 0 &&
         c_.peerReached_ && c_.sendable();
}

// What onCompletion, onMessage, deliverOrHold and deliver do for such a message, without asking
// again what deliversAtOnce() answered: the ping-pong shape's short way.
void ConnectionReceiver::deliverPlain(uint32_t slot, const ibv_wc& wc) noexcept {
  ++receivesSeen_;
  const uint8_t* payload = c_.queuePair_->receiveBuffer(slot);
  EVRDMA_MARK_DEFINED(payload, wc.byte_len);
  sendableSlot_ = slot;
  sendableLength_ = wc.byte_len;
  const bool hasImm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
  handOut(payload, wc.byte_len, hasImm, hasImm ? ntohl(wc.imm_data) : 0);
  sendableSlot_ = -1;
  postAgain(slot);
  c_.teardown.maybeFinish();
}

void ConnectionReceiver::onMessage(const HeldMessage& message) noexcept {
  if (c_.options_.framed && message.intoBuffer)
    onFrame(message);
  else
    deliverOrHold(message, nullptr);
}

void ConnectionReceiver::onFrame(const HeldMessage& message) noexcept {
  Frame frame;
  const char* why = "";
  if (parseFrame(c_.queuePair_->receiveBuffer(message.slot), message.length, frame, why) != 0) {
    c_.errorText_ = std::string("malformed frame from the peer: ") + why;
    c_.fail(-EPROTO, c_.errorText_.c_str());
    keep(message.slot);
    return;
  }
  c_.flowControl_->onCreditsReturned(frame.credits);
  if (frame.asksForCredits) c_.flowControl_->onAsk(frame.requestId);
  if (frame.answersAsk) c_.flowControl_->onAnswer();
  if ((frame.type == FrameType::Hello) != (c_.life_ != detail::Life::Established)) {
    c_.fail(-EPROTO, frame.type == FrameType::Hello ? "the peer sent a second hello"
                                                 : "the peer's first frame was not a hello (is it framed too?)");
    keep(message.slot);
    return;
  }
  // evrdma's own frames: handled now, whether receiving is paused or not, and their receives
  // are evrdma's to post again (the application never saw them).
  switch (frame.type) {
    case FrameType::Hello:
      c_.peerMaxMessageSize_ = frame.maxMessageSize;
      c_.markEstablished();  // the limits are known: the application may send
      postAgain(message.slot);
      return;
    case FrameType::KeepaliveProbe:
      c_.flowControl_->onProbe();  // the reply goes with the pump after delivery, returning this receive
      postAgain(message.slot);
      return;
    case FrameType::Credit:
    case FrameType::KeepaliveReply:  // heard: that is all a reply says
      postAgain(message.slot);
      return;
    default:
      break;  // data and the region exchange: the application's, in order
  }
  c_.flowControl_->onMessageFromPeer();
  deliverOrHold(message, &frame);
}

void ConnectionReceiver::deliverOrHold(const HeldMessage& message, const Frame* parsed) noexcept {
  if (paused_ || !heldMessages_.empty()) {
    heldMessages_.push_back(message);
    noteHeld();
    return;
  }
  if (findsNoSpare(message)) {
    // More arrived this turn than there are spares: the rest waits for the program to drain.
    heldMessages_.push_back(message);
    noteHeld();
    deliverHeldTimer_.startOnce(std::chrono::milliseconds(0));
    return;
  }
  deliver(message, parsed);
}

void ConnectionReceiver::deliver(const HeldMessage& message, const Frame* parsed) noexcept {
  const uint8_t* payload = message.intoBuffer ? c_.queuePair_->receiveBuffer(message.slot) : nullptr;
  size_t length = message.length;
  if (c_.options_.framed && message.intoBuffer) {
    // Parsed and checked when it arrived (onFrame); a held message is parsed again (here, so that
    // each message's path does not build a Frame it does not use).
    if (parsed == nullptr) {
      Frame held;
      const char* why = "";
      (void)parseFrame(payload, message.length, held, why);
      deliver(message, &held);
      return;
    }
    const Frame& frame = *parsed;
    if (frame.type != FrameType::Data) {
      const char* why = "";
      if (c_.regionExchange_->onFrame(frame, why) != 0) c_.fail(-EPROTO, why);
      c_.sender.noteBacklog();
      postAgain(message.slot);
      return;
    }
    payload = frame.payload;
    length = frame.payloadLength;
  }
  const bool applicationPosts = !c_.options_.autoPostRecv;
  if (applicationPosts) {
    deliveringSlot_ = message.slot;
    repostDelivered_ = false;
  } else if (c_.options_.framed && message.intoBuffer && !message.hasImm && !peerLeft_) {
    lendableSlot_ = message.slot;  // (once the peer left, copied: nothing is exchanged in a ring torn down)
  }
  if (message.intoBuffer && !peerLeft_) {
    sendableSlot_ = message.slot;
    sendableLength_ = length;
  }
  handOut(payload, length, message.hasImm, message.imm);
  deliveringSlot_ = -1;
  sendableSlot_ = -1;
  lendableSlot_ = -1;  // lent or not, the receive is posted again (a lent one with a spare buffer)
  if (applicationPosts && !repostDelivered_ && c_.sendable()) {
    idleSlots_.push_back(message.slot);  // the application's, until postRecv()
    noteHeld();
    return;
  }
  postAgain(message.slot);
}

void ConnectionReceiver::deliverHeld() noexcept {
  c_.sender.beginBatch();  // what the handler sends from these callbacks goes out together
  // Held for a spare buffer (onMessage): if the first still finds none, the program keeps what
  // it was lent, and the borrower copies from here on; else the rest waits again once spares run out.
  const bool keptLent = !heldMessages_.empty() && findsNoSpare(heldMessages_.front());
  while (!heldMessages_.empty() && !paused_ && c_.sendable()) {
    const HeldMessage message = heldMessages_.front();
    if (!keptLent && findsNoSpare(message)) {
      deliverHeldTimer_.startOnce(std::chrono::milliseconds(0));
      break;
    }
    heldMessages_.pop_front();
    deliver(message, nullptr);
  }
  noteHeld();
  // From its timer, the top of its own stack: the receives given back are credits.
  c_.afterReceiving();
  (void)c_.sender.endBatch();
}

}  // namespace evrdma::detail
