// WaitingLine: the connect requests a Listener could not answer in their turn (past
// ListenerOptions::acceptsPerTurn, see TurnPace), oldest first.
#pragma once

#include <cstddef>
#include <deque>

#include "CmEvent.h"

namespace evrdma::detail {

class WaitingLine {
 public:
  bool empty() const noexcept { return line_.empty(); }
  size_t size() const noexcept { return line_.size(); }
  void push(const CmEvent& event) { line_.push_back(event); }
  bool popFront(CmEvent& out) noexcept;
  // Takes out the request of `id` (its client gave up). False if none waits.
  bool take(rdma_cm_id* id) noexcept;
  // The Reactor or the device is going: every waiting id destroyed, unanswered.
  void destroyIds() noexcept;

 private:
  std::deque<CmEvent> line_;
};

}  // namespace evrdma::detail
