// AlignedTicks: the periodic ticks of a Reactor's many connections (their keepalive and idle
// checks) on one libevent timer. Each tick falls on an aligned instant, a multiple of its step on
// the steady clock, so that the ticks of thousands of connections with one period come together:
// one loop wake-up for many instead of one each (25 000 agents with a 30 s keepalive woke an idle
// server 1 100 times a second, most of its CPU in the test bed). The ticks due at one instant run
// at most perTurn a turn, the time read once for them, the rest on the next turns after the
// backend poll: all at once they would be one long turn (a keepalive probe each). Each queue's
// instants are offset by a random phase of its own, so that the Reactors of many processes on one
// host (a server and its clients) do not all wake at once.
//
// A tick is re-queued before its callback runs, so the callback may cancel it, restart it or
// destroy its owner (which cancels it); one that went before its turn never runs.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

struct event;
struct event_base;

namespace evrdma::detail {

class AlignedTicks;

class AlignedTick {
 public:
  using Clock = std::chrono::steady_clock;
  // `onTick` gets the time read for the ticks of its turn.
  explicit AlignedTick(std::function<void(Clock::time_point)> onTick) : onTick_(std::move(onTick)) {}
  ~AlignedTick() { cancel(); }
  AlignedTick(const AlignedTick&) = delete;
  AlignedTick& operator=(const AlignedTick&) = delete;
  // Ticks every `period` rounded down to a multiple of `step` (at least one step), each on a
  // multiple of `step` on the steady clock, the first no later than now + period. Returns 0, or
  // -ENOMEM (no timer: nothing ticks).
  int start(AlignedTicks& ticks, Clock::duration period, Clock::duration step, Clock::time_point now) noexcept;
  void cancel() noexcept;
  bool active() const noexcept { return owner_ != nullptr; }

 private:
  friend class AlignedTicks;
  std::function<void(Clock::time_point)> onTick_;
  AlignedTicks* owner_ = nullptr;
  std::multimap<Clock::time_point, AlignedTick*>::iterator where_;
  Clock::duration period_{};  // a multiple of the step it was started with (its instants stay aligned)
};

class AlignedTicks {
 public:
  using Clock = AlignedTick::Clock;
  explicit AlignedTicks(size_t perTurn);
  ~AlignedTicks();
  AlignedTicks(const AlignedTicks&) = delete;
  AlignedTicks& operator=(const AlignedTicks&) = delete;
  // Returns 0 or -ENOMEM.
  int init(event_base* base) noexcept;
  // Forgets every tick (the Reactor goes): none runs again, each is inactive.
  void discard() noexcept;
  size_t size() const noexcept { return due_.size(); }
  // A tick of step s falls on instants k * s + phase() % s of the steady clock.
  Clock::duration phase() const noexcept { return phase_; }
  // How often the loop woke for ticks, and ran how many: the figures that show they come together.
  uint64_t wakeups() const noexcept { return wakeups_; }
  uint64_t ticksRun() const noexcept { return ticksRun_; }

 private:
  friend class AlignedTick;
  using Queue = std::multimap<Clock::time_point, AlignedTick*>;
  void insert(AlignedTick& tick, Clock::time_point due, Clock::time_point now);  // may throw bad_alloc
  void remove(AlignedTick& tick) noexcept;
  // The timer set for the earliest tick (at once when it is due), or off when none is queued.
  void arm(Clock::time_point now) noexcept;
  static void onTimer(int, short, void* self) noexcept;
  void runDue() noexcept;

  const size_t perTurn_;
  const Clock::duration phase_;  // in [0, 1 s)
  Queue due_;
  event* timer_ = nullptr;
  bool armed_ = false;
  Clock::time_point armedFor_{};
  uint64_t wakeups_ = 0, ticksRun_ = 0;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // a tick may destroy the owner
};

}  // namespace evrdma::detail
