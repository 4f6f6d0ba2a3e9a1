// TurnBudget: how many completions one loop turn may hand out, derived from a time (Reactor::
// setTurnBudget) and from what completions have lately cost, handlers' work included: the loop
// gets back to the application's sockets, timers and signals after about that long, on a fast
// machine or a slow one. A count alone could not say that: 256 completions took 4 ms on the test
// bed, and an application's HTTP answers waited 26-28 times longer under an RDMA flood than quiet.
// The clock is read twice in a pass that hands out more than one poll's worth, never in one that
// hands out less: a lone message never pays for it.
#pragma once

#include <chrono>

#include "evrdma/CompletionStats.h"

namespace evrdma::detail {

class TurnBudget {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kLeast = CompletionStats::kBatch;  // one poll's worth: every turn moves
  static constexpr int kMost = 256;                       // whatever completions cost

  // Completions the current pass may hand out.
  int completions() const noexcept { return completions_; }
  // A pass begins; `time` is the Reactor's turn budget (0: kMost, whatever they cost).
  // Inline, as endPass: adaptive polling begins and ends a pass per poll, mostly an empty one.
  void beginPass(std::chrono::microseconds time) noexcept {
    timing_ = false;
    if (time != time_) changeTime(time);
  }
  // After each poll of the pass, with what it has handed out so far: the clock starts once the
  // pass is past one poll's worth.
  void afterPoll(int handled) noexcept {
    if (!timing_ && handled >= kLeast && time_.count() > 0) startTiming(handled);
  }
  // The pass ended having handed out `handled`: what those past the first poll's worth took is
  // learned.
  void endPass(int handled) noexcept {
    if (timing_) finishTiming(handled);
  }
  // `count` completions took `took`: the estimate of one's cost moves a quarter of the way there,
  // and the budget follows (the time over that cost, within kLeast .. kMost).
  void learn(Clock::duration took, int count) noexcept;

 private:
  void startTiming(int handled) noexcept;
  void finishTiming(int handled) noexcept;
  void changeTime(std::chrono::microseconds time) noexcept;
  // The count from the time and the cost learned so far (none learned: unchanged).
  void refit() noexcept;

  std::chrono::microseconds time_{0};
  double nanosPerCompletion_ = 0;  // 0 until learned
  int completions_ = kMost;
  bool timing_ = false;
  int timedFrom_ = 0;  // what the pass had handed out when the clock started
  Clock::time_point start_{};
};

}  // namespace evrdma::detail
