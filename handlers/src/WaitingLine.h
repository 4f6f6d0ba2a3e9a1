// WaitingLine: a Listener answers at most ListenerOptions::acceptsPerTurn connect requests per loop
// turn; the requests past it wait here, oldest first, with the turn's count and the zero-delay
// timer that starts the next turn's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>

#include "CmEvent.h"
#include "evrdma/Watch.h"

namespace evrdma::detail {

class WaitingLine {
 public:
  // `perTurn` 0: no limit. `onNextTurn` runs at the start of a turn the line was armed for.
  WaitingLine(Reactor& reactor, uint32_t perTurn, std::function<void()> onNextTurn)
      : reactor_(reactor), perTurn_(perTurn), onNextTurn_(std::move(onNextTurn)) {}

  // Another request may be answered in this turn.
  bool mayAnswer() const noexcept { return perTurn_ == 0 || answered_ < perTurn_; }
  // Counts one answered in this turn (the count starts over on the next); returns the count.
  uint32_t countAnswer() noexcept;
  void armNextTurn() noexcept;

  bool empty() const noexcept { return line_.empty(); }
  size_t size() const noexcept { return line_.size(); }
  void push(const CmEvent& event) { line_.push_back(event); }
  bool popFront(CmEvent& out) noexcept;
  // Takes out the request of `id` (its client gave up). False if none waits.
  bool take(rdma_cm_id* id) noexcept;
  // The Reactor or the device is going: every waiting id destroyed, unanswered, and no next turn.
  void destroyIds() noexcept;
  void stop() noexcept { timer_.reset(); }

 private:
  Reactor& reactor_;
  const uint32_t perTurn_;
  std::function<void()> onNextTurn_;
  uint32_t answered_ = 0;
  std::unique_ptr<Timer> timer_;
  std::deque<CmEvent> line_;
};

}  // namespace evrdma::detail
