// The reactor on the host: no RDMA involved, just libevent, pipes, timers and signals.
#include "evrdma/Reactor.h"

#include <event2/event.h>
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "evrdma/ReactorThread.h"
#include "evrdma/Watch.h"

namespace {

using namespace std::chrono_literals;
using evrdma::FdWatch;
using evrdma::Reactor;
using evrdma::SignalWatch;
using evrdma::Timer;

// Every allocation libevent makes in this program is counted (set before main, before any).
std::atomic<uint64_t> libeventAllocations{0};
const bool countingLibeventAllocations = [] {
  event_set_mem_functions(
      [](size_t bytes) {
        ++libeventAllocations;
        return malloc(bytes);
      },
      [](void* p, size_t bytes) {
        ++libeventAllocations;
        return realloc(p, bytes);
      },
      free);
  return true;
}();

// Stops the loop after `limit` even if a test's own stop never comes: no test can hang.
struct Watchdog {
  Watchdog(Reactor& reactor, std::chrono::milliseconds limit) : timer(reactor, [&reactor, this] {
    fired = true;
    reactor.stop();
  }) {
    timer.startOnce(limit);
  }
  Timer timer;
  bool fired = false;
};

TEST(Reactor, OwnsTheBaseItCreated) {
  Reactor reactor;
  ASSERT_TRUE(reactor.valid());
  EXPECT_TRUE(reactor.ownsBase());
}

TEST(Reactor, BorrowedBaseIsUsableAfterTheReactorIsGone) {
  event_base* base = event_base_new();
  {
    Reactor reactor(base);
    ASSERT_TRUE(reactor.valid());
    EXPECT_FALSE(reactor.ownsBase());
    EXPECT_EQ(reactor.base(), base);
  }
  // Still ours and alive: an event on it runs.
  bool ran = false;
  event* ev = event_new(base, -1, 0, [](int, short, void* arg) { *static_cast<bool*>(arg) = true; }, &ran);
  event_active(ev, EV_TIMEOUT, 0);
  event_base_loop(base, EVLOOP_ONCE);
  EXPECT_TRUE(ran);
  event_free(ev);
  event_base_free(base);
}

TEST(Reactor, EventsOfTheReactorRunInTheApplicationsOwnLoop) {
  event_base* base = event_base_new();
  Reactor reactor(base);
  bool fired = false;
  Timer timer(reactor, [&] { fired = true; });
  timer.startOnce(1ms);
  event_base_dispatch(base);  // the application's loop, not Reactor::run
  EXPECT_TRUE(fired);
  event_base_free(base);
}

TEST(Reactor, DeferRunsAfterTheCurrentCallbackInOrder) {
  Reactor reactor;
  Watchdog dog(reactor, 2s);
  std::vector<std::string> trace;
  Timer timer(reactor, [&] {
    reactor.defer([&] { trace.push_back("first"); });
    reactor.defer([&] {
      trace.push_back("second");
      reactor.defer([&] {
        trace.push_back("nested");
        reactor.stop();
      });
    });
    trace.push_back("callback ends");
  });
  timer.startOnce(0ms);
  ASSERT_EQ(reactor.run(), 0);
  EXPECT_FALSE(dog.fired);
  EXPECT_EQ(trace, (std::vector<std::string>{"callback ends", "first", "second", "nested"}));
}

TEST(Reactor, DeferredClosuresAreDestroyedUnrunWhenTheReactorIsDestroyed) {
  bool ran = false;
  auto captured = std::make_shared<int>(7);
  std::weak_ptr<int> watch = captured;
  {
    Reactor reactor;
    reactor.defer([&ran, captured] { ran = true; });
    captured.reset();
  }
  EXPECT_FALSE(ran) << "~Reactor called into the application";
  EXPECT_TRUE(watch.expired()) << "the closure was not destroyed";
}

// What a busy source must not do: libevent 2.1 runs an event activated from inside its own
// callback again in the same pass, before any socket, signal or timer that became ready meanwhile.
// (The premise of NextTurn.)
TEST(LibeventPremise, AnEventReactivatedFromItsOwnCallbackStarvesTimers) {
  event_base* base = event_base_new();
  struct State {
    event* self = nullptr;
    std::chrono::steady_clock::time_point until;
    int rounds = 0;
    int roundAtTick = -1;
  } state;
  state.self = event_new(base, -1, 0, [](int, short, void* arg) {
    auto* st = static_cast<State*>(arg);
    ++st->rounds;
    if (std::chrono::steady_clock::now() < st->until) event_active(st->self, EV_TIMEOUT, 0);
  }, &state);
  event* tick = evtimer_new(base, [](int, short, void* arg) {
    auto* st = static_cast<State*>(arg);
    st->roundAtTick = st->rounds;
  }, &state);
  timeval oneMs{0, 1000};
  evtimer_add(tick, &oneMs);
  state.until = std::chrono::steady_clock::now() + 20ms;  // the timer is due 19 ms before the end
  event_active(state.self, EV_TIMEOUT, 0);
  event_base_loop(base, EVLOOP_ONCE);
  event_base_loop(base, EVLOOP_NONBLOCK);
  EXPECT_EQ(state.roundAtTick, state.rounds) << "the timer ran while the event kept re-activating itself";
  event_free(tick);
  event_free(state.self);
  event_base_free(base);
}

// A closure that keeps deferring more work (a chain of 20 000) must not keep the loop from a ready
// socket, a due timer or a signal: each is served while the chain is still running.
TEST(Reactor, AChainOfDeferredClosuresLetsSocketsTimersAndSignalsIn) {
  Reactor reactor;
  constexpr int kRounds = 20000;
  int rounds = 0, fdAt = -1, timerAt = -1, signalAt = -1;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  FdWatch readable(reactor, fds[0], FdWatch::kRead, [&](short) {
    char c;
    if (read(fds[0], &c, 1) == 1 && fdAt < 0) fdAt = rounds;
  });
  Timer due(reactor, [&] { timerAt = rounds; });
  SignalWatch interrupt(reactor, SIGUSR2, [&](int) { signalAt = rounds; });
  ASSERT_TRUE(interrupt.valid());
  std::function<void()> step = [&] {
    if (rounds == 10) {  // all three become ready in the middle of the chain
      EXPECT_EQ(write(fds[1], "x", 1), 1);
      due.startOnce(0ms);
      raise(SIGUSR2);
    }
    if (++rounds < kRounds)
      reactor.defer(step);
    else
      reactor.stop();
  };
  reactor.defer(step);
  ASSERT_EQ(reactor.run(), 0);
  EXPECT_EQ(rounds, kRounds);
  EXPECT_GE(fdAt, 10);
  EXPECT_LT(fdAt, 100) << "the readable pipe waited for the chain";
  EXPECT_GE(timerAt, 10);
  EXPECT_LT(timerAt, 100) << "the due timer waited for the chain";
  EXPECT_GE(signalAt, 10);
  EXPECT_LT(signalAt, 100) << "the signal waited for the chain";
  close(fds[0]);
  close(fds[1]);
}

TEST(Reactor, ATimerThatOutlivesItsReactorNeverFiresAndIsSafeToDestroy) {
  event_base* base = event_base_new();
  auto reactor = std::make_unique<Reactor>(base);
  bool fired = false;
  auto timer = std::make_unique<Timer>(*reactor, [&] { fired = true; });
  ASSERT_EQ(timer->startOnce(10ms), 0);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  auto watch = std::make_unique<FdWatch>(*reactor, fds[1], FdWatch::kWrite, [&](short) { fired = true; });
  reactor.reset();  // the application's base keeps running
  event* end = evtimer_new(base, [](int, short, void* b) { event_base_loopbreak(static_cast<event_base*>(b)); }, base);
  timeval fifty{0, 50000};
  evtimer_add(end, &fifty);
  event_base_dispatch(base);
  EXPECT_FALSE(fired);
  EXPECT_FALSE(timer->active());
  EXPECT_EQ(timer->startOnce(1ms), -ESHUTDOWN);
  timer.reset();
  watch.reset();
  event_free(end);
  event_base_free(base);
  close(fds[0]);
  close(fds[1]);
}

TEST(Reactor, RunKeepsGoingWithNothingPendingUntilStopped) {
  Reactor reactor;
  reactor.defer([&] { reactor.stop(); });
  EXPECT_EQ(reactor.run(), 0);  // returns because of stop(), not because nothing was pending
}

TEST(Reactor, ClosuresPostedFromOtherThreadsRunOnTheLoopsThreadInTheOrderPosted) {
  Reactor reactor;
  Watchdog watchdog(reactor, 10s);
  ASSERT_EQ(reactor.acceptPosts(), 0);
  constexpr int kThreads = 4, kEach = 1000;
  std::vector<int> seen[kThreads];  // touched on the loop's thread only
  std::atomic<int> ran{0};
  bool otherThread = false;
  const std::thread::id loopThread = std::this_thread::get_id();
  std::vector<std::thread> posters;
  for (int t = 0; t < kThreads; ++t) {
    posters.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        (void)reactor.post([&, t, i] {
          if (std::this_thread::get_id() != loopThread) otherThread = true;
          seen[t].push_back(i);
          if (++ran == kThreads * kEach) reactor.stop();
        });
      }
    });
  }
  reactor.run();
  for (auto& poster : posters) poster.join();
  EXPECT_FALSE(watchdog.fired);
  EXPECT_FALSE(otherThread);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(seen[t].size(), static_cast<size_t>(kEach)) << "thread " << t;
    for (int i = 0; i < kEach; ++i) ASSERT_EQ(seen[t][i], i) << "thread " << t;
  }
}

TEST(Reactor, PostedClosuresNotRunYetAreDroppedWithTheReactor) {
  int ran = 0;
  {
    Reactor reactor;
    EXPECT_EQ(reactor.post([&ran] { ++ran; }), -ENOTSUP) << "a Reactor takes posts only once it accepts them";
    ASSERT_EQ(reactor.acceptPosts(), 0);
    EXPECT_EQ(reactor.post([&ran] { ++ran; }), 0);
  }
  EXPECT_EQ(ran, 0);
}

TEST(ReactorThread, RunsItsLoopOnItsOwnThreadAndStopsWhenDestroyed) {
  std::thread::id ranOn;
  int timerTicks = 0;
  {
    evrdma::ReactorThread worker;
    ASSERT_TRUE(worker.valid());
    std::unique_ptr<Timer> timer;
    worker.runAndWait([&] {
      ranOn = std::this_thread::get_id();
      timer = std::make_unique<Timer>(worker.reactor(), [&] { ++timerTicks; });
      timer->startPeriodic(1ms);
    });
    std::this_thread::sleep_for(50ms);
    worker.runAndWait([&] {
      EXPECT_GT(timerTicks, 0) << "the loop does not run";
      timer.reset();  // on its thread
    });
  }
  EXPECT_NE(ranOn, std::this_thread::get_id());
  EXPECT_NE(ranOn, std::thread::id());
}

TEST(Timer, OneShotFiresOnceAndIsThenInactive) {
  Reactor reactor;
  Watchdog dog(reactor, 300ms);
  int fired = 0;
  Timer timer(reactor, [&] { ++fired; });
  ASSERT_EQ(timer.startOnce(5ms), 0);
  EXPECT_TRUE(timer.active());
  reactor.run();
  EXPECT_EQ(fired, 1);
  EXPECT_FALSE(timer.active());
}

// A connection holds timers that run only while it closes: a timer never started makes nothing
// (it made an event holder and a shared callback each, 128 B, at 100 000 idle connections 4 of them).
TEST(Timer, TimersNeverStartedAllocateNothing) {
  Reactor reactor;
  std::vector<std::optional<Timer>> timers(1000);
  const size_t before = mallinfo2().uordblks;
  for (auto& timer : timers) timer.emplace(reactor, [] {});
  const size_t grew = mallinfo2().uordblks - before;
  EXPECT_LT(grew, 1024u) << "1000 timers never started took " << grew << " bytes";
  int fired = 0;
  timers[7].emplace(reactor, [&] {
    ++fired;
    reactor.stop();
  });
  ASSERT_EQ(timers[7]->startOnce(1ms), 0);  // and a started one still fires
  reactor.run();
  EXPECT_EQ(fired, 1);
}

// One-shot and periodic are different events: switching makes the event again with the same callback.
TEST(Timer, ATimerSwitchedBetweenOneShotAndPeriodicKeepsItsCallback) {
  Reactor reactor;
  Watchdog dog(reactor, 10s);
  int fired = 0;
  Timer timer(reactor, [&] {
    ++fired;
    reactor.stop();
  });
  ASSERT_EQ(timer.startOnce(1ms), 0);
  reactor.run();
  ASSERT_EQ(timer.startPeriodic(1ms), 0);
  reactor.run();
  reactor.run();
  EXPECT_TRUE(timer.active()) << "periodic";
  ASSERT_EQ(timer.startOnce(1ms), 0);
  reactor.run();
  EXPECT_FALSE(timer.active()) << "one-shot again";
  EXPECT_EQ(fired, 4);
  EXPECT_FALSE(dog.fired);
}

// A timer made but never started holds nothing of its Reactor's: started after the Reactor has
// gone, it is refused, and it is safe to destroy.
TEST(Timer, ATimerNeverStartedThatOutlivesItsReactorIsRefusedAtItsStart) {
  auto reactor = std::make_unique<Reactor>();
  bool fired = false;
  Timer timer(*reactor, [&] { fired = true; });
  reactor.reset();
  EXPECT_EQ(timer.startOnce(1ms), -ESHUTDOWN);
  EXPECT_EQ(timer.startPeriodic(1ms), -ESHUTDOWN);
  EXPECT_FALSE(timer.active());
  timer.cancel();
  EXPECT_FALSE(fired);
}

// libevent counts a timeout from the time it cached when the turn began: a timer started at the
// end of a long callback would be due early by the callback's length (a connection's 2 s grace,
// started after a 2.6 s turn under ASan on siw, fired 17 ms later). Ours count from the call.
TEST(Timer, ADelayCountsFromTheStartCallNotFromTheStartOfALongTurn) {
  Reactor reactor;
  Watchdog dog(reactor, 10s);
  constexpr auto kDelay = 100ms, kTurnRunsFor = 300ms;
  std::chrono::steady_clock::time_point startedAt, firedAt;
  Timer late(reactor, [&] {
    firedAt = std::chrono::steady_clock::now();
    reactor.stop();
  });
  Timer nextTurn(reactor, [] {});  // more work: the next turn comes at once, as under load
  Timer longCallback(reactor, [&] {
    const auto until = std::chrono::steady_clock::now() + kTurnRunsFor;
    while (std::chrono::steady_clock::now() < until) {
    }
    startedAt = std::chrono::steady_clock::now();
    late.startOnce(kDelay);
    nextTurn.startOnce(0ms);
  });
  longCallback.startOnce(0ms);
  reactor.run();
  ASSERT_FALSE(dog.fired);
  // libevent may read a coarse clock (a few ms a tick): a little under the delay is its rounding.
  EXPECT_GE(firedAt - startedAt, kDelay - 10ms) << "the timer fired early, counted from the turn's start";
}

TEST(Timer, PeriodicFiresUntilCancelledFromItsOwnCallback) {
  Reactor reactor;
  Watchdog dog(reactor, 2s);
  int fired = 0;
  Timer* self = nullptr;
  Timer timer(reactor, [&] {
    if (++fired == 3) {
      self->cancel();
      reactor.stop();
    }
  });
  self = &timer;
  timer.startPeriodic(2ms);
  reactor.run();
  EXPECT_FALSE(dog.fired);
  EXPECT_EQ(fired, 3);
  EXPECT_FALSE(timer.active());
}

// Periodic timers share a queue per period (libevent's common timeouts: thousands of keepalive
// timers of one period cost one timer-heap entry): each still fires every period.
TEST(Timer, AThousandPeriodicTimersOfOnePeriodEachFireRoundAfterRound) {
  Reactor reactor;
  Watchdog dog(reactor, 20s);
  constexpr int kTimers = 1000, kRounds = 3;
  std::vector<int> fired(kTimers, 0);
  int done = 0;
  std::vector<std::unique_ptr<Timer>> timers;
  for (int i = 0; i < kTimers; ++i) {
    timers.push_back(std::make_unique<Timer>(reactor, [&, i] {
      if (++fired[i] != kRounds) return;
      timers[i]->cancel();
      if (++done == kTimers) reactor.stop();
    }));
    ASSERT_EQ(timers.back()->startPeriodic(2ms), 0);
  }
  reactor.run();
  EXPECT_FALSE(dog.fired) << done << " of " << kTimers << " fired " << kRounds << " times";
  EXPECT_EQ(done, kTimers);
}

// More periods than a Reactor keeps queues for (64): the rest are plain timeouts, and fire too.
TEST(Timer, PeriodicTimersOfSeventyDifferentPeriodsAllFire) {
  Reactor reactor;
  Watchdog dog(reactor, 20s);
  constexpr int kTimers = 70;
  int done = 0;
  std::vector<std::unique_ptr<Timer>> timers;
  for (int i = 0; i < kTimers; ++i) {
    timers.push_back(std::make_unique<Timer>(reactor, [&, i] {
      timers[i]->cancel();
      if (++done == kTimers) reactor.stop();
    }));
    ASSERT_EQ(timers.back()->startPeriodic(std::chrono::milliseconds(1 + i)), 0);
  }
  reactor.run();
  EXPECT_EQ(done, kTimers);
}

TEST(Timer, APeriodicTimerRestartedWithAnotherPeriodFiresAtTheNewOne) {
  Reactor reactor;
  Watchdog dog(reactor, 5s);
  int fired = 0;
  Timer slow(reactor, [] {});
  ASSERT_EQ(slow.startPeriodic(60s), 0);  // another timer of the first period stays queued
  Timer timer(reactor, [&] {
    if (++fired == 3) reactor.stop();
  });
  ASSERT_EQ(timer.startPeriodic(60s), 0);
  ASSERT_EQ(timer.startPeriodic(2ms), 0);
  reactor.run();
  EXPECT_FALSE(dog.fired);
  EXPECT_EQ(fired, 3);
  EXPECT_TRUE(slow.active());
}

TEST(Timer, CancelledTimerNeverFires) {
  Reactor reactor;
  Watchdog dog(reactor, 50ms);
  bool fired = false;
  Timer timer(reactor, [&] { fired = true; });
  timer.startOnce(10ms);
  timer.cancel();
  reactor.run();
  EXPECT_FALSE(fired);
}

TEST(Timer, DestroyingATimerCancelsIt) {
  Reactor reactor;
  Watchdog dog(reactor, 50ms);
  bool fired = false;
  {
    Timer timer(reactor, [&] { fired = true; });
    timer.startOnce(10ms);
  }
  reactor.run();
  EXPECT_FALSE(fired);
}

TEST(Timer, MayBeDestroyedFromItsOwnCallback) {
  Reactor reactor;
  Watchdog dog(reactor, 2s);
  auto timer = std::make_unique<Timer>(reactor, [] {});
  int calls = 0;
  timer = std::make_unique<Timer>(reactor, [&] {
    ++calls;
    timer.reset();  // the callback's own Timer goes away while it runs
    reactor.stop();
  });
  timer->startPeriodic(1ms);
  reactor.run();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(timer, nullptr);
}

TEST(Timer, RestartingMovesTheDeadline) {
  Reactor reactor;
  Watchdog dog(reactor, 2s);
  auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration firedAfter{};
  Timer timer(reactor, [&] {
    firedAfter = std::chrono::steady_clock::now() - start;
    reactor.stop();
  });
  timer.startOnce(1000ms);
  timer.startOnce(10ms);
  reactor.run();
  EXPECT_FALSE(dog.fired);
  EXPECT_LT(firedAfter, 900ms);
}

TEST(Timer, RestartedFromItsOwnCallbackFiresAgain) {
  Reactor reactor;
  Watchdog dog(reactor, 2s);
  int fired = 0;
  Timer* self = nullptr;
  Timer timer(reactor, [&] {
    if (++fired < 3) self->startOnce(1ms);
    else reactor.stop();
  });
  self = &timer;
  ASSERT_EQ(timer.startOnce(1ms), 0);
  reactor.run();
  EXPECT_FALSE(dog.fired);
  EXPECT_EQ(fired, 3);
}

TEST(Timer, RestartingItAllocatesNothing) {
  // A timer restarted per message (a round-trip timeout) re-adds its event: no event made anew.
  ASSERT_TRUE(countingLibeventAllocations);
  Reactor reactor;
  Timer timer(reactor, [] {});
  ASSERT_EQ(timer.startOnce(10s), 0);
  const uint64_t before = libeventAllocations;
  for (int i = 0; i < 100; ++i) ASSERT_EQ(timer.startOnce(10s + std::chrono::milliseconds(i)), 0);
  EXPECT_EQ(libeventAllocations - before, 0u);
  EXPECT_TRUE(timer.active());
}

TEST(Timer, RestartingATimerDueInTheSameTurnDropsThatFire) {
  // Both are due when the loop first looks (the sleep): whichever runs first restarts the other for
  // later, which must then not fire in this turn.
  Reactor reactor;
  Watchdog dog(reactor, 300ms);
  int fired = 0;
  Timer stopper(reactor, [&] { reactor.stop(); });
  std::unique_ptr<Timer> first, second;
  first = std::make_unique<Timer>(reactor, [&] {
    ++fired;
    second->startOnce(10s);
    stopper.startOnce(20ms);  // time for the other to fire, were it still due
  });
  second = std::make_unique<Timer>(reactor, [&] {
    ++fired;
    first->startOnce(10s);
    stopper.startOnce(20ms);
  });
  ASSERT_EQ(first->startOnce(1ms), 0);
  ASSERT_EQ(second->startOnce(1ms), 0);
  std::this_thread::sleep_for(20ms);
  reactor.run();
  EXPECT_FALSE(dog.fired);
  EXPECT_EQ(fired, 1);
}

TEST(Timer, SwitchingBetweenOneShotAndPeriodicKeepsEachKind) {
  Reactor reactor;
  Watchdog dog(reactor, 2s);
  int fired = 0;
  Timer stopper(reactor, [&] { reactor.stop(); });
  Timer* self = nullptr;
  Timer timer(reactor, [&] {
    ++fired;
    if (fired == 1) self->startPeriodic(1ms);  // was one-shot
    if (fired == 4) self->startOnce(1ms);      // was periodic: fires once more, then stops
    if (fired == 5) stopper.startOnce(30ms);   // time for a sixth that must not come
  });
  self = &timer;
  ASSERT_EQ(timer.startOnce(1ms), 0);
  reactor.run();
  EXPECT_FALSE(dog.fired);
  EXPECT_EQ(fired, 5);
  EXPECT_FALSE(timer.active());
}

TEST(FdWatch, ReportsReadabilityOfAPipeUntilPaused) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  Reactor reactor;
  Watchdog dog(reactor, 2s);
  std::string received;
  FdWatch* self = nullptr;
  FdWatch watch(reactor, fds[0], FdWatch::kRead, [&](short events) {
    ASSERT_TRUE(events & FdWatch::kRead);
    char buf[16];
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0) received.append(buf, static_cast<size_t>(n));
    if (received == "ping") {
      self->pause();
      reactor.stop();
    }
  });
  self = &watch;
  ASSERT_TRUE(watch.valid());
  ASSERT_EQ(write(fds[1], "ping", 4), 4);
  reactor.run();
  EXPECT_FALSE(dog.fired);
  EXPECT_EQ(received, "ping");
  close(fds[0]);
  close(fds[1]);
}

TEST(FdWatch, ReportsWritability) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  Reactor reactor;
  Watchdog dog(reactor, 2s);
  bool writable = false;
  FdWatch watch(reactor, fds[1], FdWatch::kWrite, [&](short events) {
    writable = (events & FdWatch::kWrite) != 0;
    reactor.stop();
  });
  reactor.run();
  EXPECT_TRUE(writable);
  close(fds[0]);
  close(fds[1]);
}

TEST(SignalWatch, DeliversTheSignalOnTheLoop) {
  Reactor reactor;
  Watchdog dog(reactor, 2s);
  int got = 0;
  SignalWatch watch(reactor, SIGUSR1, [&](int signo) {
    got = signo;
    reactor.stop();
  });
  ASSERT_TRUE(watch.valid());
  reactor.defer([] { raise(SIGUSR1); });
  reactor.run();
  EXPECT_FALSE(dog.fired);
  EXPECT_EQ(got, SIGUSR1);
}

}  // namespace

TEST(MemoryCharge, TheApplicationsChargeCountsAgainstTheBudgetUntilItGoes) {
  evrdma::Reactor reactor;
  reactor.setMemoryBudget(1000);
  evrdma::MemoryCharge first, second, refused;
  EXPECT_EQ(reactor.chargeMemory(600, first), 0);
  EXPECT_EQ(reactor.registeredMemory(), 600u);
  EXPECT_EQ(reactor.chargeMemory(500, refused), -ENOBUFS) << "600 + 500 is past the budget of 1000";
  EXPECT_FALSE(refused);
  EXPECT_EQ(reactor.registeredMemory(), 600u) << "a refused charge counts nothing";
  EXPECT_EQ(reactor.chargeMemory(400, second), 0);
  EXPECT_EQ(reactor.registeredMemory(), 1000u);
  evrdma::MemoryCharge moved = std::move(second);
  EXPECT_EQ(moved.bytes(), 400u);
  EXPECT_EQ(reactor.registeredMemory(), 1000u) << "moving a charge neither adds nor gives back";
  first.reset();
  EXPECT_EQ(reactor.registeredMemory(), 400u);
  {
    evrdma::MemoryCharge scoped;
    EXPECT_EQ(reactor.chargeMemory(600, scoped), 0);
  }
  EXPECT_EQ(reactor.registeredMemory(), 400u) << "a charge gives its bytes back when it goes";
}

TEST(MemoryCharge, AChargeMayOutliveItsReactor) {
  evrdma::MemoryCharge charge;
  {
    evrdma::Reactor reactor;
    ASSERT_EQ(reactor.chargeMemory(4096, charge), 0);  // no budget: any charge fits
  }
  EXPECT_EQ(charge.bytes(), 4096u);
  charge.reset();  // gives its bytes to the gone Reactor's account, which it kept alive
  EXPECT_FALSE(charge);
}
