// ConnectionReceiver: one connection's receiving: each receive completion routed to what it means
// (a protocol frame handled, a message delivered to onRecv or held while receiving is paused), the
// receives posted again (or kept for the application's postRecv, or while closing), and the
// receive-side back-pressure (pauseReceiving / resumeReceiving). A part of ConnectionCore.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <infiniband/verbs.h>

#include "HeldMessages.h"
#include "ReceiveLoan.h"
#include "StreamPort.h"
#include "evrdma/Watch.h"

namespace evrdma {

class ConnectionCore;
struct Frame;

namespace detail {

class ConnectionReceiver {
 public:
  explicit ConnectionReceiver(ConnectionCore& core);
  ConnectionReceiver(const ConnectionReceiver&) = delete;
  ConnectionReceiver& operator=(const ConnectionReceiver&) = delete;

  // A completion of a receive (success, error or flush), already counted as consumed
  // (QueuePair::onReceiveCompleted, by ConnectionCore::onCompletion).
  // True when a message was taken (delivered, held or kept): the caller then does what receiving
  // sets off on the send side (ConnectionCore::afterReceiving). False for the short way and for a
  // failed receive, which need none of it.
  bool onCompletion(const ibv_wc& wc) noexcept;
  int pause() noexcept;
  int resume() noexcept;
  bool paused() const noexcept { return paused_; }
  // Messages held while paused, plus (autoPostRecv off) delivered messages' buffers not given
  // back with postRecv() yet.
  uint32_t held() const noexcept { return static_cast<uint32_t>(heldMessages_.size() + idleSlots_.size()); }
  // The buffers whose loans came back (ReceiveLoan::giveBack, from any thread) are spares again.
  void collectLoans() noexcept;
  // A stream's: messages go to `stream` (StreamPort::deliverTo) in place of onRecv, those of at
  // least `lendFrom` payload bytes (0: none) with their buffer lent. One that arrives while every
  // spare is lent waits for the next turn, when the program has drained what it was lent this one
  // (the borrower copies what finds no spare then: it keeps what it was lent).
  void deliverTo(StreamReceiver* stream, size_t lendFrom) noexcept {
    stream_ = stream;
    lendFrom_ = lendFrom;
  }
  uint32_t lent() const noexcept {
    return lent_ - static_cast<uint32_t>(loanDesk_ ? loanDesk_->waiting() : 0);
  }
  int postRecv() noexcept;
  // From inside onRecv (Connection::sendReceived): sends the message being delivered from its own
  // receive buffer, which leaves the ring for a spare and comes back when the send completes.
  int sendDelivering(uint64_t tag) noexcept;
  // Every successful receive, the protocol's own frames included: the peer is alive.
  uint64_t receivesSeen() const noexcept { return receivesSeen_; }
  // Closing: what was held stays in its buffers, never delivered.
  void dropHeld() noexcept;
  // The peer has left (DISCONNECTED, the CQ drained past it): what it sent and this side held
  // (paused, or waiting for a spare) is handed out now, in order, paused or not: the peer cannot
  // be held back any more, and its sends completed, so it was told each message arrived (over TCP
  // the bytes wait in the socket until read, then EOF). Nothing is posted again or lent from then on.
  void handOutHeldAsPeerLeft() noexcept;

 private:
  // A successful receive: a protocol frame is handled and its receive posted again; a message is
  // delivered, or held while receiving is paused (or earlier ones are still held).
  void onMessage(const HeldMessage& message) noexcept;
  // Framed: the frame parsed and checked; evrdma's own frames handled, data and the region
  // exchange go on to deliverOrHold.
  void onFrame(const HeldMessage& message) noexcept;
  // Delivered now, or held (paused, earlier ones held, or no spare buffer to lend it from).
  // `parsed`: its frame (framed), or null.
  void deliverOrHold(const HeldMessage& message, const Frame* parsed) noexcept;
  // A plain message (no frame, autoPostRecv, not paused, nothing held, nothing lent, established)
  // goes straight to onRecv and its receive is posted again: deliverPlain.
  bool deliversAtOnce() const noexcept;
  void deliverPlain(uint32_t slot, const ibv_wc& wc) noexcept;
  // Counts a message and hands it to onRecv / onRecvWithImm, or to the stream with its loan
  // (deliver and deliverPlain).
  void handOut(const uint8_t* payload, size_t length, bool hasImm, uint32_t imm) noexcept;
  // Framed, autoPostRecv on, from handOut: lends the buffer of the message being delivered, its
  // receive taking a spare buffer (see ReceiveLoan). Null when it cannot be: no spare buffer left
  // (all lent), or a ring in the device's small-buffer arena (its memory is not the connection's
  // own) or a shared receive queue.
  ReceiveLoan* lendDelivering() noexcept;
  // With lending: this message would be lent, and no spare buffer is free for it.
  bool findsNoSpare(const HeldMessage& message) noexcept;
  // Hands one message to the handler, then posts its receive again or keeps it for postRecv().
  // `parsed`: its frame as onMessage parsed it (framed), or null to parse it (held, or unframed).
  void deliver(const HeldMessage& message, const Frame* parsed) noexcept;
  // The messages held while paused, in order, until paused again or closing (resume's later turn).
  void deliverHeld() noexcept;
  // Posts a consumed receive again (or keeps it, when closing or not yet established).
  void postAgain(uint32_t slot) noexcept;
  // Posts a consumed receive again (and, framed, owes the peer a credit for it).
  int repost(uint32_t slot) noexcept;
  // A consumed receive buffer not posted again now: kept (closing), or, from a shared receive
  // queue, given back to its pool.
  void keep(uint32_t slot) noexcept;
  // Tells the credit ledger how many receives the application holds.
  void noteHeld() noexcept;

  ConnectionCore& c_;
  bool paused_ = false;
  bool peerLeft_ = false;  // handOutHeldAsPeerLeft: receives are kept, not posted; nothing lent
  HeldMessages heldMessages_;  // what arrived while paused, in order
  Timer deliverHeldTimer_;
  std::vector<uint32_t> idleSlots_;  // consumed, not re-posted (autoPostRecv off)
  // autoPostRecv off: the message being delivered, whose buffer postRecv() may claim from onRecv.
  int64_t deliveringSlot_ = -1;
  bool repostDelivered_ = false;
  // The framed data message being delivered (autoPostRecv on), which lendDelivering may lend
  // (-1 once lent: at most once).
  int64_t lendableSlot_ = -1;
  // The message being delivered (its bytes in its buffer), which sendDelivering may send (-1
  // once sent or lent: at most once), and its payload's length.
  int64_t sendableSlot_ = -1;
  size_t sendableLength_ = 0;
  uint32_t lent_ = 0;  // lent and not collected back yet
  size_t lendFrom_ = 0;
  StreamReceiver* stream_ = nullptr;  // deliverTo: a stream's connection
  std::shared_ptr<LoanDesk> loanDesk_;  // made at the first loan
  uint64_t receivesSeen_ = 0;
};

}  // namespace detail
}  // namespace evrdma
