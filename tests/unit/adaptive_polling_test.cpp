// AdaptivePolling's turn, with a scripted source in place of the CQs: a polling turn polls on past
// a completion, so a ping-pong's next completion (its answer, or its send's completion) is found
// in the same turn and not after a pass through libevent, a system call each; and a turn that has
// handed out a poll's worth goes back to the loop, so the application's events wait no longer.
#include <event2/event.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "AdaptivePolling.h"
#include "PollingSettings.h"

namespace {

using evrdma::detail::AdaptivePolling;
using namespace std::chrono_literals;

// Hands out what `found` says, poll by poll (nothing past its end), and counts the polls.
struct ScriptedSource final : AdaptivePolling::Source {
  std::vector<int> found;
  size_t polls = 0;
  int pollEveryCq() noexcept override {
    const int handled = polls < found.size() ? found[polls] : 0;
    ++polls;
    return handled;
  }
  void armEveryCq() noexcept override {}
  bool mayPoll() const noexcept override { return true; }
};

class AdaptivePollingTurn : public ::testing::Test {
 protected:
  void SetUp() override {
    base = event_base_new();
    ASSERT_NE(base, nullptr);
    settings.window = 100ms;  // longer than the test: no window ends
    polling = std::make_unique<AdaptivePolling>(settings, stats, source);
    ASSERT_EQ(polling->init(base), 0);
  }
  void TearDown() override {
    polling.reset();
    if (base != nullptr) event_base_free(base);
  }
  // One turn of the loop: the polling turn that start() scheduled.
  void oneTurn() { ASSERT_EQ(event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK), 0); }

  event_base* base = nullptr;
  evrdma::detail::PollingSettings settings;
  evrdma::CompletionStats stats;
  ScriptedSource source;
  std::unique_ptr<AdaptivePolling> polling;
};

TEST_F(AdaptivePollingTurn, ACompletionFoundDoesNotEndTheTurnItsAnswerAFewPollsLaterIsFoundInIt) {
  source.found = {1, 0, 0, 1};  // a message, then its send's completion (or the next message) three polls on
  polling->start();
  oneTurn();
  EXPECT_EQ(stats.spinTurns, 1u);
  EXPECT_EQ(source.polls, static_cast<size_t>(AdaptivePolling::kPollBurst))
      << "the turn ended after " << source.polls << " polls: the second completion waits for another turn";
}

TEST_F(AdaptivePollingTurn, ATurnThatHandedOutAPollsWorthGoesBackToTheLoop) {
  source.found = std::vector<int>(AdaptivePolling::kPollBurst, AdaptivePolling::kTurnCompletions / 2);
  polling->start();
  oneTurn();
  EXPECT_EQ(stats.spinTurns, 1u);
  EXPECT_EQ(source.polls, 2u) << "a turn went on polling past a poll's worth of completions";
  oneTurn();  // the next turn polls again
  EXPECT_EQ(stats.spinTurns, 2u);
  EXPECT_EQ(source.polls, 4u);
}

}  // namespace
