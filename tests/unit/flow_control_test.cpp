// Framed flow control end to end without a device: two FramedSenders (and their CreditLedgers)
// joined by in-order wires, each side receiving as a Connection does (a protocol frame's receive
// posted again at once; a message delivered, or held while that side is paused). Proves what the
// rules in CreditLedger.h promise: no frame ever arrives with no receive posted (RNR, or on iWARP
// a broken connection), nothing stalls once readers resume, a paused reader holds at most
// depth - 3 receives, keepalive goes on both ways while a reader is paused, and protocol frames do
// not answer each other for ever.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <vector>

#include "CreditLedger.h"
#include "Frame.h"
#include "FramedSender.h"

namespace {

using evrdma::ConnectionStats;
using evrdma::CreditLedger;
using evrdma::Frame;
using evrdma::FrameType;
using evrdma::OpType;
using evrdma::SendOp;
using evrdma::detail::FramedSender;

constexpr uint32_t kSlots = 8;

struct Side {
  explicit Side(uint32_t recvDepth) : depth(recvDepth), posted(recvDepth), slots(kSlots * FramedSender::kSlotSize) {}

  uint32_t depth;
  uint32_t posted;                 // receives posted on this side
  uint32_t held = 0;               // messages' receives held (paused)
  uint32_t mostHeld = 0;
  bool paused = false;
  uint64_t queued = 0;             // messages handed to the sender
  uint64_t delivered = 0;          // messages the application got
  uint64_t repliesHeard = 0;
  uint64_t protocolFramesSent = 0;  // credit-only frames and keepalive frames
  std::vector<uint8_t> slots;
  evrdma::detail::ConnectionTally stats;
  std::deque<std::vector<uint8_t>> inbound;  // frames on their way to this side
  std::vector<int32_t> inFlightSlots;        // sent, not yet completed
  std::unique_ptr<evrdma::CreditLedger> ledger;  // its flow control, fed by its receive side
  std::unique_ptr<FramedSender> sender;
};

class Pair {
 public:
  Pair(uint32_t depthA, uint32_t depthB) : a_(depthA), b_(depthB) {
    join(a_, b_);
    join(b_, a_);
    b_.ledger->setYields(false);  // A plays the client
    EXPECT_EQ(a_.sender->sendHello(64), 0);
    EXPECT_EQ(b_.sender->sendHello(64), 0);
  }
  Side& a() { return a_; }
  Side& b() { return b_; }
  Side& peerOf(Side& s) { return &s == &a_ ? b_ : a_; }

  // The application queues one zero-length message (the line kept short, as a writer that waits
  // for onWritable keeps it).
  bool queueMessage(Side& s) {
    if (s.sender->waiting() >= 4) return false;
    SendOp op;
    op.type = OpType::Send;
    op.tag = ++s.queued;
    EXPECT_EQ(s.sender->sendZeroCopy(op), 0);
    return true;
  }
  // One frame off the wire into `s`.
  bool receiveOne(Side& s) {
    if (s.inbound.empty()) return false;
    std::vector<uint8_t> bytes = std::move(s.inbound.front());
    s.inbound.pop_front();
    receive(s, bytes);
    return true;
  }
  // `s` handles `bytes`, one frame, as a Connection does.
  void receive(Side& s, const std::vector<uint8_t>& bytes) {
    EXPECT_GT(s.posted, 0u) << "a frame arrived with no receive posted (RNR; on iWARP a broken connection)";
    if (s.posted == 0) return;
    --s.posted;
    Frame frame;
    const char* why = "";
    EXPECT_EQ(evrdma::parseFrame(bytes.data(), bytes.size(), frame, why), 0) << why;
    s.ledger->onCreditsReturned(frame.credits);
    if (frame.asksForCredits) s.ledger->onAsk(frame.requestId);
    if (frame.answersAsk) s.ledger->onAnswer();
    switch (frame.type) {
      case FrameType::Data:
        s.ledger->onMessageFromPeer();
        if (s.paused) {
          ++s.held;
          s.mostHeld = std::max(s.mostHeld, s.held);
          s.ledger->setHeld(s.held);
        } else {
          ++s.delivered;
          repost(s);
        }
        break;
      case FrameType::KeepaliveProbe:
        s.ledger->onProbe();
        repost(s);
        break;
      case FrameType::KeepaliveReply:
        ++s.repliesHeard;
        repost(s);
        break;
      default:
        repost(s);
        break;
    }
    EXPECT_EQ(s.sender->pump(), 0);
  }
  // The oldest send of `s` completed: its frame slot comes back.
  bool completeOne(Side& s) {
    if (s.inFlightSlots.empty()) return false;
    s.sender->releaseSlot(s.inFlightSlots.front());
    s.inFlightSlots.erase(s.inFlightSlots.begin());
    EXPECT_EQ(s.sender->pump(), 0);
    return true;
  }
  void pause(Side& s) { s.paused = true; }
  void resume(Side& s) {
    s.paused = false;
    for (; s.held > 0; --s.held) {
      ++s.delivered;
      repost(s);
    }
    s.ledger->setHeld(0);
    EXPECT_EQ(s.sender->pump(), 0);
  }
  // Delivers and completes everything until nothing moves; false if that takes more than `limit`
  // steps (frames answering each other for ever).
  // The invariant of CreditLedger.h for the direction from -> to.
  // (Credits ride back in frames on the other wire.)
  void checkInvariant(Side& from, Side& to) {
    uint64_t returning = 0;
    for (const auto& bytes : from.inbound) {
      Frame frame;
      const char* why = "";
      if (evrdma::parseFrame(bytes.data(), bytes.size(), frame, why) == 0) returning += frame.credits;
    }
    const uint64_t sum =
        from.ledger->credits() + to.inbound.size() + returning + to.ledger->owed() + to.held;
    EXPECT_EQ(sum, to.depth) << "credits " << from.ledger->credits() << " frames in flight "
                             << to.inbound.size() << " credits on the way back " << returning << " owed "
                             << to.ledger->owed() << " held " << to.held;
  }
  // Frames in flight both ways cross: each step takes the next frame off both wires before either
  // side answers, as two sides that send at once do.
  bool settle(uint64_t limit = 10000) {
    for (uint64_t steps = 0; steps < limit; ++steps) {
      if (!a_.inbound.empty() && !b_.inbound.empty()) {
        std::vector<uint8_t> toA = std::move(a_.inbound.front()), toB = std::move(b_.inbound.front());
        a_.inbound.pop_front();
        b_.inbound.pop_front();
        receive(a_, toA);
        receive(b_, toB);
      } else if (!(receiveOne(a_) || receiveOne(b_) || completeOne(a_) || completeOne(b_))) {
        return true;
      }
      completeOne(a_);
      completeOne(b_);
      checkInvariant(a_, b_);
      checkInvariant(b_, a_);
      if (::testing::Test::HasFailure()) return false;
    }
    return false;
  }

 private:
  // A FrameOutlet that carries `from`'s frames to `to`.
  struct Wire final : evrdma::FrameOutlet {
    Wire(Side& sender, Side& receiver) : from(sender), to(receiver) {}
    int submit(const SendOp& op) noexcept override {
      const auto* bytes = reinterpret_cast<const uint8_t*>(op.header.length > 0 ? op.header.addr : op.sge.addr);
      const size_t length = op.header.length > 0 ? op.header.length : op.sge.length;
      to.inbound.emplace_back(bytes, bytes + length);
      if (op.frameSlot >= 0) from.inFlightSlots.push_back(op.frameSlot);
      Frame frame;
      const char* why = "";
      if (evrdma::parseFrame(bytes, length, frame, why) == 0 && frame.type != FrameType::Data &&
          frame.type != FrameType::Hello)
        ++from.protocolFramesSent;
      return 0;
    }
    Side& from;
    Side& to;
  };
  void join(Side& from, Side& to) {
    from.ledger = std::make_unique<evrdma::CreditLedger>(from.depth);
    wires_.push_back(std::make_unique<Wire>(from, to));
    from.sender = std::make_unique<FramedSender>(*from.ledger, from.slots.data(), kSlots, 1, from.stats, *wires_.back());
  }
  static void repost(Side& s) {
    ++s.posted;
    s.ledger->onReceiveReposted();
  }

  std::vector<std::unique_ptr<Wire>> wires_;  // before the sides: destroyed after their senders
  Side a_, b_;
};

TEST(FlowControl, BothWaysWithReadersPausedAtRandomNothingOverrunsOrStallsAndAPausedReaderHoldsAtMostDepthMinusTwo) {
  for (uint32_t seed = 1; seed <= 100; ++seed) {
    for (uint32_t depth : {5u, 6u, 8u, 16u}) {
      Pair pair(depth, depth + seed % 3);
      std::mt19937 random(seed);
      const uint64_t kMessages = 600;
      for (int step = 0; step < 20000 && !::testing::Test::HasFailure(); ++step) {
        Side& s = random() % 2 ? pair.a() : pair.b();
        uint32_t action = random() % 8;
        // Even seeds: receiving is slow (many frames in flight, as 64 KiB messages on a slow link
        // are), so writers wait for credits that are on the wire, not owed.
        if (seed % 2 == 0 && (action == 2 || action == 3) && random() % 4 != 0) action = random() % 2 ? 0 : 4;
        switch (action) {
          case 0:
          case 1:
            if (s.queued < kMessages) pair.queueMessage(s);
            break;
          case 2:
          case 3:
            pair.receiveOne(s);
            break;
          case 4:
          case 5:
            pair.completeOne(s);
            break;
          case 6:
            if (random() % 8 == 0) s.paused ? pair.resume(s) : pair.pause(s);
            break;
          case 7:
            if (random() % 16 == 0) {
              EXPECT_EQ(s.sender->sendKeepaliveProbe(), 0);
            }
            break;
        }
      }
      pair.resume(pair.a());
      pair.resume(pair.b());
      for (int round = 0; round < 1000 && (pair.a().queued < kMessages || pair.b().queued < kMessages); ++round) {
        while (pair.a().queued < kMessages && pair.queueMessage(pair.a())) {}
        while (pair.b().queued < kMessages && pair.queueMessage(pair.b())) {}
        ASSERT_TRUE(pair.settle()) << "frames kept answering each other: depth " << depth << " seed " << seed;
      }
      ASSERT_TRUE(pair.settle());
      EXPECT_EQ(pair.b().delivered, kMessages) << "stalled: depth " << depth << " seed " << seed;
      EXPECT_EQ(pair.a().delivered, kMessages) << "stalled: depth " << depth << " seed " << seed;
      EXPECT_LE(pair.a().mostHeld, pair.a().depth - 3);
      EXPECT_LE(pair.b().mostHeld, pair.b().depth - 3);
      ASSERT_FALSE(::testing::Test::HasFailure()) << "depth " << depth << " seed " << seed;
    }
  }
}

TEST(FlowControl, WhileBothReadersArePausedWithEveryMessageHeldKeepaliveGoesOnBothWaysAndFramesSettle) {
  for (uint32_t depth : {5u, 6u, 16u}) {
    Pair pair(depth, depth);
    pair.pause(pair.a());
    pair.pause(pair.b());
    for (int i = 0; i < 100; ++i) {
      pair.queueMessage(pair.a());
      pair.queueMessage(pair.b());
      ASSERT_TRUE(pair.settle()) << "depth " << depth;
    }
    EXPECT_EQ(pair.a().held, depth - 3) << "a paused reader fills up to depth - 3, and no further";
    EXPECT_EQ(pair.b().held, depth - 3);
    EXPECT_GT(pair.a().sender->waiting(), 0u);
    for (int probe = 1; probe <= 50; ++probe) {
      Side& prober = probe % 2 ? pair.a() : pair.b();
      const uint64_t heard = prober.repliesHeard;
      ASSERT_EQ(prober.sender->sendKeepaliveProbe(), 0);
      ASSERT_TRUE(pair.settle()) << "depth " << depth;
      EXPECT_EQ(prober.repliesHeard, heard + 1) << "probe " << probe << " went unanswered, depth " << depth;
    }
    // Settled means quiet: a few protocol frames per probe, not a stream.
    EXPECT_LE(pair.a().protocolFramesSent + pair.b().protocolFramesSent, 50u * 3 + 20);
    pair.resume(pair.a());
    pair.resume(pair.b());
    ASSERT_TRUE(pair.settle());
    EXPECT_EQ(pair.a().delivered + pair.a().held, pair.b().queued - pair.b().sender->waiting());
    EXPECT_GT(pair.a().delivered, depth - 3) << "what waited went once the reader resumed";
  }
}

TEST(FlowControl, TwoReadersThatPauseMidStreamWhileBothWritersWaitFallQuietAndResumeWhole) {
  for (uint32_t depth : {5u, 6u, 8u, 16u}) {
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      Pair pair(depth, depth);
      std::mt19937 random(seed);
      // Both write, frames in flight, then each pauses at some moment and both keep writing.
      for (int step = 0; step < 400; ++step) {
        Side& s = random() % 2 ? pair.a() : pair.b();
        switch (random() % 4) {
          case 0: pair.queueMessage(s); break;
          case 1: pair.receiveOne(s); break;
          case 2: pair.completeOne(s); break;
          case 3:
            if (step > 100 && random() % 16 == 0) pair.pause(s);
            break;
        }
        ASSERT_FALSE(::testing::Test::HasFailure());
      }
      pair.pause(pair.a());
      pair.pause(pair.b());
      for (int i = 0; i < 20; ++i) {
        pair.queueMessage(pair.a());
        pair.queueMessage(pair.b());
      }
      const uint64_t before = pair.a().protocolFramesSent + pair.b().protocolFramesSent;
      ASSERT_TRUE(pair.settle()) << "frames kept answering each other: depth " << depth << " seed " << seed;
      EXPECT_LE(pair.a().protocolFramesSent + pair.b().protocolFramesSent - before, 2u * depth + 8)
          << "depth " << depth << " seed " << seed;
      // Both wait, so one may stop a message short of filling the other (the side that does not
      // yield keeps its answer while it waits itself).
      for (Side* s : {&pair.a(), &pair.b()}) {
        EXPECT_LE(s->held, depth - 3) << "depth " << depth << " seed " << seed;
        EXPECT_GE(s->held, 1u) << "depth " << depth << " seed " << seed;
      }
      pair.resume(pair.a());
      pair.resume(pair.b());
      ASSERT_TRUE(pair.settle());
      EXPECT_EQ(pair.a().delivered, pair.b().queued - pair.b().sender->waiting()) << "depth " << depth << " seed " << seed;
      ASSERT_FALSE(::testing::Test::HasFailure());
    }
  }
}

TEST(FlowControl, AWriterThatWaitsForAPausedReaderIsServedOnceItResumesAtTheSmallestDepth) {
  Pair pair(CreditLedger::kMinRecvDepth, CreditLedger::kMinRecvDepth);
  pair.pause(pair.b());
  for (int i = 0; i < 4; ++i) pair.queueMessage(pair.a());
  ASSERT_TRUE(pair.settle());
  EXPECT_EQ(pair.b().held, CreditLedger::kMinRecvDepth - 3) << "the paused reader fills up to depth - 3";
  EXPECT_EQ(pair.a().sender->waiting(), 4u - pair.b().held);
  pair.resume(pair.b());
  ASSERT_TRUE(pair.settle());
  EXPECT_EQ(pair.b().delivered, 4u);
  EXPECT_EQ(pair.a().sender->waiting(), 0u);
}

TEST(FlowControl, CreditsOfAOneWayStreamGoBackInBatchesNotOneFramePerMessage) {
  Pair pair(16, 16);
  ASSERT_TRUE(pair.settle());
  const uint64_t aBefore = pair.a().protocolFramesSent, bBefore = pair.b().protocolFramesSent;
  for (int i = 0; i < 100; ++i) {
    pair.queueMessage(pair.a());
    ASSERT_TRUE(pair.settle());
  }
  EXPECT_EQ(pair.b().delivered, 100u);
  // B owes one credit per message and returns them per 8 (the threshold): about 100 / 8.
  EXPECT_LE(pair.b().protocolFramesSent - bBefore, 100u / 8 + 3);
  EXPECT_LE(pair.a().protocolFramesSent - aBefore, 4u);
}

}  // namespace
