// CreditLedger: send/receive flow control for a framed connection, so a peer never sends into a
// receive queue with nothing posted (no RNR retry on RoCE/InfiniBand, and no connection-ending
// TERMINATE on iWARP, which has no RNR retry at all).
//
// Every frame and every RDMA write with immediate consumes one of the peer's posted receives, so
// each costs one credit. A receive we re-post is a credit we owe the peer; owed credits ride in the
// header of every frame we send, or go in a credit-only frame.
//
// Two kinds of frame. Messages (application data, writes with immediate, region exchange) may be
// held by the receiving application (paused delivery, or autoPostRecv off): their receives come
// back only when it lets go. Protocol frames (credit-only, keepalive probes and replies) are
// handled at once and their receives re-posted at once. A message needs four credits and leaves
// three: so however much the peer holds (at most depth - 3), three of its receives are always free
// for protocol frames, and keepalive and credit returns go on while a reader is paused. A
// protocol frame needs one credit; the last one only if it returns at least one (else two sides
// that each spent their last on frames that crossed could both wait for ever).
// Invariant, per direction: sender's credits + its frames in flight + credits on their way back +
// receiver's owed credits + receives the receiver holds = the receiver's receive depth.
//
// A credit-only frame goes (with one credit and something owed) when:
//  - `threshold` credits are owed (the usual return, before the peer runs short);
//  - the peer asked for credits (a credit-only frame with Frame::kAskBit: it has messages
//    waiting, and says how many credits it lacks and how many it had received in all, so we know
//    which of our returns it had not counted yet), once we owe what it lacks and hold none of
//    what a message needs (a paused reader answers when it lets go). An answer that could not
//    unblock the peer would only be met by its next ask: two sides that each wait for the other,
//    with asks crossing, would trade them for ever;
//  - the peer can have one credit left at most (owed + held >= depth - 1): too few for a probe
//    or an ask that returns nothing. The return gives it depth - held >= 3 again, and it takes
//    two more of its frames to fall that low.
// A waiting side asks once, and again only after an answer (Frame::kAnswerBit) that got it
// further than where it asked from. When both sides wait, an answer costs the answerer a credit
// it needs itself: only one side (the client) answers while it waits, else two answers crossing
// would leave both where they were, for ever. Nothing here trades frames for ever:
// flow_control_test runs two senders with frames crossing, readers pausing, probes.
//
// Start: each side has posted all its receives before the connection is established, and may
// assume one (the first frame); it sends its hello at once carrying depth - 1.
// One object for both directions of a connection: the receive path tells it what the peer's frames
// returned, asked and answered and what the application holds; the send path (FramedSender)
// spends from it. Neither calls the other through it.
// Pure logic, no verbs: unit-tested on its own.
#pragma once

#include <algorithm>
#include <cstdint>

#include "evrdma/ConnectionOptions.h"

namespace evrdma {

class CreditLedger {
 public:
  static constexpr uint32_t kMinRecvDepth = ConnectionOptions::kMinFramedRecvDepth;

  // Credits a message needs: it leaves three of the peer's receives for protocol frames.
  static constexpr uint32_t kMessageCredits = 4;

  // `recvDepth`: how many receives this side keeps posted.
  explicit CreditLedger(uint32_t recvDepth = kMinRecvDepth)
      : depth_(recvDepth), threshold_(std::max<uint32_t>(2, recvDepth / 2)), owed_(recvDepth - 1) {}

  uint32_t depth() const noexcept { return depth_; }
  uint32_t credits() const noexcept { return credits_; }
  uint32_t owed() const noexcept { return owed_; }
  uint32_t threshold() const noexcept { return threshold_; }

  // May a message (data, write with immediate, region exchange) go out now?
  bool canSendMessage() const noexcept { return credits_ >= kMessageCredits; }
  // May a protocol frame (keepalive probe or reply, an ask for credits) go out now? The last
  // credit only with something owed to return.
  bool canSendProtocolFrame() const noexcept { return credits_ >= 2 || (credits_ == 1 && owed_ >= 1); }
  // Spends one credit and returns what we owe the peer, to put in the frame's header.
  uint16_t spendForMessage() noexcept {
    --credits_;
    return takeOwed();
  }
  // Spends one credit on an immediate-only message (write with immediate): nothing rides on it.
  void spendForImmediate() noexcept { --credits_; }
  // Is a credit-only frame due (see the rules above), with a credit to carry it?
  bool creditFrameDue() const noexcept {
    if (credits_ < 1 || owed_ == 0) return false;
    return owed_ >= threshold_ || answersAsk() || owed_ + held_ + 1 >= depth_;
  }
  // A protocol frame (credit-only, keepalive): spends one credit, returns what we owe.
  uint16_t spendForCreditFrame() noexcept {
    --credits_;
    return takeOwed();
  }
  // The header of a frame from the peer returned `returned` credits.
  void onCreditsReturned(uint16_t returned) noexcept {
    credits_ += returned;
    receivedTotal_ += returned;
  }
  // What an ask says (Frame::requestId of a credit-only frame with Frame::kAskBit): how many
  // credits the asker lacks, and how many it had received in all when it asked, so that the
  // receiver knows what of its returns were still on the way (frames cross).
  uint64_t askWords() const noexcept {
    const uint32_t lacking = credits_ < kMessageCredits ? kMessageCredits - credits_ : 0;
    return uint64_t{receivedTotal_} << 32 | lacking;
  }
  // The peer asked for credits: it has messages waiting (see askWords()).
  void onAsk(uint64_t words) noexcept {
    const auto lacking = static_cast<uint32_t>(std::min<uint64_t>(words & 0xffffffffu, kMessageCredits));
    const uint32_t onTheWay = returnedTotal_ - static_cast<uint32_t>(words >> 32);  // wraps with the counts
    askPending_ = onTheWay < lacking;
    askNeeds_ = askPending_ ? lacking - onTheWay : 0;
  }
  // A message from the peer arrived: it did not wait when it sent it.
  void onMessageFromPeer() noexcept { askPending_ = false; }
  // Whether the next frame's credits answer the peer's ask (Frame::kAnswerBit): they are what it
  // lacks, our application holds none of what a message needs, and we do not wait ourselves (or
  // we are the side that yields: when both wait, an answer costs the answerer the credit it
  // needs, and two sides answering each other at once would trade answers for ever).
  bool answersAsk() const noexcept {
    return askPending_ && owed_ >= askNeeds_ && returnLetsPeerSend() && (yields_ || !waiting_);
  }
  // We have messages waiting for credits ourselves.
  void setWaiting(bool waiting) noexcept { waiting_ = waiting; }
  // This side answers asks also while it waits itself (one side of a connection: the client).
  void setYields(bool yields) noexcept { yields_ = yields; }
  // Our asks. A waiting side asks once, and again only after an answer that got it further than
  // where it asked from: an answer that only made up for the ask's own credit means the peer has
  // nothing more now (it holds its receives), and returns them by the rules above once it lets go.
  // So asks and answers never trade for ever. `lineWaits`: our line waits for credits.
  bool shouldAsk(bool lineWaits) const noexcept {
    return lineWaits && canSendProtocolFrame() && !askOutstanding_ &&
           (creditsBeforeAsk_ == 0 || credits_ > creditsBeforeAsk_);
  }
  // An ask went out, its credit spent.
  void noteAsked() noexcept {
    askOutstanding_ = true;
    creditsBeforeAsk_ = credits_ + 1;
  }
  // The peer answered our ask (Frame::kAnswerBit).
  void onAnswer() noexcept { askOutstanding_ = false; }
  // A frame of our line spent a credit: the wait is over, the next one asks afresh.
  void noteWaitOver() noexcept {
    askOutstanding_ = false;
    creditsBeforeAsk_ = 0;
  }

  // Keepalive: the peer probed, and a reply is owed (it goes ahead of the messages, with the next
  // pump, returning the probe's receive). While one is owed another probe adds nothing: one reply
  // says all that any number would.
  void onProbe() noexcept { replyOwed_ = true; }
  bool replyOwed() const noexcept { return replyOwed_; }
  void clearReply() noexcept { replyOwed_ = false; }

  // One receive was re-posted: the peer may use it again once we say so.
  void onReceiveReposted() noexcept { ++owed_; }
  // How many consumed receives of messages the application holds (not re-posted).
  void setHeld(uint32_t held) noexcept { held_ = held; }

 private:
  // With all we owe returned, the peer has depth - held credits (less what is in flight).
  bool returnLetsPeerSend() const noexcept { return depth_ >= held_ + kMessageCredits; }
  uint16_t takeOwed() noexcept {
    const auto n = static_cast<uint16_t>(std::min<uint32_t>(owed_, UINT16_MAX));
    // Every frame carries what we owe: it answers the ask, or brings the peer closer.
    if (answersAsk()) askPending_ = false;
    owed_ -= n;
    askNeeds_ = askNeeds_ > n ? askNeeds_ - n : 1;
    returnedTotal_ += n;
    return n;
  }

  uint32_t depth_;
  uint32_t threshold_;
  uint32_t held_ = 0;          // receives of messages the application holds
  bool askPending_ = false;    // the peer asked for credits, not answered yet
  bool waiting_ = false;       // we have messages waiting for credits
  bool yields_ = true;         // we answer asks also while we wait
  uint32_t askNeeds_ = 0;      // what it still lacks
  uint32_t receivedTotal_ = 0;  // credits the peer returned, in all (mod 2^32)
  uint32_t returnedTotal_ = 0;  // credits we returned, in all (mod 2^32)
  uint32_t credits_ = 1;  // the peer has at least one receive posted: the one our first frame uses
  uint32_t owed_;         // receives posted that the peer has not been told about
  bool replyOwed_ = false;         // a keepalive reply waits to go
  bool askOutstanding_ = false;    // we asked for credits, and the answer has not come yet
  uint32_t creditsBeforeAsk_ = 0;  // our credits when we last asked (before paying for the ask)
};

}  // namespace evrdma
