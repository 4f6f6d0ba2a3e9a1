// FramedSender without a device: the post is a fake that records each request, and the frame
// slots are plain memory. What went out is read back with the frame parser.
#include "FramedSender.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "Frame.h"

namespace {

using evrdma::ConnectionStats;
using evrdma::Frame;
using evrdma::FrameType;
using evrdma::OpType;
using evrdma::SendOp;
using evrdma::detail::FramedSender;

constexpr uint32_t kRecvDepth = 8;
constexpr uint32_t kSlots = 4;

class FramedSenderTest : public ::testing::Test {
 protected:
  FramedSenderTest()
      : slots(kSlots * FramedSender::kSlotSize),
        ledger(kRecvDepth),
        sender(ledger, slots.data(), kSlots, 42, tally, outlet) {}

  // Where the sender's frames go: kept here, or refused with failPosts.
  struct Outlet final : evrdma::FrameOutlet {
    explicit Outlet(FramedSenderTest& owner) : test(owner) {}
    int submit(const SendOp& op) noexcept override {
      if (test.failPosts != 0) return test.failPosts;
      test.sent.push_back(op);
      return 0;
    }
    FramedSenderTest& test;
  };

  // The frame a request carries: its header (a frame slot, or the copy buffer) and its payload.
  Frame frameOf(const SendOp& op) {
    std::vector<uint8_t> bytes;
    if (op.header.length > 0) {
      auto* h = reinterpret_cast<const uint8_t*>(op.header.addr);
      bytes.assign(h, h + op.header.length);
      bytes.resize(bytes.size() + op.sge.length);  // the payload's bytes do not matter here
    } else {
      auto* b = reinterpret_cast<const uint8_t*>(op.sge.addr);
      bytes.assign(b, b + op.sge.length);
    }
    keep.push_back(bytes);
    Frame frame;
    const char* why = "";
    EXPECT_EQ(evrdma::parseFrame(keep.back().data(), keep.back().size(), frame, why), 0) << why;
    return frame;
  }
  // A message copied into a send buffer of the test's own, header written as a connection does.
  SendOp copied(uint64_t tag, std::vector<uint8_t>& buffer, uint32_t length = 10) {
    buffer.assign(Frame::kHeaderSize + length, 0);
    evrdma::writeFrameHeader(buffer.data(), FrameType::Data, 0, length, 0);
    SendOp op;
    op.tag = tag;
    op.sge.addr = reinterpret_cast<uintptr_t>(buffer.data());
    op.sge.length = static_cast<uint32_t>(buffer.size());
    op.copySlot = 0;
    return op;
  }
  static SendOp zeroCopy(uint64_t tag, OpType type, uint32_t length = 1000) {
    SendOp op;
    op.type = type;
    op.tag = tag;
    op.sge.addr = 0x1000 * tag;
    op.sge.length = length;
    return op;
  }
  // The start of a connection: our hello went out (it settles the credits owed at the start), and
  // the peer's frames have returned `credits` so far.
  void helloThenCredits(uint32_t credits) {
    ASSERT_EQ(sender.sendHello(64), 0);
    ledger.onCreditsReturned(static_cast<uint16_t>(credits));
  }

  // Every request sent so far completed: their frame slots come back.
  void completeSent() {
    for (; completed < sent.size(); ++completed) sender.releaseSlot(sent[completed].frameSlot);
  }

  size_t completed = 0;
  evrdma::detail::ConnectionTally tally;
  ConnectionStats& stats = tally.own;
  std::vector<uint8_t> slots;
  std::vector<SendOp> sent;
  std::vector<std::vector<uint8_t>> keep;
  int failPosts = 0;
  Outlet outlet{*this};
  evrdma::CreditLedger ledger;  // the connection's flow control: the receive path feeds it
  FramedSender sender;
};

TEST_F(FramedSenderTest, TheHelloGoesOutAtOnceInAFrameSlotAndGrantsEveryReceiveButTheOneItUses) {
  ASSERT_EQ(sender.sendHello(4096), 0);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(sent[0].internal);
  EXPECT_EQ(sent[0].sge.lkey, 42u);
  EXPECT_GE(sent[0].frameSlot, 0);
  Frame hello = frameOf(sent[0]);
  EXPECT_EQ(hello.type, FrameType::Hello);
  EXPECT_EQ(hello.maxMessageSize, 4096u);
  EXPECT_EQ(hello.credits, kRecvDepth - 1);
  EXPECT_EQ(ledger.credits(), 0u) << "the one credit assumed at the start paid for the hello";
}

TEST_F(FramedSenderTest, AMessageWithoutCreditsWaitsAndGoesOutWhenThePeerReturnsSome) {
  helloThenCredits(0);
  std::vector<uint8_t> buffer;
  const SendOp message = copied(7, buffer);
  ASSERT_EQ(sender.sendCopied(message, buffer.data()), 0);
  EXPECT_EQ(sent.size(), 1u) << "no credit: it waits";
  EXPECT_EQ(sender.waiting(), 1u);
  EXPECT_EQ(stats.creditWaits, 1u);
  ASSERT_EQ(sender.pump(), 0);
  EXPECT_EQ(stats.creditWaits, 1u) << "one wait is counted once";
  ledger.onReceiveReposted();  // we owe the peer one: it rides on the message
  ledger.onCreditsReturned(4);
  ASSERT_EQ(sender.pump(), 0);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[1].tag, 7u);
  EXPECT_EQ(sender.waiting(), 0u);
  EXPECT_EQ(frameOf(sent[1]).credits, 1u) << "owed credits are written when the frame goes out";
}

// What ConnectionOptions::creditTimeout watches: the hook fires once when the head of the line
// begins to wait (not again while it waits), and creditsSpent() grows only as frames go.
TEST_F(FramedSenderTest, TheWaitHookFiresOnceWhenTheHeadOfTheLineBeginsToWaitAndCreditsSpentGrowsAsFramesGo) {
  int waits = 0;
  sender.onWaitBegins([&] { ++waits; });
  helloThenCredits(4);
  std::vector<uint8_t> buffers[3];
  SendOp messages[3];
  for (int i = 0; i < 3; ++i) messages[i] = copied(static_cast<uint64_t>(i + 1), buffers[i]);
  ASSERT_EQ(sender.sendCopied(messages[0], buffers[0].data()), 0);
  EXPECT_EQ(waits, 0) << "it had its credits";
  const uint64_t spent = sender.creditsSpent();
  ASSERT_EQ(sender.sendCopied(messages[1], buffers[1].data()), 0);
  ASSERT_EQ(sender.sendCopied(messages[2], buffers[2].data()), 0);
  EXPECT_EQ(waits, 1) << "the head began to wait; the one behind it adds no wait";
  EXPECT_TRUE(sender.waitingForCredits());
  ASSERT_EQ(sender.pump(), 0);
  EXPECT_EQ(waits, 1) << "still the same wait";
  EXPECT_EQ(sender.creditsSpent(), spent) << "nothing went";
  ledger.onCreditsReturned(2);  // 3 left after the first message, 2 after the wait asked: 4, one message's worth
  ASSERT_EQ(sender.pump(), 0);
  EXPECT_EQ(sender.creditsSpent(), spent + 1) << "the head went";
  EXPECT_EQ(waits, 2) << "the next head begins its own wait";
  ledger.onCreditsReturned(8);
  ASSERT_EQ(sender.pump(), 0);
  EXPECT_FALSE(sender.waitingForCredits());
  EXPECT_EQ(sender.creditsSpent(), spent + 2);
}

TEST_F(FramedSenderTest, WritesAndReadsIssuedBehindAWaitingSendKeepTheirPlace) {
  helloThenCredits(0);  // a message needs three credits
  const size_t before = sent.size();
  ASSERT_EQ(sender.sendZeroCopy(zeroCopy(1, OpType::Send)), 0);
  ASSERT_EQ(sender.sendZeroCopy(zeroCopy(2, OpType::Write)), 0);
  ASSERT_EQ(sender.sendZeroCopy(zeroCopy(3, OpType::Read)), 0);
  EXPECT_EQ(sent.size(), before) << "a write or read needs no credit, but must not overtake the send";
  ledger.onCreditsReturned(5);
  ASSERT_EQ(sender.pump(), 0);
  ASSERT_EQ(sent.size(), before + 3);
  EXPECT_EQ(sent[before].tag, 1u);
  EXPECT_EQ(sent[before + 1].tag, 2u);
  EXPECT_EQ(sent[before + 2].tag, 3u);
}

TEST_F(FramedSenderTest, AMessageNeedsFourCreditsSoThePeerAlwaysHasThreeReceivesForProtocolFrames) {
  helloThenCredits(6);
  sender.releaseSlot(sent[0].frameSlot);
  sent.clear();
  for (uint64_t tag = 1; tag <= 4; ++tag) ASSERT_EQ(sender.sendZeroCopy(zeroCopy(tag, OpType::Send, 0)), 0);
  ASSERT_EQ(sent.size(), 4u) << "three messages spent three of six credits; the fourth waits and asks";
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(frameOf(sent[i]).asksForCredits) << i;
  EXPECT_EQ(frameOf(sent[3]).type, FrameType::Credit);
  EXPECT_TRUE(frameOf(sent[3]).asksForCredits);
  EXPECT_EQ(sender.waiting(), 1u);
  EXPECT_EQ(ledger.credits(), 2u);
}

TEST_F(FramedSenderTest, ALineWaitingForCreditsAsksOnceAndNotAgainAfterAnAnswerThatGotItNoFurther) {
  helloThenCredits(3);
  const size_t before = sent.size();
  ASSERT_EQ(sender.sendZeroCopy(zeroCopy(1, OpType::Send)), 0);
  ASSERT_EQ(sent.size(), before + 1);
  Frame ask = frameOf(sent.back());
  EXPECT_EQ(ask.type, FrameType::Credit);
  EXPECT_TRUE(ask.asksForCredits);
  EXPECT_EQ(ledger.credits(), 2u) << "an ask is a protocol frame: one credit";
  ASSERT_EQ(sender.sendZeroCopy(zeroCopy(2, OpType::Send)), 0);
  ledger.onCreditsReturned(1);  // the peer returned only the ask's receive
  ASSERT_EQ(sender.pump(), 0);
  EXPECT_EQ(sent.size(), before + 1) << "one ask until the peer answers it";
  ledger.onCreditsReturned(4);
  ASSERT_EQ(sender.pump(), 0);
  ASSERT_EQ(sent.size(), before + 3);
  EXPECT_EQ(sent[before + 1].tag, 1u);
  EXPECT_EQ(sent[before + 2].tag, 2u);
  completeSent();
  for (uint64_t tag = 3; tag <= 5; ++tag) ASSERT_EQ(sender.sendZeroCopy(zeroCopy(tag, OpType::Send)), 0);
  ASSERT_EQ(sent.size(), before + 6) << "two more went; the fifth waits: a new wait, a new ask";
  EXPECT_TRUE(frameOf(sent.back()).asksForCredits);
  const uint32_t afterAsk = ledger.credits();
  ledger.onCreditsReturned(1);  // the answer made up for the ask's credit, no more
  ledger.onAnswer();
  ASSERT_EQ(sender.pump(), 0);
  EXPECT_EQ(sent.size(), before + 6) << "an answer that got it no further than where it asked: the peer has no more";
  EXPECT_EQ(ledger.credits(), afterAsk + 1);
  ledger.onCreditsReturned(1);
  ASSERT_EQ(sender.pump(), 0);
  ASSERT_EQ(sent.size(), before + 7) << "the fifth goes once four credits are there";
  EXPECT_EQ(sent.back().tag, 5u);
}

TEST_F(FramedSenderTest, KeepaliveFramesGoAheadOfMessagesWaitingForCreditsTheLastCreditOnlyWithSomethingOwed) {
  helloThenCredits(0);
  sender.releaseSlot(sent[0].frameSlot);
  sent.clear();
  ASSERT_EQ(sender.sendZeroCopy(zeroCopy(1, OpType::Send)), 0);
  ASSERT_EQ(sender.sendKeepaliveProbe(), 0);
  EXPECT_TRUE(sent.empty()) << "no credit at all: even a probe waits";
  ledger.onCreditsReturned(1);
  ASSERT_EQ(sender.pump(), 0);
  EXPECT_TRUE(sent.empty()) << "the last credit, with nothing owed to return: the probe waits";
  ledger.onReceiveReposted();
  ASSERT_EQ(sender.pump(), 0);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(frameOf(sent[0]).type, FrameType::KeepaliveProbe) << "ahead of the waiting message";
  EXPECT_FALSE(frameOf(sent[0]).asksForCredits) << "only a credit-only frame asks";
  EXPECT_EQ(frameOf(sent[0]).credits, 1u);
  ledger.onProbe();
  ledger.onCreditsReturned(2);
  ASSERT_EQ(sender.pump(), 0);
  ASSERT_GE(sent.size(), 2u);
  EXPECT_EQ(frameOf(sent[1]).type, FrameType::KeepaliveReply);
  EXPECT_EQ(sender.waiting(), 1u) << "the message still waits for four credits";
}

TEST_F(FramedSenderTest, AZeroCopySendGetsItsHeaderInAFrameSlotAndWaitsWhenNoneIsFree) {
  helloThenCredits(100);
  sender.releaseSlot(sent[0].frameSlot);  // the hello completed
  sent.clear();
  for (uint64_t tag = 1; tag <= kSlots; ++tag) ASSERT_EQ(sender.sendZeroCopy(zeroCopy(tag, OpType::Send, 500)), 0);
  ASSERT_EQ(sent.size(), kSlots);
  for (const SendOp& op : sent) {
    EXPECT_EQ(op.header.length, Frame::kHeaderSize);
    EXPECT_EQ(op.header.lkey, 42u);
    EXPECT_EQ(frameOf(op).payloadLength, 500u) << "the header announces the application's bytes";
  }
  EXPECT_EQ(sender.freeSlots(), 0u);
  ASSERT_EQ(sender.sendZeroCopy(zeroCopy(9, OpType::Send)), 0);
  EXPECT_EQ(sent.size(), kSlots) << "no free frame slot: it waits";
  sender.releaseSlot(sent[0].frameSlot);  // the first send completed
  ASSERT_EQ(sender.pump(), 0);
  ASSERT_EQ(sent.size(), kSlots + 1);
  EXPECT_EQ(sent.back().tag, 9u);
  EXPECT_EQ(sent.back().frameSlot, sent[0].frameSlot) << "it got the slot that came back";
}

TEST_F(FramedSenderTest, AWriteWithImmediateSpendsACreditButCarriesNoHeader) {
  helloThenCredits(4);
  const uint32_t before = ledger.credits();
  ASSERT_EQ(sender.sendZeroCopy(zeroCopy(1, OpType::WriteWithImm)), 0);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[1].header.length, 0u);
  EXPECT_EQ(sent[1].frameSlot, -1);
  EXPECT_EQ(ledger.credits(), before - 1);
}

TEST_F(FramedSenderTest, ACreditOnlyFrameGoesOutOnceEnoughReceivesAreOwed) {
  helloThenCredits(2);  // owes nothing now
  const uint32_t threshold = ledger.threshold();
  for (uint32_t i = 0; i + 1 < threshold; ++i) ledger.onReceiveReposted();
  sender.maybeSendCreditFrame();
  EXPECT_EQ(sent.size(), 1u) << "below the threshold, credits wait to ride on a message";
  ledger.onReceiveReposted();
  sender.maybeSendCreditFrame();
  ASSERT_EQ(sent.size(), 2u);
  Frame credit = frameOf(sent[1]);
  EXPECT_EQ(credit.type, FrameType::Credit);
  EXPECT_EQ(credit.credits, threshold);
  EXPECT_EQ(stats.creditFramesSent, 1u);
}

TEST_F(FramedSenderTest, StoppingHandsBackWhatWaitedInOrderAndSendsNothingMore) {
  helloThenCredits(0);
  const size_t before = sent.size();
  ASSERT_EQ(sender.sendZeroCopy(zeroCopy(1, OpType::Send)), 0);
  ASSERT_EQ(sender.sendZeroCopy(zeroCopy(2, OpType::Read)), 0);
  std::vector<SendOp> never = sender.stop();
  ASSERT_EQ(never.size(), 2u);
  EXPECT_EQ(never[0].tag, 1u);
  EXPECT_EQ(never[1].tag, 2u);
  ledger.onCreditsReturned(10);
  for (int i = 0; i < 10; ++i) ledger.onReceiveReposted();
  EXPECT_EQ(sender.pump(), 0);
  sender.maybeSendCreditFrame();
  EXPECT_EQ(sent.size(), before) << "nothing goes out after stop()";
}

TEST_F(FramedSenderTest, AFailedPostIsReturnedToTheCaller) {
  helloThenCredits(3);
  failPosts = -EIO;
  EXPECT_EQ(sender.sendZeroCopy(zeroCopy(1, OpType::Write)), -EIO);
}

TEST_F(FramedSenderTest, ProbesThatComeWhileAKeepaliveReplyWaitsForCreditsShareIt) {
  helloThenCredits(0);
  const size_t before = sent.size();
  for (int probe = 0; probe < 1000; ++probe) {
    ledger.onProbe();
    ASSERT_EQ(sender.pump(), 0);
  }
  EXPECT_EQ(sent.size(), before);
  EXPECT_EQ(sender.waiting(), 0u) << "a peer that withholds credits and keeps probing must not grow the line";
  EXPECT_EQ(stats.keepaliveRepliesSent, 0u) << "the counter counts replies that went out";
  sender.releaseSlot(sent[0].frameSlot);  // the hello completed
  ledger.onCreditsReturned(5);
  ASSERT_EQ(sender.pump(), 0);
  ASSERT_EQ(sent.size(), before + 1);
  EXPECT_EQ(frameOf(sent.back()).type, FrameType::KeepaliveReply);
  EXPECT_EQ(stats.keepaliveRepliesSent, 1u);
  ledger.onProbe();  // a later probe gets a reply of its own
  ASSERT_EQ(sender.pump(), 0);
  EXPECT_EQ(sent.size(), before + 2);
  EXPECT_EQ(stats.keepaliveRepliesSent, 2u);
}

TEST_F(FramedSenderTest, AnswersToThePeerWaitForCreditsOnlyUpToABound) {
  helloThenCredits(0);
  const std::vector<uint8_t> refusal = evrdma::regionRefusedFrame(1, ENOMEM, 0);
  for (uint32_t i = 0; i < sender.maxWaitingAnswers(); ++i) ASSERT_EQ(sender.sendControl(refusal), 0) << i;
  EXPECT_EQ(sender.answersWaiting(), sender.maxWaitingAnswers());
  EXPECT_EQ(sender.sendControl(refusal), -ENOBUFS) << "a peer that asks without returning credits is cut off";
  EXPECT_EQ(sender.waiting(), sender.maxWaitingAnswers());
  // Our own requests are not answers: bounded by what the application may hold (maxPeerRegions).
  EXPECT_EQ(sender.sendControl(evrdma::regionRequestFrame(2, 64, 0, 0)), 0);
  EXPECT_GE(sender.maxWaitingAnswers(), 2 * kRecvDepth) << "a peer within its credits never reaches it";
}

TEST_F(FramedSenderTest, ACopiedMessageGoesStraightOutOnlyWhenNothingWaitsAheadOfIt) {
  helloThenCredits(100);
  sender.releaseSlot(sent[0].frameSlot);  // the hello completed
  sent.clear();
  ledger.onReceiveReposted();  // we owe the peer one: it rides on the first message
  std::vector<uint8_t> first, second, third;
  const SendOp message1 = copied(1, first);
  ASSERT_EQ(sender.sendCopied(message1, first.data()), 0);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sender.sentStraightOut(), 1u) << "nothing waited: past the line";
  EXPECT_EQ(frameOf(sent[0]).credits, 1u) << "straight out, it still carries what is owed";
  EXPECT_EQ(ledger.credits(), 99u);
  // Every frame slot taken: a zero-copy send waits for one, and a copied message (which needs no
  // slot, and has credits) must not overtake it.
  for (uint64_t tag = 2; tag < 2 + kSlots; ++tag) ASSERT_EQ(sender.sendZeroCopy(zeroCopy(tag, OpType::Send)), 0);
  ASSERT_EQ(sender.sendZeroCopy(zeroCopy(10, OpType::Send)), 0);
  EXPECT_EQ(sender.waiting(), 1u);
  const SendOp message11 = copied(11, second);
  ASSERT_EQ(sender.sendCopied(message11, second.data()), 0);
  EXPECT_EQ(sender.sentStraightOut(), 1u) << "something waited: the line";
  EXPECT_EQ(sender.waiting(), 2u);
  completeSent();
  ASSERT_EQ(sender.pump(), 0);
  ASSERT_EQ(sent.size(), 2u + kSlots + 1);
  EXPECT_EQ(sent[sent.size() - 2].tag, 10u);
  EXPECT_EQ(sent.back().tag, 11u) << "in the order issued";
  // A keepalive reply waiting goes ahead of the next message, which then takes the line too.
  completeSent();
  ledger.onProbe();
  const SendOp message12 = copied(12, third);
  ASSERT_EQ(sender.sendCopied(message12, third.data()), 0);
  EXPECT_EQ(sender.sentStraightOut(), 1u);
  ASSERT_GE(sent.size(), 2u);
  EXPECT_EQ(frameOf(sent[sent.size() - 2]).type, FrameType::KeepaliveReply);
  EXPECT_EQ(sent.back().tag, 12u);
  // Nothing waits any more: straight out again.
  std::vector<uint8_t> fourth;
  const SendOp message13 = copied(13, fourth);
  ASSERT_EQ(sender.sendCopied(message13, fourth.data()), 0);
  EXPECT_EQ(sender.sentStraightOut(), 2u);
  EXPECT_EQ(sent.back().tag, 13u);
}

}  // namespace
