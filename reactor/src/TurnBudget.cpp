// TurnBudget: a turn's completion budget from a time and the measured cost of a completion.
#include "TurnBudget.h"

#include <algorithm>

namespace evrdma::detail {

void TurnBudget::changeTime(std::chrono::microseconds time) noexcept {
  time_ = time;
  if (time_.count() <= 0) completions_ = kMost;
  else refit();  // the same cost, the new time
}

void TurnBudget::startTiming(int handled) noexcept {
  timing_ = true;
  timedFrom_ = handled;
  start_ = Clock::now();
}

void TurnBudget::finishTiming(int handled) noexcept {
  timing_ = false;
  if (handled > timedFrom_) learn(Clock::now() - start_, handled - timedFrom_);
}

void TurnBudget::learn(Clock::duration took, int count) noexcept {
  if (count <= 0) return;
  const double sample = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(took).count()) / count;
  nanosPerCompletion_ = nanosPerCompletion_ > 0 ? nanosPerCompletion_ + (sample - nanosPerCompletion_) / 4 : sample;
  refit();
}

void TurnBudget::refit() noexcept {
  if (time_.count() <= 0 || nanosPerCompletion_ <= 0) return;
  const double fit = static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(time_).count()) /
                     nanosPerCompletion_;
  completions_ = static_cast<int>(std::clamp(fit, static_cast<double>(kLeast), static_cast<double>(kMost)));
}

}  // namespace evrdma::detail
