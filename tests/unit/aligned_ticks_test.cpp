// AlignedTicks on a bare libevent base: ticks of many owners started apart come together on
// aligned instants (few loop wake-ups), never run before their instant, at most perTurn a turn
// with the loop serving its sockets in between, and a tick that goes never runs again.
#include "AlignedTicks.h"

#include <event2/event.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

namespace {

using namespace std::chrono_literals;
using evrdma::detail::AlignedTick;
using evrdma::detail::AlignedTicks;
using Clock = AlignedTick::Clock;

struct Base {
  Base() : base(event_base_new()) {}
  ~Base() { event_base_free(base); }
  // Turns the loop until `done` or (only to bound a hang) a minute.
  template <typename Done>
  void turnUntil(Done done) {
    const auto deadline = Clock::now() + 60s;
    while (!done() && Clock::now() < deadline) event_base_loop(base, EVLOOP_ONCE);
  }
  event_base* base;
};

TEST(AlignedTicks, TicksOfAThousandOwnersStartedApartComeTogetherAndNeverRunBeforeTheirInstant) {
  Base b;
  AlignedTicks ticks(64);
  ASSERT_EQ(ticks.init(b.base), 0);
  constexpr auto kPeriod = 500ms, kStep = 50ms;
  struct Owner {
    std::unique_ptr<AlignedTick> tick;
    Clock::time_point startedAt;
    std::vector<Clock::time_point> ran;
  };
  std::vector<Owner> owners(1000);
  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < owners.size(); ++i) {
    Owner& owner = owners[i];
    owner.startedAt = start + i * 500us;  // as connections established over a period
    owner.tick = std::make_unique<AlignedTick>([&owner](Clock::time_point now) { owner.ran.push_back(now); });
    ASSERT_EQ(owner.tick->start(ticks, kPeriod, kStep, owner.startedAt), 0);
  }
  b.turnUntil([&] { return std::all_of(owners.begin(), owners.end(), [](const Owner& o) { return o.ran.size() >= 3; }); });
  for (const Owner& owner : owners) {
    ASSERT_GE(owner.ran.size(), 3u);
    // Its instants: the multiple of the step (offset by the queue's phase) at or before start +
    // period, then every period.
    const Clock::duration offset = ticks.phase() % kStep;
    Clock::time_point instant(((owner.startedAt + kPeriod).time_since_epoch() - offset) / kStep * kStep + offset);
    for (Clock::time_point ran : owner.ran) {
      EXPECT_GE(ran, instant - 1ms);  // (libevent's clock may run ahead of the steady clock by that)
      instant += kPeriod;
    }
  }
  // Spread, 1 000 owners woke the loop about once per 9 ticks (a timer's wake-up is late enough to
  // find a few more due); together, once per step and a turn more per 64 due at it: 50 per wake-up.
  EXPECT_GE(ticks.ticksRun(), 3000u);
  EXPECT_LT(ticks.wakeups() * 25, ticks.ticksRun()) << ticks.wakeups() << " wake-ups for " << ticks.ticksRun() << " ticks";
}

TEST(AlignedTicks, AThousandTicksDueAtOnceRunAtMostPerTurnWithTheLoopsSocketsServedBetween) {
  Base b;
  AlignedTicks ticks(64);
  ASSERT_EQ(ticks.init(b.base), 0);
  int pipeFds[2];
  ASSERT_EQ(pipe(pipeFds), 0);
  ASSERT_EQ(write(pipeFds[1], "x", 1), 1);  // never read: readable on every turn
  int socketServed = 0;
  event* readable = event_new(
      b.base, pipeFds[0], EV_READ | EV_PERSIST, [](int, short, void* n) { ++*static_cast<int*>(n); }, &socketServed);
  ASSERT_EQ(event_add(readable, nullptr), 0);

  std::vector<std::unique_ptr<AlignedTick>> all;
  std::vector<int> ranInTurn;  // per tick: the socket's count when it ran
  ranInTurn.assign(1000, -1);
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < 1000; ++i) {
    all.push_back(std::make_unique<AlignedTick>([&, i](Clock::time_point) {
      ranInTurn[i] = socketServed;
      all[i]->cancel();
    }));
    ASSERT_EQ(all[i]->start(ticks, 10ms, 10ms, now), 0);  // all due at one instant
  }
  b.turnUntil([&] { return ticks.size() == 0; });
  ASSERT_EQ(ticks.size(), 0u);
  std::vector<int> perTurn(static_cast<size_t>(socketServed) + 1, 0);
  for (int turn : ranInTurn) {
    ASSERT_GE(turn, 0);
    ++perTurn[static_cast<size_t>(turn)];
  }
  EXPECT_LE(*std::max_element(perTurn.begin(), perTurn.end()), 64);
  EXPECT_GE(std::count_if(perTurn.begin(), perTurn.end(), [](int n) { return n > 0; }), 1000 / 64);
  // Nothing left to wake for: the timer is off, and the loop may end once the socket goes.
  event_free(readable);
  EXPECT_EQ(event_base_get_num_events(b.base, EVENT_BASE_COUNT_ADDED), 0);
  close(pipeFds[0]);
  close(pipeFds[1]);
}

TEST(AlignedTicks, ATickDestroyedByAnEarlierTickOfItsTurnNeverRunsAndACancelledOneNeverAgain) {
  Base b;
  AlignedTicks ticks(64);
  ASSERT_EQ(ticks.init(b.base), 0);
  const Clock::time_point now = Clock::now();
  int laterRan = 0, selfCancellingRan = 0, keeperRan = 0;
  std::unique_ptr<AlignedTick> later = std::make_unique<AlignedTick>([&](Clock::time_point) { ++laterRan; });
  AlignedTick first([&](Clock::time_point) { later.reset(); });
  AlignedTick selfCancelling([&](Clock::time_point) {
    ++selfCancellingRan;
  });
  AlignedTick keeper([&](Clock::time_point) {
    ++keeperRan;
    selfCancelling.cancel();
  });
  ASSERT_EQ(first.start(ticks, 20ms, 10ms, now), 0);  // queued in the order started
  ASSERT_EQ(later->start(ticks, 20ms, 10ms, now), 0);
  ASSERT_EQ(keeper.start(ticks, 20ms, 10ms, now), 0);
  ASSERT_EQ(selfCancelling.start(ticks, 20ms, 10ms, now), 0);
  b.turnUntil([&] { return keeperRan >= 3; });
  EXPECT_EQ(laterRan, 0);
  EXPECT_EQ(selfCancellingRan, 0);  // cancelled by a tick before it on the same instant
  EXPECT_FALSE(selfCancelling.active());
  EXPECT_TRUE(keeper.active());
  EXPECT_EQ(ticks.size(), 2u);  // first, keeper
}

TEST(AlignedTicks, TheTicksOfTwoQueuesFallOnInstantsOfTheirOwn) {
  // (As the Reactors of a server and its clients on one host: they do not all wake at once.)
  Base b;
  AlignedTicks one(64), other(64);
  ASSERT_EQ(one.init(b.base), 0);
  ASSERT_EQ(other.init(b.base), 0);
  std::vector<Clock::time_point> oneRan, otherRan;
  AlignedTick a([&](Clock::time_point now) { oneRan.push_back(now); });
  AlignedTick z([&](Clock::time_point now) { otherRan.push_back(now); });
  const Clock::time_point now = Clock::now();
  ASSERT_EQ(a.start(one, 1s, 1s, now), 0);
  ASSERT_EQ(z.start(other, 1s, 1s, now), 0);
  b.turnUntil([&] { return !oneRan.empty() && !otherRan.empty(); });
  ASSERT_FALSE(oneRan.empty());
  ASSERT_FALSE(otherRan.empty());
  EXPECT_NE(one.phase(), other.phase()) << "(equal by chance once in a million)";
  // Each on its own instant: the multiple of the second, offset by its queue's phase, at or before now + 1 s.
  const auto instantOf = [&](const AlignedTicks& ticks) {
    return Clock::time_point(((now + 1s).time_since_epoch() - ticks.phase()) / 1s * 1s + ticks.phase());
  };
  EXPECT_GE(oneRan[0], instantOf(one) - 1ms);
  EXPECT_GE(otherRan[0], instantOf(other) - 1ms);
}

TEST(AlignedTicks, DiscardLeavesEveryTickInactiveAndAbleToOutliveTheQueue) {
  Base b;
  auto ticks = std::make_unique<AlignedTicks>(64);
  ASSERT_EQ(ticks->init(b.base), 0);
  std::vector<std::unique_ptr<AlignedTick>> owned;
  for (int i = 0; i < 100; ++i) {
    owned.push_back(std::make_unique<AlignedTick>([](Clock::time_point) {}));
    ASSERT_EQ(owned.back()->start(*ticks, 1s, 100ms, Clock::now()), 0);
  }
  owned.resize(50);  // half go first, each leaving the queue
  EXPECT_EQ(ticks->size(), 50u);
  ticks->discard();
  EXPECT_EQ(ticks->size(), 0u);
  for (const auto& tick : owned) EXPECT_FALSE(tick->active());
  ticks.reset();
  owned.clear();  // (ASan: touches nothing of the freed queue)
  EXPECT_EQ(event_base_get_num_events(b.base, EVENT_BASE_COUNT_ADDED), 0);
}

}  // namespace
