// The reactor on the host: no RDMA involved, just libevent, pipes, timers and signals.
#include "evrdma/Reactor.h"

#include <event2/event.h>
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "evrdma/Watch.h"

namespace {

using namespace std::chrono_literals;
using evrdma::FdWatch;
using evrdma::Reactor;
using evrdma::SignalWatch;
using evrdma::Timer;

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

TEST(Reactor, DeferredWorkStillRunsWhenTheReactorIsDestroyed) {
  bool ran = false;
  {
    Reactor reactor;
    reactor.defer([&] { ran = true; });
  }
  EXPECT_TRUE(ran);
}

TEST(Reactor, RunKeepsGoingWithNothingPendingUntilStopped) {
  Reactor reactor;
  reactor.defer([&] { reactor.stop(); });
  EXPECT_EQ(reactor.run(), 0);  // returns because of stop(), not because nothing was pending
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
