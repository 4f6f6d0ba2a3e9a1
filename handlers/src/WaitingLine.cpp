// WaitingLine: the requests past a turn's acceptsPerTurn, and the turn's count.
#include "WaitingLine.h"

#include <chrono>

namespace evrdma::detail {

uint32_t WaitingLine::countAnswer() noexcept {
  ++answered_;
  armNextTurn();  // the count starts over then
  return answered_;
}

void WaitingLine::armNextTurn() noexcept {
  if (!timer_)
    timer_ = std::make_unique<Timer>(reactor_, [this] {
      answered_ = 0;
      onNextTurn_();
    });
  if (!timer_->active()) timer_->startOnce(std::chrono::milliseconds(0));
}

bool WaitingLine::popFront(CmEvent& out) noexcept {
  if (line_.empty()) return false;
  out = std::move(line_.front());
  line_.pop_front();
  return true;
}

bool WaitingLine::take(rdma_cm_id* id) noexcept {
  for (auto it = line_.begin(); it != line_.end(); ++it) {
    if (it->id != id) continue;
    line_.erase(it);
    return true;
  }
  return false;
}

void WaitingLine::destroyIds() noexcept {
  for (const CmEvent& event : line_) rdma_destroy_id(event.id);
  line_.clear();
}

}  // namespace evrdma::detail
