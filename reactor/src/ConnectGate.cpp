// ConnectGate: counting the connects on the wire, and letting the waiting ones go in order as
// others finish.
#include "ConnectGate.h"

#include <algorithm>

#include "evrdma/Reactor.h"

namespace evrdma::detail {

void ConnectGate::setLimit(uint32_t limit) noexcept {
  limit_ = limit;
  admitLater();  // a higher limit lets waiters in
}

bool ConnectGate::enter(Waiter* waiter) {
  if (limit_ == 0 || (inFlight_ < limit_ && waiting_.empty())) {
    ++inFlight_;
    holding_.push_back(waiter);
    return true;
  }
  waiting_.push_back(waiter);
  return false;
}

void ConnectGate::leave(Waiter* waiter) noexcept {
  if (auto it = std::find(holding_.begin(), holding_.end(), waiter); it != holding_.end()) {
    holding_.erase(it);
    --inFlight_;
    admitLater();
    return;
  }
  if (auto it = std::find(waiting_.begin(), waiting_.end(), waiter); it != waiting_.end()) waiting_.erase(it);
}

void ConnectGate::admitLater() noexcept {
  if (admitScheduled_ || waiting_.empty()) return;
  admitScheduled_ = true;
  // Not from inside the callback of the connection that left: the next one's connect may fail,
  // and its callbacks must not run inside another connection's.
  reactor_.defer([this] {
    admitScheduled_ = false;
    admit();
  });
}

void ConnectGate::admit() noexcept {
  while (!waiting_.empty() && (limit_ == 0 || inFlight_ < limit_)) {
    Waiter* next = waiting_.front();
    waiting_.pop_front();
    ++inFlight_;
    holding_.push_back(next);
    next->onConnectTurn();  // may leave (a failed connect) or close others
  }
}

}  // namespace evrdma::detail
