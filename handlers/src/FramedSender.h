// FramedSender: the send side of a framed connection. Every frame (the application's messages,
// sends with immediate, writes with immediate and the protocol's own frames) spends one of the
// peer's posted receives (a credit, see CreditLedger); without one it waits, in order, and the RDMA
// writes and reads issued after it wait behind it, so everything goes to the device in the order
// the application issued it. Zero-copy sends and protocol frames also need a frame slot (a small
// registered buffer for the 16-byte header, or the whole protocol frame); slots come back with
// the send completions. Owed credits ride in each frame's header, or go out in a credit-only frame
// when CreditLedger says one is due; a line that waits for credits asks the peer for them
// (Frame::kAskBit). Keepalive probes and replies go ahead of the line. The flow control it spends
// from is the connection's CreditLedger, which the receive path feeds; its frames go down to a
// FrameOutlet (the connection's SendQueue), so the logic is unit-tested without a device. Every
// call that may post returns the first failed post's -errno: failing the connection is its caller's.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ConnectionTally.h"
#include "CreditLedger.h"
#include "Ring.h"
#include "SendQueue.h"
#include "evrdma/ConnectionOptions.h"

namespace evrdma::detail {

class FramedSender {
 public:
  // A frame slot holds a header, or a whole protocol frame (the largest is a region offer).
  static constexpr size_t kSlotSize = 64;

  // `credits`: the connection's flow control (outlives this); `slots`: `slotCount` buffers of
  // kSlotSize bytes at `slotMemory`, registered with `slotLkey`; `outlet`: where frames go. Counts
  // credit waits and credit-only frames in `stats`.
  FramedSender(CreditLedger& credits, uint8_t* slotMemory, uint32_t slotCount, uint32_t slotLkey,
               ConnectionTally& stats, FrameOutlet& outlet);

  // Sends our hello (each side's first frame: the largest message we take), at once.
  int sendHello(uint64_t maxMessageSize) noexcept;
  // A message copied into a send buffer whose header is written at `header` (its credits are
  // filled in when it goes out).
  int sendCopied(const SendOp& op, uint8_t* header) noexcept;
  // A zero-copy operation: a send gets its header in a frame slot; sends and writes with immediate
  // spend a credit; writes and reads only keep their place in line.
  int sendZeroCopy(const SendOp& op) noexcept;
  // One of evrdma's protocol frames (region exchange), copied into a frame slot. An answer to the
  // peer (a region grant or refusal) waits for credits only while fewer than maxWaitingAnswers()
  // do: a peer that keeps asking without returning the credits to answer it would otherwise grow
  // the line for as long as it likes. Past that: -ENOBUFS, nothing queued.
  int sendControl(std::vector<uint8_t> frame) noexcept;
  // Keepalive frames are protocol frames: they go ahead of the messages waiting for credits (they
  // have no order with them), with a single credit (see CreditLedger). A probe goes at once.
  int sendKeepaliveProbe() noexcept;
  // Sends what waits, as far as credits and frame slots allow, then a credit-only frame if one is
  // due. Returns the first failed post's -errno, else 0. Inline, as maybeSendCreditFrame: each is
  // asked after every send and send completion, and nearly always finds nothing to do (asked out
  // of line, twice a round trip, the calls alone cost a 64 B ping-pong ~100 instructions).
  int pump() noexcept {
    if (stopped_) return 0;
    if (waiting_.empty() && !probeWaiting_ && !ledger_.replyOwed()) return maybeSendCreditFrame();
    return pumpLine();
  }
  // A credit-only frame, if enough credits are owed and a slot and a credit are there for it (or
  // an ask, if the line waits). 0 or the post's -errno.
  int maybeSendCreditFrame() noexcept {
    if (stopped_ || freeSlots_.empty()) return 0;  // retried when a send completes
    if (waiting_.empty()) {
      ledger_.setWaiting(false);  // (no line: nothing to ask for)
      if (!ledger_.creditFrameDue()) return 0;
    }
    return sendCreditFrameIfDue();
  }

  // A send that used frame slot `slot` (SendOp::frameSlot) completed.
  void releaseSlot(int32_t slot) noexcept;

  // Called when the head of the line begins to wait for credits (ConnectionOptions::creditTimeout
  // watches from then on).
  void onWaitBegins(std::function<void()> began) { waitBegins_ = std::move(began); }
  // The head of the line waits for credits.
  bool waitingForCredits() const noexcept;
  // Frames that spent a credit so far: the line moved when this grew.
  uint64_t creditsSpent() const noexcept { return creditsSpent_; }

  // The connection is closing: nothing more goes out. Returns what waited, in order.
  std::vector<SendOp> stop() noexcept;

  size_t waiting() const noexcept { return waiting_.size(); }
  // A peer that sticks to its credits has at most as many requests unanswered as it had credits:
  // our receives (recvDepth), plus those our credit frames returned meanwhile.
  uint32_t maxWaitingAnswers() const noexcept { return maxWaitingAnswers_; }
  uint32_t answersWaiting() const noexcept { return answersWaiting_; }
  const CreditLedger& credits() const noexcept { return ledger_; }
  uint32_t freeSlots() const noexcept { return static_cast<uint32_t>(freeSlots_.size()); }
  // Copied messages that went out at once, past the line (sendCopied): nothing waited ahead.
  uint64_t sentStraightOut() const noexcept { return sentStraightOut_; }

 private:
  struct Pending {
    SendOp op;
    bool spendsCredit = false;     // uses one of the peer's receives
    uint8_t* headerAt = nullptr;   // a header already written (copy path): its credits are filled in
    bool zeroCopyHeader = false;   // the header goes in a frame slot
    std::vector<uint8_t> control;  // a whole protocol frame, copied into a frame slot
    bool countedWait = false;      // stats.creditWaits counted it
    bool answer = false;           // answers the peer's request (counted in answersWaiting_)
  };
  int enqueue(Pending pending) noexcept;
  // pump's and maybeSendCreditFrame's work, once their inline checks found some.
  int pumpLine() noexcept;
  int sendCreditFrameIfDue() noexcept;
  // Posts `frame` (a whole protocol frame) in a frame slot, with what we owe; 0 or -errno.
  int postProtocolFrame(const std::vector<uint8_t>& frame, SendOp& op) noexcept;
  // A frame that spends a credit goes out (pump's head of the line, or sendCopied's straight out):
  // spent, and the waiting it ended; returns the credits owed for its header and sets `answers`
  // if they answer the peer's ask (a write with immediate has no header: 0, false).
  uint16_t spendCredit(OpType type, bool& answers) noexcept;
  // Takes a free frame slot for `op` (the caller checked there is one); returns its memory.
  uint8_t* takeSlot(SendOp& op) noexcept;

  CreditLedger& ledger_;
  uint8_t* slotMemory_;
  uint32_t slotLkey_;
  std::vector<uint32_t> freeSlots_;
  ConnectionTally& stats_;
  FrameOutlet& outlet_;
  Ring<Pending> waiting_;
  // A keepalive probe waits, for a credit or a slot (a reply owed is the ledger's: CreditLedger::onProbe).
  bool probeWaiting_ = false;
  uint32_t maxWaitingAnswers_;
  uint32_t answersWaiting_ = 0;
  bool stopped_ = false;
  uint64_t sentStraightOut_ = 0;
  uint64_t creditsSpent_ = 0;
  std::function<void()> waitBegins_;
};

}  // namespace evrdma::detail
