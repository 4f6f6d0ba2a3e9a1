// TurnPace: the turn's count of answers, and the timer that starts the next turn's.
#include "TurnPace.h"

#include <chrono>

namespace evrdma::detail {

uint32_t TurnPace::countAnswer() noexcept {
  ++answered_;
  armNextTurn();  // the count starts over then
  return answered_;
}

void TurnPace::armNextTurn() noexcept {
  if (!timer_)
    timer_ = std::make_unique<Timer>(reactor_, [this] {
      answered_ = 0;
      onNextTurn_();
    });
  if (!timer_->active()) timer_->startOnce(std::chrono::milliseconds(0));
}

}  // namespace evrdma::detail
