// CreditLedger: send/receive flow control for a framed connection, so a peer never sends into a
// receive queue with nothing posted (no RNR retry on RoCE/InfiniBand, and no connection-ending
// TERMINATE on iWARP, which has no RNR retry at all).
//
// Every frame and every RDMA write with immediate consumes one of the peer's posted receives, so
// each costs one credit. A receive we re-post is a credit we owe the peer; owed credits ride in the
// header of our next frame, or in a credit-only frame once `threshold` of them have piled up.
// The last credit is kept for such a credit-only frame: otherwise both sides could spend every
// credit on data and then have no way left to tell each other about re-posted receives.
// Invariant, per direction: sender's credits + frames in flight + receiver's owed credits +
// receives the receiver's application holds = the receiver's receive depth.
//
// Start: each side has posted all its receives before the connection is established, and may
// assume one (the first frame); it sends a credit-only frame at once carrying depth - 1.
// Pure logic, no verbs: unit-tested on its own.
#pragma once

#include <algorithm>
#include <cstdint>

#include "evrdma/ConnectionOptions.h"

namespace evrdma {

class CreditLedger {
 public:
  static constexpr uint32_t kMinRecvDepth = ConnectionOptions::kMinFramedRecvDepth;

  // `recvDepth`: how many receives this side keeps posted.
  explicit CreditLedger(uint32_t recvDepth = kMinRecvDepth)
      : threshold_(std::max<uint32_t>(2, recvDepth / 2)), owed_(recvDepth - 1) {}

  uint32_t credits() const noexcept { return credits_; }
  uint32_t owed() const noexcept { return owed_; }
  uint32_t threshold() const noexcept { return threshold_; }

  // May a frame (or write with immediate) that is not a credit-only frame go out now?
  bool canSendMessage() const noexcept { return credits_ >= 2; }
  // Spends one credit and returns what we owe the peer, to put in the frame's header.
  uint16_t spendForMessage() noexcept {
    --credits_;
    return takeOwed();
  }
  // Spends one credit on an immediate-only message (write with immediate): nothing rides on it.
  void spendForImmediate() noexcept { --credits_; }
  // Is a credit-only frame due (enough owed, and a credit to carry it)?
  bool creditFrameDue() const noexcept { return owed_ >= threshold_ && credits_ >= 1; }
  uint16_t spendForCreditFrame() noexcept {
    --credits_;
    return takeOwed();
  }
  // The header of a frame from the peer returned `returned` credits.
  void onCreditsReturned(uint16_t returned) noexcept { credits_ += returned; }
  // One receive was re-posted: the peer may use it again once we say so.
  void onReceiveReposted() noexcept { ++owed_; }

 private:
  uint16_t takeOwed() noexcept {
    const auto n = static_cast<uint16_t>(std::min<uint32_t>(owed_, UINT16_MAX));
    owed_ -= n;
    return n;
  }

  uint32_t threshold_;
  uint32_t credits_ = 1;  // the peer has at least one receive posted: the one our first frame uses
  uint32_t owed_;         // receives posted that the peer has not been told about
};

}  // namespace evrdma
