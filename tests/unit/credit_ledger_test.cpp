// CreditLedger without a device: two simulated peers exchange frames over in-order links. A send
// into an empty receive queue (what would be an RNR NAK) fails the test, and so does a stall.
#include "CreditLedger.h"

#include <gtest/gtest.h>

#include <deque>
#include <random>

namespace {

using evrdma::CreditLedger;

struct Wire {
  bool creditOnly;
  uint16_t credits;
};

struct Peer {
  CreditLedger ledger;
  uint32_t posted;                 // receives posted on this side
  uint32_t held = 0;               // consumed, kept by the application, not yet re-posted
  uint64_t toSend = 0;             // data messages the application still wants to send
  uint64_t received = 0;           // data messages delivered
  uint64_t creditFrames = 0;
  std::deque<Wire> inbound;        // frames on their way to this side
  explicit Peer(uint32_t depth) : ledger(depth), posted(depth) {}
};

// Moves one step: `from` sends what it may, or `to` takes one frame off the wire.
class Simulation {
 public:
  Simulation(uint32_t depthA, uint32_t depthB, uint32_t seed) : a_(depthA), b_(depthB), random_(seed) {}
  Peer& a() { return a_; }
  Peer& b() { return b_; }

  void sendCreditFrameIfDue(Peer& from, Peer& to) {
    if (!from.ledger.creditFrameDue()) return;
    to.inbound.push_back({true, from.ledger.spendForCreditFrame()});
    ++from.creditFrames;
  }
  void receiveOne(Peer& self, Peer& peer, bool holdSometimes) {
    Wire w = self.inbound.front();
    self.inbound.pop_front();
    ASSERT_GT(self.posted, 0u) << "a frame arrived with no receive posted (RNR)";
    --self.posted;
    self.ledger.onCreditsReturned(w.credits);
    if (!w.creditOnly) ++self.received;
    if (!w.creditOnly && holdSometimes && random_() % 3 == 0) {
      ++self.held;  // a slow consumer keeps the buffer for a while
    } else {
      ++self.posted;
      self.ledger.onReceiveReposted();
    }
    sendCreditFrameIfDue(self, peer);
  }
  void releaseHeld(Peer& self, Peer& peer) {
    if (self.held == 0) return;
    --self.held;
    ++self.posted;
    self.ledger.onReceiveReposted();
    sendCreditFrameIfDue(self, peer);
  }
  bool sendData(Peer& from, Peer& to) {
    if (from.toSend == 0 || !from.ledger.canSendMessage()) return false;
    to.inbound.push_back({false, from.ledger.spendForMessage()});
    --from.toSend;
    return true;
  }

  // Runs until both sides delivered everything; false on a stall.
  bool run(bool holdSometimes) {
    sendCreditFrameIfDue(a_, b_);  // the initial advertisement of each side
    sendCreditFrameIfDue(b_, a_);
    for (int idle = 0; idle < 1000;) {
      bool progressed = false;
      switch (random_() % 5) {
        case 0: progressed = sendData(a_, b_); break;
        case 1: progressed = sendData(b_, a_); break;
        case 2:
          if (!b_.inbound.empty()) { receiveOne(b_, a_, holdSometimes); progressed = true; }
          break;
        case 3:
          if (!a_.inbound.empty()) { receiveOne(a_, b_, holdSometimes); progressed = true; }
          break;
        case 4:
          progressed = a_.held + b_.held > 0;
          releaseHeld(a_, b_);
          releaseHeld(b_, a_);
          break;
      }
      if (::testing::Test::HasFatalFailure()) return false;
      idle = progressed ? 0 : idle + 1;
      if (a_.toSend == 0 && b_.toSend == 0 && a_.inbound.empty() && b_.inbound.empty() && a_.held + b_.held == 0)
        return true;
    }
    return false;
  }

 private:
  Peer a_, b_;
  std::mt19937 random_;
};

TEST(CreditLedger, StartsWithOneCreditAndOwesTheRestOfTheReceiveDepth) {
  CreditLedger ledger(16);
  EXPECT_EQ(ledger.credits(), 1u);
  EXPECT_EQ(ledger.owed(), 15u);
  EXPECT_FALSE(ledger.canSendMessage());  // the only credit is kept for a credit-only frame
  EXPECT_TRUE(ledger.creditFrameDue());
  EXPECT_EQ(ledger.spendForCreditFrame(), 15);
  EXPECT_EQ(ledger.credits(), 0u);
  EXPECT_FALSE(ledger.creditFrameDue());
}

TEST(CreditLedger, KeepsTheLastCreditForACreditOnlyFrame) {
  CreditLedger ledger(8);
  ledger.onCreditsReturned(2);  // now 3
  EXPECT_TRUE(ledger.canSendMessage());
  ledger.spendForMessage();
  EXPECT_TRUE(ledger.canSendMessage());
  ledger.spendForMessage();
  EXPECT_FALSE(ledger.canSendMessage());
  EXPECT_EQ(ledger.credits(), 1u);
}

TEST(CreditLedger, OwedCreditsRideOnTheNextMessage) {
  CreditLedger ledger(8);
  ledger.spendForCreditFrame();
  ledger.onCreditsReturned(7);
  ledger.onReceiveReposted();
  ledger.onReceiveReposted();
  EXPECT_EQ(ledger.spendForMessage(), 2);
  EXPECT_EQ(ledger.owed(), 0u);
}

TEST(CreditLedger, CreditOnlyFrameWaitsForTheThreshold) {
  CreditLedger ledger(16);  // threshold 8
  ledger.spendForCreditFrame();
  ledger.onCreditsReturned(15);
  for (int i = 0; i < 7; ++i) ledger.onReceiveReposted();
  EXPECT_FALSE(ledger.creditFrameDue());
  ledger.onReceiveReposted();
  EXPECT_TRUE(ledger.creditFrameDue());
}

TEST(CreditLedger, OneWayStreamNeverOverrunsOrStallsAtTheSmallestDepth) {
  Simulation sim(CreditLedger::kMinRecvDepth, CreditLedger::kMinRecvDepth, 1);
  sim.a().toSend = 10000;
  ASSERT_TRUE(sim.run(false));
  EXPECT_EQ(sim.b().received, 10000u);
}

TEST(CreditLedger, BothWaysWithSlowConsumersNeverOverrunOrStall) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    for (uint32_t depth : {3u, 4u, 5u, 16u}) {
      Simulation sim(depth, depth + seed % 3, seed);
      sim.a().toSend = 2000;
      sim.b().toSend = 1500;
      ASSERT_TRUE(sim.run(true)) << "stalled: depth " << depth << " seed " << seed;
      EXPECT_EQ(sim.b().received, 2000u);
      EXPECT_EQ(sim.a().received, 1500u);
    }
  }
}

TEST(CreditLedger, CreditOnlyFramesDoNotEchoForever) {
  Simulation sim(16, 16, 7);
  sim.a().toSend = 100;
  ASSERT_TRUE(sim.run(false));
  // B owes one credit per frame received and sends a credit frame per 8 owed: about 100 / 8.
  EXPECT_LE(sim.b().creditFrames, 100u / 8 + 3);
  EXPECT_LE(sim.a().creditFrames, 4u);
}

}  // namespace
