// CreditLedger's rules one at a time. Two senders exchanging frames (nothing overruns, nothing
// stalls, a paused reader, keepalive) are in flow_control_test.cpp.
#include "CreditLedger.h"

#include <gtest/gtest.h>

namespace {

using evrdma::CreditLedger;

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

TEST(CreditLedger, AMessageLeavesThreeCreditsForProtocolFramesAndTheLastGoesOnlyWithSomethingOwed) {
  CreditLedger ledger(8);
  ledger.onCreditsReturned(4);  // now 5
  EXPECT_TRUE(ledger.canSendMessage());
  ledger.spendForMessage();
  EXPECT_TRUE(ledger.canSendMessage());
  ledger.spendForMessage();
  EXPECT_FALSE(ledger.canSendMessage());
  EXPECT_EQ(ledger.credits(), 3u);
  EXPECT_TRUE(ledger.canSendProtocolFrame());
  ledger.spendForCreditFrame();
  ledger.spendForCreditFrame();
  EXPECT_EQ(ledger.owed(), 0u);
  EXPECT_FALSE(ledger.canSendProtocolFrame()) << "the last credit, with nothing to return";
  ledger.onReceiveReposted();
  EXPECT_TRUE(ledger.canSendProtocolFrame());
}

TEST(CreditLedger, AnAskIsAnsweredOnceAndOnlyWhenTheReturnCanLetThePeerSend) {
  CreditLedger ledger(16);  // threshold 8
  ledger.spendForCreditFrame();
  ledger.onCreditsReturned(15);
  ledger.setHeld(13);  // a paused reader holding all a message may use
  ledger.onAsk(uint64_t{15} << 32 | 1);  // it had received our 15 (the hello's), and lacks one
  ledger.onReceiveReposted();  // the ask's own receive
  EXPECT_FALSE(ledger.creditFrameDue()) << "holding 13 of 16: a return cannot give the peer four credits";
  ledger.setHeld(0);  // resumed
  EXPECT_TRUE(ledger.creditFrameDue());
  EXPECT_EQ(ledger.spendForCreditFrame(), 1);
  ledger.onReceiveReposted();
  EXPECT_FALSE(ledger.creditFrameDue()) << "answered: the threshold rules again";
}

TEST(CreditLedger, APeerThatCanHaveOneCreditLeftAtMostGetsWhatIsOwedAtOnce) {
  CreditLedger ledger(8);  // threshold 4
  ledger.spendForCreditFrame();
  ledger.onCreditsReturned(7);
  ledger.setHeld(5);  // the application holds five of the peer's messages (at most depth - 3)
  ledger.onReceiveReposted();
  EXPECT_FALSE(ledger.creditFrameDue()) << "owed 1 + held 5 = 6 of 8: the peer still has two";
  ledger.onReceiveReposted();
  EXPECT_TRUE(ledger.creditFrameDue()) << "owed 2 + held 5 = 7 of 8: the peer has one at most";
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

}  // namespace
