// TurnBudget: the completions a loop turn may hand out follow the time budget over what completions
// have lately cost, within one poll's worth and 256, and a pass of less than a poll's worth
// teaches it nothing.
#include <gtest/gtest.h>

#include <chrono>

#include "TurnBudget.h"

namespace {

using evrdma::detail::TurnBudget;
using namespace std::chrono_literals;

TEST(TurnBudget, BeforeAnythingIsMeasuredATurnTakesTheMost) {
  TurnBudget budget;
  budget.beginPass(500us);
  EXPECT_EQ(budget.completions(), TurnBudget::kMost);
}

TEST(TurnBudget, TheCountIsTheTimeOverWhatACompletionCostsWithinAPollsWorthAnd256) {
  TurnBudget budget;
  budget.beginPass(500us);
  budget.learn(40us, 20);  // 2 us each: 250 fit in 500 us
  EXPECT_EQ(budget.completions(), 250);

  TurnBudget slow;
  slow.beginPass(500us);
  slow.learn(1000us, 20);  // 50 us each: 10 would fit, but a turn always moves a poll's worth
  EXPECT_EQ(slow.completions(), TurnBudget::kLeast);

  TurnBudget fast;
  fast.beginPass(500us);
  fast.learn(10us, 100);  // 0.1 us each: 5000 would fit
  EXPECT_EQ(fast.completions(), TurnBudget::kMost);
}

TEST(TurnBudget, ANewSampleMovesTheCostAQuarterOfTheWay) {
  TurnBudget budget;
  budget.beginPass(1000us);
  budget.learn(80us, 10);  // 8 us each: 125
  EXPECT_EQ(budget.completions(), 125);
  budget.learn(40us, 10);  // 4 us each: the cost becomes 8 - (8 - 4) / 4 = 7 us: 142
  EXPECT_EQ(budget.completions(), 142);
}

TEST(TurnBudget, ANewTimeAppliesAtTheNextPassAndZeroMeansTheMostWhateverTheCost) {
  TurnBudget budget;
  budget.beginPass(500us);
  budget.learn(100us, 20);  // 5 us each: 100
  EXPECT_EQ(budget.completions(), 100);
  budget.beginPass(250us);
  EXPECT_EQ(budget.completions(), 50);
  budget.beginPass(0us);
  EXPECT_EQ(budget.completions(), TurnBudget::kMost);
  budget.beginPass(500us);
  EXPECT_EQ(budget.completions(), 100);  // the cost was kept
}

TEST(TurnBudget, APassOfLessThanAPollsWorthIsNotTimed) {
  TurnBudget budget;
  budget.beginPass(500us);
  budget.learn(100us, 20);  // 5 us each: 100
  budget.beginPass(500us);
  budget.afterPoll(TurnBudget::kLeast - 1);
  budget.endPass(TurnBudget::kLeast - 1);
  EXPECT_EQ(budget.completions(), 100);  // nothing learned: no clock was read
}

TEST(TurnBudget, APassTimedOnThisHostKeepsTheCountWithinItsBounds) {
  TurnBudget budget;
  budget.beginPass(1s);  // whatever this host's speed
  budget.afterPoll(TurnBudget::kLeast);
  budget.afterPoll(TurnBudget::kLeast + 10);
  budget.endPass(TurnBudget::kLeast + 10);
  EXPECT_GE(budget.completions(), TurnBudget::kLeast);
  EXPECT_LE(budget.completions(), TurnBudget::kMost);
}

}  // namespace
