// Drain: the grace, the close after it, and the callback once the last agent is gone.
#include "Drain.h"

#include <algorithm>

#include "evrdma/Reactor.h"

namespace evrdma::detail {

bool Drain::start(std::chrono::milliseconds grace, std::function<void()> drained) {
  const auto deadline = std::chrono::steady_clock::now() + std::max(grace, std::chrono::milliseconds(0));
  const bool first = !active_;
  if (first) {
    active_ = true;
    deadline_ = deadline;
  } else if (deadline < deadline_) {
    deadline_ = deadline;
  }
  if (drained) drained_ = std::move(drained);
  return first;
}

void Drain::tick() noexcept {
  if (!timer_) timer_ = std::make_unique<Timer>(reactor_, [this] { tick(); });
  const auto now = std::chrono::steady_clock::now();
  if (!closedAgents_ && now >= deadline_) {
    closedAgents_ = true;
    closeAgents_();
  }
  maybeDone();
  if (!drained_) return;
  // The workers' agents close on their threads: their count is looked at every few milliseconds.
  auto next = std::chrono::milliseconds(10);
  if (!hasWorkers_()) {
    if (closedAgents_) return;  // the last agent's end calls maybeDone
    next = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - now) + std::chrono::milliseconds(1);
  }
  timer_->startOnce(next);
}

void Drain::maybeDone() noexcept {
  if (!active_ || !drained_ || agentCount_() != 0) return;
  std::function<void()> drained = std::move(drained_);
  drained_ = nullptr;
  if (timer_) timer_->cancel();
  reactor_.defer(std::move(drained));
}

void Drain::forget() noexcept {
  timer_.reset();
  drained_ = nullptr;
}

}  // namespace evrdma::detail
